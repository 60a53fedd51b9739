"""Retention: which segments of a `PartitionLog` go, and how (Kafka's UnifiedLog.deleteOldSegments,
LocalLog.deletableSegments, in our words).  Called by `PartitionLog.delete_old_segments` under
the log's lock.

Three passes, each over the segments that are left, oldest first, stopping at the first that
stays:
  1. a segment goes when the next one starts at or below the log start offset (always);
  2. with "delete" in cleanup_policy and retention_bytes >= 0: the oldest segments while the
     log is larger than retention_bytes by at least their size;
  3. with "delete" and retention_ms >= 0: segments whose largest timestamp (the file's
     modification time when no batch carries one) is more than retention_ms old.
Never a segment whose end (the next segment's base, or the log end for the active one)
lies above the high watermark, never an empty active segment.  When every segment goes, the
log rolls first, so that an empty active segment is left at the log end.  The log start offset
moves to the first segment left; the epoch cache and the producer state move with it, and the
producer snapshots of the deleted segments go.

A deleted segment's files are renamed `*.deleted` at once (the segment is gone from every read
from then on) and removed file_delete_delay_ms later by `delete_pending_files` (Kafka's
asynchronous delete).  A crash in between leaves `*.deleted` files, which the next load removes;
nothing of them is visible.
"""
from __future__ import annotations

from ..core import io as _io


def _largest_timestamp(segment) -> int:
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return _io.current().mtime_ms(segment.log_path)


def _deletable(log, predicate) -> list:
    """Kafka's deletableSegments: the leading run of segments the predicate and the high
    watermark allow; an empty active segment never counts."""
    out = []
    segments = log.segments
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        upper = following.base_offset if following is not None else log.log_end_offset
        if following is None and segment.size == 0:
            break
        if log.high_watermark < upper or not predicate(segment, following):
            break
        out.append(segment)
    return out


def _breached_log_start(log):
    return lambda segment, following: following is not None and following.base_offset <= log.log_start_offset


def _breached_size(log):
    config = log.config
    if config.retention_bytes < 0 or log.size_bytes < config.retention_bytes:
        return None
    excess = [log.size_bytes - config.retention_bytes]

    def predicate(segment, _following) -> bool:
        if excess[0] - segment.size >= 0:
            excess[0] -= segment.size
            return True
        return False
    return predicate


def _breached_time(log, now_ms: int):
    if log.config.retention_ms < 0:
        return None
    return lambda segment, _following: now_ms - _largest_timestamp(segment) > log.config.retention_ms


def delete_old_segments(log, now_ms: int) -> int:
    """The three passes; returns how many segments went.  Each pass is judged on what the
    one before left."""
    passes = [lambda: _breached_log_start(log)]
    if log.config.deletes:
        passes += [lambda: _breached_size(log), lambda: _breached_time(log, now_ms)]
    total = 0
    for make in passes:
        predicate = make()
        if predicate is None:
            continue
        deletable = _deletable(log, predicate)
        if deletable:
            total += _delete_segments(log, deletable, now_ms)
    return total


def _delete_segments(log, deletable: list, now_ms: int) -> int:
    count = len(deletable)
    if count == len(log.segments):
        # At least one segment always stays: roll to an empty one at the log end first.
        fresh = log._roll_to(log.log_end_offset)
        if deletable[-1] is fresh:
            deletable = deletable[:-1]
    for segment in deletable:
        assert log.segments[0] is segment, (segment, log.segments[0])
        log.segments.pop(0)
        log._bases.pop(0)
        log._pending_deletes.append((now_ms + log.config.file_delete_delay_ms, segment.retire()))
    log._dir_dirty = True
    log._flush_dir()                 # the renames are durable before the log start moves on
    log._advance_log_start(log.segments[0].base_offset)
    delete_pending_files(log, now_ms)
    return count


def delete_pending_files(log, now_ms: int) -> int:
    """Remove the `*.deleted` files whose delay is over; returns how many files went."""
    seam = _io.current()
    due = [entry for entry in log._pending_deletes if entry[0] <= now_ms]
    log._pending_deletes = [entry for entry in log._pending_deletes if entry[0] > now_ms]
    removed = 0
    for _when, paths in due:
        for path in paths:
            if seam.exists(path):
                seam.unlink(path)
                removed += 1
    return removed
