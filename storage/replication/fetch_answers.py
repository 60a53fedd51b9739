"""`FetchAnswers`: how a broker's `ReplicaManager` (storage/replication/replica.py) answers a
Fetch, and `FollowerState`, what a leader learns of each follower from its fetches.

A mixin of ReplicaManager, apart from it because a Fetch is the one request both sides of the
manager answer (the leader for followers and consumers, a follower for consumers when
follower_reads is on, KIP-392) and the one that feeds the ISR and the high watermark.  It uses
the manager's partitions, broker_id, metadata, clock, follower_reads, _check_epoch,
_went_offline, _maybe_expand_isr and _maybe_increment_high_watermark.

Invariants (each guard carries its catalogue id, storage/core/guards.py):
  - the request's budget is Kafka's (KIP-74): the first partition with data returns at least
    one whole batch, later ones only what fits; a partition named twice is read once;
  - a fetch with an older or newer current leader epoch is fenced (M7); one whose last fetched
    epoch shows the follower diverged gets the diverging epoch and no data (KIP-320, M32);
  - a fetch carrying a broker epoch older than the registered one is rejected with
    NOT_LEADER_OR_FOLLOWER and leaves the stored follower state untouched (KIP-903, M13);
  - a consumer never reads past the high watermark (read_uncommitted) or the last stable
    offset (read_committed), nor from a new leader whose high watermark is below its epoch
    start offset (I6).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core import errors, guards
from ..core.errors import Errors
from .messages import (
    CONSUMER_REPLICA_ID,
    NO_EPOCH,
    READ_COMMITTED,
    AbortedTransaction,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    epoch_end_on_the_wire,
)


@dataclass
class FollowerState:
    """The leader's view of one remote replica (Kafka's Replica / ReplicaState)."""

    broker_id: int
    log_end_offset: int = -1
    broker_epoch: int | None = None          # None: no fetch since this leader took over
    last_caught_up_time_ms: int = -1
    last_fetch_time_ms: int = -1
    last_fetch_leader_log_end_offset: int = -1
    log_start_offset: int = -1               # as its last fetch said (DeleteRecords' low watermark)


class FetchAnswers:
    """ReplicaManager's Fetch handling (a mixin: the state is the manager's)."""

    # Observers of the led partitions, for the fetches waiting on them (Kafka's delayed-fetch
    # purgatory keys; the wire layer sets them, nothing here reads them): `on_append(key)` after
    # an append as leader moved the log end, `on_high_watermark(key)` when the high watermark moved.
    on_append = on_high_watermark = None

    def _moved(self, observer, key: tuple[str, int]) -> None:
        if observer is not None:
            observer(key)

    def handle_fetch(self, request: FetchRequest) -> FetchResponse:
        """Kafka's readFromLog budget (KIP-74): the partitions in request order, each read up to
        min(its partition_max_bytes, what is left of the request's max_bytes); the first one
        that returns data returns at least one whole batch, however large, later ones only
        what fits.  A partition named twice is read once, with its last entry at its first
        place (Kafka's FetchRequest keeps them in a map): the answer never grows with copies."""
        unique: dict[tuple[str, int], object] = {}
        for item in request.partitions:
            unique[(item.topic, item.partition)] = item
        budget = [max(request.max_bytes, 0), True]      # bytes left, no data returned yet
        answers = [self._fetch_partition(request, item, budget) for item in unique.values()]
        for a in answers:
            if a.records:       # Kafka's BytesOutPerSec (followers' fetches included)
                stats = self.topic_stats.get(a.topic) or self.topic_stats.setdefault(a.topic, [0, 0, 0])
                stats[2] += len(a.records)
        return FetchResponse(answers)

    def _fetch_partition(self, request: FetchRequest, item, budget: list) -> FetchResponsePartition:
        def answer(code, **kw):
            records = kw.get("records")
            if records:
                left, first = budget
                if not first and len(records) > min(left, item.partition_max_bytes):
                    kw["records"] = records = b""       # later partitions: only what fits
                    if kw.get("aborted_transactions"):
                        kw["aborted_transactions"] = []
                budget[:] = [max(left - len(records), 0), first and not records]
            return FetchResponsePartition(item.topic, item.partition, code, **kw)

        p = self.partitions.get((item.topic, item.partition))
        if p is None:
            return answer(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if self._went_offline():
            return answer(Errors.KAFKA_STORAGE_ERROR)
        code = self._check_epoch(p, item.current_leader_epoch)
        if code:
            return answer(code)
        log = p.log
        from_follower = request.replica_id != CONSUMER_REPLICA_ID
        if p.leader != self.broker_id:
            if from_follower or p.recovering or not self.follower_reads:
                return answer(Errors.NOT_LEADER_OR_FOLLOWER)
            return self._read(p, item, self._consumer_limit(log, request), answer, request,   # KIP-392
                              min(max(item.partition_max_bytes, 0), budget[0]))
        if p.recovering and guards.on("M17"):
            return answer(Errors.NOT_LEADER_OR_FOLLOWER)
        if from_follower and request.replica_id not in p.replicas:
            return answer(Errors.UNKNOWN_LEADER_EPOCH if item.current_leader_epoch != NO_EPOCH
                          else Errors.NOT_LEADER_OR_FOLLOWER)
        if from_follower and request.replica_id == self.broker_id:
            # Only a remote assigned replica fetches as a follower (Kafka's
            # Partition.followerReplicaOrThrow).  The leader's own id would be taken as its
            # follower's: the follower state would hold the leader's own position, the high
            # watermark would stop and acks=all time out after writing.
            return answer(Errors.NOT_LEADER_OR_FOLLOWER)
        if item.last_fetched_epoch != NO_EPOCH and guards.on("M32"):
            if item.last_fetched_epoch == log.epoch_cache.latest_epoch:
                # A follower fetching in the latest epoch (every fetch but the first of an epoch):
                # the cache's answer for its latest epoch is the log end offset (LeaderEpochCache
                # .end_offset_for), without the lookup.
                epoch, end_offset = item.last_fetched_epoch, log.log_end_offset
            else:
                epoch, end_offset = epoch_end_on_the_wire(log, item.last_fetched_epoch)
            if epoch == NO_EPOCH or end_offset == -1 or item.fetch_offset < log.log_start_offset:
                return answer(Errors.OFFSET_OUT_OF_RANGE, high_watermark=log.high_watermark,
                              log_start_offset=log.log_start_offset)
            if epoch < item.last_fetched_epoch or end_offset < item.fetch_offset:
                # KIP-320: the follower diverged; no data, no follower state update.
                return answer(Errors.NONE, high_watermark=log.high_watermark, log_start_offset=log.log_start_offset,
                              diverging_epoch=EpochEndOffset(epoch, end_offset))
        if not from_follower and log.high_watermark < p.leader_epoch_start_offset:
            # A new leader whose high watermark has not reached its epoch start yet would show
            # consumers a high watermark below the one its predecessor showed (I6).
            return answer(Errors.OFFSET_NOT_AVAILABLE)
        limit = log.log_end_offset if from_follower else self._consumer_limit(log, request)
        response = self._read(p, item, limit, answer, request, min(max(item.partition_max_bytes, 0), budget[0]))
        if response.error_code or not from_follower or not request.update_fetch_state:
            return response
        code = self._update_follower(p, request, item.fetch_offset)
        if code:
            return answer(code)
        p.followers[request.replica_id].log_start_offset = item.log_start_offset
        response.high_watermark = log.high_watermark
        return response

    @staticmethod
    def _consumer_limit(log, request: FetchRequest) -> int:
        """Kafka's FetchIsolation for a consumer: up to the LSO for read_committed, else the HW."""
        return log.last_stable_offset if request.isolation_level == READ_COMMITTED else log.high_watermark

    def _read(self, p, item, limit: int, answer, request: FetchRequest,
              max_bytes: int) -> FetchResponsePartition:
        log = p.log
        if item.fetch_offset < log.log_start_offset or item.fetch_offset > log.log_end_offset:
            return answer(Errors.OFFSET_OUT_OF_RANGE, high_watermark=log.high_watermark,
                          log_start_offset=log.log_start_offset)
        records = b""
        if item.fetch_offset < limit:     # zero-copy: a view of the segment (messages.sent copies)
            try:
                records = log.read(item.fetch_offset, max_bytes, max_offset=limit) or b""
            except errors.StorageError as exc:      # e.g. a sealed segment found damaged at its first use
                self._went_offline()
                return answer(int(exc.error_code))
        aborted = None
        if request.isolation_level == READ_COMMITTED and request.replica_id == CONSUMER_REPLICA_ID:
            # The aborted transactions overlapping [fetch offset, limit): a superset of those
            # the records touch, as Kafka's (bounded by an index entry); the consumer filters.
            aborted = [AbortedTransaction(t.producer_id, t.first_offset)
                       for t in log.collect_aborted_transactions(item.fetch_offset, limit)] if records else []
        return answer(Errors.NONE, high_watermark=log.high_watermark, log_start_offset=log.log_start_offset,
                      records=records, last_stable_offset=log.last_stable_offset, aborted_transactions=aborted)

    def _update_follower(self, p, request: FetchRequest, fetch_offset: int) -> int:
        follower = p.followers.setdefault(request.replica_id, FollowerState(request.replica_id))
        info = self.metadata.get(request.replica_id)
        if guards.on("M13") and request.replica_epoch != -1 and info is not None \
                and info.broker_epoch > request.replica_epoch:
            return Errors.NOT_LEADER_OR_FOLLOWER     # KIP-903: a stale incarnation; state untouched
        now = self.clock()
        leader_end = p.log.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_time_ms = now
        elif fetch_offset >= follower.last_fetch_leader_log_end_offset >= 0:
            follower.last_caught_up_time_ms = follower.last_fetch_time_ms
        follower.log_end_offset = fetch_offset
        follower.broker_epoch = request.replica_epoch
        follower.last_fetch_time_ms = now
        follower.last_fetch_leader_log_end_offset = leader_end
        self._maybe_expand_isr(p, follower)
        self._maybe_increment_high_watermark(p)
        return Errors.NONE

    # ---- a fetch session's still partitions (storage/wire/fetch_sessions.py) --------------------
    def still_follower(self, key: tuple[str, int], replica_id: int, replica_epoch: int, fetch_offset: int,
                       told_high_watermark: int, told_log_start: int) -> FollowerState | None:
        """The state of follower `replica_id` of led partition `key` when a fetch of it at
        `fetch_offset` would change nothing but the follower's clock, else None: the follower
        is in the ISR (nothing to expand), caught up with the log end as of its last fetch, the
        high watermark is the log end (nothing to move), and it was told that high watermark
        and log start.  Until one of them moves (an append, a high watermark or log start move,
        any change counted by `changes`), `touch_followers` does what `_update_follower` would."""
        p = self.partitions.get(key)
        if p is None or p.leader != self.broker_id or p.recovering or replica_id not in p.isr:
            return None
        follower, log = p.followers.get(replica_id), p.log
        end = log.log_end_offset
        if follower is None or follower.broker_epoch != replica_epoch or fetch_offset != end \
                or follower.log_end_offset != end or follower.last_fetch_leader_log_end_offset != end \
                or log.high_watermark != end or told_high_watermark != end or told_log_start != log.log_start_offset:
            return None
        return follower

    def touch_followers(self, followers) -> None:
        """Kafka's updateFollowerFetchState for still partitions (see `still_follower`): a fetch
        at the leader's log end makes the follower caught up now; nothing else moves."""
        now = self.clock()
        for follower in followers:
            follower.last_caught_up_time_ms = follower.last_fetch_time_ms = now
