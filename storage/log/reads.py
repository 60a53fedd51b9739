"""The read side of a `PartitionLog` (a mixin of it, over the same segments and lock): fetches
by offset, iteration, ListOffsets by timestamp, and what read_committed readers need -- the last
stable offset and the aborted transactions of a range (Kafka's UnifiedLog.read, fetchOffsetByTimestamp,
lastStableOffset, collectAbortedTransactions)."""
from __future__ import annotations

import bisect
from typing import NamedTuple

from ..core import errors
from ..core.columns import batch_columns
from ..core.failure import guarded
from ..core.records import iter_batches
from .segment import Segment
from .txnindex import AbortedTxn

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

# What a read may return (Kafka's FetchIsolation): everything (a follower), what is below the
# high watermark (a read_uncommitted consumer), what is below the last stable offset (read_committed).
ISOLATIONS = ("log_end", "read_uncommitted", "read_committed")

_bisect_right = bisect.bisect_right

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "ISOLATIONS", "AbortedTxn",
           "TimestampAndOffset", "LogReads"]


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int | None


class LogReads:
    def _segment_index(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    @guarded
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             isolation: str = "log_end") -> memoryview:
        """Whole batches, zero-copy, the first one holding `offset`; at least that batch even
        when it is larger than max_bytes, then more while the total stays within max_bytes
        and (with max_offset) their last offsets stay below max_offset.  Empty at the log end
        offset; OffsetOutOfRangeError outside [log_start_offset, log_end_offset].
        isolation: "log_end" (everything: a follower), "read_uncommitted" (below the high
        watermark) or "read_committed" (below the last stable offset), as Kafka's FetchIsolation."""
        if isolation != "log_end":
            if isolation not in ISOLATIONS:
                raise ValueError(f"isolation must be one of {ISOLATIONS}")
            bound = self.high_watermark if isolation == "read_uncommitted" else self.last_stable_offset
            max_offset = bound if max_offset is None else min(max_offset, bound)
        with self._lock:
            self._ensure_open()
            if offset == self.log_end_offset or (max_offset is not None and offset >= max_offset
                                                 and self.log_start_offset <= offset <= self.log_end_offset):
                return memoryview(b"")
            if offset < self.log_start_offset or offset > self.log_end_offset:
                raise errors.OffsetOutOfRangeError(
                    f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]",
                    file=self.path, offset=offset)
            bound = -1 if max_offset is None else max_offset
            segments = self.segments
            i = _bisect_right(self._bases, offset) - 1
            if i < 0:
                i = 0
            while i < len(segments):
                view = segments[i].read(offset, max_bytes, bound)
                if view is not None:
                    return view
                i += 1
            return memoryview(b"")

    # ---- transactions ----
    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the oldest transaction that is open, or whose marker
        is not yet below the high watermark (at least the log start); else the high watermark."""
        with self._lock:       # update_high_watermark has let go of the transactions it replicated
            first = self.producer_state.first_unstable_offset()
            if first is not None and max(first, self.log_start_offset) < self.high_watermark:
                return max(first, self.log_start_offset)
            return self.high_watermark

    @guarded
    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset), from the
        transaction indexes of the segment holding start_offset on (Kafka's
        collectAbortedTransactions): what a read_committed reader of that range must skip."""
        with self._lock:
            self._ensure_open()
            out: list[AbortedTxn] = []
            for segment in self.segments[max(self._segment_index(start_offset), 0):]:
                found, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
                out.extend(found)
                if complete:
                    break
            return out

    def batches(self, start_offset: int | None = None):
        """Every batch from start_offset (default the log start) to the log end, zero-copy.

        Safe against a concurrent writer: the segment list is taken under the lock, and each
        segment's view is cut under the lock at its size of that moment; a segment the writer
        deleted meanwhile (retention, truncation) is skipped, and a view the writer truncated
        under keeps the bytes it had (segment.py).  The batches are those of some moment of
        the log, never torn or zeroed ones."""
        for segment, view, position in self._segment_views(start_offset):
            yield from iter_batches(view, source=segment.log_path, start_position=position, verify=False)

    def segment_columns(self, start_offset: int | None = None, window: int = 1 << 20, *, skip_bases=()):
        """(BatchColumns, view) for the batches from the one holding start_offset (default the
        log start) to the log end, a window of about `window` bytes at a time: the headers of a
        window's batches from one C call (storage.core.columns; CRCs not checked), so that memory
        stays bounded whatever the segment's size; the same snapshot rules as `batches`.
        Segments whose base offset is in skip_bases are passed over."""
        for segment, view, position in self._segment_views(start_offset):
            if segment.base_offset in skip_bases:
                continue
            start, size = 0, len(view)
            while start < size:
                end = min(size, start + window)
                cols = batch_columns(view[start:end], crc="skip", source=segment.log_path,
                                     start_position=position + start)
                if not len(cols):
                    if end == size or cols.stop != "partial":
                        break       # a partial batch at the segment's end: nothing more to read
                    window *= 2     # one batch larger than the window
                    continue
                yield cols, view[start:end]
                start += cols.end

    def _segment_views(self, start_offset: int | None):
        self.failure_channel.check()
        with self._lock:
            offset = self.log_start_offset if start_offset is None else start_offset
            i = max(self._segment_index(offset), 0)
            segments = self.segments[i:]
        for n, segment in enumerate(segments):
            with self._lock:
                self.failure_channel.check()
                if segment.closed:
                    continue
                position = segment.find(offset) if n == 0 else 0
                if position < 0:
                    continue
                view = segment.view(position)
            yield segment, view, position

    @guarded
    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets: the first record with timestamp >= `timestamp`.  Special values:
        EARLIEST_TIMESTAMP (-2), LATEST_TIMESTAMP (-1), MAX_TIMESTAMP (-3)."""
        with self._lock:
            self._ensure_open()
            if timestamp == EARLIEST_TIMESTAMP:
                return TimestampAndOffset(-1, self.log_start_offset, self.epoch_for_offset(self.log_start_offset))
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(-1, self.log_end_offset, self.latest_epoch)
            if timestamp == MAX_TIMESTAMP:
                return self._max_timestamp_offset()
            if timestamp < 0:
                raise ValueError(f"invalid timestamp {timestamp}")
            for segment in self.segments:
                if segment.max_timestamp < timestamp:
                    continue
                _, offset = segment.time_index_lookup(timestamp)
                offset = max(offset, self.log_start_offset)
                position = segment.find(offset)    # the index hint checked against its batch
                if position < 0:
                    continue
                found = self._first_record_at_or_after(segment, position, timestamp, offset)
                if found is not None:
                    return found
            return None

    def _first_record_at_or_after(self, segment: Segment, position: int, timestamp: int, min_offset: int):
        for batch in iter_batches(segment.view(position), source=segment.log_path, start_position=position,
                                  verify=False):
            if batch.max_timestamp < timestamp or batch.last_offset < min_offset:
                continue
            for record in batch.records():
                if record.timestamp >= timestamp and record.offset >= min_offset:
                    epoch = batch.partition_leader_epoch if batch.magic >= 2 else None
                    return TimestampAndOffset(record.timestamp, record.offset, epoch)
        return None

    def _max_timestamp_offset(self):
        best = None
        for segment in self.segments:
            if segment.size and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None or best.max_timestamp < 0:
            return None
        position = best.find(max(best.offset_of_max_timestamp, self.log_start_offset))
        if position < 0:
            return None
        return self._first_record_at_or_after(best, position, best.max_timestamp, self.log_start_offset)
