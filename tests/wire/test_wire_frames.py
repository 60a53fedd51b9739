"""Length bombs: a request whose array, string, bytes or tagged-field length claims more than
the frame holds is refused before kio's native parser preallocates it (issue 30, item 1).

Without the bound, a 19-byte Metadata v12 frame claiming 2^32-1 topics made kio allocate
~34 GB and the broker died of SIGABRT.  The pure tests walk every length position of every
served API and version (broker and controller tables, request headers included); the process
tests send the bombs to a broker and a controller under RLIMIT_AS = 1 GiB, then a valid request
on a fresh connection that must be answered, and the process must still be alive."""
from __future__ import annotations

import resource
import socket
import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from wire_frames import BOMBS, bombs, full_frame, served  # noqa: E402
from wire_support import Broker, raw_exchange  # noqa: E402

from storage.wire import bounds, codec, fetch_request, produce_codec  # noqa: E402

ADDRESS_SPACE_BYTES = 1 << 30
# The issue's frame: Metadata v12, null client id, no tags, topics claiming 2^32-1 entries.
METADATA_BOMB = bytes.fromhex("0003000c00000007ffff00") + BOMBS["varint"] + b"\x01\x00\x00"


def _all_served():
    return sorted(set(served(codec.SUPPORTED)) | set(served(codec.CONTROLLER_SUPPORTED)))


def test_the_issues_metadata_frame_is_refused_with_kafkas_reason():
    assert len(METADATA_BOMB) == 19
    with pytest.raises(codec.ProtocolError, match=r"Metadata v12: malformed request: MetadataRequest.topics: a collection of "
                                                  r"4294967294 claimed at offset 11, only 3 bytes remain"):
        codec.parse_request(METADATA_BOMB)


@pytest.mark.parametrize(("key", "version"), _all_served())
def test_every_length_of_every_served_request_is_bounded(key, version):
    frame = full_frame(key, version)
    header, request = codec.parse_request(frame)        # the walk accepts what kio writes
    # (Produce's is read by produce_codec, Fetch's by fetch_request, every other by kio)
    if key == 1:        # a class of fetch_request's for each version
        assert isinstance(request, fetch_request.FetchRequest) and request.__version__ == version
    else:
        assert type(request) is (produce_codec.ProduceRequest if key == 0 else codec._request_class(key, version))
    planted = bombs(key, version)
    assert planted, "a request without a length field"
    assert any("RequestHeader.client_id" in name for name, _ in planted)
    for _name, frame in planted:
        with pytest.raises(codec.ProtocolError, match="remain|cut short"):
            codec.parse_request(frame)


# Kafka's ProtocolSerializationTest: testReadArraySizeTooLarge, testReadNegativeArraySize,
# testReadStringSizeTooLarge, testReadNegativeStringSize, testReadBytesSizeTooLarge,
# testReadNegativeBytesSize -- the same cases over our walk of DeleteTopics v1 (legacy arrays
# and strings) and DescribeConfigs v4 (compact), plus a varint longer than five bytes.
LEGACY = codec._request_class(20, 1)
HEADER_V1 = codec.RequestHeaderV1


def _delete_topics_v1(count: bytes, name_length: bytes, name: bytes = b"ab") -> bytes:
    return struct.pack(">hhi", 20, 1, 7) + b"\xff\xff" + count + name_length + name + struct.pack(">i", 1000)


@pytest.mark.parametrize(("count", "name_length", "reason"), [
    (struct.pack(">i", 9), struct.pack(">h", 2), "a collection of 9 claimed at offset 10, only 8 bytes remain"),
    (struct.pack(">i", -2), struct.pack(">h", 2), "negative collection length -2"),
    (struct.pack(">i", 1), struct.pack(">h", 7), "a string of 7 claimed at offset 14, only 6 bytes remain"),
    (struct.pack(">i", 1), struct.pack(">h", -2), "negative string length -2"),
])
def test_kafka_protocol_serialization_cases(count, name_length, reason):
    bounds.check(_delete_topics_v1(struct.pack(">i", 1), struct.pack(">h", 2)), HEADER_V1, LEGACY)
    with pytest.raises(bounds.FrameBoundsError, match=reason):
        bounds.check(_delete_topics_v1(count, name_length), HEADER_V1, LEGACY)


def test_null_is_refused_where_the_version_does_not_allow_it():
    # LeaveGroup v4's members array is not nullable; Metadata v12's topics array is (all topics).
    leave = struct.pack(">hhi", 13, 4, 7) + b"\xff\xff\x00" + b"\x02g" + b"\x00" + b"\x00"
    with pytest.raises(codec.ProtocolError, match="LeaveGroupRequest.members: null at offset 13, but the field is "
                                                  "not nullable in this version"):
        codec.parse_request(leave)
    assert codec.parse_request(bytes.fromhex("0003000c00000007ffff00") + b"\x00\x01\x00\x00")[1].topics is None
    # DeleteTopics v1's names are not nullable strings.
    with pytest.raises(bounds.FrameBoundsError, match="DeleteTopicsRequest.topic_names: null at offset 14"):
        bounds.check(_delete_topics_v1(struct.pack(">i", 1), struct.pack(">h", -1), b""), HEADER_V1, LEGACY)


def test_bytes_too_large_and_a_varint_too_long_are_refused():
    produce = codec._request_class(0, 3)
    frame = struct.pack(">hhi", 0, 3, 7) + b"\xff\xff" + b"\xff\xff" + struct.pack(">hii", 1, 1000, 1) \
        + b"\x00\x01t" + struct.pack(">ii", 1, 0) + struct.pack(">i", 5) + b"abcd"
    with pytest.raises(bounds.FrameBoundsError, match="a bytes of 5 claimed .* only 4 bytes remain"):
        bounds.check(frame, HEADER_V1, produce)
    with pytest.raises(bounds.FrameBoundsError, match="negative bytes length -5"):
        bounds.check(frame[:-8] + struct.pack(">i", -5) + b"abcd", HEADER_V1, produce)
    metadata = bytes.fromhex("0003000c00000007ffff00") + b"\x80\x80\x80\x80\x80\x01" + b"\x01\x00\x00"
    with pytest.raises(codec.ProtocolError, match="a varint longer than 5 bytes at offset 11"):
        codec.parse_request(metadata)


# ---- processes under RLIMIT_AS ----------------------------------------------------------------

def _limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def _send(process: Broker, frame: bytes) -> bytes | None:
    try:
        return raw_exchange((process.host, process.port), struct.pack(">i", len(frame)) + frame)
    except (ConnectionError, socket.timeout):
        return None


def _bombard(process: Broker, table: dict, plan) -> int:
    sent = 0
    for key, version in served(table):
        for name, frame in plan(key, version):
            assert _send(process, frame) is None, f"{codec.api_name(key)} v{version} {name} was answered"
            sent += 1
            assert process.alive(), f"died after {codec.api_name(key)} v{version} {name}:\n{process.stderr()[-2000:]}"
    answer = _send(process, codec.encode_request(18, 3, 99, "after", {
        "client_software_name": "frames", "client_software_version": "1"})[4:])
    assert answer is not None and struct.unpack_from(">i", answer)[0] == 99
    assert process.alive()
    return sent


def _first_bombs(key, version):
    """The representative: the first length of the body (after the header's client id)."""
    return bombs(key, version)[1:2]


@pytest.fixture(params=["serve", "controller"])
def limited(request, tmp_path):
    process = Broker(tmp_path / request.param, command=request.param)
    process.preexec_fn = _limit_address_space
    process.start()
    yield process, codec.SUPPORTED if request.param == "serve" else codec.CONTROLLER_SUPPORTED
    process.stop()


def test_length_bombs_under_rlimit_as_leave_the_process_serving(limited):
    process, table = limited
    assert _send(process, METADATA_BOMB if table is codec.SUPPORTED else bombs(20, 6)[1][1]) is None
    assert _bombard(process, table, _first_bombs) >= len(table)
    assert "remain" in process.stderr()


@pytest.mark.slow
def test_every_length_bomb_under_rlimit_as_leaves_the_process_serving(limited):
    process, table = limited
    assert _bombard(process, table, bombs) > 5 * len(table)


# ---- the walk agrees with kio ------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize(("key", "version"), _all_served())
def test_the_walk_accepts_every_request_kio_writes(key, version):
    """Random requests (kio's own type strategies: nulls, empty arrays, tagged fields) written
    by kio are accepted by the walk, which ends exactly at their end: the bound never refuses
    a request a client can send.  (~2 minutes for the two tables: the slow tier.)"""
    import io

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from kio.static.primitive import Records
    st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
    cls = codec._request_class(key, version)
    header_cls = codec.RequestHeaderV2 if cls.__flexible__ else codec.RequestHeaderV1
    header = header_cls(request_api_key=key, request_api_version=version, correlation_id=1, client_id=None)

    @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def walk(entity):
        out = io.BytesIO()
        codec._writer(header_cls)(out, header)
        try:
            codec._writer(cls)(out, entity)
        except Exception:                   # a value kio's writer refuses (out of its range)
            return
        frame = out.getvalue()
        used = bounds._walker(header_cls, True)(memoryview(frame), 0, len(frame))
        assert bounds._walker(cls, False)(memoryview(frame), used, len(frame)) == len(frame)
    walk()
