"""Each KIP's motivating story, step by step, with the guard it motivates switched on (the story
ends safely) and off (the story ends in the failure the KIP describes).  Guards can only be
switched off in simulation mode (storage.guards)."""
import pytest

from rig import Rig
from storage import guards
from storage import messages as m
from storage.errors import Errors


@pytest.fixture(autouse=True)
def simulation():
    guards.enter_simulation()
    yield
    guards.enable_all()


def two_brokers(tmp_path, **kwargs):
    rig = Rig(tmp_path, 2, **kwargs)
    assert rig.controller.create_partition("t", 0, [1, 2]) == Errors.NONE
    rig.publish()
    return rig


# ---- KIP-101 scenario 1: high-watermark truncation followed by an immediate leader election ----

def kip101_scenario1(tmp_path):
    rig = two_brokers(tmp_path)
    leader, follower = 1, 2
    assert rig.produce(leader, [b"m1"]).error_code == Errors.NONE
    rig.replicate()
    assert rig.log(follower).high_watermark == 1
    assert rig.produce(leader, [b"m2"]).error_code == Errors.NONE
    rig.fetch(follower)                      # the follower gets m2 ...
    rig.fetch(follower, deliver=False)       # ... acknowledges it (leader HW -> 2), but the answer is lost
    assert rig.log(leader).high_watermark == 2 and rig.log(follower).high_watermark == 1
    rig.nodes[follower].logdir.checkpoint()  # its high watermark (1) reaches the disk
    # The follower restarts (a process crash: its log survives; the controller does not notice,
    # it stays in the ISR) and starts replicating again.
    rig.crash(follower, fence=False)
    rig.start(follower, new_incarnation=False)
    rig.fetch(follower, deliver=False)       # its first move; the leader dies before answering
    rig.crash(leader)
    assert rig.state().leader == follower
    return rig.values(follower)


def test_kip101_scenario1_committed_message_survives(tmp_path):
    assert kip101_scenario1(tmp_path) == [b"m1", b"m2"]


def test_kip101_scenario1_without_epochs_loses_a_committed_message(tmp_path):
    with guards.disabled("M1"):
        assert kip101_scenario1(tmp_path) == [b"m1"]


# ---- KIP-101 scenario 2: replica divergence on restart after multiple hard failures ------------

def kip101_scenario2(tmp_path):
    rig = two_brokers(tmp_path)
    a, b = 1, 2
    rig.produce(a, [b"m1"])
    rig.replicate()
    for broker in (a, b):
        rig.log(broker, "t", 0).flush()
    rig.produce(a, [b"m2"])
    rig.replicate()                          # m2 committed: both have it, A flushed it, B did not
    rig.log(a).flush()
    rig.nodes[a].logdir.checkpoint()
    # Power outage: both lose what was not flushed.
    rig.crash(b, lose_unflushed=True, fence=False)
    rig.crash(a, lose_unflushed=True, fence=False)
    rig.start(b, new_incarnation=False)      # B first: still in the ISR, one message behind ...
    rig.controller.fence_broker(a)           # ... and elected when A's session expires
    rig.publish()
    assert rig.state().leader == b
    rig.produce(b, [b"m3"])
    rig.start(a)                             # A returns as a follower with m2 at offset 1
    rig.replicate()
    return rig.batches(a), rig.batches(b), rig.values(a), rig.values(b)


def test_kip101_scenario2_replicas_converge(tmp_path):
    batches_a, batches_b, values_a, values_b = kip101_scenario2(tmp_path)
    assert batches_a == batches_b and values_a == values_b == [b"m1", b"m3"]


def test_kip101_scenario2_without_epochs_diverges(tmp_path):
    with guards.disabled("M1"):
        batches_a, batches_b, values_a, values_b = kip101_scenario2(tmp_path)
    assert values_a == [b"m1", b"m2"] and values_b == [b"m1", b"m3"]     # same offsets, different data


# ---- KIP-279: fast leader changes; OffsetForLeaderEpoch answers (epoch, offset) ---------------

def kip279_fast_leader_changes(tmp_path):
    rig = two_brokers(tmp_path, unclean=True)
    a, b = 1, 2
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.produce(a, [b"a1"])                  # written on A only (B is cut off)
    rig.crash(a)                             # B leads in epoch 1 and writes at offset 1 too
    assert rig.state().leader == b and rig.state().leader_epoch == 1
    rig.produce(b, [b"b1"])
    rig.crash(b)
    rig.start(a)                             # B is the last ISR member: A wins an unclean election
    assert rig.state().leader == a and rig.state().leader_recovery_state == m.RECOVERING
    rig.alter()                              # A reports RECOVERED
    rig.produce(a, [b"a2"])
    rig.start(b)
    rig.replicate(rounds=10)
    return rig


def test_kip279_follower_iterates_to_the_common_prefix(tmp_path):
    rig = kip279_fast_leader_changes(tmp_path)
    assert rig.batches(1) == rig.batches(2)
    assert rig.values(2) == [b"m0", b"a1", b"a2"]
    assert [off for _t, _p, off in rig.nodes[2].fetcher.truncations] == [1]


def test_kip279_offset_only_answer_leaves_divergent_logs(tmp_path):
    with guards.disabled("M3"):
        rig = kip279_fast_leader_changes(tmp_path)
    assert rig.values(2)[:2] == [b"m0", b"b1"] and rig.values(1)[:2] == [b"m0", b"a1"]


def test_shouldSurviveFastLeaderChange(tmp_path):
    # kafka-reference 9.1: rounds of write, bounce the follower, bounce the leader -- no loss.
    rig = two_brokers(tmp_path)
    written = []
    for i in range(5):
        leader = rig.state().leader
        assert rig.produce(leader, [b"r%d" % i]).error_code == Errors.NONE
        written.append(b"r%d" % i)
        rig.replicate()
        follower = 2 if leader == 1 else 1
        rig.crash(follower)
        rig.start(follower)
        rig.replicate()
        rig.crash(leader)
        rig.start(leader)
        rig.replicate()
        for broker in (1, 2):
            assert rig.values(broker) == written


# ---- KIP-320: divergence detected in the fetch response; fencing by current leader epoch -------

def test_kip320_diverging_epoch_in_fetch_response(tmp_path):
    rig = two_brokers(tmp_path, unclean=True, truncate_on_fetch=True)
    a, b = 1, 2
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.produce(a, [b"a1"])
    rig.crash(a)
    rig.produce(b, [b"b1"])
    rig.crash(b)
    rig.start(a)
    rig.alter()
    rig.produce(a, [b"a2"])
    rig.start(b)
    responses = rig.fetch(b)                  # no OffsetForLeaderEpoch: the fetch itself diverges
    (fetched,) = [p for r in responses for p in r.partitions]
    assert fetched.diverging_epoch == m.EpochEndOffset(0, 2) and fetched.records == b""
    rig.replicate()
    assert rig.batches(a) == rig.batches(b)


def test_kip320_zombie_leader_is_fenced(tmp_path):
    def zombie_story():
        rig = Rig(tmp_path / ("on" if guards.on("M7") else "off"), 3)
        rig.controller.create_partition("t", 0, [1, 2, 3])
        rig.publish()
        rig.produce(1, [b"m0"])
        rig.replicate()
        # The controller moves leadership to 2 (epoch 1); broker 1 misses the news (a zombie).
        rig.controller.move_leader("t", 0, 2)
        rig.publish(hold=lambda b, message: b == 1 and isinstance(message, m.LeaderAndIsrRequest))
        rig.produce(1, [b"zombie write"])     # the zombie still takes writes in epoch 0
        # Broker 3 knows epoch 1; a fetch sent to the zombie carries CurrentLeaderEpoch 1.
        request = m.FetchRequest(3, rig.epoch(3), [m.FetchPartition("t", 0, 1, current_leader_epoch=1)])
        return rig.nodes[1].handle_fetch(request).partitions[0]

    answer = zombie_story()
    assert answer.error_code == Errors.UNKNOWN_LEADER_EPOCH and answer.records == b""
    with guards.disabled("M7"):
        answer = zombie_story()
    assert answer.error_code == Errors.NONE and answer.records    # stale data handed out


# ---- KIP-903: the stale AlterPartition of KAFKA-14139 ---------------------------------------

def kip903_story(tmp_path):
    rig = Rig(tmp_path, 3)
    rig.controller.create_partition("t", 0, [1, 2, 3])
    rig.publish()
    rig.crash(2)                             # B is away; the ISR shrinks to [1, 3]
    assert rig.state().isr == [1, 3]
    for i in range(5):
        rig.produce(1, [b"c%d" % i])
    rig.replicate()
    rig.start(2)
    rig.fetch(2)
    rig.fetch(2)                             # B catches up; A sends AlterPartition adding B ...
    rig.alter(hold=True)
    held = [(b, r) for b, r in rig.held if isinstance(r, m.AlterPartitionRequest)]
    assert held and held[0][1].new_isr == [1, 2, 3]
    rig.crash(2, fence=False)                # ... and B restarts with an empty disk, new epoch
    rig.start(2, wipe=True)
    response = rig.answer_alter(*held[0])    # the stale request lands now
    # Then A and C go: does B, with no data, get elected?
    rig.crash(1)
    rig.crash(3)
    return response, rig


def test_kip903_stale_alter_partition_is_rejected(tmp_path):
    response, rig = kip903_story(tmp_path)
    assert response.error_code == Errors.INELIGIBLE_REPLICA
    assert 2 not in rig.state().isr and rig.state().leader == -1   # no leader rather than an empty one


def test_kip903_without_the_epoch_check_an_empty_replica_leads(tmp_path):
    with guards.disabled("M13"):
        response, rig = kip903_story(tmp_path)
    assert response.error_code == Errors.NONE
    assert rig.state().leader == 2 and rig.values(2) == []          # committed c0..c4 are gone


# ---- KIP-841: fenced and shutting-down replicas neither join the ISR nor lead -------------------

def kip841_story(tmp_path):
    rig = Rig(tmp_path, 3)
    rig.controller.create_partition("t", 0, [1, 2, 3])
    rig.publish()
    rig.produce(1, [b"x"])
    rig.replicate()
    # Broker 2 asks for a controlled shutdown: it leaves the ISR ...
    rig.controller.heartbeat(m.BrokerHeartbeatRequest(2, rig.epoch(2), want_shut_down=True))
    rig.publish()
    assert 2 not in rig.state().isr
    rig.replicate()                          # ... and, still fetching, must not come back
    rejoined = 2 in rig.state().isr
    rig.crash(1)                             # the leader goes: who leads now?
    return rejoined, rig.state().leader


def test_kip841_shutting_down_replica_stays_out(tmp_path):
    rejoined, leader = kip841_story(tmp_path)
    assert not rejoined and leader == 3


def test_kip841_without_the_guard_a_shutting_down_replica_rejoins(tmp_path):
    with guards.disabled("M12"):
        rejoined, leader = kip841_story(tmp_path)
    assert rejoined and leader == 2


def test_kip841_fenced_replica_is_not_elected(tmp_path):
    rig = Rig(tmp_path, 3)
    rig.controller.create_partition("t", 0, [1, 2, 3])
    rig.publish()
    rig.controller.fence_broker(2)           # session expired, process still alive
    rig.publish()
    rig.replicate()
    assert 2 not in rig.state().isr
    rig.crash(1)
    assert rig.state().leader == 3


# ---- KIP-704: unclean election, requests refused while recovering, ISR grows after RECOVERED ---

def kip704_story(tmp_path, hook_calls):
    def hook(partition):
        hook_calls.append(partition.key)
        return False                         # the operator's recovery takes a while

    rig = Rig(tmp_path, 2, unclean=True, recovery_hook=hook)
    rig.controller.create_partition("t", 0, [1, 2])
    rig.publish()
    rig.produce(1, [b"m0"])
    rig.replicate()
    rig.crash(2)
    rig.produce(1, [b"only on 1"])
    rig.crash(1)                             # 1 is the last ISR member: no leader
    rig.start(2)                             # 2 wins an unclean election
    return rig


def test_kip704_recovering_leader_refuses_until_recovered(tmp_path):
    calls = []
    rig = kip704_story(tmp_path, calls)
    s = rig.state()
    assert (s.leader, s.isr, s.leader_recovery_state) == (2, [2], m.RECOVERING)
    assert calls == [("t", 0)]
    leader = rig.nodes[2]
    assert rig.produce(2, [b"too early"]).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    epoch_answer = leader.handle_offset_for_leader_epoch(
        m.OffsetForLeaderEpochRequest(1, [m.OffsetForLeaderEpochPartition("t", 0, 0)]))
    assert epoch_answer.partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert leader.handle_list_offsets(m.ListOffsetsRequest(-1, "t", 0, -1)).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    rig.start(1)
    rig.replicate()
    assert rig.state().isr == [2]            # the ISR does not grow while recovering
    leader.complete_leader_recovery("t", 0)
    rig.alter()
    assert rig.state().leader_recovery_state == m.RECOVERED
    assert rig.produce(2, [b"now"]).error_code == Errors.NONE
    rig.replicate(rounds=10)
    assert rig.state().isr == [1, 2] and rig.batches(1) == rig.batches(2)


def test_kip704_without_recovering_the_leader_serves_at_once(tmp_path):
    with guards.disabled("M17"):
        rig = kip704_story(tmp_path, [])
        assert rig.state().leader_recovery_state == m.RECOVERED
        assert rig.produce(2, [b"too early"]).error_code == Errors.NONE


def test_kip704_controller_rejects_recovering_with_a_larger_isr(tmp_path):
    rig = kip704_story(tmp_path, [])
    s = rig.state()
    request = m.AlterPartitionRequest(2, rig.epoch(2), "t", 0, s.leader_epoch,
                                      [m.BrokerEpoch(2, rig.epoch(2)), m.BrokerEpoch(1, -1)], m.RECOVERING,
                                      s.partition_epoch)
    assert rig.controller.handle_alter_partition(request).error_code == Errors.INVALID_REQUEST


# ---- KIP-570: a StopReplica delayed behind a newer LeaderAndIsr is fenced ----------------------

def kip570_story(tmp_path):
    rig = Rig(tmp_path, 2)
    rig.controller.create_partition("t", 0, [1, 2])
    rig.publish()
    rig.produce(1, [b"keep me"])
    rig.replicate()
    stop = rig.controller.stop_replica(2, "t", 0, delete=True)      # epoch 0, delayed in the network
    rig.publish(hold=lambda b, message: isinstance(message, m.StopReplicaRequest))
    rig.controller.move_leader("t", 0, 2)                          # epoch 1 reaches broker 2 first
    rig.publish()
    response = rig.deliver(2, stop)                                # the old StopReplica lands
    return response, rig


def test_kip570_delayed_stop_replica_is_fenced(tmp_path):
    response, rig = kip570_story(tmp_path)
    assert response.partition_errors[("t", 0)] == Errors.FENCED_LEADER_EPOCH
    assert rig.values(2) == [b"keep me"] and ("t", 0) in rig.nodes[2].partitions


def test_kip570_without_the_epoch_check_the_replica_is_deleted(tmp_path):
    with guards.disabled("M16"):
        response, rig = kip570_story(tmp_path)
    assert response.partition_errors[("t", 0)] == Errors.NONE
    assert ("t", 0) not in rig.nodes[2].partitions and ("t", 0) not in rig.nodes[2].logdir.logs()
