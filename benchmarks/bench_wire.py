"""Kafka clients over the wire (issue 17): produce and fetch through `python -m storage serve`
against the engine's own append and read and against the loopback socket limit, and the
produce latency a client sees.

One broker process (fsync off, like every case here) for the module; each run writes a fresh
topic, so every contender writes into newly allocated page-cache pages.  The client is
confluent-kafka (librdkafka, the fastest Kafka client a Python user has): 1 KiB values,
batch.size 16 KiB, linger.ms 5, no compression.

"wire-produce-paired", alternated in pairs (A B, then B A):
  wire acks=1    librdkafka produces the workload; timed to the last delivery report
  wire acks=all  the same with acks=all (one broker: the ISR is the leader alone)
  engine         PartitionLog.append_as_leader of the same bytes as prebuilt 16 KiB batches
  loopback       the same bytes written to a loopback TCP socket that another process reads
                 and discards (the limit for anything that moves them over TCP)
Ratios: throughput(wire) / throughput(peer).

"wire-fetch-paired": a consumer (assigned, no group) reads the workload from offset 0, timed
to the last record; against PartitionLog.read of the same log's bytes and the loopback limit.

"wire-cluster-paired": the same producer with acks=all against a replication-factor-3 topic
(min.insync.replicas 2) on three broker processes and a controller process, against acks=all
on the single broker and against three engine appends of the same batches (what three
replicas must write at least).

"wire-produce-latency": one record at a time (linger.ms 0, acks=1), produce() to its delivery
report, p50 and p99 -- the round trip a client waits for.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from benchlib import Contender, KiB, MiB, paired, pedantic_paired, percentiles

import storage

ck = pytest.importorskip("confluent_kafka", reason="the wire benchmarks need confluent-kafka ([bench] extra)")
pytest.importorskip("kio", reason="the wire front end needs kio")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.wire_support import Broker, Cluster  # noqa: E402

VALUE = b"v" * KiB
PRODUCER = {"acks": "1", "batch.size": 16 * KiB, "linger.ms": 5, "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20}
_SINK = "import socket,sys\ns=socket.socket();s.bind(('127.0.0.1',0));s.listen(1)\n" \
        "print(s.getsockname()[1],flush=True)\nwhile True:\n c,_=s.accept();b=bytearray(1<<20)\n" \
        " while c.recv_into(b):pass\n c.sendall(b'k');c.close()\n"


def _produce_all(producer, topic: str, count: int, on_delivery=None) -> None:
    """`count` values into librdkafka's queue, waiting for room when it is full."""
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)


def _records(sizes) -> int:
    return max((64 * MiB if not sizes.quick else 4 * MiB) // len(VALUE), 100)


class Side:
    def __init__(self, tmp, sizes):
        self.broker = Broker(tmp / "broker").start()
        self.bootstrap = self.broker.bootstrap
        self.count = _records(sizes)
        self.tmp = tmp
        self.n = 0
        self.sink = subprocess.Popen([sys.executable, "-c", _SINK], stdout=subprocess.PIPE, text=True)
        self.sink_port = int(self.sink.stdout.readline())
        self.batches = [storage.build_batch([VALUE] * 15) for _ in range(self.count // 15)]
        self.bytes = self.count * len(VALUE)
        self.last_topic = None

    def topic(self) -> str:
        self.n += 1
        return f"bench-{self.n}"

    def produce(self, acks: str) -> float:
        topic = self.topic()
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, **PRODUCER, "acks": acks})
        producer.produce(topic, b"warm")          # creates the topic (not timed)
        producer.flush(30)
        failed = []
        start = time.perf_counter()
        _produce_all(producer, topic, self.count, lambda e, m: e and failed.append(e))
        assert producer.flush(120) == 0 and not failed, failed[:3]
        elapsed = time.perf_counter() - start
        self.last_topic = topic
        return elapsed

    def engine_append(self) -> float:
        path = self.tmp / f"engine-{self.topic()}"
        log = storage.PartitionLog.open(path, storage.LogConfig(fsync=False))
        try:
            start = time.perf_counter()
            for batch in self.batches:
                log.append_as_leader(batch, 0)
            return time.perf_counter() - start
        finally:
            log.close()

    def loopback(self, data: bytes) -> float:
        with socket.create_connection(("127.0.0.1", self.sink_port)) as s:
            view = memoryview(data)
            start = time.perf_counter()
            for i in range(0, len(view), 1 << 20):
                s.sendall(view[i:i + (1 << 20)])
            s.shutdown(socket.SHUT_WR)
            assert s.recv(1) == b"k"
            return time.perf_counter() - start

    def fetch(self, topic: str) -> float:
        consumer = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench", "enable.auto.commit": False,
                                "fetch.max.bytes": 50 * MiB, "max.partition.fetch.bytes": 8 * MiB})
        consumer.assign([ck.TopicPartition(topic, 0, 1)])
        got, start = 0, time.perf_counter()
        while got < self.count:
            for msg in consumer.consume(min(10_000, self.count - got), 5.0):
                if not msg.error():
                    got += 1
        elapsed = time.perf_counter() - start
        consumer.close()
        return elapsed

    def engine_read(self, path) -> float:
        log = storage.PartitionLog.open(path, storage.LogConfig(fsync=False))
        try:
            offset, start = 0, time.perf_counter()
            while offset < log.log_end_offset:
                chunk = log.read(offset, 8 * MiB)
                count = 0
                for batch in storage.iter_batches(chunk):
                    count += len(batch.records())
                    offset = batch.last_offset + 1
            return time.perf_counter() - start
        finally:
            log.close()

    def close(self):
        self.broker.stop()
        self.sink.kill()
        self.sink.wait(10)


@pytest.fixture(scope="module")
def side(tmp_path_factory, sizes):
    s = Side(tmp_path_factory.mktemp("wire"), sizes)
    yield s
    s.close()


def test_wire_produce_paired(benchmark, sizes, side):
    data = b"".join(side.batches)
    contenders = [
        Contender("wire1", "confluent-kafka produce, acks=1", "ours", lambda: side.produce("1"),
                  "1 KiB values, batch.size 16 KiB, linger.ms 5"),
        Contender("wireall", "confluent-kafka produce, acks=all", "ours", lambda: side.produce("all")),
        Contender("engine", "PartitionLog.append_as_leader, 16 KiB batches", "peer", side.engine_append),
        Contender("loopback", "loopback TCP, the same bytes", "limit", lambda: side.loopback(data)),
    ]
    pairs = [("wire1", "engine"), ("wire1", "loopback"), ("wireall", "engine")]
    result = pedantic_paired(benchmark, "wire-produce-paired", paired, contenders, pairs,
                             max(sizes.paired_rounds // 3, 1), warmup=False, amount=side.bytes)
    benchmark.extra_info.update(records=side.count, bytes=side.bytes, **result)


def test_wire_fetch_paired(benchmark, sizes, side):
    topic = side.topic()
    producer = ck.Producer({"bootstrap.servers": side.bootstrap, **PRODUCER})
    producer.produce(topic, b"warm")
    _produce_all(producer, topic, side.count)
    assert producer.flush(120) == 0
    path = side.tmp / "broker" / "logs" / f"{topic}-0"
    data = b"".join(side.batches)
    contenders = [
        Contender("wire", "confluent-kafka fetch from offset 0", "ours", lambda: side.fetch(topic)),
        Contender("engine", "PartitionLog.read + records, the same log", "peer", lambda: side.engine_read(path)),
        Contender("loopback", "loopback TCP, the same bytes", "limit", lambda: side.loopback(data)),
    ]
    result = pedantic_paired(benchmark, "wire-fetch-paired", paired, contenders,
                             [("wire", "engine"), ("wire", "loopback")], max(sizes.paired_rounds // 3, 1),
                             warmup=False, amount=side.bytes)
    benchmark.extra_info.update(records=side.count, bytes=side.bytes, **result)


def test_wire_produce_latency(benchmark, sizes, side):
    topic = side.topic()
    producer = ck.Producer({"bootstrap.servers": side.bootstrap, **PRODUCER, "linger.ms": 0})
    producer.produce(topic, b"warm")
    producer.flush(30)
    samples = []

    def one_by_one():
        for _ in range(200 if sizes.quick else 2_000):
            done = []
            start = time.perf_counter_ns()
            producer.produce(topic, VALUE, on_delivery=lambda e, m, done=done: done.append(e))
            while not done:
                producer.poll(0.0005)
            samples.append(time.perf_counter_ns() - start)
        return len(samples)

    benchmark.group = "wire-produce-latency"
    benchmark.pedantic(one_by_one, rounds=1, iterations=1)
    benchmark.extra_info.update(unit="latency", **{k: v for k, v in percentiles(samples).items()})


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("wire-cluster"))
    yield c
    c.kill()


def test_wire_cluster_paired(benchmark, sizes, side, cluster3):
    counter = [0]

    def produce_rf3() -> float:
        counter[0] += 1
        topic = f"rf3-{counter[0]}"
        cluster3.create(topic, 1)
        producer = ck.Producer({"bootstrap.servers": cluster3.bootstrap, **PRODUCER, "acks": "all"})
        producer.produce(topic, b"warm")
        producer.flush(30)
        start = time.perf_counter()
        _produce_all(producer, topic, side.count)
        assert producer.flush(120) == 0
        return time.perf_counter() - start

    def engine_x3() -> float:
        return side.engine_append() + side.engine_append() + side.engine_append()

    contenders = [
        Contender("rf3", "confluent-kafka acks=all, 3 brokers, RF 3", "ours", produce_rf3,
                  "min.insync.replicas 2, 1 KiB values, batch.size 16 KiB"),
        Contender("single", "confluent-kafka acks=all, 1 broker", "peer", lambda: side.produce("all")),
        Contender("engine3", "three engine appends of the same batches", "peer", engine_x3),
    ]
    result = pedantic_paired(benchmark, "wire-cluster-paired", paired, contenders,
                             [("rf3", "single"), ("rf3", "engine3")], max(sizes.paired_rounds // 3, 1),
                             warmup=False, amount=side.bytes)
    benchmark.extra_info.update(records=side.count, bytes=side.bytes, **result)
