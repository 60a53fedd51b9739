"""PartitionLog.append_batches: separate batch buffers appended as one chunk, all or nothing,
with the leader's or the follower's rules (the same log as appending the concatenation)."""
from __future__ import annotations

import errno

import pytest
from test_failure_state import FaultyIO

import storage
from storage import LogConfig, LogDir, PartitionLog, errors
from storage import io as sio

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256, fsync=False)


def batches(count: int, first_offset: int = 0, records: int = 3, epoch: int = 1) -> list[bytes]:
    return [bytes(storage.build_batch([b"r%d-%d" % (i, j) for j in range(records)], base_offset=first_offset + i * records,
                                      partition_leader_epoch=epoch)) for i in range(count)]


def files(log: PartitionLog) -> list[bytes]:
    return [open(s.log_path, "rb").read() for s in log.segments]


def test_follower_batches_make_the_log_the_concatenation_makes(tmp_path):
    data = batches(40, epoch=2) + batches(10, first_offset=120, epoch=3)
    with PartitionLog.open(tmp_path / "a-0", CONFIG) as a, PartitionLog.open(tmp_path / "b-0", CONFIG) as b:
        for i in range(0, len(data), 7):
            info = a.append_batches(data[i:i + 7], as_leader=False)
            assert info == b.append_as_follower(b"".join(data[i:i + 7]))
        assert files(a) == files(b) and len(a.segments) > 1          # rolls happen between calls
        assert a.epoch_cache.entries == b.epoch_cache.entries == [(2, 0), (3, 120)]


def test_leader_batches_get_offsets_and_the_epoch(tmp_path):
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_as_leader([b"first"], leader_epoch=4)
        info = log.append_batches(batches(5, first_offset=1000, epoch=-1), as_leader=True, leader_epoch=5)
        assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (1, 15, 5, 15)
        got = [(b.base_offset, b.partition_leader_epoch) for b in log.batches()]
        assert got == [(0, 4)] + [(1 + 3 * i, 5) for i in range(5)]
        assert log.epoch_cache.entries == [(4, 0), (5, 1)]
        with pytest.raises(ValueError):
            log.append_batches(batches(1), as_leader=True)           # a leader append needs an epoch


def test_a_bad_batch_anywhere_writes_nothing_and_is_named(tmp_path):
    data = batches(6)
    bad = bytearray(data[3])
    bad[-1] ^= 0xFF
    data[3] = bytes(bad)
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_batches(batches(2, first_offset=100), as_leader=False)
        before = (log.log_end_offset, log.size_bytes, files(log))
        for as_leader in (False, True):
            shifted = batches(3, first_offset=200) + [data[3]] + batches(2, first_offset=212)
            with pytest.raises(errors.CorruptRecordError) as info:
                log.append_batches(shifted, as_leader=as_leader, leader_epoch=1)
            assert info.value.position == sum(map(len, shifted[:3])) and "CRC" in str(info.value)
            assert (log.log_end_offset, log.size_bytes, files(log)) == before


def test_a_partial_batch_at_the_end_is_refused_not_cut(tmp_path):
    data = batches(3)
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        with pytest.raises(errors.CorruptRecordError) as info:
            log.append_batches(data[:2] + [data[2][:40]], as_leader=False)
        assert info.value.position == len(data[0]) + len(data[1])
        assert log.size_bytes == 0 and log.log_end_offset == 0
        # A batch split across two buffers is whole once gathered: the same bytes.
        info = log.append_batches([data[0][:30], data[0][30:]], as_leader=False)
        assert info.last_offset == 2 and log.append_batches([], as_leader=False).batch_count == 0


@pytest.mark.parametrize("write", ["append_batches", "leader bytes"])
@pytest.mark.parametrize("operation", ["pwrite", "ftruncate"])
def test_an_io_failure_takes_the_dir_offline_and_keeps_what_was_there(tmp_path, operation, write):
    """Through the gathering copy (append_batches) and through the vectored write of a
    leader's immutable bytes (PLOG_APPEND_READONLY, test_append_chunk.py)."""
    seam = FaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", LogConfig(fsync=True))
        log = logdir.partition("t", 0)
        log.append_batches(batches(4), as_leader=True, leader_epoch=0)
        log.flush()
        seam.fail["pwrite"] = (errno.EIO, 0)
        if operation == "ftruncate":            # the cut-back after the failed write fails too
            seam.fail["ftruncate"] = (errno.EIO, 0)
        with pytest.raises(errors.LogDirOfflineError):
            if write == "append_batches":
                log.append_batches(batches(4), as_leader=True, leader_epoch=0)
            else:
                log.append_as_leader(b"".join(batches(4)), 0)
        assert seam.fired[0] == "pwrite"
        with pytest.raises(errors.LogDirOfflineError):
            log.append_batches(batches(1), as_leader=False)
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
    with LogDir.open(tmp_path / "d", LogConfig(fsync=True)) as reopened:
        assert [b.base_offset for b in reopened.partition("t", 0).batches()][:4] == [0, 3, 6, 9]
