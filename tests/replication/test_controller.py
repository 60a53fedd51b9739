"""Controller: registrations, heartbeats, fencing, controlled shutdown, elections and
AlterPartition validation (docs/kafka-formats.md 8.1-8.3; ReplicationControlManagerTest-like scenarios
in our own words).  Most tests run on a memory-only controller (`Controller(None)`); the
persistence tests reopen an LMDB store under tmp_path.
"""
from __future__ import annotations

import pytest

from storage.core import guards
from storage.core.errors import Errors
from storage.replication.controller import Controller
from storage.replication.messages import (
    NO_LEADER,
    RECOVERED,
    RECOVERING,
    AlterPartitionRequest,
    BrokerEpoch,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    LeaderAndIsrRequest,
    MetadataUpdate,
    StopReplicaRequest,
)

TOPIC = "events"
KEY = (TOPIC, 0)


@pytest.fixture
def simulation(monkeypatch):
    monkeypatch.setattr(guards, "_simulation", guards._simulation)
    guards.enter_simulation()
    yield guards
    guards.enable_all()


def register(controller: Controller, broker_id: int, incarnation: str | None = None) -> int:
    response = controller.register_broker(BrokerRegistrationRequest(broker_id, incarnation or f"inc-{broker_id}"))
    assert response.error_code == Errors.NONE
    return response.broker_epoch


def heartbeat(controller: Controller, broker_id: int, epoch: int | None = None, **flags):
    if epoch is None:
        epoch = controller.brokers[broker_id].broker_epoch
    return controller.heartbeat(BrokerHeartbeatRequest(broker_id, epoch, **flags))


def start(controller: Controller, *broker_ids: int) -> dict[int, int]:
    """Register and unfence brokers; returns their epochs."""
    epochs = {}
    for b in broker_ids:
        epochs[b] = register(controller, b)
        assert heartbeat(controller, b).is_fenced is False
    return epochs


@pytest.fixture
def controller():
    c = Controller(None)
    yield c
    c.close()


@pytest.fixture
def three(controller):
    """Brokers 1-3 active and partition events-0 on [1, 2, 3] (leader 1, ISR [1, 2, 3])."""
    start(controller, 1, 2, 3)
    assert controller.create_partition(TOPIC, 0, [1, 2, 3]) == Errors.NONE
    controller.take_outbox()
    return controller


def pstate(controller):
    return controller.partitions[KEY]


def alter(controller, *, broker_id=None, broker_epoch=None, leader_epoch=None, partition_epoch=None, isr=None,
          epochs=None, recovery=RECOVERED, topic=TOPIC):
    """An AlterPartition from the current leader, valid unless a field is overridden."""
    s = controller.partitions.get(KEY)
    broker_id = s.leader if broker_id is None else broker_id
    if broker_epoch is None:
        broker_epoch = controller.brokers[broker_id].broker_epoch
    isr = list(s.isr) if isr is None else isr
    if epochs is None:
        epochs = {b: controller.brokers[b].broker_epoch if b in controller.brokers else -1 for b in isr}
    members = [BrokerEpoch(b, epochs[b]) for b in isr]
    request = AlterPartitionRequest(broker_id, broker_epoch, topic, 0,
                                    s.leader_epoch if leader_epoch is None else leader_epoch, members, recovery,
                                    s.partition_epoch if partition_epoch is None else partition_epoch)
    return controller.handle_alter_partition(request)


def leader_and_isr_messages(controller):
    return [(b, m) for b, m in controller.take_outbox() if isinstance(m, LeaderAndIsrRequest)]


# ---- registration and heartbeats --------------------------------------------------------------

def test_registration_epochs_per_incarnation(controller):
    first = register(controller, 1, "a")
    assert register(controller, 1, "a") == first                      # a retried registration
    other = register(controller, 2, "x")
    second = register(controller, 1, "b")                             # a restart
    assert len({first, other, second}) == 3 and second > max(first, other)
    assert controller.brokers[1].broker_epoch == second
    assert register(controller, 1, "b") == second


def test_guard_m27_off_reuses_broker_epoch(controller, simulation):
    first = register(controller, 1, "a")
    with simulation.disabled("M27"):
        assert register(controller, 1, "b") == first          # unsafe: two incarnations, one epoch


def test_registration_survives_reopen(tmp_path):
    path = tmp_path / "ctl"
    c = Controller(path)
    epochs = start(c, 1, 2)
    c.create_partition(TOPIC, 0, [1, 2])
    heartbeat(c, 2, want_shut_down=True)
    old_controller_epoch = c.controller_epoch
    c.close()

    c = Controller(path)
    try:
        assert c.controller_epoch > old_controller_epoch
        assert {b: r.broker_epoch for b, r in c.brokers.items()} == epochs
        assert c.brokers[2].in_controlled_shutdown                   # persisted (KIP-841)
        assert c.partitions[KEY].leader == 1
        assert register(c, 1, "inc-1") == epochs[1]                  # same incarnation, same epoch
        assert register(c, 1, "new") > max(epochs.values())          # epochs never reused
        assert c.metadata_update().controller_epoch == c.controller_epoch
    finally:
        c.close()


def test_brokers_start_fenced_and_unfence_on_heartbeat(controller):
    epoch = register(controller, 1)
    assert controller.brokers[1].fenced and not controller.active(1)
    response = heartbeat(controller, 1, epoch)
    assert (response.error_code, response.is_fenced) == (Errors.NONE, False)
    assert controller.active(1)
    updates = [m for _, m in controller.take_outbox() if isinstance(m, MetadataUpdate)]
    assert updates and updates[-1].brokers[1].fenced is False


def test_heartbeat_with_stale_epoch(controller):
    old = register(controller, 1, "a")
    new = register(controller, 1, "b")
    assert heartbeat(controller, 1, old).error_code == Errors.STALE_BROKER_EPOCH
    assert controller.brokers[1].fenced                               # the stale heartbeat did nothing
    assert heartbeat(controller, 9, 1).error_code == Errors.STALE_BROKER_EPOCH
    assert heartbeat(controller, 1, new).is_fenced is False


# ---- creation and elections -------------------------------------------------------------------------

def test_create_partition_uses_only_active_replicas(controller):
    start(controller, 1, 2, 3)
    register(controller, 4)                                           # fenced
    heartbeat(controller, 3, want_shut_down=True)
    controller.take_outbox()
    assert controller.create_partition(TOPIC, 0, [4, 3, 2, 1]) == Errors.NONE
    s = pstate(controller)
    assert (s.leader, s.isr, s.replicas, s.leader_epoch, s.partition_epoch) == (2, [2, 1], [4, 3, 2, 1], 0, 0)
    sent = leader_and_isr_messages(controller)
    assert sorted(b for b, _ in sent) == [1, 2, 3, 4]
    assert all(m.partition_states[0].leader == 2 for _, m in sent)


def test_create_partition_fails_when_all_replicas_fenced_or_shutting_down(controller):
    start(controller, 1)
    register(controller, 2)
    heartbeat(controller, 1, want_shut_down=True)
    assert controller.create_partition(TOPIC, 0, [1, 2, 3]) == Errors.INVALID_REPLICATION_FACTOR
    assert KEY not in controller.partitions


def test_every_leader_change_bumps_leader_and_partition_epoch(three):
    c = three
    history = [(pstate(c).leader, pstate(c).leader_epoch, pstate(c).partition_epoch)]
    assert c.move_leader(TOPIC, 0, 2) == Errors.NONE
    history.append((pstate(c).leader, pstate(c).leader_epoch, pstate(c).partition_epoch))
    c.fence_broker(2)
    history.append((pstate(c).leader, pstate(c).leader_epoch, pstate(c).partition_epoch))
    assert history == [(1, 0, 0), (2, 1, 1), (1, 2, 2)]
    assert pstate(c).isr == [1, 3]
    sent = leader_and_isr_messages(c)
    assert {m.partition_states[0].leader_epoch for _, m in sent} == {1, 2}
    assert c.move_leader(TOPIC, 0, 1) == Errors.ELECTION_NOT_NEEDED
    assert c.move_leader(TOPIC, 0, 2) == Errors.PREFERRED_LEADER_NOT_AVAILABLE     # fenced, out of ISR


def test_isr_only_change_bumps_partition_epoch_not_leader_epoch(three):
    c = three
    c.fence_broker(3)
    s = pstate(c)
    assert (s.leader, s.isr, s.leader_epoch, s.partition_epoch) == (1, [1, 2], 0, 1)


# ---- controlled shutdown (KIP-841) -------------------------------------------------------------------

def test_controlled_shutdown(three):
    c = three
    c.create_partition(TOPIC, 1, [2, 1])
    response = heartbeat(c, 1, want_shut_down=True)
    assert response.error_code == Errors.NONE
    assert c.brokers[1].in_controlled_shutdown and not c.active(1)
    assert response.should_shut_down                     # it led events-0 and nothing after the move
    assert heartbeat(c, 2).should_shut_down is False
    p0, p1 = c.partitions[KEY], c.partitions[(TOPIC, 1)]
    assert (p0.leader, p0.isr, p0.leader_epoch) == (2, [2, 3], 1)
    assert (p1.leader, p1.isr) == (2, [2])
    assert c.move_leader(TOPIC, 0, 1) == Errors.PREFERRED_LEADER_NOT_AVAILABLE
    # While shutting down it is never elected (here: 2 fenced, 1 the only other live replica).
    c.fence_broker(2)
    assert c.partitions[KEY].leader == 3
    assert c.partitions[(TOPIC, 1)].leader == NO_LEADER
    assert c.elect_leader(TOPIC, 1) == Errors.LEADER_NOT_AVAILABLE
    assert c.elect_leader(TOPIC, 1, unclean=True) == Errors.LEADER_NOT_AVAILABLE     # not even uncleanly
    assert c.partitions[(TOPIC, 1)].leader == NO_LEADER
    # A heartbeat without the shutdown request does not take it back.
    assert heartbeat(c, 1).error_code == Errors.NONE and c.brokers[1].in_controlled_shutdown


def test_guard_m12_off_elects_shutting_down_broker(controller, simulation):
    start(controller, 1, 2)
    heartbeat(controller, 2, want_shut_down=True)
    with simulation.disabled("M12"):
        assert controller.create_partition(TOPIC, 0, [2, 1]) == Errors.NONE
    assert pstate(controller).leader == 2           # unsafe: leadership to a broker going away


def test_guard_m12_off_accepts_shutting_down_isr_member(controller, simulation):
    _isr_1_2(controller)
    heartbeat(controller, 3)
    heartbeat(controller, 3, want_shut_down=True)
    with simulation.disabled("M12"):
        response = alter(controller, isr=[1, 2, 3], epochs={1: -1, 2: -1, 3: -1})
    assert response.error_code == Errors.NONE


# ---- fencing --------------------------------------------------------------------------------------

def test_fencing_removes_broker_from_isrs_except_last_member(controller):
    start(controller, 1, 2, 3)
    controller.create_partition(TOPIC, 0, [1, 2, 3])
    controller.create_partition(TOPIC, 1, [2, 3])
    controller.create_partition(TOPIC, 2, [3])
    controller.take_outbox()
    controller.fence_broker(3)
    p0, p1, p2 = (controller.partitions[(TOPIC, i)] for i in range(3))
    assert (p0.leader, p0.isr) == (1, [1, 2])
    assert (p1.leader, p1.isr) == (2, [2])
    assert (p2.leader, p2.isr, p2.leader_epoch) == (NO_LEADER, [3], 1)    # the last member stays
    controller.fence_broker(2)
    assert (p1.leader, p1.isr) == (NO_LEADER, [2])
    assert (p0.leader, p0.isr) == (1, [1])
    sent = leader_and_isr_messages(controller)
    assert {(m.partition_states[0].partition, m.partition_states[0].leader) for _, m in sent} >= \
        {(1, NO_LEADER), (2, NO_LEADER)}
    # The last ISR member comes back: it leads again.
    heartbeat(controller, 3)
    assert (p2.leader, p2.isr, p2.leader_epoch) == (3, [3], 2)
    assert p2.leader_recovery_state == RECOVERED


def test_want_fence_heartbeat_fences(three):
    response = heartbeat(three, 1, want_fence=True)
    assert response.is_fenced and three.brokers[1].fenced
    assert pstate(three).leader == 2


# ---- unclean election (KIP-704) -------------------------------------------------------------------

def _only_1_in_isr_then_fenced(controller):
    start(controller, 1, 2)
    controller.create_partition(TOPIC, 0, [1, 2])
    controller.fence_broker(2)
    heartbeat(controller, 2)                                # back, but out of the ISR
    assert pstate(controller).isr == [1]
    controller.fence_broker(1)


def test_unclean_election_on_request(controller):
    _only_1_in_isr_then_fenced(controller)
    assert (pstate(controller).leader, pstate(controller).isr) == (NO_LEADER, [1])
    assert controller.elect_leader(TOPIC, 0) == Errors.LEADER_NOT_AVAILABLE
    epoch_before = pstate(controller).leader_epoch
    assert controller.elect_leader(TOPIC, 0, unclean=True) == Errors.NONE
    s = pstate(controller)
    assert (s.leader, s.isr, s.leader_recovery_state) == (2, [2], RECOVERING)
    assert s.leader_epoch == epoch_before + 1


def test_unclean_election_when_enabled():
    c = Controller(None, unclean_leader_election=True)
    _only_1_in_isr_then_fenced(c)
    s = pstate(c)
    assert (s.leader, s.isr, s.leader_recovery_state) == (2, [2], RECOVERING)
    sent = leader_and_isr_messages(c)
    assert sent and sent[-1][1].partition_states[0].leader_recovery_state == RECOVERING


def test_guard_m17_off_unclean_leader_not_recovering(controller, simulation):
    _only_1_in_isr_then_fenced(controller)
    with simulation.disabled("M17"):
        controller.elect_leader(TOPIC, 0, unclean=True)
    assert pstate(controller).leader_recovery_state == RECOVERED   # unsafe: no recovery hint


def test_recovering_leader_completes_recovery(controller):
    _only_1_in_isr_then_fenced(controller)
    controller.elect_leader(TOPIC, 0, unclean=True)
    heartbeat(controller, 1)
    # Still RECOVERING: only ISR = [leader] is allowed, then RECOVERED; after that, growth.
    assert alter(controller, isr=[1, 2], recovery=RECOVERING).error_code == Errors.INVALID_REQUEST
    done = alter(controller, isr=[2], recovery=RECOVERED)
    assert (done.error_code, done.leader_recovery_state) == (Errors.NONE, RECOVERED)
    assert alter(controller, isr=[1, 2]).error_code == Errors.NONE


# ---- AlterPartition validation, in Kafka's order ----------------------------------------------------------
# Each request below also breaks a later rule, so the expected answer shows the order.

def test_alter_partition_stale_broker_epoch_first(three):
    response = alter(three, broker_epoch=three.brokers[1].broker_epoch - 1, topic="unknown")
    assert response.error_code == Errors.STALE_BROKER_EPOCH
    assert alter(three, broker_id=9, broker_epoch=1).error_code == Errors.STALE_BROKER_EPOCH


def test_alter_partition_unknown_partition(three):
    assert alter(three, topic="unknown", leader_epoch=-5).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_partition_older_leader_epoch_is_fenced(three):
    three.move_leader(TOPIC, 0, 2)
    three.move_leader(TOPIC, 0, 1)                          # leader 1 again, leader epoch 2
    response = alter(three, leader_epoch=1, partition_epoch=0, isr=[1, 2])
    assert response.error_code == Errors.FENCED_LEADER_EPOCH


def test_alter_partition_newer_leader_epoch_is_not_controller(three):
    response = alter(three, leader_epoch=pstate(three).leader_epoch + 1, broker_id=2, partition_epoch=99)
    assert response.error_code == Errors.NOT_CONTROLLER


def test_alter_partition_from_non_leader_is_invalid(three):
    response = alter(three, broker_id=2, partition_epoch=99)
    assert response.error_code == Errors.INVALID_REQUEST


def test_alter_partition_stale_partition_epoch(three):
    three.fence_broker(3)                                   # partition epoch 1
    response = alter(three, partition_epoch=0, isr=[1, 2, 3], recovery=RECOVERING)
    assert response.error_code == Errors.INVALID_UPDATE_VERSION


def test_alter_partition_recovering_with_more_than_leader_is_invalid(controller):
    _only_1_in_isr_then_fenced(controller)
    controller.elect_leader(TOPIC, 0, unclean=True)
    heartbeat(controller, 1)
    assert alter(controller, isr=[2, 1], recovery=RECOVERING).error_code == Errors.INVALID_REQUEST
    assert alter(controller, isr=[2], recovery=RECOVERING).error_code == Errors.NONE


def test_alter_partition_recovered_to_recovering_is_invalid(three):
    response = alter(three, isr=[1], recovery=RECOVERING)
    assert response.error_code == Errors.INVALID_REQUEST
    assert pstate(three).leader_recovery_state == RECOVERED


@pytest.mark.parametrize("isr", [[2, 3], [1, 2, 2], [1, 4]], ids=["without-leader", "duplicate", "not-a-replica"])
def test_alter_partition_malformed_isr_is_invalid(three, isr):
    assert alter(three, isr=isr, epochs={b: -1 for b in isr}).error_code == Errors.INVALID_REQUEST


def _isr_1_2(controller):
    """Replicas [1, 2, 3, 4] (4 never registered), ISR [1, 2] after 3 was fenced."""
    start(controller, 1, 2, 3)
    controller.create_partition(TOPIC, 0, [1, 2, 3, 4])
    controller.fence_broker(3)
    assert pstate(controller).isr == [1, 2]


@pytest.mark.parametrize("make_ineligible", ["fenced", "shutting-down", "unregistered", "stale-epoch"])
def test_alter_partition_rejects_ineligible_replica(controller, make_ineligible):
    _isr_1_2(controller)
    joining = 3
    if make_ineligible == "fenced":
        pass                                                  # 3 stays fenced
    elif make_ineligible == "shutting-down":
        heartbeat(controller, 3)
        heartbeat(controller, 3, want_shut_down=True)
    elif make_ineligible == "unregistered":
        joining = 4
    elif make_ineligible == "stale-epoch":
        old = controller.brokers[3].broker_epoch
        register(controller, 3, "restarted")                # a new incarnation ...
        heartbeat(controller, 3)                            # ... active again
        before = pstate(controller).partition_epoch
        response = alter(controller, isr=[1, 2, 3], epochs={1: controller.brokers[1].broker_epoch,
                                                            2: controller.brokers[2].broker_epoch, 3: old})
        assert response.error_code == Errors.INELIGIBLE_REPLICA
        assert (pstate(controller).isr, pstate(controller).partition_epoch) == ([1, 2], before)
        return
    before = pstate(controller).partition_epoch
    response = alter(controller, isr=[1, 2, joining], epochs={1: -1, 2: -1, joining: -1})
    assert response.error_code == Errors.INELIGIBLE_REPLICA
    assert (pstate(controller).isr, pstate(controller).partition_epoch) == ([1, 2], before)


def test_alter_partition_minus_one_broker_epoch_skips_epoch_check(controller):
    _isr_1_2(controller)
    register(controller, 3, "restarted")
    heartbeat(controller, 3)
    assert alter(controller, isr=[1, 2, 3], epochs={1: -1, 2: -1, 3: -1}).error_code == Errors.NONE


def test_guard_m13_off_accepts_stale_member_epoch(controller, simulation):
    _isr_1_2(controller)
    old = controller.brokers[3].broker_epoch
    register(controller, 3, "restarted")
    heartbeat(controller, 3)
    with simulation.disabled("M13"):
        response = alter(controller, isr=[1, 2, 3], epochs={1: -1, 2: -1, 3: old})
    assert response.error_code == Errors.NONE          # unsafe: the old incarnation's catch-up counted


def test_alter_partition_success(three):
    c = three
    c.fence_broker(3)
    heartbeat(c, 3)
    c.take_outbox()
    before = pstate(c)
    leader_epoch, partition_epoch = before.leader_epoch, before.partition_epoch
    response = alter(c, isr=[1, 2, 3])
    assert response.error_code == Errors.NONE
    assert (response.leader_id, response.leader_epoch, response.isr, response.partition_epoch,
            response.leader_recovery_state) == (1, leader_epoch, [1, 2, 3], partition_epoch + 1, RECOVERED)
    s = pstate(c)
    assert (s.isr, s.leader_epoch, s.partition_epoch) == ([1, 2, 3], leader_epoch, partition_epoch + 1)
    sent = c.take_outbox()
    assert sorted(b for b, _ in sent) == [1, 2, 3]
    for _, message in sent:
        assert isinstance(message, LeaderAndIsrRequest)
        [published] = message.partition_states
        assert (published.isr, published.partition_epoch, published.leader_epoch) == \
            ([1, 2, 3], partition_epoch + 1, leader_epoch)
    # The same request again is now stale.
    assert alter(c, isr=[1, 2, 3], partition_epoch=partition_epoch).error_code == Errors.INVALID_UPDATE_VERSION


def test_alter_partition_survives_reopen(tmp_path):
    path = tmp_path / "ctl"
    c = Controller(path)
    start(c, 1, 2)
    c.create_partition(TOPIC, 0, [1, 2])
    c.fence_broker(2)
    heartbeat(c, 2)
    assert alter(c, isr=[1, 2]).error_code == Errors.NONE
    committed = c.partitions[KEY].copy()
    c.close()
    c = Controller(path)
    try:
        assert c.partitions[KEY] == committed
    finally:
        c.close()


def test_unclean_recovery_prefers_the_last_known_elr(simulation):
    # Simulator seed 307037: ISR [1, 3] committed offsets 0-4; broker 2 had left the ISR earlier
    # (controlled shutdown) holding one uncommitted batch of a newer epoch.  Both ISR members
    # then restart uncleanly and leave ISR and ELR: recovery must choose among them (KIP-966
    # LastKnownElr), not the replica with the newest epoch.
    controller = Controller(None, min_insync_replicas=2)
    start(controller, 1, 2, 3)
    controller.create_partition(TOPIC, 0, [1, 2, 3])
    controller.partitions[KEY].isr = [1, 3]                 # 2 left (its shutdown is not the point)
    for b in (1, 3):
        controller.fence_broker(b)
        controller.register_broker(BrokerRegistrationRequest(b, f"inc-{b}-again", previous_broker_epoch=-1))
        heartbeat(controller, b)
    s = pstate(controller)
    assert s.leader == NO_LEADER and s.isr == [] and s.elr == [] and s.last_known_elr == [1, 3]
    offers = {1: (0, 3), 2: (2, 1), 3: (0, 5)}             # broker -> (latest epoch, log end offset)
    assert controller.recover_partition(TOPIC, 0, offers) == Errors.NONE
    s = pstate(controller)
    assert s.leader == 3 and s.isr == [3] and s.leader_recovery_state == RECOVERING and s.last_known_elr == []
    controller.close()


# ---- reassignment ------------------------------------------------------------------------------

def test_reassignment_bumps_the_leader_epoch_and_stops_removed_replicas_with_it(three):
    c = three
    assert c.reassign(TOPIC, 0, [1, 2]) == Errors.NONE
    s = pstate(c)
    assert (s.replicas, s.isr, s.leader, s.leader_epoch, s.partition_epoch) == ([1, 2], [1, 2], 1, 1, 1)
    sent = c.take_outbox()
    assert sorted(b for b, m in sent if isinstance(m, LeaderAndIsrRequest)) == [1, 2]
    [(to, stop)] = [(b, m) for b, m in sent if isinstance(m, StopReplicaRequest)]
    assert to == 3 and [(p.leader_epoch, p.delete_partition) for p in stop.partitions] == [(1, True)]
    # Added back: the next epoch, LeaderAndIsr to every replica; the ISR grows only by AlterPartition.
    assert c.reassign(TOPIC, 0, [1, 2, 3]) == Errors.NONE
    s = pstate(c)
    assert (s.replicas, s.isr, s.leader_epoch) == ([1, 2, 3], [1, 2], 2)
    assert sorted(b for b, m in leader_and_isr_messages(c)) == [1, 2, 3]


@pytest.mark.parametrize("replicas", [[2, 3], [], [1, 1, 2]])
def test_reassignment_refuses_removing_the_leader_and_malformed_lists(three, replicas):
    before = pstate(three).copy()
    assert three.reassign(TOPIC, 0, replicas) == Errors.INVALID_REPLICA_ASSIGNMENT
    assert pstate(three) == before and three.take_outbox() == []
