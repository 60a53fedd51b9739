"""The controller's side of the topic admin APIs: CreatePartitions, CreateTopics with a manual
replica assignment, ElectLeaders -- Kafka's ReplicationControlManagerTest cases, in our words,
on a memory-only controller (the wire tests drive the same through clients)."""
from __future__ import annotations

import pytest

from storage.core.errors import Errors
from storage.replication import assignment
from storage.replication.controller import Controller
from storage.replication.messages import NO_LEADER, RECOVERING
from tests.replication.test_controller import heartbeat, register, start


@pytest.fixture
def controller():
    c = Controller(None)
    yield c
    c.close()


def parts(c: Controller, name: str) -> dict[int, tuple[list[int], list[int], int]]:
    return {p: (s.replicas, s.isr, s.leader) for (t, p), s in sorted(c.partitions.items()) if t == name}


def test_create_partitions_answers(controller):
    """ReplicationControlManagerTest.testCreatePartitions: grow one topic, refuse a shrink, an
    unchanged count and an unknown topic; then manual assignments: a good one, one of the wrong
    size, too few lists, an unregistered broker."""
    start(controller, 0, 1, 3)
    for name, n in (("foo", 3), ("bar", 4), ("quux", 2), ("foo2", 2)):
        assert controller.create_topic(name, n, 2) == Errors.NONE
    assert controller.create_partitions("foo", 5) == (Errors.NONE, None)
    assert controller.create_partitions("bar", 3) == (
        Errors.INVALID_PARTITIONS, "The topic bar currently has 4 partition(s); 3 would not be an increase.")
    assert controller.create_partitions("baz", 3) == (Errors.UNKNOWN_TOPIC_OR_PARTITION, None)
    assert controller.create_partitions("quux", 2) == (Errors.INVALID_PARTITIONS, "Topic already has 2 partition(s).")
    assert len(parts(controller, "foo")) == 5
    assert all(len(r) == 2 and isr == r and leader == r[0] for r, isr, leader in parts(controller, "foo").values())

    assert controller.create_partitions("foo", 6, [[1, 3]]) == (Errors.NONE, None)
    assert parts(controller, "foo")[5] == ([1, 3], [1, 3], 1)
    assert controller.create_partitions("bar", 5, [[1]]) == (
        Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes a partition with 1 replica(s), "
        "but this is not consistent with previous partitions, which have 2 replica(s).")
    assert controller.create_partitions("quux", 4, [[1, 0]]) == (
        Errors.INVALID_REPLICA_ASSIGNMENT, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were "
        "specified.")
    assert controller.create_partitions("foo2", 3, [[2, 0]]) == (
        Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes broker 2, but no such broker is "
        "registered.")
    assert [len(parts(controller, n)) for n in ("bar", "quux", "foo2")] == [4, 2, 2]


def test_create_partitions_leaves_existing_partitions_and_validate_only_changes_nothing(controller):
    start(controller, 1, 2, 3)
    controller.create_topic("t", 2, 3)
    before = {k: s.copy() for k, s in controller.partitions.items()}
    controller.take_outbox()
    assert controller.create_partitions("t", 4, validate_only=True) == (Errors.NONE, None)
    assert controller.partitions == before and controller.take_outbox() == []
    assert controller.create_partitions("t", 4) == (Errors.NONE, None)
    assert {k: s for k, s in controller.partitions.items() if k in before} == before
    assert sorted({(b, m.partition_states[0].partition) for b, m in controller.take_outbox()}) == \
        [(b, p) for b in (1, 2, 3) for p in (2, 3)]          # only the new ones are published


def test_create_partitions_fails_when_all_brokers_are_fenced_or_in_controlled_shutdown(controller):
    """ReplicationControlManagerTest.testCreatePartitionsFailsWhenAllBrokersAreFencedOrInControlledShutdown
    and testCreatePartitionsFailsWithManualAssignmentWithAllFenced."""
    start(controller, 1, 2)
    controller.create_topic("t", 1, 2)
    heartbeat(controller, 1, want_shut_down=True)
    controller.fence_broker(2)
    code, message = controller.create_partitions("t", 2)
    assert code == Errors.INVALID_REPLICATION_FACTOR and "only 0 broker(s)" in message
    assert controller.create_partitions("t", 2, [[1, 2]]) == (
        Errors.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual partition assignment for partition 1 "
        "are fenced or in controlled shutdown.")


def test_create_partitions_isr_is_the_active_replicas(controller):
    """ReplicationControlManagerTest.testCreatePartitionsISRInvariants: a fenced replica of a
    manual assignment is a replica but not in the ISR; the leader is an active one."""
    start(controller, 1, 2, 3)
    controller.create_topic("t", 1, 3)
    controller.fence_broker(1)
    assert controller.create_partitions("t", 2, [[1, 2, 3]]) == (Errors.NONE, None)
    assert parts(controller, "t")[1] == ([1, 2, 3], [2, 3], 2)


@pytest.mark.parametrize("replicas, factor, message", [
    ([], None, "The manual partition assignment includes an empty replica list."),
    ([1, 2, 3], None, "The manual partition assignment includes broker 3, but no such broker is registered."),
    ([1, 2, 2], None, "The manual partition assignment includes the broker 2 more than once."),
    ([1, 2], 3, "The manual partition assignment includes a partition with 2 replica(s), but this is not "
                "consistent with previous partitions, which have 3 replica(s)."),
    ([1], 1, None), ([1], None, None), ([2, 1], 2, None)])
def test_validate_manual_partition_assignments(replicas, factor, message):
    """ReplicationControlManagerTest.testValidateGoodManualPartitionAssignments and
    testValidateBadManualPartitionAssignments (brokers 1 and 2 registered)."""
    assert assignment.replicas_problem(replicas, {1, 2}, factor) == message


def test_create_topic_with_manual_assignment(controller):
    start(controller, 1, 2, 3)
    assert controller.create_assigned_topic("m", [(0, [3, 1]), (1, [2, 3])]) == (Errors.NONE, None)
    assert parts(controller, "m") == {0: ([3, 1], [3, 1], 3), 1: ([2, 3], [2, 3], 2)}
    assert controller.create_assigned_topic("m", [(0, [1])])[0] == Errors.TOPIC_ALREADY_EXISTS
    assert controller.create_assigned_topic("v", [(0, [1])], validate_only=True) == (Errors.NONE, None)
    assert "v" not in controller.topics


@pytest.mark.parametrize("given, partitions, factor, code, message", [
    ([(0, [1])], 1, -1, Errors.INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions was "
                                                "not set to -1."),
    ([(0, [1])], -1, 1, Errors.INVALID_REQUEST, "A manual partition assignment was specified, but replication "
                                                "factor was not set to -1."),
    ([(0, [1]), (0, [2])], -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT,
     "Found multiple manual partition assignments for partition 0"),
    ([(0, [1]), (2, [2])], -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT,
     "partitions should be a consecutive 0-based integer sequence"),
    ([(1, [1])], -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT,
     "partitions should be a consecutive 0-based integer sequence"),
    ([(0, [1, 1])], -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 1 more than once."),
    ([(0, [1, 9])], -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ([(0, [1, 2]), (1, [3])], -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
     "previous partitions, which have 2 replica(s)."),
    ([(0, [4])], -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT,
     "All brokers specified in the manual partition assignment for partition 0 are fenced or in controlled "
     "shutdown."),
])
def test_create_topic_manual_assignment_refused(controller, given, partitions, factor, code, message):
    """ReplicationControlManagerTest.testInvalidCreateTopicsWithValidateOnlyFlag-like and
    testManualPartitionAssignmentOnAllFencedBrokers: Kafka's checks of CreateTopics' assignments."""
    start(controller, 1, 2, 3)
    register(controller, 4)                     # registered, fenced
    assert controller.create_assigned_topic("m", given, num_partitions=partitions,
                                            replication_factor=factor) == (code, message)
    assert "m" not in controller.topics and not parts(controller, "m")


def test_elect_preferred_leaders(controller):
    """ReplicationControlManagerTest.testElectPreferredLeaders: not needed where the preferred
    replica leads; not available where it is out of the ISR or fenced; done where it is back."""
    start(controller, 1, 2, 3)
    controller.create_assigned_topic("t", [(0, [1, 2, 3]), (1, [2, 3, 1])])
    assert controller.elect_for_client("t", 0, 0)[0] == Errors.ELECTION_NOT_NEEDED
    controller.fence_broker(1)
    assert parts(controller, "t")[0][2] == 2
    assert controller.elect_for_client("t", 0, 0)[0] == Errors.PREFERRED_LEADER_NOT_AVAILABLE
    assert controller.elect_for_client("t", 9, 0)[0] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    heartbeat(controller, 1)                   # unfenced, but still out of the ISR
    assert controller.elect_for_client("t", 0, 0)[0] == Errors.PREFERRED_LEADER_NOT_AVAILABLE
    s = controller.partitions[("t", 0)]
    s.isr = [2, 3, 1]                           # back in sync (as an AlterPartition would say)
    epoch = s.leader_epoch
    assert controller.elect_for_client("t", 0, 0) == (Errors.NONE, None)
    assert s.leader == 1 and s.leader_epoch == epoch + 1


def test_elect_unclean_leaders(controller):
    """ReplicationControlManagerTest.testElectUncleanLeaders_WithoutElr: a partition with a
    leader needs no election; a leaderless one whose ISR member is gone gets an active replica,
    RECOVERING; none active -> ELIGIBLE_LEADERS_NOT_AVAILABLE.  And
    testPreferredElectionDoesNotTriggerUncleanElection."""
    start(controller, 1, 2)
    controller.create_assigned_topic("t", [(0, [1, 2])])
    assert controller.elect_for_client("t", 0, 1)[0] == Errors.ELECTION_NOT_NEEDED
    s = controller.partitions[("t", 0)]
    s.isr = [1]                                 # 2 fell behind
    controller.fence_broker(1)                  # the last ISR member goes: no leader
    assert s.leader == NO_LEADER and s.isr == [1]
    assert controller.elect_for_client("t", 0, 0)[0] == Errors.PREFERRED_LEADER_NOT_AVAILABLE
    assert s.leader == NO_LEADER
    controller.fence_broker(2)
    assert controller.elect_for_client("t", 0, 1)[0] == Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
    heartbeat(controller, 2)
    assert controller.elect_for_client("t", 0, 1) == (Errors.NONE, None)
    assert (s.leader, s.isr, s.leader_recovery_state) == (2, [2], RECOVERING)
