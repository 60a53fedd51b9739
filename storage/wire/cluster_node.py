"""`ClusterNode`: a broker process of a multi-process cluster (`python -m storage serve
--node-id N --controller HOST:PORT`), with the same interface as the embedded `Node`.

As a KRaft broker does, it registers with the controller (BrokerRegistration, with the
previous broker epoch from its clean-shutdown marker: KIP-966), replays the controller's
metadata log (Fetch of `__cluster_metadata`) into a `MetadataImage`, and asks to be unfenced
only once it has caught up with the log's end as of its registration: until then it acts on
nothing the log says (the log still holds its previous incarnation's leaderships).  From then
on every partition record naming it goes to the replica manager as it comes.  It heartbeats
(BrokerHeartbeat), sends the manager's AlterPartition requests to the controller, and runs the
ReplicaFetcher over TCP: Kafka's Fetch v16 with its broker epoch (KIP-903) and
LastFetchedEpoch (KIP-320), OffsetForLeaderEpoch v4 and ListOffsets v7 to each partition's
leader.  SIGTERM is the controlled shutdown of KIP-841: it asks the controller to move its
leaderships away and waits for should_shut_down before closing the log dir.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import uuid

from ..core import errors
from ..core.config import LogConfig
from ..core.errors import Errors
from ..core.records import iter_batches
from ..dir.logdir import LogDir, hold_lock, read_clean_shutdown_epoch, release_held_lock
from ..replication import messages as m
from ..replication.replica import ReplicaManager
from ..topics import metadata_records as mr
from . import configs as topic_configs
from . import rules
from .client import Peer, PeerError
from .codec import UNSUPPORTED_VERSION
from .controller_server import METADATA_TOPIC
from .metadata import MetadataImage
from .node import FETCH_MAX_BYTES
from .rules import OFFSETS_TOPIC

log = logging.getLogger("storage.wire")

HEARTBEAT_INTERVAL_S = 0.5
FETCH_MAX_WAIT_MS = 500
ALTER_RETRY_S = 0.2
REREGISTER_BACKOFF_S = 10.0    # a registration taken over sooner than this is a node-id conflict
_ = UNSUPPORTED_VERSION


class ClusterNode:
    def __init__(self, data_dir, *, node_id: int, host: str, port: int, controller: tuple[str, int],
                 num_partitions: int = 1, replication_factor: int = 1, auto_create_topics: bool = True,
                 offsets_partitions: int = 50, min_insync_replicas: int = 1, log_config: LogConfig | None = None,
                 replica_lag_time_max_ms: int = 10_000, fetch_max_bytes: int = FETCH_MAX_BYTES):
        self.data_dir = os.fspath(data_dir)
        self.node_id, self.host, self.port = node_id, host, port
        self.num_partitions, self.replication_factor = num_partitions, replication_factor
        self.auto_create_topics, self.offsets_partitions = auto_create_topics, offsets_partitions
        self.fetch_max_bytes = fetch_max_bytes
        self.log_config = log_config or LogConfig()
        self.cluster_id = "storage-cluster"
        self.controller_address = controller
        os.makedirs(self.data_dir, exist_ok=True)
        self.logs_path = os.path.join(self.data_dir, "logs")
        # The log dir's lock before anything else: a second process on this dir must not
        # register (that moves this node's broker epoch and fences the broker running here).
        hold_lock(self.logs_path)
        # The log dir opens once the metadata log is replayed (`_open_logs`): its partitions
        # open with their topics' configs, which only that log holds (a compacted
        # __consumer_offsets must never open under the default delete retention).
        self.previous_broker_epoch = read_clean_shutdown_epoch(self.logs_path)
        self.broker_epoch = -1
        self.logdir: LogDir | None = None
        self.manager: ReplicaManager | None = None
        self._manager_options = {"min_insync_replicas": min_insync_replicas,
                                 "replica_lag_time_max_ms": replica_lag_time_max_ms}
        self.image = MetadataImage()
        self.caught_up = False
        self.metadata_offset = 0
        self._catch_up_to = None
        self._peers: dict[tuple[int, str], list[Peer]] = {}
        self._rpc = Peer(*controller)
        self._tasks: list[asyncio.Task] = []
        self._producer_ids = (0, 0)
        self.notifier = None
        self._stopping = False
        self._closing = False
        self._registered_at = float("-inf")
        self._conflict_logged = False
        self._unfenced = False
        self._fetch_wakeup: asyncio.Event | None = None

    # ---- the interface apis.py and groups.py use -----------------------------------------------
    @property
    def controller_id(self) -> int:
        return self.node_id     # as KRaft brokers do: admin requests sent here are forwarded

    def brokers(self) -> list[tuple[int, str, int]]:
        return [(b.broker_id, b.host, b.port) for b in sorted(self.image.brokers.values(), key=lambda b: b.broker_id)
                if not b.fenced]

    def address_of(self, broker_id: int) -> tuple[str, int]:
        b = self.image.brokers.get(broker_id)
        return (b.host, b.port) if b is not None else ("", -1)

    def partition_state(self, topic: str, partition: int):
        return self.image.partitions.get((topic, partition))

    def partitions_of(self, topic: str) -> list:
        return sorted((s for key, s in self.image.partitions.items() if key[0] == topic), key=lambda s: s.partition)

    def topic_names(self) -> list[str]:
        return sorted(self.image.topic_ids)

    def topic_id(self, topic: str) -> int:
        return self.image.topic_ids.get(topic, 0)

    def topic_by_id(self, topic_id: int) -> str | None:
        return self.image.topic_name(topic_id)

    def topic_configs(self, topic: str) -> dict[str, str]:
        return dict(self.image.configs.get(topic, {}))

    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, *, validate_only: bool = False,
                           internal: bool = False):
        problem = rules.create_problem(name, internal_allowed=internal)
        if problem:         # the controller refuses it too (a client may send it there)
            return problem
        body = {"topics": [{"name": name, "num_partitions": self.num_partitions if num_partitions == -1 else num_partitions,
                            "replication_factor": self.replication_factor if replication_factor == -1
                            else replication_factor, "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                "timeout": 30_000, "validate_only": validate_only}
        try:
            answer = (await self._rpc.call(19, 7, body)).topics[0]
        except PeerError as exc:
            log.warning("CreateTopics %s: %s", name, exc)
            return Errors.REQUEST_TIMED_OUT, str(exc)
        if answer.error_code == Errors.NONE:
            await self._await_metadata(lambda: self.partitions_of(name))
        return int(answer.error_code), answer.error_message

    async def ensure_offsets_topic(self) -> None:
        if OFFSETS_TOPIC not in self.image.topic_ids:
            await self.create_topic(OFFSETS_TOPIC, self.offsets_partitions, min(self.replication_factor, 3),
                                    {"cleanup.policy": "compact", "segment.bytes": str(100 << 20)}, internal=True)

    async def delete_topic(self, name: str) -> int:
        problem = rules.delete_problem(name)
        if problem:
            return problem[0]
        try:
            answer = await self._rpc.call(20, 6, {"topics": [{"name": name, "topic_id": 0}], "timeout": 30_000})
        except PeerError:
            return Errors.REQUEST_TIMED_OUT
        await self._await_metadata(lambda: name not in self.image.topic_ids)
        return int(answer.responses[0].error_code)

    async def next_producer_id(self) -> int:
        first, end = self._producer_ids
        if first >= end:
            answer = await self._rpc.call(67, 0, {"broker_id": self.node_id, "broker_epoch": self.broker_epoch})
            if answer.error_code:
                raise errors.StorageError(f"AllocateProducerIds: error {int(answer.error_code)}")
            first, end = answer.producer_id_start, answer.producer_id_start + answer.producer_id_len
        self._producer_ids = (first + 1, end)
        return first

    async def _await_metadata(self, done, timeout_s: float = 10.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not done() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    # ---- life cycle ----------------------------------------------------------------------------
    async def start(self, notifier) -> None:
        self.notifier = notifier
        await self._register()
        self._tasks = [asyncio.create_task(self._metadata_loop()), asyncio.create_task(self._heartbeat_loop()),
                       asyncio.create_task(self._fetcher_loop())]
        await self._await_metadata(lambda: self.caught_up, timeout_s=60)
        if not self.caught_up:
            raise errors.StorageError(f"node {self.node_id} did not catch up with the controller's metadata log "
                                      f"(at offset {self.metadata_offset} of {self._catch_up_to}) within 60 s")
        # Serving starts unfenced: the heartbeat after catching up asks for it.
        await self._await_metadata(lambda: self._unfenced, timeout_s=30)

    async def _register(self) -> None:
        previous = self.previous_broker_epoch
        body = {"broker_id": self.node_id, "cluster_id": self.cluster_id, "incarnation_id": uuid.uuid4(),
                "listeners": [{"name": "PLAINTEXT", "host": self.host, "port": self.port, "security_protocol": 0}],
                "features": [], "rack": None, "is_migrating_zk_broker": False, "log_dirs": [],
                "previous_broker_epoch": previous}
        for attempt in range(60):
            try:
                answer = await self._rpc.call(62, 3, body)
                if answer.error_code == Errors.NONE:
                    break
                log.warning("registration refused: error %d", int(answer.error_code))
            except PeerError as exc:
                log.warning("registration: %s (attempt %d)", exc, attempt + 1)
            await asyncio.sleep(0.5)
        else:
            raise errors.StorageError("the controller did not register this broker")
        self.broker_epoch = answer.broker_epoch
        self._registered_at = asyncio.get_running_loop().time()
        log.info("node %d registered with broker epoch %d (previous %d)", self.node_id, answer.broker_epoch, previous)

    async def tick(self) -> None:
        self.manager.tick()
        self.pump()

    def pump(self) -> None:
        for request in self.manager.take_alter_partition_requests():
            asyncio.get_running_loop().create_task(self._alter_partition(request))

    async def controlled_shutdown(self) -> None:
        """KIP-841, bounded: ask the controller to move this broker's leaderships away and wait
        for should_shut_down; the metadata log brings the new leaders meanwhile."""
        self._stopping = True
        deadline = asyncio.get_running_loop().time() + 15
        while asyncio.get_running_loop().time() < deadline and not (self.logdir and self.logdir.offline):
            try:
                answer = await self._rpc.call(63, 1, self._heartbeat_body(want_shut_down=True), timeout_s=2)
                if answer.should_shut_down:
                    break
            except PeerError:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(FETCH_MAX_WAIT_MS / 1000)     # the last metadata fetch lands

    async def shutdown(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # Ended here, not cancelled at the event loop's close; bounded: 3.11's wait_for can
            # swallow a cancellation that meets its inner future's completion (the loops end
            # at their next turn then, as _closing says).
            _, late = await asyncio.wait(self._tasks, timeout=2)
            for task in late:
                task.cancel()
        if self.manager is not None:
            self.manager.shutdown()
        else:
            release_held_lock(self.logs_path)       # the log dir never opened

    # ---- the metadata log ----------------------------------------------------------------------
    async def _metadata_loop(self) -> None:
        peer = Peer(*self.controller_address, timeout_s=FETCH_MAX_WAIT_MS / 1000 + 10)
        while not self._closing:
            body = {"replica_id": -1, "max_wait": FETCH_MAX_WAIT_MS, "min_bytes": 1, "max_bytes": 8 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                    "forgotten_topics_data": [], "topics": [{"topic": METADATA_TOPIC, "partitions": [
                        {"partition": 0, "current_leader_epoch": -1, "fetch_offset": self.metadata_offset,
                         "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 8 << 20}]}]}
            try:
                answer = await peer.call(1, 12, body)
            except PeerError as exc:
                log.warning("metadata fetch: %s", exc)
                await asyncio.sleep(0.5)
                continue
            part = answer.responses[0].partitions[0]
            self._replay(part.records or b"")
            if self._catch_up_to is None:
                self._catch_up_to = part.high_watermark
            if not self.caught_up and self.metadata_offset >= self._catch_up_to:
                log.info("node %d caught up with the metadata log at offset %d", self.node_id, self.metadata_offset)
                self._open_logs()
                self.caught_up = True
                self._apply_all()

    def _open_logs(self) -> None:
        """Open the log dir with every topic's configs from the replayed image, then the
        replica manager over it (as Kafka's broker loads its logs after its metadata)."""
        self.logdir = LogDir.open(self.logs_path, self.log_config, background=True, broker_epoch=self.broker_epoch,
                                  topic_configs=topic_configs.log_configs(self.log_config, self.image.configs))
        self.manager = ReplicaManager(self.node_id, self.logdir, **self._manager_options)
        self.manager.broker_epoch = self.broker_epoch       # min.insync.replicas: _apply_all installs it
        overrides = {}
        for (topic, _), opened in self.logdir.logs().items():
            if topic not in overrides:
                config = opened.config
                overrides[topic] = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                                    if getattr(config, f.name) != getattr(self.log_config, f.name)}
        log.info("node %d opened %d partitions; topic overrides in force: %s", self.node_id,
                 len(self.logdir.partitions()), "; ".join(f"{t}: {o}" for t, o in sorted(overrides.items()) if o)
                 or "none")

    def _replay(self, records: bytes) -> None:
        for batch in iter_batches(records):
            for record in batch.records():
                api_key, _, fields = mr.decode(record.value)
                change = self.image.apply(api_key, fields)
                self.metadata_offset = record.offset + 1
                if self.caught_up:
                    self._apply(change)
        if self.caught_up:
            self.pump()
            if self._fetch_wakeup is not None:
                self._fetch_wakeup.set()
            if self.notifier is not None:
                self.notifier.notify()

    def _apply_all(self) -> None:
        self._broker_update()
        for name in self.image.topic_ids:
            self._apply(("topic", name))
        for key in list(self.image.partitions):
            self._apply(("partition", key))
        self.pump()

    def _broker_update(self) -> None:
        self.manager.apply_metadata(m.MetadataUpdate(self.manager.controller_epoch, {
            b.broker_id: m.BrokerInfo(b.broker_id, b.broker_epoch, b.fenced, b.in_controlled_shutdown)
            for b in self.image.brokers.values()}))

    def _apply(self, change: tuple) -> None:
        kind = change[0]
        if kind == "broker":
            self._broker_update()
        elif kind == "topic":
            topic_configs.install(self.logdir, self.manager, self.log_config, change[1],
                                  self.image.configs.get(change[1], {}))
        elif kind == "partition":
            state = self.image.partitions.get(change[1])
            if state is not None and (self.node_id in state.replicas or change[1] in self.manager.partitions):
                self.manager.handle(m.LeaderAndIsrRequest(-1, self.manager.controller_epoch, [state.copy()]))
        elif kind == "removed":
            self.manager.handle(m.StopReplicaRequest(-1, self.manager.controller_epoch, -1, [
                m.StopReplicaPartition(t, p, m.EPOCH_DURING_DELETE, True) for t, p in change[2]]))
            topic_configs.uninstall(self.logdir, self.manager, change[1])

    # ---- heartbeats and AlterPartition ---------------------------------------------------------
    def _heartbeat_body(self, *, want_shut_down: bool = False) -> dict:
        return {"broker_id": self.node_id, "broker_epoch": self.broker_epoch,
                "current_metadata_offset": self.metadata_offset - 1, "want_fence": not self.caught_up,
                "want_shut_down": want_shut_down, "offline_log_dirs": []}

    async def _heartbeat_loop(self) -> None:
        while not self._stopping and not self._closing:
            try:
                answer = await self._rpc.call(63, 1, self._heartbeat_body(), timeout_s=5)
                if answer.error_code == Errors.STALE_BROKER_EPOCH:
                    await self._register_again()
                elif answer.error_code:
                    log.warning("heartbeat refused: error %d", int(answer.error_code))
                else:
                    self._unfenced = not answer.is_fenced
            except PeerError as exc:
                log.warning("heartbeat: %s", exc)
            await asyncio.sleep(HEARTBEAT_INTERVAL_S if self._unfenced else 0.05)

    async def _register_again(self) -> None:
        """The controller holds a newer registration of this node id (another process registered
        it): this broker is fenced and every heartbeat with its epoch is refused, so it
        registers again as a new incarnation, as a restarted broker would, and carries on with
        the new epoch (the controller takes it out of the ISRs; it rejoins them by fetching)."""
        stale, now = self.broker_epoch, asyncio.get_running_loop().time()
        if now - self._registered_at < REREGISTER_BACKOFF_S:
            # Taken over again right after the last registration: another live process uses
            # this node id.  Registering at once would fence it, and it us, twice a second.
            if not self._conflict_logged:
                log.error("node %d: another live broker registers node id %d too (two brokers with one "
                          "--node-id?); registering again at most every %.0f s", self.node_id, self.node_id,
                          REREGISTER_BACKOFF_S)
                self._conflict_logged = True
            return
        log.warning("node %d: broker epoch %d is stale (the controller holds a newer registration of this node "
                    "id): registering again", self.node_id, stale)
        self._unfenced = False
        self.previous_broker_epoch = stale
        await self._register()
        if self.manager is not None:
            self.manager.broker_epoch = self.logdir.broker_epoch = self.broker_epoch

    async def _alter_partition(self, request: m.AlterPartitionRequest) -> None:
        topic_id = self.topic_id(request.topic)
        body = {"broker_id": request.broker_id, "broker_epoch": request.broker_epoch, "topics": [{
            "topic_id": topic_id, "partitions": [{
                "partition_index": request.partition, "leader_epoch": request.leader_epoch,
                "new_isr_with_epochs": [{"broker_id": e.broker_id, "broker_epoch": e.broker_epoch}
                                        for e in request.new_isr_with_epochs],
                "leader_recovery_state": request.leader_recovery_state,
                "partition_epoch": request.partition_epoch}]}]}
        try:
            answer = await self._rpc.call(56, 3, body)
        except PeerError as exc:
            # Lost on the way or unanswered: the change stays in flight and is sent again (the
            # controller answers a duplicate of an applied request consistently).
            log.warning("AlterPartition %s-%d: %s; retrying", request.topic, request.partition, exc)
            await asyncio.sleep(ALTER_RETRY_S)
            self.manager.retry_alter_partition(request.topic, request.partition)
            self.pump()
            return
        p = answer.topics[0].partitions[0] if answer.topics else None
        code = int(answer.error_code) or (int(p.error_code) if p is not None else Errors.UNKNOWN_SERVER_ERROR)
        if code:
            await asyncio.sleep(ALTER_RETRY_S)      # a retriable error is resent, but not in a hot loop
        response = m.AlterPartitionResponse(code, request.topic, request.partition)
        if p is not None and not code:
            response = m.AlterPartitionResponse(Errors.NONE, request.topic, request.partition, p.leader_id,
                                                p.leader_epoch, list(p.isr), p.leader_recovery_state, p.partition_epoch)
        self.manager.handle_alter_partition_response(request, response)
        self.pump()

    # ---- the replica fetcher over TCP ----------------------------------------------------------
    async def _fetcher_loop(self) -> None:
        """Send what the fetcher has ready at once whenever an answer came back (the next fetch
        must not wait for a timer: the leader's high watermark, and so every acks=all producer,
        waits for it), and every 50 ms for back-offs and new partitions."""
        wakeup = self._fetch_wakeup = asyncio.Event()
        while not self._stopping and not self._closing:
            wakeup.clear()
            if self.caught_up and not self.logdir.offline:
                for leader, request in self.manager.fetcher.poll():
                    asyncio.get_running_loop().create_task(self._replicate(leader, request))
            try:
                await asyncio.wait_for(wakeup.wait(), 0.05)
            except TimeoutError:
                pass

    def _peer(self, leader: int, purpose: str) -> Peer | None:
        """A free connection to `leader` for `purpose`: a fetch waits at the leader (long poll)
        for up to 500 ms, and a partition that joins later must not queue behind it on the same
        connection (that held one partition's replication to two fetches a second)."""
        host, port = self.address_of(leader)
        if port < 0:
            return None
        pool = [p for p in self._peers.get((leader, purpose), []) if (p.host, p.port) == (host, port)]
        for peer in pool:
            if not peer.busy:
                return peer
        peer = Peer(host, port, timeout_s=FETCH_MAX_WAIT_MS / 1000 + 10)
        self._peers[(leader, purpose)] = pool[-7:] + [peer]
        return peer

    async def _replicate(self, leader: int, request) -> None:
        from .replication_rpc import exchange
        peer = self._peer(leader, type(request).__name__)
        try:
            if peer is None:
                raise PeerError(f"no address for broker {leader}")
            response = await exchange(self, peer, request)
        except PeerError as exc:
            log.debug("replication request to %d failed: %s", leader, exc)
            self.manager.fetcher.handle_failure(leader, request)
            return
        except Exception:
            log.exception("replication request to %d failed", leader)
            self.manager.fetcher.handle_failure(leader, request)
            return
        truncations = self.manager.fetcher.truncations.total
        try:
            self.manager.fetcher.handle_response(leader, request, response)
            for topic, partition, offset in self.manager.fetcher.truncations.since(truncations):
                log.info("%s-%d truncated to offset %d: its log diverged from leader %d's (KIP-320)",
                         topic, partition, offset, leader)
        except errors.LogDirOfflineError:
            self.manager.go_offline()
        except Exception:
            # The fetcher's state must not stay "in flight" (it would stall for the request
            # timeout): the partitions back off and fetch again.
            log.exception("applying the answer of broker %d failed", leader)
            self.manager.fetcher.handle_failure(leader, request)
        self.pump()
        if self._fetch_wakeup is not None:
            self._fetch_wakeup.set()
        if self.notifier is not None:
            self.notifier.notify()
