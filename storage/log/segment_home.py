"""What the segments of a process and of a log share (used by storage/log/segment.py).

`open_segments`: the process's cache of segments holding descriptors, least recently used
first (RocksDB's max_open_files); `SegmentHome`: one log's directory, config, lock, recovery
report and read scratch, which its segments point at instead of holding each; `Mapping`: the
read-only mapping of a `.log` its reads slice, and `retired_mappings`, those let go of that a
reader may still hold.
"""
from __future__ import annotations

import collections
import resource
import threading
import weakref

from ..core import errors
from ..core import io as _io
from ..core._native import ffi, lib
from ..core.failure import LogDirFailureChannel
from ..core.records import forget_source, register_source
from .metrics import LogMetrics


def _default_open_segments_max() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, soft // 4)      # 3 descriptors a segment: about 3/4 of the limit at most


class _OpenSegments:
    """The segments of this process that hold descriptors, least recently used first.

    Like RocksDB's max_open_files: the number of open files does not grow with the number of
    segments.  When more than `limit` segments are open, the least recently used one is
    suspended (plog_segment_suspend: its three descriptors closed, a mapped index and the read
    mapping dropped, everything else kept in memory) and resumed on its next use.  A segment is
    only suspended under its log's lock, taken without blocking (a segment another thread is
    using is skipped), so no call ever finds its segment's files closed under it."""

    def __init__(self):
        self.limit = _default_open_segments_max()
        self._lru: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self.last = None

    def __len__(self) -> int:
        return len(self._lru)

    def touch(self, segment) -> None:
        if self.last is segment:         # the common case of a run of reads: nothing to move
            return
        with self._lock:
            self.last = segment
            lru = self._lru
            if segment in lru:
                lru.move_to_end(segment)
                return
            lru[segment] = None
            if len(lru) > self.limit:
                self._evict(len(lru) - self.limit, segment)

    def _evict(self, count: int, keep) -> None:
        for victim in list(self._lru):
            if count <= 0:
                return
            if victim is keep:
                continue
            lock = victim.owner_lock
            if lock is not None and not lock.acquire(blocking=False):
                continue
            try:
                closed = victim.suspend()
            finally:
                if lock is not None:
                    lock.release()
            if not closed:       # its flush failed: it stays open, its dir offline
                continue
            del self._lru[victim]
            if self.last is victim:
                self.last = None
            count -= 1

    def forget(self, segment) -> None:
        with self._lock:
            self._lru.pop(segment, None)
            if self.last is segment:
                self.last = None


open_segments = _OpenSegments()


def set_open_segments_max(limit: int) -> None:
    """How many segments of this process may hold descriptors at once (default: a quarter of
    the soft RLIMIT_NOFILE, at least 16)."""
    if limit < 16:
        raise ValueError("the open-segment limit must be at least 16")
    open_segments.limit = limit


class SegmentHome:
    """What the segments of one log share: directory, config, the log's lock (the open-segment
    cache takes it, without blocking, before it closes a segment), the log's recovery report (a
    first use's repair goes there), the find/read out-arguments (the lock serialises them), the
    log dir's failure channel and the count of cuts of its files."""

    __slots__ = ("directory", "config", "lock", "report", "reads", "failure", "metrics", "cuts")

    def __init__(self, directory: str, config, lock=None, report: list | None = None, failure=None, metrics=None):
        self.directory = directory
        self.metrics = metrics if metrics is not None else LogMetrics()   # the log's counters (its fsyncs)
        self.config = config
        self.lock = lock
        self.report = report
        # The log dir's failure channel: a flush the open-segment cache makes fails it.
        self.failure = failure if failure is not None else LogDirFailureChannel(directory)
        self.reads = None           # read_scratch(), made on the first find or read
        # Cuts of the log's .log files (truncation, recovery): a FileSlice made before one may
        # no longer find its bytes in its file (file_slice.py).
        self.cuts = 0

    def read_scratch(self) -> tuple:
        """(position, batch info, (position, bytes) of plog_segment_read, an int64 view of
        that pair): the out-arguments of find and read."""
        span = ffi.new("int64_t[2]")
        self.reads = (ffi.new("int64_t *"), ffi.new("plog_batch_info *"), span, memoryview(ffi.buffer(span)).cast("q"))
        return self.reads


class Mapping:
    """A read-only mapping of a .log file; unmapped by cffi when nothing references it."""

    __slots__ = ("pointer", "length", "view")

    def __init__(self, fd: int, length: int, file: str | None = None):
        out = ffi.new("uint8_t **")
        rc = lib.plog_io_mmap(fd, length, 0, out)
        if rc:
            raise errors.StorageIOError(f"mmap failed: {errors.error_text(rc)}", errno=rc if rc > 0 else None)
        pointer = out[0]
        seam = _io.current()  # unmap through the seam the mapping came from

        # What it calls is bound now: at interpreter exit the module's globals may already be
        # gone when the last mappings are released.
        def release(p, length=length, seam=seam, cast=ffi.cast, forget=forget_source, current=_io.current,
                    munmap=lib.plog_io_munmap):
            forget(int(cast("uintptr_t", p)))
            if seam is current():
                munmap(p, length)
            else:
                seam.munmap(int(cast("uintptr_t", p)), length)

        self.pointer = ffi.gc(pointer, release, size=length) if length else pointer
        self.length = length
        # Read-only, as the mapping is (PROT_READ): a caller writing into a view it was given
        # gets a TypeError, not a SIGSEGV.
        self.view = memoryview(ffi.buffer(self.pointer, length)).toreadonly() if length else memoryview(b"")
        if length and file is not None:
            register_source(int(ffi.cast("uintptr_t", pointer)), length, file)

    def retire_from(self, position: int) -> None:
        """Zero-page everything from `position` on (nothing valid lies there)."""
        if self.length and position < self.length:
            lib.plog_io_mmap_retire(self.pointer + position, self.length - position)


class _RetiredMappings:
    """Read mappings of a .log that its segment let go of (suspended, closed, cut, replaced by
    a larger one) while a reader may still hold views of them: a view keeps its mapping mapped.
    Before a .log shrinks, the pages of each past the cut become private copies, as the current
    mapping's do; otherwise such a view reads zeros where its batches were, or raises SIGBUS
    once a whole page of it lies past the file's end.  An entry goes with its mapping (a weak
    reference to the mapped pointer), so only mappings a reader still holds are listed."""

    def __init__(self):
        self._by_path: dict[str, list] = {}
        self._lock = threading.RLock()      # a callback may run while it is held (a GC pass)

    def add(self, path: str, pointer, length: int, valid: int) -> None:
        """`pointer` maps `length` bytes of `path`; views of it may reach `valid` bytes."""
        def gone(ref, path=path):
            with self._lock:
                entries = self._by_path.get(path)
                if entries is not None:
                    entries[:] = [e for e in entries if e[0] is not ref]
                    if not entries:
                        del self._by_path[path]
        with self._lock:
            self._by_path.setdefault(path, []).append((weakref.ref(pointer, gone), length, valid))

    def snapshot(self, path: str, position: int) -> None:
        """`path` is about to shrink to `position`: every listed mapping of it keeps its bytes."""
        with self._lock:
            entries = list(self._by_path.get(path, ()))
        for ref, length, valid in entries:
            pointer = ref()
            if pointer is not None and position < length:
                rc = lib.plog_io_mmap_snapshot(pointer, valid, position, length)
                if rc:
                    raise errors.StorageIOError(f"cannot keep readers' pages: {errors.error_text(rc)}",
                                                errno=rc if rc > 0 else None, file=path, position=position)


retired_mappings = _RetiredMappings()
