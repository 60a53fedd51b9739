"""An in-process cluster: a controller and N brokers on the real engine, wired through a
`Channel` with a simulated clock.  Used by the replication tests, the demo and the simulator.

Each broker is a `BrokerNode`: a `LogDir`, a `ReplicaManager` and its fetcher, a registration
with the controller (a new incarnation on every restart, hence a new broker epoch) and
heartbeats.  The `ControllerNode` answers registrations, heartbeats and AlterPartition, fences
brokers whose session expired, and publishes what the `Controller` queues.

Crashes: `crash()` is a process crash (the page cache survives: nothing is sealed, trimmed or
checkpointed); `crash(lose_unflushed=True)` also drops what was not flushed, cutting every log
back to its last recovery point (the ordered-prefix class of page-cache loss; storage.sim has
the full fault model); `restart(wipe=True)` comes back with an empty disk.
"""
from __future__ import annotations

import os
import random
import shutil
from typing import Callable

from ..core import errors
from ..core.config import LogConfig
from ..core.errors import Errors
from ..core.records import build_batch
from ..dir.logdir import LogDir
from ..replication import messages as m
from ..replication.controller import Controller
from ..replication.replica import ReplicaManager
from .channel import Channel

CONTROLLER_ID = 3000


class BrokerNode:
    def __init__(self, cluster: "Cluster", broker_id: int):
        self.cluster = cluster
        self.broker_id = broker_id
        self.path = os.path.join(cluster.root, f"broker-{broker_id}")
        self.alive = False
        self.manager: ReplicaManager | None = None
        self.broker_epoch = -1
        self.incarnation = None
        self.registered = False
        self.shutting_down = False
        self.paused = False                        # P2: frozen (GC pause, SIGSTOP); see pause()
        self.halts = 0                             # halts after the log dir went offline
        self._backlog: list = []
        self._alter_sent: dict[int, int] = {}      # id(request) -> time sent
        self._last_heartbeat = -10**9

    # ---- life cycle ----
    def start(self, *, wipe: bool = False) -> None:
        if wipe and os.path.exists(self.path):
            shutil.rmtree(self.path)
        c = self.cluster
        self.incarnation = "%016x" % c.random.getrandbits(64)
        logdir = LogDir.open(self.path, c.config, topic_configs=c.topic_configs)
        self.manager = ReplicaManager(self.broker_id, logdir, min_insync_replicas=c.min_insync_replicas,
                                      replica_lag_time_max_ms=c.replica_lag_time_max_ms, clock=lambda: c.channel.now,
                                      recovery_hook=c.recovery_hook, fetcher_options=dict(c.fetcher_options))
        self.alive, self.registered, self.shutting_down = True, False, False
        self.paused, self._backlog = False, []
        self.broker_epoch = -1
        c.channel.register(self.broker_id, self.handle)
        self.previous_broker_epoch = logdir.previous_broker_epoch
        c.channel.request(self.broker_id, CONTROLLER_ID, self._registration(), self._mine(self._on_registered))

    def _mine(self, callback):
        """A response callback for this incarnation only: an answer to a request of an earlier
        one (its connections died with it) is dropped, as a new process never sees it."""
        incarnation = self.incarnation
        return lambda response: callback(response) if self.incarnation == incarnation else None

    def _registration(self) -> m.BrokerRegistrationRequest:
        return m.BrokerRegistrationRequest(self.broker_id, self.incarnation, self.previous_broker_epoch)

    def _on_registered(self, response: m.BrokerRegistrationResponse) -> None:
        if self._frozen(lambda: self._on_registered(response)):
            return
        if self.alive and response.error_code == Errors.NONE:
            self.broker_epoch = self.manager.broker_epoch = self.manager.logdir.broker_epoch = response.broker_epoch
            self.registered = True

    def crash(self, *, lose_unflushed: bool = False) -> None:
        """Kill the process; with lose_unflushed, also lose what was not flushed."""
        if not self.alive:
            return
        self.alive = False
        self.paused, self._backlog = False, []
        self.cluster.channel.unregister(self.broker_id)
        crash_logdir(self.manager.logdir, lose_unflushed=lose_unflushed)
        self.manager = None

    def shutdown(self) -> None:
        """A clean shutdown (after controlled shutdown, or directly)."""
        if self.alive:
            self.alive = False
            self.cluster.channel.unregister(self.broker_id)
            try:
                self.manager.shutdown()
            except errors.LogDirOfflineError:
                self.halts += 1     # the dir failed during the shutdown: closed, no clean marker
            self.manager = None

    def pause(self) -> None:
        """Freeze the process (P2): it neither runs nor answers; what reaches it waits."""
        if self.alive:
            self.paused = True

    def resume(self) -> None:
        """Thaw it: everything that arrived meanwhile is handled now, stale as it is (answers
        to requests that waited are lost: their senders have timed out)."""
        self.paused = False
        backlog, self._backlog = self._backlog, []
        for deliver in backlog:
            if not self.alive:
                break
            deliver()

    def _frozen(self, deliver) -> bool:
        if self.paused:
            self._backlog.append(deliver)
        return self.paused

    def restart(self, *, wipe: bool = False) -> None:
        self.crash()
        self.start(wipe=wipe)

    def halt(self) -> None:
        """Kafka halts a broker whose last log dir went offline (the process exits; the OS and
        its page cache stay): what reached the disk stays, a restart recovers it uncleanly."""
        self.halts += 1
        self.crash()

    def _halt_if_offline(self) -> bool:
        if self.alive and self.manager is not None and self.manager.offline:
            self.halt()
            return True
        return False

    def _then_halt_if_offline(self, work):
        """Run `work` (the manager's), then halt if it met or left the dir offline: the failure
        state, raised or not, ends the process.  Returns what `work` returned, None if it raised."""
        try:
            result = work()
        except errors.LogDirOfflineError:
            result = None
        self._halt_if_offline()
        return result

    # ---- messages ----
    def handle(self, src: int, message):
        if self._frozen(lambda: self.handle(src, message)):
            return None
        manager = self.manager
        if manager is None:
            return None
        if not self.registered and src == CONTROLLER_ID:
            # Until this incarnation is registered, what the controller says is about the
            # previous one (still "alive" until its session expires): a restarted broker -- its
            # disk perhaps empty -- must not take that incarnation's leadership or ISR place.
            return None
        # The answer (KAFKA_STORAGE_ERROR when the dir failed) is the process's last; with
        # guard M31 off the manager raises instead and does not answer.
        # The answer travels through the channel: its records are read out of the files now.
        return self._then_halt_if_offline(lambda: m.sent(manager.handle(message)))

    def step(self) -> None:
        if not self.alive or self.paused or self._halt_if_offline():
            return
        self._then_halt_if_offline(self._step)

    def _step(self) -> None:
        c, manager = self.cluster, self.manager
        now = c.channel.now
        if now - self._last_heartbeat >= c.heartbeat_interval_ms and self.registered:
            self._last_heartbeat = now
            c.channel.request(self.broker_id, CONTROLLER_ID,
                              m.BrokerHeartbeatRequest(self.broker_id, self.broker_epoch,
                                                       want_shut_down=self.shutting_down),
                              self._mine(self._on_heartbeat))
        if not self.registered:
            if now - self._last_heartbeat >= c.request_timeout_ms:   # a lost registration is sent again
                self._last_heartbeat = now
                c.channel.request(self.broker_id, CONTROLLER_ID, self._registration(),
                                  self._mine(self._on_registered))
            return
        for request in manager.take_alter_partition_requests():
            self._alter_sent[id(request)] = now
            c.channel.request(self.broker_id, CONTROLLER_ID, request,
                              self._mine(lambda response, request=request: self._on_alter_partition(request, response)))
        for p in manager.partitions.values():   # a lost AlterPartition is sent again
            request = p.inflight
            if request is not None and now - self._alter_sent.get(id(request), now) > c.request_timeout_ms:
                self._alter_sent[id(request)] = now
                manager.retry_alter_partition(p.topic, p.partition)
        for leader, request in manager.fetcher.poll():
            c.channel.request(self.broker_id, leader, request,
                              self._mine(lambda response, leader=leader, request=request: self._on_fetcher_response(
                                  leader, request, response)))
        manager.tick()

    def _on_heartbeat(self, response: m.BrokerHeartbeatResponse) -> None:
        if self._frozen(lambda: self._on_heartbeat(response)):
            return
        if self.alive and response.should_shut_down and self.shutting_down:
            self.shutdown()

    def _on_alter_partition(self, request, response) -> None:
        if self._frozen(lambda: self._on_alter_partition(request, response)):
            return
        if self.alive and self.manager is not None:
            self._alter_sent.pop(id(request), None)
            manager = self.manager
            self._then_halt_if_offline(lambda: manager.handle_alter_partition_response(request, response))

    def _on_fetcher_response(self, leader, request, response) -> None:
        if self._frozen(lambda: self._on_fetcher_response(leader, request, response)):
            return
        if self.alive and self.manager is not None:
            fetcher = self.manager.fetcher
            self._then_halt_if_offline(lambda: fetcher.handle_response(leader, request, response))


def crash_logdir(logdir, *, lose_unflushed: bool = False) -> None:
    """What a killed process leaves of a log dir: nothing sealed, trimmed or checkpointed; with
    lose_unflushed, every log also cut back to its recovery point (ordered page-cache loss)."""
    cuts = []
    for log in logdir.logs().values():
        if lose_unflushed:
            cuts += _unflushed_cut(log)
        for segment in log.segments:
            segment.close()
    logdir.meta.close()
    for path, size in cuts:
        if os.path.exists(path):
            os.truncate(path, size)


def _unflushed_cut(log) -> list[tuple[str, int]]:
    """(path, size) cuts that drop every batch at or above the log's recovery point."""
    cuts = []
    for segment in log.segments:
        if segment.next_offset <= log.recovery_point:
            continue
        position = segment.find(log.recovery_point) if segment.base_offset < log.recovery_point else 0
        cuts.append((segment.log_path, max(position, 0)))
    return cuts


class ControllerNode:
    def __init__(self, cluster: "Cluster", controller: Controller):
        self.cluster = cluster
        self.controller = controller
        self.last_heartbeat: dict[int, int] = {}
        self.last_republish = 0

    def handle(self, src: int, message):
        c = self.controller
        if isinstance(message, m.BrokerRegistrationRequest):
            response = c.register_broker(message)
            self.last_heartbeat[message.broker_id] = self.cluster.channel.now
        elif isinstance(message, m.BrokerHeartbeatRequest):
            response = c.heartbeat(message)
            if response.error_code == Errors.NONE:
                self.last_heartbeat[message.broker_id] = self.cluster.channel.now
        elif isinstance(message, m.AlterPartitionRequest):
            response = c.handle_alter_partition(message)
        else:
            return None
        self.publish()
        return response

    def publish(self) -> None:
        for broker_id, message in self.controller.take_outbox():
            self.cluster.channel.tell(CONTROLLER_ID, broker_id, message)

    def step(self) -> None:
        now = self.cluster.channel.now
        if now - self.last_republish >= self.cluster.metadata_refresh_ms:
            # Brokers replay the metadata log in KRaft; over a lossy channel the pushes are
            # simply repeated (an unchanged state is ignored by the broker).
            self.last_republish = now
            self.controller.republish()
        for broker_id, registration in self.controller.brokers.items():
            last = self.last_heartbeat.get(broker_id, now)
            if not registration.fenced and now - last > self.cluster.session_timeout_ms:
                self.controller.fence_broker(broker_id)
        self.publish()


class Cluster:
    """A controller and `brokers` brokers under `root`, all driven by `step()`/`run()`."""

    def __init__(self, root, brokers: int = 3, *, seed: int = 0, config: LogConfig | None = None,
                 unclean_leader_election: bool = False, min_insync_replicas: int = 1,
                 replica_lag_time_max_ms: int = 10_000, session_timeout_ms: int = 9_000,
                 heartbeat_interval_ms: int = 500, request_timeout_ms: int = 3_000, step_ms: int = 5,
                 metadata_refresh_ms: int = 1_000,
                 recovery_hook: Callable | None = None, fetcher_options: dict | None = None,
                 channel: Channel | None = None, topic_configs: dict | None = None):
        self.root = os.fspath(root)
        self.topic_configs = dict(topic_configs or {})       # a topic's own LogConfig on every broker
        os.makedirs(self.root, exist_ok=True)
        self.random = random.Random(seed)
        self.config = config or LogConfig(segment_bytes=64 * 1024, fsync=False)
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.request_timeout_ms = request_timeout_ms
        self.step_ms = step_ms
        self.metadata_refresh_ms = metadata_refresh_ms
        self.recovery_hook = recovery_hook
        self.fetcher_options = {"backoff_ms": 100, "request_timeout_ms": request_timeout_ms,
                                **(fetcher_options or {})}
        self.channel = channel or Channel(seed)
        self.controller = Controller(os.path.join(self.root, "controller"),
                                     unclean_leader_election=unclean_leader_election, sync=self.config.fsync,
                                     min_insync_replicas=min_insync_replicas)
        self.controller_node = ControllerNode(self, self.controller)
        self.channel.register(CONTROLLER_ID, self.controller_node.handle)
        self.brokers = {b: BrokerNode(self, b) for b in range(1, brokers + 1)}
        for node in self.brokers.values():
            node.start()
        self.run_until(lambda: all(not r.fenced for r in self.controller.brokers.values())
                       and len(self.controller.brokers) == brokers, 10_000)

    # ---- driving ----
    def step(self) -> None:
        for node in self.brokers.values():
            node.step()
        self.controller_node.step()
        self.channel.advance(self.step_ms)

    def run(self, ms: int) -> None:
        end = self.channel.now + ms
        while self.channel.now < end:
            self.step()

    def run_until(self, predicate: Callable[[], bool], max_ms: int = 30_000) -> bool:
        end = self.channel.now + max_ms
        while self.channel.now < end:
            if predicate():
                return True
            self.step()
        return predicate()

    # ---- partitions ----
    def create_partition(self, topic: str, partition: int, replicas: list[int]) -> int:
        code = self.controller.create_partition(topic, partition, replicas)
        self.controller_node.publish()
        self.run_until(lambda: all(self.brokers[b].manager is None or self.brokers[b].manager.partition_state(
            topic, partition) is not None for b in replicas if self.brokers[b].alive), 5_000)
        return code

    def state(self, topic: str, partition: int) -> m.PartitionState:
        return self.controller.partitions[(topic, partition)]

    def leader(self, topic: str, partition: int) -> int:
        return self.state(topic, partition).leader

    def log(self, broker_id: int, topic: str, partition: int):
        return self.brokers[broker_id].manager.logdir.partition(topic, partition)

    def produce(self, topic: str, partition: int, records, *, acks: int = -1, max_ms: int = 10_000,
                leader_epoch: int | None = None) -> m.ProduceResponse:
        """Produce to the current leader and run the cluster until it answers."""
        leader = self.leader(topic, partition)
        if leader == m.NO_LEADER or not self.brokers[leader].alive:
            return m.ProduceResponse(topic, partition, Errors.NOT_LEADER_OR_FOLLOWER)
        batch = records if isinstance(records, (bytes, bytearray)) else build_batch(records)
        answers = []
        self.brokers[leader].manager.handle_produce(m.ProduceRequest(topic, partition, bytes(batch), acks),
                                                    answers.append)
        self.run_until(lambda: bool(answers), max_ms)
        return answers[0] if answers else m.ProduceResponse(topic, partition, Errors.REQUEST_TIMED_OUT)

    def replicas_caught_up(self, topic: str, partition: int) -> bool:
        s = self.state(topic, partition)
        if s.leader == m.NO_LEADER or not self.brokers[s.leader].alive:
            return False
        leader_log = self.log(s.leader, topic, partition)
        return all(self.brokers[b].alive and self.log(b, topic, partition).log_end_offset == leader_log.log_end_offset
                   for b in s.replicas)

    def records(self, broker_id: int, topic: str, partition: int) -> list[tuple[int, int, bytes]]:
        """(offset, leader epoch, value) of every record in a replica's log."""
        log = self.log(broker_id, topic, partition)
        return [(r.offset, b.partition_leader_epoch, r.value) for b in log.batches() for r in b.records()]

    def batches(self, broker_id: int, topic: str, partition: int) -> list[tuple[int, int, int, int]]:
        """(base offset, last offset, epoch, crc) of every batch in a replica's log."""
        log = self.log(broker_id, topic, partition)
        return [(b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc) for b in log.batches()]

    def close(self) -> None:
        for node in self.brokers.values():
            node.shutdown()
        self.controller.close()


__all__ = ["BrokerNode", "Cluster", "ControllerNode"]
