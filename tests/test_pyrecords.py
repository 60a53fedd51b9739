"""build_batch's list walk in C (csrc/pyrecords.c, storage._pyrecords).

A list of bytes values or (key, value) pairs is encoded from where the payloads lie, without
the join; every other shape takes the general path.  Both must give the same bytes, and the
walked batches must read back through kafka-python's decoder (a third-party codec), not only
through ours.
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import Record, build_batch, iter_batches
from storage import records as records_module
from storage._native import build_listed, lib

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
