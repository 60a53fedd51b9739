"""The config and cluster admin APIs: IncrementalAlterConfigs and AlterConfigs of topics and of
the dynamic broker configs (Kafka's validation and error codes; the change acting on the running
logs; kept across a restart), DescribeConfigs' sources, synonyms, types and documentation,
DescribeCluster and the authorized-operations fields.  Through confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient where they reach them, raw frames for the error paths; the
3-broker `storage cluster` case is in tests/wire/test_admin_configs_cluster.py.  Kafka's tests
ported are named at each case."""
from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.replication.messages import ProduceRequest  # noqa: E402
from storage.topics import metadata_records as mr  # noqa: E402
from storage.wire import codec, config_admin  # noqa: E402
from storage.wire.metadata import MetadataImage  # noqa: E402
from storage.wire.node import Node  # noqa: E402
from tests.wire_support import Broker, raw_exchange  # noqa: E402

SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                 AlterConfigOpType.SUBTRACT)


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data").start()
    yield b
    b.kill()


def admin(b: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def create(a: AdminClient, name: str, config: dict | None = None) -> None:
    for f in a.create_topics([NewTopic(name, 1, 1, config=config or {})]).values():
        f.result(10)


def incremental(a: AdminClient, rtype, name: str, *ops, validate_only: bool = False):
    resource = ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(n, v, incremental_operation=op) for n, op, v in ops])
    (future,) = a.incremental_alter_configs([resource], validate_only=validate_only).values()
    return future


def refused(future) -> tuple[int, str]:
    with pytest.raises(KafkaException) as info:
        future.result(10)
    error = info.value.args[0]
    return error.code(), error.str()


def described(a: AdminClient, rtype, name: str) -> dict:
    (future,) = a.describe_configs([ConfigResource(rtype, name)]).values()
    return future.result(10)


def ask(b: Broker, key: int, version: int, body: dict):
    answer = raw_exchange((b.host, b.port), codec.encode_request(key, version, 7, "admin-test", body))
    assert answer is not None, f"connection dropped; stderr:\n{b.stderr()[-3000:]}"
    return codec.decode_response(key, version, answer)[1]


# ---- planning (no broker) -----------------------------------------------------------------------

class _State:
    def __init__(self, topics=None, broker_configs=None):
        self.topics = {n: {"configs": dict(c)} for n, c in (topics or {}).items()}
        self.broker_configs = broker_configs or {}


def test_incremental_operations_plan_as_kafkas_config_admin_manager():
    state = _State({"t": {"cleanup.policy": "delete", "retention.ms": "5"}})
    plan = config_admin.plan
    assert plan(state, 2, "t", [("cleanup.policy", 2, "compact")], incremental=True) == \
        {"cleanup.policy": "delete,compact", "retention.ms": "5"}
    assert plan(_State({"t": {"cleanup.policy": "compact,delete"}}), 2, "t", [("cleanup.policy", 3, "delete")],
                incremental=True) == {"cleanup.policy": "compact"}
    # Subtracting the last policy leaves a list this engine refuses (no policy at all).
    with pytest.raises(config_admin.AlterError) as info:
        plan(state, 2, "t", [("cleanup.policy", 3, "delete")], incremental=True)
    assert info.value.code == Errors.INVALID_CONFIG
    assert plan(state, 2, "t", [("retention.ms", 1, None)], incremental=True) == {"cleanup.policy": "delete"}
    # APPEND to a list the topic does not set starts from Kafka's default (delete).
    assert plan(_State({"t": {}}), 2, "t", [("cleanup.policy", 2, "compact")], incremental=True) == \
        {"cleanup.policy": "delete,compact"}
    # AlterConfigs replaces the whole set.
    assert plan(state, 2, "t", [("segment.ms", "100")], incremental=False) == {"segment.ms": "100"}


def test_a_null_valued_config_record_deletes_and_broker_records_replay_apart():
    image = MetadataImage()
    image.apply(2, {"name": "t", "topicId": bytes(15) + b"\x01"})
    for value in ("100", None):
        image.apply(*mr.decode(mr.encode(4, {"resourceType": mr.TOPIC_RESOURCE, "resourceName": "t",
                                            "name": "retention.ms", "value": value}))[::2])
        assert image.configs["t"].get("retention.ms") == value
    change = image.apply(4, {"resourceType": mr.BROKER_RESOURCE, "resourceName": "", "name": "log.retention.ms",
                             "value": "7"})
    assert change == ("broker_config", "") and image.broker_configs == {"": {"log.retention.ms": "7"}}
    assert image.configs["t"] == {}


# ---- topics through confluent-kafka -------------------------------------------------------------

def test_set_append_subtract_delete_and_the_sources_confluent(broker):
    a = admin(broker)
    create(a, "t")
    assert incremental(a, ResourceType.TOPIC, "t", ("retention.ms", SET, "3600000"),
                       ("cleanup.policy", APPEND, "compact")).result(10) is None
    got = described(a, ResourceType.TOPIC, "t")
    assert got["retention.ms"].value == "3600000"
    assert got["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert got["cleanup.policy"].value == "delete,compact"
    assert got["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value and got["max.message.bytes"].is_default
    # librdkafka asks for synonyms: the topic's own value, then its broker synonym's default.
    assert [(s.name, s.value, s.source) for s in got["retention.ms"].synonyms.values()] == [
        ("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.retention.ms", str(7 * 24 * 3600 * 1000), ConfigSource.DEFAULT_CONFIG.value)]
    assert incremental(a, ResourceType.TOPIC, "t", ("cleanup.policy", SUBTRACT, "delete"),
                       ("retention.ms", DELETE, None)).result(10) is None
    got = described(a, ResourceType.TOPIC, "t")
    assert got["cleanup.policy"].value == "compact"
    assert got["retention.ms"].value == str(7 * 24 * 3600 * 1000) and got["retention.ms"].is_default


def test_invalid_incremental_alter_configs_confluent(broker):
    # PlaintextAdminIntegrationTest.testInvalidIncrementalAlterConfigs and KRaftClusterTest's
    # incremental alters, in our words: APPEND/SUBTRACT on a scalar is INVALID_REQUEST, a value out
    # of range or an unknown name INVALID_CONFIG, an unknown topic UNKNOWN_TOPIC_OR_PARTITION; a
    # refused resource changes nothing.
    a = admin(broker)
    create(a, "t", {"retention.ms": "1000"})
    assert refused(incremental(a, ResourceType.TOPIC, "t", ("retention.ms", APPEND, "1"))) == (
        Errors.INVALID_REQUEST, "Config value append is not allowed for config key: retention.ms")
    assert refused(incremental(a, ResourceType.TOPIC, "t", ("retention.ms", SUBTRACT, "1")))[1] == \
        "Config value subtract is not allowed for config key: retention.ms"
    assert refused(incremental(a, ResourceType.TOPIC, "t", ("min.cleanable.dirty.ratio", SET, "1.1"),
                               ("retention.ms", SET, "5"))) == (
        Errors.INVALID_CONFIG, "Invalid value 1.1 for configuration min.cleanable.dirty.ratio: Value must be no more than 1")
    assert refused(incremental(a, ResourceType.TOPIC, "t", ("retention.ms", SET, "abc"))) == (
        Errors.INVALID_CONFIG, "Invalid value abc for configuration retention.ms: Not a number of type LONG")
    assert refused(incremental(a, ResourceType.TOPIC, "t", ("retention.ms", SET, "-2"))) == (
        Errors.INVALID_CONFIG, "Invalid value -2 for configuration retention.ms: Value must be at least -1")
    assert refused(incremental(a, ResourceType.TOPIC, "t", ("cleanup.policy", SET, "keep"))) == (
        Errors.INVALID_CONFIG, "Invalid value keep for configuration cleanup.policy: String must be one of: compact, delete")
    assert refused(incremental(a, ResourceType.TOPIC, "t", ("not.a.real.topic.config", SET, "1"))) == (
        Errors.INVALID_CONFIG, "Unknown topic config name: not.a.real.topic.config")
    assert refused(incremental(a, ResourceType.TOPIC, "baz", ("retention.ms", SET, "1"))) == (
        Errors.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'baz' does not exist.")
    # validate_only checks and changes nothing.
    assert incremental(a, ResourceType.TOPIC, "t", ("retention.ms", SET, "5"), validate_only=True).result(10) is None
    assert refused(incremental(a, ResourceType.TOPIC, "t", ("segment.bytes", SET, "x"), validate_only=True))[0] == \
        Errors.INVALID_CONFIG
    assert described(a, ResourceType.TOPIC, "t")["retention.ms"].value == "1000"


def test_alter_configs_replaces_the_whole_set_confluent(broker):
    # Kafka's legacy AlterConfigs: a config left out goes back to its default.
    a = admin(broker)
    create(a, "t", {"retention.ms": "1000", "segment.ms": "60000"})
    (future,) = a.alter_configs([ConfigResource(ResourceType.TOPIC, "t", set_config={"segment.ms": "120000"})]).values()
    assert future.result(10) is None
    got = described(a, ResourceType.TOPIC, "t")
    assert got["segment.ms"].value == "120000" and got["retention.ms"].is_default


def test_alter_and_describe_through_kafka_python(broker):
    kafka_admin = pytest.importorskip("kafka.admin")
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        client.create_topics([kafka_admin.NewTopic("kp", 1, 1)])
        topic = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, "kp",
                                           configs={"max.message.bytes": "2000"})
        assert client.alter_configs([topic]) == {"topic": {"kp": "OK"}}
        got = client.describe_configs([kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, "kp")])
        entry = got["topic"]["kp"]["max.message.bytes"]
        assert (entry["value"], entry["config_source"], entry["config_type"]) == ("2000", "DYNAMIC_TOPIC_CONFIG", "INT")
        broker_resource = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.BROKER, "1",
                                                     configs={"log.retention.ms": "5000"})
        assert client.alter_configs([broker_resource]) == {"broker": {"1": "OK"}}
        got = client.describe_configs([kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.BROKER, "1")])
        assert got["broker"]["1"]["log.retention.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
    finally:
        client.close()


def test_an_altered_max_message_bytes_refuses_the_next_produce(broker):
    # DynamicConfigChangeTest's point, in our words: an altered topic config acts on the running log.
    a = admin(broker)
    create(a, "big")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 100_000, "retries": 0})
    outcomes = []

    def send():
        producer.produce("big", b"x" * 5000, on_delivery=lambda err, msg: outcomes.append(err))
        producer.flush(10)
        return outcomes.pop()
    assert send() is None
    assert incremental(a, ResourceType.TOPIC, "big", ("max.message.bytes", SET, "1000")).result(10) is None
    err = send()
    assert err is not None and err.code() == 10         # MESSAGE_TOO_LARGE (librdkafka's MSG_SIZE_TOO_LARGE)
    assert incremental(a, ResourceType.TOPIC, "big", ("max.message.bytes", DELETE, None)).result(10) is None
    assert send() is None


# ---- the running logs, in-process ---------------------------------------------------------------

def _produce(node: Node, topic: str, count: int, size: int) -> int:
    codes = [node.manager.handle_produce(ProduceRequest(topic, 0, build_batch([(None, b"v" * size)]), acks=1)).error_code
             for _ in range(count)]
    return max(codes)


def test_retention_and_segment_bytes_lowered_act_on_the_open_partition(tmp_path):
    node = Node(tmp_path / "n", node_id=1, offsets_partitions=1, log_config=LogConfig(fsync=False), background=False)
    try:
        assert asyncio.run(node.create_topic("t", 1, 1)) == (Errors.NONE, None)
        plog = node.logdir.partition("t", 0)
        assert _produce(node, "t", 6, 400) == Errors.NONE and len(plog.segments) == 1
        results = asyncio.run(node.alter_configs([(2, "t", [("segment.bytes", SET.value, "1000")])],
                                                 incremental=True, validate_only=False))
        assert results == [(Errors.NONE, None)] and plog.config.segment_bytes == 1000
        assert _produce(node, "t", 6, 400) == Errors.NONE
        assert len(plog.segments) >= 3, "the lowered segment.bytes did not roll the running log"
        assert node.logdir.cleanup_logs() == 0                # a week's retention: nothing goes
        asyncio.run(node.alter_configs([(2, "t", [("retention.ms", SET.value, "1")])], incremental=True,
                                       validate_only=False))
        time.sleep(0.01)
        assert node.logdir.cleanup_logs() > 0 and plog.log_start_offset > 0
        # A dynamic broker default (the cluster's "") reaches a topic that does not set its own.
        asyncio.run(node.create_topic("u", 1, 1))
        asyncio.run(node.alter_configs([(4, "", [("message.max.bytes", SET.value, "300")])], incremental=True,
                                       validate_only=False))
        assert node.logdir.partition("u", 0).config.max_message_bytes == 300
        assert _produce(node, "u", 1, 1000) == Errors.MESSAGE_TOO_LARGE
        assert node.logdir.partition("t", 0).config.max_message_bytes == 300
    finally:
        asyncio.run(node.shutdown())
    # After a restart the topic's and the broker's altered configs are in force again.
    node = Node(tmp_path / "n", node_id=1, offsets_partitions=1, log_config=LogConfig(fsync=False), background=False)
    try:
        assert node.logdir.partition("t", 0).config.segment_bytes == 1000
        assert node.logdir.partition("u", 0).config.max_message_bytes == 300
        assert node.topic_configs("t") == {"segment.bytes": "1000", "retention.ms": "1"}
    finally:
        asyncio.run(node.shutdown())


# ---- broker resources -------------------------------------------------------------------------

def test_broker_configs_described_and_altered_confluent(broker):
    a = admin(broker)
    got = described(a, ResourceType.BROKER, "1")
    assert got["broker.id"].value == "1" and got["broker.id"].is_read_only
    assert got["log.dirs"].is_read_only and not got["log.retention.ms"].is_read_only
    assert got["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # ConfigCommandIntegrationTest.testExitWithNonZeroStatusOnUpdatingUnallowedConfig, in our words.
    assert refused(incremental(a, ResourceType.BROKER, "1", ("log.dirs", SET, "/tmp/x"))) == (
        Errors.INVALID_REQUEST, "Cannot update these configs dynamically: Set(log.dirs)")
    assert refused(incremental(a, ResourceType.BROKER, "1", ("no.such.broker.config", SET, "1")))[0] == \
        Errors.INVALID_CONFIG
    assert refused(incremental(a, ResourceType.BROKER, "1", ("log.retention.ms", SET, "-7"))) == (
        Errors.INVALID_CONFIG, "Invalid value -7 for configuration log.retention.ms: Value must be at least -1")
    assert incremental(a, ResourceType.BROKER, "1", ("log.retention.ms", SET, "5000")).result(10) is None
    got = described(a, ResourceType.BROKER, "1")
    assert (got["log.retention.ms"].value, got["log.retention.ms"].source) == \
        ("5000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    create(a, "t")
    topic = described(a, ResourceType.TOPIC, "t")["retention.ms"]
    assert (topic.value, topic.source) == ("5000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert incremental(a, ResourceType.BROKER, "1", ("log.retention.ms", DELETE, None)).result(10) is None
    assert described(a, ResourceType.TOPIC, "t")["retention.ms"].is_default


def test_cluster_default_and_other_broker_ids_raw_frames(broker):
    def alter(name, key="log.retention.bytes", value="1234", version=1):
        return ask(broker, 44, version, {"validate_only": False, "resources": [
            {"resource_type": 4, "resource_name": name,
             "configs": [{"name": key, "config_operation": 0, "value": value}]}]}).responses[0]
    assert alter("").error_code == Errors.NONE
    assert alter("abc").error_code == Errors.INVALID_REQUEST
    answer = ask(broker, 32, 4, {"resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None},
                                               {"resource_type": 4, "resource_name": "7", "configuration_keys": None},
                                               {"resource_type": 8, "resource_name": "1", "configuration_keys": None}],
                                 "include_synonyms": True, "include_documentation": True})
    default, other, logger = answer.results
    assert [(c.name, c.value, c.config_source) for c in default.configs] == [("log.retention.bytes", "1234", 3)]
    assert other.error_code == Errors.INVALID_REQUEST and logger.error_code == Errors.INVALID_REQUEST
    topic_row = ask(broker, 32, 4, {"resources": [{"resource_type": 4, "resource_name": "1",
                                                   "configuration_keys": ["log.retention.bytes", "broker.id"]}],
                                    "include_synonyms": True, "include_documentation": True}).results[0]
    rows = {c.name: c for c in topic_row.configs}
    assert set(rows) == {"log.retention.bytes", "broker.id"}
    assert rows["log.retention.bytes"].config_source == 3 and rows["log.retention.bytes"].config_type == 5  # LONG
    assert rows["log.retention.bytes"].documentation
    assert [(s.name, s.source) for s in rows["log.retention.bytes"].synonyms] == [
        ("log.retention.bytes", 3), ("log.retention.bytes", 5)]
    # Duplicate keys in one resource: INVALID_REQUEST (ConfigAdminManager).
    dup = ask(broker, 44, 1, {"validate_only": False, "resources": [{"resource_type": 4, "resource_name": "", "configs": [
        {"name": "log.retention.ms", "config_operation": 0, "value": "1"},
        {"name": "log.retention.ms", "config_operation": 1, "value": None}]}]}).responses[0]
    assert (dup.error_code, dup.error_message) == (Errors.INVALID_REQUEST, "Error due to duplicate config keys")
    # AlterConfigs v0 of the cluster default replaces its set: log.retention.bytes goes.
    legacy = ask(broker, 33, 0, {"validate_only": False, "resources": [{"resource_type": 4, "resource_name": "",
                                                                         "configs": []}]}).responses[0]
    assert legacy.error_code == Errors.NONE
    assert ask(broker, 32, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
                               "include_synonyms": False}).results[0].configs == ()


# ---- DescribeCluster and authorized operations ---------------------------------------------------

TOPIC_OPS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
             AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
CLUSTER_OPS = {AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
               AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}


def test_describe_cluster_and_authorized_operations_confluent(broker):
    # DescribeClusterRequestTest, in our words: the cluster id, the controller and the brokers;
    # the operations only when asked.
    a = admin(broker)
    create(a, "t")
    cluster = a.describe_cluster(include_authorized_operations=True).result(10)
    assert cluster.cluster_id and cluster.controller.id == 1
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, broker.host, broker.port)]
    assert set(cluster.authorized_operations) == CLUSTER_OPS
    assert a.describe_cluster().result(10).authorized_operations is None
    (topic,) = a.describe_topics(TopicCollection(["t"]), include_authorized_operations=True).values()
    assert set(topic.result(10).authorized_operations) == TOPIC_OPS
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "session.timeout.ms": 6000})
    try:
        consumer.subscribe(["t"])
        deadline = time.monotonic() + 20
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        (group,) = a.describe_consumer_groups(["g"], include_authorized_operations=True).values()
        assert set(group.result(10).authorized_operations) == {   # AclEntry.supportedOperations(GROUP)
            AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS}
    finally:
        consumer.close()


def test_describe_cluster_endpoint_types_and_fenced_brokers_raw_frames(broker):
    answer = ask(broker, 60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 1,
                                 "include_fenced_brokers": True})
    assert answer.error_code == Errors.NONE and answer.cluster_authorized_operations == -2147483648
    assert [(b.broker_id, b.is_fenced) for b in answer.brokers] == [(1, False)]
    assert ask(broker, 60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2}).error_code == 114
    assert ask(broker, 60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 9}).error_code == 115
    meta = ask(broker, 3, 10, {"topics": None, "allow_auto_topic_creation": False,
                               "include_cluster_authorized_operations": True,
                               "include_topic_authorized_operations": False})
    assert meta.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def test_an_altered_min_insync_replicas_refuses_acks_all(broker):
    # min.insync.replicas reaches the replica manager: 2 on a one-replica topic refuses acks=all.
    a = admin(broker)
    create(a, "isr")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0,
                         "enable.idempotence": False})
    outcomes = []

    def send():
        producer.produce("isr", b"v", on_delivery=lambda err, msg: outcomes.append(err))
        producer.flush(10)
        return outcomes.pop()
    assert send() is None
    assert incremental(a, ResourceType.TOPIC, "isr", ("min.insync.replicas", SET, "2")).result(10) is None
    err = send()
    assert err is not None and err.code() == Errors.NOT_ENOUGH_REPLICAS
    assert incremental(a, ResourceType.TOPIC, "isr", ("min.insync.replicas", DELETE, None)).result(10) is None
    assert send() is None
