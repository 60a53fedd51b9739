"""The audit's rules for one topic-partition, over facts the Spark job gathered (plain Python).

Terms (every offset is a Kafka offset, every range half-open):
  replica            one partition dir of the topic-partition in one of the audited log dirs;
  readable range     [first readable batch's base offset, last readable batch's last offset + 1)
                     of a replica: batches behind a corrupt size/magic field are not readable;
  high watermark H   the largest high watermark any replica recorded (our `storage.mdb`, or
                     Kafka's `replication-offset-checkpoint`).  The leader's is the largest and
                     followers' trail it, so offsets below H are the committed ones.  Taking the
                     smallest instead would let a stale replica -- the one an unclean election
                     picks -- hide a contradiction of committed data behind its own old HW.

First divergent offset (`first_divergent_offset`), the smallest of:
  conflict  an offset o at which some replica's batch starts, such that the replicas whose
            readable range covers o do not all hold a batch starting at o with the same
            (last offset, fingerprint).  The fingerprint (xxh3-64 of the CRC-covered bytes)
            makes a batch with equal offsets and epochs but other records differ: the
            divergence KIP-101's Appendix (a) leaves behind.  Only offsets that two replicas
            both cover are compared, so a replica that is merely shorter (a prefix), or that
            starts later (retention), never conflicts; a hole in one replica's range, or a CRC
            failure (its fingerprint differs from the healthy copies'), does.
  missing   the log end offset of a replica whose readable range ends below H: it lacks
            committed data from there on (lost, truncated, or -- in a live cluster -- a
            follower still catching up: audit a quiesced fleet).  Without a known H nothing
            counts as missing.
The partition leader epoch is not part of the comparison (replicas copy batches byte for byte,
so a difference shows up in the lineage columns); neither is the base offset, which the
fingerprint leaves out by design and the comparison keys on.

Verdict, first match wins:
  corrupt              a replica has a CRC failure or a structural failure (corrupt size or
                       magic, offsets that do not increase, bytes after the last whole batch of a
                       sealed segment).  A torn tail of the newest segment is reported but is not
                       corruption: it is what a crash leaves and what Kafka's recovery cuts;
  consistent           no first divergent offset;
  divergent_below_hw   first divergent offset < H (or no replica recorded a high watermark:
                       unknown counts as committed, so a missing file never hides divergence);
  divergent_above_hw   otherwise: only uncommitted tails differ, which replication repairs.
`committed_divergence` is true when the first divergent offset is below H, whatever the
verdict (a CRC failure in committed data of one replica is both corrupt and committed).

Epoch lineage of a replica, two ways:
  from batches     (epoch, base offset) of every batch whose partition leader epoch is larger
                   than every epoch before it (what Kafka's segment recovery assigns); a smaller
                   epoch later in the log is a lineage anomaly;
  from checkpoint  the entries of its `leader-epoch-checkpoint`.
Whether they agree is decided by storage.inspect.lineage.lineage_agreement, the one rule that
`storage verify` and `storage epochs` use too: Kafka's truncateFromStart at the log start
offset on both sides, a last checkpoint entry at the log end offset dropped (a leader elected
that has not written yet), and a first entry that starts below the first surviving batch.
"""
from __future__ import annotations

from typing import Iterable

from .lineage import lineage_agreement, truncate_from_start  # noqa: F401 - the one rule, re-exported

CONSISTENT = "consistent"
DIVERGENT_BELOW_HW = "divergent_below_hw"
DIVERGENT_ABOVE_HW = "divergent_above_hw"
CORRUPT = "corrupt"
VERDICTS = (CONSISTENT, DIVERGENT_BELOW_HW, DIVERGENT_ABOVE_HW, CORRUPT)
# Problem kinds that make a replica corrupt (a CRC failure counts on its own).
STRUCTURAL = ("corrupt", "unreadable", "disorder", "below_segment_base", "partial_tail")


def lineage_from_epochs(batches: Iterable[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """(lineage, anomalies) from (partition leader epoch, base offset) in log order.

    anomalies: (offset, epoch, larger epoch seen before)."""
    lineage, anomalies = [], []
    for epoch, base_offset in batches:
        if epoch is None or epoch < 0:
            continue
        if not lineage or epoch > lineage[-1][0]:
            lineage.append((epoch, base_offset))
        elif epoch < lineage[-1][0]:
            anomalies.append((base_offset, epoch, lineage[-1][0]))
    return lineage, anomalies


def assess_partition(topic: str, partition: int, replicas: list[dict], conflict: dict | None) -> dict:
    """The audit record of one topic-partition.

    replicas: one dict per replica with at least log_end_offset, high_watermark (None when
    unknown), crc_failure_count, structural_failures (list), torn_tail_bytes.
    conflict: None, or {"offset": o, "batches": [...], "batch_count": n} for the smallest
    conflicting offset (see the module doc)."""
    watermarks = [r["high_watermark"] for r in replicas if r.get("high_watermark") is not None]
    high_watermark = max(watermarks) if watermarks else None
    candidates = []
    if conflict is not None:
        candidates.append(conflict["offset"])
    for r in replicas:
        missing = r["log_end_offset"] if high_watermark is not None and r["log_end_offset"] < high_watermark else None
        r["missing_committed_from"] = missing
        if missing is not None:
            candidates.append(missing)
    first = min(candidates) if candidates else None
    committed = first is not None and (high_watermark is None or first < high_watermark)
    corrupt = any(r["crc_failure_count"] or r["structural_failures"] for r in replicas)
    if corrupt:
        verdict = CORRUPT
    elif first is None:
        verdict = CONSISTENT
    else:
        verdict = DIVERGENT_BELOW_HW if committed else DIVERGENT_ABOVE_HW
    divergence = None
    if first is not None:
        divergence = {
            "offset": first,
            "conflict": conflict if conflict is not None and conflict["offset"] == first else None,
            "replicas_missing_committed_data": [r["log_dir"] for r in replicas
                                                if r["missing_committed_from"] == first],
        }
    return {
        "topic": topic,
        "partition": partition,
        "verdict": verdict,
        "first_divergent_offset": first,
        "committed_divergence": committed,
        "high_watermark": high_watermark,
        "replica_count": len(replicas),
        "divergence": divergence,
        "replicas": replicas,
    }


def exit_code(results: list[dict]) -> int:
    """1 when committed data diverged anywhere, else 3 when anything is corrupt, else 0."""
    if any(r["committed_divergence"] for r in results):
        return 1
    if any(r["verdict"] == CORRUPT for r in results):
        return 3
    return 0
