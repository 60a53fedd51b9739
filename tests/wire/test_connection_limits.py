"""The front end's connection and request-memory limits (storage/wire/limits.py; issue 30 item
9), in our words after Kafka's SocketServerTest.testMaxConnectionsPerIp (a connection over its
IP's quota is closed, one under it served) and SelectorTest.testCloseOldestConnection (a
connection idle past connections.max.idle.ms is closed):

  - a connection silent for connections.max.idle.ms is closed, a busy one is not;
  - a frame not whole within request.timeout.ms closes its connection and frees its memory;
  - stalled frames hold at most queued.max.request.bytes (their bytes are read as they come,
    after their size is reserved; the next frame waits);
  - beyond max.connections or max.connections.per.ip the newest connection is closed;
  - the default max.connections leaves the log dir's segments their descriptors: a broker
    under RLIMIT_NOFILE 256 with 300 silent connections keeps rolling segments, for
    `storage serve` and `storage controller` alike.
"""
from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import struct
import sys
import threading
import time
import tracemalloc

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.log.segment_home import open_segments  # noqa: E402
from storage.wire import codec  # noqa: E402
from storage.wire.apis import ClientApis  # noqa: E402
from storage.wire.limits import ACCEPT_BURST, ConnectionLimits, default_max_connections, descriptor_budget  # noqa: E402
from storage.wire.server import FrameServer  # noqa: E402
from tests.wire_support import Broker, _read, loop_thread  # noqa: E402

API_VERSIONS = codec.encode_request(18, 3, 7, "t", {"client_software_name": "t", "client_software_version": "1"})


class VersionsOnly(FrameServer):
    """The front end with one API: enough to see connections served or closed."""

    def __init__(self, limits: ConnectionLimits):
        super().__init__(codec.SUPPORTED, limits)
        self.handlers = {18: self.api_versions}

    async def api_versions(self, header, request) -> dict:
        return ClientApis.api_versions_body(0, self.supported)


@contextlib.contextmanager
def serving(**limits):
    """A VersionsOnly server on 127.0.0.1 in a thread of its own: (server, address)."""
    loop = asyncio.new_event_loop()
    server = VersionsOnly(ConnectionLimits(**limits))
    with loop_thread(server, loop) as port:
        yield server, ("127.0.0.1", port)


def served(s: socket.socket) -> bool:
    """One ApiVersions exchange on `s`: True when answered, False when the server closed it."""
    try:
        s.sendall(API_VERSIONS)
        head = _read(s, 4)
        return head is not None and _read(s, struct.unpack(">i", head)[0]) is not None
    except ConnectionError:
        return False


def closed_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_silent_connection_is_closed_after_connections_max_idle_ms_and_a_busy_one_is_not():
    with serving(connections_max_idle_ms=400) as (_server, address):
        silent = socket.create_connection(address, timeout=10)
        busy = socket.create_connection(address, timeout=10)
        started = time.monotonic()
        for _ in range(8):                       # a request every 150 ms for 1.2 s: never idle
            assert served(busy)
            time.sleep(0.15)
        assert closed_within(silent, 0.1)        # closed since: silent for more than 400 ms
        assert time.monotonic() - started > 0.4
        assert served(busy)
        silent.close()
        busy.close()


def test_a_frame_not_whole_within_request_timeout_ms_closes_and_frees_its_memory():
    with serving(request_timeout_ms=300) as (server, address):
        s = socket.create_connection(address, timeout=10)
        s.sendall(struct.pack(">i", 60 << 20) + b"\0" * 1000)     # 60 MiB announced, 1000 bytes sent
        assert wait_for(lambda: server.memory.used_bytes == 60 << 20, 5)
        assert not closed_within(s, 0.1)
        assert closed_within(s, 5)
        assert wait_for(lambda: server.memory.used_bytes == 0, 5)
        with socket.create_connection(address, timeout=10) as again:
            assert served(again)
        s.close()


def test_stalled_frames_hold_at_most_queued_max_request_bytes():
    """Four clients stall one byte short of 6 MiB frames: with queued.max.request.bytes 8 MiB one
    frame is read, the other three wait unread (their bytes stay in the kernel), so the server
    holds about 6 MiB, not 24."""
    frame_bytes = 6 << 20
    payload = b"\0" * (frame_bytes - 1)
    tracemalloc.start()
    try:
        with serving(queued_max_request_bytes=8 << 20, request_timeout_ms=60_000) as (server, address):
            clients = [socket.create_connection(address, timeout=30) for _ in range(4)]
            baseline = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            senders = [threading.Thread(target=_send_quietly, args=(c, struct.pack(">i", frame_bytes), payload),
                                        daemon=True) for c in clients]
            for t in senders:
                t.start()
            assert wait_for(lambda: server.memory.used_bytes == frame_bytes, 10)
            time.sleep(0.5)                       # time for the others' bytes to arrive, were they read
            assert server.memory.used_bytes == frame_bytes
            peak = tracemalloc.get_traced_memory()[1] - baseline
            assert peak < 12 << 20, f"{peak} bytes held by stalled frames"
            for c in clients:
                c.close()
            for t in senders:
                t.join(10)
            assert wait_for(lambda: server.memory.used_bytes == 0, 10)
            with socket.create_connection(address, timeout=10) as again:
                assert served(again)
    finally:
        tracemalloc.stop()


def _send_quietly(s: socket.socket, head: bytes, payload: bytes) -> None:
    with contextlib.suppress(OSError):
        s.sendall(head)
        s.sendall(memoryview(payload))


@pytest.mark.parametrize("limit", ["max_connections", "max_connections_per_ip"])
def test_the_newest_connection_beyond_the_cap_is_closed(limit):
    with serving(**{limit: 2}) as (server, address):
        first, second = (socket.create_connection(address, timeout=10) for _ in range(2))
        assert served(first) and served(second)
        third = socket.create_connection(address, timeout=10)
        assert closed_within(third, 5) and server.gate.refused == 1
        assert served(first) and served(second)          # the older ones are untouched
        first.close()
        assert wait_for(lambda: server.gate.count == 1)
        with socket.create_connection(address, timeout=10) as fourth:
            assert served(fourth)
        second.close()
        third.close()


def test_a_flood_is_accepted_a_bounded_burst_at_a_time_and_the_reserve_covers_it(monkeypatch):
    """asyncio accepts up to a listening socket's backlog at one readiness, and each accepted
    socket holds a descriptor until its connection is refused: the backlog is ACCEPT_BURST
    (Kafka's socket.listen.backlog.size) and the descriptor reserve is larger, so a flood of
    connections beyond max.connections cannot take the descriptors a segment roll needs."""
    backlogs = []
    real = asyncio.BaseEventLoop.create_server

    async def recording(self, *args, **kwargs):
        backlogs.append(kwargs.get("backlog", 100))       # asyncio's default
        return await real(self, *args, **kwargs)
    monkeypatch.setattr(asyncio.BaseEventLoop, "create_server", recording)

    async def main():
        server = VersionsOnly(ConnectionLimits(max_connections=5))
        await server.listen("127.0.0.1", 0)
        server.stop_listening()
    asyncio.run(main())
    assert backlogs == [ACCEPT_BURST]
    for soft in (64, 256, 1024, 1 << 20):
        monkeypatch.setattr(resource, "getrlimit", lambda _which, soft=soft: (soft, soft))
        assert descriptor_budget()[2] > ACCEPT_BURST


def test_the_default_max_connections_leaves_the_segments_their_descriptors():
    soft, segments, reserve = descriptor_budget()
    assert segments == 3 * open_segments.limit
    allowed = default_max_connections()
    assert allowed >= 1 and allowed + segments + reserve <= max(soft, segments + reserve + 1)
    assert ConnectionLimits().resolved().max_connections == allowed
    assert ConnectionLimits(max_connections=5).resolved().max_connections == 5


@pytest.mark.parametrize("command", ["serve", "controller"])
@pytest.mark.parametrize("flag,value", [("--max-connections", "-1"), ("--max-connections-per-ip", "0"),
                                        ("--connections-max-idle-ms", "0"), ("--queued-max-request-bytes", "0"),
                                        ("--request-timeout-ms", "-5"), ("--max-connections", str(2**31)),
                                        ("--request-timeout-ms", str(2**70)),
                                        ("--connections-max-idle-ms", str(2**63))])
def test_a_bad_limit_is_a_usage_error_naming_it(tmp_path, capsys, command, flag, value):
    from storage.cli import USAGE, main
    assert main([command, "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0", flag, value]) == USAGE
    err = capsys.readouterr().err
    assert flag in err and flag.lstrip("-").replace("-", ".") in err and f"not {value}" in err, err
    assert not (tmp_path / "d").exists()          # refused before anything started


def _lowered_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def create_topic_frame(name: str, segment_bytes: int) -> bytes:
    return codec.encode_request(19, 5, 2, "t", {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": "segment.bytes", "value": str(segment_bytes)}]}], "timeout_ms": 5000,
        "validate_only": False})


def produce_frame(correlation_id: int, value: bytes) -> bytes:
    from storage.core.records import build_batch
    return codec.encode_request(0, 9, correlation_id, "t", {
        "transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": build_batch([value])}]}]})


def exchange(s: socket.socket, frame: bytes) -> bytes:
    s.sendall(frame)
    head = _read(s, 4)
    assert head is not None, "the broker closed the connection"
    return _read(s, struct.unpack(">i", head)[0])


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_NOFILE as on Linux")
def test_silent_connections_cannot_starve_segment_rolls_under_a_low_rlimit(tmp_path):
    """`storage serve` under RLIMIT_NOFILE 256 (default max.connections: what the segments and
    the reserve leave); 300 silent connections: those beyond the cap are closed, and the one
    producing keeps rolling a segment per batch, every produce answered without error."""
    broker = Broker(tmp_path / "b", preexec_fn=_lowered_nofile).start()
    silent = []
    try:
        producer = socket.create_connection((broker.host, broker.port), timeout=10)
        created = codec.decode_response(19, 5, exchange(producer, create_topic_frame("t", 1024)))[1]
        assert created.topics[0].error_code == 0
        for _ in range(300):
            with contextlib.suppress(OSError):
                silent.append(socket.create_connection((broker.host, broker.port), timeout=10))
        for i in range(100):                  # a batch of ~600 bytes: a new segment every other batch
            answer = codec.decode_response(0, 9, exchange(producer, produce_frame(i, b"v" * 500)))[1]
            assert answer.responses[0].partition_responses[0].error_code == 0, i
        assert broker.alive()
        assert "refused connection" in broker.stderr() and "max.connections=" in broker.stderr()
        assert "file descriptors" not in broker.stderr()
        producer.close()
    finally:
        for s in silent:
            s.close()
        assert broker.stop() == 0, broker.stderr()[-3000:]
    assert len(list((tmp_path / "b" / "logs" / "t-0").glob("*.log"))) >= 50      # it did roll


def test_the_controller_process_caps_its_connections_too(tmp_path):
    controller = Broker(tmp_path / "c", "--max-connections", "2", command="controller").start()
    try:
        first, second = (socket.create_connection((controller.host, controller.port), timeout=10)
                         for _ in range(2))
        assert served(first) and served(second)
        third = socket.create_connection((controller.host, controller.port), timeout=10)
        assert closed_within(third, 5)
        for s in (first, second, third):
            s.close()
    finally:
        assert controller.stop() == 0, controller.stderr()[-3000:]


def test_request_memory_waits_in_turn_and_a_cancelled_waiter_passes_its_turn_on():
    from storage.wire.limits import RequestMemory

    async def scenario():
        memory = RequestMemory(10)
        await memory.reserve(6)
        second = asyncio.create_task(memory.reserve(6))       # 12 > 10: waits
        third = asyncio.create_task(memory.reserve(3))        # would fit, but waits its turn
        await asyncio.sleep(0.01)
        assert not second.done() and not third.done() and memory.used_bytes == 6
        memory.release(6)                                     # second wakes ...
        second.cancel()                                       # ... and is cancelled before it runs
        await asyncio.sleep(0.01)
        assert third.done() and memory.used_bytes == 3        # the turn passed on
        big = asyncio.create_task(memory.reserve(50))         # larger than the limit: waits for 0
        await asyncio.sleep(0.01)
        assert not big.done()
        memory.release(3)
        await asyncio.wait_for(big, 1)
        assert memory.used_bytes == 50
        memory.release(50)
        unlimited = RequestMemory(-1)
        await asyncio.wait_for(asyncio.gather(unlimited.reserve(1 << 40), unlimited.reserve(1 << 40)), 1)

    asyncio.run(scenario())
