"""compression.type per topic and per broker (issue 32 item 2), through real clients: a topic
created with it (librdkafka's 0081 was refused), described with its source, and producer
batches of another codec recompressed by the broker as Kafka's LogValidator does -- the
records, keys, headers and timestamps as sent, the codec the topic's; "producer" keeps the
producer's.  Consumers of both clients read every codec back."""
from __future__ import annotations

import glob
import os
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

from storage.core.records import iter_batches  # noqa: E402
from tests.wire_support import Broker  # noqa: E402

SOURCES = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker for the module: each test makes its own topics (and group ids), so none sees
    another's state."""
    b = Broker(tmp_path_factory.mktemp("compression") / "data").start()
    yield b
    b.kill()


def _create(admin, topic, configs):
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=configs)], request_timeout=20)
    futures[topic].result(timeout=30)


def _produce(bootstrap, topic):
    """PER_CODEC records in each codec, each codec its own producer (its own batches)."""
    sent = []
    for codec in SOURCES:
        producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.codec": codec, "linger.ms": 5,
                                "enable.idempotence": True})
        for i in range(PER_CODEC):
            key, value = f"{codec}-{i}".encode(), (f"{codec} value {i} " * (1 + i % 9)).encode()
            stamp = 1_700_000_000_000 + len(sent)
            producer.produce(topic, key=key, value=value, headers=[("codec", codec.encode())], timestamp=stamp)
            sent.append((key, value, stamp))
        assert producer.flush(30) == 0
    return sent


def _consume(bootstrap, topic, want):
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 40
    while len(got) < want and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append((message.key(), message.value(), message.timestamp()[1]))
    consumer.close()
    return got


def _codecs_on_disk(broker, topic):
    paths = glob.glob(os.path.join(broker.data_dir, "**", f"{topic}-0", "*.log"), recursive=True)
    assert paths, f"no log of {topic} under {broker.data_dir}"
    return [b.compression for path in paths for b in iter_batches(open(path, "rb").read())]


@pytest.mark.parametrize("target", ["zstd", "lz4", "uncompressed", "producer"])
def test_a_topics_codec_is_what_the_broker_writes(broker, target):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"codec-{target}"
    _create(admin, topic, {"compression.type": target, "compression.zstd.level": "9"})
    sent = _produce(broker.bootstrap, topic)
    assert _consume(broker.bootstrap, topic, len(sent)) == sent
    on_disk = _codecs_on_disk(broker, topic)
    if target == "producer":
        assert set(on_disk) == set(SOURCES)
    else:
        assert set(on_disk) == {"none" if target == "uncompressed" else target}
    # kafka-python reads the recompressed batches too
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    assert [(m.key, m.value, m.timestamp) for m in consumer] == sent
    consumer.close()


def test_compression_configs_are_described_with_their_source(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _create(admin, "own", {"compression.type": "gzip", "compression.gzip.level": "9"})
    _create(admin, "plain", {})
    futures = admin.describe_configs([ConfigResource("topic", "own"), ConfigResource("topic", "plain")])
    own, plain = (f.result(timeout=30) for f in futures.values())
    assert (own["compression.type"].value, own["compression.type"].source) == ("gzip", 1)   # DYNAMIC_TOPIC_CONFIG
    assert (own["compression.gzip.level"].value, own["compression.gzip.level"].source) == ("9", 1)
    assert (plain["compression.type"].value, plain["compression.type"].source) == ("producer", 5)  # DEFAULT_CONFIG
    assert (plain["compression.zstd.level"].value, plain["compression.lz4.level"].value) == ("3", "9")
    # Kafka's names only: "none" is a producer's codec name, not a topic's
    futures = admin.create_topics([NewTopic("bad", 1, 1, config={"compression.type": "none"})], request_timeout=20)
    with pytest.raises(ck.KafkaException) as info:
        futures["bad"].result(timeout=30)
    assert info.value.args[0].code() == ck.KafkaError.INVALID_CONFIG


def test_the_brokers_compression_type_is_every_plain_topics(tmp_path):
    broker = Broker(tmp_path / "data", "--compression-type", "snappy").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        _create(admin, "inherits", {})
        _create(admin, "overrides", {"compression.type": "producer"})
        sent = _produce(broker.bootstrap, "inherits")
        assert _consume(broker.bootstrap, "inherits", len(sent)) == sent
        assert set(_codecs_on_disk(broker, "inherits")) == {"snappy"}
        _produce(broker.bootstrap, "overrides")
        assert set(_codecs_on_disk(broker, "overrides")) == set(SOURCES)
        (described,) = admin.describe_configs([ConfigResource("topic", "inherits")]).values()
        entry = described.result(timeout=30)["compression.type"]
        assert (entry.value, entry.source) == ("snappy", 4)     # STATIC_BROKER_CONFIG
    finally:
        broker.kill()


def test_a_clusters_topic_codec_is_replicated_as_the_leader_wrote_it(tmp_path):
    """`storage cluster` mode: the topic's compression.type goes through the controller's
    metadata record to every broker; the leader recompresses, the followers copy its batches."""
    from tests.wire_support import Cluster
    cluster = Cluster(tmp_path, brokers=2, min_isr=2)
    try:
        cluster.create("replicated-zstd", 1, replication_factor=2, config={"compression.type": "zstd"})
        cluster.wait_in_sync("replicated-zstd")
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "compression.codec": "lz4", "acks": "all"})
        for i in range(50):
            producer.produce("replicated-zstd", value=b"value %d " % i * 20)
        assert producer.flush(30) == 0
        assert [v for _, v in cluster.read_all("replicated-zstd")[0]] == [b"value %d " % i * 20 for i in range(50)]
        cluster.wait_in_sync("replicated-zstd")
        for broker in cluster.brokers.values():
            assert set(_codecs_on_disk(broker, "replicated-zstd")) == {"zstd"}, broker.data_dir
        cluster.stop()
        cluster.assert_replicas_identical("replicated-zstd")
    finally:
        cluster.kill()
