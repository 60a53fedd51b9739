"""Transactions through the replica manager: read_committed fetches bounded by the last stable
offset with the aborted transactions listed, and WriteTxnMarkers from a coordinator (our
version of ReplicaManagerTest's testReadCommittedFetchLimitedAtLSO and
testDelayedFetchIncludesAbortedTransactions -- without the fetch purgatory, which this replica
manager does not have -- and of KafkaApisTest's WriteTxnMarkers error cases)."""
from __future__ import annotations

import pytest
from test_replica import CONSUMER, TOPIC, fetch, log_of, make_manager, now, state  # noqa: F401 (fixtures)

from storage import build_batch
from storage.core.errors import Errors
from storage.replication.messages import (
    READ_COMMITTED,
    AbortedTransaction,
    FetchPartition,
    FetchRequest,
    ProduceRequest,
    TxnMarker,
    WriteTxnMarkersRequest,
)

PID, EPOCH = 234, 5


@pytest.fixture
def make(make_manager):  # noqa: F811 (test_replica's harness fixture, imported above)
    return make_manager


def txn_produce(manager, sequence: int, *, pid: int = PID):
    batch = build_batch([b"message %d" % sequence], producer_id=pid, producer_epoch=EPOCH, base_sequence=sequence,
                        is_transactional=True)
    return manager.handle_produce(ProduceRequest(TOPIC, 0, batch, 1))


def marker(manager, commit: bool, *, partitions=((TOPIC, 0),), pid: int = PID, callback=None):
    request = WriteTxnMarkersRequest([TxnMarker(pid, EPOCH, commit, list(partitions), coordinator_epoch=0)])
    return manager.handle_write_txn_markers(request, callback)


def consume(manager, offset: int = 0, *, isolation: int = READ_COMMITTED):
    request = FetchRequest(CONSUMER, -1, [FetchPartition(TOPIC, 0, offset)], isolation_level=isolation)
    [answer] = manager.handle_fetch(request).partitions
    return answer


def leader_of_two(make):
    leader = make(1)
    leader.apply_partition_state(state(1, 0, [1, 2], replicas=(1, 2)))
    return leader


def test_read_committed_fetch_limited_at_the_lso(make):
    leader = leader_of_two(make)
    for sequence in range(3):
        assert txn_produce(leader, sequence).error_code == Errors.NONE
    fetch(leader, 2, 3, current_epoch=0)                   # the follower moves the HW to 3
    answer = consume(leader)
    assert answer.error_code == Errors.NONE and answer.records == b""   # the LSO is stuck at 0
    assert (answer.last_stable_offset, answer.aborted_transactions) == (0, [])
    assert consume(leader, isolation=0).records != b""    # read_uncommitted sees them, up to the HW

    assert marker(leader, True).errors == {PID: {(TOPIC, 0): Errors.NONE}}
    answer = consume(leader)                                # committed, but the marker is not replicated
    assert answer.records == b"" and answer.last_stable_offset == 0
    fetch(leader, 2, 4, current_epoch=0)
    answer = consume(leader)
    assert (answer.last_stable_offset, answer.aborted_transactions) == (4, [])
    assert len(answer.records) == len(bytes(log_of(leader).read(0, 1 << 20)))     # all four batches


def test_a_read_committed_fetch_lists_the_aborted_transaction(make):
    leader = leader_of_two(make)
    for sequence in range(3):
        txn_produce(leader, sequence)
    marker(leader, False)
    fetch(leader, 2, 4, current_epoch=0)
    answer = consume(leader)
    assert answer.last_stable_offset == 4
    assert answer.aborted_transactions == [AbortedTransaction(PID, 0)]
    assert consume(leader, isolation=0).aborted_transactions is None       # read_uncommitted: Kafka's null
    follower_view = leader.handle_fetch(FetchRequest(2, 102, [FetchPartition(TOPIC, 0, 0, 0)],
                                                     isolation_level=READ_COMMITTED)).partitions[0]
    assert follower_view.aborted_transactions is None and follower_view.records != b""   # replicas read it all


def test_write_txn_markers_answers_each_partition(make):
    # KafkaApisTest: an unknown partition gets UNKNOWN_TOPIC_OR_PARTITION, the good one NONE.
    leader = leader_of_two(make)
    txn_produce(leader, 0)
    response = marker(leader, False, partitions=[(TOPIC, 0), ("nope", 0)])
    assert response.errors == {PID: {(TOPIC, 0): Errors.NONE, ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}}
    entry = log_of(leader).producer_state.active_producers[PID]
    assert entry.current_txn_first_offset is None
    follower = make(2)
    follower.apply_partition_state(state(1, 0, [1, 2], replicas=(1, 2)))
    assert marker(follower, True).errors[PID][(TOPIC, 0)] == Errors.NOT_LEADER_OR_FOLLOWER


def test_a_fenced_coordinator_is_refused(make):
    leader = leader_of_two(make)
    txn_produce(leader, 0)
    request = WriteTxnMarkersRequest([TxnMarker(PID, EPOCH, True, [(TOPIC, 0)], coordinator_epoch=3)])
    assert leader.handle_write_txn_markers(request).errors[PID][(TOPIC, 0)] == Errors.NONE
    txn_produce(leader, 1)
    request = WriteTxnMarkersRequest([TxnMarker(PID, EPOCH, True, [(TOPIC, 0)], coordinator_epoch=2)])
    assert leader.handle_write_txn_markers(request).errors[PID][(TOPIC, 0)] == \
        Errors.TRANSACTION_COORDINATOR_FENCED


def test_markers_are_answered_once_replicated(make):
    leader = leader_of_two(make)
    txn_produce(leader, 0)
    answers = []
    assert marker(leader, True, callback=answers.append) is None
    assert answers == []                                     # the follower has not fetched the marker
    fetch(leader, 2, 2, current_epoch=0)
    assert [a.errors for a in answers] == [{PID: {(TOPIC, 0): Errors.NONE}}]
    # Nothing written (not the leader of any of them): answered at once.
    assert marker(leader, True, partitions=[("nope", 0)], callback=answers.append) is None
    assert answers[-1].errors == {PID: {("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}}


def test_markers_need_the_minimum_isr(make):
    leader = make(1, min_insync_replicas=2)
    leader.apply_partition_state(state(1, 0, [1], replicas=(1, 2)))
    txn_produce(leader, 0)
    assert marker(leader, False).errors[PID][(TOPIC, 0)] == Errors.NOT_ENOUGH_REPLICAS
