"""Consumer groups through real clients against `python -m storage serve` on loopback:
confluent-kafka (librdkafka) consumers with static membership (KIP-345: a restarted member with
its group.instance.id must not rebalance the others -- librdkafka's test 0102) and with the
cooperative-sticky assignor (KIP-429: incremental rebalances), mixed assignors, and the group
admin APIs of confluent-kafka's AdminClient and kafka-python's KafkaAdminClient, across a
broker restart.  The coordinator's cases one by one are tests/wire/test_wire_groups_static.py."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")
ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [test] extra")

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.wire_support import Broker, Cluster  # noqa: E402


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data").start()
    yield b
    b.kill()


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


class Member:
    """A confluent-kafka consumer that records its rebalance callbacks."""

    def __init__(self, bootstrap, group, topic, name, *, strategy="range", instance=None):
        config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                  "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy}
        if instance is not None:
            config["group.instance.id"] = instance
        self.events: list[tuple[str, list[int]]] = []
        self.errors: list = []
        self.consumer = ck.Consumer(config)
        self.consumer.subscribe([topic], on_assign=self._record("assign"), on_revoke=self._record("revoke"))

    def _record(self, what):
        def callback(consumer, partitions):
            self.events.append((what, sorted(p.partition for p in partitions)))
        return callback

    def poll(self):
        msg = self.consumer.poll(0.05)
        if msg is not None and msg.error():
            self.errors.append(msg.error())

    def owned(self) -> list[int]:
        return sorted(p.partition for p in self.consumer.assignment())

    def close(self):
        self.consumer.close()


def _poll_until(members, done, timeout=40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if done():
            return
    raise AssertionError(f"timed out: {[(m.owned(), m.events, m.errors) for m in members]}")


def _poll_for(members, seconds) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in members:
            m.poll()


def test_a_restarted_static_member_does_not_rebalance_the_other_also_after_a_broker_restart(broker):
    # librdkafka's 0102 (static_group_rebalance): with group.instance.id a closed consumer sends
    # no LeaveGroup, and its restart within the session timeout takes its place: the other
    # member's rebalance callbacks are not called, the restarted one gets its partitions back.
    _create(broker.bootstrap, "static", 4)
    a = Member(broker.bootstrap, "static-group", "static", "a", instance="instance-a")
    b = Member(broker.bootstrap, "static-group", "static", "b", instance="instance-b")
    members = [a, b]
    try:
        _poll_until(members, lambda: len(a.owned()) == 2 and len(b.owned()) == 2)
        a_owned, b_seen = a.owned(), list(b.events)
        a.close()
        members.remove(a)
        a = Member(broker.bootstrap, "static-group", "static", "a", instance="instance-a")
        members.append(a)
        _poll_until(members, lambda: a.owned() == a_owned)
        _poll_for(members, 2.0)
        assert b.events == b_seen and b.owned() != [] and a.events == [("assign", a_owned)]
        # The broker restarts (SIGTERM): the group is loaded with its static members, the
        # members' heartbeats go on, and a member restarting now still takes its place.
        broker.stop()
        broker.start()
        _poll_for(members, 3.0)
        a.close()
        members.remove(a)
        a = Member(broker.bootstrap, "static-group", "static", "a", instance="instance-a")
        members.append(a)
        _poll_until(members, lambda: a.owned() == a_owned)
        _poll_for(members, 2.0)
        assert b.events == b_seen, b.events
        assert "static member instance-a rejoined" in broker.stderr()
    finally:
        for m in members:
            m.close()


def test_cooperative_sticky_members_rebalance_incrementally(broker):
    # KIP-429 over the classic protocol: a member that joins takes partitions from the other
    # without that one giving up those it keeps (only the moved ones are revoked), and when it
    # leaves the other gets them added, nothing revoked.
    _create(broker.bootstrap, "coop", 4)
    a = Member(broker.bootstrap, "coop-group", "coop", "a", strategy="cooperative-sticky")
    b = None
    try:
        _poll_until([a], lambda: a.owned() == [0, 1, 2, 3])
        assert a.events == [("assign", [0, 1, 2, 3])]
        b = Member(broker.bootstrap, "coop-group", "coop", "b", strategy="cooperative-sticky")
        _poll_until([a, b], lambda: len(a.owned()) == 2 and len(b.owned()) == 2)
        revoked = [p for what, ps in a.events if what == "revoke" for p in ps]
        assert sorted(revoked) == b.owned(), a.events             # only what moved
        assert set(a.owned()) | set(b.owned()) == {0, 1, 2, 3}
        kept, a_seen = a.owned(), len(a.events)
        b.close()
        b = None
        _poll_until([a], lambda: a.owned() == [0, 1, 2, 3])
        assert all(what == "assign" for what, _ in a.events[a_seen:]), a.events
        assert sorted(p for _, ps in a.events[a_seen:] for p in ps) == sorted({0, 1, 2, 3} - set(kept))
    finally:
        a.close()
        if b is not None:
            b.close()


def test_consumers_joining_during_the_initial_delay_share_the_first_generation(tmp_path):
    # Kafka's InitialDelayedJoin (GroupCoordinatorTest.testDelayRebalanceUptoRebalanceTimeout)
    # through cooperative-sticky consumers, as librdkafka's 0113 l_unsubscribe starts them: a
    # new group waits the delay D, and D again while members keep joining.  b joins during the
    # first D, c after it but within the second: all three are in generation 1, one assign
    # callback each, nothing revoked (with the delay armed once, c's join rebalanced a and b).
    delay_s = 3.0
    broker = Broker(tmp_path / "data", "--group-initial-rebalance-delay-ms", str(int(delay_s * 1000))).start()
    members = []
    try:
        _create(broker.bootstrap, "delayed", 6)
        start = time.monotonic()
        for name, at in (("a", 0.0), ("b", 0.5), ("c", delay_s + 1.5)):
            _poll_for(members, at - (time.monotonic() - start))
            members.append(Member(broker.bootstrap, "delayed-group", "delayed", name, strategy="cooperative-sticky"))
        _poll_until(members, lambda: all(len(m.owned()) == 2 for m in members))
        _poll_for(members, 1.0)
        assert [len(m.events) for m in members] == [1, 1, 1], [m.events for m in members]
        assert all(m.events[0][0] == "assign" and len(m.events[0][1]) == 2 for m in members)
    finally:
        for m in members:
            m.close()
        broker.kill()


def test_mixed_assignors_pick_the_common_one_or_are_inconsistent(broker):
    # GroupCoordinatorTest.testJoinGroupInconsistentGroupProtocol / ClassicGroup.selectProtocol:
    # members offering range,roundrobin and roundrobin agree on roundrobin; a cooperative-sticky
    # member has nothing in common with them: INCONSISTENT_GROUP_PROTOCOL.
    _create(broker.bootstrap, "mixed", 2)
    a = Member(broker.bootstrap, "mixed-group", "mixed", "a", strategy="range,roundrobin")
    b = Member(broker.bootstrap, "mixed-group", "mixed", "b", strategy="roundrobin")
    c = None
    try:
        _poll_until([a, b], lambda: len(a.owned()) == 1 and len(b.owned()) == 1)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_consumer_groups(["mixed-group"])["mixed-group"].result(30)
        assert described.partition_assignor == "roundrobin"
        c = Member(broker.bootstrap, "mixed-group", "mixed", "c", strategy="cooperative-sticky")
        _poll_until([a, b, c], lambda: any(e.code() == ck.KafkaError.INCONSISTENT_GROUP_PROTOCOL for e in c.errors),
                    timeout=20)
        assert c.owned() == []
    finally:
        for m in (a, b, c):
            if m is not None:
                m.close()


def test_group_admin_apis_through_both_admin_clients_and_a_restart(broker):
    # The AdminClients' group calls: list with states and types (ListGroups v5), describe with
    # authorized operations, alter offsets (a simple OffsetCommit; an unknown partition is
    # UNKNOWN_TOPIC_OR_PARTITION), kafka-python's delete_group_offsets (OffsetDelete) and
    # delete_groups (DeleteGroups; a group with a member is NON_EMPTY_GROUP) -- and after a
    # restart the deleted offsets and group stay deleted.
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType, TopicPartition
    from confluent_kafka.admin import AclOperation
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import NonEmptyGroupError
    _create(broker.bootstrap, "adm", 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(group, offsets):
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
        return admin.alter_consumer_group_offsets([request])[group].result(30)

    def committed(group):
        request = ConsumerGroupTopicPartitions(group, [TopicPartition("adm", 0), TopicPartition("adm", 1)])
        answer = admin.list_consumer_group_offsets([request])[group].result(30)
        return {p.partition: p.offset for p in answer.topic_partitions if p.offset >= 0}

    alter("keep", {("adm", 0): 3, ("adm", 1): 4})
    alter("drop", {("adm", 0): 5})
    refused = alter("keep", {("gone", 0): 1}).topic_partitions
    assert [p.error.code() for p in refused] == [ck.KafkaError.UNKNOWN_TOPIC_OR_PART], refused
    busy = Member(broker.bootstrap, "busy", "adm", "busy")
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        _poll_until([busy], lambda: busy.owned() == [0, 1])
        listed = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY},
                                            types={ConsumerGroupType.CLASSIC}).result(30)
        assert {g.group_id for g in listed.valid} == {"keep", "drop"}
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(30)
        assert [g.group_id for g in stable.valid] == ["busy"]
        described = admin.describe_consumer_groups(["busy"], include_authorized_operations=True)["busy"].result(30)
        assert {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE} <= set(described.authorized_operations)
        deleted = kp.delete_group_offsets("keep", [KafkaTopicPartition("adm", 1), KafkaTopicPartition("gone", 0)])
        assert {(tp.topic, tp.partition): error.errno for tp, error in deleted.items()} == {
            ("adm", 1): 0, ("gone", 0): ck.KafkaError.UNKNOWN_TOPIC_OR_PART}
        subscribed = kp.delete_group_offsets("busy", [KafkaTopicPartition("adm", 0)])
        assert [error.errno for error in subscribed.values()] == [86]        # GROUP_SUBSCRIBED_TO_TOPIC
        assert kp.delete_groups(["busy"]) == {"busy": NonEmptyGroupError.__name__}
        for future in admin.delete_consumer_groups(["drop"]).values():
            future.result(30)
        assert committed("keep") == {0: 3} and committed("drop") == {}
    finally:
        busy.close()
        kp.close()
    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert committed("keep") == {0: 3}
    assert {g.group_id for g in admin.list_consumer_groups().result(30).valid} == {"keep", "busy"}


def test_static_members_and_group_deletion_in_a_cluster(tmp_path):
    # `storage cluster`'s brokers each coordinate the groups of the offsets partitions they lead:
    # a static member restarts without rebalancing the other, kafka-python's
    # remove_group_members takes both out by instance id (LeaveGroup v3+), and the emptied
    # group is deleted (NON_EMPTY_GROUP before).
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove
    cluster = Cluster(tmp_path)
    members = []
    try:
        cluster.create("ct", 2)
        a = Member(cluster.bootstrap, "cg", "ct", "a", instance="ia")
        b = Member(cluster.bootstrap, "cg", "ct", "b", instance="ib")
        members = [a, b]
        _poll_until(members, lambda: len(a.owned()) == 1 and len(b.owned()) == 1, timeout=60)
        a_owned, b_seen = a.owned(), list(b.events)
        a.close()
        members.remove(a)
        a = Member(cluster.bootstrap, "cg", "ct", "a", instance="ia")
        members.append(a)
        _poll_until(members, lambda: a.owned() == a_owned, timeout=60)
        _poll_for(members, 2.0)
        assert b.events == b_seen, b.events
        for m in members:
            m.close()
        members = []
        admin = cluster.admin()
        with pytest.raises(ck.KafkaException, match="NON_EMPTY_GROUP|not empty"):
            admin.delete_consumer_groups(["cg"])["cg"].result(30)
        kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            removed = kp.remove_group_members("cg", [MemberToRemove(group_instance_id="ia"),
                                                     MemberToRemove(group_instance_id="ib")])
            assert [error.errno for error in removed.values()] == [0, 0], removed
        finally:
            kp.close()
        admin.delete_consumer_groups(["cg"])["cg"].result(30)
        assert "cg" not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    finally:
        for m in members:
            m.close()
        cluster.kill()
