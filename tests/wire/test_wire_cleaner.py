"""The served broker runs the log cleaner (Kafka's log.cleaner.enable, on by default): a
compacted topic is compacted while the broker runs -- before, `storage serve` never cleaned
anything, so compacted topics (and __consumer_offsets) only grew."""
import time

import pytest

from tests.wire_support import Broker

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_module = pytest.importorskip("confluent_kafka.admin")

KEYS, ROUNDS = 5, 60


def _fill_and_read(broker: Broker, topic: str, deadline_s: float) -> tuple[int, dict]:
    admin = admin_module.AdminClient({"bootstrap.servers": broker.bootstrap})
    new = admin_module.NewTopic(topic, 1, 1, config={"cleanup.policy": "compact", "segment.bytes": "2048",
                                                     "min.cleanable.dirty.ratio": "0.01",
                                                     "file.delete.delay.ms": "0"})
    admin.create_topics([new])[topic].result(10)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(ROUNDS):
        for k in range(KEYS):
            producer.produce(topic, key=f"k{k}".encode(), value=f"{i}:{'x' * 60}".encode())
        producer.flush(10)
    deadline = time.monotonic() + deadline_s
    while True:
        count, latest = _read_all(broker, topic)
        if count < KEYS * ROUNDS or time.monotonic() > deadline:
            return count, latest
        time.sleep(0.5)


def _read_all(broker: Broker, topic: str) -> tuple[int, dict]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g{time.monotonic()}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    count, latest, idle = 0, {}, time.monotonic() + 5
    try:
        while time.monotonic() < idle:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            count += 1
            latest[message.key()] = message.value()
            idle = time.monotonic() + 2
    finally:
        consumer.close()
    return count, latest


def test_the_served_broker_compacts_a_compacted_topic(tmp_path):
    broker = Broker(tmp_path / "b", "--log-cleaner-backoff-ms", "200").start()
    try:
        count, latest = _fill_and_read(broker, "changelog", deadline_s=30)
    finally:
        broker.stop()
    assert count < KEYS * ROUNDS                      # older values of each key went
    assert latest == {f"k{k}".encode(): f"{ROUNDS - 1}:{'x' * 60}".encode() for k in range(KEYS)}


def test_no_log_cleaner_keeps_every_record(tmp_path):
    broker = Broker(tmp_path / "b", "--log-cleaner-backoff-ms", "200", "--no-log-cleaner").start()
    try:
        count, latest = _fill_and_read(broker, "changelog", deadline_s=3)
    finally:
        broker.stop()
    assert count == KEYS * ROUNDS and len(latest) == KEYS
