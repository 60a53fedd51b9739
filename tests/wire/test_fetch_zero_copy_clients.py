"""Unmodified clients read records the broker sends from its segment files with os.sendfile
(issue 33): confluent-kafka (incremental fetch sessions, KIP-227) and kafka-python read every
record of a topic whose batches are large enough to go by sendfile, a read_committed consumer
skips an aborted transaction's large batches, and the broker says at its stop how the
records went (by sendfile, not copied)."""
from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")
ck = pytest.importorskip("confluent_kafka")

from tests.wire_support import Broker, kafka_python_values  # noqa: E402

COUNT = 3000                 # 1 KiB values: ~3 MiB, batches of 16 KiB and more
VALUE = b"%06d" + b"v" * 1018
PRODUCER = {"linger.ms": 20, "batch.size": 64 * 1024, "compression.type": "none"}
SENT = re.compile(r"fetch records sent: ([\d.]+) (MiB|B) by sendfile in (\d+) calls, ([\d.]+) (MiB|B) copied")


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data").start()
    yield b
    b.kill()


def _produce(bootstrap: str, topic: str, start: int, count: int, **config) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, **PRODUCER, **config})
    for i in range(start, start + count):
        producer.produce(topic, VALUE % i)
        producer.poll(0)
    assert producer.flush(60) == 0


def _ck_consume(bootstrap: str, topic: str, want: int, **config) -> list[tuple[int, bytes]]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "zc", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "fetch.max.bytes": 1 << 20,
                            "max.partition.fetch.bytes": 256 * 1024, **config})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 60
    while len(got) < want and time.monotonic() < deadline:
        for m in consumer.consume(1000, 1.0):
            if not m.error():
                got.append((m.offset(), m.value()))
    consumer.close()
    return got


def _sent(broker: Broker) -> tuple[float, int, int]:
    """(bytes by sendfile, calls, bytes of slices copied) from the stopped broker's log."""
    found = SENT.findall(broker.stderr())
    assert found, broker.stderr()[-2000:]
    amount, unit, calls, copied, copied_unit = found[-1]
    return (float(amount) * (1 << 20 if unit == "MiB" else 1), int(calls),
            int(float(copied) * (1 << 20 if copied_unit == "MiB" else 1)))


def test_confluent_kafka_and_kafka_python_read_what_sendfile_sent(broker):
    _produce(broker.bootstrap, "big", 0, COUNT)
    got = _ck_consume(broker.bootstrap, "big", COUNT)
    assert [v for _, v in got] == [VALUE % i for i in range(COUNT)]
    assert [o for o, _ in got] == list(range(COUNT))

    assert kafka_python_values(broker.bootstrap, "big", COUNT, 256 * 1024) == [VALUE % i for i in range(COUNT)]

    broker.stop()
    by_sendfile, calls, copied = _sent(broker)
    # Both consumers' records (~2 x 3 MiB) went by sendfile, none copied.
    assert calls > 0 and by_sendfile >= 2 * COUNT * 1000 and copied == 0


def test_read_committed_skips_an_aborted_transaction_sent_by_sendfile(broker):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("txn", 1, 1)])["txn"].result(30)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "zc-txn", **PRODUCER})
    producer.init_transactions(30)
    failed = []
    for commit, start in ((False, 0), (True, 1000)):
        producer.begin_transaction()
        for i in range(start, start + 1000):
            producer.produce("txn", VALUE % i, on_delivery=lambda err, _m: err and failed.append(err))
            producer.poll(0)
        assert producer.flush(30) == 0          # written before the abort (it purges what is queued)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    assert failed == []
    committed = _ck_consume(broker.bootstrap, "txn", 1000, **{"isolation.level": "read_committed"})
    assert [v for _, v in committed] == [VALUE % i for i in range(1000, 2000)]
    everything = _ck_consume(broker.bootstrap, "txn", 2000, **{"isolation.level": "read_uncommitted"})
    assert len(everything) == 2000
    producer.purge()
    del producer
    broker.stop()
    by_sendfile, calls, _ = _sent(broker)
    assert calls > 0 and by_sendfile >= 3000 * 1000


def test_a_follower_catching_up_is_sent_the_leaders_records_by_sendfile(tmp_path):
    """Replication's Fetch is served by the same path: a follower back from a stop reads what
    it missed from the leader's segment files."""
    from tests.wire_support import Cluster
    cluster = Cluster(tmp_path)     # min ISR 2: at the stop the last broker leads nothing and stops at once
    try:
        cluster.create("rep", 1)
        leader = cluster.partitions("rep")[0].leader
        follower = next(n for n in cluster.brokers if n != leader)
        cluster.brokers[follower].stop()
        _produce(cluster.bootstrap, "rep", 0, COUNT, acks="1")
        cluster.brokers[follower].start()
        cluster.wait_in_sync("rep")
        cluster.stop()
        cluster.assert_replicas_identical("rep")
        by_sendfile, calls, copied = _sent(cluster.brokers[leader])
        assert calls > 0 and by_sendfile >= COUNT * 1000 and copied == 0
    finally:
        cluster.kill()
