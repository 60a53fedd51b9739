"""Helpers of the wire benchmarks (bench_wire.py; not a test module): the broker side with its
CPU clock, the confluent-kafka workload, librdkafka's C load generator (tools/rdkafka_perf.py)
and the loopback sink.

Broker CPU: every wire run reads the broker process's utime + stime (/proc/PID/stat) before and
after it, so each run keeps `broker_cpu_s` beside its time; report/wire_table.py turns them into
CPU seconds per MB moved and the share of one core the broker used (1.0: one core is the limit).
The clients' CPU over the same run (`client_cpu_s`) is kept too: the broker's share and theirs
together near 2.0 say the machine's two cores, not the broker, bound the run.
"""
from __future__ import annotations

import importlib.util
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from benchlib import KiB, MiB

import storage

ROOT = Path(__file__).resolve().parents[1]
VALUE = b"v" * KiB
PRODUCER = {"acks": "1", "batch.size": 16 * KiB, "linger.ms": 5, "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20}
CONSUMER_FETCH = {"fetch.max.bytes": 50 * MiB, "max.partition.fetch.bytes": 1 * MiB}     # librdkafka's defaults
SINK = "import socket,sys\ns=socket.socket();s.bind(('127.0.0.1',0));s.listen(1)\n" \
       "print(s.getsockname()[1],flush=True)\nwhile True:\n c,_=s.accept();b=bytearray(1<<20)\n" \
       " while c.recv_into(b):pass\n c.sendall(b'k');c.close()\n"
TICKS = os.sysconf("SC_CLK_TCK")
FLUSH_S = 900           # the longest a run may wait for its last delivery (64 MiB acks=all RF 3 on a loaded machine)


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` so far, in seconds (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def on_bare_server(argv: list[str], run):
    """run(port, pid) against a bare server started as `python ARGV` (a floor bench's server
    script, which prints "ready PORT PID" once it listens); the server is killed after."""
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True)
    try:
        _, port, pid = proc.stdout.readline().split()
        return run(int(port), int(pid))
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()


def records(sizes) -> int:
    """1 KiB records per run: 64 MiB (4 MiB with --quick)."""
    return max((64 * MiB if not sizes.quick else 4 * MiB) // len(VALUE), 100)


def produce_all(producer, topic: str, count: int, on_delivery=None, partitions: int = 0) -> None:
    """`count` values into librdkafka's queue (round robin over `partitions` when given), waiting
    for room when it is full."""
    for i in range(count):
        extra = {"partition": i % partitions} if partitions else {}
        while True:
            try:
                producer.produce(topic, VALUE, on_delivery=on_delivery, **extra)
                break
            except BufferError:
                producer.poll(0.001)


# --- the C client ------------------------------------------------------------------------------

def _perf_tool():
    spec = importlib.util.spec_from_file_location("rdkafka_perf", ROOT / "tools" / "rdkafka_perf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CClient:
    """librdkafka's rdkafka_performance (-P produce, -C consume): `binary` is None and `why`
    says why where it cannot be built.  A produce is timed by its own clock, from its first
    produce (before it connects) to its last delivery report; a consume by the process's wall
    time (start, connect, metadata, every fetch: its own clock starts at the first message, after
    the first fetch has arrived, which would leave out most of a small run)."""

    def __init__(self):
        self.tool = _perf_tool()
        self.binary, self.why = self.tool.find()

    def _run(self, argv: list[str], timeout: float = 300) -> dict:
        start = time.perf_counter()
        done = subprocess.run([str(self.binary), *argv], capture_output=True, text=True, timeout=timeout)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"rdkafka_performance {argv}: exit {done.returncode}: {done.stderr[-800:]}")
        return {**self.tool.parse_summary(done.stdout), "wall": wall}

    def produce(self, bootstrap: str, topic: str, count: int, acks: str = "1", partition: int | None = 0) -> dict:
        where = ["-p", str(partition)] if partition is not None else []
        out = self._run(["-P", "-t", topic, *where, "-b", bootstrap, "-s", str(len(VALUE)), "-c", str(count),
                         "-a", "-1" if acks == "all" else acks, "-X", f"batch.size={PRODUCER['batch.size']}",
                         "-X", f"linger.ms={PRODUCER['linger.ms']}", "-X", "queue.buffering.max.messages=1000000",
                         "-X", "queue.buffering.max.kbytes=1048576"])
        if out["delivered"] != count:
            raise RuntimeError(f"rdkafka_performance delivered {out['delivered']} of {count}")
        return out

    def consume(self, bootstrap: str, topic: str, count: int, offset: int = 1) -> dict:
        out = self._run(["-C", "-t", topic, "-p", "0", "-b", bootstrap, "-o", str(offset), "-c", str(count),
                         "-X", f"fetch.max.bytes={CONSUMER_FETCH['fetch.max.bytes']}",
                         "-X", f"max.partition.fetch.bytes={CONSUMER_FETCH['max.partition.fetch.bytes']}"])
        if out["messages"] != count:
            raise RuntimeError(f"rdkafka_performance consumed {out['messages']} of {count}")
        return out


# --- one broker and its peers ------------------------------------------------------------------

class Side:
    """A `storage serve` broker (fsync off) with the module's workload, its engine and loopback peers."""

    def __init__(self, tmp, sizes, broker_cls, *broker_args: str):
        self.broker = broker_cls(tmp / "broker", *broker_args).start()
        self.bootstrap = self.broker.bootstrap
        self.count = records(sizes)
        self.tmp = tmp
        self.n = 0
        self.sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
        self.sink_port = int(self.sink.stdout.readline())
        self.batches = [storage.build_batch([VALUE] * 15) for _ in range(self.count // 15)]
        self.bytes = self.count * len(VALUE)
        self.data = b"".join(self.batches)
        self.spent: list[str] = []     # topics written by runs before: deleted before the next (reclaim)

    def on(self, broker) -> "Side":
        """The same workload and peers against another broker (topics named apart)."""
        other = Side.__new__(Side)
        other.__dict__.update(self.__dict__, broker=broker, bootstrap=broker.bootstrap, n=1000, spent=[])
        return other

    def topic(self, prefix: str = "bench") -> str:
        self.n += 1
        return f"{prefix}-{self.n}"

    def warm_topic(self, partitions: int = 1, prefix: str = "bench", keep: bool = False) -> str:
        """A new topic with one record in each partition (created by the broker, not timed);
        deleted before the next timed run unless `keep` (a topic later runs read)."""
        import confluent_kafka as ck

        topic = self.topic(prefix)
        if not keep:
            self.spent.append(topic)
        if partitions > 1:
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
                f.result(30)
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, **PRODUCER})
        for p in range(partitions):
            producer.produce(topic, b"warm", partition=p)
        assert producer.flush(30) == 0
        return topic

    def timed(self, run) -> dict:
        """run() -> seconds, with the broker's CPU seconds over the same run beside them, and the
        clients': this process's (confluent-kafka and its librdkafka threads) and its children's
        waited for during the run (rdkafka_performance)."""
        self.reclaim()
        before, client, wall = cpu_seconds(self.broker.pid), client_cpu_seconds(), time.perf_counter()
        seconds = run()
        wall = time.perf_counter() - wall
        return {"seconds": seconds, "broker_cpu_s": cpu_seconds(self.broker.pid) - before,
                "client_cpu_s": client_cpu_seconds() - client, "wall_s": wall}

    def produce(self, acks: str, topic: str | None = None, partitions: int = 0) -> float:
        import confluent_kafka as ck

        topic = topic or self.warm_topic()
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, **PRODUCER, "acks": acks})
        producer.list_topics(topic, timeout=10)
        failed = []
        start = time.perf_counter()
        produce_all(producer, topic, self.count, lambda e, m: e and failed.append(e), partitions)
        assert producer.flush(FLUSH_S) == 0 and not failed, failed[:3]
        return time.perf_counter() - start

    def reclaim(self) -> None:
        """Delete the topics the runs before wrote (outside any run's clocks): each run then
        writes into a page cache of the same size.  On a VM a page the page cache never held
        costs a fault on the host: a run after gigabytes of earlier runs' files paid 70 us for
        a 16 KiB append that costs 12-15 us after their pages were freed (docs/performance.md)."""
        if not self.spent:
            return
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.delete_topics(self.spent, operation_timeout=30).values():
            f.result(60)
        self.spent.clear()

    def engine_append(self, partitions: int = 1) -> float:
        """append_as_leader of the workload's batches, round robin over `partitions` fresh logs."""
        logs = [storage.PartitionLog.open(self.tmp / f"engine-{self.topic()}", storage.LogConfig(fsync=False))
                for _ in range(partitions)]
        try:
            start = time.perf_counter()
            for i, batch in enumerate(self.batches):
                logs[i % partitions].append_as_leader(batch, 0)
            return time.perf_counter() - start
        finally:
            for log in logs:
                log.close()
                shutil.rmtree(log.path, ignore_errors=True)     # its page cache freed, as reclaim's

    def loopback(self) -> float:
        with socket.create_connection(("127.0.0.1", self.sink_port)) as s:
            view = memoryview(self.data)
            start = time.perf_counter()
            for i in range(0, len(view), 1 << 20):
                s.sendall(view[i:i + (1 << 20)])
            s.shutdown(socket.SHUT_WR)
            assert s.recv(1) == b"k"
            return time.perf_counter() - start

    def fetch(self, topic: str) -> float:
        import confluent_kafka as ck

        consumer = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench", "enable.auto.commit": False,
                                **CONSUMER_FETCH})
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
                for batch in storage.iter_batches(log.read(offset, 8 * MiB)):
                    len(batch.records())
                    offset = batch.last_offset + 1
            return time.perf_counter() - start
        finally:
            log.close()

    def close(self):
        self.broker.stop()
        self.sink.kill()
        self.sink.wait(10)


def client_cpu_seconds() -> float:
    """utime + stime of this process and of its children waited for so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def produce_many(c_client: CClient | None, bootstrap: str, topic: str, count: int, producers: int) -> float:
    """`producers` producers at once, each its own connection, `count` records in all over every
    partition of `topic` (librdkafka's partitioner): C processes when `c_client` is given, else
    confluent-kafka producers in threads.  Wall seconds from the start to the last delivery."""
    share = [count // producers + (i < count % producers) for i in range(producers)]
    if c_client is not None:
        start = time.perf_counter()
        procs = [subprocess.Popen([str(c_client.binary), "-P", "-t", topic, "-b", bootstrap, "-s", str(len(VALUE)),
                                   "-c", str(n), "-a", "1", "-X", f"batch.size={PRODUCER['batch.size']}",
                                   "-X", f"linger.ms={PRODUCER['linger.ms']}"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in share]
        outputs = [p.communicate(timeout=300) for p in procs]
        elapsed = time.perf_counter() - start
        for p, (out, err), n in zip(procs, outputs, share):
            if p.returncode != 0 or c_client.tool.parse_summary(out)["delivered"] != n:
                raise RuntimeError(f"rdkafka_performance: exit {p.returncode}: {err[-600:]}")
        return elapsed
    import threading

    import confluent_kafka as ck
    clients = [ck.Producer({"bootstrap.servers": bootstrap, **PRODUCER}) for _ in share]
    for c in clients:
        c.list_topics(topic, timeout=10)
    failed: list = []

    def one(producer, n):
        produce_all(producer, topic, n, lambda e, m: e and failed.append(e))
        if producer.flush(FLUSH_S) != 0:
            failed.append("not flushed")

    threads = [threading.Thread(target=one, args=(c, n)) for c, n in zip(clients, share)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    elapsed = time.perf_counter() - start
    assert not failed, failed[:3]
    return elapsed


def latency_samples(bootstrap: str, topic: str, count: int) -> list[int]:
    """One record at a time (linger.ms 0, acks=1): ns from produce() to its delivery report."""
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, **PRODUCER, "linger.ms": 0})
    producer.produce(topic, b"warm")
    producer.flush(30)
    samples = []
    for _ in range(count):
        done: list = []
        start = time.perf_counter_ns()
        producer.produce(topic, VALUE, on_delivery=lambda e, m, done=done: done.append(e))
        while not done:
            producer.poll(0.0005)
        samples.append(time.perf_counter_ns() - start)
    return samples
