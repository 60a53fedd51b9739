"""Interoperability with kafka-python 3.0.12, both ways.

* batches built by `storage.build_batch` decode in kafka-python (`MemoryRecords` ->
  `DefaultRecordBatch`) with identical fields, and kafka-python's `validate_crc()` holds;
* batches built by kafka-python (`DefaultRecordBatchBuilder` / `MemoryRecordsBuilder`,
  every codec incl. lz4 and snappy, plus legacy magic 0/1) decode identically in ours;
* uncompressed batches are byte-identical to kafka-python's builder;
* a multi-segment `PartitionLog` is readable file by file with kafka-python;
* kafka-python batches appended with `append_as_follower` come back unchanged from `read()`.

kafka-python is a *producer-side* writer: its v2 builder always writes BaseOffset 0 and
PartitionLeaderEpoch 0 (both are assigned by the broker), and it encodes the `offset` passed
to `append()` directly as the record's offset delta.  So kafka-python batches are built with
offsets 0..n-1 and, where a real base offset / epoch is needed, those two header fields are
patched afterwards.  Both lie outside the CRC-32C (which covers attributes..end), so the
patched batch is exactly what a broker would store.
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

import storage

CODEC_ID = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TS0 = 1_700_000_000_000


# ---- helpers -------------------------------------------------------------------------------

def kp_batches(buf) -> list[dict]:
    """Decode with kafka-python: per batch its header fields, CRC validity and records."""
    out = []
    for batch in MemoryRecords(bytes(buf)):
        crc_ok = batch.validate_crc()            # must run before iteration
        info = {"type": type(batch), "crc_ok": crc_ok, "base_offset": batch.base_offset,
                "magic": batch.magic, "compression": batch.compression_type}
        if isinstance(batch, DefaultRecordBatch):
            info.update(
                last_offset=batch.last_offset, leader_epoch=batch.leader_epoch,
                first_timestamp=batch.first_timestamp, max_timestamp=batch.max_timestamp,
                producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence, is_transactional=batch.is_transactional,
                is_control=batch.is_control_batch, count=batch.records_count,
                timestamp_type=batch.timestamp_type)
        info["records"] = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        out.append(info)
    return out


def our_batches(buf) -> list[storage.RecordBatch]:
    return list(storage.iter_batches(bytes(buf)))


def rec_tuples(records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def kp_build(records, *, compression="none", producer_id=-1, producer_epoch=-1, base_sequence=-1,
             transactional=False) -> bytes:
    """One v2 batch from kafka-python's DefaultRecordBatchBuilder; records are
    (timestamp, key, value, headers) and get offsets 0..n-1."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=CODEC_ID[compression], is_transactional=transactional,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        batch_size=1 << 24)
    for i, (ts, key, value, headers) in enumerate(records):
        assert builder.append(i, ts, key, value, headers) is not None
    return bytes(builder.build())


def patch_v2(buf: bytes, *, base_offset: int | None = None, leader_epoch: int | None = None) -> bytes:
    """Set BaseOffset / PartitionLeaderEpoch of a v2 batch (both outside the CRC)."""
    out = bytearray(buf)
    if base_offset is not None:
        struct.pack_into(">q", out, 0, base_offset)
    if leader_epoch is not None:
        struct.pack_into(">i", out, 12, leader_epoch)
    return bytes(out)


def compressible(i: int, n: int = 60) -> bytes:
    return (b"payload-%d-" % i) * n


# A record mix exercising every nullable field: keys, a null key, a null value, headers with
# a null header value, an empty key/value, non-monotonic explicit timestamps.
MIXED = [
    (TS0 + 5, b"key-0", compressible(0), [("trace", b"abc"), ("nullhdr", None)]),
    (TS0 + 0, None, compressible(1), []),
    (TS0 + 9, b"key-2", None, [("h", b"")]),
    (TS0 + 9, b"", b"", []),
    (TS0 - 3, b"key-4", compressible(4), [("\u00fcml\u00e4ut", b"\x00\xff"), ("dup", b"1"), ("dup", b"2")]),
    (TS0 + 1, None, None, [("only-null", None)]),
]


def as_records(mixed):
    return [storage.Record(None, ts, k, v, h) for ts, k, v, h in mixed]


def expected_tuples(mixed, base_offset: int):
    return [(base_offset + i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(mixed)]


# ---- ours -> kafka-python ------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
@pytest.mark.parametrize("producer", [
    dict(producer_id=-1, producer_epoch=-1, base_sequence=-1, is_transactional=False),
    dict(producer_id=4242, producer_epoch=7, base_sequence=100, is_transactional=False),
    dict(producer_id=2**40 + 3, producer_epoch=32767, base_sequence=2**31 - 3, is_transactional=True),
], ids=["no-producer", "idempotent", "transactional"])
def test_ours_decode_in_kafka_python(compression, producer):
    buf = storage.build_batch(as_records(MIXED), base_offset=12345, partition_leader_epoch=17,
                              compression=compression, **producer)
    [kb] = kp_batches(buf)
    assert kb["type"] is DefaultRecordBatch
    assert kb["crc_ok"]
    assert kb["magic"] == 2
    assert kb["compression"] == CODEC_ID[compression]
    assert kb["base_offset"] == 12345
    assert kb["last_offset"] == 12345 + len(MIXED) - 1
    assert kb["leader_epoch"] == 17
    assert kb["count"] == len(MIXED)
    assert kb["first_timestamp"] == MIXED[0][0]
    assert kb["max_timestamp"] == max(m[0] for m in MIXED)
    assert kb["timestamp_type"] == 0
    assert kb["producer_id"] == producer["producer_id"]
    assert kb["producer_epoch"] == producer["producer_epoch"]
    assert kb["base_sequence"] == producer["base_sequence"]
    assert kb["is_transactional"] is producer["is_transactional"]
    assert kb["is_control"] is False
    assert kb["records"] == expected_tuples(MIXED, 12345)
    # and ours agrees with itself
    [ob] = our_batches(buf)
    assert ob.is_valid()
    assert rec_tuples(ob.records()) == kb["records"]


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_ours_input_forms_decode_in_kafka_python(compression):
    """bytes values, (key, value) and (key, value, headers) tuples; default timestamp."""
    for records, expect in [
        ([b"a", b"bb", b"ccc" * 100], [(None, b"a", []), (None, b"bb", []), (None, b"ccc" * 100, [])]),
        ([(b"k", b"v"), (None, b"w"), (b"x", None)], [(b"k", b"v", []), (None, b"w", []), (b"x", None, [])]),
        ([(b"k", b"v", [("a", b"1"), ("b", None)])], [(b"k", b"v", [("a", b"1"), ("b", None)])]),
    ]:
        buf = storage.build_batch(records, base_offset=7, base_timestamp=TS0, compression=compression)
        [kb] = kp_batches(buf)
        assert kb["crc_ok"]
        assert kb["leader_epoch"] == -1          # build_batch's default: NO_PARTITION_LEADER_EPOCH
        assert [(r[2], r[3], r[4]) for r in kb["records"]] == expect
        assert [r[0] for r in kb["records"]] == list(range(7, 7 + len(records)))
        assert {r[1] for r in kb["records"]} == {TS0}


def test_ours_control_batch_decodes_in_kafka_python():
    # A transaction COMMIT marker: key (version 0, type 1), value (version 0, coordinator epoch 5).
    key = struct.pack(">hh", 0, 1)
    value = struct.pack(">hi", 0, 5)
    buf = storage.build_batch([storage.Record(None, TS0, key, value, [])], base_offset=99,
                              partition_leader_epoch=3, producer_id=77, producer_epoch=1,
                              is_transactional=True, is_control=True)
    batch = next(iter(MemoryRecords(buf)))
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    [record] = list(batch)
    assert type(record).__name__ == "ControlRecord"
    assert record.commit and record.offset == 99 and record.value == value
    [ob] = our_batches(buf)
    assert ob.is_control and ob.is_transactional


def test_ours_log_append_time_batch_matches_kafka_python():
    """LogAppendTime: every record's timestamp is the batch max timestamp, in both readers."""
    import crc32c

    buf = bytearray(storage.build_batch(as_records(MIXED), base_offset=3))
    (attrs,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attrs | 0x08)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    [kb] = kp_batches(buf)
    [ob] = our_batches(buf)
    assert kb["crc_ok"] and ob.is_valid()
    assert kb["timestamp_type"] == 1 and ob.timestamp_type == "LogAppendTime"
    assert rec_tuples(ob.records()) == kb["records"]
    assert {r[1] for r in kb["records"]} == {max(m[0] for m in MIXED)}


# hypothesis: ours -> kafka-python, for arbitrary records -------------------------------------

_header_key = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
_blob = st.binary(max_size=40)
_record = st.tuples(
    st.integers(min_value=0, max_value=2**42),           # timestamp
    st.none() | _blob,                                   # key
    st.none() | _blob | st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=4), st.integers(1, 80)),
    st.lists(st.tuples(_header_key, st.none() | _blob), max_size=3),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(_record, min_size=1, max_size=12),
    compression=st.sampled_from(["none", "gzip", "zstd"]),
    base_offset=st.integers(min_value=0, max_value=2**62),
    leader_epoch=st.integers(min_value=-1, max_value=2**31 - 1),
    producer=st.one_of(
        st.just((-1, -1, -1, False)),
        st.tuples(st.integers(0, 2**62), st.integers(0, 32767), st.integers(0, 2**31 - 1), st.booleans()),
    ),
)
def test_property_ours_decodes_identically_in_kafka_python(records, compression, base_offset,
                                                           leader_epoch, producer):
    producer_id, producer_epoch, base_sequence, transactional = producer
    buf = storage.build_batch(
        [storage.Record(None, ts, k, v, h) for ts, k, v, h in records], base_offset=base_offset,
        partition_leader_epoch=leader_epoch, compression=compression, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, is_transactional=transactional)
    [kb] = kp_batches(buf)
    assert kb["crc_ok"]
    assert kb["compression"] == CODEC_ID[compression]
    assert kb["base_offset"] == base_offset
    assert kb["last_offset"] == base_offset + len(records) - 1
    assert kb["leader_epoch"] == leader_epoch
    assert kb["count"] == len(records)
    assert kb["first_timestamp"] == records[0][0]
    assert kb["max_timestamp"] == max(r[0] for r in records)
    assert (kb["producer_id"], kb["producer_epoch"], kb["base_sequence"], kb["is_transactional"]) == \
        (producer_id, producer_epoch, base_sequence, transactional)
    assert kb["records"] == expected_tuples(records, base_offset)

    if compression == "none":
        # Byte-identical to kafka-python's builder once the two broker-assigned header fields
        # (base offset, leader epoch; outside the CRC) are set the same.
        theirs = kp_build(records, producer_id=producer_id, producer_epoch=producer_epoch,
                          base_sequence=base_sequence, transactional=transactional)
        assert patch_v2(theirs, base_offset=base_offset, leader_epoch=leader_epoch) == buf


# ---- kafka-python -> ours ------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("producer", [(-1, -1, -1, False), (555, 2, 40, False), (556, 3, 0, True)],
                         ids=["no-producer", "idempotent", "transactional"])
def test_kafka_python_batches_decode_in_ours(compression, producer):
    producer_id, producer_epoch, base_sequence, transactional = producer
    raw = kp_build(MIXED, compression=compression, producer_id=producer_id, producer_epoch=producer_epoch,
                   base_sequence=base_sequence, transactional=transactional)
    buf = patch_v2(raw, base_offset=500, leader_epoch=9)
    [kb] = kp_batches(buf)
    # kafka-python falls back to "none" when compression does not pay: make sure it did not.
    assert kb["compression"] == CODEC_ID[compression]
    [ob] = our_batches(buf)
    assert ob.is_valid()
    assert ob.magic == 2
    assert ob.compression == compression
    assert ob.base_offset == kb["base_offset"] == 500
    assert ob.last_offset == kb["last_offset"]
    assert ob.partition_leader_epoch == kb["leader_epoch"] == 9
    assert ob.record_count == kb["count"] == len(MIXED)
    assert ob.crc == struct.unpack_from(">I", buf, 17)[0]
    assert ob.base_timestamp == kb["first_timestamp"]
    assert ob.max_timestamp == kb["max_timestamp"]
    assert (ob.producer_id, ob.producer_epoch, ob.base_sequence, ob.is_transactional) == \
        (producer_id, producer_epoch, base_sequence, transactional)
    assert ob.is_control is False
    assert ob.size_bytes == len(buf)
    assert ob.to_bytes() == buf
    assert rec_tuples(ob.records()) == kb["records"] == expected_tuples(MIXED, 500)


def test_kafka_python_memory_records_builder_multi_batch_decodes_in_ours():
    """Several MemoryRecordsBuilder batches (mixed codecs) concatenated as a broker would
    store them: base offsets and epochs patched, contiguous offsets."""
    chunks, expect = [], []
    next_offset = 1000
    for n, codec in enumerate(["zstd", "none", "lz4", "gzip", "snappy"]):
        builder = MemoryRecordsBuilder(magic=2, compression_type=CODEC_ID[codec], batch_size=1 << 20)
        count = 3 + n
        for i in range(count):
            key = None if i % 3 == 2 else b"k%d" % i
            headers = [("n", str(n).encode())] if i % 2 else []
            assert builder.append(TS0 + 10 * (next_offset + i), key, compressible(i, 30), headers) is not None
            expect.append((next_offset + i, TS0 + 10 * (next_offset + i), key, compressible(i, 30), headers))
        builder.close()
        chunks.append(patch_v2(bytes(builder.buffer()), base_offset=next_offset, leader_epoch=n // 2))
        next_offset += count
    buf = b"".join(chunks)
    ours = our_batches(buf)
    theirs = kp_batches(buf)
    assert len(ours) == len(theirs) == 5
    for ob, kb in zip(ours, theirs):
        assert ob.is_valid() and kb["crc_ok"]
        assert (ob.base_offset, ob.last_offset, ob.partition_leader_epoch, ob.record_count) == \
            (kb["base_offset"], kb["last_offset"], kb["leader_epoch"], kb["count"])
        assert CODEC_ID[ob.compression] == kb["compression"]
        assert rec_tuples(ob.records()) == kb["records"]
    assert [r for ob in ours for r in rec_tuples(ob.records())] == [
        (o, t, k, v, list(h)) for o, t, k, v, h in expect]


# byte identity ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["mixed", "values-only", "single", "producer-txn", "big-deltas"])
def test_uncompressed_build_is_byte_identical_to_kafka_python(case):
    producer = dict(producer_id=-1, producer_epoch=-1, base_sequence=-1, transactional=False)
    if case == "mixed":
        recs = MIXED
    elif case == "values-only":
        recs = [(TS0 + i, None, b"v%d" % i, []) for i in range(50)]
    elif case == "single":
        recs = [(TS0, b"k", b"v", [("h", None)])]
    elif case == "producer-txn":
        recs = MIXED[:3]
        producer = dict(producer_id=123456789, producer_epoch=4, base_sequence=77, transactional=True)
    else:   # timestamps far apart (multi-byte negative and positive varlong deltas), large values
        recs = [(TS0, b"a", b"x" * 300, []), (0, b"b", b"y" * 20000, []), (2**45, None, b"z", [])]
    theirs = kp_build(recs, **producer)
    ours_kwargs = dict(producer_id=producer["producer_id"], producer_epoch=producer["producer_epoch"],
                       base_sequence=producer["base_sequence"], is_transactional=producer["transactional"])
    # kafka-python (a producer) writes BaseOffset 0 and PartitionLeaderEpoch 0: identical as is.
    ours = storage.build_batch(as_records(recs), base_offset=0, partition_leader_epoch=0, **ours_kwargs)
    assert ours == theirs
    # With broker-assigned values the only difference is those two header fields, which are
    # outside the CRC; the CRC itself is therefore identical too.
    ours = storage.build_batch(as_records(recs), base_offset=987654321, partition_leader_epoch=12, **ours_kwargs)
    assert ours != theirs
    assert ours == patch_v2(theirs, base_offset=987654321, leader_epoch=12)
    assert ours[17:21] == theirs[17:21]


def test_kafka_python_offset_argument_is_a_delta_not_a_base_offset():
    """Documents why the tests above build kafka-python batches from offset 0: with
    MemoryRecordsBuilder(offset=N) kafka-python keeps BaseOffset 0 and writes N.. as the
    record offset deltas (a legal but non-canonical batch).  Ours decodes it the same way."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, offset=40)
    for i in range(3):
        builder.append(TS0 + i, b"k", b"v%d" % i)
    builder.close()
    buf = bytes(builder.buffer())
    [ob] = our_batches(buf)
    [kb] = kp_batches(buf)
    assert ob.base_offset == kb["base_offset"] == 0
    assert ob.last_offset == kb["last_offset"] == 42
    assert rec_tuples(ob.records()) == kb["records"]
    assert [r[0] for r in kb["records"]] == [40, 41, 42]
    # Ours, given the same records, writes the canonical form (deltas from 0); the batches differ.
    assert storage.build_batch([(b"k", b"v%d" % i) for i in range(3)], base_timestamp=TS0) != buf


# legacy (magic 0 / 1) --------------------------------------------------------------------------

def _legacy_build(magic: int, codec: str, base: int = 0):
    builder = MemoryRecordsBuilder(magic=magic, compression_type=CODEC_ID[codec], batch_size=1 << 20,
                                   offset=base)
    recs = [(TS0 + i, None if i % 2 == 0 else b"k%d" % i, None if i == 3 else compressible(i, 10))
            for i in range(5)]
    for ts, k, v in recs:
        assert builder.append(ts, k, v) is not None
    builder.close()
    return bytes(builder.buffer()), recs


@pytest.mark.parametrize("magic,codec", [
    (0, "none"), (0, "gzip"), (0, "snappy"), (0, "lz4"),
    (1, "none"),
    (1, "gzip"),
    (1, "snappy"),
    (1, "lz4"),
])
def test_kafka_python_legacy_batches_decode_in_ours(magic, codec):
    """Producer-side legacy message sets exactly as kafka-python writes them."""
    buf, recs = _legacy_build(magic, codec)
    theirs = kp_batches(buf)
    ours = our_batches(buf)
    assert len(ours) == len(theirs)
    for ob, kb in zip(ours, theirs):
        assert kb["type"] is LegacyRecordBatch and kb["crc_ok"]
        assert ob.is_valid() and ob.magic == magic == kb["magic"]
        assert CODEC_ID[ob.compression] == kb["compression"]
        # kafka-python's legacy timestamp is None for magic 0; ours is NO_TIMESTAMP (-1).
        kp_recs = [(o, -1 if t is None else t, k, v, h) for o, t, k, v, h in kb["records"]]
        assert rec_tuples(ob.records()) == kp_recs
        assert ob.record_count == len(kp_recs)
    expected_ts = [-1] * 5 if magic == 0 else [r[0] for r in recs]
    assert [r for ob in ours for r in rec_tuples(ob.records())] == [
        (i, expected_ts[i], k, v, []) for i, (_, k, v) in enumerate(recs)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_broker_style_v1_compressed_wrapper_decodes_in_ours(codec):
    """As a broker stores it: the v1 wrapper offset is the absolute offset of the last inner
    record (here 104), inner offsets stay relative (0..4) -> absolute 100..104 in both."""
    buf, recs = _legacy_build(1, codec)
    buf = bytearray(buf)
    struct.pack_into(">q", buf, 0, 104)     # the wrapper's log offset (outside the CRC)
    [kb] = kp_batches(buf)
    [ob] = our_batches(buf)
    assert kb["base_offset"] == 104
    assert ob.is_valid()
    assert (ob.base_offset, ob.last_offset, ob.record_count) == (100, 104, 5)
    assert rec_tuples(ob.records()) == kb["records"] == [
        (100 + i, ts, k, v, []) for i, (ts, k, v) in enumerate(recs)]


# ---- PartitionLog files read by kafka-python ---------------------------------------------------

def test_partition_log_segments_read_by_kafka_python(tmp_path):
    config = storage.LogConfig(segment_bytes=1500, index_interval_bytes=300, fsync=False)
    log = storage.PartitionLog.open(tmp_path / "topic-0", config)
    expected = []            # (offset, timestamp, key, value, headers, epoch)
    epochs = [0, 0, 1, 1, 1, 3, 3, 4, 7, 7, 7, 7]
    codecs = ["none", "zstd", "gzip", "snappy", "lz4"]
    for step in range(36):
        epoch = epochs[step // 3]
        codec = codecs[step % 5]
        start = log.log_end_offset
        n = 1 + step % 6
        recs = []
        for i in range(n):
            o = start + i
            key = None if o % 4 == 3 else b"key-%d" % o
            value = None if o % 11 == 10 else b"value-%d|" % o * (1 + o % 7)
            headers = [("o", str(o).encode()), ("null", None)] if o % 3 == 0 else []
            recs.append(storage.Record(None, TS0 + 10 * o, key, value, headers))
            expected.append((o, TS0 + 10 * o, key, value, headers, epoch))
        if step % 4 == 3:
            # pre-built batch bytes (wrong offsets/epoch on purpose): the leader rewrites them
            batch = storage.build_batch(recs, base_offset=999_999, partition_leader_epoch=55, compression=codec)
            info = log.append_as_leader(batch, epoch)
        else:
            info = log.append_as_leader(recs, epoch, compression=codec)
        assert (info.first_offset, info.last_offset) == (start, start + n - 1)
    assert len(log.segments) >= 3, log.segments
    segment_files = [(s.base_offset, s.log_path, s.offset_index_entries()) for s in log.segments]
    assert sum(len(entries) for _, _, entries in segment_files) >= len(segment_files)
    log.close()

    seen = []
    for base, path, index_entries in segment_files:
        data = open(path, "rb").read()
        assert path.endswith(f"{base:020d}.log")
        batches = kp_batches(data)
        assert batches, path
        assert batches[0]["base_offset"] == base
        positions, position = {}, 0        # batch position -> last offset
        for kb, size in zip(batches, (ob.size_bytes for ob in our_batches(data))):
            assert kb["crc_ok"], (path, kb["base_offset"])
            assert kb["magic"] == 2 and kb["type"] is DefaultRecordBatch
            positions[position] = kb["last_offset"]
            position += size
            for o, t, k, v, h in kb["records"]:
                seen.append((o, t, k, v, h, kb["leader_epoch"]))
        assert position == len(data)
        # Kafka's rule: an offset-index entry is (last offset of the appended chunk, its position)
        for offset, pos in index_entries:
            assert positions.get(pos) == offset, (path, offset, pos)
    assert seen == expected


# ---- kafka-python batches through append_as_follower and read() --------------------------------

def test_kafka_python_batches_follower_append_and_read(tmp_path):
    config = storage.LogConfig(segment_bytes=3000, index_interval_bytes=256, fsync=False)
    log = storage.PartitionLog.open(tmp_path / "follower-0", config)
    appended = []           # (base offset, bytes)
    next_offset = 0
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    for step in range(15):
        codec = codecs[step % 5]
        n = 2 + step % 4
        recs = [(TS0 + 7 * (next_offset + i), None if i == 1 else b"k%d" % (next_offset + i),
                 compressible(next_offset + i, 8), [("s", b"%d" % step)] if i % 2 == 0 else [])
                for i in range(n)]
        producer = (1000 + step, 0, next_offset, step % 2 == 1) if step % 3 else (-1, -1, -1, False)
        raw = kp_build(recs, compression=codec, producer_id=producer[0], producer_epoch=producer[1],
                       base_sequence=producer[2], transactional=producer[3])
        batch = patch_v2(raw, base_offset=next_offset, leader_epoch=step // 4)
        appended.append((next_offset, batch))
        next_offset += n
        if step == 9:
            next_offset += 5     # a gap, as after compaction: followers accept it
    # one append of several batches at once, the rest one by one
    log.append_as_follower(b"".join(b for _, b in appended[:4]))
    for _, batch in appended[4:]:
        log.append_as_follower(batch)
    assert log.log_end_offset == next_offset
    assert len(log.segments) > 1

    expected_kp = kp_batches(b"".join(b for _, b in appended))
    # Read everything back batch by batch, in small reads, and as one big read per segment.
    got = bytearray()
    offset = 0
    while offset < log.log_end_offset:
        view = log.read(offset, 1)
        assert len(view) > 0
        chunk = bytes(view)
        got += chunk
        offset = list(storage.iter_batches(chunk))[-1].last_offset + 1
    assert bytes(got) == b"".join(b for _, b in appended)
    assert kp_batches(got) == expected_kp

    # A read at an offset inside a batch returns that whole batch first.
    for base, batch in appended:
        view = bytes(log.read(base + 1, 1))
        assert view[:len(batch)] == batch
        first = kp_batches(view)[0]
        assert first == kp_batches(batch)[0]
    # A big read returns whole batches only, all decodable by kafka-python, CRC-valid.
    big = bytes(log.read(0, 10_000_000))
    decoded = kp_batches(big)
    assert all(b["crc_ok"] for b in decoded)
    assert decoded == expected_kp[:len(decoded)]
    log.close()
