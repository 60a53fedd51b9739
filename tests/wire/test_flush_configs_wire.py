"""The topic configs flush.messages and flush.ms over the wire: accepted by CreateTopics,
AlterConfigs and IncrementalAlterConfigs with Kafka's names, types and ranges (and their broker
synonyms log.flush.interval.messages and log.flush.interval.ms), described with Kafka's
defaults, and acting on the running logs (the engine's side: tests/dir/test_flush_configs.py).
Kafka's tests ported are named at each case."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.replication.messages import ProduceRequest  # noqa: E402
from storage.wire.node import Node  # noqa: E402
from tests.wire.test_admin_configs import described, incremental, refused  # noqa: E402
from tests.wire_support import Broker  # noqa: E402

LONG_MAX = str(2**63 - 1)
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data").start()
    yield b
    b.kill()


def test_alter_configs_then_describe_configs_kafka_python(broker):
    """librdkafka's 0081 (do_test_AlterConfigs: compression.type=gzip and flush.ms=12345678 on a
    topic) and Kafka's PlaintextAdminIntegrationTest (flush.ms=1000 altered, then described),
    through kafka-python (its alter_configs sends IncrementalAlterConfigs SETs: the topic's
    flush.messages stays): DescribeConfigs shows each as DYNAMIC_TOPIC_CONFIG of type LONG.  A
    STRING config beside them (compression.type) used to fail the whole request (UnknownError:
    the range check compared "gzip" with a number)."""
    kafka_admin = pytest.importorskip("kafka.admin")
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        client.create_topics([kafka_admin.NewTopic("kp", 1, 1, topic_configs={"flush.messages": "100000"})])
        described = client.describe_configs([kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, "kp")])
        entry = described["topic"]["kp"]["flush.messages"]
        assert (entry["value"], entry["config_source"], entry["config_type"]) == \
            ("100000", "DYNAMIC_TOPIC_CONFIG", "LONG")
        topic = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, "kp",
                                           configs={"compression.type": "gzip", "flush.ms": "12345678"})
        assert client.alter_configs([topic]) == {"topic": {"kp": "OK"}}
        described = client.describe_configs([kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, "kp")])
        entries = described["topic"]["kp"]
        assert (entries["flush.ms"]["value"], entries["flush.ms"]["config_source"], entries["flush.ms"]["config_type"]) \
            == ("12345678", "DYNAMIC_TOPIC_CONFIG", "LONG")
        assert (entries["flush.messages"]["value"], entries["flush.messages"]["config_source"]) == \
            ("100000", "DYNAMIC_TOPIC_CONFIG")
        assert entries["compression.type"]["value"] == "gzip"
    finally:
        client.close()


def test_values_outside_kafkas_ranges_are_refused_confluent(broker):
    """Kafka's LogConfig: flush.messages LONG atLeast(1), flush.ms LONG atLeast(0)
    (KafkaConfigTest's invalid values of log.flush.interval.messages: "not_a_number" and "0"),
    on the topic and on the broker synonyms alike, with Kafka's messages."""
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in a.create_topics([NewTopic("t", 1, 1)]).values():
        f.result(10)
    for rtype, name, config, value, problem in (
            (ResourceType.TOPIC, "t", "flush.messages", "0", "Value must be at least 1"),
            (ResourceType.TOPIC, "t", "flush.messages", "not_a_number", "Not a number of type LONG"),
            (ResourceType.TOPIC, "t", "flush.ms", "-1", "Value must be at least 0"),
            (ResourceType.TOPIC, "t", "flush.ms", "9223372036854775808", "Not a number of type LONG"),
            (ResourceType.BROKER, "1", "log.flush.interval.messages", "0", "Value must be at least 1"),
            (ResourceType.BROKER, "1", "log.flush.interval.ms", "not_a_number", "Not a number of type LONG")):
        assert refused(incremental(a, rtype, name, (config, SET, value))) == (
            Errors.INVALID_CONFIG, f"Invalid value {value} for configuration {config}: {problem}"), (config, value)
    # And the edges that are in range.
    assert incremental(a, ResourceType.TOPIC, "t", ("flush.messages", SET, "1"), ("flush.ms", SET, "0")).result(10) \
        is None
    got = described(a, ResourceType.TOPIC, "t")
    assert (got["flush.messages"].value, got["flush.ms"].value) == ("1", "0")
    assert incremental(a, ResourceType.TOPIC, "t", ("flush.ms", DELETE, None)).result(10) is None
    got = described(a, ResourceType.TOPIC, "t")
    assert (got["flush.ms"].value, got["flush.ms"].source) == (LONG_MAX, ConfigSource.DEFAULT_CONFIG.value)


def _produce(node: Node, topic: str, count: int) -> None:
    for _ in range(count):
        answer = node.manager.handle_produce(ProduceRequest(topic, 0, build_batch([(None, b"v")]), acks=1))
        assert answer.error_code == Errors.NONE


def test_the_configs_reach_the_running_log_and_it_flushes_by_them(tmp_path):
    """Kafka's DynamicConfigChangeTest.testConfigChange: a topic created with flush.messages
    100000 has it on its log; one IncrementalAlterConfigs sets the topic's flush.messages to
    200000 and the cluster default log.flush.interval.ms to 200000, and the running log has
    both.  Then, in our words: a lowered flush.messages makes the next produce flush the log
    (its recovery point moves), and flush.ms makes the dir's flush check flush it."""
    node = Node(tmp_path / "n", node_id=1, offsets_partitions=1, log_config=LogConfig(fsync=False), background=False)
    try:
        assert asyncio.run(node.create_topic("test", 1, 1, {"flush.messages": "100000"}, validate_only=False,
                                             internal=False)) == (Errors.NONE, None)
        plog = node.logdir.partition("test", 0)
        assert plog.config.flush_messages == 100000
        results = asyncio.run(node.alter_configs([(2, "test", [("flush.messages", SET.value, "200000")]),
                                                  (4, "", [("log.flush.interval.ms", SET.value, "200000")])],
                                                 incremental=True, validate_only=False))
        assert results == [(Errors.NONE, None)] * 2
        assert (plog.config.flush_messages, plog.config.flush_ms) == (200000, 200000)
        _produce(node, "test", 4)
        assert (plog.log_end_offset, plog.recovery_point) == (4, 0)
        asyncio.run(node.alter_configs([(2, "test", [("flush.messages", SET.value, "5")])], incremental=True,
                                       validate_only=False))
        _produce(node, "test", 1)
        assert plog.recovery_point == 5
        _produce(node, "test", 2)
        assert plog.recovery_point == 5
        asyncio.run(node.alter_configs([(2, "test", [("flush.ms", SET.value, "0")])], incremental=True,
                                       validate_only=False))
        assert node.logdir.flush_dirty_logs() == 1 and plog.recovery_point == 7
    finally:
        asyncio.run(node.shutdown())
