"""`LocalLog`: one partition's segment files on this disk -- what Kafka's LocalLog owns, in our
words: the segment list (sorted by base offset, the last one active), the lock over it, the
directory and its durability (which files came or went since its last fsync), roll, the two
truncations of the segments, flush and the recovery point it moves, and the pending deletes
(segments renamed `*.deleted`, removed file_delete_delay_ms later).

It knows nothing of epochs, producers, the high watermark or the log start offset: that is
`PartitionLog` (storage/log/partition.py, Kafka's UnifiedLog), which holds one and tells it, as explicit
arguments, the offsets a step needs.  Every method expects the caller to hold `lock` (an RLock).

Invariants (LocalLog.check_invariants):
  - segments are sorted by base offset, do not overlap (gaps allowed), only the last is active;
  - every batch below the recovery point was flushed (fsync'd, or a flush point when fsync
    is disabled) before the recovery point moved past it.
"""
from __future__ import annotations

import bisect
import os
import threading

from ..core import errors
from ..core import io as _io
from ..core.clock import monotonic_ms
from ..core.config import LogConfig
from ..core.failure import LogDirFailureChannel
from ..core.files import CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX, segment_name
from .metrics import LogMetrics
from .segment import Segment, SegmentHome
from .txnindex import AbortedTxn

_bisect_right = bisect.bisect_right


class LocalLog:
    """The segments of the partition directory `path`, and the lock every reader and writer of
    them takes."""

    def __init__(self, path: str, config: LogConfig, failure_channel: LogDirFailureChannel,
                 recovery_report: list):
        self.path = path
        self.config = config
        self.failure_channel = failure_channel
        self.lock = threading.RLock()
        self.closed = False
        self.segments: list[Segment] = []
        self.bases: list[int] = []          # the segments' base offsets, for bisect
        self.dir_dirty = False              # files came or went since the directory's last fsync
        self.parent_dir_dirty = False       # set by LogDir for a partition it created lazily
        self.pending_deletes: list[tuple[int, list[str]]] = []   # (due ms, *.deleted paths)
        self.truncations = 0                # a cleaner round aborts when this moved
        self.recovery_point = 0
        # When the recovery point last moved by a flush (monotonic ms; Kafka's lastFlushedTime,
        # which starts at the open): what flush_ms is measured from (LogDir.flush_dirty_logs).
        self.last_flush_ms = monotonic_ms()
        self.recovery_report = recovery_report   # (base, bytes cut, why) of what the load repaired
        self.metrics = LogMetrics()         # the engine's counters of this log (storage/log/metrics.py)
        self.segment_home = SegmentHome(path, config, self.lock, recovery_report, failure_channel, self.metrics)

    def reconfigure(self, config: LogConfig) -> None:
        """The log's new config, for the segments too (they share `segment_home`)."""
        self.config = config
        self.segment_home.config = config

    # ---- the segment list ----
    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def segment_index(self, offset: int) -> int:
        """The index of the segment whose range holds `offset` (-1 below the first)."""
        return _bisect_right(self.bases, offset) - 1

    def ensure_open(self) -> None:
        if self.closed:
            raise errors.LogClosedError("log is closed", file=self.path)

    def add_segment(self, segment: Segment) -> None:
        """Append a loaded segment (the loader's, in base-offset order)."""
        self.segments.append(segment)
        self.bases.append(segment.base_offset)

    def forget_segments(self, delete: bool = False) -> None:
        """Drop every segment from the list: closed (a refused load) or deleted with its files."""
        for segment in self.segments:
            if delete:
                segment.delete()
            else:
                segment.close()
        self.segments.clear()
        self.bases.clear()

    def new_segment(self, base_offset: int) -> Segment:
        """A new, empty active segment at `base_offset` (leftover files of that name go first)."""
        prefix = os.path.join(self.path, segment_name(base_offset))
        seam = _io.current()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            if seam.exists(prefix + suffix):
                seam.unlink(prefix + suffix)
        segment = Segment(self.segment_home, base_offset, create=True, active=True)
        self.segments.append(segment)
        self.bases.append(base_offset)
        self.dir_dirty = True
        return segment

    def release_segments(self) -> None:
        """Close every segment's files, writing nothing (a failed open, an offline close)."""
        for segment in self.segments:
            try:
                segment.close()
            except OSError:
                pass    # releasing can only fail on a bad descriptor; nothing is written

    def record_completed(self, completed) -> None:
        """Completed transactions ((txn, last stable offset) pairs): the aborted ones go to the
        transaction index of the segment holding their marker."""
        for txn, last_stable in completed:
            if txn.is_aborted:
                segment = self.segments[self.segment_index(txn.last_offset)]
                entry = AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, last_stable)
                if segment.append_aborted(entry):
                    self.dir_dirty = True      # a new file: its name is durable at the next flush

    # ---- roll ----
    def roll(self, base_offset: int, before_new=None) -> Segment:
        """Seal the active segment and start a new one at `base_offset` (the active segment
        itself when it is empty and starts there).  `before_new(old, base_offset)` runs after
        the seal, before the new segment's files exist: the partition flushes what must be
        durable before them (its epochs, the sealed segment, a producer snapshot)."""
        old = self.segments[-1]
        if base_offset < old.next_offset or base_offset < old.base_offset:
            # Kafka's LocalLog.roll refuses too: a new segment may not start inside the last one.
            raise errors.StorageError(f"cannot roll to offset {base_offset}: the active segment "
                                      f"{old.base_offset} already holds offsets up to {old.next_offset - 1}",
                                      file=old.log_path, offset=base_offset)
        if old.size == 0 and old.base_offset == base_offset:
            return old
        # An empty active segment at another base stays, sealed, as Kafka keeps it: it
        # records where the log ended (e.g. after a truncation past its last batch).
        old.seal()
        if before_new is not None:
            before_new(old, base_offset)
        segment = self.new_segment(base_offset)
        self.metrics.rolls += 1
        self.flush_dir()
        self.recovery_point = max(self.recovery_point, base_offset)
        self.last_flush_ms = monotonic_ms()     # Kafka's roll flushes up to the new base (markFlushed)
        return segment

    # ---- truncation ----
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or above `offset`, which lies at or above the first segment's
        base: later segments go, the one holding it is cut, durably.  Returns whether the
        recovery point was lowered (the caller tells the store)."""
        self.truncations += 1
        size_before = self.size_bytes
        # Highest first: any crash in between leaves a prefix of the old log.
        deleted = False
        while len(self.segments) > 1 and self.segments[-1].base_offset > offset:
            self.segments.pop().delete()
            self.bases.pop()
            deleted = True
        if deleted:
            # The deletions must be durable before the cut below can be: otherwise a crash
            # could keep the cut segment and bring a deleted later one back (found by the
            # crash enumeration: truncate, truncate, roll).
            self.flush_dir()
        active = self.segments[-1]
        active.truncate_to(offset)
        if not active.active:
            active.unseal()
        # Stricter than Kafka: the cut is durable at once.  Otherwise a crash that loses the
        # page cache can bring the removed batches back -- divergent ones, of a newer epoch
        # than the data refetched over them -- and they would pass recovery (found by the
        # cluster simulator: unclean recovery then preferred the resurrected epoch).
        if active.flush():
            self.flush_dir()       # its index files were created now
        self._count_truncation(size_before)
        lowered = offset < self.recovery_point
        self.recovery_point = min(self.recovery_point, offset)
        return lowered

    def _count_truncation(self, size_before: int) -> None:
        self.metrics.truncations += 1
        self.metrics.truncated_bytes += max(size_before - self.size_bytes, 0)

    def truncate_fully(self, offset: int) -> bool:
        """Delete every segment and start again, empty, at `offset` (durably).  Returns whether
        the recovery point was lowered."""
        self.truncations += 1
        size_before = self.size_bytes
        while self.segments:
            self.segments.pop().delete()
        self.bases.clear()
        self.new_segment(offset)
        self.flush_dir()           # the old segments must not come back after a crash
        self.flush_dir()
        self._count_truncation(size_before)
        lowered = offset < self.recovery_point
        self.recovery_point = offset
        return lowered

    def remove_leading(self, offset: int) -> None:
        """Delete the leading segments wholly below `offset` (the next one starts at or below it)."""
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self.segments.pop(0).delete()
            self.bases.pop(0)
            self.dir_dirty = True

    # ---- deletion after a delay (retention, the cleaner's swap) ----
    def retire_leading(self, segments: list, now_ms: int) -> None:
        """Take `segments` (the leading ones, in order) out of the log: their files are renamed
        `*.deleted` at once and removed file_delete_delay_ms later (delete_pending_files)."""
        for segment in segments:
            assert self.segments[0] is segment, (segment, self.segments[0])
            self.segments.pop(0)
            self.bases.pop(0)
            self.pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment.retire()))
        self.dir_dirty = True

    def replace_segments(self, cleaned: Segment, old: list, now_ms: int) -> None:
        """Kafka's LocalLog.replaceSegments: `cleaned` (flushed, its files `.cleaned`) takes the
        place of the `old` segments, crash-safe: renamed `.swap` and made durable before anything
        old goes, the old ones retired, then the swap files take their final names."""
        seam = _io.current()
        sync = self.sync_flags
        cleaned.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        seam.fsync_dir(self.path, sync)                 # the swap files exist before anything old goes
        first = self.segments.index(old[0])
        del self.segments[first:first + len(old)]
        del self.bases[first:first + len(old)]
        self.segments.insert(first, cleaned)
        self.bases.insert(first, cleaned.base_offset)
        deleted = []
        for segment in old:
            deleted += segment.retire()
        cleaned.change_suffix(SWAP_SUFFIX, "")
        seam.fsync_dir(self.path, sync)
        self.pending_deletes.append((now_ms + self.config.file_delete_delay_ms, deleted))

    def delete_pending_files(self, now_ms: int) -> int:
        """Remove the `*.deleted` files whose delay is over; returns how many files went."""
        seam = _io.current()
        due = [entry for entry in self.pending_deletes if entry[0] <= now_ms]
        self.pending_deletes = [entry for entry in self.pending_deletes if entry[0] > now_ms]
        removed = 0
        for _when, paths in due:
            for path in paths:
                if seam.exists(path):
                    seam.unlink(path)
                    removed += 1
        return removed

    # ---- durability ----
    @property
    def sync_flags(self) -> int:
        return 0 if self.config.fsync else _io.SYNC_NOOP

    def flush_dir(self) -> None:
        _io.current().fsync_dir(self.path, self.sync_flags)
        self.dir_dirty = False

    def flush_parent_dir(self) -> None:
        """The parent's fsync a partition LogDir created lazily owes (epoch_flush="deferred")."""
        if self.parent_dir_dirty:
            _io.current().fsync_dir(os.path.dirname(self.path), self.sync_flags)
            self.parent_dir_dirty = False

    def flush(self, log_end_offset: int) -> None:
        """fsync every segment with data past the recovery point (a flush point when fsync is
        disabled) and the directory if files came or went; the recovery point becomes
        `log_end_offset`."""
        for segment in self.segments[max(self.segment_index(self.recovery_point), 0):]:    # none below it
            if segment.next_offset > self.recovery_point or segment is self.segments[-1]:
                if segment.flush():
                    self.dir_dirty = True      # its index files were created now
        if self.dir_dirty:
            self.flush_dir()
        self.recovery_point = log_end_offset
        self.last_flush_ms = monotonic_ms()

    def check_invariants(self, log_end_offset: int) -> None:
        """Raise AssertionError unless the segments are in base-offset order without overlap
        (gaps allowed), each one's own invariants hold, and the log end offset is at or above
        the last one's next offset and the recovery point."""
        segments = list(self.segments)
        assert segments, "a log always has an active segment"
        for a, b in zip(segments, segments[1:]):
            assert a.base_offset < b.base_offset and a.next_offset <= b.base_offset, (a, b)
        # At most the last segment's next offset, or above it after a truncation inside a batch
        # (Kafka's truncateTo sets the log end offset to the target; the whole batch went).
        assert segments[-1].next_offset <= log_end_offset, (log_end_offset, segments[-1])
        assert self.recovery_point <= log_end_offset, (self.recovery_point, log_end_offset)
        for segment in segments:
            segment.check_invariants()
