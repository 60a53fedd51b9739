"""`ClusterNode`: a broker process of a multi-process cluster (`python -m storage serve
--node-id N --controller HOST:PORT`) -- the one `Broker` over `RemoteController`, its link to
the controller process.

As a KRaft broker does, it registers with the controller (BrokerRegistration, with the
previous broker epoch from its clean-shutdown marker: KIP-966), replays the controller's
metadata log (Fetch of `__cluster_metadata`, each batch with the controller epoch it was
written in), and asks to be unfenced only once it has caught up with the log's end as of its
registration: until then it acts on nothing the log says (the log still holds its previous
incarnation's leaderships).  From then on every change naming it goes to the replica manager
as it comes (`Broker.replay`).  It heartbeats (BrokerHeartbeat), sends the manager's
AlterPartition requests to the controller, and runs the ReplicaFetcher over TCP: Kafka's Fetch
v16 with its broker epoch (KIP-903) and LastFetchedEpoch (KIP-320), OffsetForLeaderEpoch v4
and ListOffsets v7 to each partition's leader.  SIGTERM is the controlled shutdown of KIP-841:
it asks the controller to move its leaderships away and waits for should_shut_down before
closing the log dir.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
import uuid

from ..core import errors
from ..core.errors import Errors
from ..core.records import iter_batches
from ..replication import messages as m
from . import acl_control, config_admin, scram
from .broker import Broker
from .client import Peer, PeerError
from .controller_server import METADATA_TOPIC

log = logging.getLogger("storage.wire")

HEARTBEAT_INTERVAL_S = 0.5
FETCH_MAX_WAIT_MS = 500
ALTER_RETRY_S = 0.2
REREGISTER_BACKOFF_S = 10.0    # a registration taken over sooner than this is a node-id conflict


class ClusterNode(Broker):
    """A cluster's broker on `data_dir` (the options are `Broker`'s); `start` registers it."""

    def __init__(self, data_dir, *, controller: tuple[str, int], replica_lag_time_max_ms: int = 10_000,
                 controller_tls: ssl.SSLContext | None = None, **options):
        super().__init__(data_dir, RemoteController(controller, controller_tls),
                         replica_lag_time_max_ms=replica_lag_time_max_ms, **options)


class RemoteController:
    """The controller process at `address` (a ControllerLink over Kafka's protocol)."""

    cluster_id = "storage-cluster"

    def __init__(self, address: tuple[str, int], tls: ssl.SSLContext | None = None):
        self.address = address
        self.tls = tls              # the controller's listener is SSL
        self.broker: Broker | None = None
        self.metadata_offset = 0
        self._catch_up_to = None
        self._peers: dict[tuple[int, str], list[Peer]] = {}
        self._rpc = Peer(*address, tls=tls)
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._closing = False
        self._registered_at = float("-inf")
        self._conflict_logged = False
        self._unfenced = False
        self._fetch_wakeup: asyncio.Event | None = None
        self._fetching: set[int] = set()        # the leaders a Fetch is in flight to
        self._sessions: dict[int, object] = {}  # leader -> our incremental fetch session with it (KIP-227)

    def attach(self, broker: Broker) -> None:
        """Nothing before `start`: the log dir opens once the metadata log is replayed."""
        self.broker = broker

    # ---- topics and producer ids ---------------------------------------------------------------
    async def create_topic(self, name: str, partitions: int, replication: int, configs: dict[str, str], *,
                           validate_only: bool, internal: bool,
                           assignments: list | None = None) -> tuple[int, str | None]:
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication,
                            "assignments": [{"partition_index": i, "broker_ids": b} for i, b in assignments or ()],
                            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "timeout": 30_000, "validate_only": validate_only}
        try:
            answer = (await self._rpc.call(19, 7, body)).topics[0]
        except PeerError as exc:
            log.warning("CreateTopics %s: %s", name, exc)
            return Errors.REQUEST_TIMED_OUT, str(exc)
        if answer.error_code == Errors.NONE and not validate_only:
            await self._await_metadata(lambda: self.broker.partitions_of(name))
        return int(answer.error_code), answer.error_message

    async def delete_topic(self, name: str) -> int:
        try:
            answer = await self._rpc.call(20, 6, {"topics": [{"name": name, "topic_id": 0}], "timeout": 30_000})
        except PeerError:
            return Errors.REQUEST_TIMED_OUT
        await self._await_metadata(lambda: name not in self.broker.image.topic_ids)
        return int(answer.responses[0].error_code)

    async def alter_configs(self, resources, *, incremental: bool,
                            validate_only: bool) -> list[tuple[int, str | None]]:
        """Forwarded to the controller (as Kafka's brokers forward them); then, for each
        resource it altered, wait until the replayed metadata shows the new set (planned from
        this broker's image, which the controller's state matches once replayed)."""
        view = config_admin.ImageView(self.broker.image)
        expected = {}
        for resource_type, name, change in resources:
            try:
                expected[(resource_type, name)] = config_admin.plan(view, resource_type, name, change,
                                                                    incremental=incremental)
            except config_admin.AlterError:
                pass
        key, version = (44, 1) if incremental else (33, 2)
        body = {"validate_only": validate_only, "resources": [
            {"resource_type": t, "resource_name": n, "configs": [
                {"name": c[0], "config_operation": c[1], "value": c[2]} if incremental else {"name": c[0], "value": c[1]}
                for c in change]} for t, n, change in resources]}
        try:
            answer = await self._rpc.call(key, version, body)
        except PeerError as exc:
            log.warning("%s: %s", "IncrementalAlterConfigs" if incremental else "AlterConfigs", exc)
            return [(Errors.REQUEST_TIMED_OUT, str(exc))] * len(resources)
        results = [(int(r.error_code), r.error_message) for r in answer.responses]
        if not validate_only:
            done = [((t, n), expected[(t, n)]) for (t, n, _), (code, _) in zip(resources, results)
                    if code == Errors.NONE and (t, n) in expected]
            await self._await_metadata(lambda: all(view.configs_of(*key) == want for key, want in done), timeout_s=5.0)
        return results

    async def create_acls(self, acls: list) -> list[tuple[int, str | None]]:
        """Forwarded to the controller; then wait until the replayed ACLs hold every binding created."""
        body = {"creations": [{"resource_type": a.resource_type, "resource_name": a.resource_name,
                               "resource_pattern_type": a.pattern_type, "principal": a.principal, "host": a.host,
                               "operation": a.operation, "permission_type": a.permission} for a in acls]}
        try:
            answer = await self._rpc.call(30, 3, body)
        except PeerError as exc:
            log.warning("CreateAcls: %s", exc)
            return [(Errors.REQUEST_TIMED_OUT, str(exc))] * len(acls)
        results = [(int(r.error_code), r.error_message) for r in answer.results]
        made = {a for a, (code, _) in zip(acls, results) if code == Errors.NONE}
        await self._await_metadata(lambda: made <= set(self.broker.image.acls.values()), timeout_s=5.0)
        return results

    async def delete_acls(self, filters: list) -> list[tuple[int, str | None, list]]:
        """Forwarded to the controller; then wait until the replayed ACLs lack every binding removed."""
        body = {"filters": [{"resource_type_filter": f.resource_type, "resource_name_filter": f.resource_name,
                             "pattern_type_filter": f.pattern_type, "principal_filter": f.principal,
                             "host_filter": f.host, "operation": f.operation, "permission_type": f.permission}
                            for f in filters]}
        try:
            answer = await self._rpc.call(31, 3, body)
        except PeerError as exc:
            log.warning("DeleteAcls: %s", exc)
            return [(Errors.REQUEST_TIMED_OUT, str(exc), [])] * len(filters)
        results = acl_control.deleted_of(answer)
        gone = {a for _, _, acls in results for a in acls}
        await self._await_metadata(lambda: not gone & set(self.broker.image.acls.values()), timeout_s=5.0)
        return results

    async def create_partitions(self, topics: list, validate_only: bool) -> list[tuple[str, int, str | None]]:
        body = {"topics": [{"name": n, "count": c, "assignments": None if a is None else
                            [{"broker_ids": b} for b in a]} for n, c, a in topics],
                "timeout": 30_000, "validate_only": validate_only}
        try:
            answer = await self._rpc.call(37, 3, body)
        except PeerError as exc:
            return [(n, Errors.REQUEST_TIMED_OUT, str(exc)) for n, _, _ in topics]
        rows = [(r.name, int(r.error_code), r.error_message) for r in answer.results]
        grown = {n: c for n, c, _ in topics}
        if not validate_only:
            await self._await_metadata(lambda: all(len(self.broker.partitions_of(n)) >= grown.get(n, 0)
                                                   for n, code, _ in rows if code == Errors.NONE))
        return rows

    async def elect_leaders(self, election_type: int, partitions: list | None) -> list[tuple]:
        body = {"election_type": election_type, "timeout": 30_000, "topic_partitions": None if partitions is None else
                [{"topic": t, "partitions": [p for tp, p in partitions if tp == t]}
                 for t in dict.fromkeys(t for t, _ in partitions)]}
        try:
            answer = await self._rpc.call(43, 2, body)
        except PeerError as exc:
            return [(t, p, Errors.REQUEST_TIMED_OUT, str(exc)) for t, p in partitions or ()]
        rows = [(r.topic, p.partition_id, int(p.error_code), p.error_message)
                for r in answer.replica_election_results for p in r.partition_result]

        def elected(t, p):
            s = self.broker.partition_state(t, p)
            return s is not None and s.leader >= 0 and (election_type != 0 or s.leader == s.replicas[0])
        await self._await_metadata(lambda: all(elected(t, p) for t, p, code, _ in rows if code == Errors.NONE))
        return rows

    async def alter_scram_credentials(self, deletions: list, upsertions: list) -> list[tuple[str, int, str | None]]:
        """Forwarded to the controller (AlterUserScramCredentials); then wait until the replayed
        metadata shows each change it made."""
        body = {"deletions": [{"name": n, "mechanism": m} for n, m in deletions],
                "upsertions": [{"name": n, "mechanism": m, "iterations": i, "salt": salt, "salted_password": salted}
                               for n, m, i, salt, salted in upsertions]}
        try:
            answer = await self._rpc.call(51, 0, body)
        except PeerError as exc:
            log.warning("AlterUserScramCredentials: %s", exc)
            return [(u[0], Errors.REQUEST_TIMED_OUT, str(exc)) for u in [*deletions, *upsertions]]
        results = [(r.user, int(r.error_code), r.error_message) for r in answer.results]
        done = {user for user, code, _ in results if code == Errors.NONE}
        held = self.broker.image.scram
        want_gone = [(n, m) for n, m in deletions if n in done]
        want = [((n, m), scram.derive(m, salted)[0]) for n, m, _, _, salted in upsertions if n in done]
        await self._await_metadata(lambda: all(k not in held for k in want_gone)
                                   and all(k in held and held[k].stored_key == key for k, key in want), timeout_s=5.0)
        return results

    async def allocate_producer_ids(self) -> tuple[int, int]:
        answer = await self._rpc.call(67, 0, {"broker_id": self.broker.node_id,
                                              "broker_epoch": self.broker.broker_epoch})
        if answer.error_code:
            raise errors.StorageError(f"AllocateProducerIds: error {int(answer.error_code)}")
        return answer.producer_id_start, answer.producer_id_len

    async def _await_metadata(self, done, timeout_s: float = 10.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not done() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    # ---- life cycle ----------------------------------------------------------------------------
    async def start(self, broker: Broker, notifier) -> None:
        await self._register()
        self._tasks = [asyncio.create_task(self._metadata_loop()), asyncio.create_task(self._heartbeat_loop()),
                       asyncio.create_task(self._fetcher_loop())]
        await self._await_metadata(lambda: broker.caught_up, timeout_s=60)
        if not broker.caught_up:
            raise errors.StorageError(f"node {broker.node_id} did not catch up with the controller's metadata log "
                                      f"(at offset {self.metadata_offset} of {self._catch_up_to}) within 60 s")
        # Serving starts unfenced: the heartbeat after catching up asks for it.
        await self._await_metadata(lambda: self._unfenced, timeout_s=30)

    async def _register(self) -> None:
        b = self.broker
        previous = b.previous_broker_epoch
        body = {"broker_id": b.node_id, "cluster_id": self.cluster_id, "incarnation_id": uuid.uuid4(),
                "listeners": [{"name": name, "host": host, "port": port, "security_protocol": protocol}
                              for name, host, port, protocol in b.endpoints()],
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
        b.broker_epoch = answer.broker_epoch
        self._registered_at = asyncio.get_running_loop().time()
        log.info("node %d registered with broker epoch %d (previous %d)", b.node_id, answer.broker_epoch, previous)

    async def tick(self) -> None:
        """Nothing periodic here: the heartbeats and fetches have their own loops."""

    def pump(self) -> None:
        for request in self.broker.manager.take_alter_partition_requests():
            asyncio.get_running_loop().create_task(self._alter_partition(request))

    async def controlled_shutdown(self) -> None:
        """KIP-841, bounded: ask the controller to move this broker's leaderships away and wait
        for should_shut_down; the metadata log brings the new leaders meanwhile."""
        self._stopping = True
        deadline = asyncio.get_running_loop().time() + 15
        logdir = self.broker.logdir
        while asyncio.get_running_loop().time() < deadline and not (logdir and logdir.offline):
            try:
                answer = await self._rpc.call(63, 1, self._heartbeat_body(want_shut_down=True), timeout_s=2)
                if answer.should_shut_down:
                    break
            except PeerError:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(FETCH_MAX_WAIT_MS / 1000)     # the last metadata fetch lands

    async def close(self) -> None:
        """The loops end (the broker closes its log dir after)."""
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

    # ---- the metadata log ----------------------------------------------------------------------
    async def _metadata_loop(self) -> None:
        peer = Peer(*self.address, timeout_s=FETCH_MAX_WAIT_MS / 1000 + 10, tls=self.tls)
        b = self.broker
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
            if not b.caught_up and self.metadata_offset >= self._catch_up_to:
                log.info("node %d caught up with the metadata log at offset %d", b.node_id, self.metadata_offset)
                b.catch_up()
                b.pump()

    def _replay(self, records: bytes) -> None:
        """Each batch of the metadata log, with the controller epoch it was written in (its
        partition leader epoch: the controller appends as the log's leader in its epoch)."""
        b = self.broker
        for batch in iter_batches(records):
            b.replay(batch.partition_leader_epoch, [record.value for record in batch.records()])
            self.metadata_offset = batch.last_offset + 1
        if b.caught_up:
            b.pump()
            if self._fetch_wakeup is not None:
                self._fetch_wakeup.set()

    # ---- heartbeats and AlterPartition ---------------------------------------------------------
    def _heartbeat_body(self, *, want_shut_down: bool = False) -> dict:
        return {"broker_id": self.broker.node_id, "broker_epoch": self.broker.broker_epoch,
                "current_metadata_offset": self.metadata_offset - 1, "want_fence": not self.broker.caught_up,
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
        stale, now = self.broker.broker_epoch, asyncio.get_running_loop().time()
        if now - self._registered_at < REREGISTER_BACKOFF_S:
            # Taken over again right after the last registration: another live process uses
            # this node id.  Registering at once would fence it, and it us, twice a second.
            if not self._conflict_logged:
                log.error("node %d: another live broker registers node id %d too (two brokers with one "
                          "--node-id?); registering again at most every %.0f s", self.broker.node_id, self.broker.node_id,
                          REREGISTER_BACKOFF_S)
                self._conflict_logged = True
            return
        log.warning("node %d: broker epoch %d is stale (the controller holds a newer registration of this node "
                    "id): registering again", self.broker.node_id, stale)
        self._unfenced = False
        self.broker.previous_broker_epoch = stale
        await self._register()
        if self.broker.manager is not None:
            self.broker.manager.broker_epoch = self.broker.logdir.broker_epoch = self.broker.broker_epoch

    async def _alter_partition(self, request: m.AlterPartitionRequest) -> None:
        topic_id = self.broker.topic_id(request.topic)
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
            self.broker.manager.retry_alter_partition(request.topic, request.partition)
            self.broker.pump()
            return
        p = answer.topics[0].partitions[0] if answer.topics else None
        code = int(answer.error_code) or (int(p.error_code) if p is not None else Errors.UNKNOWN_SERVER_ERROR)
        if code:
            await asyncio.sleep(ALTER_RETRY_S)      # a retriable error is resent, but not in a hot loop
        response = m.AlterPartitionResponse(code, request.topic, request.partition)
        if p is not None and not code:
            response = m.AlterPartitionResponse(Errors.NONE, request.topic, request.partition, p.leader_id,
                                                p.leader_epoch, list(p.isr), p.leader_recovery_state, p.partition_epoch)
        self.broker.manager.handle_alter_partition_response(request, response)
        self.broker.pump()

    # ---- the replica fetcher over TCP ----------------------------------------------------------
    async def _fetcher_loop(self) -> None:
        """Kafka's fetcher threads: one Fetch in flight per leader, carrying every partition this
        broker follows from it that is ready (`_fetching` holds the leaders with one out); the
        next goes the moment the answer is applied (the leader's high watermark, and so every
        acks=all producer, waits for it; `_replicate` sends it in the same task), and partitions
        that join meanwhile go in that one.  The leader holds a Fetch until its log end moves,
        so idle partitions cost one request per max wait.  OffsetForLeaderEpoch and ListOffsets
        go as they come; every 50 ms for back-offs."""
        wakeup = self._fetch_wakeup = asyncio.Event()
        while not self._stopping and not self._closing:
            wakeup.clear()
            if self.broker.caught_up and not self.broker.logdir.offline:
                for leader, request in self.broker.manager.fetcher.poll(self._fetching):
                    if isinstance(request, m.FetchRequest):
                        self._fetching.add(leader)
                    asyncio.get_running_loop().create_task(self._replicate(leader, request))
            try:
                async with asyncio.timeout(0.05):       # not wait_for: no task a wakeup (one a fetch)
                    await wakeup.wait()
            except TimeoutError:
                pass

    def _peer(self, leader: int, purpose: str) -> Peer | None:
        """A free connection to `leader` for `purpose`: a fetch waits at the leader (long poll)
        for up to 500 ms, and a partition that joins later must not queue behind it on the same
        connection (that held one partition's replication to two fetches a second)."""
        host, port = self.broker.address_of(leader)
        if port < 0:
            return None
        pool = [p for p in self._peers.get((leader, purpose), []) if (p.host, p.port) == (host, port)]
        for peer in pool:
            if not peer.busy:
                return peer
        peer = Peer(host, port, timeout_s=FETCH_MAX_WAIT_MS / 1000 + 10, tls=self.broker.peer_tls)
        self._peers[(leader, purpose)] = pool[-7:] + [peer]
        return peer

    async def _replicate(self, leader: int, request) -> None:
        """Send `request` to `leader` and apply its answer; a Fetch is followed at once by the
        next Fetch to that leader, in this task (Kafka's fetcher thread loops on its leader):
        no task, no wake-up of the fetcher loop and no turn of it per replication round, which
        were a share of a follower's CPU under acks=all.  The loop is woken when the task ends
        (nothing to fetch from that leader now, or a failure)."""
        while True:
            fetch = isinstance(request, m.FetchRequest)
            try:
                await self._exchange(leader, request)
            except BaseException:
                if fetch:
                    self._fetching.discard(leader)
                self._wake_fetcher()
                raise
            if fetch:
                self._fetching.discard(leader)
            request = self._next_fetch(leader) if fetch else None
            if request is None:
                self._wake_fetcher()
                return

    def _wake_fetcher(self) -> None:
        if self._fetch_wakeup is not None:
            self._fetch_wakeup.set()

    def _next_fetch(self, leader: int) -> m.FetchRequest | None:
        """The fetcher loop's poll, right after an answer from `leader` was applied: its Fetch to
        `leader` (None if none is ready), the other requests sent as their own tasks."""
        b = self.broker
        if self._stopping or self._closing or not b.caught_up or b.logdir.offline:
            return None
        mine = None
        for other, request in b.manager.fetcher.poll(self._fetching):
            if isinstance(request, m.FetchRequest):
                self._fetching.add(other)
                if other == leader and mine is None:
                    mine = request
                    continue
            asyncio.get_running_loop().create_task(self._replicate(other, request))
        return mine

    async def _exchange(self, leader: int, request) -> None:
        from .replication_rpc import FollowerSession, exchange
        peer = self._peer(leader, type(request).__name__)
        session = None
        if isinstance(request, m.FetchRequest):
            session = self._sessions.get(leader)
            if session is None:
                fetcher = self.broker.manager.fetcher
                session = self._sessions[leader] = FollowerSession(fetcher.parked_of(leader),
                                                                   lambda: fetcher.take_stirred(leader))
        try:
            if peer is None:
                raise PeerError(f"no address for broker {leader}")
            response = await exchange(self.broker, peer, request, session)
        except PeerError as exc:
            log.debug("replication request to %d failed: %s", leader, exc)
            self.broker.manager.fetcher.handle_failure(leader, request)
            return
        except Exception:
            log.exception("replication request to %d failed", leader)
            self.broker.manager.fetcher.handle_failure(leader, request)
            return
        try:
            self.broker.manager.fetcher.handle_response(leader, request, response)   # logs its truncations
            if session is not None and session.unchanged:
                self.broker.manager.fetcher.handle_unchanged(request, session.unchanged)
        except errors.LogDirOfflineError:
            self.broker.manager.go_offline()
        except Exception:
            # The fetcher's state must not stay "in flight" (it would stall for the request
            # timeout): the partitions back off and fetch again.
            log.exception("applying the answer of broker %d failed", leader)
            self.broker.manager.fetcher.handle_failure(leader, request)
        self.broker.pump()
