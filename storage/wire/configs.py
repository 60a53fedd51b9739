"""Kafka's topic config names, as CreateTopics and DescribeConfigs carry them, mapped to the
engine's LogConfig fields (and min.insync.replicas, which the replica manager applies).

A name Kafka has but the engine does not act on is refused (INVALID_CONFIG, naming it), never
accepted and ignored.
"""
from __future__ import annotations

import dataclasses
import logging
import re

from ..core.config import COMPRESSION_TYPES, LogConfig
from ..core.errors import Errors
from . import rules

log = logging.getLogger("storage.wire")

class ConfigError(ValueError):
    """A config name the engine does not serve or a value it refuses."""


# Kafka name -> (LogConfig field, Kafka's type).  min.insync.replicas has no LogConfig field.
# The types are those of Kafka's LogConfig ConfigDef (storage/src/main/java/org/apache/kafka/
# storage/internals/log/LogConfig.java): INT an int32, LONG an int64; the ranges (atLeast,
# between) are LogConfig.RANGES (storage/core/config.py), checked when the LogConfig is made.
TOPIC_CONFIGS: dict[str, tuple[str | None, str]] = {
    "cleanup.policy": ("cleanup_policy", "LIST"),
    "retention.ms": ("retention_ms", "LONG"),
    "retention.bytes": ("retention_bytes", "LONG"),
    "segment.bytes": ("segment_bytes", "INT"),
    "segment.ms": ("segment_ms", "LONG"),
    "segment.index.bytes": ("segment_index_bytes", "INT"),
    "index.interval.bytes": ("index_interval_bytes", "INT"),
    "max.message.bytes": ("max_message_bytes", "INT"),
    "file.delete.delay.ms": ("file_delete_delay_ms", "LONG"),
    "delete.retention.ms": ("delete_retention_ms", "LONG"),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", "LONG"),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", "LONG"),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", "DOUBLE"),
    "min.insync.replicas": (None, "INT"),           # INT, atLeast(1)
    "compression.type": ("compression_type", "STRING"),  # in(BrokerCompressionType.names())
    "message.timestamp.type": ("message_timestamp_type", "STRING"),  # in("CreateTime", "LogAppendTime")
    "compression.gzip.level": ("compression_gzip_level", "INT"),
    "compression.lz4.level": ("compression_lz4_level", "INT"),
    "compression.zstd.level": ("compression_zstd_level", "INT"),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", "LONG"),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", "LONG"),
    "flush.messages": ("flush_messages", "LONG"),
    "flush.ms": ("flush_ms", "LONG"),
}
_BITS = {"INT": 32, "LONG": 64}
# The STRING configs' values (Kafka's ValidString: exact, case-sensitive).
STRING_CHOICES = {"compression.type": COMPRESSION_TYPES, "message.timestamp.type": ("CreateTime", "LogAppendTime")}
# ConfigDef.parseType trims the string with Java's String.trim: every char <= U+0020.
_JAVA_TRIM = "".join(map(chr, range(0x21)))
# Integer.parseInt / Long.parseLong: an optional sign and decimal digits, nothing else.
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Double.parseDouble's decimal forms (a trailing d/f is Java's type suffix); NaN and Infinity
# parse in Java but no ratio is either, so they are refused as out of range below.
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[dDfF]?")
_POLICIES = ("compact", "delete")


def parse_value(name: str, raw) -> object:
    """`raw` (a string from CreateTopics or the metadata store) as Kafka's ConfigDef parses the
    config `name` (its type; the range is LogConfig's): ConfigError names both when it cannot."""
    kind = TOPIC_CONFIGS[name][1]
    if not isinstance(raw, str):
        raise ConfigError(f"invalid value {raw!r} for {name}: a value is required")
    text = raw.strip(_JAVA_TRIM)
    if kind in _BITS:
        if not _INTEGER.fullmatch(text):
            raise ConfigError(f"invalid value {raw!r} for {name}: not a number ({kind})")
        value, bits = int(text), _BITS[kind]
        if not -2 ** (bits - 1) <= value < 2 ** (bits - 1):
            raise ConfigError(f"invalid value {raw!r} for {name}: does not fit {'an' if kind == 'INT' else 'a'} {kind} ({bits} bits)")
        if name == "min.insync.replicas" and value < 1:
            raise ConfigError(f"invalid value {raw!r} for {name}: must be at least 1")
        return value
    if kind == "STRING":
        choices = STRING_CHOICES[name]
        if text not in choices:
            raise ConfigError(f"invalid value {raw!r} for {name}: one of {', '.join(choices)}")
        return text
    if kind == "DOUBLE":
        if not _DECIMAL.fullmatch(text):
            raise ConfigError(f"invalid value {raw!r} for {name}: not a number (DOUBLE)")
        return float(text.rstrip("dDfF"))
    items = [item.strip(_JAVA_TRIM) for item in text.split(",")] if text else []
    if not items or any(item not in _POLICIES for item in items):
        raise ConfigError(f"invalid value {raw!r} for {name}: a list of {' and '.join(_POLICIES)}")
    return ",".join(dict.fromkeys(items))


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


def _changes(configs: dict[str, str]) -> dict[str, object]:
    """The LogConfig fields the Kafka configs set (min.insync.replicas checked, not kept)."""
    changes = {}
    for name, raw in configs.items():
        if name not in TOPIC_CONFIGS:
            raise ConfigError(f"unknown or unsupported topic config {name!r}")
        value = parse_value(name, raw)
        field = TOPIC_CONFIGS[name][0]
        if field is not None:
            changes[field] = value
    return changes


def log_config(base: LogConfig, configs: dict[str, str]) -> LogConfig:
    """`base` with the topic's overrides applied (ConfigError names a bad one)."""
    changes = _changes(configs)
    try:
        return dataclasses.replace(base, **changes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# A stored config this engine refuses falls back to its default, except the two that say what
# to keep: there the fallback keeps everything (-1), so a bad value never deletes data.
_KEEP_ALL = {"retention.ms": -1, "retention.bytes": -1}


def lenient_log_config(base: LogConfig, topic: str | None, configs: dict[str, str]) -> LogConfig:
    """The LogConfig of a topic whose configs were stored earlier (by an older version, or by
    hand): each config this engine refuses is logged, naming the topic, the config and the
    value (topic None: not logged), and left at its default; every other one applies.  A
    start never fails on one."""
    effective = base
    for name, raw in configs.items():
        try:
            one = _changes({name: raw})
            effective = dataclasses.replace(effective, **one)     # its range, and with the others
        except (ConfigError, ValueError) as exc:
            field = TOPIC_CONFIGS.get(name, (None,))[0]
            if name in _KEEP_ALL:
                effective = dataclasses.replace(effective, **{field: _KEEP_ALL[name]})
            if field is not None:
                instead = f"{name}={_KEEP_ALL.get(name, getattr(effective, field))}"
            else:
                instead = "the broker's min.insync.replicas" if name in TOPIC_CONFIGS else "that config ignored"
            if topic is not None:
                log.error("topic %s: stored config %s=%r is refused (%s); the topic is served with %s",
                          topic, name, raw, exc, instead)
    return effective


def describe(base: LogConfig, configs: dict[str, str], min_isr: int) -> list[tuple[str, str, bool]]:
    """(name, value, set on the topic) of every topic config, Kafka's names, sorted."""
    effective = lenient_log_config(base, None, configs)
    try:
        own_min_isr = parse_value("min.insync.replicas", configs.get("min.insync.replicas", str(min_isr)))
    except ConfigError:
        own_min_isr = min_isr
    out = []
    for name, (field, _) in sorted(TOPIC_CONFIGS.items()):
        value = getattr(effective, field) if field is not None else own_min_isr
        out.append((name, str(value), name in configs))
    return out


def source(base: LogConfig, name: str, own: bool) -> int:
    """DescribeConfigs' config_source of a topic config: DYNAMIC_TOPIC_CONFIG (1) when the topic
    sets it, STATIC_BROKER_CONFIG (4) when the broker's own default is not Kafka's, else
    DEFAULT_CONFIG (5)."""
    if own:
        return 1
    field = TOPIC_CONFIGS[name][0]
    return 4 if field is not None and getattr(base, field) != getattr(VALIDATION_BASE, field) else 5


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


def min_isrs(topics: dict[str, dict[str, str]]) -> dict[str, int]:
    """Topic name -> its min.insync.replicas, for the topics that set a valid one (a stored
    one this engine refuses is logged and the broker's applies)."""
    out = {}
    for name, configs in topics.items():
        if "min.insync.replicas" in configs:
            try:
                out[name] = parse_value("min.insync.replicas", configs["min.insync.replicas"])
            except ConfigError as exc:
                log.error("topic %s: %s; the broker's min.insync.replicas applies", name, exc)
    return out


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    """A topic's configs, parsed once where the metadata record is replayed and handed as they
    are to where they act: `log` to the log dir (its partitions open with it) and `min_isr` to
    the replica manager (None: the broker's applies).  `raw` is what the record carries."""

    raw: dict
    log: LogConfig
    min_isr: int | None

    @classmethod
    def parse(cls, base: LogConfig, topic: str, configs: dict[str, str]) -> "TopicConfig":
        """Leniently (a stored config this engine refuses is logged and left at its default):
        a start never fails on one."""
        raw = dict(configs)
        return cls(raw, lenient_log_config(base, topic, raw), min_isrs({topic: raw}).get(topic))


# Topic configs are validated against one base in both modes: Kafka's defaults, the only one
# the controller knows (a broker's own LogConfig is the base a topic's log opens with).
VALIDATION_BASE = LogConfig()


def create_problem(name: str, partitions: int, configs: dict[str, str], *,
                   internal: bool) -> tuple[int, str] | None:
    """(error code, message) when the controller must refuse to create that topic: the rules
    of names (rules.create_problem), the configs the engine serves, the partition cap."""
    return rules.create_problem(name, internal_allowed=internal) or \
        topic_problem(VALIDATION_BASE, name, partitions, configs)


def install(logdir, manager, name: str, config: TopicConfig) -> None:
    """A topic's parsed configs where they act: its LogConfig for its partitions' logs (LogDir
    reads it when a partition opens, and the open ones take it at once: an altered config acts
    on the running logs) and its min.insync.replicas for the replica manager."""
    logdir.topic_configs[name] = config.log
    for (topic, _), opened in logdir.logs().items():
        if topic == name and opened.config != config.log:
            opened.reconfigure(config.log)
    if config.min_isr is not None:
        manager.topic_min_isr[name] = config.min_isr
    else:
        manager.topic_min_isr.pop(name, None)


def uninstall(logdir, manager, name: str) -> None:
    logdir.topic_configs.pop(name, None)
    manager.topic_min_isr.pop(name, None)
