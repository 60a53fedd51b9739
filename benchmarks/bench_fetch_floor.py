"""The fetch floor (issue 33's fetch row, what the broker itself can serve): a raw client reads a
full one-partition topic from offset 0 to its end with prebuilt Fetch frames -- v16, the version
librdkafka 2.x sends, with the consumer's default max bytes (fetch.max.bytes 50 MiB a response,
max.partition.fetch.bytes 1 MiB), one request in flight as a consumer keeps -- reading each
answer into one reused buffer and walking only its batch headers for the next offset (a partial
last batch is left, as a consumer leaves it), so the client costs about what the loopback
reader costs.  Contenders:

  broker     `storage serve` (its default loop: uvloop) holding the topic (64 MiB of 1 KiB values
             in 16 KiB batches, read 4 times a run; 4 MiB once with --quick);
  loopback   fetch_floor_server.py copy: the broker's own answers to the same requests,
             recorded once, sent back one per request from memory by a blocking socket (the
             same bytes through loopback TCP, read by the same reader);
  sendfile   fetch_floor_server.py sendfile: the same, each answer by os.sendfile from the
             recorded file (what a server that sends its records from files cannot beat).

Each run is timed by the wall clock (first request to last answer read) and keeps the server
process's CPU seconds (the scheduler's sums of its threads, cpu_seconds) beside it, so report/wire_table.py show MB/s
and the server's CPU per MB.  Paired and alternated as every *-paired group (benchlib.paired).
"""
from __future__ import annotations

import os
import socket
import struct
import sys
import time

import pytest
from benchlib import Contender, MiB, paired, pedantic_paired
from wirelib import FLUSH_S, PRODUCER, on_bare_server, produce_all, records
from wirelib import cpu_seconds as tick_seconds

from storage.wire import codec

pytest.importorskip("confluent_kafka", reason="the fetch floor needs confluent-kafka to fill its topic")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.wire_support import Broker  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOPIC = "fetch-floor"
VERSION = 16                        # librdkafka 2.x's Fetch (rdkafka_fetcher.c asks for 0..16)
PARTITION_MAX_BYTES = 1 * MiB       # librdkafka's max.partition.fetch.bytes default
MAX_BYTES = 52_428_800              # librdkafka's fetch.max.bytes default
MAX_WAIT_MS = 500                   # fetch.wait.max.ms default
PASSES = {False: 4, True: 1}        # reads of the whole topic a run (full, --quick): ~0.3 s a run
_SENTINEL = 0x0123_4567_89AB_CDEF
# A v16 answer of one topic and one partition: where its fields lie after the size prefix.
_ERROR_AT, _ABORTED_AT, _RECORDS_LEN_AT = 37, 63, 68


def cpu_seconds(pid: int) -> float:
    """CPU seconds process `pid`'s threads have run so far: the scheduler's nanosecond sums
    (/proc/PID/task/*/sched, se.sum_exec_runtime in ms), as a run here lasts ~0.1-0.5 s where
    utime + stime count 10 ms ticks; those (wirelib.cpu_seconds) where the file is not there."""
    total, found = 0.0, False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tasks = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/sched") as f:
                for line in f:
                    if line.startswith("se.sum_exec_runtime"):
                        total += float(line.partition(":")[2]) / 1e3
                        found = True
                        break
        except OSError:
            continue                # a thread that ended meanwhile
    return total if found else tick_seconds(pid)


def fetch_frame(topic_id: int, partition_max_bytes: int = PARTITION_MAX_BYTES) -> tuple[bytearray, int]:
    """The Fetch v16 request frame of partition 0 of `topic_id` (no fetch session, as librdkafka
    sends it) and where its fetch offset lies, to be patched in place before each send."""
    body = {"max_wait": MAX_WAIT_MS, "min_bytes": 1, "max_bytes": MAX_BYTES, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic_id": topic_id, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": _SENTINEL, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": partition_max_bytes}]}]}
    frame = bytearray(codec.encode_request(1, VERSION, 1, "bench-fetch-floor", body))
    return frame, frame.index(struct.pack(">q", _SENTINEL))


def _read_exact(sock: socket.socket, view: memoryview, n: int) -> None:
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if not k:
            raise ConnectionError(f"the server closed the connection after {got} of {n} bytes")
        got += k


def next_offset(answer: memoryview, offset: int) -> tuple[int, int]:
    """(the next fetch offset, bytes of whole batches) of one v16 answer (size prefix left
    off) at `offset`: the batch headers walked, a partial last batch left out."""
    (code,) = struct.unpack_from(">h", answer, _ERROR_AT)
    if code != 0 or answer[_ABORTED_AT] > 1:
        raise AssertionError(f"fetch at {offset}: error {code}, aborted {answer[_ABORTED_AT]}")
    size, shift, pos = 0, 0, _RECORDS_LEN_AT
    while True:
        byte = answer[pos]
        pos += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    end = pos + max(size - 1, 0)
    start = pos
    unpack = struct.unpack_from
    while pos + 61 <= end:
        base, length = unpack(">qi", answer, pos)
        if pos + 12 + length > end:
            break
        (delta,) = unpack(">i", answer, pos + 23)
        offset = base + delta + 1
        pos += 12 + length
    return offset, pos - start


def fetch_all(port: int, frame: bytearray, offset_at: int, end: int, record=None) -> int:
    """Fetch from offset 0 until `end`, one request in flight, each answer read into one
    reused buffer; the records' bytes read.  `record`: a file that gets every answer frame."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = bytearray(PARTITION_MAX_BYTES + (1 << 16))
    view, offset, total = memoryview(buffer), 0, 0
    try:
        while offset < end:
            struct.pack_into(">q", frame, offset_at, offset)
            sock.sendall(frame)
            _read_exact(sock, view, 4)
            (size,) = struct.unpack_from(">i", buffer)
            if size > len(buffer):
                buffer.extend(bytes(size - len(buffer)))
                view = memoryview(buffer)
            _read_exact(sock, view, size)
            if record is not None:
                record.write(struct.pack(">i", size))
                record.write(view[:size])
            offset, got = next_offset(view[:size], offset)
            total += got
    finally:
        sock.close()
    return total


class FetchFloor:
    """The topic on a broker, the recorded answers and the contenders' runs."""

    def __init__(self, tmp, sizes):
        import confluent_kafka as ck
        from confluent_kafka.admin import AdminClient, NewTopic

        self.tmp = tmp
        self.passes = PASSES[sizes.quick]
        self.broker = Broker(tmp / "broker").start()
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(30)
        self.count = records(sizes)
        producer = ck.Producer({"bootstrap.servers": self.broker.bootstrap, **PRODUCER})
        produce_all(producer, TOPIC, self.count)
        assert producer.flush(FLUSH_S) == 0
        topic_id = self.topic_id(admin)
        self.frame, self.offset_at = fetch_frame(topic_id)
        self.answers = str(tmp / "answers.bin")
        with open(self.answers, "wb") as f:
            self.bytes = fetch_all(self.broker.port, self.frame, self.offset_at, self.count, f)
        self.answer_count = sum(1 for _ in _frames(self.answers))

    @staticmethod
    def topic_id(admin) -> int:
        from confluent_kafka import TopicCollection

        description = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(30)
        uid = description.topic_id
        return (uid.get_most_significant_bits() % (1 << 64)) << 64 | (uid.get_least_significant_bits() % (1 << 64))

    def on(self, port: int, pid: int) -> dict:
        before, start = cpu_seconds(pid), time.perf_counter()
        for _ in range(self.passes):
            got = fetch_all(port, self.frame, self.offset_at, self.count)
            assert got == self.bytes, (got, self.bytes)
        wall = time.perf_counter() - start
        return {"seconds": wall, "broker_cpu_s": cpu_seconds(pid) - before, "wall_s": wall}

    def broker_run(self) -> dict:
        return self.on(self.broker.port, self.broker.pid)

    def bare_run(self, mode: str) -> dict:
        return on_bare_server([os.path.join(HERE, "fetch_floor_server.py"), mode, self.answers], self.on)

    def close(self) -> None:
        self.broker.stop()


def _frames(path: str):
    with open(path, "rb") as f:
        while head := f.read(4):
            (size,) = struct.unpack(">i", head)
            yield f.read(size)


@pytest.fixture(scope="module")
def fetch_floor(tmp_path_factory, sizes):
    f = FetchFloor(tmp_path_factory.mktemp("fetch-floor"), sizes)
    yield f
    f.close()


PAIRS = [("broker", "loopback"), ("broker", "sendfile")]


def test_wire_fetch_floor_paired(benchmark, sizes, fetch_floor):
    f = fetch_floor
    contenders = [
        Contender("broker", "raw Fetch v16 client, storage serve", "ours", f.broker_run,
                  "1 MiB a partition, 50 MiB a response, one request in flight"),
        Contender("loopback", "the broker's answers from memory, blocking socket", "limit",
                  lambda: f.bare_run("copy"), "benchmarks/fetch_floor_server.py copy"),
        Contender("sendfile", "the broker's answers by os.sendfile from a file", "limit",
                  lambda: f.bare_run("sendfile"), "benchmarks/fetch_floor_server.py sendfile"),
    ]
    result = pedantic_paired(benchmark, "wire-fetch-floor-paired", paired, contenders, PAIRS,
                             sizes.paired_rounds if not sizes.quick else 1, warmup=False, amount=f.bytes * f.passes)
    gb = f.bytes * f.passes / 1e9
    cpu = {name: sorted(k["broker_cpu_s"] for k in kept)[len(kept) // 2] / gb
           for name, kept in result.get("kept", {}).items()}
    benchmark.extra_info.update(records=f.count, bytes=f.bytes * f.passes, passes=f.passes, answers=f.answer_count, version=VERSION,
                                partition_max_bytes=PARTITION_MAX_BYTES, server_cpu_s_per_GB=cpu, **result)
