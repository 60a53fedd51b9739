"""fetch_request's one-pass reader of the common Fetch shape (v13..v16: topics by known ids, no
forgotten topics, an empty rack id, no tagged field but a follower's replica state), against
kio for every version it takes: read as kio reads it, and a frame cut, flipped or grown after the
caches are warm still gets kio's answer from codec.parse_request (the one-pass reader gives any
shape it does not take back to the general walk, which decides)."""
from __future__ import annotations

import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from storage.wire import codec, fetch_request  # noqa: E402
from tests.wire.test_fetch_request_read import SETTINGS, answered_alike, int32, int64, kio_frame, same_read  # noqa: E402

IDS = [7, 2**128 - 1, 0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0]
partition = st.fixed_dictionaries({
    "partition": int32, "current_leader_epoch": int32, "fetch_offset": int64, "last_fetched_epoch": int32,
    "log_start_offset": int64, "partition_max_bytes": int32})
topic = st.fixed_dictionaries({"topic_id": st.sampled_from(IDS), "partitions": st.lists(partition, max_size=4)})
common = st.fixed_dictionaries(
    {"replica_id": st.sampled_from([-1, 0, 3]), "max_wait": st.sampled_from([0, 500, 2**31 - 1]),
     "min_bytes": int32, "max_bytes": int32, "isolation_level": st.sampled_from([0, 1]), "session_id": int32,
     "session_epoch": int32, "topics": st.lists(topic, max_size=3), "forgotten_topics_data": st.just([]),
     "rack_id": st.just(""), "cluster_id": st.none(),
     "replica_state": st.fixed_dictionaries({"replica_id": st.sampled_from([-1, 0, 2]),
                                             "replica_epoch": st.sampled_from([-1, 0, 7, 2**63 - 1])})})
VERSIONS = range(13, codec.SUPPORTED[1][2] + 1)


def _warm(frame: bytes) -> None:
    """The general walk once: it caches the frame's topic ids and max wait."""
    assert fetch_request.read_request(frame) is not None


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(body=common, correlation_id=int32, client_id=st.none() | st.text(max_size=20))
def test_the_common_shape_is_read_in_one_pass_as_kio_reads_it(version, body, correlation_id, client_id):
    frame = kio_frame(version, correlation_id, client_id, body)
    _warm(frame)
    one_pass = fetch_request._read(memoryview(frame), len(frame), True)     # raises if not taken
    same_read(one_pass, codec.parse_request_kio(frame))
    same_read(fetch_request.read_request(frame), codec.parse_request_kio(frame))


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(body=common, cut=st.integers(0, 200), flips=st.lists(st.tuples(st.integers(8, 200), st.integers(0, 255)),
                                                           max_size=3), tail=st.binary(max_size=8))
def test_a_damaged_common_frame_is_answered_as_kio_answers_it(version, body, cut, flips, tail):
    whole = kio_frame(version, 7, "c", body)
    _warm(whole)
    answered_alike(whole, cut, flips, tail)         # flips from byte 8: the strategy's range


@pytest.mark.parametrize("change", [
    {"forgotten_topics_data": [{"topic_id": 7, "partitions": [1, 2]}]},
    {"rack_id": "rack-1"},
    {"cluster_id": "abc"},
    {"topics": [{"topic_id": 0, "partitions": []}]},                       # the zero id: None, as kio
    {"topics": [{"topic_id": 7, "partitions": [
        {"partition": i, "current_leader_epoch": -1, "fetch_offset": i, "last_fetched_epoch": -1,
         "log_start_offset": -1, "partition_max_bytes": 1} for i in range(130)]}]},    # a two-byte count
])
def test_other_shapes_take_the_general_walk(change):
    body = {"replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 500, "min_bytes": 1,
            "max_bytes": 100, "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic_id": 7, "partitions": []}], "forgotten_topics_data": [], **change}
    frame = kio_frame(16, 1, "c", body)
    _warm(frame)
    with pytest.raises(fetch_request.NotOurs):
        fetch_request._read(memoryview(frame), len(frame), True)
    same_read(fetch_request.read_request(frame), codec.parse_request_kio(frame))


def test_an_unknown_topic_id_is_cached_by_the_general_walk_first():
    body = {"replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 100, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic_id": 0xFEED_0000_0000_0000_0000_0000_0000_0001, "partitions": []}]}
    frame = kio_frame(14, 1, None, body)
    with pytest.raises(fetch_request.NotOurs):
        fetch_request._read(memoryview(frame), len(frame), True)
    same_read(fetch_request.read_request(frame), codec.parse_request_kio(frame))
    same_read(fetch_request._read(memoryview(frame), len(frame), True), codec.parse_request_kio(frame))
    assert struct.unpack_from(">h", frame, 2)[0] == 14
