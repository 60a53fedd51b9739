"""The express path of a Produce (storage/wire/express.py): what it serves is answered and
written byte for byte as the general path (dispatch -> ClientApis.produce -> the encoder) does,
and everything it must not take goes the general way.

Each test sends the same frames to two in-process brokers, one with the express path and one
without (server.express = None), over one connection -- one request at a time (served from the
receive callback: FrameServer._now) and pipelined (the connection's task: _requests) -- then
compares every answer and every partition's log bytes.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.config import LogConfig  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.wire import codec, produce_codec  # noqa: E402
from tests.wire_support import _read, loop_thread, on_loop  # noqa: E402

TOPIC = "ex"
PARTITIONS = 2


@contextlib.contextmanager
def broker(root, express: bool = True, authorizer=None, limits=None):
    """An in-process BrokerServer (its loop in a thread): (server, loop, port)."""
    from storage.wire.node import Node
    from storage.wire.server import BrokerServer

    produce_codec._RECENT.clear()     # the shapes read so far (process-wide): each broker starts knowing none
    loop = asyncio.new_event_loop()
    node = Node(root, offsets_partitions=1, background=False, log_config=LogConfig(fsync=False),
                authorizer=authorizer)
    server = BrokerServer(node, initial_rebalance_delay_ms=0, limits=limits)
    loop.run_until_complete(node.create_topic(TOPIC, PARTITIONS, 1))
    for key, p in node.manager.partitions.items():      # a log start above 0: the answers carry it
        if key[0] == TOPIC:
            p.log.append_as_leader(build_batch([b"old"] * 2, base_timestamp=1_600_000_000_000), p.leader_epoch)
            p.log.update_high_watermark(2)
            p.log.increment_log_start_offset(1 + key[1])
    server.serve_groups()
    if not express:
        server.express = None
    with loop_thread(server, loop, closing=node.shutdown) as port:
        yield server, loop, port


def frame(correlation_id: int, version: int = 9, acks: int = 1, partition: int = 0, records: bytes | None = None,
          topic: str = TOPIC, transactional_id: str | None = None) -> tuple[bytes, int]:
    """(a Produce frame, its acks)."""
    if records is None:
        records = build_batch([b"v%d" % correlation_id] * 3, base_timestamp=1_700_000_000_000)
    return codec.encode_request(0, version, correlation_id, "express-test", {
        "transactional_id": transactional_id, "acks": acks, "timeout": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}), acks


def frame_of_parts(correlation_id: int, parts: list[int], version: int = 9, acks: int = 1) -> tuple[bytes, int]:
    """(a Produce frame of one topic's `parts` (partition indexes, in order), its acks)."""
    records = [build_batch([b"p%d-%d" % (correlation_id, i)] * 2, base_timestamp=1_700_000_000_000) for i in parts]
    return codec.encode_request(0, version, correlation_id, "express-test", {
        "transactional_id": None, "acks": acks, "timeout": 1000, "topic_data": [{"name": TOPIC, "partition_data": [
            {"index": i, "records": r} for i, r in zip(parts, records)]}]}), acks


def answers(port: int, frames: list[tuple[bytes, int]], pipelined: bool) -> list[bytes | None]:
    """The answer frames (size included) to `frames` ((frame, acks) pairs), None for a request
    that gets none (acks=0)."""
    out: list[bytes | None] = []
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if pipelined:
            s.sendall(b"".join(f for f, _ in frames))
        for f, acks in frames:
            if not pipelined:
                s.sendall(f)
            if acks == 0:
                out.append(None)
                continue
            head = _read(s, 4)
            assert head is not None, "the broker closed the connection"
            out.append(head + _read(s, struct.unpack(">i", head)[0]))
    return out


def logs(server, loop) -> dict:
    def read():
        manager = server.node.manager
        return {key: bytes(p.log.read(p.log.log_start_offset, 1 << 24) or b"")
                for key, p in sorted(manager.partitions.items()) if key[0] == TOPIC}
    return on_loop(loop, read)


def both(tmp_path, frames: list[bytes], pipelined: bool):
    """(answers, logs, express requests taken) from an express broker and a general one."""
    out = []
    for express in (True, False):
        with broker(tmp_path / f"{express}-{pipelined}", express) as (server, loop, port):
            got = answers(port, frames, pipelined)
            taken = server.express.taken if express else 0
            out.append((got, logs(server, loop), taken))
    return out


LAST = codec.SUPPORTED[0][2]         # the last Produce version served


def common_frames() -> list[tuple[bytes, int]]:
    """Each version served from 5 on (flexible from 9), acks 1 and 0, both partitions: each shape three
    times in a row (its first goes the general way: read_request learns the shape)."""
    frames, cid = [], 0
    for version in range(5, LAST + 1):
        for acks in (1, 0):
            for partition in range(PARTITIONS):
                for _ in range(3):
                    cid += 1
                    frames.append(frame(cid, version, acks, partition))
    return frames + [frame(cid + 1, LAST)]     # answered once all before it were served (acks=0 has no answer)


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-at-a-time", "pipelined"])
def test_the_common_requests_answered_and_written_as_the_general_path(tmp_path, pipelined):
    frames = common_frames()
    (fast, fast_logs, taken), (general, general_logs, _) = both(tmp_path, frames, pipelined)
    assert fast == general
    assert fast_logs == general_logs
    assert all(len(b) > 0 for b in fast_logs.values())
    # (versions x 2 acks x 2 partitions) shapes, each seen three times: two of three go express;
    # the last frame's shape was read four shapes before it (produce_codec remembers four)
    assert taken == (len(frames) - 1) * 2 // 3 + 1


def test_a_broker_that_served_express_starts_again_with_what_it_wrote(tmp_path):
    """The express path's appends are the broker's: after it served the common requests and shut
    down, a broker opened on the same dir holds the same log bytes, log end and high watermark."""
    from storage.wire.node import Node

    with broker(tmp_path / "b") as (server, loop, port):
        answers(port, common_frames(), pipelined=True)
        assert server.express.taken > 0
        before = logs(server, loop)
        ends = {k: (p.log.log_end_offset, p.log.high_watermark) for k, p in server.node.manager.partitions.items()
                if k[0] == TOPIC}
    node = Node(tmp_path / "b", offsets_partitions=1, background=False, log_config=LogConfig(fsync=False))
    try:
        parts = {k: p for k, p in node.manager.partitions.items() if k[0] == TOPIC}
        assert {k: bytes(p.log.read(p.log.log_start_offset, 1 << 24) or b"") for k, p in parts.items()} == before
        assert {k: (p.log.log_end_offset, p.log.high_watermark) for k, p in parts.items()} == ends
    finally:
        asyncio.run(node.shutdown())


def test_errors_and_refusals_answered_as_the_general_path(tmp_path):
    """The answers with an error (a partition the topic lacks, a batch whose CRC is wrong: record
    errors), the requests the rules refuse (a control batch, an internal topic), and the ones it
    never takes (acks=-1, a transactional id, v3 and v4): the same bytes either way."""
    good = build_batch([b"x"] * 2, base_timestamp=1_700_000_000_000)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF             # the last record's byte: the CRC no longer matches
    control = bytearray(good)
    control[22] |= 0x20             # attributes' control bit (PLOG_ATTR_CONTROL)
    kinds = [dict(partition=7), dict(records=bytes(corrupt)), dict(records=bytes(control)), dict(acks=-1),
             dict(transactional_id="tx"), dict(version=3), dict(version=4), dict(topic="__consumer_offsets"), {}]
    frames = [frame(10 * k + i, **kind) for k, kind in enumerate(kinds, 1) for i in range(3)]
    for pipelined in (False, True):
        (fast, fast_logs, taken), (general, general_logs, _) = both(tmp_path, frames, pipelined)
        assert fast == general
        assert fast_logs == general_logs
        # express: the second and third of the unknown partition's, the corrupt batch's and the good shape
        assert taken == 6
        codes = [codec.decode_response(0, 9, general[i][4:])[1].responses[0].partition_responses[0].error_code
                 for i in (0, 1, 3, 4, 6, 7, 24, 25)]
        assert codes == [3, 3, 2, 2, 87, 87, 0, 0]   # UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE, INVALID_RECORD


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-at-a-time", "pipelined"])
def test_requests_of_several_partitions_answered_as_the_general_path(tmp_path, pipelined):
    """A producer writing to several partitions of a topic: each request names those with a batch
    ready (one, both, one twice); one naming a partition the topic lacks gets its error row among
    the others' (the general encoder; with acks=0 that error closes the connection, so acks=0
    names [1, 0, 1] there); v5 to the last version, acks 1 and 0."""
    shapes = [[0, 1], [1], [0, 1, 0], [1, 0], [0, 7, 1], [0, 1]]
    frames, cid = [], 0
    for version in range(5, LAST + 1):
        for acks in (1, 0):
            for parts in shapes:
                cid += 1
                frames.append(frame_of_parts(cid, parts if acks or 7 not in parts else [1, 0, 1], version, acks))
    frames.append(frame_of_parts(cid + 1, [0, 1], LAST))
    (fast, fast_logs, taken), (general, general_logs, _) = both(tmp_path, frames, pipelined)
    assert fast == general
    assert fast_logs == general_logs
    # each (version, acks): the first request of two partitions teaches the topic's shape (read
    # through its name); the five after it, [1] too, start as it and go express
    assert taken == (len(frames) - 1) // len(shapes) * 5 + 1
    versions = [v for v in range(5, LAST + 1) for _ in range(2 * len(shapes))] + [LAST]
    codes = [[p.error_code for p in codec.decode_response(0, v, a[4:])[1].responses[0].partition_responses]
             for a, v in zip(general, versions) if a is not None]
    assert codes.count([0, 3, 0]) == LAST - 4       # UNKNOWN_TOPIC_OR_PARTITION among the others (acks=1)


def test_acls_checked_first(tmp_path):
    """With an authorizer the express path serves only a session that may WRITE the topic
    (authz.produce_passes); any other is left to the general path, which refuses it."""
    from storage.wire.authorizer import Authorizer
    for principals, taken, code in (({"User:ANONYMOUS"}, 4, 0), ((), 0, 29)):     # 29: TOPIC_AUTHORIZATION_FAILED
        with broker(tmp_path / f"acl-{taken}", authorizer=Authorizer(super_users=principals)) as (server, _, port):
            got = answers(port, [frame(i) for i in range(1, 6)], pipelined=False)
            assert server.express.taken == taken
        codes = [codec.decode_response(0, 9, a[4:])[1].responses[0].partition_responses[0].error_code for a in got]
        assert codes == [code] * 5


def test_the_express_count_is_logged_at_the_end(tmp_path, caplog):
    """An operator reads how many Produce requests the express path served in the broker's last
    lines, beside the versions served."""
    caplog.set_level(logging.INFO, logger="storage.wire")
    with broker(tmp_path / "count") as (server, loop, port):
        answers(port, [frame(i) for i in range(1, 5)], pipelined=True)
    assert "Produce requests served by the express path: 3" in caplog.text
    assert "served: Produce v9 x4" in caplog.text


def test_not_taken_while_debug_logging(tmp_path, caplog):
    """DEBUG logging on: every request is logged by the general path, so none goes express."""
    caplog.set_level(logging.DEBUG, logger="storage.wire")
    with broker(tmp_path / "debug") as (server, loop, port):
        answers(port, [frame(i) for i in range(1, 5)], pipelined=True)
        assert server.express.taken == 0
    assert sum(r.getMessage().startswith("Produce v9 #") for r in caplog.records) == 4


def test_a_handler_that_raises_answers_as_the_general_path(tmp_path, monkeypatch):
    """An exception in the replica manager (a bug) gets the general path's error answer
    (UNKNOWN_SERVER_ERROR on the partition) and the connection stays open."""
    from storage.replication.replica import ReplicaManager

    def broken(self, request, callback=None):
        raise RuntimeError("injected")
    out = []
    for express in (True, False):
        with broker(tmp_path / f"raise-{express}", express) as (server, loop, port):
            first = answers(port, [frame(1)], pipelined=False)       # learns the shape
            monkeypatch.setattr(ReplicaManager, "handle_produce", broken)
            out.append(first + answers(port, [frame(2), frame(3)], pipelined=False))
            monkeypatch.undo()
            assert (server.express.taken if express else 2) == 2
    assert out[0] == out[1]
    codes = [codec.decode_response(0, 9, a[4:])[1].responses[0].partition_responses[0].error_code for a in out[0]]
    assert codes == [0, -1, -1]
