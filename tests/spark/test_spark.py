"""The `partitionlog` Spark data source and the fleet audit (storage/spark/).

One SparkSession (local[2]) serves the whole module.  The data source is checked value for
value against `iter_batches` over the same files, on logs written by the library and on every
real Kafka log dir under tests/data; the audit is checked on fleets built with the
library, one topic per scenario, and on a generated fleet whose manifest names the faults.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from storage.spark.session import java_problem, pyspark_problem

_PROBLEM = pyspark_problem() or java_problem()
if _PROBLEM:
    pytest.skip(f"Spark tests need PySpark 4, pyarrow, xxhash and Java 17+: {_PROBLEM}", allow_module_level=True)

import pyarrow.parquet as pq  # noqa: E402
import xxhash  # noqa: E402

from storage import LogConfig, LogDir, Record, build_batch, iter_batches  # noqa: E402
from storage.dir.logdir import parse_partition_dir  # noqa: E402
from storage.inspect import discovery  # noqa: E402
from storage.inspect import verdict as analysis  # noqa: E402
from storage.spark import audit, generate  # noqa: E402

TESTDATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
T0 = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=4096, fsync=False)


# The tests that start a Spark session (a JVM: 20-90 s for the first) run in the slow tier,
# which CI runs on every change (`pytest -m slow`); the rest of this file is the default tier's.
SPARK_SESSION = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    from storage.spark.session import create_session

    session = create_session("local[2]", app_name="storage-tests", conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


# ---- expectations computed without Spark ------------------------------------------------------

def _signed(digest: int) -> int:
    return digest - (1 << 64) if digest >= 1 << 63 else digest


def expected_batches(paths) -> dict:
    """{(log_dir, topic, partition, segment base, position): batch} straight from iter_batches."""
    out = {}
    for ref in discovery.discover(paths):
        for segment in ref.segments:
            with open(segment.path, "rb") as f:
                data = f.read()
            for batch in iter_batches(data):
                out[(ref.log_dir, ref.topic, ref.partition, segment.base_offset, batch.position)] = batch
    return out


def check_batch_row(row, batch) -> None:
    covered = batch.to_bytes()[21 if batch.magic >= 2 else 16:]
    assert (row.base_offset, row.last_offset, row.partition_leader_epoch, row.magic, row.attributes,
            row.compression, row.crc, row.record_count, row.max_timestamp, row.size_bytes) == \
        (batch.base_offset, batch.last_offset, batch.partition_leader_epoch, batch.magic, batch.attributes,
         batch.compression, batch.crc, batch.record_count, batch.max_timestamp, batch.size_bytes)
    assert row.crc_valid is True and row.error is None
    assert row.fingerprint == _signed(xxhash.xxh3_64(covered).intdigest())


def check_source_against_iter_batches(spark, paths) -> int:
    expected = expected_batches(paths)
    rows = (spark.read.format("partitionlog").option("payload", "true").load(paths)).collect()
    assert len(rows) == len(expected) > 0
    for row in rows:
        batch = expected[(row.log_dir, row.topic, row.partition, row.segment_base_offset, row.position)]
        check_batch_row(row, batch)
        assert row.data == batch.to_bytes()
    records = (spark.read.format("partitionlog").option("level", "records").option("payload", "true")
               .load(paths).collect())
    want = {}
    for (log_dir, topic, partition, _base, position), batch in expected.items():
        for record in batch.records():
            want[(log_dir, topic, partition, record.offset, position)] = (batch, record)
    assert len(records) == len(want)
    for row in records:
        batch, record = want[(row.log_dir, row.topic, row.partition, row.offset, row.position)]
        assert row.partition_leader_epoch == batch.partition_leader_epoch
        assert (row.timestamp, row.key, row.value) == (record.timestamp, record.key, record.value)
        assert [(h.key, h.value) for h in row.headers] == [tuple(h) for h in record.headers]
    return len(rows)


# ---- building replicas with the library ------------------------------------------------------------

def records_for(tag: str, first: int, count: int = 3) -> list[Record]:
    return [Record(key=b"k%d" % (first + i), value=f"{tag}-{first + i}".encode(),
                   headers=[("h", b"%d" % i)] if i == 1 else [], timestamp=T0 + first + i) for i in range(count)]


def write(log, tag: str, batches: int, epoch: int, count: int = 3) -> None:
    """Append as leader: `batches` batches of `count` records."""
    for _ in range(batches):
        log.append_as_leader(records_for(tag, log.log_end_offset, count), epoch)


def follower_batch(log, tag: str, epoch: int, count: int = 3) -> bytes:
    return build_batch(records_for(tag, log.log_end_offset, count), base_offset=log.log_end_offset,
                       partition_leader_epoch=epoch, base_timestamp=T0 + log.log_end_offset)


def fetch(leader, follower, until: int | None = None) -> None:
    """The follower fetches from the leader up to `until` (default: the leader's end)."""
    until = leader.log_end_offset if until is None else until
    while follower.log_end_offset < until:
        view = leader.read(follower.log_end_offset, 1 << 20, max_offset=until)
        follower.append_as_follower(bytes(view))


def flip_byte(partition_dir: str, offset: int) -> None:
    for path in sorted(glob.glob(os.path.join(partition_dir, "*.log"))):
        with open(path, "r+b") as f:
            data = f.read()
            for batch in iter_batches(data):
                if batch.base_offset == offset:
                    position = batch.position + batch.size_bytes - 3   # inside the last record's value
                    f.seek(position)
                    f.write(bytes([data[position] ^ 0xFF]))
                    return
    raise AssertionError(f"no batch at {offset} in {partition_dir}")


def build_scenarios(root) -> tuple[list[str], dict]:
    """Two brokers, one topic per scenario.  Returns (log dirs, {topic: (verdict, offset)})."""
    dirs = [str(root / "broker-a"), str(root / "broker-b")]
    compacted = LogConfig(**{**CONFIG.__dict__, "cleanup_policy": "compact"})
    a_dir, b_dir = (LogDir.open(d, CONFIG, topic_configs={"compacted": compacted}) for d in dirs)
    expect = {}

    def pair(topic):
        return a_dir.partition(topic, 0), b_dir.partition(topic, 0)

    def commit(*logs, hw=None):
        for log in logs:
            log.update_high_watermark(log.log_end_offset if hw is None else hw)

    # Identical replicas (several segments each).
    a, b = pair("same")
    a.assign_epoch_start_offset(0)
    write(a, "same", 10, 0)
    a.assign_epoch_start_offset(1)
    write(a, "same", 10, 1)
    fetch(a, b)
    commit(a, b)
    expect["same"] = (analysis.CONSISTENT, None)

    # Logs cut at different points: both had 0..35, A was cut at 12 and B at 24, and each went
    # on in a new epoch of its own.
    a, b = pair("cut")
    a.assign_epoch_start_offset(0)
    write(a, "cut", 12, 0)
    fetch(a, b)
    a.truncate_to(12)
    a.assign_epoch_start_offset(1)
    write(a, "cut-a", 4, 1)
    b.truncate_to(24)
    b.assign_epoch_start_offset(2)
    write(b, "cut-b", 3, 2)
    commit(a, b)
    expect["cut"] = (analysis.DIVERGENT_BELOW_HW, 12)

    # KIP-101 Appendix (a), step by step: min.isr=1, unclean elections, one message each.
    a, b = pair("kip101")
    a.assign_epoch_start_offset(0)
    write(a, "m-A0", 1, 0, count=1)          # 1. epoch 0 on A (offset 0), A stops
    b.assign_epoch_start_offset(1)
    write(b, "m-B0", 1, 1, count=1)          # 2. epoch 1 on B (offset 0), B stops
    a.assign_epoch_start_offset(2)
    write(a, "m-A1", 1, 2, count=1)          # 3. epoch 2 on A (offset 1), A stops
    b.assign_epoch_start_offset(3)
    write(b, "m-B1", 1, 3, count=1)          # 4. epoch 3 on B (offset 1)
    answer = b.end_offset_for_epoch(2)       # 5. A asks B for the end of epoch 2
    assert answer == (1, 1)
    a.truncate_to(answer[1])
    fetch(b, a)                              #    and fetches B's offset 1: offset 0 stays divergent
    commit(a, b)
    expect["kip101"] = (analysis.DIVERGENT_BELOW_HW, 0)

    # The same hidden behind equal epochs and offsets: one batch differs in content only.
    a, b = pair("hidden")
    a.assign_epoch_start_offset(4)
    write(a, "common", 5, 4)
    fetch(a, b)
    a.append_as_follower(follower_batch(a, "written-on-a", 4))
    b.append_as_follower(follower_batch(b, "written-on-b", 4))
    for _ in range(4):
        common = follower_batch(a, "cover-up", 4)
        a.append_as_follower(common)
        b.append_as_follower(common)
    commit(a, b)
    expect["hidden"] = (analysis.DIVERGENT_BELOW_HW, 15)

    # A flipped byte in committed data of B (CRC failure); A's copy is intact.
    a, b = pair("flip")
    a.assign_epoch_start_offset(0)
    write(a, "flip", 12, 0)
    fetch(a, b)
    commit(a, b)
    expect["flip"] = (analysis.CORRUPT, 15)

    # B lacks committed data: the HW is 36, B ends at 21.
    a, b = pair("missing")
    a.assign_epoch_start_offset(0)
    write(a, "missing", 12, 0)
    fetch(a, b, until=21)
    commit(a, b)
    expect["missing"] = (analysis.DIVERGENT_BELOW_HW, 21)

    # B is shorter, but only uncommitted data is missing (HW 21): a prefix, consistent.
    a, b = pair("prefix")
    a.assign_epoch_start_offset(0)
    write(a, "prefix", 12, 0)
    fetch(a, b, until=21)
    commit(a, b, hw=21)
    expect["prefix"] = (analysis.CONSISTENT, None)

    # Uncommitted tails differ above HW 21.
    a, b = pair("tail")
    a.assign_epoch_start_offset(0)
    write(a, "tail", 7, 0)
    fetch(a, b)
    commit(a, b)
    write(a, "tail-a", 3, 0)
    b.append_as_follower(follower_batch(b, "tail-b", 0))
    b.append_as_follower(follower_batch(b, "tail-b", 0))
    expect["tail"] = (analysis.DIVERGENT_ABOVE_HW, 21)

    # Offset gaps on both replicas alike: consistent, gaps reported.
    a, b = pair("gaps")
    for base in (0, 10, 20):
        chunk = build_batch(records_for("gap", base), base_offset=base, partition_leader_epoch=0,
                            base_timestamp=T0 + base)
        a.append_as_follower(chunk)
        b.append_as_follower(chunk)
    commit(a, b)
    expect["gaps"] = (analysis.CONSISTENT, None)

    # B's first (sealed) segment has a corrupt size field at offset 9; its later segments are fine.
    a, b = pair("broken")
    a.assign_epoch_start_offset(0)
    write(a, "broken", 30, 0)
    fetch(a, b)
    commit(a, b)
    expect["broken"] = (analysis.CORRUPT, 9)

    # B's newest segment ends in a torn write (a crash mid-append): reported, not corruption.
    a, b = pair("torn")
    a.assign_epoch_start_offset(0)
    write(a, "torn", 6, 0)
    fetch(a, b)
    commit(a, b)
    expect["torn"] = (analysis.CONSISTENT, None)

    # B's retention deleted its first segments (a later log start): a shorter history, not a divergence.
    a, b = pair("retained")
    a.assign_epoch_start_offset(0)
    write(a, "retained", 70, 0)
    fetch(a, b)
    commit(a, b)
    assert len(b.segments) > 2
    b.increment_log_start_offset(b.segments[1].base_offset + 1)
    expect["retained"] = (analysis.CONSISTENT, None)

    # Transactions (one aborted), replicated with their markers: consistent.
    a, b = pair("txn")
    a.assign_epoch_start_offset(0)
    for pid, committed in ((1, False), (2, True)):
        a.append_as_leader(build_batch([b"t"] * 3, producer_id=pid, producer_epoch=0, base_sequence=0,
                                       is_transactional=True, base_timestamp=T0), 0)
        a.append_txn_marker(pid, 0, committed, coordinator_epoch=0, leader_epoch=0)
    fetch(a, b)
    commit(a, b)
    assert b.collect_aborted_transactions(0, b.log_end_offset) == a.collect_aborted_transactions(0, a.log_end_offset)
    expect["txn"] = (analysis.CONSISTENT, None)

    # A compacted topic that only B has cleaned (a kept first batch, then holes, rewritten
    # batches): the replicas are compared by record and by each key's latest value -- consistent.
    a, b = pair("compacted")
    a.assign_epoch_start_offset(0)
    a.append_as_leader([Record(key=b"static", value=b"s", timestamp=T0)], 0)
    for i in range(40):
        a.append_as_leader([Record(key=b"k%d" % (i % 4), value=b"v%d" % i, timestamp=T0 + i)], 0)
    fetch(a, b)
    commit(a, b)
    b.roll()
    assert b_dir.clean_logs(now_ms=T0)[("compacted", 0)].records_written < 41
    expect["compacted"] = (analysis.CONSISTENT, None)

    a_dir.close()
    b_dir.close()
    flip_byte(os.path.join(dirs[1], "flip-0"), 15)
    first_segment = sorted(glob.glob(os.path.join(dirs[1], "broken-0", "*.log")))[0]
    with open(first_segment, "r+b") as f:
        at_9 = next(batch.position for batch in iter_batches(f.read()) if batch.base_offset == 9)
        f.seek(at_9 + 8)
        f.write(b"\0\0\0\0")                   # Length 0: below the minimum, the segment ends here
    last_segment = sorted(glob.glob(os.path.join(dirs[1], "torn-0", "*.log")))[-1]
    with open(last_segment, "ab") as f:
        f.write(build_batch([b"x" * 50], base_offset=18)[:30])
    return dirs, expect


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory, spark):
    dirs, expect = build_scenarios(tmp_path_factory.mktemp("scenarios"))
    report = audit.run_audit(spark, dirs)
    return dirs, expect, {r["topic"]: r for r in report["partitions"]}


# ---- the data source ----------------------------------------------------------------------------

@SPARK_SESSION
def test_data_source_on_our_logs(spark, tmp_path):
    log_dir = LogDir.open(tmp_path / "broker", CONFIG)
    orders = log_dir.partition("orders", 0)
    orders.assign_epoch_start_offset(0)
    for i in range(30):
        records = [Record(key=None if i % 5 == 0 else b"c%d" % i, value=None if i % 7 == 0 else b"v" * (i * 7),
                          headers=[("source", b"test"), ("null", None)] if i % 3 == 0 else [],
                          timestamp=T0 + 100 * i)] * 4
        orders.append_as_leader(records, leader_epoch=i // 10, compression=("none", "zstd", "gzip")[i % 3])
    payments = log_dir.partition("payments", 3)
    write(payments, "pay", 8, 5)
    log_dir.close()
    assert len(glob.glob(str(tmp_path / "broker" / "orders-0" / "*.log"))) > 1     # several segments
    assert check_source_against_iter_batches(spark, [str(tmp_path / "broker")]) == 38


def real_kafka_paths() -> list[str]:
    """Every real Kafka log dir (and partition dir of extracted segments) under tests/data."""
    paths = []
    for candidate in sorted(glob.glob(os.path.join(TESTDATA, "kafka-real", "*", "@*", "*"))):
        if os.path.isdir(candidate) and any(
                os.path.isdir(os.path.join(candidate, name)) and parse_partition_dir(name)
                for name in os.listdir(candidate)):
            paths.append(os.path.abspath(candidate))
    paths += sorted(os.path.abspath(p) for p in glob.glob(os.path.join(TESTDATA, "kafka-real", "*", "@*",
                                                                          "extracted", "*")))
    paths.append(os.path.abspath(os.path.join(TESTDATA, "kafka-jvm-generated")))
    return paths


@SPARK_SESSION
def test_data_source_on_every_real_kafka_log_dir(spark):
    paths = real_kafka_paths()
    every_segment = {os.path.abspath(p) for p in glob.glob(os.path.join(TESTDATA, "**", "*.log"), recursive=True)}
    read = {s.path for s in discovery.segments(paths)}
    assert read == every_segment, "a segment file under tests/data is not covered"
    count = check_source_against_iter_batches(spark, paths)
    assert count > 8000
    magic = {r.magic for r in spark.read.format("partitionlog").load(paths).select("magic").distinct().collect()}
    assert magic == {1, 2}


@SPARK_SESSION
def test_payload_columns_only_when_asked(spark):
    path = os.path.join(TESTDATA, "kafka-jvm-generated")
    batches = spark.read.format("partitionlog").load(path)
    assert "data" not in batches.columns and "fingerprint" in batches.columns
    records = spark.read.format("partitionlog").option("level", "records").load(path)
    assert not {"key", "value", "headers"} & set(records.columns)
    with_payload = spark.read.format("partitionlog").option("level", "records").option("payload", "true").load(path)
    assert {"key", "value", "headers"} <= set(with_payload.columns)
    chosen = spark.read.format("partitionlog").schema("offset long, value binary").option("level", "records").load(path)
    assert chosen.columns == ["offset", "value"]
    assert sorted(chosen.collect()) == sorted(with_payload.select("offset", "value").collect())
    with pytest.raises(Exception, match="no column 'nonsense'"):
        spark.read.format("partitionlog").schema("nonsense long").load(path).collect()


@SPARK_SESSION
def test_bad_bytes_are_rows_at_batch_level_and_errors_at_record_level(spark, tmp_path):
    good = b"".join(build_batch([b"v%d" % i], base_offset=i, partition_leader_epoch=0, base_timestamp=T0)
                    for i in range(4))
    first, second = list(iter_batches(good))[:2]
    flipped = bytearray(good)
    flipped[second.position + second.size_bytes - 2] ^= 1       # inside the second batch's value
    torn = good + good[:30]
    broken = good[:len(good) // 2] + b"\x00" * 12 + b"\xff" * 40    # size field out of range
    for name, data in (("flipped-0", flipped), ("torn-0", torn), ("broken-0", broken)):
        os.makedirs(tmp_path / name)
        (tmp_path / name / ("0" * 20 + ".log")).write_bytes(bytes(data))
    rows = {(r.topic, r.position): r for r in spark.read.format("partitionlog").load(str(tmp_path)).collect()}
    crc_failed = [r for (topic, _), r in rows.items() if topic == "flipped" and r.crc_valid is False]
    assert [r.base_offset for r in crc_failed] == [1]
    torn_row = rows[("torn", len(good))]
    assert torn_row.error.startswith("partial_tail: 30 bytes") and torn_row.base_offset is None
    corrupt = [r for (topic, _), r in rows.items() if topic == "broken" and r.error]
    assert len(corrupt) == 1 and corrupt[0].error.startswith("corrupt:") and corrupt[0].position == len(good) // 2
    reader = spark.read.format("partitionlog").option("level", "records")
    with pytest.raises(Exception, match="CRC"):
        reader.load(str(tmp_path / "flipped-0")).collect()
    dropped = reader.option("mode", "DROPMALFORMED").load(str(tmp_path)).collect()
    assert sorted((r.topic, r.offset) for r in dropped if r.topic == "flipped") == [("flipped", 0), ("flipped", 2),
                                                                                   ("flipped", 3)]
    assert sorted(r.offset for r in dropped if r.topic == "torn") == [0, 1, 2, 3]


def test_read_path_never_opens_lmdb(tmp_path, monkeypatch):
    """What a Spark task runs (segment listing and reading) works with LMDB unusable."""
    import lmdb

    from storage.spark.source import PartitionLogDataSource, SegmentPartition

    log_dir = LogDir.open(tmp_path / "broker", CONFIG)
    write(log_dir.partition("t", 0), "x", 5, 0)
    log_dir.close()

    def refuse(*args, **kwargs):
        raise AssertionError("LMDB opened on the read path")

    monkeypatch.setattr(lmdb, "open", refuse)
    reader = PartitionLogDataSource({"path": str(tmp_path / "broker")}).reader(
        PartitionLogDataSource({}).schema())
    parts = reader.partitions()
    assert parts and all(isinstance(p, SegmentPartition) for p in parts)
    assert sum(b.num_rows for p in parts for b in reader.read(p)) == 5


def test_a_segment_gone_since_planning_is_an_error_row(tmp_path):
    from storage.spark.source import PartitionLogDataSource

    log_dir = LogDir.open(tmp_path / "broker", CONFIG)
    write(log_dir.partition("t", 0), "x", 30, 0)
    log_dir.close()
    source = PartitionLogDataSource({"path": str(tmp_path / "broker")})
    reader = source.reader(source.schema())
    parts = reader.partitions()
    assert len(parts) > 1
    os.unlink(parts[0].segment.path)                # retention on a live broker, say
    first = [row for batch in reader.read(parts[0]) for row in batch.to_pylist()]
    assert len(first) == 1 and first[0]["error"].startswith("unreadable:") and first[0]["base_offset"] is None
    assert all(row["error"] is None for batch in reader.read(parts[1]) for row in batch.to_pylist())
    records = PartitionLogDataSource({"path": str(tmp_path / "broker"), "level": "records"})
    with pytest.raises(OSError):
        list(records.reader(records.schema()).read(parts[0]))


# ---- the audit -----------------------------------------------------------------------------------

@pytest.mark.parametrize("topic", ["same", "cut", "kip101", "hidden", "flip", "missing", "prefix", "tail", "gaps",
                                   "broken", "torn", "retained", "txn", "compacted"])
@SPARK_SESSION
def test_audit_verdicts_and_first_divergent_offsets(scenarios, topic):
    _, expect, results = scenarios
    record = results[topic]
    assert (record["verdict"], record["first_divergent_offset"]) == expect[topic], json.dumps(record, indent=1)


@SPARK_SESSION
def test_audit_details(scenarios):
    dirs, _, results = scenarios
    flip = results["flip"]
    a, b = flip["replicas"]
    assert (a["crc_failure_count"], b["crc_failure_count"]) == (0, 1)
    assert b["crc_failures"][0]["offset"] == 15 and flip["committed_divergence"]
    conflict = flip["divergence"]["conflict"]
    assert {x["log_dir"]: x["crc_valid"] for x in conflict["batches"]} == {dirs[0]: True, dirs[1]: False}

    hidden = results["hidden"]["divergence"]["conflict"]
    assert len({x["fingerprint"] for x in hidden["batches"]}) == 2
    assert {x["partition_leader_epoch"] for x in hidden["batches"]} == {4}
    assert {x["last_offset"] for x in hidden["batches"]} == {17}
    assert hidden["batch_count"] == 1                   # the cover-up batches after it are equal

    kip = results["kip101"]["replicas"]
    assert [e["epoch"] for e in kip[0]["lineage_from_batches"]] == [0, 3]
    assert [e["epoch"] for e in kip[1]["lineage_from_batches"]] == [1, 3]
    assert all(r["lineage_agrees"] for r in kip)

    missing = results["missing"]
    assert missing["high_watermark"] == 36 and missing["committed_divergence"]
    assert [r["missing_committed_from"] for r in missing["replicas"]] == [None, 21]

    assert not results["tail"]["committed_divergence"]
    assert results["prefix"]["replicas"][1]["missing_committed_from"] is None

    same = results["same"]["replicas"]
    assert all(r["segment_count"] > 1 and r["lineage_agrees"] for r in same)
    assert [e["epoch"] for e in same[0]["lineage_from_batches"]] == [0, 1]
    assert same[0]["high_watermark_source"] == "storage.mdb" and same[0]["high_watermark"] == 60

    gaps = results["gaps"]["replicas"][0]
    assert gaps["offset_gap_count"] == 2 and gaps["offset_gaps"] == [{"from": 3, "to": 10}, {"from": 13, "to": 20}]
    broken = results["broken"]["replicas"][1]
    assert broken["structural_failure_count"] == 1 and broken["structural_failures"][0]["kind"] == "corrupt"
    assert broken["segment_count"] > 1 and results["broken"]["divergence"]["conflict"]["replicas_without_batch"] \
        == [dirs[1]]
    torn = results["torn"]["replicas"]
    assert [r["torn_tail_bytes"] for r in torn] == [0, 30] and torn[1]["structural_failure_count"] == 0
    assert analysis.exit_code(list(results.values())) == 1


@SPARK_SESSION
def test_audit_cli_on_real_kafka_dirs(spark, tmp_path, capsys):
    dirs = sorted(glob.glob(os.path.join(TESTDATA, "kafka-real", "*", "@*", "kafka-data")))
    out = tmp_path / "out"
    code = audit.main(dirs + ["--out", str(out), "--master", "local[1]"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    results = json.loads((out / "audit.json").read_text())
    assert isinstance(results, list) and len(results) == 7
    assert all(r["verdict"] == "consistent" and r["first_divergent_offset"] is None for r in results)
    assert len([line for line in printed.splitlines() if line.startswith(("__cluster", "auth", "my-", "test-",
                                                                         "topic-logx"))]) == 7
    auth = next(r for r in results if r["topic"] == "auth_events")["replicas"][0]
    assert (auth["high_watermark"], auth["high_watermark_source"]) == (2273, "replication-offset-checkpoint")
    assert auth["lineage_agrees"] is True
    metadata = next(r for r in results if r["topic"] == "__cluster_metadata")["replicas"][0]
    assert metadata["lineage_agrees"] is True and metadata["broker_id"] == 1
    table = pq.read_table(out / "partitions.parquet")
    assert table.num_rows == 7 and set(table.column("verdict").to_pylist()) == {"consistent"}
    replicas = pq.read_table(out / "replicas.parquet").to_pylist()
    assert {r["topic"] for r in replicas} == {r["topic"] for r in results}
    assert json.loads((out / "run.json").read_text())["exit_code"] == 0


@SPARK_SESSION
def test_audit_of_a_generated_fleet_finds_every_injected_fault(spark, tmp_path):
    fleet = generate.generate(str(tmp_path / "fleet"), brokers=3, topics=2, partitions=3, batches=24, records=6,
                              value_bytes=60, segment_bytes=8192, epochs=3,
                              inject={"hidden": 1, "missing": 1, "tail": 1, "corrupt": 1, "lineage": 1}, seed=7)
    out = tmp_path / "out"
    code = audit.main(fleet["brokers"] + ["--out", str(out), "--quiet"])
    assert code == 1
    results = {(r["topic"], r["partition"]): r for r in json.loads((out / "audit.json").read_text())}
    assert len(results) == 6
    for expected in fleet["partitions"]:
        got = results[(expected["topic"], expected["partition"])]
        assert (got["verdict"], got["first_divergent_offset"]) == \
            (expected["expected_verdict"], expected["expected_first_divergent_offset"]), expected
        lineage_ok = [r["lineage_agrees"] for r in got["replicas"]]
        if expected["injected"] == "lineage":
            assert lineage_ok.count(False) == 1 and lineage_ok[expected["victim"]] is False
        else:
            assert all(lineage_ok)
    assert any(r["segment_count"] > 1 for x in results.values() for r in x["replicas"])


# ---- without Spark -----------------------------------------------------------------------------

def test_lineage_agreement_rules():
    assert analysis.lineage_agreement([(0, 0), (2, 10)], [(0, 0), (2, 10)], log_start_offset=0,
                                      log_end_offset=20) == (True, None)
    # A leader elected that has not written yet: its entry starts at the log end offset.
    assert analysis.lineage_agreement([(0, 0)], [(0, 0), (3, 20)], log_start_offset=0, log_end_offset=20)[0]
    # Kafka moved the first entry up to the log start offset (truncateFromStart).
    assert analysis.lineage_agreement([(0, 0), (1, 5)], [(1, 7)], log_start_offset=7, log_end_offset=20)[0]
    agrees, why = analysis.lineage_agreement([(0, 0), (2, 10)], [(0, 0), (2, 12)], log_start_offset=0,
                                             log_end_offset=20)
    assert agrees is False and "epoch 2" in why
    assert analysis.lineage_agreement([(0, 0)], None, log_start_offset=0, log_end_offset=5)[0] is None
    assert analysis.lineage_from_epochs([(-1, 0), (1, 1), (1, 4), (3, 6), (2, 9)]) == \
        ([(1, 1), (3, 6)], [(9, 2, 3)])


def _replica(end, hw, crc=0):
    return {"log_dir": f"d{end}", "log_end_offset": end, "high_watermark": hw, "crc_failure_count": crc,
            "structural_failures": []}


def test_exit_codes():
    consistent = analysis.assess_partition("t", 0, [_replica(10, 10), _replica(10, 10)], None)
    above = analysis.assess_partition("t", 1, [_replica(12, 8), _replica(11, 8)], {"offset": 9})
    below = analysis.assess_partition("t", 2, [_replica(12, 10), _replica(11, 10)], {"offset": 9})
    lone_corrupt = analysis.assess_partition("t", 3, [_replica(10, 10, crc=1)], None)
    assert [r["verdict"] for r in (consistent, above, below, lone_corrupt)] == \
        ["consistent", "divergent_above_hw", "divergent_below_hw", "corrupt"]
    assert analysis.exit_code([consistent, above]) == 0
    assert analysis.exit_code([consistent, lone_corrupt]) == 3
    assert analysis.exit_code([below, lone_corrupt]) == 1
    unknown = analysis.assess_partition("t", 4, [_replica(12, None), _replica(12, None)], {"offset": 3})
    assert unknown["verdict"] == "divergent_below_hw"          # no HW anywhere: counts as committed


def test_audit_without_java_says_so_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)                                  # no java here
    done = subprocess.run([sys.executable, "-m", "storage", "audit", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Java 17+" in lines[0], done.stderr


@SPARK_SESSION
def test_producer_columns(spark, tmp_path):
    with LogDir.open(tmp_path / "broker", CONFIG) as log_dir:
        log = log_dir.partition("orders", 0)
        log.append_as_leader(build_batch([b"a"], producer_id=5, producer_epoch=1, base_sequence=0,
                                         is_transactional=True), 0)
        log.append_txn_marker(5, 1, True, coordinator_epoch=0, leader_epoch=0)
        log.append_as_leader([b"plain"], 0)
    rows = spark.read.format("partitionlog").load(str(tmp_path / "broker")).select(
        "base_offset", "producer_id", "producer_epoch", "base_sequence", "is_transactional", "is_control"
    ).orderBy("base_offset").collect()
    assert [tuple(r) for r in rows] == [(0, 5, 1, 0, True, False), (1, 5, 1, -1, True, True),
                                        (2, -1, -1, -1, False, False)]


def test_batch_rows_from_header_columns_equal_the_row_path(tmp_path, monkeypatch):
    """The batch level's Arrow batches come from storage.core.columns (one C call a segment, no Python
    object a batch); on every real segment, and on flipped, torn and broken ones, they hold
    exactly what the per-batch row path (scan.scan_batches) gives -- every column, payload
    included, also when a batch is cut at maxRecordsPerBatch."""
    from storage.spark import scan
    from storage.spark.source import _ArrowWriter, schema_of

    good = b"".join(build_batch([b"v%d" % i], base_offset=i, partition_leader_epoch=0, base_timestamp=T0)
                    for i in range(4))
    flipped = bytearray(good)
    flipped[-2] ^= 1
    for name, data in (("flipped-0", flipped), ("torn-0", good + good[:30]),
                       ("broken-0", good[:len(good) // 2] + b"\x00" * 12 + b"\xff" * 40)):
        os.makedirs(tmp_path / name)
        (tmp_path / name / ("0" * 20 + ".log")).write_bytes(bytes(data))
    segments = list(discovery.segments(real_kafka_paths() + [str(tmp_path)]))
    schema = schema_of("batches", payload=True)

    def table(rows_max: int) -> list[dict]:
        writer = _ArrowWriter(schema, rows_max)
        out = []
        for segment in segments:
            for batch in writer.rows(segment, "batches", "FAILFAST"):
                out += batch.to_pylist()
        return out

    columnar, columnar_cut = table(8192), table(3)
    used = [s for s in segments if scan.header_columns(s, scan.read_segment(s)) is not None]
    assert len(used) > len(segments) // 2            # most segments take the column path
    monkeypatch.setattr(scan, "header_columns", lambda segment, data: None)
    assert columnar == columnar_cut == table(8192)
