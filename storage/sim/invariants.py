"""Invariant checkers (docs/reliability.md 2), over live replicas.

Each function returns a list of violation strings ("I8 broker 2: ..."), empty when all hold.
They read logs through the public API only, so the same checks serve the named scenarios, the
cluster simulator and users' own tests.
"""
from __future__ import annotations

from ..core.records import iter_batches
from ..replication.messages import NO_LEADER, RECOVERING


def batches_of(log) -> list:
    return list(log.batches())


def batch_summaries(log) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, epoch, crc) of every batch, in offset order."""
    return [(b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc) for b in log.batches()]


def check_replica(name, log, *, leader_epoch: int | None = None, leader_epoch_start_offset: int | None = None) -> list[str]:
    """I8 (epoch cache integrity) and I9 (offset integrity) on one replica's log."""
    out = []
    batches = batches_of(log)
    previous = None
    for b in batches:
        if not b.is_valid():
            out.append(f"I9 {name}: batch at offset {b.base_offset} fails its CRC")
        if previous is not None:
            if b.base_offset <= previous.last_offset:
                out.append(f"I9 {name}: offsets go back at {b.base_offset} (after {previous.last_offset})")
            if b.magic >= 2 and previous.magic >= 2 and b.partition_leader_epoch < previous.partition_leader_epoch:
                out.append(f"I8 {name}: batch epoch decreases at offset {b.base_offset}")
        previous = b
    for segment in log.segments:
        view = segment.view()
        first = next(iter(iter_batches(view, verify=False)), None)
        if first is not None and first.base_offset < segment.base_offset:
            out.append(f"I9 {name}: segment {segment.base_offset} starts with batch {first.base_offset}")
        for offset, position in segment.offset_index_entries():
            found = next(iter(iter_batches(view[position:], verify=False)), None)
            if found is None or found.base_offset > offset:
                out.append(f"I9 {name}: index entry ({offset}, {position}) is not a batch boundary")
                break
    cache = log.epoch_cache
    entries = cache.entries
    for a, b in zip(entries, entries[1:]):
        if not (a.epoch < b.epoch and a.start_offset < b.start_offset):
            out.append(f"I8 {name}: epoch cache not strictly increasing: {a} then {b}")
    for entry in entries:
        if entry.start_offset > log.log_end_offset:
            out.append(f"I8 {name}: epoch entry {tuple(entry)} beyond the log end offset {log.log_end_offset}")
    # Every batch from the log start on is covered by the entry of its own epoch: a cache that
    # lost entries (a torn or reverted checkpoint) answers OffsetForLeaderEpoch wrongly (M22).
    for b in batches:
        if b.magic >= 2 and b.base_offset >= log.log_start_offset and b.partition_leader_epoch >= 0:
            cached = cache.epoch_for_offset(b.base_offset)
            if cached != b.partition_leader_epoch:
                out.append(f"I8 {name}: batch {b.base_offset} has epoch {b.partition_leader_epoch}, "
                           f"the cache says {cached}")
                break
    if leader_epoch is not None and leader_epoch_start_offset is not None:
        entry = cache.epoch_entry(leader_epoch)
        if entry is None or entry.start_offset > leader_epoch_start_offset:
            out.append(f"I8 {name}: leader cache lacks (epoch {leader_epoch}, {leader_epoch_start_offset})")
    return out


def check_log_matching(logs: dict, summaries: dict | None = None) -> list[str]:
    """I1: below both high watermarks, two replicas hold the same batches."""
    out = []
    if summaries is None:
        summaries = {name: batch_summaries(log) for name, log in logs.items()}
    names = sorted(logs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            bound = min(logs[a].high_watermark, logs[b].high_watermark)
            left = [x for x in summaries[a] if x[1] < bound]
            right = [x for x in summaries[b] if x[1] < bound]
            if left != right:
                first = next((x[0] for x, y in zip(left, right) if x != y), min(len(left), len(right)))
                out.append(f"I1 brokers {a} and {b} differ below the high watermark {bound} (from offset {first})")
    return out


def check_isr(state, registrations: dict) -> list[str]:
    """I7: leader in ISR, ISR within replicas, no fenced or shutting-down member (except a
    last member with no leader), RECOVERING means the leader alone."""
    out = []
    isr = state.isr
    if not set(isr) <= set(state.replicas):
        out.append(f"I7 {state.topic}-{state.partition}: ISR {isr} not within replicas {state.replicas}")
    if state.leader != NO_LEADER and state.leader not in isr:
        out.append(f"I7 {state.topic}-{state.partition}: leader {state.leader} not in ISR {isr}")
    if set(isr) & set(getattr(state, "elr", [])):
        out.append(f"I7 {state.topic}-{state.partition}: ISR {isr} and ELR {state.elr} overlap")
    if not isr and state.leader != NO_LEADER:
        out.append(f"I7 {state.topic}-{state.partition}: leader {state.leader} with an empty ISR")
    if state.leader_recovery_state == RECOVERING and state.leader != NO_LEADER and isr != [state.leader]:
        out.append(f"I7 {state.topic}-{state.partition}: RECOVERING with ISR {isr}")
    for b in isr:
        r = registrations.get(b)
        if r is None:
            out.append(f"I7 {state.topic}-{state.partition}: unregistered broker {b} in ISR")
        elif (r.fenced or r.in_controlled_shutdown) and len(isr) > 1:
            # Only a last member may stay (with no leader, or as a leader nobody can replace).
            out.append(f"I7 {state.topic}-{state.partition}: fenced or shutting-down broker {b} in ISR {isr}")
    return out


def check_unclean_elections(controller) -> list[str]:
    """KIP-704 (beyond-budget oracle): an unclean election leaves RECOVERING set."""
    return [f"I7 {topic}-{partition}: unclean election of {leader} in epoch {epoch} without RECOVERING"
            for topic, partition, leader, epoch, recovering in controller.unclean_elections if not recovering]


def check_hosting(state, managers: dict) -> list[str]:
    """I11: every live replica in the assignment still hosts the partition (a stale StopReplica
    must not remove it)."""
    return [f"I11 broker {b}: live replica of {state.topic}-{state.partition} no longer hosts it"
            for b in state.replicas
            if managers.get(b) is not None and (state.topic, state.partition) not in managers[b].partitions]


def check_acknowledged(leader_log, acked: list[tuple[int, bytes]], name="leader") -> list[str]:
    """I2: the leader holds every acknowledged (offset, value)."""
    have = {r.offset: r.value for b in batches_of(leader_log) for r in b.records()}
    lost = [(o, v) for o, v in acked if have.get(o) != v]
    return [f"I2 {name}: acknowledged record at offset {lost[0][0]} is missing or changed "
            f"({len(lost)} of {len(acked)})"] if lost else []


def check_candidates(state, summaries: dict, committed: dict, true_hw: int, *, unclean=()) -> list[str]:
    """I3 (leader-candidate completeness): every running member of the controller's ISR and
    ELR holds every committed batch (committed: base offset -> summary, everything ever below
    a leader's high watermark; true_hw: the largest such watermark).  summaries holds the
    running replicas only.  A member that lost data and has not caught up is I10's business
    (unclean exclusion): it must not be there at all."""
    out = []
    for b in sorted(set(state.isr) | set(getattr(state, "elr", []))):
        if b not in summaries:
            continue
        have = set(summaries[b])
        missing = [x for base, x in sorted(committed.items()) if x not in have]
        end = summaries[b][-1][1] + 1 if summaries[b] else 0
        if missing or end < true_hw:
            where = "ISR" if b in state.isr else "ELR"
            invariant = "I10" if b in unclean else "I3"
            first = missing[0][0] if missing else end
            out.append(f"{invariant} broker {b} in the {where} {state.isr if where == 'ISR' else state.elr} lacks "
                       f"committed data from offset {first} (true high watermark {true_hw})")
    return out


def check_quorum_superset(partition, state, min_insync_replicas: int) -> list[str]:
    """I4 (replication-quorum superset): while the leader's ISR is at least min.insync.replicas,
    its maximal ISR (ISR and additions in flight) covers the controller's ISR and ELR."""
    if len(partition.isr) < min_insync_replicas:
        return []
    need = set(state.isr) | set(getattr(state, "elr", []))
    have = set(partition.maximal_isr)
    if need <= have:
        return []
    return [f"I4 leader {partition.leader}: maximal ISR {sorted(have)} does not cover the controller's "
            f"ISR {state.isr} + ELR {getattr(state, 'elr', [])}"]


def check_epoch_fencing(state, epochs: dict, summaries: dict) -> list[str]:
    """I11, as far as state shows it: no replica (epochs: broker -> the leader epoch it holds)
    is in a leader epoch above the controller's, nor in one below an epoch its own log already
    holds (it applied an older LeaderAndIsr after a newer one)."""
    out = []
    for b in sorted(epochs):
        if epochs[b] > state.leader_epoch:
            out.append(f"I11 broker {b}: leader epoch {epochs[b]} above the controller's {state.leader_epoch}")
        newest = max((x[2] for x in summaries[b]), default=-1)
        if epochs[b] < newest:
            out.append(f"I11 broker {b}: applied leader epoch {epochs[b]} while its log holds a batch of "
                       f"epoch {newest} (an older LeaderAndIsr accepted after a newer one)")
    return out
