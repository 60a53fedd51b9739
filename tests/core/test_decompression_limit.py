"""Decompression is bounded (issue 13 item 4): a batch that expands beyond the limit is a
CorruptRecordError naming where it is, never hundreds of MiB of memory."""
import gzip
import struct

import pytest
import zstandard

from storage import build_batch, iter_batches
from storage.core import errors
from storage.core.codecs import DECOMPRESSED_BYTES_MAX, decompress

CHUNK = bytes(1 << 20)


def _zstd_bomb(expanded_mib: int) -> bytes:
    compressor = zstandard.ZstdCompressor(level=19).compressobj()
    return b"".join(compressor.compress(CHUNK) for _ in range(expanded_mib)) + compressor.flush()


def _batch_with_section(codec_name: str, section: bytes) -> bytes:
    """A valid v2 batch (CRC and all) whose records section is `section`: build one, then
    put the section in and let the C core rewrite the header."""
    from storage.core._native import ffi, lib

    template = bytearray(build_batch([b"x"], compression=codec_name))
    out = bytearray(template[:61] + section)
    info = ffi.new("plog_batch_info *")
    assert lib.plog_batch_parse(ffi.from_buffer(template), len(template), 0, 0, info) == 0
    with ffi.from_buffer(out) as pointer:
        assert lib.plog_batch_finish(pointer, len(out), info) == 0
    return bytes(out)


def test_an_8_kib_zstd_bomb_of_500_mib_is_refused_at_the_default_limit():
    bomb = _zstd_bomb(500)
    assert len(bomb) < 64 << 10
    batch = next(iter_batches(_batch_with_section("zstd", bomb), source="bomb.log"))
    with pytest.raises(errors.CorruptRecordError) as info:
        batch.records()
    assert "decompression limit" in str(info.value) and "bomb.log" in str(info.value)
    assert str(DECOMPRESSED_BYTES_MAX) in str(info.value)


@pytest.mark.parametrize("codec", ["gzip", "zstd", "lz4", "snappy"])
def test_every_codec_stops_at_the_limit(codec):
    data = bytes(3 << 20)
    if codec == "gzip":
        packed, codec_id = gzip.compress(data), 1
    elif codec == "zstd":
        packed, codec_id = zstandard.ZstdCompressor().compress(data), 4
    elif codec == "lz4":
        lz4f = pytest.importorskip("lz4.frame")
        packed, codec_id = lz4f.compress(data), 3
    else:
        cramjam = pytest.importorskip("cramjam")
        packed, codec_id = bytes(cramjam.snappy.compress_raw(data)), 2
    assert decompress(codec_id, packed, max_bytes=3 << 20) == data          # at the limit: fine
    with pytest.raises(errors.CorruptRecordError, match="decompression limit"):
        decompress(codec_id, packed, max_bytes=(3 << 20) - 1)              # one past it: refused


def test_records_takes_its_own_limit():
    batch = next(iter_batches(build_batch([bytes(100_000)] * 10, compression="zstd")))
    assert len(batch.records(max_decompressed_bytes=2_000_000)) == 10
    with pytest.raises(errors.CorruptRecordError):
        batch.records(max_decompressed_bytes=500_000)


def test_xerial_snappy_counts_every_block():
    cramjam = pytest.importorskip("cramjam")
    block = bytes(cramjam.snappy.compress_raw(bytes(1 << 20)))
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + (struct.pack(">i", len(block)) + block) * 3
    assert len(decompress(2, framed, max_bytes=3 << 20)) == 3 << 20
    with pytest.raises(errors.CorruptRecordError, match="decompression limit"):
        decompress(2, framed, max_bytes=(3 << 20) - 1)
