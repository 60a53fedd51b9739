"""A transactional id's transitions and its `__transaction_state` record (storage/wire/
txn_state.py), ported in our words from Kafka's TransactionMetadataTest (each case named)."""
from __future__ import annotations

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

from storage.core.errors import Errors  # noqa: E402
from storage.topics import coordinator_records as cr  # noqa: E402
from storage.wire import txn_state as ts  # noqa: E402


def _meta(**kw) -> ts.TxnMetadata:
    return ts.TxnMetadata("id", 7, **kw)


def test_initialize_epoch_and_normal_bump():
    # testInitializeEpoch, testNormalEpochBump
    first = _meta().increment_epoch(1000, None, 5)
    assert (first.producer_epoch, first.last_producer_epoch, first.state) == (0, -1, ts.EMPTY)
    bumped = _meta(producer_epoch=4).increment_epoch(1000, None, 5)
    assert (bumped.producer_epoch, bumped.last_producer_epoch, bumped.timeout_ms) == (5, -1, 1000)


def test_epoch_bump_with_current_last_and_fenced_epoch():
    # testEpochBumpWithCurrentEpochProvided, testAttemptedEpochBumpWithLastEpoch,
    # testAttemptedEpochBumpWithFencedEpoch, testAttemptedEpochBumpWithNewlyCreatedMetadata
    current = _meta(producer_epoch=4, last_producer_epoch=3).increment_epoch(1000, 4, 5)
    assert (current.producer_epoch, current.last_producer_epoch) == (5, 4)
    retry = _meta(producer_epoch=5, last_producer_epoch=4).increment_epoch(1000, 4, 5)
    assert (retry.producer_epoch, retry.last_producer_epoch) == (5, 4)
    assert _meta(producer_epoch=5, last_producer_epoch=4).increment_epoch(1000, 2, 5) == Errors.PRODUCER_FENCED
    fresh = _meta().increment_epoch(1000, 9, 5)
    assert (fresh.producer_epoch, fresh.last_producer_epoch) == (0, -1)


def test_fence_after_epochs_exhausted_and_overflow():
    # testFenceProducerAfterEpochsExhausted, testFenceProducerNotAllowedIfItWouldOverflow
    exhausted = _meta(producer_epoch=ts.MAX_EPOCH - 1, state=ts.ONGOING)
    assert exhausted.epoch_exhausted()
    assert exhausted.fence_epoch().producer_epoch == ts.MAX_EPOCH
    assert _meta(producer_epoch=ts.MAX_EPOCH, state=ts.ONGOING).fence_epoch() == Errors.UNKNOWN_SERVER_ERROR
    # shouldNotRepeatedlyBumpEpochDueToInitPidDuringOngoingTxnIfAppendToLogFails (TransactionCoordinatorTest)
    assert _meta(producer_epoch=3, failed_fence=True, state=ts.ONGOING).fence_epoch().producer_epoch == 3


def test_rotate_producer_id():
    # testRotateProducerId
    rotated = _meta(producer_epoch=ts.MAX_EPOCH - 1, state=ts.COMPLETE_COMMIT).rotate_producer_id(8, 1000, 5, True)
    assert (rotated.producer_id, rotated.previous_producer_id, rotated.producer_epoch,
            rotated.last_producer_epoch, rotated.state) == (8, 7, 0, ts.MAX_EPOCH - 1, ts.EMPTY)


def test_add_partitions_prepare_and_complete():
    ongoing = _meta(producer_epoch=0).add_partitions([("t", 0)], 100)
    assert (ongoing.state, ongoing.partitions, ongoing.start_ms) == (ts.ONGOING, {("t", 0)}, 100)
    more = ongoing.add_partitions([("t", 1)], 200)
    assert (more.partitions, more.start_ms, more.update_ms) == ({("t", 0), ("t", 1)}, 100, 200)
    prepared = more.prepare_end(True, 300)
    assert (prepared.state, prepared.partitions) == (ts.PREPARE_COMMIT, more.partitions)
    done = prepared.complete(400)
    assert (done.state, done.partitions) == (ts.COMPLETE_COMMIT, set())
    again = done.add_partitions([("t", 2)], 500)                 # the next transaction starts afresh
    assert (again.partitions, again.start_ms) == ({("t", 2)}, 500)
    assert more.prepare_end(False, 300).complete(400).state == ts.COMPLETE_ABORT


def test_state_ids_and_record_round_trip():
    # testTransactionStateIdAndNameMapping: the record's status byte is Kafka's state id
    assert ts.STATES.index(ts.EMPTY) == 0 and ts.STATES.index(ts.COMPLETE_ABORT) == 5
    assert ts.STATES.index(ts.PREPARE_EPOCH_FENCE) == 7
    meta = _meta(producer_epoch=3, timeout_ms=1500, state=ts.PREPARE_COMMIT, partitions={("a", 1), ("a", 0), ("b", 2)},
                 start_ms=10, update_ms=20)
    key, value = ts.record_key("id"), ts.record_value(meta)
    tid, back = ts.read_record(key, value)
    assert tid == "id" and (back.producer_id, back.producer_epoch, back.state, back.partitions, back.timeout_ms,
                            back.start_ms, back.update_ms) == (7, 3, ts.PREPARE_COMMIT, meta.partitions, 1500, 10, 20)
    assert ts.read_record(key, None) == ("id", None)
    # kafka-dump-log's --transaction-log-decoder reads it
    assert cr.decode_transaction_record(key, value)[1].startswith("producerId:7,producerEpoch:3,state=PrepareCommit,"
                                                                  "partitions=[a-0,a-1,b-2]")


def test_partition_is_the_java_hash():
    # abs(String.hashCode) % partitions with Kafka's Utils.abs: "abc".hashCode() is 96354
    assert ts.txn_partition("abc", 50) == 96354 % 50
    assert ts.txn_partition("", 50) == 0
