"""`Node`: one broker process with its embedded controller -- the log dir, the replica manager
and the cluster metadata, wired together in-process (the embedded default of
`python -m storage serve`).

Lay-out of `--data-dir DIR`:  DIR/logs is the Kafka log dir (partition dirs, checkpoints, the
engine's LMDB metadata); DIR/controller holds the controller's store (brokers, partition
states, topics with their ids and configs, the producer-id counter).

Life cycle, as a KRaft broker's: register (a new broker epoch per incarnation; the previous
epoch from the clean-shutdown marker, KIP-966), heartbeat to be unfenced, take the partitions
the controller assigns; `shutdown()` is the controlled shutdown of KIP-841 (the controller
moves leadership away, then the log dir closes cleanly).  After an unclean shutdown the
controller keeps this broker out of the ISR (KIP-966); a single-replica partition is then
recovered through KIP-966's unclean recovery with this replica's offer (the only copy there
is), RECOVERING until the KIP-704 recovery completes.
"""
from __future__ import annotations

import logging
import os
import uuid

from ..core import errors
from ..core.clock import monotonic_ms
from ..core.config import LogConfig
from ..dir.logdir import LogDir, hold_lock, release_held_lock
from ..replication.controller import Controller
from ..replication.messages import (
    NO_LEADER,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
)
from ..replication.replica import ReplicaManager
from . import configs as topic_configs
from . import rules
from .configs import topic_name_problem  # noqa: F401  (the name rules' old home)
from .rules import OFFSETS_TOPIC

log = logging.getLogger("storage.wire")

HEARTBEAT_INTERVAL_MS = 2_000
PRODUCER_ID_BLOCK = 1_000
FETCH_MAX_BYTES = 55 << 20     # Kafka's fetch.max.bytes: the most one Fetch answer holds (but one batch)


class Node:
    """A broker and its embedded controller.  Every method runs on one thread (the server's
    event loop); the log dir's background thread works beside it on its own locks."""

    def __init__(self, data_dir, *, node_id: int = 1, host: str = "127.0.0.1", port: int = 9092,
                 num_partitions: int = 1, replication_factor: int = 1, auto_create_topics: bool = True,
                 offsets_partitions: int = 50, min_insync_replicas: int = 1, log_config: LogConfig | None = None,
                 background: bool = True, fetch_max_bytes: int = FETCH_MAX_BYTES):
        self.data_dir = os.fspath(data_dir)
        self.node_id, self.host, self.port = node_id, host, port
        self.num_partitions, self.replication_factor = num_partitions, replication_factor
        self.auto_create_topics = auto_create_topics
        self.offsets_partitions = offsets_partitions
        self.fetch_max_bytes = fetch_max_bytes
        self.log_config = log_config or LogConfig()
        self.cluster_id = None
        os.makedirs(self.data_dir, exist_ok=True)
        logs = os.path.join(self.data_dir, "logs")
        hold_lock(logs)         # before anything else: the controller's store is this dir's too
        try:
            self.controller = Controller(os.path.join(self.data_dir, "controller"),
                                         min_insync_replicas=min_insync_replicas)
        except BaseException:
            release_held_lock(logs)
            raise
        topics = {name: t["configs"] for name, t in self.controller.topics.items()}
        try:
            self.logdir = LogDir.open(logs, self.log_config, background=background,
                                      topic_configs=topic_configs.log_configs(self.log_config, topics))
        except BaseException:
            self.controller.close()
            release_held_lock(logs)
            raise
        # One failure state for the process: a failed commit of the controller's store takes
        # the log dir offline too -- nothing more is acknowledged and the broker stops.
        self.controller.failure_channel = self.logdir.failure_channel
        self.manager = ReplicaManager(node_id, self.logdir, min_insync_replicas=min_insync_replicas)
        self.manager.topic_min_isr = topic_configs.min_isrs(topics)
        self._producer_ids = (0, 0)
        self._last_heartbeat = -10**12
        self._undelivered: list = []         # controller messages to apply again (see pump)
        self._register()

    # ---- start-up ----
    def _register(self) -> None:
        incarnation = uuid.uuid4().hex
        previous = self.logdir.previous_broker_epoch
        response = self.controller.register_broker(BrokerRegistrationRequest(self.node_id, incarnation, previous))
        if response.error_code:
            raise errors.StorageError(f"broker registration failed: error {response.error_code}")
        epoch = response.broker_epoch
        self.manager.broker_epoch = self.logdir.broker_epoch = epoch
        self.controller.heartbeat(BrokerHeartbeatRequest(self.node_id, epoch))     # unfenced
        self.pump()
        self._recover_leaderless()
        meta = self.controller.store.get_document("cluster") or {}
        if "cluster_id" not in meta:
            meta = {"cluster_id": uuid.uuid4().hex[:22]}
            self.controller.put_document("cluster", meta)
        self.cluster_id = meta["cluster_id"]
        log.info("node %d registered with broker epoch %d (previous %d)", self.node_id, epoch, previous)

    def _recover_leaderless(self) -> None:
        """KIP-966's unclean recovery for the partitions left with no leader, no ISR and no ELR
        (this broker's unclean restart took it out of them): elect the live replica with the
        longest log in the latest epoch -- here, this one."""
        recovered = []
        for (topic, partition), s in list(self.controller.partitions.items()):
            if s.leader != NO_LEADER or s.isr or s.elr or self.node_id not in s.replicas:
                continue
            plog = self.logdir.partition(topic, partition)
            latest = plog.latest_epoch
            offer = (latest if latest is not None else -1, plog.log_end_offset)
            if self.controller.recover_partition(topic, partition, {self.node_id: offer}) == errors.Errors.NONE:
                recovered.append(f"{topic}-{partition}")
        if recovered:
            log.warning("%d partitions had no leader after an unclean restart and were recovered here "
                        "(KIP-966 unclean recovery): %s", len(recovered), ", ".join(recovered[:10])
                        + (", ..." if len(recovered) > 10 else ""))
        self.pump()

    # ---- in-process message delivery ----
    def pump(self) -> None:
        """Deliver what the controller published to the replica manager and the manager's
        AlterPartition requests to the controller, until both are quiet.  A message the manager
        could not apply for want of descriptors (a new partition's files) is delivered again at
        the next pump (the periodic loop's, every 100 ms): the controller has committed it."""
        undelivered, self._undelivered = self._undelivered, []
        for message in undelivered:
            self._deliver(message)
        for _ in range(1000):
            moved = False
            for broker_id, message in self.controller.take_outbox():
                moved = True
                if broker_id == self.node_id:
                    self._deliver(message)
            for request in self.manager.take_alter_partition_requests():
                moved = True
                self.manager.handle_alter_partition_response(request, self.controller.handle_alter_partition(request))
            if not moved:
                return
        raise RuntimeError("controller and replica manager did not settle")

    def _deliver(self, message) -> None:
        try:
            self.manager.handle(message)
        except errors.OutOfDescriptorsError:          # logged where it was raised; the dir is online
            self._undelivered.append(message)

    async def start(self, notifier) -> None:
        """Nothing to start: the embedded controller runs in this process."""

    async def tick(self) -> None:
        """Periodic work: heartbeats, ISR and delayed-produce expiry, message delivery."""
        now = monotonic_ms()
        if now - self._last_heartbeat >= HEARTBEAT_INTERVAL_MS:
            self._last_heartbeat = now
            self.controller.heartbeat(BrokerHeartbeatRequest(self.node_id, self.manager.broker_epoch))
        self.manager.tick()
        self.pump()

    # ---- what the Metadata API tells (the same interface as cluster_node.ClusterNode) ----
    @property
    def controller_id(self) -> int:
        return self.node_id

    def brokers(self) -> list[tuple[int, str, int]]:
        return [(self.node_id, self.host, self.port)]

    def address_of(self, broker_id: int) -> tuple[str, int]:
        return (self.host, self.port) if broker_id == self.node_id else ("", -1)

    def partition_state(self, topic: str, partition: int):
        return self.controller.partitions.get((topic, partition))

    # ---- topics ----
    def partitions_of(self, topic: str) -> list:
        return sorted((s for key, s in self.controller.partitions.items() if key[0] == topic),
                      key=lambda s: s.partition)

    def topic_names(self) -> list[str]:
        return sorted({key[0] for key in self.controller.partitions})

    def topic_id(self, topic: str) -> int:
        record = self.controller.topics.get(topic)
        return int(record["topic_id"], 16) if record else 0

    def topic_by_id(self, topic_id: int) -> str | None:
        for name, record in self.controller.topics.items():
            if int(record["topic_id"], 16) == topic_id:
                return name
        return None

    def topic_configs(self, topic: str) -> dict[str, str]:
        record = self.controller.topics.get(topic)
        return dict(record["configs"]) if record else {}

    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, *, validate_only: bool = False,
                           internal: bool = False) -> tuple[int, str | None]:
        """(error code, message) of creating a topic; -1 takes the broker's defaults.
        internal: the broker's own creation of an internal topic (rules.create_problem)."""
        problem = rules.create_problem(name, internal_allowed=internal)
        if problem:
            return problem
        configs = dict(configs or {})
        n = self.num_partitions if num_partitions == -1 else num_partitions
        rf = self.replication_factor if replication_factor == -1 else replication_factor
        problem = topic_configs.topic_problem(self.log_config, name, n, configs)
        if problem:
            return problem
        if validate_only:
            return errors.Errors.NONE, None
        try:
            code = self.controller.create_topic(name, n, rf, configs)
        except errors.LogDirOfflineError as exc:       # the store's commit failed: the failure state
            return exc.error_code, f"topic {name!r} not created: {exc}"
        if code == errors.Errors.NONE:
            topic_configs.install(self.logdir, self.manager, self.log_config, name, configs)
            self.pump()
            log.info("created topic %s: %d partitions, replication factor %d, configs %s", name, n, rf, configs)
        return code, None

    async def ensure_offsets_topic(self) -> None:
        if OFFSETS_TOPIC not in self.controller.topics:
            await self.create_topic(OFFSETS_TOPIC, self.offsets_partitions, min(self.replication_factor, 3),
                              {"cleanup.policy": "compact", "segment.bytes": str(100 << 20)}, internal=True)

    async def delete_topic(self, name: str) -> int:
        problem = rules.delete_problem(name)
        if problem:
            return problem[0]
        try:
            code = self.controller.delete_topic(name)
        except errors.LogDirOfflineError as exc:       # the store's commit failed: the failure state
            return exc.error_code
        if code == errors.Errors.NONE:
            self.pump()
            topic_configs.uninstall(self.logdir, self.manager, name)
            log.info("deleted topic %s", name)
        return code

    async def next_producer_id(self) -> int:
        first, end = self._producer_ids
        if first >= end:
            first = self.controller.allocate_producer_ids(PRODUCER_ID_BLOCK)
            end = first + PRODUCER_ID_BLOCK
        self._producer_ids = (first + 1, end)
        return first

    # ---- shutdown ----
    async def controlled_shutdown(self) -> None:
        """KIP-841: the controller takes this broker out of leadership and the ISRs it can leave."""
        if not self.logdir.offline:
            self.controller.heartbeat(BrokerHeartbeatRequest(self.node_id, self.manager.broker_epoch,
                                                             want_shut_down=True))
            self.pump()

    async def shutdown(self) -> None:
        """The log dir closes with its clean-shutdown marker, then the controller's store."""
        try:
            self.manager.shutdown()
        finally:
            self.controller.close()
