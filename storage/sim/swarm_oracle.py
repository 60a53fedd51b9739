"""`SwarmOracle`: the cluster simulator's oracle (storage/sim/simulator.py), the checks a
`Simulation` runs after every step and once at the end of a run.

A mixin of Simulation, apart from its run loop and faults: it reads the simulation's cluster,
client, result and reference state (committed batches, the true high watermark, the broker
epochs seen) and appends violations to its result.

  - every step: I7 (the ISR), KIP-704 (an unclean election leaves RECOVERING), I1 (log
    matching), I10 (a restart registers under a larger broker epoch), I11 (epoch fencing,
    the targeted sites' hosting) and the producers' checks; I8/I9 on every replica every
    tenth step; in the safety profile also I5 (a committed batch never changes, the true
    high watermark never decreases), I3 (the election candidates hold what was committed),
    I2 (the leader holds every acknowledged record) and I4 (the quorum superset);
  - after a restart: I12, the partition opens, no batch failing its CRC survived recovery,
    I8/I9 as recovery left them;
  - at the end, over what the client saw: I13 (lost-write, duplicate, inconsistent-offsets,
    nonmonotonic-poll, unseen) and I6 (a record read at an offset is the one the final leader
    holds there).
"""
from __future__ import annotations

from ..core.errors import StorageError
from ..replication import messages as m
from . import invariants
from .crash import _is_crash

TOPIC, PARTITION = "t", 0


class SwarmOracle:
    """Simulation's checks (a mixin: the state is the simulation's)."""

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
