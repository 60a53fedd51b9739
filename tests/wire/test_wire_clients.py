"""Unmodified Kafka clients against `python -m storage serve` processes on loopback:
kafka-python and confluent-kafka (librdkafka) create topics, produce keyed records
(idempotent, acks=all), consume in a group, commit, and resume at the committed offset after
the consumer restarts -- and after the broker is killed with SIGKILL or stopped with SIGTERM."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

from tests.wire_support import GUIDE, Broker, assert_readme_column  # noqa: E402

N = 200
@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data").start()
    yield b
    b.kill()


# ---- kafka-python ---------------------------------------------------------------------------------

def _kp_produce(bootstrap, topic, start, count):
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=2)
    futures = [producer.send(topic, key=b"key-%d" % (i % 7), value=b"value-%d" % i) for i in range(start, start + count)]
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    return metas


def _kp_consume(bootstrap, topic, group, want, *, commit=True):
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    got = []
    deadline = time.monotonic() + 40
    while len(got) < want and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            got.extend(batch)
    if commit:
        consumer.commit()
    consumer.close()
    return got


def test_kafka_python_produce_consume_commit_resume(broker):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("kp-orders", 3, 1)])
    admin.close()
    metas = _kp_produce(broker.bootstrap, "kp-orders", 0, N)
    assert sorted((m.partition, m.offset) for m in metas) == sorted(
        (p, o) for p in {m.partition for m in metas} for o in range(sum(1 for m in metas if m.partition == p)))
    first = _kp_consume(broker.bootstrap, "kp-orders", "kp-group", N)
    assert sorted(r.value for r in first) == sorted(b"value-%d" % i for i in range(N))
    # Same key, same partition; order within a partition is the produce order.
    by_key = {}
    for r in first:
        by_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(parts) == 1 for parts in by_key.values())
    _kp_produce(broker.bootstrap, "kp-orders", N, 20)
    resumed = _kp_consume(broker.bootstrap, "kp-orders", "kp-group", 20)
    assert sorted(r.value for r in resumed) == sorted(b"value-%d" % i for i in range(N, N + 20))
    broker.stop()
    assert_readme_column("kafka-python", broker.stderr())


def test_committed_offsets_and_records_survive_sigkill_and_sigterm(broker):
    from kafka import KafkaConsumer, TopicPartition
    _kp_produce(broker.bootstrap, "durable", 0, 50)
    assert len(_kp_consume(broker.bootstrap, "durable", "dg", 50)) == 50
    for stop in (broker.kill, broker.stop):
        stop()
        broker.start()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="dg", enable_auto_commit=False)
        tp = TopicPartition("durable", 0)
        assert consumer.committed(tp) == 50
        assert consumer.end_offsets([tp])[tp] == 50
        consumer.close()
    stderr = broker.stderr()
    assert "recovered here (KIP-966 unclean recovery)" in stderr                # after the SIGKILL
    assert stderr.count("(previous -1)") == 2                                   # first start, after SIGKILL
    assert "registered with broker epoch 3 (previous 2)" in stderr              # after SIGTERM: clean


def test_kafka_python_acks_zero_and_list_offsets_by_time(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=0)
    for i in range(10):
        producer.send("fire-and-forget", value=b"%d" % i, timestamp_ms=1_000_000 + i * 1000)
    producer.flush(10)
    producer.close()
    tp = TopicPartition("fire-and-forget", 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    deadline = time.monotonic() + 10
    while consumer.end_offsets([tp])[tp] < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert consumer.end_offsets([tp])[tp] == 10
    assert consumer.beginning_offsets([tp])[tp] == 0
    assert consumer.offsets_for_times({tp: 1_004_500})[tp].offset == 5
    consumer.close()


# ---- confluent-kafka (librdkafka) ------------------------------------------------------------------

def test_confluent_kafka_produce_consume_commit_resume(broker):
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [test] extra")
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("ck-orders", num_partitions=2, replication_factor=1)]).values():
        future.result(20)
    delivered, failed = [], []
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                            "linger.ms": 5})
    for i in range(N):
        producer.produce("ck-orders", key=b"key-%d" % (i % 5), value=b"value-%d" % i,
                         on_delivery=lambda err, msg: (failed if err else delivered).append(err or msg))
    assert producer.flush(30) == 0
    assert not failed and len(delivered) == N

    def consume(want):
        consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ck-group",
                                "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["ck-orders"])
        got, deadline = [], time.monotonic() + 40
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        consumer.commit(asynchronous=False)
        consumer.close()
        return got

    assert sorted(consume(N)) == sorted(b"value-%d" % i for i in range(N))
    for i in range(N, N + 10):
        producer.produce("ck-orders", key=b"k", value=b"value-%d" % i)
    assert producer.flush(30) == 0
    assert sorted(consume(10)) == sorted(b"value-%d" % i for i in range(N, N + 10))
    broker.stop()
    assert_readme_column("confluent-kafka", broker.stderr())


def test_offsets_topic_is_kafka_format_for_kafka_tools(broker, tmp_path):
    """The committed offsets are records Kafka's kafka-dump-log --offsets-decoder reads (the
    decoder's cases are ported from Kafka's DumpLogSegmentsTest)."""
    _kp_produce(broker.bootstrap, "dumped", 0, 5)
    _kp_consume(broker.bootstrap, "dumped", "dump-group", 5)
    broker.stop()
    logs = sorted((tmp_path / "data" / "logs").glob("__consumer_offsets-*/*.log"))
    out = subprocess.run([sys.executable, "-m", "storage", "dump-log", "--offsets-decoder", "--files",
                          *map(str, logs)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '"group":"dump-group","topic":"dumped","partition":0' in out.stdout
    assert '"offset":5' in out.stdout
    assert '"protocolType":"consumer"' in out.stdout
    verify = subprocess.run([sys.executable, "-m", "storage", "verify", str(tmp_path / "data" / "logs")],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_two_consumers_split_the_partitions_and_admin_sees_the_group(broker):
    ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [test] extra")
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("split", 4, 1, topic_configs={"retention.ms": "3600000"})])
    consumers = [ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "pair", "client.id": f"c{i}",
                              "auto.offset.reset": "earliest", "enable.auto.commit": False,
                              "partition.assignment.strategy": "range"}) for i in range(2)]
    for consumer in consumers:
        consumer.subscribe(["split"])
    got: dict[int, list] = {0: [], 1: []}
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and not all(len(c.assignment()) == 2 for c in consumers):
        for consumer in consumers:
            msg = consumer.poll(0.1)
            assert msg is None                              # nothing produced yet
    assignments = [sorted(p.partition for p in c.assignment()) for c in consumers]
    assert sorted(assignments[0] + assignments[1]) == [0, 1, 2, 3], assignments
    _kp_produce(broker.bootstrap, "split", 0, 80)
    while sum(map(len, got.values())) < 80 and time.monotonic() < deadline + 20:
        for i, consumer in enumerate(consumers):
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                got[i].append((msg.partition(), msg.value()))
    values = [value for records in got.values() for _, value in records]
    assert sorted(values) == sorted(b"value-%d" % i for i in range(80))          # each exactly once
    for i in (0, 1):
        assert {partition for partition, _ in got[i]} <= set(assignments[i])
    listed = str(admin.list_groups())
    assert "pair" in listed and "Stable" in listed, listed
    described = str(admin.describe_groups(["pair"]))
    assert "'c0'" in described and "'c1'" in described and "Stable" in described, described
    configs = str(admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "split")], config_filter="all"))
    assert "retention.ms" in configs and "3600000" in configs, configs
    for consumer in consumers:
        consumer.close()
    admin.delete_topics(["split"])
    assert "split" not in admin.list_topics()
    admin.close()


def test_the_readme_client_example_runs(tmp_path, capsys):
    """Against a broker started as the wire guide (docs/guide-broker.md) starts it: only --data-dir and --listen, so the
    group's initial rebalance delay is the default 3 s (the example's consumer timeout of 2 s
    printed [] against it; the test broker's delay of 0 hid that)."""
    import re
    serve = re.search(r"```sh\n(python -m storage serve [^\n]*)\n", GUIDE.read_text()).group(1)
    assert serve.split()[4:] == ["--data-dir", "/tmp/broker", "--listen", "127.0.0.1:9092"], serve
    broker = Broker(tmp_path / "data")
    broker.options = ()
    broker.start()
    try:
        code = re.search(r"```python\n((?:from|import)[^`]*?KafkaConsumer.*?)```", GUIDE.read_text(), re.S).group(1)
        exec(compile(code.replace("127.0.0.1:9092", broker.bootstrap), "guide-broker.md", "exec"), {})
    finally:
        broker.kill()
    assert capsys.readouterr().out.strip() == str(sorted(b"order %d" % i for i in range(10)))
