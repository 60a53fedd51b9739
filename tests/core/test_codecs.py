"""Every codec Kafka knows is readable and writable on the default install (issue 32 item 1),
framed as Kafka's own producer frames it: snappy as snappy-java's xerial stream, lz4 as
Kafka's Lz4BlockOutputStream.  Third parties read what we write: kafka-python's codecs here,
Kafka's own classes in tests/interop/test_interop_jvm.py."""
import os
import struct

import pytest

from storage import build_batch, iter_batches
from storage.core import errors
from storage.core.codecs import CODEC_IDS, LEVELS, compress, decompress, xxh32

PAYLOADS = [b"a", os.urandom(1000), b"hello, kafka " * 20000, os.urandom(70_000) + bytes(200_000)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips_through_a_batch(codec):
    records = [(b"k%d" % i, os.urandom(50) * (i + 1)) for i in range(300)]
    (batch,) = iter_batches(build_batch(records, compression=codec))
    assert batch.compression == codec and batch.is_valid()
    assert [(r.key, r.value) for r in batch.records()] == records


@pytest.mark.parametrize("data", PAYLOADS, ids=["1B", "1K-random", "260K-text", "270K-mixed"])
def test_kafka_python_reads_what_we_write(data):
    codec = pytest.importorskip("kafka.codec")
    assert codec.snappy_decode(compress("snappy", data)) == data
    assert codec.lz4_decode(compress("lz4", data)) == data
    assert codec.gzip_decode(compress("gzip", data)) == data


def test_snappy_is_snappy_javas_xerial_stream_of_32_kib_blocks():
    data = os.urandom(40_000) + bytes(40_000)
    out = compress("snappy", data)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, sizes = 16, []
    import cramjam

    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        sizes.append(len(bytes(cramjam.snappy.decompress_raw(out[pos + 4:pos + 4 + length]))))
        pos += 4 + length
    assert sizes == [32768, 32768, 80000 - 65536]


def test_lz4_is_kafkas_frame():
    """Lz4BlockOutputStream's frame: FLG 0x60 (version 1, independent blocks, no checksums, no
    content size), BD 0x40 (64 KiB), the header checksum, 64 KiB blocks, an incompressible block
    stored plain (the high bit of its length), the end mark."""
    noise = os.urandom(65536)
    out = compress("lz4", noise + bytes(1000))
    assert out[:7] == bytes([0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, (xxh32(b"\x60\x40") >> 8) & 0xFF])
    (first,) = struct.unpack_from("<I", out, 7)
    assert first == 0x80000000 | 65536 and out[11:11 + 65536] == noise
    (second,) = struct.unpack_from("<I", out, 11 + 65536)
    assert second < 1000 and out[-4:] == bytes(4) and len(out) == 11 + 65536 + 4 + second + 4
    assert decompress(3, out) == noise + bytes(1000)


def test_xxh32_matches_the_reference():
    xxhash = pytest.importorskip("xxhash")
    for n in list(range(40)) + [100, 1001]:
        data = os.urandom(n)
        assert xxh32(data) == xxhash.xxh32(data).intdigest()
        assert xxh32(data, 7) == xxhash.xxh32(data, seed=7).intdigest()


@pytest.mark.parametrize("linked", [True, False])
@pytest.mark.parametrize("checksums", [True, False])
def test_lz4_frames_of_other_writers_are_read(linked, checksums):
    """python-lz4 (as kafka-python and librdkafka's lz4) may write linked blocks, checksums and
    a content size: all standard LZ4 frames read."""
    lz4f = pytest.importorskip("lz4.frame")
    data = b"".join(b"record %d; " % i for i in range(40_000))
    frame = lz4f.compress(data, block_linked=linked, content_checksum=checksums, block_checksum=checksums,
                          store_size=checksums)
    assert decompress(3, frame) == data


def test_lz4_header_checksum_is_checked_except_for_magic_0():
    """Kafka 0.8 computed the header checksum over the frame magic too; Kafka ignores the
    checksum for magic 0 and checks it from magic 1 on, and so do we."""
    frame = bytearray(compress("lz4", b"payload" * 10))
    frame[6] ^= 0xFF
    assert decompress(3, bytes(frame), magic=0) == b"payload" * 10
    with pytest.raises(errors.CorruptRecordError, match="header checksum"):
        decompress(3, bytes(frame), magic=1)


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_levels_are_kafkas_and_each_reads_back(codec):
    low, high, default = LEVELS[codec]
    data = b"".join(b"%d," % i for i in range(50_000))
    for level in (max(low, 1), default, high):
        assert decompress(CODEC_IDS[codec], compress(codec, data, level)) == data
