"""Append rules where issue 13 found the engine lax or unlike Kafka (items 4 and 8)."""
import errno
import os

import pytest

from storage import LogConfig, PartitionLog, build_batch
from storage.core import errors
from storage.core import io as sio
from storage.log import appends

CONFIG = LogConfig(segment_bytes=1 << 20, fsync=False)


def _batch_with_last_offset_delta(base_offset: int, delta: int) -> bytes:
    """A valid batch (CRC included) claiming `delta` as its last offset delta."""
    from storage.core._native import ffi, lib

    raw = bytearray(build_batch([b"x"], base_offset=base_offset))
    info = ffi.new("plog_batch_info *")
    assert lib.plog_batch_parse(ffi.from_buffer(raw), len(raw), 0, 0, info) == 0
    info.last_offset_delta = delta
    with ffi.from_buffer(raw) as pointer:
        assert lib.plog_batch_finish(pointer, len(raw), info) == 0
    return bytes(raw)


def test_a_follower_batch_whose_offsets_overflow_int64_is_refused(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    batch = _batch_with_last_offset_delta(2**63 - 10, 100)
    with pytest.raises(errors.CorruptRecordError) as info:
        log.append_as_follower(batch)
    assert info.value.position == 0
    at_the_edge = build_batch([b"x"], base_offset=2**63 - 1)   # no offset could follow it
    with pytest.raises(errors.CorruptRecordError):
        log.append_as_follower(at_the_edge)
    assert (log.log_end_offset, log.size_bytes, len(log.segments)) == (0, 0, 1)
    log.close()


def test_a_refused_append_leaves_no_new_empty_segment(tmp_path):
    """A follower chunk whose offsets span more than a segment can index (2^31 - 1 past its
    base) used to roll first and then fail, leaving an empty segment behind."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    log.append_as_follower(build_batch([b"a"], base_offset=0))
    chunk = build_batch([b"b"], base_offset=10) + build_batch([b"c"], base_offset=10 + 2**31 + 5)
    with pytest.raises(errors.RecordListTooLargeError):
        log.append_as_follower(chunk)
    assert [s.base_offset for s in log.segments] == [0] and log.log_end_offset == 1
    assert sorted(n for n in os.listdir(log.path) if n.endswith(".log")) == [f"{0:020d}.log"]
    # Each batch on its own fits a segment: the log rolls once and takes both.
    log.append_as_follower(chunk[:len(build_batch([b"b"], base_offset=10))])
    log.append_as_follower(build_batch([b"c"], base_offset=10 + 2**31 + 5))
    assert log.log_end_offset == 10 + 2**31 + 6
    log.close()


def test_truncate_to_the_end_offset_clears_the_epoch_started_there(tmp_path):
    """Kafka's UnifiedLogTest.testTruncateToEndOffsetClearsEpochCache: a leader's trivial
    epoch entry at the log end offset goes when it truncates to the log end offset or beyond
    it as a follower."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    log.append_as_follower(build_batch([b"a", b"b"], base_offset=27, partition_leader_epoch=19))
    assert tuple(log.epoch_cache.latest_entry) == (19, 27) and log.log_end_offset == 29
    for epoch, target in ((20, 29), (24, 30)):
        log.assign_epoch_start_offset(epoch)
        assert tuple(log.epoch_cache.latest_entry) == (epoch, 29)
        log.truncate_to(target)
        assert tuple(log.epoch_cache.latest_entry) == (19, 27) and log.log_end_offset == 29
    log.close()


def test_time_based_roll_falls_back_to_the_segment_creation_time(tmp_path, monkeypatch):
    """LogSegment.shouldRoll: without a timestamp in the first batch, the time waited is
    measured from the segment's creation."""
    config = LogConfig(segment_ms=1000, fsync=False)
    log = PartitionLog.open(tmp_path / "t-0", config)
    no_timestamp = build_batch([b"a"], base_timestamp=-1)
    log.append_as_follower(no_timestamp)
    created = log.active_segment.created_ms
    monkeypatch.setattr(appends, "_now_ms", lambda: created + 999)     # the clock the append passes to C
    log.append_as_follower(build_batch([b"b"], base_offset=1, base_timestamp=-1))
    assert len(log.segments) == 1
    monkeypatch.setattr(appends, "_now_ms", lambda: created + 1001)
    log.append_as_follower(build_batch([b"c"], base_offset=2, base_timestamp=-1))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


class FailRename(sio.PosixIO):
    def __init__(self):
        self.armed = False

    def rename(self, source, target):
        if self.armed and str(target).endswith("leader-epoch-checkpoint"):
            raise OSError(errno.EIO, "injected EIO")
        return super().rename(source, target)


def test_an_epoch_checkpoint_that_cannot_be_written_fails_the_append_and_keeps_the_lineage_true(tmp_path):
    """The append of a batch of a new epoch must persist the epoch; when the checkpoint write
    fails, the append fails with a StorageError (the dir goes offline, not a bare OSError), and
    after a reopen the epoch lineage matches the batches that survived."""
    path = tmp_path / "t-0"
    seam = FailRename()
    with sio.using(seam):
        log = PartitionLog.open(path, CONFIG)
        log.append_as_leader([b"a"], 1)
        log.flush()
        seam.armed = True
        with pytest.raises(errors.LogDirOfflineError) as info:
            log.append_as_leader([b"b"], 2)
        assert info.value.first_failure.errno == errno.EIO
        with pytest.raises(errors.LogDirOfflineError):
            log.close()
    log = PartitionLog.open(path, CONFIG, recovery_point=1)
    batches = list(log.batches())
    expected = [(1, 0)] + ([(2, 1)] if len(batches) == 2 else [])
    assert [tuple(e) for e in log.epoch_cache.entries] == expected
    assert [b.partition_leader_epoch for b in batches] == [1, 2][:len(batches)]
    log.close()
