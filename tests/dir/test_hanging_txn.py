"""Aborting a hanging transaction (storage/dir/hanging.py, storage/cli/abort_txn.py; issue 30 item
7): Kafka's KIP-664 `kafka-transactions.sh abort` -- the open transaction's producer id and epoch
(DescribeProducers), then an ABORT marker (WriteTxnMarkers) -- for one log and for a stopped
broker's log dir, ours or Kafka's."""
import json
import os
import subprocess
import sys

import pytest
from conftest import TESTDATA

from storage import LogConfig, LogDir, PartitionLog, Record, build_batch, iter_batches
from storage.cli import main
from storage.core import errors
from storage.dir import hanging

EPOCH = 3
CONFIG = LogConfig(fsync=False)


def txn_batch(pid, epoch, seq, count, *, keys=None):
    records = [Record(key=b"k%d" % k, value=b"txn") for k in keys] if keys else [b"txn"] * count
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def hang(log, pid=42, epoch=7, count=3):
    """A transaction that no marker will end: returns its first offset."""
    return log.append_as_leader(txn_batch(pid, epoch, 0, count), EPOCH).first_offset


@pytest.fixture
def log(tmp_path):
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as opened:
        yield opened


def test_abort_moves_the_last_stable_offset_and_read_committed_passes_it(log):
    log.append_as_leader([b"before"], EPOCH)
    first = hang(log)
    log.append_as_leader([b"after"], EPOCH)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == first                              # held back by the hanging txn
    assert hanging.open_transactions(log) == [hanging.OpenTxn(42, 7, -1, first, 2, log.producer_state.last_entry(42)
                                                              .last_timestamp)]
    assert hanging.scan_open_transactions(log.batches()) == hanging.open_transactions(log)   # --dry-run's
    info = hanging.abort_transaction(log, 42, 7)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == info.last_offset + 1
    assert hanging.scan_open_transactions(log.batches()) == []
    assert hanging.open_transactions(log) == []
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in
            log.collect_aborted_transactions(0, log.log_end_offset)] == [(42, first, info.first_offset)]
    committed = list(iter_batches(log.read(0, 1 << 20, isolation="read_committed")))
    assert committed[-1].is_control and committed[-1].partition_leader_epoch == EPOCH
    marker = committed[-1]
    assert (marker.producer_id, marker.producer_epoch) == (42, 7)
    assert int.from_bytes(bytes(marker.records()[0].key)[2:4], "big") == 0          # ABORT


def test_abort_refuses_a_producer_without_an_open_transaction_and_a_stale_epoch(log):
    with pytest.raises(errors.InvalidTxnStateError, match="producer 42 has no open transaction"):
        hanging.abort_transaction(log, 42, 7)
    first = hang(log)
    with pytest.raises(errors.InvalidProducerEpochError, match="epoch 6 is stale"):
        hanging.abort_transaction(log, 42, 6)
    with pytest.raises(errors.InvalidProducerEpochError, match="not the producer's epoch"):
        hanging.abort_transaction(log, 42, 8)
    with pytest.raises(errors.InvalidTxnStateError, match="no open transaction begins at offset 1"):
        hanging.find_open_transaction(log, first + 1)
    assert log.log_end_offset == 3                                      # nothing written by a refusal
    hanging.abort_transaction(log, 42, 7)
    with pytest.raises(errors.InvalidTxnStateError):                   # aborted once: nothing left
        hanging.abort_transaction(log, 42, 7)


def test_the_cleaner_goes_on_after_the_abort(tmp_path):
    config = LogConfig(fsync=False, cleanup_policy="compact", segment_bytes=300)
    with PartitionLog.open(tmp_path / "c-0", config) as log:
        log.append_as_leader(txn_batch(42, 7, 0, 3, keys=[1, 2, 3]), EPOCH)
        for i in range(20):
            log.append_as_leader([cleaner_record(i % 2, i)], EPOCH)
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        stats = log.compact(now_ms=0)
        assert stats.end_offset == 0                                    # stuck at the hanging txn
        hanging.abort_transaction(log, 42, 7)
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        stats = log.compact(now_ms=0)
        assert stats.end_offset > 3
        keys = [bytes(r.key) for b in log.batches() if not b.is_control for r in b.records()]
        assert b"k1" not in keys                                         # the aborted records went


def cleaner_record(key, value):
    return Record(key=str(key).encode(), value=str(value).encode())


# ---- the CLI on a stopped broker's dir -----------------------------------------------------------

def stopped_dir(tmp_path):
    path = tmp_path / "broker"
    with LogDir.open(path, CONFIG) as logdir:
        log = logdir.partition("orders", 0)
        log.append_as_leader([b"a"], EPOCH)
        first = hang(log)
        log.append_as_leader([b"b"], EPOCH)
        log.update_high_watermark(log.log_end_offset)
    return path, first


def test_cli_dry_run_lists_and_changes_nothing(tmp_path, capsys):
    path, first = stopped_dir(tmp_path)
    before = {n: (path / "orders-0" / n).read_bytes() for n in os.listdir(path / "orders-0")}
    assert main(["abort-txn", str(path), "--topic", "orders", "--partition", "0", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(t["producer_id"], t["producer_epoch"], t["first_offset"]) for t in out["open_transactions"]] == \
        [(42, 7, first)]
    assert out["aborted"] is None
    assert {n: (path / "orders-0" / n).read_bytes() for n in os.listdir(path / "orders-0")} == before


@pytest.mark.parametrize("how", ["start-offset", "producer"])
def test_cli_aborts_and_the_reopened_dir_has_moved_on(tmp_path, capsys, how):
    path, first = stopped_dir(tmp_path)
    args = ["--start-offset", str(first)] if how == "start-offset" else ["--producer-id", "42", "--producer-epoch", "7"]
    assert main(["abort-txn", str(path), "--topic", "orders", "--partition", "0", *args]) == 0
    out = capsys.readouterr().out
    assert f"aborted producer 42 (epoch 7), open from offset {first}" in out
    assert os.path.exists(path / ".kafka_cleanshutdown")               # still a clean, stopped dir
    with LogDir.open(path, CONFIG) as logdir:
        log = logdir.partition("orders", 0)
        assert hanging.open_transactions(log) == []
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == log.log_end_offset == 6         # a, the txn (3), b, the marker
    assert main(["abort-txn", str(path), "--topic", "orders", "--partition", "0", *args]) == 1
    assert "no open transaction" in capsys.readouterr().err


def test_cli_refuses_a_live_dir_naming_the_holder(tmp_path, capsys):
    path, first = stopped_dir(tmp_path)
    code = ("import sys, time; from storage import LogDir, LogConfig\n"
            f"d = LogDir.open({str(path)!r}, LogConfig(fsync=False)); print('open', flush=True); time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout.readline().strip() == "open"
        assert main(["abort-txn", str(path), "--topic", "orders", "--partition", "0",
                     "--start-offset", str(first)]) == 1
        err = capsys.readouterr().err
        assert "locked by" in err and f"process {holder.pid}" in err, err
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_cli_usage_errors(tmp_path, capsys):
    path, _first = stopped_dir(tmp_path)
    assert main(["abort-txn", str(path), "--topic", "orders", "--partition", "0"]) == 2
    assert main(["abort-txn", str(path), "--topic", "orders", "--partition", "0", "--producer-id", "42"]) == 2
    assert main(["abort-txn", str(path), "--topic", "nope", "--partition", "0", "--dry-run"]) == 2
    assert "nope-0" in capsys.readouterr().err


def test_cli_on_a_real_kafka_dir(tmp_path, capsys):
    """A dir a real Kafka broker wrote (no transactions in our test data): the dry run lists
    none, an abort is refused, and nothing is added to the dir (no storage.mdb)."""
    import shutil
    source = str(TESTDATA / "kafka-real" / "binaya-sharma__soc-streaming-detection")
    found = [r for r, dirs, _ in os.walk(source) if "auth_events-0" in dirs] if \
        os.path.isdir(source) else []
    if not found:
        pytest.skip("no real Kafka test data here")
    shutil.copytree(os.path.normpath(found[0]), tmp_path / "kafka", ignore=shutil.ignore_patterns("*.mdb"))
    names = sorted(set(os.listdir(tmp_path / "kafka")) - {".lock"})     # Kafka makes .lock too
    assert main(["abort-txn", str(tmp_path / "kafka"), "--topic", "auth_events", "--partition", "0",
                 "--dry-run"]) == 0
    assert "no open transaction" in capsys.readouterr().out
    assert main(["abort-txn", str(tmp_path / "kafka"), "--topic", "auth_events", "--partition", "0",
                 "--producer-id", "1", "--producer-epoch", "0"]) == 1
    assert sorted(set(os.listdir(tmp_path / "kafka")) - {".lock"}) == names


def test_cli_aborts_in_a_dir_in_kafkas_layout(tmp_path, capsys):
    """A dir laid out as a Kafka broker leaves it (Kafka's checkpoint files, a clean-shutdown
    marker, no storage.mdb) with a hanging transaction: the abort writes the marker, adds no
    file to the log dir and leaves Kafka's checkpoint files as they were."""
    path = tmp_path / "kafka"
    with PartitionLog.open(path / "orders-0", CONFIG) as log:
        log.append_as_leader([b"a"], EPOCH)
        first = hang(log)
        log.update_high_watermark(log.log_end_offset)
        end = log.log_end_offset
    checkpoints = {"recovery-point-offset-checkpoint": f"0\n1\norders 0 {end}\n",
                   "replication-offset-checkpoint": f"0\n1\norders 0 {end}\n",
                   "log-start-offset-checkpoint": "0\n1\norders 0 0\n", ".kafka_cleanshutdown": ""}
    for name, text in checkpoints.items():
        (path / name).write_text(text)
    names = sorted(os.listdir(path))
    assert main(["abort-txn", str(path), "--topic", "orders", "--partition", "0", "--start-offset", str(first)]) == 0
    assert f"aborted producer 42 (epoch 7), open from offset {first}: ABORT marker at offset {end}" in \
        capsys.readouterr().out
    assert sorted(set(os.listdir(path)) - {".lock"}) == names
    assert {name: (path / name).read_text() for name in checkpoints} == checkpoints
    with PartitionLog.open(path / "orders-0", CONFIG, clean_shutdown=True, high_watermark=end + 1) as log:
        assert log.log_end_offset == end + 1 and hanging.open_transactions(log) == []
        assert log.last_stable_offset == end + 1


def test_cli_refuses_a_damaged_partition_and_keeps_the_dir_clean(tmp_path, capsys):
    path, first = stopped_dir(tmp_path)
    segment = path / "orders-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0x01                                     # a CRC failure below the recovery point
    segment.write_bytes(bytes(data))
    marker = (path / ".kafka_cleanshutdown").read_bytes()
    assert main(["abort-txn", str(path), "--topic", "orders", "--partition", "0", "--start-offset", str(first)]) == 1
    err = capsys.readouterr().err
    assert "damaged, nothing written" in err and "CRC" in err, err
    assert (path / ".kafka_cleanshutdown").read_bytes() == marker and segment.read_bytes() == bytes(data)
    os.unlink(path / ".kafka_cleanshutdown")             # a crashed broker's dir: refused, nothing written
    segment.write_bytes(bytes(data[:-1]))
    assert main(["abort-txn", str(path), "--topic", "orders", "--partition", "0", "--start-offset", str(first)]) == 1
    assert "did not stop cleanly" in capsys.readouterr().err
    assert segment.read_bytes() == bytes(data[:-1])
