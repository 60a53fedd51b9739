"""Session 40's review: findings on the merged change, each a test that failed before its fix.

The acks=0 close (later.Close) behind an answer still to come: Kafka mutes a connection while
one of its requests is processed (SocketServer's Processor reads the next only once the answer
went), so every request before the failing acks=0 Produce is answered before closeConnection.
Here an acks=-1 Produce that waits for a follower answers later (a Later), and the connection
may serve the next frame meanwhile: the close must wait for that answer, not cancel it.
"""
from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.errors import Errors  # noqa: E402
from storage.replication.fetch_answers import FollowerState  # noqa: E402
from storage.wire import codec  # noqa: E402
from tests.wire.test_express import TOPIC, broker, frame  # noqa: E402
from tests.wire_support import _read, on_loop  # noqa: E402


def _with_a_silent_follower(server, loop) -> None:
    """Partition 0 of TOPIC has a follower (99) in its ISR that never fetches: an acks=-1
    Produce waits for its timeout (600 ms), answered by a Later."""
    def add():
        p = server.node.manager.partitions[(TOPIC, 0)]
        p.isr, p.replicas = p.isr + [99], p.replicas + [99]
        p.followers[99] = FollowerState(99, log_end_offset=p.log.log_end_offset)
        server.node.manager.produce_timeout_ms = 600
    on_loop(loop, add)


@pytest.mark.parametrize("pipelined", [False, True], ids=["apart", "pipelined"])
@pytest.mark.parametrize("express", [True, False], ids=["express", "general"])
def test_an_acks_zero_close_sends_the_answers_still_to_come_first(tmp_path, express, pipelined):
    """An acks=-1 Produce that waits, then an acks=0 Produce to an internal topic (an error: the
    connection closes): the first is answered (REQUEST_TIMED_OUT at its timeout, which the test's
    tick expires: this broker runs no background work), then the close.
    Apart: the bad Produce arrives while the first waits (served from the protocol's callback);
    pipelined: both in one write."""
    with broker(tmp_path, express) as (server, loop, port):
        for i in (1, 2, 3):     # the express path learns the acks=0 shape
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(frame(i, acks=0, topic="__consumer_offsets")[0])
                assert _read(s, 1) is None
        _with_a_silent_follower(server, loop)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            waits, bad = frame(10, acks=-1)[0], frame(11, acks=0, topic="__consumer_offsets")[0]
            if pipelined:
                s.sendall(waits + bad)
            else:
                s.sendall(waits)
                time.sleep(0.2)         # the acks=-1 Produce waits; the next frame is served
                s.sendall(bad)
            time.sleep(0.7)
            on_loop(loop, server.node.manager.tick)     # the periodic work expires the wait
            head = _read(s, 4)
            answer = None if head is None else _read(s, struct.unpack(">i", head)[0])
            rest = _read(s, 1)
    assert answer is not None, "the acks=-1 Produce's answer was dropped by the close"
    assert struct.unpack(">i", answer[:4])[0] == 10
    _, body = codec.decode_response(0, 9, answer)
    assert body.responses[0].partition_responses[0].error_code == Errors.REQUEST_TIMED_OUT, body
    assert rest is None


@pytest.mark.parametrize("fails", [False, True], ids=["error-row", "raises"])
def test_an_acks_zero_close_from_a_handler_that_waited(tmp_path, fails):
    """A Produce begun from the protocol's callback (FrameServer._now) whose handler waits
    answers through a future (FrameServer._rest); for acks=0 with an error that answer is a
    later.Close -- an error row, or the handler raising (Kafka's getErrorResponse is null for
    acks=0) -- and the connection must close there, not try to write the Close as bytes."""
    with broker(tmp_path, False) as (server, loop, port):
        original = server.handlers[0]

        async def slow(header, request):
            await asyncio.sleep(0.01)       # the handler waits: its answer comes through a future
            if fails:
                raise RuntimeError("injected")
            return await original(header, request)
        on_loop(loop, lambda: server.handlers.__setitem__(0, slow))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(frame(1, acks=0, topic="__consumer_offsets")[0])
            time.sleep(0.3)
            try:
                s.sendall(frame(2)[0])          # never served: the connection closed before it
            except (BrokenPipeError, ConnectionResetError):
                pass
            try:
                got = _read(s, 1)
            except ConnectionResetError:
                got = None
    assert got is None
