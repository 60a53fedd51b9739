"""The KIPs' own stories, replayed deterministically on the real engine (storage.sim.rig).

Each story takes a directory and returns the `Rig` at its end; `run(name, root)` adds the
report `python -m storage.sim scenario NAME --json` prints: per broker its log end offset,
high watermark, epoch-cache entries and batches (base offset, last offset, epoch, crc), the
controller's final partition state, and the invariant violations found.  With a guard
switched off (`--disable-guard ID`) the same story shows the failure the KIP describes.
"""
from __future__ import annotations

from ..core.errors import Errors
from ..replication import messages as m
from . import oracle
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
    rig.start(leader)                        # the old leader comes back and follows: all heal
    rig.heal()
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


def _broker_2_taken_out_then_leader_crashes(root, take_out) -> Rig:
    """KIP-841's two stories: broker 2 is taken out (`take_out`), the metadata is published,
    then leader 1 dies; broker 2 must neither join the ISR nor be elected."""
    rig = _trio(root)
    rig.produce(1, [b"x"])
    rig.replicate()
    take_out(rig)
    rig.publish()
    rig.replicate()
    rig.crash(1)
    rig.replicate()
    return rig


def kip841_fenced_replica(root) -> Rig:
    """A fenced replica neither joins the ISR nor becomes leader."""
    # its session expired; the process lives on
    return _broker_2_taken_out_then_leader_crashes(root, lambda rig: rig.controller.fence_broker(2))


def kip841_controlled_shutdown(root) -> Rig:
    """A replica in controlled shutdown leaves the ISR and stays out, and is not elected."""
    return _broker_2_taken_out_then_leader_crashes(root, lambda rig: rig.controller.heartbeat(
        m.BrokerHeartbeatRequest(2, rig.epoch(2), want_shut_down=True)))


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
    rig.start(1)                             # both come back, after unclean shutdowns: nobody
    rig.start(3)                             # is eligible (KIP-966), and 2 must not be elected
    rig.replicate()
    if rig.state().leader == m.NO_LEADER:
        # Unclean recovery (KIP-966) picks the longest log in the latest epoch; every replica
        # then ends in sync with it.
        offers = {b: (-1 if rig.log(b).epoch_cache.latest_epoch is None else rig.log(b).epoch_cache.latest_epoch,
                      rig.log(b).log_end_offset) for b in (1, 2, 3)}
        rig.notes.append(f"unclean recovery: {Errors(rig.controller.recover_partition('t', 0, offers)).name}")
    rig.heal()
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


# Stories beyond the fault budget (power loss on every replica, unclean elections): losing
# committed data is allowed there; divergence and undetected loss are not.
BEYOND_BUDGET = {"kip101-scenario2", "kip101-appendix-a", "kip279-fast-leader-change", "kip320-diverging-epoch",
                 "kip704-unclean-recovery"}


def run(name: str, root) -> dict:
    """Replay a KIP story, or a guard's minimal fault recipe (storage.sim.recipes), by name."""
    from . import recipes

    if name in recipes.RECIPES:
        return recipes.run(name, root)
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)} and the recipes "
                       f"{', '.join(recipes.RECIPES)}")
    return oracle.report(name, SCENARIOS[name](root), beyond=name in BEYOND_BUDGET)
