"""A `storage cluster` of a controller process and three brokers: a topic config altered through
any broker is committed by the controller, replayed by every broker (DescribeConfigs asked of
each one answers it; the partition's leader refuses a produce above the lowered
max.message.bytes) and kept across a restart of every process; a dynamic broker config for one
broker id is that broker's alone.  Kafka's DynamicConfigChangeTest.testConfigChange, in our
words, across processes."""
from __future__ import annotations

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from tests.wire_support import Cluster  # noqa: E402


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.kill()


def _described(bootstrap: str, rtype, name: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(rtype, name)]).values()
    return future.result(20)


def _produce_error(bootstrap: str, size: int):
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 100_000, "retries": 0, "acks": "all"})
    outcomes = []
    producer.produce("cfg", b"x" * size, key=b"k", on_delivery=lambda err, msg: outcomes.append(err))
    producer.flush(30)
    assert outcomes, "the produce got no answer"
    return outcomes[0]


def _check_every_broker(cluster: Cluster) -> None:
    for n, b in cluster.brokers.items():
        topic = _described(b.bootstrap, ResourceType.TOPIC, "cfg")
        assert (topic["max.message.bytes"].value, topic["max.message.bytes"].source) == \
            ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value), f"broker {n}"
        assert topic["cleanup.policy"].value == "delete,compact", f"broker {n}"
        own = _described(b.bootstrap, ResourceType.BROKER, str(n))["log.retention.bytes"]
        expected = ("123456789", ConfigSource.DYNAMIC_BROKER_CONFIG.value) if n == 3 else \
            ("-1", ConfigSource.DEFAULT_CONFIG.value)
        assert (own.value, own.source) == expected, f"broker {n}"
    error = _produce_error(cluster.bootstrap, 5000)        # keyed: the topic compacts now
    assert error is not None and error.code() == 10        # MESSAGE_TOO_LARGE from the leader
    assert _produce_error(cluster.bootstrap, 100) is None


def test_an_altered_topic_config_reaches_every_broker_and_survives_a_restart(cluster):
    cluster.create("cfg", 1)
    cluster.wait_in_sync("cfg")
    admin = AdminClient({"bootstrap.servers": cluster.brokers[2].bootstrap})
    topic = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    broker3 = ConfigResource(ResourceType.BROKER, "3", incremental_configs=[
        ConfigEntry("log.retention.bytes", "123456789", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([topic, broker3]).values():
        assert future.result(20) is None
    # Refusals come back from the controller process with Kafka's codes.
    bad = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)])
    (future,) = admin.incremental_alter_configs([bad]).values()
    with pytest.raises(Exception, match="Config value append is not allowed for config key: retention.ms"):
        future.result(20)
    _check_every_broker(cluster)
    cluster.stop()
    cluster.controller.start()
    cluster.start_brokers()
    cluster.wait_in_sync("cfg")
    _check_every_broker(cluster)
