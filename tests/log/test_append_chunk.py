"""plog_segment_append_chunk: the one C call per append (validate, roll check, write with the
CRCs checked piece by piece, index).  What it must keep of the two-step path it replaced
(plog_validate_chunk, then plog_segment_append): the same errors for the same chunks, and
all or nothing -- a CRC mismatch found after a piece was written leaves neither the file
nor the segment nor the log changed."""
import errno
import os

import pytest

from storage import LogConfig, PartitionLog, build_batch, iter_batches
from storage.core import errors
from storage.core import io as sio
from storage.core._native import ffi, lib
from storage.log.segment import Segment, SegmentHome

PIECE = lib.PLOG_APPEND_PIECE_BYTES


class RecordingIO(sio.PosixIO):
    """The POSIX seam, recording every pwrite (offset, length) and ftruncate size."""

    def __init__(self):
        self.writes = []
        self.truncates = []

    def pwrite(self, fd, data, offset):
        self.writes.append((offset, len(data)))
        return super().pwrite(fd, data, offset)

    def ftruncate(self, fd, size):
        self.truncates.append(size)
        return super().ftruncate(fd, size)


def big_batch(base_offset: int, value_bytes: int, *, epoch: int = 0) -> bytes:
    """One batch of a single large value (incompressible enough: random bytes)."""
    return build_batch([os.urandom(value_bytes)], base_offset=base_offset, partition_leader_epoch=epoch)


def corrupt(batch: bytes, position: int = -1) -> bytes:
    bad = bytearray(batch)
    bad[position] ^= 0xFF
    return bytes(bad)


def config(**kwargs):
    return LogConfig(fsync=False, **kwargs)


def test_chunk_larger_than_a_piece_is_written_in_pieces_and_reads_back(tmp_path):
    chunk = b"".join(big_batch(i, 700_000) for i in range(4))      # ~2.7 MiB: three pieces
    io = RecordingIO()
    with sio.using(io):
        log = PartitionLog.open(tmp_path / "t-0", config())
        info = log.append_as_follower(chunk)
        assert (info.first_offset, info.last_offset, info.batch_count, info.size_bytes) == (0, 3, 4, len(chunk))
        assert bytes(log.read(0, 1 << 30)) == chunk
        assert all(b.is_valid() for b in iter_batches(log.read(0, 1 << 30)))
        log.close()
    data_writes = [(o, n) for o, n in io.writes if n >= PIECE or o + n == len(chunk)]
    assert [n for _, n in data_writes] == [PIECE, PIECE, len(chunk) - 2 * PIECE]
    assert [o for o, _ in data_writes] == [0, PIECE, 2 * PIECE]


@pytest.mark.parametrize("bad_index", [0, 1, 2, 3])
def test_crc_mismatch_in_any_piece_restores_the_file_and_raises(tmp_path, bad_index):
    """Batch 0 fails in the first piece, 1 straddles the first piece's end, 2 and 3 fail in
    later pieces, after earlier pieces reached the file."""
    log = PartitionLog.open(tmp_path / "t-0", config())
    log.append_as_follower(build_batch([b"before"], base_offset=0))
    size_before, path = log.size_bytes, log.active_segment.log_path
    batches = [big_batch(1 + i, 700_000) for i in range(4)]
    batches[bad_index] = corrupt(batches[bad_index])
    position = sum(map(len, batches[:bad_index]))
    io = RecordingIO()
    with sio.using(io):
        with pytest.raises(errors.CorruptRecordError, match="CRC") as info:
            log.append_as_follower(b"".join(batches))
    assert info.value.position == position and info.value.offset == 1 + bad_index
    pieces_written = [(o, n) for o, n in io.writes if o >= size_before]
    assert len(pieces_written) == (position + len(batches[bad_index]) - 1) // PIECE + 1
    assert io.truncates == [size_before]
    assert os.path.getsize(path) == size_before
    assert (log.size_bytes, log.log_end_offset, len(log.segments)) == (size_before, 1, 1)
    assert [b.base_offset for b in iter_batches(log.read(0, 1 << 30))] == [0]
    log.append_as_follower(build_batch([b"after"], base_offset=1))   # the log goes on where it was
    assert [b.base_offset for b in iter_batches(log.read(0, 1 << 30))] == [0, 1]
    log.close()


def test_leader_chunk_over_several_pieces_gets_offsets_and_epoch(tmp_path):
    values = [os.urandom(1000) for _ in range(900)]
    chunk = b"".join(build_batch(values, base_offset=0, partition_leader_epoch=1) for _ in range(3))
    log = PartitionLog.open(tmp_path / "t-0", config(max_message_bytes=1 << 30))
    log.append_as_leader([b"x"], 4)
    info = log.append_as_leader(chunk, 7)
    assert (info.first_offset, info.last_offset, info.record_count) == (1, 2700, 2700)
    got = list(iter_batches(log.read(1, 1 << 30)))
    assert [(b.base_offset, b.partition_leader_epoch) for b in got] == [(1, 7), (901, 7), (1801, 7)]
    assert all(b.is_valid() for b in got)
    assert [tuple(e) for e in log.epoch_cache.entries] == [(4, 0), (7, 1)]
    log.close()


def test_leader_crc_mismatch_after_the_first_piece_leaves_the_log_unchanged(tmp_path):
    values = [os.urandom(1000) for _ in range(900)]
    good = build_batch(values, base_offset=0)
    chunk = good + good + corrupt(good)
    log = PartitionLog.open(tmp_path / "t-0", config(max_message_bytes=1 << 30))
    log.append_as_leader([b"x"], 4)
    before = (log.size_bytes, log.log_end_offset, [tuple(e) for e in log.epoch_cache.entries])
    with pytest.raises(errors.CorruptRecordError, match="CRC") as info:
        log.append_as_leader(chunk, 9)
    assert info.value.position == 2 * len(good)
    assert (log.size_bytes, log.log_end_offset, [tuple(e) for e in log.epoch_cache.entries]) == before
    assert os.path.getsize(log.active_segment.log_path) == before[0]
    log.close()


def test_errors_are_those_of_validate_chunk(tmp_path):
    """A CRC mismatch in an earlier batch is reported before a later batch's offset error, and
    a batch's own CRC before its offsets -- the order plog_validate_chunk checks in."""
    log = PartitionLog.open(tmp_path / "t-0", config())
    first = build_batch([b"a"], base_offset=5)
    backwards = build_batch([b"b"], base_offset=3)
    cases = [
        (corrupt(first) + backwards, errors.CorruptRecordError, 0, 5),
        (first + corrupt(backwards), errors.CorruptRecordError, len(first), 3),
        (first + backwards, errors.OffsetsOutOfOrderError, len(first), 3),
    ]
    for chunk, cls, position, offset in cases:
        with pytest.raises(cls) as info:
            log.append_as_follower(chunk)
        assert type(info.value) is cls and (info.value.position, info.value.offset) == (position, offset)
        v = ffi.new("plog_validate *")
        v.flags, v.next_offset = lib.PLOG_VALIDATE_REQUIRE_FIRST, 0
        buf = bytearray(chunk)
        rc = lib.plog_validate_chunk(ffi.from_buffer(buf), len(buf), v)
        assert (v.error_position, v.error_offset) == (position, offset) and rc != 0
    # Kafka's UnifiedLog.append returns early for an empty record set: a no-op, not an error.
    assert log.append_as_follower(b"") == (-1, -1, -1, -1, 0, 0, 0, False)
    assert log.append_as_leader(b"", 3).batch_count == 0 and log.append_as_leader([], 3).batch_count == 0
    assert (log.size_bytes, log.log_end_offset, log.epoch_cache.entries) == (0, 0, [])
    # A fetch response may end inside a batch: the whole batches before it are appended.
    info = log.append_as_follower(first + first[:30])
    assert (info.first_offset, info.last_offset, info.size_bytes) == (5, 5, len(first))
    assert (log.size_bytes, log.log_end_offset) == (len(first), 6)
    with pytest.raises(errors.CorruptRecordError):       # nothing whole in it: still an error
        log.append_as_follower(first[:30])
    log.close()


def test_invalid_chunk_that_would_roll_does_not_roll(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", config(segment_bytes=4096))
    log.append_as_follower(build_batch([b"x" * 3000], base_offset=0))
    bad = corrupt(build_batch([b"y" * 3000], base_offset=1))
    with pytest.raises(errors.CorruptRecordError, match="CRC"):
        log.append_as_follower(bad)
    assert len(log.segments) == 1 and log.log_end_offset == 1
    with pytest.raises(errors.RecordListTooLargeError):
        log.append_as_follower(build_batch([b"z" * 5000], base_offset=1))
    info = log.append_as_follower(build_batch([b"y" * 3000], base_offset=1))     # rolls, then appends
    assert len(log.segments) == 2 and log.segments[1].base_offset == 1 and info.last_offset == 1
    assert [b.base_offset for b in log.batches()] == [0, 1]
    log.close()


def test_append_chunk_at_the_c_level(tmp_path):
    """The entry point itself: the struct it fills, EROLL without writing, NO_ROLL (the flags
    are the call's argument: v keeps none of them)."""
    seg = Segment(SegmentHome(str(tmp_path), config(segment_bytes=4096)), 0, create=True, active=True)
    v = ffi.new("plog_validate *")
    v.segment_bytes, v.segment_ms = 4096, 1 << 40
    flags, now = lib.PLOG_VALIDATE_REQUIRE_FIRST, seg.created_ms
    chunk = build_batch([b"a" * 1000], base_offset=0, partition_leader_epoch=3) + \
        build_batch([b"b" * 1000], base_offset=1, partition_leader_epoch=3)
    buf = bytearray(chunk)
    assert lib.plog_segment_append_chunk(seg.native, ffi.from_buffer(buf), len(buf), 0, -1, flags, now, v) == 0
    assert (v.first_offset, v.last_offset, v.batch_count, v.record_count, v.size_bytes, v.sole_epoch) == \
        (0, 1, 2, 2, len(chunk), 3)
    assert (seg.size, seg.next_offset) == (len(chunk), 2)
    more = bytearray(build_batch([b"c" * 1000], base_offset=2, partition_leader_epoch=4) +
                     build_batch([b"d" * 1000], base_offset=3, partition_leader_epoch=5))
    assert lib.plog_segment_append_chunk(seg.native, ffi.from_buffer(more), len(more), 2, -1, flags, now, v) == lib.PLOG_EROLL
    assert seg.size == len(chunk) == os.path.getsize(seg.log_path)
    assert v.sole_epoch == lib.PLOG_EPOCH_MIXED and v.epoch_count == 2
    assert v.flags == flags
    flags |= lib.PLOG_APPEND_NO_ROLL            # the caller may insist (it has just rolled)
    assert lib.plog_segment_append_chunk(seg.native, ffi.from_buffer(more), len(more), 2, -1, flags, now, v) == 0
    assert (seg.size, seg.next_offset) == (len(chunk) + len(more), 4)
    assert seg.size == os.path.getsize(seg.log_path)
    assert [b.base_offset for b in iter_batches(seg.view())] == [0, 1, 2, 3]
    seg.close()


# ---- a leader's immutable bytes (PLOG_APPEND_READONLY) --------------------------------------

def small_batches(count: int, epoch: int = 0) -> bytes:
    return b"".join(build_batch([b"v%d" % i, b"w%d" % i], base_offset=0, partition_leader_epoch=epoch)
                    for i in range(count))


class LogWritesIO(RecordingIO):
    """RecordingIO keeping only the writes into .log files."""

    def __init__(self):
        super().__init__()
        self.log_fds = set()

    def open(self, path, flags):
        fd = super().open(path, flags)
        if str(path).endswith(".log"):
            self.log_fds.add(fd)
        return fd

    def pwrite(self, fd, data, offset):
        if fd in self.log_fds:
            self.writes.append((offset, len(data)))
        return sio.PosixIO.pwrite(self, fd, data, offset)


def test_leader_bytes_are_never_written_and_land_as_a_private_copy_would(tmp_path):
    """bytes go to the file as stamped header copies and the rest of each batch (vectored
    writes of at most PLOG_IOV_MAX / 2 batches); a bytearray is copied and stamped in place.
    Both make the same file, and the caller's bytes stay as they were."""
    chunk = small_batches(300, epoch=3) + big_batch(0, 300_000, epoch=3)
    before = bytes(bytearray(chunk))
    logs, seams = [], []
    first = build_batch([b"first"])            # one batch for both logs: the same bytes
    for i, data in enumerate((chunk, bytearray(chunk))):
        seam = LogWritesIO()
        with sio.using(seam):
            log = PartitionLog.open(tmp_path / f"t-{i}", config(max_message_bytes=1 << 30))
            log.append_as_leader(first, 4)
            seam.writes.clear()
            info = log.append_as_leader(data, 7)
            assert (info.first_offset, info.last_offset, info.batch_count) == (1, 601, 301)
        logs.append(log)
        seams.append(seam)
    assert chunk == before
    files = [open(log.active_segment.log_path, "rb").read() for log in logs]
    assert files[0] == files[1]
    got = list(logs[0].batches())
    assert [(b.base_offset, b.partition_leader_epoch) for b in got][:3] == [(0, 4), (1, 7), (3, 7)]
    assert all(b.is_valid() for b in got) and got[-1].base_offset == 601
    # 301 batches: groups of 128, 128 and 45 batches (the seam sees each vectored write as one
    # write of its bytes); the copied bytearray goes in one piece.
    per_group = lib.PLOG_IOV_MAX // 2
    sizes = [n for _, n in seams[0].writes]
    assert len(sizes) == 3 and sum(sizes) == len(chunk)
    assert sizes[0] == len(small_batches(per_group)) and [n for _, n in seams[1].writes] == [len(chunk)]
    for log in logs:
        log.close()


def test_leader_bytes_with_a_bad_crc_in_a_later_group_cut_the_file_back(tmp_path):
    good = small_batches(200)
    # A flipped value byte: the records still parse, only the CRC check after the write sees it.
    chunk = good + corrupt(build_batch([b"bad"], base_offset=0), -2) + good
    seam = RecordingIO()
    with sio.using(seam):
        log = PartitionLog.open(tmp_path / "t-0", config())
        log.append_as_leader([b"x"], 1)
        size = log.size_bytes
        with pytest.raises(errors.CorruptRecordError, match="CRC") as info:
            log.append_as_leader(chunk, 2)
    assert info.value.position == len(good) and info.value.offset == 1 + 400    # as stamped
    assert seam.writes[-1][1] > 0 and seam.truncates[-1] == size               # the first group went out
    assert log.size_bytes == size and os.path.getsize(log.active_segment.log_path) == size
    assert log.log_end_offset == 1
    log.close()


def test_posix_pwritev_writes_every_buffer_in_order(tmp_path):
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        parts = [b"abc", b"", os.urandom(70_000), b"z"]
        keep = [ffi.from_buffer(p) for p in parts]
        iov = ffi.new("plog_iovec[]", [(k, len(p)) for k, p in zip(keep, parts)])
        assert lib.plog_posix_pwritev(fd, iov, len(parts), 5) == 0
        assert lib.plog_posix_pwritev(fd, iov, lib.PLOG_IOV_MAX + 1, 0) == errno.EINVAL
    finally:
        os.close(fd)
    assert path.read_bytes() == b"\0" * 5 + b"".join(parts)
