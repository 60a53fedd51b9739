"""storage.core.columns.batch_columns: the headers of every batch of a buffer in one C call.

Checked against the per-batch reader (records.iter_batches, itself checked against Kafka's
files and kafka-python) on real broker-written segments, Kafka's own JVM-written batches,
legacy v0/v1 message sets, and on generated buffers with flipped bytes and cut tails."""
from __future__ import annotations

import struct
import zlib

import pytest
from conftest import TESTDATA
from hypothesis import given, settings
from hypothesis import strategies as st

import storage
from storage.core import errors
from storage.core.columns import batch_columns
from storage.core.records import iter_batches

FIELDS = ("base_offset", "last_offset", "size_bytes", "partition_leader_epoch", "magic", "crc", "attributes",
          "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count")


def per_batch(buffer):
    """What iter_batches says, as (rows, stop): the reference."""
    rows, end = [], 0
    try:
        for b in iter_batches(buffer, verify=False):
            rows.append({"position": b.position, "crc_valid": int(b.is_valid()),
                         **{f: getattr(b, f) for f in FIELDS}})
            end = b.position + b.size_bytes
    except errors.StorageError as exc:
        return rows, ("error", exc.position)
    return rows, ("end", end)


def header_level(rows):
    """A compressed v0/v1 wrapper's base offset and record count come from its inner messages
    (RecordBatch decompresses them); the columns hold what the header says (offset = the last
    inner offset, count 1), so those two are compared only for the other rows."""
    return [{k: v for k, v in r.items() if not (r["magic"] < 2 and r["attributes"] & 7
                                                and k in ("base_offset", "record_count"))} for r in rows]


def columnar(buffer):
    c = batch_columns(buffer, crc="flag", strict=False)
    rows = [{name: column[i] for name, column in c.columns().items() if name in FIELDS + ("position", "crc_valid")}
            for i in range(len(c))]
    return rows, (("error", c.end) if c.stop not in (None, "partial") else ("end", c.end))


def segment_files():
    files = sorted(TESTDATA.glob("kafka-real/**/*.log")) + sorted(TESTDATA.glob("kafka-jvm-generated/**/*.log"))
    if not files:
        pytest.skip("tests/data holds no segment files")
    return files


def test_real_kafka_segments_match_the_per_batch_reader():
    checked = 0
    for path in segment_files():
        data = path.read_bytes()
        (rows, stop), (want, want_stop) = columnar(data), per_batch(data)
        assert (header_level(rows), stop) == (header_level(want), want_stop), path
        checked += len(batch_columns(data, crc="flag", strict=False))
    assert checked > 100


def test_legacy_message_sets_keep_kafka_no_value_fields():
    legacy = [p for p in segment_files() if "v1" in p.parent.name or "v0" in p.parent.name]
    assert legacy, "the kafka-go fixtures hold v0/v1 message sets"
    for path in legacy:
        c = batch_columns(path.read_bytes(), crc="flag", strict=False)
        for i in range(len(c)):
            if c.magic[i] < 2:
                assert c.producer_id[i] == -1 and c.partition_leader_epoch[i] == -1 and c.record_count[i] == 1
                assert c.base_offset[i] == c.last_offset[i]


def test_a_legacy_attributes_byte_is_signed_as_in_the_per_batch_reader():
    """Kafka's LegacyRecord.attributes() is a signed byte: a v0/v1 message whose attributes
    have the high bit set (damage, or a flip of a v2 batch's magic byte) reads the same negative
    number from the columns as from iter_batches (hypothesis found 129 against -127)."""
    for magic, attributes in ((0, 0x81), (1, 0xF0), (0, 0x7F)):
        body = bytes([magic, attributes]) + (b"\0" * 8 if magic else b"") + struct.pack(">ii", -1, 3) + b"abc"
        message = struct.pack(">qiI", 7, 4 + len(body), zlib.crc32(body)) + body
        assert columnar(message) == per_batch(message)
        assert batch_columns(message, crc="raise").attributes[0] == attributes - (256 if attributes > 127 else 0)


def test_a_crc_mismatch_raises_naming_file_position_and_offset():
    batches = [storage.build_batch([b"v%d" % i] * 3, base_offset=i * 3, partition_leader_epoch=1) for i in range(4)]
    buf = bytearray(b"".join(batches))
    position = len(batches[0]) + len(batches[1])
    buf[position + 70] ^= 0x01                    # inside the third batch's records
    with pytest.raises(errors.CorruptRecordError) as info:
        batch_columns(buf, source="x.log", start_position=1000)
    assert (info.value.file, info.value.position, info.value.offset) == ("x.log", 1000 + position, 6)
    flagged = batch_columns(buf, crc="flag")
    assert list(flagged.crc_valid) == [1, 1, 0, 1]
    assert list(batch_columns(buf, crc="skip").crc_valid) == [-1] * 4


def test_a_batch_that_cannot_be_delimited_stops_the_scan():
    good = storage.build_batch([b"a", b"b"], base_offset=0)
    bad = bytearray(storage.build_batch([b"c"], base_offset=2))
    bad[16] = 7                                   # magic 7
    with pytest.raises(errors.CorruptRecordError) as info:
        batch_columns(good + bad)
    assert info.value.position == len(good) and info.value.offset == 2
    c = batch_columns(good + bad, strict=False)
    assert len(c) == 1 and c.end == len(good) and "magic" in c.stop


def test_a_partial_tail_ends_quietly_and_batches_are_their_views():
    batches = [storage.build_batch([b"r%d" % i], base_offset=i) for i in range(3)]
    whole = b"".join(batches)
    c = batch_columns(whole + batches[0][:30])
    assert len(c) == 3 and c.stop == "partial" and c.end == len(whole)
    assert bytes(c.batch(1).view) == batches[1] and [r.value for r in c.batch(2).records()] == [b"r2"]
    assert c.compression(0) == "none"
    empty = batch_columns(b"")
    assert len(empty) == 0 and empty.stop is None and list(empty.base_offset) == []


def test_a_log_read_validates_in_one_call(tmp_path):
    with storage.PartitionLog.open(tmp_path / "t-0", storage.LogConfig(fsync=False)) as log:
        for _ in range(20):
            log.append_as_leader([b"x" * 500] * 4, leader_epoch=3)
        view = log.read(8, 4096)
        c = batch_columns(view)
        assert c.base_offset[0] <= 8 <= c.last_offset[0]
        assert set(c.partition_leader_epoch) == {3} and set(c.crc_valid) == {1}


def test_to_arrow_shares_the_columns():
    pa = pytest.importorskip("pyarrow", reason="pyarrow is in the [spark] extra")
    buf = b"".join(storage.build_batch([b"x"], base_offset=i, producer_id=9, producer_epoch=1, base_sequence=i)
                   for i in range(5))
    table = batch_columns(buf).to_arrow()
    assert table.num_rows == 5 and table.schema.field("producer_epoch").type == pa.int16()
    assert table.column("base_sequence").to_pylist() == [0, 1, 2, 3, 4]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 40), st.sampled_from(["none", "gzip", "zstd"])),
                min_size=0, max_size=6),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
       st.integers(0, 10_000))
def test_generated_buffers_with_damage_match_the_per_batch_reader(shapes, flips, cut):
    batches, offset = [], 0
    for count, size, codec in shapes:
        batches.append(storage.build_batch([bytes([offset % 251]) * size] * count, base_offset=offset,
                                           partition_leader_epoch=offset % 4, compression=codec))
        offset += count
    buf = bytearray(b"".join(batches))
    for position, value in flips:
        if buf:
            buf[position % len(buf)] = value
    if buf and cut % 3 == 0:
        del buf[cut % len(buf):]
    assert columnar(buf) == per_batch(buf)


def test_segment_columns_read_in_bounded_windows(tmp_path):
    """PartitionLog.segment_columns (the producer-state replay's reader) covers every batch
    from the one holding the start offset, a window at a time -- batches larger than the
    window included -- so its memory does not grow with the segment."""
    config = storage.LogConfig(fsync=False, segment_bytes=64 * 1024)
    with storage.PartitionLog.open(tmp_path / "t-0", config) as log:
        for i in range(60):
            log.append_as_leader([b"x" * (3000 if i % 7 == 0 else 40)] * (1 + i % 3), leader_epoch=1)
        everything = [(b.base_offset, b.last_offset) for b in log.batches()]
        for window in (200, 4096, 1 << 20):
            got = [(c.base_offset[i], c.last_offset[i]) for c, view in log.segment_columns(0, window=window)
                   for i in range(len(c))]
            assert got == everything, window
            start = everything[10][0] + 1
            got = [c.base_offset[i] for c, _ in log.segment_columns(start, window=window) for i in range(len(c))]
            assert got == [b for b, _ in everything[10:]]
        assert all(len(c) <= 4096 // 61 + 1 for c, _ in log.segment_columns(0, window=4096))
