"""Retention (storage/log/retention.py): which segments go, when their files go, and what moves
with the log start offset.  Our version of the retention cases of Kafka's UnifiedLogTest,
named after them; the clock is passed in (now_ms), as Kafka's tests use MockTime."""
import os
import time

import pytest

from storage import LogConfig, LogDir, PartitionLog, build_batch
from storage.dir.background import BackgroundConfig

NOW = 1_700_000_000_000


def record(ts, value=b"test", **producer):
    return build_batch([value], base_timestamp=ts, **producer)


def config(**kw):
    size = len(record(NOW))
    base = dict(fsync=False, segment_bytes=size * 5, segment_index_bytes=1000, file_delete_delay_ms=0)
    base.update(kw)
    return LogConfig(**base)


def files(log, suffix):
    return sorted(n for n in os.listdir(log.path) if n.endswith(suffix))


@pytest.fixture
def open_log(tmp_path):
    opened = []

    def make(**kw):
        log = PartitionLog.open(tmp_path / f"t-{len(opened)}", config(**kw))
        opened.append(log)
        return log
    yield make
    for log in opened:
        log.close()


def test_delete_old_segments(open_log):                  # testDeleteOldSegments
    log = open_log(retention_ms=999)
    for _ in range(100):
        log.append_as_leader(record(NOW - 1000), 0)
    segments = len(log.segments)
    assert log.delete_old_segments(NOW) == 0 and len(log.segments) == segments   # no high watermark yet
    for hw in range(25, 31):
        log.update_high_watermark(hw)
        log.delete_old_segments(NOW)
        assert log.log_start_offset <= hw
        assert all(s.next_offset - 1 >= hw for s in log.segments if s.size)
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments(NOW)
    assert len(log.segments) == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == 100
    assert [tuple(e) for e in log.epoch_cache.entries] == [(0, 100)]    # the earliest entry moved up
    assert log.delete_old_segments(NOW) == 0


def test_cannot_delete_segments_at_or_above_high_watermark(open_log):   # testCannotDeleteSegmentsAtOrAboveHighWatermark
    log = open_log(retention_ms=999, segment_bytes=512)
    for i in range(100):
        log.append_as_leader(record(NOW - 1000, b"test%d" % i), 0)
    assert len(log.segments) > 5
    for hw in range(0, 101):
        log.update_high_watermark(hw)
        log.delete_old_segments(NOW)
        assert log.log_start_offset <= hw
        first, *rest = log.segments
        assert log.log_start_offset <= first.base_offset <= hw
        assert all(s.base_offset > hw for s in rest)
    assert (log.log_start_offset, len(log.segments), log.active_segment.size) == (100, 1, 0)


def test_size_based_retention(open_log):
    log = open_log(retention_bytes=0, retention_ms=-1)
    size = len(record(NOW))
    for _ in range(15):
        log.append_as_leader(record(NOW), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(NOW) == 3 and log.size_bytes == 0
    log2 = open_log(retention_bytes=size * 7, retention_ms=-1)
    for _ in range(15):
        log2.append_as_leader(record(NOW), 0)
    log2.update_high_watermark(log2.log_end_offset)
    assert log2.delete_old_segments(NOW) == 1           # 15 - 5 = 10 > 7; a second would leave 5
    assert log2.size_bytes == size * 10 and log2.log_start_offset == 5


def test_compact_only_keeps_everything_but_what_lies_below_the_log_start(open_log):
    log = open_log(retention_ms=0, retention_bytes=0, cleanup_policy="compact")
    for _ in range(15):      # a compacted topic takes keyed records only
        log.append_as_leader(build_batch([(b"k", b"test")], base_timestamp=NOW - 10_000), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(NOW) == 0
    log.increment_log_start_offset(6)        # DeleteRecords still deletes below the start
    assert log.log_start_offset == 6 and log.segments[0].base_offset <= 6 < log.segments[0].next_offset


def test_retention_idempotency(open_log):                # testRetentionIdempotency
    log = open_log(retention_ms=900, retention_bytes=-1)
    log.append_as_leader(record(NOW + 100, b"a"), 0)
    log.roll()
    log.append_as_leader(record(NOW, b"b"), 0)
    log.roll()
    log.append_as_leader(record(NOW + 100, b"c"), 0)
    log.update_high_watermark(log.log_end_offset)
    log.increment_log_start_offset(1)
    assert log.delete_old_segments(NOW + 901) == 1       # ours deleted [0] at the DeleteRecords already
    assert log.delete_old_segments(NOW + 901) == 0


@pytest.mark.parametrize("empty_active", [False, True])
def test_retention_deletes_producer_state_snapshots(open_log, empty_active):
    # testRetentionDeletesProducerStateSnapshots
    log = open_log(segment_bytes=2048 * 5, retention_bytes=0, retention_ms=60_000)
    for seq, value in enumerate((b"a", b"b", b"c")):
        log.append_as_leader(record(NOW, value, producer_id=1, producer_epoch=0, base_sequence=seq), 0)
        if seq < 2 or empty_active:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert len(files(log, ".snapshot")) == (3 if empty_active else 2)
    log.delete_old_segments(NOW + 60_001)
    assert len(files(log, ".snapshot")) == 1 and log.log_start_offset == 3
    assert log.producer_state.active_producers[1].last_sequence == 2     # the state itself stays


def test_log_start_offset_movement_deletes_snapshots(open_log):   # testLogStartOffsetMovementDeletesSnapshots
    log = open_log(segment_bytes=2048 * 5, retention_bytes=-1)
    for seq, value in enumerate((b"a", b"b", b"c")):
        log.append_as_leader(record(NOW, value, producer_id=1, producer_epoch=0, base_sequence=seq), 0)
        if seq < 2:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert len(files(log, ".snapshot")) == 2
    log.increment_log_start_offset(log.log_end_offset - 1)
    log.delete_old_segments(NOW)
    assert len(files(log, ".snapshot")) == 1


def test_log_deletion_after_delete_records(open_log):    # testLogDeletionAfterDeleteRecords
    log = open_log()
    for _ in range(15):
        log.append_as_leader(record(NOW), 0)
    assert len(log.segments) == 3
    log.update_high_watermark(log.log_end_offset)
    for start, segments in ((1, 3), (6, 2), (15, 1)):
        log.increment_log_start_offset(start)
        log.delete_old_segments(NOW)
        assert (len(log.segments), log.log_start_offset) == (segments, start)


def test_deleted_files_wait_for_the_delete_delay(open_log):   # testAsyncDelete
    log = open_log(retention_ms=999, file_delete_delay_ms=60_000)
    for _ in range(15):
        log.append_as_leader(record(NOW - 1000), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(NOW) == 3
    waiting = files(log, ".deleted")
    assert waiting and all(n.endswith((".log.deleted", ".index.deleted", ".timeindex.deleted")) for n in waiting)
    assert files(log, ".log") == [f"{15:020d}.log"]
    assert log.delete_pending_files(NOW + 59_999) == 0
    assert log.delete_pending_files(NOW + 60_000) == len(waiting) and files(log, ".deleted") == []


def test_a_crash_between_the_rename_and_the_removal_leaves_nothing_visible(tmp_path):
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, config(retention_ms=999, file_delete_delay_ms=60_000))
    for _ in range(15):
        log.append_as_leader(record(NOW - 1000), 0)
    log.append_as_leader(record(NOW), 0)
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments(NOW)
    start = log.log_start_offset
    log._release_segments()                                  # the process dies
    with PartitionLog.open(path, config(), log_start_offset=start) as again:
        assert os.listdir(path) and not [n for n in os.listdir(path) if n.endswith(".deleted")]
        assert again.log_start_offset == start == again.segments[0].base_offset
        assert [b.base_offset for b in again.batches()] == [15]


def test_segments_without_timestamps_age_by_their_file(open_log):
    log = open_log(retention_ms=999)
    for _ in range(10):
        log.append_as_leader(build_batch([b"x"], base_timestamp=-1), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.segments[0].max_timestamp < 0
    assert log.delete_old_segments(int(time.time() * 1000)) == 0
    assert log.delete_old_segments(int(time.time() * 1000) + 10_000) == 2


def test_logdir_cleanup_logs_commits_the_new_log_start(tmp_path):
    with LogDir.open(tmp_path, config(retention_ms=999)) as logdir:
        log = logdir.partition("t", 0)
        for _ in range(15):
            log.append_as_leader(record(NOW - 1000), 0)
        log.update_high_watermark(log.log_end_offset)
        assert logdir.cleanup_logs(NOW) == 3
        assert logdir.meta.get_partition("t", 0).log_start_offset == 15


def test_the_background_thread_runs_retention_and_checkpoints_and_stops_with_close(tmp_path):
    interval = BackgroundConfig(retention_check_interval_ms=20, checkpoint_interval_ms=20,
                                producer_expiration_check_interval_ms=20)
    logdir = LogDir.open(tmp_path, config(retention_ms=999), background=True, background_config=interval)
    try:
        log = logdir.partition("t", 0)
        for _ in range(15):
            log.append_as_leader(record(int(time.time() * 1000) - 10_000), 0)
        log.update_high_watermark(log.log_end_offset)

        def stored_start():
            offsets = logdir.meta.get_partition("t", 0)
            return None if offsets is None else offsets.log_start_offset

        deadline = time.monotonic() + 10
        while (log.log_start_offset, stored_start()) != (15, 15) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (log.log_start_offset, stored_start()) == (15, 15)
        while len(logdir.background_runs) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert {"retention", "checkpoint", "producer_expiration"} <= set(logdir.background_runs)
    finally:
        logdir.close()
    assert logdir.background_error is None and logdir.background_runs == {}


def test_config_rejects_a_policy_it_does_not_know():
    with pytest.raises(ValueError, match="cleanup_policy"):
        LogConfig(cleanup_policy="forever")
    with pytest.raises(ValueError, match="retention_ms"):
        LogConfig(retention_ms=-2)
    assert LogConfig(cleanup_policy="compact,delete").deletes and not LogConfig(cleanup_policy="compact").deletes


def test_an_io_failure_in_the_background_takes_the_dir_offline_and_ends_the_thread(tmp_path):
    # testBackgroundDeletionWithIOException, in our words
    from storage.core import errors
    from storage.core import io as sio

    class FailingRenames(sio.PosixIO):
        def rename(self, source, target):
            raise OSError(5, "Input/output error")

    interval = BackgroundConfig(retention_check_interval_ms=10, checkpoint_interval_ms=10_000)
    logdir = LogDir.open(tmp_path, config(retention_ms=999), background=True, background_config=interval)
    log = logdir.partition("t", 0)
    for _ in range(15):
        log.append_as_leader(record(int(time.time() * 1000) - 10_000), 0)
    log.update_high_watermark(log.log_end_offset)
    with sio.using(FailingRenames()):
        deadline = time.monotonic() + 10
        while not logdir.offline and time.monotonic() < deadline:
            time.sleep(0.01)
    assert logdir.offline and logdir.failure.errno == 5
    with pytest.raises(errors.LogDirOfflineError):
        log.append_as_leader(record(NOW), 0)
    with pytest.raises(errors.LogDirOfflineError):
        logdir.close()
    assert isinstance(logdir.background_error, errors.LogDirOfflineError)
