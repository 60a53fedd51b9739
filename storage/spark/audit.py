"""`python -m storage audit DIR [DIR ...] [--master URL] [--out PATH]`: the fleet audit.

Each DIR is one broker's log dir (ours or a real Kafka broker's).  For every topic-partition
found in any of them, the partition dirs of that name are its replicas.  The audit reports
each replica's epoch lineage (from its batches and from its `leader-epoch-checkpoint`, and
whether they agree), CRC and structural failures, offset gaps and high watermark, the first
offset at which the replicas diverge and a verdict; the rules are in storage/inspect/verdict.py.

How it runs (the invariants that keep it correct on a cluster):
  - the driver lists the dirs and reads the small files only: `storage.mdb` (read-only LMDB:
    high watermark and log start offset per partition) or Kafka's `replication-offset-checkpoint`
    and `log-start-offset-checkpoint`, `meta.properties`, and each `leader-epoch-checkpoint`;
  - the segments are read by Spark tasks through the `partitionlog` data source, one task per
    segment, batch rows without payload; the rows are cached and every per-batch comparison
    (sequence checks, lineage, the conflict search) is Spark SQL, so only per-replica summaries,
    the exceptions (failures, gaps, epoch changes) and one row per conflicting partition reach
    the driver;
  - nothing is written under the audited dirs; the output goes to --out: `audit.json` (a list,
    one object per topic-partition), `partitions.parquet`, `replicas.parquet`, `run.json`.
The log dirs must be readable at the same paths by every executor (a shared file system or
copied snapshots), and `kafka-partition-storage[spark]` installed where the executors run.

Exit status: 0 nothing below a high watermark diverged and nothing is corrupt; 1 committed
data diverged in some partition (first divergent offset below the high watermark, including a
replica that lacks committed data and a CRC failure inside committed data that the other
replicas hold intact); 3 no committed divergence, but some replica is corrupt (CRC or
structural failure); 2 usage error, or Java 17+ / PySpark missing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from ..core import checkpoint
from ..core.files import segment_base
from ..inspect import compacted, discovery
from ..inspect import verdict as analysis

EXAMPLES_MAX = 20       # failures / gaps / anomalies listed per replica (all are counted)
_STRUCTURAL = analysis.STRUCTURAL


# ---- the driver's small files -----------------------------------------------------------------

def log_dir_metadata(log_dir: str) -> dict:
    """High watermarks and log start offsets of one log dir (driver only), read as the command
    line reads them (storage.inspect.discovery.log_dir_offsets)."""
    offsets, source, warnings = discovery.log_dir_offsets(log_dir)
    if source == "kafka checkpoints":
        source = checkpoint.HIGH_WATERMARK_FILE if any("high_watermark" in o for o in offsets.values()) else None
    return {"broker_id": discovery.broker_id(log_dir),
            "high_watermarks": {k: o["high_watermark"] for k, o in offsets.items() if "high_watermark" in o},
            "log_start_offsets": {k: o["log_start_offset"] for k, o in offsets.items() if "log_start_offset" in o},
            "source": source, "error": "; ".join(w.line() for w in warnings) or None}


# ---- the Spark job ------------------------------------------------------------------------------

def _listed_exceptions(rows, ok, replica_key):
    """Exceptions along each replica's log, in file order (epoch starts and regressions, gaps,
    offsets that do not increase, batches below their segment's base, CRC failures, unreadable
    data), at most EXAMPLES_MAX of each kind per replica (every epoch start)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*replica_key).orderBy("segment_base_offset", "position")
    seq = ok.select(*replica_key, "segment_base_offset", "position", "base_offset", "crc_valid",
                    F.col("partition_leader_epoch").alias("epoch"),
                    F.lag("last_offset").over(w).alias("prev_last"),
                    F.max(F.when(F.col("partition_leader_epoch") >= 0, F.col("partition_leader_epoch")))
                    .over(w.rowsBetween(Window.unboundedPreceding, -1)).alias("prev_epoch"))

    def event(kind, condition, offset, a, b=None):
        b = F.lit(None) if b is None else b
        return F.when(condition, F.struct(F.lit(kind).alias("kind"), offset.cast("long").alias("offset"),
                                          a.cast("long").alias("a"), b.cast("long").alias("b")))

    epoch, base, prev_last, prev_epoch = (F.col("epoch"), F.col("base_offset"), F.col("prev_last"),
                                          F.col("prev_epoch"))
    events = seq.select(*replica_key, "segment_base_offset", "position", F.explode(F.filter(F.array(
        event("epoch", (epoch >= 0) & (prev_epoch.isNull() | (epoch > prev_epoch)), base, epoch),
        event("epoch_regression", (epoch >= 0) & (epoch < prev_epoch), base, epoch, prev_epoch),
        event("gap", base > F.coalesce(prev_last + 1, F.col("segment_base_offset")),
              F.coalesce(prev_last + 1, F.col("segment_base_offset")), base),
        event("disorder", base <= prev_last, base, prev_last),
        event("below_segment_base", base < F.col("segment_base_offset"), base, F.col("segment_base_offset")),
        event("crc", ~F.col("crc_valid"), base, F.lit(None)),
    ), lambda e: e.isNotNull())).alias("e")).select(*replica_key, "segment_base_offset", "position", "e.*")
    errors = rows.where(F.col("error").isNotNull()).select(
        *replica_key, "segment_base_offset", "position",
        F.split(F.col("error"), ":").getItem(0).alias("kind"), F.col("base_offset").alias("offset"),
        F.col("error").alias("message"))
    per_kind = Window.partitionBy(*replica_key, "kind")
    listed = (events.unionByName(errors, allowMissingColumns=True)
              .withColumn("n", F.row_number().over(per_kind.orderBy("segment_base_offset", "position")))
              .withColumn("kind_count", F.count(F.lit(1)).over(per_kind))
              .where((F.col("kind") == "epoch") | (F.col("n") <= EXAMPLES_MAX))
              .drop("n"))
    return listed


def _first_conflicts(spark, ok, summary) -> list:
    """The first conflicting base offset of each partition, with what each replica holds there."""
    from pyspark.sql import functions as F

    # The conflict search (the rule of storage.inspect.compare.first_conflict, in SQL): a base
    # offset is suspicious unless every replica
    # with data holds a batch there with one (last offset, fingerprint); a suspicious offset
    # conflicts when a replica whose readable range covers it lacks it, or two variants exist.
    # The replicas' ranges come from the driver as a local relation: broadcast, no extra job.
    ranges = spark.createDataFrame(
        [(r.topic, r.partition, r.first_offset, r.last_offset + 1) for r in summary],
        "topic string, partition int, range_start long, range_end long")
    with_data = {}
    for r in summary:
        with_data[(r.topic, r.partition)] = with_data.get((r.topic, r.partition), 0) + 1
    replica_counts = spark.createDataFrame([(t, p, n) for (t, p), n in with_data.items()],
                                           "topic string, partition int, with_data int")
    held = F.collect_list(F.struct("log_dir", "last_offset", "fingerprint", "partition_leader_epoch",
                                   "crc_valid"))
    groups = (ok.groupBy("topic", "partition", "base_offset").agg(held.alias("held"))
              .withColumn("holders", F.size(F.array_distinct(F.col("held.log_dir"))))
              .withColumn("variants", F.size(F.array_distinct(F.transform(
                  "held", lambda b: F.struct(b["last_offset"], b["fingerprint"])))))
              .join(F.broadcast(replica_counts), ["topic", "partition"])
              .where((F.col("variants") > 1) | (F.col("holders") < F.col("with_data"))))
    g, r = groups.alias("g"), F.broadcast(ranges.alias("r"))
    covered = (g.join(r, (F.col("g.topic") == F.col("r.topic")) & (F.col("g.partition") == F.col("r.partition"))
                      & (F.col("r.range_start") <= F.col("g.base_offset"))
                      & (F.col("g.base_offset") < F.col("r.range_end")))
               .groupBy("g.topic", "g.partition", "g.base_offset")
               .agg(F.first("g.holders").alias("holders"), F.first("g.variants").alias("variants"),
                    F.first("g.held").alias("held"), F.count(F.lit(1)).alias("covering"))
               .where((F.col("variants") > 1) | (F.col("holders") < F.col("covering"))))
    first = covered.groupBy("topic", "partition").agg(
        F.min_by(F.struct("base_offset", "held"), F.col("base_offset")).alias("first"),
        F.count(F.lit(1)).alias("kind_count"))
    return first.select("topic", "partition", F.col("first.base_offset").alias("offset"),
                        "kind_count", F.col("first.held").alias("held")).collect()


def _spark_facts(spark, log_dirs: list[str], segment_count: int, progress) -> dict:
    """Three Spark jobs: the scan (cached batch rows); the per-replica summaries and listed
    exceptions; the first conflict of each partition."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    rows = (spark.read.format("partitionlog").option("level", "batches").load(log_dirs)
            .select("log_dir", "topic", "partition", "segment_base_offset", "position", "base_offset",
                    "last_offset", "partition_leader_epoch", "crc_valid", "record_count", "size_bytes",
                    "fingerprint", "error"))
    # The scan runs one task per segment (balanced, fine-grained); its rows are then hashed by
    # topic-partition into a few partitions per core and cached, which is the clustering every
    # later window and aggregation asks for, so those stages read the cache without a shuffle.
    tasks = max(1, min(segment_count, 2 * spark.sparkContext.defaultParallelism))
    rows = rows.repartition(tasks, "topic", "partition").persist(StorageLevel.MEMORY_AND_DISK)
    try:
        scan_started = time.monotonic()
        with progress:
            rows.count()                      # the scan: every segment read once, here
        scan_seconds = time.monotonic() - scan_started
        replica_key = ["topic", "partition", "log_dir"]
        ok = rows.where(F.col("error").isNull())
        summaries = ok.groupBy(*replica_key).agg(
            F.count(F.lit(1)).alias("batch_count"),
            F.sum("record_count").alias("record_count"),
            F.sum("size_bytes").alias("size_bytes"),
            F.min("base_offset").alias("first_offset"),
            F.max("last_offset").alias("last_offset"),
            F.sum(F.when(~F.col("crc_valid"), 1).otherwise(0)).alias("crc_failure_count"))

        listed = _listed_exceptions(rows, ok, replica_key)

        facts = {"summary": [], "event": [], "conflict": [], "scan_seconds": scan_seconds}
        everything = (summaries.withColumn("section", F.lit("summary"))
                      .unionByName(listed.withColumn("section", F.lit("event")), allowMissingColumns=True))
        for row in everything.collect():
            facts[row.section].append(row)

        if facts["summary"]:
            facts["conflict"] = _first_conflicts(spark, ok, facts["summary"])
        return facts
    finally:
        rows.unpersist()


class _Progress:
    """A tqdm bar over the scan's Spark tasks (one per segment), on stderr; a no-op when off."""

    def __init__(self, spark, total: int, enabled: bool):
        self.spark, self.total, self.enabled = spark, total, enabled
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if not self.enabled:
            return self
        try:
            from tqdm import tqdm
        except ImportError:
            return self
        sc = self.spark.sparkContext
        self._group = f"storage-audit-{os.getpid()}-{time.monotonic_ns()}"
        sc.setJobGroup(self._group, "storage audit: scan segments")
        bar = tqdm(total=self.total, unit="seg", desc="scan", file=sys.stderr, leave=False)

        def poll():
            tracker = sc.statusTracker()
            while not self._stop.wait(0.25):
                done = 0
                for job_id in tracker.getJobIdsForGroup(self._group):
                    job = tracker.getJobInfo(job_id)
                    for stage_id in (job.stageIds if job else ()):
                        stage = tracker.getStageInfo(stage_id)
                        if stage and stage.numTasks == self.total:
                            done = max(done, stage.numCompletedTasks)
                bar.update(done - bar.n)
            bar.close()

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)


# ---- assembling the report ----------------------------------------------------------------------

def _entry_list(pairs) -> list[dict]:
    return [{"epoch": e, "start_offset": o} for e, o in pairs]


def run_audit(spark, log_dirs: list[str], *, progress: bool = False) -> dict:
    """Audit the log dirs on `spark`.  Returns {"partitions": [...], "bytes": n, "segments": n,
    "log_dirs": [...], "seconds": s, "scan_seconds": s} with one audit record per topic-partition
    (seconds: the whole audit; scan_seconds: the Spark job that reads every segment)."""
    started = time.monotonic()
    log_dirs = list(dict.fromkeys(os.path.abspath(d) for d in log_dirs))
    refs = [ref for ref in discovery.discover(log_dirs) if ref.log_dir in log_dirs]
    metadata = {d: log_dir_metadata(d) for d in log_dirs}
    segment_count = sum(len(ref.segments) for ref in refs)
    total_bytes = sum(s.size_bytes for ref in refs for s in ref.segments)
    facts = _spark_facts(spark, log_dirs, segment_count, _Progress(spark, segment_count, progress)) \
        if segment_count else \
        {"summary": [], "event": [], "conflict": [], "scan_seconds": 0.0}

    summaries = {(r.topic, r.partition, r.log_dir): r for r in facts["summary"]}
    events: dict[tuple, dict[str, list]] = {}
    counts: dict[tuple, dict[str, int]] = {}
    for e in sorted(facts["event"], key=lambda e: (e.segment_base_offset, e.position)):
        key = (e.topic, e.partition, e.log_dir)
        events.setdefault(key, {}).setdefault(e.kind, []).append(e)
        counts.setdefault(key, {})[e.kind] = e.kind_count
    conflicts = {(c.topic, c.partition): c for c in facts["conflict"]}

    by_partition: dict[tuple, list] = {}
    for ref in refs:
        by_partition.setdefault((ref.topic, ref.partition), []).append(ref)
    order = {d: i for i, d in enumerate(log_dirs)}
    results = []
    for (topic, partition), replica_refs in sorted(by_partition.items()):
        replica_refs.sort(key=lambda ref: order[ref.log_dir])
        replicas = [_replica_record(ref, summaries.get((topic, partition, ref.log_dir)),
                                    events.get((topic, partition, ref.log_dir), {}),
                                    counts.get((topic, partition, ref.log_dir), {}), metadata[ref.log_dir])
                    for ref in replica_refs]
        conflict = None
        c = conflicts.get((topic, partition))
        if c is not None:
            held = {b.log_dir: b for b in c.held}
            conflict = {
                "offset": c.offset,
                "batch_count": c.kind_count,
                "batches": [{"log_dir": d, "last_offset": b.last_offset, "fingerprint": b.fingerprint,
                             "partition_leader_epoch": b.partition_leader_epoch, "crc_valid": b.crc_valid}
                            for d, b in sorted(held.items(), key=lambda kv: order[kv[0]])],
                "replicas_without_batch": [r["log_dir"] for r in replicas if r["log_dir"] not in held
                                           and r["log_start_offset"] <= c.offset < r["log_end_offset"]],
            }
        if any(compacted.is_compacted(ref.log_dir, topic, partition) for ref in replica_refs):
            conflict = _compacted_conflict(replica_refs, replicas)
        results.append(analysis.assess_partition(topic, partition, replicas, conflict))
    return {"partitions": results, "bytes": total_bytes, "segments": segment_count, "log_dirs": log_dirs,
            "seconds": time.monotonic() - started, "scan_seconds": facts["scan_seconds"]}


def _compacted_conflict(refs, replicas) -> dict | None:
    """A compacted partition's replicas compared by record and by each key's latest value
    (storage.inspect.compacted), on the driver: batches rewritten by cleaners that ran at
    different times are not a divergence."""
    found = compacted.record_conflict([(ref.log_dir, ref.path) for ref in refs])
    if found is None:
        return None
    holders = {b["log_dir"] for b in found["batches"]}
    return {**found,
            "batches": [{**b, "fingerprint": None} for b in found["batches"]],
            "replicas_without_batch": [r["log_dir"] for r in replicas if r["log_dir"] not in holders
                                       and r["log_start_offset"] <= found["offset"] < r["log_end_offset"]]}


def _replica_record(ref: discovery.PartitionRef, summary, events: dict, counts: dict, meta: dict) -> dict:
    key = (ref.topic, ref.partition)
    if summary is not None:
        start, end = summary.first_offset, summary.last_offset + 1
    else:
        start = end = ref.segments[-1].base_offset if ref.segments else max(meta["log_start_offsets"].get(key, 0), 0)
    sizes = {s.base_offset: s.size_bytes for s in ref.segments}
    last_segment = ref.segments[-1].base_offset if ref.segments else None
    structural, torn_tail = [], 0
    for kind in _STRUCTURAL:
        for e in events.get(kind, []):
            if kind == "partial_tail" and e.segment_base_offset == last_segment:
                torn_tail = sizes[e.segment_base_offset] - e.position
                continue
            message = e.message or {
                "disorder": f"batch at offset {e.offset} does not follow the previous batch's last offset {e.a}",
                "below_segment_base": f"batch at offset {e.offset} lies below its segment's base offset {e.a}",
            }[kind]
            structural.append({"kind": kind, "segment_base_offset": e.segment_base_offset, "position": e.position,
                               "offset": e.offset, "message": message})
    structural_count = sum(counts.get(k, 0) for k in _STRUCTURAL) - (1 if torn_tail else 0)
    lineage = [(e.a, e.offset) for e in events.get("epoch", [])]
    from_checkpoint, checkpoint_error = discovery.read_epoch_checkpoint(ref.path)
    log_start_checkpointed = meta["log_start_offsets"].get(key)
    agrees, why = analysis.lineage_agreement(
        lineage, from_checkpoint, log_start_offset=log_start_checkpointed, log_end_offset=end,
        compacted=compacted.is_compacted(ref.log_dir, *key), offset_gaps=counts.get("gap", 0))
    if checkpoint_error:
        agrees, why = False, f"unreadable leader-epoch-checkpoint: {checkpoint_error}"
    hw = meta["high_watermarks"].get(key)
    return {
        "log_dir": ref.log_dir,
        "broker_id": meta["broker_id"],
        "segment_count": len(ref.segments),
        "batch_count": summary.batch_count if summary else 0,
        "record_count": summary.record_count if summary else 0,
        "size_bytes": sum(sizes.values()),
        "log_start_offset": start,
        "log_end_offset": end,
        "high_watermark": hw,
        "high_watermark_source": meta["source"] if hw is not None else None,
        "metadata_error": meta["error"],
        "lineage_from_batches": _entry_list(lineage),
        "lineage_from_checkpoint": None if from_checkpoint is None else _entry_list(from_checkpoint),
        "lineage_agrees": agrees,
        "lineage_disagreement": why if agrees is False else None,
        "lineage_anomaly_count": counts.get("epoch_regression", 0),
        "lineage_anomalies": [{"offset": e.offset, "epoch": e.a, "previous_epoch": e.b}
                              for e in events.get("epoch_regression", [])],
        "crc_failure_count": summary.crc_failure_count if summary else 0,
        "crc_failures": [{"offset": e.offset, "segment_base_offset": e.segment_base_offset, "position": e.position}
                         for e in events.get("crc", [])],
        "structural_failure_count": structural_count,
        "structural_failures": structural,
        "torn_tail_bytes": torn_tail,
        "offset_gap_count": counts.get("gap", 0),
        "offset_gaps": [{"from": e.offset, "to": e.a} for e in events.get("gap", [])],
    }


# ---- output ---------------------------------------------------------------------------------------

def _replica_label(replica: dict, index: int) -> str:
    return f"b{replica['broker_id']}" if replica["broker_id"] is not None else f"r{index}"


def _notes(record: dict) -> str:
    notes = []
    replicas = record["replicas"]
    labels = [_replica_label(r, i) for i, r in enumerate(replicas)]
    if len(set(labels)) < len(labels):
        labels = [f"r{i}" for i in range(len(replicas))]
    for label, r in zip(labels, replicas):
        if r["crc_failure_count"] and r["crc_failures"]:
            notes.append(f"{label}: {r['crc_failure_count']} CRC failure(s) from offset "
                         f"{r['crc_failures'][0]['offset']}")
        if r["structural_failure_count"] and r["structural_failures"]:
            first = r["structural_failures"][0]
            notes.append(f"{label}: {first['kind']} in segment {first['segment_base_offset']} at position "
                         f"{first['position']}")
        if r["missing_committed_from"] is not None:
            notes.append(f"{label}: lacks committed data from {r['missing_committed_from']}")
        if r["lineage_agrees"] is False:
            notes.append(f"{label}: epoch checkpoint disagrees")
        if r["offset_gap_count"]:
            notes.append(f"{label}: {r['offset_gap_count']} gap(s)")
        if r["torn_tail_bytes"]:
            notes.append(f"{label}: torn tail {r['torn_tail_bytes']} B")
    conflict = (record["divergence"] or {}).get("conflict")
    if conflict:
        notes.append(f"conflict at {conflict['offset']}")
    return "; ".join(notes)


def _span(values: list[int]) -> str:
    """One number when the replicas agree, else their range."""
    return "-" if not values else str(values[0]) if min(values) == max(values) else f"{min(values)}..{max(values)}"


def quiet_internal(record: dict) -> bool:
    """An internal topic's partition with nothing in it on any replica (most of
    `__consumer_offsets`' 50): left out of the table unless asked for (--all)."""
    return (record["topic"].startswith("__") and record["verdict"] == "consistent"
            and all(r["batch_count"] == 0 for r in record["replicas"]))


def format_table(results: list[dict], *, show_all: bool = False) -> str:
    """The audit's table, one row per partition; BATCHES and LEO are per replica (one number when
    the replicas agree).  Empty internal partitions are counted in a closing line, not listed,
    unless `show_all`."""
    header = ("TOPIC-PARTITION", "REPLICAS", "HW", "LEO", "BATCHES", "VERDICT", "FIRST DIVERGENT", "NOTES")
    lines = []
    hidden = 0 if show_all else sum(1 for record in results if quiet_internal(record))
    for record in results:
        if hidden and quiet_internal(record):
            continue
        lines.append((f"{record['topic']}-{record['partition']}", str(record["replica_count"]),
                      "?" if record["high_watermark"] is None else str(record["high_watermark"]),
                      _span([r["log_end_offset"] for r in record["replicas"]]),
                      _span([r["batch_count"] for r in record["replicas"]]), record["verdict"],
                      "-" if record["first_divergent_offset"] is None else str(record["first_divergent_offset"]),
                      _notes(record)))
    widths = [max(len(row[i]) for row in [header] + lines) for i in range(len(header) - 1)]
    table = "\n".join(("  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths)) + "  " + row[-1]).rstrip()
                      for row in [header] + lines)
    if hidden:
        table += f"\n({hidden} empty partitions of internal topics not listed: --all lists them)"
    return table


def write_outputs(report: dict, out_dir: str, *, extra: dict | None = None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out_dir, exist_ok=True)
    results = report["partitions"]
    with open(os.path.join(out_dir, "audit.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    entry = pa.list_(pa.struct([("epoch", pa.int64()), ("start_offset", pa.int64())]))
    partitions = pa.Table.from_pylist([{
        "topic": r["topic"], "partition": r["partition"], "verdict": r["verdict"],
        "first_divergent_offset": r["first_divergent_offset"], "committed_divergence": r["committed_divergence"],
        "high_watermark": r["high_watermark"], "replica_count": r["replica_count"],
        "batch_count": sum(x["batch_count"] for x in r["replicas"]),
        "size_bytes": sum(x["size_bytes"] for x in r["replicas"]),
        "crc_failure_count": sum(x["crc_failure_count"] for x in r["replicas"]),
        "structural_failure_count": sum(x["structural_failure_count"] for x in r["replicas"]),
        "offset_gap_count": sum(x["offset_gap_count"] for x in r["replicas"]),
        "lineage_disagreements": sum(1 for x in r["replicas"] if x["lineage_agrees"] is False),
    } for r in results], schema=pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("verdict", pa.string()),
        ("first_divergent_offset", pa.int64()), ("committed_divergence", pa.bool_()),
        ("high_watermark", pa.int64()), ("replica_count", pa.int32()), ("batch_count", pa.int64()),
        ("size_bytes", pa.int64()), ("crc_failure_count", pa.int64()), ("structural_failure_count", pa.int64()),
        ("offset_gap_count", pa.int64()), ("lineage_disagreements", pa.int32())]))
    pq.write_table(partitions, os.path.join(out_dir, "partitions.parquet"))
    replica_rows = []
    for r in results:
        for x in r["replicas"]:
            replica_rows.append({
                "topic": r["topic"], "partition": r["partition"], "log_dir": x["log_dir"], "broker_id": x["broker_id"],
                "verdict": r["verdict"], "segment_count": x["segment_count"], "batch_count": x["batch_count"],
                "record_count": x["record_count"], "size_bytes": x["size_bytes"],
                "log_start_offset": x["log_start_offset"], "log_end_offset": x["log_end_offset"],
                "high_watermark": x["high_watermark"], "missing_committed_from": x["missing_committed_from"],
                "lineage_from_batches": x["lineage_from_batches"],
                "lineage_from_checkpoint": x["lineage_from_checkpoint"], "lineage_agrees": x["lineage_agrees"],
                "crc_failure_count": x["crc_failure_count"], "structural_failure_count": x["structural_failure_count"],
                "offset_gap_count": x["offset_gap_count"], "torn_tail_bytes": x["torn_tail_bytes"]})
    replicas = pa.Table.from_pylist(replica_rows, schema=pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("log_dir", pa.string()), ("broker_id", pa.int32()),
        ("verdict", pa.string()), ("segment_count", pa.int32()), ("batch_count", pa.int64()),
        ("record_count", pa.int64()), ("size_bytes", pa.int64()), ("log_start_offset", pa.int64()),
        ("log_end_offset", pa.int64()), ("high_watermark", pa.int64()), ("missing_committed_from", pa.int64()),
        ("lineage_from_batches", entry), ("lineage_from_checkpoint", entry), ("lineage_agrees", pa.bool_()),
        ("crc_failure_count", pa.int64()), ("structural_failure_count", pa.int64()),
        ("offset_gap_count", pa.int64()), ("torn_tail_bytes", pa.int64())]))
    pq.write_table(replicas, os.path.join(out_dir, "replicas.parquet"))
    run = {"log_dirs": report["log_dirs"], "segments": report["segments"], "bytes": report["bytes"],
           "seconds": round(report["seconds"], 3), "scan_seconds": round(report["scan_seconds"], 3),
           "mb_per_s": round(report["bytes"] / 1e6 / report["seconds"], 3) if report["seconds"] else None,
           "verdicts": {v: sum(1 for r in results if r["verdict"] == v) for v in analysis.VERDICTS},
           "exit_code": analysis.exit_code(results), **(extra or {})}
    with open(os.path.join(out_dir, "run.json"), "w", encoding="utf-8") as f:
        json.dump(run, f, indent=1)
        f.write("\n")


# ---- command line ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m storage audit",
        description="Audit the replicas of every topic-partition across broker log dirs with Spark: epoch "
                    "lineage (batches vs leader-epoch-checkpoint), CRC and structural failures, offset gaps, "
                    "high watermarks, the first offset at which replicas diverge (content fingerprints) and a "
                    "verdict per partition: consistent, divergent_below_hw, divergent_above_hw or corrupt.",
        epilog="Exit status: 0 = nothing below a high watermark diverged and nothing is corrupt; "
               "1 = committed data diverged (first divergent offset below the high watermark, which includes "
               "a replica lacking committed data and a CRC failure in committed data); 3 = no committed "
               "divergence, but a replica has CRC or structural failures; 2 = usage error, Java 17+ or "
               "PySpark missing.  Java 17+ is the only prerequisite besides the [spark] extra.")
    parser.add_argument("log_dirs", nargs="+", metavar="DIR", help="one broker's log dir (give one per broker)")
    parser.add_argument("--master", default="local[*]",
                        help="Spark master URL (default: an embedded local[*] Spark; e.g. spark://host:7077)")
    parser.add_argument("--out", default="./audit-out",
                        help="output directory for audit.json, partitions.parquet, replicas.parquet, run.json "
                             "(default: ./audit-out)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark setting (repeatable), e.g. --conf spark.executor.memory=4g")
    parser.add_argument("--quiet", action="store_true", help="no table and no progress bar, only the summary line")
    parser.add_argument("--all", action="store_true", dest="show_all",
                        help="list empty partitions of internal topics (__consumer_offsets ...) too")
    return parser


def _fail(message: str) -> int:
    print(f"storage audit: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:               # argparse: --help is 0, a usage error 2
        return int(exc.code or 0)
    for d in args.log_dirs:
        if not os.path.isdir(d):
            return _fail(f"not a directory: {d}")
        if any(segment_base(name, discovery.LOG_SUFFIX) is not None for name in os.listdir(d)):
            return _fail(f"{d} holds segment files: it is a partition dir, give its broker's log dir "
                         f"({os.path.dirname(os.path.abspath(d))})")
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            return _fail(f"--conf wants KEY=VALUE, not {item!r}")
        conf[key] = value
    from .session import create_session, java_problem, pyspark_problem

    problem = pyspark_problem() or java_problem()
    if problem:
        return _fail(problem)
    from pyspark.sql import SparkSession

    owned = SparkSession.getActiveSession() is None
    if owned:
        if not args.quiet and sys.stderr.isatty():
            print(f"starting Spark on {args.master} (its first start takes a while; a bar follows once the "
                  "scan begins)", file=sys.stderr, flush=True)
        spark = create_session(args.master, conf=conf)
    else:                                   # embedded in a program (or a test) that has one
        spark = SparkSession.getActiveSession()
        from . import register
        register(spark)
    try:
        report = run_audit(spark, args.log_dirs, progress=not args.quiet and sys.stderr.isatty())
        master = spark.sparkContext.master
    finally:
        if owned:
            spark.stop()
    results = report["partitions"]
    write_outputs(report, args.out, extra={"master": master})
    code = analysis.exit_code(results)
    if not args.quiet:
        print(format_table(results, show_all=args.show_all))
    verdicts = {v: sum(1 for r in results if r["verdict"] == v) for v in analysis.VERDICTS}
    rate = report["bytes"] / 1e6 / report["seconds"] if report["seconds"] else 0.0
    print(f"{len(results)} partitions: " + ", ".join(f"{n} {v}" for v, n in verdicts.items())
          + f"; {report['bytes'] / 1e6:.1f} MB in {report['segments']} segments, {report['seconds']:.1f} s "
          f"({rate:.1f} MB/s) on {master}; exit {code}; output in {os.path.abspath(args.out)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
