"""The records of a batch to and from Python objects in C (csrc/pyrecords.c, storage._pyrecords).

build: a list of bytes values or (key, value) pairs is encoded from where the payloads lie,
without the join; every other shape takes the general path.  Both must give the same bytes,
and the walked batches must read back through kafka-python's decoder (a third-party codec).
decode: RecordBatch.records() builds every Record in C; kafka-python's decoder is the oracle.
"""
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import Record, build_batch, errors, iter_batches
from storage import records as records_module
from storage._native import build_listed, decode_records, ffi, lib

STAMP = 1_700_000_000_000

payloads = st.one_of(st.none(), st.binary(max_size=300))
walked_lists = st.lists(st.one_of(st.binary(max_size=300), st.tuples(payloads, payloads)), min_size=1, max_size=60)


def general(items):
    """The same records in shapes the walk refuses (Records), so the general path builds them."""
    return [Record(key=i[0], value=i[1]) if isinstance(i, tuple) else Record(value=i) for i in items]


@settings(max_examples=300, deadline=None)
@given(items=walked_lists, codec=st.sampled_from(["none", "zstd", "gzip"]), base_offset=st.integers(0, 2**40),
       epoch=st.integers(-1, 2**31 - 1), producer=st.integers(-1, 2**40), transactional=st.booleans())
def test_the_walk_builds_the_bytes_of_the_general_path(items, codec, base_offset, epoch, producer, transactional):
    options = dict(base_offset=base_offset, partition_leader_epoch=epoch, compression=codec, base_timestamp=STAMP,
                   producer_id=producer, producer_epoch=3 if producer >= 0 else -1,
                   base_sequence=7 if producer >= 0 else -1, is_transactional=transactional and producer >= 0)
    walked = build_batch(items, **options)
    if codec != "gzip":             # gzip stamps the time into its header
        assert walked == build_batch(general(items), **options)
    (batch,) = iter_batches(walked)
    batch.ensure_valid()
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch.records()]
    want = [(base_offset + n, STAMP, i[0] if isinstance(i, tuple) else None, i[1] if isinstance(i, tuple) else i, ())
            for n, i in enumerate(items)]
    assert got == want


def test_walked_batches_read_back_through_kafka_python():
    default_records = pytest.importorskip("kafka.record.default_records")
    items = [b"v0", (b"k1", b"v1"), (None, b"v2"), (b"k3", None), b"", b"x" * 5000]
    buf = build_batch(items, base_offset=40, base_timestamp=STAMP, partition_leader_epoch=9)
    batch = default_records.DefaultRecordBatch(buf)
    assert batch.validate_crc()
    assert batch.base_offset == 40
    got = [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    assert got == [(40, STAMP, None, b"v0"), (41, STAMP, b"k1", b"v1"), (42, STAMP, None, b"v2"),
                   (43, STAMP, b"k3", None), (44, STAMP, None, b""), (45, STAMP, None, b"x" * 5000)]


def test_a_list_of_values_is_walked_and_not_joined(monkeypatch):
    def refuse(*args):
        raise AssertionError("the general path ran for a list the walk takes")
    monkeypatch.setattr(records_module, "_encode_general", refuse)
    assert list(iter_batches(build_batch([b"a", (b"k", b"b")], base_timestamp=STAMP)))[0].record_count == 2


@pytest.mark.parametrize("odd", [bytearray(b"ba"), memoryview(b"mv"), Record(value=b"r"), (b"k", b"v", ()),
                                 (b"k", bytearray(b"v")), "text", 7])
def test_other_shapes_are_left_to_the_general_path(odd):
    items = [b"first", odd]
    assert build_listed(items, True, 0, -1, 0, STAMP, -1, -1, -1) is None
    if odd == 7:
        with pytest.raises(TypeError):
            build_batch(items, base_timestamp=STAMP)
    else:
        assert build_batch(items, base_timestamp=STAMP) == build_batch([Record(value=b"first"), _as_record(odd)],
                                                                        base_timestamp=STAMP)


def _as_record(odd):
    if isinstance(odd, Record):
        return odd
    if isinstance(odd, tuple):
        return Record(key=odd[0], value=bytes(odd[1]))
    return Record(value=odd.encode() if isinstance(odd, str) else bytes(odd))


def test_the_walk_leaves_the_header_zero_for_a_compressing_caller():
    section = build_listed([b"a", b"bc"], False, 5, 2, 0, STAMP, -1, -1, -1)
    assert section[:lib.PLOG_BATCH_OVERHEAD] == bytes(lib.PLOG_BATCH_OVERHEAD)
    finished = build_listed([b"a", b"bc"], True, 5, 2, 0, STAMP, -1, -1, -1)
    assert section[lib.PLOG_BATCH_OVERHEAD:] == finished[lib.PLOG_BATCH_OVERHEAD:]
    assert finished == build_batch([b"a", b"bc"], base_offset=5, partition_leader_epoch=2, base_timestamp=STAMP)


def test_the_walk_refuses_what_is_not_a_list_and_keeps_the_items_alive():
    with pytest.raises(TypeError):
        build_listed((b"a",), True, 0, -1, 0, STAMP, -1, -1, -1)
    assert build_listed([], True, 0, -1, 0, STAMP, -1, -1, -1) is None
    with pytest.raises(OverflowError):      # an int16 field out of range is refused, not wrapped
        build_listed([b"a"], True, 0, -1, 1 << 16, STAMP, -1, -1, -1)
    values = [bytes([i]) * 3 for i in range(200)]
    built = build_listed(values, True, 0, -1, 0, STAMP, -1, -1, -1)
    del values
    assert [r.value for r in next(iter_batches(built)).records()] == [bytes([i]) * 3 for i in range(200)]


# ---- decode -------------------------------------------------------------------------------

header_lists = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
full_records = st.lists(st.builds(Record, timestamp=st.one_of(st.none(), st.integers(0, 2**41)), key=payloads,
                                  value=payloads, headers=header_lists), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(items=full_records, codec=st.sampled_from(["none", "zstd"]), base_offset=st.integers(0, 2**50))
def test_records_decode_as_kafka_python_decodes_them(items, codec, base_offset):
    default_records = pytest.importorskip("kafka.record.default_records")
    buf = build_batch(items, base_offset=base_offset, compression=codec)
    (batch,) = iter_batches(buf)
    got = batch.records()
    assert all(type(r) is Record and type(r.headers) is list for r in got)
    want = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers])
            for r in default_records.DefaultRecordBatch(buf)]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == want


def refinish(buf: bytearray, **fields) -> bytearray:
    """Header fields changed and the CRC made right again."""
    info = ffi.new("plog_batch_info *")
    lib.plog_batch_parse(ffi.from_buffer(buf), len(buf), 0, 0, info)
    for name, value in fields.items():
        setattr(info, name, value)
    lib.plog_batch_finish(ffi.from_buffer(buf), len(buf), info)
    return buf


def test_log_append_time_gives_every_record_the_batch_max_timestamp():
    buf = refinish(bytearray(build_batch([Record(timestamp=10, value=b"a"), Record(timestamp=30, value=b"b")])),
                   attributes=lib.PLOG_ATTR_LOG_APPEND_TIME, max_timestamp=99)
    (batch,) = iter_batches(buf)
    assert batch.timestamp_type == "LogAppendTime"
    assert [r.timestamp for r in batch.records()] == [99, 99]


def test_timestamps_past_int64_are_python_ints_not_wrapped():
    """A crafted header can put base timestamp + delta past 2^63 - 1 (offsets cannot: such a
    batch does not parse): C must not overflow (UBSan in the sanitizer tier), Python ints hold
    the sum, as the Python decoder gave."""
    top = 2**63 - 1
    buf = refinish(bytearray(build_batch([Record(timestamp=0, value=b"a"), Record(timestamp=5, value=b"b")],
                                         base_offset=top - 10)), base_timestamp=top - 2)
    got = next(iter_batches(buf)).records()
    assert [r.offset for r in got] == [top - 10, top - 9]
    assert [r.timestamp for r in got] == [top - 2, top + 3]
    assert decode_records(buf[lib.PLOG_BATCH_OVERHEAD:], 2, top, 0, False, -1, Record)[1].offset == top + 1


def test_records_from_a_memoryview_of_a_bytearray_own_their_bytes():
    data = bytearray(build_batch([(b"k", b"value-1"), b"value-2"]))
    got = next(iter_batches(memoryview(data))).records()
    data[:] = bytes(len(data))
    assert [(r.key, r.value) for r in got] == [(b"k", b"value-1"), (None, b"value-2")]


def test_malformed_headers_are_refused_by_name():
    buf = bytearray(build_batch([Record(value=b"v", headers=[("h", b"x")])]))
    section = buf[lib.PLOG_BATCH_OVERHEAD:]
    # the record: length, attributes, ts delta, offset delta, key -1, value len, "v", 1 header,
    # key length 1 -> claim 60 header-key bytes that are not there
    at = section.index(b"\x02h") + lib.PLOG_BATCH_OVERHEAD
    buf[at] = 0x78
    (batch,) = iter_batches(refinish(buf))
    with pytest.raises(errors.InvalidRecordError, match="malformed record"):
        batch.records()
    rc = decode_records(bytes(buf[lib.PLOG_BATCH_OVERHEAD:]), 1, 0, 0, False, -1, Record)
    assert isinstance(rc, tuple) and rc[0] < 0


def test_a_malformed_record_names_its_byte():
    buf = bytearray(build_batch([b"abc", b"def"]))
    second = lib.PLOG_BATCH_OVERHEAD + 1 + buf[lib.PLOG_BATCH_OVERHEAD] // 2      # after the first record
    buf[second] = 0x7E                  # declared length 63: more than is there
    (batch,) = iter_batches(refinish(buf))
    with pytest.raises(errors.InvalidRecordError, match=f"malformed record at byte {second - lib.PLOG_BATCH_OVERHEAD} "):
        batch.records()
    assert struct.unpack(">i", buf[57:61])[0] == 2
