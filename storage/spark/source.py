"""The `partitionlog` Spark data source (Spark 4 Python Data Source API).

    storage.spark.register(spark)
    spark.read.format("partitionlog").option("level", "batches").load(["/data/b1", "/data/b2"])

Invariants:
  - one input partition per segment file; planning (`partitions()`) only lists directories and
    stats files, it never reads a segment;
  - `read()` opens its one segment, reads it with plain Python I/O and closes it before the
    first row leaves; no LMDB environment, log or segment object is opened, here or at import
    (Spark forks its Python workers);
  - rows leave as `pyarrow.RecordBatch`es whose schema is exactly the one Spark asked for:
    the default schema of the level, or any subset of its columns given with `.schema(...)`
    (only the columns asked for are computed, so payload bytes are only copied when wanted);
  - batch rows never fail on bad bytes: CRC failures, corrupt sizes and torn tails are rows
    (`crc_valid`, `error`); record rows fail fast on them unless mode is DROPMALFORMED.

Options:
  level    "batches" (default) or "records"
  payload  "true" adds the payload columns: `data` (the raw batch) for batches; `key`, `value`,
           `headers` for records.  Default "false".
  mode     records only: "FAILFAST" (default) raises at the first CRC failure or malformed
           batch/record; "DROPMALFORMED" skips such batches.
  maxRecordsPerBatch  rows per Arrow batch (default 8192; also cut at ~32 MiB of payload).
"""
from __future__ import annotations

import json

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from ..core.records import CODEC_NAMES
from ..inspect import discovery
from . import scan

NAME = "partitionlog"
LEVELS = ("batches", "records")
MODES = ("FAILFAST", "DROPMALFORMED")
_PAYLOAD_FLUSH_BYTES = 32 << 20

_HEADER_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

# (name, type, meaning) -- docs/guide-spark.md's schema tables list these, in this order.
LOCATION_FIELDS = [
    ("log_dir", StringType(), "absolute path of the broker log dir"),
    ("topic", StringType(), "topic (from the `<topic>-<partition>` dir name)"),
    ("partition", IntegerType(), "partition number (-1 for a dir not named `<topic>-<partition>`)"),
    ("segment_base_offset", LongType(), "base offset in the segment file's name"),
    ("position", LongType(), "byte position of the batch in the segment file"),
]
BATCH_FIELDS = LOCATION_FIELDS + [
    ("base_offset", LongType(), "first offset of the batch"),
    ("last_offset", LongType(), "last offset of the batch"),
    ("partition_leader_epoch", IntegerType(), "leader epoch stamped on the batch (-1 for none / v0-v1)"),
    ("magic", IntegerType(), "format version 0, 1 or 2"),
    ("attributes", IntegerType(), "attribute bits (codec, timestamp type, transactional, control)"),
    ("compression", StringType(), "none, gzip, snappy, lz4 or zstd"),
    ("crc", LongType(), "stored CRC (CRC-32C for v2, CRC-32 for v0/v1), unsigned"),
    ("crc_valid", BooleanType(), "stored CRC matches the bytes"),
    ("record_count", IntegerType(), "records in the batch"),
    ("max_timestamp", LongType(), "max timestamp, ms since the epoch (-1 for none)"),
    ("producer_id", LongType(), "producer id (-1 for none: not idempotent, and v0/v1)"),
    ("producer_epoch", IntegerType(), "producer epoch (-1 for none)"),
    ("base_sequence", IntegerType(), "sequence of the batch's first record (-1 for none)"),
    ("is_transactional", BooleanType(), "part of a transaction"),
    ("is_control", BooleanType(), "a control batch (a transaction marker, or a KRaft control record)"),
    ("size_bytes", IntegerType(), "bytes of the batch on disk"),
    ("fingerprint", LongType(), "xxh3-64 of the CRC-covered bytes, as a signed long"),
    ("error", StringType(), "null for a batch; `corrupt: ...`, `partial_tail: ...` or `unreadable: ...` on an "
                            "error row"),
]
BATCH_PAYLOAD_FIELDS = [("data", BinaryType(), "the raw batch bytes")]
RECORD_FIELDS = LOCATION_FIELDS + [
    ("partition_leader_epoch", IntegerType(), "leader epoch of the record's batch"),
    ("offset", LongType(), "record offset"),
    ("timestamp", LongType(), "record timestamp, ms since the epoch (-1 for none)"),
]
RECORD_PAYLOAD_FIELDS = [
    ("key", BinaryType(), "record key (null for none)"),
    ("value", BinaryType(), "record value (null for a tombstone)"),
    ("headers", _HEADER_TYPE, "record headers: array of (key string, value binary)"),
]


def fields(level: str, payload: bool = True) -> list[tuple]:
    if level == "batches":
        return BATCH_FIELDS + (BATCH_PAYLOAD_FIELDS if payload else [])
    return RECORD_FIELDS + (RECORD_PAYLOAD_FIELDS if payload else [])


def schema_of(level: str, payload: bool = False) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind, _ in fields(level, payload)])


def _bool_option(options, name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"partitionlog: option {name} must be true or false, not {value!r}")
    return text == "true"


def _paths(options) -> list[str]:
    if options.get("paths"):
        paths = json.loads(options["paths"])
    elif options.get("path"):
        paths = [options["path"]]
    else:
        raise ValueError("partitionlog: give one or more log dirs, partition dirs or segment files to load()")
    return paths


class SegmentPartition(InputPartition):
    """One segment file to read."""

    def __init__(self, segment: discovery.SegmentRef):
        super().__init__(segment.path)
        self.segment = segment


class PartitionLogDataSource(DataSource):
    """Reads Kafka-format log dirs (ours or a broker's) as batch rows or record rows."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _level(self) -> str:
        level = str(self.options.get("level", "batches")).lower()
        if level not in LEVELS:
            raise ValueError(f"partitionlog: option level must be one of {', '.join(LEVELS)}, not {level!r}")
        return level

    def schema(self) -> StructType:
        return schema_of(self._level(), _bool_option(self.options, "payload", False))

    def reader(self, schema: StructType) -> "PartitionLogReader":
        level = self._level()
        known = {name: kind for name, kind, _ in fields(level)}
        for field in schema.fields:
            if field.name not in known:
                raise ValueError(f"partitionlog: {level} rows have no column {field.name!r}; "
                                 f"columns: {', '.join(known)}")
            if field.dataType != known[field.name]:
                raise ValueError(f"partitionlog: column {field.name!r} is {known[field.name].simpleString()}, "
                                 f"not {field.dataType.simpleString()}")
        mode = str(self.options.get("mode", "FAILFAST")).upper()
        if mode not in MODES:
            raise ValueError(f"partitionlog: option mode must be one of {', '.join(MODES)}, not {mode!r}")
        rows_max = int(self.options.get("maxRecordsPerBatch", 8192))
        if rows_max < 1:
            raise ValueError("partitionlog: maxRecordsPerBatch must be >= 1")
        return PartitionLogReader(_paths(self.options), level, schema, mode, rows_max)


class PartitionLogReader(DataSourceReader):
    def __init__(self, paths: list[str], level: str, schema: StructType, mode: str, rows_max: int):
        self.paths = paths
        self.level = level
        self.schema = schema
        self.mode = mode
        self.rows_max = rows_max

    def partitions(self) -> list[SegmentPartition]:
        return [SegmentPartition(s) for s in discovery.segments(self.paths)]

    def read(self, partition: SegmentPartition):
        segment = getattr(partition, "segment", None)
        if segment is None:          # Spark's placeholder when there is nothing to read
            return iter(())
        return _ArrowWriter(self.schema, self.rows_max).rows(segment, self.level, self.mode)


class _ArrowWriter:
    """Rows of one segment, buffered and turned into Arrow record batches holding the requested
    columns only (columns are cut from the buffered tuples at once, not cell by cell)."""

    def __init__(self, schema: StructType, rows_max: int):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        self.pa = pa
        self.arrow_schema = to_arrow_schema(schema)
        self.names = schema.fieldNames()
        self.rows_max = rows_max

    def rows(self, segment: discovery.SegmentRef, level: str, mode: str):
        constants = {"log_dir": segment.log_dir, "topic": segment.topic, "partition": segment.partition,
                     "segment_base_offset": segment.base_offset}
        if level == "batches":
            data = _read_or_none(segment)
            cols = None if data is None else scan.header_columns(segment, data)
            if cols is not None:
                yield from self._header_batches(cols, data, constants)
                tail = scan.tail_row(segment, data, cols)
                if tail is not None:
                    yield self._batch(_batch_columns([tail], self.names, constants), 1)
                return
            source = scan.scan_batches(segment, data)
            columns = _batch_columns
            payload = (lambda row: row.size_bytes or 0) if "data" in self.names else None
        else:
            source = ((row, record) for row, records in scan.scan_records(segment, strict=mode == "FAILFAST")
                      for record in records)
            columns = _record_columns
            wanted = [i for i, name in ((2, "key"), (3, "value")) if name in self.names]
            payload = (lambda item: sum(len(item[1][i] or b"") for i in wanted)) if wanted else None
        buffered, payload_bytes = [], 0
        for item in source:
            buffered.append(item)
            if payload is not None:
                payload_bytes += payload(item)
            if len(buffered) >= self.rows_max or payload_bytes >= _PAYLOAD_FLUSH_BYTES:
                yield self._batch(columns(buffered, self.names, constants), len(buffered))
                buffered, payload_bytes = [], 0
        if buffered:
            yield self._batch(columns(buffered, self.names, constants), len(buffered))

    def _header_batches(self, cols, data: bytes, constants: dict):
        """Arrow record batches straight from the segment's header columns (scan.header_columns):
        numeric columns are the C arrays themselves, cast to the schema's types; only the
        fingerprint (and the payload, when asked for) is computed a batch at a time."""
        count, sizes = len(cols), cols.size_bytes
        start = 0
        while start < count:
            end = min(count, start + self.rows_max)
            if "data" in self.names:        # cut at ~32 MiB of payload, at least one row
                total, stop = 0, start
                while stop < end and (stop == start or total + sizes[stop] <= _PAYLOAD_FLUSH_BYTES):
                    total += sizes[stop]
                    stop += 1
                end = stop
            arrays = [_header_array(self.pa, name, field.type, cols, start, end, data, constants)
                      for name, field in zip(self.names, self.arrow_schema)]
            yield self.pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)
            start = end

    def _batch(self, columns: list, count: int):
        pa = self.pa
        arrays = [pa.array(column, type=field.type) for column, field in zip(columns, self.arrow_schema)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)


_BATCH_INDEX = {name: i for i, name in enumerate(scan.BatchRow._fields)}
_ATTRIBUTE_FLAGS = {"is_transactional": 0x10, "is_control": 0x20}


def _read_or_none(segment: discovery.SegmentRef) -> bytes | None:
    try:
        return scan.read_segment(segment)
    except OSError:
        return None            # scan_batches gives the "unreadable" row


def _header_array(pa, name: str, arrow_type, cols, start: int, end: int, data: bytes, constants: dict):
    """One column of rows [start, end) of a segment's header columns, as the schema's Arrow type
    (the C arrays wrapped without a copy, then cast; pyarrow.compute for the derived ones)."""
    import pyarrow.compute as pc

    count = end - start

    def numbers(field: str):
        return cols.arrow(field, start, end)

    if name in constants:
        return pa.array([constants[name]] * count, type=arrow_type)
    if name == "error":
        return pa.nulls(count, type=arrow_type)
    if name == "crc_valid":
        return pc.equal(numbers("crc_valid"), 1)
    if name in _ATTRIBUTE_FLAGS:
        return pc.not_equal(pc.bit_wise_and(numbers("attributes"), _ATTRIBUTE_FLAGS[name]), 0)
    if name == "compression":
        return pc.take(pa.array(CODEC_NAMES, type=arrow_type), pc.bit_wise_and(numbers("attributes"), 7))
    if name in ("fingerprint", "data"):
        view, positions, sizes = memoryview(data), cols.position, cols.size_bytes
        if name == "data":
            return pa.array([bytes(view[positions[i]:positions[i] + sizes[i]]) for i in range(start, end)],
                            type=arrow_type)
        magic = cols.magic
        return pa.array([scan.fingerprint_of(view[positions[i]:positions[i] + sizes[i]], magic[i])
                         for i in range(start, end)], type=arrow_type)
    return numbers(name).cast(arrow_type)           # int8/int16/uint32 widen to the schema's type


def _batch_columns(rows: list, names: list[str], constants: dict) -> list:
    transposed = list(zip(*rows))
    out = []
    for name in names:
        if name in constants:
            out.append([constants[name]] * len(rows))
        elif name == "data":
            out.append([None if row.batch is None else row.batch.to_bytes() for row in rows])
        else:
            out.append(transposed[_BATCH_INDEX[name]])
    return out


def _record_columns(items: list, names: list[str], constants: dict) -> list:
    out = []
    for name in names:
        if name in constants:
            out.append([constants[name]] * len(items))
        elif name == "position":
            out.append([row.position for row, _ in items])
        elif name == "partition_leader_epoch":
            out.append([row.partition_leader_epoch for row, _ in items])
        elif name == "headers":
            out.append([list(record.headers) for _, record in items])
        else:
            index = ("offset", "timestamp", "key", "value").index(name)
            out.append([record[index] for _, record in items])
    return out
