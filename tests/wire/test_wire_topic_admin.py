"""The topic admin APIs over the wire, in both modes: CreatePartitions (37), CreateTopics with a
manual replica assignment, ElectLeaders (43), DeleteRecords (21), DescribeLogDirs (35) --
through confluent-kafka's AdminClient (what librdkafka's tests 0044, 0069, 0081, 0112 and 0113
use), kafka-python's describe_log_dirs, and raw frames for the error paths; an embedded
`storage serve`, and a 3-broker `storage cluster` (controller process + brokers)."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [test] extra")
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors, LogDirOfflineError  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.dir.logdir import LogDir  # noqa: E402
from storage.wire import codec  # noqa: E402
from tests.wire_support import SESSION_MS, Broker, Cluster, raw_exchange  # noqa: E402


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


def test_grown_and_placed_topics_survive_a_restart(tmp_path):
    """The embedded controller commits the new partitions and the manual placement to its store
    before it publishes them: a restarted `storage serve` has them, and their data."""
    b = Broker(tmp_path / "data").start()
    try:
        a = admin(b.bootstrap)
        assert failure(a.create_topics([NewTopic("kept", 1, 1)])["kept"]) is None
        assert failure(a.create_partitions([NewPartitions("kept", 3)])["kept"]) is None
        assert failure(a.create_topics([NewTopic("put", 2, replica_assignment=[[1], [1]])])["put"]) is None
        assert produce(b.bootstrap, "kept", 2) == 0
        assert b.stop() == 0
        b.start()
        a = admin(b.bootstrap)
        assert sorted(a.list_topics("kept", timeout=10).topics["kept"].partitions) == [0, 1, 2]
        assert sorted(a.list_topics("put", timeout=10).topics["put"].partitions) == [0, 1]
        assert produce(b.bootstrap, "kept", 2) == 1
    finally:
        b.stop()


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
        rows = {r.topic: r.partition_result for r in answer.replica_election_results}
        assert rows["elected"] == () and all(parts == () for parts in rows.values())


def produce_many(bootstrap: str, topic: str, partition: int, n: int) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, b"r%d" % i, partition=partition)
        producer.flush(20)          # one batch each: a deletion can fall inside the log
    assert len(producer) == 0


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return consumer.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def test_delete_records_advances_the_log_start(broker):
    """DeleteRecordsRequestTest (testDeleteRecordsHappyCase, testErrorWhenDeletingRecordsWithInvalidOffset,
    testErrorWhenDeletingRecordsWithInvalidTopic) and librdkafka's 0081 delete_records: the low
    watermark is the offset asked, -1 the high watermark; beyond it OFFSET_OUT_OF_RANGE."""
    a = admin(broker.bootstrap)
    assert failure(a.create_topics([NewTopic("trimmed", 2, 1)])["trimmed"]) is None
    produce_many(broker.bootstrap, "trimmed", 0, 6)
    result = a.delete_records([ck.TopicPartition("trimmed", 0, 4)])
    assert next(iter(result.values())).result(20).low_watermark == 4
    assert watermarks(broker.bootstrap, "trimmed", 0) == (4, 6)
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "trim", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("trimmed", 0, ck.OFFSET_BEGINNING)])
    first = consumer.consume(1, 10)
    consumer.close()
    assert first and first[0].offset() == 4 and first[0].value() == b"r4"
    bad = failure(next(iter(a.delete_records([ck.TopicPartition("trimmed", 0, 7)]).values())))
    assert bad.code() == ck.KafkaError.OFFSET_OUT_OF_RANGE
    done = next(iter(a.delete_records([ck.TopicPartition("trimmed", 0, ck.OFFSET_END)]).values())).result(20)
    assert done.low_watermark == 6 and watermarks(broker.bootstrap, "trimmed", 0) == (6, 6)
    assert next(iter(a.delete_records([ck.TopicPartition("trimmed", 0, 2)]).values())).result(20).low_watermark == 6
    answer = ask(broker, 21, 2, {"topics": [
        {"name": "trimmed", "partitions": [{"partition_index": 1, "offset": -2}, {"partition_index": 7, "offset": 0}]},
        {"name": "nowhere", "partitions": [{"partition_index": 0, "offset": 0}]},
        {"name": "__consumer_offsets", "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout": 5000})
    got = {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in answer.topics for p in t.partitions}
    assert got == {("trimmed", 1): (Errors.OFFSET_OUT_OF_RANGE, -1), ("trimmed", 7): (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1),
                   ("nowhere", 0): (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1),
                   ("__consumer_offsets", 0): (Errors.INVALID_TOPIC_EXCEPTION, -1)}
    assert failure(a.create_topics([NewTopic("kept", 1, 1, config={"cleanup.policy": "compact"})])["kept"]) is None
    answer = ask(broker, 21, 0, {"topics": [{"name": "kept", "partitions": [{"partition_index": 0, "offset": -1}]}],
                                 "timeout": 5000})
    assert answer.topics[0].partitions[0].error_code == Errors.POLICY_VIOLATION


def test_describe_log_dirs(broker):
    """DescribeLogDirsRequestTest.testDescribeLogDirsRequest, for this broker's one log dir:
    each partition's size, offset lag 0, is_future false; a filter of partitions."""
    a = admin(broker.bootstrap)
    assert failure(a.create_topics([NewTopic("sized", 2, 1)])["sized"]) is None
    produce_many(broker.bootstrap, "sized", 1, 3)
    kafka_admin = pytest.importorskip("kafka").KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        answer = kafka_admin.describe_log_dirs()
    finally:
        kafka_admin.close()
    [dirs] = [r["log_dirs"] for r in answer if r["broker"] == 1]
    [only] = dirs
    assert only["error_code"] == 0 and only["log_dir"].endswith("/logs")
    sized = {p["partition_index"]: p for t in only["topics"] if t["name"] == "sized" for p in t["partitions"]}
    assert sized[0]["partition_size"] == 0 and sized[1]["partition_size"] > 0
    assert all(p["offset_lag"] == 0 and p["is_future_key"] is False for p in sized.values())
    for version in (1, 4):
        answer = ask(broker, 35, version, {"topics": [{"topic": "sized", "partitions": [1]}]})
        [result] = answer.results
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [("sized", [1])]
        assert version < 4 or result.total_bytes > 0


def test_list_offsets_every_spec_and_version(broker):
    """ListOffsetsRequestTest.testResponseIncludesLeaderEpoch and
    testResponseDefaultOffsetAndLeaderEpochForAllVersions, on one broker: 9 records, then one with
    the largest timestamp; earliest, earliest local (-4), latest, max timestamp (-3: the offset of
    the record with the largest timestamp, KIP-734), by time, latest tiered (-5: no offset, nothing
    is tiered), for every version served (v1-3 carry no leader epoch).  And confluent-kafka's
    list_offsets with OffsetSpec.earliest / latest / max_timestamp / for_timestamp."""
    a = admin(broker.bootstrap)
    assert failure(a.create_topics([NewTopic("listed", 1, 1)])["listed"]) is None
    now = int(time.time() * 1000)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce("listed", b"v%d" % i, partition=0, timestamp=now + (60_000 if i == 9 else i))
        producer.flush(20)
    want = {0: (0, 0), -2: (0, 0), -4: (0, 0), -1: (10, 0), -3: (9, 0), now + 5: (5, 0), now + 61_000: (-1, -1),
            -5: (-1, -1)}
    lo, hi = codec.SUPPORTED[2][1:]
    for version in range(lo, hi + 1):
        body = {"replica_id": -1, "isolation_level": 0, "timeout": 5000, "topics": [{"name": "listed", "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": t} for t in want]}]}
        answer = ask(broker, 2, version, body)
        got = {t: (p.error_code, p.offset, getattr(p, "leader_epoch", -1))
               for t, p in zip(want, answer.topics[0].partitions)}
        assert got == {t: (0, o, e if version >= 4 else -1) for t, (o, e) in want.items()}, version
    tp = ck.TopicPartition("listed", 0)
    specs = {"earliest": ck.admin.OffsetSpec.earliest(), "latest": ck.admin.OffsetSpec.latest(),
             "max": ck.admin.OffsetSpec.max_timestamp(), "time": ck.admin.OffsetSpec.for_timestamp(now + 3)}
    got = {name: a.list_offsets({tp: spec})[tp].result(20) for name, spec in specs.items()}
    assert {n: r.offset for n, r in got.items()} == {"earliest": 0, "latest": 10, "max": 9, "time": 3}
    assert got["max"].timestamp == now + 60_000 and got["time"].timestamp == now + 3
    answer = ask(broker, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "listed", "partitions": [{"partition_index": 0, "current_leader_epoch": 5, "timestamp": -1},
                                          {"partition_index": 3, "current_leader_epoch": -1, "timestamp": -1}]},
        {"name": "nowhere", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
    codes = [p.error_code for t in answer.topics for p in t.partitions]     # ListOffsetsRequestTest.testListOffsetsErrorCodes
    assert codes == [Errors.UNKNOWN_LEADER_EPOCH, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_OR_PARTITION]


def test_list_offsets_after_every_record_was_deleted(broker):
    """Latest on a log emptied by DeleteRecords: the log end with the leader's epoch (the epoch
    cache holds no entry below the log start; this frame was answered with a crash before)."""
    a = admin(broker.bootstrap)
    assert failure(a.create_topics([NewTopic("emptied", 1, 1)])["emptied"]) is None
    produce_many(broker.bootstrap, "emptied", 0, 2)
    next(iter(a.delete_records([ck.TopicPartition("emptied", 0, ck.OFFSET_END)]).values())).result(20)
    answer = ask(broker, 2, 10, {"replica_id": -1, "isolation_level": 1, "timeout": 5000, "topics": [
        {"name": "emptied", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": t}
                                           for t in (-1, -2, -3, -4)]}]})
    assert [(p.error_code, p.offset) for p in answer.topics[0].partitions] == [(0, 2), (0, 2), (0, -1), (0, 2)]
    assert answer.topics[0].partitions[0].leader_epoch == 0


def test_describe_log_dirs_of_an_offline_dir(tmp_path):
    """An offline log dir is described with KAFKA_STORAGE_ERROR and no partitions (Kafka's
    ReplicaManager.describeLogDirs for a dir in its offline set)."""
    import asyncio

    from storage.wire.node import Node
    from storage.wire.topic_admin import TopicAdminApis
    node = Node(tmp_path, offsets_partitions=1, log_config=LogConfig(fsync=False), background=False)
    loop = asyncio.new_event_loop()
    try:
        request = codec.parse_request(codec.encode_request(35, 4, 1, "t", {"topics": None})[4:])[1]
        apis = TopicAdminApis(node, None)
        loop.run_until_complete(node.create_topic("here", 1, 1))
        [online] = loop.run_until_complete(apis.describe_log_dirs(None, request))["results"]
        assert online["error_code"] == Errors.NONE and [t["name"] for t in online["topics"]] == ["here"]
        node.logdir.failure_channel.fail(OSError(5, "EIO"), "test")
        [offline] = loop.run_until_complete(apis.describe_log_dirs(None, request))["results"]
        assert (offline["error_code"], offline["topics"]) == (Errors.KAFKA_STORAGE_ERROR, [])
        assert offline["log_dir"] == online["log_dir"]
    finally:
        try:
            loop.run_until_complete(node.shutdown())
        except LogDirOfflineError:       # an offline dir closes with its failure
            node.link.controller.close()
        loop.close()


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

        # DeleteRecords on the leader; every follower takes the log start from its next fetch.
        produce_many(cluster.bootstrap, "wide", 2, 4)          # offsets 1-4 after the one above
        deleted = a.delete_records([ck.TopicPartition("wide", 2, 3)])
        assert next(iter(deleted.values())).result(20).low_watermark == 3
        assert watermarks(cluster.bootstrap, "wide", 2) == (3, 5)
        follower = next(n for n in cluster.brokers if n != _leaders(cluster, "wide")[2][0])
        body = {"topics": [{"name": "wide", "partitions": [{"partition_index": 2, "offset": 4}]}], "timeout": 5000}
        [elsewhere] = ask(cluster.brokers[follower], 21, 2, body).topics[0].partitions
        assert elsewhere.error_code == Errors.NOT_LEADER_OR_FOLLOWER
        # Answered once every live replica's log start reached the offset (DelayedDeleteRecords):
        # with a follower killed and not yet fenced, the request times out; once it is fenced
        # (session timeout), the live replicas are enough.
        leader, replicas, _ = _leaders(cluster, "wide")[3]
        victim = next(b for b in replicas if b != leader)
        cluster.brokers[victim].kill()
        body = {"topics": [{"name": "wide", "partitions": [{"partition_index": 3, "offset": -1}]}], "timeout": 300}
        [timed_out] = ask(cluster.brokers[leader], 21, 2, body).topics[0].partitions
        assert (timed_out.error_code, timed_out.low_watermark) == (Errors.REQUEST_TIMED_OUT, 0)
        time.sleep(SESSION_MS / 1000 + 1)
        body["topics"][0]["partitions"][0]["offset"] = 1
        [done] = ask(cluster.brokers[leader], 21, 2, dict(body, timeout=5000)).topics[0].partitions
        assert (done.error_code, done.low_watermark) == (Errors.NONE, 1)
        cluster.stop()
        starts = {}          # (the killed broker's log start was not checkpointed: Kafka's is periodic too)
        for n, b in ((n, b) for n, b in cluster.brokers.items() if n != victim):
            logdir = LogDir.open(b.data_dir + "/logs", LogConfig(), background=False)
            starts[n] = logdir.partition("wide", 2, create=False).log_start_offset
            logdir.close()
        assert starts == {n: 3 for n in cluster.brokers if n != victim}
    finally:
        cluster.kill()


def test_cluster_unclean_election_on_request(tmp_path):
    """ElectLeaders UNCLEAN through the controller process (unclean.leader.election off there):
    broker 2 is out of the ISR when the last ISR member (1) dies; the partition stays leaderless
    (a preferred election: PREFERRED_LEADER_NOT_AVAILABLE) until a client asks for an unclean
    election, which makes 2 the leader (ReplicationControlManagerTest.testElectUncleanLeaders_WithoutElr)."""
    cluster = Cluster(tmp_path, brokers=2, min_isr=1)
    try:
        cluster.create("lonely", 1, replication_factor=2)
        cluster.wait_in_sync("lonely")
        cluster.brokers[2].kill()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _leaders(cluster, "lonely")[0][2] != [1]:
            time.sleep(0.2)                   # fenced at the session timeout: out of the ISR
        assert _leaders(cluster, "lonely")[0][2] == [1]
        cluster.brokers[1].kill()
        time.sleep(SESSION_MS / 1000 + 1)    # 1 fenced too: the last ISR member, no leader
        cluster.brokers[2].start()
        a = admin(cluster.brokers[2].bootstrap)
        tp = ck.TopicPartition("lonely", 0)
        assert cluster.partitions("lonely")[0].leader == -1
        [err] = a.elect_leaders(ck.ElectionType.PREFERRED, [tp]).result(20).values()
        assert err.code() == ck.KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
        [err] = a.elect_leaders(ck.ElectionType.UNCLEAN, [tp]).result(20).values()
        assert err is None
        assert cluster.partitions("lonely")[0].leader == 2
        [err] = a.elect_leaders(ck.ElectionType.UNCLEAN, [tp]).result(20).values()
        assert err.code() == ck.KafkaError.ELECTION_NOT_NEEDED
        assert produce(cluster.brokers[2].bootstrap, "lonely", 0, acks="all") >= 0
    finally:
        cluster.kill()


def test_list_offsets_read_committed_stops_at_the_last_stable_offset(tmp_path):
    """Isolation read_committed: latest is the last stable offset, and a timestamp or max
    timestamp lookup that finds an offset at or past it finds nothing (Kafka's
    Partition.fetchOffsetForTimestamp: lastFetchableOffset); read_uncommitted sees past it.  An
    open transaction no coordinator ends (offsets 1-2) is written into the stopped broker's log,
    as tests/wire/test_wire_txn_admin.py does."""
    b = Broker(tmp_path / "data").start()
    t0 = int(time.time() * 1000)
    try:
        a = admin(b.bootstrap)            # kept alive until its future resolves
        assert failure(a.create_topics([NewTopic("pending", 1, 1)])["pending"]) is None
        producer = ck.Producer({"bootstrap.servers": b.bootstrap})
        producer.produce("pending", b"first", partition=0, timestamp=t0)
        producer.flush(20)
    finally:
        b.stop()
    with LogDir.open(b.data_dir + "/logs", LogConfig(fsync=False), background=False) as d:
        log = d.partition("pending", 0)
        epoch = log.latest_epoch
        log.append_as_leader(build_batch([b"t1", b"t2"], producer_id=77, producer_epoch=0, base_sequence=0,
                                         is_transactional=True, base_timestamp=t0 + 10), epoch)
        log.append_as_leader(build_batch([b"after"], base_timestamp=t0 + 20), epoch)
        log.flush()
    b.start()
    try:
        specs = (-2, -1, -3, t0 + 5, t0 + 20)

        def offsets(isolation):
            answer = ask(b, 2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": "pending", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": t}
                                                   for t in specs]}]})
            return [(p.error_code, p.offset) for p in answer.topics[0].partitions]
        assert offsets(0) == [(0, 0), (0, 4), (0, 3), (0, 1), (0, 3)]
        assert offsets(1) == [(0, 0), (0, 1), (0, -1), (0, -1), (0, -1)]
    finally:
        b.stop()
