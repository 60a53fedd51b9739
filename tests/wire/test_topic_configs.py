"""Topic and broker configs: Kafka's types and ranges (its LogConfig ConfigDef), what a value
Kafka accepts does in the engine (an index with no room, max.message.bytes=0), a bad config
already stored, and the broker flags.  The broker-process fuzzer and the restart checks are in
tests/wire/test_config_restarts.py."""
from __future__ import annotations

import dataclasses
import logging

import pytest

from storage.cli import main as cli_main
from storage.core import errors
from storage.core.config import RANGES, LogConfig
from storage.core.errors import Errors
from storage.core.records import Record
from storage.log.partition import PartitionLog
from storage.wire import configs

INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


# ---- LogConfig refuses what Kafka's ConfigDef refuses ---------------------------------------------

@pytest.mark.parametrize("field", sorted(RANGES))
def test_log_config_takes_its_bounds_and_refuses_one_past_them(field):
    low, high = RANGES[field]
    extra = {"max_compaction_lag_ms": INT64_MAX} if field == "min_compaction_lag_ms" else {}
    for value in (low, high):
        assert getattr(LogConfig(**{field: value, **extra}), field) == value
    past = (low - 0.01, high + 0.01) if isinstance(low, float) else (low - 1, high + 1)
    for value in (*past, 2**70, -2**70, True, "5", None, float("nan")):
        with pytest.raises(ValueError, match=field):
            LogConfig(**{field: value})


def test_kafka_ranges_int_versus_long():
    # INT (int32) in Kafka: segment.bytes, index.interval.bytes, segment.index.bytes,
    # max.message.bytes; LONG (int64): segment.ms, retention.ms, ...
    for field in ("segment_bytes", "index_interval_bytes", "segment_index_bytes", "max_message_bytes"):
        assert RANGES[field][1] == INT32_MAX, field
    for field in ("segment_ms", "retention_ms", "retention_bytes", "delete_retention_ms", "max_compaction_lag_ms"):
        assert RANGES[field][1] == INT64_MAX, field
    assert RANGES["segment_index_bytes"][0] == 4 and RANGES["segment_ms"][0] == 1


def test_min_compaction_lag_above_max_is_refused():
    # Kafka's LogConfigTest.testInvalidCompactionLagConfig
    with pytest.raises(ValueError, match="min_compaction_lag_ms"):
        LogConfig(min_compaction_lag_ms=200, max_compaction_lag_ms=100)
    problem = configs.topic_problem(LogConfig(), "t", 1, {"max.compaction.lag.ms": "100",
                                                          "min.compaction.lag.ms": "200"})
    assert problem[0] == Errors.INVALID_CONFIG


# ---- CreateTopics' configs: Kafka's parse, then the range ------------------------------------------

# Kafka's LogConfigTest.testFromPropsInvalid, in our words: each served config refuses these.
FROM_PROPS_INVALID = {
    "retention.bytes": ["not_a_number"],
    "retention.ms": ["not_a_number"],
    "cleanup.policy": ["true", "foobar"],
    "min.cleanable.dirty.ratio": ["not_a_number", "-0.1", "1.2"],
    "min.insync.replicas": ["not_a_number", "0", "-1"],
    # LogConfigTest's compression cases: Kafka's BrokerCompressionType names only ("none" is a
    # producer's name, not a topic's), and each codec's level range (gzip's -1 is its default).
    "compression.type": ["none", "GZIP", "brotli", ""],
    "message.timestamp.type": ["createtime", "logappendtime", "", "message.timestamp.type"],
    "compression.gzip.level": ["not_a_number", "0", "10", "-2"],
    "compression.lz4.level": ["not_a_number", "0", "18"],
    "compression.zstd.level": ["not_a_number", "23", "-131073"],
}


@pytest.mark.parametrize("name", sorted(configs.TOPIC_CONFIGS))
def test_every_served_config_refuses_kafkas_invalid_values(name):
    for value in FROM_PROPS_INVALID.get(name, ["not_a_number", "-1"]):
        problem = configs.topic_problem(LogConfig(), "t", 1, {name: value})
        assert problem is not None and problem[0] == Errors.INVALID_CONFIG, (name, value)
        assert name.replace(".", "_") in problem[1] or name in problem[1], problem


@pytest.mark.parametrize("name,value", [
    ("segment.index.bytes", "8"), ("segment.index.bytes", "4"), ("segment.index.bytes", str(INT32_MAX)),
    ("index.interval.bytes", "0"), ("max.message.bytes", "0"), ("segment.ms", "1"),
    ("segment.ms", str(INT64_MAX)), ("retention.ms", "-1"), ("retention.bytes", "-5"),
    ("retention.bytes", str(-2**63)), ("min.insync.replicas", str(INT32_MAX)),
    ("segment.ms", " 100\t"), ("segment.ms", "+100"), ("min.cleanable.dirty.ratio", ".5"),
    ("min.cleanable.dirty.ratio", "1e0"), ("min.cleanable.dirty.ratio", "0.5d"),
    ("cleanup.policy", " compact , delete "), ("cleanup.policy", "delete,delete"),
    ("message.timestamp.type", "CreateTime"), ("message.timestamp.type", "LogAppendTime"), ("compression.type", " lz4 "), ("compression.type", "uncompressed"),
    ("compression.gzip.level", "-1"), ("compression.zstd.level", "-131072"), ("compression.lz4.level", "17"),
    ("message.timestamp.before.max.ms", "0"), ("message.timestamp.after.max.ms", str(INT64_MAX)),
])
def test_values_kafka_accepts_are_accepted(name, value):
    assert configs.topic_problem(LogConfig(), "t", 1, {name: value}) is None


@pytest.mark.parametrize("name,value", [
    ("segment.index.bytes", "3"), ("index.interval.bytes", str(2**70)), ("segment.ms", str(2**70)),
    ("max.message.bytes", str(2**70)), ("min.insync.replicas", str(2**70)), ("segment.ms", "0"),
    ("segment.ms", "-5"), ("segment.bytes", str(2**31)), ("segment.bytes", "13"),
    ("segment.ms", str(2**63)), ("retention.ms", "-2"), ("max.message.bytes", str(INT32_MAX + 1)),
    ("segment.ms", ""), ("segment.ms", "   "), ("segment.ms", "1_000"), ("segment.ms", "1.5"),
    ("segment.ms", "0x10"), ("segment.ms", "１２"), ("segment.ms", "1 2"), ("segment.ms", None),
    ("min.cleanable.dirty.ratio", "NaN"), ("min.cleanable.dirty.ratio", "Infinity"),
    ("min.cleanable.dirty.ratio", "inf"), ("cleanup.policy", ""), ("cleanup.policy", ","),
    ("max.compaction.lag.ms", "0"),
])
def test_values_outside_kafkas_type_or_range_are_invalid_config(name, value):
    code, message = configs.topic_problem(LogConfig(), "t", 1, {name: value})
    assert code == Errors.INVALID_CONFIG
    assert name in message or name.replace(".", "_") in message, message


# ---- a value Kafka accepts behaves as in Kafka ----------------------------------------------------

def _append_and_reopen(path, config, count):
    log = PartitionLog.open(path, config)
    for i in range(count):
        log.append_as_leader([Record(key=b"k", value=b"v%d" % i * 40)], 0)
    segments = len(log.segments)
    log.close()
    for clean in (True, False):         # a clean open trusts the indexes; an unclean one recovers
        log = PartitionLog.open(path, config, clean_shutdown=clean)
        try:
            values = [r.value for b in log.batches() for r in b.records()]
        finally:
            log.close()
        assert values == [b"v%d" % i * 40 for i in range(count)]
    return segments


@pytest.mark.parametrize("index_bytes", [4, 7, 8, 11, 12, 19])
def test_an_index_with_no_room_rolls_a_segment_per_batch_and_reopens(tmp_path, index_bytes):
    # Kafka rounds segment.index.bytes down to whole entries (8-byte offset, 12-byte time
    # entries); an index with no free slot is full, so the log rolls before each append.  Under
    # 12 bytes the time index has no slot even for the entry a seal writes: the seal skips it
    # (it used to fail "seal: index is full", and the log could not roll, close or open again).
    config = LogConfig(segment_index_bytes=index_bytes, index_interval_bytes=0, fsync=False)
    assert _append_and_reopen(tmp_path / "t-0", config, 5) == 5


def test_max_message_bytes_zero_refuses_every_batch(tmp_path):
    # Kafka: max.message.bytes=0 means no batch fits; C's max_batch_bytes 0 means "no limit".
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(max_message_bytes=0, fsync=False))
    try:
        with pytest.raises(errors.StorageError, match="max_message_bytes=0") as caught:
            log.append_as_leader([Record(value=b"x")], 0)
        assert caught.value.error_code == Errors.MESSAGE_TOO_LARGE and log.log_end_offset == 0
    finally:
        log.close()


# ---- a bad config already stored --------------------------------------------------------------

STORED_BAD = {"segment.ms": "junk", "index.interval.bytes": str(2**70), "retention.ms": str(2**70),
              "min.insync.replicas": "0", "no.such.config": "1", "cleanup.policy": "compact"}


def test_a_bad_stored_config_is_named_and_left_at_its_default(caplog):
    base = LogConfig(fsync=False)
    with caplog.at_level(logging.ERROR, logger="storage.wire"):
        parsed = configs.TopicConfig.parse(base, "bad", STORED_BAD)
        good = configs.TopicConfig.parse(base, "good", {"segment.ms": "1000", "min.insync.replicas": "2"})
    assert good.log == dataclasses.replace(base, segment_ms=1000) and good.min_isr == 2
    assert parsed.min_isr is None and parsed.raw == STORED_BAD
    bad = parsed.log
    # Every other config of the topic applies; a bad retention keeps everything (-1): a stored
    # value this engine refuses never deletes data.
    assert (bad.cleanup_policy, bad.segment_ms, bad.index_interval_bytes, bad.retention_ms) == \
        ("compact", base.segment_ms, base.index_interval_bytes, -1)
    for name, value in STORED_BAD.items():
        if name != "cleanup.policy":
            assert any("topic bad" in m and name in m and value in m for m in caplog.messages), name
    described = {n: v for n, v, _ in configs.describe(base, STORED_BAD, 2)}
    assert described["segment.ms"] == str(base.segment_ms) and described["min.insync.replicas"] == "2"


# ---- broker flags ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["serve", "--min-insync-replicas", "0"], ["serve", "--min-insync-replicas", str(2**70)],
    ["serve", "--num-partitions", "0"], ["serve", "--num-partitions", "99999999999"],
    ["serve", "--offsets-partitions", "-1"], ["serve", "--replication-factor", "0"],
    ["serve", "--node-id", "-1"], ["serve", "--replica-lag-time-max-ms", str(2**63)],
    ["serve", "--group-initial-rebalance-delay-ms", "x"], ["serve", "--listen", "127.0.0.1:70000"],
    ["controller", "--min-insync-replicas", "0"], ["controller", "--session-timeout-ms", "0"],
    ["cluster", "--brokers", "0"], ["cluster", "--min-insync-replicas", "1.5"],
])
def test_broker_flags_out_of_range_are_a_one_line_usage_error(tmp_path, capsys, argv):
    assert cli_main([argv[0], "--data-dir", str(tmp_path / "d"), *argv[1:]]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("usage error:") and argv[-1] in first, first
    assert not (tmp_path / "d").exists()
