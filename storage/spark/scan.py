"""Finding segments in log dirs and turning one segment file into batch and record rows.

Plain Python, no Spark: the `partitionlog` data source (source.py) calls `discover` while
Spark plans a read and `scan_batches` / `scan_records` inside its tasks; the audit
(audit.py) uses `discover` on the driver; tests call all three directly.

What a path given to a read can be (`discover`):
  - a log dir: every `<topic>-<partition>` sub-directory is a partition (Kafka's naming,
    `storage.logdir.parse_partition_dir`; `-delete`, `-future` and `-stray` dirs are skipped);
  - a partition dir, i.e. a directory holding `NNNNNNNNNNNNNNNNNNNN.log` files itself: its
    parent is the log dir, and a name that is not `<topic>-<partition>` gives topic = the name,
    partition = -1;
  - one `.log` segment file;
  - a glob pattern (`/data/broker-*/kafka-logs`) expanded on the planning side.
A segment is a file named by a 20-digit base offset and `.log`; `.deleted`, `.cleaned` and
`.swap` leftovers end differently and are never read.

Rows of one segment (`scan_batches`) follow Kafka's in-memory iteration rules (records.py):
  - every batch that parses yields a row, CRC-valid or not (`crc_valid`), so a CRC failure
    is data, not an exception;
  - a size or magic failure ends the segment: one row with `error` = "corrupt: ..." at the
    failing position (nothing after it can be delimited);
  - bytes after the last whole batch give one row with `error` = "partial_tail: ..." -- a torn
    write, which Kafka's recovery cuts off;
  - a file that cannot be read (gone since planning, no permission) gives one row with
    `error` = "unreadable: ...", so one bad file does not fail a whole job;
  - nothing here opens the file before `scan_*` is called, and nothing is kept open after.

The fingerprint of a batch is xxh3-64 of the bytes its CRC covers: [21, end) of a v2 batch
(attributes .. records, so neither the base offset nor the partition leader epoch), [16, end)
of a v0/v1 message (magic .. value).  It is stored as a signed 64-bit integer (Spark has no
unsigned long): the unsigned digest minus 2**64 when it is >= 2**63.
"""
from __future__ import annotations

import glob
import os
from typing import Iterator, NamedTuple

import xxhash

from .. import errors
from ..logdir import parse_partition_dir
from ..records import iter_batches
from ..segment import segment_base

SEGMENT_SUFFIX = ".log"
_GLOB_CHARS = set("*?[")
_UINT64 = 1 << 64
_INT64_MAX = (1 << 63) - 1

PARTIAL_TAIL = "partial_tail"
CORRUPT = "corrupt"
UNREADABLE = "unreadable"


class SegmentRef(NamedTuple):
    """One segment file of one replica of one topic-partition (picklable)."""

    log_dir: str
    topic: str
    partition: int
    base_offset: int
    path: str
    size_bytes: int
    is_last: bool          # the partition's newest segment (its tail may be torn)


class PartitionRef(NamedTuple):
    """One partition dir (one replica) and its segments, oldest first."""

    log_dir: str
    topic: str
    partition: int
    path: str
    segments: tuple


def _segments_of(path: str) -> list[tuple[int, str, int]]:
    found = []
    with os.scandir(path) as entries:
        for entry in entries:
            base = segment_base(entry.name, SEGMENT_SUFFIX)
            if base is not None and entry.is_file():
                found.append((base, entry.path, entry.stat().st_size))
    found.sort()
    return found


def _is_partition_dir(path: str) -> bool:
    with os.scandir(path) as entries:
        return any(segment_base(e.name, SEGMENT_SUFFIX) is not None and e.is_file() for e in entries)


def _partition_ref(log_dir: str, path: str, topic: str, partition: int) -> PartitionRef:
    segments = _segments_of(path)
    refs = tuple(SegmentRef(log_dir, topic, partition, base, seg_path, size, i == len(segments) - 1)
                 for i, (base, seg_path, size) in enumerate(segments))
    return PartitionRef(log_dir, topic, partition, path, refs)


def _name_key(path: str) -> tuple[str, int]:
    key = parse_partition_dir(os.path.basename(path))
    return key if key is not None else (os.path.basename(path), -1)


def expand(paths) -> list[str]:
    """Absolute paths, globs expanded; a path that does not exist raises FileNotFoundError."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for raw in paths:
        path = os.path.abspath(os.path.expanduser(os.fspath(raw)))
        if not os.path.exists(path) and _GLOB_CHARS & set(path):
            matches = sorted(glob.glob(path))
            if not matches:
                raise FileNotFoundError(f"partitionlog: no path matches {raw!r}")
            out.extend(os.path.abspath(m) for m in matches)
        elif not os.path.exists(path):
            raise FileNotFoundError(f"partitionlog: no such file or directory: {raw!r}")
        else:
            out.append(path)
    return out


def discover(paths) -> list[PartitionRef]:
    """Every partition dir under `paths` (log dirs, partition dirs or segment files), sorted
    by (log dir, topic, partition).  Partition dirs without segments are included."""
    partitions: dict[tuple[str, str], PartitionRef] = {}
    for path in expand(paths):
        if os.path.isfile(path):
            base = segment_base(os.path.basename(path), SEGMENT_SUFFIX)
            if base is None:
                raise ValueError(f"partitionlog: {path} is not a segment file (NNNNNNNNNNNNNNNNNNNN.log)")
            directory = os.path.dirname(path)
            topic, partition = _name_key(directory)
            ref = PartitionRef(os.path.dirname(directory), topic, partition, directory, ())
            known = partitions.get((ref.log_dir, directory), ref)
            segment = SegmentRef(ref.log_dir, topic, partition, base, path, os.path.getsize(path), False)
            partitions[(ref.log_dir, directory)] = known._replace(
                segments=tuple(sorted(set(known.segments) | {segment})))
        elif _is_partition_dir(path):
            topic, partition = _name_key(path)
            partitions[(os.path.dirname(path), path)] = _partition_ref(os.path.dirname(path), path, topic, partition)
        else:
            with os.scandir(path) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    key = parse_partition_dir(entry.name)
                    if key is not None and entry.is_dir():
                        partitions[(path, entry.path)] = _partition_ref(path, entry.path, *key)
    out = []
    for ref in partitions.values():
        if ref.segments and not any(s.is_last for s in ref.segments):
            # Segment files named one by one: only the newest of a partition may be torn.
            last = max(ref.segments)
            ref = ref._replace(segments=tuple(s._replace(is_last=s is last) for s in ref.segments))
        out.append(ref)
    out.sort(key=lambda r: (r.log_dir, r.topic, r.partition, r.path))
    return out


def segments(paths) -> list[SegmentRef]:
    return [s for ref in discover(paths) for s in ref.segments]


# ---- reading one segment -------------------------------------------------------------------

def fingerprint(batch) -> int:
    """xxh3-64 of the CRC-covered bytes of a batch, as a signed 64-bit integer."""
    start = 21 if batch.magic >= 2 else 16
    digest = xxhash.xxh3_64_intdigest(batch.view[start:])
    return digest - _UINT64 if digest > _INT64_MAX else digest


def read_segment(segment: SegmentRef) -> bytes:
    with open(segment.path, "rb") as f:
        return f.read()


class BatchRow(NamedTuple):
    """One row of the batch level; the header fields are None on an error row."""

    position: int
    base_offset: int | None
    last_offset: int | None
    partition_leader_epoch: int | None
    magic: int | None
    attributes: int | None
    compression: str | None
    crc: int | None
    crc_valid: bool | None
    record_count: int | None
    max_timestamp: int | None
    size_bytes: int | None
    fingerprint: int | None
    error: str | None
    batch: object = None       # the RecordBatch (a view into the segment's bytes), None on an error row


def scan_batches(segment: SegmentRef, data: bytes | None = None) -> Iterator[BatchRow]:
    """Rows for every batch of one segment, then at most one error row (see module doc)."""
    if data is None:
        try:
            data = read_segment(segment)
        except OSError as exc:          # gone (retention on a live broker) or not readable
            yield BatchRow(0, None, None, None, None, None, None, None, None, None, None, None, None,
                           f"{UNREADABLE}: {exc.strerror or exc}")
            return
    end = 0
    try:
        for batch in iter_batches(data, verify=False, source=segment.path):
            yield BatchRow(batch.position, batch.base_offset, batch.last_offset, batch.partition_leader_epoch,
                           batch.magic, batch.attributes, batch.compression, batch.crc, batch.is_valid(),
                           batch.record_count, batch.max_timestamp, batch.size_bytes, fingerprint(batch), None,
                           batch)
            end = batch.position + batch.size_bytes
    except errors.StorageError as exc:
        position = exc.position if exc.position is not None else end
        yield BatchRow(position, exc.offset, None, None, None, None, None, None, None, None,
                       None, None, None, f"{CORRUPT}: {exc.reason}")
        return
    if end < len(data):
        tail = len(data) - end
        where = "the newest segment" if segment.is_last else "a sealed segment"
        yield BatchRow(end, None, None, None, None, None, None, None, None, None, None, None, None,
                       f"{PARTIAL_TAIL}: {tail} bytes after the last whole batch of {where}")


def scan_records(segment: SegmentRef, *, strict: bool = True, data: bytes | None = None):
    """(batch row, records) for every batch of one segment.

    strict: raise `CorruptRecordError` / `InvalidRecordError` at the first CRC failure,
    malformed record or corrupt batch (Spark's FAILFAST); otherwise skip such batches and stop
    the segment at a structural failure (DROPMALFORMED).  A partial tail is never an error.
    """
    for row in scan_batches(segment, data):
        if row.error is not None:
            if strict and row.error.startswith(CORRUPT):
                raise errors.CorruptRecordError(row.error.split(": ", 1)[1], file=segment.path,
                                                position=row.position, offset=row.base_offset)
            if strict and row.error.startswith(UNREADABLE):
                raise errors.StorageIOError(row.error.split(": ", 1)[1], file=segment.path)
            continue
        if not row.crc_valid:
            if strict:
                row.batch.ensure_valid()
            continue
        try:
            records = row.batch.records()
        except errors.StorageError:
            if strict:
                raise
            continue
        yield row, records
