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
import gzip as _gzip
import io as _pyio
import struct
import threading
import time
import zlib
from typing import Iterable, Iterator, NamedTuple

from . import errors
from ._native import build_listed, decode_records, ffi, lib

CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {name: i for i, name in enumerate(CODEC_NAMES)}
WRITABLE_CODECS = ("none", "gzip", "zstd")

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


# ---- compression -------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _missing(codec: str, package: str, where: dict):
    raise errors.UnsupportedCodecError(
        f"batch is compressed with {codec}, but no {codec} library is installed "
        f"(pip install {package}, or the [codecs] extra)", **where)


def _lz4_fix_kafka08_checksum(data: bytes, where: dict) -> bytes:
    """Magic-0 LZ4 (Kafka 0.8) framed its header checksum over the frame magic too; Kafka
    ignores that checksum for magic 0.  Rewrite it so a standard LZ4 frame reader accepts it."""
    if len(data) < 7:
        return data
    flags = data[4]
    hc_position = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    if hc_position >= len(data):
        return data
    try:
        import xxhash
    except ImportError:
        _missing("lz4 (Kafka 0.8 framing, which needs xxhash)", "xxhash", where)
    checksum = (xxhash.xxh32(data[4:hc_position]).intdigest() >> 8) & 0xFF
    return data[:hc_position] + bytes([checksum]) + data[hc_position + 1:]


# Decompression is bounded: a records section may expand to at most this many bytes (a small
# batch that inflates to gigabytes is a CorruptRecordError, not an out-of-memory).  Kafka's
# default max.message.bytes is ~1 MiB; 64 times that leaves room for every real batch (Kafka's
# producers compress batches of batch.size, 16 KiB by default) and stops bombs.  A PartitionLog
# passes 64 * its own max_message_bytes (at least this); callers of RecordBatch.records() may
# pass max_decompressed_bytes themselves.
DECOMPRESSED_BYTES_MAX = 64 << 20


class _TooLarge(Exception):
    pass


def _check_size(produced: int, limit: int) -> None:
    if produced > limit:
        raise _TooLarge(f"expands beyond {limit} bytes (the decompression limit)")


def _gzip_decompress(data: bytes, limit: int) -> bytes:
    out, produced = [], 0
    while data:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = inflater.decompress(data, limit + 1 - produced)
        produced += len(chunk)
        _check_size(produced, limit)
        out.append(chunk)
        if not inflater.eof:
            if inflater.unconsumed_tail:
                _check_size(produced + 1, limit)
            raise ValueError("truncated gzip stream")
        data = inflater.unused_data     # gzip allows several members back to back
    return b"".join(out)


def _lz4_decompress(data: bytes, where: dict, limit: int) -> bytes:
    try:
        import lz4.frame as lz4f
    except ImportError:
        lz4f = None
    if lz4f is not None:
        decompressor = lz4f.LZ4FrameDecompressor()
        out = decompressor.decompress(data, max_length=limit + 1)
        _check_size(len(out), limit)
        if not decompressor.eof and not decompressor.needs_input:
            _check_size(limit + 1, limit)
        return out
    try:
        import cramjam
    except ImportError:
        _missing("lz4", "lz4", where)
    out = bytes(cramjam.lz4.decompress(data))
    _check_size(len(out), limit)
    return out


def _snappy_length(data: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    length, shift = 0, 0
    for byte in data[:5]:
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return length
        shift += 7
    raise ValueError("malformed snappy length")


def _snappy_raw(data: bytes, where: dict, limit: int) -> bytes:
    _check_size(_snappy_length(data), limit)
    try:
        import cramjam
    except ImportError:
        cramjam = None
    if cramjam is not None:
        return bytes(cramjam.snappy.decompress_raw(data))
    try:
        import snappy
    except ImportError:
        _missing("snappy", "cramjam", where)
    return snappy.decompress(data)


def _snappy_decompress(data: bytes, where: dict, limit: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_raw(data, where, limit)
    # xerial framing: 8-byte magic, version int32, compatible version int32, then blocks of
    # (length int32, raw snappy block).
    out, produced = [], 0
    pos = 16
    while pos + 4 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise errors.CorruptRecordError("snappy (xerial) block runs past the end of the batch", **where)
        block = _snappy_raw(data[pos:pos + length], where, limit - produced)
        produced += len(block)
        out.append(block)
        pos += length
    return b"".join(out)


def _zstd_decompress(data: bytes, limit: int) -> bytes:
    import zstandard

    # Kafka's zstd-jni writes frames without a content size: decompress as a stream, and read
    # one byte past the limit to learn whether the limit is exceeded.
    reader = zstandard.ZstdDecompressor().stream_reader(_pyio.BytesIO(data), read_across_frames=True)
    out = reader.read(limit + 1)
    _check_size(len(out), limit)
    return out


def decompress(codec: int, data: bytes, *, magic: int = 2, file=None, position=None, offset=None,
               max_bytes: int | None = None) -> bytes:
    """Decompress a records section (or a legacy wrapper's value) of the given codec id, to at
    most `max_bytes` (default DECOMPRESSED_BYTES_MAX) bytes."""
    where = {"file": file, "position": position, "offset": offset}
    limit = DECOMPRESSED_BYTES_MAX if max_bytes is None else max_bytes
    name = CODEC_NAMES[codec] if 0 <= codec < len(CODEC_NAMES) else f"codec {codec}"
    try:
        if codec == 1:
            return _gzip_decompress(data, limit)
        if codec == 2:
            return _snappy_decompress(data, where, limit)
        if codec == 3:
            if magic == 0:
                data = _lz4_fix_kafka08_checksum(data, where)
            return _lz4_decompress(data, where, limit)
        if codec == 4:
            return _zstd_decompress(data, limit)
    except errors.StorageError:
        raise
    except _TooLarge as exc:
        raise errors.CorruptRecordError(f"{name} records section of {len(data)} bytes {exc}", **where) from None
    except MemoryError as exc:
        raise errors.CorruptRecordError(
            f"out of memory decompressing a {name} records section of {len(data)} bytes", **where) from exc
    except Exception as exc:  # codec libraries raise their own types
        raise errors.CorruptRecordError(f"cannot decompress {name} records: {exc}", **where) from exc
    raise errors.CorruptRecordError(f"invalid compression codec id {codec}", **where)


_zstd_local = threading.local()


def _zstd_compressor():
    """This thread's level-3 ZstdCompressor (Kafka's and kafka-python's default level).
    Reused: making one per batch costs ~15 µs of a ~100 KiB batch's ~400; an instance must
    not be used by two threads at once, hence one per thread."""
    compressor = getattr(_zstd_local, "compressor", None)
    if compressor is None:
        import zstandard

        compressor = _zstd_local.compressor = zstandard.ZstdCompressor(level=3)
    return compressor


def compress(codec: str, data) -> bytes:
    """Compress a records section (bytes-like) with the named codec."""
    if codec == "gzip":
        return _gzip.compress(data, compresslevel=6, mtime=0)
    if codec == "zstd":
        return _zstd_compressor().compress(data)
    if codec == "none":
        return data
    if codec in CODEC_IDS:
        raise errors.UnsupportedCodecError(
            f"writing {codec} batches is not supported; writable codecs: {', '.join(WRITABLE_CODECS)}")
    raise ValueError(f"unknown compression {codec!r}; expected one of {', '.join(CODEC_NAMES)}")


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
           producer_id, producer_epoch, base_sequence, is_transactional, is_control) -> bytes | bytearray:
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
    walk = (plain, base_offset, partition_leader_epoch, attributes, base_timestamp, int(time.time() * 1000),
            producer_id, producer_epoch, base_sequence, Record)
    built = build_listed(records, *walk)    # the list walked in C (csrc/pyrecords.c)
    if built is None:                       # another shape: normalised, then walked
        built = build_listed(_normalise(records), *walk)
    if built is None:
        if base_timestamp is not None and not isinstance(base_timestamp, int):
            raise TypeError(f"base_timestamp must be an int, not {type(base_timestamp).__name__}")
        raise ValueError("a record timestamp does not fit in 64 bits")
    if built.__class__ is not tuple:
        raise ValueError(f"cannot encode records: {ffi.string(lib.plog_strerror(built)).decode()}")
    out, stamp, max_timestamp = built
    if plain:
        return out                          # finished by the walk: header and CRC
    with memoryview(out) as whole:
        payload = compress(compression, whole[BATCH_OVERHEAD:])
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
        raise ValueError(f"cannot build batch: {ffi.string(lib.plog_strerror(rc)).decode()}")
    return out


def build_batch(records: Iterable, *, base_offset: int = 0, partition_leader_epoch: int = -1,
                compression: str = "none", base_timestamp: int | None = None, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, is_transactional: bool = False,
                is_control: bool = False) -> bytes:
    """Encode records as one v2 batch.

    records: bytes values, (key, value) or (key, value, headers) tuples, or `Record`s.
    compression: "none", "gzip" or "zstd".  base_timestamp defaults to the first record's
    timestamp, or now (ms) when records carry none.
    """
    return bytes(_build(records, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                        compression=compression, base_timestamp=base_timestamp, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=base_sequence,
                        is_transactional=is_transactional, is_control=is_control))


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

    def _where(self) -> dict:
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
                f"CRC mismatch: stored 0x{self.crc:08x}", **self._where())

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
            payload = decompress(codec, bytes(payload), max_bytes=max_decompressed_bytes, **self._where())
        count = self.record_count
        if count < 0 or count * _MIN_RECORD_BYTES > len(payload) + (0 if count else 1):
            raise errors.InvalidRecordError(
                f"record count {count} does not fit in {len(payload)} bytes of records", **self._where())
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
            raise errors.CorruptRecordError(f"malformed legacy message: {exc}", **self._where()) from exc
        value = None if value_length < 0 else bytes(view[pos:pos + value_length])
        return Record(offset, timestamp, key, value, [])

    def _legacy_inner(self, max_decompressed_bytes: int | None = None) -> list[Record]:
        if self._legacy_records is not None:
            return self._legacy_records
        wrapper = self._legacy_single()
        if wrapper.value is None:
            raise errors.CorruptRecordError("compressed legacy message without a value", **self._where())
        data = decompress(self.attributes & 7, wrapper.value, magic=self.magic, max_bytes=max_decompressed_bytes,
                          **self._where())
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
        raise errors.InvalidRecordError("malformed record header", **batch._where())
    raise errors.InvalidRecordError(
        f"malformed record at byte {position} of the records section "
        f"({ffi.string(lib.plog_strerror(rc)).decode()})", **batch._where())


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
        raise error_class(rc)(_describe(rc, view, pos), file=source, position=start_position + pos, offset=offset)
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
    return ffi.string(lib.plog_strerror(rc)).decode()


def describe_error(rc: int) -> str:
    return ffi.string(lib.plog_strerror(rc)).decode()


# The one map from a C error code (plog.h) to the exception it becomes.  Positive codes are
# errno values (StorageIOError); codes not listed are StorageError.
_ERROR_CLASSES = {
    lib.PLOG_ECRC: errors.CorruptRecordError,
    lib.PLOG_ECORRUPT: errors.CorruptRecordError,
    lib.PLOG_EMAGIC: errors.CorruptRecordError,
    lib.PLOG_EPARTIAL: errors.CorruptRecordError,
    lib.PLOG_EEMPTY: errors.CorruptRecordError,
    lib.PLOG_ERECORD: errors.InvalidRecordError,
    lib.PLOG_ETIMESTAMP: errors.InvalidTimestampError,
    lib.PLOG_ETOOLARGE: errors.RecordTooLargeError,
    lib.PLOG_ELISTTOOLARGE: errors.RecordListTooLargeError,
    lib.PLOG_EORDER: errors.OffsetsOutOfOrderError,
    lib.PLOG_EAPPENDOFFSET: errors.UnexpectedAppendOffsetError,
}


def error_class(rc: int) -> type[errors.StorageError]:
    """The exception class for a nonzero C result."""
    if rc > 0:
        return errors.StorageIOError
    return _ERROR_CLASSES.get(rc, errors.StorageError)
