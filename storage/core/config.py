"""`LogConfig`: per-log settings, named after Kafka's topic configs in snake case
(segment.bytes -> segment_bytes), with Kafka's defaults."""
from __future__ import annotations

import dataclasses

from .codecs import LEVELS as COMPRESSION_LEVELS
from .files import INT32_MAX, INT64_MAX

FLUSH_MODES = ("sync", "deferred")   # when the epoch cache's checkpoint is written
# Kafka's BrokerCompressionType: the codec a topic's log is written in ("producer": the
# producer's, as it came; "uncompressed": none).
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
# compression.<codec>.level (Kafka 3.8, KIP-390): codecs.LEVELS, (low, high, default); gzip's
# default -1 (Deflater.DEFAULT_COMPRESSION) is outside its range and taken too.
_INT64_MIN = -2**63
SEALED_SEGMENT_CHECKS = ("first_use", "open")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")     # Kafka's message.timestamp.type

# Each number's type and range, Kafka's ConfigDef of the topic config it stands for
# (storage/src/main/java/org/apache/kafka/storage/internals/log/LogConfig.java, its CONFIG
# static block: INT is an int32, LONG an int64, atLeast(n) / between(a, b) the bounds).  A
# value outside them would reach C as an int32/int64 it cannot hold (OverflowError at a start)
# or ask for something the engine cannot do (an index with no room is fine: see segment.c's
# plog_segment_seal).  (low, high); a float range for the one DOUBLE.
RANGES = {
    "segment_bytes": (14, INT32_MAX),                  # INT, atLeast(LegacyRecord.RECORD_OVERHEAD_V0)
    "index_interval_bytes": (0, INT32_MAX),            # INT, atLeast(0)
    "segment_index_bytes": (4, INT32_MAX),             # INT, atLeast(4)
    "max_message_bytes": (0, INT32_MAX),               # INT, atLeast(0)
    "segment_ms": (1, INT64_MAX),                      # LONG, atLeast(1)
    "retention_ms": (-1, INT64_MAX),                   # LONG, atLeast(-1)
    "retention_bytes": (_INT64_MIN, INT64_MAX),        # LONG, no bound (any negative: unlimited)
    "file_delete_delay_ms": (0, INT64_MAX),            # LONG, atLeast(0)
    "delete_retention_ms": (0, INT64_MAX),             # LONG, atLeast(0)
    "min_compaction_lag_ms": (0, INT64_MAX),           # LONG, atLeast(0)
    "max_compaction_lag_ms": (1, INT64_MAX),           # LONG, atLeast(1)
    "min_cleanable_dirty_ratio": (0.0, 1.0),            # DOUBLE, between(0, 1)
    "producer_id_expiration_ms": (1, INT64_MAX),       # broker producer.id.expiration.ms (atLeast(1)); int64 here
    "dedupe_buffer_bytes": (24, INT64_MAX),            # one key slot (24 bytes) at least
    "message_timestamp_before_max_ms": (0, INT64_MAX),  # LONG, atLeast(0)
    "message_timestamp_after_max_ms": (0, INT64_MAX),   # LONG, atLeast(0)
    "flush_messages": (1, INT64_MAX),                  # LONG, atLeast(1)
    "flush_ms": (0, INT64_MAX),                        # LONG, atLeast(0)
}
KAFKA_NAMES = {
    "segment_bytes": "segment.bytes", "index_interval_bytes": "index.interval.bytes",
    "segment_index_bytes": "segment.index.bytes", "max_message_bytes": "max.message.bytes",
    "segment_ms": "segment.ms", "retention_ms": "retention.ms", "retention_bytes": "retention.bytes",
    "file_delete_delay_ms": "file.delete.delay.ms", "delete_retention_ms": "delete.retention.ms",
    "min_compaction_lag_ms": "min.compaction.lag.ms", "max_compaction_lag_ms": "max.compaction.lag.ms",
    "min_cleanable_dirty_ratio": "min.cleanable.dirty.ratio",
    "producer_id_expiration_ms": "producer.id.expiration.ms",
    "dedupe_buffer_bytes": "log.cleaner.dedupe.buffer.size",
    "message_timestamp_before_max_ms": "message.timestamp.before.max.ms",
    "message_timestamp_after_max_ms": "message.timestamp.after.max.ms",
    "flush_messages": "flush.messages", "flush_ms": "flush.ms",
}


def _in_range(value, low, high) -> bool:
    """An int (a float too where the range is one, NaN never) within [low, high]."""
    if isinstance(value, bool):
        return False
    if isinstance(low, float):
        return isinstance(value, (int, float)) and low <= value <= high
    return isinstance(value, int) and low <= value <= high


def _describe_range(low, high) -> str:
    if isinstance(low, float):
        return f"a number in [{low}, {high}]"
    kind = "an int32" if high == INT32_MAX else "an int64"
    return f"{kind} in [{low}, {high}]"


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Per-log settings, named after Kafka's topic configs (segment.bytes -> segment_bytes)."""

    segment_bytes: int = 1 << 30
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 << 20
    max_message_bytes: int = 1048588
    segment_ms: int = 7 * 24 * 3600 * 1000
    fsync: bool = True
    epoch_flush: str = "sync"
    # After a clean shutdown a sealed segment is opened and checked (indexes, the headers after
    # the last index entry) at its first use, as Kafka does (KAFKA-7283): "first_use"; or each
    # one at the open, a damaged one keeping its partition unopened: "open" (storage/log/loader.py).
    sealed_segment_check: str = "first_use"
    # Retention (PartitionLog.delete_old_segments) and producer state (storage/log/producer.py).
    cleanup_policy: str = "delete"              # "delete", "compact" or "compact,delete"
    retention_ms: int = 7 * 24 * 3600 * 1000    # -1: unlimited
    retention_bytes: int = -1                   # -1: unlimited
    file_delete_delay_ms: int = 60_000
    producer_id_expiration_ms: int = 86_400_000
    # Compaction (PartitionLog.compact, storage/log/cleaner.py), Kafka's topic and cleaner configs.
    delete_retention_ms: int = 86_400_000       # how long a tombstone outlives its clean
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    min_cleanable_dirty_ratio: float = 0.5
    dedupe_buffer_bytes: int = 128 << 20        # log.cleaner.dedupe.buffer.size: 24 bytes a key slot
    # The codec a client's batches are written in (Kafka's LogValidator recompresses a batch of
    # another codec), and the level of each codec that has one.
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    # How far a CreateTime record's timestamp may be before / after the leader's clock (Kafka's
    # defaults: unbounded); a record outside is refused (INVALID_TIMESTAMP, KIP-467 record errors).
    message_timestamp_before_max_ms: int = INT64_MAX
    message_timestamp_after_max_ms: int = INT64_MAX
    # Kafka's message.timestamp.type: "CreateTime" (a record's timestamp is its producer's) or
    # "LogAppendTime" (a leader's append stamps every batch with its clock: validator.stamp_log_append_time).
    message_timestamp_type: str = "CreateTime"
    # Kafka's flush.messages and flush.ms (defaults: never; replication, not fsync, is Kafka's
    # durability): an append that leaves flush_messages or more offsets past the recovery point
    # flushes the log (PartitionLog's appends), and a log whose last flush is flush_ms old is
    # flushed by its LogDir's background thread (LogDir.flush_dirty_logs).
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX

    def __post_init__(self):
        for name, (low, high) in RANGES.items():
            value = getattr(self, name)
            if not _in_range(value, low, high):
                raise ValueError(f"{name}={value!r} is out of range: {_describe_range(low, high)} "
                                 f"(Kafka's {KAFKA_NAMES.get(name, name)})")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:    # Kafka's LogConfig.validateValues
            raise ValueError(f"min_compaction_lag_ms={self.min_compaction_lag_ms} is above "
                             f"max_compaction_lag_ms={self.max_compaction_lag_ms}")
        if self.sealed_segment_check not in SEALED_SEGMENT_CHECKS:
            raise ValueError(f"sealed_segment_check must be one of {SEALED_SEGMENT_CHECKS}")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"message_timestamp_type must be one of {TIMESTAMP_TYPES}, "
                             f"not {self.message_timestamp_type!r} (Kafka's message.timestamp.type)")
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"compression_type must be one of {COMPRESSION_TYPES}, not {self.compression_type!r}")
        for codec, (low, high, default) in COMPRESSION_LEVELS.items():
            level = getattr(self, f"compression_{codec}_level")
            if isinstance(level, bool) or not isinstance(level, int) or not (low <= level <= high or level == default):
                raise ValueError(f"compression_{codec}_level={level!r} is out of range: [{low}, {high}]"
                                 + (f" or {default}" if not low <= default <= high else "")
                                 + f" (Kafka's compression.{codec}.level)")
        if self.epoch_flush not in FLUSH_MODES:
            raise ValueError(f"epoch_flush must be one of {FLUSH_MODES}")
        if not isinstance(self.cleanup_policy, str) or not self.cleanup_policy.strip() or \
                set(self.cleanup_policy.replace(" ", "").split(",")) - {"delete", "compact"}:
            raise ValueError(f"cleanup_policy must be 'delete', 'compact' or 'compact,delete', "
                             f"not {self.cleanup_policy!r}")

    @property
    def batch_limit_bytes(self) -> int:
        """max_message_bytes as C's max_batch_bytes takes it.  C reads 0 as "no limit" (a
        follower's appends); Kafka's max.message.bytes=0 refuses every batch, and since no
        batch is under 61 bytes a limit of 1 refuses exactly the same ones."""
        return self.max_message_bytes or 1

    @property
    def target_codec(self) -> tuple[str, int | None] | None:
        """(codec, level) a client's batch of another codec is rewritten in; None: "producer"."""
        if self.compression_type == "producer":
            return None
        if self.compression_type == "uncompressed":
            return "none", None
        if self.compression_type == "snappy":
            return "snappy", None
        return self.compression_type, getattr(self, f"compression_{self.compression_type}_level")

    @property
    def log_append_time(self) -> bool:
        """Whether a leader's appends stamp their batches with the log's clock (LogAppendTime)."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compacts(self) -> bool:
        """Whether the cleaner compacts this log ("compact" in cleanup_policy)."""
        return "compact" in self.cleanup_policy.replace(" ", "").split(",")

    @property
    def deletes(self) -> bool:
        """Whether retention deletes segments ("delete" in cleanup_policy)."""
        return "delete" in self.cleanup_policy.replace(" ", "").split(",")
