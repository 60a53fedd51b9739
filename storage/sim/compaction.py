"""The simulator's compacted topic (issue 16), on in one seed in four, from its own generator so
that the other seeds keep their traces.

A second partition, `compacted-0` (cleanup_policy "compact", replicas 1-3), takes keyed records
(4 keys, a unique value each, now and then a tombstone) with acks=all, and now and then a live
broker runs its cleaner (LogDir.clean_logs: every replica compacts on its own schedule, leader
or follower, beside the fetches, truncations, crashes and elections of the run).

Invariants:
  I22  a clean never changes what a reader from the log start sees: on the broker that cleans,
       every key's latest value below the high watermark is the same before and after;
  I23  at the end, on the final leader, every key's latest value is the latest acknowledged one
       or one written after it (never older; a tombstone and no record are the same), and the
       replicas agree by meaning (storage.inspect.compacted's rule: same record at the same
       offset, same latest value per key but for keys a replica holds past another's end: a
       follower may still be catching up at the end, and the leader cleans up to its high
       watermark, past that follower's end, as Kafka's does; swarm seed 186633) -- both only
       where committed data cannot be lost: an unclean election can truncate a record a replica
       already compacted with, and then the older record it replaced is gone from that replica
       for good (in Kafka too).
"""
from __future__ import annotations

import random

from ..core.config import LogConfig
from ..core.errors import Errors
from ..core.records import Record, build_batch
from ..replication import messages as m

TOPIC, PARTITION = "compacted", 0
KEYS = 4


def config_for(base: LogConfig) -> LogConfig:
    return LogConfig(**{**base.__dict__, "cleanup_policy": "compact", "min_cleanable_dirty_ratio": 0.0,
                        "segment_bytes": 1024})


def latest_values(log, below: int) -> dict:
    """key -> value of the latest record of each key below `below` (tombstones dropped)."""
    out = {}
    for batch in log.batches(log.log_start_offset):
        if batch.is_control or batch.is_transactional or batch.base_offset >= below:
            continue
        for r in batch.records():
            if r.offset < below and r.key is not None:
                out[r.key] = r.value
    return {k: v for k, v in out.items() if v is not None}


class Compaction:
    def __init__(self, seed: int):
        self.rng = random.Random(f"compaction-{seed}")
        self.on = self.rng.random() < 0.25
        self.sent = 0
        self.acked: dict[bytes, list[tuple[int, bytes | None]]] = {}    # key -> [(offset, value)]
        self.cleans = 0

    def step(self, sim) -> None:
        roll = self.rng.random()
        if roll < 0.6:
            self._produce(sim)
        elif roll < 0.68:
            self._clean(sim)

    def _produce(self, sim) -> None:
        c = sim.cluster
        leader = c.leader(TOPIC, PARTITION)
        node = c.brokers.get(leader)
        if node is None or not node.alive or node.manager is None:
            return
        key = b"key-%d" % self.rng.randrange(KEYS)
        value = None if self.rng.random() < 0.1 else b"c%d-%d" % (sim.seed, self.sent)
        self.sent += 1
        batch = build_batch([Record(key=key, value=value, timestamp=sim.channel.now)], base_timestamp=sim.channel.now)

        def answered(response, key=key, value=value):
            if response.error_code == Errors.NONE:
                self.acked.setdefault(key, []).append((response.base_offset, value))

        node.manager.handle_produce(m.ProduceRequest(TOPIC, PARTITION, batch, -1), answered)

    def _clean(self, sim) -> None:
        live = [b for b, n in sim.cluster.brokers.items()
                if n.alive and n.manager is not None and not n.manager.logdir.offline
                and (TOPIC, PARTITION) in n.manager.partitions]
        if not live:
            return
        b = self.rng.choice(sorted(live))
        log = sim.cluster.brokers[b].manager.partitions[(TOPIC, PARTITION)].log
        hw = log.high_watermark
        before = latest_values(log, hw)
        sim.cluster.brokers[b].manager.logdir.clean_logs(now_ms=sim.channel.now)
        self.cleans += 1
        sim.result.faults["compaction"] += 1
        after = latest_values(log, hw)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            sim.result.violations.append(f"I22 broker {b}: a clean changed the latest value of {changed[:3]}")

    def check_final(self, sim, loss_allowed: bool) -> list[str]:
        from ..inspect.compacted import record_conflict

        out = []
        c = sim.cluster
        replicas = {b: n.manager.partitions[(TOPIC, PARTITION)].log for b, n in c.brokers.items()
                    if n.alive and n.manager is not None and (TOPIC, PARTITION) in n.manager.partitions}
        leader = c.leader(TOPIC, PARTITION)
        if leader not in replicas:
            return out
        log = replicas[leader]
        final = {}
        for batch in log.batches(log.log_start_offset):
            for r in batch.records():
                if r.key is not None and not batch.is_control:
                    final[r.key] = (r.offset, r.value)
        if not loss_allowed:
            for key, writes in self.acked.items():
                offset, value = max(writes)
                have = final.get(key)
                if have is None:
                    if value is not None:
                        out.append(f"I23 key {key!r}: acknowledged {value!r} at {offset}, gone from the leader")
                elif have[0] < offset:
                    out.append(f"I23 key {key!r}: the leader's latest is at {have[0]}, an acknowledged write "
                               f"is at {offset}")
        # Beyond the budget (unclean elections) a replica may compact with a record that a later
        # truncation takes back -- below its high watermark, which only an unclean election
        # allows -- and lose the older record for good, as Kafka's would (swarm seed 210716, a
        # beyond seed): agreement is only owed where committed data cannot be lost.
        if not loss_allowed:
            conflict = record_conflict([(str(b), l.path) for b, l in sorted(replicas.items())])
            if conflict is not None:
                out.append(f"I23 the replicas disagree by meaning from offset {conflict['offset']}")
        return out
