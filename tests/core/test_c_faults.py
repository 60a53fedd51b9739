"""The C core under faults and damaged indexes (issue 13 items 2 and 3).

- Every seam operation of a workload (open, append, roll, truncate, recover, flush, close) is
  failed in turn with EIO: the engine raises a StorageError -- never crashes -- and the log
  can still be closed.  The sweep runs in a child process so that a segfault fails the test.
- A damaged offset index after a clean shutdown never serves a wrong batch: the hint is
  checked against the batch it points at (plog_segment_find).
"""
import os
import struct
import subprocess
import sys
import textwrap

import pytest

from storage import LogConfig, PartitionLog, iter_batches

SWEEP = """
    import errno, os, shutil, sys, tempfile
    from storage import LogConfig, PartitionLog, errors
    from storage.core import io as sio

    class FailKth(sio.PosixIO):
        def __init__(self, kind, k):
            self.kind, self.k, self.seen, self.fired = kind, k, 0, False
        def _tick(self, kind):
            if kind == self.kind and not self.fired:
                self.seen += 1
                if self.seen == self.k:
                    self.fired = True
                    raise OSError(errno.EIO, "injected EIO")
        def open(self, path, flags):  self._tick("open");  return super().open(path, flags)
        def pwrite(self, fd, data, offset): self._tick("pwrite"); return super().pwrite(fd, data, offset)
        def pread(self, fd, length, offset): self._tick("pread"); return super().pread(fd, length, offset)
        def fsync(self, fd, flags=0): self._tick("fsync"); return super().fsync(fd, flags)
        def ftruncate(self, fd, size): self._tick("ftruncate"); return super().ftruncate(fd, size)
        def fsize(self, fd): self._tick("fsize"); return super().fsize(fd)
        def mmap(self, fd, length, writable): self._tick("mmap"); return super().mmap(fd, length, writable)
        def close(self, fd): self._tick("close"); return super().close(fd)

    config = LogConfig(segment_bytes=1500, index_interval_bytes=100, segment_index_bytes=400, fsync=True)

    def workload(path):
        log = PartitionLog.open(path, config, recovery_point=0)
        try:
            for i in range(30):
                log.append_as_leader([b"v%03d" % i * 10], 1 + i // 10)
                if i % 9 == 8:
                    log.flush()
                if i == 20:
                    log.truncate_to(15)
            log.roll()
        finally:
            log.close()

    fired = 0
    for kind in ("open", "pwrite", "pread", "fsync", "ftruncate", "fsize", "mmap", "close"):
        for k in range(1, 60):
            root = tempfile.mkdtemp()
            path = os.path.join(root, "t-0")
            seed = PartitionLog.open(path, config)        # something to recover at the next open
            for i in range(12):
                seed.append_as_leader([b"s%03d" % i * 10], 0)
            seed.close()
            seam = FailKth(kind, k)
            try:
                with sio.using(seam):
                    workload(path)
            except errors.StorageError:
                pass
            if seam.fired:
                fired += 1
            shutil.rmtree(root)
            if not seam.fired:
                break
    print(fired)
"""


def test_every_seam_failure_is_an_error_and_the_log_still_closes():
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SWEEP)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr[-3000:]}"
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[-1]) > 50    # the sweep really failed that many operations


@pytest.mark.parametrize("damage", ["inside-a-batch", "earlier-batch", "past-the-end", "later-batch"])
def test_a_damaged_offset_index_never_serves_a_wrong_batch(tmp_path, damage):
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=50, fsync=False)
    log = PartitionLog.open(tmp_path / "t-0", config)
    for i in range(60):
        log.append_as_leader([b"value-%02d" % i], 0)
    segment_index = log.active_segment.index_path
    log.close()
    with open(segment_index, "r+b") as f:
        raw = bytearray(f.read())
        entries = [struct.unpack_from(">ii", raw, i) for i in range(0, len(raw), 8)]
        assert len(entries) > 10
        # The last entries stay intact: they pass the open's checks (the sanity check, the
        # load from the last hint), so only lookups meet the damage.
        for i, (relative, position) in enumerate(entries[:-3]):
            if damage == "inside-a-batch":
                position += 7
            elif damage == "earlier-batch":
                position = entries[max(i - 3, 0)][1] if i >= 3 else 0
            elif damage == "past-the-end":
                position = 1 << 30
            else:
                position = entries[min(i + 3, len(entries) - 1)][1]
            struct.pack_into(">ii", raw, i * 8, relative, position)
        f.seek(0)
        f.write(raw)
    log = PartitionLog.open(tmp_path / "t-0", config, clean_shutdown=True)
    for offset in range(60):
        batch = next(iter_batches(log.read(offset, 1)))
        assert batch.base_offset == offset
        assert batch.records()[0].value == b"value-%02d" % offset
    found = log.offset_for_timestamp(0)
    assert found is not None and found.offset == 0
    log.close()


@pytest.mark.skipif(not os.environ.get("PLOG_EXPECT_SANITIZED"),
                    reason="PLOG_ASSERT is compiled in only in debug and sanitizer builds (.ci/sanitize)")
def test_a_broken_segment_invariant_aborts_in_an_asserting_build(tmp_path):
    """The asserted invariants (csrc/internal.h) are on in the sanitizer tier: a segment whose
    size went negative aborts at the next mutating call, naming the condition."""
    code = textwrap.dedent(f"""
        from storage import LogConfig, PartitionLog
        from storage.core._native import lib
        log = PartitionLog.open({str(tmp_path / 't-0')!r}, LogConfig(fsync=False))
        log.append_as_leader([b"v"], 0)
        segment = log.segments[-1]
        segment.native.size = -1
        lib.plog_segment_flush(segment.native)
    """)
    # cwd: not the source tree, whose storage/ (a release build) would shadow the installed one.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode != 0
    assert "PLOG_ASSERT(seg->size >= 0" in result.stderr


# Each: a call from Python (an entry point another unit calls) with one precondition broken,
# and the PLOG_ASSERT that must catch it at the function's head before anything is read.
BROKEN_PRECONDITIONS = {
    "parse-null-buffer": ("lib.plog_batch_parse(ffi.NULL, 100, 0, 0, ffi.new('plog_batch_info *'))",
                          "PLOG_ASSERT(buf != NULL || length == 0)"),
    "span-negative-position": ("lib.plog_batches_span(ffi.new('uint8_t[]', 64), 64, -1, 1 << 20, -1)",
                               "PLOG_ASSERT(position >= 0)"),
    "headers-past-the-buffer": ("lib.plog_headers_decode(ffi.new('uint8_t[]', 4), 4, 9, 0, ffi.NULL, ffi.NULL, "
                                "ffi.NULL, ffi.NULL)", "PLOG_ASSERT((size_t)position <= length)"),
    "pwrite-negative-offset": ("lib.plog_posix_pwrite(1, b'x', 1, -5)", "PLOG_ASSERT(offset >= 0)"),
}


@pytest.mark.skipif(not os.environ.get("PLOG_EXPECT_SANITIZED"),
                    reason="PLOG_ASSERT is compiled in only in debug and sanitizer builds (.ci/sanitize)")
@pytest.mark.parametrize("case", sorted(BROKEN_PRECONDITIONS))
def test_a_broken_precondition_aborts_in_an_asserting_build(tmp_path, case):
    """The entry points assert their callers' preconditions (pointers, lengths, offsets) at
    their heads in the sanitizer tier: a call that breaks one aborts, naming the condition,
    instead of reading or writing out of bounds."""
    call, expected = BROKEN_PRECONDITIONS[case]
    code = f"from storage.core._native import ffi, lib\n{call}\n"
    # cwd: not the source tree, whose storage/ (a release build) would shadow the installed one.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode != 0
    assert expected in result.stderr
