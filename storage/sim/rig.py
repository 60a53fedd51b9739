"""A hand-driven replication rig for step-by-step scenarios: a memory-only Controller and
ReplicaManagers wired by direct calls, so a scenario decides exactly which fetch, AlterPartition
or metadata update is delivered, held back or lost (storage/sim/stories.py tells the KIPs'
stories with it; tests/replication/test_kip_scenarios.py checks them)."""
import os
import shutil

from ..core.config import LogConfig
from ..core.records import build_batch
from ..dir.logdir import LogDir
from ..replication import messages as m
from ..replication.controller import Controller
from ..replication.replica import ReplicaManager
from .cluster import crash_logdir

CONFIG = LogConfig(segment_bytes=64 * 1024, fsync=False)


class Rig:
    def __init__(self, root, brokers=2, *, unclean=False, min_insync_replicas=1, truncate_on_fetch=False,
                 recovery_hook=None):
        self.root = str(root)
        self.now = [0]
        self.controller = Controller(None, unclean_leader_election=unclean)
        self.min_insync_replicas = min_insync_replicas
        self.truncate_on_fetch = truncate_on_fetch
        self.recovery_hook = recovery_hook
        self.nodes: dict[int, ReplicaManager | None] = {}
        self.incarnations = 0
        self.held: list = []
        self.notes: list[str] = []
        self.committed: dict[int, bytes] = {}     # offset -> value of every record seen committed
        self.healed = False                       # the story ended with heal(): I14 applies
        for b in range(1, brokers + 1):
            self.start(b)

    @classmethod
    def with_partition(cls, root, brokers: int, **kwargs) -> "Rig":
        """A rig whose controller created partition t-0 on every broker, published."""
        rig = cls(root, brokers, **kwargs)
        rig.controller.create_partition("t", 0, list(range(1, brokers + 1)))
        rig.publish()
        return rig

    # ---- brokers ----
    def start(self, b, *, wipe=False, new_incarnation=True):
        """Start broker b; new_incarnation=False is a restart the controller never noticed
        (same registration and broker epoch, still in the ISR: the ZooKeeper-era story)."""
        path = os.path.join(self.root, f"broker-{b}")
        if wipe and os.path.exists(path):
            shutil.rmtree(path)
        manager = ReplicaManager(b, LogDir.open(path, CONFIG), clock=lambda: self.now[0],
                                 min_insync_replicas=self.min_insync_replicas, recovery_hook=self.recovery_hook,
                                 fetcher_options={"truncate_on_fetch": self.truncate_on_fetch, "backoff_ms": 0})
        if new_incarnation or b not in self.controller.brokers:
            self.incarnations += 1
            incarnation = f"{b}-{self.incarnations}"
        else:
            incarnation = self.controller.brokers[b].incarnation_id
        response = self.controller.register_broker(m.BrokerRegistrationRequest(b, incarnation))
        manager.broker_epoch = response.broker_epoch
        self.nodes[b] = manager
        self.controller.heartbeat(m.BrokerHeartbeatRequest(b, manager.broker_epoch))
        self.publish()
        return manager

    def crash(self, b, *, lose_unflushed=False, fence=True):
        crash_logdir(self.nodes[b].logdir, lose_unflushed=lose_unflushed)
        self.nodes[b] = None
        if fence:
            self.controller.fence_broker(b)
            self.publish()

    def epoch(self, b):
        return self.controller.brokers[b].broker_epoch

    # ---- delivery ----
    def publish(self, *, hold=lambda b, message: False):
        for b, message in self.controller.take_outbox():
            if hold(b, message):
                self.held.append((b, message))
            else:
                self.deliver(b, message)

    def deliver(self, b, message):
        manager = self.nodes.get(b)
        return None if manager is None else manager.handle(message)

    def alter(self, *, hold=False):
        """Send every queued AlterPartition to the controller (or keep them in self.held)."""
        for b, manager in self.nodes.items():
            if manager is None:
                continue
            for request in manager.take_alter_partition_requests():
                if hold:
                    self.held.append((b, request))
                else:
                    self.answer_alter(b, request)

    def answer_alter(self, b, request):
        response = self.controller.handle_alter_partition(request)
        if self.nodes.get(b) is not None:
            self.nodes[b].handle_alter_partition_response(request, response)
        self.publish()
        return response

    def fetch(self, b, *, deliver=True):
        """One round of broker b's fetcher against the live leaders; returns the responses."""
        manager = self.nodes[b]
        answers = []
        for leader, request in manager.fetcher.poll():
            target = self.nodes.get(leader)
            if target is None:
                manager.fetcher.handle_failure(leader, request)
                continue
            response = m.sent(target.handle(request))     # held answers must not see later writes
            answers.append(response)
            if deliver:
                manager.fetcher.handle_response(leader, request, response)
        return answers

    def replicate(self, rounds=6):
        for _ in range(rounds):
            self.now[0] += 10
            for b, manager in self.nodes.items():
                if manager is not None:
                    self.fetch(b)
            self.alter()
            self.publish()
        self.note_committed()

    def heal(self, rounds=10):
        """The story's end: replicate until quiet; from here liveness (I14) is judged too."""
        self.replicate(rounds)
        self.healed = True

    def note_committed(self, topic="t", partition=0):
        """Remember every record below the current leader's high watermark (I2's reference)."""
        leader = self.controller.partitions[(topic, partition)].leader
        if self.nodes.get(leader) is None:
            return
        log = self.log(leader, topic, partition)
        for batch in log.batches():
            for record in batch.records():
                if record.offset < log.high_watermark:
                    self.committed.setdefault(record.offset, record.value)

    # ---- data ----
    def produce(self, b, values, acks=1, topic="t", partition=0):
        answers = []
        self.nodes[b].handle_produce(m.ProduceRequest(topic, partition, build_batch(values), acks), answers.append)
        return answers[0] if answers else None

    def log(self, b, topic="t", partition=0):
        return self.nodes[b].logdir.partition(topic, partition)

    def batches(self, b, topic="t", partition=0):
        return [(x.base_offset, x.last_offset, x.partition_leader_epoch, x.crc) for x in self.log(b, topic, partition).batches()]

    def values(self, b, topic="t", partition=0):
        return [r.value for x in self.log(b, topic, partition).batches() for r in x.records()]

    def state(self, topic="t", partition=0):
        return self.controller.partitions[(topic, partition)]
