"""The failure state of a log dir (storage/core/failure.py; issue 13 item 1).

Any I/O failure takes the dir offline: the failing call and every later call on its partitions
raise LogDirOfflineError (KAFKA_STORAGE_ERROR, 56) naming the dir and the first failure; nothing
is retried into success (fsyncgate: after a failed fsync a later fsync proves nothing); close()
writes neither offsets nor the clean-shutdown marker; a new LogDir.open recovers the dir as after
an unclean shutdown.  Faults are injected through the I/O seam (storage.core.io).
"""
import errno
import os

import pytest
from faulty_io import FaultyIO

from storage import LogConfig, LogDir, PartitionLog
from storage.core import errors
from storage.core import io as sio
from storage.dir.logdir import CLEAN_SHUTDOWN_FILE

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=128, segment_index_bytes=4096, fsync=True)


def _fill(log, count, epoch=0):
    for i in range(count):
        log.append_as_leader([b"value-%03d" % i], epoch)


def test_a_failed_fsync_is_never_followed_by_a_successful_flush(tmp_path):
    """fsyncgate: the flush whose fsync failed raises, the recovery point stays, and the next
    flush -- whose fsync would succeed -- raises too instead of claiming durability."""
    seam = FaultyIO()
    with sio.using(seam):
        log = PartitionLog.open(tmp_path / "t-0", CONFIG)
        _fill(log, 3)
        log.flush()
        durable = log.recovery_point
        _fill(log, 3)
        seam.fail["fsync"] = (errno.EIO, 0)
        with pytest.raises(errors.LogDirOfflineError) as info:
            log.flush()
        assert info.value.errno == errno.EIO and info.value.first_failure.errno == errno.EIO
        assert info.value.log_dir == str(tmp_path)
        assert log.recovery_point == durable
        assert seam.fail == {}                     # the disk "recovered"
        with pytest.raises(errors.LogDirOfflineError):
            log.flush()
        assert log.recovery_point == durable
        with pytest.raises(errors.LogDirOfflineError):
            log.append_as_leader([b"more"], 0)
        with pytest.raises(errors.LogDirOfflineError):
            list(log.batches())
        with pytest.raises(errors.LogDirOfflineError):
            log.close()
        with pytest.raises(errors.LogDirOfflineError):   # a retried close claims nothing either
            log.close()


def test_logdir_goes_offline_and_a_retried_close_writes_no_clean_marker(tmp_path):
    seam = FaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", CONFIG)
        a = logdir.partition("a", 0)
        b = logdir.partition("b", 0)
        _fill(a, 4)
        _fill(b, 4)
        logdir.flush()
        assert not logdir.offline and logdir.offline_dirs() == []
        _fill(a, 2)
        seam.fail["fsync"] = (errno.EIO, 0)
        with pytest.raises(errors.LogDirOfflineError):
            a.flush()
        assert logdir.offline and logdir.offline_dirs() == [logdir.path]
        assert logdir.failure.errno == errno.EIO
        # Every partition of the dir is offline, not only the one that failed.
        with pytest.raises(errors.LogDirOfflineError) as info:
            b.append_as_leader([b"x"], 0)
        assert info.value.error_code == errors.Errors.KAFKA_STORAGE_ERROR == 56
        with pytest.raises(errors.LogDirOfflineError):
            logdir.partition("c", 0)
        with pytest.raises(errors.LogDirOfflineError):
            logdir.checkpoint()
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
        assert not os.path.exists(tmp_path / "d" / CLEAN_SHUTDOWN_FILE)
    # Reopening recovers as after an unclean shutdown and keeps what was flushed.
    with LogDir.open(tmp_path / "d", CONFIG) as reopened:
        assert not reopened.had_clean_shutdown and not reopened.offline
        assert reopened.partition("a", 0).log_end_offset >= 4
        assert reopened.partition("b", 0).log_end_offset == 4


def test_a_failed_marker_fsync_removes_the_marker(tmp_path):
    """The clean-shutdown marker is written tmp -> fsync -> rename -> fsync(dir); when the last
    step fails the renamed marker must not stay to claim a clean shutdown."""
    seam = FaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", CONFIG)
        _fill(logdir.partition("a", 0), 3)
        seam.fail["rename"] = (errno.EIO, 0)
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
        assert not os.path.exists(tmp_path / "d" / CLEAN_SHUTDOWN_FILE)
    with LogDir.open(tmp_path / "d", CONFIG) as reopened:
        assert not reopened.had_clean_shutdown
        assert reopened.partition("a", 0).log_end_offset == 3


@pytest.mark.parametrize("operation", ["pwrite", "fsync", "ftruncate", "rename", "fsync_dir"])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_every_io_failure_of_a_workload_takes_the_dir_offline(tmp_path, operation, code):
    """Whatever operation fails first, with whichever errno, the call raises LogDirOfflineError,
    every later call does too, and a reopen finds a prefix of what was appended that holds at
    least what was flushed before the failure."""
    seam = FaultyIO()
    appended = []
    attempted = None     # the value of the append that failed, if an append failed
    flushed = 0
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", CONFIG)
        log = logdir.partition("t", 0)
        seam.fail[operation] = (code, 3)
        with pytest.raises(errors.LogDirOfflineError) as info:
            for i in range(200):
                attempted = b"v%04d" % i
                log.append_as_leader([attempted], i // 50)
                appended.append(attempted)
                attempted = None
                if i % 7 == 6:
                    log.flush()
                    flushed = log.recovery_point
                if i % 23 == 22:
                    log.truncate_to(log.log_end_offset - 1)
                    appended.pop()
                if i % 31 == 30:
                    log.roll()
            logdir.close()
        assert seam.fired == [operation]
        assert info.value.first_failure.errno == code
        with pytest.raises(errors.LogDirOfflineError):
            log.read(0, 1 << 20)
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
    with LogDir.open(tmp_path / "d", CONFIG) as reopened:
        assert not reopened.had_clean_shutdown
        log = reopened.partition("t", 0)
        values = [r.value for batch in log.batches() for r in batch.records()]
        # A prefix of what was acknowledged -- or all of it and the append that failed: an
        # unacknowledged write may survive, as in Kafka.
        assert values == appended[:len(values)] or values == appended + [attempted]
        assert len(values) >= flushed


@pytest.mark.parametrize("operation", ["fsync", "rename", "fsync_dir"])   # no fsync/rename comes before it
def test_a_failed_epoch_checkpoint_write_fails_the_append_and_the_lineage_stays_true(tmp_path, operation):
    """Issue 13 item 4: when the leader-epoch checkpoint cannot be written during an append
    that starts a new epoch, the append raises a StorageError (the dir goes offline: no bare
    OSError, nothing acknowledged), and after the reopen the epoch lineage is what the batches
    on disk say -- the epoch is never lost while its batch survives, nor kept without it."""
    seam = FaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", CONFIG)
        log = logdir.partition("t", 0)
        _fill(log, 5, epoch=1)
        log.flush()
        seam.fail[operation] = (errno.EIO, 0)     # the next one: the epoch-2 checkpoint write
        with pytest.raises(errors.LogDirOfflineError) as info:
            log.append_as_leader([b"epoch two"], 2)
        assert isinstance(info.value, errors.StorageError) and info.value.error_code == 56
        assert seam.fired == [operation]
        if operation == "rename":
            assert "leader-epoch-checkpoint" in str(info.value.first_failure)
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
    with LogDir.open(tmp_path / "d", CONFIG) as reopened:
        log = reopened.partition("t", 0)
        batch_epochs = {}
        for batch in log.batches():
            batch_epochs.setdefault(batch.partition_leader_epoch, batch.base_offset)
        assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries] == sorted(batch_epochs.items())
        assert log.log_end_offset == 5            # the failed append was taken back (item 17 below)


def _partition_files(path) -> dict:
    """name -> bytes of a partition dir's segment files (the epoch checkpoint left out)."""
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))
            if n.endswith((".log", ".index", ".timeindex", ".txnindex"))}


@pytest.mark.parametrize("role", ["leader", "follower", "follower-pieces"])
@pytest.mark.parametrize("operation", ["pwrite", "fsync", "rename"])
def test_enospc_on_the_epoch_checkpoint_leaves_nothing_of_the_append(tmp_path, operation, role):
    """Issue 30 item 17: ENOSPC on the leader-epoch-checkpoint write of an append that starts an
    epoch.  The append raised but its batch was applied (the log end offset moved, the bytes
    stayed and came back after a restart).  Now nothing of it is visible -- log end offset,
    reads, indexes, producer state, epoch cache -- and the reopened dir holds the files as they
    were (Kafka assigns the epoch before it appends: UnifiedLog.append)."""
    from storage import build_batch
    seam = FaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", CONFIG)
        log = logdir.partition("t", 0)
        _fill(log, 5, epoch=1)
        log.flush()
        before = _partition_files(log.path)
        # the epoch-2 checkpoint's (the segment's own pwrite comes first and passes)
        seam.fail[operation] = (errno.ENOSPC, 1 if operation == "pwrite" else 0)
        batch = build_batch([b"epoch two"], base_offset=5, partition_leader_epoch=2, producer_id=7,
                            producer_epoch=0, base_sequence=0)
        with pytest.raises(errors.LogDirOfflineError) as info:
            if role == "leader":
                log.append_as_leader(batch, 2)
            elif role == "follower":
                log.append_as_follower(batch)
            else:                       # vectored writes of the caller's buffers (appends._follower_pieces)
                second = build_batch([b"more"], base_offset=6, partition_leader_epoch=3)
                log.append_batches([batch, second], as_leader=False)
        assert seam.fired == [operation]
        assert "No space left" in str(info.value.first_failure), info.value.first_failure
        assert "leader-epoch-checkpoint" in str(info.value.first_failure)
        assert log.log_end_offset == 5
        assert [tuple(e) for e in log.epoch_cache.entries] == [(1, 0)]
        assert log.segments[-1].size == len(before["00000000000000000000.log"])
        assert log.segments[-1].offset_index_entries() == []  or log.segments[-1].offset_index_entries()[-1][0] < 5
        assert 7 not in log.producer_state.active_producers
        assert _partition_files(log.path) == before
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
    with LogDir.open(tmp_path / "d", CONFIG) as reopened:
        log = reopened.partition("t", 0)
        assert log.log_end_offset == 5
        assert [tuple(e) for e in log.epoch_cache.entries] == [(1, 0)]
        assert 7 not in log.producer_state.active_producers
        assert [r.value for b in log.batches() for r in b.records()] == [b"value-%03d" % i for i in range(5)]


def test_errors_survive_pickling_across_processes():
    """The simulator's worker pool and Spark executors send errors between processes; a
    LogDirOfflineError could not be unpickled (its __init__ takes the dir and the first failure),
    which hung `storage.sim run --jobs 2` when a seed raised one."""
    import pickle

    first = OSError(5, "Input/output error")
    offline = errors.LogDirOfflineError("/data/logs", first, operation="fsync")
    back = pickle.loads(pickle.dumps(offline))
    assert type(back) is errors.LogDirOfflineError
    assert (back.log_dir, back.operation, str(back)) == ("/data/logs", "fsync", str(offline))
    assert back.error_code == errors.Errors.KAFKA_STORAGE_ERROR and back.first_failure.errno == 5

    corrupt = errors.CorruptSegmentError("bad CRC", file="00.log", position=61, offset=7)
    back = pickle.loads(pickle.dumps(corrupt))
    assert (back.file, back.position, back.offset, back.reason, str(back)) == \
        ("00.log", 61, 7, "bad CRC", str(corrupt))


@pytest.mark.parametrize("operation", ["unlink", "fsync_dir"])
def test_an_io_failure_while_opening_is_a_storage_error_and_releases_the_dir(tmp_path, operation):
    """The open of a cleanly shut down dir removes the clean-shutdown marker and fsyncs the dir;
    a failure there (simulator seed 7119: EDQUOT on the unlink) raised a bare OSError.  It is a
    LogDirOfflineError naming the dir and the failure; the lock is released, and the next open,
    with the disk working again, opens the data (as after an unclean shutdown when the marker
    is already gone, or cleanly when it survived)."""
    with LogDir.open(tmp_path, CONFIG) as logdir:
        _fill(logdir.partition("t", 0), 3)

    class Failing(sio.PosixIO):
        def unlink(self, path):
            if operation == "unlink":
                raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), path)
            return super().unlink(path)

        def fsync_dir(self, path, flags=0):
            if operation == "fsync_dir":
                raise OSError(errno.EIO, os.strerror(errno.EIO), path)
            return super().fsync_dir(path, flags)

    with sio.using(Failing()):
        with pytest.raises(errors.LogDirOfflineError) as caught:
            LogDir.open(tmp_path, CONFIG)
    assert caught.value.log_dir == str(tmp_path) and caught.value.operation == "open"
    assert caught.value.error_code == errors.Errors.KAFKA_STORAGE_ERROR
    with LogDir.open(tmp_path, CONFIG) as logdir:
        assert logdir.partition("t", 0).log_end_offset == 3


def test_a_read_failure_of_the_clean_open_header_walk_is_an_io_error_not_damage(tmp_path):
    """A clean open reads the batch headers after the last index hint by pread (nothing is
    mapped).  EIO there is an I/O error naming the file -- never "damaged headers", which would
    refuse the partition as corrupt -- the open releases what it opened, and the data opens
    again once the disk reads."""
    with LogDir.open(tmp_path, CONFIG) as logdir:
        _fill(logdir.partition("t", 0), 5)

    class FailingLogReads(sio.PosixIO):
        def __init__(self):
            self.failed = []

        def pread(self, fd, length, offset):
            path = os.readlink(f"/proc/self/fd/{fd}")
            if path.endswith(".log"):
                self.failed.append(path)
                raise OSError(errno.EIO, os.strerror(errno.EIO), path)
            return super().pread(fd, length, offset)

    seam = FailingLogReads()
    with sio.using(seam):
        with pytest.raises(errors.StorageIOError) as caught:
            LogDir.open(tmp_path, CONFIG)
    assert seam.failed and not isinstance(caught.value, errors.CorruptRecordError)
    assert caught.value.error_code == errors.Errors.KAFKA_STORAGE_ERROR
    assert caught.value.file.endswith(".log") and "load" in str(caught.value)
    with LogDir.open(tmp_path, CONFIG) as logdir:
        assert logdir.partition("t", 0).log_end_offset == 5


@pytest.mark.parametrize("reader", ["read", "batches", "segment_columns"])
def test_a_read_failure_at_a_sealed_segments_first_use_takes_the_dir_offline(tmp_path, reader):
    """After a clean shutdown a sealed segment is opened at its first use (pread of its batch
    headers).  EIO there is the dir's failure state (56) from that read and every later call,
    not damage; the segment stays unopened and no file changes.  The iterators too (batches,
    segment_columns: their reads run at each next(), after the call returned): before, EIO there
    escaped as a StorageIOError and the dir stayed online (the swarm's seed 505232 met it in its
    after-restart check)."""
    with LogDir.open(tmp_path, CONFIG) as logdir:
        _fill(logdir.partition("t", 0), 200)
        assert len(logdir.partition("t", 0).segments) > 2
    victim = str(tmp_path / "t-0" / f"{0:020d}.log")

    class FailingSealedReads(sio.PosixIO):
        def __init__(self):
            self.failed = []

        def pread(self, fd, length, offset):
            if os.readlink(f"/proc/self/fd/{fd}") == victim:
                self.failed.append(offset)
                raise OSError(errno.EIO, os.strerror(errno.EIO), victim)
            return super().pread(fd, length, offset)

    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    assert repr(log.segments[0]).endswith("not opened)")
    before = {p.name: p.read_bytes() for p in (tmp_path / "t-0").iterdir()}
    seam = FailingSealedReads()
    with sio.using(seam):
        with pytest.raises(errors.LogDirOfflineError) as caught:
            if reader == "read":
                log.read(0, 1 << 20)
            else:
                list(getattr(log, reader)())
        assert seam.failed and logdir.offline
        assert caught.value.error_code == errors.Errors.KAFKA_STORAGE_ERROR
        assert repr(log.segments[0]).endswith("not opened)")
        with pytest.raises(errors.LogDirOfflineError):
            log.append_as_leader([b"after"], 0)
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
    assert {p.name: p.read_bytes() for p in (tmp_path / "t-0").iterdir()} == before
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


@pytest.mark.parametrize("iterating", [False, True])
def test_an_error_that_is_no_io_failure_passes_a_guard_as_it_came(tmp_path, iterating):
    """An inner LogDirOfflineError (no new failure) leaves a guarded call, or a guarded
    iteration, as it came: not chained to itself (`raise exc from exc` made a cause cycle, and
    the crash enumeration's walk along the causes never ended)."""
    from storage.core.failure import LogDirFailureChannel, guarded, guarded_iteration

    inner = errors.LogDirOfflineError(str(tmp_path), OSError(errno.EIO, "earlier"), operation="earlier")

    class Holder:
        failure_channel = LogDirFailureChannel(str(tmp_path))

        @guarded
        def call(self):
            raise inner

        def items(self):
            def produce():
                yield 1
                raise inner
            return guarded_iteration(self.failure_channel, produce(), "items")

    with pytest.raises(errors.LogDirOfflineError) as caught:
        list(Holder().items()) if iterating else Holder().call()
    assert caught.value is inner and caught.value.__cause__ is not inner
    assert Holder.failure_channel.first_failure is None
