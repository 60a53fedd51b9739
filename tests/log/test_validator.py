"""Leader appends of producer batches are checked as Kafka's LogValidator checks them
(storage/log/validator.py, csrc/batch.c check_client_batch).

Ported cases (Kafka's storage/src/test/.../LogValidatorTest.java, in our words):
  testBatchWithoutRecordsNotAllowed            -> test_batch_without_records_is_refused
  testNonIncreasingOffsetRecordBatchHasMetricsLogged
                                               -> test_record_count_must_match_offset_range
  testValidationOfBatchesWithNonSequentialInnerOffsets (v2: strict)
                                               -> test_non_sequential_inner_offsets_are_refused
  testControlRecordsNotAllowedFromClients      -> test_control_batch_from_a_producer_is_refused
  testControlRecordsNotCompressed (origin COORDINATOR accepted)
                                               -> test_coordinator_may_append_control_batches
  testInvalidRecordExceptionHasBatchIndex      -> test_malformed_record_is_named
and LogValidator.validateBatch's sequence check, the leader setting a batch's max timestamp
from its records (assignOffsetsNonCompressed / setMaxTimestamp), and the decompressed-records
walk of a compressed batch.  Every refusal leaves the log as it was.

Batches come from kafka-python's producer-side builder (a third-party writer), or are written
byte by byte here where a producer would never write them.
"""
from __future__ import annotations

import struct
import zlib

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

import storage
from storage.core import errors
from storage.core._native import lib

TS0 = 1_700_000_000_000


def zigzag_varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_record(offset_delta: int, timestamp_delta: int, value: bytes, *, key: bytes | None = None) -> bytes:
    body = bytes([0]) + zigzag_varint(timestamp_delta) + zigzag_varint(offset_delta)
    body += zigzag_varint(-1) if key is None else zigzag_varint(len(key)) + key
    body += zigzag_varint(len(value)) + value + zigzag_varint(0)
    return zigzag_varint(len(body)) + body


def batch_bytes(section: bytes, *, record_count: int, last_offset_delta: int, base_timestamp: int = TS0,
                max_timestamp: int | None = None, attributes: int = 0, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1) -> bytearray:
    """A v2 batch as a producer sends it (base offset 0, epoch 0), with a valid CRC."""
    if max_timestamp is None:
        max_timestamp = base_timestamp
    header = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_timestamp, max_timestamp,
                         producer_id, producer_epoch, base_sequence, record_count)
    crc = lib.plog_crc32c(0, header + section, len(header) + len(section))
    body = struct.pack(">ibI", 0, 2, crc) + header + section
    return bytearray(struct.pack(">qi", 0, len(body)) + body)


def kafka_python_batch(values, *, codec=0, timestamps=None, producer_id=-1, base_sequence=-1) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                        base_sequence=base_sequence, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=(timestamps or [TS0 + i for _ in values])[i], key=None, value=value, headers=[])
    return bytes(builder.build())


@pytest.fixture
def log(make_log):
    log = make_log()
    log.append_as_leader([storage.Record(None, TS0 - 1, None, b"seed", [])], 1)
    return log


def refused(log, buf, error, *, match=None, origin="client"):
    end, size = log.log_end_offset, log.size_bytes
    with pytest.raises(error, match=match) as info:
        if origin == "client":
            log.append_as_leader(buf, 1)          # the default origin
        else:
            log.append_as_leader(buf, 1, origin=origin)
    assert (log.log_end_offset, log.size_bytes) == (end, size), "a refused append changed the log"
    return info.value


# ---- accepted: real producer batches ---------------------------------------------------------

@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_producer_batches_are_accepted(log, codec):
    values = [b"v%d" % i * (i + 1) for i in range(30)]
    buf = kafka_python_batch(values, codec=codec, producer_id=7, base_sequence=0)
    info = log.append_as_leader(buf, 2)
    assert (info.first_offset, info.last_offset, info.record_count) == (1, 30, 30)
    assert info.max_timestamp == TS0 + 29
    [batch] = storage.iter_batches(log.read(1, 1 << 20))
    assert batch.base_offset == 1 and batch.partition_leader_epoch == 2
    assert [r.value for r in batch.records()] == values


# ---- batch-level checks (LogValidator.validateBatch) -----------------------------------------

@pytest.mark.parametrize("attributes", [0, 1, 4], ids=["none", "gzip", "zstd"])
def test_batch_without_records_is_refused(log, attributes):
    """testBatchWithoutRecordsNotAllowed: an empty header (record count 0, last offset delta 5)."""
    buf = batch_bytes(b"", record_count=0, last_offset_delta=5, attributes=attributes,
                      producer_id=1324, producer_epoch=10, base_sequence=984)
    exc = refused(log, buf, errors.InvalidRecordError, match="at least one record")
    assert exc.error_code == errors.Errors.INVALID_RECORD and exc.position == 0


def test_record_count_must_match_offset_range(log):
    """testNonIncreasingOffsetRecordBatchHasMetricsLogged: records at offsets 0, 2, 3, the last
    offset delta set to 2: three records but an offset range of three is fine only if the
    deltas agree -- here the count says 3 and the range says 3, but the deltas skip: refused
    by the record walk; and a count of 3 with a last offset delta of 4 by the batch check."""
    section = encode_record(0, 0, b"hello") + encode_record(2, 0, b"there") + encode_record(3, 0, b"beautiful")
    refused(log, batch_bytes(section, record_count=3, last_offset_delta=2), errors.InvalidRecordError,
            match="offset delta")
    exc = refused(log, batch_bytes(section, record_count=3, last_offset_delta=4), errors.InvalidRecordError,
                  match="inconsistent batch")
    assert "record count 3" in str(exc)


@pytest.mark.parametrize("codec", [0, 1], ids=["none", "gzip"])
def test_non_sequential_inner_offsets_are_refused(log, codec):
    """testValidationOfBatchesWithNonSequentialInnerOffsets (v2 is strict): 20 records whose
    offset deltas are not 0..19, count and range consistent."""
    section = b"".join(encode_record(d, 0, b"x") for d in [0, 1, 2] + list(range(4, 20)) + [3])
    if codec:
        section = gzip_compress(section)
    buf = batch_bytes(section, record_count=20, last_offset_delta=19, attributes=codec)
    exc = refused(log, buf, errors.InvalidRecordError, match="offset delta")
    assert exc.position == (61 + len(encode_record(0, 0, b"x")) * 3 if not codec else 0)   # record 3 has delta 4


def gzip_compress(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def test_control_batch_from_a_producer_is_refused(log):
    """testControlRecordsNotAllowedFromClients: a COMMIT marker sent as a producer batch."""
    marker = storage.build_batch([storage.Record(None, TS0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), [])],
                                 producer_id=23423, producer_epoch=5, is_transactional=True, is_control=True)
    refused(log, marker, errors.InvalidRecordError, match="control batches")


def test_coordinator_may_append_control_batches(log):
    """testControlRecordsNotCompressed: origin COORDINATOR writes the marker, unchanged."""
    marker = storage.build_batch([storage.Record(None, TS0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), [])],
                                 producer_id=23423, producer_epoch=5, is_transactional=True, is_control=True)
    info = log.append_as_leader(marker, 1, origin="coordinator")
    [batch] = storage.iter_batches(log.read(info.first_offset, 4096))
    assert batch.is_control and batch.compression == "none"
    with pytest.raises(ValueError, match="origin"):
        log.append_as_leader(marker, 1, origin="replication")


def test_producer_id_without_sequence_is_refused(log):
    """LogValidator.validateBatch: a batch with a producer id must carry a sequence number."""
    buf = kafka_python_batch([b"a"], producer_id=9, base_sequence=-1)
    refused(log, buf, errors.InvalidRecordError, match="sequence number -1 with producer id 9")


def test_log_append_time_from_a_producer_is_refused(log):
    section = encode_record(0, 0, b"a")
    exc = refused(log, batch_bytes(section, record_count=1, last_offset_delta=0, attributes=8),
                  errors.InvalidTimestampError, match="LogAppendTime")
    assert exc.error_code == errors.Errors.INVALID_TIMESTAMP


# ---- record-level checks ---------------------------------------------------------------------

def test_malformed_record_is_named(log):
    """testInvalidRecordExceptionHasBatchIndex: a record whose declared length overruns the
    batch (the CRC is valid: the producer wrote it so) -- refused, the position names the
    record."""
    good = encode_record(0, 0, b"ok")
    bad = bytearray(encode_record(1, 0, b"no"))
    bad[0] += 2 * 10                              # zig-zag length 10 more than the body has
    buf = batch_bytes(good + bytes(bad), record_count=2, last_offset_delta=1)
    exc = refused(log, buf, errors.InvalidRecordError, match="malformed record")
    assert exc.position == 61 + len(good)
    assert "(appended data)" in str(exc)


def test_bytes_left_after_the_records_are_refused(log):
    section = encode_record(0, 0, b"a") + b"\x00\x00"
    refused(log, batch_bytes(section, record_count=1, last_offset_delta=0), errors.InvalidRecordError,
            match="bytes left after 1 records")


@pytest.mark.parametrize("codec,compress", [(1, gzip_compress), (4, None)], ids=["gzip", "zstd"])
def test_compressed_records_are_walked(log, codec, compress):
    """Kafka decompresses a producer's compressed batch and iterates its records; a record count
    larger than what the stream holds is an InvalidRecordException."""
    if compress is None:
        import zstandard

        compress = zstandard.ZstdCompressor().compress
    section = compress(encode_record(0, 0, b"a") + encode_record(1, 0, b"b"))
    exc = refused(log, batch_bytes(section, record_count=3, last_offset_delta=2, attributes=codec),
                  errors.InvalidRecordError, match="fewer records than the batch's record count 3")
    assert exc.position == 0


def test_compressed_batch_with_a_bad_crc_is_corrupt_before_decompression(log):
    buf = bytearray(kafka_python_batch([b"a", b"b"], codec=1))
    buf[-1] ^= 0xFF
    exc = refused(log, buf, errors.CorruptRecordError, match="CRC")
    assert not isinstance(exc, errors.InvalidRecordError)


# ---- the leader sets the max timestamp from the records --------------------------------------

@pytest.mark.parametrize("codec", [0, 1], ids=["none", "gzip"])
def test_max_timestamp_is_set_from_the_records(log, codec):
    """A producer batch whose header max timestamp is not its largest record timestamp is
    stored with the records' (LogValidator sets it), and a CRC that holds."""
    section = encode_record(0, 0, b"a") + encode_record(1, 500, b"b") + encode_record(2, 20, b"c")
    if codec:
        section = gzip_compress(section)
    buf = batch_bytes(section, record_count=3, last_offset_delta=2, max_timestamp=TS0 + 7, attributes=codec)
    info = log.append_as_leader(buf, 1)
    assert info.max_timestamp == TS0 + 500 and info.offset_of_max_timestamp == 3
    [batch] = storage.iter_batches(log.read(1, 4096))
    assert batch.max_timestamp == TS0 + 500
    assert batch.is_valid()
    assert log.offset_for_timestamp(TS0 + 400).offset == 2   # the record at TS0 + 500


def test_timestamp_overflow_is_refused(log):
    section = encode_record(0, 2**62, b"a")
    refused(log, batch_bytes(section, record_count=1, last_offset_delta=0, base_timestamp=2**62 + 2**61),
            errors.InvalidTimestampError, match="overflows")


def test_follower_appends_are_not_producer_checked(make_log):
    """A follower copies what the leader stored (AppendOrigin.REPLICATION): an empty batch made
    by compaction (record count 0, an offset range kept) is accepted."""
    follower = make_log("f-0")
    buf = batch_bytes(b"", record_count=0, last_offset_delta=4)
    struct.pack_into(">q", buf, 0, 0)
    info = follower.append_as_follower(bytes(buf))
    assert info.last_offset == 4 and follower.log_end_offset == 5


def test_recheck_stops_at_a_broken_batch_after_a_compressed_one(log):
    """Found by the fuzz tier (a segfault): the C pass sends a chunk back at its first compressed
    batch, before it has parsed the batches after it; a broken batch there must come back as
    the C pass's own refusal of the chunk, not be read with a garbage size."""
    good = kafka_python_batch([b"a", b"b"], codec=1)
    broken = bytearray(kafka_python_batch([b"c"]))
    struct.pack_into(">i", broken, 8, 1 << 16)          # a length past the chunk's end
    exc = refused(log, good + bytes(broken), errors.CorruptRecordError)
    assert exc.position == len(good)
