"""Protocol guards, by their id in docs/reliability.md 3 (M0-M32).

Every guard site in the engine reads `on("Mn")`.  In production every guard is on and cannot
be switched off: `disable` refuses unless the simulator (storage.sim) has entered simulation
mode, where a mutation run turns one guard off to prove the simulator finds the violation
it prevents (docs/reliability.md 3).
"""
from __future__ import annotations

import contextlib

CATALOGUE = {
    "M0": "the canary: switched off, every seed divisible by 100 must be reported",
    "M1": "truncate by OffsetForLeaderEpoch, not to the high watermark",
    "M2": "M1's guard, under correlated page-cache loss on two replicas (KIP-101 scenario 2)",
    "M3": "OffsetForLeaderEpoch answers (epoch, offset) and the follower iterates (KIP-279)",
    "M4": "a new leader persists (epoch, log end offset) before anything else",
    "M5": "OffsetForLeaderEpoch for an undefined epoch answers UNDEFINED, not the log end offset (KAFKA-6857)",
    "M6": "a leader-epoch bump restarts truncation even when the leader is unchanged",
    "M7": "current-leader-epoch fencing on Fetch and OffsetForLeaderEpoch (KIP-320)",
    "M8": "a leader-epoch bump resets ISR members' fetch state: no offset from an older epoch counts for the HW",
    "M9": "ISR expansion needs log end offset >= high watermark and >= leader epoch start offset",
    "M10": "diverging-epoch truncation happens before the high watermark of a response is applied",
    "M11": "the high watermark waits for the maximal ISR (pending additions included)",
    "M12": "fenced and shutting-down replicas never join the ISR or lead (KIP-841)",
    "M13": "AlterPartition checks every member's broker epoch (KIP-903)",
    "M15": "a retried AlterPartition keeps the broker epochs",
    "M16": "StopReplica with an older leader epoch is fenced (KIP-570)",
    "M17": "an unclean leader is RECOVERING with ISR = [leader] until it reports RECOVERED (KIP-704)",
    "M18": "a broker back from an unclean shutdown is not kept as the last ISR member (KIP-966)",
    "M19": "the high watermark does not advance while the ISR is below min.insync.replicas",
    "M20": "recovery truncates the epoch cache to the recovered log end offset",
    "M21": "epoch 0 is an epoch like any other when the cache is rebuilt",
    "M22": "checkpoints are written tmp -> fsync -> rename -> fsync(dir), never in place",
    "M23": "the clean-shutdown marker is deleted before loading, not after",
    "M24": "recovery validates sizes and CRCs and truncates at the first bad batch",
    "M25": "truncation at or above the log end offset still truncates the epoch cache",
    "M26": "full truncation resets the high watermark",
    "M27": "a new broker incarnation gets a new broker epoch",
    "M28": "a fetch response is applied only at the offset and epoch it was asked for",
    "M29": "on a leader-epoch bump the leader forgets what it knew of followers outside the ISR",
    "M30": "partition state with an older leader or partition epoch is ignored",
    "M31": "an offline log dir answers KAFKA_STORAGE_ERROR and acknowledges nothing (the broker halts)",
    "M32": "the leader checks a fetch's last fetched epoch and answers a divergence with DivergingEpoch (KIP-320)",
}

# A mutation that removes another's guard under a different fault recipe.
ALIASES = {"M2": "M1"}

_disabled: set[str] = set()
_simulation = False


def on(guard_id: str) -> bool:
    return guard_id not in _disabled


def enter_simulation() -> None:
    global _simulation
    _simulation = True


def disable(guard_id: str) -> None:
    if not _simulation:
        raise RuntimeError("guards can only be switched off inside the simulator (storage.sim)")
    if guard_id not in CATALOGUE:
        raise KeyError(f"unknown guard {guard_id}")
    _disabled.add(ALIASES.get(guard_id, guard_id))


def enable_all() -> None:
    _disabled.clear()


@contextlib.contextmanager
def disabled(*guard_ids: str):
    for guard_id in guard_ids:
        disable(guard_id)
    try:
        yield
    finally:
        for guard_id in guard_ids:
            _disabled.discard(ALIASES.get(guard_id, guard_id))
