"""Log compaction (storage/log/cleaner.py): the cases of Kafka's LogCleanerTest in our words, named
after them, plus the crash-safe swap and what LogDir adds (the dirty ratio, the checkpoint)."""
import os
import time

import pytest

from storage import LogConfig, LogDir, PartitionLog, Record, build_batch, iter_batches
from storage.core import errors, files
from storage.log import cleaner

CONFIG = LogConfig(fsync=False, cleanup_policy="compact", segment_bytes=1024)
LARGE = 2**63 - 1 - CONFIG.delete_retention_ms - 1        # Kafka's largeTimestamp


def open_log(tmp_path, **overrides) -> PartitionLog:
    config = LogConfig(**{**CONFIG.__dict__, **overrides})
    return PartitionLog.open(tmp_path / "test-0", config)


def record(key: int, value: int | None, *, timestamp: int | None = None) -> Record:
    return Record(key=str(key).encode(), value=None if value is None else str(value).encode(), timestamp=timestamp)


def append(log, key: int, value: int | None, **kw):
    return log.append_as_leader([record(key, value, **kw)], 0)


def txn_appender(log, pid: int, epoch: int = 0):
    sequence = [0]

    def append_txn(keys):
        batch = build_batch([record(k, k) for k in keys], producer_id=pid, producer_epoch=epoch,
                            base_sequence=sequence[0], is_transactional=True)
        sequence[0] += len(keys)
        log.append_as_leader(batch, 0)
    return append_txn


def marker(log, pid: int, commit: bool, epoch: int = 0):
    log.append_txn_marker(pid, epoch, commit, coordinator_epoch=0, leader_epoch=0)


def keys_in_log(log) -> list[int]:
    return [int(r.key) for b in log.batches() if not b.is_control for r in b.records()
            if r.key is not None and r.value is not None]


def offsets_in_log(log) -> list[int]:
    return [r.offset for b in log.batches() for r in b.records() if r.key is not None and r.value is not None]


def last_offsets_per_batch(log) -> list[int]:
    return [b.last_offset for b in log.batches()]


def clean(log, first_dirty: int, now: int = 0, offset_map=None) -> int:
    """One round up to the active segment; returns the next first dirty offset."""
    with log.local.lock:
        return cleaner.clean(log, first_dirty, log.segments[-1].base_offset, now, offset_map).end_offset


@pytest.fixture
def log(tmp_path):
    opened = open_log(tmp_path)
    yield opened
    opened.close()


def test_cleaning_with_deletes(log):
    # testCleaningWithDeletes
    while len(log.segments) < 2:
        append(log, log.log_end_offset, log.log_end_offset)
    end = log.log_end_offset
    for key in range(0, end, 2):
        append(log, key, None)
    while len(log.segments) < 4:
        append(log, log.log_end_offset, log.log_end_offset)
    clean(log, 0)
    keys = set(keys_in_log(log))
    assert not any(k in keys for k in range(0, end, 2)), "none of the deleted keys should still exist"
    assert all(k in keys for k in range(1, end, 2))


def test_basic_transaction_aware_cleaning(tmp_path):
    # testBasicTransactionAwareCleaning
    log = open_log(tmp_path, segment_bytes=2048)
    p1, p2 = txn_appender(log, 1), txn_appender(log, 2)
    p1([1, 2])
    p2([2, 3])
    p1([3, 4])
    marker(log, 1, False)
    marker(log, 2, True)
    p1([2])
    marker(log, 1, True)
    aborted = log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)
    log.roll()
    clean(log, 0)
    assert keys_in_log(log) == [3, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8, 9]
    assert log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset) == aborted
    log.close()


def test_clean_with_transactions_spanning_segments(log):
    # testCleanWithTransactionsSpanningSegments
    p1, p2, p3 = txn_appender(log, 1), txn_appender(log, 2), txn_appender(log, 3)
    p1([1, 2])
    p3([2, 3])
    p2([3, 4])
    log.roll()
    p2([5, 6])
    p3([6, 7])
    p1([7, 8])
    marker(log, 2, False)
    p3([8, 9])
    marker(log, 3, True)
    p1([9, 10])
    marker(log, 1, False)
    dirty = clean(log, 0)                      # only the first segment is cleaned
    assert keys_in_log(log) == [2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]
    log.roll()
    txn_appender(log, 2)                       # the producers go on with new sequences
    log.append_as_leader(build_batch([record(11, 11)], producer_id=2, producer_epoch=0, base_sequence=4,
                                     is_transactional=True), 0)
    log.append_as_leader(build_batch([record(12, 12)], producer_id=1, producer_epoch=0, base_sequence=6,
                                     is_transactional=True), 0)
    clean(log, dirty)
    assert keys_in_log(log) == [2, 3, 6, 7, 8, 9, 11, 12]


def test_commit_marker_removal(tmp_path):
    # testCommitMarkerRemoval: kept while its transaction has records, then a delete horizon,
    # then gone once the horizon passed
    log = open_log(tmp_path, segment_bytes=256)
    append_txn = txn_appender(log, 1)
    append_txn([1])
    append_txn([2, 3])
    marker(log, 1, True)
    append_txn([2])
    marker(log, 1, True)
    log.roll()
    dirty = clean(log, 0, LARGE)
    assert keys_in_log(log) == [1, 3, 2]
    assert offsets_in_log(log) == [0, 2, 3, 4, 5]
    append_txn([1, 3])
    marker(log, 1, True)
    log.roll()
    dirty = clean(log, dirty, LARGE)
    assert keys_in_log(log) == [2, 1, 3]
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    # Kafka's test map keeps its latest offset between rounds, so its next rounds clean [0, 9)
    # again: here they start from 0.
    clean(log, 0, LARGE)                       # the same time: the marker is not removed early
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    clean(log, 0, 2**63 - 1)
    assert keys_in_log(log) == [2, 1, 3]
    assert offsets_in_log(log) == [4, 5, 6, 7, 8]
    log.close()


def test_abort_marker_removal(tmp_path):
    # testAbortMarkerRemoval: aborted records go at once, their marker after two passes
    log = open_log(tmp_path, segment_bytes=256)
    append_txn = txn_appender(log, 1)
    append_txn([1])
    append_txn([2, 3])
    marker(log, 1, False)
    append_txn([3])
    marker(log, 1, True)
    log.roll()
    clean(log, 0, LARGE)
    assert keys_in_log(log) == [3]
    assert offsets_in_log(log) == [3, 4, 5]
    clean(log, 0, LARGE)                       # the first pass sets the marker's delete horizon
    clean(log, 0, LARGE + CONFIG.delete_retention_ms)
    assert keys_in_log(log) == [3]
    assert offsets_in_log(log) == [4, 5]
    log.close()


def test_log_cleaner_retains_producer_last_sequence(log):
    # testLogCleanerRetainsProducerLastSequence
    append(log, 0, 0)
    for pid, key, value, sequence in ((1, 0, 1, 0), (2, 0, 2, 0), (3, 0, 3, 0), (2, 1, 1, 1)):
        log.append_as_leader(build_batch([record(key, value)], producer_id=pid, producer_epoch=0,
                                         base_sequence=sequence), 0)
    log.roll()
    clean(log, 0, offset_map=cleaner.OffsetMap(10 * cleaner.BYTES_PER_ENTRY))
    assert last_offsets_per_batch(log) == [1, 3, 4]
    assert {b.producer_id: b.base_sequence + b.last_offset_delta for b in log.batches()} == {1: 0, 2: 1, 3: 0}
    assert keys_in_log(log) == [0, 1]
    assert offsets_in_log(log) == [3, 4]


def test_log_cleaner_retains_last_sequence_even_if_transaction_aborted(log):
    # testLogCleanerRetainsLastSequenceEvenIfTransactionAborted
    append_txn = txn_appender(log, 1)
    append_txn([1])
    append_txn([2, 3])
    marker(log, 1, False)
    log.roll()
    clean(log, 0)
    assert last_offsets_per_batch(log) == [2, 3]
    assert [b.base_sequence + b.last_offset_delta for b in log.batches() if not b.is_control] == [2]
    assert keys_in_log(log) == []
    assert offsets_in_log(log) == [3]
    append_txn([1, 5])
    log.roll()
    clean(log, 0)
    assert last_offsets_per_batch(log) == [3, 5]
    assert keys_in_log(log) == [1, 5]
    assert offsets_in_log(log) == [3, 4, 5]


def test_partial_segment_clean(log):
    # testPartialSegmentClean: a map of one entry still makes progress
    for key in (0, 1, 0, 1, 0):
        append(log, key, key)
    log.roll()

    def tiny_map():
        return cleaner.OffsetMap(2 * cleaner.BYTES_PER_ENTRY)     # 2 slots, 90 %: one key
    clean(log, 2, offset_map=tiny_map())
    assert keys_in_log(log) == [1, 0, 1, 0]
    assert offsets_in_log(log) == [1, 2, 3, 4]
    clean(log, 3, offset_map=tiny_map())
    assert keys_in_log(log) == [0, 1, 0]
    assert offsets_in_log(log) == [2, 3, 4]
    clean(log, 4, offset_map=tiny_map())
    assert keys_in_log(log) == [1, 0]
    assert offsets_in_log(log) == [3, 4]


def test_clean_tombstone(tmp_path):
    # testCleanTombstone: a tombstone outlives its clean by delete_retention_ms, whatever its timestamp
    log = open_log(tmp_path, segment_bytes=1 << 20)
    now = 1_700_000_000_000
    append(log, 0, 0, timestamp=now + CONFIG.delete_retention_ms + 10_000)
    log.roll()
    clean(log, 0, now)
    append(log, 0, None, timestamp=now - CONFIG.delete_retention_ms - 10_000)
    log.roll()
    clean(log, 1, now)
    first = next(iter_batches(log.segments[0].view()))
    assert first.last_offset == 1, "the tombstone should be retained"
    assert first.attributes & cleaner.DELETE_HORIZON and first.base_timestamp == now + CONFIG.delete_retention_ms
    append(log, 1, 1, timestamp=now)
    log.roll()
    clean(log, 2, now)
    assert next(iter_batches(log.segments[0].view())).last_offset == 1, "the tombstone should be retained"
    clean(log, 0, now + CONFIG.delete_retention_ms)               # its horizon passed: gone
    assert [r.key for b in log.batches() for r in b.records()] == [b"1"]
    log.close()


def test_cleaning_with_unkeyed_messages_on_the_leader(log):
    # testCleaningWithUnkeyedMessages, from the leader's side: Kafka's LogValidator refuses them
    with pytest.raises(errors.InvalidRecordError) as refused:
        log.append_as_leader([b"no key"], 0)
    assert refused.value.error_code == 87
    assert log.log_end_offset == 0


def test_cleaning_drops_unkeyed_records_a_follower_wrote(log):
    # testCleaningWithUnkeyedMessages: records without a key are dropped by the cleaner
    log.append_as_follower(build_batch([b"a", b"b"], base_offset=0))
    append(log, 1, 1)
    log.append_as_follower(build_batch([b"c"], base_offset=log.log_end_offset))
    log.roll()
    clean(log, 0)
    assert [r.key for b in log.batches() for r in b.records()] == [b"1"]


def test_build_offset_map(log):
    # testBuildOffsetMap
    for i in range(8):
        append(log, i, i)
    log.roll()
    offset_map = cleaner.OffsetMap(1 << 20)
    stats = cleaner.CleanerStats()
    cleaner.build_offset_map(log, 2, 7, offset_map, stats)
    assert [offset_map.get(str(k).encode()) for k in range(8)] == [-1, -1, 2, 3, 4, 5, 6, -1]
    assert offset_map.latest_offset == 6


def test_segment_grouping(tmp_path):
    # testSegmentGrouping: groups fit one segment's size, and their index sizes
    log = open_log(tmp_path, segment_bytes=300, index_interval_bytes=1)
    while len(log.segments) < 8:
        append(log, log.log_end_offset, log.log_end_offset)
    sealed = log.segments[:-1]
    groups = cleaner.group_segments(log, sealed, log.segments[-1].base_offset)
    assert [s for g in groups for s in g] == sealed
    assert all(sum(s.size for s in g) <= 300 or len(g) == 1 for g in groups)
    whole = cleaner.group_segments(log, sealed, log.segments[-1].base_offset)
    assert len(whole) == len(groups)
    roomy = LogConfig(**{**log.config.__dict__, "segment_bytes": 1 << 20})
    log.config = roomy
    assert len(cleaner.group_segments(log, sealed, log.segments[-1].base_offset)) == 1
    log.close()


@pytest.mark.parametrize("index_bytes", [4, 8, 11])
def test_a_log_whose_index_holds_no_entry_is_cleaned_segment_by_segment(tmp_path, index_bytes):
    # segment.index.bytes under one time-index entry: a segment per batch (as Kafka rolls on a
    # full index); merging them would give the cleaned segment index entries it has no room for.
    log = open_log(tmp_path, segment_index_bytes=index_bytes, index_interval_bytes=0)
    for i in range(12):
        append(log, i % 3, i)
    assert len(log.segments) == 12
    clean(log, 0)
    assert keys_in_log(log) == [2, 0, 1, 2] and offsets_in_log(log) == [8, 9, 10, 11]   # 11: active
    log.close()
    log = open_log(tmp_path, segment_index_bytes=index_bytes, index_interval_bytes=0)
    assert offsets_in_log(log) == [8, 9, 10, 11] and log.log_end_offset == 12
    log.close()


def test_compact_leaves_the_epoch_cache_and_keeps_the_offsets(log):
    for i in range(30):
        append(log, i % 3, i)
    log.assign_epoch_start_offset(1) if hasattr(log, "assign_epoch_start_offset") else None
    log.update_high_watermark(log.log_end_offset)
    epochs = list(log.epoch_cache.entries) if hasattr(log.epoch_cache, "entries") else None
    end = log.log_end_offset
    stats = log.compact(now_ms=0)
    assert stats.end_offset == log.segments[-1].base_offset and stats.records_written < stats.records_read
    assert log.log_end_offset == end and log.first_dirty_offset == stats.end_offset
    if epochs is not None:
        assert list(log.epoch_cache.entries) == epochs
    offsets = [r.offset for b in log.batches() for r in b.records()]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_compact_needs_a_compacting_policy(tmp_path):
    plain = open_log(tmp_path, cleanup_policy="delete")
    with pytest.raises(ValueError):
        plain.compact()
    plain.close()


# ---- the swap, and a crash in the middle of it (LogLoader's swap recovery) --------------------------

def compacted_log(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    for i in range(40):
        append(log, i % 4, i)
    log.update_high_watermark(log.log_end_offset)
    return log


def latest(log) -> dict:
    out = {}
    for b in log.batches():
        for r in b.records():
            out[r.key] = r.value
    return out


@pytest.mark.parametrize("stop_after", ["cleaned", "one_swap", "swapped", "old_deleted", "one_final"])
def test_a_crash_during_the_swap_is_finished_or_undone(tmp_path, monkeypatch, stop_after):
    """The states Kafka's testRecoveryAfterCrashDuringSplitPhase1..5 cover, for a compaction:
    whatever the crash left, the reopened log has every key's latest value and no offset twice."""
    log = compacted_log(tmp_path)
    before = latest(log)
    path = log.path

    class Crash(Exception):
        pass

    real = cleaner.replace_segments
    steps = {"cleaned": 0, "one_swap": 1, "swapped": 4, "old_deleted": 4, "one_final": 4}

    def crashing(log_, cleaned, old, now_ms):
        seam_renames = [0]
        if stop_after == "cleaned":
            raise Crash()
        for suffix_from, suffix_to in ((files.CLEANED_SUFFIX, files.SWAP_SUFFIX),):
            for p in (cleaned.log_path, cleaned.index_path, cleaned.time_index_path, cleaned.txn_index.path):
                if seam_renames[0] == steps[stop_after]:
                    raise Crash()
                if os.path.exists(p):
                    os.rename(p, p[:-len(suffix_from)] + suffix_to)
                seam_renames[0] += 1
        if stop_after == "swapped":
            raise Crash()
        for segment in old:
            segment.retire()
        if stop_after == "old_deleted":
            raise Crash()
        swap_log = cleaned.log_path[:-len(files.CLEANED_SUFFIX)] + files.SWAP_SUFFIX
        os.rename(swap_log, swap_log[:-len(files.SWAP_SUFFIX)])
        raise Crash()
    monkeypatch.setattr(cleaner, "replace_segments", crashing)
    with pytest.raises(Crash):
        log.compact(now_ms=0)
    monkeypatch.setattr(cleaner, "replace_segments", real)
    for segment in log.segments:
        if not segment.closed:
            segment.close()
    reopened = PartitionLog.open(path, log.config)
    assert latest(reopened) == before
    offsets = [r.offset for b in reopened.batches() for r in b.records()]
    assert offsets == sorted(set(offsets))
    assert not [n for n in os.listdir(path) if n.endswith((".swap", ".cleaned", ".deleted"))]
    reopened.close()


def test_swap_files_below_a_cleaned_file_replace_the_old_segments(tmp_path):
    """LogLoader: a `.swap` below the lowest `.cleaned` file is complete and replaces the segment
    files in its range; one at or above it is part of an unfinished round and goes."""
    log = compacted_log(tmp_path)
    path, config = log.path, log.config
    log.close()
    names = sorted(os.listdir(path))
    first_log = os.path.join(path, "00000000000000000000.log")
    kept = b"".join(b.to_bytes() for b in iter_batches(open(first_log, "rb").read()))
    with open(first_log + ".swap", "wb") as f:        # a swap of segment 0 holding the same batches
        f.write(kept)
    later = sorted(n for n in names if n.endswith(".log"))[2]
    with open(os.path.join(path, later + ".cleaned"), "wb") as f:
        f.write(b"partial")
    with open(os.path.join(path, later + ".swap"), "wb") as f:
        f.write(b"partial")
    reopened = PartitionLog.open(path, config)
    assert not [n for n in os.listdir(path) if n.endswith((".swap", ".cleaned"))]
    assert open(first_log, "rb").read() == kept
    reopened.close()


# ---- LogDir: the dirty ratio and the checkpoint ---------------------------------------------------

def test_clean_logs_picks_dirty_compacted_logs_and_checkpoints(tmp_path):
    compacted = LogConfig(fsync=False, cleanup_policy="compact", segment_bytes=400)
    with LogDir.open(tmp_path / "dir", LogConfig(fsync=False), topic_configs={"changelog": compacted}) as logdir:
        dirty = logdir.partition("changelog", 0)
        plain = logdir.partition("events", 0)
        for i in range(60):
            dirty.append_as_leader([record(i % 3, i)], 0)
            plain.append_as_leader([record(i % 3, i)], 0)
        for log in (dirty, plain):
            log.update_high_watermark(log.log_end_offset)
        results = logdir.clean_logs(now_ms=0)
        assert set(results) == {("changelog", 0)}
        assert logdir.clean_logs(now_ms=0) == {}           # now clean: below the dirty ratio
        first_dirty = dirty.first_dirty_offset
        assert first_dirty == dirty.segments[-1].base_offset
    text = (tmp_path / "dir" / "cleaner-offset-checkpoint").read_text()
    assert text == f"0\n1\nchangelog 0 {first_dirty}\n"
    with LogDir.open(tmp_path / "dir", LogConfig(fsync=False), topic_configs={"changelog": compacted}) as logdir:
        assert logdir.partition("changelog", 0).first_dirty_offset == first_dirty


# ---- LogCleanerManagerTest: the cleanable range ------------------------------------------------------

def eight_segments(log, timestamp: int):
    while len(log.segments) < 8:
        append(log, log.log_end_offset, log.log_end_offset, timestamp=timestamp)


def bounds(log, checkpointed, now):
    first = cleaner.first_dirty_offset(log, checkpointed)
    return first, cleaner.first_uncleanable_offset(log, first, now)


def test_cleanable_offsets_for_none(log):
    # testCleanableOffsetsForNone: bounded by the last stable offset (here the high watermark)
    eight_segments(log, 1000)
    log.update_high_watermark(50)
    assert log.last_stable_offset == log.high_watermark
    assert bounds(log, 0, 1000) == (0, log.last_stable_offset)


def test_cleanable_offsets_active_segment(log):
    # testCleanableOffsetsActiveSegment
    eight_segments(log, 1000)
    log.update_high_watermark(log.log_end_offset)
    assert bounds(log, 0, 1000) == (0, log.segments[-1].base_offset)


def test_cleanable_offsets_for_time(tmp_path):
    # testCleanableOffsetsForTime: min_compaction_lag_ms holds back the younger segments
    lag = 3_600_000
    log = open_log(tmp_path, min_compaction_lag_ms=lag)
    t0 = 1_000_000
    while len(log.segments) < 4:
        append(log, log.log_end_offset, 0, timestamp=t0)
    active_at_t0 = log.segments[-1].base_offset
    eight_segments(log, t0 + lag + 1)
    log.update_high_watermark(log.log_end_offset)
    assert bounds(log, 0, t0 + lag + 1) == (0, active_at_t0)
    # testCleanableOffsetsForShortTime: once the lag passed for everything, the active segment bounds it
    assert bounds(log, 0, t0 + 2 * lag + 2) == (0, log.segments[-1].base_offset)
    log.close()


def test_dirty_offset_reset_out_of_range(log):
    # testDirtyOffsetResetIfLargerThanEndOffset, testDirtyOffsetResetIfSmallerThanStartOffset,
    # testCleanableOffsetsNeedsCheckpointReset
    eight_segments(log, 1000)
    log.update_high_watermark(log.log_end_offset)
    assert cleaner.first_dirty_offset(log, 10_000) == 0
    log.increment_log_start_offset(10)
    assert cleaner.first_dirty_offset(log, 0) == 10
    assert cleaner.first_dirty_offset(log, 15) == 15


def test_undecided_transactional_data_not_cleanable(tmp_path):
    # testUndecidedTransactionalDataNotCleanable
    lag = 3_600_000
    log = open_log(tmp_path, min_compaction_lag_ms=lag)
    now = time.time_ns() // 1_000_000 - lag - 1    # the data one lag before the marker (wall clock)
    log.append_as_leader(build_batch([record(1, 1, timestamp=now), record(2, 2, timestamp=now)], producer_id=15,
                                     producer_epoch=0, base_sequence=0, is_transactional=True), 0)
    log.append_as_leader(build_batch([record(3, 3, timestamp=now)], producer_id=15, producer_epoch=0,
                                     base_sequence=2, is_transactional=True), 0)
    log.roll()
    log.update_high_watermark(3)
    now += lag + 1
    assert bounds(log, 0, now) == (0, 0)           # the lag passed, but the data is undecided
    log.append_txn_marker(15, 0, False, coordinator_epoch=15, leader_epoch=0)
    log.roll()
    log.update_high_watermark(4)
    marked = max(b.max_timestamp for b in log.batches())      # the marker's (wall-clock) time
    assert bounds(log, 0, marked) == (0, 3)                    # the first segment is cleanable at once
    assert bounds(log, 0, marked + lag + 1) == (0, 4)          # the marker's, one lag later
    log.close()


def test_grab_filthiest_compacted_log_returns_the_dirtiest(tmp_path):
    # testGrabFilthiestCompactedLogReturnsLogWithDirtiestRatio: every eligible log, dirtiest first
    compacted = LogConfig(**{**CONFIG.__dict__, "segment_bytes": 400})
    with LogDir.open(tmp_path / "dir", LogConfig(fsync=False),
                     topic_configs={"a": compacted, "b": compacted, "c": compacted}) as logdir:
        for topic, rounds in (("a", 20), ("b", 40), ("c", 30)):
            log = logdir.partition(topic, 0)
            for i in range(rounds):
                log.append_as_leader([record(i % 2, i)], 0)
            log.update_high_watermark(log.log_end_offset)
        logs = {key: logdir.partition(*key) for key in logdir.partitions()}
        logs[("a", 0)].first_dirty_offset = logs[("a", 0)].segments[-1].base_offset      # already clean
        assert cleaner.filthiest_first(logs, 0) == [("b", 0), ("c", 0)]


def _two_epochs_of_one_key_each(log):
    """Epoch 0: ten updates of key 0; epoch 1: twelve of key 1; rolled, all committed -- a
    clean keeps only the last of each, so epoch 1's first batch is cleaned away."""
    log.assign_epoch_start_offset(0)
    for i in range(10):
        log.append_as_leader([record(0, i)], 0)
    log.assign_epoch_start_offset(1)
    for i in range(12):
        log.append_as_leader([record(1, i)], 1)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def test_verify_accepts_an_epoch_whose_first_batch_was_compacted_away(tmp_path, capsys):
    from storage.cli import main

    compacted = LogConfig(**{**CONFIG.__dict__, "segment_bytes": 400})
    with LogDir.open(tmp_path / "dir", LogConfig(fsync=False), topic_configs={"c": compacted}) as logdir:
        log = _two_epochs_of_one_key_each(logdir.partition("c", 0))
        logdir.clean_logs(now_ms=0)
        assert [b.partition_leader_epoch for b in log.batches()][0] == 0      # epoch 1 starts later now ...
        assert [tuple(e) for e in log.epoch_cache.entries] == [(0, 0), (1, 10)]   # ... the cache is untouched
    assert main(["verify", str(tmp_path / "dir")]) == 0, capsys.readouterr().out
    os.unlink(tmp_path / "dir" / "cleaner-offset-checkpoint")          # the gaps still say compacted
    assert main(["verify", str(tmp_path / "dir")]) == 0, capsys.readouterr().out


def test_verify_accepts_a_log_compacted_without_a_logdir(tmp_path, capsys):
    """Issue 30 item 18: PartitionLog.compact() writes no cleaner-offset-checkpoint (LogDir
    does), so verify applied the plain lineage rule to the cleaned log and called the epoch
    whose first batches the cleaner removed a disagreement.  The gaps the cleaner leaves say
    the log is compacted, however it was cleaned; a real contradiction stays a problem."""
    from storage.cli import main

    log = _two_epochs_of_one_key_each(open_log(tmp_path / "dir", segment_bytes=400))
    log.compact(now_ms=0)
    assert [b.partition_leader_epoch for b in log.batches()][0] == 0
    assert [b.base_offset for b in log.batches() if b.partition_leader_epoch == 1][0] > 10
    log.close()
    assert not (tmp_path / "dir" / "cleaner-offset-checkpoint").exists()
    assert main(["verify", str(tmp_path / "dir")]) == 0, capsys.readouterr().out
    assert "checkpoint agrees" in capsys.readouterr().out
    # A checkpoint that contradicts a surviving batch is still a problem in a compacted log.
    (tmp_path / "dir" / "test-0" / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n2 5\n")  # epoch 2 at 21
    assert main(["verify", str(tmp_path / "dir")]) == 1
    assert "compacted log" in capsys.readouterr().out


# ---- replicas compacted at different times: no false divergence ----------------------------------------

def replica_dirs(tmp_path, values_b=None):
    """Two log dirs holding the same compacted topic's data; the second one's optional last
    value differs."""
    compacted = LogConfig(**{**CONFIG.__dict__, "segment_bytes": 400})
    dirs = []
    for name, last in (("a", b"final"), ("b", values_b or b"final")):
        with LogDir.open(tmp_path / name, LogConfig(fsync=False), topic_configs={"c": compacted}) as logdir:
            log = logdir.partition("c", 0)
            log.assign_epoch_start_offset(0)
            # A first batch the cleaner rewrites (its key 0 goes, key "static" stays), then holes.
            log.append_as_leader([Record(key=b"static", value=b"s", timestamp=999), record(0, -1, timestamp=999)], 0)
            for i in range(30):
                log.append_as_leader([record(i % 3, i, timestamp=1000 + i)], 0)
            log.append_as_leader([Record(key=b"0", value=last, timestamp=2000)], 0)
            log.roll()
            log.update_high_watermark(log.log_end_offset)
            if name == "a":
                logdir.clean_logs(now_ms=0)          # only the first replica cleans
            else:
                logdir._write_cleaner_checkpoint() if log.first_dirty_offset is not None else None
        dirs.append(str(tmp_path / name))
    return dirs


def test_a_compacted_and_an_uncompacted_replica_are_consistent(tmp_path, monkeypatch):
    from storage.inspect import compare

    dirs = replica_dirs(tmp_path)
    _text, results = compare.local_comparison(dirs)
    assert results[0]["verdict"] == "consistent", results[0]
    monkeypatch.setattr(compare, "is_compacted", lambda *args: False)     # batch by batch: a false alarm
    _text, results = compare.local_comparison(dirs)
    assert results[0]["verdict"] == "divergent_below_hw"


def test_compacted_replicas_that_disagree_on_a_key_diverge(tmp_path):
    from storage.inspect.compare import local_comparison

    _text, results = local_comparison(replica_dirs(tmp_path, values_b=b"other"))
    assert results[0]["verdict"] == "divergent_below_hw"
    assert results[0]["first_divergent_offset"] == 32


def test_a_lagging_replica_and_a_leader_that_cleaned_past_its_end_agree_by_meaning(tmp_path):
    """Swarm seed 186633 (I23): a follower out of the ISR holds a prefix of the log; the leader
    cleaned up to its high watermark (Kafka's LogCleanerManager.cleanableOffsets stops at the
    last stable offset, not at the slowest follower's end) and dropped, below the follower's
    end, every record of the keys that records past it supersede.  The follower gets those
    records when it catches up: the replicas agree by meaning."""
    from storage.inspect.compacted import record_conflict
    from storage.inspect.compare import local_comparison

    compacted = LogConfig(**{**CONFIG.__dict__, "segment_bytes": 400})
    for name, count in (("leader", 30), ("follower", 20)):
        with LogDir.open(tmp_path / name, LogConfig(fsync=False), topic_configs={"c": compacted}) as logdir:
            log = logdir.partition("c", 0)
            log.assign_epoch_start_offset(0)
            log.append_as_leader([Record(key=b"static", value=b"s", timestamp=999)], 0)     # kept by the clean
            for i in range(count):
                log.append_as_leader([record(i % 3, i, timestamp=1000 + i)], 0)
            log.roll()
            log.update_high_watermark(log.log_end_offset)
            if name == "leader":
                logdir.clean_logs(now_ms=0)
                kept = [(r.offset, r.key) for b in log.batches() for r in b.records()]
                assert kept[0] == (0, b"static") and kept[1][0] > 20      # keys 0-2 gone below 20
    assert record_conflict([(name, str(tmp_path / name / "c-0")) for name in ("leader", "follower")]) is None
    # `inspect compare` still says the follower lacks committed data -- from its end (21: audit a
    # quiesced fleet), not from a disagreement below it (18 before: keys 0-2's latest records
    # there, which the leader cleaned).
    _text, results = local_comparison([str(tmp_path / "leader"), str(tmp_path / "follower")])
    assert results[0]["first_divergent_offset"] == 21, results[0]


def test_a_record_the_leader_lacks_with_nothing_past_the_follower_to_supersede_it_diverges(tmp_path):
    """The other side of the rule above: a key superseded only inside the overlap, or not at
    all, is still compared -- a replica that lacks a key's latest record there lost it."""
    from storage.inspect.compacted import record_conflict

    def replica(name, held):
        log = PartitionLog.open(tmp_path / name / "c-0", LogConfig(fsync=False))
        for offset, key, value in held:
            log.append_as_follower(build_batch([(key, value)], base_offset=offset, partition_leader_epoch=0))
        log.close()
        return name, str(tmp_path / name / "c-0")

    follower = replica("follower", [(0, b"k0", b"v0"), (1, b"k1", b"v1"), (2, b"k0", b"v2"), (3, b"k2", b"v3")])
    ahead = replica("ahead", [(1, b"k1", b"v1"), (3, b"k2", b"v3"), (4, b"k0", b"v4")])     # k0 superseded at 4
    assert record_conflict([ahead, follower]) is None
    lost = replica("lost", [(1, b"k1", b"v1"), (3, b"k2", b"v3"), (4, b"k2", b"v4")])     # k0 just gone
    assert record_conflict([lost, follower])["offset"] == 2


# ---- compacted segments: offsets far apart, merging, dump-log ------------------------------------------

def test_over_compacted_log_recovery(tmp_path):
    # LogLoaderTest.testOverCompactedLogRecovery: a follower of a compacted leader gets offsets
    # more than 2^31 apart; the log rolls at the batch's base offset, and reopens with valid indexes
    config = LogConfig(fsync=False, segment_bytes=1000, index_interval_bytes=1, max_message_bytes=64 * 1024)
    log = PartitionLog.open(tmp_path / "t-0", config)
    far = 2**31 - 1
    for base, key in ((0, b"k1"), (far + 2, b"k3"), (far + 3, b"k4"), (far + 4, b"k5")):
        log.append_as_follower(build_batch([(key, b"v")], base_offset=base, partition_leader_epoch=0))
        if base == far + 2:
            assert log.segments[-1].base_offset == far + 2
            assert os.path.exists(os.path.join(log.path, f"{far + 2:020d}.snapshot"))
    assert [s.base_offset for s in log.segments] == [0, far + 2]
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", config, clean_shutdown=False)
    assert [s.base_offset for s in reopened.segments] == [0, far + 2]
    assert all(s.index_problem(thorough=True) is None for s in reopened.segments)
    assert [r.key for b in reopened.batches() for r in b.records()] == [b"k1", b"k3", b"k4", b"k5"]
    reopened.close()


def test_a_later_round_merges_the_small_cleaned_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=600)
    for i in range(60):
        append(log, i % 3, i)
    log.update_high_watermark(log.log_end_offset)
    first = log.compact(now_ms=0)
    assert all(count == 1 for _base, count in first.groups)          # full segments: one each
    sealed_before = len(log.segments) - 1
    log.first_dirty_offset = 0
    second = log.compact(now_ms=0)
    assert any(count > 1 for _base, count in second.groups)           # now small: merged
    assert len(log.segments) - 1 < sealed_before
    assert [int(r.key) for b in log.batches() for r in b.records()][-3:] == [0, 1, 2]
    log.close()


def test_dump_log_of_a_compacted_segment(tmp_path, capsys):
    from storage.cli import main

    log = open_log(tmp_path)
    txn = txn_appender(log, 9)
    txn([1])
    marker(log, 9, False)                     # producer 9's last batch: emptied, its header kept
    append(log, 2, None)                      # a tombstone: its batch gets a delete horizon
    append(log, 3, 3)
    log.roll()
    clean(log, 0, 1_000)
    log.close()
    main(["dump-log", "--files", str(tmp_path / "test-0" / "00000000000000000000.log")])
    lines = capsys.readouterr().out.splitlines()
    empty = next(line for line in lines if line.startswith("baseOffset: 0 "))
    assert " count: 0 " in empty and "producerId: 9" in empty and "baseSequence: 0 lastSequence: 0" in empty
    horizon = next(line for line in lines if line.startswith("baseOffset: 2 "))
    assert f"deleteHorizonMs: OptionalLong[{1_000 + CONFIG.delete_retention_ms}]" in horizon


# ---- the cleaner beside appends, truncation and retention ---------------------------------------------

def test_appends_go_on_while_the_cleaner_runs(log, monkeypatch):
    import threading

    for i in range(60):
        append(log, i % 3, i)
    log.update_high_watermark(log.log_end_offset)
    mid_round, appended = threading.Event(), threading.Event()
    real = cleaner._filter_batch

    def pausing(*args, **kwargs):
        if not mid_round.is_set():
            mid_round.set()
            assert appended.wait(10), "an append waited for the cleaner"
        return real(*args, **kwargs)
    monkeypatch.setattr(cleaner, "_filter_batch", pausing)
    result = {}
    worker = threading.Thread(target=lambda: result.update(stats=log.compact(now_ms=0)))
    worker.start()
    assert mid_round.wait(10)
    end = log.log_end_offset
    append(log, 7, 7)                          # while the round is half done
    appended.set()
    worker.join(10)
    stats = result["stats"]
    assert not stats.aborted and stats.groups and log.log_end_offset == end + 1
    assert latest(log)[b"7"] == b"7" and latest(log)[b"0"] == b"57"


def test_a_truncation_during_the_round_aborts_it(log, monkeypatch):
    for i in range(60):
        append(log, i % 3, i)
    log.update_high_watermark(log.log_end_offset)
    before = [(r.offset, r.key, r.value) for b in log.batches() for r in b.records()]
    real = cleaner._filter_batch
    cut = []

    def truncating(*args, **kwargs):
        if not cut:
            cut.append(log.truncate_to(50))     # a follower's truncation, on another code path
        return real(*args, **kwargs)
    monkeypatch.setattr(cleaner, "_filter_batch", truncating)
    stats = log.compact(now_ms=0)
    assert stats.aborted and stats.groups == [] and log.first_dirty_offset is None
    assert [(o, k, v) for b in log.batches() for o, k, v in [(r.offset, r.key, r.value) for r in b.records()]] == \
        [x for x in before if x[0] < 50]
    assert not [n for n in os.listdir(log.path) if n.endswith(".cleaned")]


def test_retention_during_the_round_aborts_it(tmp_path, monkeypatch):
    log = open_log(tmp_path, cleanup_policy="compact,delete", retention_bytes=1)
    for i in range(60):
        append(log, i % 3, i)
    log.update_high_watermark(log.log_end_offset)
    real = cleaner._filter_batch
    deleted = []

    def retaining(*args, **kwargs):
        if not deleted:
            deleted.append(log.delete_old_segments(now_ms=0))
        return real(*args, **kwargs)
    monkeypatch.setattr(cleaner, "_filter_batch", retaining)
    stats = log.compact(now_ms=0)
    assert deleted[0] > 0 and stats.aborted
    assert not [n for n in os.listdir(log.path) if n.endswith((".cleaned", ".swap"))]
    log.close()


def test_cleaning_in_a_loop_beside_a_writer_thread(tmp_path, monkeypatch):
    """A stress of the cleaner's locking: one thread appends keyed records (rolling small
    segments), another cleans round after round, with few segments allowed open (so the
    open-segment cache suspends segments under both); at the end every key's latest value is
    the last one written, offsets strictly increase, and the reopened log verifies."""
    import threading

    from storage.cli import main
    from storage.log.segment import open_segments

    monkeypatch.setattr(open_segments, "limit", 16)

    compacted = LogConfig(**{**CONFIG.__dict__, "segment_bytes": 300, "min_cleanable_dirty_ratio": 0.0})
    with LogDir.open(tmp_path / "dir", LogConfig(fsync=False), topic_configs={"c": compacted}) as logdir:
        log = logdir.partition("c", 0)
        last, done, failures, rounds, written = {}, threading.Event(), [], [0], [0]

        def writer():
            # at least 1,500 records, and on until the cleaner has had four rounds beside the
            # writes (a slow machine can otherwise finish the writes within three rounds)
            try:
                for i in range(30_000):
                    if i >= 1500 and rounds[0] > 3:
                        break
                    key = i % 7
                    append(log, key, i)
                    last[str(key).encode()] = str(i).encode()
                    written[0] = i + 1
                    log.update_high_watermark(log.log_end_offset)
            except Exception as exc:   # noqa: BLE001 - reported below
                failures.append(exc)
            finally:
                done.set()

        def cleaner_loop():
            try:
                while not done.is_set():
                    logdir.clean_logs(now_ms=0)
                    rounds[0] += 1
            except Exception as exc:   # noqa: BLE001
                failures.append(exc)

        threads = [threading.Thread(target=writer), threading.Thread(target=cleaner_loop)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == [] and rounds[0] > 3
        logdir.clean_logs(now_ms=0)
        assert latest(log) == last
        offsets = [r.offset for b in log.batches() for r in b.records()]
        assert offsets == sorted(set(offsets)) and len(offsets) < written[0]
    assert main(["verify", str(tmp_path / "dir")]) == 0


# ---- the epoch cache of a compacted log after an unclean shutdown ---------------------------------------

def _unclean_reopen(log):
    path, config = log.path, log.config
    log.flush()
    for segment in log.segments:          # the process dies: no clean shutdown
        segment.close()
    return PartitionLog.open(path, config, recovery_point=0, clean_shutdown=False)


def test_an_unclean_open_keeps_the_epoch_start_the_cleaner_removed(tmp_path):
    """Recovery rebuilds the cache from the batches when they disagree; a compacted segment whose
    epoch's first batch was cleaned away does not disagree.  Rebuilding moved epoch 1's start
    from 5 to 13, and OffsetForLeaderEpoch(0) then answered 13: a follower holding divergent
    epoch-0 records in 5..12 would have kept them."""
    log = open_log(tmp_path, segment_bytes=700)
    log.assign_epoch_start_offset(0)
    for i in range(5):
        append(log, 0, i)
    log.assign_epoch_start_offset(1)
    for i in range(9):
        log.append_as_leader([record(1, i)], 1)            # the first of them is cleaned away
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    log.compact(now_ms=0)
    assert [(b.base_offset, b.partition_leader_epoch) for b in log.batches()] == [(4, 0), (13, 1)]
    reopened = _unclean_reopen(log)
    assert [tuple(e) for e in reopened.epoch_cache.entries] == [(0, 0), (1, 5)]
    assert reopened.end_offset_for_epoch(0) == (0, 5)
    reopened.close()


def test_an_unclean_open_still_rebuilds_a_cache_the_batches_contradict(tmp_path):
    log = open_log(tmp_path)
    log.assign_epoch_start_offset(0)
    for i in range(10):
        append(log, i, i)                                    # epoch 0 throughout
    path, config = log.path, log.config
    log.flush()
    for segment in log.segments:
        segment.close()
    with open(os.path.join(path, "leader-epoch-checkpoint"), "w") as f:
        f.write("0\n2\n0 0\n1 5\n")                          # says epoch 1 from 5: the batches say 0
    reopened = PartitionLog.open(path, config, recovery_point=0, clean_shutdown=False)
    assert [tuple(e) for e in reopened.epoch_cache.entries] == [(0, 0)]
    reopened.close()


# ---- damage: the cleaner never launders a bad CRC (KIP-346 uncleanable partitions) ------------------

def _flip_a_value_byte(segment_path, batch_index: int, kind: str = "crc") -> bytes:
    """Flip the last byte of the batch_index-th batch of a segment (a record's value: the CRC
    covers it, the size and magic stay sound), or (kind "size") make its length field claim more
    bytes than the segment holds; returns the damaged file's bytes."""
    data = bytearray(open(segment_path, "rb").read())
    batch = list(iter_batches(bytes(data), verify=False))[batch_index]
    if kind == "size":
        data[batch.position + 8:batch.position + 12] = (len(data) * 2).to_bytes(4, "big")
    else:
        data[batch.position + batch.size_bytes - 1] ^= 0x01
    with open(segment_path, "wb") as f:
        f.write(data)
    return bytes(data)


def _damaged_compacted_log(tmp_path, where: str, kind: str = "crc"):
    """A compacted log of keys 0..2 over several sealed segments, one batch of the first segment
    damaged; `where` = "dirty" (the offset map reads it) or "clean" (below the first dirty
    offset: only the rewrite reads it)."""
    log = open_log(tmp_path, segment_bytes=400)
    for i in range(30):
        append(log, i % 3, i)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    if where == "clean":
        log.first_dirty_offset = log.segments[1].base_offset
    first = log.segments[0]
    first.flush()
    damaged = _flip_a_value_byte(first.log_path, 1, kind)
    return log, first.log_path, damaged


@pytest.mark.parametrize("where, kind", [("dirty", "crc"), ("clean", "crc"), ("dirty", "size"), ("clean", "size")])
def test_a_damaged_batch_makes_the_partition_uncleanable(tmp_path, where, kind):
    # Kafka's LogCleanerTest.testCorruptMessageSizeLargerThanBytesAvailable and
    # testMessageLargerThanMaxMessageSizeWithCorruptHeader (the cleaner stops on a corrupt batch
    # instead of cleaning it: a size field claiming more than the segment holds), and a CRC
    # failure; then LogCleanerManager.markPartitionUncleanable instead of an escaping error.
    log, path, damaged = _damaged_compacted_log(tmp_path, where, kind)
    first_dirty = log.first_dirty_offset
    stats = log.compact(now_ms=0)
    assert stats.aborted and stats.uncleanable is not None
    assert ("CRC mismatch" if kind == "crc" else "uncleanable") in stats.uncleanable and path in stats.uncleanable
    assert open(path, "rb").read() == damaged               # never re-encoded: byte-identical
    assert not [n for n in os.listdir(log.path) if n.endswith((".cleaned", ".swap"))]
    assert log.first_dirty_offset == first_dirty
    if kind == "crc":
        with pytest.raises(errors.CorruptRecordError):      # the damage stays visible to readers
            list(iter_batches(open(path, "rb").read()))
    else:                                                   # a walk stops there (the cleaner used to
        assert sum(b.size_bytes for b in iter_batches(damaged)) < len(damaged)   # drop the rest silently)
    again = log.compact(now_ms=0)                          # later rounds skip it
    assert again.uncleanable == stats.uncleanable and open(path, "rb").read() == damaged
    assert cleaner.filthiest_first({("test", 0): log}, 0) == []
    log.close()


def test_logdir_reports_uncleanable_partitions_until_the_damage_is_gone(tmp_path):
    compacted = LogConfig(**{**CONFIG.__dict__, "segment_bytes": 400})
    with LogDir.open(tmp_path / "dir", LogConfig(fsync=False), topic_configs={"c": compacted}) as logdir:
        log = logdir.partition("c", 0)
        for i in range(30):
            append(log, i % 3, i)
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        log.segments[0].flush()
        damaged = _flip_a_value_byte(log.segments[0].log_path, 1)
        results = logdir.clean_logs(now_ms=0)
        assert results[("c", 0)].uncleanable is not None
        assert list(logdir.uncleanable_partitions) == [("c", 0)]
        assert logdir.clean_logs(now_ms=0) == {}             # skipped: not picked again
        assert open(log.segments[0].log_path, "rb").read() == damaged
        assert not (tmp_path / "dir" / "cleaner-offset-checkpoint").exists() or \
            "c 0" not in (tmp_path / "dir" / "cleaner-offset-checkpoint").read_text()
        assert log.increment_log_start_offset(log.segments[1].base_offset)   # DeleteRecords: the damaged
        assert open(log.segments[0].log_path, "rb").read() != damaged            # segment goes
        assert logdir.uncleanable_partitions == {}
        assert logdir.clean_logs(now_ms=0)[("c", 0)].uncleanable is None  # cleaned again


def test_a_damaged_first_batch_does_not_stop_clean_logs(tmp_path):
    # The dirty-ratio pass reads each dirty segment's first batch (max_compaction_lag_ms): a bad
    # magic there raised out of LogDir.clean_logs, and no log of the dir was cleaned.
    compacted = LogConfig(**{**CONFIG.__dict__, "segment_bytes": 400})
    with LogDir.open(tmp_path / "dir", LogConfig(fsync=False), topic_configs={"c": compacted, "d": compacted}) as logdir:
        damaged, healthy = logdir.partition("c", 0), logdir.partition("d", 0)
        for log in (damaged, healthy):
            for i in range(30):
                append(log, i % 3, i)
            log.roll()
            log.update_high_watermark(log.log_end_offset)
        damaged.segments[0].flush()
        with open(damaged.segments[0].log_path, "r+b") as f:
            f.seek(16)                                 # the first batch's magic byte
            f.write(b"\x07")
        results = logdir.clean_logs(now_ms=0)
        assert results[("d", 0)].uncleanable is None and results[("d", 0)].groups
        assert "invalid magic" in results[("c", 0)].uncleanable
        assert list(logdir.uncleanable_partitions) == [("c", 0)]
