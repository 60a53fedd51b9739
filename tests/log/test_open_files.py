"""Open files do not grow with the number of segments (issue 13 item 6).

Segments beyond the open-segment limit are suspended (descriptors closed, a mapped index and the
read mapping dropped) and resumed on use, least recently used first, like RocksDB's
max_open_files.  The big case -- 10,000 partitions of 2 segments under a soft RLIMIT_NOFILE of
4096 -- runs in a child process with that limit.
"""
import errno
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from storage import LogConfig, PartitionLog, iter_batches
from storage.core import errors
from storage.core import io as sio
from storage.log import loader
from storage.log import segment as segment_module
from storage.log.segment import OnDiskSegment


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_limit():
    before = segment_module.open_segments.limit
    segment_module.set_open_segments_max(16)
    yield 16
    segment_module.open_segments.limit = before


def test_many_segments_hold_a_bounded_number_of_descriptors(tmp_path, small_limit):
    config = LogConfig(segment_bytes=300, index_interval_bytes=50, fsync=False)
    fds_before = _open_fds()
    logs = [PartitionLog.open(tmp_path / f"t-{i}", config) for i in range(6)]
    for round_ in range(40):
        for i, log in enumerate(logs):
            log.append_as_leader([b"%d-%d" % (i, round_) * 10], 1)
    assert sum(len(log.segments) for log in logs) > 100
    assert _open_fds() - fds_before <= 3 * small_limit + 6
    # Everything still works through suspended segments: reads of every offset, truncation
    # into an old segment, more appends, a clean close and reopen.
    for i, log in enumerate(logs):
        for offset in range(0, 40, 3):
            batch = next(iter_batches(log.read(offset, 1)))
            assert batch.records()[0].value == b"%d-%d" % (i, offset) * 10
        assert [b.base_offset for b in log.batches()] == list(range(40))
    logs[0].truncate_to(5)
    logs[0].append_as_leader([b"after"], 2)
    assert logs[0].log_end_offset == 6
    assert _open_fds() - fds_before <= 3 * small_limit + 6
    for log in logs:
        log.close()
    assert _open_fds() <= fds_before      # (segments other tests left open may be suspended too)
    reopened = PartitionLog.open(tmp_path / "t-0", config, clean_shutdown=True)
    assert [r.value for b in reopened.batches() for r in b.records()][-1] == b"after"
    reopened.close()


def test_a_segment_changed_while_suspended_is_an_error_not_a_wrong_read(tmp_path, small_limit):
    config = LogConfig(segment_bytes=300, index_interval_bytes=50, fsync=False)
    log = PartitionLog.open(tmp_path / "t-0", config)
    for i in range(60):
        log.append_as_leader([b"v%02d" % i * 10], 1)
    first, active = log.segments[0], log.segments[-1]
    others = [PartitionLog.open(tmp_path / f"o-{i}", config) for i in range(20)]   # push them out
    for other in others:
        other.append_as_leader([b"x"], 1)
    # A sealed segment is closed back to its files (its C state freed), the active one suspended.
    assert isinstance(first, OnDiskSegment) and active.suspended
    with open(first.log_path, "ab") as f:      # someone else grows the file
        f.write(b"junk")
    with pytest.raises(errors.CorruptSegmentError):         # found by the check of its next open
        log.read(0, 1)
    with open(active.log_path, "ab") as f:
        f.write(b"junk")
    for other in others:
        other.append_as_leader([b"y"], 1)                   # the active one suspended again
    with pytest.raises(errors.StorageError):                # found by the resume
        log.read(active.base_offset, 1)
    for other in others:
        other.close()
    with pytest.raises(errors.StorageError):                # its active segment cannot be sealed
        log.close()


def test_the_open_segment_cache_leaves_a_loading_log_alone(tmp_path, small_limit, monkeypatch):
    # A partition being opened holds its log's lock: another thread pushing segments out of the
    # cache (LogDir.open with recovery_threads > 1) skips its segments instead of closing one
    # under the loader between its checks.
    config = LogConfig(segment_bytes=300, index_interval_bytes=50, fsync=False, sealed_segment_check="open")
    with PartitionLog.open(tmp_path / "t-0", config) as log:
        for i in range(30):
            log.append_as_leader([b"v%02d" % i * 10], 1)
    others = [PartitionLog.open(tmp_path / f"o-{i}", config) for i in range(20)]
    real, closed_under_the_loader = loader.verdict, []

    def verdict(segment, *args, **kwargs):
        pusher = threading.Thread(target=lambda: [other.append_as_leader([b"x"], 1) for other in others])
        pusher.start()
        pusher.join()
        closed_under_the_loader.append(segment.suspended or isinstance(segment, OnDiskSegment))
        return real(segment, *args, **kwargs)

    monkeypatch.setattr(loader, "verdict", verdict)
    log = PartitionLog.open(tmp_path / "t-0", config, clean_shutdown=True)
    assert len(closed_under_the_loader) > 2 and not any(closed_under_the_loader)
    assert log.log_end_offset == 30
    for other in [log, *others]:
        other.close()


MANY = """
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from storage import LogConfig, LogDir, iter_batches
    path, count = sys.argv[1], int(sys.argv[2])
    config = LogConfig(segment_bytes=300, index_interval_bytes=4096, fsync=False)
    fds = lambda: len(os.listdir("/proc/self/fd"))
    maps = lambda: sum(1 for _ in open("/proc/self/maps"))
    start = fds()
    with LogDir.open(path, config) as logdir:
        for i in range(count):
            log = logdir.partition("t", i)
            log.append_as_leader([b"a" * 150], 1)
            log.append_as_leader([b"b" * 150], 1)       # rolls: 2 segments
    with LogDir.open(path, config) as logdir:
        assert len(logdir.partitions()) == count
        for i in range(count):
            log = logdir.partition("t", i)
            assert len(log.segments) >= 2
            log.append_as_leader([b"c"], 1)
            assert [len(b.records()[0].value) for b in iter_batches(log.read(0, 1 << 20))][0] == 150
        peak_fds, peak_maps = fds(), maps()
    print(start, peak_fds, fds(), peak_maps)
"""


class ForgetsWritebackErrors(sio.PosixIO):
    """fsyncgate where the kernel forgets: a writeback error of a write to t-0's .log is
    reported to the first fsync of a descriptor open when it happened, and lost when that
    descriptor closes (the inode leaves the cache): a later fsync on a new descriptor succeeds."""

    def __init__(self):
        self.pending: set[int] = set()
        self.reported = 0

    def _note(self, fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(os.path.join("t-0", "00000000000000000000.log")):
            self.pending.add(fd)

    def pwrite(self, fd, data, offset):
        super().pwrite(fd, data, offset)
        self._note(fd)

    def pwritev(self, fd, buffers, offset):
        super().pwritev(fd, buffers, offset)
        self._note(fd)

    def fsync(self, fd, flags=0):
        if fd in self.pending:
            self.pending.discard(fd)
            self.reported += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd, flags)

    def close(self, fd):
        self.pending.discard(fd)
        super().close(fd)


def test_the_cache_flushes_an_active_segment_before_closing_it(tmp_path, small_limit):
    """The open-segment cache fsyncs an active segment before it closes the descriptors: a
    writeback error is then reported (the log dir goes offline, 56) instead of lost with the
    descriptor, after which a flush on a reopened descriptor would succeed.  Fails without the
    flush: the cache closes t-0's files, the error goes with them, and t-0's flush succeeds."""
    config = LogConfig(fsync=True)
    seam = ForgetsWritebackErrors()
    with sio.using(seam):
        first = PartitionLog.open(tmp_path / "t-0", config)
        first.append_as_leader([b"may be lost"], 1)
        others = [PartitionLog.open(tmp_path / f"t-{i}", config) for i in range(1, small_limit + 2)]
        for log in others:
            log.append_as_leader([b"x"], 1)
        assert seam.reported == 1 and first.failure_channel.offline
        with pytest.raises(errors.LogDirOfflineError):
            first.flush()
        with pytest.raises(errors.LogDirOfflineError):
            first.append_as_leader([b"more"], 1)
        for log in others:
            log.flush()
            log.close()
        with pytest.raises(errors.LogDirOfflineError):
            first.close()        # releases everything, writes nothing (no clean-shutdown claim)


@pytest.mark.slow
def test_ten_thousand_partitions_open_under_a_4096_descriptor_limit(tmp_path):
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(MANY), str(tmp_path / "d"), "10000"],
                            capture_output=True, text=True, timeout=580)
    assert result.returncode == 0, result.stderr[-3000:]
    start, peak, end, peak_maps = map(int, result.stdout.split())
    assert peak < 4096 and end <= start + 2
    assert peak_maps < 30000


def test_a_thousand_partitions_under_a_small_descriptor_limit(tmp_path):
    """The same with 1,000 partitions and a limit of 512 descriptors (default tier)."""
    code = textwrap.dedent(MANY).replace("(4096,", "(512,")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d"), "1000"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    start, peak, end, _maps = map(int, result.stdout.split())
    assert peak < 512 and end <= start + 2
