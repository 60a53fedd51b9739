"""Adversarial checks of the Produce express path (storage/wire/express.py, FrameServer._now,
Connection._serve_eagerly) against the general path, with test_express.py's two brokers
(express on, and server.express = None): what one connection's frames get must not depend on
which path served them -- the answers, the logs, and the connection's limits."""
from __future__ import annotations

import socket
import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.wire.limits import ConnectionLimits  # noqa: E402
from tests.wire.test_express import TOPIC, broker, frame, logs  # noqa: E402
from tests.wire_support import _read, on_loop  # noqa: E402

STALL_BYTES = 5000          # a frame another client announces and does not finish: it holds the memory


def _answer(s: socket.socket) -> bytes:
    head = _read(s, 4)
    assert head is not None, "the broker closed the connection"
    return head + _read(s, struct.unpack(">i", head)[0])


def _until(loop, fn, what: str, rounds: int = 400) -> None:
    """Poll fn() on the broker's loop until true (bounded: ~10 s)."""
    import time
    for _ in range(rounds):
        if on_loop(loop, fn):
            return
        time.sleep(0.025)
    raise AssertionError(f"never: {what}")


def test_queued_max_request_bytes_holds_a_known_produce_as_the_general_path(tmp_path):
    """queued.max.request.bytes taken by another client's unfinished frame: a Produce of a shape
    read before waits for memory as any request does (Kafka mutes channels while its memory pool
    is exhausted) -- it is not answered from the receive callback ahead of the memory's waiters.
    Once the other frame is whole (and refused), it is served, the same answer either way."""
    out = []
    for express in (True, False):
        limits = ConnectionLimits(queued_max_request_bytes=1000)
        with broker(tmp_path / f"mem-{express}", express, limits=limits) as (server, loop, port):
            with socket.create_connection(("127.0.0.1", port), timeout=20) as producer, \
                    socket.create_connection(("127.0.0.1", port), timeout=20) as staller:
                first = frame(1)[0]
                producer.sendall(first)
                answers = [_answer(producer)]                   # the shape is read (the general path)
                staller.sendall(struct.pack(">i", STALL_BYTES) + b"\0" * 10)
                _until(loop, lambda: server.memory.used_bytes == STALL_BYTES, "the stalled frame reserved")
                taken = server.express.taken if express else 0
                producer.sendall(frame(2)[0])
                def served_or_waiting(express=express, taken=taken):
                    return server.memory._waiters or (express and server.express.taken > taken)
                _until(loop, served_or_waiting, "the second Produce served or waiting")
                assert on_loop(loop, lambda: len(server.memory._waiters)) == 1, "served ahead of the memory"
                staller.sendall(b"\0" * (STALL_BYTES - 10))         # whole: refused (Produce v0), closed
                answers.append(_answer(producer))
        out.append(answers)
    assert out[0] == out[1]


def test_an_answer_that_cannot_be_built_closes_the_connection_as_the_general_path(tmp_path, monkeypatch, caplog):
    """The handler raised and even its error answer cannot be built (FrameServer._error_response
    lets that go on): the request was served once, the connection is closed with the front end's
    own log line ('after an internal error') and the request pipelined behind it is not served --
    from the receive callback as from the task.  Without the guard around the express path's
    serve in FrameServer._now the exception left buffer_updated (asyncio's 'Fatal error:
    protocol.buffer_updated() call failed'), the frame stayed in the buffer and the task served
    it again (served twice, appended twice when a partition before the failing one was written),
    then the one behind it."""
    import logging

    from storage.replication.replica import ReplicaManager
    from storage.wire import error_answers

    def broken(*args, **kwargs):
        raise RuntimeError("injected")
    for express in (True, False):
        caplog.clear()
        with broker(tmp_path / f"unbuilt-{express}", express) as (server, loop, port):
            with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
                s.sendall(frame(1)[0])
                _answer(s)                                      # the shape is read
                monkeypatch.setattr(ReplicaManager, "handle_produce", broken)
                monkeypatch.setattr(error_answers, "error_body", broken)
                with caplog.at_level(logging.ERROR):
                    s.sendall(frame(2)[0] + frame(3)[0])
                    assert _read(s, 4) is None                  # closed, no answer
                monkeypatch.undo()
            served = on_loop(loop, lambda: dict(server.served))
            assert served == {(0, 9): 2}, (express, served)     # the first, and the failed one once
            assert (server.express.taken if express else 1) == 1
        closing = [r for r in caplog.records if r.name == "storage.wire" and "after an internal error" in r.getMessage()]
        assert len(closing) == 1, (express, [r.getMessage() for r in caplog.records])
        assert not [r for r in caplog.records if "buffer_updated" in r.getMessage()]


def test_has_room_is_try_reserves_test():
    """RequestMemory.has_room (the express path's test: a request served in one call) says what
    try_reserve would do, counting nothing: the limit, the overshoot of an empty pool, unlimited,
    and a waiter ahead."""
    import asyncio

    from storage.wire.limits import RequestMemory

    async def check():
        for limit, used, size in ((10, 0, 50), (10, 4, 6), (10, 4, 7), (-1, 1 << 30, 1 << 30), (10, 10, 0)):
            memory = RequestMemory(limit)
            memory.used_bytes = used
            room = memory.has_room(size)
            assert memory.used_bytes == used
            assert room == memory.try_reserve(size), (limit, used, size)
        memory = RequestMemory(10)
        await memory.reserve(8)
        waiting = asyncio.create_task(memory.reserve(5))
        await asyncio.sleep(0)
        assert not memory.has_room(1) and not memory.try_reserve(1)     # 9 fits, but one waits ahead
        memory.release(8)
        await waiting
    asyncio.run(check())


def test_requests_behind_an_answer_still_to_come_wait_alike(tmp_path, monkeypatch):
    """An acks=-1 Produce whose answer is still to come (its high watermark held), then 200
    pipelined acks=1 requests of a known shape on the same connection: at most MAX_LATER answers
    wait per connection (later.py), so each broker serves MAX_LATER - 1 of them (their answers
    queue behind the one to come) and leaves the rest in its buffer until it comes.  Before, the
    express path from the receive callback stopped there, while the general path's task served
    every whole frame already read (a bytes answer queued behind one to come was not counted) and
    stopped only at the next read -- how many it served depended on how TCP cut the stream."""
    from storage.replication.replica import ReplicaManager
    from storage.wire.later import MAX_LATER

    monkeypatch.setattr(ReplicaManager, "_maybe_increment_high_watermark", lambda self, p: False)
    records = frame(1)[0][-70:]                         # any bytes: one size for every frame
    count = 200
    for express in (True, False):
        with broker(tmp_path / f"later-{express}", express) as (server, loop, port):
            with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
                s.sendall(frame(1)[0])
                _answer(s)                              # the shape is read; answered (acks=1) at once
                s.sendall(frame(2, acks=-1)[0])
                _until(loop, lambda: sum(server.served.values()) == 2, "the acks=-1 Produce served")
                pipelined = [frame(i, records=records)[0] for i in range(3, 3 + count)]
                size = len(pipelined[0])
                assert all(len(f) == size for f in pipelined)
                s.sendall(b"".join(pipelined))

                def settled(server=server, size=size):      # every frame served or whole in the connection's buffer
                    (connection,) = server._connections
                    buffered = (connection._end - connection._head) // size
                    return sum(server.served.values()) - 2 + buffered == count
                _until(loop, settled, "every frame served or buffered")
                assert on_loop(loop, lambda: sum(server.served.values())) == 2 + MAX_LATER - 1, express
                assert on_loop(loop, lambda: len(server.node.manager._delayed)) == 1      # still to come


class _Observer:
    """The request metrics a broker's dispatch feeds (ServerMetrics' answered / failed), counted
    plainly: requests per API, error codes per API, failures per API."""

    def __init__(self) -> None:
        self.answered_, self.errors, self.failures = {}, {}, {}

    def answered(self, key: int, started: float, body) -> None:
        from storage.wire.metrics import _ERROR_WALKS, error_codes
        self.answered_[key] = self.answered_.get(key, 0) + 1
        if body is not None:
            for code in _ERROR_WALKS.get(key, error_codes)(body, []):
                self.errors[(key, code)] = self.errors.get((key, code), 0) + 1

    def failed(self, key: int, started: float, exc: BaseException) -> None:
        self.failures[key] = self.failures.get(key, 0) + 1


def _mixed_frames(seed: int, count: int) -> list[tuple[bytes, int]]:
    """`count` Produce frames drawn with `seed`: every version served (3..9), acks 0, 1 and -1, one partition or
    several (an unknown one among them), records good, empty, null, corrupt (CRC), a control batch,
    two batches, an idempotent producer's in and out of sequence (duplicates too), a transactional
    id, an internal topic (acks=0: good records to the topic's partitions only, as an error would
    close the connection); most of them repeats of a few shapes, as producers send."""
    import random

    from storage.core.records import build_batch
    from storage.wire import codec

    rng = random.Random(seed)
    good = build_batch([b"g"] * 2, base_timestamp=1_700_000_000_000)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    control = bytearray(good)
    control[22] |= 0x20
    kinds = [good] * 6 + [b"", None, bytes(corrupt), bytes(control), good + good, "idempotent"]
    sequence = [0]

    def records():
        kind = rng.choice(kinds)
        if kind != "idempotent":
            return kind
        base = rng.choice([sequence[0], sequence[0], max(0, sequence[0] - 2), sequence[0] + 5])
        if base == sequence[0]:
            sequence[0] += 2
        return build_batch([b"i"] * 2, base_timestamp=1_700_000_000_000, producer_id=7, producer_epoch=0,
                           base_sequence=base)
    shapes = [(rng.choice([9, 9, 9, 5, 6, 7, 8, 3, 4]), rng.choice([1, 1, 0, -1]),
               rng.choice([[0], [1], [0], [0, 1], [1, 0, 7], [7]]), rng.choice([None] * 9 + ["tx"]),
               rng.choice([TOPIC] * 12 + ["__consumer_offsets"])) for _ in range(8)]
    frames = []
    for cid in range(1, count + 1):
        version, acks, parts, txn, topic = rng.choice(shapes)
        if rng.random() < 0.1:
            parts = rng.choice([[0], [1], [1, 0]])
        rows = [{"index": i, "records": records()} for i in parts]
        if acks == 0:       # an error closes an acks=0 producer's connection (test_wire_validate.py): none here
            topic, rows = TOPIC, [{"index": i, "records": good} for i in parts if i != 7] or [{"index": 0, "records": good}]
        body = {"transactional_id": txn, "acks": acks, "timeout": 1000, "topic_data": [
            {"name": topic, "partition_data": rows}]}
        frames.append((codec.encode_request(0, version, cid, "mixed", body), acks))
    return frames


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_mixed_stream_cut_anywhere_is_answered_counted_and_written_as_the_general_path(tmp_path, seed):
    """A random mix of Produce requests (_mixed_frames), sent whole, one at a time, and cut in
    random pieces: the answers, the logs, the requests counted per version and the request metrics
    (requests, error codes, failures) are the same with the express path as without it."""
    import random
    import time

    frames = _mixed_frames(seed, 160)
    data = b"".join(f for f, _ in frames)
    out = []
    for express in (True, False):
        got = []
        with broker(tmp_path / f"mixed-{express}", express) as (server, loop, port):
            observer = server.observer = _Observer()
            with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                rng, at = random.Random(seed), 0
                while at < len(data):               # pieces of 1 byte to 3 frames
                    step = rng.choice([1, 7, 60, 300, 2000])
                    s.sendall(data[at:at + step])
                    at += step
                    if rng.random() < 0.05:
                        time.sleep(0.002)
                got += [_answer(s) for _, acks in frames if acks != 0]
            written = logs(server, loop)
            counted = on_loop(loop, lambda: (dict(server.served), dict(server.handler_errors)))
            taken = server.express.taken if express else None
        out.append((got, written, counted, (observer.answered_, observer.errors, observer.failures)))
        if express:
            assert taken > 0
    assert out[0] == out[1]


def test_sasl_gates_a_shape_read_on_another_connection(tmp_path):
    """The shapes read are process-wide: a Produce frame byte for byte like one read elsewhere,
    sent on a SASL_PLAINTEXT connection before authentication, closes it unanswered (Kafka's
    SaslServerAuthenticatorTest.testUnexpectedRequestType), and one pipelined behind a failed PLAIN
    exchange is never served (the exchange's answers, then the close); nothing is written and the
    express path takes neither."""
    pytest.importorskip("confluent_kafka")
    pytest.importorskip("scramp")
    from storage.wire import codec, produce_codec
    from tests.wire.test_wire_sasl import InProcessBroker

    b = InProcessBroker(tmp_path / "sasl")
    try:
        b.call(b.node.create_topic(TOPIC, 1, 1))
        produce_codec._RECENT.clear()
        assert produce_codec.read_request(frame(1)[0][4:]) is not None        # the shape, read elsewhere
        with socket.create_connection(("127.0.0.1", b.node.port), timeout=10) as s:
            s.sendall(frame(2)[0])
            assert _read(s, 4) is None
        with socket.create_connection(("127.0.0.1", b.node.port), timeout=10) as s:
            s.sendall(codec.encode_request(17, 1, 3, "raw", {"mechanism": "PLAIN"})
                      + codec.encode_request(36, 2, 4, "raw", {"auth_bytes": b"\0alice\0wrong"}) + frame(5)[0])
            assert codec.decode_response(17, 1, _answer(s)[4:])[1].error_code == 0
            assert codec.decode_response(36, 2, _answer(s)[4:])[1].error_code != 0
            assert _read(s, 4) is None
        assert b.server.express.taken == 0
        assert b.log_end(TOPIC) == 0
        assert b.call(_served(b.server)) == {(17, 1): 1, (36, 2): 1}
    finally:
        b.close()


async def _served(server) -> dict:
    return dict(server.served)


def test_a_topic_deleted_and_created_again_mid_stream(tmp_path):
    """A producer's known shape keeps coming while its topic is deleted (UNKNOWN_TOPIC_OR_PARTITION,
    the general encoder) and created again with fewer partitions (partition 1 unknown, partition 0
    written from offset 0, log start 0 in the answers): the same answers and logs either way."""
    import asyncio

    out = []
    for express in (True, False):
        with broker(tmp_path / f"recreate-{express}", express) as (server, loop, port):
            got = []
            with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
                def ask(cid, partition, s=s, got=got):
                    s.sendall(frame(cid, partition=partition)[0])
                    got.append(_answer(s))
                for cid in range(1, 4):
                    ask(cid, cid % 2)
                asyncio.run_coroutine_threadsafe(server.node.delete_topic(TOPIC), loop).result(10)
                for cid in range(4, 7):
                    ask(cid, cid % 2)
                asyncio.run_coroutine_threadsafe(server.node.create_topic(TOPIC, 1, 1), loop).result(10)
                for cid in range(7, 12):
                    ask(cid, cid % 2)
            out.append((got, logs(server, loop)))
            taken = server.express.taken if express else 0
        if express:
            assert taken >= 6
    assert out[0] == out[1]
    from storage.wire import codec
    codes = [codec.decode_response(0, 9, a[4:])[1].responses[0].partition_responses[0].error_code for a in out[0][0]]
    assert codes == [0, 0, 0, 3, 3, 3, 3, 0, 3, 0, 3]
