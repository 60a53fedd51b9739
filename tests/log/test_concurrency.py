"""The concurrency contract (issue 13 item 5): one writer and any number of readers per
partition, across threads; one process per log dir.

Readers never get a torn, zeroed or wrong batch while the writer appends, rolls, truncates or
deletes segments: every batch a reader gets passes its CRC and holds the offset its value
names.  A reader may get OffsetOutOfRangeError for data that went, never CorruptRecordError
and never a crash -- the stress runs in a child process so that a segfault fails the test.
"""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from storage import LogConfig, LogDir, PartitionLog
from storage.core import errors
from storage.core._native import lib
from storage.log import segment_home

STRESS = """
    import random, threading, sys, tempfile
    from storage import LogConfig, PartitionLog, errors, iter_batches

    log = PartitionLog.open(tempfile.mkdtemp() + "/t-0",
                            LogConfig(segment_bytes=2048, index_interval_bytes=64, fsync=False))
    stop = threading.Event()
    problems, reads = [], [0]

    def check(batch):
        if not batch.is_valid():
            problems.append(f"invalid batch at {batch.base_offset}")
            return
        value = batch.records()[0].value
        if int(value.split(b":")[0]) != batch.base_offset:
            problems.append(f"batch {batch.base_offset} holds {value!r}")

    def reader(seed):
        rng = random.Random(seed)
        while not stop.is_set():
            try:
                if rng.random() < 0.5:
                    for batch in log.batches(max(log.log_start_offset, 0)):
                        check(batch)
                else:
                    offset = rng.randrange(log.log_start_offset, max(log.log_end_offset, log.log_start_offset + 1))
                    for batch in iter_batches(log.read(offset, rng.choice([1, 500, 5000]))):
                        check(batch)
                reads[0] += 1
            except errors.OffsetOutOfRangeError:
                pass
            except Exception as exc:
                problems.append(repr(exc))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    rng = random.Random(1)
    for step in range(3000):
        op = rng.random()
        if op < 0.75:
            leo = log.log_end_offset
            log.append_as_leader([b"%d:%s" % (leo, b"x" * rng.randrange(1, 200))], 0)
        elif op < 0.85:
            log.truncate_to(max(log.log_start_offset, log.log_end_offset - rng.randrange(1, 8)))
        elif op < 0.93:
            log.update_high_watermark(log.log_end_offset)
            log.increment_log_start_offset(max(log.log_start_offset, log.log_end_offset - 30))
        else:
            log.roll()
    stop.set()
    for t in threads:
        t.join()
    log.close()
    print(reads[0], len(problems))
    for p in problems[:5]:
        print(p)
"""


def test_readers_never_see_a_torn_zeroed_or_wrong_batch():
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(STRESS)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    assert result.returncode == 0, result.stderr[-2000:]
    reads, problems, *examples = result.stdout.split("\n")[0].split() + result.stdout.split("\n")[1:]
    assert int(problems) == 0, result.stdout
    assert int(reads) > 50


def _log_of_30(path):
    log = PartitionLog.open(path, LogConfig(fsync=False))
    for i in range(30):
        log.append_as_leader([b"%02d" % i * 300], 1)       # 670 bytes a batch
    return log


def test_a_truncation_copies_pages_only_for_mappings_readers_may_hold(tmp_path, monkeypatch):
    """Before the .log shrinks, the pages past the cut of a read mapping a reader may hold
    become private copies, so its views keep their bytes.  A mapping the truncation made itself
    (nothing read the segment since its last truncation) has no views: nothing is copied -- a
    follower cutting a large divergent tail used to copy all of it into anonymous memory
    first.  Fails when the copy is made for the truncation's own mapping."""
    copies = []

    class Recording:
        def __getattr__(self, name):
            return getattr(lib, name)

        def plog_io_mmap_snapshot(self, *args):
            copies.append(args[1:])
            return lib.plog_io_mmap_snapshot(*args)

    monkeypatch.setattr(segment_home, "lib", Recording())
    log = _log_of_30(tmp_path / "t-0")
    log.truncate_to(25)                     # nothing read it: no view can exist
    assert copies == [] and log.log_end_offset == 25
    view = log.read(5, 1 << 20)             # a reader holds offsets 5..24
    held = bytes(view)
    log.truncate_to(10)
    assert len(copies) == 1 and bytes(view) == held
    assert [r.value for b in log.batches() for r in b.records()] == [b"%02d" % i * 300 for i in range(10)]
    log.close()


@pytest.mark.parametrize("between", ["truncate", "suspend", "close", "recover"])
def test_a_view_keeps_its_bytes_through_every_later_cut(tmp_path, between):
    """A reader's view of a mapping its segment has let go of -- after a truncation, after the
    open-segment cache closed the segment's files, after the log was closed and opened again
    in the process, through a recovery's cut -- keeps its bytes through a later, deeper cut.  The let-go mapping was not
    copied: the view read zeros where its first page was cut, and SIGBUS (the process killed)
    once a whole page of it lay past the end.  Run in a child process for that reason."""
    script = textwrap.dedent(f"""
        import os
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_concurrency import _log_of_30
        from storage import LogConfig, PartitionLog
        from storage.log.segment import open_segments

        path = {str(tmp_path / "t-0")!r}
        log = _log_of_30(path)
        view = log.read(0, 1 << 20)          # offsets 0..29, from position 0
        held = bytes(view)
        if {between!r} == "truncate":
            log.truncate_to(20)
        elif {between!r} == "suspend":          # as the open-segment cache pushes it out
            log.segments[-1]._suspend()
            open_segments.forget(log.segments[-1])
        elif {between!r} == "close":
            log.close()
            log = PartitionLog.open(path, LogConfig(fsync=False), clean_shutdown=True)
        else:                                 # a recovery cuts at a damaged batch (5, at 3350)
            log.close()
            fd = os.open(path + "/00000000000000000000.log", os.O_WRONLY)
            os.pwrite(fd, b"\\xff", 5 * 670 + 40)
            os.close(fd)
            held = bytes(view)
            log = PartitionLog.open(path, LogConfig(fsync=False), clean_shutdown=False, recovery_point=0)
            assert log.log_end_offset == 5 and log.recovery_report
        log.truncate_to(1)
        assert bytes(view) == held, "the view changed"
        assert log.log_end_offset == 1
        print("kept")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "kept", (done.returncode, done.stderr[-2000:])


def test_logdir_partition_is_safe_from_several_threads(tmp_path):
    with LogDir.open(tmp_path / "d", LogConfig(fsync=False)) as logdir:
        got, barrier = [], threading.Barrier(8)

        def create():
            barrier.wait()
            got.append(logdir.partition("t", 0))

        threads = [threading.Thread(target=create) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 8 and all(log is got[0] for log in got)


LOCKER = """
    import sys
    from storage import LogConfig, LogDir, errors
    try:
        with LogDir.open(sys.argv[1], LogConfig(fsync=False)) as logdir:
            print("opened", logdir.partitions())
    except errors.LogDirLockedError as exc:
        print("locked", exc.file)
"""


def test_a_second_process_gets_a_clear_error_not_the_dir(tmp_path):
    """Kafka's `.lock`: while one process has the log dir open, another gets LogDirLockedError
    naming the dir (instead of truncating files under the first); after close it may open."""
    path = str(tmp_path / "d")
    logdir = LogDir.open(path, LogConfig(fsync=False))
    logdir.partition("t", 0).append_as_leader([b"a"], 0)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(LOCKER), path], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["locked", path], out.stderr
    logdir.close()
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(LOCKER), path], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.startswith("opened"), out.stderr


def test_a_newer_open_in_the_same_process_supersedes_the_older(tmp_path):
    """Within one process the lock cannot tell two LogDirs apart (flock belongs to the open
    file): the newer open takes it over, and the older one goes offline instead of writing
    beside it."""
    old = LogDir.open(tmp_path / "d", LogConfig(fsync=False))
    log = old.partition("t", 0)
    log.append_as_leader([b"a"], 0)
    new = LogDir.open(tmp_path / "d", LogConfig(fsync=False))
    with pytest.raises(errors.LogDirOfflineError):
        log.append_as_leader([b"b"], 0)
    with pytest.raises(errors.LogDirOfflineError):
        old.close()
    new.close()


def test_a_failed_open_releases_the_lock(tmp_path):
    path = tmp_path / "d"
    LogDir.open(path, LogConfig(fsync=False)).close()
    (path / "storage.mdb").write_bytes(b"garbage" * 1000)
    with pytest.raises(errors.StorageError):
        LogDir.open(path, LogConfig(fsync=False))
    out = subprocess.run([sys.executable, "-c", "import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_RDWR);"
                          "fcntl.flock(fd, fcntl.LOCK_EX|fcntl.LOCK_NB); print('free')", str(path / ".lock")],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "free", out.stderr
