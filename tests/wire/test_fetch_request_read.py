"""fetch_request.read_request against kio, for every Fetch version the broker serves: requests
written by kio's writer (consumers' and followers' shapes: topics by name and by id, the zero id,
forgotten topics, rack ids, the cluster id and replica state tagged fields) are read as kio reads
them (codec.parse_request_kio), attribute by attribute, a field the version lacks absent on both;
a frame cut, flipped or grown gets the same answer from codec.parse_request as from kio alone;
and the broker answers a fetch read either way alike."""
from __future__ import annotations

import dataclasses
import io
import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kio.index import load_request_schema  # noqa: E402
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1  # noqa: E402
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2  # noqa: E402
from kio.serial import entity_writer  # noqa: E402

from storage.wire import codec, fetch_request  # noqa: E402

VERSIONS = range(codec.SUPPORTED[1][1], codec.SUPPORTED[1][2] + 1)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
names = st.text(min_size=1, max_size=200)       # past 127 bytes: a two-byte varint length
topic_ids = st.sampled_from([0, 1, 2**128 - 1]) | st.integers(0, 2**128 - 1)
partition = st.fixed_dictionaries({
    "partition": int32, "current_leader_epoch": int32, "fetch_offset": int64, "last_fetched_epoch": int32,
    "log_start_offset": int64, "partition_max_bytes": int32})
topic = st.fixed_dictionaries({"topic": names, "topic_id": topic_ids, "partitions": st.lists(partition, max_size=4)})
forgotten = st.fixed_dictionaries({"topic": names, "topic_id": topic_ids,
                                   "partitions": st.lists(int32, max_size=40)})
request = st.fixed_dictionaries(
    {"replica_id": st.sampled_from([-1, -2, 0, 3]), "max_wait": st.integers(0, 2**31 - 1), "min_bytes": int32,
     "max_bytes": int32, "isolation_level": st.sampled_from([0, 1]), "session_id": int32, "session_epoch": int32,
     "topics": st.lists(topic, max_size=3), "forgotten_topics_data": st.lists(forgotten, max_size=2),
     "rack_id": st.sampled_from(["", "rack-1", "ü"]),
     "replica_state": st.fixed_dictionaries({"replica_id": st.sampled_from([-1, 0, 2]),
                                             "replica_epoch": st.sampled_from([-1, 0, 7, 2**63 - 1])}),
     "cluster_id": st.none() | st.text(max_size=30)})


def kio_frame(version: int, correlation_id: int, client_id, body: dict) -> bytes:
    """The request frame (no size prefix) as kio's writer lays it out, tagged fields included."""
    cls = load_request_schema(1, version)
    header = HeaderV2 if cls.__flexible__ else HeaderV1
    out = io.BytesIO()
    entity_writer(header)(out, header(request_api_key=1, request_api_version=version,
                                      correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(out, codec.build(cls, body))
    return out.getvalue()


def same(fast, slow) -> None:
    """fetch_request's entity has kio's entity's attributes, with equal values, and no others."""
    if not dataclasses.is_dataclass(slow):
        if isinstance(slow, tuple):
            assert isinstance(fast, tuple) and len(fast) == len(slow)
            for f, s in zip(fast, slow):
                same(f, s)
        else:
            assert type(fast) is type(slow) and fast == slow
        return
    wanted = {f.name for f in dataclasses.fields(slow)}
    present = {name for cls in type(fast).__mro__ for name in getattr(cls, "__slots__", ()) if hasattr(fast, name)}
    assert present == wanted, (type(slow).__name__, present ^ wanted)
    for name in wanted:
        same(getattr(fast, name), getattr(slow, name))


def same_read(fast, slow) -> None:
    (fh, fr), (sh, sr) = fast, slow
    assert (fh.request_api_key, fh.request_api_version, fh.correlation_id, fh.client_id) == \
        (sh.request_api_key, sh.request_api_version, sh.correlation_id, sh.client_id)
    assert type(fr).__version__ == type(sr).__version__ and fr.__version__ == sr.__version__
    same(fr, sr)


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(body=request, correlation_id=int32, client_id=st.none() | st.text(max_size=20))
def test_request_read_as_kio_reads_it(version, body, correlation_id, client_id):
    frame = kio_frame(version, correlation_id, client_id, body)
    fast = fetch_request.read_request(frame)
    assert fast is not None
    same_read(fast, codec.parse_request_kio(frame))
    assert codec.parse_request(frame)[1].__class__ is fast[1].__class__        # the path the broker takes


def _answer(parse, frame):
    try:
        return "parsed", parse(frame)
    except codec.ProtocolError as exc:
        return "refused", str(exc)


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(body=request, cut=st.integers(0, 400), flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)),
                                                             max_size=3), tail=st.binary(max_size=8))
def test_a_damaged_frame_is_answered_as_before(version, body, cut, flips, tail):
    """Cut, flipped or grown: codec.parse_request (the fast path first) answers what kio alone does."""
    answered_alike(kio_frame(version, 7, "c", body), cut, flips, tail)


def answered_alike(whole: bytes, cut: int, flips, tail: bytes) -> None:
    """`whole` with bytes flipped (from byte 8), `cut` bytes cut off its end and `tail` added:
    codec.parse_request (the fast path first) answers it as kio alone does."""
    frame = bytearray(whole)
    for at, value in flips:
        if 8 <= at < len(frame):            # the API key and version stay (peek_api's choice)
            frame[at] = value
    frame = bytes(frame[:max(8, len(frame) - cut)] + tail)
    (kind, got), (kind_kio, want) = _answer(codec.parse_request, frame), _answer(codec.parse_request_kio, frame)
    assert kind == kind_kio
    if kind == "refused":
        assert got == want
    else:
        same_read(got, want)


def _v16(tags: bytes) -> bytes:
    """A consumer's Fetch v16 of no topics, its request-level tagged fields `tags`."""
    return (struct.pack(">hhih", 1, 16, 5, 1) + b"c" + b"\0" + struct.pack(">iiibii", 500, 1, 1000, 0, 0, -1)
            + b"\1\1\1" + tags)


@pytest.mark.parametrize("frame", [
    _v16(b"\1\2\1\0"),                              # tag 2: unknown to this reader
    _v16(b"\1\1\x0d" + struct.pack(">iqb", 1, 2, 1)),   # replica state with a tagged field of its own
    _v16(b"\2\1\x0d" + struct.pack(">iqb", 1, 2, 0) + b"\0\1\0"),     # tags out of order
    _v16(b"\1\0\3\2ab"),                            # a cluster id longer than its tag
    struct.pack(">hhih", 1, 12, 5, -1) + b"\1" + bytes(30),             # a tagged field in the header
    struct.pack(">hhih", 1, 4, 5, 0x7FFF),          # a client id longer than the frame
    struct.pack(">hhih", 1, 4, 5, -1) + struct.pack(">iiiibi", -1, 1, 1, 1, 0, -1),   # a null topics array
])
def test_frames_it_leaves_to_kio(frame):
    assert fetch_request.read_request(frame) is None
    assert _answer(codec.parse_request, frame)[0] == _answer(codec.parse_request_kio, frame)[0]


def test_the_followers_frame_and_the_tagged_fields():
    """The follower's own v16 (fetch_request.encode) and the two tags it knows, read as kio."""
    body = {"replica_state": {"replica_id": 2, "replica_epoch": 9}, "max_wait": 500, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 4, "session_epoch": 1, "rack_id": "r",
            "topics": [{"topic_id": 7, "partitions": [
                {"partition": i, "current_leader_epoch": 3, "fetch_offset": 10 * i, "last_fetched_epoch": 3,
                 "log_start_offset": 0, "partition_max_bytes": 1 << 20} for i in range(100)]}],
            "forgotten_topics_data": [{"topic_id": 0, "partitions": [1]}]}
    frame = fetch_request.encode(3, "storage-replica", body)[4:]
    header, got = fetch_request.read_request(frame)
    same_read((header, got), codec.parse_request_kio(frame))
    assert (got.replica_state.replica_id, got.replica_state.replica_epoch, got.cluster_id) == (2, 9, None)
    assert not hasattr(got, "replica_id") and got.topics[0].topic_id.int == 7
    assert got.forgotten_topics_data[0].topic_id is None            # the zero id, as kio reads it
    for cluster_id in (None, "", "abc"):
        frame = kio_frame(16, 1, None, {**body, "cluster_id": cluster_id})
        assert fetch_request.read_request(frame)[1].cluster_id == cluster_id
    old = fetch_request.read_request(kio_frame(4, 1, None, {**body, "replica_id": 3, "topics": [
        {"topic": "t", "partitions": body["topics"][0]["partitions"][:1]}]}))[1]
    assert old.replica_id == 3 and not hasattr(old, "replica_state") and not hasattr(old, "session_id")
    assert not hasattr(old.topics[0].partitions[0], "log_start_offset") and old.topics[0].topic == "t"


def test_a_split_request_keeps_its_version():
    """authz splits a consumer's topics with replace(): a copy of the same version's class."""
    body = {"replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 100, "isolation_level": 1,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "topics": [], "forgotten_topics_data": []}
    got = fetch_request.read_request(kio_frame(12, 1, None, body))[1]
    split = got.replace(topics=())
    assert type(split) is type(got) and type(split).__version__ == 12 and split.isolation_level == 1
    assert split == got and split.replace(min_bytes=5) != got


def test_the_broker_answers_a_fast_read_fetch_as_a_kio_read_one(tmp_path):
    """Through ClientApis.fetch on two embedded nodes: consumers' fetches of v4, v12 (topics by
    name), v13 and v16 (by id, one id unknown), read committed or not, and a follower-less replica
    id, get the same answer from the fetch_request request as from kio's (each node's topic id
    aside: the two nodes name the topic alike, with ids of their own)."""
    import asyncio

    from storage.core.records import build_batch
    from storage.wire.node import Node
    from storage.wire.server import BrokerServer

    loop = asyncio.new_event_loop()
    answers = {}
    for name, parse in (("kio", codec.parse_request_kio), ("fast", codec.parse_request)):
        node = Node(tmp_path / name, offsets_partitions=1, background=False)
        server = BrokerServer(node, initial_rebalance_delay_ms=0)
        try:
            loop.run_until_complete(node.create_topic("a", 2, 1))
            batch = build_batch([b"x", b"y"])
            produce = codec.encode_request(0, 9, 1, "c", {"transactional_id": None, "acks": 1, "timeout": 1000,
                                                          "topic_data": [{"name": "a", "partition_data": [
                                                              {"index": 0, "records": batch}]}]})[4:]
            loop.run_until_complete(server.apis.produce(*codec.parse_request(produce)))
            topic_id = node.topic_id("a")
            got = []
            for version, isolation in ((4, 0), (12, 1), (13, 0), (16, 1)):
                part = {"partition_max_bytes": 1 << 20, "current_leader_epoch": -1, "last_fetched_epoch": -1,
                        "log_start_offset": -1}
                topics = [{"topic": "a", "topic_id": topic_id, "partitions": [
                    {**part, "partition": 0, "fetch_offset": 0}, {**part, "partition": 1, "fetch_offset": 0},
                    {**part, "partition": 0, "fetch_offset": 5}]}]
                if version >= 13:
                    topics.append({"topic": "", "topic_id": 12345, "partitions": [{**part, "partition": 0,
                                                                                   "fetch_offset": 0}]})
                body = {"replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 0,
                        "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation, "session_id": 0,
                        "session_epoch": -1, "topics": topics, "forgotten_topics_data": [], "rack_id": ""}
                got.append(loop.run_until_complete(server.apis.fetch(*parse(kio_frame(version, 3, "c", body)))))
            answers[name] = topic_id, got
        finally:
            loop.run_until_complete(node.shutdown())
    (fast_id, fast), (kio_id, slow) = answers["fast"], answers["kio"]     # each node's own topic id
    assert repr(fast).replace(str(fast_id), "id") == repr(slow).replace(str(kio_id), "id")
    answers["fast"] = fast
    assert [len(t["partitions"]) for t in answers["fast"][3]["responses"]] == [2, 1]     # partition 0 once
    loop.close()
