"""Replica comparison across log dirs without Spark (the fleet audit's question, locally)."""
from __future__ import annotations

import os

from . import verdict
from .compacted import is_compacted, record_conflict
from .discovery import log_dir_offsets, partition_dirs
from .lineage import _lineage_text
from .scan import PartitionScan, scan_partition


def _hosted_hw(log_dir: str, topic: str, partition: int) -> int | None:
    return log_dir_offsets(log_dir)[0].get((topic, partition), {}).get("high_watermark")


def local_comparison(log_dirs: list[str]) -> tuple[str, list[dict]]:
    """The fleet audit's question without Spark: per topic-partition and replica, the log end
    offset, high watermark, epoch lineage and checkpoint agreement, and the first offset at which
    the replicas' batches differ (base offset, last offset and CRC compared where two replicas'
    ranges overlap).  The verdict and the conflict rule are the fleet audit's
    (storage.inspect.verdict, first_conflict).  Returns (table text, one dict per partition)."""
    replicas: dict[tuple[str, int], list[PartitionScan]] = {}
    for d in log_dirs:
        offsets, _source, _warnings = log_dir_offsets(d)
        for log_dir, topic, partition, path in partition_dirs(d):
            replicas.setdefault((topic, partition), []).append(
                scan_partition(log_dir, topic, partition, path, offsets=offsets, keep_rows=True))
    results = []
    rows = []
    for (topic, partition), scans in sorted(replicas.items()):
        facts = [_replica_facts(s) for s in scans]
        if any(is_compacted(s.log_dir, topic, partition) for s in scans):
            conflict = record_conflict([(s.log_dir, s.path) for s in scans])
        else:
            conflict = first_conflict(scans)
        assessed = verdict.assess_partition(topic, partition, facts, conflict)
        first, verdict_name = assessed["first_divergent_offset"], assessed["verdict"]
        results.append({"topic": topic, "partition": partition, "verdict": verdict_name,
                        "high_watermark": assessed["high_watermark"], "first_divergent_offset": first,
                        "committed_divergence": assessed["committed_divergence"],
                        "replicas": [s.to_json() for s in scans]})
        for i, s in enumerate(scans):
            agreement = {True: "agrees", False: "DISAGREES", None: "-"}[s.agrees]
            rows.append((f"{topic}-{partition}" if i == 0 else "", os.path.basename(s.log_dir),
                         str(s.log_end_offset), "?" if s.high_watermark is None else str(s.high_watermark),
                         str(s.batch_count), _lineage_text(s.lineage_pairs), agreement,
                         str(len(s.problems)), (verdict_name if i == 0 else ""),
                         ("-" if first is None else str(first)) if i == 0 else ""))
    header = ("TOPIC-PARTITION", "LOG DIR", "LEO", "HW", "BATCHES", "EPOCHS (epoch@start)", "CHECKPOINT",
              "PROBLEMS", "VERDICT", "FIRST DIVERGENT")
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    text = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows)
    return text, results


def _replica_facts(scan: PartitionScan) -> dict:
    """What the audit's verdict (storage.inspect.verdict) reads of one replica."""
    return {"log_dir": scan.log_dir, "log_end_offset": scan.log_end_offset, "high_watermark": scan.high_watermark,
            "crc_failure_count": sum(seg.crc_failures for seg in scan.segments),
            "structural_failures": [p for p in scan.problems if p.kind in verdict.STRUCTURAL]}


def first_conflict(scans: list[PartitionScan]) -> dict | None:
    """The audit's conflict rule (the Spark job runs the same one in SQL): a base offset
    conflicts when the replicas hold different batches there (last offset and the CRC of the
    bytes it covers; the audit compares an xxh3 of the same bytes), or when a replica whose
    readable range covers it holds none.  None, or {"offset", "batches", "batch_count"}."""
    held: dict[int, list] = {}
    ranges = []
    for scan in scans:
        rows = list(scan.batches())
        if rows:
            ranges.append((min(r.base_offset for r in rows), max(r.last_offset for r in rows) + 1))
        for r in rows:
            held.setdefault(r.base_offset, []).append((scan.log_dir, r.last_offset, r.crc, r.epoch, r.valid))
    conflicts = []
    for offset, batches in held.items():
        variants = len({(last, crc) for _d, last, crc, _e, _v in batches})
        holders = len({d for d, *_ in batches})
        covering = sum(1 for start, end in ranges if start <= offset < end)
        if variants > 1 or holders < covering:
            conflicts.append(offset)
    if not conflicts:
        return None
    offset = min(conflicts)
    return {"offset": offset, "batch_count": len(conflicts),
            "batches": [{"log_dir": d, "last_offset": last, "crc": crc, "partition_leader_epoch": e, "crc_valid": v}
                        for d, last, crc, e, v in held[offset]]}
