"""The wire front end at the byte level: the codec, Kafka's answers to unsupported versions,
and bad input (oversized, negative, unknown, truncated, garbage, corrupt batches) that closes a
connection or gets Kafka's error, never stops the broker and never touches a log."""
from __future__ import annotations

import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

from storage.core.errors import Errors  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.wire import codec  # noqa: E402
from storage.wire.group_model import java_string_hash, offsets_partition  # noqa: E402
from storage.wire.node import topic_name_problem  # noqa: E402
from tests.wire_support import Broker, raw_exchange, readme_table  # noqa: E402

# ---- the codec, without a broker ----------------------------------------------------------------

def test_every_advertised_version_has_kio_schemas():
    for key, (name, lo, hi) in codec.SUPPORTED.items():
        for version in range(lo, hi + 1):
            assert codec._request_class(key, version).__api_key__ == key, (name, version)
            assert codec._response_class(key, version).__version__ == version, (name, version)


def test_readme_table_lists_what_the_broker_serves():
    table = readme_table()
    assert {row["API"]: (int(row["key"]), row["versions served"]) for row in table.values()} == \
        {name: (key, f"{lo}-{hi}") for key, (name, lo, hi) in codec.SUPPORTED.items()}


def test_build_refuses_a_missing_required_field():
    cls = codec._response_class(12, 4)          # HeartbeatResponse v4 needs error_code
    with pytest.raises(KeyError, match="error_code"):
        codec.build(cls, {})
    assert codec.build(cls, {"error_code": 27}).error_code == 27


def test_request_round_trip_and_trailing_bytes():
    frame = codec.encode_request(3, 12, 41, "me", {"topics": None, "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False})
    header, request = codec.parse_request(frame[4:])
    assert (header.correlation_id, header.client_id, request.topics) == (41, "me", None)
    # Bytes after the request are left unread, as Kafka's RequestContext.parseRequest does.
    assert codec.parse_request(frame[4:] + b"\0\0") == (header, request)
    with pytest.raises(codec.ProtocolError, match="malformed"):
        codec.parse_request(frame[4:-3])


def test_java_string_hash_and_offsets_partition():
    # Values of Java's String.hashCode.
    assert java_string_hash("") == 0
    assert java_string_hash("abc") == 96354
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648     # Integer.MIN_VALUE
    assert offsets_partition("polygenelubricants", 50) == 0           # Utils.abs(MIN_VALUE) = 0
    assert offsets_partition("abc", 50) == 96354 % 50


def test_topic_name_rules():
    assert topic_name_problem("orders.v1_x-2") is None
    for bad in ("", ".", "..", "a" * 250, "a b", "é"):
        assert topic_name_problem(bad), bad


# ---- against a broker process -------------------------------------------------------------------

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("wire") / "data").start()
    yield b
    b.stop()


def _ask(broker, key, version, body, correlation_id=7):
    frame = codec.encode_request(key, version, correlation_id, "raw-test", body)
    answer = raw_exchange((broker.host, broker.port), frame)
    assert answer is not None, broker.stderr()[-2000:]
    got_id, response = codec.decode_response(key, version, answer)
    assert got_id == correlation_id
    return response


def _produce(broker, topic, batch, acks=1):
    _ask(broker, 3, 12, {"topics": [{"name": topic, "topic_id": 0}], "allow_auto_topic_creation": True,
                         "include_topic_authorized_operations": False})
    return _ask(broker, 0, 9, {"transactional_id": None, "acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})


def _end_offset(broker, topic):
    response = _ask(broker, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return response.topics[0].partitions[0].offset


# librdkafka's Metadata v12 for all topics (confluent-kafka's list_topics(), captured): a null
# topics array written into a 4-byte slot leaves 3 bytes after the request (librdkafka issue
# 5049).  Kafka reads the request and leaves them; the broker used to close the connection.
LIBRDKAFKA_ALL_TOPICS = bytes.fromhex("0003000c00000003000772646b61666b61" "00" "00000000" "010000")


def test_librdkafkas_metadata_with_trailing_bytes_is_answered(broker):
    _produce(broker, "listed", build_batch([b"x"]))
    frame = struct.pack(">i", len(LIBRDKAFKA_ALL_TOPICS)) + LIBRDKAFKA_ALL_TOPICS
    answer = raw_exchange((broker.host, broker.port), frame)
    assert answer is not None, broker.stderr()[-2000:]
    _, response = codec.decode_response(3, 12, answer)
    assert "listed" in {t.name for t in response.topics}
    admin = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka is in the [test] extra")
    topics = admin.AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=20).topics
    assert "listed" in topics and topics["listed"].error is None


def test_api_versions_lists_every_served_api(broker):
    response = _ask(broker, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert response.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == \
        {k: (lo, hi) for k, (_, lo, hi) in codec.SUPPORTED.items()}


def test_unknown_api_versions_version_gets_unsupported_version_in_v0(broker):
    # KIP-511: a newer client's ApiVersions is answered in v0 with the ranges, error 35.
    frame = struct.pack(">ihhih", 10, 18, 99, 5, -1)
    answer = raw_exchange((broker.host, broker.port), frame)
    correlation_id, response = codec.decode_response(18, 0, answer)
    assert correlation_id == 5 and response.error_code == Errors.UNSUPPORTED_VERSION
    assert any(k.api_key == 0 for k in response.api_keys)


@pytest.mark.parametrize("frame, reason", [
    (struct.pack(">ihhih", 10, 0, 99, 1, -1), "unsupported request: Produce v99"),
    (struct.pack(">ihhih", 10, 999, 0, 1, -1), "unsupported request: api key 999"),
    (struct.pack(">i", 200 * 1024 * 1024), "request size 209715200 is outside"),
    (struct.pack(">i", -5), "request size -5 is outside"),
    (struct.pack(">i", 12) + struct.pack(">hhi", 3, 12, 1) + b"\xff\xff\xff\xff", "malformed request"),
    (struct.pack(">i", 3) + b"abc", "shorter than a request header"),
])
def test_bad_frames_close_the_connection_with_a_logged_reason(broker, frame, reason):
    topic = "bad-input"
    _produce(broker, topic, build_batch([b"x"]))
    before = _end_offset(broker, topic)
    assert before >= 1
    assert raw_exchange((broker.host, broker.port), frame) is None
    assert reason in broker.stderr()
    assert broker.alive()
    assert _end_offset(broker, topic) == before          # nothing touched a log, the broker answers


def test_corrupt_batch_is_refused_and_nothing_is_written(broker):
    topic = "corrupt-batch"
    assert _produce(broker, topic, build_batch([b"a", b"b"])).responses[0].partition_responses[0].error_code == 0
    before = _end_offset(broker, topic)
    damaged = bytearray(build_batch([b"c"]))
    damaged[-1] ^= 0xFF                                  # the CRC no longer matches
    answer = _produce(broker, topic, bytes(damaged)).responses[0].partition_responses[0]
    assert answer.error_code == Errors.CORRUPT_MESSAGE
    assert _end_offset(broker, topic) == before


def test_produce_acks_zero_sends_no_response(broker):
    import socket
    topic = "acks-zero"
    _produce(broker, topic, build_batch([b"first"]))
    frame = codec.encode_request(0, 9, 9, "raw", {"transactional_id": None, "acks": 0, "timeout": 5000,
                                                  "topic_data": [{"name": topic, "partition_data": [
                                                      {"index": 0, "records": build_batch([b"second"])}]}]})
    metadata = codec.encode_request(18, 3, 10, "raw", {"client_software_name": "t", "client_software_version": "1"})
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(frame + metadata)
        size = struct.unpack(">i", s.recv(4))[0]
        body = b""
        while len(body) < size:
            body += s.recv(size - len(body))
    assert struct.unpack_from(">i", body)[0] == 10       # the next answer is the ApiVersions one
    assert _end_offset(broker, topic) == 2


def test_metadata_auto_creates_and_refuses_bad_names(broker):
    response = _ask(broker, 3, 12, {"topics": [{"name": "auto-made", "topic_id": 0}, {"name": "bad name", "topic_id": 0}],
                                    "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
    by_name = {t.name: t for t in response.topics}
    assert by_name["auto-made"].error_code == 0 and by_name["auto-made"].partitions[0].leader_id == 1
    assert by_name["auto-made"].topic_id.int != 0
    assert by_name["bad name"].error_code == Errors.INVALID_TOPIC_EXCEPTION


def test_fetch_waits_for_data_up_to_max_wait(broker):
    import time
    topic = "long-poll"
    _produce(broker, topic, build_batch([b"only"]))
    body = {"replica_id": -1, "max_wait": 300, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 1,
                                                       "last_fetched_epoch": -1, "log_start_offset": -1,
                                                       "partition_max_bytes": 1 << 20}]}]}
    started = time.monotonic()
    response = _ask(broker, 1, 12, body)
    assert time.monotonic() - started >= 0.25                # nothing at offset 1: waited
    part = response.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 1 and not part.records
    body["topics"][0]["partitions"][0]["fetch_offset"] = 0
    part = _ask(broker, 1, 12, body).responses[0].partitions[0]
    assert part.records and part.high_watermark == 1


def test_offset_for_leader_epoch_and_fenced_epochs(broker):
    topic = "epochs"
    _produce(broker, topic, build_batch([b"a", b"b", b"c"]))
    body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}]}]}
    part = _ask(broker, 23, 4, body).topics[0].partitions[0]
    assert (part.error_code, part.leader_epoch, part.end_offset) == (0, 0, 3)
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = 5
    assert _ask(broker, 23, 4, body).topics[0].partitions[0].error_code == Errors.UNKNOWN_LEADER_EPOCH


def test_create_topics_validates_configs_and_describe_configs_reports_them(broker):
    def create(name, configs, partitions=2):
        return _ask(broker, 19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                                 "assignments": [], "configs": [{"name": k, "value": v}
                                                                                for k, v in configs.items()]}],
                                    "timeout": 5000, "validate_only": False}).topics[0]
    made = create("configured", {"cleanup.policy": "compact", "retention.ms": "1000"})
    assert made.error_code == 0 and made.num_partitions == 2
    assert create("configured", {}).error_code == Errors.TOPIC_ALREADY_EXISTS
    refused = create("misconfigured", {"no.such.config": "1"})
    assert refused.error_code == Errors.INVALID_CONFIG and "no.such.config" in refused.error_message
    assert create("zero", {}, partitions=0).error_code == Errors.INVALID_PARTITIONS
    huge = create("huge", {}, partitions=16_777_217)          # one request must not open millions of logs
    assert huge.error_code == Errors.INVALID_PARTITIONS and "10000" in huge.error_message
    result = _ask(broker, 32, 4, {"resources": [{"resource_type": 2, "resource_name": "configured",
                                                  "configuration_keys": None}],
                                  "include_synonyms": False, "include_documentation": False}).results[0]
    values = {c.name: (c.value, c.config_source) for c in result.configs}
    assert values["cleanup.policy"] == ("compact", 1) and values["retention.ms"] == ("1000", 1)
    assert values["segment.bytes"][1] == 5                       # a default
    deleted = _ask(broker, 20, 6, {"topics": [{"name": "configured", "topic_id": 0}], "timeout": 5000})
    assert deleted.responses[0].error_code == 0
    result = _ask(broker, 32, 4, {"resources": [{"resource_type": 2, "resource_name": "configured",
                                                  "configuration_keys": None}],
                                  "include_synonyms": False, "include_documentation": False}).results[0]
    assert result.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_v16_by_topic_id_and_an_unknown_id(broker):
    topic = "by-id"
    _produce(broker, topic, build_batch([b"x", b"y"]))
    meta = _ask(broker, 3, 12, {"topics": [{"name": topic, "topic_id": 0}], "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    topic_id = meta.topics[0].topic_id.int
    assert topic_id != 0

    def fetch(tid):
        part = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}
        return _ask(broker, 1, 16, {"replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 0,
                                    "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                                    "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                                    "topics": [{"topic_id": tid, "partitions": [part]}]}).responses[0]
    known = fetch(topic_id)
    assert known.topic_id.int == topic_id
    assert known.partitions[0].error_code == 0 and known.partitions[0].high_watermark == 2
    assert known.partitions[0].records
    unknown = fetch(topic_id ^ 1)
    assert unknown.topic_id.int == topic_id ^ 1
    assert unknown.partitions[0].error_code == Errors.UNKNOWN_TOPIC_ID and not unknown.partitions[0].records
