"""The read side of a partition, as functions over its `LocalLog` (storage/log/local.py): the
segments holding an offset range, the batches and column windows of a snapshot of them, ListOffsets
by timestamp, and the aborted transactions of a range (Kafka's LocalLog.read,
collectAbortedTransactions, UnifiedLog.fetchOffsetByTimestamp).  `PartitionLog` (storage/log/partition.py)
checks the offsets (log start, high watermark, last stable offset) and passes what it decided."""
from __future__ import annotations

import bisect
from typing import NamedTuple

from ..core import errors
from ..core._native import ffi
from ..core.columns import batch_columns
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
           "TimestampAndOffset", "read", "file_slice", "collect_aborted_transactions", "batches", "segment_columns",
           "offset_for_timestamp"]


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int | None


def read(local, offset: int, max_bytes: int, max_offset: int | None, log_start_offset: int,
         log_end_offset: int) -> memoryview:
    """PartitionLog.read under the caller's hold of local.lock, the isolation's bound already in
    max_offset: empty at the log end offset or at max_offset, OffsetOutOfRangeError outside
    [log_start_offset, log_end_offset], else the batches from the one holding `offset`."""
    if offset == log_end_offset or (max_offset is not None and offset >= max_offset
                                    and log_start_offset <= offset <= log_end_offset):
        return memoryview(b"")
    if offset < log_start_offset or offset > log_end_offset:
        raise errors.OffsetOutOfRangeError(f"offset {offset} outside [{log_start_offset}, {log_end_offset}]",
                                           file=local.path, offset=offset)
    bound = -1 if max_offset is None else max_offset
    segments = local.segments
    i = _bisect_right(local.bases, offset) - 1
    if i < 0:
        i = 0
    while i < len(segments):
        view = segments[i].read(offset, max_bytes, bound)
        if view is not None:
            return view
        i += 1
    return memoryview(b"")


def file_slice(local, view: memoryview):
    """PartitionLog.file_slice under the caller's lock: the FileSlice of `view`, whole batches
    a read returned, or None (empty, or no longer of a segment's current mapping).  The first
    batch's base offset (its first 8 bytes, any magic) names the segment to look in."""
    if len(view) < 8:
        return None
    i = local.segment_index(int.from_bytes(view[:8], "big", signed=True))
    if i < 0:
        return None
    return local.segments[i].file_slice(view, int(ffi.cast("uintptr_t", ffi.from_buffer(view))))


def collect_aborted_transactions(local, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping [start_offset, upper_bound_offset), from the
    transaction indexes of the segment holding start_offset on (under the caller's lock)."""
    out: list[AbortedTxn] = []
    for segment in local.segments[max(local.segment_index(start_offset), 0):]:
        found, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
        out.extend(found)
        if complete:
            break
    return out


def batches(local, start_offset: int | None, log_start_offset):
    """Every batch from start_offset (None: `log_start_offset()`, read under the lock) to the
    log end, zero-copy.

    Safe against a concurrent writer: the segment list is taken under the lock, and each
    segment's view is cut under the lock at its size of that moment; a segment the writer
    deleted meanwhile (retention, truncation) is skipped, and a view the writer truncated
    under keeps the bytes it had (segment.py).  The batches are those of some moment of
    the log, never torn or zeroed ones."""
    for segment, view, position in _segment_views(local, start_offset, log_start_offset):
        yield from iter_batches(view, source=segment.log_path, start_position=position, verify=False)


def segment_columns(local, start_offset: int | None, log_start_offset, window: int, skip_bases):
    """(BatchColumns, view) for the batches from the one holding start_offset to the log end, a
    window of about `window` bytes at a time: the headers of a window's batches from one C call
    (storage.core.columns; CRCs not checked), so that memory stays bounded whatever the segment's
    size; the same snapshot rules as `batches`.  Segments based at skip_bases are passed over."""
    for segment, view, position in _segment_views(local, start_offset, log_start_offset):
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


def _segment_views(local, start_offset: int | None, log_start_offset):
    local.failure_channel.check()
    with local.lock:
        offset = log_start_offset() if start_offset is None else start_offset
        i = max(local.segment_index(offset), 0)
        segments = local.segments[i:]
    for n, segment in enumerate(segments):
        with local.lock:
            local.failure_channel.check()
            if segment.closed:
                continue
            position = segment.find(offset) if n == 0 else 0
            if position < 0:
                continue
            view = segment.view(position)
        yield segment, view, position


def offset_for_timestamp(local, timestamp: int, log_start_offset: int, log_end_offset: int,
                         epoch_cache) -> TimestampAndOffset | None:
    """PartitionLog.offset_for_timestamp under the caller's lock: the special values, or the first
    record with timestamp >= `timestamp` at or above the log start."""
    if timestamp == EARLIEST_TIMESTAMP:
        return TimestampAndOffset(-1, log_start_offset, epoch_cache.epoch_for_offset(log_start_offset))
    if timestamp == LATEST_TIMESTAMP:
        return TimestampAndOffset(-1, log_end_offset, epoch_cache.latest_epoch)
    if timestamp == MAX_TIMESTAMP:
        return _max_timestamp_offset(local, log_start_offset)
    if timestamp < 0:
        raise ValueError(f"invalid timestamp {timestamp}")
    for segment in local.segments:
        if segment.max_timestamp < timestamp:
            continue
        # Kafka's LogSegment.findOffsetByTimestamp: the time index's entry says where to start
        # (its offset is the last of a batch), the search takes any record at or above the log
        # start from that batch on -- an earlier record of the same batch may be the answer (a
        # LogAppendTime batch's first; a CreateTime batch's whose later record is older).
        _, offset = segment.time_index_lookup(timestamp)
        position = segment.find(max(offset, log_start_offset))    # the index hint checked against its batch
        if position < 0:
            continue
        found = _first_record_at_or_after(segment, position, timestamp, log_start_offset)
        if found is not None:
            return found
    return None


def _first_record_at_or_after(segment: Segment, position: int, timestamp: int, min_offset: int):
    for batch in iter_batches(segment.view(position), source=segment.log_path, start_position=position,
                              verify=False):
        if batch.max_timestamp < timestamp or batch.last_offset < min_offset:
            continue
        for record in batch.records():
            if record.timestamp >= timestamp and record.offset >= min_offset:
                epoch = batch.partition_leader_epoch if batch.magic >= 2 else None
                return TimestampAndOffset(record.timestamp, record.offset, epoch)
    return None


def _max_timestamp_offset(local, log_start_offset: int) -> TimestampAndOffset | None:
    """The first record carrying the log's largest timestamp (ListOffsets MAX_TIMESTAMP)."""
    best = None
    for segment in local.segments:
        if segment.size and (best is None or segment.max_timestamp > best.max_timestamp):
            best = segment
    if best is None or best.max_timestamp < 0:
        return None
    position = best.find(max(best.offset_of_max_timestamp, log_start_offset))
    if position < 0:
        return None
    return _first_record_at_or_after(best, position, best.max_timestamp, log_start_offset)
