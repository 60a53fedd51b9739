"""fetch_response, the follower's hand reader of the Fetch response (v12-v16), against kio's
decode (codec.decode_response): answers laid out by kio's writer over many shapes (hypothesis,
the shapes of tests/wire/test_fetch_answer.py) and by the broker's own writer (fetch_answer) are
read as kio reads them, attribute by attribute, the records a view of the frame; a frame cut,
flipped or grown reads as kio reads it or is left to kio; and a follower of a real cluster
replicates through it."""
from __future__ import annotations

import dataclasses
import random
import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_fetch_answer import BODY  # noqa: E402

from storage.wire import codec, fetch_answer, fetch_response  # noqa: E402
from storage.wire.request_header import NotOurs  # noqa: E402

VERSIONS = range(fetch_response.FIRST_VERSION, fetch_response.LAST_VERSION + 1)
SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def plain(value):
    """kio's entity (or the reader's object) as nested plain values: error codes as ints, the
    records as bytes, each entity a dict of the attributes it has."""
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, fetch_response.Entity):
        return {k: plain(getattr(value, k)) for cls in type(value).__mro__ for k in getattr(cls, "__slots__", ())
                if hasattr(value, k)}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, int):
        return int(value)
    return value


def kio_frame(version: int, correlation_id: int, body: dict) -> bytes:
    return codec.encode_response(fetch_answer.API_KEY, version, correlation_id, body)[4:]


def own_frame(version: int, correlation_id: int, body: dict) -> bytes:
    answer = fetch_answer.encode(fetch_answer.API_KEY, version, correlation_id, body)
    return (answer if isinstance(answer, bytes) else answer.join())[4:]


def kio_or_error(version: int, frame: bytes):
    try:
        return plain(codec.decode_response(fetch_answer.API_KEY, version, frame))
    except Exception as exc:        # what Peer.call turns into PeerError
        return type(exc)


@SETTINGS
@given(version=st.sampled_from(VERSIONS), correlation_id=st.integers(-2**31, 2**31 - 1), body=BODY)
def test_answers_read_as_kio_reads_them(version, correlation_id, body):
    frame = kio_frame(version, correlation_id, body)
    expected = plain(codec.decode_response(fetch_answer.API_KEY, version, frame))
    try:
        got = fetch_response.read(version, frame)
    except NotOurs:
        # Only the top-level tagged fields (v16's node endpoints) are left to kio.
        assert version == 16 and body.get("node_endpoints")
        got = fetch_response.decode(version, frame)
    else:
        for topic in got[1].responses:
            for p in topic.partitions:
                assert p.records is None or isinstance(p.records, memoryview) and p.records.obj is frame
    assert plain(got) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_an_answer_as_the_leader_writes_it(version):
    """The shape apis.fetch gives a follower (every field; records past fetch_answer's own-piece
    size travel as a piece of their own), written by the broker's writer."""
    records = bytes(range(256)) * 300
    body = {"error_code": 0, "session_id": 7, "throttle_time": 0, "responses": [
        {"topic": "t", "topic_id": 12345, "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": records},
            {"partition_index": 1, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5,
             "log_start_offset": 2, "aborted_transactions": [], "preferred_read_replica": -1, "records": b"",
             "diverging_epoch": {"epoch": 3, "end_offset": 4}},
            {"partition_index": 2, "error_code": 74, "high_watermark": -1, "last_stable_offset": -1,
             "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": None,
             "current_leader": {"leader_id": 2, "leader_epoch": 9}}]}]}
    frame = own_frame(version, 5, body)
    assert plain(fetch_response.read(version, frame)) == plain(codec.decode_response(1, version, frame))
    p = fetch_response.read(version, frame)[1].responses[0].partitions[0]
    assert p.records.obj is frame and p.records.readonly and bytes(p.records) == records


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), body=BODY, seed=st.integers(0, 2**32))
def test_a_damaged_answer_is_read_as_kio_reads_it_or_left_to_kio(version, body, seed):
    frame = kio_frame(version, 9, body)
    rng = random.Random(seed)
    cut = frame[:rng.randrange(len(frame))]
    flipped = bytearray(frame)
    flipped[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    for damaged in (cut, bytes(flipped), frame + b"\0", frame + bytes([rng.randrange(256)]) * 3):
        try:
            got = plain(fetch_response.read(version, damaged))
        except NotOurs:
            continue
        assert got == kio_or_error(version, damaged)


def test_versions_outside_twelve_to_sixteen_are_left_to_kio():
    body = {"error_code": 0, "session_id": 1, "responses": []}
    for version in (11, 17):
        with pytest.raises(NotOurs):
            fetch_response.read(version, kio_frame(version, 1, body))
        assert plain(fetch_response.decode(version, kio_frame(version, 1, body))) == \
            plain(codec.decode_response(1, version, kio_frame(version, 1, body)))


def test_real_answers_of_a_broker_read_as_kio_reads_them(tmp_path):
    """Answers of an embedded broker over loopback (records sent from the segment files), from
    the start, the middle and the end of a log, at every version read; and through Peer.call as
    the follower asks (replication_rpc): the records a view of the frame read."""
    import asyncio

    from test_fetch_zero_copy import BATCHES, Embedded

    from storage.wire.client import Peer

    loop = asyncio.new_event_loop()
    broker = Embedded(tmp_path / "node", loop)
    try:
        broker.produce(BATCHES)
        end = broker.log.log_end_offset
        for version in VERSIONS:
            for offset in (0, end // 2, end):
                frame = broker.fetch(version, offset)[4:]
                got = fetch_response.read(version, frame)
                assert plain(got) == plain(codec.decode_response(1, version, frame))
                records = got[1].responses[0].partitions[0].records
                assert (len(records) > 0) == (offset < end)
        peer = Peer("127.0.0.1", broker.port)
        body = {"replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 0, "min_bytes": 0,
                "max_bytes": 50 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                "forgotten_topics_data": [], "topics": [{"topic_id": broker.node.topic_id("t"), "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 8 << 20}]}]}
        answer = loop.run_until_complete(peer.call(1, 16, body, decode=fetch_response.decode))
        peer.close()
        records = answer.responses[0].partitions[0].records
        assert isinstance(records, memoryview) and records.readonly
        assert bytes(records) == broker.log.read(0, 50 << 20)
    finally:
        broker.close()
        loop.close()


def test_a_peer_exchange_makes_no_task_and_still_times_out():
    """Peer.call bounds an exchange with asyncio.timeout (no task of its own a call, as
    wait_for made: a follower calls once a fetch); a peer that never answers is still a
    PeerError at the timeout, the connection closed."""
    import asyncio

    from storage.wire.client import Peer, PeerError

    async def main():
        loop = asyncio.get_running_loop()
        tasks = []

        def factory(loop, coro):
            tasks.append(coro)
            return asyncio.Task(coro, loop=loop)

        async def answer(reader, writer):
            while True:
                head = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">i", head)[0])
                if silent:
                    continue
                body = codec.encode_response(18, 0, struct.unpack_from(">i", frame, 4)[0],
                                             {"error_code": 0, "api_keys": []})
                writer.write(body)

        silent = False
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        peer = Peer("127.0.0.1", port, timeout_s=0.3)
        await peer.call(18, 0, {})              # connected
        loop.set_task_factory(factory)
        try:
            await peer.call(18, 0, {})
        finally:
            loop.set_task_factory(None)
        assert tasks == []
        silent = True
        with pytest.raises(PeerError, match="TimeoutError"):
            await peer.call(18, 0, {})
        assert not peer.busy
        server.close()

    asyncio.run(main())
