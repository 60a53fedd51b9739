"""The command line (storage/cli/): dump-log, verify, recover, epochs and the demo, on our log
dirs and on real Kafka log dirs (copies of tests/data/kafka-real), text and --json."""
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TESTDATA

from storage import LogConfig, PartitionLog, Record, iter_batches
from storage.cli import main
from storage.inspect.compare import local_comparison

KAFKA_REAL = TESTDATA / "kafka-real"
BINAYA = "binaya-sharma__soc-streaming-detection/@7773d1f/kafka-data"
COOLER = "cooler-SAI__go-KafkaProject/@edbccbe/kafka-data"
JEONG = "Jeong-Rae__KafkaDemo/@441d190/kraft-combined-logs"
CHRIST = "christseng89__RealTime_Analysis/@6c28121/kafka-logs"
BERKAY = "berkayakcay__toy-node-log-collector/@3c85883/kafka-data"
MIXED = "segmentio__kafka-go/@8b94ffa/extracted/v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc"
SEGMENT = "00000000000000000000"
BATCH_LINE = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) "
    r"producerId: (-?\d+) producerEpoch: (-?\d+) partitionLeaderEpoch: (-?\d+) isTransactional: (true|false) "
    r"isControl: (true|false) deleteHorizonMs: OptionalLong\.empty position: (\d+) CreateTime: (\d+) "
    r"size: (\d+) magic: 2 compresscodec: (\w+) crc: (\d+) isvalid: (true|false)$")



def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, _err = run(capsys, *argv, "--json")
    return code, json.loads(out)


def copy_tree(source, destination) -> Path:
    """A writable copy (the test data stays as shipped)."""
    shutil.copytree(source, destination)
    for root, dirs, files in os.walk(destination):
        for name in dirs + files:
            path = os.path.join(root, name)
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)
    return Path(destination)


def kafka_copy(tmp_path, name) -> Path:
    return copy_tree(KAFKA_REAL / name, tmp_path / name.replace("/", "_"))


def snapshot(path) -> dict:
    """Every file under path: size, mtime and a digest of its bytes."""
    out = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = (os.path.getsize(full), os.stat(full).st_mtime_ns,
                                                    hashlib.sha256(f.read()).hexdigest())
    return out


def flip_inside_batch(log_path, batch_index) -> tuple[int, int]:
    """Flip one byte in the records of a batch (CRC-covered); returns (batch position, base offset)."""
    data = bytearray(Path(log_path).read_bytes())
    batch = list(iter_batches(bytes(data)))[batch_index]
    data[batch.position + 61 + 2] ^= 0x40
    Path(log_path).write_bytes(bytes(data))
    return batch.position, batch.base_offset


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory):
    """The demo's three broker log dirs, kept (run once for the module)."""
    root = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--no-spark", "--no-wire", "--dir", str(root)]) == 0
    return root


@pytest.fixture
def broker(demo_root, tmp_path) -> Path:
    """A writable copy of the demo's broker-1 log dir."""
    return copy_tree(demo_root / "broker-1", tmp_path / "broker-1")


# ---- demo -------------------------------------------------------------------------------------------

def test_demo_tells_the_whole_story_without_spark(capsys):
    started = time.monotonic()
    code, out, _err = run(capsys, "demo", "--no-spark", "--no-wire")
    assert code == 0
    assert time.monotonic() - started < 30
    steps = [line.split(".")[0] for line in out.splitlines() if re.match(r"^\d\. ", line)]
    assert steps == [str(i) for i in range(1, 10)]
    assert "high watermark 135" in out
    assert "power loss on brokers 1 and 2" in out.lower()
    assert "leader 3, leader epoch 3, ISR [3], RECOVERING (KIP-704)" in out
    assert "a produce gets NOT_LEADER_OR_FOLLOWER" in out
    assert "controller accepts it: leader 3, leader epoch 3, ISR [3]," in out
    assert "offsets 60..134 -- 75 records acknowledged with acks=all" in out
    assert "OffsetForLeaderEpoch(epoch 0) -> epoch 0, end offset 60" in out
    assert "It truncates its log from 90 to 60" in out
    assert "INELIGIBLE_REPLICA (KIP-903" in out
    assert "joins with its new epoch: leader 3, leader epoch 3, ISR [1, 2, 3]" in out
    table = out[out.index("TOPIC-PARTITION"):].splitlines()
    assert table[1].split()[:9] == ["orders-0", "broker-1", "75", "75", "25", "0@0", "3@60", "agrees", "0"]
    assert "consistent" in table[1]
    assert "demo finished in" in out


def test_demo_dir_is_kept_and_verifies(demo_root, capsys):
    for b in (1, 2, 3):
        code, out, _ = run(capsys, "verify", demo_root / f"broker-{b}")
        assert code == 0, out
        assert "orders-0: ok; 1 segment, 25 batches, offsets 0..74, epochs 0@0 3@60 (checkpoint agrees)" in out
    assert (demo_root / "controller").is_dir()


@pytest.mark.slow
def test_demo_with_spark_ends_with_the_audit_table(capsys):
    from storage.spark.session import java_problem, pyspark_problem

    problem = pyspark_problem() or java_problem()
    if problem:
        pytest.skip(problem)
    started = time.monotonic()
    code, out, _err = run(capsys, "demo", "--no-wire")
    assert code == 0, out
    assert time.monotonic() - started < 120
    assert "Spark" in out and "started in" in out
    assert re.search(r"^orders-0\s+3\s+75\s+75\s+25\s+consistent", out, re.M), out   # BATCHES per replica


def test_local_comparison_finds_the_first_divergent_offset(tmp_path):
    for name, values in (("a", [b"x0", b"x1", b"x2", b"x3"]), ("b", [b"x0", b"x1", b"y2", b"y3"])):
        log = PartitionLog.open(tmp_path / name / "t-0", LogConfig(fsync=False))
        for i, value in enumerate(values):
            log.append_as_leader([Record(value=value, timestamp=1_700_000_000_000 + i)], leader_epoch=0)
        log.close()
    text, results = local_comparison([str(tmp_path / "a"), str(tmp_path / "b")])
    (result,) = results
    assert result["first_divergent_offset"] == 2 and result["verdict"] == "divergent_below_hw"
    assert "t-0" in text and "divergent_below_hw" in text


# ---- verify ------------------------------------------------------------------------------------------

def test_verify_json_shape(broker, capsys):
    code, doc = run_json(capsys, "verify", broker)
    assert code == 0 and doc["ok"] is True
    assert doc["summary"] == {"partitions": 1, "segments": 1, "batches": 25, "bytes": doc["summary"]["bytes"],
                              "problems": 0, "warnings": 0}
    (p,) = doc["partitions"]
    assert (p["topic"], p["partition"], p["log_start_offset"], p["log_end_offset"], p["high_watermark"]) == \
        ("orders", 0, 0, 75, 75)
    assert p["lineage_from_checkpoint"] == [{"epoch": 0, "start_offset": 0}, {"epoch": 3, "start_offset": 60}]
    assert [(e["epoch"], e["start_offset"], e["last_offset"], e["batch_count"]) for e in p["lineage_from_batches"]] \
        == [(0, 0, 59, 20), (3, 60, 74, 5)]
    assert p["lineage_agrees"] is True and p["problems"] == []
    (segment,) = p["segments"]
    assert segment["index_entries"] >= 1 and segment["time_index_entries"] >= 1


def test_verify_changes_nothing(broker, tmp_path, capsys):
    dirs = [(broker, "orders-0")]
    if KAFKA_REAL.is_dir():
        dirs.append((kafka_copy(tmp_path, BINAYA), "auth_events-0"))
    for path, partition in dirs:
        before = snapshot(path)
        assert run(capsys, "verify", path)[0] == 0
        assert run(capsys, "epochs", path, partition)[0] == 0
        assert run(capsys, "dump-log", "--files", *sorted((path / partition).iterdir()))[0] == 0
        assert snapshot(path) == before


def test_verify_flipped_byte_names_file_and_position(broker, capsys):
    log_path = broker / "orders-0" / f"{SEGMENT}.log"
    position, offset = flip_inside_batch(log_path, 7)
    code, out, _ = run(capsys, "verify", broker)
    assert code == 1
    problems = [line for line in out.splitlines() if line.strip().startswith("problem:")]
    cut = log_path.stat().st_size - position      # recovery cuts from the damaged batch on
    assert problems == [f"  problem: {log_path}, position {position}, offset {offset}: CRC mismatch "
                        f"(stored 0x{list(iter_batches(log_path.read_bytes(), verify=False))[7].crc:08x}); "
                        f"recovery cuts {cut} bytes here"]
    code, doc = run_json(capsys, "verify", broker)
    assert code == 1 and doc["ok"] is False
    (problem,) = doc["partitions"][0]["problems"]
    assert problem == {"kind": "crc", "file": str(log_path), "position": position, "offset": offset,
                       "message": problem["message"]}


def test_verify_reports_index_time_index_and_checkpoint_problems(broker, capsys):
    import struct

    part = broker / "orders-0"
    index = bytearray((part / f"{SEGMENT}.index").read_bytes())
    struct.pack_into(">ii", index, 0, 3, 77)                 # not a batch start
    (part / f"{SEGMENT}.index").write_bytes(bytes(index))
    times = bytearray((part / f"{SEGMENT}.timeindex").read_bytes())
    timestamp, relative = struct.unpack_from(">qi", times, 0)
    struct.pack_into(">qi", times, 0, timestamp - 1, relative)
    (part / f"{SEGMENT}.timeindex").write_bytes(bytes(times))
    (part / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n3 61\n")
    code, doc = run_json(capsys, "verify", broker)
    assert code == 1
    kinds = sorted(p["kind"] for p in doc["partitions"][0]["problems"])
    assert kinds == ["epoch_lineage", "index", "time_index"]
    by_kind = {p["kind"]: p for p in doc["partitions"][0]["problems"]}
    assert by_kind["index"]["file"].endswith(".index") and by_kind["index"]["position"] == 0
    assert "not the start of a batch" in by_kind["index"]["message"]
    assert "epoch 3 from offset 60" in by_kind["epoch_lineage"]["message"]


def test_verify_torn_tail_and_corrupt_size(broker, capsys):
    log_path = broker / "orders-0" / f"{SEGMENT}.log"
    size = log_path.stat().st_size
    with open(log_path, "ab") as f:
        f.write(b"\0\0\0\0\0\0\0\x4b\0\0\0\x50torn")
    code, out, _ = run(capsys, "verify", broker)
    assert code == 1 and f"problem: {log_path}, position {size}: 16 bytes after the last whole batch" in out
    data = bytearray(log_path.read_bytes()[:size])
    batches = list(iter_batches(bytes(data)))
    data[batches[3].position + 8:batches[3].position + 12] = (5).to_bytes(4, "big")    # Length < 14
    log_path.write_bytes(bytes(data))
    code, out, _ = run(capsys, "verify", broker)
    assert code == 1
    assert f"problem: {log_path}, position {batches[3].position}, offset {batches[3].base_offset}: corrupt" in out


def test_verify_reports_a_cut_segment_once_with_what_it_hides(tmp_path, capsys):
    # A segment cut in the middle (a crash that lost the page cache's tail) leaves index entries
    # that point past the cut: they are what the cut hides, said with it, not one problem each.
    config = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=512, fsync=False)
    log = PartitionLog.open(tmp_path / "d" / "t-0", config)
    for i in range(600):
        log.append_as_leader([Record(value=b"x" * 200, key=b"k", timestamp=1000 + i)], leader_epoch=0)
    log.close()
    first = tmp_path / "d" / "t-0" / f"{SEGMENT}.log"
    os.truncate(first, first.stat().st_size // 2)
    code, doc = run_json(capsys, "verify", tmp_path / "d")
    assert code == 1
    (problem,) = doc["partitions"][0]["problems"]
    assert problem["kind"] == "partial_tail" and problem["file"] == str(first)
    hidden = re.search(r"it hides (\d+) entries of the offset index and (\d+) entries of the time index "
                       r"past byte (\d+)", problem["message"])
    assert hidden and int(hidden[1]) > 10 and int(hidden[2]) > 10 and int(hidden[3]) == problem["position"]
    assert "deletes the" in problem["message"]      # the later segments recovery removes, in the same line


def test_verify_quiet_prints_only_partitions_with_problems(broker, capsys):
    copy_tree(broker / "orders-0", broker / "orders-1")        # a second, healthy partition
    code, out, _ = run(capsys, "verify", broker)
    assert code == 0 and len([line for line in out.splitlines() if ": ok;" in line]) == 2
    with open(broker / "orders-0" / f"{SEGMENT}.log", "ab") as f:
        f.write(b"torn")
    code, out, _ = run(capsys, "verify", "--quiet", broker)
    lines = out.splitlines()
    assert code == 1 and not [line for line in lines if "orders-1" in line]
    assert lines[0].startswith("orders-0: 1 problem;") and "4 bytes after the last whole batch" in lines[1]
    assert lines[-1].startswith("verified 2 partitions") and "1 problem" in lines[-1]


def test_follower_chunk_index_entries_are_valid(tmp_path, capsys):
    # A follower appends fetched chunks of several batches; Kafka indexes a chunk by its last
    # offset at the chunk's first position.  Kafka's own dump tool calls that a mismatch; it is not.
    config = LogConfig(index_interval_bytes=100, fsync=False)
    leader = PartitionLog.open(tmp_path / "leader" / "t-0", config)
    for _i in range(30):
        leader.append_as_leader([b"x" * 50, b"y" * 30], leader_epoch=0)
    follower = PartitionLog.open(tmp_path / "follower" / "t-0", config)
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(bytes(leader.read(follower.log_end_offset, 1000)))
    chunk_entries = [(o, p) for o, p in follower.segments[0].offset_index_entries()
                     if next(b for b in follower.batches() if b.position == p).last_offset != o]
    leader.close()
    follower.close()
    assert chunk_entries
    assert run(capsys, "verify", tmp_path / "follower")[0] == 0
    index = tmp_path / "follower" / "t-0" / f"{SEGMENT}.index"
    assert run(capsys, "dump-log", "--verify-index-only", "--files", index)[:2] == (0, f"Dumping {index}\n")


@pytest.mark.parametrize("name, partitions, batches", [
    (BINAYA, ["auth_events-0"], 2273), (COOLER, ["__cluster_metadata-0", "my-topic-0", "test-topic-0"], 2710),
    (JEONG, ["__cluster_metadata-0"], 3068), (CHRIST, ["__cluster_metadata-0"], 6),
    (BERKAY, ["topic-logx-001-0", "topic-logx-001-1", "topic-logx-001-2"], 50)])
def test_verify_real_kafka_log_dirs(tmp_path, capsys, name, partitions, batches):
    path = kafka_copy(tmp_path, name)
    code, doc = run_json(capsys, "verify", path)
    assert code == 0, doc
    assert [f"{p['topic']}-{p['partition']}" for p in doc["partitions"]] == partitions
    assert doc["summary"]["batches"] == batches
    assert all(p["lineage_agrees"] is True for p in doc["partitions"] if p["batch_count"])


def test_verify_real_kafka_epochs_and_indexes(tmp_path, capsys):
    code, doc = run_json(capsys, "verify", kafka_copy(tmp_path, JEONG))
    (p,) = doc["partitions"]
    assert [(e["epoch"], e["start_offset"]) for e in p["lineage_from_batches"]] == \
        [(1, 0), (2, 298), (3, 354), (5, 711), (6, 712)]
    assert {w["kind"] for w in p["warnings"]} == {"index_missing"}      # not in the mirror
    code, doc = run_json(capsys, "verify", kafka_copy(tmp_path, BINAYA))
    (segment,) = doc["partitions"][0]["segments"]
    assert (segment["index_entries"], segment["time_index_entries"]) == (227, 228)
    assert doc["partitions"][0]["high_watermark"] == 2273


def test_verify_one_partition_dir_without_kafka_naming(tmp_path, capsys):
    code, out, _ = run(capsys, "verify", kafka_copy(tmp_path, MIXED))
    assert code == 0 and "15 batches, offsets 0..19" in out


# ---- recover -----------------------------------------------------------------------------------------

def test_recover_truncates_at_the_flipped_byte_and_reports(broker, capsys):
    log_path = broker / "orders-0" / f"{SEGMENT}.log"
    size = log_path.stat().st_size
    position, offset = flip_inside_batch(log_path, 22)
    code, out, _ = run(capsys, "recover", broker)
    assert code == 1
    assert "orders-0: CUT; log end offset 75 -> 66" in out
    assert (f"{log_path}, position {position}, offset {offset}: {size - position} bytes were truncated, "
            f"offsets from {offset} (3 batches)") in out
    assert log_path.stat().st_size == position
    assert run(capsys, "verify", broker)[0] == 0
    from storage import LogDir

    with LogDir.open(broker, LogConfig(fsync=False)) as logdir:     # the metadata store follows the log
        log = logdir.partition("orders", 0)
        assert log.log_end_offset == 66 and log.high_watermark == 66
    code, doc = run_json(capsys, "recover", broker)
    assert code == 0 and doc["changed"] is False and doc["truncated_bytes"] == 0


def test_recover_json_shape_and_dry_run(broker, capsys):
    log_path = broker / "orders-0" / f"{SEGMENT}.log"
    position, offset = flip_inside_batch(log_path, 10)
    before = snapshot(broker)
    code, doc = run_json(capsys, "recover", "--dry-run", broker)
    assert code == 1 and snapshot(broker) == before
    assert doc["dry_run"] is True and doc["changed"] is True and doc["metadata_updated"] is False
    (p,) = doc["partitions"]
    assert (p["log_end_offset_before"], p["log_end_offset"]) == (75, offset)
    (segment,) = p["segments"]
    assert segment["file"] == str(log_path)
    assert (segment["status"], segment["position"], segment["first_offset_removed"], segment["batches_removed"]) \
        == ("truncated", position, offset, 15)
    assert "CRC" in segment["reason"]
    assert p["epochs_before"] == [{"epoch": 0, "start_offset": 0}, {"epoch": 3, "start_offset": 60}]
    assert p["epochs_after"] == [{"epoch": 0, "start_offset": 0}]


def test_recover_deletes_the_segments_after_the_cut(tmp_path, capsys):
    config = LogConfig(segment_bytes=1024, index_interval_bytes=128, fsync=False)
    log = PartitionLog.open(tmp_path / "logs" / "t-0", config)
    for i in range(60):
        log.append_as_leader([b"value %d" % i * 4], leader_epoch=i // 20)
    bases = [s.base_offset for s in log.segments]
    log.close()
    assert len(bases) > 3
    first = tmp_path / "logs" / "t-0" / f"{bases[1]:020d}.log"
    position, offset = flip_inside_batch(first, 1)
    code, doc = run_json(capsys, "recover", tmp_path / "logs")
    assert code == 1
    statuses = [(s["base_offset"], s["status"]) for s in doc["partitions"][0]["segments"]]
    assert statuses == [(bases[0], "ok"), (bases[1], "truncated")] + [(b, "deleted") for b in bases[2:]]
    assert doc["segments_deleted"] == len(bases) - 2 and doc["partitions"][0]["log_end_offset"] == offset
    # the producer-state snapshot the roll wrote at the kept segment's base stays (the close
    # writes one at the new log end); those above the cut went
    assert sorted(os.listdir(tmp_path / "logs" / "t-0")) == sorted(
        [f"{b:020d}{ext}" for b in bases[:2] for ext in (".index", ".log", ".timeindex")] +
        [f"{bases[1]:020d}.snapshot", f"{offset:020d}.snapshot", "leader-epoch-checkpoint"])


def test_recover_real_kafka_log_dir_needs_no_marker(tmp_path, capsys):
    path = kafka_copy(tmp_path, BERKAY)                 # no .kafka_cleanshutdown
    code, out, _ = run(capsys, "recover", path)
    assert code == 0 and "recovered 3 partitions: 0 cut, 0 bytes truncated" in out
    assert not (path / "storage.mdb").exists()          # Kafka's files stay Kafka's
    assert run(capsys, "verify", path)[0] == 0          # indexes were rebuilt and trimmed
    assert (path / "topic-logx-001-0" / f"{SEGMENT}.index").exists()


def test_recover_flipped_byte_in_real_kafka_segment(tmp_path, capsys):
    path = kafka_copy(tmp_path, BINAYA)
    log_path = path / "auth_events-0" / f"{SEGMENT}.log"
    position, offset = flip_inside_batch(log_path, 1000)
    code, out, _ = run(capsys, "verify", path)
    assert code == 1 and f"problem: {log_path}, position {position}, offset {offset}: CRC mismatch" in out
    code, doc = run_json(capsys, "recover", path)
    assert code == 1
    (p,) = doc["partitions"]
    assert (p["log_end_offset_before"], p["log_end_offset"]) == (2273, offset)
    assert p["segments"][0]["position"] == position and p["segments"][0]["batches_removed"] == 2273 - 1000
    assert any("snapshot beyond the new log end offset" in note and "deleted" in note for note in p["notes"])
    assert run(capsys, "verify", path)[0] == 0


# ---- epochs ------------------------------------------------------------------------------------------

def test_epochs_text_and_json(broker, capsys):
    code, out, _ = run(capsys, "epochs", broker, "orders-0")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("orders-0 in ") and "log end offset 75, 25 batches" in lines[0]
    assert lines[1].split() == ["EPOCH", "CHECKPOINT", "START", "BATCHES", "START", "LAST", "OFFSET", "BATCHES"]
    assert lines[2].split() == ["0", "0", "0", "59", "20"] and lines[3].split() == ["3", "60", "60", "74", "5"]
    assert lines[-1] == "the checkpoint agrees with the batches"
    code, doc = run_json(capsys, "epochs", broker / "orders-0")         # the partition dir itself
    assert code == 0 and doc["agrees"] is True
    assert doc["checkpoint"] == [{"epoch": 0, "start_offset": 0}, {"epoch": 3, "start_offset": 60}]
    assert doc["batches"][1] == {"epoch": 3, "start_offset": 60, "last_offset": 74, "batch_count": 5}


def test_epochs_disagreement_and_malformed_checkpoint(broker, capsys):
    checkpoint = broker / "orders-0" / "leader-epoch-checkpoint"
    checkpoint.write_text("0\n1\n0 0\n")
    code, out, _ = run(capsys, "epochs", broker, "orders-0")
    assert code == 1 and "DISAGREES" in out and "lacks epoch 3" in out
    assert re.search(r"^3\s+-\s+60\s+74\s+5\s+<-$", out, re.M)
    checkpoint.write_text("0\n2\n0 0\n")
    code, out, _ = run(capsys, "epochs", broker, "orders-0")
    assert code == 1 and f"error: {checkpoint}: line 2: expected 2 entries but found 1" in out


def test_epochs_real_kafka_multi_epoch_log(tmp_path, capsys):
    code, doc = run_json(capsys, "epochs", kafka_copy(tmp_path, CHRIST), "__cluster_metadata-0")
    assert code == 0 and doc["agrees"] is True
    assert [(e["epoch"], e["start_offset"]) for e in doc["batches"]] == [(1, 0), (2, 5), (3, 6), (4, 7), (5, 8)]


# ---- dump-log ----------------------------------------------------------------------------------------

def test_dump_log_kafka_layout_on_our_segment(broker, capsys):
    log_path = broker / "orders-0" / f"{SEGMENT}.log"
    code, out, _ = run(capsys, "dump-log", "--files", log_path)
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {log_path}", "Log starting offset: 0"]
    batches = list(iter_batches(log_path.read_bytes()))
    assert len(lines) == 2 + len(batches)
    for line, batch in zip(lines[2:], batches):
        m = BATCH_LINE.match(line)
        assert m, line
        assert (int(m[1]), int(m[2]), int(m[3]), int(m[8]), int(m[11]), int(m[13]), int(m[15]), m[16]) == \
            (batch.base_offset, batch.last_offset, batch.record_count, batch.partition_leader_epoch,
             batch.position, batch.size_bytes, batch.crc, "true")
    code, out, _ = run(capsys, "dump-log", "--files", log_path, "--print-data-log")
    records = [line for line in out.splitlines() if line.startswith("|")]
    assert len(records) == 75
    assert re.match(r'^\| offset: 0 CreateTime: \d+ keySize: 10 valueSize: \d+ sequence: -1 headerKeys: \[\] '
                    r'key: customer-0 payload: \{"order": 0, "amount": 5\}$', records[0]), records[0]
    code, out, _ = run(capsys, "dump-log", "--files", log_path, "--deep-iteration")
    assert "key:" not in out and len([line for line in out.splitlines() if line.startswith("| offset: ")]) == 75


def test_dump_log_indexes_checkpoint_and_json(broker, capsys):
    part = broker / "orders-0"
    files = [part / f"{SEGMENT}.index", part / f"{SEGMENT}.timeindex", part / "leader-epoch-checkpoint"]
    code, out, err = run(capsys, "dump-log", "--files", ",".join(map(str, files)))
    assert code == 0 and err == ""
    assert re.search(r"^offset: \d+ position: \d+$", out, re.M)
    assert re.search(r"^timestamp: \d+ offset: \d+$", out, re.M)
    assert "epoch: 0 startOffset: 0\nepoch: 3 startOffset: 60" in out
    code, out, _ = run(capsys, "dump-log", "--index-sanity-check", "--files", *files[:2])
    assert code == 0 and out.count("passed sanity check.") == 2
    code, out, _ = run(capsys, "dump-log", "--verify-index-only", "--files", *files[:2])
    assert code == 0 and out.splitlines() == [f"Dumping {files[0]}", f"Dumping {files[1]}"]
    code, doc = run_json(capsys, "dump-log", "--deep-iteration", "--files", part / f"{SEGMENT}.log", *files)
    assert code == 0 and doc["ok"] is True
    assert [f["kind"] for f in doc["files"]] == ["log", "index", "timeindex", "leader-epoch-checkpoint"]
    log_doc = doc["files"][0]
    assert log_doc["log_starting_offset"] == 0 and len(log_doc["batches"]) == 25 and log_doc["trailing_bytes"] == 0
    assert log_doc["batches"][20]["partition_leader_epoch"] == 3 and len(log_doc["batches"][0]["records"]) == 3
    assert doc["files"][1]["mismatches"] == [] and doc["files"][1]["entries"]
    assert doc["files"][3]["entries"] == [{"epoch": 0, "start_offset": 0}, {"epoch": 3, "start_offset": 60}]


def test_dump_log_problems_exit_1(broker, capsys):
    import struct

    part = broker / "orders-0"
    log_path = part / f"{SEGMENT}.log"
    position, _offset = flip_inside_batch(log_path, 2)
    with open(log_path, "ab") as f:
        f.write(b"\0" * 10)            # a partial header: the end of data, as in Kafka
    code, out, _ = run(capsys, "dump-log", "--files", log_path)
    assert code == 1
    assert f"position: {position} " in out and "isvalid: false" in out
    assert out.splitlines()[-1] == f"Found 10 invalid bytes at the end of {SEGMENT}.log"
    index = bytearray((part / f"{SEGMENT}.index").read_bytes())
    struct.pack_into(">ii", index, 0, 1, 0)
    (part / f"{SEGMENT}.index").write_bytes(bytes(index))
    code, out, err = run(capsys, "dump-log", "--files", part / f"{SEGMENT}.index")
    assert code == 1 and f"Mismatches in :{part / SEGMENT}.index\n  Index offset: 1, log offset: 2" in err
    code, out, err = run(capsys, "dump-log", "--files", part / "missing.log")
    assert code == 1 and err.strip() == f"error: {part / 'missing.log'}: no such file"


def test_dump_log_corrupt_size_is_one_line_naming_file_and_position(broker, capsys):
    log_path = broker / "orders-0" / f"{SEGMENT}.log"
    data = bytearray(log_path.read_bytes())
    batch = list(iter_batches(bytes(data)))[4]
    data[batch.position + 8:batch.position + 12] = (3).to_bytes(4, "big")
    log_path.write_bytes(bytes(data))
    code, out, err = run(capsys, "dump-log", "--files", log_path)
    assert code == 1
    assert err.splitlines() == [f"error: {log_path}, position {batch.position}, offset {batch.base_offset}: "
                                f"corrupt batch: size field 3 is out of range"]
    assert len([line for line in out.splitlines() if line.startswith("baseOffset")]) == 4


def test_dump_log_real_kafka_files(tmp_path, capsys):
    part = kafka_copy(tmp_path, BINAYA) / "auth_events-0"
    code, out, err = run(capsys, "dump-log", "--files", part / f"{SEGMENT}.index", part / f"{SEGMENT}.timeindex")
    assert code == 0 and err == ""
    assert len(re.findall(r"^offset: \d+ position: \d+$", out, re.M)) == 227
    assert len(re.findall(r"^timestamp: \d+ offset: \d+$", out, re.M)) == 228
    assert "offset: 2270 position: 1007650" in out
    code, out, _ = run(capsys, "dump-log", "--files", part / f"{SEGMENT}.log")
    lines = out.splitlines()
    assert len(lines) == 2 + 2273 and all(BATCH_LINE.match(line) for line in lines[2:])
    cooler = kafka_copy(tmp_path, COOLER)
    code, out, _ = run(capsys, "dump-log", "--deep-iteration", "--files",
                       cooler / "__cluster_metadata-0" / f"{SEGMENT}.log",
                       cooler / "my-topic-0" / f"{SEGMENT}.index",
                       cooler / "my-topic-0" / "00000000000000000001.snapshot")
    assert code == 0
    assert "isControl: true" in out and "controlType: LEADER_CHANGE(2)" in out
    assert f"{cooler / 'my-topic-0' / SEGMENT}.index is empty." in out
    code, out, _ = run(capsys, "dump-log", "--print-data-log", "--files", cooler / "my-topic-0" / f"{SEGMENT}.log")
    assert out.splitlines()[-1].endswith("headerKeys: [] key: key payload: Hello, Kafka!")


def test_dump_log_legacy_magic_1(tmp_path, capsys):
    log_path = kafka_copy(tmp_path, MIXED) / f"{SEGMENT}.log"
    code, out, _ = run(capsys, "dump-log", "--print-data-log", "--files", log_path)
    assert code == 0
    lines = out.splitlines()
    assert re.match(r"^offset: 0 position: 0 CreateTime: \d+ size: 72 magic: 1 compresscodec: none crc: \d+ "
                    r"isvalid: true$", lines[2])
    assert re.match(r"^\| offset: 0 CreateTime: \d+ keySize: 5 valueSize: 33 crc: \d+ isvalid: true key: \w+ "
                    r"payload: \{", lines[3])
    assert sum(1 for line in lines if line.startswith("baseOffset:")) == 8
    assert sum(1 for line in lines if line.startswith("offset:")) == 7


# ---- usage, entry points -------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [[], ["nope"], ["verify"], ["dump-log"], ["verify", "/does/not/exist"],
                                  ["epochs", "/does/not/exist", "t-0"], ["verify", "--bogus", "."]])
def test_usage_errors_exit_2(argv, capsys):
    code, _out, err = run(capsys, *argv)
    assert code == 2 and "usage error" in err


def test_epochs_unknown_partition_is_a_usage_error(broker, capsys):
    code, _out, err = run(capsys, "epochs", broker, "nope-0")
    assert code == 2 and "no partition nope-0" in err and "orders-0" in err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "dump-log" in capsys.readouterr().out


def test_python_dash_m_and_no_spark_import(broker):
    code = ("import sys; from storage.__main__ import main; rc = main(['verify', sys.argv[1], '--json']); "
            "assert 'pyspark' not in sys.modules; sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code, str(broker)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
    result = subprocess.run([sys.executable, "-m", "storage", "epochs", str(broker), "orders-0"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "agrees" in result.stdout


def test_audit_still_dispatches_to_the_spark_module(capsys):
    pytest.importorskip("xxhash")
    code = main(["audit", "--help"])
    assert code == 0
    assert "DIR" in capsys.readouterr().out


def test_local_comparison_gives_the_audits_verdicts_on_a_faulted_fleet(tmp_path):
    """One replica comparison: the local table (demo --no-spark) and the Spark audit share the
    verdict and the conflict rule (storage.inspect.verdict, compare.first_conflict).  On a
    generated fleet with every fault kind, the local verdicts and first divergent offsets are the
    ones the generator expects from the audit."""
    from storage.spark.generate import generate

    fleet = generate(str(tmp_path / "fleet"), brokers=3, topics=1, partitions=6, batches=40, records=3,
                     segment_bytes=4096, inject={"hidden": 1, "missing": 1, "tail": 1, "corrupt": 1, "lineage": 1},
                     seed=7)
    _text, results = local_comparison(fleet["brokers"])
    got = {(r["topic"], r["partition"]): (r["verdict"], r["first_divergent_offset"]) for r in results}
    for p in fleet["partitions"]:
        verdict, first = got[(p["topic"], p["partition"])]
        assert verdict == p["expected_verdict"], (p, verdict)
        if p["injected"] in ("hidden", "missing", "tail"):
            assert first == p["expected_first_divergent_offset"], (p, first)


def test_dump_log_of_a_producer_snapshot_the_log_wrote(tmp_path, capsys):
    """kafka-dump-log's snapshot lines (DumpLogSegments.dumpProducerIdSnapshot), read with the
    engine's own snapshot reader (storage.log.producer.decode_snapshot)."""
    from storage import build_batch

    with PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False)) as log:
        log.append_as_leader(build_batch([b"a", b"b", b"c"], producer_id=42, producer_epoch=3, base_sequence=0), 0)
        end = log.log_end_offset
    path = tmp_path / "t-0" / f"{end:020d}.snapshot"
    code, out, _ = run(capsys, "dump-log", "--files", path)
    assert code == 0
    assert re.search(r"^producerId: 42 producerEpoch: 3 coordinatorEpoch: -1 currentTxnFirstOffset: -1 "
                     r"lastTimestamp: \d+ firstSequence: 0 lastSequence: 2 lastOffset: 2 offsetDelta: 2 "
                     r"timestamp: \d+$", out, re.M), out
    path.write_bytes(path.read_bytes()[:-3])
    code, out, err = run(capsys, "dump-log", "--files", path)
    assert code != 0 and str(path) in out + err


def test_dump_log_of_a_transaction_index(tmp_path, capsys):
    """kafka-dump-log's .txnindex lines (DumpLogSegments.dumpTxnIndex)."""
    from storage import build_batch

    with PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False)) as log:
        log.append_as_leader(build_batch([b"a", b"b"], producer_id=8, producer_epoch=1, base_sequence=0,
                                         is_transactional=True), 0)
        log.append_txn_marker(8, 1, False, coordinator_epoch=0, leader_epoch=0)
    path = tmp_path / "t-0" / f"{0:020d}.txnindex"
    code, out, _ = run(capsys, "dump-log", "--files", path)
    assert code == 0 and "version: 0 producerId: 8 firstOffset: 0 lastOffset: 2 lastStableOffset: 3" in out
    code, out, _ = run(capsys, "dump-log", "--files", path, "--print-data-log")
    code, doc = run_json(capsys, "dump-log", "--files", tmp_path / "t-0" / f"{0:020d}.log")
    batches = doc["files"][0]["batches"]
    assert batches[-1]["is_control"] is True and batches[-1]["producer_id"] == 8
    with open(path, "ab") as f:
        f.write(b"\x00" * 5)
    code, out, err = run(capsys, "dump-log", "--files", path)
    assert code == 1 and "5 bytes after the last whole 34-byte entry" in err


def test_demo_ends_with_a_compacted_topic(capsys):
    code, out, _err = run(capsys, "demo", "--no-spark", "--no-wire")
    assert code == 0
    chapter = out[out.index("10. A compacted topic"):]
    assert "31 records -> 5, offsets kept (with gaps)" in chapter
    assert "offset 30: sku-4 = (tombstone" in chapter
    assert "verify: 0 problems, epoch lineage agrees" in chapter


def test_demo_ends_with_kafka_clients_over_the_wire(capsys):
    pytest.importorskip("kafka", reason="the wire chapter needs kafka-python (the [clients] extra)")
    pytest.importorskip("kio", reason="the wire chapter needs kio")
    code, out, _err = run(capsys, "demo", "--no-spark")
    assert code == 0, out
    chapter = out[out.index("11. Kafka clients over the wire"):]
    assert "produced 100 keyed payments (idempotent, acks=all): offsets 0..99 acknowledged" in chapter
    assert "killed with SIGKILL" in chapter and "recovered here (KIP-966 unclean recovery)" in chapter
    assert "resumed at its committed offset 60 and read the other 40: all 100 acknowledged payments" in chapter
    cluster = out[out.index("12. A cluster of processes"):]
    assert "the leader, was killed with SIGKILL" in cluster
    assert re.search(r"The producer followed the new leader, broker \d \(leader epoch 1\)", cluster), cluster
    assert "All 300 acknowledged entries are there, each once, in order." in cluster
    assert "finds the replicas of ledger-0 consistent" in cluster


def test_version(capsys):
    from storage import __version__

    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"storage (kafka-partition-storage) {__version__}"
