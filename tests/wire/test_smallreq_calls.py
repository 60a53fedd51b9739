"""The one-record Produce's cost in the front end (issue 33's latency row): a request served one
at a time over a loopback socket enters few Python frames of the wire layer, and no frame of the
connection's task.

A one-record Produce (acks=1) answered one at a time pays, per request, what pipelined requests
share: the wake of the connection's task, the walk from its bytes to the handler and back, the
answer's write.  Counted with a profile hook on the event loop's thread (every frame entered and
every coroutine resumed is one "call" event), per request, by module: storage/wire's own frames
(the server, the connection, the Produce codec and handler) are at most WIRE_FRAMES_MAX; the
replication layer's and the engine's are not counted here (tests/log/test_append_one_frame.py
counts the append's), but for handle_produce's few (test_the_express_path_makes_no_produce_objects).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import struct
import sys

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.records import build_batch  # noqa: E402
from storage.wire import codec  # noqa: E402
from tests.wire_support import _read, loop_thread, on_loop  # noqa: E402

WIRE = os.sep + os.path.join("storage", "wire") + os.sep
REQUESTS = 200
# storage/wire frames entered or resumed per one-record Produce served one at a time (acks=1): 50
# before the small-request pass (session 38), 35 after (the request served where its bytes
# arrive: no wake of the connection's task, no frame of its wait), 24 with the express path
# (storage/wire/express.py: no dispatch, no handler coroutine, no request or answer objects), 26
# with its pump and metrics; 22 once Broker.pump left the link alone when no AlterPartition
# request waits, the rows were no list of answers and Connection.answer read the next frame's
# size inline (session 40).
WIRE_FRAMES_MAX = 22
REPLICATION = os.sep + os.path.join("storage", "replication") + os.sep
# storage/replication frames a request entered by the express path: 14 (handle_produce, its
# answer closure, _went_offline, offline x2, _led, _check_epoch, recovering, _moved x2, the high
# watermark's step, _min_isr, waiting, take_alter_partition_requests), 7 with handle_produce's
# tuple form (session 40: the checks inline, no objects, no AlterPartition list taken).
REPLICATION_FRAMES_MAX = 7


@contextlib.contextmanager
def broker(tmp_path):
    """An in-process BrokerServer on 127.0.0.1 (its loop in a thread of its own): (server, loop, port)."""
    from storage.wire.node import Node
    from storage.wire.server import BrokerServer

    loop = asyncio.new_event_loop()
    node = Node(tmp_path / "n", offsets_partitions=1, background=False)
    server = BrokerServer(node, initial_rebalance_delay_ms=0)
    loop.run_until_complete(node.create_topic("lat", 1, 1))
    server.serve_groups()
    with loop_thread(server, loop, closing=node.shutdown) as port:
        yield server, loop, port


def produce_frame(correlation_id: int, acks: int = 1) -> bytes:
    return codec.encode_request(0, 9, correlation_id, "c", {"transactional_id": None, "acks": acks, "timeout": 1000,
                                "topic_data": [{"name": "lat", "partition_data": [
                                    {"index": 0, "records": build_batch([b"v" * 1024])}]}]})


def round_trip(s: socket.socket, frame: bytes) -> tuple[int, int, int]:
    """(correlation id, error code, base offset) of the answer to `frame`."""
    s.sendall(frame)
    head = _read(s, 4)
    assert head is not None, "the broker closed the connection"
    correlation_id, body = codec.decode_response(0, 9, _read(s, struct.unpack(">i", head)[0]))
    row = body.responses[0].partition_responses[0]
    return correlation_id, int(row.error_code), row.base_offset


def frames_per_request(tmp_path, acks: int = 1, counted=lambda code: WIRE in code.co_filename
                       ) -> tuple[collections.Counter, list]:
    """The Python frames entered (of code objects `counted`: storage/wire's) per request, by
    function, over REQUESTS one-record Produce requests served one at a time, and the answers."""
    counts: collections.Counter = collections.Counter()

    def profile(frame, event, arg):
        if event == "call" and counted(frame.f_code):
            counts[frame.f_code.co_name] += 1

    with broker(tmp_path) as (server, loop, port), socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answers = [round_trip(s, produce_frame(i, acks)) for i in range(20)]       # warm: the shapes known
        on_loop(loop, lambda: sys.setprofile(profile))
        try:
            answers += [round_trip(s, produce_frame(20 + i, acks)) for i in range(REQUESTS)]
        finally:
            on_loop(loop, lambda: sys.setprofile(None))
    return counts, answers


def test_a_one_record_produce_enters_few_wire_frames(tmp_path):
    counts, answers = frames_per_request(tmp_path)
    assert answers == [(i, 0, i) for i in range(20 + REQUESTS)]       # in order, each appended after the last
    per_request = sum(counts.values()) / REQUESTS
    assert per_request <= WIRE_FRAMES_MAX, f"{per_request:.2f} frames a request: {sorted(counts.items())}"
    # the connection's task is not woken per request (FrameServer._now serves it from the callback)
    assert counts["_requests"] + counts["wait_size"] + counts["_dispatch"] <= 3, sorted(counts.items())


def test_the_express_path_makes_no_produce_objects(tmp_path):
    """The express path hands ReplicaManager.handle_produce the tuple (topic, partition, records)
    and gets a tuple back: per request no ProduceRequest or ProduceResponse is made, and the
    replication layer enters at most REPLICATION_FRAMES_MAX frames (its checks are the general
    path's, inline; the answers are the same: test_express.py compares both paths)."""
    from storage.replication.messages import ProduceRequest, ProduceResponse
    made = {ProduceRequest.__init__.__code__: "ProduceRequest", ProduceResponse.__init__.__code__: "ProduceResponse"}
    counts, answers = frames_per_request(tmp_path, counted=lambda code: code in made or REPLICATION in code.co_filename)
    assert answers == [(i, 0, i) for i in range(20 + REQUESTS)]
    assert counts["__init__"] == 0, sorted(counts.items())      # the only __init__ counted: those two
    per_request = sum(counts.values()) / REQUESTS
    assert per_request <= REPLICATION_FRAMES_MAX, f"{per_request:.2f} frames a request: {sorted(counts.items())}"
