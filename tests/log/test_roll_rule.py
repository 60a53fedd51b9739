"""The roll rule and the append loop around it (storage/log/appends.py).

Kafka's LogSegment.shouldRoll is one rule, and here it is one C function,
plog_segment_should_roll: the size the append would reach, the time waited (from the first
batch's max timestamp to the chunk's, or from the segment's creation to now when that batch
carries none), a full index, offsets that do not fit the segment.  Its clauses are checked
one by one below (the cases of Kafka's LogSegmentTest / UnifiedLogTest roll tests), then
through a log; the loop's verdicts are each acted on once."""
import struct

import pytest

from storage import LogConfig, PartitionLog, Record, build_batch
from storage.core._native import ffi, lib
from storage.log import appends, producer_check, validator
from storage.log.segment import Segment, SegmentHome

T = 1_700_000_000_000
BASE = 100


def _segment(tmp_path, first_timestamp: int) -> Segment:
    """An active segment at BASE holding one batch whose max timestamp is first_timestamp
    (-1: the batch carries none)."""
    config = LogConfig(segment_bytes=4096, fsync=False)
    seg = Segment(SegmentHome(str(tmp_path), config), BASE, create=True, active=True)
    v = ffi.new("plog_validate *")
    v.segment_bytes, v.segment_ms = 4096, 2**62
    buf = bytearray(build_batch([b"a"], base_offset=BASE, base_timestamp=first_timestamp))
    flags = lib.PLOG_VALIDATE_REQUIRE_FIRST | lib.PLOG_APPEND_NO_ROLL
    assert lib.plog_segment_append_chunk(seg.native, ffi.from_buffer(buf), len(buf), BASE, -1, flags, 0, v) == 0
    assert seg.native.first_batch_max_timestamp == first_timestamp
    return seg


def _incoming(max_timestamp: int, first: int = BASE + 1, last: int = BASE + 1):
    """What plog_segment_append_chunk knows of a validated chunk when it asks the rule."""
    v = ffi.new("plog_validate *")
    v.segment_bytes, v.segment_ms = 4096, 1000
    v.first_offset, v.last_offset, v.max_timestamp = first, last, max_timestamp
    return v


def should_roll(seg, v, length=10, now=0) -> bool:
    return bool(lib.plog_segment_should_roll(seg.native, length, v, now))


def test_the_size_clause(tmp_path):
    """The segment rolls when the append would push it past segment.bytes, not when it would
    reach it."""
    seg = _segment(tmp_path, T)
    v = _incoming(T)
    assert not should_roll(seg, v, length=4096 - seg.size)
    assert should_roll(seg, v, length=4096 - seg.size + 1)
    seg.close()


def test_the_time_clause_measures_from_the_first_batch_timestamp(tmp_path):
    """segment.ms waited from the first batch's max timestamp to the incoming max timestamp;
    the clock plays no part then (UnifiedLogTest.testTimeBasedLogRoll)."""
    seg = _segment(tmp_path, T)
    assert not should_roll(seg, _incoming(T + 1000), now=T + 10**9)
    assert should_roll(seg, _incoming(T + 1001), now=0)
    assert not should_roll(seg, _incoming(-1), now=T + 10**9)      # an incoming chunk without timestamps
    seg.close()


def test_the_time_clause_falls_back_to_the_creation_time(tmp_path):
    """A first batch without a timestamp: the time waited is now minus the segment's creation
    (LogSegment.timeWaitedForRoll), whatever the incoming timestamps say."""
    seg = _segment(tmp_path, -1)
    created = seg.created_ms
    assert seg.native.created_ms == created
    assert not should_roll(seg, _incoming(T + 10**9), now=created + 1000)
    assert should_roll(seg, _incoming(-1), now=created + 1001)
    seg.close()


def test_the_rule_asks_for_the_clock_only_when_the_creation_time_decides(tmp_path):
    """now_ms < 0 (the caller did not read the clock): PLOG_ECLOCK for a segment whose first
    batch has no timestamp, a plain answer otherwise."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    stamped, bare = _segment(tmp_path / "a", T), _segment(tmp_path / "b", -1)
    assert lib.plog_segment_should_roll(stamped.native, 10, _incoming(T + 1001), -1) == 1
    assert lib.plog_segment_should_roll(bare.native, 10, _incoming(T), -1) == lib.PLOG_ECLOCK
    stamped.close()
    bare.close()


def test_an_append_reads_the_clock_only_when_the_rule_needs_it(tmp_path, monkeypatch):
    reads = []
    monkeypatch.setattr(appends, "_now_ms", lambda: reads.append(1) or T)
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_ms=1000, fsync=False))
    log.append_as_follower(build_batch([b"a"], base_offset=0, base_timestamp=T))
    log.append_as_leader([b"b"], 0)
    assert reads == []
    log.truncate_to(0)
    log.append_as_follower(build_batch([b"a"], base_offset=0, base_timestamp=-1))
    log.append_as_follower(build_batch([b"b"], base_offset=1, base_timestamp=-1))
    assert reads == [1] and log.log_end_offset == 2
    pieces = [build_batch([b"c"], base_offset=2), build_batch([b"d"], base_offset=3)]
    log.append_batches(pieces, as_leader=False)     # pieces gathered: the time asked once more
    assert reads == [1, 1] and log.log_end_offset == 4
    log.close()


def test_an_empty_segment_never_rolls_by_age(tmp_path):
    config = LogConfig(segment_bytes=4096, fsync=False)
    seg = Segment(SegmentHome(str(tmp_path), config), BASE, create=True, active=True)
    assert not should_roll(seg, _incoming(T), now=seg.created_ms + 10**9)
    seg.close()


def test_a_full_index_rolls(tmp_path):
    """The offset index full, or the time index at its last slot (kept for the roll's entry)."""
    seg = _segment(tmp_path, T)
    c = seg.native
    v = _incoming(T)
    assert not should_roll(seg, v)
    entries = c.offset_entries
    c.offset_entries = c.offset_max_entries
    assert should_roll(seg, v)
    c.offset_entries = entries
    entries = c.time_entries
    c.time_entries = c.time_max_entries - 2
    assert not should_roll(seg, v)
    c.time_entries = c.time_max_entries - 1
    assert should_roll(seg, v)
    c.time_entries = entries
    seg.close()


def test_offsets_that_do_not_fit_the_segment_roll(tmp_path):
    """The last offset more than INT32_MAX past the base, or a first offset below it."""
    seg = _segment(tmp_path, T)
    assert not should_roll(seg, _incoming(T, last=BASE + 2**31 - 1))
    assert should_roll(seg, _incoming(T, last=BASE + 2**31))
    assert should_roll(seg, _incoming(T, first=BASE - 1, last=BASE + 1))
    seg.close()


def test_a_log_rolls_by_its_first_batches_timestamps(tmp_path, monkeypatch):
    """Through the log: each new segment measures from its own first batch, and the clock the
    append passes does not matter while the first batch has a timestamp."""
    monkeypatch.setattr(appends, "_now_ms", lambda: T + 10**12)
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_ms=1000, fsync=False))
    for offset, ts in enumerate((T, T + 999, T + 1000, T + 1001, T + 2001, T + 2002)):
        log.append_as_follower(build_batch([b"x"], base_offset=offset, base_timestamp=ts))
    assert [s.base_offset for s in log.segments] == [0, 3, 5]
    log.close()


# ---- the loop: each verdict acted on once ----------------------------------------------------

def _producer_batch_with_a_wrong_max_timestamp() -> bytes:
    """A producer's first batch whose max timestamp is below its newest record's: the leader
    sets it from the records (the validator's recheck), as Kafka's LogValidator does."""
    raw = bytearray(build_batch([Record(timestamp=T, value=b"a"), Record(timestamp=T + 500, value=b"b")],
                                producer_id=7, producer_epoch=0, base_sequence=0))
    struct.pack_into(">q", raw, 35, T)
    struct.pack_into(">I", raw, 17, lib.plog_crc32c(0, ffi.from_buffer(raw) + 21, len(raw) - 21))
    return bytes(raw)


@pytest.mark.parametrize("in_c", [True, False], ids=["c-check", "python-check"])
def test_the_producer_state_records_the_rechecked_max_timestamp(tmp_path, monkeypatch, in_c):
    """A chunk sent back for a recheck and then for the producer check: the producer state
    reads the checked chunk, whichever way the caller handed it over (immutable bytes were
    read as they came, a bytearray as rewritten) and whether C checks producers or not."""
    monkeypatch.setattr(producer_check, "ENABLED", in_c)
    batch = _producer_batch_with_a_wrong_max_timestamp()
    for name, chunk in (("bytes", batch), ("bytearray", bytearray(batch))):
        log = PartitionLog.open(tmp_path / name, LogConfig(fsync=False))
        info = log.append_as_leader(chunk, 0)
        entry = log.producer_state.active_producers[7]
        assert (info.max_timestamp, entry.last_timestamp, entry.batch_metadata[-1].timestamp) == \
            (T + 500, T + 500, T + 500), name
        assert log._leader_append["client"].v.expected_count == (1 if in_c else 0)    # learnt in C, or not
        log.close()


def test_a_chunk_is_rechecked_once(tmp_path, monkeypatch):
    """A compressed batch of a new producer comes back twice (recheck, then producer check):
    the validator walks its records once, and the rewritten chunk is the one appended."""
    calls = []
    recheck = validator.recheck
    monkeypatch.setattr(validator, "recheck", lambda buf, *, file: calls.append(1) or recheck(buf, file=file))
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False))
    batch = build_batch([b"v" * 100] * 5, compression="gzip", producer_id=3, producer_epoch=0, base_sequence=0)
    info = log.append_as_leader(batch, 0)
    assert (info.first_offset, info.last_offset, len(calls)) == (0, 4, 1)
    assert log.producer_state.active_producers[3].batch_metadata[-1].last_seq == 4
    log.close()
