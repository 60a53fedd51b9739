"""The oracle of the hand-driven stories (KIP stories in storage.sim.stories, guard recipes
in storage.sim.recipes): the invariants checked on a Rig at a story's end, and its report."""
from __future__ import annotations

import dataclasses

from ..replication import messages as m
from . import invariants
from .rig import Rig


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


def report(name: str, rig: Rig, *, beyond: bool = False) -> dict:
    """What `python -m storage.sim scenario NAME --json` prints; with `beyond`, loss of
    committed data (I2) is reported as data loss, not as a violation."""
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
    allowed_loss = bool(beyond)
    return {"scenario": name, "profile": "beyond" if allowed_loss else "safety", "brokers": brokers,
            "partition": dataclasses.asdict(rig.state()), "notes": list(rig.notes),
            "violations": [v for v in found if not (allowed_loss and v.startswith("I2"))],
            "data_loss": [v for v in found if allowed_loss and v.startswith("I2")]}
