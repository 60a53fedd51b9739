"""What the wire layer's waiting requests are woken by, and how the follower batches its fetches.

ReplicaManager's observers (`on_append`, `on_high_watermark`: Kafka's ReplicaManager completes
its delayed fetches by partition key after an append and after a high watermark move) and
`ReplicaFetcher.poll(fetching)`: one Fetch per leader in flight carrying every partition
followed from it (Kafka's AbstractFetcherThread).  Two managers, broker 1 leading, broker 2
following, separate LogDirs and a manual clock.
"""
from __future__ import annotations

import pytest

from storage import LogConfig, LogDir, build_batch
from storage.core.errors import Errors
from storage.replication.messages import (
    BrokerInfo,
    FetchPartition,
    FetchRequest,
    MetadataUpdate,
    PartitionState,
    ProduceRequest,
    TxnMarker,
    WriteTxnMarkersRequest,
)
from storage.replication.replica import ReplicaManager

LEADER, FOLLOWER = 1, 2
TOPICS = ("busy", "idle-a", "idle-b")


@pytest.fixture
def pair(tmp_path):
    now = [10_000]
    made = []
    for broker_id in (LEADER, FOLLOWER):
        logdir = LogDir.open(tmp_path / f"broker-{broker_id}", LogConfig(fsync=False))
        manager = ReplicaManager(broker_id, logdir, broker_epoch=100 + broker_id, clock=lambda: now[0])
        manager.apply_metadata(MetadataUpdate(1, {b: BrokerInfo(b, 100 + b) for b in (LEADER, FOLLOWER)}))
        for topic in TOPICS:
            manager.apply_partition_state(PartitionState(topic, 0, LEADER, 1, 0, [LEADER, FOLLOWER],
                                                         [LEADER, FOLLOWER]))
        made.append(manager)
    yield made
    for manager in made:
        manager.logdir.close()


def watch(manager):
    seen = []
    manager.on_append = lambda key: seen.append(("append", key))
    manager.on_high_watermark = lambda key: seen.append(("hw", key))
    return seen


def follower_fetch(leader, topic: str, offset: int):
    request = FetchRequest(FOLLOWER, 100 + FOLLOWER, [FetchPartition(topic, 0, offset, 1, 1 if offset else -1)])
    return leader.handle_fetch(request).partitions[0]


def test_an_append_as_leader_is_observed_for_its_partition_only(pair):
    leader, _ = pair
    seen = watch(leader)
    leader.handle_produce(ProduceRequest("busy", 0, build_batch([b"x"]), -1), callback=lambda r: None)
    # The follower has not fetched it: the high watermark stays, only the log end moved.
    assert seen == [("append", ("busy", 0))]


def test_a_follower_fetch_that_moves_the_high_watermark_is_observed_and_one_that_does_not_is_not(pair):
    leader, _ = pair
    answers = []
    leader.handle_produce(ProduceRequest("busy", 0, build_batch([b"x", b"y"]), -1), callback=answers.append)
    seen = watch(leader)
    assert follower_fetch(leader, "busy", 0).error_code == Errors.NONE     # reads the batch: nothing moves
    assert seen == [] and answers == []
    follower_fetch(leader, "busy", 2)              # it has the batch: the high watermark passes it
    assert seen == [("hw", ("busy", 0))]
    assert [a.error_code for a in answers] == [Errors.NONE]                # the acks=all produce completed then
    follower_fetch(leader, "busy", 2)              # again at the end: nothing moved, nothing observed
    follower_fetch(leader, "idle-a", 0)
    assert seen == [("hw", ("busy", 0))]


def test_a_transaction_marker_append_is_observed(pair):
    leader, _ = pair
    batch = build_batch([b"t"], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    assert leader.handle_produce(ProduceRequest("idle-a", 0, batch, 1)).error_code == Errors.NONE
    seen = watch(leader)
    leader.handle_write_txn_markers(WriteTxnMarkersRequest([TxnMarker(7, 0, True, [("idle-a", 0)], 0)]))
    assert seen == [("append", ("idle-a", 0))]


def test_poll_sends_no_second_fetch_to_a_leader_with_one_in_flight_and_then_one_with_everything(pair):
    leader, follower = pair
    [(to, first)] = follower.fetcher.poll()
    assert to == LEADER and sorted(p.topic for p in first.partitions) == sorted(TOPICS)
    # A partition joins while that Fetch is in flight (here: a new leader epoch re-adds one).
    follower.apply_partition_state(PartitionState("idle-b", 0, LEADER, 2, 1, [LEADER, FOLLOWER], [LEADER, FOLLOWER]))
    assert follower.fetcher.poll({LEADER}) == []            # it waits for the Fetch in flight to come back
    follower.fetcher.handle_response(LEADER, first, leader.handle_fetch(first))
    [(to, second)] = follower.fetcher.poll()
    assert to == LEADER and sorted(p.topic for p in second.partitions) == sorted(TOPICS)


def test_partitions_a_fetch_session_left_out_of_its_answer_are_parked_until_an_answer_names_them(pair):
    """A session's unchanged partitions are parked: the leader's session holds their fetch, so
    poll neither builds nor sends them (an empty incremental Fetch still goes to their leader),
    until the leader answers one (news), its state changes, or the leader fails."""
    leader, follower = pair
    fetcher = follower.fetcher
    [(_, request)] = fetcher.poll()
    fetcher.handle_response(LEADER, request, leader.handle_fetch(request))
    [(_, request)] = fetcher.poll()
    before = {k: (fs.fetch_offset, fs.last_fetched_epoch) for k, fs in fetcher.partitions.items()}
    hw = {t: follower.logdir.partition(t, 0).high_watermark for t in TOPICS}
    assert fetcher.poll() == []                     # all in flight
    fetcher.handle_unchanged(request, [(t, 0) for t in TOPICS])
    assert {k: (fs.fetch_offset, fs.last_fetched_epoch) for k, fs in fetcher.partitions.items()} == before
    assert {t: follower.logdir.partition(t, 0).high_watermark for t in TOPICS} == hw
    assert sorted(fetcher.parked_of(LEADER)) == sorted((t, 0) for t in TOPICS)
    [(to, again)] = fetcher.poll()
    assert to == LEADER and again.partitions == []
    assert fetcher.poll({LEADER}) == []             # one Fetch per leader in flight, empty or not
    # The leader's session answers a parked partition that has news: applied, fetched on.
    leader.handle_produce(ProduceRequest("idle-a", 0, build_batch([b"x"]), 1))
    full = FetchRequest(FOLLOWER, 102, list(fetcher.parked_of(LEADER).values()))
    news = [r for r in leader.handle_fetch(full).partitions if r.topic == "idle-a"]
    fetcher.handle_response(LEADER, again, type(leader.handle_fetch(full))(news))
    assert follower.logdir.partition("idle-a", 0).log_end_offset == 1
    assert fetcher.take_stirred(LEADER) == {("idle-a", 0)} and fetcher.take_stirred(LEADER) == set()
    [(_, moved)] = fetcher.poll()
    assert [(p.topic, p.fetch_offset) for p in moved.partitions] == [("idle-a", 1)]
    # A new leader epoch unparks: the partition is fetched with it.
    follower.apply_partition_state(PartitionState("busy", 0, LEADER, 2, 1, [LEADER, FOLLOWER], [LEADER, FOLLOWER]))
    assert ("busy", 0) not in fetcher.parked_of(LEADER)
    fetcher.handle_unchanged(moved, [("idle-a", 0)])
    [(_, newer)] = fetcher.poll()
    assert [(p.topic, p.current_leader_epoch) for p in newer.partitions] == [("busy", 2)]
    # A failed Fetch (the session is gone with it): every parked partition backs off, then goes again.
    fetcher.handle_failure(LEADER, newer)
    assert fetcher.parked_of(LEADER) == {} and fetcher.poll() == []
    follower.clock = lambda: 10_000 + fetcher.backoff_ms
    fetcher.manager.clock = follower.clock
    [(_, after)] = fetcher.poll()
    assert sorted(p.topic for p in after.partitions) == sorted(TOPICS)


def test_a_fetch_read_again_after_a_wake_does_not_update_the_followers_state(pair):
    """Kafka's readFromLog(readFromPurgatory = true): a woken long poll reads again; the
    follower's position, fetch time and the high watermark were applied at its arrival only."""
    leader, _ = pair
    leader.handle_produce(ProduceRequest("busy", 0, build_batch([b"x"]), 1))
    follower_fetch(leader, "busy", 0)
    state = leader.partitions[("busy", 0)].followers[FOLLOWER]
    before = (state.log_end_offset, state.last_fetch_time_ms, state.last_caught_up_time_ms)
    request = FetchRequest(FOLLOWER, 100 + FOLLOWER, [FetchPartition("busy", 0, 1, 1, 1)], update_fetch_state=False)
    [again] = leader.handle_fetch(request).partitions
    assert again.error_code == Errors.NONE and again.high_watermark == 0
    assert (state.log_end_offset, state.last_fetch_time_ms, state.last_caught_up_time_ms) == before
    assert leader.logdir.partition("busy", 0).high_watermark == 0          # not moved by the read
    request.update_fetch_state = True
    leader.handle_fetch(request)
    assert state.log_end_offset == 1 and leader.logdir.partition("busy", 0).high_watermark == 1


def test_a_parked_partition_whose_log_start_moved_here_is_fetched_again_within_a_second(pair):
    """The follower's log start goes in its fetch (the leader's low watermark, DeleteRecords):
    a parked partition whose log start moved locally (retention) is unparked at poll's next
    once-a-second check and fetched with the new log start."""
    leader, follower = pair
    fetcher = follower.fetcher
    now = [10_000]
    follower.clock = fetcher.manager.clock = lambda: now[0]
    leader.handle_produce(ProduceRequest("idle-b", 0, build_batch([b"x", b"y"]), 1))
    for _ in range(3):                              # the records, then the high watermark
        [(_, request)] = fetcher.poll()
        fetcher.handle_response(LEADER, request, leader.handle_fetch(request))
    log = follower.logdir.partition("idle-b", 0)
    assert (log.log_end_offset, log.high_watermark) == (2, 2)
    [(_, request)] = fetcher.poll()
    fetcher.handle_unchanged(request, [(t, 0) for t in TOPICS])
    now[0] += 1000
    [(_, empty)] = fetcher.poll()
    assert empty.partitions == []
    fetcher.handle_response(LEADER, empty, type(leader.handle_fetch(request))([]))
    log.increment_log_start_offset(1)
    [(_, still)] = fetcher.poll()                   # not before the next check
    assert still.partitions == []
    now[0] += 1000
    [(_, moved)] = fetcher.poll()
    assert [(p.topic, p.log_start_offset) for p in moved.partitions] == [("idle-b", 1)]
