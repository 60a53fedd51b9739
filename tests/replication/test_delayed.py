"""The leader's bookkeeping after an append: the waiting acks=all produces kept per partition
(storage/replication/delayed.py) and the high watermark's cheap common cases
(ReplicaManager._maybe_increment_high_watermark), with Kafka's rules unchanged."""
from __future__ import annotations

import pytest

from storage import LogConfig, LogDir, build_batch
from storage.core.errors import Errors
from storage.replication.delayed import DelayedProduce, DelayedProduces
from storage.replication.messages import BrokerInfo, MetadataUpdate, PartitionState, ProduceRequest
from storage.replication.replica import ReplicaManager

A, B = ("a", 0), ("b", 0)


def waiter(key, required, deadline, seen):
    return DelayedProduce(key[0], key[1], required, required - 1, seen.append, deadline)


def test_waiters_of_a_partition_are_taken_in_arrival_order_once_reached():
    delayed, seen = DelayedProduces(), []
    first, other, second, third = (waiter(A, 3, 100, seen), waiter(B, 1, 100, seen),
                                   waiter(A, 5, 100, seen), waiter(A, 9, 100, seen))
    for d in (first, other, second, third):
        delayed.add(d)
    assert delayed.waiting(A) and delayed.waiting(B) and len(delayed) == 4
    assert delayed.take_reached(A, 2) == []
    assert delayed.take_reached(A, 5) == [first, second]
    assert delayed.take_reached(A, 5) == []
    assert delayed.take_all(A) == [third]
    assert not delayed.waiting(A)                    # an emptied partition leaves no entry
    assert delayed.take_reached(B, 1) == [other] and len(delayed) == 0


def test_expiry_keeps_the_broker_wide_arrival_order():
    """tick() answers REQUEST_TIMED_OUT in the order the produces came, across partitions, as
    the single list did (the simulator's trace hash depends on the callbacks' order)."""
    delayed, seen = DelayedProduces(), []
    made = [waiter(A, 1, 50, seen), waiter(B, 1, 40, seen), waiter(A, 2, 60, seen), waiter(B, 2, 90, seen)]
    for d in made:
        delayed.add(d)
    assert delayed.take_expired(39) == []
    assert delayed.take_expired(60) == made[:3]
    assert delayed.waiting(B) and not delayed.waiting(A)


# ---- through ReplicaManager ------------------------------------------------------------------

@pytest.fixture
def manager(tmp_path):
    reads = [0]

    def clock():
        reads[0] += 1
        return 1_000

    logdir = LogDir.open(tmp_path / "broker-1", LogConfig(fsync=False))
    made = ReplicaManager(1, logdir, broker_epoch=101, clock=clock, produce_timeout_ms=500)
    made.apply_metadata(MetadataUpdate(1, {1: BrokerInfo(1, 101), 2: BrokerInfo(2, 102)}))
    made.clock_reads = reads
    yield made
    logdir.close()


def lead(manager, topic, replicas):
    manager.apply_partition_state(PartitionState(topic, 0, 1, 1, 0, list(replicas), list(replicas)))


def produce(manager, topic, acks=1, callback=None, count=1):
    return manager.handle_produce(ProduceRequest(topic, 0, build_batch([b"v"] * count), acks), callback)


def test_a_leader_alone_moves_its_high_watermark_to_the_log_end_without_reading_the_clock(manager):
    """The common case (replicas = the leader): no follower to wait for, so no clock read and no
    waiter scan per append -- and the high watermark is still the log end offset at once.
    Fails before the fast path (each append read the clock)."""
    lead(manager, "a", [1])
    before = manager.clock_reads[0]
    for n in range(1, 4):
        assert produce(manager, "a", count=2).base_offset == 2 * (n - 1)
        log = manager.partitions[A].log
        assert log.high_watermark == log.log_end_offset == 2 * n
    assert manager.clock_reads[0] == before


def test_a_follower_still_holds_the_high_watermark_and_other_partitions_waiters_stay(manager):
    """Kafka's rule unchanged: with a follower in the ISR the high watermark waits for it; an
    append elsewhere (a leader alone) moves its own high watermark and answers nobody else."""
    lead(manager, "b", [1, 2])
    lead(manager, "a", [1])
    answers = []
    assert produce(manager, "b", acks=-1, callback=answers.append) is None
    assert manager.partitions[B].log.high_watermark == 0
    assert produce(manager, "a").error_code == Errors.NONE
    assert manager.partitions[A].log.high_watermark == 1 and answers == []
    mine = []
    assert produce(manager, "a", acks=-1, callback=mine.append) is None      # answered at once
    assert [(r.topic, r.error_code, r.base_offset) for r in mine] == [("a", Errors.NONE, 1)]
    assert answers == []
