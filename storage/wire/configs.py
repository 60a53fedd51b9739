"""Kafka's topic config names, as CreateTopics and DescribeConfigs carry them, mapped to the
engine's LogConfig fields (and min.insync.replicas, which the replica manager applies).

A name Kafka has but the engine does not act on is refused (INVALID_CONFIG, naming it), never
accepted and ignored.
"""
from __future__ import annotations

import dataclasses

from ..config import LogConfig

# Kafka name -> (LogConfig field, parser).  min.insync.replicas has no LogConfig field.
TOPIC_CONFIGS: dict[str, tuple[str | None, type]] = {
    "cleanup.policy": ("cleanup_policy", str),
    "retention.ms": ("retention_ms", int),
    "retention.bytes": ("retention_bytes", int),
    "segment.bytes": ("segment_bytes", int),
    "segment.ms": ("segment_ms", int),
    "segment.index.bytes": ("segment_index_bytes", int),
    "index.interval.bytes": ("index_interval_bytes", int),
    "max.message.bytes": ("max_message_bytes", int),
    "file.delete.delay.ms": ("file_delete_delay_ms", int),
    "delete.retention.ms": ("delete_retention_ms", int),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", int),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", int),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float),
    "min.insync.replicas": (None, int),
}


# A CreateTopics (or an auto-creation) asking for more partitions than this is refused with
# INVALID_PARTITIONS: every partition opens a log on every replica, so one request for millions
# would hold a broker for hours.  Kafka has no such cap; 10,000 is far above any real topic.
MAX_PARTITIONS_PER_TOPIC = 10_000


def partition_count_problem(count: int) -> str | None:
    if count < 1:
        return f"number of partitions must be at least 1, not {count}"
    if count > MAX_PARTITIONS_PER_TOPIC:
        return f"{count} partitions is more than this broker creates in one topic ({MAX_PARTITIONS_PER_TOPIC})"
    return None


class ConfigError(ValueError):
    """A config name the engine does not serve or a value it refuses."""


def log_config(base: LogConfig, configs: dict[str, str]) -> LogConfig:
    """`base` with the topic's overrides applied (ConfigError names a bad one)."""
    changes = {}
    for name, raw in configs.items():
        if name not in TOPIC_CONFIGS:
            raise ConfigError(f"unknown or unsupported topic config {name!r}")
        field, parse = TOPIC_CONFIGS[name]
        try:
            value = parse(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"invalid value {raw!r} for {name}") from None
        if field is not None:
            changes[field] = value
        elif value < 1:
            raise ConfigError(f"{name} must be at least 1")
    try:
        return dataclasses.replace(base, **changes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def describe(base: LogConfig, configs: dict[str, str], min_isr: int) -> list[tuple[str, str, bool]]:
    """(name, value, set on the topic) of every topic config, Kafka's names, sorted."""
    effective = log_config(base, configs)
    out = []
    for name, (field, _) in sorted(TOPIC_CONFIGS.items()):
        value = getattr(effective, field) if field is not None else int(configs.get(name, min_isr))
        out.append((name, str(value), name in configs))
    return out
