"""Targeted fault sites for the random swarm: rare interleavings, made likely.

Plain random faults almost never line up the three or four events some guards exist for (in
2,400 seeds none lined up M6's, M11's or M16's).  Each site here starts a short, timed plan
of ordinary faults -- a cut link, a leader move, a slow message, a reassignment -- at a
moment when the cluster's state makes the interleaving possible, and leaves the rest to the
run's randomness.  Nothing here bypasses the engine: every effect travels as a message over
the channel or a controller decision, exactly as the other faults do.

Each site is on in one seed in four and draws from the simulation's `targeted-<seed>`
generator only, so the main generator's sequence -- and every seed with no site on -- keeps
its trace.

  deaf_bounce     (M6)   a follower B loses its link to the controller while leadership moves
                         A -> C, C takes a write, and leadership moves back to A; when the link
                         heals B hears only the later epoch, with the same leader as before.
  cut_expansion   (M11)  while the leader's AlterPartition adding follower X is in flight (and
                         AlterPartition is slow), X's link to the leader is cut and a write is
                         produced: the high watermark must wait for X.
  replica_churn   (M16)  a follower is removed from the assignment and added back one step
                         later, with StopReplica slow: the StopReplica of the removal may
                         arrive after the LeaderAndIsr of the re-add and must be fenced.
"""
from __future__ import annotations

from ..replication import messages as m
from .cluster import CONTROLLER_ID

TOPIC, PARTITION = "t", 0
SITES = ("deaf_bounce", "cut_expansion", "replica_churn")


class TargetedSites:
    def __init__(self, sim, draw):
        self.sim, self.draw = sim, draw
        self.on = {name: draw.random() < 0.25 for name in SITES}
        self.plan: list[tuple[int, str, object]] = []     # (step, what, action)
        self.cuts: set[tuple[int, int]] = set()           # links this module cut
        # replica.lag.time.max.ms: Kafka's HW also waits for a follower that is caught up
        # within it (defence in depth for M11), so the M11 interleaving needs the follower to
        # fall out of "caught up" while its addition is in flight: a short lag time, a slow
        # AlterPartition.
        self.lag_ms = 10_000
        if self.on["cut_expansion"]:
            self.lag_ms = draw.choice((150, 250, 400))
            sim.channel.slow["AlterPartitionRequest"] = 2 * self.lag_ms
        if self.on["replica_churn"]:
            sim.channel.slow["StopReplicaRequest"] = 200
        # I11 bookkeeping: (broker, incarnation) -> the highest leader epoch it applied, and
        # the leader epoch at which each broker last joined the assignment.
        self.hosted: dict[tuple[int, str], int] = {}
        self.joined: dict[int, int] = {}

    # ---- driving ----
    def step(self, step: int) -> None:
        due = [item for item in self.plan if item[0] <= step]
        self.plan = [item for item in self.plan if item[0] > step]
        for _at, what, action in due:
            action()
            self.sim._note(f"targeted {what}")
        if self.plan:
            return          # one plan at a time
        draw = self.draw
        if self.on["deaf_bounce"] and draw.random() < 0.04:
            self._deaf_bounce(step)
        elif self.on["cut_expansion"]:
            self._cut_expansion(step)
        if not self.plan and self.on["replica_churn"] and draw.random() < 0.04:
            self._replica_churn(step)

    def stop(self) -> None:
        """Healing: what is planned to restore the cluster happens now (a removed replica is
        added back, so the assignment is whole again); the rest is dropped, and the cuts are
        healed with every other link."""
        for _at, what, action in self.plan:
            if what.startswith("re-add"):
                action()
                self.sim._note(f"targeted {what} (healing)")
        self.plan.clear()
        self.cuts.clear()

    def _cut(self, a: int, b: int) -> None:
        self.sim.channel.partition(a, b)
        self.cuts.add((a, b))

    def _reconnect(self, a: int, b: int) -> None:
        if (a, b) in self.cuts:
            self.cuts.discard((a, b))
            self.sim.channel.reconnect(a, b)

    def _alive(self, b: int) -> bool:
        node = self.sim.cluster.brokers[b]
        return node.alive and node.manager is not None

    # ---- M6 ----
    def _deaf_bounce(self, step: int) -> None:
        c = self.sim.cluster
        s = c.state(TOPIC, PARTITION)
        a = s.leader
        followers = [b for b in s.isr if b != a and self._alive(b) and c.controller.active(b)]
        if a == m.NO_LEADER or not self._alive(a) or len(followers) < 2:
            return
        logs = self.sim._logs()
        if any(b not in logs for b in followers):
            return
        # B, the deaf one, holds the most: what it has beyond C is what C's epoch overwrites.
        deaf, new_leader = sorted(followers, key=lambda b: (-logs[b].log_end_offset, b))[:2]
        self._cut(CONTROLLER_ID, deaf)
        if c.controller.move_leader(TOPIC, PARTITION, new_leader) != 0:
            self._reconnect(CONTROLLER_ID, deaf)
            return
        c.controller_node.publish()
        self.sim.result.faults["deaf-bounce"] += 1
        self.sim._note(f"targeted deaf bounce {a}->{new_leader}->{a}, {deaf} deaf")
        gap = self.draw.randint(1, 3)
        self.plan += [(step + 1, "write", self.sim._produce),
                      (step + 1 + gap, "bounce back", lambda: self._move_back(a)),
                      (step + 3 + gap, "undeafen", lambda: self._reconnect(CONTROLLER_ID, deaf))]

    def _move_back(self, leader: int) -> None:
        c = self.sim.cluster
        if c.controller.move_leader(TOPIC, PARTITION, leader) == 0:
            c.controller_node.publish()

    # ---- M11 ----
    def _cut_expansion(self, step: int) -> None:
        c = self.sim.cluster
        leader = c.leader(TOPIC, PARTITION)
        if leader == m.NO_LEADER or not self._alive(leader):
            return
        p = c.brokers[leader].manager.partitions.get((TOPIC, PARTITION))
        if p is None or p.leader != leader or p.inflight is None:
            return
        added = sorted(set(p.inflight.new_isr) - set(p.isr))
        if len(added) != 1 or self.draw.random() < 0.5:
            return
        x = added[0]
        self._cut(leader, x)
        self.sim.result.faults["cut-expansion"] += 1
        self.sim._note(f"targeted cut {leader}-{x} while adding {x} to the ISR")
        self.plan += [(step + k, "write", self.sim._produce) for k in (1, 3, 5, 7)]
        self.plan.append((step + 9, "reconnect", lambda: self._reconnect(leader, x)))

    # ---- M16 ----
    def _replica_churn(self, step: int) -> None:
        c = self.sim.cluster
        s = c.state(TOPIC, PARTITION)
        followers = [b for b in s.replicas if b != s.leader and self._alive(b)]
        if s.leader == m.NO_LEADER or not followers or len(s.isr) < len(s.replicas):
            return
        b = self.draw.choice(followers)
        replicas = list(s.replicas)
        if c.controller.reassign(TOPIC, PARTITION, [x for x in replicas if x != b]) != 0:
            return
        c.controller_node.publish()
        self.sim.result.faults["replica-churn"] += 1
        self.sim._note(f"targeted remove {b} from {replicas}")
        self.plan.append((step + 1, f"re-add {b}", lambda: self._readd(replicas, b)))

    def _readd(self, replicas: list[int], b: int) -> None:
        c = self.sim.cluster
        if c.controller.reassign(TOPIC, PARTITION, replicas) == 0:
            c.controller_node.publish()
            self.joined[b] = c.state(TOPIC, PARTITION).leader_epoch
            self.sim.unclean.add(b)      # it comes back empty: it lost data, as after a wipe

    # ---- I11 ----
    def check_hosting(self) -> list[str]:
        """I11: a replica that applied the partition since it (re)joined the assignment keeps
        hosting it while it is assigned and alive (a stale StopReplica must not remove it)."""
        c = self.sim.cluster
        s = c.state(TOPIC, PARTITION)
        out = []
        for b, node in c.brokers.items():
            if not node.alive or node.manager is None:
                continue
            key = (b, node.incarnation)
            p = node.manager.partitions.get((TOPIC, PARTITION))
            if p is not None:
                self.hosted[key] = max(self.hosted.get(key, -1), p.leader_epoch)
            elif b in s.replicas and self.hosted.get(key, -1) >= self.joined.get(b, 0):
                out.append(f"I11 broker {b}: live replica of {TOPIC}-{PARTITION} (assigned since epoch "
                           f"{self.joined.get(b, 0)}) no longer hosts it")
        return out
