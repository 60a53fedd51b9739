"""ReplicaManager, driven directly: the leader and follower sides of one broker.

Scenarios follow docs/kafka-formats.md 7 and 8 (PartitionTest, ReplicaManagerTest and the
KIP-704/841/903/570 rules) and are written from those descriptions, not from Kafka's code.
Every test builds its own LogDir under tmp_path and drives a manual clock (`now[0]`, in ms).
"""
from __future__ import annotations

import errno
import os

import pytest

from storage import LogConfig, LogDir, Record, build_batch
from storage.core import errors, guards
from storage.core import io as sio
from storage.core.errors import Errors
from storage.log.reads import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from storage.replication.messages import (
    EPOCH_DURING_DELETE,
    NO_EPOCH,
    RECOVERED,
    RECOVERING,
    AlterPartitionResponse,
    BrokerInfo,
    DeleteRecordsRequest,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    LeaderAndIsrRequest,
    ListOffsetsRequest,
    MetadataUpdate,
    OffsetForLeaderEpochPartition,
    OffsetForLeaderEpochRequest,
    PartitionState,
    ProduceRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    sent,
)
from storage.replication.replica import ReplicaManager

TOPIC = "events"
KEY = (TOPIC, 0)
BROKER_EPOCHS = {1: 101, 2: 102, 3: 103}
CONSUMER = -1


# ---- harness ---------------------------------------------------------------------------------

@pytest.fixture
def now():
    return [1_000]


def brokers(**overrides) -> dict[int, BrokerInfo]:
    """Metadata for brokers 1-3; overrides: b2=BrokerInfo(...) or b2=None to leave 2 out."""
    infos = {b: BrokerInfo(b, e) for b, e in BROKER_EPOCHS.items()}
    for name, info in overrides.items():
        b = int(name[1:])
        if info is None:
            infos.pop(b)
        else:
            infos[b] = info
    return infos


@pytest.fixture
def make_manager(tmp_path, now):
    made = []

    def make(broker_id: int = 1, *, metadata=None, controller_epoch: int = 1, **kwargs) -> ReplicaManager:
        logdir = LogDir.open(tmp_path / f"broker-{broker_id}-{len(made)}", LogConfig(fsync=False))
        kwargs.setdefault("broker_epoch", BROKER_EPOCHS.get(broker_id, -1))
        manager = ReplicaManager(broker_id, logdir, clock=lambda: now[0], **kwargs)
        manager.apply_metadata(MetadataUpdate(controller_epoch, brokers() if metadata is None else metadata))
        made.append(manager)
        return manager

    yield make
    for manager in made:
        if not manager.logdir.offline:     # a test that takes its dir offline closes it itself
            manager.logdir.close()


@pytest.fixture
def simulation(monkeypatch):
    """Allow guards to be switched off (storage.core.guards refuses outside simulation); the
    module's simulation flag is restored afterwards."""
    monkeypatch.setattr(guards, "_simulation", guards._simulation)
    guards.enter_simulation()
    yield guards
    guards.enable_all()


def state(leader: int, leader_epoch: int, isr, *, replicas=(1, 2, 3), partition_epoch: int = 0,
          recovery: int = RECOVERED) -> PartitionState:
    return PartitionState(TOPIC, 0, leader, leader_epoch, partition_epoch, list(isr), list(replicas), recovery)


def seed(manager: ReplicaManager, *epochs_and_counts):
    """Write batches as a follower would: (epoch, record count) each, consecutive offsets."""
    log = manager.logdir.partition(TOPIC, 0)
    for epoch, count in epochs_and_counts:
        values = [b"e%d-%d" % (epoch, i) for i in range(count)]
        log.append_as_follower(build_batch(values, base_offset=log.log_end_offset, partition_leader_epoch=epoch))
    return log


def produce(manager: ReplicaManager, count: int = 1, *, acks: int = 1, callback=None):
    return manager.handle_produce(ProduceRequest(TOPIC, 0, build_batch([b"p"] * count), acks), callback)


def fetch(manager: ReplicaManager, replica_id: int, offset: int, *, current_epoch: int = NO_EPOCH,
          last_fetched_epoch: int = NO_EPOCH, replica_epoch: int | None = None, topic: str = TOPIC):
    if replica_epoch is None:
        replica_epoch = BROKER_EPOCHS.get(replica_id, -1)
    request = FetchRequest(replica_id, replica_epoch,
                           [FetchPartition(topic, 0, offset, current_epoch, last_fetched_epoch)])
    [answer] = manager.handle_fetch(request).partitions
    return answer


def offset_for_epoch(manager: ReplicaManager, requested: int, current: int = NO_EPOCH, topic: str = TOPIC):
    request = OffsetForLeaderEpochRequest(2, [OffsetForLeaderEpochPartition(topic, 0, requested, current)])
    [answer] = manager.handle_offset_for_leader_epoch(request).partitions
    return answer


def list_offsets(manager: ReplicaManager, timestamp: int, *, replica_id: int = CONSUMER,
                 current_epoch: int = NO_EPOCH):
    return manager.handle_list_offsets(ListOffsetsRequest(replica_id, TOPIC, 0, timestamp, current_epoch))


def log_of(manager: ReplicaManager):
    return manager.logdir.partition(TOPIC, 0)


def epochs_of(isr_request) -> list[tuple[int, int]]:
    return [(m.broker_id, m.broker_epoch) for m in isr_request.new_isr_with_epochs]


def accept(manager: ReplicaManager, request) -> AlterPartitionResponse:
    """Answer an AlterPartition as a controller that accepts it would."""
    response = AlterPartitionResponse(Errors.NONE, request.topic, request.partition, request.broker_id,
                                      request.leader_epoch, request.new_isr, request.leader_recovery_state,
                                      request.partition_epoch + 1)
    manager.handle_alter_partition_response(request, response)
    return response


def reject(manager: ReplicaManager, request, code: int) -> None:
    manager.handle_alter_partition_response(request, AlterPartitionResponse(code, request.topic, request.partition))


# ---- becoming leader (docs/kafka-formats.md 7.1) -----------------------------------------------------

def test_make_leader_updates_epoch_cache(make_manager):
    leader = make_manager(1)
    log = seed(leader, (0, 2), (5, 2))
    assert leader.apply_partition_state(state(1, 8, [1, 2])) == Errors.NONE
    assert [tuple(e) for e in log.epoch_cache.entries] == [(0, 0), (5, 2), (8, 4)]
    answer = offset_for_epoch(leader, requested=8, current=8)
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (Errors.NONE, 8, 4)
    # An epoch the leader saw answers with the start of the next one (KIP-279).
    answer = offset_for_epoch(leader, requested=5, current=8)
    assert (answer.leader_epoch, answer.end_offset) == (5, 4)
    answer = offset_for_epoch(leader, requested=3, current=8)
    assert (answer.leader_epoch, answer.end_offset) == (0, 2)


def test_epoch_cache_not_updated_when_leader_epoch_not_bumped(make_manager):
    leader = make_manager(1)
    log = seed(leader, (0, 2))
    leader.apply_partition_state(state(1, 3, [1, 2], partition_epoch=4))
    produce(leader, 3)                                     # LEO 5, all in epoch 3
    assert leader.partitions[KEY].leader_epoch_start_offset == 2
    # Same leader epoch, newer partition epoch (an ISR change): nothing about epochs moves.
    assert leader.apply_partition_state(state(1, 3, [1], partition_epoch=5)) == Errors.NONE
    assert leader.partitions[KEY].leader_epoch_start_offset == 2
    assert [tuple(e) for e in log.epoch_cache.entries] == [(0, 0), (3, 2)]
    assert leader.partition_state(TOPIC, 0).isr == [1]
    assert leader.partition_state(TOPIC, 0).partition_epoch == 5


def test_follower_states_not_reset_when_leader_epoch_not_bumped(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 3, [1, 2], partition_epoch=1))
    produce(leader, 4)
    assert fetch(leader, 2, 3, current_epoch=3).error_code == Errors.NONE
    before = leader.partitions[KEY].followers[2]
    assert before.log_end_offset == 3 and before.broker_epoch == BROKER_EPOCHS[2]
    leader.apply_partition_state(state(1, 3, [1, 2], partition_epoch=2))
    after = leader.partitions[KEY].followers[2]
    assert (after.log_end_offset, after.broker_epoch, after.last_fetch_time_ms) == \
        (3, BROKER_EPOCHS[2], before.last_fetch_time_ms)


def test_follower_states_reset_when_leader_epoch_bumped(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 3, [1, 2], partition_epoch=1))
    produce(leader, 4)
    fetch(leader, 2, 3, current_epoch=3)
    leader.apply_partition_state(state(1, 4, [1, 2], partition_epoch=2))
    follower = leader.partitions[KEY].followers[2]
    assert (follower.log_end_offset, follower.broker_epoch) == (-1, None)
    assert leader.partitions[KEY].leader_epoch_start_offset == 4
    assert log_of(leader).epoch_cache.latest_entry == (4, 4)


@pytest.mark.parametrize("stale", [dict(leader_epoch=5, partition_epoch=6),    # older partition epoch
                                   dict(leader_epoch=4, partition_epoch=9)],   # older leader epoch
                         ids=["older-partition-epoch", "older-leader-epoch"])
def test_partition_state_with_older_epoch_is_ignored(make_manager, stale):
    manager = make_manager(1)
    manager.apply_partition_state(state(1, 5, [1, 2], partition_epoch=7))
    before = manager.partition_state(TOPIC, 0)
    code = manager.apply_partition_state(state(2, stale["leader_epoch"], [2], partition_epoch=stale["partition_epoch"]))
    assert code == Errors.FENCED_LEADER_EPOCH
    assert manager.partition_state(TOPIC, 0) == before
    assert not manager.fetcher.has_partition(KEY)            # it did not become a follower


def test_guard_m30_off_applies_older_partition_state(make_manager, simulation):
    manager = make_manager(1)
    manager.apply_partition_state(state(1, 5, [1, 2], partition_epoch=7))
    with simulation.disabled("M30"):
        manager.apply_partition_state(state(2, 4, [2], partition_epoch=9))
    # The unsafe outcome the guard prevents: an older leadership record replaced the newer one.
    assert manager.partition_state(TOPIC, 0).leader_epoch == 4
    assert manager.partition_state(TOPIC, 0).leader == 2


def test_requests_from_an_older_controller_are_ignored(make_manager):
    manager = make_manager(1, controller_epoch=4)
    stale = LeaderAndIsrRequest(3000, 3, [state(1, 1, [1])])
    assert manager.handle_leader_and_isr(stale).error_code == Errors.STALE_CONTROLLER_EPOCH
    assert manager.partition_state(TOPIC, 0) is None
    manager.apply_metadata(MetadataUpdate(3, brokers(b2=BrokerInfo(2, 999, fenced=True))))
    assert manager.metadata[2] == BrokerInfo(2, BROKER_EPOCHS[2])
    current = LeaderAndIsrRequest(3000, 4, [state(1, 1, [1])])
    response = manager.handle_leader_and_isr(current)
    assert (response.error_code, response.partition_errors) == (Errors.NONE, {KEY: Errors.NONE})
    assert manager.partition_state(TOPIC, 0).leader == 1


# ---- OffsetForLeaderEpoch (7.3) ----------------------------------------------------------------

@pytest.mark.parametrize("current, expected", [(NO_EPOCH, Errors.NONE), (5, Errors.NONE),
                                               (4, Errors.FENCED_LEADER_EPOCH), (6, Errors.UNKNOWN_LEADER_EPOCH)])
def test_offset_for_leader_epoch_validation_for_leader(make_manager, current, expected):
    leader = make_manager(1)
    seed(leader, (2, 3))
    leader.apply_partition_state(state(1, 5, [1, 2]))
    answer = offset_for_epoch(leader, requested=5, current=current)
    assert answer.error_code == expected
    if expected == Errors.NONE:
        assert (answer.leader_epoch, answer.end_offset) == (5, 3)
    else:
        assert (answer.leader_epoch, answer.end_offset) == (NO_EPOCH, -1)


@pytest.mark.parametrize("current, expected", [(NO_EPOCH, Errors.NOT_LEADER_OR_FOLLOWER),
                                               (5, Errors.NOT_LEADER_OR_FOLLOWER),
                                               (4, Errors.FENCED_LEADER_EPOCH), (6, Errors.UNKNOWN_LEADER_EPOCH)])
def test_offset_for_leader_epoch_validation_for_follower(make_manager, current, expected):
    follower = make_manager(1)
    seed(follower, (2, 3))
    follower.apply_partition_state(state(2, 5, [1, 2]))
    assert offset_for_epoch(follower, requested=2, current=current).error_code == expected


def test_offset_for_leader_epoch_unknown_partition(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 5, [1, 2]))
    assert offset_for_epoch(leader, 5, topic="missing").error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_offset_for_leader_epoch_above_every_epoch_is_undefined(make_manager):
    leader = make_manager(1)
    seed(leader, (2, 3))
    leader.apply_partition_state(state(1, 5, [1, 2]))
    answer = offset_for_epoch(leader, requested=7)
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (Errors.NONE, NO_EPOCH, -1)
    answer = offset_for_epoch(leader, requested=1)              # below the first epoch: echoed (4.2 step 4)
    assert (answer.leader_epoch, answer.end_offset) == (1, 0)


# ---- fetch validation order (7.4) ----------------------------------------------------------------

@pytest.fixture
def leader5(make_manager):
    """Broker 1 leading epoch 5 with ISR [1] of replicas [1, 2, 3]; log 0@e0 1@e0 2@e2 3@e2, then e5."""
    leader = make_manager(1)
    seed(leader, (0, 2), (2, 2))
    leader.apply_partition_state(state(1, 5, [1]))
    return leader


@pytest.mark.parametrize("current, expected", [(4, Errors.FENCED_LEADER_EPOCH), (6, Errors.UNKNOWN_LEADER_EPOCH)])
def test_fetch_with_wrong_current_leader_epoch(leader5, current, expected):
    answer = fetch(leader5, 2, 0, current_epoch=current)
    assert answer.error_code == expected and answer.records == b""
    assert leader5.partitions[KEY].followers[2].log_end_offset == -1


def test_fetch_from_follower_checks_epoch_before_leadership(make_manager):
    follower = make_manager(1)
    seed(follower, (0, 2))
    follower.apply_partition_state(state(2, 5, [1, 2]))
    assert fetch(follower, 3, 0, current_epoch=5).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert fetch(follower, 3, 0).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert fetch(follower, 3, 0, current_epoch=4).error_code == Errors.FENCED_LEADER_EPOCH
    assert fetch(follower, 3, 0, current_epoch=6).error_code == Errors.UNKNOWN_LEADER_EPOCH


def test_fetch_from_unknown_partition(leader5):
    assert fetch(leader5, 2, 0, topic="missing").error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("current, expected", [(5, Errors.UNKNOWN_LEADER_EPOCH),
                                               (NO_EPOCH, Errors.NOT_LEADER_OR_FOLLOWER)])
def test_fetch_from_replica_not_in_assignment(leader5, current, expected):
    answer = fetch(leader5, 9, 0, current_epoch=current, replica_epoch=-1)
    assert answer.error_code == expected and answer.records == b""
    assert 9 not in leader5.partitions[KEY].followers
    # Epoch fencing comes before the assignment check.
    assert fetch(leader5, 9, 0, current_epoch=4, replica_epoch=-1).error_code == Errors.FENCED_LEADER_EPOCH


def test_fetch_reads_up_to_leo_for_replicas_and_hw_for_consumers(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 0, [1, 2], replicas=(1, 2)))
    produce(leader, 1)
    produce(leader, 1)                   # LEO 2, HW 0 (follower 2 in the ISR has not fetched)
    assert log_of(leader).high_watermark == 0
    assert fetch(leader, CONSUMER, 0).records == b""
    answer = fetch(leader, 2, 0, current_epoch=0)
    assert answer.error_code == Errors.NONE and len(answer.records) > 0
    assert answer.high_watermark == 0
    answer = fetch(leader, 2, 2, current_epoch=0)        # follower at LEO: HW moves to 2
    assert answer.high_watermark == 2
    assert fetch(leader, CONSUMER, 0).records == answer_bytes(log_of(leader), 0)


def test_fetch_answer_is_a_view_of_the_leader_segment_until_sent(make_manager):
    """A follower's fetch answer carries the leader's batches as a read-only view of its
    segment, not a copy (Kafka's FileRecords slice; an in-process follower appends it as it
    lies); messages.sent reads them out as bytes, as a transport does when it sends."""
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 0, [1, 2], replicas=(1, 2)))
    produce(leader, 3)
    produce(leader, 2)
    answer = fetch(leader, 2, 0, current_epoch=0)
    expected = bytes(log_of(leader).read(0, 1 << 20))
    assert isinstance(answer.records, memoryview) and answer.records.readonly
    assert answer.records == expected and len(expected) > 0
    response = FetchResponse([answer, FetchResponsePartition(TOPIC, 1, Errors.UNKNOWN_TOPIC_OR_PARTITION)])
    assert sent(response) is response
    assert type(answer.records) is bytes and answer.records == expected
    assert response.partitions[1].records == b""
    request = ProduceRequest(TOPIC, 0, expected, 1)
    assert sent(request) is request and request.records is expected


def test_a_fetch_from_a_sealed_segment_found_damaged_at_its_first_use_answers_the_error(tmp_path, now):
    """After a clean shutdown sealed segments are checked at their first use: a fetch that
    touches a damaged one answers KAFKA_STORAGE_ERROR (CorruptSegmentError's code) instead of
    raising out of handle_fetch; the rest of the log is served."""
    config = LogConfig(segment_bytes=600, fsync=False)
    with LogDir.open(tmp_path / "broker-1", config) as logdir:
        log = logdir.partition(TOPIC, 0)
        for i in range(20):
            log.append_as_leader([b"v%02d" % i * 10], 0)
        assert len(log.segments) > 2
        victim, tail = log.segments[0].log_path, log.segments[-1].base_offset
    os.truncate(victim, os.path.getsize(victim) - 5)        # its last batch cut short
    manager = ReplicaManager(1, LogDir.open(tmp_path / "broker-1", config), clock=lambda: now[0],
                             broker_epoch=BROKER_EPOCHS[1])
    try:
        manager.apply_metadata(MetadataUpdate(1, brokers()))
        manager.apply_partition_state(state(1, 1, [1, 2], replicas=(1, 2)))
        answer = fetch(manager, 2, 0, current_epoch=1)
        assert answer.error_code == Errors.KAFKA_STORAGE_ERROR and answer.records == b""
        answer = fetch(manager, 2, tail, current_epoch=1)
        assert answer.error_code == Errors.NONE and len(answer.records) > 0
        assert not manager.logdir.offline
    finally:
        manager.logdir.close()


def answer_bytes(log, offset):
    return bytes(log.read(offset, 1 << 20, max_offset=log.high_watermark))


@pytest.fixture
def leader4_diverged(make_manager):
    """Leader epoch 4; log 0-1 @e0, 2-3 @e2, 4-5 @e4 (LEO 6); replicas [1, 2, 3], ISR [1]."""
    leader = make_manager(1)
    seed(leader, (0, 2), (2, 2))
    leader.apply_partition_state(state(1, 4, [1]))
    produce(leader, 1)
    produce(leader, 1)
    assert [tuple(e) for e in log_of(leader).epoch_cache.entries] == [(0, 0), (2, 2), (4, 4)]
    return leader


def test_fetch_with_diverging_epoch_smaller_epoch(leader4_diverged):
    leader = leader4_diverged
    assert fetch(leader, 2, 1, current_epoch=4, last_fetched_epoch=0).error_code == Errors.NONE
    follower_before = dict(vars(leader.partitions[KEY].followers[2]))
    # The follower wrote epoch 1 (never seen by the leader) up to offset 3.
    answer = fetch(leader, 2, 3, current_epoch=4, last_fetched_epoch=1)
    assert answer.error_code == Errors.NONE
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (0, 2)
    assert answer.records == b""
    assert vars(leader.partitions[KEY].followers[2]) == follower_before       # no state update
    assert leader.take_alter_partition_requests() == []


def test_fetch_with_diverging_epoch_end_offset_below_fetch_offset(leader4_diverged):
    leader = leader4_diverged
    # The follower has epoch 2 up to offset 5; the leader's epoch 2 ends at 4.
    answer = fetch(leader, 2, 5, current_epoch=4, last_fetched_epoch=2)
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (2, 4)
    assert answer.records == b""
    assert leader.partitions[KEY].followers[2].log_end_offset == -1


def test_fetch_without_divergence_returns_data(leader4_diverged):
    answer = fetch(leader4_diverged, 2, 4, current_epoch=4, last_fetched_epoch=2)
    assert answer.error_code == Errors.NONE and answer.diverging_epoch is None
    assert answer.records == bytes(log_of(leader4_diverged).read(4, 1 << 20))
    assert leader4_diverged.partitions[KEY].followers[2].log_end_offset == 4


def test_fetch_offset_out_of_range(leader4_diverged, now):
    leader = leader4_diverged
    log = log_of(leader)
    assert log.high_watermark == 6
    beyond = fetch(leader, 2, 7, current_epoch=4)
    assert beyond.error_code == Errors.OFFSET_OUT_OF_RANGE
    unknown_epoch = fetch(leader, 2, 6, current_epoch=4, last_fetched_epoch=9)
    assert unknown_epoch.error_code == Errors.OFFSET_OUT_OF_RANGE
    assert leader.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, 3)).error_code == Errors.NONE
    below_start = fetch(leader, 2, 1, current_epoch=4)
    assert below_start.error_code == Errors.OFFSET_OUT_OF_RANGE
    assert below_start.log_start_offset == 3
    # Below the log start even when the last fetched epoch would diverge (6.4 step 3).
    assert fetch(leader, 2, 2, current_epoch=4, last_fetched_epoch=1).error_code == Errors.OFFSET_OUT_OF_RANGE
    assert leader.partitions[KEY].followers[2].log_end_offset == -1


# ---- ISR expansion (7.1, 8.2, 8.3) ---------------------------------------------------------------

def _leader_with_epoch_start_3(make_manager, **kwargs):
    """Log 0-2 in epoch 4 (HW 0), then broker 1 leads epoch 5 with ISR [1, 3]: the leader
    epoch start offset is 3 and the HW stays 0 until 3 fetches."""
    leader = make_manager(1, **kwargs)
    seed(leader, (4, 3))
    leader.apply_partition_state(state(1, 5, [1, 3]))
    assert leader.partitions[KEY].leader_epoch_start_offset == 3
    assert log_of(leader).high_watermark == 0
    return leader


def test_follower_does_not_join_isr_until_caught_up_to_leader_epoch_start(make_manager):
    leader = _leader_with_epoch_start_3(make_manager)
    for offset in (0, 1, 2):           # >= HW (0) but below the epoch start offset (3)
        assert fetch(leader, 2, offset, current_epoch=5).error_code == Errors.NONE
        assert leader.take_alter_partition_requests() == []
    fetch(leader, 2, 3, current_epoch=5)
    [request] = leader.take_alter_partition_requests()
    assert request.new_isr == [1, 2, 3]
    # The leader's own epoch, the follower's fetch epoch, -1 for 3 (not heard from yet).
    assert epochs_of(request) == [(1, 101), (2, 102), (3, -1)]
    assert (request.broker_id, request.broker_epoch, request.leader_epoch, request.partition_epoch) == (1, 101, 5, 0)
    assert request.leader_recovery_state == RECOVERED
    assert leader.partitions[KEY].maximal_isr == [1, 2, 3]
    assert leader.partition_state(TOPIC, 0).isr == [1, 3]      # committed ISR unchanged until answered


def test_guard_m9_off_adds_follower_before_epoch_start(make_manager, simulation):
    leader = _leader_with_epoch_start_3(make_manager)
    with simulation.disabled("M9"):
        fetch(leader, 2, 1, current_epoch=5)
    # Unsafe: a follower without the leader's epoch-start data is proposed for the ISR.
    assert [r.new_isr for r in leader.take_alter_partition_requests()] == [[1, 2, 3]]


def test_follower_does_not_join_isr_until_caught_up_to_high_watermark(make_manager):
    leader = make_manager(1)
    seed(leader, (4, 3))
    leader.apply_partition_state(state(1, 5, [1]))        # epoch start 3
    produce(leader, 3)                                    # LEO 6, HW 6 (ISR = leader alone)
    assert log_of(leader).high_watermark == 6
    fetch(leader, 2, 4, current_epoch=5)                  # past the epoch start, below the HW
    assert leader.take_alter_partition_requests() == []
    fetch(leader, 2, 6, current_epoch=5)
    [request] = leader.take_alter_partition_requests()
    assert epochs_of(request) == [(1, 101), (2, 102)]


def test_caught_up_follower_with_unknown_broker_epoch_joins_with_minus_one(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 1, [1]))
    fetch(leader, 2, 0, current_epoch=1, replica_epoch=-1)
    [request] = leader.take_alter_partition_requests()
    assert epochs_of(request) == [(1, 101), (2, -1)]


@pytest.mark.parametrize("info", [BrokerInfo(2, 102, fenced=True), BrokerInfo(2, 102, in_controlled_shutdown=True),
                                  None], ids=["fenced", "controlled-shutdown", "not-in-metadata"])
def test_isr_not_expanded_if_replica_is_ineligible(make_manager, info):
    leader = make_manager(1, metadata=brokers(b2=info))
    leader.apply_partition_state(state(1, 1, [1]))
    produce(leader, 2)
    answer = fetch(leader, 2, 2, current_epoch=1)       # fully caught up
    assert answer.error_code == Errors.NONE
    assert leader.partitions[KEY].followers[2].log_end_offset == 2
    assert leader.take_alter_partition_requests() == []
    # Once the metadata says the broker is active again, the next fetch adds it.
    leader.apply_metadata(MetadataUpdate(2, brokers()))
    fetch(leader, 2, 2, current_epoch=1)
    assert [r.new_isr for r in leader.take_alter_partition_requests()] == [[1, 2]]


def test_guard_m12_off_adds_fenced_follower(make_manager, simulation):
    leader = make_manager(1, metadata=brokers(b2=BrokerInfo(2, 102, fenced=True)))
    leader.apply_partition_state(state(1, 1, [1]))
    with simulation.disabled("M12"):
        fetch(leader, 2, 0, current_epoch=1)
    assert [r.new_isr for r in leader.take_alter_partition_requests()] == [[1, 2]]


@pytest.mark.parametrize("info, hw", [(BrokerInfo(2, 102, fenced=True), 4),
                                      (BrokerInfo(2, 102, in_controlled_shutdown=True), 4),
                                      (BrokerInfo(2, 102), 2)],
                         ids=["fenced", "controlled-shutdown", "eligible"])
def test_high_watermark_does_not_wait_for_fenced_or_shutting_down_follower(make_manager, info, hw):
    leader = make_manager(1, metadata=brokers(b2=info))
    leader.apply_partition_state(state(1, 1, [1], replicas=(1, 2)))
    produce(leader, 2)
    fetch(leader, 2, 2, current_epoch=1)                 # caught up at 2
    produce(leader, 2)                                   # LEO 4
    # An eligible caught-up follower (here also a pending ISR addition) holds the HW at its LEO;
    # a fenced or shutting-down one does not.
    assert log_of(leader).high_watermark == hw


def test_fetch_with_stale_broker_epoch_is_fenced(make_manager):
    leader = make_manager(1, metadata=brokers(b2=BrokerInfo(2, 202)))
    leader.apply_partition_state(state(1, 1, [1]))
    produce(leader, 2)
    assert fetch(leader, 2, 1, current_epoch=1, replica_epoch=202).error_code == Errors.NONE
    stored = dict(vars(leader.partitions[KEY].followers[2]))
    answer = fetch(leader, 2, 2, current_epoch=1, replica_epoch=150)
    assert answer.error_code == Errors.NOT_LEADER_OR_FOLLOWER and answer.records == b""
    assert vars(leader.partitions[KEY].followers[2]) == stored
    assert leader.take_alter_partition_requests() == []


def test_guard_m13_off_accepts_stale_broker_epoch(make_manager, simulation):
    leader = make_manager(1, metadata=brokers(b2=BrokerInfo(2, 202)))
    leader.apply_partition_state(state(1, 1, [1]))
    with simulation.disabled("M13"):
        answer = fetch(leader, 2, 0, current_epoch=1, replica_epoch=150)
    # Unsafe: the old incarnation's fetch is accepted and it is proposed for the ISR.
    assert answer.error_code == Errors.NONE
    assert [epochs_of(r) for r in leader.take_alter_partition_requests()] == [[(1, 101), (2, 150)]]


def test_isr_expands_only_when_broker_epochs_match(make_manager):
    # The follower restarted as epoch 250 before the leader's metadata knew of it.
    leader = make_manager(1, metadata=brokers(b2=BrokerInfo(2, 202)))
    leader.apply_partition_state(state(1, 1, [1]))
    answer = fetch(leader, 2, 0, current_epoch=1, replica_epoch=250)
    assert answer.error_code == Errors.NONE                       # newer than the metadata: accepted
    assert leader.partitions[KEY].followers[2].broker_epoch == 250
    assert leader.take_alter_partition_requests() == []           # ... but not ISR-eligible yet
    leader.apply_metadata(MetadataUpdate(2, brokers(b2=BrokerInfo(2, 250))))
    fetch(leader, 2, 0, current_epoch=1, replica_epoch=250)
    [request] = leader.take_alter_partition_requests()
    assert epochs_of(request) == [(1, 101), (2, 250)]


# ---- AlterPartition responses (8.2) --------------------------------------------------------------

@pytest.fixture
def expanding(make_manager):
    """Leader 1 (epoch 3, partition epoch 7, ISR [1]) with follower 2 caught up at 2 and its
    AlterPartition [1, 2] in flight."""
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 3, [1], replicas=(1, 2), partition_epoch=7))
    produce(leader, 2)
    fetch(leader, 2, 2, current_epoch=3)
    [request] = leader.take_alter_partition_requests()
    assert request.new_isr == [1, 2]
    return leader, request


def test_alter_partition_success_adopts_isr_and_partition_epoch(expanding, now):
    leader, request = expanding
    accept(leader, request)
    st = leader.partition_state(TOPIC, 0)
    assert (st.isr, st.partition_epoch) == ([1, 2], 8)
    assert leader.partitions[KEY].inflight is None
    # The next change (2 lags past replica_lag_time_max_ms) is built on the new partition epoch.
    now[0] += 60_000
    leader.tick()
    [shrink] = leader.take_alter_partition_requests()
    assert (shrink.new_isr, shrink.partition_epoch) == ([1], 8)


@pytest.mark.parametrize("code", [Errors.INELIGIBLE_REPLICA, Errors.OPERATION_NOT_ATTEMPTED])
def test_ineligible_replica_reverts_to_committed_isr_and_is_not_retried(expanding, code):
    leader, request = expanding
    reject(leader, request, code)
    p = leader.partitions[KEY]
    assert p.inflight is None and p.isr == [1] and p.maximal_isr == [1]
    assert leader.take_alter_partition_requests() == []
    leader.retry_alter_partition(TOPIC, 0)                       # nothing left to retry
    assert leader.take_alter_partition_requests() == []


def test_an_invalid_alter_partition_gives_up(expanding):
    leader, request = expanding
    reject(leader, request, Errors.INVALID_REQUEST)      # not applied: back to the committed ISR
    assert leader.partitions[KEY].inflight is None
    assert leader.take_alter_partition_requests() == []
    assert leader.partition_state(TOPIC, 0).isr == [1]


@pytest.mark.parametrize("code", [Errors.FENCED_LEADER_EPOCH, Errors.INVALID_UPDATE_VERSION,
                                  Errors.UNKNOWN_TOPIC_OR_PARTITION])
def test_non_retriable_alter_partition_errors_keep_the_change_pending(expanding, code):
    # The error may answer a duplicate of a request the controller applied (simulator seed
    # 107193: INVALID_UPDATE_VERSION for the copy, the first answer lost): until metadata says
    # otherwise the high watermark must keep waiting for the proposed member (I4).
    leader, request = expanding
    reject(leader, request, code)
    assert leader.take_alter_partition_requests() == []          # no retry
    assert leader.partitions[KEY].maximal_isr == [1, 2]
    leader.apply_partition_state(state(1, 3, [1, 2], replicas=(1, 2), partition_epoch=request.partition_epoch + 1))
    assert leader.partitions[KEY].inflight is None and leader.partition_state(TOPIC, 0).isr == [1, 2]


def test_newer_metadata_replaces_a_pending_change_it_does_not_match(expanding):
    leader, request = expanding
    reject(leader, request, Errors.INVALID_UPDATE_VERSION)
    leader.apply_partition_state(state(1, 3, [1], replicas=(1, 2), partition_epoch=request.partition_epoch + 1))
    assert leader.partitions[KEY].inflight is None and leader.partitions[KEY].maximal_isr == [1]


@pytest.mark.parametrize("code", [Errors.UNKNOWN_SERVER_ERROR, Errors.REQUEST_TIMED_OUT, Errors.NOT_CONTROLLER])
def test_retriable_alter_partition_error_resends_same_broker_epochs(make_manager, code):
    leader = make_manager(1, metadata=brokers(b2=BrokerInfo(2, 202)))
    leader.apply_partition_state(state(1, 3, [1], replicas=(1, 2)))
    fetch(leader, 2, 0, current_epoch=3, replica_epoch=202)
    [request] = leader.take_alter_partition_requests()
    sent = epochs_of(request)
    assert sent == [(1, 101), (2, 202)]
    # Meanwhile broker 2 restarts as epoch 303 and fetches again.
    leader.apply_metadata(MetadataUpdate(2, brokers(b2=BrokerInfo(2, 303))))
    fetch(leader, 2, 0, current_epoch=3, replica_epoch=303)
    reject(leader, request, code)
    [again] = leader.take_alter_partition_requests()
    assert epochs_of(again) == sent                 # the controller must judge the epochs first seen
    assert leader.partitions[KEY].maximal_isr == [1, 2]


def test_guard_m15_off_drops_broker_epochs_on_retry(expanding, simulation):
    leader, request = expanding
    with simulation.disabled("M15"):
        reject(leader, request, Errors.UNKNOWN_SERVER_ERROR)
    [again] = leader.take_alter_partition_requests()
    assert epochs_of(again) == [(1, -1), (2, -1)]       # unsafe: the epoch check is skipped


def test_new_leader_elected_stays_pending(expanding):
    leader, request = expanding
    reject(leader, request, Errors.NEW_LEADER_ELECTED)
    assert leader.partitions[KEY].inflight is request
    assert leader.take_alter_partition_requests() == []


def test_stale_alter_partition_response_is_ignored(expanding):
    leader, request = expanding
    leader.apply_partition_state(state(1, 4, [1], replicas=(1, 2), partition_epoch=9))   # new leader epoch
    accept(leader, request)
    st = leader.partition_state(TOPIC, 0)
    assert (st.isr, st.partition_epoch, st.leader_epoch) == ([1], 9, 4)


# ---- high watermark (7.1, 8.2) -------------------------------------------------------------------

def test_high_watermark_is_min_over_leader_and_isr(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 1, [1, 2, 3]))
    produce(leader, 6)
    assert log_of(leader).high_watermark == 0
    fetch(leader, 2, 4, current_epoch=1)
    assert log_of(leader).high_watermark == 0              # 3 has not fetched
    fetch(leader, 3, 2, current_epoch=1)
    assert log_of(leader).high_watermark == 2
    fetch(leader, 3, 6, current_epoch=1)
    assert log_of(leader).high_watermark == 4
    fetch(leader, 2, 6, current_epoch=1)
    assert log_of(leader).high_watermark == 6


def _pending_addition(make_manager, now):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 1, [1], replicas=(1, 2)))
    produce(leader, 2)
    fetch(leader, 2, 2, current_epoch=1)
    assert leader.partitions[KEY].maximal_isr == [1, 2]
    now[0] += 60_000                                        # 2 is no longer "caught up" by time
    produce(leader, 3)
    return leader


def test_high_watermark_waits_for_pending_isr_addition(make_manager, now):
    leader = _pending_addition(make_manager, now)
    assert log_of(leader).high_watermark == 2


def test_guard_m11_off_ignores_pending_isr_addition(make_manager, now, simulation):
    with simulation.disabled("M11"):
        leader = _pending_addition(make_manager, now)
        assert log_of(leader).high_watermark == 5       # unsafe: passes a replica about to join the ISR


def test_high_watermark_does_not_advance_below_min_isr(make_manager):
    leader = make_manager(1, min_insync_replicas=2)
    leader.apply_partition_state(state(1, 1, [1], replicas=(1, 2)))
    produce(leader, 3)
    assert log_of(leader).high_watermark == 0
    fetch(leader, 2, 3, current_epoch=1)                     # caught up but not yet in the ISR
    assert log_of(leader).high_watermark == 0
    [request] = leader.take_alter_partition_requests()
    accept(leader, request)
    assert log_of(leader).high_watermark == 3


def test_high_watermark_never_moves_back(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 1, [1, 2], replicas=(1, 2)))
    produce(leader, 4)
    fetch(leader, 2, 4, current_epoch=1)
    assert log_of(leader).high_watermark == 4
    fetch(leader, 2, 1, current_epoch=1)                     # a late, lower fetch
    assert log_of(leader).high_watermark == 4


# ---- produce ----------------------------------------------------------------------------------

@pytest.mark.parametrize("acks", [0, 1])
def test_produce_acks_0_and_1_answer_at_once(make_manager, acks):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 2, [1, 2], replicas=(1, 2)))
    produce(leader, 2)
    answer = produce(leader, 3, acks=acks)
    assert (answer.error_code, answer.base_offset) == (Errors.NONE, 2)
    assert log_of(leader).log_end_offset == 5
    assert [b.partition_leader_epoch for b in log_of(leader).batches()] == [2, 2]


def test_produce_acks_all_answers_when_high_watermark_passes(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 2, [1, 2], replicas=(1, 2)))
    answers = []
    assert produce(leader, 3, acks=-1, callback=answers.append) is None
    assert answers == []
    fetch(leader, 2, 2, current_epoch=2)
    assert answers == []                                      # HW 2 < 3
    fetch(leader, 2, 3, current_epoch=2)
    [answer] = answers
    assert (answer.error_code, answer.base_offset) == (Errors.NONE, 0)


def test_a_retried_batch_below_the_high_watermark_is_answered_at_once(make_manager):
    """Kafka's tryCompleteElseWatch: an idempotent producer retries a batch (its answer was
    lost, e.g. in a leader change); the leader finds the duplicate, and its offsets are already
    below the high watermark -- the acks=all answer must come now, not when the high watermark
    next moves (found by the multi-process cluster test: a 30 s stall, then REQUEST_TIMED_OUT)."""
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 2, [1, 2], replicas=(1, 2)))
    batch = build_batch([b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0)
    first = []
    leader.handle_produce(ProduceRequest(TOPIC, 0, batch, -1), first.append)
    fetch(leader, 2, 2, current_epoch=2)                       # the follower has it: HW 2
    assert [(a.error_code, a.base_offset) for a in first] == [(Errors.NONE, 0)]
    retried = []
    assert leader.handle_produce(ProduceRequest(TOPIC, 0, batch, -1), retried.append) is None
    assert [(a.error_code, a.base_offset) for a in retried] == [(Errors.NONE, 0)]
    assert log_of(leader).log_end_offset == 2                  # nothing written twice


def test_produce_acks_all_needs_min_isr(make_manager):
    leader = make_manager(1, min_insync_replicas=2)
    leader.apply_partition_state(state(1, 2, [1], replicas=(1, 2)))
    answers = []
    answer = produce(leader, 1, acks=-1, callback=answers.append)
    assert answer.error_code == Errors.NOT_ENOUGH_REPLICAS
    assert answers == [answer]
    assert log_of(leader).log_end_offset == 0                  # nothing appended


def test_produce_invalid_acks(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 2, [1]))
    assert produce(leader, 1, acks=2).error_code == Errors.INVALID_REQUIRED_ACKS
    assert log_of(leader).log_end_offset == 0


def test_produce_on_follower(make_manager):
    follower = make_manager(1)
    follower.apply_partition_state(state(2, 2, [1, 2]))
    assert produce(follower, 1).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert log_of(follower).log_end_offset == 0


def test_produce_acks_all_times_out(make_manager, now):
    leader = make_manager(1, produce_timeout_ms=500)
    leader.apply_partition_state(state(1, 2, [1, 2], replicas=(1, 2)))
    answers = []
    produce(leader, 1, acks=-1, callback=answers.append)
    now[0] += 499
    leader.tick()
    assert answers == []
    now[0] += 1
    leader.tick()
    assert [a.error_code for a in answers] == [Errors.REQUEST_TIMED_OUT]
    fetch(leader, 2, 1, current_epoch=2)                       # a later HW move answers nothing twice
    assert len(answers) == 1


def test_pending_produce_fails_when_leadership_is_lost(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 2, [1, 2], replicas=(1, 2)))
    answers = []
    produce(leader, 1, acks=-1, callback=answers.append)
    leader.apply_partition_state(state(2, 3, [1, 2], replicas=(1, 2)))
    assert [a.error_code for a in answers] == [Errors.NOT_LEADER_OR_FOLLOWER]


# ---- KIP-704: RECOVERING leaders (8.1, 7.5) ----------------------------------------------------------

def _recovering_answers(manager):
    return {
        "fetch": fetch(manager, 2, 0, current_epoch=4).error_code,
        "consumer-fetch": fetch(manager, CONSUMER, 0).error_code,
        "produce": produce(manager, 1).error_code,
        "list-offsets": list_offsets(manager, EARLIEST_TIMESTAMP).error_code,
        "delete-records": manager.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, -1)).error_code,
        "offset-for-leader-epoch": offset_for_epoch(manager, 4, 4).error_code,
    }


def test_recovering_leader_refuses_until_recovered_is_accepted(make_manager):
    hooked = []
    leader = make_manager(1, recovery_hook=lambda p: hooked.append(p.key) or False)
    seed(leader, (3, 2))
    leader.apply_partition_state(state(1, 4, [1], recovery=RECOVERING))
    assert hooked == [KEY]
    refused = dict.fromkeys(_recovering_answers(leader), Errors.NOT_LEADER_OR_FOLLOWER)
    assert _recovering_answers(leader) == refused
    assert leader.take_alter_partition_requests() == []         # neither expansion nor RECOVERED yet
    assert log_of(leader).log_end_offset == 2                   # the refused produce wrote nothing

    leader.complete_leader_recovery(TOPIC, 0)
    [request] = leader.take_alter_partition_requests()
    assert request.leader_recovery_state == RECOVERED
    assert epochs_of(request) == [(1, 101)]
    assert (request.leader_epoch, request.partition_epoch) == (4, 0)
    assert _recovering_answers(leader) == refused               # not until the controller accepts
    assert leader.take_alter_partition_requests() == []

    accept(leader, request)
    assert leader.partition_state(TOPIC, 0).leader_recovery_state == RECOVERED
    assert produce(leader, 1).error_code == Errors.NONE
    assert offset_for_epoch(leader, 4, 4).error_code == Errors.NONE
    assert fetch(leader, 2, 3, current_epoch=4).error_code == Errors.NONE
    assert [r.new_isr for r in leader.take_alter_partition_requests()] == [[1, 2]]   # expansion resumes


@pytest.mark.parametrize("hook", [None, lambda p: True], ids=["no-hook", "hook-done"])
def test_recovery_without_pending_hook_reports_recovered_at_once(make_manager, hook):
    leader = make_manager(1, recovery_hook=hook)
    leader.apply_partition_state(state(1, 4, [1], recovery=RECOVERING))
    [request] = leader.take_alter_partition_requests()
    assert (request.new_isr, request.leader_recovery_state) == ([1], RECOVERED)


def test_guard_m17_off_serves_while_recovering(make_manager, simulation):
    leader = make_manager(1, recovery_hook=lambda p: False)
    leader.apply_partition_state(state(1, 4, [1], recovery=RECOVERING))
    with simulation.disabled("M17"):
        answers = _recovering_answers(leader)
        assert answers["fetch"] == Errors.NONE and answers["produce"] == Errors.NONE
        # Even then the ISR is not expanded while RECOVERING (ISR must stay [leader]).
        assert leader.take_alter_partition_requests() == []


def test_follower_refuses_consumer_fetch_while_recovering(make_manager):
    follower = make_manager(2)
    assert fetch(follower, CONSUMER, 0).error_code != Errors.NONE    # follower reads are opt-in (KIP-392)
    follower.follower_reads = True
    seed(follower, (3, 2))
    log_of(follower).update_high_watermark(2)
    follower.apply_partition_state(state(1, 4, [1], recovery=RECOVERING))
    assert fetch(follower, CONSUMER, 0).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    follower.apply_partition_state(state(1, 4, [1], partition_epoch=1, recovery=RECOVERED))
    answer = fetch(follower, CONSUMER, 0)
    assert answer.error_code == Errors.NONE and answer.records == answer_bytes(log_of(follower), 0)


# ---- KIP-570 StopReplica (8.4) -------------------------------------------------------------------

def stop_replica(manager, leader_epoch, *, delete=False, controller_epoch=1, topic=TOPIC):
    request = StopReplicaRequest(3000, controller_epoch, 101, [StopReplicaPartition(topic, 0, leader_epoch, delete)])
    return manager.handle_stop_replica(request)


def _partition_dir(manager, topic=TOPIC):
    return os.path.join(manager.logdir.path, f"{topic}-0")


@pytest.mark.parametrize("epoch, expected", [(4, Errors.FENCED_LEADER_EPOCH), (5, Errors.NONE), (6, Errors.NONE),
                                             (NO_EPOCH, Errors.NONE), (EPOCH_DURING_DELETE, Errors.NONE)],
                         ids=["older", "equal", "newer", "no-epoch", "during-delete"])
@pytest.mark.parametrize("delete", [False, True], ids=["keep", "delete"])
def test_stop_replica_leader_epoch(make_manager, epoch, expected, delete):
    manager = make_manager(1)
    seed(manager, (5, 2))
    manager.apply_partition_state(state(2, 5, [1, 2]))
    response = stop_replica(manager, epoch, delete=delete)
    assert response.error_code == Errors.NONE
    assert response.partition_errors == {KEY: expected}
    if expected == Errors.FENCED_LEADER_EPOCH:
        assert manager.partition_state(TOPIC, 0).leader_epoch == 5
        assert manager.fetcher.has_partition(KEY)
        assert os.path.isdir(_partition_dir(manager))
        assert log_of(manager).log_end_offset == 2
    else:
        assert manager.partition_state(TOPIC, 0) is None
        assert not manager.fetcher.has_partition(KEY)
        assert os.path.isdir(_partition_dir(manager)) is not delete
        assert (KEY in manager.logdir.partitions()) is not delete


def test_stop_replica_with_stale_controller_epoch(make_manager):
    manager = make_manager(1, controller_epoch=7)
    manager.apply_partition_state(state(2, 5, [1, 2]))
    response = stop_replica(manager, 6, delete=True, controller_epoch=6)
    assert response.error_code == Errors.STALE_CONTROLLER_EPOCH
    assert manager.partition_state(TOPIC, 0) is not None and os.path.isdir(_partition_dir(manager))


def test_stop_replica_for_partition_not_hosted(make_manager):
    manager = make_manager(1)
    assert stop_replica(manager, 3, topic="absent").partition_errors == {("absent", 0): Errors.NONE}
    # A log on disk without leadership state is still deleted when asked.
    manager.logdir.partition("orphan", 0)
    assert os.path.isdir(_partition_dir(manager, "orphan"))
    assert stop_replica(manager, 3, topic="orphan", delete=True).partition_errors == {("orphan", 0): Errors.NONE}
    assert not os.path.isdir(_partition_dir(manager, "orphan"))


def test_guard_m16_off_stops_replica_with_older_epoch(make_manager, simulation):
    manager = make_manager(1)
    manager.apply_partition_state(state(2, 5, [1, 2]))
    with simulation.disabled("M16"):
        response = stop_replica(manager, 4, delete=True)
    assert response.partition_errors == {KEY: Errors.NONE}          # unsafe: a stale request deleted it
    assert not os.path.isdir(_partition_dir(manager))


# ---- ListOffsets and DeleteRecords ---------------------------------------------------------------

def test_list_offsets_earliest_latest_and_timestamp(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 2, [1, 2], replicas=(1, 2)))
    for i, ts in enumerate((1_000, 2_000, 3_000, 4_000)):
        leader.handle_produce(ProduceRequest(TOPIC, 0, build_batch([Record(timestamp=ts, value=b"v%d" % i)]), 1))
    fetch(leader, 2, 2, current_epoch=2)                       # HW 2, LEO 4
    earliest = list_offsets(leader, EARLIEST_TIMESTAMP)
    assert (earliest.error_code, earliest.offset) == (Errors.NONE, 0)
    latest = list_offsets(leader, LATEST_TIMESTAMP)
    assert (latest.offset, latest.leader_epoch) == (2, 2)        # consumers see the HW
    assert list_offsets(leader, LATEST_TIMESTAMP, replica_id=2).offset == 4    # replicas the LEO
    by_time = list_offsets(leader, 1_500)
    assert (by_time.offset, by_time.timestamp, by_time.leader_epoch) == (1, 2_000, 2)
    assert list_offsets(leader, 2_500).offset == -1               # only found above the HW
    assert list_offsets(leader, 2_500, replica_id=2).offset == 2
    assert list_offsets(leader, LATEST_TIMESTAMP, current_epoch=1).error_code == Errors.FENCED_LEADER_EPOCH
    assert list_offsets(leader, LATEST_TIMESTAMP, current_epoch=3).error_code == Errors.UNKNOWN_LEADER_EPOCH


def test_list_offsets_not_available_until_new_leader_hw_reaches_epoch_start(make_manager):
    leader = make_manager(1)
    seed(leader, (0, 3))
    leader.apply_partition_state(state(1, 1, [1, 2], replicas=(1, 2)))     # epoch start 3, HW 0
    assert list_offsets(leader, LATEST_TIMESTAMP).error_code == Errors.OFFSET_NOT_AVAILABLE
    assert list_offsets(leader, EARLIEST_TIMESTAMP).offset == 0
    assert list_offsets(leader, LATEST_TIMESTAMP, replica_id=2).offset == 3
    fetch(leader, 2, 3, current_epoch=1)
    latest = list_offsets(leader, LATEST_TIMESTAMP)
    assert (latest.error_code, latest.offset) == (Errors.NONE, 3)


def test_list_offsets_on_follower(make_manager):
    follower = make_manager(1)
    follower.apply_partition_state(state(2, 1, [1, 2]))
    assert list_offsets(follower, LATEST_TIMESTAMP).error_code == Errors.NOT_LEADER_OR_FOLLOWER


def test_delete_records(make_manager):
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 1, [1, 2], replicas=(1, 2)))
    for _ in range(5):
        produce(leader, 1)
    fetch(leader, 2, 3, current_epoch=1)                       # HW 3, LEO 5
    above = leader.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, 4))
    assert above.error_code == Errors.OFFSET_OUT_OF_RANGE
    assert log_of(leader).log_start_offset == 0
    done = leader.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, 2))
    assert (done.error_code, done.low_watermark) == (Errors.NONE, 2)
    to_hw = leader.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, -1))
    assert (to_hw.error_code, to_hw.low_watermark) == (Errors.NONE, 3)
    assert list_offsets(leader, EARLIEST_TIMESTAMP).offset == 3
    assert fetch(leader, CONSUMER, 2).error_code == Errors.OFFSET_OUT_OF_RANGE


def test_delete_records_on_follower(make_manager):
    follower = make_manager(1)
    follower.apply_partition_state(state(2, 1, [1, 2]))
    answer = follower.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, -1))
    assert answer.error_code == Errors.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("clean", [True, False])
def test_after_a_crash_the_checkpointed_high_watermark_is_capped_at_the_recovery_point(tmp_path, now, clean):
    # Above the recovery point a crash may give back an older, divergent log; the checkpointed
    # high watermark does not vouch for it.  The log keeps Kafka's value (storage users see
    # it); the replica layer lowers it until the leader's answers raise it again.
    from storage.sim.cluster import crash_logdir
    path = tmp_path / "broker"
    logdir = LogDir.open(path, LogConfig(fsync=False))
    log = logdir.partition(TOPIC, 0)
    log.append_as_leader([b"a", b"b"], 0)
    logdir.flush()                                # recovery point 2
    log.append_as_leader([b"c", b"d"], 0)
    log.update_high_watermark(4)
    logdir.checkpoint()
    if clean:
        logdir.close()
    else:
        crash_logdir(logdir)                      # no clean-shutdown marker
    logdir = LogDir.open(path, LogConfig(fsync=False))
    assert logdir.partition(TOPIC, 0).high_watermark == 4
    manager = ReplicaManager(2, logdir, clock=lambda: now[0], broker_epoch=BROKER_EPOCHS.get(2, -1))
    manager.apply_metadata(MetadataUpdate(1, brokers()))
    manager.apply_partition_state(state(1, 1, [1, 2]))
    assert logdir.partition(TOPIC, 0).high_watermark == (4 if clean else 2)
    logdir.close()


@pytest.mark.parametrize("addressed_to, expected", [(100, Errors.STALE_BROKER_EPOCH), (101, Errors.NONE), (-1, Errors.NONE)])
def test_controller_requests_for_an_earlier_incarnation_are_refused(make_manager, addressed_to, expected):
    # KIP-380 (simulator seed 104375): a LeaderAndIsr sent to the previous incarnation -- leader
    # in an epoch the controller has since ended -- must not make the restarted, emptied broker
    # lead; nor may a StopReplica meant for it remove the partition.
    manager = make_manager(1, broker_epoch=101)
    answer = manager.handle_leader_and_isr(LeaderAndIsrRequest(3000, 1, [state(1, 3, [1, 2])], addressed_to))
    assert answer.error_code == expected
    assert (KEY in manager.partitions) == (expected == Errors.NONE)
    stop = StopReplicaRequest(3000, 1, addressed_to, [StopReplicaPartition(TOPIC, 0, 3, False)])
    assert manager.handle_stop_replica(stop).error_code == expected


# ---- an offline log dir (M31; Kafka's ReplicaManager.handleLogDirFailure) ---------------------------

class _FailingWrites(sio.PosixIO):
    """The POSIX seam with every pwrite failing (EIO) once armed."""

    armed = False

    def pwrite(self, fd, data, offset):
        if self.armed:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return super().pwrite(fd, data, offset)


def _offline_leader(make_manager, seam):
    """Broker 1 leads with ISR [1, 2]; an acks=-1 produce waits for the follower; then the log
    dir fails under a second produce."""
    leader = make_manager(1)
    leader.apply_partition_state(state(1, 2, [1, 2], replicas=(1, 2)))
    waiting = []
    assert produce(leader, 3, acks=-1, callback=waiting.append) is None
    seam.armed = True
    failed = produce(leader, 1, acks=1)
    return leader, waiting, failed


def test_offline_log_dir_answers_storage_error_and_acknowledges_nothing(make_manager):
    seam = _FailingWrites()
    with sio.using(seam):
        leader, waiting, failed = _offline_leader(make_manager, seam)
        assert failed.error_code == Errors.KAFKA_STORAGE_ERROR
        assert leader.offline and leader.logdir.offline
        # The produce that waited for the follower is failed, not left to a later acknowledgement.
        assert [a.error_code for a in waiting] == [Errors.KAFKA_STORAGE_ERROR]
        # The follower's fetch past the batch would have moved the high watermark: it is refused.
        assert fetch(leader, 2, 3, current_epoch=2).error_code == Errors.KAFKA_STORAGE_ERROR
        assert fetch(leader, CONSUMER, 0).error_code == Errors.KAFKA_STORAGE_ERROR
        answer = leader.handle(FetchRequest(2, BROKER_EPOCHS[2], [FetchPartition(TOPIC, 0, 3, 2)]))
        assert [p.error_code for p in answer.partitions] == [Errors.KAFKA_STORAGE_ERROR]
        assert leader.handle(ListOffsetsRequest(CONSUMER, TOPIC, 0, LATEST_TIMESTAMP, NO_EPOCH)).error_code \
            == Errors.KAFKA_STORAGE_ERROR
        assert produce(leader, 1, acks=-1, callback=waiting.append).error_code == Errors.KAFKA_STORAGE_ERROR
        assert leader.fetcher.partitions == {}
    with pytest.raises(errors.LogDirOfflineError):
        leader.logdir.close()


def test_guard_m31_off_serves_from_a_failed_log_dir(make_manager, simulation):
    # The mutation the simulator's I16 oracle catches (seed 12 in regressions.json): without
    # M31 a consumer is served from a dir whose page cache is in an unknown state, and a waiting
    # produce is never answered.
    simulation.disable("M31")
    seam = _FailingWrites()
    with sio.using(seam):
        leader, waiting, failed = _offline_leader(make_manager, seam)
        assert failed.error_code == Errors.KAFKA_STORAGE_ERROR and leader.logdir.offline
        assert fetch(leader, CONSUMER, 0).error_code == Errors.NONE    # served from a failed dir
        assert waiting == []                                            # and left waiting
    with pytest.raises(errors.LogDirOfflineError):
        leader.logdir.close()
