"""`LogConfig`: per-log settings, named after Kafka's topic configs in snake case
(segment.bytes -> segment_bytes), with Kafka's defaults."""
from __future__ import annotations

import dataclasses

from .epoch import FLUSH_MODES

_INT32_MAX = 2**31 - 1
SEALED_SEGMENT_CHECKS = ("first_use", "open")


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
    # one at the open, a damaged one keeping its partition unopened: "open" (storage/loader.py).
    sealed_segment_check: str = "first_use"
    # Retention (PartitionLog.delete_old_segments) and producer state (storage/producer.py).
    cleanup_policy: str = "delete"              # "delete", "compact" or "compact,delete"
    retention_ms: int = 7 * 24 * 3600 * 1000    # -1: unlimited
    retention_bytes: int = -1                   # -1: unlimited
    file_delete_delay_ms: int = 60_000
    producer_id_expiration_ms: int = 86_400_000
    # Compaction (PartitionLog.compact, storage/cleaner.py), Kafka's topic and cleaner configs.
    delete_retention_ms: int = 86_400_000       # how long a tombstone outlives its clean
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    min_cleanable_dirty_ratio: float = 0.5
    dedupe_buffer_bytes: int = 128 << 20        # log.cleaner.dedupe.buffer.size: 24 bytes a key slot

    def __post_init__(self):
        if self.segment_bytes < 14:
            raise ValueError("segment_bytes must be at least 14 (Kafka's minimum)")
        if self.segment_bytes > _INT32_MAX:
            raise ValueError("segment_bytes must fit in an int32: a segment file never exceeds 2 GiB")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        if self.segment_index_bytes < 8:
            raise ValueError("segment_index_bytes must hold at least one offset index entry (8 bytes)")
        if self.max_message_bytes < 0:
            raise ValueError("max_message_bytes must be >= 0")
        if self.sealed_segment_check not in SEALED_SEGMENT_CHECKS:
            raise ValueError(f"sealed_segment_check must be one of {SEALED_SEGMENT_CHECKS}")
        if self.epoch_flush not in FLUSH_MODES:
            raise ValueError(f"epoch_flush must be one of {FLUSH_MODES}")
        if set(self.cleanup_policy.replace(" ", "").split(",")) - {"delete", "compact"} or not self.cleanup_policy:
            raise ValueError(f"cleanup_policy must be 'delete', 'compact' or 'compact,delete', "
                             f"not {self.cleanup_policy!r}")
        for name in ("retention_ms", "retention_bytes"):
            if getattr(self, name) < -1:
                raise ValueError(f"{name} must be >= -1 (-1: unlimited)")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise ValueError("min_cleanable_dirty_ratio must be in [0, 1]")
        if self.dedupe_buffer_bytes < 24:
            raise ValueError("dedupe_buffer_bytes must hold at least one key slot (24 bytes)")
        for name in ("file_delete_delay_ms", "producer_id_expiration_ms", "delete_retention_ms",
                     "min_compaction_lag_ms", "max_compaction_lag_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    @property
    def compacts(self) -> bool:
        """Whether the cleaner compacts this log ("compact" in cleanup_policy)."""
        return "compact" in self.cleanup_policy.replace(" ", "").split(",")

    @property
    def deletes(self) -> bool:
        """Whether retention deletes segments ("delete" in cleanup_policy)."""
        return "delete" in self.cleanup_policy.replace(" ", "").split(",")
