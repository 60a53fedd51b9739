"""message.timestamp.type=LogAppendTime over the wire: a topic created so (or the broker's
log.message.timestamp.type), the Produce answer's log_append_time on the express and the general
path, what consumers see, ListOffsets by timestamp before and after a restart, and the config
altered on a running topic.  Kafka's LogAppendTimeTest.testProduceConsume is ported below
(core/src/test/scala/integration/kafka/api/LogAppendTimeTest.scala); the engine's side is
tests/log/test_log_append_time.py."""
from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.config import LogConfig  # noqa: E402
from storage.core.records import build_batch, iter_batches  # noqa: E402
from storage.wire import codec, produce_codec  # noqa: E402
from tests.wire.test_express import answers, frame  # noqa: E402
from tests.wire_support import Broker, loop_thread, on_loop  # noqa: E402

DAY_MS = 86_400_000


@contextlib.contextmanager
def in_process(root, express: bool, configs: dict[str, str]):
    """An in-process broker with topic "lat" (one partition, `configs`): (server, loop, port)."""
    from storage.wire.node import Node
    from storage.wire.server import BrokerServer

    produce_codec._RECENT.clear()       # each broker starts knowing no request shape
    loop = asyncio.new_event_loop()
    node = Node(root, offsets_partitions=1, background=False, log_config=LogConfig(fsync=False))
    server = BrokerServer(node, initial_rebalance_delay_ms=0)
    code, _ = loop.run_until_complete(node.create_topic("lat", 1, 1, configs, validate_only=False, internal=False))
    assert code == 0
    if not express:
        server.express = None
    with loop_thread(server, loop, closing=node.shutdown) as port:
        yield server, loop, port


@pytest.mark.parametrize("express", [True, False], ids=["express", "general"])
@pytest.mark.parametrize("version", sorted({5, 8, 9, codec.SUPPORTED[0][2]}))
def test_the_produce_answer_carries_the_log_append_time(tmp_path, express, version):
    """Kafka's PartitionResponse.logAppendTime: on a LogAppendTime topic each answer's
    log_append_time is the max timestamp its batch was stamped with (the broker's clock, not
    the producer's day-old one); on a CreateTime topic it is -1.  The same shape three times: the
    first goes the general way, the next two the express path (when it is on)."""
    for kind in ("LogAppendTime", "CreateTime"):
        with in_process(tmp_path / f"{kind}-{express}-{version}", express,
                        {"message.timestamp.type": kind}) as (server, loop, port):
            before = int(time.time() * 1000)
            records = build_batch([b"v"] * 2, base_timestamp=before - DAY_MS)
            frames = [frame(cid, version, 1, 0, records, topic="lat") for cid in (1, 2, 3)]
            got = answers(port, frames, pipelined=False)
            after = int(time.time() * 1000)
            log = server.node.manager.partitions[("lat", 0)].log
            stamps = on_loop(loop, lambda log=log: [b.max_timestamp for b in iter_batches(log.read(0, 1 << 20))])
            rows = [codec.decode_response(0, version, a[4:])[1].responses[0].partition_responses[0] for a in got]
            if express:
                assert server.express.taken == 2
        times = [round(r.log_append_time.timestamp() * 1000) if r.log_append_time is not None else -1
                 for r in rows]
        assert [r.base_offset for r in rows] == [0, 2, 4]
        if kind == "LogAppendTime":
            assert times == stamps and all(before <= t <= after for t in times), (times, stamps)
        else:
            assert times == [-1, -1, -1] and stamps == [before - DAY_MS] * 3


@pytest.fixture
def lat_broker(tmp_path):
    b = Broker(tmp_path / "data", "--log-message-timestamp-type", "LogAppendTime").start()
    yield b
    b.kill()


def test_produce_consume_kafka_python(lat_broker):
    """Kafka's LogAppendTimeTest.testProduceConsume: a broker whose log.message.timestamp.type is
    LogAppendTime (its __consumer_offsets too), ten records a day old produced to an auto-created
    topic: each acknowledgement's timestamp is the broker's (>= now, within a minute), and the
    group's consumer sees each record with its key and value, its timestamp that one (not the
    producer's) and the timestamp type LogAppendTime (1).  DescribeConfigs names the broker's
    setting (serve --log-message-timestamp-type) STATIC_BROKER_CONFIG."""
    kafka = pytest.importorskip("kafka")
    producer = kafka.KafkaProducer(bootstrap_servers=lat_broker.bootstrap, request_timeout_ms=10_000)
    now = int(time.time() * 1000)
    create_time = now - DAY_MS
    try:
        sent = [producer.send("topic", key=b"key%d" % i, value=b"value%d" % i, timestamp_ms=create_time)
                for i in range(1, 11)]
        metadatas = [f.get(timeout=10) for f in sent]
    finally:
        producer.close()
    for m in metadatas:
        assert now <= m.timestamp < now + 60_000
    consumer = kafka.KafkaConsumer("topic", bootstrap_servers=lat_broker.bootstrap, group_id="g",
                                   auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(batch)
        consumer.commit()           # an offset commit written to a LogAppendTime __consumer_offsets
        assert consumer.committed(kafka.TopicPartition("topic", 0)) == 10
    finally:
        consumer.close()
    assert [(r.key, r.value) for r in got] == [(b"key%d" % i, b"value%d" % i) for i in range(1, 11)]
    for record, m in zip(got, metadatas):
        assert record.timestamp != create_time and record.timestamp == m.timestamp
        assert record.timestamp_type == 1
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType
    admin = AdminClient({"bootstrap.servers": lat_broker.bootstrap})
    (described,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
    entry = described.result(10)["log.message.timestamp.type"]
    assert (entry.value, entry.source) == ("LogAppendTime", ConfigSource.STATIC_BROKER_CONFIG.value)


def test_a_topic_created_log_append_time_confluent_kafka(tmp_path):
    """librdkafka (0052-msg_timestamps' LogAppendTime topics): CreateTopics with
    message.timestamp.type=LogAppendTime, described as the topic's own; the delivery reports and
    the consumer see TIMESTAMP_LOG_APPEND_TIME and the broker's time; ListOffsets by timestamp
    finds each stamp's first record, the same after a clean restart and after a kill (recovery
    rebuilds the time index)."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

    broker = Broker(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("lat", 1, 1, config={"message.timestamp.type": "LogAppendTime"})])["lat"] \
            .result(10)
        entry = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "lat")])[
            ConfigResource(ResourceType.TOPIC, "lat")].result(10)["message.timestamp.type"]
        assert (entry.value, entry.source) == ("LogAppendTime", ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        reports = []
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        old = int(time.time() * 1000) - DAY_MS
        for i in range(4):
            producer.produce("lat", b"v%d" % i, timestamp=old, on_delivery=lambda e, m: reports.append((e, m)))
            producer.flush(10)      # one batch an append: four stamps
            time.sleep(0.005)
        assert [e for e, _ in reports] == [None] * 4
        stamps = [m.timestamp() for _, m in reports]
        assert {kind for kind, _ in stamps} == {ck.TIMESTAMP_LOG_APPEND_TIME}
        assert all(t > old + DAY_MS - 60_000 for _, t in stamps)
        consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "c", "auto.offset.reset": "earliest"})
        consumer.assign([ck.TopicPartition("lat", 0, 0)])
        seen = []
        deadline = time.monotonic() + 20
        while len(seen) < 4 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                seen.append((m.offset(), m.timestamp()))
        consumer.close()
        assert seen == [(i, stamps[i]) for i in range(4)]
        wanted = _first_offsets(stamps)
        assert _offsets_for_times(ck, broker, stamps) == wanted
        for restart in ("stop", "kill"):
            getattr(broker, restart)()
            broker.start()
            assert _offsets_for_times(ck, broker, stamps) == wanted, restart
    finally:
        broker.kill()


def _first_offsets(stamps: list[tuple[int, int]]) -> list[int]:
    """The offset ListOffsets answers for each stamp: the first record stamped at or after it."""
    times = [t for _, t in stamps]
    return [min(i for i, t in enumerate(times) if t >= want) for want in times]


def _offsets_for_times(ck, broker, stamps) -> list[int]:
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t"})
    try:
        return [consumer.offsets_for_times([ck.TopicPartition("lat", 0, t)], timeout=10)[0].offset
                for _, t in stamps]
    finally:
        consumer.close()


def test_altered_to_log_append_time_on_a_running_topic(tmp_path):
    """IncrementalAlterConfigs sets message.timestamp.type=LogAppendTime on a CreateTime topic:
    the next produce is stamped (the open log reconfigured), what was written stays CreateTime;
    the broker default log.message.timestamp.type is described as Kafka's (CreateTime)."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    broker = Broker(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("alt", 1, 1)])["alt"].result(10)
        described = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
        (brokers,) = described.values()
        assert brokers.result(10)["log.message.timestamp.type"].value == "CreateTime"
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        kinds = []

        def produce():
            producer.produce("alt", b"v", timestamp=1_600_000_000_000,
                             on_delivery=lambda e, m: kinds.append(m.timestamp()[0]))
            producer.flush(10)
        produce()
        resource = ConfigResource(ResourceType.TOPIC, "alt", incremental_configs=[
            ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(10)
        produce()
        assert kinds == [ck.TIMESTAMP_CREATE_TIME, ck.TIMESTAMP_LOG_APPEND_TIME]
    finally:
        broker.kill()
