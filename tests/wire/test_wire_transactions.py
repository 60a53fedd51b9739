"""The transaction coordinator over the wire (storage/wire/txn_coordinator.py, issue 32):
confluent-kafka's transactional producer (init_transactions, begin, produce,
send_offsets_to_transaction, commit, abort) against `storage serve`, a read_committed consumer
that sees the committed records only, fencing by a second producer of the same
transactional.id, and the coordinator's state in `__transaction_state` across a SIGKILL."""
from __future__ import annotations

import pytest

ck = pytest.importorskip("confluent_kafka")
pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

import time  # noqa: E402

from confluent_kafka import KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.wire_support import Broker  # noqa: E402

TXN_OPTIONS = ("--transaction-partitions", "3")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("txn") / "data", *TXN_OPTIONS).start()
    yield b
    b.stop()


def _create(bootstrap: str, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        future.result(30)


def _producer(bootstrap: str, txn_id: str, **extra):
    return ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0,
                        "transaction.timeout.ms": 60_000, **extra})


def _read_committed(bootstrap: str, topic: str, want: int, timeout_s: float = 20.0, group: str = "reader"):
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and len(got) < want:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        # a little longer: nothing more (an aborted record) may arrive
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            msg = consumer.poll(0.3)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_commit_and_abort_read_committed(broker):
    """A committed transaction's records are read, an aborted one's are not (fails without the
    coordinator: init_transactions times out)."""
    topic = "txn-basic"
    _create(broker.bootstrap, topic)
    p = _producer(broker.bootstrap, "txn-basic-producer")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"c1-%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"aborted-%d" % i, partition=i % 2)
    p.flush(10)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c2", partition=0)
    p.commit_transaction(30)
    got = _read_committed(broker.bootstrap, topic, 6)
    assert sorted(got) == sorted([b"c1-%d" % i for i in range(5)] + [b"c2"])


def test_send_offsets_to_transaction(broker):
    """Consume-transform-produce: the group's offsets commit with the transaction, and an
    aborted transaction's offsets are not committed."""
    src, dst, group = "txn-src", "txn-dst", "txn-eos-group"
    _create(broker.bootstrap, src, 1)
    _create(broker.bootstrap, dst, 1)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(4):
        plain.produce(src, b"in-%d" % i, partition=0)
    plain.flush(10)
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([src])
    msgs = []
    deadline = time.monotonic() + 20
    while len(msgs) < 4 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            msgs.append(msg)
    assert len(msgs) == 4
    p = _producer(broker.bootstrap, "txn-eos")
    p.init_transactions(30)
    p.begin_transaction()
    for msg in msgs[:2]:
        p.produce(dst, msg.value().upper(), partition=0)
    p.send_offsets_to_transaction([TopicPartition(src, 0, msgs[1].offset() + 1)],
                                  consumer.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    p.begin_transaction()
    for msg in msgs[2:]:
        p.produce(dst, msg.value().upper(), partition=0)
    p.send_offsets_to_transaction([TopicPartition(src, 0, msgs[3].offset() + 1)],
                                  consumer.consumer_group_metadata(), 30)
    p.abort_transaction(30)
    deadline = time.monotonic() + 10
    committed = None
    while time.monotonic() < deadline:
        committed = consumer.committed([TopicPartition(src, 0)], 10)[0].offset
        if committed == msgs[1].offset() + 1:
            break
        time.sleep(0.2)
    consumer.close()
    assert committed == msgs[1].offset() + 1
    assert _read_committed(broker.bootstrap, dst, 2, group="dst-reader") == [b"IN-0", b"IN-1"]


def test_second_producer_fences_the_first(broker):
    """A second producer with the same transactional.id fences the first: the first's commit
    fails fatally, its open transaction is aborted, the second's records are read."""
    topic = "txn-fence"
    _create(broker.bootstrap, topic, 1)
    first = _producer(broker.bootstrap, "txn-fenced")
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, b"from-first", partition=0)
    first.flush(10)
    second = _producer(broker.bootstrap, "txn-fenced")
    second.init_transactions(30)
    with pytest.raises(KafkaException) as failed:
        first.commit_transaction(10)
    assert failed.value.args[0].fatal() or "fenced" in str(failed.value).lower()
    second.begin_transaction()
    second.produce(topic, b"from-second", partition=0)
    second.commit_transaction(30)
    assert _read_committed(broker.bootstrap, topic, 1, group="fence-reader") == [b"from-second"]


def test_coordinator_sigkill_mid_transaction_then_commit(tmp_path):
    """The coordinator (the only broker) is killed with SIGKILL while a transaction is Ongoing
    and restarted: it loads the transaction from `__transaction_state`, the producer's commit
    then completes it (as Kafka's coordinator failover does), and a read_committed consumer
    reads the records of both transactions, each once."""
    b = Broker(tmp_path / "data", *TXN_OPTIONS).start()
    try:
        topic = "txn-crash"
        _create(b.bootstrap, topic, 1)
        p = _producer(b.bootstrap, "txn-crash", **{"message.timeout.ms": 60_000})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"before-1", partition=0)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"open-1", partition=0)
        p.flush(10)
        b.kill()
        b.start()
        p.produce(topic, b"open-2", partition=0)
        p.commit_transaction(60)
        assert _read_committed(b.bootstrap, topic, 3, group="crash-reader") == [b"before-1", b"open-1", b"open-2"]
    finally:
        b.stop()


def test_markers_reach_other_brokers_partitions(tmp_path):
    """A cluster of three brokers: a transaction over partitions led by every broker commits
    (the coordinator's WriteTxnMarkers reach the other brokers) and one aborts; a read_committed
    consumer reads the committed records only."""
    from tests.wire_support import Cluster
    cluster = Cluster(tmp_path, broker_args=TXN_OPTIONS)
    try:
        topic = "txn-cluster"
        cluster.create(topic, 3)
        cluster.wait_in_sync(topic)
        assert {p.leader for p in cluster.partitions(topic).values()} == {1, 2, 3}
        p = _producer(cluster.bootstrap, "txn-cluster")
        p.init_transactions(60)
        p.begin_transaction()
        for i in range(6):
            p.produce(topic, b"c-%d" % i, partition=i % 3)
        p.commit_transaction(60)
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, b"a-%d" % i, partition=i % 3)
        p.flush(30)
        p.abort_transaction(60)
        got = _read_committed(cluster.bootstrap, topic, 6, timeout_s=40, group="cluster-reader")
        assert sorted(got) == [b"c-%d" % i for i in range(6)]
        # offsets in a transaction, for a group another broker coordinates: the marker written
        # there makes them the group's (TxnAdminApis.on_written on that broker)
        broker = next(iter(cluster.brokers.values()))
        txn_coordinator = _coordinator(broker, 1, "txn-cluster")
        group = next(g for g in (f"eos-{i}" for i in range(100)) if _coordinator(broker, 0, g) != txn_coordinator)
        consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
        p.begin_transaction()
        p.produce(topic, b"with-offsets", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, 1, 7)], consumer.consumer_group_metadata(), 60)
        p.commit_transaction(60)
        deadline = time.monotonic() + 20
        while consumer.committed([TopicPartition(topic, 1)], 10)[0].offset != 7 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert consumer.committed([TopicPartition(topic, 1)], 10)[0].offset == 7
        consumer.close()
    finally:
        cluster.kill()


def _coordinator(broker, key_type: int, key: str) -> int:
    from storage.wire import codec
    from tests.wire_support import raw_exchange
    for _ in range(50):
        frame = codec.encode_request(10, 3, 1, "txn-test", {"key": key, "key_type": key_type})
        answer = codec.decode_response(10, 3, raw_exchange((broker.host, broker.port), frame))[1]
        if answer.error_code == 0:
            return answer.node_id
        time.sleep(0.2)
    raise AssertionError(f"no coordinator for {key!r} (key type {key_type})")


@pytest.mark.slow
def test_coordinator_broker_sigkill_in_a_cluster(tmp_path):
    """The broker coordinating a transactional id is SIGKILLed mid-transaction in a three-broker
    cluster: another replica of its `__transaction_state` partition becomes leader, loads the
    Ongoing transaction, and the producer's commit completes it there (as Kafka's coordinator
    failover); the killed broker restarts and a read_committed consumer reads every record once."""
    from tests.wire_support import Cluster
    cluster = Cluster(tmp_path, broker_args=TXN_OPTIONS)
    try:
        topic = "txn-failover"
        cluster.create(topic, 3)
        cluster.wait_in_sync(topic)
        p = _producer(cluster.bootstrap, "txn-failover", **{"message.timeout.ms": 90_000,
                                                              "transaction.timeout.ms": 90_000})
        p.init_transactions(60)
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, b"a-%d" % i, partition=i)
        p.flush(30)
        victim = cluster.brokers[_coordinator(next(iter(cluster.brokers.values())), 1, "txn-failover")]
        victim.kill()
        for i in range(3):
            p.produce(topic, b"b-%d" % i, partition=i)
        p.commit_transaction(90)
        victim.start()
        got = _read_committed(cluster.bootstrap, topic, 6, timeout_s=60, group="failover-reader")
        assert sorted(got) == sorted([b"a-%d" % i for i in range(3)] + [b"b-%d" % i for i in range(3)])
    finally:
        cluster.kill()
