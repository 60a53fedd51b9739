"""`ReplicaFetcher`: the follower side -- truncate, then fetch (docs/kafka-formats.md 6).

Per partition one `FetchState`: Truncating (ask OffsetForLeaderEpoch, KIP-101/279), Fetching
(Fetch with CurrentLeaderEpoch and LastFetchedEpoch, KIP-320/595), or ResettingOffset (after
OFFSET_OUT_OF_RANGE: ask the leader's end, then its start).  `TRANSITIONS` lists every move
between them with its reason; any other move is a bug and raises AssertionError.  `poll()` returns the requests to
send as (leader id, request); `handle_response(leader id, request, response)` applies answers.
Transport-agnostic like the ReplicaManager that owns it.

Invariants:
  - truncation uses the leader's (epoch, end offset) with KIP-279's rule: when the follower does
    not know the leader's epoch it truncates to its own end of that epoch and asks again with
    its new latest epoch; without epoch information it truncates to its high watermark (M1);
  - a DivergingEpoch in a fetch response is applied through the same rule, before anything of
    that response's high watermark (M10), and the response's data is not processed;
  - a response is applied only when it answers the partition's current fetch offset and
    current leader epoch (M28); anything older is dropped;
  - FENCED_LEADER_EPOCH for the current epoch parks the partition until new metadata arrives;
    other errors back off and retry.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from ..core import errors, guards
from ..core.errors import Errors
from ..log.reads import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from .messages import (
    NO_EPOCH,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochPartition,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    epoch_end_on_the_wire,
)

_log = logging.getLogger("storage.replica")   # docs/guide-operations.md, Logs


class RecentTruncations(list):
    """The latest `limit` truncations, oldest first (a list: compare and index it as one), and
    `total`, the number made since the fetcher started: a broker running for months truncates
    at every leader change, and keeping every one would grow without bound."""

    def __init__(self, limit: int = 1000):
        super().__init__()
        self.limit = limit
        self.total = 0

    def append(self, item) -> None:
        super().append(item)
        self.total += 1
        if len(self) > self.limit:
            del self[:len(self) - self.limit]

    def since(self, total: int) -> list:
        """The truncations made after `total` had been reached (at most the `limit` latest)."""
        new = self.total - total
        return list(self[-new:]) if new > 0 else []


class FetchState(enum.StrEnum):
    """Where a followed partition is (Kafka's names: ReplicaState in AbstractFetcherThread)."""

    TRUNCATING = "Truncating"
    FETCHING = "Fetching"
    RESETTING = "ResettingOffset"


TRUNCATING, FETCHING, RESETTING = FetchState.TRUNCATING, FetchState.FETCHING, FetchState.RESETTING

# Every allowed move.  A partition starts Fetching (truncation on fetch and a known epoch) or
# Truncating; a new leader or epoch replaces its state outright (add_partition).
TRANSITIONS = {
    (TRUNCATING, FETCHING): "the truncation point is final (KIP-279), or fetching finishes it (KIP-320)",
    (TRUNCATING, TRUNCATING): "KIP-279: the leader's answer names an epoch this log ends differently; "
                              "truncate to that end and ask again with the new latest epoch",
    (FETCHING, FETCHING): "a DivergingEpoch: truncate and go on fetching (KIP-320)",
    (FETCHING, RESETTING): "OFFSET_OUT_OF_RANGE: ask the leader's end, then its start",
    (RESETTING, FETCHING): "the leader's end (below ours: truncate) or start (above ours: restart there)",
}


def _move(fs: "PartitionFetchState", to: FetchState) -> None:
    if (fs.state, to) not in TRANSITIONS:
        raise AssertionError(f"fetcher: {fs.topic}-{fs.partition} cannot go from {fs.state} to {to}")
    fs.state = to


@dataclass
class PartitionFetchState:
    topic: str
    partition: int
    leader_id: int
    current_leader_epoch: int
    fetch_offset: int
    state: FetchState
    last_fetched_epoch: int = NO_EPOCH
    backoff_until_ms: int = 0
    failed: bool = False
    inflight_since_ms: int = -1
    reset_step: int = LATEST_TIMESTAMP

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition


class ReplicaFetcher:
    """Fetch state of every partition this broker follows."""

    def __init__(self, manager, *, truncate_on_fetch: bool = True, backoff_ms: int = 1000,
                 request_timeout_ms: int = 30_000, max_bytes: int = 1 << 20):
        self.manager = manager
        self.truncate_on_fetch = truncate_on_fetch
        self.backoff_ms = backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_bytes = max_bytes
        self.partitions: dict[tuple[str, int], PartitionFetchState] = {}
        # What poll walks: `partitions` but the parked ones, in the same order while none is.
        self._awake: dict[tuple[str, int], PartitionFetchState] = {}
        # Per leader, the partitions a fetch session answered unchanged (handle_unchanged) and
        # their fetch as the leader's session holds it: poll leaves them out until an answer
        # names them or their state changes (`_unpark`); `stirred` are those unparked since the
        # session last asked (take_stirred).  Only a transport with sessions parks.
        self.parked: dict[int, dict[tuple[str, int], FetchPartition]] = {}
        self.stirred: dict[int, set[tuple[str, int]]] = {}
        self._parked_checked_ms = 0
        # (topic, partition, offset) of the latest truncations, for tests, tools and the broker's log.
        self.truncations = RecentTruncations()

    # ---- membership ----
    def has_partition(self, key) -> bool:
        return key in self.partitions

    def add_partition(self, p, leader_id: int, leader_epoch: int) -> None:
        existing = self.partitions.get(p.key)
        if existing is not None:
            same = existing.current_leader_epoch == leader_epoch if guards.on("M6") \
                else existing.leader_id == leader_id
            self._unpark(existing)
            if same:
                existing.leader_id, existing.current_leader_epoch = leader_id, leader_epoch
                existing.failed = False
                return
        latest = p.log.latest_epoch
        if self.truncate_on_fetch and latest is not None:
            state = PartitionFetchState(p.topic, p.partition, leader_id, leader_epoch, p.log.log_end_offset,
                                        FETCHING, latest)
        else:
            # Kafka's initial fetch offset: the log end only with truncation-on-fetch and an
            # epoch; otherwise the high watermark (what a leader without epochs truncates to).
            start = p.log.log_end_offset if self.truncate_on_fetch and latest is not None \
                else p.log.high_watermark
            state = PartitionFetchState(p.topic, p.partition, leader_id, leader_epoch, start, TRUNCATING)
        self.partitions[p.key] = self._awake[p.key] = state

    def remove_partition(self, key) -> None:
        fs = self.partitions.pop(key, None)
        if fs is not None:
            self._unpark(fs)
            self._awake.pop(key, None)

    def clear(self) -> None:
        """Follow nothing (the log directory went offline)."""
        for fs in list(self.partitions.values()):
            self.remove_partition(fs.key)

    # ---- parked partitions (an incremental fetch session's unchanged ones) ----
    def parked_of(self, leader_id: int) -> dict:
        """The partitions parked with `leader_id` (a live dict: the transport's fetch session
        with that leader keeps them in the leader's session)."""
        return self.parked.setdefault(leader_id, {})

    def take_stirred(self, leader_id: int) -> set:
        """The partitions unparked from `leader_id` since the last call (a fetch session forgets
        those no longer fetched)."""
        return self.stirred.pop(leader_id, set())

    def _unpark(self, fs: PartitionFetchState) -> None:
        parked = self.parked.get(fs.leader_id)
        if parked and parked.pop(fs.key, None) is not None:
            self.stirred.setdefault(fs.leader_id, set()).add(fs.key)
            if self.partitions.get(fs.key) is fs:
                self._awake[fs.key] = fs

    def _unpark_leader(self, leader_id: int, backoff_until_ms: int | None = None) -> None:
        for key in list(self.parked.get(leader_id, ())):
            fs = self.partitions[key]
            self._unpark(fs)
            if backoff_until_ms is not None:
                fs.backoff_until_ms = backoff_until_ms

    def _check_parked(self, now: int) -> None:
        """Once a second: a parked partition whose log start moved here (retention) is fetched
        again, so its leader learns the follower's new log start (the leader's low watermark)."""
        if now - self._parked_checked_ms < 1000:
            return
        self._parked_checked_ms = now
        for parked in self.parked.values():
            for key, item in list(parked.items()):
                p = self.manager.partitions.get(key)
                if p is None or p.log.log_start_offset != item.log_start_offset:
                    self._unpark(self.partitions[key])

    # ---- requests ----
    def _ready(self, fs: PartitionFetchState, now: int) -> bool:
        if fs.failed or now < fs.backoff_until_ms:
            return False
        if fs.inflight_since_ms >= 0 and now - fs.inflight_since_ms < self.request_timeout_ms:
            return False
        return True

    def poll(self, fetching=()) -> list[tuple[int, object]]:
        """Requests to send now, one per (leader, kind).  No Fetch goes to a leader in
        `fetching` (its Fetch in flight): those partitions wait, ready, for the next poll, so a
        transport keeps one Fetch per leader carrying all of them (Kafka's fetcher thread)."""
        now = self.manager.clock()
        by_leader: dict[tuple[int, str], list] = {}
        if self.parked:
            self._check_parked(now)
        for fs in list(self._awake.values()):
            if not self._ready(fs, now):
                continue
            p = self.manager.partitions.get(fs.key)
            if p is None:
                continue
            if fs.state == TRUNCATING:
                if p.log.latest_epoch is None or not guards.on("M1"):
                    # No epoch information (or the pre-KIP-101 rule): truncate to the high watermark.
                    self._truncate(p, fs, min(fs.fetch_offset, p.log.high_watermark)
                                   if guards.on("M1") else p.log.high_watermark, final=True,
                                   why="no leader epoch in the log: to the high watermark")
                else:
                    by_leader.setdefault((fs.leader_id, "epoch"), []).append(OffsetForLeaderEpochPartition(
                        fs.topic, fs.partition, p.log.latest_epoch, fs.current_leader_epoch))
                    fs.inflight_since_ms = now
                    continue
            if fs.state == RESETTING:
                by_leader.setdefault((fs.leader_id, "list:%d" % fs.reset_step), []).append(fs)
                fs.inflight_since_ms = now
                continue
            if fs.leader_id in fetching:
                continue
            by_leader.setdefault((fs.leader_id, "fetch"), []).append(FetchPartition(
                fs.topic, fs.partition, fs.fetch_offset, fs.current_leader_epoch,
                fs.last_fetched_epoch if self.truncate_on_fetch else NO_EPOCH, p.log.log_start_offset,
                self.max_bytes))
            fs.inflight_since_ms = now
        for leader, parked in self.parked.items():
            # A leader with only parked partitions still gets its (empty, incremental) Fetch:
            # its session answers a parked partition when that one has news.
            if parked and leader not in fetching:
                by_leader.setdefault((leader, "fetch"), [])
        out = []
        me = self.manager.broker_id
        for (leader, kind), items in by_leader.items():
            if kind == "epoch":
                out.append((leader, OffsetForLeaderEpochRequest(me, items)))
            elif kind == "fetch":
                out.append((leader, FetchRequest(me, self.manager.broker_epoch, items)))
            else:
                out.extend((leader, ListOffsetsRequest(me, fs.topic, fs.partition, fs.reset_step,
                                                       fs.current_leader_epoch)) for fs in items)
        return out

    # ---- responses ----
    def handle_response(self, leader_id: int, request, response) -> None:
        if isinstance(response, OffsetForLeaderEpochResponse):
            sent = {(i.topic, i.partition): i for i in request.partitions}
            for result in response.partitions:
                self._on_epoch_end_offset(sent.get((result.topic, result.partition)), result)
        elif isinstance(response, FetchResponse):
            sent = {(i.topic, i.partition): i for i in request.partitions}
            parked = self.parked.get(leader_id)
            for result in response.partitions:
                key = (result.topic, result.partition)
                item = sent.get(key)
                if item is None and parked:
                    # A parked partition the leader's session answered: it has news.
                    item = parked.get(key)
                    fs = self.partitions.get(key)
                    if item is not None and fs is not None:
                        self._unpark(fs)
                self._on_fetched(item, result)
        elif isinstance(response, ListOffsetsResponse):
            self._on_list_offsets(request, response)

    def handle_unchanged(self, request: FetchRequest, keys) -> None:
        """The Fetch `request` came back with nothing new for `keys` (an incremental fetch
        session leaves them out of its answer, KIP-227): they are fetched again, nothing else
        changes (an answer with no records and the same high watermark and log start would do
        the same, at more cost).  They are parked: poll leaves them out (the leader's session
        holds their fetch) until an answer names them or their state changes."""
        sent = {(i.topic, i.partition): i for i in request.partitions}
        for key in keys:
            item, fs = sent.get(key), self.partitions.get(key)
            if item is not None and fs is not None and fs.current_leader_epoch == item.current_leader_epoch:
                fs.inflight_since_ms = -1
                if fs.state == FETCHING and not fs.failed and fs.fetch_offset == item.fetch_offset \
                        and self._awake.get(key) is fs:
                    del self._awake[key]
                    self.parked_of(fs.leader_id)[key] = item

    def handle_failure(self, leader_id: int, request) -> None:
        """The request was lost or the leader unreachable: back off every partition in it."""
        now = self.manager.clock()
        if isinstance(request, FetchRequest):
            items = request.partitions
            self._unpark_leader(leader_id, now + self.backoff_ms)   # the session is gone with the leader
        else:
            items = getattr(request, "partitions", None) or [request]
        for item in items:
            fs = self.partitions.get((item.topic, item.partition))
            if fs is not None:
                fs.inflight_since_ms = -1
                fs.backoff_until_ms = now + self.backoff_ms

    def _current(self, item, epoch: int):
        """The fetch state an answer applies to, or None when it is stale."""
        if item is None:
            return None, None
        fs = self.partitions.get((item.topic, item.partition))
        p = self.manager.partitions.get((item.topic, item.partition))
        if fs is None or p is None or (guards.on("M28") and fs.current_leader_epoch != epoch):
            return None, None
        fs.inflight_since_ms = -1
        return fs, p

    def _back_off(self, fs: PartitionFetchState) -> None:
        fs.backoff_until_ms = self.manager.clock() + self.backoff_ms

    def _fenced(self, fs: PartitionFetchState, request_epoch: int) -> None:
        if request_epoch == fs.current_leader_epoch:
            fs.failed = True            # wait for new leadership metadata
        else:
            self._back_off(fs)

    def _truncation_point(self, p, fs: PartitionFetchState, leader_epoch: int, leader_end_offset: int):
        """docs/kafka-formats.md 6.3: (offset, final)."""
        log = p.log
        leo = log.log_end_offset
        if leader_end_offset == -1:
            return min(fs.fetch_offset, leo), True
        if leader_epoch == NO_EPOCH:
            return min(leader_end_offset, leo), True
        local_epoch, local_end = epoch_end_on_the_wire(log, leader_epoch)
        if local_end == -1:
            return min(leader_end_offset, leo), True
        if local_epoch != leader_epoch:
            return min(local_end, leo), False
        return min(local_end, leader_end_offset, leo), True

    def _truncate(self, p, fs: PartitionFetchState, offset: int, *, final: bool, why: str) -> None:
        if offset < p.log.log_end_offset:
            self.truncations.append((fs.topic, fs.partition, offset))
            _log.info("%s-%d: truncating the follower's log from offset %d to %d: %s (leader %d, leader epoch %d)",
                     fs.topic, fs.partition, p.log.log_end_offset, offset, why, fs.leader_id, fs.current_leader_epoch)
        p.log.truncate_to(offset)
        fs.fetch_offset = offset
        _move(fs, FETCHING if final or self.truncate_on_fetch else TRUNCATING)
        latest = p.log.latest_epoch
        fs.last_fetched_epoch = NO_EPOCH if latest is None else latest

    def _on_epoch_end_offset(self, item, result) -> None:
        fs, p = self._current(item, item.current_leader_epoch if item else NO_EPOCH)
        if fs is None or fs.state != TRUNCATING:
            return
        if guards.on("M28") and item.leader_epoch not in (NO_EPOCH, p.log.latest_epoch):
            # An answer for an epoch this follower no longer ends with (a duplicate, or one
            # overtaken by its own truncation since): applied, it would end the iteration too
            # early (simulator seed 501941).  The request for the current epoch is asked again.
            return
        if result.error_code == Errors.NONE:
            offset, final = self._truncation_point(p, fs, result.leader_epoch, result.end_offset)
            self._truncate(p, fs, offset, final=final, why=f"OffsetForLeaderEpoch of epoch {item.leader_epoch}: the "
                           f"leader ends epoch {result.leader_epoch} at offset {result.end_offset}")
        elif result.error_code == Errors.FENCED_LEADER_EPOCH:
            self._fenced(fs, item.current_leader_epoch)
        else:
            self._back_off(fs)

    def _on_fetched(self, item, result) -> None:
        fs, p = self._current(item, item.current_leader_epoch if item else NO_EPOCH)
        if fs is None or fs.state != FETCHING:
            return
        log = p.log
        if guards.on("M28") and (item.fetch_offset != fs.fetch_offset or item.fetch_offset != log.log_end_offset):
            return      # answers an older fetch position
        code = result.error_code
        if code == Errors.NONE and result.diverging_epoch is not None:
            leo_before = log.log_end_offset
            if not guards.on("M10"):
                log.high_watermark = min(result.high_watermark, leo_before)
            offset, _final = self._truncation_point(p, fs, result.diverging_epoch.epoch,
                                                    result.diverging_epoch.end_offset)
            self._truncate(p, fs, offset, final=True, why=f"a diverging epoch (KIP-320): the leader ends epoch "
                           f"{result.diverging_epoch.epoch} at offset {result.diverging_epoch.end_offset}")
            if not guards.on("M10"):
                log.high_watermark = min(result.high_watermark, leo_before)
            return
        if code == Errors.NONE:
            if result.records:
                try:
                    log.append_as_follower(result.records)
                except errors.StorageError:
                    self._back_off(fs)   # corrupt or unexpected data: retry later
                    return
            fs.fetch_offset = log.log_end_offset
            latest = log.latest_epoch
            fs.last_fetched_epoch = NO_EPOCH if latest is None else latest
            log.update_high_watermark(min(result.high_watermark, log.log_end_offset))
            if result.log_start_offset > log.log_start_offset:
                log.increment_log_start_offset(min(result.log_start_offset, log.high_watermark))
        elif code == Errors.OFFSET_OUT_OF_RANGE:
            _move(fs, RESETTING)
            fs.reset_step = LATEST_TIMESTAMP
        elif code == Errors.FENCED_LEADER_EPOCH:
            self._fenced(fs, item.current_leader_epoch)
        else:
            self._back_off(fs)

    def _on_list_offsets(self, request: ListOffsetsRequest, response: ListOffsetsResponse) -> None:
        fs, p = self._current(request, request.current_leader_epoch)
        if fs is None or fs.state != RESETTING or request.timestamp != fs.reset_step:
            return
        if response.error_code == Errors.FENCED_LEADER_EPOCH:
            self._fenced(fs, request.current_leader_epoch)
            return
        if response.error_code != Errors.NONE:
            self._back_off(fs)
            return
        log = p.log
        if fs.reset_step == LATEST_TIMESTAMP:
            if response.offset < log.log_end_offset:
                # The leader ends below us (an unclean election): truncate to its end.
                self._truncate(p, fs, response.offset, final=True,
                               why="the leader's log ends below ours (an unclean election)")
            else:
                fs.reset_step = EARLIEST_TIMESTAMP
            return
        if response.offset > log.log_end_offset:
            self.truncations.append((fs.topic, fs.partition, response.offset))
            _log.info("%s-%d: the follower's log (end offset %d) restarts empty at offset %d: the leader's log starts "
                     "there (leader %d, leader epoch %d)", fs.topic, fs.partition, log.log_end_offset,
                     response.offset, fs.leader_id, fs.current_leader_epoch)
            log.truncate_fully_and_start_at(response.offset)
        fs.fetch_offset = max(response.offset, log.log_end_offset)
        _move(fs, FETCHING)
        fs.reset_step = LATEST_TIMESTAMP
        latest = log.latest_epoch
        fs.last_fetched_epoch = NO_EPOCH if latest is None else latest
