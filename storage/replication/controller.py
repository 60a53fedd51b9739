"""`Controller`: a KRaft-like model of the cluster metadata -- broker registrations, fencing,
controlled shutdown, partition leadership and AlterPartition validation -- kept in LMDB.

Invariants:
  - a new incarnation of a broker gets a new, larger broker epoch (M27); a retried
    registration of the same incarnation gets the same epoch back;
  - only active brokers (registered, not fenced, not in controlled shutdown) are elected
    (KIP-841, M12); every leader change bumps the leader epoch, every change of the record bumps
    the partition epoch;
  - an unclean election (when enabled) sets ISR = [leader] and RECOVERING (KIP-704, M17);
  - AlterPartition is validated in Kafka's order: requester's broker epoch, partition known,
    leader epoch (older -> FENCED_LEADER_EPOCH, newer -> NOT_CONTROLLER), requester is the
    leader, partition epoch (INVALID_UPDATE_VERSION), KIP-704 state rules (INVALID_REQUEST),
    ISR shape (INVALID_REQUEST), member eligibility and broker epochs (INELIGIBLE_REPLICA,
    KIP-841/903, M13);
  - fencing a broker removes it from every ISR except where it is the last member, which stays
    in the ISR with no leader (docs/kafka-formats.md 8.3);
  - every change is committed to the store in one transaction before it is published, and
    every commit or stored document bumps `changes`: the metadata publishers
    (storage/wire/metadata.py, `Publication`) compute records only when it moved;
  - a commit that fails (an I/O error of the store: a full disk, EIO) is the failure state, as a
    failed log-dir write is: the in-memory state goes back to the store's last commit, the
    outbox is dropped (nothing of the change is published), the failure channel goes offline
    and every later commit raises LogDirOfflineError (KAFKA_STORAGE_ERROR); the process stops.
Published changes (LeaderAndIsr to replicas, MetadataUpdate to every broker, StopReplica) wait
in an outbox the caller drains with `take_outbox()`.
"""
from __future__ import annotations

import logging
import os
import uuid
from dataclasses import asdict, dataclass

from ..core import guards
from ..core.errors import Errors
from ..core.failure import LogDirFailureChannel, is_io_failure
from ..dir.meta import MetaStore
from . import assignment
from .messages import (
    NO_LEADER,
    RECOVERED,
    RECOVERING,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerInfo,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    LeaderAndIsrRequest,
    MetadataUpdate,
    PartitionState,
    StopReplicaPartition,
    StopReplicaRequest,
)

log = logging.getLogger("storage.controller")   # docs/guide-operations.md, Logs


@dataclass
class Registration:
    broker_id: int
    broker_epoch: int
    incarnation_id: str
    fenced: bool = True
    in_controlled_shutdown: bool = False


class Controller:
    """The metadata of a cluster.  `path` holds its LMDB store (None: memory only)."""

    def __init__(self, path=None, *, controller_id: int = 3000, unclean_leader_election: bool = False,
                 sync: bool = True, min_insync_replicas: int = 1):
        self.controller_id = controller_id
        # KIP-966: with min.insync.replicas > 1, replicas leaving an ISR that drops below it keep
        # their eligibility (ELR) -- the HW cannot have advanced past what they hold.
        self.min_insync_replicas = min_insync_replicas
        self.unclean_leader_election = unclean_leader_election
        if path is not None:
            os.makedirs(path, exist_ok=True)
        self.store = MetaStore(path, sync=sync) if path is not None else None
        # The failure state a failed commit enters; a process shares its log dir's channel
        # (Node, ControllerServer), so that nothing more is acknowledged and the process stops.
        self.failure_channel = LogDirFailureChannel(self.store.path if self.store is not None else "memory")
        self.brokers: dict[int, Registration] = {}
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.next_broker_epoch = 1
        self.controller_epoch = 1
        self._outbox: list[tuple[int, object]] = []
        # Bumped by every change of the state published as metadata records (each commit, each
        # document put, whatever the outcome): the publishers compute records only when it moved.
        self.changes = 0
        self.leader_elections = 0     # leaders set since this process started (metrics)
        self.unclean_elections: list[tuple[str, int, int, int, bool]] = []   # (topic, partition, leader, epoch, RECOVERING)
        # Topics created through create_topic: name -> {"topic_id": hex, "configs": {name: value}}
        # (Kafka's TopicRecord and ConfigRecords), and the next producer-id block's start.
        self.topics: dict[str, dict] = {}
        # Dynamic broker configs (Kafka's ConfigRecords of the BROKER resource): resource name
        # ("" the cluster default, else a broker id) -> {name: value}.
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.next_producer_id = 0
        if self.store is not None:
            self._load()

    # ---- persistence ----
    def _load(self) -> None:
        self._read_store()
        self.controller_epoch += 1                  # a new controller incarnation
        self._commit()

    def _read_store(self) -> None:
        """The in-memory state from the store's last commit."""
        counters = self.store.get_document("controller") or {}
        self.next_broker_epoch = counters.get("next_broker_epoch", 1)
        self.next_producer_id = counters.get("next_producer_id", 0)
        self.topics = self.store.get_document("topics") or {}
        self.broker_configs = self.store.get_document("broker_configs") or {}
        self.controller_epoch = counters.get("controller_epoch", 0)
        self.brokers = {int(b): Registration(**r) for b, r in self.store.brokers().items()}
        self.partitions = {key: PartitionState(**state) for key, state in self.store.partition_states().items()}

    def _commit(self, *, brokers=(), partitions=(), topics: bool = False, deleted=(),
                broker_configs: bool = False) -> None:
        self.changes += 1
        if self.store is None:
            return
        documents = {"controller": {"next_broker_epoch": self.next_broker_epoch,
                                    "controller_epoch": self.controller_epoch,
                                    "next_producer_id": self.next_producer_id}}
        if topics:
            documents["topics"] = self.topics
        if broker_configs:
            documents["broker_configs"] = self.broker_configs
        try:
            self.failure_channel.check()
            self.store.write_batch(
                brokers={b: asdict(self.brokers[b]) for b in brokers},
                partition_states={key: asdict(self.partitions[key]) for key in partitions},
                documents=documents, deleted_partition_states=deleted)
        except OSError as exc:
            self._undo()
            self._fail(exc)

    def _undo(self) -> None:
        """After a commit that did not happen: memory as the store has it, nothing published of
        the change (a StopReplica of a deletion is queued before its commit)."""
        self._outbox.clear()
        epoch = self.controller_epoch
        try:
            self._read_store()
        except OSError as exc:      # unreadable too: the failure state refuses every commit anyway
            log.error("the controller store %s cannot be read back after a failed commit: %s", self.store.path, exc)
        self.controller_epoch = epoch

    def put_document(self, name: str, value: dict) -> None:
        """A named document of the process (endpoints, the cluster id) in the store, under the
        same failure rule as a commit."""
        self.changes += 1
        try:
            self.failure_channel.check()
            self.store.put_document(name, value)
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError):
        """Raise: `exc` again (the failure state already refused it), or the failure state's
        error, entered now with one critical line."""
        if not is_io_failure(exc):
            raise exc
        log.critical("the controller store %s failed to commit, the process stops: %s", self.store.path, exc)
        raise self.failure_channel.fail(exc, "controller store commit") from exc

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    # ---- publishing ----
    def take_outbox(self) -> list[tuple[int, object]]:
        out, self._outbox = self._outbox, []
        return out

    def metadata_update(self) -> MetadataUpdate:
        return MetadataUpdate(self.controller_epoch, {
            b: BrokerInfo(b, r.broker_epoch, r.fenced, r.in_controlled_shutdown) for b, r in self.brokers.items()})

    def _publish_metadata(self) -> None:
        update = self.metadata_update()
        for b in self.brokers:
            self._outbox.append((b, update))

    def republish(self) -> None:
        """Queue the whole current metadata again (what a broker replaying the log would see)."""
        self._publish_metadata()
        for state in self.partitions.values():
            self._publish(state)

    def _publish(self, state: PartitionState) -> None:
        for b in state.replicas:
            if b in self.brokers:
                self._outbox.append((b, LeaderAndIsrRequest(self.controller_id, self.controller_epoch, [state.copy()],
                                                            self.brokers[b].broker_epoch)))

    # ---- brokers ----
    def active(self, broker_id: int) -> bool:
        r = self.brokers.get(broker_id)
        if r is None or r.fenced:
            return False
        return not (r.in_controlled_shutdown and guards.on("M12"))

    def register_broker(self, request: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
        current = self.brokers.get(request.broker_id)
        if current is not None and current.incarnation_id == request.incarnation_id:
            self._publish_hosted(request.broker_id, ())
            return BrokerRegistrationResponse(Errors.NONE, current.broker_epoch)     # a retry
        if current is not None and not guards.on("M27"):
            epoch = current.broker_epoch
        else:
            epoch = self.next_broker_epoch
            self.next_broker_epoch += 1
        # KIP-966: a broker that did not shut down cleanly (its marker does not carry the epoch
        # it had) may have lost data: it cannot stay the last ISR member nor remain eligible.
        unclean = current is not None and request.previous_broker_epoch != current.broker_epoch \
            and guards.on("M18")
        # A new incarnation starts fenced; its old leaderships are gone.
        self.brokers[request.broker_id] = Registration(request.broker_id, epoch, request.incarnation_id)
        log.info("registered broker %d with broker epoch %d (incarnation %s)%s; fenced until it catches up",
                 request.broker_id, epoch, request.incarnation_id, "" if current is None else
                 ", after an unclean shutdown (KIP-966)" if unclean else ", a new incarnation")
        changed = self._remove_broker_from_partitions(request.broker_id, unclean=unclean) \
            if current is not None else []
        self._commit(brokers=[request.broker_id], partitions=changed)
        self._publish_metadata()
        for key in changed:
            self._publish(self.partitions[key])
        self._publish_hosted(request.broker_id, changed)
        return BrokerRegistrationResponse(Errors.NONE, epoch)

    def _publish_hosted(self, broker_id: int, skip) -> None:
        """A (re)starting broker learns every partition it hosts, as KRaft brokers replay the log."""
        hosted = [s.copy() for key, s in self.partitions.items() if broker_id in s.replicas and key not in skip]
        if hosted:
            self._outbox.append((broker_id, LeaderAndIsrRequest(self.controller_id, self.controller_epoch, hosted,
                                                                self.brokers[broker_id].broker_epoch)))

    def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        r = self.brokers.get(request.broker_id)
        if r is None or r.broker_epoch != request.broker_epoch:
            return BrokerHeartbeatResponse(Errors.STALE_BROKER_EPOCH)
        changed: list = []
        if request.want_shut_down and not r.in_controlled_shutdown:
            r.in_controlled_shutdown = True             # persisted (KIP-841)
            log.info("broker %d (broker epoch %d) asked for a controlled shutdown", r.broker_id, r.broker_epoch)
            changed = self._remove_broker_from_partitions(r.broker_id, shutting_down=True)
            self._commit(brokers=[r.broker_id], partitions=changed)
            self._publish_metadata()
        elif request.want_fence and not r.fenced:
            return self._fence(r, BrokerHeartbeatResponse(Errors.NONE, True), "it asked to be fenced")
        elif not request.want_fence and r.fenced and not r.in_controlled_shutdown:
            r.fenced = False
            log.info("unfenced broker %d (broker epoch %d): it caught up with the metadata log", r.broker_id,
                     r.broker_epoch)
            self._commit(brokers=[r.broker_id])
            self._publish_metadata()
            changed = self._elect_leaderless()
        for key in changed:
            self._publish(self.partitions[key])
        leads = any(s.leader == r.broker_id for s in self.partitions.values())
        return BrokerHeartbeatResponse(Errors.NONE, r.fenced, r.in_controlled_shutdown and not leads)

    def fence_broker(self, broker_id: int, reason: str = "its session expired") -> None:
        """The broker's session expired (missed heartbeats)."""
        r = self.brokers.get(broker_id)
        if r is not None and not r.fenced:
            self._fence(r, None, reason)

    def _fence(self, r: Registration, response, reason: str):
        r.fenced = True
        log.info("fenced broker %d (broker epoch %d): %s", r.broker_id, r.broker_epoch, reason)
        changed = self._remove_broker_from_partitions(r.broker_id)
        self._commit(brokers=[r.broker_id], partitions=changed)
        self._publish_metadata()
        for key in changed:
            self._publish(self.partitions[key])
        return response

    @property
    def _elr_enabled(self) -> bool:
        return self.min_insync_replicas > 1

    def _remove_broker_from_partitions(self, broker_id: int, *, shutting_down: bool = False,
                                       unclean: bool = False) -> list:
        """Take a broker out of every ISR and out of leadership.  Without ELR the last member
        stays (with no leader); with ELR it moves to the ELR; after an unclean restart it
        leaves both."""
        changed = []
        for key, s in self.partitions.items():
            if broker_id not in s.isr and s.leader != broker_id and not (unclean and broker_id in s.elr):
                continue
            old = (s.leader, list(s.isr), list(s.elr))
            if unclean and (broker_id in s.isr or broker_id in s.elr):
                # KIP-966 LastKnownElr: it held the committed data when it left (kept while
                # the ISR stays below min.insync.replicas).
                s.last_known_elr = sorted(set(s.last_known_elr) | {broker_id})
            if broker_id in s.isr and (len(s.isr) > 1 or unclean or self._elr_enabled):
                s.isr = [b for b in s.isr if b != broker_id]
                if self._elr_enabled and not unclean and len(s.isr) < self.min_insync_replicas:
                    s.elr = sorted(set(s.elr) | {broker_id})
            if unclean:
                s.elr = [b for b in s.elr if b != broker_id]
            if len(s.isr) >= self.min_insync_replicas:
                s.last_known_elr = []
            if s.leader == broker_id:
                candidates = [b for b in s.replicas if b in s.isr and b != broker_id and self.active(b)]
                if candidates:
                    self._set_leader(s, candidates[0])
                elif not shutting_down or not s.isr:
                    self._set_leader(s, NO_LEADER)
            if (s.leader, s.isr, s.elr) != old:
                if s.leader == old[0]:
                    s.partition_epoch += 1
                changed.append(key)
                why = "controlled shutdown" if shutting_down else "unclean restart" if unclean else "fenced or re-registered"
                self._log_change(s, old, f"broker {broker_id} left: {why}")
        changed += [k for k in self._elect_leaderless(commit=False) if k not in changed]
        return changed

    @staticmethod
    def _log_change(s: PartitionState, old: tuple, why: str) -> None:
        """One line per partition change the controller makes (Kafka's ReplicationControlManager)."""
        if s.leader != old[0] and s.leader != NO_LEADER:
            log.info("elected leader %d of %s-%d with leader epoch %d and ISR %s (clean: an ISR member; %s)",
                     s.leader, s.topic, s.partition, s.leader_epoch, s.isr, why)
        elif s.leader != old[0]:
            log.info("%s-%d has no leader (leader epoch %d, ISR %s, ELR %s): %s", s.topic, s.partition,
                     s.leader_epoch, s.isr, s.elr, why)
        else:
            log.info("%s-%d: ISR %s -> %s, ELR %s (leader %d, partition epoch %d): %s", s.topic, s.partition,
                     old[1], s.isr, s.elr, s.leader, s.partition_epoch, why)

    def _set_leader(self, s: PartitionState, leader: int) -> None:
        if leader != NO_LEADER:
            self.leader_elections += 1       # Kafka's LeaderElectionRateAndTimeMs count
        s.leader = leader
        s.leader_epoch += 1
        s.partition_epoch += 1

    # ---- topics and producer ids ----
    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str] | None = None) -> int:
        """Create a topic over the active brokers, replicas assigned round robin (leaders spread
        as Kafka's assignment does); committed with its id and configs before it is published."""
        if name in self.topics or any(key[0] == name for key in self.partitions):
            return Errors.TOPIC_ALREADY_EXISTS
        if num_partitions < 1:
            return Errors.INVALID_PARTITIONS
        active = sorted(b for b in self.brokers if self.active(b))
        if replication_factor < 1 or replication_factor > len(active):
            return Errors.INVALID_REPLICATION_FACTOR
        start = len(self.topics) % len(active)
        self.topics[name] = {"topic_id": uuid.uuid4().hex, "configs": dict(configs or {})}
        keys = []
        for p in range(num_partitions):
            replicas = [active[(start + p + i) % len(active)] for i in range(replication_factor)]
            self.partitions[(name, p)] = PartitionState(name, p, replicas[0], 0, 0, list(replicas), replicas)
            keys.append((name, p))
        self._commit(partitions=keys, topics=True)
        for key in keys:
            self._publish(self.partitions[key])
        return Errors.NONE

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> int:
        """Replace a topic's configs (validated by the caller), committed before they are
        published (as ConfigRecords).  UNKNOWN_TOPIC_OR_PARTITION when there is no such topic."""
        if name not in self.topics:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        self.topics[name]["configs"] = dict(configs)
        self._commit(topics=True)
        return Errors.NONE

    def set_broker_configs(self, resource: str, configs: dict[str, str]) -> int:
        """Replace the dynamic configs of a broker resource ("" the cluster default, else a
        broker id), validated by the caller; committed before they are published."""
        if configs:
            self.broker_configs[resource] = dict(configs)
        else:
            self.broker_configs.pop(resource, None)
        self._commit(broker_configs=True)
        return Errors.NONE

    def create_assigned_topic(self, name: str, assignments: list[tuple[int, list[int]]],
                              configs: dict[str, str] | None = None, *, num_partitions: int = -1,
                              replication_factor: int = -1, validate_only: bool = False) -> tuple[int, str | None]:
        """Create a topic with a manual replica assignment [(partition, broker ids)], Kafka's
        checks first (assignment.topic_assignment); each partition led by its first active replica."""
        if name in self.topics or any(key[0] == name for key in self.partitions):
            return Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        try:
            placed = assignment.topic_assignment(assignments, num_partitions, replication_factor, self.brokers,
                                                 self.active)
        except assignment.AssignmentError as exc:
            return exc.error_code, exc.message
        if not validate_only:
            self.topics[name] = {"topic_id": uuid.uuid4().hex, "configs": dict(configs or {})}
            self._add_partitions(name, [(p, placed[p]) for p in sorted(placed)])
        return Errors.NONE, None

    def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None, *,
                          validate_only: bool = False) -> tuple[int, str | None]:
        """Grow a topic to `count` partitions (Kafka's CreatePartitions): the new ones placed as
        `assignments` says (one broker list each) or over the active brokers with the topic's
        replication factor; the existing partitions are untouched."""
        current = sorted(p for t, p in self.partitions if t == name)
        if name not in self.topics or not current:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, None
        factor = len(self.partitions[(name, current[0])].replicas)
        try:
            lists = assignment.added_partitions(name, len(current), count, factor, assignments, self.brokers)
            if lists is None:
                lists = self._placed(name, count - len(current), factor, len(current))
            for i, replicas in enumerate(lists):
                assignment.in_sync(replicas, len(current) + i, self.active)
        except assignment.AssignmentError as exc:
            return exc.error_code, exc.message
        if not validate_only:
            self._add_partitions(name, [(len(current) + i, r) for i, r in enumerate(lists)])
        return Errors.NONE, None

    def _placed(self, name: str, n: int, factor: int, first: int) -> list[list[int]]:
        """Replica lists for `n` new partitions from `first`, round robin over the active brokers
        from where the topic's partition 0 starts."""
        active = sorted(b for b in self.brokers if self.active(b))
        if factor > len(active):
            raise assignment.AssignmentError(
                Errors.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {factor} time(s): The target "
                f"replication factor of {factor} cannot be reached because only {len(active)} broker(s) are registered.")
        head = self.partitions[(name, 0)].replicas[0] if (name, 0) in self.partitions else active[0]
        start = active.index(head) if head in active else 0
        return [[active[(start + p + i) % len(active)] for i in range(factor)] for p in range(first, first + n)]

    def _add_partitions(self, name: str, placed: list[tuple[int, list[int]]]) -> None:
        keys = []
        for p, replicas in placed:
            isr = [b for b in replicas if self.active(b)]
            self.partitions[(name, p)] = PartitionState(name, p, isr[0], 0, 0, isr, list(replicas))
            keys.append((name, p))
        self._commit(partitions=keys, topics=True)
        for key in keys:
            self._publish(self.partitions[key])

    def delete_topic(self, name: str) -> int:
        """Delete a topic: its replicas get StopReplica(delete) and its records go."""
        keys = sorted(key for key in self.partitions if key[0] == name)
        if name not in self.topics and not keys:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        for key in keys:
            for b in self.partitions[key].replicas:
                self.stop_replica(b, *key, delete=True)
        for key in keys:
            del self.partitions[key]
        self.topics.pop(name, None)
        self._commit(topics=True, deleted=keys)
        return Errors.NONE

    def allocate_producer_ids(self, count: int = 1000) -> int:
        """The first id of a new block of `count` producer ids, durable before it is handed out
        (Kafka's AllocateProducerIds): no id is given twice, across restarts too."""
        first = self.next_producer_id
        self.next_producer_id += count
        self._commit()
        return first

    # ---- partitions and elections ----
    def create_partition(self, topic: str, partition: int, replicas: list[int]) -> int:
        key = (topic, partition)
        if key in self.partitions:
            return Errors.NONE
        live = [b for b in replicas if self.active(b)]
        if not live:
            return Errors.INVALID_REPLICATION_FACTOR
        state = PartitionState(topic, partition, live[0], 0, 0, live, list(replicas))
        self.partitions[key] = state
        self._commit(partitions=[key])
        self._publish(state)
        return Errors.NONE

    def _elect(self, s: PartitionState, unclean: bool) -> bool:
        for b in s.replicas:
            if b in s.isr and self.active(b):
                if b != s.leader:
                    self._set_leader(s, b)
                    log.info("elected leader %d of %s-%d with leader epoch %d and ISR %s (clean: the first "
                             "active ISR member)", b, s.topic, s.partition, s.leader_epoch, s.isr)
                    return True
                return False
        for b in s.replicas:   # KIP-966: an eligible leader replica holds every committed record
            if b in s.elr and self.active(b):
                self._set_leader(s, b)
                s.isr = [b]
                s.elr = [x for x in s.elr if x != b]
                log.info("elected leader %d of %s-%d with leader epoch %d and ISR %s (clean: an eligible leader "
                         "replica, KIP-966)", b, s.topic, s.partition, s.leader_epoch, s.isr)
                return True
        if unclean:
            for b in s.replicas:
                if self.active(b):
                    self._set_leader(s, b)
                    s.isr, s.elr = [b], []
                    if guards.on("M17"):
                        s.leader_recovery_state = RECOVERING
                    self.unclean_elections.append((s.topic, s.partition, b, s.leader_epoch,
                                                   s.leader_recovery_state == RECOVERING))
                    log.warning("elected leader %d of %s-%d with leader epoch %d and ISR %s UNCLEANLY: no ISR or "
                                "eligible replica is active; records it lacks are lost", b, s.topic, s.partition,
                                s.leader_epoch, s.isr)
                    return True
        return False

    def _elect_leaderless(self, commit: bool = True) -> list:
        changed = [key for key, s in self.partitions.items()
                   if s.leader == NO_LEADER and self._elect(s, self.unclean_leader_election)]
        if commit and changed:
            self._commit(partitions=changed)
        return changed

    def elect_leader(self, topic: str, partition: int, *, unclean: bool | None = None) -> int:
        """Elect a leader now (preferred: the first active ISR replica; unclean when allowed)."""
        s = self.partitions.get((topic, partition))
        if s is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        allow = self.unclean_leader_election if unclean is None else unclean
        if self._elect(s, allow):
            self._commit(partitions=[(topic, partition)])
            self._publish(s)
            return Errors.NONE
        return Errors.ELECTION_NOT_NEEDED if s.leader != NO_LEADER and self.active(s.leader) \
            else Errors.LEADER_NOT_AVAILABLE

    def elect_for_client(self, topic: str, partition: int, election_type: int) -> tuple[int, str | None]:
        """ElectLeaders as Kafka's controller answers it: a preferred election (0) moves the
        leadership to the first replica when it is an active ISR member (ELECTION_NOT_NEEDED
        when it leads, PREFERRED_LEADER_NOT_AVAILABLE when it cannot); an unclean one (1) elects
        a leaderless partition's leader -- the ISR first, then the ELR, then any active replica
        (RECOVERING, KIP-704) -- ELIGIBLE_LEADERS_NOT_AVAILABLE when there is none."""
        s = self.partitions.get((topic, partition))
        if s is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
        if election_type == 0:
            if s.replicas and s.leader == s.replicas[0]:
                return Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
            code = self.move_leader(topic, partition, s.replicas[0])
            return (Errors.NONE, None) if code == Errors.NONE else \
                (Errors.PREFERRED_LEADER_NOT_AVAILABLE, "Failed to elect leader for topic partition.")
        if election_type != 1:
            return Errors.INVALID_REQUEST, f"Unknown election type {election_type}."
        if s.leader != NO_LEADER:
            return Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
        if self._elect(s, True):
            self._commit(partitions=[(topic, partition)])
            self._publish(s)
            return Errors.NONE, None
        return Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, "Failed to elect leader for topic partition."

    def recover_partition(self, topic: str, partition: int, offers: dict[int, tuple[int, int]]) -> int:
        """KIP-966's unclean recovery for a partition with no ISR and no ELR left: elect the live
        replica with the longest log in the latest epoch (offers: broker -> (latest epoch, log
        end offset)), RECOVERING with ISR = [leader].  With at most min.insync.replicas - 1
        replicas that lost data, that replica holds every committed record."""
        s = self.partitions.get((topic, partition))
        if s is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        if s.leader != NO_LEADER or s.isr or s.elr:
            return Errors.ELECTION_NOT_NEEDED
        live = {b: o for b, o in offers.items() if b in s.replicas and self.active(b)}
        if not live:
            return Errors.LEADER_NOT_AVAILABLE
        # KIP-966: the last known ELR held the committed data; a replica that left the ISR
        # earlier (controlled shutdown, lag) may hold a newer epoch and none of it.
        known = {b: o for b, o in live.items() if b in s.last_known_elr}
        if known:
            live = known
        best = max(sorted(live), key=lambda b: live[b])
        self._set_leader(s, best)
        s.isr = [best]
        s.last_known_elr = []
        s.leader_recovery_state = RECOVERING
        self.unclean_elections.append((topic, partition, best, s.leader_epoch, True))
        log.warning("elected leader %d of %s-%d with leader epoch %d and ISR %s UNCLEANLY: unclean recovery "
                    "(KIP-966) chose the longest log of %s", best, topic, partition, s.leader_epoch, s.isr, live)
        self._commit(partitions=[(topic, partition)])
        self._publish(s)
        return Errors.NONE

    def move_leader(self, topic: str, partition: int, new_leader: int) -> int:
        """Hand leadership to another active ISR member (a preferred-leader election)."""
        s = self.partitions.get((topic, partition))
        if s is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        if new_leader not in s.isr or not self.active(new_leader):
            return Errors.PREFERRED_LEADER_NOT_AVAILABLE
        if new_leader == s.leader:
            return Errors.ELECTION_NOT_NEEDED
        self._set_leader(s, new_leader)
        log.info("elected leader %d of %s-%d with leader epoch %d and ISR %s (clean: a preferred leader election)",
                 new_leader, topic, partition, s.leader_epoch, s.isr)
        self._commit(partitions=[(topic, partition)])
        self._publish(s)
        return Errors.NONE

    def reassign(self, topic: str, partition: int, replicas: list[int]) -> int:
        """Change a partition's assignment, as a ZooKeeper-mode reassignment does in its last
        step: the leader epoch is bumped, the remaining and added replicas get the new state,
        and each removed replica a StopReplica(delete) carrying the new epoch (KIP-570: one
        delayed behind a later re-adding LeaderAndIsr must be fenced there).  The leader cannot
        be removed (move it first); removed replicas leave the ISR and ELR."""
        s = self.partitions.get((topic, partition))
        if s is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        new = list(replicas)
        if not new or len(set(new)) != len(new) or (s.leader != NO_LEADER and s.leader not in new):
            return Errors.INVALID_REPLICA_ASSIGNMENT
        if new == s.replicas:
            return Errors.NONE
        removed = [b for b in s.replicas if b not in new]
        s.replicas = new
        s.isr = [b for b in s.isr if b in new]
        s.elr = [b for b in s.elr if b in new]
        s.last_known_elr = [b for b in s.last_known_elr if b in new]
        s.leader_epoch += 1
        s.partition_epoch += 1
        self._commit(partitions=[(topic, partition)])
        self._publish(s)
        for b in removed:
            self.stop_replica(b, topic, partition, delete=True)
        return Errors.NONE

    def stop_replica(self, broker_id: int, topic: str, partition: int, *, delete: bool = False) -> StopReplicaRequest:
        """Queue (and return) a StopReplica carrying the partition's current leader epoch."""
        s = self.partitions[(topic, partition)]
        r = self.brokers.get(broker_id)
        request = StopReplicaRequest(self.controller_id, self.controller_epoch, r.broker_epoch if r else -1,
                                     [StopReplicaPartition(topic, partition, s.leader_epoch, delete)])
        self._outbox.append((broker_id, request))
        return request

    # ---- AlterPartition ----
    def handle_alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        def answer(code):
            log.info("rejected AlterPartition of %s-%d from broker %d (leader epoch %d, ISR %s): %s", request.topic,
                     request.partition, request.broker_id, request.leader_epoch, request.new_isr, Errors(code).name)
            return AlterPartitionResponse(code, request.topic, request.partition)

        r = self.brokers.get(request.broker_id)
        if r is None or r.broker_epoch != request.broker_epoch:
            return answer(Errors.STALE_BROKER_EPOCH)
        key = (request.topic, request.partition)
        s = self.partitions.get(key)
        if s is None:
            return answer(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if request.leader_epoch < s.leader_epoch:
            return answer(Errors.FENCED_LEADER_EPOCH)
        if request.leader_epoch > s.leader_epoch:
            return answer(Errors.NOT_CONTROLLER)
        if request.broker_id != s.leader:
            return answer(Errors.INVALID_REQUEST)
        if request.partition_epoch != s.partition_epoch:
            return answer(Errors.INVALID_UPDATE_VERSION)
        new_isr = request.new_isr
        if guards.on("M17"):
            if request.leader_recovery_state == RECOVERING and len(new_isr) > 1:
                return answer(Errors.INVALID_REQUEST)
            if s.leader_recovery_state == RECOVERED and request.leader_recovery_state == RECOVERING:
                return answer(Errors.INVALID_REQUEST)
        if s.leader not in new_isr or len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(s.replicas):
            return answer(Errors.INVALID_REQUEST)
        for member in request.new_isr_with_epochs:
            reg = self.brokers.get(member.broker_id)
            if reg is None or ((reg.fenced or reg.in_controlled_shutdown) and guards.on("M12")):
                return answer(Errors.INELIGIBLE_REPLICA)
            if guards.on("M13") and member.broker_epoch != -1 and member.broker_epoch != reg.broker_epoch:
                return answer(Errors.INELIGIBLE_REPLICA)
        removed, old_isr = [b for b in s.isr if b not in new_isr], s.isr
        s.isr = list(new_isr)
        s.elr = [b for b in s.elr if b not in new_isr]
        if self._elr_enabled and len(new_isr) < self.min_insync_replicas:
            s.elr = sorted(set(s.elr) | set(removed))
        elif len(new_isr) >= self.min_insync_replicas:
            s.elr = []
        if len(new_isr) >= self.min_insync_replicas:
            s.last_known_elr = []
        log.info("accepted AlterPartition of %s-%d from leader %d: ISR %s -> %s (leader epoch %d, partition epoch "
                 "%d)%s", s.topic, s.partition, s.leader, old_isr, s.isr, s.leader_epoch,
                 s.partition_epoch + 1,
                 ", RECOVERED" if s.leader_recovery_state != request.leader_recovery_state else "")
        s.leader_recovery_state = request.leader_recovery_state
        s.partition_epoch += 1
        self._commit(partitions=[key])
        self._publish(s)
        return AlterPartitionResponse(Errors.NONE, s.topic, s.partition, s.leader, s.leader_epoch, list(s.isr),
                                      s.leader_recovery_state, s.partition_epoch)
