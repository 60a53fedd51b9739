"""`storage verify` flags everything recovery would cut, because both ask one implementation
(storage/log/loader.py `_scan`: the scan plog_segment_recover cuts by).

The property: for a partition dir damaged at random (a flipped byte, a torn tail, garbage
appended, a length or offset field overwritten), if a recovery from offset 0 cuts anything,
verify reports a problem at the file and byte position of the first cut.  And the reverse
direction for the segments the open trusts: `storage recover` (the loader's "scan" mode)
refuses a damaged segment below the recovery point that verify reports, and opens the ones
verify passes.
"""
from __future__ import annotations

import os
import shutil
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from storage import LogConfig, PartitionLog, iter_batches
from storage.core import errors
from storage.core._native import ffi
from storage.inspect.discovery import LogFile
from storage.inspect.scan import scan_partition
from storage.log.loader import _scan, scan_log_file

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=128, fsync=False)


def build(path) -> None:
    log = PartitionLog.open(path, CONFIG)
    for i in range(100):
        log.append_as_leader([b"%03d" % i * (1 + i % 7)] * (1 + i % 3), 1 + i // 25)
    log.close()


def segment_files(path) -> list[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log"))


def verify_problems(path) -> list:
    return scan_partition(os.path.dirname(path), "t", 0, str(path), check_indexes=False).problems


def first_cut(path):
    """(file, position) of the first cut an unclean recovery from offset 0 makes, or None."""
    for log_path in segment_files(path):
        verdict = scan_log_file(log_path)
        if verdict.valid_bytes < os.path.getsize(log_path):
            return log_path, verdict.valid_bytes
    return None


def test_an_offset_that_overflows_its_segment_is_cut_by_recovery_and_flagged_by_verify(tmp_path):
    """A batch whose offsets lie more than 2^31 - 1 past its segment's base cannot be indexed:
    recovery cuts it (PLOG_EOVERFLOW).  The base offset is outside the CRC, so the batch is
    otherwise valid, and verify's own batch walk used to pass it (exit 0 on a dir recovery cut)."""
    path = tmp_path / "t-0"
    build(path)
    first = segment_files(path)[0]
    with open(first, "r+b") as f:
        data = f.read()
    (length,) = struct.unpack_from(">i", data, 8)
    second = length + 12                          # the second batch of the first segment
    (old_base,) = struct.unpack_from(">q", data, second)
    with open(first, "r+b") as f:
        f.seek(second)
        f.write(struct.pack(">q", old_base + 2**31 + 10))
    problems = verify_problems(path)
    cut = [p for p in problems if p.file == first and p.position == second]
    assert cut and "recovery cuts" in cut[0].message and "deletes the" in cut[0].message
    # and recovery does cut exactly there
    copy = tmp_path / "copy" / "t-0"
    shutil.copytree(path, copy)
    log = PartitionLog.open(copy, CONFIG, recovery_point=0)
    try:
        assert os.path.getsize(copy / os.path.basename(first)) == second
        assert log.recovery_report[0][:2] == (0, len(data) - second)
    finally:
        log.close()


DAMAGE = st.sampled_from(["flip", "tear", "garbage", "length", "offset"])


def damage(data: bytearray, kind: str, position: int, value: int) -> None:
    """A flipped byte, a torn tail, garbage appended, or a length or offset field overwritten."""
    if kind == "flip":
        data[position] ^= 1 + value % 255
    elif kind == "tear":
        del data[position:]
    elif kind == "garbage":
        data += value.to_bytes(4, "big") * (1 + value % 9)
    elif kind == "length":
        struct.pack_into(">I", data, min(position, len(data) - 4), value)
    else:
        struct.pack_into(">q", data, min(position, len(data) - 8), value * 7919)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=DAMAGE, which=st.integers(0, 100), where=st.integers(0, 10**6), value=st.integers(0, 2**32 - 1))
def test_verify_flags_every_cut_recovery_makes(tmp_path_factory, kind, which, where, value):
    root = tmp_path_factory.mktemp("agree")
    path = root / "t-0"
    build(path)
    files = segment_files(path)
    target = files[which % len(files)]
    with open(target, "rb") as f:
        data = bytearray(f.read())
    damage(data, kind, where % len(data), value)
    with open(target, "wb") as f:
        f.write(data)

    expected = first_cut(path)
    problems = verify_problems(path)
    copy = root / "copy" / "t-0"
    shutil.copytree(path, copy)
    log = PartitionLog.open(copy, CONFIG, recovery_point=0)
    try:
        cut_by_recovery = [(base, n) for base, n, _reason in log.recovery_report if n]
    finally:
        log.close()
    if cut_by_recovery:
        assert expected is not None
        assert any(p.file == expected[0] and p.position == expected[1] for p in problems), (kind, problems)
    else:
        assert expected is None


def test_recover_refuses_below_the_recovery_point_what_verify_reports(tmp_path):
    """storage recover opens with recover_mode="scan": a segment below the recovery point that
    the open would trust is still read in full, and a damaged one refuses the partition."""
    path = tmp_path / "t-0"
    build(path)
    files = segment_files(path)
    assert len(files) >= 3
    target = files[0]
    with open(target, "r+b") as f:
        f.seek(os.path.getsize(target) - 3)      # the last batch's tail: past every index hint
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert any(p.file == target for p in verify_problems(path))
    recovery_point = int(os.path.basename(files[-1])[:20])
    # the plain open trusts it (the index walk starts at the last hint and stops at the header)
    PartitionLog.open(path, CONFIG, recovery_point=recovery_point).close()
    try:
        PartitionLog.open(path, CONFIG, recovery_point=recovery_point, recover_mode="scan").close()
    except errors.CorruptSegmentError as exc:
        assert exc.file == target
    else:
        raise AssertionError("recover_mode='scan' opened a partition with a damaged trusted segment")


def _report(scan) -> tuple:
    return (scan.valid_bytes, scan.batch_count, scan.record_count, scan.first_offset, scan.last_offset,
            scan.max_timestamp, scan.stop, scan.stop_position, scan.stop_offset, scan.epoch_count,
            scan.producer_batch_count)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=DAMAGE, where=st.integers(0, 10**6), value=st.integers(0, 2**32 - 1),
       window=st.sampled_from([16, 61, 100, 333, 700, 4096]))
@example(kind="offset", where=1, value=1, window=16)    # a negative length field: C must see it whole
def test_the_scan_in_windows_gives_the_whole_files_verdict(tmp_path_factory, kind, where, value, window):
    """scan_log_file and inspect's LogFile read a file by pread in windows (never mapped, so a
    live broker's truncation cannot SIGBUS them): whatever the window -- smaller than a batch,
    cutting headers -- the verdict on a damaged segment is plog_scan_buffer's over the whole
    file, and the batches (or the error that stops them) are iter_batches' over it."""
    root = tmp_path_factory.mktemp("windows")
    path = root / "t-0"
    build(path)
    target = segment_files(path)[0]
    with open(target, "rb") as f:
        data = bytearray(f.read())
    damage(data, kind, where % len(data), value)
    with open(target, "wb") as f:
        f.write(data)
    whole = _scan(ffi.from_buffer(bytes(data)), len(data), 0)
    assert _report(scan_log_file(target, window=window)) == _report(whole)
    assert walk(LogFile(target, window).batches()) == walk(iter_batches(bytes(data), verify=False))


def walk(batches) -> list:
    """(position, bytes) of each batch, then (error class, position) of what stopped them."""
    out = []
    try:
        for b in batches:
            out.append((b.position, bytes(b.view)))
    except errors.StorageError as exc:
        out.append((type(exc).__name__, exc.position))
    return out


def shrink_at_second_read(monkeypatch, function: str, path) -> list:
    """Make os.<function> (pread or preadv) truncate `path` to 700 bytes -- mid-batch -- at its
    second call, as a live broker's truncation would; returns the offsets it was called at."""
    reads, real = [], getattr(os, function)

    def shrinking(fd, into, offset):
        reads.append(offset)
        if len(reads) == 2:
            os.truncate(path, 700)
        return real(fd, into, offset)

    monkeypatch.setattr(os, function, shrinking)
    return reads


def test_a_scan_ends_where_a_file_shrunk_under_it_ends(tmp_path, monkeypatch):
    """A segment another process truncates while it is scanned (a live broker's follower
    truncation) ends the scan at the new end, a partial tail -- mapped, the pages past the new
    end killed the process with SIGBUS.  Fails when the file is not read by pread in windows."""
    path = tmp_path / "t-0"
    build(path)
    target = segment_files(path)[0]
    reads = shrink_at_second_read(monkeypatch, "preadv", target)
    verdict = scan_log_file(target, window=512)
    assert len(reads) >= 2
    assert verdict.valid_bytes <= 700 and verdict.stop_reason is not None


@pytest.mark.parametrize("window", [16, 100, 700, 1 << 20])
def test_a_log_file_read_in_windows_gives_the_batches_of_the_whole_file(tmp_path, window):
    """storage.inspect reads `.log` files by pread in windows (never mapped): the batches, their
    positions and bytes are those of the whole file, whatever the window (smaller than a batch
    too), and a torn tail ends the walk as it does over the whole file."""
    path = tmp_path / "t-0"
    build(path)
    for name in segment_files(path):
        with open(name, "ab") as f:
            f.write(b"\0\0\0\0\0\0\0\7\0\0\1\0")      # a torn batch: its header says 256 bytes
        with open(name, "rb") as f:
            data = f.read()
        whole = [(b.position, bytes(b.view)) for b in iter_batches(data, verify=False)]
        assert whole and [(b.position, bytes(b.view)) for b in LogFile(name, window).batches()] == whole


def test_a_log_file_shrunk_under_the_walk_ends_it(tmp_path, monkeypatch):
    """A `.log` another process truncates during the walk (a live broker's) ends it at the new
    end; mapped, the pages past it killed the process with SIGBUS.  Fails when the file is not
    read by pread."""
    path = tmp_path / "t-0"
    build(path)
    name = segment_files(path)[0]
    reads = shrink_at_second_read(monkeypatch, "pread", name)
    batches = list(LogFile(name, 512).batches())
    assert len(reads) >= 2 and batches and batches[-1].position + batches[-1].size_bytes <= 700
