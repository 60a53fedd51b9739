"""Kafka's log cleaner, for logs whose cleanup_policy has "compact" (Kafka's LogCleaner and
LogCleanerManager, in our words).

One round (`PartitionLog.compact`, `clean`):
  1. The bounds: the first dirty offset (the cleaner checkpoint's, or the log start) and the
     first uncleanable offset -- the smallest of the last stable offset (never past the high
     watermark), the active segment's base, and the base of the first dirty segment holding a
     timestamp newer than min_compaction_lag_ms.
  2. The offset map: from the first dirty offset, the latest offset of every key (MD5 of the
     key, as Kafka's SkimpyOffsetMap; its capacity is dedupe_buffer_bytes / 24 slots, filled to
     90 %), segment by segment until it is full or reaches the first uncleanable offset.
     Aborted transactions' records are not mapped.  The round cleans up to the map's end.
  3. The segments from the log start to that end, in groups that fit one segment (size, index
     sizes, an int32 of offsets), are each rewritten into one `<base>.log.cleaned` segment:
     a record is kept when it is the latest of its key (or beyond the map); a tombstone (null
     value) is kept until its batch's delete horizon (KIP-534: set to now + delete_retention_ms,
     in the batch's base timestamp with attribute bit 0x40, the first time a clean keeps it);
     keyless records go; aborted transactions' records go, and their ABORT marker once no
     record of the transaction is left and the marker's own horizon passed; a COMMIT marker
     goes once its transaction's records were cleaned.  A batch keeps its base offset, last
     offset (so its producer's last sequence), epoch, producer fields and attributes; an
     emptied batch is dropped, except the last batch of an active producer and the last batch
     before the round's end, whose header stays (no records, Kafka's writeEmptyHeader).
  4. The swap, crash-safe as Kafka's replaceSegments: the cleaned files are flushed, renamed
     `.cleaned` -> `.swap` (dir fsynced), the old segments' files renamed `.deleted`, the swap
     files renamed to their final names, dir fsynced.  A crash anywhere is finished or undone
     by the loader (loader.remove_leftovers): `.cleaned` files and the swap files at or above
     them go (the round is undone), a complete set of swap files replaces whatever segment
     files remain in its range.
Damage (KIP-346): both passes read every batch with its CRC checked; a batch failing its CRC,
size or magic check stops the round before anything of its group is re-encoded or swapped in,
and the log is uncleanable (`CleanerStats.uncleanable`, `LogDir.uncleanable_partitions`, an
error logged) -- skipped by later rounds until a restart or until the damaged segment left the
log.  Re-encoding a damaged record would give it a fresh, valid CRC that readers and `verify`
then accept for ever.
The epoch cache is never rewritten (Kafka's cleaner does not), producer state is kept (the
last batch of every producer stays), and the transaction index of a cleaned segment lists the
aborted transactions whose records are still there.

The round runs beside appends, as Kafka's: the log's lock is taken for the bounds, for a view
of each sealed segment (the view keeps its mapping alive), and for each swap, which happens only
if no truncation ran and every segment of the group is still in the log (else the round is
aborted: Kafka's cleaner manager aborts cleaning before a truncation too).  Deviations: legacy
(magic 0/1) batches are copied as they are.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass, field

from ..core import errors
from ..core import io as _io
from ..core._native import build_listed, ffi, lib
from ..core.codecs import CODEC_NAMES, WRITABLE_CODECS, compress
from ..core.files import CLEANED_SUFFIX, INT32_MAX, SEGMENT_FILE_KINDS, segment_file
from ..core.records import BATCH_OVERHEAD, Record, iter_batches
from .segment import Segment, SegmentHome
from .txnindex import AbortedTxn

BYTES_PER_ENTRY = 24            # Kafka's SkimpyOffsetMap: a 16-byte MD5 and an 8-byte offset
LOAD_FACTOR = 0.9               # log.cleaner.io.buffer.load.factor
DELETE_HORIZON = lib.PLOG_ATTR_DELETE_HORIZON
_log = logging.getLogger(__name__)


class OffsetMap:
    """key -> the latest offset seen for it, keyed by the key's MD5 (Kafka's SkimpyOffsetMap;
    its capacity, not its layout: a Python dict)."""

    def __init__(self, memory_bytes: int):
        self.slots = max(memory_bytes // BYTES_PER_ENTRY, 1)
        self.max_entries = max(int(self.slots * LOAD_FACTOR), 1)
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def put(self, key: bytes, offset: int) -> None:
        self._map[hashlib.md5(key).digest()] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        return self._map.get(hashlib.md5(key).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots


@dataclass
class CleanerStats:
    first_dirty_offset: int = 0
    end_offset: int = 0                  # cleaned up to here: the next round's first dirty offset
    map_records_read: int = 0
    map_entries: int = 0
    buffer_utilization: float = 0.0
    records_read: int = 0
    bytes_read: int = 0
    records_written: int = 0
    bytes_written: int = 0
    groups: list[tuple[int, int]] = field(default_factory=list)    # (new base, segments merged)
    aborted: bool = False                # the log changed under the round: the rest was not swapped
    uncleanable: str | None = None       # damage found: why the partition is not cleaned (KIP-346)


def require_keys(buf, path: str) -> None:
    """A compacted topic takes no record without a key from a client (Kafka's LogValidator:
    "Compacted topic cannot accept message without key", INVALID_RECORD, with a KIP-467 record
    error for each such record of the batch)."""
    try:
        batches = list(iter_batches(buf, verify=False))
    except errors.StorageError:
        return                                  # the append refuses the damage itself
    partition = os.path.basename(str(path))
    for batch in batches:
        keyless = [(i, f"Compacted topic cannot accept message without key in topic partition {partition}")
                   for i, record in enumerate(batch.records()) if record.key is None]
        if keyless:
            raise errors.record_validation(errors.InvalidRecordError, keyless, file=f"{path} (appended data)",
                                           position=batch.position, offset=batch.base_offset)


# ---- bounds (LogCleanerManager) ---------------------------------------------------------------

def first_dirty_offset(log, checkpointed: int | None) -> int:
    """The checkpoint's offset, or the log start when it has none or is out of range."""
    if checkpointed is None or checkpointed < log.log_start_offset or checkpointed > log.log_end_offset:
        return log.log_start_offset
    return checkpointed


def first_uncleanable_offset(log, first_dirty: int, now_ms: int) -> int:
    bounds = [log.last_stable_offset, log.segments[-1].base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in _segments_from(log, first_dirty)[:-1]:
            if segment.max_timestamp > now_ms - lag:
                bounds.append(segment.base_offset)
                break
    return max(first_dirty, min(bounds))


def cleanable_bytes(log, first_dirty: int, uncleanable: int) -> tuple[int, int, int]:
    """(first uncleanable segment base, bytes before the first dirty offset's segment, cleanable
    bytes), as Kafka's LogToClean measures the dirty ratio."""
    later = [s for s in log.segments[:-1] if s.base_offset >= uncleanable]
    stop = later[0].base_offset if later else log.segments[-1].base_offset
    start = min(first_dirty, stop)
    clean = sum(s.size for s in log.segments if s.base_offset < start and _next_base(log, s) <= first_dirty)
    dirty = sum(s.size for s in log.segments if _next_base(log, s) > start and s.base_offset < stop)
    return stop, clean, dirty


def filthiest_first(logs: dict, now_ms: int) -> list:
    """The keys of the logs worth a clean, the dirtiest first (Kafka's grabFilthiestCompactedLog,
    for every log at once): a dirty ratio above min_cleanable_dirty_ratio, or dirty data older
    than max_compaction_lag_ms."""
    ranked = []
    for key, log in logs.items():
        with log.local.lock:
            if log.local.closed or not log.segments or uncleanable_reason(log) is not None:
                continue
            first_dirty = first_dirty_offset(log, log.first_dirty_offset)
            _stop, clean, dirty = cleanable_bytes(log, first_dirty, first_uncleanable_offset(log, first_dirty, now_ms))
            if clean + dirty == 0:
                continue
            ratio = dirty / (clean + dirty)
            overdue = max_compaction_delay(log, first_dirty, now_ms) > 0
            if (overdue and dirty > 0) or ratio > log.config.min_cleanable_dirty_ratio:
                ranked.append((ratio, key))
    return [key for _ratio, key in sorted(ranked, key=lambda item: -item[0])]


def max_compaction_delay(log, first_dirty: int, now_ms: int) -> int:
    """How far the oldest dirty sealed segment's first batch is past max_compaction_lag_ms; a
    first batch that cannot be read counts as overdue (1): the round then finds the damage and
    marks the log uncleanable, where raising here would stop the cleaning of every log."""
    firsts = []
    for segment in _segments_from(log, first_dirty)[:-1]:
        try:
            for batch in iter_batches(segment.view(), verify=False):
                if batch.max_timestamp > 0:
                    firsts.append(batch.max_timestamp)
                break
        except errors.CorruptRecordError:
            return 1
    lag = max(log.config.max_compaction_lag_ms, 0)
    until = now_ms - lag
    earliest = min(firsts, default=None)
    return until - earliest if earliest is not None and earliest < until else 0


def _next_base(log, segment) -> int:
    i = log.segments.index(segment)
    return log.segments[i + 1].base_offset if i + 1 < len(log.segments) else log.log_end_offset


def _segments_from(log, offset: int) -> list:
    """The segments holding offsets >= offset (the one containing it first)."""
    return [s for s in log.segments if _next_base(log, s) > offset]


# ---- transactions (Kafka's CleanedTransactionMetadata) -------------------------------------------

class _Transactions:
    def __init__(self, aborted: list[AbortedTxn]):
        self.pending = sorted(aborted, key=lambda t: t.first_offset)
        self.ongoing_aborted: dict[int, list] = {}     # producer -> [txn, last observed batch offset]
        self.ongoing_committed: set[int] = set()
        self.cleaned_index = None                      # the cleaned segment's TransactionIndex

    def add(self, aborted: list[AbortedTxn]) -> None:
        self.pending = sorted(self.pending + aborted, key=lambda t: t.first_offset)

    def _consume_up_to(self, offset: int) -> None:
        while self.pending and self.pending[0].first_offset <= offset:
            txn = self.pending.pop(0)
            self.ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control_batch(self, batch) -> bool:
        """True when the marker may be discarded (its transaction has no records left)."""
        self._consume_up_to(batch.last_offset)
        records = batch.records()
        if not records:
            return True
        key = records[0].key or b""
        kind = int.from_bytes(key[2:4], "big", signed=True) if len(key) >= 4 else -1
        pid = batch.producer_id
        if kind == 0:                                  # ABORT
            ongoing = self.ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing[1] is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(ongoing[0])
                return False
            return True
        if kind == 1:                                  # COMMIT
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch(self, batch) -> bool:
        """True when the batch belongs to an aborted transaction."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        ongoing = self.ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            ongoing[1] = batch.last_offset
            return True
        self.ongoing_committed.add(batch.producer_id)
        return False


# ---- the offset map ------------------------------------------------------------------------------

def build_offset_map(log, start: int, end: int, offset_map: OffsetMap, stats: CleanerStats) -> None:
    with log.local.lock:
        dirty = [s for s in _segments_from(log, start) if s.base_offset < end]
    txns = _Transactions(log.collect_aborted_transactions(start, end))
    for i, segment in enumerate(dirty):
        next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        if _map_segment(_view(log, segment), segment, offset_map, start, next_start, txns, stats):
            return


def _view(log, segment) -> memoryview:
    """A sealed segment's bytes, taken under the log's lock; the view keeps its mapping alive
    (reading it needs no lock: a sealed segment changes only by truncation or deletion, and
    then the round is not swapped in)."""
    with log.local.lock:
        log.local.ensure_open()
        return segment.view()


def _checked_batches(view, segment):
    """The batches of a sealed segment, each CRC checked; a size field that runs past the end
    (iter_batches' partial tail: what a crash leaves in an active segment, never in a sealed
    one) is damage too, or the rest of the segment would be dropped without a word."""
    end = 0
    for batch in iter_batches(view, source=segment.log_path):
        end = batch.position + batch.size_bytes
        yield batch
    if end < len(view):
        raise errors.CorruptRecordError(f"{len(view) - end} bytes after the last whole batch of a sealed segment "
                                        "(a size field past its end)", file=segment.log_path, position=end)


def _map_segment(view, segment, offset_map: OffsetMap, start: int, next_start: int, txns, stats) -> bool:
    """Map one segment's keys; True when the map filled up before its end."""
    for batch in _checked_batches(view, segment):
        if batch.base_offset >= next_start:
            break
        if batch.is_control:
            txns.on_control_batch(batch)
        elif not txns.on_batch(batch) and batch.last_offset >= start:
            for record in batch.records():
                if record.key is not None and record.offset >= start:
                    if len(offset_map) >= offset_map.max_entries:
                        return True
                    offset_map.put(record.key, record.offset)
                stats.map_records_read += 1
        if batch.last_offset >= start:
            offset_map.update_latest_offset(batch.last_offset)
    offset_map.update_latest_offset(next_start - 1)
    return False


# ---- one round -----------------------------------------------------------------------------------

def compact(log, now_ms: int, offset_map: OffsetMap | None = None) -> CleanerStats:
    """One round from the log's first dirty offset.  The log's lock is taken only for the
    bounds, to take views of sealed segments and for each swap: appends go on meanwhile."""
    with log.local.lock:
        log.local.ensure_open()
        first_dirty = first_dirty_offset(log, log.first_dirty_offset)
        uncleanable = first_uncleanable_offset(log, first_dirty, now_ms)
        damage = uncleanable_reason(log)
    if damage is not None:
        return CleanerStats(first_dirty_offset=first_dirty, end_offset=first_dirty, aborted=True, uncleanable=damage)
    stats = clean(log, first_dirty, uncleanable, now_ms, offset_map)
    if not stats.aborted:
        with log.local.lock:
            log.first_dirty_offset = stats.end_offset
    return stats


def clean(log, first_dirty: int, first_uncleanable: int, now_ms: int, offset_map: OffsetMap | None = None
          ) -> CleanerStats:
    """Clean the log up to what the offset map covers.  A truncation, or a segment of the round
    deleted (retention, DeleteRecords) or the log closed while it ran, aborts what is left of
    the round: `stats.aborted`, nothing more swapped in, the cleaned files removed."""
    offset_map = OffsetMap(log.config.dedupe_buffer_bytes) if offset_map is None else offset_map
    stats = CleanerStats(first_dirty_offset=first_dirty)
    with log.local.lock:
        truncations = log.local.truncations
        last_of_producers = _last_batches_of_producers(log)
    try:
        build_offset_map(log, first_dirty, first_uncleanable, offset_map, stats)
    except errors.LogClosedError:
        stats.aborted = True
        return stats
    except errors.CorruptRecordError as e:
        return _mark_uncleanable(log, stats, e)
    end = offset_map.latest_offset + 1
    stats.end_offset = max(end, first_dirty)
    stats.map_entries = len(offset_map)
    stats.buffer_utilization = offset_map.utilization
    txns = _Transactions([])
    with log.local.lock:
        groups = group_segments(log, [s for s in log.segments if s.base_offset < end], first_uncleanable)
        uppers = [_next_base(log, g[-1]) for g in groups]
    for group, upper in zip(groups, uppers):
        try:
            swapped = _clean_group(log, group, upper, offset_map, now_ms, stats, txns, last_of_producers,
                                   first_uncleanable, truncations)
        except errors.CorruptRecordError as e:     # the group's cleaned files are gone, its segments untouched
            return _mark_uncleanable(log, stats, e)
        if not swapped:
            stats.aborted = True
            break
    return stats


# ---- damage (KIP-346: uncleanable partitions) -----------------------------------------------------

def _mark_uncleanable(log, stats: CleanerStats, error: errors.CorruptRecordError) -> CleanerStats:
    """A batch failed its CRC, size or magic check in either pass: the round stops before that
    batch is re-encoded (a rewrite would give damaged records a fresh, valid CRC), nothing of the
    damaged group is swapped in, the first dirty offset stays, and later rounds skip the log
    while the damaged segment is in it (Kafka's LogCleanerManager.markPartitionUncleanable; a
    restart, or retention or a truncation removing the segment, clears it)."""
    reason = f"uncleanable: {error}"
    with log.local.lock:
        damaged = next((s for s in log.segments if s.log_path == error.file), None)
        log.uncleanable = (damaged, reason)
    _log.warning("log cleaner: marked %s uncleanable, skipped until segment %s leaves the log: %s", log.path,
                 damaged.log_path if damaged is not None else error.file, error)
    stats.aborted = True
    stats.uncleanable = reason
    return stats


def uncleanable_reason(log) -> str | None:
    """Why the log is uncleanable, or None: it is while the damaged segment is still in the log
    (call under the log's lock)."""
    marked = getattr(log, "uncleanable", None)
    if marked is None:
        return None
    segment, reason = marked
    if segment is not None and segment not in log.segments:
        log.uncleanable = None                    # the damage is gone (retention, truncation)
        return None
    return reason


def _last_batches_of_producers(log) -> dict[int, tuple[int | None, int]]:
    """producer -> (its last data batch's last offset or None, its epoch) (Kafka's
    lastRecordsOfActiveProducers)."""
    out = {}
    for pid, entry in log.producer_state.active_producers.items():
        out[pid] = (entry.batch_metadata[-1].last_offset if entry.batch_metadata else None, entry.producer_epoch)
    return out


def group_segments(log, segments: list, first_uncleanable: int) -> list[list]:
    """Kafka's groupSegmentsBySize: consecutive segments whose sizes (log, and each index at
    its full entry count) fit one segment and whose offsets fit an int32 past the group's base.
    Each segment a group adds counts one index entry more than it holds: its first batch, the
    first of its own segment (no entry), follows other batches in the cleaned one and may get
    an entry -- so an index too small for an entry (segment.index.bytes under 12, a segment per
    batch) is cleaned segment by segment, where a merge would find its index full."""
    max_size, max_index = log.config.segment_bytes, log.config.segment_index_bytes
    groups, rest = [], list(segments)
    while rest:
        group = [rest.pop(0)]
        size, index, time_index = group[0].size, _index_bytes(group[0], 8), _index_bytes(group[0], 12)
        while rest:
            s = rest[0]
            last = rest[1].base_offset - 1 if len(rest) > 1 else first_uncleanable - 1
            if not (size + s.size <= max_size and index + _index_bytes(s, 8) + 8 <= max_index
                    and time_index + _index_bytes(s, 12) + 12 <= max_index
                    and (s.size == 0 or last - group[0].base_offset <= INT32_MAX)):
                break
            group.append(rest.pop(0))
            size += s.size
            index += _index_bytes(s, 8)
            time_index += _index_bytes(s, 12)
        groups.append(group)
    return groups


def _index_bytes(segment, entry: int) -> int:
    return len(segment.offset_index_entries() if entry == 8 else segment.time_index_entries()) * entry


def _clean_group(log, group: list, group_end: int, offset_map: OffsetMap, now_ms: int, stats: CleanerStats, txns,
                 last_of_producers: dict, upper_bound: int, truncations: int) -> bool:
    """Write one group's cleaned segment (its own lock, not the log's), then swap it in under
    the log's lock if the group is still what the round read; False when it was not."""
    seam = _io.current()
    base = group[0].base_offset
    own = threading.RLock()             # held while writing: the open-segment cache skips it
    with own:
        cleaned = _new_cleaned_segment(log, seam, base, own)
        try:
            _write_group(log, group, group_end, cleaned, offset_map, now_ms, stats, txns, last_of_producers,
                         upper_bound)
        except BaseException:
            _discard(cleaned, seam)
            raise
    with log.local.lock:
        if log.local.closed or log.local.truncations != truncations or any(s not in log.segments for s in group):
            _discard(cleaned, seam)
            return False
        cleaned.rehome(log.local.segment_home)
        replace_segments(log, cleaned, group, now_ms)
    stats.groups.append((base, len(group)))
    return True


def _discard(cleaned: Segment, seam) -> None:
    cleaned.close()
    for path in cleaned.paths():
        if seam.exists(path):
            seam.unlink(path)


def _write_group(log, group: list, group_end: int, cleaned: Segment, offset_map: OffsetMap, now_ms: int,
                 stats: CleanerStats, txns, last_of_producers: dict, upper_bound: int) -> None:
    txns.cleaned_index = cleaned.txn_index
    v = ffi.new("plog_validate *")
    flags = lib.PLOG_VALIDATE_REQUIRE_FIRST | lib.PLOG_APPEND_NO_ROLL
    v.segment_bytes = log.config.segment_bytes
    v.segment_ms = log.config.segment_ms
    next_offset = group[0].base_offset
    for i, segment in enumerate(group):
        upper = group[i + 1].base_offset if i + 1 < len(group) else group_end
        txns.add(log.collect_aborted_transactions(segment.base_offset, upper))
        for batch in _checked_batches(_view(log, segment), segment):
            stats.bytes_read += batch.size_bytes
            out = _filter_batch(batch, offset_map, now_ms, log.config.delete_retention_ms, txns,
                                last_of_producers, upper_bound, stats)
            if out is None:
                continue
            buf = bytearray(out)
            with ffi.from_buffer(buf) as pointer:
                cleaned.raise_for(cleaned.append_chunk(pointer, len(buf), next_offset, -1, flags, now_ms, v),
                                  "append (cleaner)")
            next_offset = batch.last_offset + 1
            stats.bytes_written += len(buf)
    cleaned.seal()
    cleaned.flush()


def _new_cleaned_segment(log, seam, base: int, owner_lock) -> Segment:
    for suffix in SEGMENT_FILE_KINDS:
        stale = segment_file(log.path, base, suffix + CLEANED_SUFFIX)
        if seam.exists(stale):                  # an earlier round that failed before its swap
            seam.unlink(stale)
    home = SegmentHome(log.path, log.config, owner_lock, failure=log.failure_channel, metrics=log.local.metrics)
    return Segment(home, base, create=True, active=True, suffix=CLEANED_SUFFIX)


# ---- one batch (Kafka's RecordFilter over MemoryRecords.filterTo) ----------------------------------

def _filter_batch(batch, offset_map: OffsetMap, now_ms: int, delete_retention_ms: int, txns,
                  last_of_producers: dict, upper_bound: int, stats: CleanerStats) -> bytes | None:
    """The bytes to write for one batch, or None to drop it."""
    if batch.magic < 2:
        return batch.to_bytes()                 # legacy batches: copied (see the module's note)
    horizon = batch.base_timestamp if batch.attributes & DELETE_HORIZON else None
    discard = txns.on_control_batch(batch) if batch.is_control else txns.on_batch(batch)
    if batch.is_control:
        discard_records = discard and horizon is not None and horizon <= now_ms
    else:
        discard_records = discard
    last = last_of_producers.get(batch.producer_id) if batch.producer_id >= 0 else None
    is_last_of_producer = last is not None and (
        batch.last_offset == last[0] if last[0] is not None else batch.is_control and batch.producer_epoch == last[1])
    retain_empty = is_last_of_producer or batch.next_offset == upper_bound
    if discard_records and not retain_empty:
        return None
    records = batch.records()
    stats.records_read += len(records)
    kept = [] if discard_records else [r for r in records if batch.is_control or _retain(
        r, offset_map, horizon, now_ms)]
    if not kept:
        return _empty_header(batch) if retain_empty else None
    stats.records_written += len(kept)
    tombstones = any(r.value is None for r in kept)
    set_horizon = (tombstones or (discard and batch.is_control)) and horizon is None
    if len(kept) == len(records) and not set_horizon:
        return batch.to_bytes()
    return _rebuild(batch, kept, now_ms + delete_retention_ms if set_horizon else horizon)


def _retain(record, offset_map: OffsetMap, horizon: int | None, now_ms: int) -> bool:
    if record.offset > offset_map.latest_offset:
        return True
    if record.key is None:
        return False                            # Kafka counts it as invalid and drops it
    if record.offset < offset_map.get(record.key):
        return False
    return record.value is not None or horizon is None or now_ms < horizon


_HEADER_FIELDS = ("base_offset", "partition_leader_epoch", "attributes", "last_offset_delta", "base_timestamp",
                  "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count")


def _finish(body: bytes, **fields) -> bytes:
    out = bytearray(BATCH_OVERHEAD) + body
    info = ffi.new("plog_batch_info *")
    for name in _HEADER_FIELDS:
        setattr(info, name, fields[name])
    with ffi.from_buffer(out) as pointer:
        rc = lib.plog_batch_finish(pointer, len(out), info)
    if rc:
        raise errors.StorageError(f"cannot write a cleaned batch: rc {rc}", offset=fields["base_offset"])
    return bytes(out)


def _empty_header(batch) -> bytes:
    """Kafka's writeEmptyHeader: no records, no compression, the batch's offsets and producer."""
    attributes = batch.attributes & (lib.PLOG_ATTR_LOG_APPEND_TIME | lib.PLOG_ATTR_TRANSACTIONAL | lib.PLOG_ATTR_CONTROL)
    return _finish(b"", base_offset=batch.base_offset, partition_leader_epoch=batch.partition_leader_epoch,
                   attributes=attributes, last_offset_delta=batch.last_offset - batch.base_offset,
                   base_timestamp=-1, max_timestamp=batch.max_timestamp, producer_id=batch.producer_id,
                   producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence, record_count=0)


def _rebuild(batch, kept: list, horizon: int | None) -> bytes:
    """Kafka's buildRetainedRecordsInto: the kept records in a batch with the original's base
    offset, last offset, producer fields and codec; the delete horizon, when there is one, is
    the base timestamp.  The records keep their own offsets and timestamps; the section is
    encoded by the same C walk as build_batch (csrc/pyrecords.c), never by a second encoder."""
    log_append_time = bool(batch.attributes & lib.PLOG_ATTR_LOG_APPEND_TIME)
    base_ts = horizon if horizon is not None else kept[0].timestamp
    built = build_listed(kept, False, batch.base_offset, batch.partition_leader_epoch, 0, base_ts, 0, -1, -1, -1,
                         Record, batch.base_offset)
    if built.__class__ is not tuple:        # decoded Records always walk: a code is the core's refusal
        raise errors.StorageError(f"cannot write a cleaned batch: {errors.error_text(built or lib.PLOG_EARG)}",
                                  offset=batch.base_offset)
    max_ts = batch.max_timestamp if log_append_time else built[2]
    body = memoryview(built[0])[BATCH_OVERHEAD:]
    codec = CODEC_NAMES[batch.attributes & 7]
    if codec not in WRITABLE_CODECS:
        codec = "none"
    body = compress(codec, body) if codec != "none" else body
    attributes = (batch.attributes & ~7 & ~DELETE_HORIZON) | (CODEC_NAMES.index(codec)) | (
        DELETE_HORIZON if horizon is not None else 0)
    return _finish(bytes(body), base_offset=batch.base_offset, partition_leader_epoch=batch.partition_leader_epoch,
                   attributes=attributes, last_offset_delta=batch.last_offset - batch.base_offset,
                   base_timestamp=base_ts, max_timestamp=max_ts, producer_id=batch.producer_id,
                   producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence, record_count=len(kept))


# ---- the swap (LocalLog.replaceSegments) ---------------------------------------------------------

def replace_segments(log, cleaned: Segment, old: list, now_ms: int) -> None:
    """Make `cleaned` (flushed, its files `.cleaned`) replace the `old` segments in the
    directory and in the log, crash-safe (see the module's step 4)."""
    log.local.replace_segments(cleaned, old, now_ms)
    for segment in old[1:]:                        # Kafka's deleteProducerSnapshots(deletedNotReplaced)
        log.producer_state.delete_snapshot(segment.base_offset)
