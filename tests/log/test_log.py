"""PartitionLog: appends, reads, roll, indexes, truncation, log start offset, reopen."""
import errno
import os

import pytest

from storage import LogConfig, PartitionLog, Record, build_batch, iter_batches
from storage.core import errors
from storage.core import io as sio
from storage.log.reads import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP


def batches_of(view):
    return list(iter_batches(view))


def offsets_of(view):
    return [r.offset for b in iter_batches(view) for r in b.records()]


def test_leader_append_assigns_offsets_and_stamps_epoch(make_log):
    log = make_log()
    info = log.append_as_leader([b"a", b"b", b"c"], leader_epoch=5)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 2, 3)
    # A prebuilt batch with a foreign base offset and epoch is rewritten.
    info = log.append_as_leader(build_batch([b"d"], base_offset=999, partition_leader_epoch=1), leader_epoch=6)
    assert (info.first_offset, info.last_offset) == (3, 3)
    assert log.log_end_offset == 4
    got = batches_of(log.read(0, 1 << 20))
    assert [(b.base_offset, b.last_offset, b.partition_leader_epoch) for b in got] == [(0, 2, 5), (3, 3, 6)]
    assert all(b.is_valid() for b in got)


def test_follower_append_rules(make_log):
    log = make_log()
    log.append_as_follower(build_batch([b"x", b"y"], base_offset=0, partition_leader_epoch=1))
    assert log.log_end_offset == 2
    with pytest.raises(errors.UnexpectedAppendOffsetError, match="below the log end offset 2") as info:
        log.append_as_follower(build_batch([b"z"], base_offset=1))
    assert info.value.offset == 1
    log.append_as_follower(build_batch([b"gap"], base_offset=10, partition_leader_epoch=2))   # gaps allowed
    assert log.log_end_offset == 11
    backwards = build_batch([b"p"], base_offset=20) + build_batch([b"q"], base_offset=15)
    with pytest.raises(errors.OffsetsOutOfOrderError) as info:
        log.append_as_follower(backwards)
    assert info.value.offset == 15 and info.value.position == len(build_batch([b"p"], base_offset=20))
    assert log.log_end_offset == 11
    assert offsets_of(log.read(0, 1 << 20)) == [0, 1, 10]


def test_empty_follower_restarts_at_a_batch_straddling_its_log_end(make_log):
    log = make_log()
    log.truncate_fully_and_start_at(105)
    log.append_as_follower(build_batch([b"a"] * 10, base_offset=100))
    assert (log.log_start_offset, log.log_end_offset) == (100, 110)
    with pytest.raises(errors.UnexpectedAppendOffsetError):   # not empty any more
        log.append_as_follower(build_batch([b"b"] * 10, base_offset=105))


def test_append_is_all_or_nothing(make_log):
    log = make_log()
    log.append_as_leader([b"keep"], 0)
    size_before = log.size_bytes
    good = build_batch([b"1"], base_offset=1) + build_batch([b"2"], base_offset=2)
    bad = bytearray(build_batch([b"3"], base_offset=3))
    bad[-1] ^= 0xFF
    with pytest.raises(errors.CorruptRecordError, match="CRC") as info:
        log.append_as_follower(good + bytes(bad))
    assert info.value.position == len(good) and info.value.offset == 3
    with pytest.raises(errors.CorruptRecordError):
        log.append_as_leader(good + bytes(bad), 0)
    with pytest.raises(errors.CorruptRecordError):
        log.append_as_leader(good + bytes(bad)[:30], 0)      # a leader's truncated tail: refused
    assert log.size_bytes == size_before and log.log_end_offset == 1
    assert os.path.getsize(log.active_segment.log_path) == size_before
    # A follower's chunk may end inside a batch (a fetch response is cut by bytes): the whole
    # batches before it go in, the partial one does not.
    assert log.append_as_follower(good + bytes(bad)[:30]).size_bytes == len(good)
    assert log.log_end_offset == 3


def test_follower_partial_tail_edges(tmp_path):
    """The follower's partial tail is found by the append's own header walk (C refuses the
    chunk, nothing written, naming the cut batch): every other verdict on the chunk wins,
    and the whole batches still roll when the segment is full."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=400, fsync=False))
    first = build_batch([b"a" * 100], base_offset=0)
    log.append_as_follower(first)
    two = build_batch([b"b" * 100], base_offset=1) + build_batch([b"c" * 100], base_offset=2)
    tail = build_batch([b"d"], base_offset=3)[:20]
    bad = bytearray(two)
    bad[-1] ^= 0xFF                         # a CRC error before the cut batch
    with pytest.raises(errors.CorruptRecordError, match="CRC"):
        log.append_as_follower(bytes(bad) + tail)
    legacy = bytearray(build_batch([b"e"], base_offset=1))
    legacy[16] = 1                          # a wrong magic before the cut batch
    with pytest.raises(errors.CorruptRecordError):
        log.append_as_follower(bytes(legacy) + tail)
    with pytest.raises(errors.CorruptRecordError):
        log.append_as_follower(tail)        # nothing whole at all
    assert (log.log_end_offset, len(log.segments)) == (1, 1)
    # The whole part does not fit the active segment: it rolls, then goes in whole.
    info = log.append_as_follower(two + tail)
    assert info.size_bytes == len(two) and (info.first_offset, info.last_offset) == (1, 2)
    assert log.log_end_offset == 3 and [s.base_offset for s in log.segments] == [0, 1]
    log.close()


def test_wrong_magic_and_legacy_appends_rejected(make_log):
    log = make_log()
    data = bytearray(build_batch([b"m"]))
    data[16] = 1
    with pytest.raises(errors.CorruptRecordError):
        log.append_as_follower(bytes(data))


def test_size_limits(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(max_message_bytes=1000, segment_bytes=5000, fsync=False))
    with pytest.raises(errors.RecordTooLargeError):
        log.append_as_leader([b"x" * 2000], 0)
    big = b"".join(build_batch([b"y" * 900], base_offset=i) for i in range(6))
    with pytest.raises(errors.RecordListTooLargeError) as info:
        log.append_as_follower(big)
    assert info.value.error_code == errors.Errors.RECORD_LIST_TOO_LARGE
    log.append_as_follower(build_batch([b"y" * 2000], base_offset=0))   # followers skip max_message_bytes
    assert log.log_end_offset == 1
    log.close()


def test_read_semantics(make_log):
    log = make_log()
    for i in range(50):
        log.append_as_leader([b"r%d-%d" % (i, j) for j in range(3)], 1)
    assert offsets_of(log.read(4, 1))[:3] == [3, 4, 5]               # whole batch holding 4, at least one
    assert offsets_of(log.read(149, 10)) == [147, 148, 149]
    assert len(log.read(150, 100)) == 0                              # at the log end offset
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(151, 100)
    view = log.read(0, 1 << 20)
    assert offsets_of(view) == list(range(len(offsets_of(view))))
    assert offsets_of(log.read(0, 1 << 20, max_offset=6)) == [0, 1, 2, 3, 4, 5]
    assert len(log.read(0, 1 << 20, max_offset=2)) == 0              # first batch reaches past max_offset
    total = []
    offset = 0
    while offset < log.log_end_offset:                                # fetch loop across segments
        view = log.read(offset, 300)
        got = offsets_of(view)
        total += got
        offset = got[-1] + 1
    assert total == list(range(150))
    assert len(log.segments) > 1


def test_read_views_are_read_only(make_log):
    """A read hands out views of a read-only mapping: writing into one is a TypeError, never a
    SIGSEGV, and the file is unchanged."""
    log = make_log()
    log.append_as_leader([b"abc"], 1)
    before = bytes(log.read(0, 1 << 20))
    view = log.read(0, 1 << 20)
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 0
    with pytest.raises(TypeError):
        view[0:1].cast("B")[0] = 0
    assert bytes(log.read(0, 1 << 20)) == before
    log.close()


def test_roll_names_and_trimmed_indexes(make_log, small_config):
    log = make_log()
    for _i in range(60):
        log.append_as_leader([b"v" * 100], 0)
    names = sorted(os.listdir(log.path))
    assert all(len(n.split(".")[0]) == 20 for n in names if n != "leader-epoch-checkpoint")
    for segment in log.segments[:-1]:
        assert segment.size <= small_config.segment_bytes
        assert os.path.getsize(segment.index_path) == 8 * len(segment.offset_index_entries())
        assert os.path.getsize(segment.time_index_path) == 12 * len(segment.time_index_entries())
    # The active segment's indexes are not pre-allocated (a sparse file written through a
    # mapping raises SIGBUS on a full disk): its entries reach the file at flush and seal, and
    # its index files are created then (Kafka's LazyIndex).
    active = log.active_segment
    assert active.offset_index_entries()
    assert not os.path.exists(active.index_path) and not os.path.exists(active.time_index_path)
    log.flush()
    assert os.path.getsize(active.index_path) == 8 * len(active.offset_index_entries())
    assert os.path.getsize(active.time_index_path) == 12 * len(active.time_index_entries())
    before = log.active_segment.base_offset
    log.roll()
    assert log.active_segment.base_offset == log.log_end_offset != before
    log.roll()   # the active segment is empty: no new segment
    assert sum(1 for s in log.segments if s.size == 0) == 1


def expected_index(batch_sizes, last_offsets, interval):
    """Kafka's cadence: an entry before a chunk when strictly more than `interval` bytes were
    appended since the last entry (docs/kafka-formats.md 2.2)."""
    entries, since, position = [], 0, 0
    for size, last in zip(batch_sizes, last_offsets):
        if since > interval:
            entries.append((last, position))
            since = 0
        since += size
        position += size
    return entries


def test_offset_index_cadence_matches_kafka_rule(tmp_path):
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=500, fsync=False)
    log = PartitionLog.open(tmp_path / "t-0", config)
    sizes, lasts = [], []
    for i in range(80):
        info = log.append_as_leader([b"p" * (10 + (i * 37) % 300)] * (1 + i % 3), 0)
        sizes.append(info.size_bytes)
        lasts.append(info.last_offset)
    assert log.segments[0].offset_index_entries() == expected_index(sizes, lasts, 500)
    log.close()


def test_time_index_and_offset_for_timestamp(make_log):
    log = make_log()
    t0 = 1_700_000_000_000
    for i in range(40):
        log.append_as_leader([Record(value=b"t", timestamp=t0 + 10 * i + j) for j in range(3)], 0)
    for segment in log.segments:
        entries = segment.time_index_entries()
        assert all(a[0] < b[0] for a, b in zip(entries, entries[1:]))
    assert log.offset_for_timestamp(t0) == (t0, 0, 0)
    assert log.offset_for_timestamp(t0 + 101) == (t0 + 101, 31, 0)
    assert log.offset_for_timestamp(t0 + 105) == (t0 + 110, 33, 0)
    assert log.offset_for_timestamp(t0 + 10_000) is None
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert log.offset_for_timestamp(LATEST_TIMESTAMP).offset == 120
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (t0 + 392, 119, 0)
    # rolled segments end with the final time-index entry (the segment's max timestamp)
    for segment in log.segments[:-1]:
        assert segment.time_index_entries()[-1][0] == segment.max_timestamp


def test_truncate_to(make_log):
    log = make_log()
    for _i in range(100):
        log.append_as_leader([b"a" * 40, b"b" * 40], 2)
    segments_before = len(log.segments)
    assert log.truncate_to(200) is False and log.log_end_offset == 200
    assert log.truncate_to(121) is True
    # batch-granular: the batch [120, 121] goes, yet the log end offset is the target
    assert log.log_end_offset == 121
    assert offsets_of(log.read(110, 1 << 20))[-1] == 119
    assert len(log.segments) < segments_before
    assert log.active_segment.active and not any(s.active for s in log.segments[:-1])
    info = log.append_as_leader([b"new"], 3)
    assert info.first_offset == 121
    assert offsets_of(log.read(118, 1 << 20)) == [118, 119, 121]
    # truncating below the first segment restarts the log
    log.increment_log_start_offset(0)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (500, 500, 1)
    assert log.active_segment.base_offset == 500
    assert log.append_as_leader([b"z"], 4).first_offset == 500


def test_increment_log_start_offset(make_log):
    log = make_log()
    for _i in range(100):
        log.append_as_leader([b"c" * 60], 1)
    with pytest.raises(errors.OffsetOutOfRangeError, match="high watermark"):
        log.increment_log_start_offset(10)
    log.update_high_watermark(80)
    bases = [s.base_offset for s in log.segments]
    assert log.increment_log_start_offset(50) is True
    assert log.log_start_offset == 50
    remaining = [s.base_offset for s in log.segments]
    deleted = [b for b in bases if b not in remaining]
    assert deleted and max(deleted) < remaining[0] <= 50 < log.segments[0].next_offset
    assert not any(os.path.exists(os.path.join(log.path, f"{b:020d}.log")) for b in deleted)
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(49, 100)
    assert offsets_of(log.read(50, 100))[0] == 50
    assert log.increment_log_start_offset(40) is False


def test_clean_reopen_keeps_everything(tmp_path, small_config):
    log = PartitionLog.open(tmp_path / "t-0", small_config)
    for i in range(70):
        log.append_as_leader([b"w%d" % i], i // 10)
    indexes = [(s.offset_index_entries(), s.time_index_entries()) for s in log.segments]
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", small_config, clean_shutdown=True)
    assert reopened.log_end_offset == 70 and reopened.recovery_point == 70
    assert [(s.offset_index_entries(), s.time_index_entries()) for s in reopened.segments] == indexes
    assert reopened.append_as_leader([b"more"], 7).first_offset == 70
    reopened.close()
    # An unclean open (recovery from 0) rebuilds the same indexes.
    again = PartitionLog.open(tmp_path / "t-0", small_config)
    assert again.recovery_report == [] and again.log_end_offset == 71
    assert [s.offset_index_entries() for s in again.segments][:-1] == [i[0] for i in indexes][:len(again.segments) - 1]
    again.close()


def test_unclean_reopen_truncates_torn_tail(tmp_path, small_config):
    log = PartitionLog.open(tmp_path / "t-0", small_config)
    for i in range(30):
        log.append_as_leader([b"s%d" % i], 0)
    path = log.active_segment.log_path
    size = log.active_segment.size
    leo = log.log_end_offset
    # crash: no close (indexes stay pre-allocated), and half a batch hits the file
    torn = build_batch([b"torn"], base_offset=leo)
    with open(path, "ab") as f:
        f.write(torn[: len(torn) // 2])
    recovered = PartitionLog.open(tmp_path / "t-0", small_config)
    assert recovered.log_end_offset == leo
    assert os.path.getsize(path) == size
    assert recovered.recovery_report and recovered.recovery_report[0][1] == len(torn) // 2
    assert offsets_of(recovered.read(0, 1 << 20))[0] == 0
    recovered.close()


def test_unclean_reopen_cuts_at_first_bad_crc_and_drops_later_segments(tmp_path, small_config):
    log = PartitionLog.open(tmp_path / "t-0", small_config)
    for _i in range(120):
        log.append_as_leader([b"q" * 50], 0)
    assert len(log.segments) >= 3
    victim = log.segments[1]
    path, base = victim.log_path, victim.base_offset
    first_batch = next(iter_batches(victim.view()))
    position = first_batch.size_bytes * 2
    log.close()
    with open(path, "r+b") as f:
        f.seek(position + 70)
        byte = f.read(1)
        f.seek(position + 70)
        f.write(bytes([byte[0] ^ 0x40]))
    recovered = PartitionLog.open(tmp_path / "t-0", small_config)
    assert recovered.log_end_offset == base + 2
    assert len(recovered.segments) == 2
    assert recovered.recovery_report[0][0] == base and "CRC" in recovered.recovery_report[0][2]
    recovered.close()


def test_missing_index_is_rebuilt_even_after_clean_shutdown(tmp_path, small_config):
    log = PartitionLog.open(tmp_path / "t-0", small_config)
    for _i in range(40):
        log.append_as_leader([b"i" * 80], 0)
    entries = log.segments[0].offset_index_entries()
    assert entries
    log.close()
    os.unlink(log.segments[0].index_path)
    reopened = PartitionLog.open(tmp_path / "t-0", small_config, clean_shutdown=True)
    assert reopened.segments[0].offset_index_entries() == entries
    reopened.close()


def test_closed_log_raises(make_log):
    log = make_log()
    log.close()
    with pytest.raises(errors.LogClosedError):
        log.append_as_leader([b"x"], 0)
    with pytest.raises(errors.LogClosedError):
        log.read(0, 10)


def test_view_survives_truncation_and_close(tmp_path, small_config):
    log = PartitionLog.open(tmp_path / "t-0", small_config)
    for _i in range(5):
        log.append_as_leader([b"k" * 100], 0)
    view = log.read(0, 1 << 20)
    held = bytes(view)
    log.truncate_to(0)
    # The reader keeps the batches it was given (private copies of its pages): not zeros, and
    # not a SIGBUS on the shrunk file.
    assert bytes(view) == held and len(list(iter_batches(view))) == 5
    log.close()
    del log
    assert len(bytes(view)) == len(view)


# ---- the I/O seam -----------------------------------------------------------------------------

class RecordingIO(sio.PosixIO):
    def __init__(self):
        self.calls = []
        self.fail_pwrite = None
        self.names = {}

    def _note(self, name, *args):
        self.calls.append((name,) + args)

    def open(self, path, flags):
        self._note("open", os.path.basename(path))
        fd = super().open(path, flags)
        self.names[fd] = os.path.basename(path)
        return fd

    def pwrite(self, fd, data, offset):
        self._note("pwrite", self.names.get(fd), len(data))
        if self.fail_pwrite:
            raise OSError(self.fail_pwrite, "injected")
        return super().pwrite(fd, data, offset)

    def fsync(self, fd, flags=0):
        self._note("fsync", flags)
        return super().fsync(fd, flags)

    def ftruncate(self, fd, size):
        self._note("ftruncate", size)
        return super().ftruncate(fd, size)

    def mmap(self, fd, length, writable):
        self._note("mmap", writable)
        return super().mmap(fd, length, writable)

    def fsync_dir(self, path, flags=0):
        self._note("fsync_dir", flags)
        return super().fsync_dir(path, flags)

    def rename(self, source, target):
        self._note("rename", os.path.basename(source), os.path.basename(target))
        return super().rename(source, target)


def test_every_file_operation_goes_through_the_seam(tmp_path, small_config):
    seam = RecordingIO()
    with sio.using(seam):
        log = PartitionLog.open(tmp_path / "t-0", small_config)
        for _i in range(30):
            log.append_as_leader([b"o" * 100], 0)
        log.truncate_to(5)
        log.close()
    names = {c[0] for c in seam.calls}
    assert {"open", "pwrite", "fsync", "ftruncate", "mmap", "fsync_dir", "rename"} <= names
    assert ("open", "00000000000000000000.log") in seam.calls
    # fsync disabled: the flush points still reach the seam, marked NOOP
    assert all(c[1] & sio.SYNC_NOOP for c in seam.calls if c[0] in ("fsync", "fsync_dir"))
    assert sum(c[0] == "pwrite" and c[1].endswith(".log") for c in seam.calls) == 30
    assert ("pwrite", "leader-epoch-checkpoint.tmp", len(b"0\n1\n0 0\n")) in seam.calls
    assert not __import__("storage").core._native.lib.plog_io_python_active()


def test_failed_write_leaves_log_unchanged_and_takes_the_dir_offline(tmp_path, small_config):
    """A failed write is cut back (the log is unchanged) and the dir goes offline: the disk
    recovering does not make a later append succeed (issue 13: nothing is retried into
    success); reopening finds exactly what was appended before the failure."""
    seam = RecordingIO()
    with sio.using(seam):
        log = PartitionLog.open(tmp_path / "t-0", small_config)
        log.append_as_leader([b"first"], 0)
        size = log.size_bytes
        seam.fail_pwrite = errno.ENOSPC
        with pytest.raises(errors.LogDirOfflineError) as info:
            log.append_as_leader([b"second"], 0)
        assert info.value.errno == errno.ENOSPC and log.path in str(info.value)
        assert info.value.error_code == errors.Errors.KAFKA_STORAGE_ERROR
        seam.fail_pwrite = None
        assert (log.size_bytes, log.log_end_offset) == (size, 1)
        with pytest.raises(errors.LogDirOfflineError):
            log.append_as_leader([b"third"], 0)
        with pytest.raises(errors.LogDirOfflineError):
            log.read(0, 100)
        with pytest.raises(errors.LogDirOfflineError):
            log.close()
    assert [r.value for b in iter_batches(open(log.segments[0].log_path, "rb").read()) for r in b.records()] == [
        b"first"]


def test_segment_read_is_find_then_span(make_log):
    """plog_segment_read (one C call per point read) answers what plog_segment_find followed
    by plog_batches_span answer, for every offset, byte and offset bound."""
    from storage.core._native import ffi, lib

    log = make_log(config=LogConfig(index_interval_bytes=100, fsync=False))
    for i in range(40):
        log.append_as_leader([b"v%d-%d" % (i, j) for j in range(1 + i % 3)], 2)
    segment = log.active_segment
    pointer = segment.mapping().pointer
    span = ffi.new("int64_t[2]")
    for offset in range(log.log_end_offset + 3):
        for max_bytes, max_offset in ((1, -1), (300, -1), (1 << 20, -1), (1 << 20, offset + 4)):
            assert lib.plog_segment_read(segment.native, pointer, offset, max_bytes, max_offset, span) == 0
            position = segment.find(offset)
            expected = (position, lib.plog_batches_span(pointer, segment.size, position, max_bytes, max_offset)) \
                if position >= 0 else (-1, 0)
            assert (span[0], span[1]) == expected
            view = segment.read(offset, max_bytes, max_offset)
            assert (view is None) if position < 0 else bytes(view) == bytes(segment.view(position, position + span[1]))
    empty = log.roll()
    assert lib.plog_segment_read(empty.native, ffi.NULL, 0, 1, -1, span) == 0 and (span[0], span[1]) == (-1, 0)
    assert empty.read(0, 1) is None


def test_a_truncation_survives_page_cache_loss(tmp_path):
    # Simulator seed 508392: a follower truncated a divergent tail, refetched the leader's
    # batches, lost its page cache -- and the removed tail (of a newer epoch) came back and
    # passed recovery.  The cut is durable at once now: a crash keeps nothing of that tail.
    from storage.core import io as sio
    from storage.sim.fs import SimFS
    fs = SimFS(tmp_path, seed=1)
    config = LogConfig(fsync=False)
    with sio.using(fs):
        log = PartitionLog.open(tmp_path / "t-0", config)
        log.append_as_leader([b"committed"], 0)
        log.assign_epoch_start_offset(1)
        log.append_as_leader([b"divergent-1", b"divergent-2"], 1)
        log.flush()
        log.truncate_to(1)
        log.append_as_follower(build_batch([b"refetched"], base_offset=1, partition_leader_epoch=0))
        for segment in log.segments:
            segment.close()
    fs.crash(tmp_path, mode="a")                  # nothing written since the truncation survives
    with sio.using(fs):
        log = PartitionLog.open(tmp_path / "t-0", config)
        assert [r.value for b in log.batches() for r in b.records()] == [b"committed"]
        log.close()


def test_check_invariants_can_fail(make_log):
    """The engine's self-checks (used after every step of the model-based tests) see a broken
    state: an epoch cache out of order, a high watermark above the log end."""
    import pytest as _pytest

    log = make_log()
    log.append_as_leader([b"a", b"b"], 0)
    log.check_invariants()
    log.epoch_cache._epochs.append(-5)
    log.epoch_cache._offsets.append(1)
    with _pytest.raises(AssertionError):
        log.epoch_cache.check_invariants()
    del log.epoch_cache._epochs[-1], log.epoch_cache._offsets[-1]
    log.high_watermark = log.log_end_offset + 1
    with _pytest.raises(AssertionError):
        log.check_invariants()
    log.high_watermark = log.log_end_offset
    log.check_invariants()
