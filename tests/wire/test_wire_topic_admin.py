"""The topic admin APIs over the wire, in both modes: CreatePartitions (37), CreateTopics with a
manual replica assignment, ElectLeaders (43) -- through confluent-kafka's AdminClient (what
librdkafka's tests 0044, 0069, 0081, 0112 and 0113 use) and raw frames for the error paths; an
embedded `storage serve`, and a 3-broker `storage cluster` (controller process + brokers)."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [test] extra")
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

from storage.core.errors import Errors  # noqa: E402
from storage.wire import codec  # noqa: E402
from tests.wire_support import Broker, Cluster, raw_exchange  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("topic-admin") / "data").start()
    yield b
    b.stop()


def ask(broker, key, version, body, correlation_id=7):
    answer = raw_exchange((broker.host, broker.port), codec.encode_request(key, version, correlation_id, "t", body))
    assert answer is not None, broker.stderr()[-2000:]
    got, response = codec.decode_response(key, version, answer)
    assert got == correlation_id
    return response


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def failure(future) -> ck.KafkaError | None:
    try:
        future.result(20)
    except ck.KafkaException as exc:
        return exc.args[0]
    return None


def produce(bootstrap: str, topic: str, partition: int, acks: str = "1") -> int:
    delivered = []
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "message.timeout.ms": 20_000})
    producer.produce(topic, b"v", partition=partition,
                     on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    producer.flush(30)
    assert delivered and delivered[0][0] is None, delivered
    return delivered[0][1]


# ---- embedded ----------------------------------------------------------------------------------
def test_create_partitions_grows_a_topic_clients_can_produce_to(broker):
    a = admin(broker.bootstrap)
    assert failure(a.create_topics([NewTopic("grown", 2, 1)])["grown"]) is None
    produce(broker.bootstrap, "grown", 1)
    assert failure(a.create_partitions([NewPartitions("grown", 5)], validate_only=True)["grown"]) is None
    assert len(a.list_topics("grown", timeout=10).topics["grown"].partitions) == 2
    assert failure(a.create_partitions([NewPartitions("grown", 5)])["grown"]) is None
    parts = a.list_topics("grown", timeout=10).topics["grown"].partitions
    assert sorted(parts) == [0, 1, 2, 3, 4]
    assert all(p.leader == 1 and p.replicas == [1] and p.isrs == [1] for p in parts.values())
    assert produce(broker.bootstrap, "grown", 4) == 0
    assert produce(broker.bootstrap, "grown", 1) == 1       # the existing partition kept its records


def test_create_partitions_refusals(broker):
    """Kafka's answers (ReplicationControlManagerTest.testCreatePartitions, ControllerApisTest
    .testCreatePartitionsRequest): shrink or same count -> INVALID_PARTITIONS, unknown topic,
    bad manual assignments -> INVALID_REPLICA_ASSIGNMENT, a topic named twice -> INVALID_REQUEST."""
    a = admin(broker.bootstrap)
    assert failure(a.create_topics([NewTopic("fixed", 3, 1)])["fixed"]) is None
    got = {n: failure(f) for n, f in a.create_partitions([NewPartitions("fixed", 2)]).items()}
    assert got["fixed"].code() == ck.KafkaError.INVALID_PARTITIONS
    assert "currently has 3 partition(s); 2 would not be an increase" in got["fixed"].str()
    assert failure(a.create_partitions([NewPartitions("fixed", 3)])["fixed"]).code() == \
        ck.KafkaError.INVALID_PARTITIONS
    assert failure(a.create_partitions([NewPartitions("nowhere", 3)])["nowhere"]).code() == \
        ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    bad = failure(a.create_partitions([NewPartitions("fixed", 4, replica_assignment=[[7]])])["fixed"])
    assert bad.code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT and "broker 7" in bad.str()
    answer = ask(broker, 37, 3, {"topics": [{"name": "fixed", "count": 5, "assignments": None},
                                            {"name": "fixed", "count": 6, "assignments": None},
                                            {"name": "fixed", "count": 5, "assignments": [{"broker_ids": [1]}]}],
                                 "timeout": 5000, "validate_only": False})
    assert [(r.name, r.error_code, r.error_message) for r in answer.results] == \
        [("fixed", Errors.INVALID_REQUEST, "Duplicate topic name.")]
    answer = ask(broker, 37, 0, {"topics": [{"name": "fixed", "count": 5, "assignments": [{"broker_ids": [1]}]}],
                                 "timeout": 5000, "validate_only": False})
    assert answer.results[0].error_code == Errors.INVALID_REPLICA_ASSIGNMENT
    assert len(a.list_topics("fixed", timeout=10).topics["fixed"].partitions) == 3


def test_create_topics_with_manual_assignment(broker):
    a = admin(broker.bootstrap)
    assert failure(a.create_topics([NewTopic("placed", 3, replica_assignment=[[1], [1], [1]])])["placed"]) is None
    parts = a.list_topics("placed", timeout=10).topics["placed"].partitions
    assert {p.id: p.replicas for p in parts.values()} == {0: [1], 1: [1], 2: [1]}
    assert produce(broker.bootstrap, "placed", 2) == 0
    bad = failure(a.create_topics([NewTopic("misplaced", 2, replica_assignment=[[1], [2]])])["misplaced"])
    assert bad.code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT and "broker 2" in bad.str()
    assert "misplaced" not in a.list_topics(timeout=10).topics
    body = {"topics": [{"name": "raw", "num_partitions": 2, "replication_factor": -1, "configs": [],
                        "assignments": [{"partition_index": 0, "broker_ids": [1]}]},
                       {"name": "raw2", "num_partitions": -1, "replication_factor": -1, "configs": [],
                        "assignments": [{"partition_index": 1, "broker_ids": [1]}]},
                       {"name": "raw3", "num_partitions": -1, "replication_factor": -1, "configs": [],
                        "assignments": [{"partition_index": 0, "broker_ids": [1, 1]}]}],
            "timeout": 5000, "validate_only": False}
    assert [(t.name, t.error_code) for t in ask(broker, 19, 7, body).topics] == [
        ("raw", Errors.INVALID_REQUEST), ("raw2", Errors.INVALID_REPLICA_ASSIGNMENT),
        ("raw3", Errors.INVALID_REPLICA_ASSIGNMENT)]


def test_elect_leaders_on_one_broker(broker):
    a = admin(broker.bootstrap)
    assert failure(a.create_topics([NewTopic("elected", 2, 1)])["elected"]) is None
    result = a.elect_leaders(ck.ElectionType.PREFERRED, [ck.TopicPartition("elected", 0),
                                                          ck.TopicPartition("elected", 9)]).result(20)
    codes = {(tp.topic, tp.partition): err.code() for tp, err in result.items()}
    assert codes == {("elected", 0): ck.KafkaError.ELECTION_NOT_NEEDED,
                     ("elected", 9): ck.KafkaError.UNKNOWN_TOPIC_OR_PART}
    result = a.elect_leaders(ck.ElectionType.UNCLEAN, [ck.TopicPartition("elected", 1)]).result(20)
    assert [err.code() for err in result.values()] == [ck.KafkaError.ELECTION_NOT_NEEDED]
    # null partitions: every partition, and those that need no election are left out (v0: preferred)
    for version in (0, 2):
        answer = ask(broker, 43, version, {"election_type": 0, "topic_partitions": None, "timeout": 5000})
        assert answer.replica_election_results == ()


# ---- a 3-broker cluster ------------------------------------------------------------------------
def _leaders(cluster, topic):
    return {p.id: (p.leader, p.replicas, sorted(p.isrs)) for p in cluster.partitions(topic).values()}


def test_cluster_create_partitions_and_elect_leaders(tmp_path):
    cluster = Cluster(tmp_path, min_isr=2)
    try:
        a = cluster.admin()
        cluster.create("wide", 2)
        before = _leaders(cluster, "wide")
        assert failure(a.create_partitions([NewPartitions("wide", 4)])["wide"]) is None
        assert failure(a.create_partitions([NewPartitions("wide", 5, replica_assignment=[[3, 1, 2]])])["wide"]) is None
        bad = failure(a.create_partitions([NewPartitions("wide", 6, replica_assignment=[[3, 1]])])["wide"])
        assert bad.code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT
        for b in cluster.brokers.values():          # every broker replayed the new partitions
            parts = admin(b.bootstrap).list_topics("wide", timeout=10).topics["wide"].partitions
            assert sorted(parts) == [0, 1, 2, 3, 4]
        after = _leaders(cluster, "wide")
        assert {p: after[p] for p in before} == before
        assert after[4] == (3, [3, 1, 2], [1, 2, 3])
        assert all(len(r) == 3 and leader == r[0] for leader, r, _ in after.values())
        for p in (2, 3, 4):
            assert produce(cluster.bootstrap, "wide", p, acks="all") == 0
        cluster.wait_in_sync("wide")
        placed = a.create_topics([NewTopic("placed", 2, replica_assignment=[[2, 3, 1], [3, 1, 2]])])
        assert failure(placed["placed"]) is None
        assert {p: (leader, r) for p, (leader, r, _) in _leaders(cluster, "placed").items()} == \
            {0: (2, [2, 3, 1]), 1: (3, [3, 1, 2])}
        bad = failure(a.create_topics([NewTopic("misplaced", 1, replica_assignment=[[1, 4]])])["misplaced"])
        assert bad.code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT and "broker 4" in bad.str()

        # Leadership leaves broker 1 on its controlled shutdown and stays away after its restart;
        # a preferred election brings it back where 1 is the first replica.
        preferred_1 = [p for p, (_, r, _) in after.items() if r[0] == 1]
        assert preferred_1
        assert cluster.brokers[1].stop() == 0
        cluster.brokers[1].start()
        cluster.wait_in_sync("wide")
        moved = _leaders(cluster, "wide")
        assert all(moved[p][0] != 1 for p in preferred_1)
        wanted = [ck.TopicPartition("wide", p) for p in sorted(after)]
        result = a.elect_leaders(ck.ElectionType.PREFERRED, wanted).result(30)
        codes = {tp.partition: (err.code() if err is not None else None) for tp, err in result.items()}
        assert codes == {p: None if p in preferred_1 else ck.KafkaError.ELECTION_NOT_NEEDED for p in after}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_leaders(cluster, "wide")[p][0] != 1 for p in preferred_1):
            time.sleep(0.2)
        assert all(_leaders(cluster, "wide")[p][0] == 1 for p in preferred_1)
        assert produce(cluster.bootstrap, "wide", preferred_1[0], acks="all") >= 0      # the new leader serves
    finally:
        cluster.kill()
