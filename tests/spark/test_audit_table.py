"""The audit's table (storage/spark/audit.format_table), which needs no Spark: per-replica
counts, and the empty partitions of internal topics left out unless asked for."""
from storage.spark import audit


def _record(topic, partition, batches, *, verdict="consistent", ends=None):
    ends = ends or [n * 3 for n in batches]
    replicas = [{"broker_id": i + 1, "log_end_offset": e, "batch_count": b, "crc_failure_count": 0,
                 "crc_failures": [], "structural_failure_count": 0, "structural_failures": [],
                 "missing_committed_from": None, "lineage_agrees": True, "offset_gap_count": 0,
                 "torn_tail_bytes": 0} for i, (b, e) in enumerate(zip(batches, ends))]
    return {"topic": topic, "partition": partition, "replica_count": len(replicas), "high_watermark": ends[0],
            "replicas": replicas, "verdict": verdict, "first_divergent_offset": None, "divergence": None}


def test_batches_are_per_replica_not_summed():
    # The demo's partition: three replicas of 25 batches each is "25", not 75.
    rows = audit.format_table([_record("orders", 0, [25, 25, 25]), _record("pay", 1, [7, 9, 9])]).splitlines()
    assert rows[1].split()[:5] == ["orders-0", "3", "75", "75", "25"]
    assert rows[2].split()[:5] == ["pay-1", "3", "21", "21..27", "7..9"]


def test_empty_internal_partitions_are_counted_not_listed():
    results = [_record("__consumer_offsets", p, [0, 0, 0]) for p in range(50)]
    results += [_record("__consumer_offsets", 50, [4, 4, 4]), _record("orders", 0, [25, 25, 25]),
                _record("__consumer_offsets", 51, [0, 0], verdict="corrupt")]
    lines = audit.format_table(results).splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == ["__consumer_offsets-50", "orders-0", "__consumer_offsets-51"]
    assert lines[-1] == "(50 empty partitions of internal topics not listed: --all lists them)"
    assert len(audit.format_table(results, show_all=True).splitlines()) == 1 + 53
