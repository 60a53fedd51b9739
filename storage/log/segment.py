"""One log segment: `NNNNNNNNNNNNNNNNNNNN.log`, `.index` and `.timeindex` (docs/kafka-formats.md 2).

The C core (csrc/segment.c) owns the write side and the indexes; this class owns the read
mapping of the `.log` and the life cycle (active -> sealed -> deleted).

Invariants:
  - reads are zero-copy slices of one read-only mapping of the `.log`.  An active segment
    maps `max(segment_bytes, size)` bytes once, so appends never remap; a slice handed out
    keeps its mapping alive (the mapping is unmapped when the last slice is released);
  - before a truncation shrinks the file, the pages past the cut of every mapping a reader's
    view may pin (the current one, and those let go of: segment_home.retired_mappings) become
    private copies, so a slice keeps its bytes and never faults; recovery's cut replaces the
    current mapping's pages past the new end with zero pages;
  - a sealed segment's index files are trimmed to their entries (what Kafka's loader expects
    of an inactive segment); an active segment's index entries live in memory and reach their
    files by pwrite at flush and seal -- nothing is ever written through a mapping, so a full
    disk is an error, never SIGBUS (csrc/index.c);
  - deleting renames the files to `.deleted` first, as Kafka does, so a crash in between
    leaves files the loader recognises and removes.
"""
from __future__ import annotations

import os

from ..core import errors
from ..core import io as _io
from ..core._native import ffi, lib
from ..core.clock import wall_ms
from ..core.files import (  # noqa: E402
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SEGMENT_FILE_KINDS,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_name,
)
from .file_slice import FileSlice
from .segment_home import Mapping, SegmentHome, open_segments, retired_mappings, set_open_segments_max  # noqa: F401
from .txnindex import TransactionIndex

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_LOG_BYTES, _INDEX_BYTES, _TIME_INDEX_BYTES = (s.encode() for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX))


def _round_pages(n: int) -> int:
    return (n + PAGE_BYTES - 1) // PAGE_BYTES * PAGE_BYTES


_OPEN, _SUSPENDED, _CLOSED = 0, 1, 2


class Segment:
    """A segment of a `PartitionLog`.  Not thread-safe: the log serialises access (its lock is
    `owner_lock`, which the open-segment cache takes before suspending this segment)."""

    # Slots, the log's shared fields in its SegmentHome, file paths derived when asked, the
    # transaction index made on first use: a partition holds one of these per sealed segment
    # for as long as it is open (bench_partitions_memory measures it).
    __slots__ = ("_home", "base_offset", "_suffix", "_txn", "native", "address", "_mapping", "_state", "created_ms")

    def __init__(self, home: SegmentHome, base_offset: int, *, create: bool, active: bool, suffix: str = ""):
        self._fields(home, base_offset, suffix)
        # Kafka's LogSegment.created (the time-based roll's fallback; from disk: this open, as in Kafka).
        self.created_ms = wall_ms()
        self._open_files(create=create, active=active)

    def _fields(self, home: SegmentHome, base_offset: int, suffix: str) -> None:
        self._home = home
        self.base_offset = base_offset
        # suffix: the cleaner's segments are written as `.cleaned` files (change_suffix moves them on)
        self._suffix = suffix
        self._txn: TransactionIndex | None = None
        self.native = None
        self.address = 0        # native's address, for the one-call append (appends._AppendState.call); 0 closed
        self._mapping: Mapping | None = None
        self._state = _OPEN
        self.created_ms = None

    @property
    def config(self):
        return self._home.config

    @property
    def owner_lock(self):
        return self._home.lock

    @property
    def home(self) -> SegmentHome:
        return self._home

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    @property
    def suspended(self) -> bool:
        """Its descriptors closed by the open-segment cache (resumed on its next use)."""
        return self._state == _SUSPENDED

    def rehome(self, home: SegmentHome) -> None:
        """Join another home (the cleaner's segment, written under its own lock, at the swap)."""
        self._home = home

    def _open_files(self, *, create: bool, active: bool) -> None:
        c = ffi.new("plog_segment *")
        config = self._home.config
        prefix = os.fsencode(os.path.join(self._home.directory, segment_name(self.base_offset)))
        tail = self._suffix.encode() if self._suffix else b""
        rc = lib.plog_segment_open(
            c, prefix + _LOG_BYTES + tail, prefix + _INDEX_BYTES + tail,
            prefix + _TIME_INDEX_BYTES + tail, self.base_offset, config.index_interval_bytes,
            config.segment_index_bytes, 1 if create else 0, 1 if active else 0,
            0 if config.fsync else lib.PLOG_SYNC_NOOP)
        self._check(rc, "open")
        c.created_ms = self.created_ms or 0     # what the roll rule measures a segment's age from
        self.native = c
        self.address = int(ffi.cast("uintptr_t", c))
        open_segments.touch(self)

    # ---- descriptors (see _OpenSegments) ----
    def _use(self) -> None:
        """Resume a suspended segment and mark it recently used; every call that touches the
        files, the indexes or the read mapping starts here."""
        if open_segments.last is self:      # (the cache forgets what it suspends or closes)
            return
        if self._state == _SUSPENDED:
            self._check(lib.plog_segment_resume(self.native, os.fsencode(self.log_path), os.fsencode(self.index_path),
                                                os.fsencode(self.time_index_path)), "reopen")
            self._state = _OPEN
        open_segments.touch(self)

    def suspend(self) -> bool:
        """Close its descriptors (the open-segment cache): False when it stays open, because the
        flush before the close failed -- the log dir is then offline."""
        if self._state != _OPEN:
            return True
        c = self.native
        if not (c.mutable_indexes or c.indexes_lazy or c.index_suspect or self._suffix):
            # Sealed, its files complete: back to unopened, its C state freed (memory does not
            # grow with the sealed segments a process has read); its next use opens and checks
            # it again, as after a clean open.
            self._to_on_disk()
            return True
        if not c.sync_flags & lib.PLOG_SYNC_NOOP and not self._flush_before_close(c):
            return False
        self._drop_mapping()            # a view a reader holds keeps its own mapping alive
        lib.plog_segment_suspend(c)
        self._state = _SUSPENDED
        return True

    def _flush_before_close(self, c) -> bool:
        """fsync what it holds before its descriptors close (fsyncgate: a writeback error is
        reported to a descriptor open when it happened; once the last one closes and the inode
        leaves the cache, a later fsync on a new descriptor succeeds with the data gone).  A
        failure takes the log dir offline, here: the caller is another log's operation."""
        rc = lib.plog_io_fsync(c.log_fd, c.sync_flags) if c.indexes_lazy else lib.plog_segment_flush(c)
        try:
            self._check(rc, "flush before the open-segment cache closes its files")
        except errors.StorageError as exc:
            self._home.failure.fail(exc, "flush")
            return False
        return True

    def _to_on_disk(self) -> None:
        """Close the files and free the C state: an OnDiskSegment again.  The close is not
        raised (another log's call may be pushing this one out): a sealed segment was flushed
        when it was sealed, and its next open finds any fault on its own."""
        self._drop_mapping()
        c, self.native, self.address = self.native, None, 0
        self.__class__ = OnDiskSegment
        lib.plog_segment_close(c)

    # ---- files ----
    def _path(self, kind: str) -> str:
        return os.path.join(self._home.directory, segment_name(self.base_offset)) + kind + self._suffix

    def paths(self) -> tuple[str, str, str, str]:
        """The four files, in Kafka's order: log, offset index, time index, transaction index."""
        return tuple(self._path(kind) for kind in SEGMENT_FILE_KINDS)

    @property
    def log_path(self) -> str:
        return self._path(LOG_SUFFIX)

    @property
    def index_path(self) -> str:
        return self._path(INDEX_SUFFIX)

    @property
    def time_index_path(self) -> str:
        return self._path(TIME_INDEX_SUFFIX)

    @property
    def txn_index(self) -> TransactionIndex:
        """Kafka's transaction index of this segment (its file is read on first use)."""
        if self._txn is None:
            self._txn = TransactionIndex(self._path(TXN_INDEX_SUFFIX), sync=self.config.fsync)
        return self._txn

    def append_aborted(self, entry) -> bool:
        """Add an aborted transaction to the transaction index (True: its file was created now).
        Its marker is already written, so a missing entry would show the aborted records as
        committed: any failure, even for want of descriptors, takes the dir offline (a reopen
        rebuilds the index from the log)."""
        try:
            return self.txn_index.append(entry)
        except OSError as exc:
            raise self._home.failure.fail(exc, "transaction index append") from exc

    def txn_index_absent(self) -> None:
        """The caller's listing of the dir has no transaction index file for this segment: its
        index is empty without a look at the file system."""
        self._txn = TransactionIndex(self._path(TXN_INDEX_SUFFIX), sync=self.config.fsync, entries=[])

    # ---- fields ----
    @property
    def size(self) -> int:
        return self.native.size

    @property
    def next_offset(self) -> int:
        return self.native.next_offset

    @property
    def max_timestamp(self) -> int:
        return self.native.max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        return self.native.offset_of_max_timestamp

    @property
    def active(self) -> bool:
        return bool(self.native.mutable_indexes)

    @property
    def index_suspect(self) -> bool:
        """An offset-index entry was found pointing at the wrong batch (load or read)."""
        return bool(self.native.index_suspect)

    # ---- writing ----
    def append_chunk(self, pointer, length: int, log_end_offset: int, leader_epoch: int, flags: int, now_ms: int,
                     v) -> int:
        """plog_segment_append_chunk on this segment (validate, roll check at `now_ms`, assign
        offsets, stamp the epoch, write, index; `flags` for this call, `v` the plog_validate
        in/out): 0, or the C code for the log to act on (PLOG_EROLL, PLOG_ERECHECK,
        PLOG_EPRODUCER: nothing written; storage/log/appends.py) or to raise."""
        self._use()         # reopens its files if the open-segment cache closed them
        return lib.plog_segment_append_chunk(self.native, pointer, length, log_end_offset, leader_epoch, flags, now_ms, v)

    def append_pieces(self, pieces, count: int, log_end_offset: int, flags: int, now_ms: int, v) -> int:
        """plog_segment_append_pieces on this segment: a follower's chunk as `count` separate
        buffers (a plog_iovec array), written without gathering them; 0 or the C code (a
        refusal wrote nothing)."""
        self._use()
        return lib.plog_segment_append_pieces(self.native, pieces, count, log_end_offset, flags, now_ms, v)

    def raise_for(self, rc: int, what: str, *, offset=None) -> None:
        """Raise the exception for a nonzero C code from an operation on this segment."""
        self._check(rc, what, offset=offset)

    def check_invariants(self) -> None:
        """Raise AssertionError unless the segment's state is one docs/reliability.md allows:
        size within int32, the next offset at or above the base and within the relative-offset
        range, offset-index entries increasing inside [base, next offset) at positions inside
        the log, time-index timestamps not decreasing (for model-based tests)."""
        base, size, next_offset = self.base_offset, self.size, self.next_offset
        assert 0 <= size <= INT32_MAX, (self, size)
        assert base <= next_offset <= base + INT32_MAX + 1, (self, next_offset)
        entries = self.offset_index_entries()
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(entries, entries[1:])), (self, entries)
        assert all(base <= o < max(next_offset, base + 1) and 0 <= p < max(size, 1) for o, p in entries), \
            (self, entries)
        times = self.time_index_entries()
        assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(times, times[1:])), (self, times)

    def __repr__(self) -> str:
        return (f"Segment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset}, "
                f"active={self.active})")

    def _check(self, rc: int, what: str, *, offset=None, path=None) -> None:
        """Raise for a nonzero C code, naming `path` (the .log by default; INDEX_SUFFIX: the
        offset index, its name built only when there is an error to raise)."""
        if rc == 0:
            return
        path = self.index_path if path == INDEX_SUFFIX else path or self.log_path
        if rc == lib.PLOG_ECALLBACK:
            exc = _io.take_callback_error()
            raise errors.StorageIOError(f"{what}: I/O seam raised {exc!r}", file=path, offset=offset) from exc
        if rc > 0:
            raise errors.StorageIOError(f"{what}: {os.strerror(rc)}", errno=rc, file=path, offset=offset)
        raise errors.error_class(rc)(f"{what}: {errors.error_text(rc)}", file=path, offset=offset)

    # ---- reading ----
    def mapping(self) -> Mapping:
        """The current read mapping, covering at least `size` bytes."""
        self._use()
        m = self._mapping
        size = self.native.size
        if m is None or m.length < size:
            if m is not None:
                self._drop_mapping()
            reserve = max(size, self.config.segment_bytes) if self.active else size
            m = self._mapping = Mapping(self.native.log_fd, _round_pages(reserve), self.log_path)
        return m

    def _drop_mapping(self, valid: int | None = None) -> None:
        """Let the read mapping go; a reader's views keep it mapped, so it is listed with the
        retired ones (views reach `valid` bytes, the size now by default) until it goes."""
        m, self._mapping = self._mapping, None
        if m is not None and m.length:
            retired_mappings.add(self.log_path, m.pointer, m.length, self.native.size if valid is None else valid)

    def log_pointer(self):
        return self.mapping().pointer if self.native.size else ffi.NULL

    def view(self, start: int = 0, end: int | None = None) -> memoryview:
        end = self.native.size if end is None else end
        return self.mapping().view[start:end]

    def find(self, offset: int) -> int:
        """Position of the first batch whose last offset >= offset, or -1."""
        self._use()
        if self.native.size == 0:
            return -1
        home = self._home
        position, info, _, _ = home.reads or home.read_scratch()   # reused: the log serialises calls
        rc = lib.plog_segment_find(self.native, self.log_pointer(), offset, position, info)
        if rc:
            raise errors.CorruptRecordError(f"cannot read batch header: {errors.error_text(rc)}",
                                            file=self.log_path, position=position[0], offset=offset)
        return position[0]

    def read(self, offset: int, max_bytes: int, max_offset: int = -1) -> memoryview | None:
        """Whole batches from the one holding `offset` (None when nothing here holds it): one
        C call (plog_segment_read) into a reused out-array; the log serialises calls."""
        self._use()
        size = self.native.size
        if size == 0:
            return None
        m = self._mapping
        if m is None or m.length < size:
            m = self.mapping()
        home = self._home
        _, _, span, span_view = home.reads or home.read_scratch()
        rc = lib.plog_segment_read(self.native, m.pointer, offset, max_bytes, max_offset, span)
        if rc:
            raise errors.CorruptRecordError(f"cannot read batch header: {errors.error_text(rc)}",
                                            file=self.log_path, position=-1, offset=offset)
        position, length = span_view
        if position < 0:
            return None
        return m.view[position:position + length]

    def file_slice(self, view: memoryview, address: int) -> FileSlice | None:
        """The FileSlice of `view` (at `address`), a read's answer, when it lies in this
        segment's current read mapping: its position in the .log and a descriptor of its own.
        None when it does not (a view of another segment, or of a mapping let go of since), or
        when no descriptor is left to make one."""
        m = self._mapping
        if self._state != _OPEN or m is None or not m.length:
            return None
        position = address - int(ffi.cast("uintptr_t", m.pointer))
        if position < 0 or position + len(view) > self.native.size:
            return None
        try:
            fd = os.dup(self.native.log_fd)
        except OSError:         # out of descriptors (EMFILE): the view serves, copied when sent
            return None
        return FileSlice(view, fd, position, self._home)

    # ---- writing ----
    # Appends are made by PartitionLog through lib.plog_segment_append_chunk on self.native.

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= offset (and the aborted transactions whose
        marker is among them); returns the bytes removed."""
        self._use()
        self.txn_index.truncate_to(offset)
        before = self.native.size
        if before == 0:
            return 0
        if not self.active:
            self._check(lib.plog_segment_unseal(self.native, self.config.segment_index_bytes), "unseal")
        held = self._mapping is not None     # readers may hold views of it; of one made now, none
        m = self.mapping()
        position = self.find(offset)
        if position < 0:
            return 0
        # Views past the cut (the log's one-writer, many-readers contract), of this mapping or
        # of one let go before: their pages become private copies before the file shrinks.
        if held:
            self._drop_mapping(valid=before)
        else:
            self._mapping = None
        retired_mappings.snapshot(self.log_path, position)
        self._home.cuts += 1            # a FileSlice of the bytes past the cut is no longer its file's
        rc = lib.plog_segment_truncate_to(self.native, m.pointer, offset)
        self._check(rc, "truncate", offset=offset)
        return before - self.native.size

    def recover(self, *, check_crc: bool = True) -> tuple[int, object]:
        """Unclean-shutdown recovery of this segment (docs/kafka-formats.md 5.4): validate every
        batch, rebuild both indexes, cut the .log at the first invalid batch.  Returns
        (bytes truncated, scan report)."""
        self._use()
        if not self.active:
            self._check(lib.plog_segment_unseal(self.native, self.config.segment_index_bytes), "unseal")
        physical = self.native.size
        m = self.mapping()
        # The scan may cut anywhere: views of mappings let go of (a closed instance of this
        # log in the process) keep their bytes; there are none in the common case.
        retired_mappings.snapshot(self.log_path, 0)
        scan = ffi.new("plog_scan *")
        epochs = ffi.new("int32_t[]", 256)
        epoch_offsets = ffi.new("int64_t[]", 256)
        scan.epoch_capacity = 256
        scan.epochs = epochs
        scan.epoch_offsets = epoch_offsets
        scan.check_crc = 1 if check_crc else 0
        rc = lib.plog_segment_recover(self.native, m.pointer if physical else ffi.NULL, physical, scan)
        self._check(rc, "recover", offset=scan.stop_offset)
        truncated = physical - self.native.size
        if truncated:
            self._home.cuts += 1
            m.retire_from(self.native.size)
            self._drop_mapping()
        report = ScanReport(scan, [(epochs[i], epoch_offsets[i]) for i in range(min(scan.epoch_count, 256))])
        return truncated, report

    def index_problem(self, *, thorough: bool = False) -> str | None:
        """Kafka's index sanity check, for a segment opened without recovery: None when the
        indexes look usable, else why not (then the segment is recovered).  Stricter than
        Kafka: the last two entries must be in order (an index whose trim did not reach the
        disk ends in zero entries), and with `thorough` (after an unclean shutdown) every
        entry must be in order and inside the segment."""
        self._use()
        c = self.native
        if c.index_suspect:
            return "an index file is longer than segment_index_bytes or points at the wrong batch"
        # The lengths the open found (fstat of the descriptors it holds): no second stat by name.
        if c.offset_file_bytes % lib.PLOG_OFFSET_ENTRY_BYTES:
            return "offset index length is not a multiple of 8"
        if c.time_file_bytes % lib.PLOG_TIME_ENTRY_BYTES:
            return "time index length is not a multiple of 12"
        bad = ffi.new("int64_t[2]")
        rc = lib.plog_segment_index_check(self.native, thorough, bad)    # every entry: ~1 ms a GiB
        if rc == lib.PLOG_INDEX_BAD_OFFSET_ENTRY:
            return f"offset index entry ({bad[0]}, {bad[1]}) is out of order or outside the segment"
        if rc == lib.PLOG_INDEX_BAD_TIME_ENTRY:
            return f"time index entry ({bad[0]}, {bad[1]}) is out of order"
        return None

    def scan_epochs(self) -> list[tuple[int, int]]:
        """(epoch, base offset) at every change of partition leader epoch in the v2 batches."""
        self._use()
        if self.native.size == 0:
            return []
        capacity = 256
        while True:
            scan = ffi.new("plog_scan *")
            epochs = ffi.new("int32_t[]", capacity)
            offsets = ffi.new("int64_t[]", capacity)
            scan.base_offset, scan.index_interval_bytes, scan.check_crc = self.native.base_offset, 0, 0
            scan.epoch_capacity, scan.epochs, scan.epoch_offsets = capacity, epochs, offsets
            lib.plog_scan_buffer(self.log_pointer(), self.native.size, scan, ffi.NULL)
            if scan.epoch_count <= capacity:
                return [(epochs[i], offsets[i]) for i in range(scan.epoch_count)]
            capacity = scan.epoch_count

    def load(self) -> None:
        """Derive next offset and max timestamp after a clean open."""
        self._use()
        # The headers it walks (from the last index hint on) are read by pread: nothing is
        # mapped until the first read, and an open partition keeps no mapping (~3 KiB of
        # bookkeeping) per sealed segment it may never read.
        rc = lib.plog_segment_load(self.native, ffi.NULL)
        if rc > 0 or rc == lib.PLOG_ECALLBACK:
            self._check(rc, "load")
        if rc:
            raise errors.CorruptRecordError(f"cannot load segment: {errors.error_text(rc)}", file=self.log_path)

    def attach_indexes(self) -> bool:
        """Create the index files of a new segment (Kafka's LazyIndex: a segment's index files
        come when first needed, here at its first flush or seal).  True when it created them:
        the caller makes the directory entries durable."""
        if not self.native.indexes_lazy:
            return False
        self._use()
        self._check(lib.plog_segment_attach_indexes(self.native, os.fsencode(self.index_path),
                                                    os.fsencode(self.time_index_path)),
                    "create index files", path=INDEX_SUFFIX)
        return True

    def seal(self) -> bool:
        """Final time-index entry, indexes trimmed and written; True when the index files were
        created now (see attach_indexes)."""
        self._use()
        created = self.attach_indexes()
        self._check(lib.plog_segment_seal(self.native), "seal", path=INDEX_SUFFIX)
        return created

    def unseal(self) -> None:
        self._use()
        self._check(lib.plog_segment_unseal(self.native, self.config.segment_index_bytes), "unseal", path=INDEX_SUFFIX)

    def flush(self) -> bool:
        """fsync the three files (index entries written first); True when the index files were
        created now (see attach_indexes)."""
        self._home.failure.check()     # (a log's own calls check it first; the cleaner's too)
        self._use()
        created = self.attach_indexes()
        if self._txn is not None:      # never made: nothing of it to write
            self._txn.flush()
        metrics = self._home.metrics
        started = metrics.fsync_timer()
        self._check(lib.plog_segment_flush(self.native), "flush")
        metrics.fsync_done(started)
        return created

    def offset_index_entries(self) -> list[tuple[int, int]]:
        self._use()
        out = []
        o, p = ffi.new("int64_t *"), ffi.new("int64_t *")
        for i in range(self.native.offset_entries):
            lib.plog_offset_index_entry(self.native, i, o, p)
            out.append((o[0], p[0]))
        return out

    def time_index_entries(self) -> list[tuple[int, int]]:
        self._use()
        out = []
        t, o = ffi.new("int64_t *"), ffi.new("int64_t *")
        for i in range(self.native.time_entries):
            lib.plog_time_index_entry(self.native, i, t, o)
            out.append((t[0], o[0]))
        return out

    def time_index_lookup(self, timestamp: int) -> tuple[int, int]:
        self._use()
        t, o = ffi.new("int64_t *"), ffi.new("int64_t *")
        lib.plog_time_index_lookup(self.native, timestamp, t, o)
        return t[0], o[0]

    def offset_index_lookup(self, offset: int) -> tuple[int, int]:
        self._use()
        o, p = ffi.new("int64_t *"), ffi.new("int64_t *")
        lib.plog_offset_index_lookup(self.native, offset, o, p)
        return o[0], p[0]

    def close(self) -> None:
        if self._state == _CLOSED:
            return
        self._state = _CLOSED
        open_segments.forget(self)
        # A mapping still referenced by a caller's slice stays valid until released.
        self._drop_mapping()
        self._check(lib.plog_segment_close(self.native), "close")

    def reopen_active(self) -> None:
        """Close the files and open them again as the active segment's (an index rebuild)."""
        self._drop_mapping()
        open_segments.forget(self)
        c, self.native, self.address = self.native, None, 0
        self._check(lib.plog_segment_close(c), "close")
        self._open_files(create=False, active=True)

    def change_suffix(self, old: str, new: str) -> None:
        """Rename the files that exist from `<name><old>` to `<name><new>` (Kafka's
        changeFileSuffixes: log, offset index, time index, transaction index, in that order)."""
        if not self._suffix.endswith(old):
            raise ValueError(f"{self.log_path} does not end in {old!r}")
        seam = _io.current()
        suffix = self._suffix[:len(self._suffix) - len(old)] + new
        for path in self.paths():
            if seam.exists(path):
                seam.rename(path, path[:len(path) - len(self._suffix)] + suffix)
        self._suffix = suffix
        if self._txn is not None:
            self._txn.path = self._path(TXN_INDEX_SUFFIX)

    def retire(self) -> list[str]:
        """Close and rename the files to `*.deleted` (gone for every reader of the log from now
        on); returns the renamed paths, for the caller to remove now or later."""
        if not self.closed:
            self.close()
        # No retiring of the read mapping: an unlinked file stays readable through it, so a
        # reader still iterating this segment (retention under a reader) sees its batches,
        # not zeros taken for corruption.
        seam = _io.current()
        renamed = []
        for path in self.paths():
            if seam.exists(path):
                seam.rename(path, path + DELETED_SUFFIX)
                renamed.append(path + DELETED_SUFFIX)
        return renamed

    def delete(self) -> None:
        """Close and remove the files (renamed to .deleted first)."""
        seam = _io.current()
        for path in self.retire():
            if seam.exists(path):
                seam.unlink(path)


class OnDiskSegment(Segment):
    """A sealed segment not opened until something uses it: one a clean shutdown left (Kafka
    opens the indexes of such segments lazily and skips their sanity check, KAFKA-7283), or one
    the open-segment cache closed.  It holds no descriptor, mapping or C state: a partition
    with many sealed segments opens in the time of its active one and keeps a few fields per
    sealed segment.

    Its size is the file's (a stat).  Anything else opens it and checks it as the loader would
    have at the open (loader.check_on_first_use: a damaged index is rebuilt from the batches;
    damaged batch headers raise CorruptSegmentError naming file, position and offset, and the
    segment stays unopened, nothing changed); the object becomes a plain Segment."""

    __slots__ = ()
    first_use_check = None      # loader.check_on_first_use (the loader's decision table)

    @classmethod
    def of(cls, home: SegmentHome, base_offset: int) -> "OnDiskSegment":
        segment = object.__new__(cls)
        cls._fields(segment, home, base_offset, "")
        return segment

    def _open(self) -> None:
        if self.closed:
            raise errors.LogClosedError("segment is closed", file=self.log_path)
        check = self.first_use_check
        self._open_files(create=False, active=False)
        self.__class__ = Segment
        try:
            check(self)
        except BaseException:           # back to unopened, nothing changed
            open_segments.forget(self)
            self._to_on_disk()
            raise

    def _use(self) -> None:
        self._open()                    # (the open marks it recently used)

    @property
    def size(self) -> int:
        return _io.current().file_size(self.log_path)

    @property
    def active(self) -> bool:
        return False

    # What reads the C state without _use() first: opened, then asked again as a Segment.
    def _opened(name, call=False):      # noqa: N805 -- builds the members below
        def get(self, *args, **kwargs):
            self._open()
            member = getattr(self, name)
            return member(*args, **kwargs) if call else member
        return get if call else property(get)

    next_offset = _opened("next_offset")
    max_timestamp = _opened("max_timestamp")
    offset_of_max_timestamp = _opened("offset_of_max_timestamp")
    index_suspect = _opened("index_suspect")
    view = _opened("view", call=True)
    log_pointer = _opened("log_pointer", call=True)
    del _opened

    def attach_indexes(self) -> bool:
        return False            # a sealed segment has its index files

    def flush(self) -> bool:
        return False            # flushed when it was sealed (roll, close, the cleaner's swap)

    def suspend(self) -> bool:
        return True

    def close(self) -> None:
        self._state = _CLOSED

    def __repr__(self) -> str:
        return f"Segment(base_offset={self.base_offset}, not opened)"


class ScanReport:
    """What a segment scan found (see plog_scan in csrc/plog.h)."""

    def __init__(self, scan, epochs):
        self.valid_bytes = scan.valid_bytes
        self.batch_count = scan.batch_count
        self.record_count = scan.record_count
        self.first_offset = scan.first_offset
        self.last_offset = scan.last_offset
        self.max_timestamp = scan.max_timestamp
        self.stop = scan.stop
        self.stop_position = scan.stop_position
        self.stop_offset = scan.stop_offset
        self.epoch_count = scan.epoch_count
        self.epochs = epochs
        self.producer_batch_count = scan.producer_batch_count
        self.stop_reason = errors.error_text(scan.stop) if scan.stop else None

    def __repr__(self) -> str:
        return (f"ScanReport(valid_bytes={self.valid_bytes}, batch_count={self.batch_count}, "
                f"last_offset={self.last_offset}, stop={self.stop_reason!r}, "
                f"stop_position={self.stop_position})")
