"""ReplicaFetcher: the follower side, wired to a real leader ReplicaManager.

Our own version of the AbstractFetcherThreadTest scenarios (docs/kafka-formats.md 6 and 9.3).  Two
ReplicaManagers with separate LogDirs: broker 1 leads, broker 2 follows; `pump` carries the
follower's `fetcher.poll()` requests to the leader's handlers and the answers back through
`fetcher.handle_response`.  `truncate_on_fetch=False` exercises the OffsetForLeaderEpoch path
(KIP-101/279), True (the default) the DivergingEpoch path (KIP-320/595).
"""
from __future__ import annotations

import dataclasses

import pytest

from storage import LogConfig, LogDir, build_batch
from storage.core import guards
from storage.core.errors import Errors
from storage.replication import fetcher as fetcher_module
from storage.replication.fetcher import FETCHING, RESETTING, TRANSITIONS, TRUNCATING
from storage.replication.messages import (
    NO_EPOCH,
    BrokerInfo,
    DeleteRecordsRequest,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    ListOffsetsRequest,
    MetadataUpdate,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderEpochResult,
    PartitionState,
    ProduceRequest,
)
from storage.replication.replica import ReplicaManager

TOPIC = "events"
KEY = (TOPIC, 0)
LEADER, FOLLOWER = 1, 2
BACKOFF_MS = 100


_TAKEN: set = set()        # every (from, to) move the tests of this module made


@pytest.fixture(autouse=True)
def record_moves(monkeypatch):
    move = fetcher_module._move

    def recording(fs, to):
        before = fs.state
        move(fs, to)
        _TAKEN.add((before, to))

    monkeypatch.setattr(fetcher_module, "_move", recording)


@pytest.fixture
def now():
    return [10_000]


@pytest.fixture
def make_manager(tmp_path, now):
    made = []

    def make(broker_id: int, **fetcher_options) -> ReplicaManager:
        logdir = LogDir.open(tmp_path / f"broker-{broker_id}", LogConfig(fsync=False))
        fetcher_options.setdefault("backoff_ms", BACKOFF_MS)
        manager = ReplicaManager(broker_id, logdir, broker_epoch=100 + broker_id, clock=lambda: now[0],
                                 fetcher_options=fetcher_options)
        manager.apply_metadata(MetadataUpdate(1, {b: BrokerInfo(b, 100 + b) for b in (LEADER, FOLLOWER)}))
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.logdir.close()


@pytest.fixture
def simulation(monkeypatch):
    monkeypatch.setattr(guards, "_simulation", guards._simulation)
    guards.enter_simulation()
    yield guards
    guards.enable_all()


def state(leader_epoch: int, *, partition_epoch: int = 0, isr=(LEADER,)) -> PartitionState:
    return PartitionState(TOPIC, 0, LEADER, leader_epoch, partition_epoch, list(isr), [LEADER, FOLLOWER])


def log_of(manager):
    return manager.logdir.partition(TOPIC, 0)


def seed(manager, *batches):
    """Append (epoch, base offset) batches of one record each, as a follower would."""
    log = log_of(manager)
    for epoch, base in batches:
        # Same (epoch, base offset) on two brokers: byte-identical batches.
        log.append_as_follower(build_batch([b"%d@e%d" % (base, epoch)], base_offset=base,
                                           partition_leader_epoch=epoch, base_timestamp=1_000 + base))
    return log


def produce(manager, count: int):
    for _ in range(count):
        assert manager.handle_produce(ProduceRequest(TOPIC, 0, build_batch([b"x"]), 1)).error_code == Errors.NONE


def deliver(leader: ReplicaManager, request):
    if isinstance(request, FetchRequest):
        return leader.handle_fetch(request)
    if isinstance(request, OffsetForLeaderEpochRequest):
        return leader.handle_offset_for_leader_epoch(request)
    if isinstance(request, ListOffsetsRequest):
        return leader.handle_list_offsets(request)
    raise AssertionError(f"unexpected request {request!r}")


def pump(follower: ReplicaManager, leader: ReplicaManager, rounds: int = 10) -> list:
    """Run `rounds` poll/answer rounds; returns every (request, response) exchanged."""
    exchanged = []
    for _ in range(rounds):
        requests = follower.fetcher.poll()
        if not requests:
            break
        for leader_id, request in requests:
            assert leader_id == leader.broker_id
            response = deliver(leader, request)
            exchanged.append((request, response))
            follower.fetcher.handle_response(leader_id, request, response)
    return exchanged


def batches(manager) -> list[tuple[int, int, bytes]]:
    return [(b.base_offset, b.partition_leader_epoch, b.to_bytes()) for b in log_of(manager).batches()]


def fetch_state(follower):
    return follower.fetcher.partitions[KEY]


def one_round(follower):
    [(leader_id, request)] = follower.fetcher.poll()
    return leader_id, request


# ---- truncation (6.2, 6.3, 6.4) --------------------------------------------------------------------

@pytest.fixture
def diverged(make_manager):
    """docs/kafka-formats.md 6.3 worked example: follower 0@e0 1@e2 2@e4, leader 0@e1 1@e3 2@e5 (epoch 5)."""
    def make(**fetcher_options):
        leader = make_manager(LEADER)
        seed(leader, (1, 0), (3, 1), (5, 2))
        leader.apply_partition_state(state(5))
        assert [tuple(e) for e in log_of(leader).epoch_cache.entries] == [(1, 0), (3, 1), (5, 2)]
        follower = make_manager(FOLLOWER, **fetcher_options)
        seed(follower, (0, 0), (2, 1), (4, 2))
        follower.apply_partition_state(state(5))
        return leader, follower
    return make


def test_truncation_by_offset_for_leader_epoch(diverged):
    leader, follower = diverged(truncate_on_fetch=False)
    assert fetch_state(follower).state == TRUNCATING
    exchanged = pump(follower, leader)
    asked = [(r.partitions[0].leader_epoch, r.partitions[0].current_leader_epoch)
             for r, _ in exchanged if isinstance(r, OffsetForLeaderEpochRequest)]
    answered = [(a.partitions[0].leader_epoch, a.partitions[0].end_offset)
                for _, a in exchanged if isinstance(a, OffsetForLeaderEpochResponse)]
    assert asked == [(4, 5), (2, 5), (0, 5)]
    assert answered == [(3, 2), (1, 1), (0, 0)]
    assert follower.fetcher.truncations == [(TOPIC, 0, 2), (TOPIC, 0, 1), (TOPIC, 0, 0)]
    assert batches(follower) == batches(leader)
    assert log_of(follower).epoch_cache.entries == log_of(leader).epoch_cache.entries
    assert fetch_state(follower).state == FETCHING and fetch_state(follower).fetch_offset == 3


def test_truncation_via_diverging_epoch(diverged):
    leader, follower = diverged()
    assert fetch_state(follower).state == FETCHING
    assert (fetch_state(follower).fetch_offset, fetch_state(follower).last_fetched_epoch) == (3, 4)
    exchanged = pump(follower, leader)
    assert not any(isinstance(r, OffsetForLeaderEpochRequest) for r, _ in exchanged)
    sent = [(r.partitions[0].fetch_offset, r.partitions[0].last_fetched_epoch) for r, _ in exchanged]
    assert sent[:4] == [(3, 4), (2, 2), (1, 0), (0, NO_EPOCH)]
    diverging = [a.partitions[0].diverging_epoch for _, a in exchanged[:3]]
    assert [(d.epoch, d.end_offset) for d in diverging] == [(3, 2), (1, 1), (0, 0)]
    assert all(a.partitions[0].records == b"" for _, a in exchanged[:3])
    assert follower.fetcher.truncations == [(TOPIC, 0, 2), (TOPIC, 0, 1), (TOPIC, 0, 0)]
    assert batches(follower) == batches(leader)


def test_matching_logs_are_not_truncated(make_manager):
    leader = make_manager(LEADER)
    seed(leader, (1, 0), (1, 1), (3, 2))
    leader.apply_partition_state(state(4))
    follower = make_manager(FOLLOWER, truncate_on_fetch=False)
    seed(follower, (1, 0), (1, 1), (3, 2))                     # HW 0, but the data is good
    follower.apply_partition_state(state(4))
    pump(follower, leader, rounds=3)
    assert follower.fetcher.truncations == []
    assert log_of(follower).log_end_offset == 3 and batches(follower) == batches(leader)


def test_guard_m1_off_truncates_to_high_watermark(make_manager, simulation):
    leader = make_manager(LEADER)
    seed(leader, (1, 0), (1, 1), (3, 2))
    leader.apply_partition_state(state(4))
    follower = make_manager(FOLLOWER, truncate_on_fetch=False)
    seed(follower, (1, 0), (1, 1), (3, 2))
    follower.apply_partition_state(state(4))
    with simulation.disabled("M1"):
        follower.fetcher.poll()
    # Unsafe (pre-KIP-101): good data above the HW is thrown away.
    assert follower.fetcher.truncations == [(TOPIC, 0, 0)]


def test_truncate_to_high_watermark_when_leader_has_no_epoch_information(make_manager):
    follower = make_manager(FOLLOWER, truncate_on_fetch=False)
    log = seed(follower, (0, 0), (2, 1), (4, 2))
    log.update_high_watermark(2)
    follower.apply_partition_state(state(5))
    leader_id, request = one_round(follower)
    assert isinstance(request, OffsetForLeaderEpochRequest) and request.partitions[0].leader_epoch == 4
    answer = OffsetForLeaderEpochResponse([OffsetForLeaderEpochResult(TOPIC, 0, Errors.NONE, NO_EPOCH, -1)])
    follower.fetcher.handle_response(leader_id, request, answer)
    assert log.log_end_offset == 2
    assert (fetch_state(follower).state, fetch_state(follower).fetch_offset) == (FETCHING, 2)


@pytest.mark.parametrize("truncate_on_fetch", [True, False])
def test_truncate_to_high_watermark_when_follower_has_no_epochs(make_manager, truncate_on_fetch):
    leader = make_manager(LEADER)
    seed(leader, (-1, 0), (-1, 1))
    leader.apply_partition_state(state(3))
    produce(leader, 2)
    follower = make_manager(FOLLOWER, truncate_on_fetch=truncate_on_fetch)
    log = seed(follower, (-1, 0), (-1, 1), (-1, 2))             # an old-format log: no epochs at all
    log.update_high_watermark(1)
    assert log.epoch_cache.latest_epoch is None
    follower.apply_partition_state(state(3))
    assert fetch_state(follower).state == TRUNCATING
    exchanged = pump(follower, leader, rounds=4)
    assert not any(isinstance(r, OffsetForLeaderEpochRequest) for r, _ in exchanged)
    assert follower.fetcher.truncations == [(TOPIC, 0, 1)]
    assert exchanged[0][0].partitions[0].fetch_offset == 1
    assert log.log_end_offset == 4 and batches(follower)[1:] == batches(leader)[1:]


def test_truncation_skipped_if_no_epoch_change(diverged):
    leader, follower = diverged(truncate_on_fetch=False)
    pump(follower, leader)
    truncations = list(follower.fetcher.truncations)
    before = fetch_state(follower)
    snapshot = dataclasses.replace(before)
    # An ISR change: same leader and leader epoch, newer partition epoch.
    follower.apply_partition_state(state(5, partition_epoch=1, isr=(LEADER, FOLLOWER)))
    assert fetch_state(follower) is before and dataclasses.replace(before) == snapshot
    follower.fetcher.add_partition(follower.partitions[KEY], LEADER, 5)
    assert fetch_state(follower) is before and before.state == FETCHING
    [(_, request)] = follower.fetcher.poll()
    assert isinstance(request, FetchRequest)
    assert follower.fetcher.truncations == truncations


def _bump_same_leader(leader, follower):
    leader.apply_partition_state(state(6, partition_epoch=1))
    follower.apply_partition_state(state(6, partition_epoch=1))


def test_leader_epoch_bump_restarts_truncation(diverged):
    leader, follower = diverged(truncate_on_fetch=False)
    pump(follower, leader)
    _bump_same_leader(leader, follower)
    assert fetch_state(follower).state == TRUNCATING
    assert fetch_state(follower).current_leader_epoch == 6
    [(_, request)] = follower.fetcher.poll()
    assert isinstance(request, OffsetForLeaderEpochRequest)
    assert request.partitions[0].current_leader_epoch == 6


def test_guard_m6_off_keeps_fetching_after_epoch_bump(diverged, simulation):
    leader, follower = diverged(truncate_on_fetch=False)
    pump(follower, leader)
    with simulation.disabled("M6"):
        _bump_same_leader(leader, follower)
    # Unsafe: the new epoch's truncation round is skipped.
    assert fetch_state(follower).state == FETCHING
    [(_, request)] = follower.fetcher.poll()
    assert isinstance(request, FetchRequest)


# ---- fencing and unknown epochs (6.2 step 3) -------------------------------------------------------------

@pytest.mark.parametrize("truncate_on_fetch, kind", [(False, OffsetForLeaderEpochRequest), (True, FetchRequest)],
                         ids=["truncation", "fetch"])
def test_fenced_leader_epoch_parks_partition(make_manager, truncate_on_fetch, kind):
    leader = make_manager(LEADER)
    seed(leader, (1, 0))
    leader.apply_partition_state(state(6))                  # the leader already moved on
    follower = make_manager(FOLLOWER, truncate_on_fetch=truncate_on_fetch)
    seed(follower, (1, 0))
    follower.apply_partition_state(state(5))
    [(request, response)] = pump(follower, leader, rounds=1)
    assert isinstance(request, kind)
    assert response.partitions[0].error_code == Errors.FENCED_LEADER_EPOCH
    assert fetch_state(follower).failed
    assert follower.fetcher.poll() == []
    assert log_of(follower).log_end_offset == 1 and follower.fetcher.truncations == []
    # New leadership metadata un-parks it.
    follower.apply_partition_state(state(6))
    assert not fetch_state(follower).failed
    pump(follower, leader, rounds=3)
    assert batches(follower) == batches(leader)


@pytest.mark.parametrize("truncate_on_fetch, kind", [(False, OffsetForLeaderEpochRequest), (True, FetchRequest)],
                         ids=["truncation", "fetch"])
def test_unknown_leader_epoch_backs_off_and_retries(make_manager, now, truncate_on_fetch, kind):
    leader = make_manager(LEADER)
    seed(leader, (1, 0))
    leader.apply_partition_state(state(5))
    follower = make_manager(FOLLOWER, truncate_on_fetch=truncate_on_fetch)
    seed(follower, (1, 0))
    follower.apply_partition_state(state(6))                # the follower heard of epoch 6 first
    [(request, response)] = pump(follower, leader, rounds=1)
    assert isinstance(request, kind)
    assert response.partitions[0].error_code == Errors.UNKNOWN_LEADER_EPOCH
    assert not fetch_state(follower).failed
    assert follower.fetcher.poll() == []                    # backing off
    now[0] += BACKOFF_MS - 1
    assert follower.fetcher.poll() == []
    now[0] += 1
    leader.apply_partition_state(state(6))
    produce(leader, 1)
    pump(follower, leader, rounds=3)
    assert batches(follower) == batches(leader)


# ---- out of range (6.6) ------------------------------------------------------------------------

def test_follower_fetch_out_of_range_high(make_manager):
    leader = make_manager(LEADER)
    leader.apply_partition_state(state(1))
    produce(leader, 3)                                      # leader LEO 3
    follower = make_manager(FOLLOWER)
    log = seed(follower, (-1, 0), (-1, 1), (-1, 2), (-1, 3), (-1, 4))
    log.update_high_watermark(5)                            # nothing to truncate to the HW
    follower.apply_partition_state(state(1))
    exchanged = pump(follower, leader, rounds=3)
    fetched, out_of_range = exchanged[0]
    assert fetched.partitions[0].fetch_offset == 5
    assert out_of_range.partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE
    listed = exchanged[1][0]
    assert isinstance(listed, ListOffsetsRequest) and listed.timestamp == -1 and listed.replica_id == FOLLOWER
    assert follower.fetcher.truncations == [(TOPIC, 0, 3)]
    assert log.log_end_offset == 3
    assert (fetch_state(follower).state, fetch_state(follower).fetch_offset) == (FETCHING, 3)


def test_follower_fetch_out_of_range_low(make_manager):
    leader = make_manager(LEADER)
    seed(leader, (1, 0), (1, 1))
    leader.apply_partition_state(state(2))
    produce(leader, 4)                                      # LEO 6, HW 6
    assert leader.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, 4)).error_code == Errors.NONE
    follower = make_manager(FOLLOWER)
    log = seed(follower, (1, 0), (1, 1))                    # LEO 2 < leader log start 4
    follower.apply_partition_state(state(2))
    exchanged = pump(follower, leader, rounds=5)
    assert exchanged[0][1].partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE
    assert [r.timestamp for r, _ in exchanged if isinstance(r, ListOffsetsRequest)] == [-1, -2]
    assert follower.fetcher.truncations == [(TOPIC, 0, 4)]
    assert (log.log_start_offset, log.log_end_offset) == (4, 6)
    assert batches(follower) == [b for b in batches(leader) if b[0] >= 4]


def test_fenced_offset_reset_after_out_of_range(make_manager):
    leader = make_manager(LEADER)
    leader.apply_partition_state(state(1))
    produce(leader, 1)
    follower = make_manager(FOLLOWER)
    log = seed(follower, (-1, 0), (-1, 1), (-1, 2))
    log.update_high_watermark(3)
    follower.apply_partition_state(state(1))
    pump(follower, leader, rounds=1)
    assert fetch_state(follower).state == RESETTING
    leader.apply_partition_state(state(2))                  # leadership moved before the reset
    [(request, response)] = pump(follower, leader, rounds=1)
    assert isinstance(request, ListOffsetsRequest)
    assert response.error_code == Errors.FENCED_LEADER_EPOCH
    assert fetch_state(follower).failed and log.log_end_offset == 3


# ---- processing fetched data (6.4, 6.7) --------------------------------------------------------------

def _diverging_response_with_data(high_watermark: int):
    return FetchResponse([FetchResponsePartition(
        TOPIC, 0, Errors.NONE, high_watermark=high_watermark, log_start_offset=0,
        diverging_epoch=EpochEndOffset(2, 2), records=build_batch([b"late"], base_offset=3, partition_leader_epoch=5))])


def test_truncate_on_fetch_does_not_process_partition_data(make_manager):
    follower = make_manager(FOLLOWER)
    log = seed(follower, (0, 0), (2, 1), (4, 2))
    follower.apply_partition_state(state(5))
    leader_id, request = one_round(follower)
    assert (request.partitions[0].fetch_offset, request.partitions[0].last_fetched_epoch) == (3, 4)
    follower.fetcher.handle_response(leader_id, request, _diverging_response_with_data(high_watermark=3))
    assert follower.fetcher.truncations == [(TOPIC, 0, 2)]
    assert log.log_end_offset == 2 and [b[0] for b in batches(follower)] == [0, 1]
    assert log.high_watermark <= log.log_end_offset
    assert (fetch_state(follower).fetch_offset, fetch_state(follower).last_fetched_epoch) == (2, 2)


def test_guard_m10_off_applies_high_watermark_past_truncation(make_manager, simulation):
    follower = make_manager(FOLLOWER)
    log = seed(follower, (0, 0), (2, 1), (4, 2))
    follower.apply_partition_state(state(5))
    leader_id, request = one_round(follower)
    with simulation.disabled("M10"):
        follower.fetcher.handle_response(leader_id, request, _diverging_response_with_data(high_watermark=3))
    assert log.high_watermark > log.log_end_offset          # unsafe: a HW above the truncated log


def test_corrupt_message_is_retried_later(make_manager, now):
    leader = make_manager(LEADER)
    leader.apply_partition_state(state(1))
    produce(leader, 2)
    follower = make_manager(FOLLOWER)
    follower.apply_partition_state(state(1))
    pump(follower, leader, rounds=1)                        # empty cache: truncate to HW 0, then fetch
    assert log_of(follower).log_end_offset == 2
    produce(leader, 1)
    leader_id, request = one_round(follower)
    response = deliver(leader, request)
    good = response.partitions[0].records
    bad = bytearray(good)
    bad[-1] ^= 0xFF                                          # inside the CRC-covered bytes
    follower.fetcher.handle_response(leader_id, request, FetchResponse(
        [dataclasses.replace(response.partitions[0], records=bytes(bad))]))
    assert log_of(follower).log_end_offset == 2
    assert not fetch_state(follower).failed
    assert follower.fetcher.poll() == []                    # backing off
    now[0] += BACKOFF_MS
    [(_, again)] = follower.fetcher.poll()
    assert again.partitions[0].fetch_offset == 2
    follower.fetcher.handle_response(leader_id, again, deliver(leader, again))
    assert batches(follower) == batches(leader)


def _old_epoch_answer(make_manager):
    """The leader answers a fetch sent at epoch 1; before it arrives both move to epoch 2."""
    leader = make_manager(LEADER)
    seed(leader, (0, 0))
    leader.apply_partition_state(state(1))
    produce(leader, 2)                                      # LEO 3
    follower = make_manager(FOLLOWER)
    seed(follower, (0, 0))
    follower.apply_partition_state(state(1))
    leader_id, request = one_round(follower)
    assert (request.partitions[0].fetch_offset, request.partitions[0].current_leader_epoch) == (1, 1)
    response = deliver(leader, request)
    assert response.partitions[0].records
    leader.apply_partition_state(state(2, partition_epoch=1))
    follower.apply_partition_state(state(2, partition_epoch=1))
    assert (fetch_state(follower).state, fetch_state(follower).fetch_offset) == (FETCHING, 1)
    return follower, leader_id, request, response


def test_response_for_older_leader_epoch_is_ignored(make_manager):
    follower, leader_id, request, response = _old_epoch_answer(make_manager)
    before = dataclasses.replace(fetch_state(follower))
    follower.fetcher.handle_response(leader_id, request, response)
    assert log_of(follower).log_end_offset == 1
    assert fetch_state(follower) == before
    fenced = FetchResponse([FetchResponsePartition(TOPIC, 0, Errors.FENCED_LEADER_EPOCH)])
    follower.fetcher.handle_response(leader_id, request, fenced)
    assert not fetch_state(follower).failed


def test_guard_m28_off_applies_answer_for_older_leader_epoch(make_manager, simulation):
    follower, leader_id, request, response = _old_epoch_answer(make_manager)
    with simulation.disabled("M28"):
        follower.fetcher.handle_response(leader_id, request, response)
    assert log_of(follower).log_end_offset == 3           # unsafe: data from a superseded epoch's answer


def test_response_for_older_fetch_offset_is_ignored(make_manager):
    leader = make_manager(LEADER)
    leader.apply_partition_state(state(1))
    produce(leader, 2)
    follower = make_manager(FOLLOWER)
    follower.apply_partition_state(state(1))
    leader_id, request = one_round(follower)
    response = deliver(leader, request)
    follower.fetcher.handle_response(leader_id, request, response)
    assert log_of(follower).log_end_offset == 2
    before = dataclasses.replace(fetch_state(follower))
    follower.fetcher.handle_response(leader_id, request, response)          # delivered twice
    out_of_range = FetchResponse([FetchResponsePartition(TOPIC, 0, Errors.OFFSET_OUT_OF_RANGE)])
    follower.fetcher.handle_response(leader_id, request, out_of_range)      # a late error for offset 0
    assert log_of(follower).log_end_offset == 2
    assert fetch_state(follower) == before and fetch_state(follower).state == FETCHING


def test_follower_high_watermark_clamped_to_its_log_end_offset(make_manager):
    leader = make_manager(LEADER)
    leader.apply_partition_state(state(1))
    produce(leader, 4)                                      # leader HW 4
    follower = make_manager(FOLLOWER, max_bytes=1)          # one batch per fetch
    follower.apply_partition_state(state(1))
    seen = []
    for _ in range(4):
        exchanged = pump(follower, leader, rounds=1)
        assert exchanged[-1][1].partitions[0].high_watermark == 4
        log = log_of(follower)
        seen.append((log.log_end_offset, log.high_watermark))
    assert seen == [(1, 1), (2, 2), (3, 3), (4, 4)]


def test_follower_log_start_offset_raised_to_leaders(make_manager):
    leader = make_manager(LEADER)
    leader.apply_partition_state(state(1))
    produce(leader, 6)
    follower = make_manager(FOLLOWER)
    follower.apply_partition_state(state(1))
    pump(follower, leader, rounds=2)
    assert (log_of(follower).log_end_offset, log_of(follower).high_watermark) == (6, 6)
    assert leader.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, 4)).error_code == Errors.NONE
    pump(follower, leader, rounds=1)
    assert log_of(follower).log_start_offset == 4
    assert log_of(follower).log_end_offset == 6


def test_a_duplicated_epoch_answer_does_not_end_the_truncation(make_manager, now):
    # Simulator seed 501941 (N2): the answer to "epoch 4" arrived twice.  The first made the
    # follower truncate to epoch 2's end and ask again; the copy, applied to the shortened cache
    # (no epoch 3 there: "undefined"), ended the iteration at offset 2 above the real divergence.
    follower = make_manager(FOLLOWER, truncate_on_fetch=False)
    log = seed(follower, (0, 0), (2, 1), (4, 2))
    follower.apply_partition_state(state(5))
    _, request = one_round(follower)
    assert request.partitions[0].leader_epoch == 4
    answer = OffsetForLeaderEpochResponse([OffsetForLeaderEpochResult(TOPIC, 0, Errors.NONE, 3, 2)])
    follower.fetcher.handle_response(LEADER, request, answer)
    assert log.log_end_offset == 2 and fetch_state(follower).state == TRUNCATING
    follower.fetcher.handle_response(LEADER, request, answer)           # the duplicate
    assert fetch_state(follower).state == TRUNCATING
    now[0] += 10 * BACKOFF_MS
    _, again = one_round(follower)
    assert again.partitions[0].leader_epoch == 2
    follower.fetcher.handle_response(LEADER, again, OffsetForLeaderEpochResponse(
        [OffsetForLeaderEpochResult(TOPIC, 0, Errors.NONE, 0, 1)]))
    assert log.log_end_offset == 1 and fetch_state(follower).state == FETCHING


def test_a_move_outside_the_transition_list_is_a_bug():
    fs = fetcher_module.PartitionFetchState(TOPIC, 0, LEADER, 1, 0, TRUNCATING)
    with pytest.raises(AssertionError, match="cannot go from Truncating to ResettingOffset"):
        fetcher_module._move(fs, RESETTING)
    assert fs.state == TRUNCATING


def test_zz_every_listed_transition_is_taken_by_these_tests(request):
    """Runs last in the module: the transition list holds no move the tests never make (a dead
    entry would hide a state the fetcher cannot reach any more)."""
    here = {item.function.__name__ for item in request.session.items if item.module is request.module}
    if here != {name for name in dir(request.module) if name.startswith("test_")} or request.session.testsfailed:
        pytest.skip("only meaningful when the whole module ran")
    assert _TAKEN == set(TRANSITIONS)


def test_the_truncation_record_is_bounded():
    """ReplicaFetcher.truncations keeps the latest `limit` (a broker truncates at every leader
    change for months); `total` and `since` still say what came after a point."""
    from storage.replication.fetcher import RecentTruncations

    recent = RecentTruncations(limit=5)
    for i in range(12):
        recent.append(("t", 0, i))
    assert recent == [("t", 0, i) for i in range(7, 12)] and recent.total == 12
    assert recent.since(10) == [("t", 0, 10), ("t", 0, 11)] and recent.since(12) == []
    assert recent.since(0) == list(recent)              # more than were kept: the kept ones


# ---- the low watermark (DeleteRecords) ---------------------------------------------------------
# Kafka's Partition.lowWatermarkIfLeader: the lowest log start offset of the replicas on live
# brokers, a follower's as its last fetch said; the wire's DeleteRecords waits for it.
def test_low_watermark_follows_the_followers_reported_log_start(make_manager):
    leader, follower = make_manager(LEADER), make_manager(FOLLOWER)
    leader.apply_partition_state(state(1))
    follower.apply_partition_state(state(1))
    produce(leader, 6)
    pump(follower, leader, rounds=3)
    assert log_of(follower).log_end_offset == 6
    assert leader.low_watermark(TOPIC, 0) == 0
    assert follower.low_watermark(TOPIC, 0) is None             # it does not lead
    assert leader.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, 4)).low_watermark == 4
    assert leader.low_watermark(TOPIC, 0) == 0                   # the follower has not said yet
    pump(follower, leader, rounds=1)                             # it learns 4 from this answer...
    assert log_of(follower).log_start_offset == 4
    pump(follower, leader, rounds=1)                             # ...and says so in its next fetch
    assert leader.low_watermark(TOPIC, 0) == 4


def test_low_watermark_leaves_out_a_fenced_follower(make_manager):
    leader = make_manager(LEADER)
    leader.apply_partition_state(state(1))
    produce(leader, 3)
    assert leader.handle_delete_records(DeleteRecordsRequest(TOPIC, 0, 2)).error_code == Errors.NONE
    assert leader.low_watermark(TOPIC, 0) == -1                  # the follower never fetched
    leader.apply_metadata(MetadataUpdate(2, {LEADER: BrokerInfo(LEADER, 101), FOLLOWER: BrokerInfo(FOLLOWER, 102, True)}))
    assert leader.low_watermark(TOPIC, 0) == 2
