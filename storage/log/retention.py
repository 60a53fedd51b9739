"""Retention: which segments of a `PartitionLog` go, and how (Kafka's UnifiedLog.deleteOldSegments,
LocalLog.deletableSegments, in our words).  Called by `PartitionLog.delete_old_segments` under
the log's lock, with its LocalLog, config and offsets as arguments.

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
from then on) and removed file_delete_delay_ms later by `LocalLog.delete_pending_files` (Kafka's
asynchronous delete).  A crash in between leaves `*.deleted` files, which the next load removes;
nothing of them is visible.
"""
from __future__ import annotations

from ..core import io as _io


def _largest_timestamp(segment) -> int:
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return _io.current().mtime_ms(segment.log_path)


def _deletable(local, high_watermark: int, log_end_offset: int, predicate) -> list:
    """Kafka's deletableSegments: the leading run of segments the predicate and the high
    watermark allow; an empty active segment never counts."""
    out = []
    segments = local.segments
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        upper = following.base_offset if following is not None else log_end_offset
        if following is None and segment.size == 0:
            break
        if high_watermark < upper or not predicate(segment, following):
            break
        out.append(segment)
    return out


def _breached_log_start(log_start_offset: int):
    return lambda segment, following: following is not None and following.base_offset <= log_start_offset


def _breached_size(local, config):
    size = local.size_bytes
    if config.retention_bytes < 0 or size < config.retention_bytes:
        return None
    excess = [size - config.retention_bytes]

    def predicate(segment, _following) -> bool:
        if excess[0] - segment.size >= 0:
            excess[0] -= segment.size
            return True
        return False
    return predicate


def _breached_time(config, now_ms: int):
    if config.retention_ms < 0:
        return None
    return lambda segment, _following: now_ms - _largest_timestamp(segment) > config.retention_ms


def delete_old_segments(local, config, now_ms: int, *, high_watermark: int, log_start_offset: int,
                        log_end_offset: int, roll, advance_log_start) -> int:
    """The three passes over `local`'s segments; returns how many segments went.  Each pass is
    judged on what the one before left.  roll(offset) rolls the log (when every segment goes);
    advance_log_start(offset) moves the log start to the first segment left."""
    passes = [lambda: _breached_log_start(log_start_offset)]
    if config.deletes:
        passes += [lambda: _breached_size(local, config), lambda: _breached_time(config, now_ms)]
    total = 0
    for make in passes:
        predicate = make()
        if predicate is None:
            continue
        deletable = _deletable(local, high_watermark, log_end_offset, predicate)
        if deletable:
            count = len(deletable)
            if count == len(local.segments):
                # At least one segment always stays: roll to an empty one at the log end first.
                fresh = roll(log_end_offset)
                if deletable[-1] is fresh:
                    deletable = deletable[:-1]
            local.retire_leading(deletable, now_ms)
            local.flush_dir()                 # the renames are durable before the log start moves on
            advance_log_start(local.segments[0].base_offset)
            local.delete_pending_files(now_ms)
            total += count
    return total
