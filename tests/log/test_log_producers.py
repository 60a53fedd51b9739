"""Idempotent producers in the log: what a leader refuses, what a retry gets back, what a
follower applies, and how the state survives roll, close, a crash and a truncation (our
version of the producer-state cases of Kafka's UnifiedLogTest and LogLoaderTest, named after
them where one exists)."""
import os

import pytest

from storage import LogConfig, PartitionLog, build_batch
from storage.core import errors

CONFIG = LogConfig(fsync=False, segment_bytes=4096)
PID = 1000


def batch(seq, count=1, *, pid=PID, epoch=0, txn=False, base_offset=0, size=10):
    return build_batch([b"v" * size] * count, base_offset=base_offset, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=txn)


def snapshots(log):
    return sorted(int(n[:20]) for n in os.listdir(log.path) if n.endswith(".snapshot"))


@pytest.fixture
def log(tmp_path):
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as opened:
        yield opened


def test_a_retried_batch_gets_its_first_offsets_and_writes_nothing(log):
    # testDuplicateAppends (UnifiedLogTest)
    first = log.append_as_leader(batch(0, 3), 0)
    log.append_as_leader(batch(3, 2), 0)
    size, end = log.size_bytes, log.log_end_offset
    again = log.append_as_leader(batch(0, 3), 0)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert (again.batch_count, again.record_count, again.size_bytes) == (0, 0, 0)
    assert (log.size_bytes, log.log_end_offset) == (size, end)
    assert not first.duplicate
    entry = log.producer_state.active_producers[PID]
    assert (entry.producer_epoch, entry.last_sequence, entry.last_offset) == (0, 4, 4)


def test_only_the_last_five_batches_are_remembered(log):
    for seq in range(6):
        log.append_as_leader(batch(seq), 0)
    assert log.append_as_leader(batch(1), 0).duplicate                 # one of the last five
    with pytest.raises(errors.OutOfOrderSequenceError):               # the sixth-last is forgotten
        log.append_as_leader(batch(0), 0)


def test_a_sequence_gap_and_an_old_epoch_are_refused_and_nothing_is_written(log):
    # testNonSequentialAppend, testOldProducerEpoch (UnifiedLogTest)
    log.append_as_leader(batch(0), 0)
    end = log.log_end_offset
    with pytest.raises(errors.OutOfOrderSequenceError) as gap:
        log.append_as_leader(batch(5), 0)
    assert gap.value.error_code == 45 and gap.value.offset == end
    log.append_as_leader(batch(0, epoch=1), 0)
    with pytest.raises(errors.InvalidProducerEpochError) as old:
        log.append_as_leader(batch(1, epoch=0), 0)
    assert old.value.error_code == 47
    assert log.log_end_offset == end + 1


def test_a_chunk_of_several_batches_is_checked_batch_by_batch(log):
    log.append_as_leader(batch(0), 0)
    chunk = batch(1, 2) + batch(3, 3) + batch(7)                     # the third has a gap
    with pytest.raises(errors.OutOfOrderSequenceError) as gap:
        log.append_as_leader(chunk, 0)
    assert gap.value.offset == 6 and log.log_end_offset == 1
    assert log.producer_state.active_producers[PID].last_sequence == 0
    info = log.append_as_leader(batch(1, 2) + batch(3, 3), 0)
    assert (info.first_offset, info.last_offset) == (1, 5)
    entry = log.producer_state.active_producers[PID]
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batch_metadata] == \
        [(0, 0, 0, 0), (1, 2, 1, 2), (3, 5, 3, 5)]


def test_an_unknown_producer_may_start_at_any_sequence(log):
    # Kafka's rule: with no epoch known for the producer (new, expired, or retained away) the
    # append is not sequence-checked, the whole of it (ProducerAppendInfo.checkSequence).
    log.append_as_leader(batch(17) + batch(40), 0)
    assert log.producer_state.active_producers[PID].last_sequence == 40


def test_non_idempotent_appends_leave_no_producer_state(log):
    log.append_as_leader([b"a", b"b"], 0)
    log.append_as_leader(build_batch([b"c"]), 0)
    log.append_as_follower(build_batch([b"d"], base_offset=3, partition_leader_epoch=0))
    assert log.producer_state.active_producers == {}


def test_a_follower_applies_producer_batches_without_validation(log):
    # testAcceptAppendWithSequenceGapsOnReplica, on the log
    log.append_as_follower(batch(0, base_offset=0))
    log.append_as_follower(batch(7, 2, base_offset=1))                # a gap the leader accepted
    entry = log.producer_state.active_producers[PID]
    assert (entry.last_sequence, entry.last_offset) == (8, 2)


def test_a_snapshot_at_every_roll_and_at_close(tmp_path):
    # testTakeSnapshotOnRollAndDeleteSnapshotOnRecoveryPointCheckpoint (UnifiedLogTest), in part
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        for seq in range(40):
            log.append_as_leader(batch(seq, size=200), 0)
        bases = [s.base_offset for s in log.segments]
        assert len(bases) > 2
        assert snapshots(log) == bases[1:]
    with PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=True) as log:
        assert snapshots(log)[-1] == log.log_end_offset == 40
        entry = log.producer_state.active_producers[PID]
        assert (entry.last_sequence, entry.last_offset) == (39, 39)
        assert log.append_as_leader(batch(39, size=200), 0).duplicate   # the last batch survives a restart
        with pytest.raises(errors.OutOfOrderSequenceError):
            log.append_as_leader(batch(41, size=200), 0)
        log.append_as_leader(batch(40, size=200), 0)


def test_after_a_crash_the_state_is_rebuilt_from_a_snapshot_and_the_batches_above_it(tmp_path):
    # testProducerSnapshotsRecoveryAfterUncleanShutdown (LogLoaderTest), in our words
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    for seq in range(30):
        log.append_as_leader(batch(seq // 2, size=200, pid=PID + seq % 2), 0)
    log.flush()
    expected = {pid: (e.producer_epoch, e.last_sequence, e.last_offset)
                for pid, e in log.producer_state.active_producers.items()}
    assert snapshots(log)[-1] < log.log_end_offset                  # the tail is only in the log
    log._release_segments()                                          # the process dies: no close
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as again:       # unclean: recovery
        got = {pid: (e.producer_epoch, e.last_sequence, e.last_offset)
               for pid, e in again.producer_state.active_producers.items()}
        assert got == expected
        assert snapshots(again)[-1] < again.log_end_offset == 30     # an open writes no snapshot
    with PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=True) as again:   # the close did
        assert snapshots(again)[-1] == again.log_end_offset
        assert {pid: (e.producer_epoch, e.last_sequence, e.last_offset)
                for pid, e in again.producer_state.active_producers.items()} == expected


def test_with_no_snapshot_at_all_the_whole_log_is_replayed(tmp_path):
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        for seq in range(20):
            log.append_as_leader(batch(seq, size=200), 0)
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith(".snapshot"):
            os.unlink(tmp_path / "t-0" / name)
    with PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=True) as log:
        assert log.producer_state.active_producers[PID].last_sequence == 19


def test_recovered_segments_without_producer_ids_are_not_replayed(tmp_path, monkeypatch):
    """The recovery scan counts the batches with a producer id of each segment it reads; the
    replay that follows skips the segments where it found none (it would read every header of
    them for nothing) and still replays the others, from the beginning."""
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        for _ in range(12):                                         # plain batches: 3 segments
            log.append_as_leader([b"p" * 900], 0)
        plain_bases = [s.base_offset for s in log.segments]
        for seq in range(6):                                        # then an idempotent producer
            log.append_as_leader(batch(seq, size=900), 0)
        producer_bases = [s.base_offset for s in log.segments if s.base_offset not in plain_bases]
        expected = log.producer_state.active_producers[PID].last_sequence
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith(".snapshot"):
            os.unlink(tmp_path / "t-0" / name)
    read = []
    segment_columns = PartitionLog.segment_columns

    def recording(self, start_offset=None, window=1 << 20, *, skip_bases=()):
        for cols, view in segment_columns(self, start_offset, window, skip_bases=skip_bases):
            read.append(int(cols.base_offset[0]))
            yield cols, view

    monkeypatch.setattr(PartitionLog, "segment_columns", recording)
    with PartitionLog.open(tmp_path / "t-0", CONFIG, recovery_point=0) as log:   # every segment recovered
        assert log.producer_state.active_producers[PID].last_sequence == expected
        assert read and all(o >= min(producer_bases) for o in read)
        skipped = set(plain_bases[:-1])     # the last plain one ends where the producer's start
        assert not skipped & {log.segments[log._segment_index(o)].base_offset for o in read}
    read.clear()
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith(".snapshot"):
            os.unlink(tmp_path / "t-0" / name)
    with PartitionLog.open(tmp_path / "t-0", CONFIG, clean_shutdown=True) as log:  # no scan: all read
        assert log.producer_state.active_producers[PID].last_sequence == expected
        assert read[0] == 0


def test_truncation_drops_snapshots_above_and_rebuilds_the_state(tmp_path):
    # testTruncateAndReloadRemovesOutOfRangeSnapshots on the log; UnifiedLogTest's producer truncation cases
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        for seq in range(60):
            log.append_as_leader(batch(seq, size=200), 0)
        cut = log.segments[2].base_offset + 1
        log.truncate_to(cut)
        assert all(s <= cut for s in snapshots(log))
        entry = log.producer_state.active_producers[PID]
        assert (entry.last_sequence, entry.last_offset) == (cut - 1, cut - 1)
        with pytest.raises(errors.OutOfOrderSequenceError):
            log.append_as_leader(batch(60, size=200), 0)
        log.append_as_leader(batch(cut, size=200), 0)
        log.truncate_fully_and_start_at(100)
        assert snapshots(log) == [] and log.producer_state.active_producers == {}


def test_an_open_transaction_blocks_non_transactional_batches_of_its_producer(log):
    log.append_as_leader(batch(0, txn=True), 0)
    assert log.producer_state.active_producers[PID].current_txn_first_offset == 0
    with pytest.raises(errors.InvalidTxnStateError):
        log.append_as_leader(batch(1), 0)
    log.append_as_leader(batch(1, txn=True), 0)


def test_a_corrupt_batch_is_refused_for_its_corruption_before_its_sequence_is_judged(log):
    """Kafka validates the batches (LogValidator: sizes, CRCs) before the producer state: a
    damaged batch with a sequence gap is a CorruptRecordError, not an OutOfOrderSequenceError."""
    log.append_as_leader(batch(0), 0)
    damaged = bytearray(batch(5))
    damaged[-1] ^= 0xFF                                              # inside the CRC's range
    with pytest.raises(errors.CorruptRecordError):
        log.append_as_leader(bytes(damaged), 0)
    with pytest.raises(errors.OutOfOrderSequenceError):             # intact, the gap is the error
        log.append_as_leader(batch(5), 0)
    assert log.log_end_offset == 1


def _state(log):
    return {pid: (e.producer_epoch, e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset,
                  list(e.batch_metadata)) for pid, e in log.producer_state.active_producers.items()}


def test_the_next_in_sequence_fast_path_is_the_general_path(tmp_path, monkeypatch):
    """A client's next batch in sequence skips the general planning (storage/log/producer.py
    _NextInSequence); on random appends -- retries, gaps, epoch bumps, transactions, wraps --
    both paths answer and leave the state alike."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from storage.log import producer

    step = st.tuples(st.sampled_from([1, 2]), st.sampled_from([0, 0, 0, 1]), st.sampled_from([0, 1, 1, 1, 2, -1, -3]),
                     st.integers(1, 3), st.booleans())
    runs = [0]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(step, min_size=1, max_size=25), st.sampled_from([0, 2**31 - 4]))
    def check(steps, first_seq):
        runs[0] += 1
        logs = [PartitionLog.open(tmp_path / f"{runs[0]}-{fast}", CONFIG) for fast in (True, False)]
        try:
            nexts = {}
            for pid, epoch, jump, count, txn in steps:
                seq = nexts.get((pid, epoch), first_seq) + jump - 1
                seq = seq if seq >= 0 else 0
                data = batch(seq % 2**31, count, pid=pid, epoch=epoch, txn=txn and pid == 2)
                answers = []
                for fast, log in zip((True, False), logs):
                    monkeypatch.setattr(producer, "_FAST_PATH", fast)
                    try:
                        info = log.append_as_leader(data, 0)
                        answers.append(("ok", info.first_offset, info.last_offset, info.duplicate))
                    except errors.ProducerStateError as exc:
                        answers.append((type(exc).__name__,))
                assert answers[0] == answers[1], (steps, answers)
                if answers[0][0] == "ok" and not answers[0][3]:
                    nexts[(pid, epoch)] = (seq + count) % 2**31
                assert _state(logs[0]) == _state(logs[1])
        finally:
            for log in logs:
                log.close()

    check()


def test_a_truncation_after_appends_reloads_the_state_it_cut(log):
    """Swarm seed 555 (with the producer workload): the producer state's map end offset was
    only moved at a roll, so a truncation back to that offset after more appends skipped the
    reload and kept the effect of a cut abort marker -- the transaction it closed stayed
    closed, and the next one was recorded as starting later than it did."""
    log.append_as_leader(batch(0, txn=True), 0)                       # the transaction opens at 0
    log.append_as_leader([b"plain"], 0)
    end = log.log_end_offset
    log.roll()                                                        # a snapshot: state as of offset 2
    log.append_txn_marker(PID, 0, False, coordinator_epoch=0, leader_epoch=0)
    assert log.producer_state.first_undecided_offset() is None
    log.truncate_to(end)                                              # the marker goes
    assert log.producer_state.first_undecided_offset() == 0
    assert log.producer_state.active_producers[PID].current_txn_first_offset == 0


# ---- LogLoaderTest / UnifiedLogTest snapshot cases, by name --------------------------------

def test_loading_log_keeps_largest_stray_producer_state_snapshot(tmp_path):
    # testLoadingLogKeepsLargestStrayProducerStateSnapshot (LogLoaderTest)
    path = tmp_path / "t-0"
    with PartitionLog.open(path, CONFIG) as log:
        for seq in range(4):
            log.append_as_leader(batch(seq), 0)
            if seq < 2:
                log.roll()
        assert len(log.segments) == 3
    assert sorted(int(n[:20]) for n in os.listdir(path) if n.endswith(".snapshot")) == [1, 2, 4]
    (path / f"{3:020d}.snapshot").write_bytes(b"")                    # a stray inside the log
    with PartitionLog.open(path, CONFIG) as log:                       # unclean
        assert snapshots(log) == [1, 2, 4]
        assert log.producer_state.active_producers[PID].last_sequence == 3


def test_loading_log_deletes_producer_state_snapshots_past_log_end_offset(tmp_path):
    # testLoadingLogDeletesProducerStateSnapshotsPastLogEndOffset (UnifiedLogTest)
    path = tmp_path / "t-0"
    path.mkdir()
    (path / f"{42:020d}.snapshot").write_bytes(b"")
    with PartitionLog.open(path, CONFIG) as log:
        assert snapshots(log) == []


def test_load_producers_after_delete_records_on_segment(tmp_path):
    # testLoadProducersAfterDeleteRecordsOnSegment (LogLoaderTest)
    path = tmp_path / "t-0"
    with PartitionLog.open(path, CONFIG) as log:
        log.append_as_leader(batch(0, pid=1), 0)
        log.roll()
        log.append_as_leader(batch(0, pid=2), 0)
        assert len(log.segments) == 2 and len(log.producer_state.active_producers) == 2
        log.update_high_watermark(log.log_end_offset)
        log.increment_log_start_offset(1)
        log.delete_old_segments()
        assert len(log.segments) == 1 and len(log.producer_state.active_producers) == 2   # the state stays
    with PartitionLog.open(path, CONFIG, log_start_offset=1) as log:  # unclean: rebuilt from the log start
        assert list(log.producer_state.active_producers) == [2]
        assert log.producer_state.active_producers[2].last_sequence == 0
