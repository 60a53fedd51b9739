"""The KIPs' own stories, replayed deterministically on the real engine (storage.sim.rig).

Each story takes a directory and returns the `Rig` at its end; `run(name, root)` adds the
report `python -m storage.sim scenario NAME --json` prints: per broker its log end offset,
high watermark, epoch-cache entries and batches (base offset, last offset, epoch, crc), the
controller's final partition state, and the invariant violations found.  With a guard
switched off (`--disable-guard ID`) the same story shows the failure the KIP describes.
"""
from __future__ import annotations

import dataclasses

from ..errors import Errors
from ..replication import messages as m
from . import invariants
from .rig import Rig


def _pair(root, **kwargs) -> Rig:
    return Rig.with_partition(root, 2, **kwargs)


def _trio(root, **kwargs) -> Rig:
    return Rig.with_partition(root, 3, **kwargs)


def kip101_scenario1(root) -> Rig:
    """High-watermark truncation followed by an immediate leader election."""
    rig = _pair(root)
    leader, follower = 1, 2
    rig.produce(leader, [b"m1"])
    rig.replicate()
    rig.produce(leader, [b"m2"])
    rig.fetch(follower)                      # the follower gets m2 ...
    rig.fetch(follower, deliver=False)       # ... acknowledges it (leader HW -> 2); the answer is lost
    rig.note_committed()
    rig.nodes[follower].logdir.flush()       # its log and its high watermark (1) reach the disk
    rig.crash(follower, fence=False)         # a restart the controller does not notice
    rig.start(follower, new_incarnation=False)
    rig.fetch(follower, deliver=False)       # its first move; the leader dies before answering
    rig.crash(leader)
    return rig


def kip101_scenario2(root) -> Rig:
    """Replica divergence on restart after multiple hard failures (a power outage)."""
    rig = _pair(root)
    a, b = 1, 2
    rig.produce(a, [b"m1"])
    rig.replicate()
    for broker in (a, b):
        rig.log(broker).flush()
    rig.produce(a, [b"m2"])
    rig.replicate()                          # m2 committed; A flushed it, B did not
    rig.log(a).flush()
    rig.nodes[a].logdir.checkpoint()
    rig.crash(b, lose_unflushed=True, fence=False)
    rig.crash(a, lose_unflushed=True, fence=False)
    rig.start(b, new_incarnation=False)      # B first, still in the ISR, one message behind ...
    rig.controller.fence_broker(a)           # ... and elected when A's session expires
    rig.publish()
    rig.produce(b, [b"m3"])
    rig.start(a)
    rig.replicate()
    return rig


def kip101_appendix_a(root) -> Rig:
    """Appendix (a): writes on isolated brokers under unclean elections, min.isr=1."""
    rig = _pair(root, unclean=True)
    a, b = 1, 2
    rig.crash(b)
    rig.produce(a, [b"A0 epoch0"])           # 1. A:0
    rig.crash(a)
    rig.start(b)                             #    B leads (unclean)
    rig.alter()
    rig.produce(b, [b"B0 epoch1"])           # 2. B:0
    rig.crash(b)
    rig.start(a)
    rig.alter()
    rig.produce(a, [b"A1 epoch2"])           # 3. A:1
    rig.crash(a)
    rig.start(b)
    rig.alter()
    rig.produce(b, [b"B1 epoch3"])           # 4. B:1
    rig.start(a)                             # 5. A follows B and asks for its epoch
    rig.replicate(rounds=10)
    return rig


def kip279_fast_leader_change(root) -> Rig:
    """Fast leader changes: the follower must iterate with (epoch, end offset) answers."""
    rig = _pair(root, unclean=True)
    a, b = 1, 2
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.produce(a, [b"a1"])                  # on A only
    rig.crash(a)                             # B leads in epoch 1, writes at offset 1 too
    rig.produce(b, [b"b1"])
    rig.crash(b)
    rig.start(a)                             # B was the last ISR member: A wins uncleanly
    rig.alter()
    rig.produce(a, [b"a2"])
    rig.start(b)
    rig.replicate(rounds=10)
    return rig


def kip320_diverging_epoch(root) -> Rig:
    """The same divergence, found by the leader in the fetch itself (DivergingEpoch)."""
    rig = _pair(root, unclean=True, truncate_on_fetch=True)
    a, b = 1, 2
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.produce(a, [b"a1"])
    rig.crash(a)
    rig.produce(b, [b"b1"])
    rig.crash(b)
    rig.start(a)
    rig.alter()
    rig.produce(a, [b"a2"])
    rig.start(b)
    rig.replicate()
    return rig


def kip704_unclean_recovery(root) -> Rig:
    """An unclean leader is RECOVERING: it refuses requests until its hook ran and RECOVERED
    was accepted; only then the ISR grows."""
    calls = []

    def hook(partition):
        calls.append(partition.key)
        return False

    rig = _pair(root, unclean=True)
    rig.recovery_hook = hook
    rig.produce(1, [b"m0"])
    rig.replicate()
    rig.crash(2)
    rig.produce(1, [b"only on 1"])
    rig.crash(1)
    rig.start(2)                             # 2 wins an unclean election
    refused = rig.produce(2, [b"too early"])
    rig.notes.append(f"produce while recovering: {Errors(refused.error_code).name}")
    rig.start(1)
    rig.replicate()
    rig.notes.append(f"ISR while recovering: {rig.state().isr}")
    rig.nodes[2].complete_leader_recovery("t", 0)
    rig.alter()
    rig.produce(2, [b"after recovery"])
    rig.replicate(rounds=10)
    rig.notes.append(f"recovery hook calls: {len(calls)}")
    return rig


def kip841_fenced_replica(root) -> Rig:
    """A fenced replica neither joins the ISR nor becomes leader."""
    rig = _trio(root)
    rig.produce(1, [b"x"])
    rig.replicate()
    rig.controller.fence_broker(2)           # its session expired; the process lives on
    rig.publish()
    rig.replicate()
    rig.crash(1)
    rig.replicate()
    return rig


def kip841_controlled_shutdown(root) -> Rig:
    """A replica in controlled shutdown leaves the ISR and stays out, and is not elected."""
    rig = _trio(root)
    rig.produce(1, [b"x"])
    rig.replicate()
    rig.controller.heartbeat(m.BrokerHeartbeatRequest(2, rig.epoch(2), want_shut_down=True))
    rig.publish()
    rig.replicate()
    rig.crash(1)
    rig.replicate()
    return rig


def kip903_stale_alter_partition(root) -> Rig:
    """KAFKA-14139: an AlterPartition in flight while its new member restarts with an empty disk."""
    rig = _trio(root)
    rig.crash(2)
    for i in range(5):
        rig.produce(1, [b"c%d" % i])
    rig.replicate()
    rig.note_committed()
    rig.start(2)
    rig.fetch(2)
    rig.fetch(2)                             # B caught up; A asks to add it ...
    rig.alter(hold=True)
    held = [(b, r) for b, r in rig.held if isinstance(r, m.AlterPartitionRequest)]
    rig.crash(2, fence=False)                # ... B restarts with an empty disk and a new epoch
    rig.start(2, wipe=True)
    if held:
        response = rig.answer_alter(*held[0])
        rig.notes.append(f"stale AlterPartition: {Errors(response.error_code).name}")
    rig.crash(1)
    rig.crash(3)
    return rig


def kip570_reordered_stop_replica(root) -> Rig:
    """A StopReplica delayed behind a newer LeaderAndIsr must be fenced."""
    rig = _pair(root)
    rig.produce(1, [b"keep me"])
    rig.replicate()
    rig.note_committed()
    stop = rig.controller.stop_replica(2, "t", 0, delete=True)
    rig.publish(hold=lambda b, message: isinstance(message, m.StopReplicaRequest))
    rig.controller.move_leader("t", 0, 2)
    rig.publish()
    response = rig.deliver(2, stop)
    rig.notes.append(f"delayed StopReplica: {Errors(response.partition_errors[('t', 0)]).name}")
    return rig


SCENARIOS = {
    "kip101-scenario1": kip101_scenario1,
    "kip101-scenario2": kip101_scenario2,
    "kip101-appendix-a": kip101_appendix_a,
    "kip279-fast-leader-change": kip279_fast_leader_change,
    "kip320-diverging-epoch": kip320_diverging_epoch,
    "kip704-unclean-recovery": kip704_unclean_recovery,
    "kip841-fenced-replica": kip841_fenced_replica,
    "kip841-controlled-shutdown": kip841_controlled_shutdown,
    "kip903-stale-alter-partition": kip903_stale_alter_partition,
    "kip570-reordered-stop-replica": kip570_reordered_stop_replica,
}


def violations(rig: Rig) -> list[str]:
    """The stories' oracle: I1, I2, I3, I7, I8, I9, I10, I11 and, once healed, I14."""
    out = []
    state = rig.state()
    logs = {b: rig.log(b) for b, node in rig.nodes.items() if node is not None and ("t", 0) in node.partitions}
    for b, log in logs.items():
        p = rig.nodes[b].partitions[("t", 0)]
        leading = p.leader == b
        out += invariants.check_replica(f"broker {b}", log, leader_epoch=p.leader_epoch if leading else None,
                                        leader_epoch_start_offset=p.leader_epoch_start_offset if leading else None)
    summaries = {b: invariants.batch_summaries(log) for b, log in logs.items()}
    out += invariants.check_log_matching(logs, summaries)
    out += invariants.check_isr(state, rig.controller.brokers)
    out += invariants.check_unclean_elections(rig.controller)
    out += invariants.check_hosting(state, rig.nodes)
    if state.leader in logs:
        out += invariants.check_acknowledged(logs[state.leader], sorted(rig.committed.items()),
                                             f"broker {state.leader}")
    out += _check_candidates(rig, summaries)
    out += _check_unclean_exclusion(rig)
    out += _check_epoch_fencing(rig, summaries)
    out += _check_converged(rig, logs)
    return out


def _current_leader(rig: Rig):
    """The controller's leader's Partition when that broker runs and knows it leads in the
    controller's epoch, RECOVERED; else None."""
    state = rig.state()
    node = rig.nodes.get(state.leader) if state.leader != m.NO_LEADER else None
    p = node.partitions.get(("t", 0)) if node is not None else None
    if p is None or p.leader != state.leader or p.leader_epoch != state.leader_epoch \
            or p.recovering or state.leader_recovery_state == m.RECOVERING:
        return None
    return p


def _check_candidates(rig: Rig, summaries: dict) -> list[str]:
    """I3, with the running leader's high watermark standing in for the true one (it is never
    above it): every running ISR or ELR member holds the leader's batches below it."""
    p = _current_leader(rig)
    if p is None:
        return []
    hw = p.log.high_watermark
    committed = {x[0]: x for x in summaries[p.leader] if x[1] < hw}
    others = {b: batches for b, batches in summaries.items() if b != p.leader}
    return invariants.check_candidates(rig.state(), others, committed, hw)


def _check_unclean_exclusion(rig: Rig) -> list[str]:
    """I10: no ISR or ELR member is there on the strength of an earlier incarnation -- the
    leader last saw it fetch under another broker epoch than the one it is registered with."""
    p = _current_leader(rig)
    if p is None:
        return []
    state, out = rig.state(), []
    for b in sorted(set(state.isr) | set(state.elr)):
        follower = p.followers.get(b) if b != p.leader else None
        registration = rig.controller.brokers.get(b)
        seen = follower.broker_epoch if follower is not None else None
        if registration is not None and seen not in (None, -1) and seen != registration.broker_epoch:
            out.append(f"I10 broker {b} is in the ISR/ELR under broker epoch {registration.broker_epoch}, but "
                       f"leader {p.leader} last saw it fetch in broker epoch {seen} (an earlier incarnation)")
    return out


def _check_epoch_fencing(rig: Rig, summaries: dict) -> list[str]:
    epochs = {b: rig.nodes[b].partitions[("t", 0)].leader_epoch for b in summaries}
    return invariants.check_epoch_fencing(rig.state(), epochs, summaries)


def _check_converged(rig: Rig, logs: dict) -> list[str]:
    """I14, for a story that ended with rig.heal(), once healed (every replica up, registered, unfenced, not shutting down, and a
    RECOVERED leader): every replica in the ISR, with the leader's log end offset and high
    watermark, and the leader's high watermark at its log end."""
    state = rig.state()
    if not rig.healed:
        return []
    for b in state.replicas:
        r = rig.controller.brokers.get(b)
        if b not in logs or r is None or r.fenced or r.in_controlled_shutdown:
            return []
    if state.leader == m.NO_LEADER or state.leader_recovery_state == m.RECOVERING:
        return []
    lead, out = logs[state.leader], []
    if lead.high_watermark != lead.log_end_offset:
        out.append(f"I14 broker {state.leader} (leader): high watermark {lead.high_watermark} != log end offset "
                   f"{lead.log_end_offset} after healing")
    for b in state.replicas:
        if b == state.leader:
            continue
        if (logs[b].log_end_offset, logs[b].high_watermark) != (lead.log_end_offset, lead.high_watermark):
            out.append(f"I14 broker {b}: log end offset {logs[b].log_end_offset} and high watermark "
                       f"{logs[b].high_watermark}; the leader has {lead.log_end_offset} and {lead.high_watermark}")
        if b not in state.isr:
            out.append(f"I14 broker {b}: not in the ISR {state.isr} after healing")
    return out


# Stories beyond the fault budget (power loss on every replica, unclean elections): losing
# committed data is allowed there; divergence and undetected loss are not.
BEYOND_BUDGET = {"kip101-scenario2", "kip101-appendix-a", "kip279-fast-leader-change", "kip320-diverging-epoch",
                 "kip704-unclean-recovery"}


def report(name: str, rig: Rig, *, beyond: bool | None = None) -> dict:
    brokers = {}
    for b, node in sorted(rig.nodes.items()):
        if node is None or ("t", 0) not in node.partitions:
            brokers[str(b)] = {"alive": node is not None}
            continue
        log = rig.log(b)
        brokers[str(b)] = {
            "alive": True,
            "log_end_offset": log.log_end_offset,
            "high_watermark": log.high_watermark,
            "epochs": [list(e) for e in log.epoch_cache.entries],
            "batches": [list(x) for x in rig.batches(b)],
        }
    found = violations(rig)
    allowed_loss = name in BEYOND_BUDGET if beyond is None else beyond
    return {"scenario": name, "profile": "beyond" if allowed_loss else "safety", "brokers": brokers,
            "partition": dataclasses.asdict(rig.state()), "notes": list(rig.notes),
            "violations": [v for v in found if not (allowed_loss and v.startswith("I2"))],
            "data_loss": [v for v in found if allowed_loss and v.startswith("I2")]}


def run(name: str, root) -> dict:
    """Replay a KIP story, or a guard's minimal fault recipe (storage.sim.recipes), by name."""
    from . import recipes

    if name in recipes.RECIPES:
        return recipes.run(name, root)
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)} and the recipes "
                       f"{', '.join(recipes.RECIPES)}")
    return report(name, SCENARIOS[name](root))
