"""KIP-467 (issue 32 item 3): a Produce v8+ batch refused for some of its records answers
record_errors [{batch_index, batch_index_error_message}] and error_message in Kafka's words
(LogValidator.processRecordErrors, ReplicaManager's RecordValidationException): a compacted
topic's records without a key (INVALID_RECORD) and CreateTime timestamps outside
message.timestamp.before/after.max.ms (INVALID_TIMESTAMP).  Nothing of such a batch is written."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

from storage.core.errors import Errors  # noqa: E402
from storage.core.records import Record, build_batch  # noqa: E402
from storage.wire import codec  # noqa: E402
from tests.wire_support import Broker, raw_exchange  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("kip467") / "data").start()
    yield b
    b.kill()


def ask(broker, key: int, version: int, body: dict):
    answer = raw_exchange((broker.host, broker.port), codec.encode_request(key, version, 7, "kip467", body))
    assert answer is not None, broker.stderr()[-3000:]
    return codec.decode_response(key, version, answer)[1]


def create(broker, name: str, configs: dict[str, str]):
    topic = ask(broker, 19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                            "assignments": [], "configs": [{"name": k, "value": v}
                                                                           for k, v in configs.items()]}],
                                "timeout": 5000, "validate_only": False}).topics[0]
    assert topic.error_code == Errors.NONE, topic.error_message


def produce(broker, topic: str, batch: bytes, version: int = 9):
    response = ask(broker, 0, version, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return response.responses[0].partition_responses[0]


def test_keyless_records_of_a_compacted_topic_are_named_by_index(broker):
    create(broker, "compacted", {"cleanup.policy": "compact"})
    batch = build_batch([(b"k0", b"a"), (None, b"b"), (b"k2", b"c"), (None, b"d"), (None, b"e"), (None, b"f")],
                        compression="lz4")
    answer = produce(broker, "compacted", batch)
    assert answer.error_code == Errors.INVALID_RECORD and answer.base_offset == -1
    why = "Compacted topic cannot accept message without key in topic partition compacted-0"
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == \
        [(1, why), (3, why), (4, why), (5, why)]
    assert answer.error_message == (
        "One or more records have been rejected due to 4 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=1, message='{why}'), RecordError(batchIndex=3, "
        f"message='{why}'), RecordError(batchIndex=4, message='{why}')]")
    ok = produce(broker, "compacted", build_batch([(b"k", b"v")]))
    assert (ok.error_code, ok.base_offset, list(ok.record_errors), ok.error_message) == (Errors.NONE, 0, [], None)


def test_timestamps_outside_the_topics_bounds_are_named_by_index(broker):
    create(broker, "bounded", {"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    batch = build_batch([Record(None, now, None, b"fine"), Record(None, now - 3_600_000, None, b"old"),
                         Record(None, now + 3_600_000, None, b"new")])
    answer = produce(broker, "bounded", batch)
    assert answer.error_code == Errors.INVALID_TIMESTAMP
    assert [e.batch_index for e in answer.record_errors] == [1, 2]
    assert all("is out of range. The timestamp should be within [" in e.batch_index_error_message
               for e in answer.record_errors)
    assert answer.record_errors[0].batch_index_error_message.startswith(
        f"Timestamp {now - 3_600_000} of message with offset 1 ")
    assert answer.error_message == "One or more records have been rejected due to invalid timestamp"
    assert produce(broker, "bounded", build_batch([Record(None, now, None, b"x")])).error_code == Errors.NONE


def test_produce_v7_has_no_record_errors_but_the_same_code(broker):
    create(broker, "compacted-v7", {"cleanup.policy": "compact"})
    answer = produce(broker, "compacted-v7", build_batch([(None, b"b")]), version=7)
    assert answer.error_code == Errors.INVALID_RECORD


def test_librdkafka_fails_exactly_the_named_records(broker):
    """As librdkafka's 0011 test_message_single_partition_record_fail: in one batch, the records
    named in record_errors fail with INVALID_RECORD, the others with _INVALID_DIFFERENT_RECORD."""
    ck = pytest.importorskip("confluent_kafka")
    create(broker, "compacted-ck", {"cleanup.policy": "compact"})
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "retries": 0, "linger.ms": 500,
                            "batch.num.messages": 1000})
    reports = {}
    for i in range(20):
        producer.produce("compacted-ck", key=None if i % 4 == 1 else b"k%d" % i, value=b"v%d" % i,
                         on_delivery=lambda err, msg, i=i: reports.__setitem__(i, err))
    producer.flush(20)
    codes = {i: (err.code() if err is not None else None) for i, err in reports.items()}
    assert {i for i, c in codes.items() if c == ck.KafkaError.INVALID_RECORD} == set(range(1, 20, 4))
    assert {i for i, c in codes.items() if c == ck.KafkaError._INVALID_DIFFERENT_RECORD} == \
        set(range(20)) - set(range(1, 20, 4))
