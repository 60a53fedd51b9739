"""Record batches: `Record`, `RecordBatch`, `build_batch`, `iter_batches`, compression.

Invariants:
  - a `RecordBatch` is a zero-copy view over the bytes it was read from; its header fields
    are parsed once, its records only when `records()` is called;
  - `build_batch` makes one foreign call per batch (plus one compression call), never one
    per record; what it returns is a complete v2 batch with a valid CRC-32C;
  - `iter_batches` follows Kafka's in-memory iteration rules (docs/kafka-formats.md 1.6): a partial
    trailing batch ends the iteration silently, a size, magic or (with verify) CRC failure
    raises `CorruptRecordError` naming the source, the byte position and the offset;
  - legacy message sets (magic 0 and 1) are read, including compressed wrappers; every
    write is magic 2.
"""
from __future__ import annotations

import bisect
import struct
import threading
from typing import Iterable, Iterator, NamedTuple

from . import errors
from ._native import build_listed, decode_records, ffi, lib
from .clock import wall_ms
from .codecs import CODEC_IDS, CODEC_NAMES, compress, decompress

NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1
BATCH_OVERHEAD = lib.PLOG_BATCH_OVERHEAD
LOG_OVERHEAD = lib.PLOG_LOG_OVERHEAD
_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 header
assert _HEADER.size == BATCH_OVERHEAD
_LEGACY = struct.Struct(">qiIbb")           # offset, size, crc, magic, attributes
_MIN_RECORD_BYTES = 7                       # length, attributes, ts, offset, key, value, headers


class Record(NamedTuple):
    """One record.  Reading fills every field; for building, offset is ignored, a None
    timestamp means the batch's base timestamp, and headers are (str, bytes | None) pairs."""

    offset: int | None = None
    timestamp: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple | list = ()


# ---- building ----------------------------------------------------------------------------

def _as_bytes(value, what: str):
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"record {what} must be bytes, bytearray, memoryview, str or None, not {type(value).__name__}")


def _header(key, value) -> tuple:
    key_bytes = key.encode() if isinstance(key, str) else _as_bytes(key, "header key")
    if key_bytes is None:
        raise ValueError("a header key cannot be null")
    return key_bytes, _as_bytes(value, "header value")


def _normalise(records: list) -> list:
    """Records of any shape build_batch takes, in the shapes the C walk takes (bytes values and
    Records of bytes payloads, int timestamps and (bytes, bytes | None) header pairs), or the
    error the shape deserves."""
    out = []
    for i, r in enumerate(records):
        if isinstance(r, Record):
            key, value, hdrs, ts = r.key, r.value, r.headers, r.timestamp
        elif isinstance(r, tuple):
            if len(r) == 2:
                (key, value), hdrs, ts = r, (), None
            elif len(r) == 3:
                (key, value, hdrs), ts = r, None
            else:
                raise ValueError(f"record {i}: a tuple record is (key, value) or (key, value, headers)")
        else:
            out.append(_as_bytes(r, "value"))
            continue
        out.append(Record(None, None if ts is None else int(ts), _as_bytes(key, "key"), _as_bytes(value, "value"),
                          [_header(k, v) for k, v in hdrs] if hdrs else ()))
    return out


def _build(records, *, base_offset, partition_leader_epoch, compression, base_timestamp,
           producer_id, producer_epoch, base_sequence, is_transactional, is_control,
           level=None) -> bytes | bytearray:
    if not isinstance(records, list):
        records = list(records)
    n = len(records)
    if n == 0:
        raise ValueError("a batch needs at least one record")
    if compression not in CODEC_IDS:
        raise ValueError(f"unknown compression {compression!r}; expected one of {', '.join(CODEC_NAMES)}")
    attributes = (CODEC_IDS[compression] | (lib.PLOG_ATTR_TRANSACTIONAL if is_transactional else 0)
                  | (lib.PLOG_ATTR_CONTROL if is_control else 0))
    plain = compression == "none"
    walk = (plain, base_offset, partition_leader_epoch, attributes, base_timestamp, wall_ms(),
            producer_id, producer_epoch, base_sequence, Record)
    built = build_listed(records, *walk)    # the list walked in C (csrc/pyrecords.c)
    if built is None:                       # another shape: normalised, then walked
        built = build_listed(_normalise(records), *walk)
    if built is None:
        if base_timestamp is not None and not isinstance(base_timestamp, int):
            raise TypeError(f"base_timestamp must be an int, not {type(base_timestamp).__name__}")
        raise ValueError("a record timestamp does not fit in 64 bits")
    if built.__class__ is not tuple:
        raise ValueError(f"cannot encode records: {errors.error_text(built)}")
    out, stamp, max_timestamp = built
    if plain:
        return out                          # finished by the walk: header and CRC
    with memoryview(out) as whole:
        payload = compress(compression, whole[BATCH_OVERHEAD:], level)
    out = bytearray(BATCH_OVERHEAD + len(payload))
    out[BATCH_OVERHEAD:] = payload
    info = ffi.new("plog_batch_info *")
    info.base_offset = base_offset
    info.partition_leader_epoch = partition_leader_epoch
    info.attributes = attributes
    info.last_offset_delta = n - 1
    info.base_timestamp = stamp
    info.max_timestamp = max_timestamp
    info.producer_id = producer_id
    info.producer_epoch = producer_epoch
    info.base_sequence = base_sequence
    info.record_count = n
    rc = lib.plog_batch_finish(ffi.from_buffer(out), len(out), info)
    if rc:
        raise ValueError(f"cannot build batch: {errors.error_text(rc)}")
    return out


def build_batch(records: Iterable, *, base_offset: int = 0, partition_leader_epoch: int = -1,
                compression: str = "none", base_timestamp: int | None = None, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, is_transactional: bool = False,
                is_control: bool = False, level: int | None = None) -> bytes:
    """Encode records as one v2 batch.

    records: bytes values, (key, value) or (key, value, headers) tuples, or `Record`s.
    compression: "none", "gzip", "snappy", "lz4" or "zstd"; level: the codec's level (None:
    Kafka's default; codecs.LEVELS).  base_timestamp defaults to the first record's
    timestamp, or now (ms) when records carry none.
    """
    return bytes(_build(records, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                        compression=compression, base_timestamp=base_timestamp, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=base_sequence,
                        is_transactional=is_transactional, is_control=is_control, level=level))


# ---- reading -----------------------------------------------------------------------------

class RecordBatch:
    """One batch over a zero-copy view.  `position` is where it starts in its source."""

    __slots__ = ("_view", "source", "position", "base_offset", "length", "partition_leader_epoch",
                 "magic", "crc", "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "record_count", "_last_offset",
                 "_legacy_records")

    def __init__(self, view: memoryview, *, source=None, position: int = 0):
        self._view = view
        self.source = source
        self.position = position
        self._legacy_records = None
        magic = view[16]
        if magic >= 2:
            (self.base_offset, self.length, self.partition_leader_epoch, self.magic, self.crc,
             self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
             self.producer_id, self.producer_epoch, self.base_sequence,
             self.record_count) = _HEADER.unpack_from(view)
            self._last_offset = self.base_offset + self.last_offset_delta
        else:
            offset, self.length, self.crc, self.magic, self.attributes = _LEGACY.unpack_from(view)
            self.base_offset = offset
            self._last_offset = offset
            self.partition_leader_epoch = NO_PARTITION_LEADER_EPOCH
            self.last_offset_delta = 0
            self.base_timestamp = NO_TIMESTAMP
            self.max_timestamp = struct.unpack_from(">q", view, 18)[0] if self.magic == 1 else NO_TIMESTAMP
            self.producer_id, self.producer_epoch, self.base_sequence = -1, -1, -1
            self.record_count = 1
            if self.attributes & 7:
                # A compressed wrapper: its offset is the last inner offset; count the inner
                # records.  A wrapper that cannot be decoded keeps its own offset here and
                # raises from records().
                try:
                    inner = self._legacy_inner()
                except errors.StorageError:
                    inner = None
                if inner:
                    self.record_count = len(inner)
                    self.base_offset = inner[0].offset
                    self.last_offset_delta = self._last_offset - self.base_offset

    # --- header-derived properties ---
    @property
    def last_offset(self) -> int:
        return self._last_offset

    @property
    def next_offset(self) -> int:
        return self._last_offset + 1

    @property
    def size_bytes(self) -> int:
        return self.length + LOG_OVERHEAD

    @property
    def compression(self) -> str:
        codec = self.attributes & 7
        return CODEC_NAMES[codec] if codec < len(CODEC_NAMES) else f"invalid({codec})"

    @property
    def timestamp_type(self) -> str:
        if self.magic == 0:
            return "NoTimestampType"
        return "LogAppendTime" if self.attributes & lib.PLOG_ATTR_LOG_APPEND_TIME else "CreateTime"

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & lib.PLOG_ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & lib.PLOG_ATTR_CONTROL)

    def where(self) -> dict:
        if self.source is None:             # a batch of a log.read() view: find its file
            file, position = mapped_source(self._view)
            if file is not None:
                return {"file": file, "position": position, "offset": self.base_offset}
        return {"file": self.source, "position": self.position, "offset": self.base_offset}

    def is_valid(self) -> bool:
        """Kafka's isValid: size >= 61 (v2) and the stored CRC matches."""
        info = ffi.new("plog_batch_info *")
        with ffi.from_buffer(self._view) as buf:
            if lib.plog_batch_parse(buf, len(self._view), 0, 0, info):
                return False
            return bool(lib.plog_batch_crc_ok(buf, info))

    def ensure_valid(self) -> None:
        if not self.is_valid():
            raise errors.CorruptRecordError(
                f"CRC mismatch: stored 0x{self.crc:08x}", **self.where())

    def to_bytes(self) -> bytes:
        return bytes(self._view)

    @property
    def view(self) -> memoryview:
        return self._view

    def records(self, *, max_decompressed_bytes: int | None = None) -> list[Record]:
        """The records; a compressed batch may expand to at most max_decompressed_bytes
        (default DECOMPRESSED_BYTES_MAX), else CorruptRecordError."""
        if self.magic < 2:
            return list(self._legacy_inner(max_decompressed_bytes)) if self.attributes & 7 \
                else [self._legacy_single()]
        payload = self._view[BATCH_OVERHEAD:]
        codec = self.attributes & 7
        if codec:
            payload = decompress(codec, bytes(payload), max_bytes=max_decompressed_bytes, **self.where())
        count = self.record_count
        if count < 0 or count * _MIN_RECORD_BYTES > len(payload) + (0 if count else 1):
            raise errors.InvalidRecordError(
                f"record count {count} does not fit in {len(payload)} bytes of records", **self.where())
        return _decode_records(payload, count, self)

    def __iter__(self):
        return iter(self.records())

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"partition_leader_epoch={self.partition_leader_epoch}, magic={self.magic}, "
                f"compression={self.compression!r}, record_count={self.record_count}, "
                f"size_bytes={self.size_bytes})")

    # --- legacy v0/v1 ---
    def _legacy_single(self, view=None) -> Record:
        """Decode one legacy message: offset, size, crc, magic, attributes, [timestamp], key, value."""
        view = self._view if view is None else view
        try:
            offset, _size, _crc, magic, _attributes = _LEGACY.unpack_from(view)
            pos = 18
            timestamp = NO_TIMESTAMP
            if magic == 1:
                (timestamp,) = struct.unpack_from(">q", view, pos)
                pos += 8
            (key_length,) = struct.unpack_from(">i", view, pos)
            pos += 4
            if key_length > len(view) - pos:
                raise ValueError(f"key length {key_length} runs past the message")
            key = None if key_length < 0 else bytes(view[pos:pos + key_length])
            pos += max(key_length, 0)
            (value_length,) = struct.unpack_from(">i", view, pos)
            pos += 4
            if value_length > len(view) - pos:
                raise ValueError(f"value length {value_length} runs past the message")
        except (struct.error, ValueError) as exc:
            raise errors.CorruptRecordError(f"malformed legacy message: {exc}", **self.where()) from exc
        value = None if value_length < 0 else bytes(view[pos:pos + value_length])
        return Record(offset, timestamp, key, value, [])

    def _legacy_inner(self, max_decompressed_bytes: int | None = None) -> list[Record]:
        if self._legacy_records is not None:
            return self._legacy_records
        wrapper = self._legacy_single()
        if wrapper.value is None:
            raise errors.CorruptRecordError("compressed legacy message without a value", **self.where())
        data = decompress(self.attributes & 7, wrapper.value, magic=self.magic, max_bytes=max_decompressed_bytes,
                          **self.where())
        inner = []
        pos = 0
        while pos + 12 <= len(data):
            (size,) = struct.unpack_from(">i", data, pos + 8)
            if size < lib.PLOG_LEGACY_RECORD_OVERHEAD_V0 or pos + 12 + size > len(data):
                break
            inner.append(self._legacy_single(memoryview(data)[pos:pos + 12 + size]))
            pos += 12 + size
        shift = self._last_offset - inner[-1].offset if inner else 0
        if self.magic == 1 and inner and shift >= 0:
            # v1 inner offsets are relative and the wrapper carries the absolute last offset;
            # a producer-side wrapper (offset 0) is left as is, as Kafka's deep iterator does.
            log_append = bool(self.attributes & lib.PLOG_ATTR_LOG_APPEND_TIME)
            inner = [r._replace(offset=r.offset + shift,
                                timestamp=wrapper.timestamp if log_append else r.timestamp) for r in inner]
        self._legacy_records = inner
        return inner


def _decode_records(payload, count: int, batch: RecordBatch) -> list[Record]:
    """The records of a records section (any buffer), decoded and checked in C (csrc/pyrecords.c)."""
    decoded = decode_records(payload, count, batch.base_offset, batch.base_timestamp,
                             batch.attributes & lib.PLOG_ATTR_LOG_APPEND_TIME, batch.max_timestamp, Record)
    if decoded.__class__ is list:
        return decoded
    rc, position, in_headers = decoded
    if in_headers:
        raise errors.InvalidRecordError("malformed record header", **batch.where())
    raise errors.InvalidRecordError(
        f"malformed record at byte {position} of the records section "
        f"({errors.error_text(rc)})", **batch.where())


# The read mappings of segment files (storage/log/segment.py registers and forgets them): a view
# that PartitionLog.read() returns knows no file, but its address lies in one mapping, so an
# error found in it names the file and the byte position there.  Looked up on errors only.
_mapped_starts: list[int] = []
_mapped_ranges: dict[int, tuple[int, str]] = {}
_mapped_lock = threading.Lock()


def register_source(address: int, length: int, file: str) -> None:
    with _mapped_lock:
        if address not in _mapped_ranges:
            bisect.insort(_mapped_starts, address)
        _mapped_ranges[address] = (address + length, file)


def forget_source(address: int) -> None:
    with _mapped_lock:
        if _mapped_ranges.pop(address, None) is not None:
            del _mapped_starts[bisect.bisect_left(_mapped_starts, address)]


def mapped_source(view) -> tuple[str | None, int]:
    """(file, position) of a view into a registered mapping, else (None, 0)."""
    if not isinstance(view, memoryview) or not len(view) or not _mapped_starts:
        return None, 0
    with ffi.from_buffer(view) as pointer:
        address = int(ffi.cast("uintptr_t", pointer))
    with _mapped_lock:
        i = bisect.bisect_right(_mapped_starts, address) - 1
        if i < 0:
            return None, 0
        start = _mapped_starts[i]
        end, file = _mapped_ranges[start]
    return (file, address - start) if address < end else (None, 0)


def iter_batches(buffer, *, verify: bool = True, source=None, start_position: int = 0,
                 max_batch_bytes: int = 0) -> Iterator[RecordBatch]:
    """Batches of `buffer` (bytes-like), zero-copy.  Stops at a partial tail; raises
    `CorruptRecordError` on a size or magic failure, and with verify on a CRC mismatch.
    `source` and `start_position` only shape error messages and `RecordBatch.position`; a view
    returned by PartitionLog.read() names its segment file and position by itself."""
    view = memoryview(buffer).cast("B") if not isinstance(buffer, memoryview) or buffer.format != "B" else buffer
    length = len(view)
    info = ffi.new("plog_batch_info *")
    pos = 0
    # The buffer export is released explicitly (`with`): a frame kept alive by a traceback
    # must not hold a live export of a memoryview -- when the cycle collector later cleared
    # them in the wrong order, CPython crashed in memory_dealloc (found with a view of a log
    # mapping whose CorruptRecordError a caller kept).
    with ffi.from_buffer(view) as buf:
        while pos < length:
            rc = lib.plog_batch_parse(buf, length, pos, max_batch_bytes, info)
            if rc == lib.PLOG_EPARTIAL:
                return
            if rc or (verify and not lib.plog_batch_crc_ok(buf + pos, info)):
                break
            size = info.size_bytes
            yield RecordBatch(view[pos:pos + size], source=source, position=start_position + pos)
            pos += size
        else:
            return
    if source is None:
        source, start_position = mapped_source(view)
    if rc:
        offset = struct.unpack_from(">q", view, pos)[0] if length - pos >= 8 else None
        raise errors.error_class(rc)(_describe(rc, view, pos), file=source, position=start_position + pos, offset=offset)
    raise errors.CorruptRecordError(f"CRC mismatch (stored 0x{info.crc:08x})", file=source,
                                    position=start_position + pos, offset=info.base_offset)


def _describe(rc: int, view, pos: int) -> str:
    if rc == lib.PLOG_EMAGIC:
        return f"invalid magic byte {view[pos + 16] if len(view) > pos + 16 else '?'}"
    if rc == lib.PLOG_ECORRUPT:
        (length,) = struct.unpack_from(">i", view, pos + 8)
        return f"corrupt batch: size field {length} is out of range"
    if rc == lib.PLOG_ETOOLARGE:
        (length,) = struct.unpack_from(">i", view, pos + 8)
        return f"batch of {length + LOG_OVERHEAD} bytes exceeds the maximum batch size"
    return errors.error_text(rc)
