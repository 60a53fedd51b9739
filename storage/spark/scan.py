"""Turning one segment file into batch and record rows.

Plain Python, no Spark: the `partitionlog` data source (source.py) calls `scan_batches` /
`scan_records` inside its tasks; which segments there are comes from
`storage.inspect.discovery` (`discover`, `segments`, `SegmentRef`, `PartitionRef`), which the
command line uses too.

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

import struct
from typing import Iterator, NamedTuple

import xxhash

from ..core import errors
from ..core.columns import BatchColumns, batch_columns
from ..core.records import iter_batches
from ..inspect.discovery import SegmentRef

_UINT64 = 1 << 64
_INT64_MAX = (1 << 63) - 1

PARTIAL_TAIL = "partial_tail"
CORRUPT = "corrupt"
UNREADABLE = "unreadable"


# ---- reading one segment -------------------------------------------------------------------

def fingerprint(batch) -> int:
    """xxh3-64 of the CRC-covered bytes of a batch, as a signed 64-bit integer."""
    return fingerprint_of(batch.view, batch.magic)


def fingerprint_of(view, magic: int) -> int:
    """The fingerprint of the batch in `view` (its bytes, whatever holds them)."""
    digest = xxhash.xxh3_64_intdigest(view[21 if magic >= 2 else 16:])
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
    producer_id: int | None = None
    producer_epoch: int | None = None
    base_sequence: int | None = None
    is_transactional: bool | None = None
    is_control: bool | None = None
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
                           batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional,
                           batch.is_control, batch)
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


def header_columns(segment: SegmentRef, data: bytes) -> BatchColumns | None:
    """The batch rows of one segment as columns (storage.core.columns: one C call, CRCs flagged,
    not raised), for the source to turn into Arrow arrays without a Python object a batch; the
    rows after them come from `tail_row`.  None when a compressed v0/v1 wrapper is among them:
    its base offset and record count need its inner messages (scan_batches decodes them)."""
    cols = batch_columns(data, crc="flag", strict=False, source=segment.path)
    magic = cols.magic
    if len(cols) and min(magic) < 2:
        attributes = cols.attributes
        if any(magic[i] < 2 and attributes[i] & 7 for i in range(len(cols))):
            return None
    return cols


def tail_row(segment: SegmentRef, data: bytes, cols: BatchColumns) -> BatchRow | None:
    """The error row scan_batches ends the same segment with, or None."""
    end = cols.end
    if cols.stop not in (None, "partial"):
        offset = struct.unpack_from(">q", data, end)[0] if len(data) - end >= 8 else None
        return BatchRow(end, offset, None, None, None, None, None, None, None, None, None, None, None,
                        f"{CORRUPT}: {cols.stop}")
    if end < len(data):
        where = "the newest segment" if segment.is_last else "a sealed segment"
        return BatchRow(end, None, None, None, None, None, None, None, None, None, None, None, None,
                        f"{PARTIAL_TAIL}: {len(data) - end} bytes after the last whole batch of {where}")
    return None


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
