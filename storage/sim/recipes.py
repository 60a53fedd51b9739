"""Minimal fault recipes: one hand-driven story per guard (docs/reliability.md 3, the
"minimal fault recipe" column), on the rig the KIPs' stories use (storage.sim.rig).  With every
guard on a recipe ends clean; with its guard switched off it ends in a violation that the
stories' oracle (oracle.violations) reports.  `python -m storage.sim mutate ID` tries a
guard's recipes first, then the KIPs' stories, then random seeds; `python -m storage.sim
scenario NAME` replays a recipe by name like a story.

Defence in depth shows in some recipes: M5 sends the UNDEFINED request an old follower would
send (ours never does); M26 needs a story beyond
the fault budget (a full truncation below the first segment only happens after two unclean
elections).  M2 (M1's guard under correlated power loss) is the KIP-101 scenario 2 story itself.
No recipe exists, by design, for:
  - M29 (a re-elected leader forgets followers outside the ISR): such a follower enters the ISR
    only while its own fetch is handled, after that fetch overwrote its offset and broker
    epoch, and the high watermark counts it only as a further minimum; stale state can hold the
    HW back (liveness, for up to replica.lag.time.max.ms) but never let it pass anything;
  - M14 (eligibility and request from different snapshots, KAFKA-15221): a ReplicaManager
    handles one request to completion, so the eligibility check and the AlterPartition it
    builds read the same follower state; the message-level race is KIP-903's (M13).
"""
from __future__ import annotations

import os

from ..core.errors import Errors
from ..core.files import LOG_SUFFIX
from ..log.epoch import UNDEFINED_EPOCH
from ..replication import messages as m
from . import oracle
from .rig import Rig

TOPIC, PARTITION = "t", 0
LAG = 30_000        # ReplicaManager's default replica_lag_time_max_ms


def _held_leader_and_isr(b):
    return lambda broker, message: broker == b and isinstance(message, m.LeaderAndIsrRequest)


def _active_segment_file(rig: Rig, b: int) -> str:
    directory = os.path.join(rig.root, f"broker-{b}", f"{TOPIC}-{PARTITION}")
    return os.path.join(directory, max(n for n in os.listdir(directory) if n.endswith(LOG_SUFFIX)))


def m5_undefined_epoch(root) -> Rig:
    """A follower without epoch information asks OffsetForLeaderEpoch(UNDEFINED) (sent here on its
    behalf: our fetcher truncates to its HW instead); answered with the leader's end it keeps
    its unreplicated x1 below it."""
    rig = Rig.with_partition(root, 2)
    a, b = 1, 2
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.produce(a, [b"x1"])                  # on A only
    rig.crash(a)                             # B leads in epoch 1
    rig.produce(b, [b"y1"])
    rig.produce(b, [b"y2"])
    rig.start(a)                             # A follows B, Truncating from its high watermark
    fs = rig.nodes[a].fetcher.partitions[(TOPIC, PARTITION)]
    request = m.OffsetForLeaderEpochRequest(a, [m.OffsetForLeaderEpochPartition(
        TOPIC, PARTITION, UNDEFINED_EPOCH, fs.current_leader_epoch)])
    rig.nodes[a].fetcher.handle_response(b, request, rig.nodes[b].handle(request))
    rig.heal()
    return rig


def m6_epoch_bump_same_leader(root) -> Rig:
    """B misses the LeaderAndIsr that moved leadership A -> C (N1); when A leads again in epoch 2
    the leader looks unchanged to B, which must still truncate its uncommitted a1."""
    rig = Rig.with_partition(root, 3)
    a, b, c = 1, 2, 3
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.produce(a, [b"a1"])
    rig.fetch(b)                             # B has a1; nobody else does, it is not committed
    rig.controller.move_leader(TOPIC, PARTITION, c)
    rig.publish(hold=_held_leader_and_isr(b))   # epoch 1: B never hears of it
    rig.produce(c, [b"c1"])
    rig.fetch(a)                             # A truncates a1 ...
    rig.fetch(a)                             # ... and fetches c1
    rig.controller.move_leader(TOPIC, PARTITION, a)
    rig.publish()                            # epoch 2, leader A again
    rig.heal()
    return rig


def m7_follower_two_epochs_behind(root) -> Rig:
    """KAFKA-7395 (P2 + N1): C misses epochs 1 (B leads, A truncates C's uncommitted a1) and 2 (A
    leads again) and keeps fetching from A with epoch 0.  A must fence that fetch; served, C
    keeps a1 where A has b1 and A counts C for its high watermark."""
    rig = Rig.with_partition(root, 3)
    a, b, c = 1, 2, 3
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.produce(a, [b"a1"])
    rig.fetch(c)                             # C has a1; it is not committed
    rig.controller.move_leader(TOPIC, PARTITION, b)    # epoch 1: C never hears of it
    rig.publish(hold=_held_leader_and_isr(c))
    rig.produce(b, [b"b1"])
    rig.fetch(a)                             # A truncates a1 ...
    rig.fetch(a)                             # ... and fetches b1
    rig.controller.move_leader(TOPIC, PARTITION, a)    # epoch 2: A leads again; C hears nothing
    rig.publish(hold=_held_leader_and_isr(c))
    rig.replicate()
    return rig


def m8_stale_follower_offset(root) -> Rig:
    """Kip320FirstTry: leader 1 misses epoch 1 (3 leads, 2 truncates m1 away) and is re-elected
    in epoch 2; counting 2's offset from epoch 0 lets the HW pass m1, which 2 no longer has.
    Leader 1 crashes and 2, an ISR member, is elected without the committed m1."""
    rig = Rig.with_partition(root, 3)
    rig.produce(1, [b"m0"])
    rig.replicate()
    rig.produce(1, [b"m1"])
    rig.fetch(2)
    rig.fetch(2)                              # leader 1 knows 2 at offset 2; 3 stays at 1
    rig.controller.move_leader(TOPIC, PARTITION, 3)     # epoch 1: broker 1 never hears of it
    rig.publish(hold=lambda b, message: b == 1)
    rig.fetch(2)                              # 2 asks 3 for epoch 0's end (1) and truncates m1
    rig.controller.move_leader(TOPIC, PARTITION, 1)     # epoch 2: 1 again, from epoch 0 straight to 2
    rig.publish()
    rig.fetch(3)                              # 3 truncates nothing ...
    rig.fetch(3)                              # ... fetches m1 ...
    rig.fetch(3)                              # ... and reports offset 2: the HW may move
    rig.note_committed()
    rig.crash(1)
    return rig


def m9_lagging_follower_joins(root) -> Rig:
    """A restarted follower's first fetch (offset 0, its answer lost) must not add it to the
    ISR while the leader's HW is 1; if it does, the leader's crash elects an empty replica."""
    rig = Rig.with_partition(root, 2)
    rig.crash(2)
    rig.produce(1, [b"m0"])                   # ISR [1]: committed at once
    rig.note_committed()
    rig.start(2)
    rig.now[0] += 10
    rig.fetch(2, deliver=False)               # fetch at 0; the answer is lost
    rig.alter()
    rig.crash(1)
    return rig


def m11_delayed_alter_partition(root) -> Rig:
    """AsyncIsr: the leader asks to add follower 2 (at offset 1, no longer 'caught up') and the
    AlterPartition is slow; the HW must wait for 2 meanwhile.  If it passes m1, the accepted
    request puts 2 in the ISR without m1 and the leader's crash elects it."""
    rig = Rig.with_partition(root, 2)
    rig.crash(2)
    rig.produce(1, [b"m0"])
    rig.start(2)
    rig.now[0] = 1_000
    rig.fetch(2)                              # 2 gets m0 (offset 1)
    rig.produce(1, [b"m1"])
    rig.now[0] += 2 * LAG                     # 2's last caught-up time is long gone
    rig.fetch(2, deliver=False)               # 2 reports offset 1 >= HW: A asks to add it;
    rig.alter(hold=True)                      # the AlterPartition is delayed ...
    rig.note_committed()
    for b, request in list(rig.held):         # ... and lands
        rig.answer_alter(b, request)
    rig.held.clear()
    rig.crash(1)
    return rig


def m15_retry_drops_broker_epochs(root) -> Rig:
    """KAFKA-15353: the AlterPartition adding 2 is lost, 2 restarts with an empty disk and a new
    broker epoch, the leader retries.  The retry must carry 2's old epoch (and be refused);
    with -1 ('skip the check') the controller puts the empty replica in the ISR."""
    rig = Rig.with_partition(root, 3)
    rig.crash(2)
    for i in range(5):
        rig.produce(1, [b"c%d" % i])
    rig.replicate()
    rig.start(2)
    rig.fetch(2)
    rig.fetch(2)                              # 2 caught up: leader 1 asks to add it ...
    rig.alter(hold=True)
    rig.held.clear()                          # ... and the request is lost
    rig.crash(2, fence=False)
    rig.start(2, wipe=True)                   # a new incarnation with an empty disk
    rig.nodes[1].retry_alter_partition(TOPIC, PARTITION)
    rig.alter()
    rig.notes.append(f"ISR after the retry: {rig.state().isr}")
    return rig


def m19_hw_below_min_isr(root) -> Rig:
    """KAFKA-15583 with KIP-966 (min.insync.replicas 2): follower 2 lags and leaves the ISR for
    the ELR; the leader writes m1 alone.  The HW must not pass m1 while ISR < MinISR -- if it
    does, the leader's crash elects 2 from the ELR without m1, and m1 is lost for good."""
    rig = Rig.with_partition(root, 2, min_insync_replicas=2)
    rig.controller.min_insync_replicas = 2    # the controller keeps an ELR
    rig.produce(1, [b"m0"])
    rig.replicate()
    rig.now[0] += 2 * LAG                     # 2 stops fetching
    rig.nodes[1].tick()                       # ISR [1], ELR [2]
    rig.alter()
    rig.produce(1, [b"m1"])                   # acks=1 is still accepted
    rig.note_committed()
    rig.crash(1)                              # 2 is elected from the ELR ...
    rig.start(1)
    rig.replicate()                           # ... and 1, back, truncates m1: gone everywhere
    return rig


def m24_torn_tail_recovery(root) -> Rig:
    """S3: follower B crashes and the last 512-byte sector of its last (unflushed) batch is torn
    to zeros, header intact; recovery must see the bad CRC and cut it, then B refetches."""
    rig = Rig.with_partition(root, 2)
    a, b = 1, 2
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.produce(a, [b"m1-" + b"x" * 1500])
    rig.replicate()
    start = rig.log(b).active_segment.find(1)
    rig.crash(b)
    path = _active_segment_file(rig, b)
    size = os.path.getsize(path)
    torn = max((size - 1) // 512 * 512, start + 61)  # the last sector, never the batch header
    with open(path, "r+b") as f:
        f.seek(torn)
        f.write(b"\0" * (size - torn))
    rig.start(b)
    rig.heal()
    return rig


def m25_empty_epoch_at_leo(root) -> Rig:
    """KAFKA-10706 (truncation on fetch): leadership A -> B -> A with no write in B's epoch 1; B
    keeps (1, LEO) and must drop it when told to truncate to its own end, or it diverges forever."""
    rig = Rig.with_partition(root, 2, truncate_on_fetch=True)
    a, b = 1, 2
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.controller.move_leader(TOPIC, PARTITION, b)    # epoch 1: (1, 1) on B, nothing written
    rig.publish()
    rig.replicate()
    rig.controller.move_leader(TOPIC, PARTITION, a)    # epoch 2: A never knew epoch 1
    rig.publish()
    rig.produce(a, [b"m1"])
    rig.heal()
    return rig


def m26_full_truncation_hw(root) -> Rig:
    """Beyond budget (S12 + unclean elections): B's log starts at 1 (DeleteRecords) with HW 1 when
    an empty unclean leader makes it truncate to 0 (a full truncation); B then leads uncleanly
    with a high watermark above its log end, and nobody can rejoin."""
    rig = Rig.with_partition(root, 2, unclean=True)
    a, b = 1, 2
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.log(a).roll()                        # BUGGIFY forced rolls: segments 0 and 1
    rig.log(b).roll()
    rig.produce(a, [b"m1"])
    rig.replicate()
    rig.nodes[a].handle_delete_records(m.DeleteRecordsRequest(TOPIC, PARTITION, 1))
    rig.replicate()                          # B's log start 1, its segment 0 deleted
    rig.crash(a)                             # B leads
    rig.start(a, wipe=True)                  # A's disk is replaced (S12)
    rig.crash(b)                             # B was the last ISR member: A wins uncleanly, empty
    rig.alter()                              # A RECOVERED
    rig.start(b)
    rig.fetch(b)                             # B truncates to 0, below its first segment
    rig.crash(a)                             # before B fetches again, A dies: B wins uncleanly
    rig.alter()
    rig.start(a)
    rig.heal()
    return rig


def m28_stale_fetch_response(root) -> Rig:
    """N3: B's fetch answer from leader A (epoch 0, holding uncommitted a1) is delayed past the
    move of leadership to C; applied late, a1 sits where C wrote c1."""
    rig = Rig.with_partition(root, 3)
    a, b, c = 1, 2, 3
    rig.produce(a, [b"m0"])
    rig.replicate()
    rig.produce(a, [b"a1"])
    fetcher = rig.nodes[b].fetcher
    delayed = [(leader, request, m.sent(rig.nodes[leader].handle(request))) for leader, request in fetcher.poll()]
    rig.controller.move_leader(TOPIC, PARTITION, c)    # epoch 1
    rig.publish()
    rig.produce(c, [b"c1"])
    rig.fetch(b)                             # B truncates by epoch (nothing to cut) -> Fetching at 1
    for leader, request, response in delayed:
        fetcher.handle_response(leader, request, response)
    rig.heal()
    return rig


def m30_reordered_leader_and_isr(root) -> Rig:
    """N3 on LeaderAndIsr: broker 2's copy of epoch 1 (2 leads) is delayed past epoch 2 (1 leads,
    2 follows and fetches m1 of epoch 2).  Applying it late makes 2 a zombie leader of epoch 1
    that appends after data of epoch 2."""
    rig = Rig.with_partition(root, 2)
    rig.produce(1, [b"m0"])
    rig.replicate()
    rig.controller.move_leader(TOPIC, PARTITION, 2)     # epoch 1: 2 leads; 2's copy is delayed
    rig.publish(hold=lambda b, message: b == 2)
    stale = [message for b, message in rig.held if isinstance(message, m.LeaderAndIsrRequest)]
    rig.held.clear()
    rig.controller.move_leader(TOPIC, PARTITION, 1)     # epoch 2: 1 leads again
    rig.publish()
    rig.produce(1, [b"m1"])
    rig.replicate()
    for message in stale:                     # the delayed epoch-1 LeaderAndIsr arrives
        rig.deliver(2, message)
    answer = rig.produce(2, [b"zombie"])
    rig.notes.append(f"produce on 2: {Errors(answer.error_code).name}")
    return rig


# name -> (the guard it switches off, the story, beyond the fault budget?)
RECIPES = {
    "m5-undefined-epoch": ("M5", m5_undefined_epoch, False),
    "m6-epoch-bump-same-leader": ("M6", m6_epoch_bump_same_leader, False),
    "m7-follower-two-epochs-behind": ("M7", m7_follower_two_epochs_behind, False),
    "m8-stale-follower-offset": ("M8", m8_stale_follower_offset, False),
    "m9-lagging-follower-joins": ("M9", m9_lagging_follower_joins, False),
    "m11-delayed-alter-partition": ("M11", m11_delayed_alter_partition, False),
    "m15-retry-drops-broker-epochs": ("M15", m15_retry_drops_broker_epochs, False),
    "m19-hw-below-min-isr": ("M19", m19_hw_below_min_isr, False),
    "m24-torn-tail-recovery": ("M24", m24_torn_tail_recovery, False),
    "m25-empty-epoch-at-leo": ("M25", m25_empty_epoch_at_leo, False),
    "m26-full-truncation-hw": ("M26", m26_full_truncation_hw, True),
    "m28-stale-fetch-response": ("M28", m28_stale_fetch_response, False),
    "m30-reordered-leader-and-isr": ("M30", m30_reordered_leader_and_isr, False),
}


def for_guard(guard: str) -> list[str]:
    return [name for name, (g, _story, _beyond) in RECIPES.items() if g == guard]


def run(name: str, root) -> dict:
    """Replay a recipe; the same report as a KIP story's (oracle.report)."""
    _guard, story, beyond = RECIPES[name]
    return oracle.report(name, story(root), beyond=beyond)
