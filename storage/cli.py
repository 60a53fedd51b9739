"""The command line: `python -m storage SUBCOMMAND` (and the `storage` console script).

    dump-log --files F [F ...]   Kafka's kafka-dump-log on .log, .index, .timeindex, .snapshot
                                 and leader-epoch-checkpoint files (ours or Kafka's)
    verify DIR                   read-only check of a log dir: CRCs, structure, indexes, epochs
    recover DIR                  offline unclean-shutdown recovery, with what was truncated
    epochs DIR TOPIC-PARTITION   the leader-epoch-checkpoint next to the lineage in the batches
    audit DIR [DIR ...]          the fleet audit on Spark (storage/spark/audit.py)
    demo                         a three-broker cluster story ending with the fleet audit

Conventions shared by every subcommand:
  - `--json` prints one JSON document on stdout instead of text;
  - a problem is one line naming the file, the byte position and the offset where it was
    found (`<file>, position P, offset O: what`), as `storage.errors.StorageError` does;
  - exit status 0 = nothing wrong, 1 = problems found (or, for `recover`, data was cut),
    2 = usage error (bad arguments, a path that does not exist);
  - progress bars (tqdm, when installed) go to stderr and only when stderr is a terminal;
  - `verify`, `epochs` and `dump-log` never write: files are mapped read-only and the LMDB
    metadata store is opened read-only without its lock file.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import struct
import sys
import tempfile
import time
import zlib
from array import array
from bisect import bisect_left
from typing import NamedTuple

from . import checkpoint, errors
from .epoch import CHECKPOINT_FILE
from .loader import scan_log_file
from .logdir import CLEAN_SHUTDOWN_FILE, parse_partition_dir
from .records import decompress, iter_batches

USAGE, PROBLEMS, OK = 2, 1, 0
LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX = ".log", ".index", ".timeindex", ".snapshot"
_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap")
_OFFSET_ENTRY, _TIME_ENTRY = struct.Struct(">ii"), struct.Struct(">qi")
_INT32_MAX = 2**31 - 1
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                  5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


class UsageError(Exception):
    """Bad arguments: exit status 2."""


# ---- small helpers -------------------------------------------------------------------------------

_where = errors.location


class Issue(NamedTuple):
    """A problem (exit 1) or a warning (reported only), located like a StorageError."""

    kind: str
    message: str
    file: str | None = None
    position: int | None = None
    offset: int | None = None

    def line(self) -> str:
        where = _where(self.file, self.position, self.offset)
        return f"{where}: {self.message}" if where else self.message

    def to_json(self) -> dict:
        return {"kind": self.kind, "file": self.file, "position": self.position, "offset": self.offset,
                "message": self.message}


def _progress(total: int, desc: str, enabled: bool, unit: str = "B"):
    """A tqdm bar on stderr (only on a terminal), or a stand-in that does nothing."""
    if enabled and sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", unit_divisor=1024,
                        leave=False, file=sys.stderr, dynamic_ncols=True, mininterval=0.2)
    return _NoProgress()


class _NoProgress:
    def update(self, n=1):
        pass

    def set_description_str(self, text):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Spinner:
    """Elapsed seconds on stderr while something slow without progress of its own runs (a
    terminal and tqdm only)."""

    def __init__(self, desc: str):
        self.desc = desc
        self.bar = None
        self.thread = None
        self.stop = None

    def __enter__(self):
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                return self
            import threading

            self.bar = tqdm(total=None, desc=self.desc, bar_format="{desc}: {elapsed}", file=sys.stderr, leave=False)
            self.stop = threading.Event()

            def tick():
                while not self.stop.wait(0.5):
                    self.bar.refresh()

            self.thread = threading.Thread(target=tick, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.stop.set()
            self.thread.join()
            self.bar.close()
        return False


def _print_json(document) -> None:
    json.dump(document, sys.stdout, indent=1)
    sys.stdout.write("\n")


def _map_file(path: str):
    """The file's bytes, mapped read-only (b"" for an empty file).  Never closed explicitly:
    batch views may still point into it; the mapping goes with the last reference."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _segment_base(name: str, suffix: str) -> int | None:
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def _entries(pairs) -> list[dict]:
    return [{"epoch": e, "start_offset": o} for e, o in pairs]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("ch") else f"{n} {word}s"


def _lineage_text(pairs) -> str:
    return " ".join(f"{e}@{o}" for e, o in pairs) if pairs else "-"


# ---- log dirs and their metadata -------------------------------------------------------------------

def _has_segments(path: str) -> bool:
    try:
        return any(_segment_base(n, LOG_SUFFIX) is not None for n in os.listdir(path))
    except OSError:
        return False


def partition_dirs(path: str) -> list[tuple[str, str, int, str]]:
    """(log dir, topic, partition, partition dir) under `path`, which is a log dir or one
    partition dir (a dir holding segments itself; a name that is not `<topic>-<partition>`
    gives partition -1)."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise UsageError(f"not a directory: {path}")
    key = parse_partition_dir(os.path.basename(path))
    looks_like_partition = _has_segments(path) or os.path.exists(os.path.join(path, CHECKPOINT_FILE))
    if looks_like_partition and not any(
            parse_partition_dir(n) and os.path.isdir(os.path.join(path, n)) for n in os.listdir(path)):
        topic, partition = key if key else (os.path.basename(path), -1)
        return [(os.path.dirname(path), topic, partition, path)]
    out = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        found = parse_partition_dir(name)
        if found is not None and os.path.isdir(full):
            out.append((path, found[0], found[1], full))
    markers = ("storage.mdb", "meta.properties", CLEAN_SHUTDOWN_FILE, checkpoint.RECOVERY_POINT_FILE)
    if not out and not any(os.path.exists(os.path.join(path, m)) for m in markers):
        raise UsageError(f"{path} is neither a log dir (one holding <topic>-<partition> dirs, storage.mdb or "
                         "meta.properties) nor a partition dir (one holding NNNNNNNNNNNNNNNNNNNN.log segments)")
    return out


def log_dir_offsets(log_dir: str) -> tuple[dict, str | None, list[Issue]]:
    """({(topic, partition): {"log_start_offset", "high_watermark", "recovery_point"}}, source,
    warnings) from our `storage.mdb` (read-only, no lock file) or Kafka's checkpoint files."""
    from .meta import FILE_NAME as META_FILE

    warnings: list[Issue] = []
    mdb = os.path.join(log_dir, META_FILE)
    if os.path.exists(mdb):
        try:
            import lmdb

            from .meta import _OFFSETS, _unkey

            env = lmdb.open(mdb, subdir=False, readonly=True, lock=False, max_dbs=4)
            try:
                try:
                    db = env.open_db(b"partitions", create=False)
                except lmdb.NotFoundError:
                    return {}, "storage.mdb", warnings
                with env.begin(db=db) as txn:
                    out = {}
                    for k, v in txn.cursor():
                        recovery_point, start, hw = _OFFSETS.unpack(v)
                        out[_unkey(k)] = {"recovery_point": recovery_point, "log_start_offset": start,
                                          "high_watermark": hw}
                    return out, "storage.mdb", warnings
            finally:
                env.close()
        except Exception as exc:   # lmdb raises its own types; a damaged store is a warning here
            warnings.append(Issue("metadata", f"cannot read the metadata store: {exc}", mdb))
            return {}, None, warnings
    join = os.path.join
    files = {"log_start_offset": checkpoint.LOG_START_OFFSET_FILE, "high_watermark": checkpoint.HIGH_WATERMARK_FILE,
             "recovery_point": checkpoint.RECOVERY_POINT_FILE}
    out: dict = {}
    found = False
    for field, name in files.items():
        path = join(log_dir, name)
        if not os.path.exists(path):
            continue
        found = True
        try:
            values = checkpoint.read_offsets(path)
        except checkpoint.OffsetCheckpointRangeError as exc:
            warnings.append(Issue("metadata", f"checkpoint holds an out-of-range value, not used: {exc.reason}", path))
            continue
        except (checkpoint.CheckpointError, OSError) as exc:
            warnings.append(Issue("metadata", f"unreadable checkpoint, ignored as Kafka does: {exc}", path))
            continue
        for key, value in values.items():
            out.setdefault(key, {})[field] = value
    return out, ("kafka checkpoints" if found else None), warnings


# ---- scanning one partition (read-only) -------------------------------------------------------------

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


def truncate_from_start(lineage: list[tuple[int, int]], start_offset: int) -> list[tuple[int, int]]:
    """Kafka's truncateFromStart: entries at or below start_offset go, the last of them comes
    back starting at start_offset."""
    kept = [e for e in lineage if e[1] > start_offset]
    removed = [e for e in lineage if e[1] <= start_offset]
    return ([(removed[-1][0], start_offset)] if removed else []) + kept


def lineage_agreement(from_batches, from_checkpoint, *, log_start_offset: int | None,
                      log_end_offset: int) -> tuple[bool | None, str | None]:
    """(agrees, why not) for a batch lineage and a leader-epoch-checkpoint, after the repairs
    Kafka's loader makes itself: both cut at the log start offset (truncateFromStart), and a
    last checkpoint entry starting exactly at the log end offset ignored (a leader elected that
    has not written yet).  The first entry may start below the first batch (the epoch began
    before what is left of the log).  None when there is no checkpoint."""
    if from_checkpoint is None:
        return None, "no leader-epoch-checkpoint"
    batches = [tuple(e) for e in from_batches]
    entries = [tuple(e) for e in from_checkpoint]
    if log_start_offset is not None:
        if batches and log_start_offset > batches[0][1]:
            batches = truncate_from_start(batches, log_start_offset)
        if entries and log_start_offset > entries[0][1]:
            entries = truncate_from_start(entries, log_start_offset)
    if entries and entries[-1][1] == log_end_offset and (not batches or entries[-1][0] > batches[-1][0]):
        entries = entries[:-1]
    if batches and entries and batches[0][0] == entries[0][0] and entries[0][1] <= batches[0][1]:
        batches[0] = entries[0]
    if batches == entries:
        return True, None
    for i, (b, c) in enumerate(zip(batches, entries)):
        if b != c:
            return False, (f"entry {i}: the batches say epoch {b[0]} from offset {b[1]}, "
                           f"the checkpoint says epoch {c[0]} from offset {c[1]}")
    if len(batches) > len(entries):
        e = batches[len(entries)]
        return False, f"the checkpoint lacks epoch {e[0]} (from offset {e[1]} in the batches)"
    e = entries[len(batches)]
    where = "beyond the log end offset" if e[1] > log_end_offset else "no batch carries it"
    return False, f"the checkpoint has epoch {e[0]} from offset {e[1]}: {where}"


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
        previous = None
        for n, (relative, position) in enumerate(self.offset_entries):
            offset = seg.base_offset + relative
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


def scan_partition(log_dir: str, topic: str, partition: int, path: str, *, offsets: dict | None = None,
                   progress=None, check_indexes: bool = True, keep_rows: bool = False) -> PartitionScan:
    """Read one partition dir without changing anything: every batch's header and CRC, the
    structure (sizes, magic, offsets strictly increasing, nothing after the last whole batch),
    both indexes of every segment, and the epoch lineage against `leader-epoch-checkpoint`."""
    ps = PartitionScan(log_dir, topic, partition, path)
    offsets = offsets or {}
    names = sorted(os.listdir(path))
    bases = sorted(b for n in names if (b := _segment_base(n, LOG_SUFFIX)) is not None)
    base_set = set(bases)
    for name in names:
        full = os.path.join(path, name)
        if name.endswith(_LEFTOVER_SUFFIXES):
            ps.warnings.append(Issue("leftover", "leftover of an interrupted delete, compaction or split "
                                     "(removed on the next load)", full))
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, ".txnindex"):
            base = _segment_base(name, suffix)
            if base is not None and base not in base_set:
                ps.warnings.append(Issue("orphan", "index file without its .log (removed on the next load)", full))
    previous_last = None
    lineage = ps.lineage
    cuts: list[tuple[int, SegmentScan, object]] = []
    for k, base in enumerate(bases):
        seg = SegmentScan(base, os.path.join(path, f"{base:020d}{LOG_SUFFIX}"))
        if keep_rows:
            seg.rows = []
        ps.segments.append(seg)
        indexes = _SegmentIndexes(seg, k == len(bases) - 1, ps.problems, ps.warnings) if check_indexes else None
        wanted_positions = indexes.positions if indexes else ()
        wanted_lasts = indexes.lasts if indexes else ()
        if previous_last is not None and base <= previous_last:
            ps.problems.append(Issue("disorder", f"segment base offset {base} is not above the previous segment's "
                                     f"last offset {previous_last}", seg.path, 0, base))
        data = _map_file(seg.path)
        seg.size = len(data)
        reported = 0
        structural = False
        try:
            for batch in iter_batches(data, verify=False, source=seg.path):
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
        del data
        # The verdict recovery cuts by (storage/loader.py, one implementation): whatever the
        # batch walk above found or missed, a segment recovery would cut is a problem here.
        verdict = scan_log_file(seg.path, base)
        if verdict.valid_bytes < seg.size:
            cuts.append((k, seg, verdict))
    for n, (k, seg, verdict) in enumerate(cuts):
        later = len(bases) - k - 1 if n == 0 else 0
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
    if not bases:
        ps.warnings.append(Issue("empty", "no segments", path))

    meta = offsets.get((topic, partition), {})
    start = bases[0] if bases else 0
    if meta.get("log_start_offset", -1) >= 0:
        start = max(start, meta["log_start_offset"])
    last = next((s.last_offset for s in reversed(ps.segments) if s.last_offset is not None), None)
    ps.log_start_offset = start
    ps.log_end_offset = last + 1 if last is not None else (bases[-1] if bases else start)
    ps.high_watermark = meta.get("high_watermark")

    for a in ps.anomalies:
        ps.problems.append(Issue("epoch_regression", f"partition leader epoch goes back from {a['previous_epoch']} "
                                 f"to {a['epoch']}", path, None, a["offset"]))
    checkpoint_path = os.path.join(path, CHECKPOINT_FILE)
    if os.path.exists(checkpoint_path):
        try:
            ps.checkpoint = [(int(e), int(o)) for e, o in checkpoint.read(checkpoint_path, 2)]
        except checkpoint.CheckpointError as exc:
            ps.checkpoint_error = exc.reason
            ps.problems.append(Issue("epoch_checkpoint", f"malformed leader-epoch-checkpoint: {exc.reason}",
                                     checkpoint_path))
        except ValueError as exc:
            ps.checkpoint_error = f"non-integer epoch or offset ({exc})"
            ps.problems.append(Issue("epoch_checkpoint", ps.checkpoint_error, checkpoint_path))
    elif bases:
        ps.warnings.append(Issue("epoch_checkpoint", "no leader-epoch-checkpoint (Kafka creates it on load)",
                                 checkpoint_path))
    if ps.checkpoint is not None:
        ps.agrees, why = lineage_agreement(ps.lineage_pairs, ps.checkpoint,
                                           log_start_offset=ps.log_start_offset, log_end_offset=ps.log_end_offset)
        if ps.agrees is False:
            ps.disagreement = why
            ps.problems.append(Issue("epoch_lineage", f"leader-epoch-checkpoint disagrees with the batches: {why}",
                                     checkpoint_path))
    return ps


def _partition_bytes(path: str) -> int:
    total = 0
    for name in os.listdir(path):
        if _segment_base(name, LOG_SUFFIX) is not None:
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


# ---- verify ---------------------------------------------------------------------------------------

def cmd_verify(args) -> int:
    scans, dir_warnings = scan_log_dir(args.dir, progress=not args.no_progress)
    problems = [p for s in scans for p in s.problems]
    warning_count = len(dir_warnings) + sum(len(s.warnings) for s in scans)
    summary = {"partitions": len(scans), "segments": sum(len(s.segments) for s in scans),
               "batches": sum(s.batch_count for s in scans),
               "bytes": sum(seg.size for s in scans for seg in s.segments),
               "problems": len(problems), "warnings": warning_count}
    if args.json:
        _print_json({"path": os.path.abspath(args.dir), "ok": not problems, "summary": summary,
                     "warnings": [w.to_json() for w in dir_warnings],
                     "partitions": [s.to_json() for s in scans]})
        return PROBLEMS if problems else OK
    for w in dir_warnings:
        print(f"warning: {w.line()}")
    for s in scans:
        epochs = _lineage_text(s.lineage_pairs)
        agreement = {True: "checkpoint agrees", False: "checkpoint DISAGREES", None: "no checkpoint"}[s.agrees]
        span = f"offsets {s.log_start_offset}..{s.log_end_offset - 1}" if s.log_end_offset > s.log_start_offset \
            else f"empty at offset {s.log_end_offset}"
        status = "ok" if not s.problems else _plural(len(s.problems), "problem")
        print(f"{s.name}: {status}; {_plural(len(s.segments), 'segment')}, {_plural(s.batch_count, 'batch')}, "
              f"{span}, epochs {epochs} ({agreement})")
        for p in s.problems:
            print(f"  problem: {p.line()}")
        if not args.quiet:
            for w in s.warnings:
                print(f"  warning: {w.line()}")
    mb = summary["bytes"] / 1e6
    print(f"verified {_plural(summary['partitions'], 'partition')}, {_plural(summary['segments'], 'segment')}, "
          f"{_plural(summary['batches'], 'batch')} ({mb:.1f} MB): {_plural(len(problems), 'problem')}, "
          f"{_plural(warning_count, 'warning')}")
    return PROBLEMS if problems else OK


# ---- recover --------------------------------------------------------------------------------------

def _segment_sizes(path: str) -> dict[int, int]:
    return {b: os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
            if (b := _segment_base(n, LOG_SUFFIX)) is not None}


def _recover_partition(log_dir: str, topic: str, partition: int, path: str, meta: dict, progress,
                       force: bool = False) -> dict:
    """Kafka's unclean recovery of one partition (storage/loader.py decides per segment): from
    the recovery point the metadata records, refusing damage below it; with `force`, from
    offset 0, cutting at the first invalid batch wherever it is."""
    from .log import LogConfig, PartitionLog

    before = scan_partition(log_dir, topic, partition, path, offsets={(topic, partition): meta}, check_indexes=False)
    sizes_before = {s.base_offset: s.size for s in before.segments}
    checkpoint_before = before.checkpoint
    start = meta.get("log_start_offset", -1)
    recovery_point = 0 if force else max(meta.get("recovery_point", 0), 0)
    # Offline, the whole partition is read anyway: "scan" makes the loader read every segment it
    # would trust in full, so a damaged batch wholly below the recovery point is refused too.
    try:
        log = PartitionLog.open(path, LogConfig(), recovery_point=recovery_point,
                                log_start_offset=start if start >= 0 else None, clean_shutdown=False,
                                recover_mode="force" if force else "scan")
    except errors.CorruptSegmentError as exc:
        progress.update(sum(sizes_before.values()))
        return {"topic": topic, "partition": partition, "path": path, "refused": str(exc),
                "log_end_offset_before": before.log_end_offset, "log_end_offset": before.log_end_offset,
                "log_start_offset": before.log_start_offset, "truncated_bytes": 0, "segments_deleted": 0,
                "changed": False, "epochs_before": None, "epochs_after": None, "checkpoint_error_before": None,
                "notes": [], "segments": []}
    try:
        report = {base: (truncated, reason) for base, truncated, reason in log.recovery_report if base >= 0}
        notes = [reason for base, _t, reason in log.recovery_report if base < 0]
        leo, log_start = log.log_end_offset, log.log_start_offset
    finally:
        log.close()
    progress.update(sum(sizes_before.values()))
    sizes_after = _segment_sizes(path)
    segments, truncated_total, deleted = [], 0, 0
    first_cut = None
    for seg in before.segments:
        base = seg.base_offset
        entry = {"base_offset": base, "file": seg.path, "bytes_before": sizes_before[base],
                 "bytes_after": sizes_after.get(base), "truncated_bytes": 0, "status": "ok", "reason": None,
                 "position": None, "first_offset_removed": None, "batches_removed": 0}
        after = sizes_after.get(base)
        if after is None:
            entry.update(status="deleted", truncated_bytes=sizes_before[base],
                         reason="after the first invalid batch: nothing after it is trusted",
                         position=0, batches_removed=seg.batch_count, first_offset_removed=seg.first_offset)
            deleted += 1
        elif after < sizes_before[base]:
            cut = bisect_left(seg.positions, after)
            entry.update(status="truncated", truncated_bytes=sizes_before[base] - after, position=after,
                         reason=report.get(base, (0, "cut"))[1] or "invalid data",
                         batches_removed=seg.batch_count - cut,
                         first_offset_removed=seg.base_offsets[cut] if cut < seg.batch_count else None)
        elif base in report and report[base][1].startswith("rebuilt"):
            entry.update(status="rebuilt", reason=report[base][1])
        truncated_total += entry["truncated_bytes"]
        if entry["status"] in ("truncated", "deleted") and first_cut is None:
            first_cut = entry
        segments.append(entry)
    for base in sorted(set(sizes_after) - set(sizes_before)):
        segments.append({"base_offset": base, "file": os.path.join(path, f"{base:020d}{LOG_SUFFIX}"),
                         "bytes_before": None, "bytes_after": sizes_after[base], "truncated_bytes": 0,
                         "status": "created", "reason": "an empty partition gets its first segment",
                         "position": None, "first_offset_removed": None, "batches_removed": 0})
    for name in sorted(os.listdir(path)):
        base = _segment_base(name, SNAPSHOT_SUFFIX)
        if base is not None and base > leo:
            notes.append(f"{name}: producer-state snapshot beyond the new log end offset {leo} "
                         "(Kafka deletes it on load)")
    after_epochs = None
    try:
        after_epochs = [(int(e), int(o)) for e, o in checkpoint.read(os.path.join(path, CHECKPOINT_FILE), 2)]
    except (checkpoint.CheckpointError, ValueError, OSError):
        pass
    return {"topic": topic, "partition": partition, "path": path,
            "log_end_offset_before": before.log_end_offset, "log_end_offset": leo, "log_start_offset": log_start,
            "truncated_bytes": truncated_total, "segments_deleted": deleted,
            "changed": truncated_total > 0,
            "epochs_before": None if checkpoint_before is None else _entries(checkpoint_before),
            "epochs_after": None if after_epochs is None else _entries(after_epochs),
            "checkpoint_error_before": before.checkpoint_error, "refused": None,
            "notes": notes, "segments": segments}


def _update_metadata(log_dir: str, results: list[dict], old: dict) -> bool:
    """Our log dirs: the recovered logs are flushed, so recovery point := log end offset, and the
    high watermark is clamped to it.  Kafka's checkpoint files are left to Kafka's loader."""
    from .meta import FILE_NAME as META_FILE
    from .meta import MetaStore, PartitionOffsets

    if not os.path.exists(os.path.join(log_dir, META_FILE)):
        return False
    store = MetaStore(log_dir)
    try:
        store.put_partitions({
            (r["topic"], r["partition"]): PartitionOffsets(
                r["log_end_offset"], r["log_start_offset"],
                min(old.get((r["topic"], r["partition"]), {}).get("high_watermark", r["log_end_offset"]),
                    r["log_end_offset"]))
            for r in results if r["partition"] >= 0})
    finally:
        store.close()
    return True


def cmd_recover(args) -> int:
    target = os.path.abspath(args.dir)
    parts = partition_dirs(target)
    scratch = None
    if args.dry_run:
        scratch = tempfile.mkdtemp(prefix="storage-recover-")
        copied = []
        for log_dir, topic, partition, path in parts:
            destination = os.path.join(scratch, os.path.basename(path))
            shutil.copytree(path, destination)
            copied.append((log_dir, topic, partition, destination))
        work = copied
    else:
        work = parts
    try:
        metadata = {}
        for log_dir, *_ in parts:
            if log_dir not in metadata:
                metadata[log_dir] = log_dir_offsets(log_dir)[0]
        total = sum(_partition_bytes(p) for *_, p in work)
        results = []
        with _progress(total, "recover", not args.no_progress) as bar:
            for (_, topic, partition, path), (original_dir, _t, _p, original_path) in zip(work, parts):
                bar.set_description_str(f"{topic}-{partition}")
                meta = metadata[original_dir].get((topic, partition), {})
                result = _recover_partition(original_dir, topic, partition, path, meta, bar, force=args.force)
                if args.dry_run:        # report the real paths, not the scratch copy's
                    result["path"] = original_path
                    for s in result["segments"]:
                        s["file"] = os.path.join(original_path, os.path.basename(s["file"]))
                results.append(result)
        metadata_updated = False
        if not args.dry_run:
            for log_dir in metadata:
                metadata_updated |= _update_metadata(
                    log_dir, [r for r, p in zip(results, parts) if p[0] == log_dir and not r["refused"]],
                    metadata[log_dir])
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    changed = [r for r in results if r["changed"]]
    refused = [r for r in results if r["refused"]]
    truncated = sum(r["truncated_bytes"] for r in results)
    marker = any(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in metadata)
    if args.json:
        _print_json({"path": target, "dry_run": args.dry_run, "changed": bool(changed), "truncated_bytes": truncated,
                     "segments_deleted": sum(r["segments_deleted"] for r in results),
                     "metadata_updated": metadata_updated, "clean_shutdown_marker": marker,
                     "refused": len(refused), "partitions": results})
        return PROBLEMS if changed or refused else OK
    verb = "would be" if args.dry_run else "were"
    for r in results:
        name = f"{r['topic']}-{r['partition']}" if r["partition"] >= 0 else r["topic"]
        if r["refused"]:
            print(f"{name}: REFUSED, nothing changed: {r['refused']}")
            continue
        leo = f"log end offset {r['log_end_offset_before']}" + (
            f" -> {r['log_end_offset']}" if r["log_end_offset"] != r["log_end_offset_before"] else "")
        print(f"{name}: {'nothing to cut' if not r['changed'] else 'CUT'}; {leo}")
        for s in r["segments"]:
            name = os.path.basename(s["file"])
            if s["status"] == "truncated":
                offsets = f", offsets from {s['first_offset_removed']} ({s['batches_removed']} batches)" \
                    if s["first_offset_removed"] is not None else ""
                print(f"  {_where(s['file'], s['position'], s['first_offset_removed'])}: {s['truncated_bytes']} bytes "
                      f"{verb} truncated{offsets}: {s['reason']}")
            elif s["status"] == "deleted":
                print(f"  {s['file']}: {'would be' if args.dry_run else 'was'} deleted ({s['bytes_before']} bytes, "
                      f"{s['batches_removed']} batches), {s['reason']}")
            elif s["status"] in ("rebuilt", "created") and not args.quiet:
                print(f"  {s['file']}: {s['reason']}")
        if r["epochs_before"] != r["epochs_after"] and r["epochs_after"] is not None:
            old = "none" if r["epochs_before"] is None else _lineage_text(
                [(e["epoch"], e["start_offset"]) for e in r["epochs_before"]])
            new = _lineage_text([(e["epoch"], e["start_offset"]) for e in r["epochs_after"]])
            print(f"  leader-epoch-checkpoint: {old} -> {new}")
        for note in r["notes"]:
            print(f"  {note}")
    what = "dry run (nothing written): " if args.dry_run else ""
    print(f"{what}recovered {_plural(len(results), 'partition')}: {len(changed)} cut, {truncated} bytes truncated, "
          f"{_plural(sum(r['segments_deleted'] for r in results), 'segment')} deleted"
          + ("; metadata store updated" if metadata_updated else "")
          + (f"; {_plural(len(refused), 'partition')} refused (damage below the recovery point: "
             f"`recover --force` cuts it)" if refused else ""))
    return PROBLEMS if changed or refused else OK


# ---- epochs ---------------------------------------------------------------------------------------

def _find_partition(directory: str, name: str | None) -> tuple[str, str, int, str]:
    parts = partition_dirs(directory)
    if name is None:
        if len(parts) == 1:
            return parts[0]
        raise UsageError(f"{directory} holds {len(parts)} partitions: name one (TOPIC-PARTITION)")
    for part in parts:
        if os.path.basename(part[3]) == name or f"{part[1]}-{part[2]}" == name:
            return part
    known = ", ".join(f"{t}-{p}" for _d, t, p, _x in parts[:10]) or "none"
    raise UsageError(f"no partition {name} in {directory} (found: {known})")


def cmd_epochs(args) -> int:
    log_dir, topic, partition, path = _find_partition(args.dir, args.partition)
    offsets, _source, _w = log_dir_offsets(log_dir)
    with _progress(_partition_bytes(path), "epochs", not args.no_progress) as bar:
        ps = scan_partition(log_dir, topic, partition, path, offsets=offsets, progress=bar, check_indexes=False)
    if args.json:
        _print_json({"topic": topic, "partition": partition, "path": path,
                     "log_start_offset": ps.log_start_offset, "log_end_offset": ps.log_end_offset,
                     "batch_count": ps.batch_count,
                     "checkpoint": None if ps.checkpoint is None else _entries(ps.checkpoint),
                     "checkpoint_error": ps.checkpoint_error, "batches": ps.lineage, "anomalies": ps.anomalies,
                     "agrees": ps.agrees, "disagreement": ps.disagreement,
                     "problems": [p.to_json() for p in ps.problems if p.kind.startswith("epoch")]})
        return PROBLEMS if ps.agrees is False or ps.anomalies or ps.checkpoint_error else OK
    print(f"{ps.name} in {log_dir}: log start offset {ps.log_start_offset}, log end offset {ps.log_end_offset}, "
          f"{_plural(ps.batch_count, 'batch')}")
    rows = []
    from_checkpoint = {e: o for e, o in (ps.checkpoint or [])}
    from_batches = {e["epoch"]: e for e in ps.lineage}
    for epoch in sorted(set(from_checkpoint) | set(from_batches)):
        c = from_checkpoint.get(epoch)
        b = from_batches.get(epoch)
        mark = "" if (c is not None and b is not None and c == b["start_offset"]) else "<-"
        rows.append((str(epoch), "-" if c is None else str(c), "-" if b is None else str(b["start_offset"]),
                     "-" if b is None else str(b["last_offset"]), "-" if b is None else str(b["batch_count"]), mark))
    header = ("EPOCH", "CHECKPOINT START", "BATCHES START", "LAST OFFSET", "BATCHES", "")
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    for row in [header] + rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for a in ps.anomalies:
        print(f"anomaly: at offset {a['offset']} the epoch goes back from {a['previous_epoch']} to {a['epoch']}")
    if ps.checkpoint_error:
        print(f"error: {_where(os.path.join(path, CHECKPOINT_FILE))}: {ps.checkpoint_error}")
        return PROBLEMS
    if ps.agrees is None:
        print("no leader-epoch-checkpoint: nothing to compare")
    elif ps.agrees:
        print("the checkpoint agrees with the batches")
    else:
        print(f"the checkpoint DISAGREES with the batches: {ps.disagreement}")
    return PROBLEMS if ps.agrees is False or ps.anomalies else OK


# ---- dump-log (Kafka's kafka-dump-log / DumpLogSegments output) --------------------------------------

def _increment_sequence(sequence: int, increment: int) -> int:
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def _batch_fields(batch, position: int) -> dict:
    v2 = batch.magic >= 2
    last_sequence = -1 if batch.base_sequence < 0 else _increment_sequence(batch.base_sequence,
                                                                            batch.last_offset_delta)
    horizon = batch.base_timestamp if v2 and batch.attributes & 0x40 else None
    return {"base_offset": batch.base_offset, "last_offset": batch.last_offset,
            "count": batch.record_count if v2 else None, "base_sequence": batch.base_sequence,
            "last_sequence": last_sequence, "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
            "partition_leader_epoch": batch.partition_leader_epoch, "is_transactional": batch.is_transactional,
            "is_control": batch.is_control, "delete_horizon_ms": horizon, "position": position,
            "timestamp_type": batch.timestamp_type, "max_timestamp": batch.max_timestamp,
            "size": batch.size_bytes, "magic": batch.magic, "compression": batch.compression,
            "crc": batch.crc, "is_valid": batch.is_valid()}


def _batch_line(f: dict) -> str:
    if f["magic"] >= 2:
        horizon = "OptionalLong.empty" if f["delete_horizon_ms"] is None else f"OptionalLong[{f['delete_horizon_ms']}]"
        head = (f"baseOffset: {f['base_offset']} lastOffset: {f['last_offset']} count: {f['count']} "
                f"baseSequence: {f['base_sequence']} lastSequence: {f['last_sequence']} "
                f"producerId: {f['producer_id']} producerEpoch: {f['producer_epoch']} "
                f"partitionLeaderEpoch: {f['partition_leader_epoch']} "
                f"isTransactional: {str(f['is_transactional']).lower()} isControl: {str(f['is_control']).lower()} "
                f"deleteHorizonMs: {horizon}")
    else:
        head = f"offset: {f['last_offset']}"
    return (f"{head} position: {f['position']} {f['timestamp_type']}: {f['max_timestamp']} size: {f['size']} "
            f"magic: {f['magic']} compresscodec: {f['compression']} crc: {f['crc']} "
            f"isvalid: {str(f['is_valid']).lower()}")


def _legacy_record_crcs(batch) -> list[tuple[int, bool]]:
    """(stored crc, valid) of each legacy message: the message itself, or a wrapper's inner ones."""
    view = batch.view

    def own(data) -> tuple[int, bool]:
        (size,) = struct.unpack_from(">i", data, 8)
        (crc,) = struct.unpack_from(">I", data, 12)
        return crc, zlib.crc32(bytes(data[16:12 + size])) & 0xFFFFFFFF == crc

    if not batch.attributes & 7:
        return [own(view)]
    pos = 18 + (8 if batch.magic == 1 else 0)
    (key_length,) = struct.unpack_from(">i", view, pos)
    pos += 4 + max(key_length, 0)
    (value_length,) = struct.unpack_from(">i", view, pos)
    data = decompress(batch.attributes & 7, bytes(view[pos + 4:pos + 4 + value_length]), magic=batch.magic)
    out, pos = [], 0
    while pos + 12 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        if size < 14 or pos + 12 + size > len(data):
            break
        out.append(own(memoryview(data)[pos:pos + 12 + size]))
        pos += 12 + size
    return out


def _control_text(record) -> tuple[str, dict]:
    key = record.key or b""
    if len(key) < 4:
        return " controlType: UNKNOWN(-1)", {"control_type": "UNKNOWN"}
    type_id = struct.unpack_from(">h", key, 2)[0]
    name = _CONTROL_TYPES.get(type_id, "UNKNOWN")
    if type_id in (0, 1) and record.value is not None and len(record.value) >= 6:
        coordinator_epoch = struct.unpack_from(">i", record.value, 2)[0]
        return (f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}",
                {"control_type": name, "coordinator_epoch": coordinator_epoch})
    return f" controlType: {name}({type_id})", {"control_type": name}


def _record_lines(batch, args, out_json: list | None, emit) -> list[int]:
    """Kafka's deep-iteration lines of one batch; returns the record offsets."""
    records = batch.records()
    legacy_crcs = _legacy_record_crcs(batch) if batch.magic < 2 else None
    offsets = []
    for i, record in enumerate(records):
        offsets.append(record.offset)
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        item = {"offset": record.offset, "timestamp": record.timestamp, "key_size": key_size,
                "value_size": value_size}
        # Kafka's layout exactly: "| offset: ..." then " key: ..." and " payload: ..."; with
        # --skip-record-metadata the key takes the "| " prefix (and a line without one starts
        # with " payload").
        text, prefix = "", "| "
        if not args.skip_record_metadata:
            text += (f"{prefix}offset: {record.offset} {batch.timestamp_type}: {record.timestamp} "
                     f"keySize: {key_size} valueSize: {value_size}")
            prefix = " "
            if batch.magic >= 2:
                sequence = -1 if batch.base_sequence < 0 else _increment_sequence(
                    batch.base_sequence, record.offset - batch.base_offset)
                keys = [k for k, _v in record.headers]
                text += f" sequence: {sequence} headerKeys: [{','.join(keys)}]"
                item.update(sequence=sequence, header_keys=keys)
            else:
                crc, valid = legacy_crcs[i] if legacy_crcs and i < len(legacy_crcs) else (batch.crc, True)
                text += f" crc: {crc} isvalid: {str(valid).lower()}"
                item.update(crc=crc, is_valid=valid)
            if batch.is_control:
                control, fields = _control_text(record)
                text += control
                item.update(fields)
        if args.print_data_log and not batch.is_control:
            if record.key is not None:
                key = record.key.decode("utf-8", "replace")
                text += f"{prefix}key: {key}"
                prefix = " "
                item["key"] = key
            if record.value is not None:
                payload = record.value.decode("utf-8", "replace")
                text += f" payload: {payload}"
                item["payload"] = payload
        if out_json is not None:
            out_json.append(item)
        else:
            emit(text)
    return offsets


class _Dump:
    """One run of dump-log: streams text to stdout (or gathers JSON), collects the errors that
    Kafka's tool prints at the end on stderr."""

    def __init__(self, args):
        self.args = args
        self.json = [] if args.json else None
        self.problems = 0
        self.index_mismatches: dict[str, list] = {}
        self.time_errors: list[str] = []
        self.non_consecutive: dict[str, list] = {}

    def emit(self, line: str) -> None:
        print(line)

    def error(self, message: str, doc: dict | None) -> None:
        self.problems += 1
        if doc is not None:
            doc.setdefault("errors", []).append(message)
        else:
            sys.stdout.flush()
            print(f"error: {message}", file=sys.stderr)

    def run(self, files: list[str]) -> int:
        for name in files:
            doc = {"file": name} if self.json is not None else None
            if doc is None:
                self.emit(f"Dumping {name}")
            base = os.path.basename(name)
            try:
                if os.path.isdir(name):
                    self.error(f"{name}: is a directory (dump-log takes files; verify takes log dirs)", doc)
                elif not os.path.isfile(name):
                    self.error(f"{name}: no such file", doc)
                elif base.endswith(LOG_SUFFIX):
                    self.dump_log(name, doc)
                elif base.endswith(TIME_INDEX_SUFFIX):
                    self.dump_time_index(name, doc)
                elif base.endswith(INDEX_SUFFIX):
                    self.dump_index(name, doc)
                elif base.endswith(SNAPSHOT_SUFFIX):
                    self.dump_snapshot(name, doc)
                elif base.startswith(CHECKPOINT_FILE):
                    self.dump_epochs(name, doc)
                else:
                    if doc is not None:
                        doc["kind"] = "unknown"
                        doc.setdefault("errors", []).append(f"{name}: ignoring unknown file")
                    else:
                        print(f"Ignoring unknown file {name}", file=sys.stderr)
            except errors.StorageError as exc:
                self.error(str(exc), doc)
            except BrokenPipeError:
                raise
            except OSError as exc:
                self.error(f"{name}: {exc.strerror or exc}", doc)
            if doc is not None:
                self.json.append(doc)
        if self.json is not None:
            _print_json({"ok": self.problems == 0, "files": self.json})
        else:
            sys.stdout.flush()
            for file, pairs in self.index_mismatches.items():
                print(f"Mismatches in :{file}", file=sys.stderr)
                for index_offset, log_offset in pairs:
                    print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=sys.stderr)
            for line in self.time_errors:
                print(line, file=sys.stderr)
            for file, pairs in self.non_consecutive.items():
                print(f"Non-consecutive offsets in {file}", file=sys.stderr)
                for first, second in pairs:
                    print(f"  {first} is followed by {second}", file=sys.stderr)
        return PROBLEMS if self.problems else OK

    # ---- .log
    def dump_log(self, name: str, doc: dict | None) -> None:
        args = self.args
        stem = os.path.basename(name).split(".")[0]
        start = int(stem) if stem.isdigit() else None
        if doc is not None:
            doc.update(kind="log", log_starting_offset=start, batches=[])
        elif start is not None:
            self.emit(f"Log starting offset: {start}")
        data = _map_file(name)
        deep = args.deep_iteration or args.print_data_log
        valid_bytes, last_offset, structural = 0, -1, False
        gaps = []
        bar = _progress(len(data), os.path.basename(name), not args.no_progress and
                        (doc is not None or not sys.stdout.isatty()))
        try:
            for batch in iter_batches(data, verify=False, source=name):
                fields = _batch_fields(batch, valid_bytes)
                if not fields["is_valid"]:
                    self.problems += 1
                if doc is not None:
                    doc["batches"].append(fields)
                else:
                    self.emit(_batch_line(fields))
                if deep:
                    try:
                        records = [] if doc is not None else None
                        for offset in _record_lines(batch, args, records, self.emit):
                            if last_offset != -1 and offset != last_offset + 1:
                                gaps.append((last_offset, offset))
                            last_offset = offset
                        if doc is not None:
                            fields["records"] = records
                    except errors.StorageError as exc:
                        self.error(str(exc), doc)
                valid_bytes += batch.size_bytes
                bar.update(batch.size_bytes)
        except errors.StorageError as exc:
            structural = True
            self.error(str(exc), doc)
        finally:
            bar.close()
        trailing = len(data) - valid_bytes
        if doc is not None:
            doc["trailing_bytes"] = trailing
            doc["non_consecutive_offsets"] = [list(g) for g in gaps]
        if gaps:
            self.non_consecutive[name] = gaps
        if trailing > 0 and not structural:
            message = f"Found {trailing} invalid bytes at the end of {os.path.basename(name)}"
            self.problems += 1
            if doc is None:
                self.emit(message)

    def _sanity_result(self, name: str, problem: str | None, doc) -> None:
        if problem:
            self.error(problem, doc)
        elif doc is not None:
            doc["sanity_check"] = "passed"
        else:
            self.emit(f"{name} passed sanity check.")

    def _log_batches(self, index_path: str, suffix: str, base: int, entries, time_index: bool):
        """The batches of the index's .log that its entries name: (SegmentScan or None, .log path).
        Only their rows and an array of every batch's last offset are kept."""
        log_path = index_path[: -len(suffix)] + LOG_SUFFIX
        if not os.path.exists(log_path):
            return None, log_path
        seg = SegmentScan(base, log_path)
        seg.lasts = array("q")
        if time_index:
            positions, lasts = (), {base + relative for _t, relative in entries}
        else:
            positions = {position for _relative, position in entries}
            lasts = {base + relative for relative, _position in entries}
        try:
            for i, b in enumerate(iter_batches(_map_file(log_path), verify=False, source=log_path)):
                seg.lasts.append(b.last_offset)
                if b.position in positions or b.last_offset in lasts:
                    row = BatchRow(b.position, b.base_offset, b.last_offset, -1, b.magic, b.crc, True, b.size_bytes,
                                   b.max_timestamp)
                    if b.position in positions:
                        seg.at_position[b.position] = (i, row)
                    if b.last_offset in lasts:
                        seg.ending_at[b.last_offset] = (i, row)
        except errors.StorageError:
            pass    # entries past a corrupt batch are reported as not found
        return seg, log_path

    def _index_base(self, name: str, suffix: str) -> int:
        stem = os.path.basename(name)[: -len(suffix)]
        if not stem.isdigit():
            raise errors.StorageError("an index file is named by its segment's 20-digit base offset", file=name)
        return int(stem)

    # ---- .index
    def dump_index(self, name: str, doc: dict | None) -> None:
        args = self.args
        base = self._index_base(name, INDEX_SUFFIX)
        entries, _unused, data = _read_index(name, _OFFSET_ENTRY)
        if doc is not None:
            doc.update(kind="index", base_offset=base, entries=[], mismatches=[])
        slots = len(data) // _OFFSET_ENTRY.size
        if slots == 0 and not len(data) % _OFFSET_ENTRY.size:
            if doc is not None:
                doc["empty"] = True
            else:
                self.emit(f"{name} is empty.")
            return
        if args.index_sanity_check:
            problem = None
            if len(data) % _OFFSET_ENTRY.size:
                problem = (f"Index file {name} is corrupt, found {len(data)} bytes which is neither positive nor "
                           f"a multiple of 8")
            else:
                last = base + _OFFSET_ENTRY.unpack_from(data, (slots - 1) * 8)[0]
                if last < base:
                    problem = (f"Corrupt index found, index file ({name}) has non-zero size but the last offset "
                               f"is {last} which is less than the base offset {base}")
            self._sanity_result(name, problem, doc)
            return
        seg, log_path = self._log_batches(name, INDEX_SUFFIX, base, entries, False)
        if seg is None:
            self.error(f"{log_path}: no such file (the index cannot be checked against it)", doc)
        mismatches = []
        for relative, position in entries:
            offset = base + relative
            if seg is not None:
                # Kafka's tool wants the batch at the position to end at the entry's offset; an
                # appended chunk of several batches (a follower's fetch) is indexed by its last
                # offset, so a batch at or after the position ending there is accepted too.
                at = seg.at_position.get(position)
                ending = seg.ending_at.get(offset)
                if at is None or ending is None or ending[0] < at[0]:
                    mismatches.append((offset, at[1].last_offset if at is not None else -1))
            if doc is not None:
                doc["entries"].append({"offset": offset, "position": position})
            elif not args.verify_index_only:
                self.emit(f"offset: {offset} position: {position}")
        if mismatches:
            self.problems += 1
            if doc is not None:
                doc["mismatches"] = [{"index_offset": a, "log_offset": b} for a, b in mismatches]
            else:
                self.index_mismatches[os.path.abspath(name)] = mismatches

    # ---- .timeindex
    def dump_time_index(self, name: str, doc: dict | None) -> None:
        args = self.args
        base = self._index_base(name, TIME_INDEX_SUFFIX)
        entries, _unused, data = _read_index(name, _TIME_ENTRY)
        if doc is not None:
            doc.update(kind="timeindex", base_offset=base, entries=[], mismatches=[])
        if args.index_sanity_check:
            slots = len(data) // _TIME_ENTRY.size
            problem = None
            if slots:
                last_ts, last_rel = _TIME_ENTRY.unpack_from(data, (slots - 1) * 12)
                first_ts = _TIME_ENTRY.unpack_from(data, 0)[0]
                if last_ts < first_ts:
                    problem = (f"Corrupt time index found, time index file ({name}) has non-zero size but the last "
                               f"timestamp is {last_ts} which is less than the first timestamp {first_ts}")
                elif base + last_rel < base:
                    problem = (f"Corrupt time index found, time index file ({name}) has non-zero size but the last "
                               f"offset is {base + last_rel} which is less than the first offset {base}")
            if not problem and len(data) % _TIME_ENTRY.size:
                problem = (f"Time index file {name} is corrupt, found {len(data)} bytes which is neither positive "
                           f"nor a multiple of 12")
            self._sanity_result(name, problem, doc)
            return
        seg, log_path = self._log_batches(name, TIME_INDEX_SUFFIX, base, entries, True)
        if seg is None:
            self.error(f"{log_path}: no such file (the time index cannot be checked against it)", doc)
        previous = -1
        mismatch, out_of_order, not_found = [], [], []
        for timestamp, relative in entries:
            offset = base + relative
            if seg is not None:
                ending = seg.ending_at.get(offset)
                batch = ending[1] if ending is not None else None
                if batch is None:
                    later = bisect_left(seg.lasts, offset)
                    not_found.append((offset, seg.lasts[later] if later < len(seg.lasts) else -1))
                else:
                    if batch.max_timestamp != timestamp:
                        mismatch.append((timestamp, batch.max_timestamp))
                    if previous >= timestamp:
                        out_of_order.append((timestamp, previous))
            if doc is not None:
                doc["entries"].append({"timestamp": timestamp, "offset": offset})
            elif not args.verify_index_only:
                self.emit(f"timestamp: {timestamp} offset: {offset}")
            previous = timestamp
        if mismatch or out_of_order or not_found:
            self.problems += 1
        if doc is not None:
            doc["mismatches"] = [{"index_timestamp": a, "log_timestamp": b} for a, b in mismatch]
            doc["out_of_order"] = [{"index_timestamp": a, "previous_timestamp": b} for a, b in out_of_order]
            doc["offsets_not_found"] = [{"indexed_offset": a, "log_offset": b} for a, b in not_found]
            return
        path = os.path.abspath(name)
        if mismatch:
            self.time_errors.append(f"Found timestamp mismatch in :{path}")
            self.time_errors += [f"  Index timestamp: {a}, log timestamp: {b}" for a, b in mismatch]
        if out_of_order:
            self.time_errors.append(f"Found out of order timestamp in :{path}")
            self.time_errors += [f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in out_of_order]
        if not_found:
            self.time_errors.append("The following indexed offsets are not found in the log.")
            self.time_errors += [f"Indexed offset: {a}, found log offset: {b}" for a, b in not_found]

    # ---- leader-epoch-checkpoint (not in Kafka's tool)
    def dump_epochs(self, name: str, doc: dict | None) -> None:
        entries = [(int(e), int(o)) for e, o in checkpoint.read(name, 2)]
        if doc is not None:
            doc.update(kind="leader-epoch-checkpoint", version=checkpoint.VERSION, entries=_entries(entries))
            return
        self.emit(f"version: {checkpoint.VERSION} entries: {len(entries)}")
        for epoch, offset in entries:
            self.emit(f"epoch: {epoch} startOffset: {offset}")

    # ---- producer-state snapshot (Kafka's ProducerStateManager format, version 1)
    def dump_snapshot(self, name: str, doc: dict | None) -> None:
        with open(name, "rb") as f:
            data = f.read()
        if len(data) < 10:
            raise errors.CorruptRecordError(f"producer snapshot of {len(data)} bytes is too short", file=name)
        version, crc, count = struct.unpack_from(">hIi", data, 0)
        from ._native import ffi, lib

        computed = lib.plog_crc32c(0, ffi.from_buffer(data[6:]), len(data) - 6)
        if computed != crc:
            raise errors.CorruptRecordError(f"producer snapshot CRC mismatch (stored 0x{crc:08x}, "
                                            f"computed 0x{computed:08x})", file=name, position=2)
        entry = struct.Struct(">qhiqiqiq")
        producers = []
        for i in range(count):
            pos = 10 + i * entry.size
            if pos + entry.size > len(data):
                raise errors.CorruptRecordError(f"producer snapshot entry {i} is cut short", file=name, position=pos)
            pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn_first = \
                entry.unpack_from(data, pos)
            producers.append({"producer_id": pid, "producer_epoch": epoch, "coordinator_epoch": coordinator_epoch,
                              "current_txn_first_offset": txn_first, "last_timestamp": timestamp,
                              "first_sequence": last_seq - delta, "last_sequence": last_seq,
                              "last_offset": last_offset, "offset_delta": delta, "timestamp": timestamp})
        if doc is not None:
            doc.update(kind="snapshot", version=version, producers=producers)
            return
        for p in producers:
            self.emit(f"producerId: {p['producer_id']} producerEpoch: {p['producer_epoch']} coordinatorEpoch: "
                      f"{p['coordinator_epoch']} currentTxnFirstOffset: {p['current_txn_first_offset']} lastTimestamp: "
                      f"{p['last_timestamp']} firstSequence: {p['first_sequence']} lastSequence: {p['last_sequence']} "
                      f"lastOffset: {p['last_offset']} offsetDelta: {p['offset_delta']} timestamp: {p['timestamp']}")


def cmd_dump_log(args) -> int:
    files = [f for item in args.files for f in item.split(",") if f]
    if not files:
        raise UsageError("--files needs at least one file")
    return _Dump(args).run(files)


# ---- demo -----------------------------------------------------------------------------------------

DEMO_TOPIC = "orders"
DEMO_BROKERS = (1, 2, 3)


def _say(text: str = "") -> None:
    print(text, flush=True)


class DemoError(RuntimeError):
    """The simulated cluster did not do what the story expected (a bug, not a user error)."""


def _hosted_hw(log_dir: str, topic: str, partition: int) -> int | None:
    return log_dir_offsets(log_dir)[0].get((topic, partition), {}).get("high_watermark")


def local_comparison(log_dirs: list[str]) -> tuple[str, list[dict]]:
    """The fleet audit's question without Spark: per topic-partition and replica, the log end
    offset, high watermark, epoch lineage and checkpoint agreement, and the first offset at which
    the replicas' batches differ (base offset, last offset and CRC compared where two replicas'
    ranges overlap).  Returns (table text, one dict per partition)."""
    replicas: dict[tuple[str, int], list[PartitionScan]] = {}
    for d in log_dirs:
        offsets, _source, _warnings = log_dir_offsets(d)
        for log_dir, topic, partition, path in partition_dirs(d):
            replicas.setdefault((topic, partition), []).append(
                scan_partition(log_dir, topic, partition, path, offsets=offsets, keep_rows=True))
    results = []
    rows = []
    for (topic, partition), scans in sorted(replicas.items()):
        maps = [{b.base_offset: (b.last_offset, b.crc, b.valid) for b in s.batches()} for s in scans]
        first = None
        for offset in sorted(set().union(*maps)):
            covering = [m for m, s in zip(maps, scans) if s.log_start_offset <= offset < s.log_end_offset]
            if len(covering) > 1 and len({m.get(offset) for m in covering}) > 1:
                first = offset
                break
        watermarks = [s.high_watermark for s in scans if s.high_watermark is not None]
        hw = max(watermarks) if watermarks else None
        behind = [s for s in scans if hw is not None and s.log_end_offset < hw]
        if behind:
            lowest = min(s.log_end_offset for s in behind)
            first = lowest if first is None else min(first, lowest)
        problems = sum(len(s.problems) for s in scans)
        verdict = "corrupt" if problems else "consistent" if first is None else \
            "divergent_below_hw" if hw is None or first < hw else "divergent_above_hw"
        results.append({"topic": topic, "partition": partition, "verdict": verdict, "high_watermark": hw,
                        "first_divergent_offset": first,
                        "replicas": [s.to_json() for s in scans]})
        for i, s in enumerate(scans):
            agreement = {True: "agrees", False: "DISAGREES", None: "-"}[s.agrees]
            rows.append((f"{topic}-{partition}" if i == 0 else "", os.path.basename(s.log_dir),
                         str(s.log_end_offset), "?" if s.high_watermark is None else str(s.high_watermark),
                         str(s.batch_count), _lineage_text(s.lineage_pairs), agreement,
                         str(len(s.problems)), (verdict if i == 0 else ""),
                         ("-" if first is None else str(first)) if i == 0 else ""))
    header = ("TOPIC-PARTITION", "LOG DIR", "LEO", "HW", "BATCHES", "EPOCHS (epoch@start)", "CHECKPOINT",
              "PROBLEMS", "VERDICT", "FIRST DIVERGENT")
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    text = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows)
    return text, results


class _DemoStory:
    """The cluster story, step by step; every number it prints is read from the cluster."""

    def __init__(self, root: str):
        from .cluster import Cluster
        from .log import LogConfig

        self.root = root
        self.hook_calls: list = []
        self.epoch_answers: list = []
        config = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=1024, fsync=False)
        self.cluster = Cluster(root, len(DEMO_BROKERS), seed=20240611, config=config, min_insync_replicas=2,
                               unclean_leader_election=False, recovery_hook=self._recovery_hook,
                               fetcher_options={"truncate_on_fetch": False})
        self.sent = 0

    # ---- helpers
    def _recovery_hook(self, partition) -> bool:
        self.hook_calls.append(partition.key)
        return False            # finishes later: complete_leader_recovery (KIP-704)

    def state(self):
        return self.cluster.state(DEMO_TOPIC, 0)

    def log(self, broker: int):
        return self.cluster.log(broker, DEMO_TOPIC, 0)

    def run_until(self, what: str, predicate, max_ms: int = 30_000) -> None:
        if not self.cluster.run_until(predicate, max_ms):
            raise DemoError(f"timed out waiting until {what} (simulated {max_ms} ms)")

    def describe(self) -> str:
        s = self.state()
        from .messages import RECOVERING

        leader = "none" if s.leader < 0 else str(s.leader)
        elr = getattr(s, "elr", None)
        extra = f", ELR {elr}" if elr else ""
        extra += ", RECOVERING" if s.leader_recovery_state == RECOVERING else ""
        return f"leader {leader}, leader epoch {s.leader_epoch}, ISR {s.isr}{extra}"

    def ends(self, brokers=DEMO_BROKERS) -> str:
        return ", ".join(f"broker {b} {self.log(b).log_end_offset}" for b in brokers
                         if self.cluster.brokers[b].alive)

    def produce(self, batches: int, *, acks: int = -1):
        from .records import Record

        responses = []
        for _ in range(batches):
            n = self.sent
            records = [Record(key=b"customer-%d" % ((n * 3 + k) % 7),
                              value=b'{"order": %d, "amount": %d}' % (n * 3 + k, 5 + (n * 3 + k) % 50))
                       for k in range(3)]
            response = self.cluster.produce(DEMO_TOPIC, 0, records, acks=acks, max_ms=5_000)
            responses.append(response)
            if response.error_code:
                break
            self.sent += 1
        return responses

    def produce_ok(self, batches: int) -> None:
        from .messages import error_name

        for response in self.produce(batches):
            if response.error_code:
                raise DemoError(f"produce failed: {error_name(response.error_code)}")

    def flush(self, broker: int) -> int:
        manager = self.cluster.brokers[broker].manager
        manager.logdir.flush()
        return self.log(broker).recovery_point

    def trace_offset_for_leader_epoch(self, leader: int) -> None:
        manager = self.cluster.brokers[leader].manager
        original = manager.handle_offset_for_leader_epoch

        def traced(request):
            response = original(request)
            for asked, answered in zip(request.partitions, response.partitions):
                self.epoch_answers.append((request.replica_id, asked.leader_epoch, answered))
            return response

        manager.handle_offset_for_leader_epoch = traced

    # ---- the story
    def run(self) -> None:
        from .errors import Errors
        from .messages import RECOVERED, RECOVERING, error_name

        c = self.cluster
        _say("1. A controller and three brokers start in this process, each broker on its own log dir; "
             "messages between them go over a simulated network with a simulated clock.")
        c.create_partition(DEMO_TOPIC, 0, list(DEMO_BROKERS))
        # A new leader counts its followers as caught up only once they have fetched (the ISR
        # dips to [1] on its first tick): let the ISR settle before the first acks=all write.
        c.run(250)
        self.run_until("the ISR settled", lambda: len(self.state().isr) == 3
                       and c.replicas_caught_up(DEMO_TOPIC, 0) and self.state().leader == 1)
        _say(f"   Topic {DEMO_TOPIC}, partition 0, replicas [1, 2, 3], min.insync.replicas=2, unclean leader "
             f"election off: {self.describe()}.")

        self.produce_ok(20)
        self.run_until("the followers caught up", lambda: c.replicas_caught_up(DEMO_TOPIC, 0))
        points = [self.flush(b) for b in DEMO_BROKERS]
        _say(f"2. The producer sends {self.sent} batches of 3 records with acks=all: each is acknowledged once "
             f"every ISR member has it.")
        _say(f"   Log end offsets: {self.ends()}; high watermark {self.log(1).high_watermark}. Every broker "
             f"flushes (fsync): recovery points {points}.")

        c.brokers[3].crash()
        self.run_until("broker 3 left the ISR", lambda: 3 not in self.state().isr)
        _say(f"3. Broker 3's process dies; its disk keeps offsets 0..{self.log(1).log_end_offset - 1}. Its "
             f"session expires, the controller fences it and shrinks the ISR: {self.describe()}.")
        self.produce_ok(10)
        point1 = self.flush(1)
        self.produce_ok(10)
        point2 = self.flush(2)
        self.produce_ok(5)
        hw = self.log(1).high_watermark
        lost_from = points[2]
        _say(f"   {self.sent - 20} more acks=all batches go to brokers 1 and 2: {self.ends((1, 2))}, high "
             f"watermark {hw}. Broker 1 last flushed at offset {point1}, broker 2 at {point2}; the rest is in "
             f"their page caches only.")

        before = {b: self.log(b).log_end_offset for b in (1, 2)}
        c.brokers[1].crash(lose_unflushed=True)
        c.brokers[2].crash(lose_unflushed=True)
        _say(f"4. Power loss on brokers 1 and 2: both processes die and their page caches are gone. On disk "
             f"broker 1 keeps {point1} of its {before[1]} offsets, broker 2 {point2} of {before[2]}.")
        self.run_until("brokers 1 and 2 fenced", lambda: all(c.controller.brokers[b].fenced for b in (1, 2))
                       and self.state().leader < 0)
        s = self.state()
        if getattr(s, "elr", None):
            why = ("KIP-966: the ISR fell below min.insync.replicas, so the brokers that left it keep their "
                   "eligibility in the ELR -- the high watermark cannot have passed what they hold")
        elif s.isr:
            why = "the last ISR member stays in the ISR, so the controller remembers who had the committed data"
        else:
            why = "no replica is known to hold all the committed data"
        _say(f"   Their sessions expire; the controller fences both: {self.describe()} ({why}).")

        c.brokers[3].start()
        self.run_until("broker 3 registered", lambda: c.brokers[3].registered
                       and not c.controller.brokers[3].fenced)
        c.run(200)
        leader_log = self.log(3)
        s = self.state()
        eligible = "the ISR or the ELR" if getattr(s, "elr", None) is not None else "the ISR"
        _say(f"5. Broker 3 comes back with offsets 0..{leader_log.log_end_offset - 1} (epoch 0). It is not in "
             f"{eligible}, so no clean election is possible: {self.describe()} -- the partition is offline.")
        code = c.controller.elect_leader(DEMO_TOPIC, 0, unclean=True)
        c.controller_node.publish()
        self.run_until("broker 3 leads", lambda: c.brokers[3].manager.partition_state(DEMO_TOPIC, 0) is not None
                       and c.brokers[3].manager.partition_state(DEMO_TOPIC, 0).leader == 3)
        if code != Errors.NONE or self.state().leader_recovery_state != RECOVERING:
            raise DemoError(f"the unclean election did not happen ({error_name(code)})")
        _say(f"   The operator runs an unclean election: {self.describe()} (KIP-704). The new leader's "
             f"recovery hook was called for {', '.join(f'{t}-{p}' for t, p in self.hook_calls)}; "
             f"it is still working.")
        refused = self.produce(1, acks=1)[0]
        _say(f"   While RECOVERING the leader refuses produce, fetch and OffsetForLeaderEpoch: a produce gets "
             f"{error_name(refused.error_code)}.")
        c.brokers[3].manager.complete_leader_recovery(DEMO_TOPIC, 0)
        self.run_until("RECOVERED", lambda: self.state().leader_recovery_state == RECOVERED)
        _say(f"   The hook finishes; the leader sends AlterPartition(RECOVERED) and the controller accepts it: "
             f"{self.describe()}, partition epoch {self.state().partition_epoch}.")
        _say(f"   The price of the unclean election: offsets {lost_from}..{hw - 1} -- {hw - lost_from} records "
             f"acknowledged with acks=all -- are not on the new leader and will be truncated everywhere.")
        refused = self.produce(1)[0]
        _say(f"   With the ISR at [3] < min.insync.replicas=2, an acks=all produce gets "
             f"{error_name(refused.error_code)}.")

        self.trace_offset_for_leader_epoch(3)
        c.brokers[1].start()
        after_restart = self.log(1).log_end_offset
        epochs_before = [tuple(e) for e in self.log(1).epoch_cache.entries]
        self.run_until("broker 1 in the ISR", lambda: 1 in self.state().isr)
        _say(f"6. Broker 1 restarts. Its recovery finds its log ending at {after_restart} (epochs "
             f"{_lineage_text(epochs_before)}).")
        for replica, epoch, answer in [a for a in self.epoch_answers if a[0] == 1][:2]:
            error = f" ({error_name(answer.error_code)})" if answer.error_code else ""
            _say(f"   It asks the leader OffsetForLeaderEpoch(epoch {epoch}) -> epoch {answer.leader_epoch}, end "
                 f"offset {answer.end_offset}{error}.")
        for _t, _p, offset in c.brokers[1].manager.fetcher.truncations:
            _say(f"   It truncates its log from {after_restart} to {offset} (everything after epoch 0 ended on "
                 f"the leader), fetches epoch {self.state().leader_epoch} and rejoins: {self.describe()}.")
        self.produce_ok(5)
        _say(f"   acks=all works again: 5 new batches in epoch {self.state().leader_epoch}, {self.ends((1, 3))}, "
             f"high watermark {self.log(3).high_watermark}.")

        manager = c.brokers[3].manager
        held: list = []

        def delayed():      # the network holds the leader's AlterPartition that adds broker 2
            out = []
            for request in type(manager).take_alter_partition_requests(manager):
                if 2 in request.new_isr:
                    if not held:
                        held.append(request)
                else:
                    out.append(request)
            return out

        manager.take_alter_partition_requests = delayed
        c.brokers[2].start()
        after_restart = self.log(2).log_end_offset
        self.run_until("the leader asked to add broker 2", lambda: bool(held))
        truncated = [o for _t, _p, o in c.brokers[2].manager.fetcher.truncations]
        answer = [a for a in self.epoch_answers if a[0] == 2][:1]
        request = held[0]
        old_epoch = {e.broker_id: e.broker_epoch for e in request.new_isr_with_epochs}[2]
        _say(f"7. Broker 2 restarts with its log ending at {after_restart}"
             + (f"; OffsetForLeaderEpoch(epoch {answer[0][1]}) -> end offset {answer[0][2].end_offset}" if answer
                else "")
             + (f"; it truncates to {truncated[0]}" if truncated else "")
             + f" and catches up to {self.log(2).log_end_offset}.")
        _say(f"   The leader sends AlterPartition to add it (ISR {request.new_isr}, broker 2 at broker epoch "
             f"{old_epoch}); the network holds that request back.")
        c.brokers[2].crash()
        c.brokers[2].start(wipe=True)
        self.run_until("broker 2 registered again", lambda: c.brokers[2].registered)
        new_epoch = c.controller.brokers[2].broker_epoch
        _say(f"   Meanwhile broker 2 gets a new, empty disk and restarts: a new incarnation, broker epoch "
             f"{new_epoch}, log end offset {self.log(2).log_end_offset}.")
        del manager.take_alter_partition_requests
        response = c.controller.handle_alter_partition(request)
        manager.handle_alter_partition_response(request, response)
        c.controller_node.publish()
        _say(f"   The stale AlterPartition arrives: the controller answers {error_name(response.error_code)} "
             f"(KIP-903: broker 2 is at epoch {new_epoch}, not {old_epoch}); {self.describe()}. Accepting it "
             f"would have put an empty replica in the ISR.")
        self.run_until("every replica in the ISR", lambda: c.replicas_caught_up(DEMO_TOPIC, 0)
                       and len(self.state().isr) == 3, 60_000)
        _say(f"   Broker 2 re-fetches everything from offset 0 and joins with its new epoch: {self.describe()}.")

        logs = {b: c.batches(b, DEMO_TOPIC, 0) for b in DEMO_BROKERS}
        if not logs[1] == logs[2] == logs[3]:
            raise DemoError("the replicas did not converge")
        epochs = {b: _lineage_text([tuple(e) for e in self.log(b).epoch_cache.entries]) for b in DEMO_BROKERS}
        _say(f"8. All three replicas hold the same {len(logs[1])} batches (offsets 0..{self.log(3).log_end_offset - 1},"
             f" CRCs equal); leader-epoch-checkpoint {epochs[3]} on each; high watermark "
             f"{self.log(3).high_watermark}. The brokers shut down cleanly after {c.channel.now / 1000:.1f} s of "
             f"simulated time.")
        c.close()


def _demo_audit(root: str, log_dirs: list[str], spark: bool, master: str) -> int:
    names = ", ".join(os.path.basename(d) for d in log_dirs)
    reason = None
    if not spark:
        reason = "--no-spark"
    else:
        try:
            from .spark.audit import main as audit_main
            from .spark.session import java_problem, pyspark_problem

            reason = pyspark_problem() or java_problem()
        except ImportError as exc:
            reason = f"storage.spark is not installed ({exc}); pip install 'kafka-partition-storage[spark]'"
    if reason is None:
        from .spark.session import create_session

        _say(f"9. The fleet audit over {names}: a Spark job ({master}) reads every segment, compares the "
             f"replicas batch by batch and checks each epoch lineage.")
        out = os.path.join(root, "audit-out")
        started = time.monotonic()
        spark = None
        try:
            with _Spinner("   starting Spark"):
                spark = create_session(master)
            _say(f"   Spark {spark.version} started in {time.monotonic() - started:.1f} s.")
            code = audit_main([*log_dirs, "--master", master, "--out", out])
        except Exception as exc:        # Spark failing must not hide the story's end
            code, reason = 2, f"the Spark audit failed: {type(exc).__name__}: {exc}"
        finally:
            if spark is not None:
                spark.stop()
        if code != 2:
            return code
        reason = reason or "the Spark audit could not run (see above)"
    _say(f"9. The fleet audit without Spark ({reason}): the replicas compared here, batch by batch:")
    text, results = local_comparison(log_dirs)
    _say(text)
    return 1 if any(r["verdict"] != "consistent" for r in results) else 0


def run_demo(directory: str | None, *, spark: bool = True, master: str = "local[2]") -> int:
    started = time.monotonic()
    owned = directory is None
    root = tempfile.mkdtemp(prefix="storage-demo-") if owned else os.path.abspath(directory)
    os.makedirs(root, exist_ok=True)
    for name in [f"broker-{b}" for b in DEMO_BROKERS] + ["controller", "audit-out"]:
        if os.path.exists(os.path.join(root, name)):
            shutil.rmtree(os.path.join(root, name))
    try:
        _say(f"storage demo: log dirs under {root}")
        try:
            _DemoStory(root).run()
        except DemoError as exc:
            print(f"error: demo: {exc}", file=sys.stderr)
            return PROBLEMS
        log_dirs = [os.path.join(root, f"broker-{b}") for b in DEMO_BROKERS]
        code = _demo_audit(root, log_dirs, spark, master)
        kept = " (its temporary directory is removed; keep the log dirs with --dir DIR)" if owned else \
            f"; files kept in {root} (try: python -m storage verify {log_dirs[0]})"
        _say(f"demo finished in {time.monotonic() - started:.1f} s{kept}")
        return OK if code == 0 else PROBLEMS
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)


# ---- the parser -----------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="storage", description="Kafka-compatible partition-log storage: tools and demo.",
                     epilog="Exit status: 0 ok, 1 problems found (recover: data was cut), 2 usage error.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p, json_help="print one JSON document instead of text"):
        p.add_argument("--json", action="store_true", help=json_help)
        p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    p = sub.add_parser("dump-log", help="print segments, indexes, snapshots and epoch checkpoints as Kafka's "
                                        "kafka-dump-log does",
                       description="Kafka's kafka-dump-log (DumpLogSegments) output for .log, .index, .timeindex "
                                   "and .snapshot files, plus leader-epoch-checkpoint files.")
    p.add_argument("--files", nargs="+", required=True, metavar="FILE",
                   help="files to dump (space or comma separated)")
    p.add_argument("--print-data-log", action="store_true",
                   help="print the records' keys and payloads (implies --deep-iteration)")
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only batch headers")
    p.add_argument("--verify-index-only", action="store_true",
                   help="check the index entries against the log without printing them")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="only the index sanity check a broker runs at startup")
    p.add_argument("--skip-record-metadata", action="store_true", help="only keys and payloads on record lines")
    common(p)

    p = sub.add_parser("verify", help="read-only check of a log dir: CRCs, indexes, epoch lineage",
                       description="Check every partition of a log dir (ours or Kafka's) without changing "
                                   "anything: batch sizes, magic and CRC-32C, offsets strictly increasing, torn "
                                   "tails, both indexes of every segment, and the leader-epoch-checkpoint against "
                                   "the epochs found in the batches.  Exit 1 when anything is wrong.")
    p.add_argument("dir", metavar="DIR", help="a broker log dir (or one partition dir)")
    p.add_argument("--quiet", action="store_true", help="problems only, no warnings")
    common(p)

    p = sub.add_parser("recover", help="offline unclean-shutdown recovery, reporting what was truncated",
                       description="Run Kafka's unclean-shutdown recovery on every partition (no clean-shutdown "
                                   "marker needed) from the recovery point the dir records (0 when it records "
                                   "none): CRCs and sizes checked, indexes rebuilt, each log cut at its first "
                                   "invalid batch, later segments deleted, the epoch checkpoint repaired.  Damage "
                                   "below the recovery point is reported and nothing is changed, unless --force.  "
                                   "For a stopped broker only.  Exit 1 when data was cut or a partition refused.")
    p.add_argument("dir", metavar="DIR", help="a broker log dir (or one partition dir)")
    p.add_argument("--dry-run", action="store_true", help="recover copies in a temporary dir; change nothing")
    p.add_argument("--force", action="store_true",
                   help="recover every segment from offset 0 and cut at the first invalid batch even below the "
                        "recovery point (without it, such damage is reported and nothing is changed)")
    p.add_argument("--quiet", action="store_true", help="only what was cut")
    common(p)

    p = sub.add_parser("epochs", help="the leader-epoch-checkpoint next to the epochs found in the batches")
    p.add_argument("dir", metavar="DIR", help="a broker log dir (or the partition dir itself)")
    p.add_argument("partition", metavar="TOPIC-PARTITION", nargs="?", help="e.g. orders-0")
    common(p)

    p = sub.add_parser("demo", help="a three-broker cluster: crashes, an unclean election, truncation, KIP-903, "
                                    "then the fleet audit",
                       description="A controller and three brokers in this process, on log dirs under a temporary "
                                   "directory (or --dir): acks=all writes, two brokers crash and lose their page "
                                   "cache, an unclean election (KIP-704 RECOVERING), followers truncate by "
                                   "OffsetForLeaderEpoch, a stale AlterPartition is rejected (KIP-903), then the "
                                   "fleet audit over the three log dirs (Spark, or a local table).")
    p.add_argument("--dir", help="keep the cluster's files under this directory (default: a temporary one)")
    p.add_argument("--no-spark", action="store_true", help="end with the local comparison table, not Spark")
    p.add_argument("--master", default="local[2]", help="Spark master for the audit (default local[2])")

    sub.add_parser("audit", help="audit broker log dirs with Spark (python -m storage audit --help)",
                   add_help=False)
    return parser


def _audit(argv: list[str]) -> int:
    try:
        from .spark.audit import main as audit_main
    except ImportError as exc:
        print(f"error: the audit needs the [spark] extra (pip install 'kafka-partition-storage[spark]'): {exc}",
              file=sys.stderr)
        return USAGE
    return audit_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "audit":
        # The fleet audit has its own parser (storage/spark/audit.py); Spark is imported only
        # when it runs.
        return _audit(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        print(f"(python -m storage {argv[0] if argv and not argv[0].startswith('-') else ''} --help for help)"
              .replace("  ", " "), file=sys.stderr)
        return USAGE
    except SystemExit as exc:          # --help
        return int(exc.code or 0)
    commands = {"dump-log": cmd_dump_log, "verify": cmd_verify, "recover": cmd_recover, "epochs": cmd_epochs}
    try:
        if args.command == "demo":
            return run_demo(args.dir, spark=not args.no_spark, master=args.master)
        return commands[args.command](args)
    except UsageError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        return USAGE
    except errors.StorageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return PROBLEMS
    except BrokenPipeError:            # `storage dump-log ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return OK
    except OSError as exc:              # unreadable files, a full disk during recover, ...
        where = exc.filename if exc.filename is not None else "I/O"
        print(f"error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return PROBLEMS
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
