"""Batch format: byte-exact vectors (docs/kafka-formats.md 1.8), building, iteration, bad input."""
import struct

import pytest

from storage import Record, RecordBatch, build_batch, iter_batches
from storage.core import errors
from storage.core._native import ffi, lib

B1 = bytes.fromhex(
    "0000000000000000" "00000047" "00000007" "02" "fa4029f1" "0000" "00000001"
    "00000000000003e8" "00000000000003ed" "ffffffffffffffff" "ffff" "ffffffff" "00000002"
    "0e000000010261" "00"
    "1a000a02026b04626302026802" "76")
B2 = bytes.fromhex(
    "0000000000000005" "00000031" "00000003" "02" "b23b412b" "0000" "00000000" "ffffffffffffffff"
    "00000000000004d2" "000000000000000a" "0000" "00000000" "00000000")


def test_vector_b1_byte_exact():
    batch = build_batch([(None, b"a"), Record(key=b"k", value=b"bc", headers=[("h", b"v")], timestamp=1005)],
                        partition_leader_epoch=7, base_timestamp=1000)
    assert len(batch) == 83
    assert batch == B1


def test_vector_b2_empty_batch_header():
    out = bytearray(61)
    info = ffi.new("plog_batch_info *")
    info.base_offset, info.partition_leader_epoch, info.attributes = 5, 3, 0
    info.last_offset_delta, info.base_timestamp, info.max_timestamp = 0, -1, 1234
    info.producer_id, info.producer_epoch, info.base_sequence, info.record_count = 10, 0, 0, 0
    assert lib.plog_batch_finish(ffi.from_buffer(out), 61, info) == 0
    assert bytes(out) == B2
    (batch,) = iter_batches(B2)
    assert batch.record_count == 0 and batch.max_timestamp == 1234 and batch.is_valid()


@pytest.mark.parametrize("value,encoded", [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (2, "04"), (63, "7e"), (-64, "7f"), (64, "8001"),
    (-65, "8101"), (300, "d804"), (2147483647, "feffffff0f"), (-2147483648, "ffffffff0f"), (1000, "d00f")])
def test_zigzag_varint_vectors(value, encoded):
    out = ffi.new("uint8_t[10]")
    n = lib.plog_varint_encode(value, out)
    assert ffi.buffer(out, n)[:].hex() == encoded


def test_vector_b1_decodes():
    (batch,) = iter_batches(B1)
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch, batch.crc) == (0, 1, 7, 0xFA4029F1)
    assert batch.records() == [Record(0, 1000, None, b"a", []), Record(1, 1005, b"k", b"bc", [("h", b"v")])]
    assert batch.compression == "none" and batch.timestamp_type == "CreateTime"


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_round_trip_all_record_shapes(compression):
    records = [b"plain", (b"key", b"value"), (None, None), (b"k2", b"v2", [("a", b"1"), ("b", None)]),
               Record(key=b"r", value=b"x" * 5000, headers=(), timestamp=123456)]
    batch_bytes = build_batch(records, base_offset=40, partition_leader_epoch=2, compression=compression,
                              base_timestamp=123000, producer_id=9, producer_epoch=1, base_sequence=5,
                              is_transactional=True)
    (batch,) = iter_batches(batch_bytes)
    assert batch.compression == compression and batch.is_transactional and not batch.is_control
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 1, 5)
    assert batch.max_timestamp == 123456
    got = batch.records()
    assert [r.offset for r in got] == [40, 41, 42, 43, 44]
    assert [(r.key, r.value) for r in got] == [(None, b"plain"), (b"key", b"value"), (None, None),
                                              (b"k2", b"v2"), (b"r", b"x" * 5000)]
    assert got[3].headers == [("a", b"1"), ("b", None)]
    assert [r.timestamp for r in got] == [123000] * 4 + [123456]


def test_empty_records_rejected_and_unknown_codec():
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError, match="unknown compression"):
        build_batch([b"x"], compression="brotli")


def test_iteration_stops_at_partial_tail_and_is_zero_copy():
    data = b"".join(build_batch([b"v%d" % i], base_offset=i) for i in range(3))
    whole = list(iter_batches(data))
    assert [b.base_offset for b in whole] == [0, 1, 2]
    assert [b.base_offset for b in iter_batches(data[:-1])] == [0, 1]
    assert list(iter_batches(data[:17])) == []
    buffer = bytearray(data)
    view_batch = next(iter_batches(buffer))
    buffer[19] ^= 0xFF                  # the batch view shares memory with the buffer
    assert not view_batch.is_valid()


# ---- bad input: each case names the source, the position and the offset -------------------

def _three_batches():
    return [build_batch([b"a" * 20], base_offset=i * 10) for i in range(3)]


def test_bad_crc_names_position_and_offset():
    batches = _three_batches()
    data = bytearray(b"".join(batches))
    position = len(batches[0])
    data[position + 70] ^= 1
    with pytest.raises(errors.CorruptRecordError) as info:
        list(iter_batches(data, source="f.log"))
    assert info.value.position == position and info.value.offset == 10 and info.value.file == "f.log"
    assert "f.log" in str(info.value) and f"position {position}" in str(info.value) and "offset 10" in str(info.value)
    assert [b.is_valid() for b in iter_batches(data, verify=False)] == [True, False, True]


def test_wrong_magic():
    data = bytearray(_three_batches()[0])
    data[16] = 7
    with pytest.raises(errors.CorruptRecordError, match="magic") as info:
        list(iter_batches(data, source="x"))
    assert info.value.position == 0 and info.value.offset == 0


def test_size_field_below_minimum_is_corrupt():
    data = bytearray(_three_batches()[0])
    data[8:12] = struct.pack(">i", 13)
    with pytest.raises(errors.CorruptRecordError, match="size field 13"):
        list(iter_batches(data))


def test_v2_batch_shorter_than_header_is_corrupt():
    data = bytearray(_three_batches()[0])
    data[8:12] = struct.pack(">i", 40)    # >= 14 but total 52 < 61
    with pytest.raises(errors.CorruptRecordError):
        list(iter_batches(data[:52]))


def test_oversized_batch():
    data = build_batch([b"z" * 2000])
    with pytest.raises(errors.RecordTooLargeError) as info:
        list(iter_batches(data, max_batch_bytes=1000))
    assert info.value.error_code == errors.Errors.MESSAGE_TOO_LARGE


def test_malformed_record_inside_valid_crc_batch():
    good = bytearray(build_batch([b"abc", b"def"]))
    # Corrupt the first record's length varint and fix the CRC: the batch passes isValid but
    # records() applies Kafka's record-level checks.
    good[61] = 0x7E   # declared length 63 > what is there
    info = ffi.new("plog_batch_info *")
    lib.plog_batch_parse(ffi.from_buffer(good), len(good), 0, 0, info)
    info.base_timestamp, info.max_timestamp = info.base_timestamp, info.max_timestamp
    lib.plog_batch_finish(ffi.from_buffer(good), len(good), info)
    (batch,) = iter_batches(good)
    assert batch.is_valid()
    with pytest.raises(errors.InvalidRecordError, match="malformed record"):
        batch.records()


def test_record_count_larger_than_payload_is_rejected():
    data = bytearray(build_batch([b"abc"]))
    data[57:61] = struct.pack(">i", 1_000_000)
    info = ffi.new("plog_batch_info *")
    lib.plog_batch_parse(ffi.from_buffer(data), len(data), 0, 0, info)
    lib.plog_batch_finish(ffi.from_buffer(data), len(data), info)
    (batch,) = iter_batches(data)
    with pytest.raises(errors.InvalidRecordError, match="record count"):
        batch.records()


def test_missing_codec_library_is_named(monkeypatch):
    import builtins

    lz4_batch = bytearray(build_batch([b"payload"]))
    # Pretend the payload is lz4 (attribute codec 3) and hide every lz4 library.
    lz4_batch[22] = 3
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith(("lz4", "cramjam")):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    (batch,) = iter_batches(bytes(lz4_batch), verify=False, source="seg.log")
    with pytest.raises(errors.UnsupportedCodecError, match="compressed with lz4.*no lz4 library") as info:
        batch.records()
    assert info.value.file == "seg.log" and info.value.position == 0


def test_recordbatch_repr_and_bytes():
    data = build_batch([b"q"], base_offset=3, partition_leader_epoch=4)
    (batch,) = iter_batches(data)
    assert isinstance(batch, RecordBatch)
    assert batch.to_bytes() == data and batch.size_bytes == len(data)
    assert "base_offset=3" in repr(batch)


def test_errors_in_a_view_from_log_read_name_the_file_and_position(tmp_path):
    """Issue 13 item 7: iter_batches(log.read(...)) names the segment file and the byte
    position in it, though the view itself carries no name (zero-copy)."""
    from storage import LogConfig, PartitionLog

    log = PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False))
    for i in range(5):
        log.append_as_leader([b"v%d" % i * 20], 0)
    path = log.active_segment.log_path
    view = log.read(2, 1 << 20)
    position = log.active_segment.find(2)
    with open(path, "r+b") as f:          # the mapping is shared: damage shows through the view
        f.seek(position + 70)
        f.write(b"\xff\xff")
    with pytest.raises(errors.CorruptRecordError) as info:
        list(iter_batches(view))
    assert info.value.file == path and info.value.position == position and info.value.offset == 2
    log.close()


def test_a_kept_error_from_a_mapped_view_does_not_crash_the_collector():
    """Regression: iter_batches held a live buffer export of a log view in its frame; a caller
    that kept the CorruptRecordError (its traceback holds the frame) crashed CPython in
    memory_dealloc when the cycle collector cleared them.  Runs in a child process."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import gc, tempfile
        from storage import LogConfig, PartitionLog, errors, iter_batches
        log = PartitionLog.open(tempfile.mkdtemp() + "/t-0", LogConfig(fsync=False))
        for i in range(5):
            log.append_as_leader([b"v%d" % i * 20], 0)
        path, view, position = log.active_segment.log_path, log.read(2, 1 << 20), log.active_segment.find(2)
        with open(path, "r+b") as f:
            f.seek(position + 70)
            f.write(b"\\xff\\xff")
        kept = []
        try:
            list(iter_batches(view))
        except errors.CorruptRecordError as exc:
            kept.append(exc)
        log.close()
        del view, log
        kept.append(kept)          # a cycle, as pytest's ExceptionInfo makes one
        del kept
        for _ in range(3):
            gc.collect()
        print("survived")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "survived", (result.returncode, result.stderr[-1500:])


def test_one_spelling_of_c_error_text():
    """errors.error_text is the one place a C result becomes text: there were two spellings
    (records.describe_error, and ffi.string(lib.plog_strerror(...)) written out in records'
    builders) and a third, unused one (_native.strerror)."""
    import errno
    import os
    from pathlib import Path

    import storage

    assert errors.error_text(lib.PLOG_ECRC) == "corrupt batch: CRC mismatch"
    assert errors.error_text(errno.ENOSPC) == os.strerror(errno.ENOSPC)
    package = Path(storage.__file__).parent
    spelled = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if "plog_strerror(" in p.read_text())
    assert spelled == ["core/errors.py"]


def test_one_map_from_c_error_codes_to_exceptions():
    """errors.error_class is the one table (it was four: the log's append, iter_batches, the
    segment's checks and the validator each mapped codes themselves, and they differed)."""
    from storage.core._native import lib
    from storage.core.errors import error_class

    assert error_class(lib.PLOG_ETOOLARGE) is errors.RecordTooLargeError
    assert error_class(lib.PLOG_ECRC) is errors.CorruptRecordError
    assert error_class(lib.PLOG_ERECORD) is errors.InvalidRecordError
    assert error_class(lib.PLOG_EAPPENDOFFSET) is errors.UnexpectedAppendOffsetError
    assert error_class(5) is errors.StorageIOError                  # an errno
    assert error_class(lib.PLOG_EINDEXFULL) is errors.StorageError   # not a data problem
