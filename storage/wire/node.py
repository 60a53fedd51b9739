"""`Node`: the embedded broker of `python -m storage serve` -- the one `Broker` with its
controller in the same process (KRaft's combined mode, `LocalController`): the controller
publishes the same metadata records as the controller process writes to its metadata log,
handed to the broker in-process, and the broker replays them as a cluster's broker does.

Lay-out of `--data-dir DIR`:  DIR/logs is the Kafka log dir (partition dirs, checkpoints, the
engine's LMDB metadata); DIR/controller holds the controller's store (brokers, partition
states, topics with their ids and configs, the producer-id counter).

Life cycle, as a KRaft broker's: register (a new broker epoch per incarnation; the previous
epoch from the clean-shutdown marker, KIP-966), replay the metadata, heartbeat to be unfenced,
take the partitions the controller assigns; `shutdown()` is the controlled shutdown of KIP-841
(the controller moves leadership away, then the log dir closes cleanly).  After an unclean
shutdown the controller keeps this broker out of the ISR (KIP-966); a single-replica partition
is then recovered through KIP-966's unclean recovery with this replica's offer (the only copy
there is), RECOVERING until the KIP-704 recovery completes.
"""
from __future__ import annotations

import logging
import os
import uuid

from ..core import errors
from ..core.clock import monotonic_ms
from ..replication.controller import Controller
from ..replication.messages import NO_LEADER, BrokerHeartbeatRequest, BrokerRegistrationRequest
from . import config_admin, scram, topic_admin
from . import configs as topic_configs
from .acl_control import AclControl
from .broker import FETCH_MAX_BYTES, PRODUCER_ID_BLOCK, Broker  # noqa: F401  (FETCH_MAX_BYTES: its old home)
from .configs import topic_name_problem  # noqa: F401  (the name rules' old home)
from .metadata import MetadataImage, Publication
from .rules import OFFSETS_TOPIC  # noqa: F401  (its old home)

log = logging.getLogger("storage.wire")

HEARTBEAT_INTERVAL_MS = 2_000


class Node(Broker):
    """An embedded broker on `data_dir` (the options are `Broker`'s), registered and serving
    when constructed."""

    def __init__(self, data_dir, *, min_insync_replicas: int = 1, **options):
        super().__init__(data_dir, LocalController(min_insync_replicas=min_insync_replicas),
                         min_insync_replicas=min_insync_replicas, **options)

    @property
    def controller(self) -> Controller:
        return self.link.controller


class LocalController:
    """The controller in the broker's process (a ControllerLink).  After every change it
    publishes the records that bring what the broker was handed to its state
    (metadata.records_for, as the controller process writes them to its log) and the broker
    replays them at once, with the controller's epoch."""

    def __init__(self, *, min_insync_replicas: int = 1):
        self.min_insync_replicas = min_insync_replicas
        self.controller: Controller | None = None
        self.acl_control: AclControl | None = None
        self.cluster_id: str | None = None
        self.published = MetadataImage()          # what the broker was handed
        self.publication = Publication(self.published)
        self.broker: Broker | None = None
        self._last_heartbeat = -10**12

    def attach(self, broker: Broker) -> None:
        self.broker = broker
        self.controller = Controller(os.path.join(broker.data_dir, "controller"),
                                     min_insync_replicas=self.min_insync_replicas)
        try:
            self.acl_control = AclControl(self.controller)
            self._register()
            self.publish()
            broker.catch_up()
        except BaseException:
            self.controller.close()
            raise
        # One failure state for the process: a failed commit of the controller's store takes
        # the log dir offline too -- nothing more is acknowledged and the broker stops.
        self.controller.failure_channel = broker.logdir.failure_channel
        self._heartbeat()                       # unfenced
        self._recover_leaderless()
        meta = self.controller.store.get_document("cluster") or {}
        if "cluster_id" not in meta:
            meta = {"cluster_id": uuid.uuid4().hex[:22]}
            self.controller.put_document("cluster", meta)
        self.cluster_id = meta["cluster_id"]
        log.info("node %d registered with broker epoch %d (previous %d)", broker.node_id, broker.broker_epoch,
                 broker.previous_broker_epoch)

    def _register(self) -> None:
        b = self.broker
        response = self.controller.register_broker(
            BrokerRegistrationRequest(b.node_id, uuid.uuid4().hex, b.previous_broker_epoch))
        if response.error_code:
            raise errors.StorageError(f"broker registration failed: error {response.error_code}")
        b.broker_epoch = response.broker_epoch

    def _heartbeat(self, *, want_shut_down: bool = False) -> None:
        self._last_heartbeat = monotonic_ms()
        self.controller.heartbeat(BrokerHeartbeatRequest(self.broker.node_id, self.broker.broker_epoch,
                                                         want_shut_down=want_shut_down))
        self.publish()
        self.pump()

    def publish(self) -> None:
        """Hand the broker the records of what changed (the controller's in-process messages
        are not used: the records say the same); nothing to compare when neither the controller's
        state nor the broker's endpoints changed (metadata.Publication)."""
        self.controller.take_outbox()
        b = self.broker
        endpoints = b.endpoints()
        values = self.publication.records(self.controller, {b.node_id: endpoints}, self.acl_control.acls,
                                          tuple(endpoints))
        if values:
            b.replay(self.controller.controller_epoch, values)

    def _recover_leaderless(self) -> None:
        """KIP-966's unclean recovery for the partitions left with no leader, no ISR and no ELR
        (this broker's unclean restart took it out of them): elect the live replica with the
        longest log in the latest epoch -- here, this one."""
        recovered, node_id = [], self.broker.node_id
        for (topic, partition), s in list(self.controller.partitions.items()):
            if s.leader != NO_LEADER or s.isr or s.elr or node_id not in s.replicas:
                continue
            plog = self.broker.logdir.partition(topic, partition)
            latest = plog.latest_epoch
            offer = (latest if latest is not None else -1, plog.log_end_offset)
            if self.controller.recover_partition(topic, partition, {node_id: offer}) == errors.Errors.NONE:
                recovered.append(f"{topic}-{partition}")
        if recovered:
            log.warning("%d partitions had no leader after an unclean restart and were recovered here "
                        "(KIP-966 unclean recovery): %s", len(recovered), ", ".join(recovered[:10])
                        + (", ..." if len(recovered) > 10 else ""))
        self.publish()
        self.pump()

    # ---- the ControllerLink calls ----
    async def start(self, broker: Broker, notifier) -> None:
        """Nothing to start; the listener's port (it may have been 0) is published."""
        self.publish()

    async def create_topic(self, name: str, partitions: int, replication: int, configs: dict[str, str], *,
                           validate_only: bool, internal: bool,
                           assignments: list | None = None) -> tuple[int, str | None]:
        problem = topic_configs.create_problem(name, len(assignments) if assignments else partitions, configs,
                                               internal=internal)
        if problem:
            return problem
        message = None
        try:
            if assignments:
                code, message = self.controller.create_assigned_topic(
                    name, assignments, configs, num_partitions=partitions, replication_factor=replication,
                    validate_only=validate_only)
            elif validate_only:
                return errors.Errors.NONE, None
            else:
                code = self.controller.create_topic(name, partitions, replication, configs)
        except errors.LogDirOfflineError as exc:       # the store's commit failed: the failure state
            return exc.error_code, f"topic {name!r} not created: {exc}"
        if code == errors.Errors.NONE:
            self.publish()
            self.pump()
        return code, message

    async def create_partitions(self, topics: list, validate_only: bool) -> list[tuple[str, int, str | None]]:
        return self._changing(lambda: topic_admin.grow_topics(self.controller, topics, validate_only),
                              lambda exc: [(t[0], exc.error_code, str(exc)) for t in topics])

    async def elect_leaders(self, election_type: int, partitions: list | None) -> list[tuple]:
        return self._changing(lambda: topic_admin.elect(self.controller, election_type, partitions),
                              lambda exc: [(t, p, exc.error_code, str(exc)) for t, p in partitions or ()])

    def _changing(self, change, failed):
        """`change()` on the controller, then published; `failed(exc)` when its commit failed."""
        try:
            answer = change()
        except errors.LogDirOfflineError as exc:       # the store's commit failed: the failure state
            return failed(exc)
        self.publish()
        self.pump()
        return answer

    async def delete_topic(self, name: str) -> int:
        try:
            code = self.controller.delete_topic(name)
        except errors.LogDirOfflineError as exc:       # the store's commit failed: the failure state
            return exc.error_code
        if code == errors.Errors.NONE:
            self.publish()
            self.pump()
        return code

    async def alter_configs(self, resources, *, incremental: bool,
                            validate_only: bool) -> list[tuple[int, str | None]]:
        try:
            results = config_admin.alter(self.controller, resources, incremental=incremental,
                                         validate_only=validate_only)
        except errors.LogDirOfflineError as exc:       # the store's commit failed: the failure state
            return [(exc.error_code, f"configs not altered: {exc}")] * len(resources)
        self.publish()
        self.pump()
        return results

    async def create_acls(self, acls: list) -> list[tuple[int, str | None]]:
        return self._changing(lambda: self.acl_control.create(acls),
                              lambda exc: [(exc.error_code, str(exc))] * len(acls))

    async def delete_acls(self, filters: list) -> list[tuple[int, str | None, list]]:
        return self._changing(lambda: self.acl_control.delete(filters),
                              lambda exc: [(exc.error_code, str(exc), [])] * len(filters))

    async def alter_scram_credentials(self, deletions: list, upsertions: list) -> list[tuple[str, int, str | None]]:
        return self._changing(lambda: scram.alter(self.controller, deletions, upsertions),
                              lambda exc: [(u[0], exc.error_code, str(exc)) for u in [*deletions, *upsertions]])

    async def allocate_producer_ids(self) -> tuple[int, int]:
        return self.controller.allocate_producer_ids(PRODUCER_ID_BLOCK), PRODUCER_ID_BLOCK

    def pump(self) -> None:
        """The manager's AlterPartition requests to the controller, and what it publishes
        back, until both are quiet."""
        manager = self.broker.manager
        for _ in range(1000):
            requests = manager.take_alter_partition_requests()
            if not requests:
                return
            for request in requests:
                manager.handle_alter_partition_response(request, self.controller.handle_alter_partition(request))
                self.publish()
        raise RuntimeError("controller and replica manager did not settle")

    async def tick(self) -> None:
        if monotonic_ms() - self._last_heartbeat >= HEARTBEAT_INTERVAL_MS:
            self._heartbeat()

    async def controlled_shutdown(self) -> None:
        """KIP-841: the controller takes this broker out of leadership and the ISRs it can leave."""
        if not self.broker.logdir.offline:
            self._heartbeat(want_shut_down=True)

    async def close(self) -> None:
        self.controller.close()
