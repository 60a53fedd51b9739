"""message.timestamp.type=LogAppendTime in the engine (LogConfig.message_timestamp_type): a
leader's append stamps every batch with the timestamp type bit and the append's clock as its max
timestamp, CRC again, the records as they came (validator.stamp_log_append_time); a reader takes
the batch's max timestamp for every record.  Kafka's LogValidatorTest cases ported are named at
each test (storage/src/test/java/org/apache/kafka/storage/internals/log/LogValidatorTest.java)."""
from __future__ import annotations

import struct

import pytest

from storage import LogConfig, iter_batches
from storage.core import errors
from storage.core._native import lib
from storage.core.records import Record, build_batch
from storage.log import partition as partition_module
from storage.log.partition import PartitionLog

NOW = 1_795_000_000_000             # the broker's clock in these tests
CREATE = 1234                       # the producer's timestamps (LogValidatorTest's createRecords)
APPEND_TIME = LogConfig(message_timestamp_type="LogAppendTime")


@pytest.fixture
def clock(monkeypatch):
    """The log's wall clock, fixed at NOW; readings counts the reads."""
    class Clock:
        now, readings = NOW, 0

        def __call__(self):
            self.readings += 1
            return self.now
    fixed = Clock()
    monkeypatch.setattr(partition_module, "_now_ms", fixed)
    return fixed


def _three_records(compression="none", **kwargs) -> bytes:
    """LogValidatorTest.createRecords: three records (a, b, c) with timestamp 1234."""
    return build_batch([Record(None, CREATE, None, v, ()) for v in (b"hello", b"there", b"beautiful")],
                       compression=compression, **kwargs)


def _check_log_append_time(batch, now: int, base_timestamp: int) -> None:
    """LogValidatorTest.validateLogAppendTime: the batch valid, LogAppendTime, max timestamp now,
    the base timestamp left (maybeCheckBaseTimestamp), and every record's timestamp now."""
    assert batch.is_valid()
    assert batch.timestamp_type == "LogAppendTime"
    assert batch.max_timestamp == now and batch.base_timestamp == base_timestamp
    assert [r.timestamp for r in batch.records()] == [now] * batch.record_count


def _open(tmp_path, config=APPEND_TIME, **kwargs) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", config, **kwargs)


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_log_append_time_non_compressed(tmp_path, clock, kind):
    """LogValidatorTest.checkLogAppendTimeNonCompressed (v2): the batch stamped in place, its size
    unchanged, the append's max timestamp now at the last offset (2); `bytes` (written from a
    stamped copy) and a bytearray alike."""
    data = _three_records()
    with _open(tmp_path) as log:
        info = log.append_as_leader(kind(data), 0)
        assert (info.first_offset, info.last_offset, info.max_timestamp, info.offset_of_max_timestamp) == (0, 2, NOW, 2)
        assert info.size_bytes == len(data)
        (batch,) = iter_batches(log.read(0, 1 << 20))
        _check_log_append_time(batch, NOW, CREATE)
        assert log.read(0, 1 << 20)[61:] == data[61:]        # the records as they came
    assert data == _three_records()                          # the caller's bytes untouched


def test_log_append_time_without_recompression(tmp_path, clock):
    """LogValidatorTest.checkLogAppendTimeWithoutRecompression (v2, gzip): the compressed batch is
    stamped in place (its records not rebuilt: the size is the same), max timestamp now, the
    offset of the max timestamp the last, 2."""
    data = _three_records("gzip")
    with _open(tmp_path) as log:
        info = log.append_as_leader(data, 0)
        assert (info.max_timestamp, info.offset_of_max_timestamp, info.size_bytes) == (NOW, 2, len(data))
        (batch,) = iter_batches(log.read(0, 1 << 20))
        assert batch.compression == "gzip"
        _check_log_append_time(batch, NOW, CREATE)


def test_log_append_time_with_recompression(tmp_path, clock):
    """LogValidatorTest.checkLogAppendTimeWithRecompression: a batch rebuilt in the topic's codec
    (compression.type gzip, the producer's none; Kafka's case converts v0) is stamped as well:
    the same records, LogAppendTime, max timestamp now at offset 2."""
    config = LogConfig(message_timestamp_type="LogAppendTime", compression_type="gzip")
    with _open(tmp_path, config) as log:
        info = log.append_as_leader(_three_records(), 0)
        assert (info.max_timestamp, info.offset_of_max_timestamp) == (NOW, 2)
        (batch,) = iter_batches(log.read(0, 1 << 20))
        assert batch.compression == "gzip" and [r.value for r in batch.records()] == [b"hello", b"there", b"beautiful"]
        _check_log_append_time(batch, NOW, CREATE)


def test_one_clock_reading_stamps_every_batch_of_an_append(tmp_path, clock):
    """Kafka's validator reads time.milliseconds() once per append: a chunk of two batches (one
    compressed) gets one now, read once; the next append its own."""
    chunk = _three_records() + _three_records("zstd")
    with _open(tmp_path) as log:
        log.append_as_leader(chunk, 0)
        assert clock.readings == 1
        clock.now = NOW + 5
        log.append_as_leader(_three_records(), 0)
        batches = list(log.batches())
    assert [b.max_timestamp for b in batches] == [NOW, NOW, NOW + 5]
    for batch in batches:
        _check_log_append_time(batch, batch.max_timestamp, CREATE)


def test_a_producers_own_log_append_time_is_refused(tmp_path, clock):
    """LogValidator.validateTimestamp: "Producer should not set timestamp type to LogAppendTime"
    on a LogAppendTime topic too (INVALID_TIMESTAMP), nothing written."""
    data = bytearray(_three_records())
    struct.pack_into(">h", data, 21, lib.PLOG_ATTR_LOG_APPEND_TIME)
    struct.pack_into(">I", data, 17, lib.plog_crc32c(0, bytes(data[21:]), len(data) - 21))
    with _open(tmp_path) as log:
        with pytest.raises(errors.InvalidTimestampError, match="LogAppendTime"):
            log.append_as_leader(bytes(data), 0)
        assert log.log_end_offset == 0 and log.segments[-1].size == 0


def test_a_damaged_batch_is_refused_not_signed_again(tmp_path, clock):
    """The stamp writes a new CRC: the old one is checked first, so a batch damaged on the way is
    refused (CORRUPT_MESSAGE), never re-signed into a valid one -- a producer's and a coordinator's."""
    data = bytearray(_three_records())
    data[-1] ^= 0xFF
    with _open(tmp_path) as log:
        for origin in ("client", "coordinator"):
            with pytest.raises(errors.CorruptRecordError):
                log.append_as_leader(bytes(data), 0, origin=origin)
        assert log.log_end_offset == 0


def test_the_timestamp_range_does_not_apply(tmp_path, clock):
    """LogValidator.validateTimestamp checks message.timestamp.before/after.max.ms for CreateTime
    only: a record a day old is taken by a LogAppendTime topic whose bound is one second, and
    refused by the same topic under CreateTime."""
    old = build_batch([Record(None, NOW - 86_400_000, None, b"v", ())])
    bounded = dict(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=1000)
    with _open(tmp_path, LogConfig(message_timestamp_type="LogAppendTime", **bounded)) as log:
        assert log.append_as_leader(old, 0).max_timestamp == NOW
    with _open(tmp_path / "c", LogConfig(**bounded)) as log:
        with pytest.raises(errors.InvalidTimestampError):
            log.append_as_leader(old, 0)


def test_the_brokers_own_batches_are_stamped(tmp_path, clock):
    """validateMessagesAndAssignOffsets runs for every leader append: a transaction marker (the
    coordinator's origin) on a LogAppendTime topic is stamped too, the record's timestamp now."""
    with _open(tmp_path) as log:
        log.append_as_leader(build_batch([b"v"], producer_id=7, producer_epoch=0, base_sequence=0,
                                         is_transactional=True), 0)
        clock.now = NOW + 9
        log.append_txn_marker(7, 0, commit=True, coordinator_epoch=0, leader_epoch=0)
        marker = list(iter_batches(log.read(0, 1 << 20)))[-1]
    assert marker.is_control
    _check_log_append_time(marker, NOW + 9, marker.base_timestamp)


def test_a_follower_appends_a_stamped_batch_as_it_lies(tmp_path, clock):
    """A follower's append is no validation (Kafka's appendAsFollower): the leader's stamped batch
    is written byte for byte, and a CreateTime batch stays CreateTime even under LogAppendTime."""
    with _open(tmp_path) as leader:
        leader.append_as_leader(_three_records(), 0)
        stamped = bytes(leader.read(0, 1 << 20))
    clock.now = NOW + 1000
    with _open(tmp_path / "f") as follower:
        follower.append_as_follower(stamped)
        assert bytes(follower.read(0, 1 << 20)) == stamped
        created = build_batch([Record(None, CREATE, None, b"v", ())], base_offset=3, partition_leader_epoch=0)
        follower.append_as_follower(created)
        assert list(iter_batches(follower.read(3, 1 << 20)))[0].timestamp_type == "CreateTime"


def test_a_create_time_topic_is_left_as_it_was(tmp_path, clock):
    """The default, CreateTime: the producer's timestamps, no clock read for the stamp."""
    with _open(tmp_path, LogConfig()) as log:
        info = log.append_as_leader(_three_records(), 0)
        (batch,) = iter_batches(log.read(0, 1 << 20))
    assert (info.max_timestamp, batch.timestamp_type, clock.readings) == (CREATE, "CreateTime", 0)


def test_a_config_change_applies_to_the_next_append(tmp_path, clock):
    """The config altered on an open log (UnifiedLog.updateConfig, PartitionLog.reconfigure): the
    next append is stamped, the batches before stay as written; and back."""
    with _open(tmp_path, LogConfig()) as log:
        log.append_as_leader(_three_records(), 0)
        log.reconfigure(APPEND_TIME)
        log.append_as_leader(_three_records(), 0)
        log.reconfigure(LogConfig())
        log.append_as_leader(_three_records(), 0)
        kinds = [(b.timestamp_type, b.max_timestamp) for b in log.batches()]
    assert kinds == [("CreateTime", CREATE), ("LogAppendTime", NOW), ("CreateTime", CREATE)]


def _time_answers(log) -> tuple:
    """What a reader by time gets: the segments' max timestamp and its offset, their time
    indexes, ListOffsets by timestamp (each append's time, between, after) and MAX_TIMESTAMP (-3)."""
    answers = [log.offset_for_timestamp(t) for t in (0, NOW, NOW + 1, NOW + 10, NOW + 11, NOW + 20, NOW + 21, -3)]
    return ([(s.max_timestamp, s.offset_of_max_timestamp, s.time_index_entries()) for s in log.segments],
            [(a.timestamp, a.offset) if a is not None else None for a in answers])


def test_time_index_and_offset_for_timestamp_follow_the_stamp(tmp_path, clock):
    """The time index and the offset of the max timestamp follow the stamped batches (Kafka's
    LogSegment.append: largest timestamp and shallow offset, the last of the batch; a timestamp
    equal to the largest so far adds nothing); ListOffsets by timestamp finds a batch's first
    record (every record carries the batch's time), MAX_TIMESTAMP the first record of the newest
    stamp (RecordBatch.offsetOfMaxTimestamp); a restart, clean or recovering, rebuilds the same."""
    config = LogConfig(message_timestamp_type="LogAppendTime", index_interval_bytes=1, segment_bytes=400)
    with _open(tmp_path, config) as log:
        for step in (0, 0, 10, 20, 20):     # two appends in the same millisecond, twice
            clock.now = NOW + step
            log.append_as_leader(_three_records(), 0)
        seen = _time_answers(log)
    assert len(seen[0]) >= 2                                 # the answers cross a roll
    assert seen[1] == [(NOW, 0), (NOW, 0), (NOW + 10, 6), (NOW + 10, 6), (NOW + 20, 9), (NOW + 20, 9),
                       None, (NOW + 20, 9)]
    for clean in (True, False):
        with _open(tmp_path, config, clean_shutdown=clean) as log:
            assert _time_answers(log) == seen, clean


def test_offset_for_timestamp_searches_the_whole_batch_the_index_names(tmp_path):
    """Kafka's LogSegment.findOffsetByTimestamp searches from the batch the time index points at
    for any record at or above the log start: under CreateTime a batch whose max timestamp's
    record is not its last (timestamps 100, 200, 150 at offsets 1-3: the index says 200 at offset
    3, the batch's last) answers 200 with offset 2, where the search from offset 3 on went past it
    (to the next batch's 300)."""
    config = LogConfig(index_interval_bytes=1)
    with _open(tmp_path, config) as log:
        log.append_as_leader(build_batch([Record(None, 50, None, b"u", ())]), 0)
        log.append_as_leader(build_batch([Record(None, t, None, b"v", ()) for t in (100, 200, 150)]), 0)
        log.append_as_leader(build_batch([Record(None, 300, None, b"w", ())]), 0)
        assert (200, 3) in log.segments[-1].time_index_entries()
        found = log.offset_for_timestamp(200)
    assert (found.timestamp, found.offset) == (200, 2)
