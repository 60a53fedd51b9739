"""DescribeProducers (61) and WriteTxnMarkers (27) on a live broker (storage/wire/txn_admin.py;
issue 30 item 7): what Kafka's `kafka-transactions.sh find-hanging` and `abort` send (KIP-664).
A transactional batch no coordinator will end holds the last stable offset back; the tool's
two requests find it and abort it, and read_committed fetches pass it.  A client's transaction
is ended by the transaction coordinator (test_wire_transactions.py), so the hanging transaction
is written into the stopped broker's log dir, as a log written elsewhere would hold it."""
from __future__ import annotations

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

import os  # noqa: E402

from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.dir.logdir import LogDir  # noqa: E402
from storage.wire import codec  # noqa: E402
from tests.wire_support import Broker, raw_exchange  # noqa: E402

TOPICS = ("hanging-1", "hanging-2")


def _hang(log_dir: str, topic: str, producer_id: int) -> None:
    """After the broker's own batch at offset 0: a transaction of two records no marker ends,
    then a plain batch (offsets 1-2 and 3), appended to the stopped broker's partition."""
    with LogDir.open(log_dir, LogConfig(fsync=False), background=False) as d:
        log = d.partition(topic, 0)
        epoch = log.latest_epoch
        log.append_as_leader(build_batch([b"t1", b"t2"], producer_id=producer_id, producer_epoch=4, base_sequence=0,
                                         is_transactional=True), epoch)
        log.append_as_leader(build_batch([b"after"]), epoch)
        log.flush()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("txn-admin") / "data").start()
    try:
        for topic in TOPICS:
            assert _produce(b, topic, build_batch([b"plain"])).error_code == 0
    finally:
        b.stop()
    for version, topic in enumerate(TOPICS, 1):
        _hang(os.path.join(b.data_dir, "logs"), topic, 9000 + version)
    b.start()
    yield b
    b.stop()


def _ask(broker, key, version, body, correlation_id=7):
    frame = codec.encode_request(key, version, correlation_id, "txn-admin-test", body)
    answer = raw_exchange((broker.host, broker.port), frame)
    assert answer is not None, broker.stderr()[-2000:]
    got_id, response = codec.decode_response(key, version, answer)
    assert got_id == correlation_id
    return response


def _produce(broker, topic, batch):
    _ask(broker, 3, 12, {"topics": [{"name": topic, "topic_id": 0}], "allow_auto_topic_creation": True,
                         "include_topic_authorized_operations": False})
    answer = _ask(broker, 0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return answer.responses[0].partition_responses[0]


def _producers(broker, topic, partitions=(0,)):
    answer = _ask(broker, 61, 0, {"topics": [{"name": topic, "partition_indexes": list(partitions)}]})
    return answer.topics[0].partitions


def _last_stable_offset(broker, topic):
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                       "last_fetched_epoch": -1, "log_start_offset": -1,
                                                       "partition_max_bytes": 1 << 20}]}]}
    part = _ask(broker, 1, 12, body).responses[0].partitions[0]
    return part.last_stable_offset, part.high_watermark


def _marker(broker, pid, epoch, topic, coordinator_epoch=0, version=1):
    body = {"markers": [{"producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
                         "topics": [{"name": topic, "partition_indexes": [0]}], "coordinator_epoch": coordinator_epoch}]}
    return _ask(broker, 27, version, body).markers[0].topics[0].partitions[0].error_code


@pytest.mark.parametrize("version", [1, 2])
def test_find_and_abort_a_hanging_transaction(broker, version):
    topic = f"hanging-{version}"
    assert _last_stable_offset(broker, topic) == (1, 4)                  # held at the open transaction
    [part] = _producers(broker, topic)
    assert part.error_code == 0
    [state] = [s for s in part.active_producers if s.producer_id == 9000 + version]
    assert (state.producer_epoch, state.current_txn_start_offset, state.last_sequence) == (4, 1, 1)
    # kafka-transactions.sh abort: a stale epoch is refused, the current one writes the marker
    assert _marker(broker, 9000 + version, 3, topic, version=version) == Errors.INVALID_PRODUCER_EPOCH
    assert _marker(broker, 9000 + version, 4, topic, version=version) == Errors.NONE
    assert _last_stable_offset(broker, topic) == (5, 5)
    [part] = _producers(broker, topic)
    assert [s.current_txn_start_offset for s in part.active_producers if s.producer_id == 9000 + version] == [-1]


def test_unknown_partitions_are_named_in_the_answers(broker):
    [part] = _producers(broker, "no-such-topic")
    assert part.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION and not part.active_producers
    assert _marker(broker, 1, 0, "no-such-topic") == Errors.UNKNOWN_TOPIC_OR_PARTITION
