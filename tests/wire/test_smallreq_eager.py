"""A Produce served from the connection's receive callback (FrameServer._now, Connection.
_serve_eagerly): while the connection's task waits for the next request, a Produce frame that
arrives whole and alone is served where its bytes arrive, without a wake of the task.  What the task's path guarantees
still holds, over a real loopback socket:

  - requests sent together are served by the connection's task, in arrival order;
  - a handler that waits holds the next request until it ends (no second append overtakes it),
    and its answer goes first;
  - a connection answered this way is not idle (connections.max.idle.ms counts from the last
    request), and one that goes silent is still closed;
  - a client that does not read its answers stops the server reading, and is answered in order
    once it reads;
  - what the fast path does not take (another API, a version not served, a frame the fast
    reader leaves to kio) goes the task's way, with its answer or its refusal;
  - every request is counted (served) and answered with its correlation id.
"""
from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.records import build_batch  # noqa: E402
from storage.wire import codec  # noqa: E402
from storage.wire.apis import ClientApis  # noqa: E402
from storage.wire.limits import ConnectionLimits  # noqa: E402
from storage.wire.server import FrameServer  # noqa: E402
from tests.wire_support import _read, loop_thread, on_loop, send_quietly  # noqa: E402

HOLD = 7            # the record value whose handler waits for the test's release


class Appending(FrameServer):
    """Produce only: appends each request's record to `log` (offsets in serving order); the
    record HOLD's handler waits for `release`.  ApiVersions for a request the fast path leaves."""

    def __init__(self, **limits):
        super().__init__(codec.SUPPORTED, ConnectionLimits(**limits))
        self.handlers = {0: self.produce, 18: self.api_versions}
        self.log: list[bytes] = []
        self.release: asyncio.Event | None = None
        self.waiting = threading.Event()
        self.tasks_seen: list = []

    async def produce(self, header, request) -> dict:
        self.tasks_seen.append(asyncio.current_task())
        value = bytes(request.topic_data[0].partition_data[0].records[-2:-1])     # the value's last byte
        if value == bytes([HOLD]):
            self.waiting.set()
            await self.release.wait()
        self.log.append(value)
        return {"responses": [{"name": "t", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": len(self.log) - 1, "log_start_offset": 0,
             "record_errors": [], "error_message": None}]}]}

    async def api_versions(self, header, request) -> dict:
        return ClientApis.api_versions_body(0, self.supported)


@contextlib.contextmanager
def serving(**limits):
    loop = asyncio.new_event_loop()
    server = Appending(**limits)
    server.release = asyncio.Event()
    with loop_thread(server, loop) as port:
        yield server, loop, ("127.0.0.1", port)


def produce(correlation_id: int, value: int, version: int = 9) -> bytes:
    """A one-record Produce frame whose record ends with the byte `value`."""
    return codec.encode_request(0, version, correlation_id, "c", {"transactional_id": None, "acks": 1, "timeout": 1000,
                                "topic_data": [{"name": "t", "partition_data": [
                                    {"index": 0, "records": build_batch([b"v" * 100 + bytes([value])])}]}]})


def answer(s: socket.socket, version: int = 9) -> tuple[int, int]:
    """(correlation id, base offset) of the next Produce answer on `s`."""
    head = _read(s, 4)
    assert head is not None, "the server closed the connection"
    correlation_id, body = codec.decode_response(0, version, _read(s, struct.unpack(">i", head)[0]))
    row = body.responses[0].partition_responses[0]
    assert row.error_code == 0
    return correlation_id, row.base_offset


def connect(address) -> socket.socket:
    s = socket.create_connection(address, timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def test_one_at_a_time_produce_is_served_without_the_connections_task():
    with serving() as (server, _loop, address), connect(address) as s:
        for i in range(20):
            s.sendall(produce(i, 1))
            assert answer(s) == (i, i)
        assert server.served[(0, 9)] == 20
        # the first may come before the task waits for a request; the rest are served where they arrive
        assert sum(task is None for task in server.tasks_seen) >= 18


def test_requests_sent_together_are_served_and_answered_in_order():
    with serving() as (server, _loop, address), connect(address) as s:
        s.sendall(produce(0, 1))
        assert answer(s) == (0, 0)
        s.sendall(b"".join(produce(i, i % 5 + 1) for i in range(1, 60)))
        assert [answer(s) for _ in range(1, 60)] == [(i, i) for i in range(1, 60)]
        assert server.log == [bytes([1])] + [bytes([i % 5 + 1]) for i in range(1, 60)]
        # pipelined requests are the task's (it serves them without a return to the loop and writes
        # their answers together: served from the callback they cost 4 % more CPU, bench-notes s38)
        assert all(task is not None for task in server.tasks_seen[1:])


def test_a_handler_that_waits_holds_the_next_request_and_answers_first():
    with serving() as (server, loop, address), connect(address) as s:
        s.sendall(produce(0, 1))
        assert answer(s) == (0, 0)
        s.sendall(produce(1, HOLD))
        assert server.waiting.wait(10)
        s.sendall(produce(2, 2))
        time.sleep(0.3)
        assert server.log == [bytes([1])]           # the second did not overtake the one waiting
        loop.call_soon_threadsafe(server.release.set)
        assert [answer(s), answer(s)] == [(1, 1), (2, 2)]
        assert server.log == [bytes([1]), bytes([HOLD]), bytes([2])]
        s.sendall(produce(3, 3))                    # and the connection goes on
        assert answer(s) == (3, 3)


def test_a_connection_answered_where_requests_arrive_is_not_idle_and_a_silent_one_is_closed():
    with serving(connections_max_idle_ms=400) as (server, _loop, address), connect(address) as s:
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 1.5:        # well past connections.max.idle.ms, never idle that long
            s.sendall(produce(i, 1))
            assert answer(s) == (i, i)
            i += 1
            time.sleep(0.05)
        s.settimeout(5)
        assert s.recv(1) == b""                         # then silent: closed


def test_a_client_that_does_not_read_stops_the_server_reading_and_is_answered_in_order_when_it_does():
    """As tests/wire/test_wire_connection.py's for ApiVersions, with Produce requests served
    where they arrive: answers of 32 KiB, none read, until the server stops taking requests."""
    count, answer_bytes = 600, 32 * 1024
    frames = b"".join(produce(i, 1) for i in range(count))
    with serving() as (server, loop, address), socket.create_connection(address, timeout=60) as s:
        server.encoders[0] = lambda key, version, cid, body: struct.pack(">ii", 4 + answer_bytes, cid) + \
            b"\0" * answer_bytes
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sender = threading.Thread(target=send_quietly, args=(s, frames), daemon=True)
        sender.start()
        served, unsent = -1, []
        while served != server.served[(0, 9)]:      # until the server stops taking requests
            served = server.served[(0, 9)]
            time.sleep(0.3)
            unsent.append(on_loop(loop, server.unsent_bytes))
        assert served < count, "the server read every request although no answer was read"
        assert max(unsent) < 256 * 1024, f"{max(unsent)} bytes of answers held for a client that does not read"
        answers = []
        for _ in range(count):
            size = struct.unpack(">i", _read(s, 4))[0]
            answers.append(struct.unpack(">i", _read(s, size)[:4])[0])
        assert answers == list(range(count))
        assert server.log == [bytes([1])] * count
        sender.join(30)


def test_what_the_fast_path_leaves_is_served_or_refused_by_the_task():
    with serving() as (server, _loop, address), connect(address) as s:
        s.sendall(produce(0, 1))
        assert answer(s) == (0, 0)
        s.sendall(produce(1, 2, version=3))            # an older version: the fast reader's too
        assert answer(s, version=3) == (1, 1)
        s.sendall(codec.encode_request(18, 3, 2, "c", {"client_software_name": "x", "client_software_version": "1"}))
        head = _read(s, 4)
        correlation_id, body = codec.decode_response(18, 3, _read(s, struct.unpack(">i", head)[0]))
        assert (correlation_id, body.error_code) == (2, 0)
        s.sendall(produce(3, 3))
        assert answer(s) == (3, 2)
        bad = bytearray(produce(4, 4))
        bad[6:8] = (99).to_bytes(2, "big")            # Produce v99: not served, the connection closes
        s.sendall(bytes(bad))
        s.settimeout(5)
        assert s.recv(1) == b""
        assert server.served[(0, 9)] == 2 and server.served[(0, 3)] == 1


def _produce_framed(correlation_id: int, value: int, total: int) -> bytes:
    """A one-record Produce frame, its 4-byte size included, of exactly `total` bytes."""
    pad = total - 200
    for _ in range(8):
        frame = codec.encode_request(0, 9, correlation_id, "c", {
            "transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [{"name": "t", "partition_data": [
                {"index": 0, "records": build_batch([b"v" * pad + bytes([value])])}]}]})
        if len(frame) == total:
            return frame
        pad += total - len(frame)
    raise AssertionError(f"no frame of {total} bytes")


def test_a_frame_that_fills_the_receive_buffer_is_served_and_reading_goes_on():
    """A frame whose bytes fill the receive buffer exactly pauses reading when it arrives; served
    from the callback, the buffer is empty again and reading must resume (else the connection
    hangs until connections.max.idle.ms closes it)."""
    from storage.wire.connection import BUFFER_BYTES
    with serving() as (server, _loop, address), connect(address) as s:
        s.sendall(produce(0, 1))
        assert answer(s) == (0, 0)
        for i in range(1, 4):
            s.sendall(_produce_framed(i, 2, BUFFER_BYTES))
            assert answer(s) == (i, i)
        s.sendall(produce(4, 3))
        assert answer(s) == (4, 4)
        assert server.served[(0, 9)] == 5
