"""The deterministic cluster simulator: one seed decides everything.

A controller and three brokers (storage.sim.cluster) run on the real engine, over the simulated
file system (fsync disabled, page cache lost on crash) and the in-process channel (drops,
duplicates, reordering, delays, partitions).  A client produces with acks=all and consumes.
Faults, drawn per seed (swarm): process crashes with restart under a new broker epoch (P1),
page-cache loss (S1 a-c) with torn sectors (S3) and size-before-data (S4), disk wipe (S12),
controlled shutdown (P3), fencing not tied to a failure (P4), unclean election when the
profile allows it (P6), network partitions (N4) and the channel's N1-N3, plus BUGGIFY sites
(forced rolls, tiny fetches, spontaneous leader moves, delayed AlterPartition).

Oracle: I1, I2, I7 after every step, I8/I9 every few steps, I12 on restarts (no garbage after
recovery), the history check I13 (lost-write, duplicate, inconsistent-offsets,
nonmonotonic-poll, unseen) and liveness I14 after healing.  The safety profile keeps at most
MinISR - 1 replicas unclean at a time; the beyond-budget profile allows loss and checks
detection instead (no divergence below a surviving high watermark, RECOVERING after an
unclean election, no batch served that fails its CRC).
"""
from __future__ import annotations

import collections
import errno
import hashlib
import os
import random
import shutil
from dataclasses import dataclass, field

from ..core import guards
from ..core import io as sio
from ..core.config import LogConfig
from ..core.errors import Errors, LogDirOfflineError, StorageError, StorageIOError
from ..core.records import Record, build_batch, iter_batches
from ..replication import messages as m
from . import compaction, invariants
from .channel import Channel
from .cluster import Cluster
from .compaction import Compaction
from .crash import _is_crash
from .fs import SimFS
from .producers import Producers
from .targeted import TargetedSites

TOPIC, PARTITION = "t", 0

# BUGGIFY sites (docs/reliability.md 1.4): each is active in a seed with p = 0.25.
BUGGIFY_SITES = (
    "tiny_segments",      # tiny segment size: rolls all the time
    "tiny_fetch",         # tiny fetch byte limit: splits at batch boundaries
    "leader_moves",       # spontaneous leader elections
    "delay_alter",        # delayed AlterPartition responses (the channel's delay, per request)
    "flush_points",       # random log flushes and recovery-point / epoch checkpoints
    "back_to_back",       # back-to-back elections with no writes between them (KAFKA-7415)
    "isr_attempts",       # spontaneous ISR shrink and expansion attempts by the leader
)
PROFILES = ("safety", "beyond", "calibration")


@dataclass
class SimResult:
    seed: int
    profile: str
    steps: int = 0
    faults: collections.Counter = field(default_factory=collections.Counter)
    violations: list = field(default_factory=list)
    trace: list = field(default_factory=list)
    acked: int = 0
    polled: int = 0

    fixed_hash: str = ""       # set at the end of a run (the trace may be dropped afterwards)

    @property
    def trace_hash(self) -> str:
        return self.fixed_hash or hashlib.sha256(repr(self.trace).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return {"seed": self.seed, "profile": self.profile, "steps": self.steps, "faults": dict(self.faults),
                "violations": self.violations, "trace_hash": self.trace_hash, "acked": self.acked,
                "polled": self.polled}


class _Client:
    """A producer (acks=all) and a consumer reading up to the high watermark."""

    def __init__(self):
        self.acked: dict[bytes, int] = {}        # value -> offset it was acknowledged at
        self.pending: dict[bytes, int] = {}      # value -> broker it was sent to
        self.indeterminate: set[bytes] = set()   # sent to a broker that died before answering
        self.polled: list[tuple[int, bytes]] = []
        self.position = 0
        self.sent = 0


class Simulation:
    def __init__(self, seed: int, root, *, profile: str = "safety", steps: int = 300):
        self.seed, self.profile, self.steps = seed, profile, steps
        self.root = os.fspath(root)
        self.rng = random.Random(seed)
        self.result = SimResult(seed, profile)
        rng = self.rng
        self.buggify = {name: rng.random() < 0.25 for name in BUGGIFY_SITES}
        self.channel = Channel(seed, min_delay_ms=1, max_delay_ms=rng.choice((1, 5, 20)),
                               loss=rng.choice((0.0, 0.0, 0.02, 0.05)), duplicate=rng.choice((0.0, 0.02, 0.05)),
                               reorder=rng.random() < 0.5)
        # Swarm parameter, from its own generator (the main one's sequence stays as it was):
        # truncation by DivergingEpoch in the fetch (KIP-320) or by OffsetForLeaderEpoch.
        self.truncate_on_fetch = random.Random(f"truncate-{seed}").random() < 0.5
        # S7/S8 (disk faults), from their own generator too: in one seed in four, now and then a
        # seam operation of one broker's log dir fails with EIO/ENOSPC/EDQUOT/EROFS; the dir goes
        # offline and the broker halts (storage.sim.cluster.BrokerNode.halt), to restart uncleanly.
        self.disk_faults = random.Random(f"disk-{seed}")
        self.disk_faults_on = self.disk_faults.random() < 0.25
        # Crashes in the middle of a file operation (the crash enumeration's crash points, at
        # random moments of a cluster run): one seed in four, from their own generator.
        self.mid_crashes = random.Random(f"mid-crash-{seed}")
        self.mid_crashes_on = self.mid_crashes.random() < 0.25
        # Targeted fault sites (storage.sim.targeted), each on in one seed in four, from its own
        # generator: a follower deaf to the controller while leadership bounces A -> C -> A
        # (M6), an ISR expansion whose follower is cut off while its AlterPartition is slow
        # (M11), a replica removed and re-added while its StopReplica is delayed (M16).
        self.targeted = TargetedSites(self, random.Random(f"targeted-{seed}"))
        # Idempotent and transactional producers (storage.sim.producers): one seed in four.
        self.producers = Producers(seed, TOPIC, PARTITION)
        # A compacted topic beside it (storage.sim.compaction): one seed in four.
        self.compaction = Compaction(seed)
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
        # C1 (calibration): unclean elections on and no budget, but the safety profile's history
        # checker: it must report lost-write (this tests the checker, not the engine).
        self.unclean_allowed = profile == "calibration" or (profile == "beyond" and rng.random() < 0.7)
        self.min_isr = 2
        self.client = _Client()
        self.unclean: set[int] = set()           # brokers that lost data and have not caught up
        self.down: set[int] = set()
        self.seen_hw = 0
        # The oracle's reference: every batch ever below a leader's high watermark
        # (base offset -> (base, last, epoch, crc)) and the largest such watermark (the true HW).
        self.committed: dict[int, tuple] = {}
        self.true_hw = 0
        self.broker_epochs: dict[int, int] = {}   # the last broker epoch each broker registered with
        self.calibration = profile == "calibration"
        self.lost_data = False                   # some crash lost data (beyond the budget: anything goes)

    # ---- running ----
    def run(self) -> SimResult:
        shutil.rmtree(self.root, ignore_errors=True)
        os.makedirs(self.root)
        self.fs = SimFS(self.root, seed=self.seed)
        segment_bytes = 2048 if self.buggify["tiny_segments"] else 32 * 1024
        # The simulated clock starts at 0 while producer expiry reads the wall clock: producers
        # never expire here (an expired producer may duplicate a retried batch, as in Kafka).
        config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=256, segment_index_bytes=4096,
                           producer_id_expiration_ms=2**62,
                           fsync=False)
        fetch_bytes = 300 if self.buggify["tiny_fetch"] else 1 << 20
        if self.buggify["delay_alter"]:
            self.channel.slow["AlterPartitionRequest"] = 400
        with sio.using(self.fs):
            self.cluster = Cluster(self.root, 3, seed=self.seed, channel=self.channel, config=config,
                                   unclean_leader_election=self.unclean_allowed,
                                   min_insync_replicas=self.min_isr, replica_lag_time_max_ms=self.targeted.lag_ms,
                                   fetcher_options={"max_bytes": fetch_bytes, "truncate_on_fetch": self.truncate_on_fetch},
                                   topic_configs={compaction.TOPIC: compaction.config_for(config)})
            self.cluster.create_partition(TOPIC, PARTITION, [1, 2, 3])
            if self.compaction.on:
                self.cluster.create_partition(compaction.TOPIC, compaction.PARTITION, [1, 2, 3])
            try:
                for step in range(self.steps):
                    self.result.steps = step + 1
                    self._step(step)
                    self._check(step)
                    self._track_catch_up()
                    if self.result.violations:
                        break
                if not self.result.violations:
                    self._heal_and_check()
            finally:
                self._stop()
        self.result.acked = len(self.client.acked)
        self.result.polled = len(self.client.polled)
        self.result.trace = [self.result.trace, self.channel.trace]
        self.result.fixed_hash = self.result.trace_hash
        if not guards.on("M0") and self.seed % 100 == 0:
            self.result.violations.append("M0 canary: seed % 100 == 0")
        return self.result

    def _note(self, what: str) -> None:
        self.result.trace.append((self.channel.now, what))

    def _stop(self) -> None:
        halts = sum(node.halts for node in self.cluster.brokers.values())
        if halts:
            self.result.faults["halt"] += halts     # brokers halted by an offline log dir
        for node in self.cluster.brokers.values():
            if node.alive:
                node.crash()
        self.cluster.controller.close()

    def _step(self, step: int) -> None:
        rng, c = self.rng, self.cluster
        self._survive(lambda: self._act(rng.random()))
        if self.compaction.on:
            self._survive(lambda: self.compaction.step(self))
        for node in c.brokers.values():
            node._halt_if_offline()
        if self.disk_faults_on and self.disk_faults.random() < 0.03:
            self._inject_disk_fault()
        if self.mid_crashes_on and self.fs.crash_after is None and self.mid_crashes.random() < 0.05:
            draw = self.mid_crashes
            self.fs.crash_after = self.fs.mutations + draw.randint(1, 60)
            # Biased toward the rare writes a crash matters most in: checkpoints and indexes.
            self.fs.crash_match = draw.choice(self.MID_CRASH_TARGETS)
        self._survive(lambda: self.targeted.step(step))
        for _ in range(rng.randint(1, 20)):
            self._survive(c.step)
        for b, node in c.brokers.items():
            if node.paused and rng.random() < 0.1:
                self._survive(node.resume)
                self._note(f"resume {b}")

    def _survive(self, action) -> None:
        """Run one piece of the cluster's work; the failure state (its broker halts) and an
        armed crash point (its broker dies, `_crashed_mid_operation`) end it early."""
        try:
            action()
        except Exception as exc:    # noqa: BLE001 - only those two
            if not isinstance(exc, LogDirOfflineError) and not _is_crash(exc):
                raise
        self._crashed_mid_operation()

    def _act(self, roll: float) -> None:
        """One client action or fault, chosen by `roll`."""
        rng, c = self.rng, self.cluster
        if roll < 0.45:
            self._produce()
        elif roll < 0.60:
            self._consume()
        elif roll < 0.65:
            self._crash(rng.choice([1, 2, 3]))
        elif roll < 0.66:
            self._power_outage()
        elif roll < 0.72:
            self._restart_one()
        elif roll < 0.75:
            a, b = rng.sample([1, 2, 3], 2)
            self.channel.partition(a, b)
            self.result.faults["N4"] += 1
            self._note(f"partition {a}-{b}")
        elif roll < 0.80:
            self.channel.heal()
            self._note("heal")
        elif roll < 0.81:
            self._controlled_shutdown()
        elif roll < 0.82:
            self._pause()
        elif roll < 0.84:
            b = rng.choice([1, 2, 3])
            c.controller.fence_broker(b)            # P4: fencing not tied to a failure
            c.controller_node.publish()
            self.result.faults["P4"] += 1
            self._note(f"fence {b}")
        elif roll < 0.86 and self.buggify["leader_moves"]:
            self._move_leader()
        elif roll < 0.88 and self.buggify["back_to_back"]:
            if self._move_leader():          # and straight back, nothing written between
                c.step()
                self._move_leader()
                self.result.faults["back-to-back"] += 1
        elif roll < 0.91 and self.buggify["flush_points"]:
            self._flush_point()
        elif roll < 0.93 and self.buggify["isr_attempts"]:
            self._isr_attempt()

    MID_CRASH_TARGETS = (None, None, "checkpoint", "checkpoint", ".index", ".timeindex", ".log", ".tmp")

    def _crashed_mid_operation(self) -> None:
        """The process of the broker whose file operation reached the armed crash point dies in
        the middle of it (a torn checkpoint write, a half-done roll, truncation or recovery);
        half the time the machine loses its page cache too, as any crash in `_crash`.  The
        CrashNow may have reached the broker wrapped in the failure state, which halted it."""
        crash, self.fs.last_crash = self.fs.last_crash, None
        if crash is None:
            return
        for b, node in self.cluster.brokers.items():  # noqa: B007 - b is the one found (for ... else)
            if crash.path is not None and (crash.path == node.path or crash.path.startswith(node.path + os.sep)):
                break
        else:
            return                  # not a broker's file (the controller keeps no files here)
        self.result.faults["mid-operation"] += 1
        # the file name only: a deleted partition dir carries a random suffix (Kafka's -delete names)
        self._note(f"crash {b} mid-operation {crash.kind} {os.path.basename(crash.path)}")
        self._crash(b, died=not node.alive)


    DISK_FAULT_OPERATIONS = ("write", "write", "fsync", "fsync", "truncate", "rename", "create", "unlink",
                             "fsync_dir", "read")

    def _inject_disk_fault(self) -> None:
        """S8 (a write-side operation fails; a failed fsync makes nothing durable) or S7 (a read
        fails) on one running broker's log dir, after a few more of them succeed."""
        draw = self.disk_faults
        alive = [b for b, n in self.cluster.brokers.items() if n.alive]
        if not alive:
            return
        b = draw.choice(alive)
        operation = draw.choice(self.DISK_FAULT_OPERATIONS)
        code = draw.choice((errno.EIO, errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EROFS))
        self.fs.inject(operation, code, after=draw.randint(0, 30), path=self.cluster.brokers[b].path)
        self.result.faults["S7" if operation == "read" else "S8"] += 1
        self._note(f"disk fault {b} {operation} {errno.errorcode[code]}")

    def _move_leader(self) -> bool:
        c = self.cluster
        s = c.state(TOPIC, PARTITION)
        others = [b for b in s.isr if b != s.leader]
        if not others:
            return False
        c.controller.move_leader(TOPIC, PARTITION, self.rng.choice(others))
        c.controller_node.publish()
        self.result.faults["leader-move"] += 1
        return True

    def _flush_point(self) -> None:
        """BUGGIFY: a flush or a checkpoint at a random moment (recovery point and epoch
        checkpoint move; a later page-cache loss keeps what they made durable)."""
        alive = [b for b, n in self.cluster.brokers.items() if n.alive and n.manager is not None]
        if not alive:
            return
        node = self.cluster.brokers[self.rng.choice(alive)]
        if self.rng.random() < 0.5:
            node.manager.logdir.flush()
        else:
            node.manager.logdir.checkpoint()
        self.result.faults["flush-point"] += 1

    def _isr_attempt(self) -> None:
        """BUGGIFY: the leader tries to shrink the ISR by a caught-up follower, or to expand it by
        any follower (the expansion still has to pass the leader's checks)."""
        c = self.cluster
        leader = c.leader(TOPIC, PARTITION)
        node = c.brokers.get(leader)
        if node is None or not node.alive or node.manager is None:
            return
        manager = node.manager
        p = manager.partitions.get((TOPIC, PARTITION))
        if p is None or p.leader != leader or p.inflight is not None or p.recovering:
            return
        followers = sorted(p.followers)
        if not followers:
            return
        b = self.rng.choice(followers)
        if b in p.isr:
            manager._submit_alter_partition(p, [x for x in p.isr if x != b], p.leader_recovery_state)
            self.result.faults["isr-shrink"] += 1
        else:
            manager._maybe_expand_isr(p, p.followers[b])
            self.result.faults["isr-expand"] += 1

    def _leader_manager(self):
        """The current leader's ReplicaManager, None when there is no live one."""
        leader = self.cluster.leader(TOPIC, PARTITION)
        node = self.cluster.brokers.get(leader)
        return None if node is None or not node.alive or node.manager is None else node.manager

    def _produce(self) -> None:
        if self.producers.on:
            self.producers.produce(self)
            return
        c = self.cluster
        leader = c.leader(TOPIC, PARTITION)
        if leader == m.NO_LEADER or not c.brokers[leader].alive or c.brokers[leader].manager is None:
            return
        client = self.client
        value = b"s%d-v%d" % (self.seed, client.sent)
        client.sent += 1
        client.pending[value] = leader
        batch = build_batch([Record(value=value, timestamp=self.channel.now)], base_timestamp=self.channel.now)
        manager = c.brokers[leader].manager

        def answered(response, value=value):
            client.pending.pop(value, None)
            if response.error_code == Errors.NONE:
                client.acked[value] = response.base_offset
                if manager.logdir.offline:
                    self.result.violations.append(f"I16 broker {leader} acknowledged {value!r} after its log dir "
                                                  f"went offline")

        manager.handle_produce(m.ProduceRequest(TOPIC, PARTITION, batch, -1), answered)

    def _consume(self) -> None:
        c = self.cluster
        leader = c.leader(TOPIC, PARTITION)
        if leader == m.NO_LEADER or not c.brokers[leader].alive or c.brokers[leader].manager is None:
            return
        client = self.client
        request = m.FetchRequest(-1, -1, [m.FetchPartition(TOPIC, PARTITION, client.position, m.NO_EPOCH)])
        manager = c.brokers[leader].manager
        response = manager.handle(request)
        c.brokers[leader]._halt_if_offline()
        if response is None:
            return
        answer = response.partitions[0]
        if answer.error_code != Errors.NONE:
            return
        if manager.logdir.offline:
            self.result.violations.append(f"I16 broker {leader} served a fetch after its log dir went offline")
            return
        if answer.high_watermark < self.seen_hw and answer.high_watermark >= 0 and self.profile == "safety":
            self.result.violations.append(f"I6 observed high watermark went back {self.seen_hw} -> "
                                          f"{answer.high_watermark}")
        self.seen_hw = max(self.seen_hw, answer.high_watermark)
        for batch in iter_batches(answer.records, verify=False):
            if not batch.is_valid():
                self.result.violations.append(f"I15 a batch failing its CRC was served at {batch.base_offset}")
                return
            for record in batch.records():
                if record.offset >= client.position:
                    client.polled.append((record.offset, record.value))
                    client.position = record.offset + 1

    def _budget_allows_loss(self, broker: int) -> bool:
        if self.profile != "safety":
            return True
        return len(self.unclean - {broker}) < self.min_isr - 1

    def _crash(self, broker: int, *, died: bool = False) -> None:
        """Kill a running broker (or, with `died`, one whose process just died by itself) and,
        half the time within the budget, lose its page cache."""
        node = self.cluster.brokers[broker]
        if not node.alive and not died:
            return
        rng = self.rng
        lossy = rng.random() < 0.5 and self._budget_allows_loss(broker)
        node.crash()
        self.down.add(broker)
        self.producers.lost_answers()
        for value, target in list(self.client.pending.items()):
            if target == broker:          # the connection dropped: the outcome is unknown
                del self.client.pending[value]
                self.client.indeterminate.add(value)
        if lossy:
            kind = rng.random()
            if kind < 0.1:
                self.fs.crash(node.path, faults=("S12",))
                self.result.faults["S12"] += 1
            else:
                mode = rng.choice("abc")
                faults = tuple(f for f in ("S3", "S4", "S5") if rng.random() < 0.2)
                self.fs.crash(node.path, mode=mode, faults=faults)
                self.result.faults[f"S1{mode}"] += 1
                for fault in faults:
                    self.result.faults[fault] += 1
            self.unclean.add(broker)
            self.lost_data = True
        else:
            self.result.faults["P1"] += 1
        self._note(f"crash {broker}{' lossy' if lossy else ''}")

    def _power_outage(self) -> None:
        """S14: every running broker crashes in the same tick, each with its own page-cache draw
        (the budget still decides how many may lose data)."""
        alive = [b for b, node in self.cluster.brokers.items() if node.alive]
        if len(alive) > 1:
            self.result.faults["S14"] += 1
            for b in alive:
                self._crash(b)

    def _pause(self) -> None:
        """P2: a broker freezes (long GC, SIGSTOP) and later resumes as a zombie, handling what
        reached it meanwhile."""
        alive = [b for b, node in self.cluster.brokers.items() if node.alive and not node.paused]
        if alive:
            b = self.rng.choice(alive)
            self.cluster.brokers[b].pause()
            self.result.faults["P2"] += 1
            self._note(f"pause {b}")

    def _restart_one(self) -> None:
        if not self.down:
            return
        broker = self.rng.choice(sorted(self.down))
        self.down.discard(broker)
        node = self.cluster.brokers[broker]
        injected = len(self.fs.failures)
        try:
            node.start()
        except Exception as exc:   # noqa: BLE001 - a restart that fails is a finding, unless ...
            if _is_crash(exc):
                raise               # ... recovery was interrupted by an armed crash point (_step)
            if not isinstance(exc, StorageIOError) or len(self.fs.failures) == injected:
                self.result.violations.append(f"I12 broker {broker} failed to restart: {exc!r}")
                return
            # An injected disk fault met the recovery: the broker exits (a failed open released
            # what it had opened) and is started again later, when the disk "works" again.
            self.down.add(broker)
            self.result.faults["restart-disk-fault"] += 1
            self._note(f"restart {broker} failed: {errno.errorcode.get(exc.errno, exc.errno)}")
            return
        self._check_recovered(broker)
        self._note(f"restart {broker}")

    def _controlled_shutdown(self) -> None:
        alive = [b for b, n in self.cluster.brokers.items() if n.alive and not n.shutting_down]
        if len(alive) > 1:
            broker = self.rng.choice(alive)
            self.cluster.brokers[broker].shutting_down = True
            self.result.faults["P3"] += 1
            self._note(f"controlled shutdown {broker}")

    def _track_catch_up(self) -> None:
        c = self.cluster
        s = c.state(TOPIC, PARTITION)
        for b in list(self.unclean):
            if b in s.isr and c.brokers[b].alive and c.brokers[b].registered:
                self.unclean.discard(b)
        for b, node in c.brokers.items():
            if not node.alive and b not in self.down:
                self.down.add(b)     # shut down after a controlled shutdown, or halted
                for value, target in list(self.client.pending.items()):
                    if target == b:     # its connections died with it: the outcome is unknown
                        del self.client.pending[value]
                        self.client.indeterminate.add(value)

    # ---- oracle ----
    def _logs(self) -> dict:
        out = {}
        for b, node in self.cluster.brokers.items():
            if node.alive and node.manager is not None and (TOPIC, PARTITION) in node.manager.partitions \
                    and not node.manager.logdir.offline:     # offline (only with M31 off): unreadable
                out[b] = node.manager.partitions[(TOPIC, PARTITION)].log
        return out

    def _check_recovered(self, broker: int) -> None:
        node = self.cluster.brokers[broker]
        try:
            log = node.manager.logdir.partition(TOPIC, PARTITION)
        except StorageError as exc:     # refused to open (damage below the recovery point)
            if _is_crash(exc):
                raise                   # an armed crash point reached while opening it: the broker dies
            self.result.violations.append(f"I12 broker {broker}: the partition does not open after recovery: "
                                          f"{exc.reason}")
            return
        for batch in log.batches():
            if not batch.is_valid():
                self.result.violations.append(f"I12 broker {broker}: a batch failing its CRC survived recovery")
                return
        # I8/I9 as recovery left them, before replication repairs anything (a torn or reverted
        # epoch checkpoint shows here, M22).
        self.result.violations += invariants.check_replica(f"broker {broker} after recovery", log)

    def _check(self, step: int) -> None:
        if self.calibration:
            return          # C1: only the end-of-run history checker judges
        c, out = self.cluster, self.result.violations
        state = c.state(TOPIC, PARTITION)
        logs = self._logs()
        summaries = {b: invariants.batch_summaries(log) for b, log in logs.items()}
        out += invariants.check_isr(state, c.controller.brokers)
        out += invariants.check_unclean_elections(c.controller)
        if self.profile == "safety" or not (self.lost_data or c.controller.unclean_elections):
            # Beyond the budget, loss may leave replicas divergent until they catch up; the
            # check then runs once more after healing (no divergence may survive it).
            out += invariants.check_log_matching(logs, summaries)
        out += self._check_registrations()
        out += self.targeted.check_hosting()
        epochs = {b: c.brokers[b].manager.partitions[(TOPIC, PARTITION)].leader_epoch for b in logs}
        out += invariants.check_epoch_fencing(state, epochs, summaries)
        leader = state.leader
        if step % 10 == 0:
            out += self._check_replicas(logs)
        if self.producers.on:
            out += self.producers.check(logs)
        if self.profile != "safety":
            return
        out += self._note_committed(logs, summaries)
        running = {b for b, node in c.brokers.items()
                   if b in logs and node.registered and self._registered_now(b)}
        out += invariants.check_candidates(state, {b: summaries[b] for b in running}, self.committed,
                                           self.true_hw, unclean=self.unclean)
        if leader in logs and state.leader_recovery_state != m.RECOVERING:
            acked = sorted((offset, value) for value, offset in self.client.acked.items())
            out += invariants.check_acknowledged(logs[leader], acked, f"broker {leader}")
            p = c.brokers[leader].manager.partitions[(TOPIC, PARTITION)]
            if p.leader == leader and p.leader_epoch == state.leader_epoch:
                out += invariants.check_quorum_superset(p, state, self.min_isr)

    def _check_replicas(self, logs: dict) -> list[str]:
        """I8 and I9 on every replica; a leader's cache must hold (its epoch, its start offset)."""
        out = []
        for b, log in logs.items():
            p = self.cluster.brokers[b].manager.partitions[(TOPIC, PARTITION)]
            leading = p.leader == b and not p.recovering
            out += invariants.check_replica(f"broker {b}", log, leader_epoch=p.leader_epoch if leading else None,
                                            leader_epoch_start_offset=p.leader_epoch_start_offset if leading else None)
        return out

    def _registered_now(self, b: int) -> bool:
        r = self.cluster.controller.brokers.get(b)
        return r is not None and not r.fenced and r.broker_epoch == self.cluster.brokers[b].broker_epoch

    def _check_registrations(self) -> list[str]:
        """I10: every restart registers under a new, larger broker epoch."""
        out = []
        for b, node in self.cluster.brokers.items():
            if not node.alive or not node.registered:
                continue
            seen = self.broker_epochs.get(b)
            if seen is not None and seen[0] != node.incarnation and node.broker_epoch <= seen[1]:
                out.append(f"I10 broker {b}: a new incarnation registered with broker epoch {node.broker_epoch} "
                           f"(the previous one had {seen[1]})")
            self.broker_epochs[b] = (node.incarnation, node.broker_epoch)
        return out

    def _note_committed(self, logs: dict, summaries: dict) -> list[str]:
        """Record every batch below a leader's high watermark; I5: it never changes afterwards,
        and the true high watermark never decreases."""
        out = []
        for b, log in logs.items():
            p = self.cluster.brokers[b].manager.partitions[(TOPIC, PARTITION)]
            if p.leader != b or p.recovering:
                continue
            hw = log.high_watermark
            for batch in summaries[b]:
                if batch[1] >= hw:
                    break
                known = self.committed.setdefault(batch[0], batch)
                if known != batch:
                    out.append(f"I5 broker {b}: the committed batch at offset {batch[0]} is now {batch} "
                               f"(was {known})")
                    break
            self.true_hw = max(self.true_hw, hw)
        return out

    def _heal_and_check(self) -> None:
        c = self.cluster
        self.channel.heal()
        self.channel.loss = self.channel.duplicate = 0.0
        self.fs.injected.clear()        # the disks are replaced: no more pending S7/S8 faults
        self.fs.crash_after = self.fs.crash_match = None    # and no armed mid-operation crash
        self.targeted.stop()
        for b, node in c.brokers.items():
            if node.paused:
                node.resume()
            if node.alive and node.shutting_down:   # finish the controlled shutdown, come back
                node.shutdown()
            node.shutting_down = False
            if not node.alive:
                self.down.discard(b)
                node.start()
                self._check_recovered(b)
        def offline():
            s = c.state(TOPIC, PARTITION)
            return s.leader == m.NO_LEADER and not s.isr and not s.elr

        c.run_until(lambda: all(n.registered for n in c.brokers.values()), 30_000)
        c.run(2_000)
        if offline():
            # Every replica restarted uncleanly: KIP-966's unclean recovery picks the longest log.
            offers = {b: (-1 if log.epoch_cache.latest_epoch is None else log.epoch_cache.latest_epoch,
                          log.log_end_offset) for b, log in self._logs().items()}
            c.controller.recover_partition(TOPIC, PARTITION, offers)
            c.controller_node.publish()
            self.result.faults["unclean-recovery"] += 1
        s = c.state(TOPIC, PARTITION)
        if s.leader == m.NO_LEADER and self.profile != "safety":
            c.controller.elect_leader(TOPIC, PARTITION, unclean=True)
            c.controller_node.publish()

        def converged():
            s = c.state(TOPIC, PARTITION)
            if s.leader == m.NO_LEADER or sorted(s.isr) != [1, 2, 3] or s.leader_recovery_state == m.RECOVERING:
                return False
            logs = self._logs()
            if len(logs) != 3:
                return False
            ends = {(log.log_end_offset, log.high_watermark) for log in logs.values()}
            return len(ends) == 1 and not self.client.pending
        if not c.run_until(converged, 120_000):
            s = c.state(TOPIC, PARTITION)
            self.result.violations.append(f"I14 no convergence after healing: {s}, pending {len(self.client.pending)}, "
                                          f"ends {[(b, l.log_end_offset, l.high_watermark) for b, l in self._logs().items()]}")
            return
        self.result.violations += invariants.check_log_matching(self._logs())   # after healing: identical
        if self.result.violations:
            return
        def drained():
            # The final drain: consume until everything the leader holds is committed and read
            # (a new leader answers OFFSET_NOT_AVAILABLE until its HW reaches its epoch start).
            self._consume()
            log = self._logs().get(c.leader(TOPIC, PARTITION))
            return log is not None and self.client.position >= log.high_watermark == log.log_end_offset
        c.run_until(drained, 30_000)
        self._history()

    def _history(self) -> None:
        """I13, Jepsen's queue anomalies over what the client saw."""
        out = self.result.violations
        client = self.client
        final = {}
        leader = self.cluster.leader(TOPIC, PARTITION)
        leader_log = self._logs()[leader]
        if self.producers.on:
            out += self.producers.history(leader_log, self.cluster.brokers[leader].manager)
        if self.compaction.on:
            out += self.compaction.check_final(self, self.profile == "beyond" or self.lost_data)
        for batch in leader_log.batches():
            for record in batch.records():
                final.setdefault(record.value, []).append(record.offset)
        loss_allowed = self.profile == "beyond"    # calibration keeps the strict checker
        for value, offset in client.acked.items():
            offsets = final.get(value, [])
            if not offsets and not loss_allowed:
                out.append(f"I13 lost-write: {value!r} acknowledged at {offset}")
            elif len(offsets) > 1:
                out.append(f"I13 duplicate: {value!r} at {offsets}")
            elif offsets and offsets[0] != offset and not loss_allowed:
                out.append(f"I13 inconsistent-offsets: {value!r} acknowledged at {offset}, found at {offsets[0]}")
        polled_offsets = [o for o, _ in client.polled]
        if any(b <= a for a, b in zip(polled_offsets, polled_offsets[1:])):
            out.append("I13 nonmonotonic-poll")
        seen = {v for _, v in client.polled}
        unseen = [v for v in client.acked if v not in seen and final.get(v)]
        if unseen and not loss_allowed:     # loss moves offsets under a consumer's position
            out.append(f"I13 unseen: {len(unseen)} acknowledged records never polled")
        by_offset = {o: v for v, offsets in final.items() for o in offsets}
        changed = [o for o, v in client.polled if o in by_offset and by_offset[o] != v]
        if changed and not loss_allowed:
            out.append(f"I6 a record read at offset {changed[0]} is another record on the final leader")


def swarm_profile(seed: int) -> str:
    """The long run's swarm: one seed in ten runs the beyond-budget profile."""
    return "beyond" if random.Random(f"swarm-{seed}").random() < 0.1 else "safety"


def run_seed(seed: int, root, *, profile: str = "safety", steps: int = 300) -> SimResult:
    guards.enter_simulation()
    if profile == "swarm":
        profile = swarm_profile(seed)
    return Simulation(seed, root, profile=profile, steps=steps).run()


def run_job(job) -> SimResult:
    """One seed in a worker process (`run --jobs N`): (seed, profile, steps) -> its result, with
    the trace dropped when the seed is clean (its hash is kept)."""
    import tempfile

    seed, profile, steps = job
    with tempfile.TemporaryDirectory() as root:
        result = run_seed(seed, os.path.join(root, "seed"), profile=profile, steps=steps)
    if not result.violations:
        result.trace = []
    return result
