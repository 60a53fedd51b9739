"""Scanning one partition read-only: batches, indexes, epochs, problems (what `verify` reports)."""
from __future__ import annotations

import os
import struct
from array import array
from typing import NamedTuple

from ..core import errors
from ..core.files import TXN_INDEX_SUFFIX, segment_file
from ..log.epoch import CHECKPOINT_FILE
from ..log.loader import scan_log_file
from .compacted import partition_is_compacted
from .discovery import (
    _LEFTOVER_SUFFIXES,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    Issue,
    LogFile,
    log_dir_offsets,
    partition_dirs,
    read_epoch_checkpoint,
    segment_base,
)
from .lineage import _entries, lineage_agreement
from .progress import _plural, _progress

_OFFSET_ENTRY, _TIME_ENTRY = struct.Struct(">ii"), struct.Struct(">qi")




class BatchRow(NamedTuple):
    position: int
    base_offset: int
    last_offset: int
    epoch: int
    magic: int
    crc: int
    valid: bool
    size: int
    max_timestamp: int


class SegmentScan:
    """What one pass over a segment found.  Memory stays small for huge segments: per batch only
    its position and base offset (two int64 arrays); full rows only for the batches an index
    entry names (or for every batch with keep_rows, which the replica comparison needs)."""

    def __init__(self, base_offset: int, path: str):
        self.base_offset = base_offset
        self.path = path
        self.size = 0
        self.valid_bytes = 0
        self.batch_count = 0
        self.first_offset: int | None = None
        self.last_offset: int | None = None
        self.crc_failures = 0
        self.positions = array("q")
        self.base_offsets = array("q")
        self.rows: list[BatchRow] | None = None
        self.at_position: dict[int, tuple[int, BatchRow]] = {}     # wanted by the offset index
        self.ending_at: dict[int, tuple[int, BatchRow]] = {}       # wanted by either index
        self.index_entries: int | None = None
        self.time_index_entries: int | None = None

    def to_json(self) -> dict:
        return {"base_offset": self.base_offset, "file": self.path, "size_bytes": self.size,
                "valid_bytes": self.valid_bytes, "batch_count": self.batch_count,
                "first_offset": self.first_offset, "last_offset": self.last_offset,
                "crc_failures": self.crc_failures,
                "index_entries": self.index_entries, "time_index_entries": self.time_index_entries}


class PartitionScan:
    def __init__(self, log_dir: str, topic: str, partition: int, path: str):
        self.log_dir, self.topic, self.partition, self.path = log_dir, topic, partition, path
        self.segments: list[SegmentScan] = []
        self.problems: list[Issue] = []
        self.warnings: list[Issue] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark: int | None = None
        self.lineage: list[dict] = []          # {"epoch", "start_offset", "last_offset", "batch_count"}
        self.anomalies: list[dict] = []        # epochs going back
        self.offset_gaps = 0                   # batches past the previous one's last offset + 1
        self.checkpoint: list[tuple[int, int]] | None = None
        self.checkpoint_error: str | None = None
        self.agrees: bool | None = None
        self.disagreement: str | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}" if self.partition >= 0 else self.topic

    @property
    def batch_count(self) -> int:
        return sum(s.batch_count for s in self.segments)

    @property
    def lineage_pairs(self) -> list[tuple[int, int]]:
        return [(e["epoch"], e["start_offset"]) for e in self.lineage]

    def batches(self):
        """Every batch's row (scanned with keep_rows=True)."""
        for s in self.segments:
            yield from s.rows or ()

    def to_json(self) -> dict:
        return {
            "topic": self.topic, "partition": self.partition, "path": self.path, "log_dir": self.log_dir,
            "log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset,
            "high_watermark": self.high_watermark, "batch_count": self.batch_count,
            "size_bytes": sum(s.size for s in self.segments),
            "segments": [s.to_json() for s in self.segments],
            "lineage_from_batches": self.lineage,
            "lineage_from_checkpoint": None if self.checkpoint is None else _entries(self.checkpoint),
            "checkpoint_error": self.checkpoint_error,
            "lineage_agrees": self.agrees, "lineage_disagreement": self.disagreement,
            "lineage_anomalies": self.anomalies,
            "problems": [p.to_json() for p in self.problems],
            "warnings": [w.to_json() for w in self.warnings],
        }


def _read_index(path: str, entry: struct.Struct) -> tuple[list[tuple], int, bytes]:
    """(entries up to the first unused slot, unused slots, raw bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    n = len(data) // entry.size
    entries, zero = [], entry.size * b"\0"
    for i in range(n):
        raw = data[i * entry.size:(i + 1) * entry.size]
        values = entry.unpack(raw)
        relative = values[-1] if entry is _TIME_ENTRY else values[0]
        # Kafka's dump tool: a sparse (pre-allocated) file ends at the first entry whose offset
        # is the base offset; a first slot of zeros is never a real entry either (the first
        # batch of a segment never gets one).
        if (i > 0 and relative == 0) or (i == 0 and raw == zero):
            return entries, n - i, data
        entries.append(values)
    return entries, 0, data


class _SegmentIndexes:
    """A segment's two index files, read before its .log is scanned."""

    def __init__(self, seg: SegmentScan, is_last: bool, problems: list, warnings: list):
        self.offset_path = seg.path[: -len(LOG_SUFFIX)] + INDEX_SUFFIX
        self.time_path = seg.path[: -len(LOG_SUFFIX)] + TIME_INDEX_SUFFIX
        self.offset_entries: list = []
        self.time_entries: list = []
        for path, entry, kind, name, attr in ((self.offset_path, _OFFSET_ENTRY, "index", "index", "offset_entries"),
                                              (self.time_path, _TIME_ENTRY, "time_index", "time index",
                                               "time_entries")):
            if not os.path.exists(path):
                warnings.append(Issue("index_missing", f"no {'offset' if kind == 'index' else 'time'} index "
                                      "(Kafka rebuilds it on load)", path))
                continue
            entries, unused, data = _read_index(path, entry)
            setattr(self, attr, entries)
            if len(data) % entry.size:
                problems.append(Issue(kind, f"{name} length {len(data)} is not a multiple of {entry.size}", path))
            if unused and not is_last:
                warnings.append(Issue("index_untrimmed", f"{unused} unused slots after {len(entries)} entries in "
                                      f"the {name} of a segment that is not the newest (not trimmed at roll)", path))
        if os.path.exists(self.offset_path):
            seg.index_entries = len(self.offset_entries)
        if os.path.exists(self.time_path):
            seg.time_index_entries = len(self.time_entries)
        base = seg.base_offset
        self.positions = {position for _relative, position in self.offset_entries}
        self.lasts = {base + relative for relative, _position in self.offset_entries} | \
            {base + relative for _timestamp, relative in self.time_entries}

    def check(self, seg: SegmentScan, problems: list) -> None:
        """Each index entry against the batches found.  Where the walk stopped before the file's
        end (a torn tail, a corrupt batch), the entries past that point are what the cut hides,
        not problems of their own: recovery cuts the log there and rebuilds both indexes.  They
        are counted into the cut's problem, said once."""
        cut = seg.valid_bytes if seg.valid_bytes < seg.size else None
        last_kept = seg.last_offset if seg.last_offset is not None else seg.base_offset - 1
        hidden_offsets = hidden_times = 0
        previous = None
        for n, (relative, position) in enumerate(self.offset_entries):
            offset = seg.base_offset + relative
            if cut is not None and position >= cut:
                hidden_offsets += 1
                continue
            where = dict(file=self.offset_path, position=n * _OFFSET_ENTRY.size, offset=offset)
            if previous is not None and (offset <= previous[0] or position <= previous[1]):
                problems.append(Issue("index", f"entry {n} (offset {offset}, position {position}) does not follow "
                                      f"entry {n - 1} (offset {previous[0]}, position {previous[1]})", **where))
            previous = (offset, position)
            found = seg.at_position.get(position)
            if found is None:
                problems.append(Issue("index", f"entry {n} (offset {offset}) points at log position {position}, "
                                      "which is not the start of a batch", **where))
                continue
            i, b = found
            ending = seg.ending_at.get(offset)
            # The entry's offset is the last offset of the batch (or appended chunk) that starts
            # at its position: a batch at or after that position must end exactly there.
            if ending is None or ending[0] < i:
                problems.append(Issue("index", f"entry {n} says offset {offset} is at log position {position}, but "
                                      f"the batch there holds {b.base_offset}..{b.last_offset}"
                                      + ("" if ending is not None else f" and no batch ends at offset {offset}"),
                                      **where))
        previous = None
        for n, (timestamp, relative) in enumerate(self.time_entries):
            offset = seg.base_offset + relative
            if cut is not None and offset > last_kept:
                hidden_times += 1
                continue
            where = dict(file=self.time_path, position=n * _TIME_ENTRY.size, offset=offset)
            if previous is not None and (timestamp <= previous[0] or offset < previous[1]):
                problems.append(Issue("time_index", f"entry {n} (timestamp {timestamp}, offset {offset}) is out of "
                                      f"order after (timestamp {previous[0]}, offset {previous[1]})", **where))
            previous = (timestamp, offset)
            ending = seg.ending_at.get(offset)
            if ending is None:
                problems.append(Issue("time_index", f"entry {n} (timestamp {timestamp}) names offset {offset}, "
                                      "which is not the last offset of any batch", **where))
            elif ending[1].max_timestamp != timestamp:
                problems.append(Issue("time_index", f"entry {n} says timestamp {timestamp} for the batch ending at "
                                      f"offset {offset}, whose max timestamp is {ending[1].max_timestamp}", **where))
        if hidden_offsets or hidden_times:
            self._note_hidden(seg, cut, problems, hidden_offsets, hidden_times)

    def _note_hidden(self, seg: SegmentScan, cut: int, problems: list, offsets: int, times: int) -> None:
        hidden = " and ".join(f"{count} {'entry' if count == 1 else 'entries'} of the {name}" for count, name in
                              ((offsets, "offset index"), (times, "time index")) if count)
        note = f"it hides {hidden} past byte {cut} (recovery rebuilds both indexes)"
        at = next((i for i in range(len(problems) - 1, -1, -1) if problems[i].file == seg.path
                   and problems[i].kind in ("partial_tail", "corrupt")), None)
        if at is not None:
            problems[at] = problems[at]._replace(message=f"{problems[at].message}; {note}")
        else:
            problems.append(Issue("index", note[0].upper() + note[1:], seg.path, cut))


def scan_partition(log_dir: str, topic: str, partition: int, path: str, *, offsets: dict | None = None,
                   progress=None, check_indexes: bool = True, keep_rows: bool = False) -> PartitionScan:
    """Read one partition dir without changing anything: every batch's header and CRC, the
    structure (sizes, magic, offsets strictly increasing, nothing after the last whole batch),
    both indexes of every segment, and the epoch lineage against `leader-epoch-checkpoint`."""
    ps = PartitionScan(log_dir, topic, partition, path)
    offsets = offsets or {}
    names = sorted(os.listdir(path))
    bases = sorted(b for n in names if (b := segment_base(n, LOG_SUFFIX)) is not None)
    base_set = set(bases)
    _warn_leftovers(ps, path, names, base_set)
    previous_last = None
    cuts: list[tuple[int, SegmentScan, object]] = []
    for k, base in enumerate(bases):
        seg = SegmentScan(base, segment_file(path, base, LOG_SUFFIX))
        if keep_rows:
            seg.rows = []
        ps.segments.append(seg)
        indexes = _SegmentIndexes(seg, k == len(bases) - 1, ps.problems, ps.warnings) if check_indexes else None
        wanted_positions = indexes.positions if indexes else ()
        wanted_lasts = indexes.lasts if indexes else ()
        if previous_last is not None and base <= previous_last:
            ps.problems.append(Issue("disorder", f"segment base offset {base} is not above the previous segment's "
                                     f"last offset {previous_last}", seg.path, 0, base))
        log_file = LogFile(seg.path)
        seg.size = log_file.size
        reported = 0
        structural = False
        try:
            for batch in log_file.batches():
                magic = batch.magic
                row = BatchRow(batch.position, batch.base_offset, batch.last_offset,
                               batch.partition_leader_epoch if magic >= 2 else -1, magic, batch.crc,
                               batch.is_valid(), batch.size_bytes, batch.max_timestamp)
                i = seg.batch_count
                seg.batch_count += 1
                seg.positions.append(row.position)
                seg.base_offsets.append(row.base_offset)
                if seg.first_offset is None:
                    seg.first_offset = row.base_offset
                seg.last_offset = row.last_offset
                if seg.rows is not None:
                    seg.rows.append(row)
                if row.position in wanted_positions:
                    seg.at_position[row.position] = (i, row)
                if row.last_offset in wanted_lasts:
                    seg.ending_at[row.last_offset] = (i, row)
                previous_last = _check_batch(ps, seg, row, base, previous_last)
                seg.valid_bytes = row.position + row.size
                if progress is not None and seg.valid_bytes - reported >= 1 << 20:
                    progress.update(seg.valid_bytes - reported)
                    reported = seg.valid_bytes
        except errors.StorageError as exc:
            structural = True
            ps.problems.append(Issue("corrupt", exc.reason, seg.path, exc.position, exc.offset))
        finally:
            if progress is not None:
                progress.update(seg.size - reported)
        if seg.valid_bytes < seg.size and not structural:
            ps.problems.append(Issue("partial_tail", f"{seg.size - seg.valid_bytes} bytes after the last whole batch "
                                     "(a torn write; recovery cuts it)", seg.path, seg.valid_bytes))
        if indexes is not None:
            indexes.check(seg, ps.problems)
        verdict = scan_log_file(seg.path, base)     # what recovery would cut (_note_recovery_cuts)
        if verdict.valid_bytes < seg.size:
            cuts.append((k, seg, verdict))
    _note_recovery_cuts(ps, cuts, len(bases))
    if not bases:
        ps.warnings.append(Issue("empty", "no segments", path))

    _set_offsets(ps, bases, offsets.get((topic, partition), {}))
    for a in ps.anomalies:
        ps.problems.append(Issue("epoch_regression", f"partition leader epoch goes back from {a['previous_epoch']} "
                                 f"to {a['epoch']}", path, None, a["offset"]))
    _check_epoch_checkpoint(ps, path, bool(bases))
    return ps


def _set_offsets(ps: PartitionScan, bases: list[int], meta: dict) -> None:
    """Log start (the first segment's base, raised to the recorded log start offset), log end
    (after the last batch) and the recorded high watermark."""
    start = bases[0] if bases else 0
    if meta.get("log_start_offset", -1) >= 0:
        start = max(start, meta["log_start_offset"])
    last = next((s.last_offset for s in reversed(ps.segments) if s.last_offset is not None), None)
    ps.log_start_offset = start
    ps.log_end_offset = last + 1 if last is not None else (bases[-1] if bases else start)
    ps.high_watermark = meta.get("high_watermark")


def _warn_leftovers(ps: PartitionScan, path: str, names: list[str], base_set: set[int]) -> None:
    """Leftovers of interrupted work and index files without their .log (the next load removes
    both)."""
    for name in names:
        full = os.path.join(path, name)
        if name.endswith(_LEFTOVER_SUFFIXES):
            ps.warnings.append(Issue("leftover", "leftover of an interrupted delete, compaction or split "
                                     "(removed on the next load)", full))
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            base = segment_base(name, suffix)
            if base is not None and base not in base_set:
                ps.warnings.append(Issue("orphan", "index file without its .log (removed on the next load)", full))


def _check_batch(ps: PartitionScan, seg: SegmentScan, row: BatchRow, base: int, previous_last) -> int:
    """A batch's problems (CRC, below its segment, out of order, last below base) and its place
    in the epoch lineage; returns the largest last offset so far."""
    lineage = ps.lineage
    magic = row.magic
    if not row.valid:
        seg.crc_failures += 1
        ps.problems.append(Issue("crc", f"CRC mismatch (stored 0x{row.crc:08x})", seg.path,
                                 row.position, row.base_offset))
    if row.base_offset < base:
        ps.problems.append(Issue("below_segment_base", f"batch at offset {row.base_offset} lies below "
                                 f"its segment's base offset {base}", seg.path, row.position,
                                 row.base_offset))
    if previous_last is not None and row.base_offset <= previous_last:
        ps.problems.append(Issue("disorder", f"batch {row.base_offset}..{row.last_offset} does not "
                                 f"follow the previous batch's last offset {previous_last}", seg.path,
                                 row.position, row.base_offset))
    if row.last_offset < row.base_offset:
        ps.problems.append(Issue("corrupt", f"last offset {row.last_offset} below base offset",
                                 seg.path, row.position, row.base_offset))
    if row.base_offset > (previous_last + 1 if previous_last is not None else base):
        ps.offset_gaps += 1                 # offsets no batch holds: what a cleaner leaves
    previous_last = max(previous_last if previous_last is not None else -1, row.last_offset)
    # Epoch lineage: a batch whose epoch is above every earlier one starts an entry
    # (what Kafka's segment recovery assigns); a smaller epoch later on is an anomaly.
    epoch = row.epoch
    if magic >= 2 and epoch >= 0:
        if not lineage or epoch > lineage[-1]["epoch"]:
            lineage.append({"epoch": epoch, "start_offset": row.base_offset,
                            "last_offset": row.last_offset, "batch_count": 1})
        elif epoch == lineage[-1]["epoch"]:
            lineage[-1]["last_offset"] = row.last_offset
            lineage[-1]["batch_count"] += 1
        else:
            ps.anomalies.append({"offset": row.base_offset, "epoch": epoch,
                                 "previous_epoch": lineage[-1]["epoch"]})
    return previous_last


def _note_recovery_cuts(ps: PartitionScan, cuts: list, segment_count: int) -> None:
    """The verdict recovery cuts by (storage/log/loader.py, one implementation): whatever the batch
    walk found or missed, a segment recovery would cut is a problem here."""
    bases_after = segment_count
    for n, (k, seg, verdict) in enumerate(cuts):
        later = bases_after - k - 1 if n == 0 else 0
        cut = (f"recovery cuts {seg.size - verdict.valid_bytes} bytes here"
               + (f" and deletes the {_plural(later, 'later segment')}" if later else ""))
        # Said once per place: added to the problem the walk found there, else a problem of its own.
        same = next((i for i, p in enumerate(ps.problems) if p.file == seg.path and p.position == verdict.valid_bytes),
                    None)
        if same is not None:
            ps.problems[same] = ps.problems[same]._replace(message=f"{ps.problems[same].message}; {cut}")
        else:
            ps.problems.append(Issue("recovery_cut", f"{verdict.stop_reason or 'invalid data'}; {cut}", seg.path,
                                     verdict.valid_bytes, verdict.stop_offset if verdict.stop_offset >= 0 else None))


def _check_epoch_checkpoint(ps: PartitionScan, path: str, has_segments: bool) -> None:
    """The leader-epoch-checkpoint: readable, and agreeing with the batches' lineage
    (storage.inspect.lineage, the one rule)."""
    checkpoint_path = os.path.join(path, CHECKPOINT_FILE)
    ps.checkpoint, ps.checkpoint_error = read_epoch_checkpoint(path)
    if ps.checkpoint_error is not None:
        ps.problems.append(Issue("epoch_checkpoint", f"malformed leader-epoch-checkpoint: {ps.checkpoint_error}",
                                 checkpoint_path))
    elif ps.checkpoint is None and has_segments:
        ps.warnings.append(Issue("epoch_checkpoint", "no leader-epoch-checkpoint (Kafka creates it on load)",
                                 checkpoint_path))
    if ps.checkpoint is not None:
        ps.agrees, why = lineage_agreement(ps.lineage_pairs, ps.checkpoint,
                                           log_start_offset=ps.log_start_offset, log_end_offset=ps.log_end_offset,
                                           compacted=partition_is_compacted(path), offset_gaps=ps.offset_gaps)
        if ps.agrees is False:
            ps.disagreement = why
            ps.problems.append(Issue("epoch_lineage", f"leader-epoch-checkpoint disagrees with the batches: {why}",
                                     checkpoint_path))


def _partition_bytes(path: str) -> int:
    total = 0
    for name in os.listdir(path):
        if segment_base(name, LOG_SUFFIX) is not None:
            total += os.path.getsize(os.path.join(path, name))
    return total


def scan_log_dir(path: str, *, progress: bool = True,
                 check_indexes: bool = True) -> tuple[list[PartitionScan], list[Issue]]:
    """Scan every partition under `path` (a log dir or a partition dir)."""
    parts = partition_dirs(path)
    metadata: dict[str, tuple] = {}
    warnings: list[Issue] = []
    for log_dir, *_ in parts:
        if log_dir not in metadata:
            offsets, _source, meta_warnings = log_dir_offsets(log_dir)
            metadata[log_dir] = offsets
            warnings += meta_warnings
    total = sum(_partition_bytes(p) for *_, p in parts)
    scans = []
    with _progress(total, "verify", progress) as bar:
        for log_dir, topic, partition, part_path in parts:
            bar.set_description_str(f"{topic}-{partition}")
            scans.append(scan_partition(log_dir, topic, partition, part_path, offsets=metadata[log_dir],
                                        progress=bar, check_indexes=check_indexes))
    return scans, warnings

