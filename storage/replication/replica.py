"""`ReplicaManager`: the leader and follower sides of one broker, over a `LogDir`.

Transport-agnostic: every handler takes a request dataclass (storage.replication.messages) and returns a
response; what the broker must send (AlterPartition to the controller, fetches to leaders) is
collected in outboxes that the caller drains (`take_alter_partition_requests`,
`fetcher.poll`).  Nothing here touches files except through `PartitionLog`.

Invariants (each guard carries its catalogue id, storage/core/guards.py):
  - partition state with an older leader or partition epoch is ignored (M30);
  - becoming leader with a bumped epoch assigns (epoch, log end offset) in the epoch cache before
    anything else (M4), forgets what it knew of followers -- ISR members (M8) and the others
    (M29) -- and remembers the leader
    epoch start offset; without a bump nothing of that happens;
  - a follower joins the ISR only when it is caught up -- log end offset >= high watermark and
    >= the leader epoch start offset (M9) -- and eligible: known to the metadata, not fenced,
    not shutting down (KIP-841, M12), and its broker epoch from its last fetch equals the one
    registered (KIP-903, M13); the AlterPartition request is built from the same snapshot as
    the check, one change at a time, and a retry keeps the broker epochs (M15);
  - Fetch answers (the KIP-74 budget, M7, M32, KIP-903's stale fetch, follower reads) are
    FetchAnswers' (storage/replication/fetch_answers.py), ListOffsets and DeleteRecords
    OffsetAnswers' (offset_answers.py): mixins of ReplicaManager;
  - the high watermark is the minimum log end offset over the leader and the maximal ISR
    (pending additions included, M11) and caught-up eligible followers; it never moves back
    and does not advance while the ISR is below min.insync.replicas (M19);
  - a RECOVERING leader (KIP-704, M17) keeps the ISR at itself and answers fetch, produce,
    list-offsets, delete-records and OffsetForLeaderEpoch with NOT_LEADER_OR_FOLLOWER until its
    recovery hook ran and the controller accepted RECOVERED; a follower serving consumer reads
    does the same while the partition is RECOVERING;
  - StopReplica with an older leader epoch is fenced and leaves the partition alone (KIP-570,
    M16); a stale controller epoch fences the whole request.
"""
from __future__ import annotations

import logging
from typing import Callable

from ..core import errors, guards
from ..core.clock import monotonic_ms
from ..core.errors import Errors
from ..dir.logdir import LogDir
from .delayed import DelayedProduce, DelayedProduces, log_append_time
from .fetch_answers import FetchAnswers, FollowerState
from .messages import (
    EPOCH_DURING_DELETE,
    NO_EPOCH,
    NO_LEADER,
    RECOVERED,
    RECOVERING,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerEpoch,
    BrokerInfo,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataUpdate,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderEpochResult,
    PartitionState,
    ProduceRequest,
    ProduceResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    TxnMarker,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    epoch_end_on_the_wire,
    produce_response,
)
from .offset_answers import OffsetAnswers

_log = logging.getLogger("storage.replica")   # docs/guide-operations.md, Logs


class Partition:
    """One hosted partition: its log and its replication state on this broker."""

    def __init__(self, topic: str, partition: int, log):
        self.topic, self.partition, self.log = topic, partition, log
        self.key = (topic, partition)
        self.leader = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = -1
        self.isr: list[int] = []
        self.replicas: list[int] = []
        self.leader_recovery_state = RECOVERED
        self.leader_epoch_start_offset = -1
        self.followers: dict[int, FollowerState] = {}
        self.inflight: AlterPartitionRequest | None = None   # the one AlterPartition in flight
        self.recovery_done = True                             # KIP-704 hook finished

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR including additions in flight (Kafka's maximalIsr)."""
        if self.inflight is None:
            return self.isr
        return sorted(set(self.isr) | set(self.inflight.new_isr))

    @property
    def recovering(self) -> bool:
        return self.leader_recovery_state == RECOVERING

    def state(self) -> PartitionState:
        return PartitionState(self.topic, self.partition, self.leader, self.leader_epoch, self.partition_epoch,
                              list(self.isr), list(self.replicas), self.leader_recovery_state)


class ReplicaManager(FetchAnswers, OffsetAnswers):
    """One broker's replicas.  `recovery_hook(partition)` runs when this broker becomes an
    unclean (RECOVERING) leader; it returns True when recovery is complete, False when the
    caller will call `complete_leader_recovery` later."""

    def __init__(self, broker_id: int, logdir: LogDir, *, broker_epoch: int = -1, min_insync_replicas: int = 1,
                 replica_lag_time_max_ms: int = 30_000, produce_timeout_ms: int = 30_000,
                 clock: Callable[[], int] | None = None, recovery_hook=None, fetcher_options: dict | None = None,
                 follower_reads: bool = False, isr_check_interval_ms: int = 0):
        from .fetcher import ReplicaFetcher

        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.logdir = logdir
        self.min_insync_replicas = min_insync_replicas
        self.topic_min_isr: dict[str, int] = {}     # topic-level min.insync.replicas overrides
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # The ISR scan runs at most this often (0: every tick); a broker uses Kafka's
        # isr-expiration period, replica.lag.time.max.ms / 2.
        self.isr_check_interval_ms, self._next_isr_check = isr_check_interval_ms, 0
        self.produce_timeout_ms = produce_timeout_ms
        self.clock = clock or monotonic_ms
        self.recovery_hook = recovery_hook
        self.follower_reads = follower_reads    # KIP-392 reads from followers (opt-in, as in Kafka)
        self.controller_epoch = 0
        self.metadata: dict[int, BrokerInfo] = {}
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._alter_outbox: list[AlterPartitionRequest] = []
        self._delayed = DelayedProduces()      # acks=all waiters by partition (delayed.py)
        self.changes = 0    # bumped by any state change but an append or a HW move (fetch sessions)
        # Kafka's BrokerTopicMetrics (per topic: client bytes and records appended as leader, bytes
        # fetched) and the ISR changes this leader committed, for the broker's metrics.
        self.topic_stats: dict[str, list[int]] = {}     # topic -> [bytes in, messages in, bytes out]
        self.isr_shrinks = self.isr_expands = 0
        self.fetcher = ReplicaFetcher(self, **(fetcher_options or {}))

    # ---- controller-facing ------------------------------------------------------------------
    def apply_metadata(self, update: MetadataUpdate) -> None:
        if update.controller_epoch < self.controller_epoch:
            return
        self.controller_epoch = update.controller_epoch
        self.metadata = {b: BrokerInfo(i.broker_id, i.broker_epoch, i.fenced, i.in_controlled_shutdown)
                         for b, i in update.brokers.items()}

    def _stale_incarnation(self, broker_epoch: int) -> bool:
        """KIP-380: a controller request addressed to an earlier incarnation of this broker (sent
        before it registered again, delivered after) is refused."""
        return broker_epoch != -1 and self.broker_epoch != -1 and broker_epoch < self.broker_epoch

    def handle_leader_and_isr(self, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        if request.controller_epoch < self.controller_epoch:
            return LeaderAndIsrResponse(Errors.STALE_CONTROLLER_EPOCH)
        if self._stale_incarnation(request.broker_epoch):
            return LeaderAndIsrResponse(Errors.STALE_BROKER_EPOCH)
        self.controller_epoch = request.controller_epoch
        return LeaderAndIsrResponse(Errors.NONE, {(s.topic, s.partition): self.apply_partition_state(s)
                                                  for s in request.partition_states})

    def apply_partition_state(self, state: PartitionState) -> int:
        """Become leader or follower of a partition as `state` says; returns an error code."""
        key = (state.topic, state.partition)
        p = self.partitions.get(key)
        if p is None:
            log = self.logdir.partition(state.topic, state.partition)
            if log.unvouched_high_watermark_above is not None:
                # Stricter than Kafka: after a crash the page cache may have given back an
                # older, divergent version of the log above the recovery point; the
                # checkpointed high watermark does not vouch for it.  The leader's answers
                # raise it again once the log is truncated and fetched.
                log.update_high_watermark(log.unvouched_high_watermark_above)
            p = Partition(state.topic, state.partition, log)
            self.partitions[key] = p
        elif guards.on("M30") and (state.partition_epoch < p.partition_epoch or state.leader_epoch < p.leader_epoch):
            return Errors.FENCED_LEADER_EPOCH
        elif state.partition_epoch == p.partition_epoch and state.leader_epoch == p.leader_epoch:
            return Errors.NONE
        if state.leader == self.broker_id:
            self._make_leader(p, state)
        else:
            self._make_follower(p, state)
        return Errors.NONE

    def _make_leader(self, p: Partition, state: PartitionState) -> None:
        bumped = state.leader_epoch > p.leader_epoch or p.leader != self.broker_id
        p.leader, p.leader_epoch, p.partition_epoch = state.leader, state.leader_epoch, state.partition_epoch
        p.isr, p.replicas = list(state.isr), list(state.replicas)
        p.leader_recovery_state = state.leader_recovery_state
        if bumped:
            self.fetcher.remove_partition(p.key)
            if guards.on("M4"):
                p.log.assign_epoch_start_offset(state.leader_epoch)   # durable before anything else
            # Forget what the previous epochs taught about every follower: nothing learned
            # before this epoch counts until the follower fetches in it.  ISR members start as
            # caught up (Kafka does): the ISR must not shrink at the first tick after an
            # election, before anyone had a chance to fetch.
            now = self.clock()
            old, p.followers = p.followers, {}
            for b in p.replicas:
                if b == self.broker_id:
                    continue
                in_isr = b in p.isr
                kept = old.get(b)
                # M8: an ISR member's log end offset from an older epoch must not count for the
                # high watermark (it may have truncated since, under another leader).
                # M29: a follower outside the ISR keeps nothing (offset, caught-up time, broker
                # epoch) from an older epoch either.
                if kept is not None and not guards.on("M8" if in_isr else "M29"):
                    p.followers[b] = kept
                else:
                    p.followers[b] = FollowerState(b, last_caught_up_time_ms=now if in_isr else -1)
            p.leader_epoch_start_offset = p.log.log_end_offset
            p.inflight = None
            if p.recovering:
                p.recovery_done = False
                if self.recovery_hook is None or self.recovery_hook(p) is not False:
                    self.complete_leader_recovery(p.topic, p.partition)
        elif p.inflight is not None and (set(p.isr) == set(p.inflight.new_isr)
                                         or state.partition_epoch > p.inflight.partition_epoch):
            p.inflight = None           # committed metadata newer than the request replaces it
        self._maybe_increment_high_watermark(p)

    def _make_follower(self, p: Partition, state: PartitionState) -> None:
        changed = state.leader_epoch != p.leader_epoch or state.leader != p.leader
        was_leader = p.leader == self.broker_id
        p.leader, p.leader_epoch, p.partition_epoch = state.leader, state.leader_epoch, state.partition_epoch
        p.isr, p.replicas = list(state.isr), list(state.replicas)
        p.leader_recovery_state = state.leader_recovery_state
        p.followers, p.inflight = {}, None
        if was_leader:
            self._fail_delayed(p, Errors.NOT_LEADER_OR_FOLLOWER)
        if state.leader == NO_LEADER or self.broker_id not in state.replicas:
            self.fetcher.remove_partition(p.key)
        elif changed or not self.fetcher.has_partition(p.key):
            self.fetcher.add_partition(p, state.leader, state.leader_epoch)

    def complete_leader_recovery(self, topic: str, partition: int) -> None:
        """KIP-704: the recovery hook is done; report RECOVERED (ISR = [leader])."""
        p = self.partitions[(topic, partition)]
        p.recovery_done = True
        self.changes += 1
        if p.leader == self.broker_id and p.recovering:
            self._submit_alter_partition(p, [self.broker_id], RECOVERED)

    def handle_stop_replica(self, request: StopReplicaRequest) -> StopReplicaResponse:
        if request.controller_epoch < self.controller_epoch:
            return StopReplicaResponse(Errors.STALE_CONTROLLER_EPOCH)
        if self._stale_incarnation(request.broker_epoch):
            return StopReplicaResponse(Errors.STALE_BROKER_EPOCH)
        self.controller_epoch = request.controller_epoch
        results = {}
        for item in request.partitions:
            key = (item.topic, item.partition)
            p = self.partitions.get(key)
            if p is not None:
                epoch = item.leader_epoch
                accepted = epoch in (EPOCH_DURING_DELETE, NO_EPOCH) or epoch >= p.leader_epoch \
                    or not guards.on("M16")
                if not accepted:
                    results[key] = Errors.FENCED_LEADER_EPOCH
                    continue
                self.fetcher.remove_partition(key)
                self._fail_delayed(p, Errors.NOT_LEADER_OR_FOLLOWER)
                del self.partitions[key]
            if item.delete_partition:
                self.logdir.delete_partition(item.topic, item.partition)
            results[key] = Errors.NONE
        return StopReplicaResponse(Errors.NONE, results)

    def take_alter_partition_requests(self) -> list[AlterPartitionRequest]:
        out, self._alter_outbox = self._alter_outbox, []
        return out

    def alter_partition_requests_waiting(self) -> bool:
        return bool(self._alter_outbox)

    def handle_alter_partition_response(self, request: AlterPartitionRequest, response: AlterPartitionResponse) -> None:
        p = self.partitions.get((response.topic, response.partition))
        if p is None or p.inflight is not request or p.leader != self.broker_id:
            return      # a stale answer: leadership or the request changed meanwhile
        self.changes += 1
        code = response.error_code
        if code != Errors.NONE:
            _log.info("%s-%d: AlterPartition to ISR %s answered %s", p.topic, p.partition, request.new_isr,
                      Errors(code).name)
        if code == Errors.NONE:
            if response.leader_epoch == p.leader_epoch and response.partition_epoch >= p.partition_epoch:
                if len(response.isr) != len(p.isr):
                    if len(response.isr) < len(p.isr):
                        self.isr_shrinks += 1
                    else:
                        self.isr_expands += 1
                _log.info("%s-%d: ISR updated to %s (partition epoch %d)", p.topic, p.partition, response.isr,
                          response.partition_epoch)
                p.isr = list(response.isr)
                p.partition_epoch = response.partition_epoch
                p.leader_recovery_state = response.leader_recovery_state
            p.inflight = None
            self._maybe_increment_high_watermark(p)
        elif code in (Errors.INELIGIBLE_REPLICA, Errors.OPERATION_NOT_ATTEMPTED, Errors.INVALID_REQUEST):
            p.inflight = None           # not applied: back to the last committed ISR, no retry
        elif code in (Errors.FENCED_LEADER_EPOCH, Errors.INVALID_UPDATE_VERSION, Errors.UNKNOWN_TOPIC_OR_PARTITION,
                      Errors.UNKNOWN_TOPIC_ID):
            # No retry, but the change stays pending (it counts for the maximal ISR) until new
            # metadata replaces it: the controller may have applied this very request -- the
            # error can answer a duplicate of it -- and then holds an ISR we have not seen.
            pass
        elif code == Errors.NEW_LEADER_ELECTED:
            pass                        # stays pending
        else:
            self._resend(p)

    def _resend(self, p: Partition) -> None:
        request = p.inflight
        if not guards.on("M15"):
            request.new_isr_with_epochs = [BrokerEpoch(m.broker_id, -1) for m in request.new_isr_with_epochs]
        self._alter_outbox.append(request)

    def retry_alter_partition(self, topic: str, partition: int) -> None:
        """Resend the in-flight AlterPartition (after a lost request or a retriable error)."""
        p = self.partitions.get((topic, partition))
        if p is not None and p.inflight is not None:
            self._resend(p)

    def _submit_alter_partition(self, p: Partition, new_isr: list[int], recovery_state: int) -> None:
        members = []
        for b in new_isr:
            if b == self.broker_id:
                epoch = self.broker_epoch
            else:
                follower = p.followers.get(b)
                epoch = follower.broker_epoch if follower and follower.broker_epoch is not None else -1
            members.append(BrokerEpoch(b, epoch))
        request = AlterPartitionRequest(self.broker_id, self.broker_epoch, p.topic, p.partition, p.leader_epoch,
                                        members, recovery_state, p.partition_epoch)
        p.inflight = request
        self._alter_outbox.append(request)

    # ---- eligibility and the high watermark ----------------------------------------------------
    def _isr_eligible(self, broker_id: int, follower: FollowerState) -> bool:
        info = self.metadata.get(broker_id)
        if info is None:
            return False
        if guards.on("M12") and (info.fenced or info.in_controlled_shutdown):
            return False
        if not guards.on("M13"):
            return True
        if follower.broker_epoch is None:
            return False
        return follower.broker_epoch == -1 or follower.broker_epoch == info.broker_epoch

    def _caught_up(self, follower: FollowerState, now: int) -> bool:
        return follower.last_caught_up_time_ms >= 0 and now - follower.last_caught_up_time_ms <= self.replica_lag_time_max_ms

    def _maybe_expand_isr(self, p: Partition, follower: FollowerState) -> None:
        if p.inflight is not None or follower.broker_id in p.isr or p.recovering:
            return
        hw = p.log.high_watermark
        if guards.on("M9"):
            if follower.log_end_offset < hw or follower.log_end_offset < p.leader_epoch_start_offset:
                return
        if not self._isr_eligible(follower.broker_id, follower):
            return
        _log.info("%s-%d: expanding the ISR from %s to add replica %d: it caught up to offset %d (high watermark "
                  "%d, leader epoch %d from offset %d)", p.topic, p.partition, p.isr, follower.broker_id,
                  follower.log_end_offset, hw, p.leader_epoch, p.leader_epoch_start_offset)
        self._submit_alter_partition(p, sorted(set(p.isr) | {follower.broker_id}), p.leader_recovery_state)

    def _maybe_increment_high_watermark(self, p: Partition) -> bool:
        """Kafka's Partition.maybeIncrementLeaderHW: the minimum log end offset over the leader,
        the maximal ISR and the caught-up eligible followers, only forward.  Runs after every
        append, so the common cases are cheap: a partition without followers (its replicas are
        the leader alone) takes its log end offset without reading the clock, and the waiting
        produces are looked at only when one waits on this partition."""
        if p.leader != self.broker_id or self.offline:
            return False
        log = p.log
        candidate = log.log_end_offset
        if candidate <= log.high_watermark:
            return False            # nothing new to cover: the minimum below cannot exceed it
        if guards.on("M19") and len(p.isr) < self.topic_min_isr.get(p.topic, self.min_insync_replicas):
            return False        # (_min_isr inline: this runs after every append)
        if p.followers:
            now = self.clock()
            wait_for = p.maximal_isr if guards.on("M11") else p.isr
            for follower in p.followers.values():
                waiting = follower.broker_id in wait_for or (
                    self._caught_up(follower, now) and self._isr_eligible(follower.broker_id, follower))
                if waiting and follower.log_end_offset < candidate:
                    candidate = follower.log_end_offset
            if candidate <= log.high_watermark:
                return False
        log.update_high_watermark(candidate)
        if self.on_high_watermark is not None:
            self.on_high_watermark(p.key)
        if self._delayed.waiting(p.key):
            self._complete_delayed(p)
        return True

    def tick(self) -> None:
        """Periodic work: shrink the ISR of lagging followers (every isr_check_interval_ms),
        expire delayed produces."""
        if self._went_offline():
            return
        now = self.clock()
        if now >= self._next_isr_check:
            self._next_isr_check = now + self.isr_check_interval_ms
            self._shrink_isrs(now)
        for d in self._delayed.take_expired(now):
            d.callback(d.answer(Errors.REQUEST_TIMED_OUT))

    def _shrink_isrs(self, now: int) -> None:
        """Kafka's maybeShrinkIsr: each led partition's followers out of sync leave its ISR."""
        for p in self.partitions.values():
            if p.leader != self.broker_id or p.inflight is not None or p.recovering:
                continue
            out = [b for b in p.isr if b != self.broker_id and b in p.followers
                   and not self._caught_up(p.followers[b], now)]
            if out:
                _log.info("%s-%d: shrinking the ISR from %s: %s out of sync (high watermark %d, log end %d, "
                          "replica.lag.time.max.ms %d)", p.topic, p.partition, p.isr, ", ".join(
                              self._lag(p.followers[b], now) for b in out), p.log.high_watermark,
                          p.log.log_end_offset, self.replica_lag_time_max_ms)
                self._submit_alter_partition(p, [b for b in p.isr if b not in out], p.leader_recovery_state)

    @staticmethod
    def _lag(f: FollowerState, now: int) -> str:
        since = "never caught up with this leader" if f.last_caught_up_time_ms < 0 else \
            f"last caught up {now - f.last_caught_up_time_ms} ms ago"
        return f"replica {f.broker_id} (log end offset {f.log_end_offset}, {since})"

    def _min_isr(self, topic: str) -> int:
        return self.topic_min_isr.get(topic, self.min_insync_replicas)

    # ---- request checks ------------------------------------------------------------------------
    def _check_epoch(self, p: Partition, current_leader_epoch: int) -> int:
        if current_leader_epoch == NO_EPOCH or not guards.on("M7"):
            return Errors.NONE
        if current_leader_epoch < p.leader_epoch:
            return Errors.FENCED_LEADER_EPOCH
        if current_leader_epoch > p.leader_epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        return Errors.NONE

    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = NO_EPOCH):
        """(partition, error) for a request only the leader answers, KIP-704 included."""
        p = self.partitions.get((topic, partition))
        if p is None:
            return None, Errors.UNKNOWN_TOPIC_OR_PARTITION
        if self.offline:        # Kafka's HostedPartition.Offline
            return None, Errors.KAFKA_STORAGE_ERROR
        return self._led(p, current_leader_epoch)

    def _led(self, p: Partition, current_leader_epoch: int = NO_EPOCH):
        """leader_partition's checks after the offline one (for a caller that just made it)."""
        code = self._check_epoch(p, current_leader_epoch)
        if code:
            return None, code
        if p.leader != self.broker_id or (p.recovering and guards.on("M17")):
            return None, Errors.NOT_LEADER_OR_FOLLOWER
        return p, Errors.NONE

    # ---- OffsetForLeaderEpoch ------------------------------------------------------------------
    def handle_offset_for_leader_epoch(self, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
        results = []
        for item in request.partitions:
            p, code = self.leader_partition(item.topic, item.partition, item.current_leader_epoch)
            if code:
                results.append(OffsetForLeaderEpochResult(item.topic, item.partition, code))
                continue
            if guards.on("M3"):
                epoch, end_offset = epoch_end_on_the_wire(p.log, item.leader_epoch)
            else:   # KIP-101 v0: only an offset, the epoch is not echoed
                epoch, end_offset = NO_EPOCH, epoch_end_on_the_wire(p.log, item.leader_epoch)[1]
            results.append(OffsetForLeaderEpochResult(item.topic, item.partition, Errors.NONE, epoch, end_offset))
        return OffsetForLeaderEpochResponse(results)

    # ---- produce -------------------------------------------------------------------------------
    def handle_produce(self, request: ProduceRequest,
                       callback: Callable[[ProduceResponse], None] | None = None) -> ProduceResponse | None:
        """Append as leader.  acks 0/1 answer at once (_produce_now); acks=-1 answers (through
        `callback`, and returns None) when the high watermark passes the batch, or at the timeout.
        The wire's express path passes an acks 0 or 1 request as the tuple (topic, partition,
        records) and gets _produce_now's tuple back: no request or response objects."""
        if request.__class__ is tuple:
            return self._produce_now(*request)

        def answer(code, base_offset=-1, failure=None, append_time=-1):
            response = produce_response(request.topic, request.partition, code, base_offset, failure, append_time)
            if callback is not None:
                callback(response)
            return response

        if request.acks in (0, 1):
            code, base_offset, _, failure, append_time = self._produce_now(request.topic, request.partition,
                                                                          request.records, request.origin)
            return answer(code, base_offset, failure, append_time)
        if request.acks != -1:
            return answer(Errors.INVALID_REQUIRED_ACKS)
        if self._went_offline():
            return answer(Errors.KAFKA_STORAGE_ERROR)
        p = self.partitions.get((request.topic, request.partition))
        if p is None:
            return answer(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        p, code = self._led(p)      # offline was checked just above
        if code:
            return answer(code)
        if len(p.isr) < self._min_isr(p.topic):
            return answer(Errors.NOT_ENOUGH_REPLICAS)
        try:
            info = p.log.append_as_leader(request.records, p.leader_epoch, origin=request.origin)
        except errors.StorageError as exc:
            self._went_offline()       # fail what waits, if this append took the dir offline
            return answer(int(exc.error_code), failure=exc)
        self._appended(p, info)
        if callback is None:
            raise ValueError("acks=-1 needs a callback: the answer comes when the high watermark moves")
        self._delayed.add(DelayedProduce(p.topic, p.partition, info.last_offset + 1, info.first_offset, callback,
                                         self.clock() + self.produce_timeout_ms, log_append_time(p.log, info)))
        if not self._maybe_increment_high_watermark(p):
            # Kafka's tryCompleteElseWatch: a retried batch (a duplicate, answered with its first
            # offsets) may already be below the high watermark, which then need not move again.
            self._complete_delayed(p)
        return None

    def _produce_now(self, topic: str, partition: int, records, origin: str = "client"):
        """handle_produce of acks 0 or 1 without request and response objects: (error code, base
        offset, log start offset, the StorageError or None, log append time), the offsets and the
        time -1 on an error.  Its checks in its order -- the dir online, the partition hosted, led,
        not RECOVERING (_led without a current leader epoch) -- the append, its observer and stats,
        the high watermark."""
        if self.logdir.failure_channel.first_failure is not None and self._went_offline():
            return Errors.KAFKA_STORAGE_ERROR, -1, -1, None, -1
        p = self.partitions.get((topic, partition))
        if p is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, None, -1
        if p.leader != self.broker_id or (p.leader_recovery_state == RECOVERING and guards.on("M17")):
            return Errors.NOT_LEADER_OR_FOLLOWER, -1, -1, None, -1
        log = p.log
        try:
            info = log.append_as_leader(records, p.leader_epoch, origin=origin)
        except errors.StorageError as exc:
            self._went_offline()       # fail what waits, if this append took the dir offline
            return int(exc.error_code), -1, -1, exc, -1
        self._appended(p, info)
        self._maybe_increment_high_watermark(p)
        return Errors.NONE, info.first_offset, log.log_start_offset, None, \
            info[2] if info[7] or log.config.message_timestamp_type != "CreateTime" else -1  # log_append_time inline

    def _appended(self, p: Partition, info) -> None:
        """After an append as leader: its observer (fetches wait on the log end), the topic's stats."""
        if self.on_append is not None:
            self.on_append(p.key)
        stats = self.topic_stats.get(p.topic) or self.topic_stats.setdefault(p.topic, [0, 0, 0])
        stats[0] += info.size_bytes
        stats[1] += info.record_count

    # ---- WriteTxnMarkers (from a transaction coordinator) ------------------------------------------
    def handle_write_txn_markers(self, request: WriteTxnMarkersRequest,
                                 callback: Callable[[WriteTxnMarkersResponse], None] | None = None
                                 ) -> WriteTxnMarkersResponse | None:
        """Write each transaction's end marker (COMMIT or ABORT) on the partitions this broker
        leads, with the coordinator origin.  Kafka writes markers with acks=all: with `callback`
        the response comes once the high watermark passes every marker written (returns None);
        without one it answers once they are in the leaders' logs."""
        response = WriteTxnMarkersResponse()
        waiting, touched = [0], {}

        def settle(codes: dict, key: tuple[str, int]):
            def complete(produced: ProduceResponse) -> None:
                codes[key] = produced.error_code
                waiting[0] -= 1
                if waiting[0] == 0:
                    callback(response)
            return complete

        for marker in request.markers:
            codes = response.errors.setdefault(marker.producer_id, {})
            for key in marker.partitions:
                codes[key], info, p = self._append_marker(marker, *key)
                if info is not None and callback is not None:
                    waiting[0] += 1
                    touched[p.key] = p
                    self._delayed.add(DelayedProduce(p.topic, p.partition, info.last_offset + 1,
                                                     info.first_offset, settle(codes, key),
                                                     self.clock() + self.produce_timeout_ms))
        if callback is None:
            return response
        if waiting[0] == 0:
            callback(response)
        for p in touched.values():
            if not self._maybe_increment_high_watermark(p):
                self._complete_delayed(p)
        return None

    def _append_marker(self, marker: TxnMarker, topic: str, partition: int):
        """(error code, AppendInfo or None, partition) of one marker on one partition."""
        if self._went_offline():
            return Errors.KAFKA_STORAGE_ERROR, None, None
        p, code = self.leader_partition(topic, partition)
        if code:
            return code, None, None
        if len(p.isr) < self._min_isr(p.topic):
            return Errors.NOT_ENOUGH_REPLICAS, None, None
        try:
            info = p.log.append_txn_marker(marker.producer_id, marker.producer_epoch, marker.commit,
                                           marker.coordinator_epoch, p.leader_epoch)
        except errors.StorageError as exc:
            self._went_offline()
            return int(exc.error_code), None, None
        self._moved(self.on_append, p.key)
        return Errors.NONE, info, p

    def _complete_delayed(self, p: Partition) -> None:
        if not self._delayed.waiting(p.key) or self._went_offline():
            return
        done = self._delayed.take_reached(p.key, p.log.high_watermark)
        if done:
            code = Errors.NONE if len(p.isr) >= self._min_isr(p.topic) else Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            for d in done:
                d.callback(d.answer(code))

    def _fail_delayed(self, p: Partition, code: int) -> None:
        for d in self._delayed.take_all(p.key):
            d.callback(d.answer(code))

    # ---- an offline log dir (Kafka's ReplicaManager.handleLogDirFailure) --------------------------
    @property
    def offline(self) -> bool:
        """The log dir went offline (an I/O failure, storage/core/failure.py): from then on this broker
        answers KAFKA_STORAGE_ERROR, acknowledges nothing and moves no high watermark (M31).
        Kafka halts a broker whose last log dir failed; the cluster model does (BrokerNode).
        (LogDir.offline read through its failure channel: this is asked twice per append.)"""
        return self.logdir.failure_channel.first_failure is not None and guards.on("M31")

    def _went_offline(self) -> bool:
        """True (after go_offline) when the log dir is offline: the callers' early return."""
        if not self.offline:
            return False
        self.go_offline()
        return True

    def go_offline(self) -> None:
        """Fail every waiting produce with KAFKA_STORAGE_ERROR and stop fetching."""
        for p in list(self.partitions.values()):
            self._fail_delayed(p, Errors.KAFKA_STORAGE_ERROR)
        self.fetcher.clear()

    @staticmethod
    def _storage_error_answer(message):
        code = Errors.KAFKA_STORAGE_ERROR
        if isinstance(message, FetchRequest):
            return FetchResponse([FetchResponsePartition(i.topic, i.partition, code) for i in message.partitions])
        if isinstance(message, OffsetForLeaderEpochRequest):
            return OffsetForLeaderEpochResponse([OffsetForLeaderEpochResult(i.topic, i.partition, code)
                                                 for i in message.partitions])
        if isinstance(message, ListOffsetsRequest):
            return ListOffsetsResponse(message.topic, message.partition, code)
        if isinstance(message, DeleteRecordsRequest):
            return DeleteRecordsResponse(message.topic, message.partition, code)
        if isinstance(message, LeaderAndIsrRequest):
            return LeaderAndIsrResponse(code)
        if isinstance(message, StopReplicaRequest):
            return StopReplicaResponse(code)
        return None

    # ---- dispatch ------------------------------------------------------------------------------
    def handle(self, message):
        """Answer any request a broker receives (controller pushes included); None for one-way
        messages.  Transports call this with what they decoded.  A request that meets an offline
        log dir, or takes it offline, is answered KAFKA_STORAGE_ERROR."""
        if self._went_offline():
            return self._storage_error_answer(message)
        if not isinstance(message, (FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest)):
            self.changes += 1
        try:
            return self._dispatch(message)
        except errors.LogDirOfflineError:
            if not guards.on("M31"):
                raise
            self.go_offline()
            return self._storage_error_answer(message)

    def _dispatch(self, message):
        if isinstance(message, MetadataUpdate):
            return self.apply_metadata(message)
        for kind, handler in ((LeaderAndIsrRequest, self.handle_leader_and_isr),
                              (StopReplicaRequest, self.handle_stop_replica),
                              (FetchRequest, self.handle_fetch),
                              (OffsetForLeaderEpochRequest, self.handle_offset_for_leader_epoch),
                              (ListOffsetsRequest, self.handle_list_offsets),
                              (DeleteRecordsRequest, self.handle_delete_records)):
            if isinstance(message, kind):
                return handler(message)
        raise TypeError(f"a broker does not handle {type(message).__name__}")

    # ---- life cycle ------------------------------------------------------------------------------
    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        p = self.partitions.get((topic, partition))
        return None if p is None else p.state()

    def shutdown(self) -> None:
        """Fail pending requests and close the log dir (clean shutdown)."""
        for p in list(self.partitions.values()):
            self._fail_delayed(p, Errors.NOT_LEADER_OR_FOLLOWER)
        self.fetcher.clear()
        self.logdir.close()
