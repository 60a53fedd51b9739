"""`--metrics-listen HOST:PORT`: a broker's or the controller's metrics in Prometheus' text
format, through prometheus_client (docs/guide-operations.md lists them with Kafka's JMX names).

Each process has its own registry (never the library's global one: tests run several servers
in one process).  Requests are counted as they are answered (FrameServer calls `answered` or
`failed` from its dispatch), in plain numbers per API that RequestFamilies turns into
Prometheus families at scrape time (a request costs a few list updates, not prometheus_client's
locked children); everything else is read at scrape time by a Collector from the
state the broker already keeps -- the replica manager's partitions and topic counters, the log
dir's engine counters (storage/log/metrics.py), the group coordinator's committed offsets, the
connection gate, the controller's partitions and brokers.  That state belongs to the event
loop, so a scrape (on the HTTP server's thread) reads it on the loop, in one callback: a
consistent snapshot, never a dict changing under a reader.

Invariants:
  - the names follow Kafka's JMX names where Kafka has one (kafka.server:type=BrokerTopicMetrics,
    name=BytesInPerSec -> kafka_server_brokertopicmetrics_bytesin_total), the engine's own
    counters are storage_log_*;
  - errors count the error codes a response carries (every `error_code` field, Kafka's
    AbstractResponse.errorCounts), NONE left out; a handler that raised counts its own code.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from bisect import bisect_left
from time import perf_counter

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from ..core.clock import wall_seconds
from ..core.errors import Errors
from ..log.metrics import FSYNC_BUCKETS_SECONDS
from ..replication.messages import NO_LEADER, error_name
from . import codec
from .produce_codec import PRODUCE_KEY

# Request latency buckets (seconds): a cached metadata answer to a produce waiting for acks=all.
LATENCY_BUCKETS_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SCRAPE_TIMEOUT_S = 5.0



def error_codes(body, out: list) -> list:
    """Every non-zero `error_code` in a response dict (nested lists and dicts), as Kafka's
    errorCounts walks a response."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "error_code":
                if value:
                    out.append(int(value))
            elif isinstance(value, (dict, list)):
                error_codes(value, out)
    elif isinstance(body, list):
        for item in body:
            if isinstance(item, (dict, list)):
                error_codes(item, out)
    return out


def produce_error_codes(body: dict, out: list) -> list:
    """error_codes of a Produce answer, read where its schema keeps them (ProduceResponse.json:
    a partition's ErrorCode is its only error field -- record errors, the current leader and the
    node endpoints carry none), as Kafka's ProduceResponse.errorCounts reads them; the same codes,
    in the same order, as error_codes' walk of the whole answer finds, at a fifth of its cost."""
    for topic in body["responses"]:
        for row in topic["partition_responses"]:
            if row["error_code"]:
                out.append(int(row["error_code"]))
    return out


_ERROR_WALKS = {PRODUCE_KEY: produce_error_codes}     # API key -> its answers' error walk (else error_codes)
# A request's latency is counted in the first bucket whose bound it does not exceed (Prometheus'
# `le`, prometheus_client's Histogram.observe); the last bound is +Inf.
_BOUNDS = (*LATENCY_BUCKETS_SECONDS, float("inf"))
_SUM = len(_BOUNDS)     # an API's counts: one per bucket, then the latency sum


class ServerMetrics:
    """The registry of one server process, the request metrics its dispatch feeds, and its
    scrape-time collector (a `BrokerState` or `ControllerState`).

    A request costs its dispatch a few list and dict updates, no more: per API key one list of
    plain numbers (a count per latency bucket, the latency sum) and, when an answer carries error
    codes, a count per (API key, code).  The Prometheus families are built from them at scrape
    time (RequestFamilies), exactly as prometheus_client's Counter and Histogram children fed per
    request would show them: the same names, labels, buckets, values and `_created` series, in
    the order the series first appeared."""

    def __init__(self, state):
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.counts: dict[int, list] = {}       # API key -> [count per bucket ..., latency sum]
        self.errors: dict[tuple[int, int], int] = {}   # (API key, error code) -> answers that carried it
        self.created: dict = {}      # an API key or (key, code) -> when its series appeared (wall_seconds)
        r.register(RequestFamilies(self, state.loop))
        ProcessCollector(registry=r)      # process_open_fds, memory, CPU
        r.register(state)
        self.httpd = None
        self.port = 0

    def _first(self, key: int) -> list:
        """The counts of API `key`, made at its first request."""
        self.created[key] = wall_seconds()
        counts = self.counts[key] = [0] * _SUM + [0.0]
        return counts

    def answered(self, key: int, started: float, body) -> None:
        elapsed = perf_counter() - started
        counts = self.counts.get(key) or self._first(key)
        counts[bisect_left(_BOUNDS, elapsed)] += 1
        counts[_SUM] += elapsed
        if body is not None:
            for code in _ERROR_WALKS.get(key, error_codes)(body, []):
                self._error(key, code)

    def failed(self, key: int, started: float, exc: BaseException) -> None:
        elapsed = perf_counter() - started
        counts = self.counts.get(key) or self._first(key)
        counts[bisect_left(_BOUNDS, elapsed)] += 1
        counts[_SUM] += elapsed
        self._error(key, int(getattr(exc, "error_code", Errors.UNKNOWN_SERVER_ERROR)))

    def _error(self, key: int, code: int) -> None:
        labels = (key, code)
        if labels in self.errors:
            self.errors[labels] += 1
        else:
            self.created[labels] = wall_seconds()
            self.errors[labels] = 1

    def listen(self, host: str, port: int) -> int:
        """Serve the registry over HTTP (a daemon thread); returns the port (0: any free one)."""
        self.httpd, _thread = start_http_server(port, addr=host, registry=self.registry)
        return self.httpd.server_port

    def close(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None


class RequestFamilies:
    """A Collector of the request metrics: requests, latency histogram and errors per API, built
    from a copy of ServerMetrics' numbers.  The copy is taken on the server's event loop, where
    the dispatch counts, so a bucket, the count and the sum always agree; a loop that is not
    running counts nothing, and its numbers are copied where the scrape runs."""

    def __init__(self, metrics: ServerMetrics, loop: asyncio.AbstractEventLoop | None):
        self.metrics = metrics
        self.loop = loop

    def _copy(self) -> tuple[dict, dict, dict]:
        m = self.metrics

        def copy() -> tuple[dict, dict, dict]:
            return {key: list(counts) for key, counts in m.counts.items()}, dict(m.errors), dict(m.created)
        loop = self.loop
        if loop is None or not loop.is_running() or _running_loop() is loop:
            return copy()
        done: concurrent.futures.Future = concurrent.futures.Future()
        try:
            loop.call_soon_threadsafe(lambda: done.set_result(copy()))
            return done.result(SCRAPE_TIMEOUT_S)
        except (RuntimeError, TimeoutError):     # the loop closed meanwhile: it counts no more
            return copy()

    def collect(self) -> list:
        counts, errors, created = self._copy()
        with_created = prometheus_metrics._use_created     # prometheus_client.disable_created_metrics()
        requests = Metric("kafka_network_requestmetrics_requests", "Requests answered (Kafka's RequestsPerSec)",
                          "counter")
        latency = Metric("kafka_network_requestmetrics_totaltime_seconds",
                         "Time from a parsed request to its answer (Kafka's TotalTimeMs)", "histogram")
        failures = Metric("kafka_network_requestmetrics_errors", "Error codes in answers (Kafka's ErrorsPerSec)",
                          "counter")
        for key, numbers in counts.items():
            labels = {"request": codec.api_name(key)}
            total = 0.0
            for bound, count in zip(_BOUNDS, numbers):
                total += count
                latency.add_sample(latency.name + "_bucket", {**labels, "le": floatToGoString(bound)}, total)
            latency.add_sample(latency.name + "_count", labels, total)
            latency.add_sample(latency.name + "_sum", labels, numbers[_SUM])
            requests.add_sample(requests.name + "_total", labels, total)
            if with_created:
                latency.add_sample(latency.name + "_created", labels, created[key])
                requests.add_sample(requests.name + "_created", labels, created[key])
        for (key, code), count in errors.items():
            labels = {"request": codec.api_name(key), "error": error_name(code)}
            failures.add_sample(failures.name + "_total", labels, float(count))
            if with_created:
                failures.add_sample(failures.name + "_created", labels, created[(key, code)])
        return [requests, latency, failures]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _OnLoop:
    """A Collector whose `families()` runs on the server's event loop."""

    def __init__(self, server, loop: asyncio.AbstractEventLoop):
        self.server = server
        self.loop = loop

    def collect(self):
        async def on_loop():
            return self.families()
        try:
            return asyncio.run_coroutine_threadsafe(on_loop(), self.loop).result(SCRAPE_TIMEOUT_S)
        except (RuntimeError, TimeoutError):     # the loop is closing: the request metrics only
            return []

    def families(self) -> list:
        raise NotImplementedError


def _counter(name: str, doc: str, labels=(), rows=()) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=list(labels))
    for values, value in rows:
        family.add_metric(list(values), value)
    return family


def _gauge(name: str, doc: str, labels=(), rows=()) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for values, value in rows:
        family.add_metric(list(values), value)
    return family


class BrokerState(_OnLoop):
    """What a broker (BrokerServer) holds, read at scrape time."""

    def families(self) -> list:
        server = self.server
        node = server.node
        manager, logdir = node.manager, node.logdir
        out = [_gauge("kafka_server_socketservermetrics_connection_count", "Open client connections",
                      rows=[((), server.gate.count)])]
        if manager is None or logdir is None:      # still starting
            return out
        # A deleted topic's counters go with it (Kafka's removeMetrics at deletion).
        stats = sorted((t, s) for t, s in manager.topic_stats.items() if node.topic_id(t))
        out += [
            _counter("kafka_server_brokertopicmetrics_bytesin", "Client bytes appended as leader, per topic",
                     ["topic"], [((t, ), s[0]) for t, s in stats]),
            _counter("kafka_server_brokertopicmetrics_messagesin", "Client records appended as leader, per topic",
                     ["topic"], [((t, ), s[1]) for t, s in stats]),
            _counter("kafka_server_brokertopicmetrics_bytesout", "Record bytes answered to fetches, per topic",
                     ["topic"], [((t, ), s[2]) for t, s in stats]),
            _counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks this leader committed",
                     rows=[((), manager.isr_shrinks)]),
            _counter("kafka_server_replicamanager_isrexpands", "ISR expands this leader committed",
                     rows=[((), manager.isr_expands)]),
        ]
        partitions = list(manager.partitions.values())
        led = [p for p in partitions if p.leader == node.node_id]
        out += [
            _gauge("kafka_server_replicamanager_partitioncount", "Partitions hosted", rows=[((), len(partitions))]),
            _gauge("kafka_server_replicamanager_leadercount", "Partitions led", rows=[((), len(led))]),
            _gauge("kafka_server_replicamanager_underreplicatedpartitions",
                   "Partitions led whose ISR is smaller than their replicas", rows=[((), sum(
                       1 for p in led if len(p.isr) < len(p.replicas)))]),
            _gauge("kafka_log_log_size", "Bytes of the partition's segments", ["topic", "partition"],
                   [((p.topic, str(p.partition)), p.log.size_bytes) for p in partitions]),
            _gauge("kafka_log_log_logendoffset", "Log end offset", ["topic", "partition"],
                   [((p.topic, str(p.partition)), p.log.log_end_offset) for p in partitions]),
            _gauge("kafka_log_log_numlogsegments", "Segments of the partition", ["topic", "partition"],
                   [((p.topic, str(p.partition)), len(p.log.segments)) for p in partitions]),
        ]
        out += _group_lag(server.groups, manager)
        return out + engine_families(logdir)


def _group_lag(groups, manager) -> list:
    """Committed offset and lag (high watermark - committed) per group and partition this broker
    hosts (the lag kafka-consumer-groups.sh prints)."""
    rows_offset, rows_lag = [], []
    for group_id, group in sorted((groups.groups if groups is not None else {}).items()):
        for (topic, partition), value in sorted(group.offsets.items()):
            p = manager.partitions.get((topic, partition))
            if p is None:
                continue
            labels = (group_id, topic, str(partition))
            rows_offset.append((labels, value[0]))
            rows_lag.append((labels, max(p.log.high_watermark - value[0], 0)))
    names = ["group", "topic", "partition"]
    return [_gauge("kafka_consumergroup_current_offset", "Committed offset", names, rows_offset),
            _gauge("kafka_consumergroup_lag", "High watermark minus the committed offset", names, rows_lag)]


def engine_families(logdir) -> list:
    """The log dir's engine counters (LogDir.metrics()) as Prometheus families."""
    d = logdir.metrics()
    m = d.logs
    # The engine's buckets are cumulative already, as Prometheus' are.
    buckets = [(repr(bound), count) for bound, count in zip(FSYNC_BUCKETS_SECONDS, m.fsync_buckets)]
    buckets.append(("+Inf", m.fsyncs))
    flush = HistogramMetricFamily("kafka_log_logflushstats_logflush_seconds", "Segment flushes (fsync) and their time",
                                  buckets=buckets, sum_value=m.fsync_seconds_total)
    counters = [("appends", m.appends, "Appends that wrote (leader, follower, coordinator)"),
                ("append_batches", m.append_batches, "Batches appended"),
                ("append_records", m.append_records, "Records appended"),
                ("append_bytes", m.append_bytes, "Bytes appended"),
                ("rolls", m.rolls, "Segment rolls"),
                ("truncations", m.truncations, "Truncations that cut the log"),
                ("truncated_bytes", m.truncated_bytes, "Bytes truncations cut"),
                ("recoveries", m.recoveries, "Segments recovered at an open"),
                ("recovered_bytes_cut", m.recovered_bytes_cut, "Bytes recoveries cut"),
                ("cleaner_rounds", m.cleaner_rounds, "Log cleaner rounds")]
    out = [flush, _gauge("storage_log_fsync_seconds_max", "The longest segment flush", rows=[((), m.fsync_seconds_max)])]
    out += [_counter(f"storage_log_{name}", doc, rows=[((), value)]) for name, value, doc in counters]
    out += [
        _gauge("kafka_log_logmanager_offlinelogdirectorycount", "Offline log dirs", rows=[((), int(d.offline))]),
        _gauge("storage_log_open_segments", "Segments holding file descriptors (3 each)", rows=[((), d.open_segments)]),
        _gauge("storage_log_segments", "Segments in the log dir", rows=[((), d.segments)]),
        _gauge("storage_log_size_bytes", "Bytes of the log dir's segments", rows=[((), d.size_bytes)]),
    ]
    return out


class ControllerState(_OnLoop):
    """What the controller (ControllerServer) holds, read at scrape time."""

    def families(self) -> list:
        server = self.server
        c = server.controller
        states = list(c.partitions.values())
        brokers = list(c.brokers.values())
        fenced = sum(1 for r in brokers if r.fenced)
        return [
            _gauge("kafka_controller_kafkacontroller_activecontrollercount", "1: this is the active controller",
                   rows=[((), 1)]),
            _gauge("kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a leader",
                   rows=[((), sum(1 for s in states if s.leader == NO_LEADER))]),
            _gauge("kafka_controller_kafkacontroller_globalpartitioncount", "Partitions", rows=[((), len(states))]),
            _gauge("kafka_controller_kafkacontroller_globaltopiccount", "Topics", rows=[((), len(c.topics))]),
            _gauge("kafka_controller_kafkacontroller_fencedbrokercount", "Registered brokers fenced", rows=[((), fenced)]),
            _gauge("kafka_controller_kafkacontroller_activebrokercount", "Registered brokers not fenced",
                   rows=[((), len(brokers) - fenced)]),
            _counter("kafka_controller_controllerstats_leaderelections", "Leaders elected since this process started",
                     rows=[((), c.leader_elections)]),
            _counter("kafka_controller_controllerstats_uncleanleaderelections", "Unclean leader elections",
                     rows=[((), len(c.unclean_elections))]),
            _gauge("kafka_server_socketservermetrics_connection_count", "Open connections",
                   rows=[((), server.gate.count)]),
        ] + engine_families(server.logdir)


def serve_metrics(server, host: str, port: int) -> ServerMetrics:
    """Start `--metrics-listen` for `server` (a BrokerServer or a ControllerServer, on the running
    loop); its dispatch feeds the request metrics from now on."""
    from .controller_server import ControllerServer
    state = (ControllerState if isinstance(server, ControllerServer) else BrokerState)(
        server, asyncio.get_running_loop())
    metrics = ServerMetrics(state)
    metrics.port = metrics.listen(host, port)
    server.observer = metrics
    return metrics
