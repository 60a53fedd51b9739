"""The fixed cost of one Fetch request in the broker (issue 33, fetchcost): the Python calls a
consumer's Fetch v16 makes in the fetch path's own code (apis.fetch and its helpers, the
request's read, the answer's encode, the long poll, the fetch session's context), counted with
sys.setprofile around one request dispatched to an embedded broker.  Each call costs ~0.1-0.3 us
of the ~170 us a request costs the broker; the bounds keep the cuts made (the counts before
them in the asserts' messages).  The answers stay exact: tests/wire/test_fetch_answer.py and
test_fetch_request_read.py check the bytes against kio."""
from __future__ import annotations

import asyncio
import sys

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.wire import codec  # noqa: E402
from tests.wire.test_fetch_zero_copy import Embedded, _fetch_body  # noqa: E402

FETCH_FILES = ("storage/wire/apis.py", "storage/wire/fetch_request.py", "storage/wire/fetch_answer.py",
               "storage/wire/waiters.py", "storage/wire/fetch_sessions.py", "storage/core/varint.py")


def _calls(server, frame: bytes, loop) -> tuple[int, bytes]:
    """(Python calls into the fetch files while `frame` is dispatched, the answer)."""
    counted = [0]

    def profile(frame_, event, arg):
        if event == "call" and frame_.f_code.co_filename.endswith(FETCH_FILES):
            counted[0] += 1

    async def one():
        sys.setprofile(profile)
        try:
            return await server._dispatch(frame)
        finally:
            sys.setprofile(None)

    answer = loop.run_until_complete(one())
    return counted[0], answer


@pytest.fixture
def embedded(tmp_path):
    loop = asyncio.new_event_loop()
    broker = Embedded(tmp_path / "node", loop)
    try:
        yield broker
    finally:
        broker.close()
        loop.close()


def _frame(broker, offset: int) -> bytes:
    body = _fetch_body(offset, broker.node.topic_id("t"), partition_max_bytes=1 << 20)
    body.update(rack_id="", min_bytes=1)
    return codec.encode_request(1, 16, 7, "rdkafka", body)[4:]


def test_an_empty_fetch_at_the_log_end_makes_few_calls(embedded):
    embedded.produce(1)
    frame = _frame(embedded, 16)                # at the log end, max_wait 0: an empty answer
    _calls(embedded.server, frame, embedded.loop)           # warm (first-use caches)
    calls, answer = _calls(embedded.server, frame, embedded.loop)
    _, body = codec.decode_response(1, 16, answer[4:])
    part = body.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, len(part.records or b"")) == (0, 16, 0)
    assert calls <= 16, f"{calls} calls in the fetch files (49 before fetchcost)"


def test_a_fetch_of_one_batch_makes_few_calls(embedded):
    embedded.produce(1)
    frame = _frame(embedded, 0)
    _calls(embedded.server, frame, embedded.loop)
    calls, answer = _calls(embedded.server, frame, embedded.loop)
    _, body = codec.decode_response(1, 16, answer[4:])
    part = body.responses[0].partitions[0]
    assert part.records is not None and len(part.records) > 16 * 1000
    assert calls <= 16, f"{calls} calls in the fetch files (49 before fetchcost)"


def test_a_partitions_error_stays_in_its_partition(embedded):
    """The answer's top-level error code is the fetch session's (Kafka's FetchResponse.of(NONE,
    ...) in KafkaApis.handleFetchRequest), not the last partition's: a v16 fetch of a partition
    the topic lacks after one it has answers NONE at the top (it answered 3 before fetchcost)."""
    embedded.produce(1)
    body = _fetch_body(0, embedded.node.topic_id("t"))
    body["topics"][0]["partitions"].append({**body["topics"][0]["partitions"][0], "partition": 9})
    body.update(rack_id="", min_bytes=1)
    answer = embedded.loop.run_until_complete(embedded.server._dispatch(codec.encode_request(1, 16, 7, "c", body)[4:]))
    _, got = codec.decode_response(1, 16, answer[4:])
    assert got.error_code == 0
    assert [(p.partition_index, p.error_code) for p in got.responses[0].partitions] == [(0, 0), (9, 3)]
