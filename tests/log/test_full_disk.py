"""A real full disk is an error, never a signal (issue 13 item 2).

A small tmpfs is mounted (root only; skipped otherwise) and filled by the engine in a child
process.  Before the index files stopped being written through a shared mapping, the page fault
on a sparse index page of a full file system killed the process with SIGBUS; now every write
goes through pwrite, and the fault is ENOSPC -> LogDirOfflineError.  The child's return code is
checked, so a signal fails the test instead of killing pytest.
"""
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def run_child(code: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    assert result.returncode == 0, result.stderr[-2000:]
    return result


FILL = """
    import errno, sys
    from storage import LogConfig, PartitionLog, errors
    path = sys.argv[1] if len(sys.argv) > 1 else {path!r}
    # Default index size (10 MiB) on a 2 MiB disk: the old sparse, mapped index faulted here.
    config = LogConfig(segment_bytes={segment_bytes}, index_interval_bytes=64, fsync=True)
    log = PartitionLog.open(path, config)
    appended = 0
    try:
        for i in range(100000):
            log.append_as_leader([b"x" * 200, b"y" * 200], 0)
            appended = log.log_end_offset
            if i % 50 == 49:
                log.flush()
    except errors.LogDirOfflineError as exc:
        assert exc.errno == errno.ENOSPC, exc
        print("offline", appended, log.recovery_point)
    else:
        raise SystemExit("the disk never filled up")
    try:
        log.close()
    except errors.LogDirOfflineError:
        pass
"""


@pytest.mark.parametrize("segment_bytes", [1 << 30, 64 << 10], ids=["one-segment", "rolling"])
def test_appending_until_the_disk_is_full_raises_enospc_not_sigbus(small_disk, segment_bytes):
    path = str(small_disk / "t-0")
    out = run_child(FILL.format(path=path, segment_bytes=segment_bytes)).stdout.split()
    assert out[0] == "offline"
    flushed = int(out[2])
    assert flushed > 0
    # What was flushed before the disk filled up is there after an unclean reopen.
    run_child(f"""
        from storage import LogConfig, PartitionLog, errors
        log = PartitionLog.open({path!r}, LogConfig(index_interval_bytes=64), recovery_point=0)
        assert log.log_end_offset >= {flushed}, (log.log_end_offset, {flushed})
        assert sum(b.record_count for b in log.batches()) == log.log_end_offset
        try:
            log.close()      # writes the producer-state snapshot: the disk is still full
        except errors.LogDirOfflineError as exc:
            assert exc.first_failure.errno == 28, exc
    """)


def test_opening_with_an_index_rebuild_on_a_full_disk_is_an_error_not_a_signal(small_disk):
    """Recovery rebuilds the indexes of every segment above the recovery point; on a full disk
    writing them fails with ENOSPC (an error), and the data stays readable once space is back."""
    path = str(small_disk / "t-0")
    run_child(f"""
        from storage import LogConfig, PartitionLog
        log = PartitionLog.open({path!r}, LogConfig(segment_bytes=128 << 10, index_interval_bytes=64, fsync=False))
        while log.size_bytes < 900 << 10:
            log.append_as_leader([b"z" * 300], 0)
        log.close()
        import glob, os
        for name in glob.glob({path!r} + "/*index"):
            os.remove(name)          # every index must be rebuilt
    """)
    ballast = small_disk / "ballast"
    with open(ballast, "wb") as f:    # fill what is left
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    result = run_child(f"""
        from storage import LogConfig, PartitionLog, errors
        try:
            log = PartitionLog.open({path!r}, LogConfig(segment_bytes=128 << 10, index_interval_bytes=64))
            log.close()
            print("opened")
        except errors.StorageError as exc:
            print("error", type(exc).__name__)
    """)
    assert result.stdout.split()[0] in ("opened", "error")
    ballast.unlink()
    run_child(f"""
        from storage import LogConfig, PartitionLog
        log = PartitionLog.open({path!r}, LogConfig(segment_bytes=128 << 10, index_interval_bytes=64))
        assert log.size_bytes >= 900 << 10 and log.log_end_offset > 0
        assert sum(1 for _ in log.batches()) == log.log_end_offset
        log.close()
    """)


def test_an_index_entry_that_needs_a_new_page_on_a_full_disk(small_disk):
    """The precise old failure: the .log's last page still has room, the disk has none, and the
    next index entry starts a new index page.  Through a shared mapping that page fault was a
    SIGBUS; now the entry waits in memory and the flush that writes it fails with ENOSPC."""
    path = str(small_disk / "t-0")
    ballast = str(small_disk / "ballast")
    result = run_child(f"""
        import errno
        from storage import LogConfig, PartitionLog, errors
        log = PartitionLog.open({path!r}, LogConfig(index_interval_bytes=0, fsync=True))
        while len(log.active_segment.offset_index_entries()) < 512:   # exactly one full index page
            log.append_as_leader([b"x"], 0)
        log.flush()
        assert log.size_bytes % 4096 and 4096 - log.size_bytes % 4096 > 200, log.size_bytes
        import os
        fd = os.open({ballast!r}, os.O_WRONLY | os.O_CREAT)     # the disk is full now
        try:
            while True:
                os.write(fd, bytes(4096))
        except OSError:
            pass
        os.close(fd)
        log.append_as_leader([b"y"], 0)              # fits the .log's last page; entry 513
        try:
            log.flush()
            print("flushed")
        except errors.LogDirOfflineError as exc:
            assert exc.errno == errno.ENOSPC, exc
            print("offline")
    """)
    assert result.stdout.split() == ["offline"]


def test_an_epoch_change_on_a_full_disk_leaves_the_files_as_they_were(small_disk):
    """Issue 30 item 17 on a real full disk: the segment's last page still has room for the
    new epoch's batch, the leader-epoch-checkpoint's new file gets no page (ENOSPC).  The append
    raises, nothing of it is visible, and once space is back the reopened log is the old one."""
    path = str(small_disk / "t-0")
    run_child(f"""
        import errno, os
        from storage import LogConfig, PartitionLog, errors
        log = PartitionLog.open({path!r}, LogConfig(fsync=True))
        for i in range(5):
            log.append_as_leader([b"v%d" % i], 1)
        log.flush()
        before = {{n: open(os.path.join({path!r}, n), "rb").read() for n in os.listdir({path!r})
                  if n.endswith((".log", ".index", ".timeindex"))}}
        fd = os.open({str(small_disk / "filler")!r}, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"f" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        os.close(fd)
        try:
            log.append_as_leader([b"epoch two"], 2)
        except errors.LogDirOfflineError as exc:
            assert exc.first_failure.errno == errno.ENOSPC, exc
            assert "leader-epoch-checkpoint" in str(exc.first_failure), exc
        else:
            raise SystemExit("the append did not fail")
        assert log.log_end_offset == 5 and log.segments[-1].size == len(before["00000000000000000000.log"])
        after = {{n: open(os.path.join({path!r}, n), "rb").read() for n in before}}
        assert after == before
        try:
            log.close()
        except errors.LogDirOfflineError:
            pass
    """)
    os.unlink(small_disk / "filler")
    run_child(f"""
        from storage import LogConfig, PartitionLog
        log = PartitionLog.open({path!r}, LogConfig(), recovery_point=0)
        assert log.log_end_offset == 5, log.log_end_offset
        assert [tuple(e) for e in log.epoch_cache.entries] == [(1, 0)], log.epoch_cache.entries
        log.close()
    """)
