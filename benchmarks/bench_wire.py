"""Kafka clients over the wire (issues 17 and 33): produce and fetch through `python -m storage
serve` against the engine's own append and read and against the loopback socket limit, the
produce latency a client sees, replication, idle partitions and the event loop.  Every row of
issue 33's table; benchmarks/wire_table.py prints them as that table (docs/performance.md).

One broker process (fsync off, like every case here) for the module; each run writes a fresh
topic, so every contender writes into newly allocated page-cache pages.  Two clients: confluent-
kafka (librdkafka under Python: what a Python user runs) and librdkafka's own C load generator,
rdkafka_performance (tools/rdkafka_perf.py builds it; where it cannot be built the C contenders
are left out and extra_info's c_client says why, which the table prints), so that the client is not the limit.  1 KiB values, batch.size 16 KiB,
linger.ms 5, no compression.  Each wire run also keeps the broker's CPU seconds (wirelib.Side.timed).

"wire-produce-paired", alternated in pairs (A B, then B A):
  wire1 / c-wire1  confluent-kafka / rdkafka_performance -P, acks=1, one partition; timed to the
                   last delivery report (the C client by its own clock, first produce to last report)
  wireall          confluent-kafka with acks=all (one broker: the ISR is the leader alone)
  engine           PartitionLog.append_as_leader of the same bytes as prebuilt 16 KiB batches
  loopback         the same bytes written to a loopback TCP socket that another process reads
                   and discards (the limit for anything that moves them over TCP)
Ratios: throughput(wire) / throughput(peer).

"wire-produce8-paired": 8 partitions, 4 producers at once (4 connections: rdkafka_performance
processes, or confluent-kafka producers in threads), wall time to the last delivery, against the
engine appending the same batches round robin into 8 fresh logs.

"wire-fetch-paired": a consumer (assigned, no group) reads the workload from offset 1 (after the
topic's warm-up record) to the end (the C client: its process's wall time, start to exit), with
librdkafka's default max bytes (1 MiB a partition, 50 MiB a response: what a user runs);
against PartitionLog.read of the same log's bytes and the loopback limit.  What the broker itself
can serve, without a client's cost: bench_fetch_floor.py.

"wire-cluster-paired": confluent-kafka with acks=all against a replication-factor-3 topic
(min.insync.replicas 2) on three broker processes and a controller process, against acks=all
on the single broker and against three engine appends of the same batches.

"wire-idle-paired": the same acks=all producer on the same cluster, with a 100-partition RF 3
topic that nobody uses beside the busy one (created before the run, its replicas in sync or 30 s
passed -- extra_info's idle_not_in_full_sync counts the partitions that were not -- then a
second to settle) against none (deleted before the run).  Its pairs are noise-wide on a shared
machine (an A/A control, no idle topic in either: 0.65-1.35 a pair), so it runs paired_rounds pairs
(9; ~11 s a pair), not the paired_rounds / 3 of the other wire rows; BENCH_IDLE_PAIRS=N runs N.
extra_info's cpu_ms_per_mib keeps the median CPU per MiB of the busy partition's leader, its
followers and the controller.

"wire-produce-latency": one record at a time (linger.ms 0, acks=1), produce() to its delivery
report, p50 and p99 -- the round trip a client waits for.

"wire-event-loop-paired": the first broker (the default loop: uvloop, `--event-loop auto`) against
a second on asyncio's loop (`--event-loop asyncio`): produce and fetch with the C client
(confluent-kafka where it is not built), and the latency p50 (the "time" of the latency runs is
their p50).  Every other row runs on the default loop.
"""
from __future__ import annotations

import time

import pytest
from benchlib import Contender, paired, pedantic_paired, percentiles

pytest.importorskip("confluent_kafka", reason="the wire benchmarks need confluent-kafka ([bench] extra)")
pytest.importorskip("kio", reason="the wire front end needs kio")

import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import confluent_kafka as ck  # noqa: E402
from wirelib import (  # noqa: E402
    FLUSH_S,
    PRODUCER,
    CClient,
    Side,
    cpu_seconds,
    latency_samples,
    produce_all,
    produce_many,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.wire_support import Broker, Cluster  # noqa: E402

IDLE_PARTITIONS = 100          # --quick: 10 (the path runs; the figure needs the full run)


@pytest.fixture(scope="module")
def side(tmp_path_factory, sizes):
    s = Side(tmp_path_factory.mktemp("wire"), sizes, Broker)
    yield s
    s.close()


@pytest.fixture(scope="module")
def c_client():
    return CClient()


def _rounds(sizes):
    return max(sizes.paired_rounds // 3, 1)


def test_wire_produce_paired(benchmark, sizes, side, c_client):
    def c_produce():
        topic = side.warm_topic()
        return c_client.produce(side.bootstrap, topic, side.count)["seconds"]

    contenders = [
        Contender("wire1", "confluent-kafka produce, acks=1", "ours", lambda: side.timed(lambda: side.produce("1")),
                  "1 KiB values, batch.size 16 KiB, linger.ms 5"),
        Contender("wireall", "confluent-kafka produce, acks=all", "ours", lambda: side.timed(lambda: side.produce("all"))),
        Contender("engine", "PartitionLog.append_as_leader, 16 KiB batches", "peer", side.engine_append),
        Contender("loopback", "loopback TCP, the same bytes", "limit", side.loopback),
    ]
    pairs = [("wire1", "engine"), ("wire1", "loopback"), ("wireall", "engine")]
    if c_client.binary is not None:
        contenders.append(Contender("c-wire1", "rdkafka_performance -P, acks=1", "ours",
                                    lambda: side.timed(c_produce), "the same values, batch.size, linger.ms"))
        pairs[1:1] = [("c-wire1", "engine"), ("c-wire1", "loopback")]
    result = pedantic_paired(benchmark, "wire-produce-paired", paired, contenders, pairs, _rounds(sizes),
                             warmup=False, amount=side.bytes)
    benchmark.extra_info.update(records=side.count, bytes=side.bytes, c_client=c_client.why or "built", **result)


def test_wire_produce8_paired(benchmark, sizes, side, c_client):
    def run(c):
        topic = side.warm_topic(8, "p8")
        return produce_many(c, side.bootstrap, topic, side.count, 4)

    contenders = [
        Contender("wire8", "confluent-kafka, 4 producers (threads), 8 partitions", "ours",
                  lambda: side.timed(lambda: run(None)), "acks=1; 4 connections"),
        Contender("engine8", "append_as_leader round robin into 8 logs", "peer", lambda: side.engine_append(8)),
    ]
    pairs = [("wire8", "engine8")]
    if c_client.binary is not None:
        contenders.append(Contender("c-wire8", "rdkafka_performance -P x4 processes, 8 partitions", "ours",
                                    lambda: side.timed(lambda: run(c_client)), "acks=1; 4 connections"))
        pairs.insert(0, ("c-wire8", "engine8"))
    result = pedantic_paired(benchmark, "wire-produce8-paired", paired, contenders, pairs, _rounds(sizes),
                             warmup=False, amount=side.bytes)
    benchmark.extra_info.update(records=side.count, bytes=side.bytes, partitions=8, producers=4,
                                c_client=c_client.why or "built", **result)


@pytest.fixture(scope="module")
def full_topic(side):
    """A one-partition topic holding the warm-up record and then the workload."""
    topic = side.warm_topic(keep=True)
    producer = ck.Producer({"bootstrap.servers": side.bootstrap, **PRODUCER})
    produce_all(producer, topic, side.count)
    assert producer.flush(FLUSH_S) == 0
    return topic


def test_wire_fetch_paired(benchmark, sizes, side, c_client, full_topic):
    path = side.tmp / "broker" / "logs" / f"{full_topic}-0"
    contenders = [
        Contender("wire", "confluent-kafka fetch from offset 1", "ours",
                  lambda: side.timed(lambda: side.fetch(full_topic))),
        Contender("engine", "PartitionLog.read + records, the same log", "peer", lambda: side.engine_read(path)),
        Contender("loopback", "loopback TCP, the same bytes", "limit", side.loopback),
    ]
    pairs = [("wire", "engine"), ("wire", "loopback")]
    if c_client.binary is not None:
        contenders.append(Contender("c-wire", "rdkafka_performance -C from offset 1", "ours", lambda: side.timed(
            lambda: c_client.consume(side.bootstrap, full_topic, side.count)["wall"])))
        pairs[1:1] = [("c-wire", "engine"), ("c-wire", "loopback")]
    result = pedantic_paired(benchmark, "wire-fetch-paired", paired, contenders, pairs, _rounds(sizes),
                             warmup=False, amount=side.bytes)
    benchmark.extra_info.update(records=side.count, bytes=side.bytes, c_client=c_client.why or "built", **result)


def test_wire_produce_latency(benchmark, sizes, side):
    topic = side.topic()
    samples: list[int] = []

    def one_by_one():
        samples.extend(latency_samples(side.bootstrap, topic, 200 if sizes.quick else 2_000))
        return len(samples)

    benchmark.group = "wire-produce-latency"
    benchmark.pedantic(one_by_one, rounds=1, iterations=1)
    benchmark.extra_info.update(unit="latency", **{k: v for k, v in percentiles(samples).items()})


# --- the event loop ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def asyncio_broker(tmp_path_factory):
    pytest.importorskip("uvloop", reason="uvloop is not installed: the default loop is asyncio's")
    b = Broker(tmp_path_factory.mktemp("wire-asyncio") / "broker", "--event-loop", "asyncio").start()
    yield b
    b.stop()


def test_wire_event_loop_paired(benchmark, sizes, side, c_client, asyncio_broker, full_topic):
    uv, aio = side, side.on(asyncio_broker)          # the default loop (uvloop) and asyncio's
    uv_topic = full_topic
    producer = ck.Producer({"bootstrap.servers": aio.bootstrap, **PRODUCER})
    aio_topic = aio.warm_topic(keep=True)
    produce_all(producer, aio_topic, side.count)
    assert producer.flush(FLUSH_S) == 0
    c = c_client if c_client.binary is not None else None
    client = "rdkafka_performance" if c else "confluent-kafka"

    def produce(s):
        if c is None:
            return s.timed(lambda: s.produce("1"))
        return s.timed(lambda: c.produce(s.bootstrap, s.warm_topic(), s.count)["seconds"])

    def fetch(s, topic):
        if c is None:
            return s.timed(lambda: s.fetch(topic))
        return s.timed(lambda: c.consume(s.bootstrap, topic, s.count)["wall"])

    def p50(s):
        return percentiles(latency_samples(s.bootstrap, s.topic("lat"), 100 if sizes.quick else 1_000))["p50"]

    contenders = [
        Contender("produce-uvloop", f"{client} produce, broker on uvloop", "ours", lambda: produce(uv)),
        Contender("produce-asyncio", f"{client} produce, broker on asyncio's loop", "peer", lambda: produce(aio)),
        Contender("fetch-uvloop", f"{client} fetch, broker on uvloop", "ours", lambda: fetch(uv, uv_topic)),
        Contender("fetch-asyncio", f"{client} fetch, broker on asyncio's loop", "peer", lambda: fetch(aio, aio_topic)),
        Contender("p50-uvloop", "produce latency p50, broker on uvloop", "ours", lambda: p50(uv)),
        Contender("p50-asyncio", "produce latency p50, broker on asyncio's loop", "peer", lambda: p50(aio)),
    ]
    pairs = [("produce-uvloop", "produce-asyncio"), ("fetch-uvloop", "fetch-asyncio"), ("p50-uvloop", "p50-asyncio")]
    result = pedantic_paired(benchmark, "wire-event-loop-paired", paired, contenders, pairs, _rounds(sizes),
                             warmup=False, unit="seconds")      # latency runs too: times, no MB/s
    benchmark.extra_info.update(records=side.count, bytes=side.bytes, client=client, **result)


# --- replication ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster3(tmp_path_factory):
    # Kafka's session and lag timeouts (the tests' 3 s fence brokers of a machine shared with other work)
    c = Cluster(tmp_path_factory.mktemp("wire-cluster"), controller_args=("--session-timeout-ms", "18000"),
                broker_args=("--replica-lag-time-max-ms", "30000"))
    yield c
    c.kill()


def _produce_rf3(cluster, side, topic: str) -> float:
    cluster.create(topic, 1)
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, **PRODUCER, "acks": "all"})
    producer.produce(topic, b"warm")
    producer.flush(30)
    start = time.perf_counter()
    produce_all(producer, topic, side.count)
    assert producer.flush(FLUSH_S) == 0
    return time.perf_counter() - start


def test_wire_cluster_paired(benchmark, sizes, side, cluster3):
    contenders = [
        Contender("rf3", "confluent-kafka acks=all, 3 brokers, RF 3", "ours",
                  lambda: _produce_rf3(cluster3, side, side.topic("rf3")),
                  "min.insync.replicas 2, 1 KiB values, batch.size 16 KiB"),
        Contender("single", "confluent-kafka acks=all, 1 broker", "peer", lambda: side.produce("all")),
        Contender("engine3", "three engine appends of the same batches", "peer",
                  lambda: side.engine_append() + side.engine_append() + side.engine_append()),
    ]
    result = pedantic_paired(benchmark, "wire-cluster-paired", paired, contenders,
                             [("rf3", "single"), ("rf3", "engine3")], _rounds(sizes), warmup=False, amount=side.bytes)
    benchmark.extra_info.update(records=side.count, bytes=side.bytes, **result)


def test_wire_idle_paired(benchmark, sizes, side, cluster3):
    idle_partitions = 10 if sizes.quick else IDLE_PARTITIONS
    state = {"idle": None, "n": 0, "short": [], "cpu": {"idle100": [], "none": []}}
    pids = {f"b{n}": b.pid for n, b in cluster3.brokers.items()} | {"controller": cluster3.controller.pid}

    def idle(present: bool):
        if present and state["idle"] is None:
            state["n"] += 1
            state["idle"] = f"idle-{state['n']}"
            cluster3.create(state["idle"], idle_partitions)
            state["short"].append(_settle(cluster3, state["idle"], idle_partitions))
        elif not present and state["idle"] is not None:
            admin = cluster3.admin()          # kept alive until the futures resolve
            for f in admin.delete_topics([state["idle"]]).values():
                f.result(30)
            state["idle"] = None
        time.sleep(1.0)           # the brokers settle into the state (follower polls, or none)

    def run(name: str, present: bool) -> float:
        idle(present)
        topic = side.topic("busy")
        before = {k: cpu_seconds(pid) for k, pid in pids.items()}
        seconds = _produce_rf3(cluster3, side, topic)
        spent = {k: cpu_seconds(pid) - before[k] for k, pid in pids.items()}
        leader = f"b{cluster3.partitions(topic)[0].leader}"
        state["cpu"][name].append({"leader": spent.pop(leader), "controller": spent.pop("controller"),
                                   "followers": sum(spent.values())})
        return seconds

    contenders = [
        Contender("idle100", f"acks=all RF 3 beside {idle_partitions} idle RF 3 partitions", "ours",
                  lambda: run("idle100", True)),
        Contender("none", "acks=all RF 3, no other partitions", "peer", lambda: run("none", False)),
    ]
    pairs = int(os.environ.get("BENCH_IDLE_PAIRS", 0)) or sizes.paired_rounds
    try:
        result = pedantic_paired(benchmark, "wire-idle-paired", paired, contenders, [("idle100", "none")],
                                 pairs, warmup=False, amount=side.bytes)
    finally:
        idle(False)
    # The processes' CPU per produced MiB (the run's topic creation and warm-up record included),
    # the median over the runs of each contender: where idle partitions cost, if they do.
    mib = side.bytes / (1 << 20)
    cpu = {name: {role: round(statistics.median(r[role] for r in runs) * 1000 / mib, 1)
                  for role in ("leader", "followers", "controller")} for name, runs in state["cpu"].items() if runs}
    benchmark.extra_info.update(records=side.count, bytes=side.bytes, idle_partitions=idle_partitions,
                                idle_not_in_full_sync=state["short"], pair_count=pairs, cpu_ms_per_mib=cpu, **result)


def _settle(cluster, topic: str, partitions: int, timeout_s: float = 30) -> int:
    """Wait until every partition of `topic` has a leader and all its replicas in sync (or the
    timeout: a loaded machine may leave a few behind); the count of those that are not."""
    deadline, short = time.monotonic() + timeout_s, partitions
    while time.monotonic() < deadline:
        try:
            parts = cluster.partitions(topic)
            short = sum(1 for p in parts.values() if p.leader < 0 or len(p.isrs) < len(p.replicas))
            if parts and not short:
                return 0
        except Exception:           # metadata not there yet: ask again
            pass
        time.sleep(0.3)
    return short
