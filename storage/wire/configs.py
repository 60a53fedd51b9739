"""Kafka's topic config names, as CreateTopics and DescribeConfigs carry them, mapped to the
engine's LogConfig fields (and min.insync.replicas, which the replica manager applies).

A name Kafka has but the engine does not act on is refused (INVALID_CONFIG, naming it), never
accepted and ignored.
"""
from __future__ import annotations

import dataclasses
import logging

from ..config import LogConfig
from ..errors import Errors

log = logging.getLogger("storage.wire")

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


def topic_name_problem(name: str) -> str | None:
    """Kafka's topic name rules (Topic.validate): None when `name` is legal."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > 249:
        return f"topic name is {len(name)} characters long, more than 249"
    bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "._-"))})
    if bad:
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-': {bad}"
    return None


def topic_problem(base: LogConfig, name: str, partitions: int, configs: dict[str, str]) -> tuple[int, str] | None:
    """(error code, message) when a topic of that name, partition count and configs cannot be
    created here (Kafka's name rules, the configs the engine serves, the partition cap)."""
    problem = topic_name_problem(name)
    if problem:
        return Errors.INVALID_TOPIC_EXCEPTION, problem
    try:
        log_config(base, configs)
    except ConfigError as exc:
        return Errors.INVALID_CONFIG, str(exc)
    problem = partition_count_problem(partitions)
    if problem:
        return Errors.INVALID_PARTITIONS, problem
    return None


def log_configs(base: LogConfig, topics: dict[str, dict[str, str]]) -> dict[str, LogConfig]:
    """Topic name -> the LogConfig its partitions open with.  Configs the engine refuses
    (validated at creation; a later engine may refuse them) keep the defaults, logged."""
    out = {}
    for name, configs in topics.items():
        try:
            out[name] = log_config(base, configs)
        except ConfigError as exc:
            log.error("topic %s keeps the default configs: %s", name, exc)
    return out


def min_isrs(topics: dict[str, dict[str, str]]) -> dict[str, int]:
    """Topic name -> its min.insync.replicas, for the topics that set one."""
    return {name: int(c["min.insync.replicas"]) for name, c in topics.items() if "min.insync.replicas" in c}


def install(logdir, manager, base: LogConfig, name: str, configs: dict[str, str]) -> None:
    """A new topic's configs where they act: its LogConfig for its partitions' logs (LogDir
    reads it when a partition opens) and its min.insync.replicas for the replica manager."""
    logdir.topic_configs.update(log_configs(base, {name: configs}))
    manager.topic_min_isr.update(min_isrs({name: configs}))


def uninstall(logdir, manager, name: str) -> None:
    logdir.topic_configs.pop(name, None)
    manager.topic_min_isr.pop(name, None)
