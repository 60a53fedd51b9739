"""The producer-state manager on its own (storage/log/producer.py): our version of the cases of
Kafka's ProducerStateManagerTest (storage/src/test/java/.../ProducerStateManagerTest.java),
named after them.  The verification-guard cases (KIP-890) and the late-transaction timer are
not part of this engine."""
import os

import pytest

from storage.core import errors
from storage.log.producer import (
    ABORT,
    CLIENT,
    COMMIT,
    COORDINATOR,
    NO_SEQUENCE,
    REPLICATION,
    BatchMetadata,
    CompletedTxn,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    snapshot_path,
)

PID, EPOCH = 1, 0
INT32_MAX = 2**31 - 1
NOW = 1_700_000_000_000


@pytest.fixture
def manager(tmp_path):
    return ProducerStateManager(str(tmp_path))


def append(manager, pid, epoch, seq, offset, *, ts=NOW, origin=CLIENT, txn=False):
    """One single-record batch (Kafka's test helper appendEntry)."""
    info = manager.prepare_update(pid, origin)
    info.append_data_batch(epoch, seq, seq, ts, offset, offset, txn)
    manager.update(info)
    manager.update_map_end_offset(offset + 1)


def marker(manager, pid, epoch, kind, offset, coordinator_epoch=0, ts=NOW):
    info = manager.prepare_update(pid, COORDINATOR)
    done = info.append_end_txn_marker(kind, coordinator_epoch, epoch, offset, ts)
    manager.update(info)
    if done is not None:
        manager.complete_txn(done)
    manager.update_map_end_offset(offset + 1)
    return done


def reloaded(tmp_path, start, end, now=NOW):
    other = ProducerStateManager(str(tmp_path))
    other.truncate_and_reload(start, end, now)
    return other


def snapshot_offsets(tmp_path):
    return sorted(int(n.split(".")[0]) for n in os.listdir(tmp_path) if n.endswith(".snapshot"))


def test_basic_id_mapping(manager):                      # testBasicIdMapping
    append(manager, PID, EPOCH, 0, 0)
    append(manager, PID, EPOCH, 1, 1)
    with pytest.raises(errors.OutOfOrderSequenceError):  # a duplicate is checked separately
        append(manager, PID, EPOCH, 1, 1)
    with pytest.raises(errors.OutOfOrderSequenceError):  # a gap
        append(manager, PID, EPOCH, 5, 2)
    append(manager, PID, EPOCH + 1, 0, 3)                # a new epoch starts at 0
    with pytest.raises(errors.InvalidProducerEpochError) as raised:
        append(manager, PID, EPOCH, 0, 4)
    assert raised.value.error_code == 47 and raised.value.offset == 4


def test_append_txn_marker_with_no_producer_state(manager):   # testAppendTxnMarkerWithNoProducerState
    marker(manager, PID, 2, COMMIT, 27)
    entry = manager.last_entry(PID)
    assert (entry.producer_epoch, entry.last_sequence) == (2, NO_SEQUENCE)
    with pytest.raises(errors.InvalidProducerEpochError):
        append(manager, PID, 0, 0, 4)
    with pytest.raises(errors.OutOfOrderSequenceError):   # only a marker left: must restart at 0
        append(manager, PID, 2, 17, 4)
    append(manager, PID, 2, 0, 39)
    assert manager.last_entry(PID).last_sequence == 0


def test_producer_sequence_wrap_around(manager):          # testProducerSequenceWrapAround
    append(manager, PID, 15, INT32_MAX, 735, origin=REPLICATION)
    append(manager, PID, 15, 0, 1235)
    entry = manager.last_entry(PID)
    assert (entry.producer_epoch, entry.first_sequence, entry.last_sequence) == (15, INT32_MAX, 0)


def test_producer_sequence_with_wrap_around_batch(manager):   # testProducerSequenceWithWrapAroundBatchRecord
    info = manager.prepare_update(PID, REPLICATION)
    info.append_data_batch(15, INT32_MAX - 10, 9, NOW, 2000, 2020, False)
    assert manager.last_entry(PID) is None                # prepare_update changes nothing
    manager.update(info)
    entry = manager.last_entry(PID)
    assert (entry.first_sequence, entry.last_sequence, entry.first_offset, entry.last_offset) == \
        (INT32_MAX - 10, 9, 2000, 2020)


def test_producer_sequence_invalid_wrap_around(manager):  # testProducerSequenceInvalidWrapAround
    append(manager, PID, 15, INT32_MAX, 735, origin=REPLICATION)
    with pytest.raises(errors.OutOfOrderSequenceError):
        append(manager, PID, 15, 1, 1235)


def test_no_validation_on_first_entry_when_loading_log(manager):   # testNoValidationOnFirstEntryWhenLoadingLog
    append(manager, PID, 5, 16, 735, origin=REPLICATION)
    entry = manager.last_entry(PID)
    assert (entry.producer_epoch, entry.first_sequence, entry.last_sequence, entry.first_offset,
            entry.last_offset) == (5, 16, 16, 735, 735)


def test_control_record_bumps_producer_epoch(manager):   # testControlRecordBumpsProducerEpoch
    append(manager, PID, EPOCH, 0, 0)
    marker(manager, PID, 1, ABORT, 1)
    entry = manager.last_entry(PID)
    assert (entry.producer_epoch, entry.current_txn_first_offset, entry.first_sequence, entry.last_sequence) == \
        (1, None, NO_SEQUENCE, NO_SEQUENCE)
    append(manager, PID, 1, 0, 2)
    assert manager.last_entry(PID).first_sequence == 0


def test_prepare_update_does_not_mutate(manager):        # testPrepareUpdateDoesNotMutate
    info = manager.prepare_update(PID, CLIENT)
    info.append_data_batch(EPOCH, 0, 5, NOW, 15, 20, False)
    assert manager.last_entry(PID) is None
    manager.update(info)
    following = manager.prepare_update(PID, CLIENT)
    following.append_data_batch(EPOCH, 6, 10, NOW, 26, 30, False)
    entry = manager.last_entry(PID)
    assert (entry.first_sequence, entry.last_sequence, entry.last_offset) == (0, 5, 20)
    manager.update(following)
    assert (entry.first_sequence, entry.last_sequence, entry.last_offset) == (0, 10, 30)


def test_update_producer_transaction_state(manager):    # updateProducerTransactionState
    append(manager, PID, EPOCH, 0, 9)
    info = manager.prepare_update(PID, CLIENT)
    info.append_data_batch(EPOCH, 1, 5, NOW, 16, 20, True)
    info.append_data_batch(EPOCH, 6, 10, NOW, 26, 30, True)
    assert [(t.producer_id, t.first_offset) for t in info.started_transactions] == [(PID, 16)]
    assert (info.updated.first_sequence, info.updated.last_sequence, info.updated.current_txn_first_offset) == \
        (1, 10, 16)
    done = info.append_end_txn_marker(COMMIT, 15, EPOCH, 40, NOW)
    assert done == CompletedTxn(PID, 16, 40, False)
    # the marker leaves the cached batches alone
    assert (info.updated.first_sequence, info.updated.last_sequence, info.updated.first_offset,
            info.updated.last_offset, info.updated.current_txn_first_offset) == (1, 10, 16, 30, None)


def test_out_of_sequence_after_control_record_epoch_bump(manager):   # testOutOfSequenceAfterControlRecordEpochBump
    append(manager, PID, EPOCH, 0, 0, txn=True)
    append(manager, PID, EPOCH, 1, 1, txn=True)
    marker(manager, PID, 1, ABORT, 1)
    with pytest.raises(errors.OutOfOrderSequenceError):
        append(manager, PID, 1, 2, 2, txn=True)
    with pytest.raises(errors.OutOfOrderSequenceError):
        append(manager, PID, 2, 2, 2, txn=True)
    append(manager, PID, 1, 0, 0, txn=True)
    assert (manager.last_entry(PID).producer_epoch, manager.last_entry(PID).last_sequence) == (1, 0)


def test_non_transactional_append_with_ongoing_transaction(manager):   # testNonTransactionalAppendWithOngoingTransaction
    append(manager, PID, EPOCH, 0, 0, txn=True)
    with pytest.raises(errors.InvalidTxnStateError) as raised:
        append(manager, PID, EPOCH, 1, 1)
    assert raised.value.error_code == 48


def test_truncate_and_reload_removes_out_of_range_snapshots(manager, tmp_path):
    # testTruncateAndReloadRemovesOutOfRangeSnapshots
    for seq in range(5):
        append(manager, PID, EPOCH, seq, seq)
        manager.take_snapshot()
    manager.truncate_and_reload(1, 3, NOW)
    assert (manager.oldest_snapshot_offset, manager.latest_snapshot_offset) == (2, 3)
    assert snapshot_offsets(tmp_path) == [2, 3]


def test_take_snapshot_and_skip_when_unchanged(manager, tmp_path):   # testTakeSnapshot, testSkipSnapshotIfOffsetUnchanged
    append(manager, PID, EPOCH, 0, 0)
    append(manager, PID, EPOCH, 1, 1)
    assert manager.take_snapshot() == snapshot_path(str(tmp_path), 2)
    assert os.path.getsize(snapshot_path(str(tmp_path), 2)) == 10 + 46
    assert manager.take_snapshot() is None
    assert snapshot_offsets(tmp_path) == [2]


@pytest.mark.parametrize("finished", [False, True])
def test_recover_from_snapshot_keeps_only_the_last_batch(manager, tmp_path, finished):
    # testRecoverFromSnapshotUnfinishedTransaction, testRecoverFromSnapshotFinishedTransaction
    append(manager, PID, EPOCH, 0, 0, txn=True)
    append(manager, PID, EPOCH, 1, 1, txn=True)
    if finished:
        marker(manager, PID, EPOCH, ABORT, 2)
    manager.take_snapshot()
    other = reloaded(tmp_path, 0, 3)
    entry = other.last_entry(PID)
    assert (entry.first_offset, entry.first_sequence, entry.last_offset, entry.last_sequence) == (1, 1, 1, 1)
    assert entry.current_txn_first_offset == (None if finished else 0)
    if not finished:
        append(other, PID, EPOCH, 2, 2, txn=True)          # the sequence goes on after recovery


def test_recover_from_snapshot_empty_transaction(manager, tmp_path):   # testRecoverFromSnapshotEmptyTransaction
    marker(manager, PID, EPOCH, ABORT, 0, ts=NOW - 5)
    manager.take_snapshot()
    entry = reloaded(tmp_path, 0, 1).last_entry(PID)
    assert (entry.last_timestamp, entry.current_txn_first_offset) == (NOW - 5, None)


def test_producer_state_after_fencing_abort_marker(manager):   # testProducerStateAfterFencingAbortMarker
    append(manager, PID, EPOCH, 0, 0, txn=True)
    marker(manager, PID, EPOCH + 1, ABORT, 1)
    entry = manager.last_entry(PID)
    assert (entry.current_txn_first_offset, entry.last_offset, entry.first_offset) == (None, -1, -1)
    manager.remove_expired_producers(NOW)                  # its epoch must keep fencing
    assert manager.last_entry(PID) is not None


def test_accept_append_without_producer_state_on_replica(manager, tmp_path):
    # testAcceptAppendWithoutProducerStateOnReplica, testRemoveExpiredPidsOnReload
    append(manager, PID, EPOCH, 0, 0, ts=0)
    append(manager, PID, EPOCH, 1, 1, ts=1)
    manager.take_snapshot()
    other = reloaded(tmp_path, 0, 1, now=70_000)             # the snapshot at 2 lies past the end
    assert PID not in other.active_producers
    append(other, PID, EPOCH, 2, 2, ts=70_001, origin=REPLICATION)
    entry = other.active_producers[PID]
    assert (entry.producer_epoch, entry.first_sequence, entry.last_sequence, other.map_end_offset) == \
        (EPOCH, 2, 2, 3)


def test_accept_append_with_sequence_gaps_on_replica(manager):   # testAcceptAppendWithSequenceGapsOnReplica
    append(manager, PID, EPOCH, 0, 0)
    with pytest.raises(errors.OutOfOrderSequenceError):
        append(manager, PID, EPOCH, 3, 1)
    assert manager.active_producers[PID].last_sequence == 0
    append(manager, PID, EPOCH, 3, 1, origin=REPLICATION)
    assert manager.active_producers[PID].last_sequence == 3


def snapshots_at_2_and_3(manager):
    """Kafka's shared set-up of these cases: two appends, a snapshot, one more, a snapshot."""
    append(manager, PID, EPOCH, 0, 0)
    append(manager, PID, EPOCH, 1, 1)
    manager.take_snapshot()
    append(manager, PID, EPOCH, 2, 2)
    manager.take_snapshot()


def test_delete_snapshots_before(manager, tmp_path):      # testDeleteSnapshotsBefore
    snapshots_at_2_and_3(manager)
    assert snapshot_offsets(tmp_path) == [2, 3]
    manager.delete_snapshots_before(3)
    assert snapshot_offsets(tmp_path) == [3] and manager.snapshots == [3]
    manager.delete_snapshots_before(4)
    assert snapshot_offsets(tmp_path) == [] and manager.snapshots == []


def test_truncate_fully_and_start_at(manager, tmp_path):  # testTruncateFullyAndStartAt
    snapshots_at_2_and_3(manager)
    manager.truncate_fully_and_start_at(0)
    assert snapshot_offsets(tmp_path) == [] and not manager.active_producers
    append(manager, PID, EPOCH, 0, 0)
    manager.take_snapshot()
    assert snapshot_offsets(tmp_path) == [1]


def test_first_unstable_offset_after_truncation(manager):   # testFirstUnstableOffsetAfterTruncation
    append(manager, PID, EPOCH, 0, 99, txn=True)
    assert manager.first_unstable_offset() == 99
    manager.take_snapshot()
    marker(manager, PID, EPOCH, COMMIT, 105)
    manager.on_high_watermark_updated(106)
    assert manager.first_unstable_offset() is None
    manager.take_snapshot()
    append(manager, PID, EPOCH, 1, 106)
    manager.truncate_and_reload(0, 106, NOW)
    assert manager.first_unstable_offset() is None
    manager.truncate_and_reload(0, 100, NOW)
    assert manager.first_unstable_offset() == 99


def test_load_from_snapshot_retains_non_expired_producers(manager):   # testLoadFromSnapshotRetainsNonExpiredProducers
    append(manager, 1, EPOCH, 0, 0)
    append(manager, 2, EPOCH, 0, 1)
    manager.take_snapshot()
    manager.truncate_and_reload(1, 2, NOW)
    assert {pid: (e.last_sequence, e.last_offset) for pid, e in manager.active_producers.items()} == \
        {1: (0, 0), 2: (0, 1)}


def test_pid_expiration_timeout(manager):                 # testPidExpirationTimeout
    append(manager, PID, 5, 0, 1)
    assert manager.remove_expired_producers(NOW + 86_400_000 + 1) == 1
    append(manager, PID, 5, 1, 2)                          # unknown again: any sequence
    assert [e.last_sequence for e in manager.active_producers.values()] == [1]
    assert manager.map_end_offset == 3


def test_first_unstable_offset(manager):                  # testFirstUnstableOffset
    assert manager.first_undecided_offset() is None
    append(manager, PID, 5, 0, 99, txn=True)
    assert (manager.first_undecided_offset(), manager.first_unstable_offset()) == (99, 99)
    append(manager, 2, 5, 0, 105, txn=True)
    assert (manager.first_undecided_offset(), manager.first_unstable_offset()) == (99, 99)
    marker(manager, PID, 5, COMMIT, 109)
    assert (manager.first_undecided_offset(), manager.first_unstable_offset()) == (105, 99)
    manager.on_high_watermark_updated(100)
    assert manager.first_unstable_offset() == 99        # the marker is not below the HW yet
    manager.on_high_watermark_updated(110)
    assert manager.first_unstable_offset() == 105
    marker(manager, 2, 5, ABORT, 112)
    assert (manager.first_undecided_offset(), manager.first_unstable_offset()) == (None, 105)
    manager.on_high_watermark_updated(113)
    assert manager.first_unstable_offset() is None


def test_producers_with_ongoing_transactions_dont_expire(manager):   # testProducersWithOngoingTransactionsDontExpire
    append(manager, PID, 5, 0, 99, txn=True)
    assert manager.remove_expired_producers(NOW + 86_400_000 + 1) == 0
    assert manager.last_entry(PID) is not None and manager.first_undecided_offset() == 99


def test_sequence_not_validated_for_the_coordinator(manager):   # testSequenceNotValidatedForGroupMetadataTopic
    append(manager, PID, EPOCH, NO_SEQUENCE, 99, origin=COORDINATOR, txn=True)
    append(manager, PID, EPOCH, NO_SEQUENCE, 100, origin=COORDINATOR, txn=True)


def test_old_epoch_for_control_record(manager):          # testOldEpochForControlRecord
    append(manager, PID, 5, 0, 99, txn=True)
    with pytest.raises(errors.InvalidProducerEpochError):
        marker(manager, PID, 3, COMMIT, 100)


def test_coordinator_fencing(manager, tmp_path):          # testCoordinatorFencing, testCoordinatorFencedAfterReload
    append(manager, PID, 5, 0, 99, txn=True)
    marker(manager, PID, 5, COMMIT, 100, coordinator_epoch=1)
    assert manager.last_entry(PID).coordinator_epoch == 1
    marker(manager, PID, 5, COMMIT, 101, coordinator_epoch=1)       # the same epoch
    marker(manager, PID, 5, COMMIT, 102, coordinator_epoch=2)       # a newer one
    with pytest.raises(errors.TransactionCoordinatorFencedError) as raised:
        marker(manager, PID, 5, COMMIT, 103, coordinator_epoch=1)
    assert raised.value.error_code == 52
    manager.take_snapshot()
    other = reloaded(tmp_path, 0, 103)
    with pytest.raises(errors.TransactionCoordinatorFencedError):
        marker(other, PID, 5, COMMIT, 103, coordinator_epoch=1)


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_load_from_a_damaged_snapshot_falls_back_to_the_one_before(manager, tmp_path, damage):
    # testLoadFromEmptySnapshotFile, testLoadFromTruncatedSnapshotFile, testLoadFromCorruptSnapshotFile
    append(manager, PID, EPOCH, 0, 0)
    manager.take_snapshot()
    append(manager, PID, EPOCH, 1, 1)
    manager.take_snapshot()
    path = snapshot_path(str(tmp_path), 2)
    data = open(path, "rb").read()
    damaged = {"empty": b"", "truncated": data[:len(data) // 2], "garbage": data[:20] + bytes(37)}[damage]
    open(path, "wb").write(damaged)
    other = reloaded(tmp_path, 0, 20)
    assert not os.path.exists(path)
    assert other.active_producers[PID].last_offset == 0


def test_remove_stray_snapshots(tmp_path):
    # testRemoveStraySnapshotsKeepCleanShutdownSnapshot, testRemoveAllStraySnapshots
    for offset in (5, 2, 42):
        open(snapshot_path(str(tmp_path), offset), "wb").close()
    m = ProducerStateManager(str(tmp_path))
    m.remove_stray_snapshots([5])
    assert (m.oldest_snapshot_offset, m.latest_snapshot_offset) == (5, 42)
    assert snapshot_offsets(tmp_path) == [5, 42]
    m.remove_stray_snapshots([42])
    assert snapshot_offsets(tmp_path) == [42]


def test_last_stable_offset_completed_txn(manager):       # testLastStableOffsetCompletedTxn
    starts = {1: 992342, 2: 992367, 3: 992399}
    for pid, start in starts.items():
        append(manager, pid, EPOCH, 0, start, txn=True)
    first = CompletedTxn(1, starts[1], starts[3] + 15, False)
    assert manager.last_stable_offset(first) == starts[2]
    manager.complete_txn(first)
    manager.on_high_watermark_updated(first.last_offset + 1)
    assert manager.first_unstable_offset() == starts[2]
    third = CompletedTxn(3, starts[3], first.last_offset + 20, False)
    assert manager.last_stable_offset(third) == starts[2]
    manager.complete_txn(third)
    manager.on_high_watermark_updated(third.last_offset + 1)
    second = CompletedTxn(2, starts[2], third.last_offset + 78, False)
    assert manager.last_stable_offset(second) == second.last_offset + 1
    manager.complete_txn(second)
    manager.on_high_watermark_updated(second.last_offset + 1)
    assert manager.first_unstable_offset() is None


def test_skip_empty_transactions(manager):                # testSkipEmptyTransactions
    first = manager.prepare_update(PID, CLIENT)
    first.append_data_batch(EPOCH, 0, 4, NOW, 16, 20, True)
    manager.update(first)
    manager.on_high_watermark_updated(21)
    assert manager.first_unstable_offset() == 16
    second = manager.prepare_update(PID, CLIENT)
    done = second.append_end_txn_marker(COMMIT, 0, EPOCH, 21, NOW)
    assert done == CompletedTxn(PID, 16, 21, False)
    assert second.append_end_txn_marker(COMMIT, 0, EPOCH, 22, NOW) is None
    assert second.append_end_txn_marker(ABORT, 0, EPOCH, 23, NOW) is None
    second.append_data_batch(EPOCH, 5, 8, NOW, 24, 27, True)
    aborted = second.append_end_txn_marker(ABORT, 0, EPOCH, 28, NOW)
    assert aborted is not None and aborted.is_aborted
    assert second.append_end_txn_marker(ABORT, 0, EPOCH, 29, NOW) is None
    second.append_data_batch(EPOCH, 9, 10, NOW, 30, 31, True)
    assert [t.first_offset for t in second.started_transactions] == [24, 30]
    manager.update(second)
    manager.complete_txn(done)
    manager.complete_txn(aborted)
    manager.on_high_watermark_updated(32)
    assert manager.first_unstable_offset() == 30


def test_read_write_snapshot(tmp_path):                    # testReadWriteSnapshot
    entries = [ProducerStateEntry(1, 2, 3, -1, 100, [BatchMetadata(1, 2, 3, -1)]),
               ProducerStateEntry(11, 12, 13, 123456, None, [])]
    path = str(tmp_path / "00000000000000000007.snapshot")
    open(path, "wb").write(encode_snapshot(entries))
    assert read_snapshot(path) == entries


def test_snapshot_bytes_are_kafkas_layout():
    """Version 1, CRC-32C of what follows the CRC, an int32 count, 46-byte entries in the field
    order of Kafka's ProducerSnapshot.json; an empty snapshot is the 10 bytes real brokers wrote
    (tests/data/kafka-real/*/*.snapshot)."""
    empty = encode_snapshot([])
    assert empty == bytes.fromhex("0001") + empty[2:6] + bytes(4) and len(empty) == 10
    one = encode_snapshot([ProducerStateEntry(7, 1, 4, 99, None, [BatchMetadata(12, 40, 2, 99)])])
    assert one[6:10] == (1).to_bytes(4, "big")
    assert one[10:] == bytes.fromhex("0000000000000007" "0001" "0000000c" "0000000000000028" "00000002"
                                     "0000000000000063" "00000004" "ffffffffffffffff")
    with pytest.raises(errors.CorruptSnapshotError, match="CRC mismatch"):
        decode_snapshot(one[:-1] + b"\x00", file="x.snapshot")
    with pytest.raises(errors.CorruptSnapshotError, match="unknown version 2"):
        decode_snapshot(b"\x00\x02" + one[2:])


def test_real_kafka_snapshots_load_and_match_our_empty_snapshot():
    import glob

    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "kafka-real")
    found = sorted(glob.glob(os.path.join(here, "**", "*.snapshot"), recursive=True))
    assert found, "tests/data ships Kafka-written snapshots"
    for path in found:
        assert read_snapshot(path) == []
        assert open(path, "rb").read() == encode_snapshot([])


def test_truncation_skips_the_replay_when_no_producer_was_known(tmp_path, monkeypatch):
    """Kafka's UnifiedLogTest.testSkipLoadingIfEmptyProducerStateBeforeTruncation, in our words:
    truncating a log whose producer state is empty (and up to date) does not rescan the log;
    with a producer in it, the truncation replays and the producer's last batch is the one
    below the cut."""
    from storage import LogConfig, PartitionLog, build_batch
    from storage.log import producer as producer_module

    replays = []
    real_replay = producer_module.replay
    monkeypatch.setattr(producer_module, "replay", lambda *a, **k: (replays.append(a[2]), real_replay(*a, **k)))
    config = LogConfig(fsync=False)
    with PartitionLog.open(tmp_path / "plain-0", config) as log:
        for _ in range(5):
            log.append_as_leader([b"v"] * 3, 0)
        assert log.truncate_to(6) and replays == []
        assert log.producer_state.is_empty() and log.producer_state.map_end_offset == 6
    with PartitionLog.open(tmp_path / "idem-0", config) as log:
        for i in range(5):
            log.append_as_leader(build_batch([b"v"] * 3, producer_id=7, producer_epoch=0, base_sequence=3 * i), 0)
        assert log.truncate_to(6) and replays == [0]       # no snapshot: replayed from the log start
        assert log.producer_state.last_entry(7).last_sequence == 5
