"""Epoch lineage: what the batches say against what the leader-epoch-checkpoint says."""
from __future__ import annotations


def _entries(pairs) -> list[dict]:
    return [{"epoch": e, "start_offset": o} for e, o in pairs]


def _lineage_text(pairs) -> str:
    return " ".join(f"{e}@{o}" for e, o in pairs) if pairs else "-"


def truncate_from_start(lineage: list[tuple[int, int]], start_offset: int) -> list[tuple[int, int]]:
    """Kafka's truncateFromStart: entries at or below start_offset go, the last of them comes
    back starting at start_offset."""
    kept = [e for e in lineage if e[1] > start_offset]
    removed = [e for e in lineage if e[1] <= start_offset]
    return ([(removed[-1][0], start_offset)] if removed else []) + kept


def lineage_agreement(from_batches, from_checkpoint, *, log_start_offset: int | None,
                      log_end_offset: int, compacted: bool = False, offset_gaps: int = 0
                      ) -> tuple[bool | None, str | None]:
    """(agrees, why not) for a batch lineage and a leader-epoch-checkpoint, after the repairs
    Kafka's loader makes itself: both cut at the log start offset (truncateFromStart), and a
    last checkpoint entry starting exactly at the log end offset ignored (a leader elected that
    has not written yet).  The first entry may start below the first batch (the epoch began
    before what is left of the log).  None when there is no checkpoint.

    A compacted log gets the compacted rule (_compacted_agreement).  It is compacted when its
    log dir's cleaner-offset-checkpoint lists it (`compacted`) or when its batches leave offsets
    out (`offset_gaps`: batches starting past the previous batch's last offset + 1, or a
    segment's first batch past the segment's base) -- the trace a cleaner leaves, whoever ran
    it: a PartitionLog.compact() without a LogDir, or another broker's cleaner, writes no
    checkpoint this tool can read.  An appended log has no gaps (offsets are dense); a follower
    of a compacted leader copies its gaps, and is compacted too."""
    if from_checkpoint is None:
        return None, "no leader-epoch-checkpoint"
    batches = [tuple(e) for e in from_batches]
    entries = [tuple(e) for e in from_checkpoint]
    if log_start_offset is not None:
        if batches and log_start_offset > batches[0][1]:
            batches = truncate_from_start(batches, log_start_offset)
        if entries and log_start_offset > entries[0][1]:
            entries = truncate_from_start(entries, log_start_offset)
    if entries and entries[-1][1] == log_end_offset and (not batches or entries[-1][0] > batches[-1][0]):
        entries = entries[:-1]
    if batches and entries and batches[0][0] == entries[0][0] and entries[0][1] <= batches[0][1]:
        batches[0] = entries[0]
    if batches == entries:
        return True, None
    if compacted or offset_gaps > 0:
        return _compacted_agreement(batches, entries)
    for i, (b, c) in enumerate(zip(batches, entries)):
        if b != c:
            return False, (f"entry {i}: the batches say epoch {b[0]} from offset {b[1]}, "
                           f"the checkpoint says epoch {c[0]} from offset {c[1]}")
    if len(batches) > len(entries):
        e = batches[len(entries)]
        return False, f"the checkpoint lacks epoch {e[0]} (from offset {e[1]} in the batches)"
    e = entries[len(batches)]
    where = "beyond the log end offset" if e[1] > log_end_offset else "no batch carries it"
    return False, f"the checkpoint has epoch {e[0]} from offset {e[1]}: {where}"



def _compacted_agreement(batches, entries) -> tuple[bool, str | None]:
    """A compacted log: the cleaner removes batches, never epoch-cache entries (Kafka's does
    not rewrite the cache), so an epoch may start before its first remaining batch, or have
    none left.  What must hold: each epoch change in the batches falls in that epoch's range
    of the checkpoint."""
    for epoch, offset in batches:
        at = [e for e, start in entries if start <= offset]
        if not at or at[-1] != epoch:
            said = f"epoch {at[-1]}" if at else "no epoch"
            return False, (f"the batches say epoch {epoch} from offset {offset}, the checkpoint says {said} there "
                           f"(compacted log)")
    return True, None
