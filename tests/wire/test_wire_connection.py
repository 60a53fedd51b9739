"""The front end's framing on one connection (storage/wire/connection.py: frames parsed from the
receive buffer, answers written to the transport), through a real loopback socket:

  - pipelined requests, sent in one write, are served and answered in arrival order (Kafka:
    the channel is muted until the answer is sent, so answers come in request order);
  - an answer is not held behind a later request whose handler waits;
  - a frame split across many TCP reads, one larger than the receive buffer, two frames in one
    read with the second cut, are all read whole;
  - a connection closed in the middle of a frame (or of its size) leaves nothing behind: its
    memory reservation and its place at the connection gate are given back, nothing is logged
    as an error;
  - a client that sends requests and never reads their answers makes the server stop reading
    (its memory stays bounded), and is served in order once it reads;
  - a request whose handler answers later (later.py: an acks=-1 Produce waiting for the high
    watermark) does not hold the connection: the requests after it are served at once, at most
    MAX_LATER answers wait, and every answer still goes out in request order -- after a failed
    one's error answer, after the client's half-close; a closed connection cancels the waits.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import threading
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.wire import codec  # noqa: E402
from storage.wire.apis import ClientApis  # noqa: E402
from storage.wire.connection import BUFFER_BYTES  # noqa: E402
from storage.wire.later import MAX_LATER, Later  # noqa: E402
from storage.wire.limits import ConnectionLimits  # noqa: E402
from storage.wire.server import FrameServer  # noqa: E402
from tests.wire_support import _read, loop_thread, on_loop, send_quietly  # noqa: E402

SLOW = 2**31 - 1           # the correlation id whose handler waits for the test's release


def api_versions(correlation_id: int, name: str = "t") -> bytes:
    return codec.encode_request(18, 3, correlation_id, "c", {"client_software_name": name,
                                                              "client_software_version": "1"})


class Recording(FrameServer):
    """ApiVersions only; records the client_software_name of each request in serving order; the
    request with correlation id SLOW waits for `release`."""

    def __init__(self, **limits):
        super().__init__(codec.SUPPORTED, ConnectionLimits(**limits))
        self.handlers = {18: self.api_versions}
        self.names: list[str] = []
        self.release: asyncio.Event | None = None
        self.waiting = threading.Event()

    async def api_versions(self, header, request) -> dict:
        self.names.append(request.client_software_name)
        if header.correlation_id == SLOW:
            self.waiting.set()
            await self.release.wait()
        return ClientApis.api_versions_body(0, self.supported)


@contextlib.contextmanager
def serving(server_class=Recording, **limits):
    """A `server_class` (a Recording) on 127.0.0.1 in a thread of its own: (server, loop, address)."""
    loop = asyncio.new_event_loop()
    server = server_class(**limits)
    server.release = asyncio.Event()
    with loop_thread(server, loop) as port:
        yield server, loop, ("127.0.0.1", port)


def answer_id(s: socket.socket) -> int:
    """The correlation id of the next answer on `s` (its body read and checked: error code 0)."""
    head = _read(s, 4)
    assert head is not None, "the server closed the connection"
    frame = _read(s, struct.unpack(">i", head)[0])
    correlation_id, body = codec.decode_response(18, 3, frame)
    assert body.error_code == 0
    return correlation_id


def wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_pipelined_requests_are_answered_in_arrival_order():
    with serving() as (server, _loop, address), socket.create_connection(address, timeout=10) as s:
        s.sendall(b"".join(api_versions(i, f"n{i}") for i in range(200)))      # one write, many frames
        assert [answer_id(s) for _ in range(200)] == list(range(200))
        assert server.names == [f"n{i}" for i in range(200)]


def test_an_answer_is_not_held_behind_a_request_whose_handler_waits():
    with serving() as (server, loop, address), socket.create_connection(address, timeout=10) as s:
        s.sendall(api_versions(1) + api_versions(SLOW) + api_versions(3))
        assert answer_id(s) == 1                 # while SLOW's handler still waits
        assert server.waiting.is_set() and server.names == ["t", "t"]
        loop.call_soon_threadsafe(server.release.set)
        assert [answer_id(s), answer_id(s)] == [SLOW, 3]


@pytest.mark.parametrize("name_bytes, piece", [(10, 1), (3 * BUFFER_BYTES + 17, 7001)],
                         ids=["small-frame-byte-by-byte", "frame-larger-than-the-buffer"])
def test_a_frame_split_across_many_reads_is_read_whole(name_bytes, piece):
    name = "x" * name_bytes
    frame = api_versions(5, name)
    with serving() as (server, _loop, address), socket.create_connection(address, timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(frame), piece):
            s.sendall(frame[i:i + piece])
            time.sleep(0.001)                    # separate reads on the server's side
        assert answer_id(s) == 5
        assert server.names == [name]
        s.sendall(api_versions(6))               # and the connection goes on
        assert answer_id(s) == 6


@pytest.mark.parametrize("name_bytes", [16 * 1024, 3 * BUFFER_BYTES], ids=["in-the-buffer", "in-pieces"])
def test_a_frame_arriving_in_parts_wakes_the_request_task_when_whole(name_bytes, monkeypatch):
    """The task waiting for a frame whose size it read is woken when the frame is whole, not
    for each read of a part of it (a 16 KiB produce request arriving in parts woke it per part)."""
    from storage.wire.connection import Connection
    woken, real = [], Connection._wake

    def counting(self):
        if self._waiter is not None and not self._waiter.done():
            woken.append(1)
        real(self)
    monkeypatch.setattr(Connection, "_wake", counting)
    frame, parts = api_versions(5, "x" * name_bytes), 12
    with serving() as (server, _loop, address), socket.create_connection(address, timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        step = len(frame) // parts + 1
        for i in range(0, len(frame), step):
            s.sendall(frame[i:i + step])
            time.sleep(0.02)                     # each part a read of its own on the server's side
        assert answer_id(s) == 5
        assert server.names == ["x" * name_bytes]
    assert len(woken) <= 3, f"the task was woken {len(woken)} times for one frame sent in {parts} parts"


def test_two_frames_in_one_read_the_second_cut_then_completed():
    first, second, third = api_versions(1, "a"), api_versions(2, "b" * 2 * BUFFER_BYTES), api_versions(3, "c")
    with serving() as (server, _loop, address), socket.create_connection(address, timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(first + second[:100])
        assert answer_id(s) == 1
        s.sendall(second[100:] + third[:2])       # the third's size cut too
        assert answer_id(s) == 2
        s.sendall(third[2:])
        assert answer_id(s) == 3
        assert server.names == ["a", "b" * 2 * BUFFER_BYTES, "c"]


@pytest.mark.parametrize("sent", [2, 4 + 10, 4 + BUFFER_BYTES + 10], ids=["in-the-size", "in-a-frame", "in-a-big-frame"])
def test_a_connection_closed_inside_a_frame_leaves_nothing_behind(sent, caplog):
    declared = 4 * BUFFER_BYTES
    data = struct.pack(">i", declared) + b"\0" * declared
    with caplog.at_level(logging.INFO, logger="storage.wire"), serving() as (server, _loop, address):
        s = socket.create_connection(address, timeout=10)
        s.sendall(data[:sent])
        if sent > 4:
            assert wait_for(lambda: server.memory.used_bytes == declared)
        s.close()
        assert wait_for(lambda: server.gate.count == 0 and server.memory.used_bytes == 0)
        with socket.create_connection(address, timeout=10) as again:
            again.sendall(api_versions(9))
            assert answer_id(again) == 9
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert server.names == ["t"]


def test_a_client_that_does_not_read_stops_the_server_reading_and_is_served_in_order_when_it_does():
    """600 requests whose answers are 32 KiB each (~19 MB, more than the kernel's socket buffers
    take) sent by a client that reads nothing until the server stops taking them: the answers the
    server holds stay within the transport's high-water mark and one write of held answers, and
    the server stops reading requests; once the client reads, every answer comes, in order."""
    count, answer_bytes = 600, 32 * 1024
    frames = b"".join(api_versions(i) for i in range(count))
    with serving() as (server, loop, address), socket.create_connection(address, timeout=60) as s:
        server.encoders[18] = lambda key, version, cid, body: struct.pack(">ii", 4 + answer_bytes, cid) + \
            b"\0" * answer_bytes
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sender = threading.Thread(target=send_quietly, args=(s, frames), daemon=True)
        sender.start()
        served, unsent = -1, []
        while served != server.served[(18, 3)]:     # until the server stops taking requests
            served = server.served[(18, 3)]
            time.sleep(0.3)
            unsent.append(on_loop(loop, server.unsent_bytes))
        assert served < count, "the server read every request although no answer was read"
        assert max(unsent) < 256 * 1024, f"{max(unsent)} bytes of answers held for a client that does not read"
        answers = []
        for _ in range(count):
            size = struct.unpack(">i", _read(s, 4))[0]
            answers.append(struct.unpack(">i", _read(s, size)[:4])[0])
        assert answers == list(range(count))
        sender.join(30)


# ---- answers still to come (later.py) ------------------------------------------------------------

class Offline(Exception):
    error_code = 56         # KAFKA_STORAGE_ERROR


class Deferring(Recording):
    """A request named `later...` is answered later: its body comes once the test sets its event
    (`go(name)`); one named `later-fails...` then raises (a KAFKA_STORAGE_ERROR)."""

    def __init__(self, **limits):
        super().__init__(**limits)
        self.events: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []

    async def api_versions(self, header, request):
        name = request.client_software_name
        if not name.startswith("later"):
            return await super().api_versions(header, request)
        self.names.append(name)
        event = self.events.setdefault(name, asyncio.Event())
        return Later(self._rest(name, event))

    async def _rest(self, name: str, event: asyncio.Event) -> dict:
        try:
            await event.wait()
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise
        if name.startswith("later-fails"):
            raise Offline("the log dir went offline")
        return ClientApis.api_versions_body(0, self.supported)


def go(server: Deferring, loop, name: str) -> None:
    on_loop(loop, lambda: server.events.setdefault(name, asyncio.Event()).set())


def nothing_to_read(s: socket.socket, seconds: float = 0.3) -> bool:
    s.settimeout(seconds)
    try:
        s.recv(1, socket.MSG_PEEK)          # an answer's first byte, or the end
        return False
    except TimeoutError:
        return True
    finally:
        s.settimeout(10)


def answer_of(s: socket.socket) -> tuple[int, int]:
    """(correlation id, error code) of the next answer on `s`."""
    frame = _read(s, struct.unpack(">i", _read(s, 4))[0])
    correlation_id, body = codec.decode_response(18, 3, frame)
    return correlation_id, body.error_code


def test_the_requests_after_an_answer_still_to_come_are_served_at_once_and_answered_in_order():
    with serving(Deferring) as (server, loop, address), socket.create_connection(address, timeout=10) as s:
        s.sendall(api_versions(1, "later-1") + api_versions(2, "now") + api_versions(3, "later-3")
                  + api_versions(4, "now"))
        # All four served while the first still waits (a handler that awaits inside would
        # hold the connection at the first: names == ["later-1"]) ...
        assert wait_for(lambda: len(server.names) == 4), server.names
        assert server.names == ["later-1", "now", "later-3", "now"]
        # ... and nothing answered before the first: answers go in request order.
        assert nothing_to_read(s)
        go(server, loop, "later-3")
        assert nothing_to_read(s)
        go(server, loop, "later-1")
        assert [answer_id(s) for _ in range(4)] == [1, 2, 3, 4]
        # The connection serves on as before.
        s.sendall(api_versions(5, "now"))
        assert answer_id(s) == 5


def test_at_most_max_later_answers_wait_on_a_connection():
    count = MAX_LATER + 3
    with serving(Deferring) as (server, loop, address), socket.create_connection(address, timeout=10) as s:
        s.sendall(b"".join(api_versions(i, f"later-{i}") for i in range(count)))
        assert wait_for(lambda: len(server.names) == MAX_LATER)
        time.sleep(0.3)
        assert len(server.names) == MAX_LATER, "more requests read than MAX_LATER answers may wait"
        go(server, loop, "later-0")
        assert answer_id(s) == 0
        assert wait_for(lambda: len(server.names) == MAX_LATER + 1)
        for i in range(1, count):
            go(server, loop, f"later-{i}")
        assert [answer_id(s) for _ in range(1, count)] == list(range(1, count))


def test_a_later_answer_that_fails_is_an_error_answer_in_its_turn():
    with serving(Deferring) as (server, loop, address), socket.create_connection(address, timeout=10) as s:
        s.sendall(api_versions(1, "later-fails") + api_versions(2, "now"))
        assert wait_for(lambda: len(server.names) == 2)
        go(server, loop, "later-fails")
        assert answer_of(s) == (1, 56)           # KAFKA_STORAGE_ERROR, and the connection stays
        assert answer_id(s) == 2


def test_a_half_closed_client_gets_its_answers_still_to_come():
    with serving(Deferring) as (server, loop, address), socket.create_connection(address, timeout=10) as s:
        s.sendall(api_versions(1, "later-1") + api_versions(2, "now"))
        s.shutdown(socket.SHUT_WR)
        assert wait_for(lambda: len(server.names) == 2)
        go(server, loop, "later-1")
        assert [answer_id(s), answer_id(s)] == [1, 2]
        assert s.recv(1) == b""                  # then the server closes


def test_a_reset_connection_cancels_the_answers_still_to_come(caplog):
    with serving(Deferring) as (server, loop, address):
        with caplog.at_level(logging.WARNING, logger="storage.wire"), \
                socket.create_connection(address, timeout=10) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))     # close = reset
            s.sendall(api_versions(1, "later-1") + api_versions(2, "later-2"))
            assert wait_for(lambda: len(server.names) == 2)
        assert wait_for(lambda: sorted(server.cancelled) == ["later-1", "later-2"]), server.cancelled
        assert wait_for(lambda: on_loop(loop, lambda: len(server._handlers)) == 0)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_later_answer_that_cannot_be_built_closes_the_connection(caplog, monkeypatch):
    def unbuildable(self, *args):
        raise RuntimeError("no answer")
    with serving(Deferring) as (server, loop, address), socket.create_connection(address, timeout=10) as s:
        monkeypatch.setattr(Deferring, "_error_response", unbuildable)
        with caplog.at_level(logging.ERROR, logger="storage.wire"):
            s.sendall(api_versions(1, "later-fails") + api_versions(2, "later-2"))
            assert wait_for(lambda: len(server.names) == 2)
            go(server, loop, "later-fails")
            assert s.recv(1) == b""                  # closed, nothing answered
            assert wait_for(lambda: "later-2" in server.cancelled)      # the wait behind it cancelled
        assert any("no answer could be built" in r.getMessage() for r in caplog.records)
