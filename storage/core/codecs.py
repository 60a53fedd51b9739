"""The record codecs Kafka knows (none, gzip, snappy, lz4, zstd), read and written as Kafka's
own producers and brokers frame them, on the default install.

Invariants:
  - every codec is readable and writable with the default dependencies: gzip from the
    standard library, zstd from zstandard, snappy and lz4 from cramjam (blocks only: the
    framing around them is ours, so what we write is byte for byte the framing Kafka writes);
  - snappy is written as Kafka's producer writes it (snappy-java's SnappyOutputStream: the
    xerial header, then blocks of at most 32 KiB of input, each an int32 length and a raw
    snappy block) and read in that framing or as one raw block;
  - lz4 is written as Kafka's Lz4BlockOutputStream frame (FLG: version 1, independent blocks,
    no checksums, no content size; BD: 64 KiB blocks; an incompressible block stored plain)
    and read from any LZ4 frame (linked blocks too), the Kafka 0.8 header checksum of magic 0
    included (Kafka ignores it there; so do we);
  - decompression is bounded (DECOMPRESSED_BYTES_MAX, or the caller's max_bytes): a batch that
    expands past it is a CorruptRecordError, never the memory it asks for.
"""
from __future__ import annotations

import gzip as _gzip
import io as _pyio
import struct
import threading
import zlib

from . import errors

CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {name: i for i, name in enumerate(CODEC_NAMES)}
WRITABLE_CODECS = CODEC_NAMES

# Decompression is bounded: a records section may expand to at most this many bytes (a small
# batch that inflates to gigabytes is a CorruptRecordError, not an out-of-memory).  Kafka's
# default max.message.bytes is ~1 MiB; 64 times that leaves room for every real batch (Kafka's
# producers compress batches of batch.size, 16 KiB by default) and stops bombs.  A PartitionLog
# passes 64 * its own max_message_bytes (at least this); callers of RecordBatch.records() may
# pass max_decompressed_bytes themselves.
DECOMPRESSED_BYTES_MAX = 64 << 20

# Kafka's levels (compression.gzip.level, compression.lz4.level, compression.zstd.level): the
# accepted range and the default of each (gzip: -1, zlib's default, 6).
LEVELS = {"gzip": (1, 9, -1), "lz4": (1, 17, 9), "zstd": (-131072, 22, 3)}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)      # version 1, compatible with 1
_XERIAL_BLOCK = 32 << 10                                        # snappy-java's default block
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK = 64 << 10                                           # BD 4, Kafka's default
_LZ4_PLAIN = 0x80000000                                         # a block stored uncompressed


class _TooLarge(Exception):
    pass


def _check_size(produced: int, limit: int) -> None:
    if produced > limit:
        raise _TooLarge(f"expands beyond {limit} bytes (the decompression limit)")


def _cramjam(codec: str, where: dict):
    try:
        import cramjam
    except ImportError:
        raise errors.UnsupportedCodecError(
            f"batch is compressed with {codec}, but no {codec} library is installed (pip install cramjam)",
            **where) from None
    return cramjam


# ---- xxHash32, for the LZ4 frame's header checksum (a few bytes: pure Python is enough) ----

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of `data` (the LZ4 frame format's checksum)."""
    n, pos = len(data), 0
    if n >= 16:
        acc = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i, (lane,) in enumerate(struct.iter_unpack("<I", data[pos:pos + 16])):
                acc[i] = (_rotl((acc[i] + lane * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    for byte in data[pos:]:
        h = (_rotl((h + byte * _P5) & _M32, 11) * _P1) & _M32
    h = ((h ^ (h >> 15)) * _P2) & _M32
    h = ((h ^ (h >> 13)) * _P3) & _M32
    return h ^ (h >> 16)


def _descriptor_checksum(descriptor: bytes) -> int:
    return (xxh32(descriptor) >> 8) & 0xFF


# ---- decompression ------------------------------------------------------------------------

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


def _lz4_frame_blocks(data: bytes, magic: int):
    """(independent, block size, header, [(stored plain, block bytes)]) of one LZ4 frame."""
    if len(data) < 7 or struct.unpack_from("<I", data)[0] != _LZ4_MAGIC:
        raise ValueError("not an LZ4 frame (bad magic)")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise ValueError(f"LZ4 frame version {flg >> 6} is unsupported")
    block_size = 1 << (2 * ((bd >> 4) & 7) + 8)
    if not 4 <= (bd >> 4) & 7 <= 7:
        raise ValueError(f"LZ4 frame block size code {(bd >> 4) & 7} is invalid")
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if pos >= len(data):
        raise ValueError("LZ4 frame header is truncated")
    if magic >= 1 and data[pos] != _descriptor_checksum(data[4:pos]):
        raise ValueError("LZ4 frame header checksum mismatch")
    header = data[:pos] + bytes([_descriptor_checksum(data[4:pos])])   # a standard header
    pos += 1
    blocks = []
    while True:
        if pos + 4 > len(data):
            raise ValueError("LZ4 frame is truncated (no end mark)")
        (word,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if word == 0:
            break
        length = word & ~_LZ4_PLAIN
        if length > block_size or pos + length > len(data):
            raise ValueError("LZ4 block runs past its frame")
        blocks.append((bool(word & _LZ4_PLAIN), data[pos:pos + length]))
        pos += length + (4 if flg & 0x10 else 0)
    return bool(flg & 0x20), block_size, header, blocks


def _lz4_decompress(data: bytes, magic: int, where: dict, limit: int) -> bytes:
    cramjam = _cramjam("lz4", where)
    independent, block_size, header, blocks = _lz4_frame_blocks(bytes(data), magic)
    if not independent and len(blocks) > 1:
        # Linked blocks (a later block refers back into the earlier ones): the whole frame at
        # once.  Kafka's own reader refuses these; librdkafka and python-lz4 may write them.
        _check_size(len(blocks) * block_size, limit)
        frame = header + data[len(header):]
        return bytes(cramjam.lz4.decompress(frame))
    out, produced, scratch = [], 0, bytearray(block_size)
    for plain, block in blocks:
        if plain:
            piece = block
        else:
            piece = bytes(memoryview(scratch)[:cramjam.lz4.decompress_block_into(block, scratch)])
        produced += len(piece)
        _check_size(produced, limit)
        out.append(piece)
    return b"".join(out)


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
    return bytes(_cramjam("snappy", where).snappy.decompress_raw(data))


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
            return _lz4_decompress(data, magic, where, limit)
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


# ---- compression --------------------------------------------------------------------------

_zstd_local = threading.local()


def _zstd_compressor(level: int):
    """This thread's ZstdCompressor of `level` (3: Kafka's and kafka-python's default).
    Reused: making one per batch costs ~15 µs of a ~100 KiB batch's ~400; an instance must
    not be used by two threads at once, hence one per thread and level."""
    compressors = getattr(_zstd_local, "compressors", None)
    if compressors is None:
        compressors = _zstd_local.compressors = {}
    compressor = compressors.get(level)
    if compressor is None:
        import zstandard

        compressor = compressors[level] = zstandard.ZstdCompressor(level=level)
    return compressor


def _snappy_compress(data) -> bytes:
    cramjam = _cramjam("snappy", {})
    view = memoryview(data)
    out = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _lz4_compress(data, level: int) -> bytes:
    cramjam = _cramjam("lz4", {})
    descriptor = bytes([0x60, 0x40])        # FLG: version 1, independent blocks; BD: 64 KiB
    out = [struct.pack("<I", _LZ4_MAGIC), descriptor, bytes([_descriptor_checksum(descriptor)])]
    # Kafka's default level (9) takes LZ4's fast compressor, any other level the high one.
    mode = {} if level == LEVELS["lz4"][2] else {"mode": "high_compression", "compression": level}
    view = memoryview(data)
    for start in range(0, len(view), _LZ4_BLOCK):
        chunk = view[start:start + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False, **mode))
        if len(block) >= len(chunk):
            out += [struct.pack("<I", len(chunk) | _LZ4_PLAIN), bytes(chunk)]
        else:
            out += [struct.pack("<I", len(block)), block]
    out.append(struct.pack("<I", 0))        # the end mark
    return b"".join(out)


def compress(codec: str, data, level: int | None = None) -> bytes:
    """Compress a records section (bytes-like) with the named codec, at `level` (gzip, lz4
    and zstd; None: Kafka's default level)."""
    if codec == "none":
        return data
    if codec not in CODEC_IDS:
        raise ValueError(f"unknown compression {codec!r}; expected one of {', '.join(CODEC_NAMES)}")
    if codec == "snappy":
        return _snappy_compress(data)
    if level is None:
        level = LEVELS[codec][2]
    if codec == "gzip":
        return _gzip.compress(data, compresslevel=level, mtime=0)
    if codec == "zstd":
        return _zstd_compressor(level).compress(data)
    return _lz4_compress(data, level)
