"""The Fetch response laid out by hand (storage/wire/fetch_answer.py) against kio's writer
(codec.encode_response), byte for byte, for every version served and the later ones kio has,
over many shapes; and records that stay in their segment file (FileSlice pieces)."""
from __future__ import annotations

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

from hypothesis import HealthCheck, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

import storage  # noqa: E402
from storage.log.file_slice import FileSlice  # noqa: E402
from storage.wire import codec, fetch_answer  # noqa: E402
from tests.tiers import tiered  # noqa: E402

_, LOWEST, HIGHEST = codec.SUPPORTED[fetch_answer.API_KEY]


def _kio_versions() -> list[int]:
    versions, v = [], LOWEST
    while True:
        try:
            codec._response_class(fetch_answer.API_KEY, v)
        except Exception:
            return versions
        versions.append(v)
        v += 1


VERSIONS = _kio_versions()
ERROR_CODES = st.sampled_from(sorted(int(e) for e in ErrorCode))
INT32 = st.integers(-2**31, 2**31 - 1)
INT64 = st.integers(-2**63, 2**63 - 1)
SMALL = st.one_of(st.just(-1), st.integers(-3, 3), INT64)


def _pair(a: str, b: str, sa, sb):
    return st.one_of(st.fixed_dictionaries({a: sa, b: sb}),
                     st.fixed_dictionaries({}, optional={a: st.just(-1) | sa, b: st.just(-1) | sb}))


RECORDS = st.one_of(st.none(), st.binary(max_size=80),
                    st.binary(min_size=1, max_size=8).map(lambda b: b * (fetch_answer.OWN_PIECE_BYTES // len(b) + 1)))
ABORTED = st.one_of(st.none(), st.lists(st.fixed_dictionaries({"producer_id": INT64, "first_offset": INT64}), max_size=3))
PARTITION = st.fixed_dictionaries(
    {"partition_index": INT32, "error_code": ERROR_CODES, "high_watermark": SMALL, "aborted_transactions": ABORTED,
     "records": RECORDS},
    optional={"last_stable_offset": SMALL, "log_start_offset": SMALL, "preferred_read_replica": INT32,
              "diverging_epoch": _pair("epoch", "end_offset", INT32, INT64),
              "current_leader": _pair("leader_id", "leader_epoch", INT32, INT32),
              "snapshot_id": _pair("end_offset", "epoch", INT64, INT32)})
TOPIC = st.fixed_dictionaries({"topic": st.text(min_size=1, max_size=30), "topic_id": st.integers(0, 2**128 - 1),
                               "partitions": st.lists(PARTITION, max_size=4)})
ENDPOINT = st.fixed_dictionaries({"node_id": INT32, "host": st.text(max_size=20), "port": INT32},
                                 optional={"rack": st.none() | st.text(max_size=10)})
BODY = st.fixed_dictionaries(
    {"error_code": ERROR_CODES, "session_id": INT32, "responses": st.lists(TOPIC, max_size=4)},
    optional={"throttle_time": st.integers(0, 2**31 - 1), "node_endpoints": st.lists(ENDPOINT, max_size=3)})


def _frame(answer) -> bytes:
    return answer if isinstance(answer, bytes) else answer.join()


def test_the_versions_checked_cover_every_version_served():
    assert set(range(LOWEST, HIGHEST + 1)) <= set(VERSIONS)


@tiered(400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(version=st.sampled_from(VERSIONS), correlation_id=INT32, body=BODY)
def test_every_version_byte_for_byte_as_the_codec(version, correlation_id, body):
    expected = codec.encode_response(fetch_answer.API_KEY, version, correlation_id, body)
    answer = fetch_answer.encode(fetch_answer.API_KEY, version, correlation_id, body)
    assert _frame(answer) == expected
    big = [p["records"] for t in body["responses"] for p in t["partitions"]
           if p["records"] is not None and len(p["records"]) >= fetch_answer.OWN_PIECE_BYTES]
    # Large records travel as pieces of their own, not copied into the frame.
    assert isinstance(answer, bytes) == (not big)
    if big:
        assert [p for p in answer.parts if len(p) >= fetch_answer.OWN_PIECE_BYTES and p in big] == big


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_an_answer_as_apis_builds_it(version):
    """The shape apis.fetch gives (every field, the defaults kio omits), each version once."""
    body = {"error_code": 0, "session_id": 7, "responses": [
        {"topic": "t", "topic_id": 12345, "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
             "log_start_offset": 0, "diverging_epoch": {"epoch": -1, "end_offset": -1},
             "aborted_transactions": None, "preferred_read_replica": -1, "records": b"abc"},
            {"partition_index": 1, "error_code": 6, "high_watermark": -1, "last_stable_offset": -1,
             "log_start_offset": -1, "diverging_epoch": {"epoch": 3, "end_offset": 99},
             "aborted_transactions": [{"producer_id": 5, "first_offset": 2}], "preferred_read_replica": -1,
             "records": b""}]}]}
    assert fetch_answer.encode(1, version, 99, body) == codec.encode_response(1, version, 99, body)


def test_a_missing_required_field_is_an_error_as_in_the_codec():
    body = {"error_code": 0, "session_id": 0, "responses": [{"topic": "t", "topic_id": 1, "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 0, "records": b""}]}]}
    with pytest.raises(KeyError):
        codec.encode_response(1, HIGHEST, 1, body)
    with pytest.raises(KeyError):
        fetch_answer.encode(1, HIGHEST, 1, body)


@pytest.fixture
def log(tmp_path):
    log = storage.PartitionLog.open(tmp_path / "t-0", storage.LogConfig(fsync=False, segment_bytes=64 * 1024))
    for _ in range(40):
        log.append_as_leader(storage.build_batch([b"r" * 1000] * 4), 0)
    yield log
    log.close()


@pytest.mark.parametrize("version", [LOWEST, 12, HIGHEST])
def test_a_file_slice_is_a_piece_of_its_own_and_the_bytes_are_the_codecs(log, version):
    view = log.read(0, 30_000)
    found = log.file_slice(view)
    assert isinstance(found, FileSlice) and (found.position, found.length) == (0, len(view))
    partition = {"partition_index": 0, "error_code": 0, "high_watermark": 40, "aborted_transactions": None}
    body = {"error_code": 0, "session_id": 0, "responses": [{"topic": "t", "topic_id": 1, "partitions": [
        {**partition, "records": found}, {**partition, "partition_index": 1, "records": b"xyz"}]}]}
    answer = fetch_answer.encode(1, version, 5, body)
    try:
        assert found in answer.parts and answer.slices() == [found]
        plain = {**body, "responses": [{**body["responses"][0], "partitions": [
            {**partition, "records": bytes(view)}, {**partition, "partition_index": 1, "records": b"xyz"}]}]}
        assert answer.join() == codec.encode_response(1, version, 5, plain)
        assert len(answer) == len(answer.join())
        import os
        assert os.pread(found.fd, found.length, found.position) == bytes(view)
    finally:
        answer.close()
    assert found.fd == -1
