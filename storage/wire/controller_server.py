"""`python -m storage controller`: the cluster's controller as its own process (KRaft-style).

The `Controller` model (storage/replication/controller.py) keeps the metadata in LMDB and
validates every change; this process serves its RPCs over Kafka's protocol --
BrokerRegistration, BrokerHeartbeat (fencing, controlled shutdown, KIP-841), AlterPartition
(KIP-497 validation, KIP-903 broker epochs), CreateTopics, DeleteTopics, CreatePartitions,
ElectLeaders, AllocateProducerIds, CreateAcls, DeleteAcls and AlterUserScramCredentials --
and writes every change as Kafka's metadata records to its metadata log, `__cluster_metadata-0`
(a partition of this engine, flushed before any answer), which brokers replay by fetching it
(Fetch v12-16).  Brokers that stop heartbeating for the session timeout are fenced and lose
their leaderships and ISR places.  On start the whole current state is written once more, so
the log's end always holds the controller's state.

Lay-out of `--data-dir DIR`: DIR/controller (the LMDB store), DIR/metadata (the metadata log's
log dir).
"""
from __future__ import annotations

import asyncio
import logging
import os
import uuid

from ..core import errors
from ..core.clock import monotonic_ms
from ..core.config import LogConfig
from ..core.errors import Errors
from ..core.records import build_batch
from ..dir.logdir import LogDir
from ..replication import messages as m
from ..replication.controller import Controller
from . import acl_control, codec, config_admin, rules, scram, topic_admin
from . import configs as topic_configs
from .acl_control import AclControl
from .apis import Notifier, delete_topics_targets, long_poll
from .broker import PRODUCER_ID_BLOCK
from .client import CLIENT_ID as BROKER_CLIENT_ID
from .codec import ms
from .listeners import Listener
from .metadata import MetadataImage, Publication, endpoint_list
from .server import FrameServer

log = logging.getLogger("storage.wire")

METADATA_TOPIC = rules.METADATA_TOPIC
METADATA_TOPIC_ID = 1                    # Kafka's fixed id of the metadata topic (Uuid.METADATA_TOPIC_ID)
METADATA_MAX_WAIT_MS = 5_000           # a broker's metadata fetch waits at most this long


class ControllerServer(FrameServer):
    def __init__(self, data_dir, host: str, port: int, *, node_id: int = 3000, min_insync_replicas: int = 1,
                 session_timeout_ms: int = 9_000, unclean_leader_election: bool = False, limits=None):
        super().__init__(codec.CONTROLLER_SUPPORTED, limits)
        self.node_id, self.host, self.port = node_id, host, port
        self.listeners: list[Listener] | None = None     # None: one PLAINTEXT listener on host:port
        self.session_timeout_ms = session_timeout_ms
        os.makedirs(data_dir, exist_ok=True)
        self.controller = Controller(os.path.join(data_dir, "controller"), controller_id=node_id,
                                     min_insync_replicas=min_insync_replicas,
                                     unclean_leader_election=unclean_leader_election)
        self.logdir = LogDir.open(os.path.join(data_dir, "metadata"), LogConfig())
        self.log = self.logdir.partition(METADATA_TOPIC, 0)
        # One failure state for the process: a failed commit of the store, or of the metadata log.
        self.controller.failure_channel = self.logdir.failure_channel
        self.image = MetadataImage()
        self.publication = Publication(self.image)
        self.acl_control = AclControl(self.controller)
        self.endpoints: dict[int, list] = {      # each broker's listeners, the inter-broker one first
            int(b): endpoint_list(a) for b, a in (self.controller.store.get_document("endpoints") or {}).items()}
        self.last_heartbeat: dict[int, int] = {b: monotonic_ms() for b in self.controller.brokers}
        self.notifier = Notifier()
        self.handlers = {key: self._stops_on_failure(handler) for key, handler in {
            1: self.fetch, 19: self.create_topics, 20: self.delete_topics, 37: self.create_partitions,
            43: self.elect_leaders, 56: self.alter_partition,
            62: self.register, 63: self.heartbeat, 67: self.allocate_producer_ids,
            33: self.alter_configs, 44: self.incremental_alter_configs,
            30: self.create_acls, 31: self.delete_acls, 51: self.alter_user_scram_credentials}.items()}
        self.handlers[18] = self.api_versions          # touches no state: it cannot meet the failure
        self._ticker: asyncio.Task | None = None

    # ---- the metadata log ----
    def sync(self) -> None:
        """Append what changed as one batch of metadata records, flushed, then wake fetchers;
        nothing to compare when the controller's state did not change (metadata.Publication).
        Once the metadata log is offline every call raises (the image already counted the
        records of the failed batch: nothing may look published after the failure)."""
        self.logdir.failure_channel.check()
        self.controller.take_outbox()           # the log replaces the in-process messages
        values = self.publication.records(self.controller, self.endpoints, self.acl_control.acls)
        if not values:
            return
        epoch = max(self.controller.controller_epoch, 0)
        try:
            self.log.append_as_leader(build_batch([(None, v) for v in values]), epoch, origin="coordinator")
            self.log.flush()
        except errors.StorageError:
            # The metadata log's dir is offline (an I/O failure): nothing more can be published,
            # and a failed flush is never retried into success -- the controller stops, as Kafka
            # halts a controller whose metadata log fails.  The LMDB state stays; a restart
            # writes the whole state to the log again.
            log.critical("the metadata log %s is offline: the controller stops", self.log.path)
            self.request_stop()
            raise
        self.log.update_high_watermark(self.log.log_end_offset)
        self.notifier.notify()

    async def start(self) -> None:
        listeners = self.listeners or [Listener("PLAINTEXT", "PLAINTEXT", self.host, self.port)]
        for listener in listeners:
            listener.port = await self.listen(listener.host, listener.port, listener)
        self.port = listeners[0].port
        self.sync()
        self._ticker = asyncio.create_task(self._tick())
        log.info("controller %d listening on %s:%d (metadata log end %d)", self.node_id, self.host, self.port,
                 self.log.log_end_offset)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            now = monotonic_ms()
            try:
                for b, r in list(self.controller.brokers.items()):
                    if not r.fenced and now - self.last_heartbeat.get(b, now) > self.session_timeout_ms:
                        self.controller.fence_broker(b, f"its session timed out: no heartbeat for "
                                                        f"{self.session_timeout_ms} ms (broker.session.timeout.ms)")
                self.sync()
            except errors.StorageError:
                # The store's commit or the metadata log failed (each logged it): the failure state.
                self.request_stop()
                return

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        self.stop_listening()
        self.controller.close()
        self.logdir.close()

    def _stops_on_failure(self, handler):
        """`handler`, stopping the controller when a request meets the failure state (the
        store's commit or the metadata log failed); FrameServer answers that request with
        KAFKA_STORAGE_ERROR (error_answers), never a dropped connection."""
        async def stopping(header, request):
            try:
                return await handler(header, request)
            except errors.LogDirOfflineError as exc:
                if not self._stopped.is_set():
                    log.critical("controller %d is in the failure state and stops: %s", self.node_id, exc)
                    self.request_stop()
                raise
        return stopping

    # ---- APIs ----
    async def api_versions(self, header, request) -> dict:
        from .apis import ClientApis
        return ClientApis.api_versions_body(Errors.NONE, self.supported)

    async def fetch(self, header, request) -> dict:
        """The metadata log, for brokers replaying it (long poll up to max_wait)."""
        parts = [(t, p) for t in request.topics for p in t.partitions]

        def attempt():
            answers, size = [], 0
            for t, p in parts:
                name = getattr(t, "topic", None)
                ok = (name == METADATA_TOPIC or int(getattr(t, "topic_id", 0) or 0) == METADATA_TOPIC_ID) \
                    and p.partition == 0
                records = b""
                if ok and p.fetch_offset < self.log.log_end_offset:
                    records = bytes(self.log.read(p.fetch_offset, p.partition_max_bytes))
                size += len(records)
                answers.append((t, {"partition_index": p.partition,
                                    "error_code": Errors.NONE if ok else Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                    "high_watermark": self.log.high_watermark, "last_stable_offset": self.log.high_watermark,
                                    "log_start_offset": self.log.log_start_offset, "aborted_transactions": None,
                                    "preferred_read_replica": -1, "records": records}))
            return answers, size >= request.min_bytes

        answers = await long_poll(self.notifier, min(ms(request.max_wait), METADATA_MAX_WAIT_MS), attempt)
        return {"error_code": Errors.NONE, "session_id": 0, "responses": [
            {"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [a]} for _, a in answers]}

    async def register(self, header, request) -> dict:
        incarnation = uuid.UUID(int=int(request.incarnation_id)).hex
        if request.listeners:
            self.endpoints[request.broker_id] = [(e.name, e.host, e.port, int(e.security_protocol))
                                                 for e in request.listeners]
            self.controller.put_document("endpoints", {str(b): [list(e) for e in a]
                                                       for b, a in self.endpoints.items()})
        response = self.controller.register_broker(m.BrokerRegistrationRequest(
            request.broker_id, incarnation, getattr(request, "previous_broker_epoch", -1)))
        self.last_heartbeat[request.broker_id] = monotonic_ms()
        self.sync()
        log.debug("broker %d registered (epoch %d, previous %d) at %s", request.broker_id, response.broker_epoch,
                 getattr(request, "previous_broker_epoch", -1), self.endpoints.get(request.broker_id))
        return {"error_code": response.error_code, "broker_epoch": response.broker_epoch}

    async def heartbeat(self, header, request) -> dict:
        self.last_heartbeat[request.broker_id] = monotonic_ms()
        response = self.controller.heartbeat(m.BrokerHeartbeatRequest(
            request.broker_id, request.broker_epoch, want_fence=request.want_fence,
            want_shut_down=request.want_shut_down))
        self.sync()
        return {"error_code": response.error_code, "is_caught_up": True, "is_fenced": response.is_fenced,
                "should_shut_down": response.should_shut_down}

    async def alter_partition(self, header, request) -> dict:
        topics = []
        for t in request.topics:
            # kio reads the zero id as None: no topic has it (UNKNOWN_TOPIC_ID, as an unknown id).
            name = self.image.topic_name(int(t.topic_id)) if t.topic_id is not None else None
            parts = []
            for p in t.partitions:
                if name is None:
                    r = m.AlterPartitionResponse(Errors.UNKNOWN_TOPIC_ID, "", p.partition_index)
                else:
                    r = self.controller.handle_alter_partition(m.AlterPartitionRequest(
                        request.broker_id, request.broker_epoch, name, p.partition_index, p.leader_epoch,
                        [m.BrokerEpoch(e.broker_id, e.broker_epoch) for e in p.new_isr_with_epochs],
                        getattr(p, "leader_recovery_state", 0), p.partition_epoch))
                parts.append({"partition_index": p.partition_index, "error_code": r.error_code,
                              "leader_id": r.leader_id, "leader_epoch": r.leader_epoch, "isr": list(r.isr),
                              "leader_recovery_state": r.leader_recovery_state, "partition_epoch": r.partition_epoch})
            topics.append({"topic_id": t.topic_id, "partitions": parts})
        self.sync()
        return {"error_code": Errors.NONE, "topics": topics}

    def _create(self, t, configs: dict, *, internal: bool, validate_only: bool) -> tuple[int, str | None]:
        assignments = [(a.partition_index, list(a.broker_ids)) for a in t.assignments]
        problem = topic_configs.create_problem(t.name, len(assignments) or t.num_partitions, configs,
                                               internal=internal)
        if problem:
            return problem
        if assignments:
            return self.controller.create_assigned_topic(t.name, assignments, configs, num_partitions=t.num_partitions,
                                                         replication_factor=t.replication_factor,
                                                         validate_only=validate_only)
        if validate_only:
            return Errors.NONE, None
        return self.controller.create_topic(t.name, t.num_partitions, t.replication_factor, configs), None

    async def create_topics(self, header, request) -> dict:
        out = []
        for t in request.topics:
            configs = {c.name: c.value for c in t.configs}
            code, message = self._create(t, configs, internal=header.client_id == BROKER_CLIENT_ID,
                                         validate_only=bool(request.validate_only))
            topic = self.controller.topics.get(t.name)
            parts = [s for key, s in self.controller.partitions.items() if key[0] == t.name]
            out.append({"name": t.name, "topic_id": int(topic["topic_id"], 16) if topic else 0, "error_code": code,
                        "error_message": message, "num_partitions": len(parts) or -1,
                        "replication_factor": len(parts[0].replicas) if parts else -1, "configs": []})
        self.sync()
        return {"topics": out}

    async def delete_topics(self, header, request) -> dict:
        targets, out = delete_topics_targets(request, self._topic_by_id)
        for n, i in targets:
            code, message = rules.delete_problem(n) or (self.controller.delete_topic(n), None)
            out.append({"name": n, "topic_id": i, "error_code": code, "error_message": message})
        self.sync()
        return {"responses": out}

    async def create_partitions(self, header, request) -> dict:
        topics = [(t.name, t.count, None if t.assignments is None else [list(a.broker_ids) for a in t.assignments])
                  for t in request.topics]
        answers = topic_admin.grow_topics(self.controller, topics, bool(request.validate_only))
        self.sync()
        return {"results": [{"name": n, "error_code": code, "error_message": message} for n, code, message in answers]}

    async def elect_leaders(self, header, request) -> dict:
        wanted = None if request.topic_partitions is None else \
            [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        rows = topic_admin.elect(self.controller, getattr(request, "election_type", topic_admin.PREFERRED), wanted)
        self.sync()
        return topic_admin.election_answer(rows, sorted(self.controller.topics) if wanted is None else ())

    def _topic_by_id(self, topic_id: int) -> str | None:
        return next((name for name, t in self.controller.topics.items() if int(t["topic_id"], 16) == topic_id), None)

    async def alter_configs(self, header, request) -> dict:
        return self._alter(request, incremental=False)

    async def incremental_alter_configs(self, header, request) -> dict:
        return self._alter(request, incremental=True)

    def _alter(self, request, *, incremental: bool) -> dict:
        """Validated and committed here (config_admin.alter), published as ConfigRecords."""
        results = config_admin.alter(self.controller, config_admin.request_resources(request, incremental=incremental),
                                     incremental=incremental, validate_only=bool(request.validate_only))
        self.sync()
        return config_admin.response_body(request, results)

    async def create_acls(self, header, request) -> dict:
        """A broker's forwarded CreateAcls: validated and committed here, published as
        AccessControlEntryRecords."""
        results = self.acl_control.create(acl_control.creations(request))
        self.sync()
        return acl_control.create_body(results)

    async def delete_acls(self, header, request) -> dict:
        results = self.acl_control.delete([acl_control.filter_of(f) for f in request.filters])
        self.sync()
        return acl_control.delete_body(results)

    async def alter_user_scram_credentials(self, header, request) -> dict:
        """Validated and committed here (scram.alter), published as UserScramCredentialRecords."""
        results = scram.alter(self.controller, *scram.request_changes(request))
        self.sync()
        return scram.alter_answer(results)

    async def allocate_producer_ids(self, header, request) -> dict:
        r = self.controller.brokers.get(request.broker_id)
        if r is None or r.broker_epoch != request.broker_epoch:
            return {"error_code": Errors.STALE_BROKER_EPOCH, "producer_id_start": -1, "producer_id_len": 0}
        first = self.controller.allocate_producer_ids(PRODUCER_ID_BLOCK)
        return {"error_code": Errors.NONE, "producer_id_start": first, "producer_id_len": PRODUCER_ID_BLOCK}

