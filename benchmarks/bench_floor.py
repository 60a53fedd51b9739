"""The produce floor (issue 33: "say with numbers whether one core is the limit"): the server's CPU
per 16 KiB Produce request (acks=1, one partition, v9), the same prebuilt frames sent pipelined by
one raw-socket client to

  broker         `storage serve` (fsync off, its default loop: uvloop), the topic made beforehand;
  floor          floor_server.py append on asyncio's loop: read each frame, append its batch with
                 PartitionLog.append_as_leader, answer 40 bytes -- no parsing, no checks, no
                 metrics: the least any broker on this loop and engine can spend;
  floor-uvloop   the same on uvloop;
  echo           floor_server.py echo: the frames read and answered, nothing appended (the loop's
                 and the socket's own cost);
  engine         append_as_leader of the same batches in this process (process CPU time).

Every contender's "seconds" is CPU seconds (the server process's utime + stime, /proc/PID/stat;
the engine's process_time), so a pair's ratio t_peer / t_ours compares CPU per request:
broker / floor-uvloop is how far the broker is from the floor on its own loop, floor / engine is the most a one-process
broker on this loop can reach of the engine's own append (the wire rows' goal is 0.5x).
Paired and alternated as every *-paired group (benchlib.paired); the client's own CPU is not
counted (it shares the machine's two cores: the wire rows' MB/s carry it, these do not).
"""
from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time

import pytest
from benchlib import Contender, paired, pedantic_paired
from wirelib import VALUE, cpu_seconds, on_bare_server

import storage
from storage.wire import codec

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.wire_support import Broker  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOPIC = "floor"
REQUESTS = {False: 8000, True: 800}           # full, --quick


def produce_frame(correlation_id: int, batch: bytes) -> bytes:
    body = {"transactional_id": None, "acks": 1, "timeout": 30_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}
    return codec.encode_request(0, 9, correlation_id, "bench-floor", body)


def send_all(port: int, frames: list[bytes]) -> None:
    """Write every frame (pipelined: a reader thread takes the answers as they come) and return
    once every answer is read."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    answered = [0]

    def read() -> None:
        pending = bytearray()
        while answered[0] < len(frames):
            data = sock.recv(1 << 16)
            if not data:
                return
            pending += data
            while len(pending) >= 4:
                (size,) = struct.unpack_from(">i", pending)
                if len(pending) < 4 + size:
                    break
                del pending[:4 + size]
                answered[0] += 1

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for frame in frames:
            sock.sendall(frame)
        reader.join(300)
    finally:
        sock.close()
    assert answered[0] == len(frames), f"{answered[0]} of {len(frames)} requests answered"


class Floor:
    """The workload (one batch of 15 x 1 KiB a request) and the contenders' runs."""

    def __init__(self, tmp, quick: bool):
        self.tmp = tmp
        self.batch = storage.build_batch([VALUE] * 15)
        self.frames = [produce_frame(i, self.batch) for i in range(REQUESTS[quick])]
        self.records_at = self.frames[0].index(self.batch) - 4       # within the frame after its size
        self.broker = Broker(tmp / "broker").start()
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(30)
        self.n = 0

    def on(self, port: int, pid: int) -> float:
        before = cpu_seconds(pid)
        send_all(port, self.frames)
        return cpu_seconds(pid) - before

    def broker_run(self) -> float:
        return self.on(self.broker.port, self.broker.pid)

    def bare_run(self, mode: str, loop: str) -> float:
        return on_bare_server([os.path.join(HERE, "floor_server.py"), mode, loop, str(self.records_at),
                               str(len(self.batch))], self.on)

    def engine_run(self) -> float:
        self.n += 1
        log = storage.PartitionLog.open(self.tmp / f"engine-{self.n}", storage.LogConfig(fsync=False))
        try:
            batch, append = self.batch, log.append_as_leader
            start = time.process_time()
            for _ in self.frames:
                append(batch, 5)
            return time.process_time() - start
        finally:
            log.close()

    def close(self) -> None:
        self.broker.stop()


@pytest.fixture(scope="module")
def floor(tmp_path_factory, sizes):
    f = Floor(tmp_path_factory.mktemp("floor"), sizes.quick)
    yield f
    f.close()


# (ours, peer): t_peer / t_ours of CPU seconds
PAIRS = [("broker", "floor-uvloop"), ("floor", "engine"), ("floor-uvloop", "engine"), ("broker", "engine"),
         ("echo", "engine")]


def floor_pairs(contenders: list[Contender], rounds: int) -> dict:
    """PAIRS of `contenders` paired and alternated; every time is CPU seconds, so the group's unit
    is "seconds" (no amount: report.py shows the times, not a throughput)."""
    return paired(contenders, PAIRS, rounds, warmup=False, unit="seconds")


def test_wire_floor_paired(benchmark, sizes, floor):
    contenders = [
        Contender("broker", "storage serve, Produce v9 acks=1", "ours", floor.broker_run,
                  "server CPU seconds (utime + stime)"),
        Contender("floor", "bare asyncio server: append + 40-byte answer", "peer",
                  lambda: floor.bare_run("append", "asyncio"), "benchmarks/floor_server.py append asyncio"),
        Contender("floor-uvloop", "the same bare server on uvloop", "peer",
                  lambda: floor.bare_run("append", "uvloop"), "benchmarks/floor_server.py append uvloop"),
        Contender("echo", "bare asyncio server: 40-byte answer only", "limit",
                  lambda: floor.bare_run("echo", "asyncio")),
        Contender("engine", "append_as_leader in process", "peer", floor.engine_run, "process CPU time"),
    ]
    result = pedantic_paired(benchmark, "wire-floor-paired", floor_pairs, contenders, max(sizes.paired_rounds // 3, 1))
    benchmark.extra_info.update(requests=len(floor.frames), batch_bytes=len(floor.batch),
                                cpu_per_request_us={name: seconds / len(floor.frames) * 1e6
                                                    for name, seconds in result["median_seconds"].items()},
                                **result)
