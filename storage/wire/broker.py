"""`Broker`: the one broker of both modes, over a metadata image built only by replaying the
controller's metadata records (Kafka's KRaft broker; the two modes are KRaft's "combined"
and "isolated" controller).

What the serving layer (apis, groups, txn_admin, server) asks of a broker is `MetadataSource`;
what a broker asks of its controller is `ControllerLink`.  The link delivers the controller's
records -- each batch with the controller epoch it was written in -- and the broker replays
them the same way in both modes: every change goes into the `MetadataImage`, and once the
broker has caught up with the records as of its registration, every change naming it goes to
the replica manager as LeaderAndIsr, StopReplica or a MetadataUpdate carrying that controller
epoch, so the manager's stale-controller check holds in both modes.

  - embedded (`python -m storage serve`): `node.LocalController`, the controller in this
    process, its records handed over in-process after every change;
  - a cluster's broker (`serve --controller HOST:PORT`): `cluster_node.RemoteController`,
    which fetches the controller process's metadata log over TCP.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import ssl
from typing import Protocol

from ..core import errors
from ..core.config import LogConfig
from ..dir.background import BackgroundConfig
from ..dir.logdir import LogDir, hold_lock, read_clean_shutdown_epoch, release_held_lock
from ..replication import messages as m
from ..replication.replica import ReplicaManager
from ..topics import metadata_records as mr
from . import config_admin, rules, session, waiters
from . import configs as topic_configs
from .authorizer import Authorizer
from .listeners import Listener
from .metadata import MetadataImage, partition_row
from .rules import OFFSETS_TOPIC

log = logging.getLogger("storage.wire")

FETCH_MAX_BYTES = 55 << 20     # Kafka's fetch.max.bytes: the most one Fetch answer holds (but one batch)
PRODUCER_ID_BLOCK = 1_000      # producer ids a broker takes from the controller at a time
CLEANER_BACKOFF_MS = 15_000     # Kafka's log.cleaner.backoff.ms: the cleaner looks for dirty logs this often
# __consumer_offsets as the broker creates it (Kafka's offsets.topic.* defaults).
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 << 20)}
OFFSETS_TOPIC_MAX_REPLICATION = 3


class MetadataSource(Protocol):
    """What the serving layer asks of a broker: the cluster as its metadata says, the topics'
    life cycle, producer ids, and the replica manager and log dir the data requests go to."""

    node_id: int
    host: str
    port: int
    cluster_id: str | None
    auto_create_topics: bool
    offsets_partitions: int
    fetch_max_bytes: int
    log_config: LogConfig            # the static one with the dynamic broker configs over it
    static_log_config: LogConfig
    static_min_isr: int
    num_partitions: int
    replication_factor: int
    logdir: LogDir
    manager: ReplicaManager
    metadata_changes: int            # bumped by every batch of metadata records replayed

    @property
    def controller_id(self) -> int: ...
    def brokers(self) -> list[tuple[int, str, int]]: ...
    def address_of(self, broker_id: int, listener: str | None = None) -> tuple[str, int]: ...
    def client_address_of(self, broker_id: int) -> tuple[str, int]: ...
    def partition_state(self, topic: str, partition: int) -> m.PartitionState | None: ...
    def partitions_of(self, topic: str) -> list[m.PartitionState]: ...
    def partition_rows(self, topic: str, version: int) -> list[dict]: ...
    def topic_names(self) -> list[str]: ...
    def topic_id(self, topic: str) -> int: ...
    def topic_by_id(self, topic_id: int) -> str | None: ...
    def topic_configs(self, topic: str) -> dict[str, str]: ...
    def broker_configs(self) -> dict[str, dict[str, str]]: ...
    def broker_registrations(self) -> list[tuple[int, str, int, bool]]: ...
    async def alter_configs(self, resources, *, incremental: bool,
                            validate_only: bool) -> list[tuple[int, str | None]]: ...
    def scram_credentials(self) -> dict: ...
    async def alter_scram_credentials(self, deletions: list, upsertions: list) -> list[tuple[str, int, str | None]]: ...
    def pump(self) -> None: ...
    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, *, validate_only: bool = False,
                           internal: bool = False, assignments: list | None = None) -> tuple[int, str | None]: ...
    async def delete_topic(self, name: str) -> int: ...
    async def create_partitions(self, topics: list, validate_only: bool) -> list[tuple[str, int, str | None]]: ...
    async def elect_leaders(self, election_type: int, partitions: list | None) -> list[tuple]: ...
    async def ensure_offsets_topic(self) -> None: ...
    async def next_producer_id(self) -> int: ...
    authorizer: "Authorizer | None"     # ACLs on (authorizer.class.name set), else None: all allowed
    async def create_acls(self, acls: list) -> list[tuple[int, str | None]]: ...
    async def delete_acls(self, filters: list) -> list[tuple[int, str | None, list]]: ...


class ControllerLink(Protocol):
    """How a broker reaches its controller.  The link calls `Broker.replay` with the records
    the controller published and `Broker.catch_up` once it has them all as of the broker's
    registration."""

    cluster_id: str | None

    def attach(self, broker: "Broker") -> None:
        """Called by the broker's constructor, holding the log dir's lock."""
    async def start(self, broker: "Broker", notifier) -> None: ...
    async def create_topic(self, name: str, partitions: int, replication: int, configs: dict[str, str], *,
                           validate_only: bool, internal: bool,
                           assignments: list | None = None) -> tuple[int, str | None]: ...
    async def delete_topic(self, name: str) -> int: ...
    async def alter_configs(self, resources, *, incremental: bool,
                            validate_only: bool) -> list[tuple[int, str | None]]:
        """config_admin.alter at the controller, the change replayed here before it returns."""
    async def alter_scram_credentials(self, deletions: list, upsertions: list) -> list[tuple[str, int, str | None]]:
        """scram.alter at the controller, the change replayed here before it returns."""
    async def create_partitions(self, topics: list[tuple[str, int, list[list[int]] | None]],
                                validate_only: bool) -> list[tuple[str, int, str | None]]:
        """topic_admin.grow_topics on the controller; returns once this broker sees the change."""
    async def elect_leaders(self, election_type: int,
                            partitions: list[tuple[str, int]] | None) -> list[tuple[str, int, int, str | None]]:
        """topic_admin.elect on the controller; returns once this broker sees the change."""
    async def allocate_producer_ids(self) -> tuple[int, int]:
        """(first id, count) of a new block."""
    async def create_acls(self, acls: list) -> list[tuple[int, str | None]]:
        """acl_control.AclControl.create at the controller; returns once this broker sees them."""
    async def delete_acls(self, filters: list) -> list[tuple[int, str | None, list]]:
        """acl_control.AclControl.delete at the controller; returns once this broker sees it."""
    def pump(self) -> None:
        """The replica manager's AlterPartition requests to the controller."""
    async def tick(self) -> None: ...
    async def controlled_shutdown(self) -> None: ...
    async def close(self) -> None:
        """After the replica manager closed the log dir (or when it never opened)."""


class Broker:
    """One broker (MetadataSource) over `link`.  Every method runs on one thread (the server's
    event loop); the log dir's background thread works beside it on its own locks."""

    def __init__(self, data_dir, link: ControllerLink, *, node_id: int = 1, host: str = "127.0.0.1",
                 port: int = 9092, num_partitions: int = 1, replication_factor: int = 1,
                 auto_create_topics: bool = True, offsets_partitions: int = 50, min_insync_replicas: int = 1,
                 log_config: LogConfig | None = None, background: bool = True,
                 fetch_max_bytes: int = FETCH_MAX_BYTES, replica_lag_time_max_ms: int | None = None,
                 cleaner_backoff_ms: int | None = CLEANER_BACKOFF_MS, authorizer: Authorizer | None = None):
        self.data_dir = os.fspath(data_dir)
        self.node_id, self.host, self.port = node_id, host, port
        self.bind_host = host        # where it listens; `host` is what Metadata tells (advertised.listeners)
        # Its listeners, the inter-broker one first (None: one PLAINTEXT listener on bind_host and
        # port, telling host); `host` and `port` are the inter-broker listener's once serving.
        self.listeners: list[Listener] | None = None
        self.peer_tls: ssl.SSLContext | None = None      # the inter-broker listener is SSL: the client side
        self.num_partitions, self.replication_factor = num_partitions, replication_factor
        self.auto_create_topics, self.offsets_partitions = auto_create_topics, offsets_partitions
        self.fetch_max_bytes = fetch_max_bytes
        self.static_log_config = self.log_config = log_config or LogConfig()
        self.static_min_isr = self.min_insync_replicas = min_insync_replicas
        self._background = background
        # The log cleaner (Kafka's log.cleaner.enable, on by default, every log.cleaner.backoff.ms):
        # compacted topics, __consumer_offsets and __transaction_state among them; None: off.
        self._background_config = BackgroundConfig(clean_interval_ms=cleaner_backoff_ms)
        self._manager_options = {"min_insync_replicas": min_insync_replicas}
        if replica_lag_time_max_ms is not None:
            self._manager_options["replica_lag_time_max_ms"] = replica_lag_time_max_ms
        # Kafka's isr-expiration period: the ISR scan every replica.lag.time.max.ms / 2 (the
        # manager's default, 30 s, when not given), not every 100 ms tick.
        self._manager_options["isr_check_interval_ms"] = (replica_lag_time_max_ms or 30_000) // 2
        self.link = link
        self.authorizer = authorizer      # loaded with every ACL the metadata records replay
        self.image = MetadataImage()
        self.topic_settings: dict[str, topic_configs.TopicConfig] = {}   # parsed once per change
        self.caught_up = False
        self.metadata_epoch = 0          # the controller epoch of the last batch replayed
        self.metadata_changes = 0        # batches replayed (and catch_up): what periodic work reads moved
        self.broker_epoch = -1
        self.logdir: LogDir | None = None
        self.manager: ReplicaManager | None = None
        self.notifier = None
        self._producer_ids = (0, 0)
        self._undelivered: list = []     # controller messages to apply again (see pump)
        os.makedirs(self.data_dir, exist_ok=True)
        self.logs_path = os.path.join(self.data_dir, "logs")
        # The log dir's lock before anything else: a second process on this dir must not
        # register (that moves this node's broker epoch and fences the broker running here),
        # and an embedded controller's store is this dir's too.
        hold_lock(self.logs_path)
        # The log dir opens once the metadata is replayed (`catch_up`): its partitions open
        # with their topics' configs, which only the metadata holds (a compacted
        # __consumer_offsets must never open under the default delete retention).
        try:
            self.previous_broker_epoch = read_clean_shutdown_epoch(self.logs_path)
            link.attach(self)
        except BaseException:
            if self.logdir is None:
                release_held_lock(self.logs_path)
            raise

    @property
    def cluster_id(self) -> str | None:
        return self.link.cluster_id

    # ---- what the Metadata API tells ------------------------------------------------------------
    @property
    def controller_id(self) -> int:
        return self.node_id     # as KRaft brokers do: admin requests sent here are forwarded

    def endpoints(self) -> list[tuple[str, str, int, int]]:
        """What this broker registers: (name, host, port, protocol id) of each listener, the
        inter-broker one first."""
        if self.listeners is None:
            return [("PLAINTEXT", self.host, self.port, 0)]
        return [listener.endpoint() for listener in self.listeners]

    def brokers(self) -> list[tuple[int, str, int]]:
        """(id, host, port) of the unfenced brokers on the listener the current request arrived
        on (Kafka's rule: those without that listener are left out)."""
        return [(b, host, port) for b, host, port, fenced in self.broker_registrations() if not fenced]

    def address_of(self, broker_id: int, listener: str | None = None) -> tuple[str, int]:
        """A broker's (host, port) on `listener` (None: the inter-broker listener), ("", -1) if
        unknown or lacking it."""
        b = self.image.brokers.get(broker_id)
        return b.address(listener or None) if b is not None else ("", -1)

    def client_address_of(self, broker_id: int) -> tuple[str, int]:
        """A broker's (host, port) on the listener the current request arrived on."""
        return self.address_of(broker_id, session.current().listener)

    def partition_state(self, topic: str, partition: int):
        return self.image.partitions.get((topic, partition))

    def partitions_of(self, topic: str) -> list:
        return sorted((s for key, s in self.image.partitions.items() if key[0] == topic), key=lambda s: s.partition)

    def partition_rows(self, topic: str, version: int) -> list[dict]:
        """Metadata vN's partitions of `topic` for the listener the current request arrived on."""
        listener = session.current().listener or None
        return [partition_row(s, self.image.brokers, listener, version) for s in self.partitions_of(topic)]

    def topic_names(self) -> list[str]:
        return sorted(self.image.topic_ids)

    def topic_id(self, topic: str) -> int:
        return self.image.topic_ids.get(topic, 0)

    def topic_by_id(self, topic_id: int) -> str | None:
        return self.image.topic_name(topic_id)

    def topic_configs(self, topic: str) -> dict[str, str]:
        return dict(self.image.configs.get(topic, {}))

    def broker_configs(self) -> dict[str, dict[str, str]]:
        return {resource: dict(c) for resource, c in self.image.broker_configs.items()}

    def broker_registrations(self) -> list[tuple[int, str, int, bool]]:
        """(id, host, port, fenced) of every registered broker that has the listener the current
        request arrived on, its address there."""
        listener = session.current().listener or None
        out = []
        for b in sorted(self.image.brokers.values(), key=lambda b: b.broker_id):
            host, port = b.address(listener)
            if port >= 0:
                out.append((b.broker_id, host, port, b.fenced))
        return out

    async def alter_configs(self, resources, *, incremental: bool,
                            validate_only: bool) -> list[tuple[int, str | None]]:
        return await self.link.alter_configs(resources, incremental=incremental, validate_only=validate_only)

    def scram_credentials(self) -> dict:
        """The users' SCRAM credentials as replayed: (user, mechanism type) -> scram.Credential."""
        return self.image.scram

    async def alter_scram_credentials(self, deletions: list, upsertions: list) -> list[tuple[str, int, str | None]]:
        return await self.link.alter_scram_credentials(deletions, upsertions)

    # ---- topics and producer ids ------------------------------------------------------------------
    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, *, validate_only: bool = False,
                           internal: bool = False, assignments: list | None = None) -> tuple[int, str | None]:
        """(error code, message) of creating a topic; -1 takes the broker's defaults (but with a
        manual replica assignment [(partition, broker ids)], which wants both -1).
        internal: the broker's own creation of an internal topic (rules.create_problem).  The
        controller validates the rest (topic_configs.create_problem)."""
        problem = rules.create_problem(name, internal_allowed=internal)
        if problem:         # the controller refuses it too (a client may send it there)
            return problem
        configs = dict(configs or {})
        n, rf = num_partitions, replication_factor
        if not assignments:
            n = self.num_partitions if num_partitions == -1 else num_partitions
            rf = self.replication_factor if replication_factor == -1 else replication_factor
        code, message = await self.link.create_topic(name, n, rf, configs, validate_only=validate_only,
                                                     internal=internal, assignments=assignments or None)
        parts = self.partitions_of(name)
        if code == errors.Errors.NONE and not validate_only and parts:
            log.info("created topic %s: %d partitions, replication factor %d, configs %s", name, len(parts),
                     len(parts[0].replicas), configs)
        return code, message

    async def ensure_offsets_topic(self) -> None:
        if OFFSETS_TOPIC not in self.image.topic_ids:
            await self.create_topic(OFFSETS_TOPIC, self.offsets_partitions,
                                    min(self.replication_factor, OFFSETS_TOPIC_MAX_REPLICATION),
                                    dict(OFFSETS_TOPIC_CONFIGS), internal=True)

    async def delete_topic(self, name: str) -> int:
        problem = rules.delete_problem(name)
        if problem:
            return problem[0]
        code = await self.link.delete_topic(name)
        if code == errors.Errors.NONE:
            log.info("deleted topic %s", name)
        return code

    async def create_partitions(self, topics: list, validate_only: bool) -> list[tuple[str, int, str | None]]:
        answers = await self.link.create_partitions(topics, validate_only)
        for name, code, _ in answers:
            if code == errors.Errors.NONE and not validate_only:
                log.info("topic %s now has %d partitions", name, len(self.partitions_of(name)))
        return answers

    async def elect_leaders(self, election_type: int, partitions: list | None) -> list[tuple]:
        return await self.link.elect_leaders(election_type, partitions)

    async def create_acls(self, acls: list) -> list[tuple[int, str | None]]:
        return await self.link.create_acls(acls)

    async def delete_acls(self, filters: list) -> list[tuple[int, str | None, list]]:
        return await self.link.delete_acls(filters)

    async def next_producer_id(self) -> int:
        first, end = self._producer_ids
        if first >= end:
            first, count = await self.link.allocate_producer_ids()
            end = first + count
        self._producer_ids = (first + 1, end)
        return first

    # ---- the metadata records -----------------------------------------------------------------
    def replay(self, controller_epoch: int, values) -> None:
        """Replay one batch of metadata records the controller wrote in `controller_epoch`
        into the image; once caught up, each change goes to the replica manager.  A topic's
        configs are parsed once per batch that changes them (`topic_configs.TopicConfig`)."""
        self.metadata_epoch = controller_epoch
        self.metadata_changes += 1
        changes = []
        for value in values:
            api_key, _, fields = mr.decode(value)
            changes.append(self.image.apply(api_key, fields))
        if self.authorizer is not None and any(c[0] == "acl" for c in changes):
            self.authorizer.load(self.image.acls)
        reparse = dict.fromkeys(c[1] for c in changes if c[0] == "topic")
        if any(c[0] == "broker_config" for c in changes) and self._rebase():
            reparse = dict.fromkeys(self.image.configs)         # every topic's default moved
            changes += [("topic", name) for name in reparse]
        for name in reparse:
            if name in self.image.configs:
                self.topic_settings[name] = topic_configs.TopicConfig.parse(self.log_config, name,
                                                                            self.image.configs[name])
        if self.caught_up:
            installed = set()
            for change in changes:
                if change[0] == "topic":
                    if change[1] in installed or change[1] not in self.topic_settings:
                        continue
                    installed.add(change[1])
                if change[0] not in ("broker_config", "acl"):
                    self._apply(change)
            self.woken()        # a waiting request's leaders, epochs or topics may have moved

    def _rebase(self) -> bool:
        """The broker's LogConfig and min.insync.replicas from the static ones and the dynamic
        broker configs replayed (config_admin.effective_base); True when they changed."""
        base, min_isr = config_admin.effective_base(self.static_log_config, self.static_min_isr,
                                                    self.image.broker_configs, self.node_id)
        if (base, min_isr) == (self.log_config, self.min_insync_replicas):
            return False
        self.log_config, self.min_insync_replicas = base, min_isr
        self._manager_options["min_insync_replicas"] = min_isr
        if self.manager is not None:
            self.manager.min_insync_replicas = min_isr
        log.info("node %d: broker configs in force: %s, min.insync.replicas=%d", self.node_id,
                 {f.name: getattr(base, f.name) for f in dataclasses.fields(base)
                  if getattr(base, f.name) != getattr(self.static_log_config, f.name)} or "the static ones", min_isr)
        return True

    def catch_up(self) -> None:
        """Open the log dir with every topic's configs from the replayed image, the replica
        manager over it (as Kafka's broker loads its logs after its metadata), and hand it the
        whole image."""
        self.logdir = LogDir.open(self.logs_path, self.log_config, background=self._background,
                                  background_config=self._background_config,
                                  broker_epoch=self.broker_epoch,
                                  topic_configs={t: c.log for t, c in self.topic_settings.items()})
        self.manager = ReplicaManager(self.node_id, self.logdir, **self._manager_options)
        self.manager.broker_epoch = self.broker_epoch
        self.manager.on_append, self.manager.on_high_watermark = self._appended, self._high_watermark_moved
        self._log_overrides()
        self.caught_up = True
        self.metadata_changes += 1
        self._apply(("broker", None))
        for name in self.image.topic_ids:
            self._apply(("topic", name))
        for key in list(self.image.partitions):
            self._apply(("partition", key))

    def _log_overrides(self) -> None:
        overrides = {}
        for (topic, _), opened in self.logdir.logs().items():
            if topic not in overrides:
                config = opened.config
                overrides[topic] = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                                    if getattr(config, f.name) != getattr(self.log_config, f.name)}
        log.info("node %d opened %d partitions; topic overrides in force: %s", self.node_id,
                 len(self.logdir.partitions()), "; ".join(f"{t}: {o}" for t, o in sorted(overrides.items()) if o)
                 or "none")

    def _apply(self, change: tuple) -> None:
        """One replayed change to the replica manager, as the controller of `metadata_epoch`
        sends it: the manager refuses it when a newer controller already spoke."""
        kind, epoch = change[0], self.metadata_epoch
        if kind == "broker":
            self.manager.handle(m.MetadataUpdate(epoch, {
                b.broker_id: m.BrokerInfo(b.broker_id, b.broker_epoch, b.fenced, b.in_controlled_shutdown)
                for b in self.image.brokers.values()}))
        elif kind == "topic":
            topic_configs.install(self.logdir, self.manager, change[1], self.topic_settings[change[1]])
        elif kind == "partition":
            state = self.image.partitions.get(change[1])
            if state is not None and (self.node_id in state.replicas or change[1] in self.manager.partitions):
                self._deliver(m.LeaderAndIsrRequest(-1, epoch, [state.copy()]))
        elif kind == "removed":
            self._deliver(m.StopReplicaRequest(-1, epoch, -1, [
                m.StopReplicaPartition(t, p, m.EPOCH_DURING_DELETE, True) for t, p in change[2]]))
            topic_configs.uninstall(self.logdir, self.manager, change[1])
            self.topic_settings.pop(change[1], None)

    def _deliver(self, message) -> None:
        """A message the manager could not apply for want of descriptors (a new partition's
        files) is applied again at the next pump (the periodic loop's, every 100 ms)."""
        try:
            self.manager.handle(message)
        except errors.OutOfDescriptorsError:          # logged where it was raised; the dir is online
            self._undelivered.append(message)

    def pump(self) -> None:
        """Apply again what waited for descriptors, then the manager's AlterPartition requests
        to the controller (and, in-process, what the controller published back)."""
        if self._undelivered:       # (called after every Produce request: the common case is none)
            undelivered, self._undelivered = self._undelivered, []
            for message in undelivered:
                self._deliver(message)
        if self.manager is not None and self.manager.alter_partition_requests_waiting():
            self.link.pump()        # (a link's pump sends those requests: none, nothing to do)

    # ---- life cycle ---------------------------------------------------------------------------
    async def start(self, notifier) -> None:
        self.notifier = notifier
        await self.link.start(self, notifier)

    def woken(self) -> None:
        """The metadata moved (leaders, epochs, topics): wake every waiting request."""
        if self.notifier is not None:
            self.notifier.notify()

    def _appended(self, key: tuple[str, int]) -> None:
        """An append as leader: the followers' fetches waiting on `key` are answered now."""
        if self.notifier is not None:
            self.notifier.notify((key,), waiters.END)

    def _high_watermark_moved(self, key: tuple[str, int]) -> None:
        """The consumers' fetches waiting on `key` are answered now (acks=all produces were
        completed by the manager)."""
        if self.notifier is not None:
            self.notifier.notify((key,), waiters.HIGH_WATERMARK)

    async def tick(self) -> None:
        """Periodic work: ISR and delayed-produce expiry, the link's heartbeats, delivery."""
        if self.manager is not None:
            self.manager.tick()
        await self.link.tick()
        self.pump()

    async def controlled_shutdown(self) -> None:
        """KIP-841: the controller takes this broker out of leadership and the ISRs it can leave."""
        await self.link.controlled_shutdown()

    async def shutdown(self) -> None:
        """The log dir closes with its clean-shutdown marker, then the link."""
        try:
            if self.manager is not None:
                self.manager.shutdown()
            else:
                release_held_lock(self.logs_path)       # the log dir never opened
        finally:
            await self.link.close()
