"""The records of a batch to and from Python objects in C (csrc/pyrecords.c, storage._pyrecords).

build: a list of values, (key, value) / (key, value, headers) tuples or Records, with bytes,
bytearray, memoryview, str or None payloads and int timestamps, is encoded from where the payloads lie, without the
join; every other shape is normalised into those first (the general path).  Both must give
the same bytes, and the walked batches must read back through kafka-python's decoder (a
third-party codec).
decode: RecordBatch.records() builds every Record in C; kafka-python's decoder is the oracle.
"""
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage import Record, build_batch, iter_batches
from storage.core import errors
from storage.core import records as records_module
from storage.core._native import build_listed, decode_records, ffi, lib
from tests.tiers import tiered

STAMP = 1_700_000_000_000


def walk(items, finish=True, *, base_offset=0, epoch=-1, attributes=0, base_timestamp=STAMP, now=STAMP + 5):
    return build_listed(items, finish, base_offset, epoch, attributes, base_timestamp, now, -1, -1, -1, Record)


def general_build(items, **options) -> bytes:
    """build_batch of the records normalised first (records._normalise): the general path's
    bytes, which its second walk builds."""
    return build_batch(records_module._normalise(list(items)), **options)


payloads = st.one_of(st.none(), st.binary(max_size=300), st.text(max_size=20),
                     st.binary(max_size=40).map(bytearray), st.binary(max_size=40).map(memoryview))
header_lists = st.lists(st.tuples(st.one_of(st.text(max_size=8), st.binary(max_size=8)),
                                  st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=5))), max_size=3)
timestamps = st.one_of(st.none(), st.integers(0, 2**41))
walked_items = st.one_of(
    st.binary(max_size=300), st.text(max_size=20), st.none(), st.binary(max_size=40).map(bytearray),
    st.tuples(payloads, payloads),
    st.tuples(payloads, payloads, header_lists),
    st.builds(Record, timestamp=timestamps, key=payloads, value=payloads, headers=header_lists))


@tiered(400, deadline=None)
@given(items=st.lists(walked_items, min_size=1, max_size=60), codec=st.sampled_from(["none", "zstd", "gzip"]),
       base_offset=st.integers(0, 2**40), epoch=st.integers(-1, 2**31 - 1), producer=st.integers(-1, 2**40),
       transactional=st.booleans(), base_timestamp=st.one_of(st.none(), st.just(STAMP)))
def test_the_walk_builds_the_bytes_of_the_general_path(items, codec, base_offset, epoch, producer, transactional,
                                                       base_timestamp):
    options = dict(base_offset=base_offset, partition_leader_epoch=epoch, compression=codec,
                   base_timestamp=base_timestamp, producer_id=producer, producer_epoch=3 if producer >= 0 else -1,
                   base_sequence=7 if producer >= 0 else -1, is_transactional=transactional and producer >= 0)
    assert walk(items) is not None          # every shape drawn here is one the walk takes
    if base_timestamp is None and not (isinstance(items[0], Record) and items[0].timestamp is not None):
        options["base_timestamp"] = STAMP   # "now" would differ between the two builds
    walked = build_batch(items, **options)
    if codec != "gzip":                     # gzip stamps the time into its header
        assert walked == general_build(items, **options)
    (batch,) = iter_batches(walked)
    batch.ensure_valid()
    assert batch.record_count == len(items)


def test_walked_batches_read_back_through_kafka_python():
    default_records = pytest.importorskip("kafka.record.default_records")
    items = [b"v0", (b"k1", b"v1"), (None, b"v2"), (b"k3", None), b"", b"x" * 5000, "s\u00e9",
             (b"k7", b"v7", [("h", b"1"), (b"raw", None)]), Record(timestamp=STAMP + 9, key=b"k8", value=b"v8",
                                                                  headers=[("t", "x")])]
    buf = build_batch(items, base_offset=40, base_timestamp=STAMP, partition_leader_epoch=9)
    batch = default_records.DefaultRecordBatch(buf)
    assert batch.validate_crc()
    assert batch.base_offset == 40 and batch.max_timestamp == STAMP + 9
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(40, STAMP, None, b"v0", []), (41, STAMP, b"k1", b"v1", []), (42, STAMP, None, b"v2", []),
                   (43, STAMP, b"k3", None, []), (44, STAMP, None, b"", []), (45, STAMP, None, b"x" * 5000, []),
                   (46, STAMP, None, "s\u00e9".encode(), []), (47, STAMP, b"k7", b"v7", [("h", b"1"), ("raw", None)]),
                   (48, STAMP + 9, b"k8", b"v8", [("t", b"x")])]


def test_records_with_timestamps_and_headers_are_walked_not_normalised(monkeypatch):
    def refuse(*args):
        raise AssertionError("the general path ran for a list the walk takes")
    monkeypatch.setattr(records_module, "_normalise", refuse)
    items = [b"a", (b"k", b"b"), Record(timestamp=STAMP - 3, value=b"c", headers=[("h", b"v")])]
    (batch,) = iter_batches(build_batch(items))
    assert batch.record_count == 3 and batch.max_timestamp == batch.base_timestamp > STAMP   # base: now
    (batch,) = iter_batches(build_batch(items[2:] + items[:2]))
    assert (batch.base_timestamp, batch.max_timestamp) == (STAMP - 3, STAMP - 3)   # base: the first record's


class Point(tuple):
    """A tuple subclass that is not a Record."""


@pytest.mark.parametrize("odd", [memoryview(b"abcdef")[::2], Point((b"p",)),
                                 Record(value=b"r", timestamp=1.5), Record(value=b"r", headers=[["h", b"v"]]),
                                 Record(value=b"r", headers=[(None, b"v")]), Record(value=b"r", timestamp=2**63),
                                 (b"k",), "\ud800", 7])
def test_other_shapes_are_left_to_the_general_path(odd):
    items = [b"first", odd]
    assert walk(items) is None
    try:
        want = general_build(items, base_timestamp=STAMP)
    except (TypeError, ValueError, UnicodeError, struct.error, OverflowError) as exc:
        with pytest.raises(type(exc)):
            build_batch(items, base_timestamp=STAMP)
    else:
        assert build_batch(items, base_timestamp=STAMP) == want


def test_the_walk_leaves_the_header_zero_for_a_compressing_caller():
    section, base, newest = walk([b"a", b"bc"], False, base_offset=5, epoch=2)
    assert section[:lib.PLOG_BATCH_OVERHEAD] == bytes(lib.PLOG_BATCH_OVERHEAD) and base == newest == STAMP
    finished = walk([b"a", b"bc"], base_offset=5, epoch=2)[0]
    assert section[lib.PLOG_BATCH_OVERHEAD:] == finished[lib.PLOG_BATCH_OVERHEAD:]
    assert finished == build_batch([b"a", b"bc"], base_offset=5, partition_leader_epoch=2, base_timestamp=STAMP)
    assert walk([b"a"], base_timestamp=None)[1] == STAMP + 5                  # now, when no record has one
    assert walk([Record(timestamp=7, value=b"a"), b"b"], base_timestamp=None)[1:] == (7, 7)


def test_the_walk_refuses_what_is_not_a_list_and_keeps_the_items_alive():
    with pytest.raises(TypeError):
        walk((b"a",))
    assert walk([]) is None
    with pytest.raises(OverflowError):      # an int16 field out of range is refused, not wrapped
        walk([b"a"], attributes=1 << 16)
    values = [bytes([i]) * 3 for i in range(200)]
    built = walk(values)[0]
    del values
    assert [r.value for r in next(iter_batches(built)).records()] == [bytes([i]) * 3 for i in range(200)]


def test_a_timestamp_delta_past_int64_is_refused_not_wrapped():
    """Both paths: the core checks base + delta (UBSan in the sanitizer tier would see a wrap)."""
    items = [Record(timestamp=2**63 - 1, value=b"a"), Record(timestamp=-5, value=b"b")]
    assert walk(items, base_timestamp=None) == lib.PLOG_ETIMESTAMP
    for build in (build_batch, general_build):
        with pytest.raises(ValueError, match="timestamp"):
            build(items)


@tiered(200, deadline=None)
@given(records=st.lists(st.builds(Record, offset=st.integers(0, 2**31 - 1), timestamp=st.integers(0, 2**41),
                                  key=st.one_of(st.none(), st.binary(max_size=30)),
                                  value=st.one_of(st.none(), st.binary(max_size=30)),
                                  headers=st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(
                                      max_size=6))), max_size=2)),
                        min_size=1, max_size=30, unique_by=lambda r: r.offset),
       base=st.integers(0, 2**40))
def test_records_keep_their_own_offsets_when_asked(records, base):
    """The cleaner's rebuild (offset_base): each record's offset delta is its own offset minus
    the batch's base, gaps and all; kafka-python reads the offsets, timestamps and headers back."""
    default_records = pytest.importorskip("kafka.record.default_records")
    kept = sorted((r._replace(offset=base + r.offset) for r in records), key=lambda r: r.offset)
    built = build_listed(kept, True, base, 0, 0, kept[0].timestamp, 0, -1, -1, -1, Record, base)
    assert built[2] == max(max(r.timestamp for r in kept), -1)
    section = built[0][lib.PLOG_BATCH_OVERHEAD:]
    buf = bytearray(built[0])
    buf[23:27] = struct.pack(">i", kept[-1].offset - base)         # last offset delta: the last kept record's
    refinish(buf)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in default_records.DefaultRecordBatch(bytes(buf))]
    assert got == [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in kept]
    assert bytes(section) == bytes(buf[lib.PLOG_BATCH_OVERHEAD:])


def test_offsets_outside_the_batch_are_not_walked():
    assert build_listed([Record(offset=4, value=b"a")], True, 5, 0, 0, STAMP, 0, -1, -1, -1, Record, 5) is None
    assert build_listed([Record(offset=5 + 2**31, value=b"a")], True, 5, 0, 0, STAMP, 0, -1, -1, -1, Record, 5) is None
    assert build_listed([b"not a Record"], True, 5, 0, 0, STAMP, 0, -1, -1, -1, Record, 5) is None


# ---- decode -------------------------------------------------------------------------------

decoded_headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
binaries = st.one_of(st.none(), st.binary(max_size=300))
full_records = st.lists(st.builds(Record, timestamp=timestamps, key=binaries, value=binaries,
                                  headers=decoded_headers), min_size=1, max_size=40)


@tiered(300, deadline=None)
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


def test_an_appender_keeps_its_struct_and_counts_alive(tmp_path):
    """appender (PartitionLog's one-call append) holds the cffi object that owns its
    plog_validate struct and the AppendCounts it adds to: a bound `append` that outlives the
    state that made it still writes into live memory (the sanitizer tier runs this file)."""
    import gc

    from storage import AppendInfo, LogConfig, PartitionLog
    from storage.core._native import append_counts, appender

    counts = append_counts()
    v = ffi.new("plog_validate *")
    v.segment_bytes, v.segment_ms = 1 << 30, 1 << 62
    call = appender(v, int(ffi.cast("uintptr_t", v)), lib.PLOG_VALIDATE_REQUIRE_FIRST | lib.PLOG_APPEND_READONLY,
                    True, counts, AppendInfo).append
    del v, counts
    gc.collect()
    with PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False)) as log:
        log.append_as_follower(build_batch([b"a"], base_offset=0))
        info = call(log.active_segment.address, build_batch([b"b", b"c"], base_offset=1), 1, -1, None)
        assert type(info) is AppendInfo and (info.first_offset, info.last_offset, info.record_count) == (1, 2, 2)
        assert call.__self__ is not None
    with pytest.raises(TypeError):
        appender(ffi.new("plog_validate *"), 1, 0, True, object(), AppendInfo)    # not an AppendCounts
