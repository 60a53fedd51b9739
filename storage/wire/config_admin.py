"""Altering configs: Kafka's IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) and legacy
AlterConfigs (the whole set replaced) of topics and of the dynamic broker configs, validated as
Kafka's ConfigAdminManager and ControllerConfigurationValidator do, and the broker configs this
broker serves with their sources (DescribeConfigs).

`alter` runs where the controller is (node.LocalController in-process, controller_server for a
cluster): it plans each resource's new config set from the controller's state, validates it and
commits it (Controller.set_topic_configs / set_broker_configs); the controller publishes the
change as ConfigRecords, which every broker replays (broker.Broker.replay) into its running logs.

Broker configs: the dynamic ones are Kafka's broker-side synonyms of the topic configs the engine
serves (Kafka's DynamicLogConfig set, ServerTopicConfigSynonyms): a value for "" is the cluster
default, one for a broker id that broker's own, and each is the default of every topic that does
not set its own.  A few static broker configs are described read-only; altering one is refused
with INVALID_REQUEST "Cannot update these configs dynamically", as Kafka's DynamicBrokerConfig.
"""
from __future__ import annotations

import dataclasses
import logging

from ..core.config import RANGES, LogConfig
from ..core.errors import Errors
from . import configs as topic_configs

log = logging.getLogger("storage.wire")

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8          # ConfigResource.Type
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3      # AlterConfigOp.OpType

# Topic config -> its broker synonym (Kafka's ServerTopicConfigSynonyms, the first of each).
BROKER_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
}
DYNAMIC_BROKER_CONFIGS = {broker: topic for topic, broker in BROKER_SYNONYMS.items()}
# Static broker configs described read-only (altering one: "Cannot update these configs dynamically").
READ_ONLY_BROKER_CONFIGS = ("auto.create.topics.enable", "broker.id", "default.replication.factor",
                            "log.dirs", "node.id", "num.partitions", "offsets.topic.num.partitions")
READ_ONLY_TYPES = {"auto.create.topics.enable": "BOOLEAN", "log.dirs": "STRING"}

# DescribeConfigs' config_source and config_type (Kafka's DescribeConfigsResponse enums).
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7}

DOCS = {
    "cleanup.policy": "The retention policy of the log's old segments: delete, compact, or both.",
    "retention.ms": "The longest a segment is kept before it is deleted (-1: no time limit).",
    "retention.bytes": "The largest a partition grows before its oldest segments are deleted (-1: no limit).",
    "segment.bytes": "The size of a segment file: a segment at it is rolled.",
    "segment.ms": "The time after which a segment is rolled even if not full.",
    "segment.index.bytes": "The size of a segment's offset and time indexes.",
    "index.interval.bytes": "How many bytes of batches come between two index entries.",
    "max.message.bytes": "The largest record batch the log accepts.",
    "file.delete.delay.ms": "How long a deleted segment's files stay before they are removed.",
    "delete.retention.ms": "How long a compacted log keeps tombstones.",
    "min.compaction.lag.ms": "The least time a record stays uncompacted.",
    "max.compaction.lag.ms": "The most time a record stays ineligible for compaction.",
    "min.cleanable.dirty.ratio": "The dirty share of a compacted log above which it is cleaned.",
    "min.insync.replicas": "The fewest in-sync replicas an acks=all produce needs.",
    "compression.type": "The codec of the topic's batches: producer keeps the producer's, else batches are rebuilt in it.",
    "compression.gzip.level": "The gzip level batches are rebuilt with when compression.type is gzip.",
    "compression.lz4.level": "The lz4 level batches are rebuilt with when compression.type is lz4.",
    "compression.zstd.level": "The zstd level batches are rebuilt with when compression.type is zstd.",
    "message.timestamp.type": "Whether a record's timestamp is the producer's (CreateTime) or the log's.",
    "message.timestamp.before.max.ms": "How far before the broker's clock a CreateTime timestamp may be.",
    "message.timestamp.after.max.ms": "How far after the broker's clock a CreateTime timestamp may be.",
    "flush.messages": "How many messages past the last flush make an append flush (fsync) the log.",
    "flush.ms": "How old the last flush of a log with unflushed messages may be before it is flushed (fsync).",
}


class AlterError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def kafka_default(topic_name: str) -> str:
    """Kafka's default of a topic config (the engine's LogConfig defaults are Kafka's)."""
    field = topic_configs.TOPIC_CONFIGS[topic_name][0]
    return "1" if field is None else str(getattr(LogConfig(), field))


# ---- planning a resource's new config set --------------------------------------------------------

def _ops_plan(current: dict[str, str], ops, kind: str) -> dict[str, str]:
    """The config set after IncrementalAlterConfigs' `ops` ((name, op, value) each) on
    `current` (Kafka's ConfigAdminManager.prepareIncrementalConfigs)."""
    names = [name for name, _, _ in ops]
    if len(set(names)) != len(names):
        raise AlterError(Errors.INVALID_REQUEST, "Error due to duplicate config keys")
    new = dict(current)
    for name, op, value in ops:
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise AlterError(Errors.INVALID_REQUEST, f"Unknown alter config operation {op} for {name}")
        topic_name = name if kind == "topic" else DYNAMIC_BROKER_CONFIGS.get(name)
        if op in (APPEND, SUBTRACT):
            if topic_name is None or topic_name not in topic_configs.TOPIC_CONFIGS:
                raise AlterError(Errors.INVALID_CONFIG, f"Unknown {kind} config name: {name}")
            if topic_configs.TOPIC_CONFIGS[topic_name][1] != "LIST":
                verb = "append" if op == APPEND else "subtract"
                raise AlterError(Errors.INVALID_REQUEST, f"Config value {verb} is not allowed for config key: {name}")
            old = new.get(name, kafka_default(topic_name)).split(",")
            given = (value or "").split(",")
            items = old + given if op == APPEND else [item for item in old if item not in given]
            new[name] = ",".join(dict.fromkeys(item.strip() for item in items if item.strip()))
        elif op == DELETE:
            new.pop(name, None)
        else:
            if value is None:
                raise AlterError(Errors.INVALID_REQUEST, f"Null value not supported for {kind} configs: {name}")
            new[name] = value
    return new


def _legacy_plan(entries, kind: str) -> dict[str, str]:
    """AlterConfigs: the given set replaces the whole set."""
    names = [name for name, _ in entries]
    if len(set(names)) != len(names):
        raise AlterError(Errors.INVALID_REQUEST, "Error due to duplicate config keys")
    for name, value in entries:
        if value is None:
            raise AlterError(Errors.INVALID_REQUEST, f"Null value not supported for {kind} configs: {name}")
    return dict(entries)


def kafka_value_problem(topic_name: str, raw: str, shown: str | None = None) -> str | None:
    """Kafka's ConfigException text for a value its ConfigDef refuses (its type, its list,
    its range), naming the config as `shown` (a broker synonym) or `topic_name`; None when the
    value parses and is in range."""
    name = shown or topic_name
    field, kind = topic_configs.TOPIC_CONFIGS[topic_name]
    try:
        value = topic_configs.parse_value(topic_name, raw)
    except topic_configs.ConfigError:
        if kind == "LIST":
            return f"Invalid value {raw} for configuration {name}: String must be one of: compact, delete"
        return f"Invalid value {raw} for configuration {name}: Not a number of type {kind}"
    if kind in ("LIST", "STRING"):
        return None         # parse_value checked its items or its choices (a string has no range)
    low, high = RANGES.get(field, (1, None)) if field is not None else (1, None)

    def shown(bound) -> str:          # Kafka's between(0, 1) of the one DOUBLE prints ints
        return format(bound, "g") if isinstance(bound, float) else str(bound)
    if value < low:
        return f"Invalid value {raw} for configuration {name}: Value must be at least {shown(low)}"
    if high is not None and value > high:
        return f"Invalid value {raw} for configuration {name}: Value must be no more than {shown(high)}"
    return None


def validate_topic_configs(new: dict[str, str]) -> None:
    """Kafka's LogConfig.validate: every name known, every value of its type and range (with
    Kafka's messages), then the rules between them."""
    for name in new:
        if name not in topic_configs.TOPIC_CONFIGS:
            raise AlterError(Errors.INVALID_CONFIG, f"Unknown topic config name: {name}")
    for name, raw in sorted(new.items()):
        problem = kafka_value_problem(name, raw)
        if problem:
            raise AlterError(Errors.INVALID_CONFIG, problem)
    try:
        topic_configs.log_config(topic_configs.VALIDATION_BASE, new)
    except topic_configs.ConfigError as exc:
        raise AlterError(Errors.INVALID_CONFIG, str(exc)) from None


def validate_broker_configs(resource: str, new: dict[str, str]) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs for the dynamic set this broker serves."""
    if resource != "" and not _is_broker_id(resource):
        raise AlterError(Errors.INVALID_REQUEST, f"Broker id must be an integer, but it is: {resource}")
    static = sorted(name for name in new if name in READ_ONLY_BROKER_CONFIGS)
    if static:
        raise AlterError(Errors.INVALID_REQUEST, f"Cannot update these configs dynamically: Set({', '.join(static)})")
    unknown = sorted(name for name in new if name not in DYNAMIC_BROKER_CONFIGS)
    if unknown:
        raise AlterError(Errors.INVALID_CONFIG, f"Unknown broker config name: {', '.join(unknown)} (this broker "
                                                f"alters only {', '.join(sorted(DYNAMIC_BROKER_CONFIGS))})")
    for name, raw in sorted(new.items()):
        problem = kafka_value_problem(DYNAMIC_BROKER_CONFIGS[name], raw, name)
        if problem:
            raise AlterError(Errors.INVALID_CONFIG, problem)
    try:
        topic_configs.log_config(topic_configs.VALIDATION_BASE,
                                 {DYNAMIC_BROKER_CONFIGS[name]: value for name, value in new.items()})
    except topic_configs.ConfigError as exc:
        raise AlterError(Errors.INVALID_CONFIG, str(exc)) from None


def _is_broker_id(resource: str) -> bool:
    try:
        return int(resource) >= 0 and str(int(resource)) == resource.strip()
    except ValueError:
        return False


def plan(controller, resource_type: int, name: str, change, *, incremental: bool) -> dict[str, str]:
    """The validated new config set of one resource; AlterError says why not."""
    if resource_type == TOPIC:
        if name not in controller.topics:
            raise AlterError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        current = controller.topics[name]["configs"]
        kind = "topic"
    elif resource_type == BROKER:
        current = controller.broker_configs.get(name, {})
        kind = "broker"
    elif resource_type == BROKER_LOGGER:
        raise AlterError(Errors.INVALID_REQUEST, "BROKER_LOGGER resources are not served: this broker's "
                                                 "log levels are set with --log-level")
    else:
        raise AlterError(Errors.INVALID_REQUEST, f"Unexpected resource type {resource_type}")
    new = _ops_plan(current, change, kind) if incremental else _legacy_plan(change, kind)
    if resource_type == TOPIC:
        validate_topic_configs(new)
    else:
        validate_broker_configs(name, new)
    return new


class ImageView:
    """A broker's MetadataImage as `plan` reads the controller's state: a cluster's broker plans
    a change from it to know when the replayed metadata shows it."""

    def __init__(self, image):
        self.image = image

    @property
    def topics(self) -> dict[str, dict]:
        return {name: {"configs": dict(self.image.configs.get(name, {}))} for name in self.image.topic_ids}

    @property
    def broker_configs(self) -> dict[str, dict[str, str]]:
        return self.image.broker_configs

    def configs_of(self, resource_type: int, name: str) -> dict[str, str]:
        held = self.image.configs if resource_type == TOPIC else self.image.broker_configs
        return dict(held.get(name, {}))


def alter(controller, resources, *, incremental: bool, validate_only: bool) -> list[tuple[int, str | None]]:
    """(error code, message) of each (resource type, name, change) of an AlterConfigs (change:
    [(name, value)]) or IncrementalAlterConfigs (change: [(name, op, value)]); each resource
    on its own, committed unless validate_only."""
    out = []
    seen = [(t, n) for t, n, _ in resources]
    for resource_type, name, change in resources:
        if seen.count((resource_type, name)) > 1:
            out.append((Errors.INVALID_REQUEST, f"Duplicate resource {name!r} of type {resource_type}"))
            continue
        try:
            new = plan(controller, resource_type, name, change, incremental=incremental)
        except AlterError as exc:
            out.append((exc.code, exc.message))
            continue
        if not validate_only:
            if resource_type == TOPIC:
                controller.set_topic_configs(name, new)
            else:
                controller.set_broker_configs(name, new)
            log.info("configs of %s %r are now %s", "topic" if resource_type == TOPIC else "broker", name, new)
        out.append((Errors.NONE, None))
    return out


def request_resources(request, *, incremental: bool) -> list:
    """(type, name, change) of an AlterConfigs or IncrementalAlterConfigs request (kio)."""
    if incremental:
        return [(int(r.resource_type), r.resource_name,
                 [(c.name, int(c.config_operation), c.value) for c in r.configs]) for r in request.resources]
    return [(int(r.resource_type), r.resource_name, [(c.name, c.value) for c in r.configs])
            for r in request.resources]


def response_body(request, results) -> dict:
    return {"responses": [{"error_code": code, "error_message": message, "resource_type": r.resource_type,
                           "resource_name": r.resource_name} for r, (code, message) in zip(request.resources, results)]}


# ---- the broker configs in force ------------------------------------------------------------------

def dynamic_layers(broker_configs: dict[str, dict[str, str]], node_id: int) -> tuple[dict, dict]:
    """(this broker's own dynamic configs, the cluster default's)."""
    return dict(broker_configs.get(str(node_id), {})), dict(broker_configs.get("", {}))


def effective_base(static: LogConfig, static_min_isr: int, broker_configs: dict[str, dict[str, str]],
                   node_id: int) -> tuple[LogConfig, int]:
    """The broker's LogConfig and min.insync.replicas with the dynamic broker configs over the
    static ones (its own over the cluster default's).  A stored value this engine refuses is
    logged and skipped (a start never fails on one)."""
    own, default = dynamic_layers(broker_configs, node_id)
    base, min_isr = static, static_min_isr
    for name, value in {**default, **own}.items():
        topic_name = DYNAMIC_BROKER_CONFIGS.get(name)
        try:
            if topic_name is None:
                raise topic_configs.ConfigError(f"unknown dynamic broker config {name!r}")
            parsed = topic_configs.parse_value(topic_name, value)
            field = topic_configs.TOPIC_CONFIGS[topic_name][0]
            if field is None:
                min_isr = parsed
            else:
                base = dataclasses.replace(base, **{field: parsed})
        except (topic_configs.ConfigError, ValueError) as exc:
            log.error("dynamic broker config %s=%r is refused (%s); the static one applies", name, value, exc)
    return base, min_isr
