"""The request metrics (storage/wire/metrics.py): counted per request in plain numbers and turned
into Prometheus families at scrape time, they must read exactly as prometheus_client's Counter
and Histogram children fed per request did -- the same names, labels, buckets, values and
`_created` series, in the same order.  PerRequestChildren below is that earlier way, kept as the
reference; a known mix of answers and failures goes to both and the scrapes are compared byte for
byte (a count, a bucket, a sum or an error series off fails)."""
from __future__ import annotations

import asyncio
import random
import threading
import time

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from storage.core.errors import Errors
from storage.replication.messages import error_name
from storage.wire import codec, metrics
from storage.wire.produce_codec import ROW_KEYS

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18


class PerRequestChildren:
    """The request metrics as ServerMetrics kept them until session 39: prometheus_client
    children, one requests counter and one latency histogram per API, an errors counter per API
    and error name, fed on every answer."""

    def __init__(self):
        r = self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("kafka_network_requestmetrics_requests", "Requests answered (Kafka's RequestsPerSec)",
                                ["request"], registry=r)
        self.latency = Histogram("kafka_network_requestmetrics_totaltime_seconds",
                                 "Time from a parsed request to its answer (Kafka's TotalTimeMs)", ["request"],
                                 buckets=metrics.LATENCY_BUCKETS_SECONDS, registry=r)
        self.errors = Counter("kafka_network_requestmetrics_errors", "Error codes in answers (Kafka's ErrorsPerSec)",
                              ["request", "error"], registry=r)

    def _count(self, key: int, elapsed: float, codes: list) -> None:
        name = codec.api_name(key)
        self.requests.labels(name).inc()
        self.latency.labels(name).observe(elapsed)
        for code in codes:
            self.errors.labels(name, error_name(code)).inc()

    def answered(self, key: int, elapsed: float, body) -> None:
        self._count(key, elapsed, metrics.error_codes(body, []) if body is not None else [])

    def failed(self, key: int, elapsed: float, exc: BaseException) -> None:
        self._count(key, elapsed, [int(getattr(exc, "error_code", Errors.UNKNOWN_SERVER_ERROR))])


class _NoState:
    loop = None

    def collect(self):
        return []


class _Refused(Exception):
    error_code = Errors.NOT_CONTROLLER


def produce_body(*topics, **extra) -> dict:
    """A Produce answer as ClientApis._produce_rows builds it: topics of (name, [(index, code)])."""
    return {"responses": [{"name": name, "partition_responses": [
        {"index": index, "error_code": code, "base_offset": 7 if not code else -1, "log_append_time": -1,
         "log_start_offset": 0, "record_errors": [], "error_message": None} for index, code in rows]}
        for name, rows in topics], **extra}


def _record_errors() -> dict:
    body = produce_body(("t", [(0, Errors.INVALID_RECORD)]))
    body["responses"][0]["partition_responses"][0]["record_errors"] = [
        {"batch_index": 2, "batch_index_error_message": "bad"}]
    return body


# (answered or failed, API key, latency in seconds, body or exception): every bucket's bounds
# and both sides of some, a request past the last bound, every error walk and both failures.
BOUNDS = metrics.LATENCY_BUCKETS_SECONDS
MIX = [
    ("answered", PRODUCE, 0.0, produce_body(("t", [(0, 0)]))),
    ("answered", PRODUCE, 0.0005, None),                                        # acks=0, or the fast path
    ("answered", PRODUCE, 0.0005000001, produce_body(("t", [(0, 0), (1, Errors.NOT_LEADER_OR_FOLLOWER)]),
                                                     ("u", [(0, Errors.UNKNOWN_TOPIC_OR_PARTITION)]))),
    ("answered", PRODUCE, 0.02, _record_errors()),
    ("answered", PRODUCE, 0.3, produce_body(("t", [(3, Errors.NOT_LEADER_OR_FOLLOWER)]), throttle_time_ms=0)),
    ("answered", METADATA, 0.001, {"brokers": [{"node_id": 1}], "topics": [
        {"error_code": Errors.UNKNOWN_TOPIC_OR_PARTITION, "name": "x", "partitions": []},
        {"error_code": 0, "name": "t", "partitions": [{"error_code": Errors.LEADER_NOT_AVAILABLE}]}]}),
    ("answered", FETCH, 0.5, {"error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "error_code": Errors.OFFSET_OUT_OF_RANGE},
                                      {"partition_index": 1, "error_code": 9999}]}]}),  # a code without a name
    ("answered", API_VERSIONS, 31.0, {"error_code": 0, "api_keys": []}),
    ("failed", METADATA, 10.0, _Refused()),
    ("failed", PRODUCE, 0.004, ValueError("a handler's own bug")),
    ("answered", FETCH, 1.0, None),
] + [("answered", PRODUCE, bound, produce_body(("t", [(0, 0)]))) for bound in BOUNDS] \
  + [("answered", FETCH, bound * 1.5, {"error_code": 0, "responses": []}) for bound in BOUNDS]


def _feed(monkeypatch, mix) -> tuple[PerRequestChildren, metrics.ServerMetrics]:
    monkeypatch.setattr(time, "time", lambda: 1_764_000_000.25)     # every _created series
    monkeypatch.setattr(metrics, "perf_counter", lambda: 0.0)      # answered at 0: a latency is -started
    reference, ours = PerRequestChildren(), metrics.ServerMetrics(_NoState())
    for kind, key, latency, what in mix:
        getattr(reference, kind)(key, latency, what)
        getattr(ours, kind)(key, -latency, what)
    return reference, ours


def _request_scrape(ours: metrics.ServerMetrics, generate=generate_latest) -> bytes:
    only = CollectorRegistry(auto_describe=False)
    only.register(metrics.RequestFamilies(ours, None))
    return generate(only)


def test_a_known_mix_scrapes_as_per_request_children_did(monkeypatch):
    reference, ours = _feed(monkeypatch, MIX)
    expected = generate_latest(reference.registry)
    assert _request_scrape(ours) == expected
    assert _request_scrape(ours, generate_openmetrics) == generate_openmetrics(reference.registry)
    # The server's registry serves them first, as before (the process and state families follow).
    assert generate_latest(ours.registry).startswith(expected)
    # Read back: the counts this mix must give, whatever the reference says.
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(expected.decode()) for s in f.samples}
    produces = sum(1 for kind, key, _, _ in MIX if key == PRODUCE)
    assert samples[("kafka_network_requestmetrics_requests_total", (("request", "Produce"),))] == produces
    bucket = "kafka_network_requestmetrics_totaltime_seconds_bucket"
    assert samples[(bucket, (("le", "0.0005"), ("request", "Produce")))] == 3      # 0, 0.0005 and 0.0005 again
    assert samples[(bucket, (("le", "+Inf"), ("request", "ApiVersions")))] == 1
    assert samples[(bucket, (("le", "30.0"), ("request", "ApiVersions")))] == 0
    errors = "kafka_network_requestmetrics_errors_total"
    assert samples[(errors, (("error", "NOT_LEADER_OR_FOLLOWER"), ("request", "Produce")))] == 2
    assert samples[(errors, (("error", "UNKNOWN_SERVER_ERROR"), ("request", "Produce")))] == 1
    assert samples[(errors, (("error", "9999"), ("request", "Fetch")))] == 1
    assert samples[(errors, (("error", "NOT_CONTROLLER"), ("request", "Metadata")))] == 1


def test_many_requests_sum_alike(monkeypatch):
    """Thousands of latencies: the sums are added in the same order, so they are equal to the bit."""
    rng = random.Random(39)
    mix = [("answered", rng.choice((PRODUCE, FETCH)), rng.expovariate(300.0), None) for _ in range(5000)]
    reference, ours = _feed(monkeypatch, mix)
    assert _request_scrape(ours) == generate_latest(reference.registry)


def test_nothing_answered_scrapes_the_empty_families():
    assert _request_scrape(metrics.ServerMetrics(_NoState())) == generate_latest(PerRequestChildren().registry)


_names = st.sampled_from(["t", "u", "__consumer_offsets"])
_codes = st.sampled_from([0, 0, 0, Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION, 9999])
# Every field ProduceResponse.json gives a response (v0-v12), the tagged ones optional.
_rows = st.fixed_dictionaries({"index": st.integers(0, 3), "error_code": _codes, "base_offset": st.integers(-1, 9),
                               "log_append_time_ms": st.integers(-1, 9), "log_start_offset": st.integers(-1, 9),
                               "error_message": st.none() | st.text(max_size=3),
                               "record_errors": st.lists(st.fixed_dictionaries(
                                   {"batch_index": st.integers(0, 3),
                                    "batch_index_error_message": st.none() | st.text(max_size=3)}), max_size=2)},
                              optional={"current_leader": st.fixed_dictionaries(
                                  {"leader_id": st.integers(-1, 2), "leader_epoch": st.integers(-1, 2)})})
_topics = st.fixed_dictionaries({"name": _names, "partition_responses": st.lists(_rows, max_size=3)})
_bodies = st.fixed_dictionaries({"responses": st.lists(_topics, max_size=3)},
                                optional={"throttle_time_ms": st.just(0), "node_endpoints": st.lists(
                                    st.fixed_dictionaries({"node_id": st.integers(0, 2), "host": st.just("h"),
                                                           "port": st.just(9092), "rack": st.none()}), max_size=1)})


@given(_bodies)
def test_the_produce_walk_finds_what_the_whole_walk_finds(body):
    """Produce answers with any of the schema's fields: the same codes in the same order."""
    assert metrics.produce_error_codes(body, []) == metrics.error_codes(body, [])


def test_the_produce_walk_reads_the_rows_the_broker_builds():
    """ClientApis._produce_rows' keys (produce_codec.ROW_KEYS) are schema fields the walk knows."""
    assert set(produce_body(("t", [(0, 0)]))["responses"][0]["partition_responses"][0]) == ROW_KEYS
    body = produce_body(("t", [(0, Errors.NOT_LEADER_OR_FOLLOWER), (1, 0)]), ("u", [(2, Errors.CORRUPT_MESSAGE)]))
    assert metrics.produce_error_codes(body, []) == [Errors.NOT_LEADER_OR_FOLLOWER, Errors.CORRUPT_MESSAGE]


def test_a_scrape_copies_on_the_running_loop():
    """Requests counted on the server's loop thread; a scrape from another thread (the HTTP
    server's) copies the numbers on the loop and sees every answer counted so far."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        class State(_NoState):
            pass
        State.loop = loop
        ours = metrics.ServerMetrics(State())
        done = threading.Event()

        def answer_some():
            for _ in range(100):
                ours.answered(PRODUCE, time.perf_counter(), produce_body(("t", [(0, Errors.NOT_LEADER_OR_FOLLOWER)])))
            done.set()
        loop.call_soon_threadsafe(answer_some)
        assert done.wait(30)
        families = {f.name: f for f in metrics.RequestFamilies(ours, loop).collect()}
        samples = {s.name: s.value for s in families["kafka_network_requestmetrics_totaltime_seconds"].samples
                   if s.labels.get("le") in (None, "+Inf")}
        assert samples["kafka_network_requestmetrics_totaltime_seconds_count"] == 100
        assert samples["kafka_network_requestmetrics_totaltime_seconds_bucket"] == 100
        errors = families["kafka_network_requestmetrics_errors"].samples
        assert [(s.labels["error"], s.value) for s in errors if s.name.endswith("_total")] == \
            [("NOT_LEADER_OR_FOLLOWER", 100.0)]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
