"""LogDir loading and recovery: Kafka's LogLoaderTest / LogSegmentTest scenarios (docs/kafka-formats.md
9.2-9.3) in our words, the clean-shutdown marker, the epoch cache repair, Kafka dir import."""
import dataclasses
import errno
import json
import os
import shutil

import pytest
from conftest import TESTDATA

from storage import LogConfig, LogDir, Record, build_batch, iter_batches
from storage.core import errors
from storage.core import io as sio
from storage.dir.logdir import CLEAN_SHUTDOWN_FILE, parse_partition_dir
from storage.sim import invariants

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=300, segment_index_bytes=1200, fsync=False)


def crash(logdir):
    """A process crash: nothing sealed, trimmed or checkpointed; no marker."""
    for log in logdir.logs().values():
        for segment in log.segments:
            segment.close()
    logdir.meta.close()


def fill(log, count=100, epoch=0, size=100, t0=1_000_000):
    for i in range(count):
        log.append_as_leader([Record(value=bytes([65 + i % 26]) * size, timestamp=t0 + i)], epoch)


def values(log, start=None):
    return [(r.offset, r.value) for b in log.batches(start) for r in b.records()]


def index_state(log):
    return [(s.base_offset, s.offset_index_entries(), s.time_index_entries()) for s in log.segments]


def remove_marker(path):
    os.unlink(os.path.join(path, CLEAN_SHUTDOWN_FILE))


def test_partition_dir_names():
    assert parse_partition_dir("orders-0") == ("orders", 0)
    assert parse_partition_dir("topic-logx-001-12") == ("topic-logx-001", 12)
    assert parse_partition_dir("__cluster_metadata-0") == ("__cluster_metadata", 0)
    for name in ("orders", "orders-x", "orders-0.abc-delete", "orders-0.abc-future", "orders-1-stray"):
        assert parse_partition_dir(name) is None


def test_marker_written_at_close_and_deleted_at_open(tmp_path):
    with LogDir.open(tmp_path, CONFIG, broker_epoch=7) as logdir:
        assert not logdir.had_clean_shutdown
        fill(logdir.partition("t", 0), 10)
    assert json.loads((tmp_path / CLEAN_SHUTDOWN_FILE).read_text()) == {"version": 0, "brokerEpoch": 7}
    logdir = LogDir.open(tmp_path, CONFIG)
    assert logdir.had_clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()     # deleted at once (KAFKA-10471)
    crash(logdir)                                           # a crash while "loaded"
    again = LogDir.open(tmp_path, CONFIG)
    assert not again.had_clean_shutdown
    assert again.partition("t", 0).log_end_offset == 10
    again.close()


@pytest.mark.parametrize("recovery_point_at_end", [True, False])
def test_log_recovers_to_correct_offset(tmp_path, recovery_point_at_end):
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    fill(log, 100)
    if recovery_point_at_end:
        logdir.flush()
    else:
        log.recovery_point = 10
        logdir.checkpoint()
    leo, indexes = log.log_end_offset, index_state(log)
    checkpointed = log.recovery_point
    crash(logdir)
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    assert log.log_end_offset == leo == 100
    assert index_state(log)[:-1] == indexes[:-1]
    active = index_state(log)[-1]
    assert active[:2] == indexes[-1][:2]
    assert log.recovery_point == min(checkpointed, leo)      # unchanged until a flush
    logdir.flush()
    assert log.recovery_point == leo
    logdir.close()


def test_index_files_deleted_are_rebuilt(tmp_path):
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    fill(log, 100)
    logdir.close()
    indexes = None
    logdir = LogDir.open(tmp_path, CONFIG)
    indexes = index_state(logdir.partition("t", 0))
    logdir.close()
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith((".index", ".timeindex")):
            os.unlink(tmp_path / "t-0" / name)
    remove_marker(tmp_path)
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    assert index_state(log) == indexes
    for offset in range(100):
        assert list(iter_batches(log.read(offset, 1)))[0].base_offset == offset
    for i in range(100):
        assert log.offset_for_timestamp(1_000_000 + i).offset == i
    logdir.close()


@pytest.mark.parametrize("clean", [True, False])
def test_corrupt_index_files_are_rebuilt(tmp_path, clean):
    logdir = LogDir.open(tmp_path, CONFIG)
    fill(logdir.partition("t", 0), 100)
    logdir.close()
    logdir = LogDir.open(tmp_path, CONFIG)
    indexes = index_state(logdir.partition("t", 0))
    logdir.close()
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith((".index", ".timeindex")):
            (tmp_path / "t-0" / name).write_bytes(b"\x07\x07")
    if not clean:
        remove_marker(tmp_path)
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    assert logdir.had_clean_shutdown == clean
    assert index_state(log) == indexes
    assert values(log) == [(i, bytes([65 + i % 26]) * 100) for i in range(100)]
    logdir.close()


def test_bogus_index_files_and_obsolete_files_are_removed(tmp_path):
    logdir = LogDir.open(tmp_path, CONFIG)
    fill(logdir.partition("t", 0), 5)
    logdir.close()
    part = tmp_path / "t-0"
    for name in (f"{5000:020d}.index", f"{5000:020d}.timeindex", f"{77:020d}.log.deleted",
                 f"{88:020d}.index.cleaned", f"{99:020d}.log.swap"):
        (part / name).write_bytes(b"junk")
    logdir = LogDir.open(tmp_path, CONFIG)
    names = sorted(os.listdir(part))
    assert not any(n.startswith(f"{5000:020d}") or n.endswith((".deleted", ".cleaned", ".swap")) for n in names)
    active = logdir.partition("t", 0).active_segment
    # The active one holds exactly its entries: its index is written by pwrite, never
    # pre-allocated and written through a mapping.
    assert os.path.getsize(active.index_path) == 8 * len(active.offset_index_entries())
    logdir.close()


def test_reopen_then_truncate(tmp_path):
    logdir = LogDir.open(tmp_path, CONFIG)
    fill(logdir.partition("t", 0), 100)
    crash(logdir)
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    assert len(log.segments) > 5
    log.truncate_to(3)
    assert len(log.segments) == 1 and log.log_end_offset == 3
    assert values(log) == [(i, bytes([65 + i]) * 100) for i in range(3)]
    logdir.close()


def test_garbage_appended_to_active_log_and_index_is_cut(tmp_path):
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    fill(log, 100)
    log.recovery_point = 50
    logdir.checkpoint()
    active = log.active_segment
    expected = values(log)
    crash(logdir)
    with open(active.log_path, "ab") as f:
        f.write(os.urandom(333))
    with open(active.index_path, "ab") as f:     # created if the crash came before its first flush
        f.write(os.urandom(16))
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    assert values(log) == expected and log.log_end_offset == 100
    assert logdir.recovery_report[("t", 0)][0][1] == 333
    logdir.close()


def test_clean_shutdown_skips_recovery_even_at_recovery_point_zero(tmp_path):
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    fill(log, 30)
    logdir.close()
    logdir = LogDir.open(tmp_path, CONFIG)
    logdir.meta.put_partitions({("t", 0): logdir.meta.get_partition("t", 0)._replace(recovery_point=0)})
    logdir.close()
    # A bad CRC in the first batch would cut everything in a recovery: a clean open trusts it.
    with open(tmp_path / "t-0" / f"{0:020d}.log", "r+b") as f:
        f.seek(70)
        f.write(b"\xee")
    logdir = LogDir.open(tmp_path, CONFIG)
    assert logdir.had_clean_shutdown and logdir.recovery_report == {}
    assert logdir.partition("t", 0).log_end_offset == 30
    logdir.close()


def test_epoch_cache_is_rebuilt_from_batches_after_a_crash(tmp_path):
    # LogLoaderTest.testLogRecoversForLeaderEpoch
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    for offset, epoch in [(0, 1), (1, 2), (2, 2), (3, 3)]:
        log.append_as_follower(build_batch([b"v"], base_offset=offset, partition_leader_epoch=epoch))
    assert [tuple(e) for e in log.epoch_cache.entries] == [(1, 0), (2, 1), (3, 3)]
    log.epoch_cache.truncate_from_end(2)
    assert [tuple(e) for e in log.epoch_cache.entries] == [(1, 0), (2, 1)]
    crash(logdir)
    logdir = LogDir.open(tmp_path, CONFIG)
    assert [tuple(e) for e in logdir.partition("t", 0).epoch_cache.entries] == [(1, 0), (2, 1), (3, 3)]
    logdir.close()


def test_epoch_checkpoint_ahead_of_the_log_is_truncated(tmp_path):
    # The checkpoint reached the disk, the batches of the last epochs did not (M20).
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    fill(log, 10, epoch=0)
    crash(logdir)
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_bytes(b"0\n3\n0 0\n4 10\n5 12\n")
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    assert [tuple(e) for e in log.epoch_cache.entries] == [(0, 0)]
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_bytes() == b"0\n1\n0 0\n"
    logdir.close()


def test_malformed_epoch_checkpoint_is_rebuilt_from_the_log(tmp_path):
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    for epoch in range(4):
        fill(log, 10, epoch=epoch)
    logdir.close()
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_bytes(b"0\n7\n0 0\n")
    logdir = LogDir.open(tmp_path, CONFIG)   # clean: the segments are trusted, the checkpoint is not
    log = logdir.partition("t", 0)
    assert [tuple(e) for e in log.epoch_cache.entries] == [(0, 0), (1, 10), (2, 20), (3, 30)]
    assert any("leader-epoch-checkpoint rebuilt" in r[2] for r in logdir.recovery_report[("t", 0)])
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_bytes() == b"0\n4\n0 0\n1 10\n2 20\n3 30\n"
    logdir.close()


def test_log_end_below_start_after_reopen(tmp_path):
    # LogLoaderTest.testLogEndLessThanStartAfterReopen
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    fill(log, 3, size=10)
    log.update_high_watermark(3)
    log.increment_log_start_offset(3)
    log.roll()
    logdir.checkpoint()
    crash(logdir)
    part = tmp_path / "t-0"
    for name in os.listdir(part):
        if name.endswith(".log") and name != f"{0:020d}.log":
            os.unlink(part / name)
    with open(part / f"{0:020d}.log", "r+b") as f:   # garbage in the segment below the start
        f.seek(20)
        f.write(b"\xff" * 8)
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert [s.base_offset for s in log.segments] == [3]
    assert {n for n in os.listdir(part) if not n.startswith("leader")} == {
        f"{3:020d}.log", f"{3:020d}.index", f"{3:020d}.timeindex"}
    log.append_as_leader([b"fresh"], 1)
    logdir.close()


def test_empty_active_segment_without_index_files(tmp_path):
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    fill(log, 20)
    log.roll()
    base = log.active_segment.base_offset
    logdir.flush()
    crash(logdir)
    os.unlink(tmp_path / "t-0" / f"{base:020d}.index")
    os.unlink(tmp_path / "t-0" / f"{base:020d}.timeindex")
    logdir = LogDir.open(tmp_path, CONFIG)
    log = logdir.partition("t", 0)
    assert log.log_end_offset == 20 == log.recovery_point
    logdir.close()


@pytest.mark.parametrize("epoch_flush", ["sync", "deferred"])
def test_both_flush_modes_recover_the_same_cache(tmp_path, epoch_flush):
    """Page-cache loss, emulated: what was written after the last flush is lost -- the .log
    back to its flushed size, the epoch file back to its last written state."""
    config = LogConfig(segment_bytes=100_000, fsync=False, epoch_flush=epoch_flush)
    logdir = LogDir.open(tmp_path, config)
    log = logdir.partition("t", 0)
    for epoch in range(3):
        fill(log, 5, epoch=epoch)
    logdir.flush()
    flushed_size = log.active_segment.size
    flushed_cache = (tmp_path / "t-0" / "leader-epoch-checkpoint").read_bytes()
    for epoch in range(3, 6):
        fill(log, 5, epoch=epoch)
    after_cache = (tmp_path / "t-0" / "leader-epoch-checkpoint").read_bytes()
    assert (after_cache == flushed_cache) == (epoch_flush == "deferred")
    path = log.active_segment.log_path
    crash(logdir)
    # S1: the unflushed tail of the log is gone; the epoch file keeps whatever was fsync'd.
    os.truncate(path, flushed_size)
    logdir = LogDir.open(tmp_path, config)
    log = logdir.partition("t", 0)
    assert log.log_end_offset == 15
    assert [tuple(e) for e in log.epoch_cache.entries] == [(0, 0), (1, 5), (2, 10)]
    logdir.close()


def test_deferred_epoch_file_is_flushed_before_the_segment(tmp_path):
    import storage.core.io as sio

    order = []

    class Watch(sio.PosixIO):
        def rename(self, source, target):
            order.append(os.path.basename(target))
            return super().rename(source, target)

        def fsync(self, fd, flags=0):
            order.append("fsync")
            return super().fsync(fd, flags)

    config = LogConfig(fsync=False, epoch_flush="deferred")
    with sio.using(Watch()):
        logdir = LogDir.open(tmp_path, config)
        log = logdir.partition("t", 0)
        order.clear()
        log.append_as_leader([b"x"], 4)
        assert "leader-epoch-checkpoint" not in order
        log.flush()
        assert order.index("leader-epoch-checkpoint") < len(order) - 1
        assert order[order.index("leader-epoch-checkpoint") + 1:].count("fsync") >= 1
        logdir.close()


def test_recovery_decision_table(tmp_path):
    """marker x offsets known: only an unclean open recovers, from the recovery point."""
    def build(path):
        logdir = LogDir.open(path, CONFIG)
        fill(logdir.partition("t", 0), 40)
        logdir.flush()
        return logdir

    rows = []
    for marker in (True, False):
        for known in (True, False):
            path = tmp_path / f"{marker}-{known}"
            logdir = build(path)
            seg = logdir.partition("t", 0).segments[0].log_path
            if marker:
                logdir.close()
            else:
                crash(logdir)
            if not known:
                os.unlink(path / "storage.mdb")
            with open(seg, "r+b") as f:          # a bad CRC in the first segment
                f.seek(70)
                f.write(b"\x00\x01")
            reopened = LogDir.open(path, CONFIG)
            rows.append((marker, known, reopened.partition("t", 0).log_end_offset))
            reopened.close()
    # known offsets: recovery starts at the recovery point (40), the first segment is not scanned
    assert rows == [(True, True, 40), (True, False, 40), (False, True, 40), (False, False, 0)]


@pytest.mark.parametrize("relative,partition", [
    ("binaya-sharma__soc-streaming-detection/@7773d1f/kafka-data", ("auth_events", 0)),
    ("cooler-SAI__go-KafkaProject/@edbccbe/kafka-data", ("__cluster_metadata", 0)),
])
def test_real_kafka_dir_rebuilds_byte_identical_indexes(tmp_path, relative, partition):
    source = TESTDATA / "kafka-real" / relative
    copy = tmp_path / "logs"
    shutil.copytree(source, copy)
    part = copy / f"{partition[0]}-{partition[1]}"
    originals = {n: (part / n).read_bytes() for n in os.listdir(part) if n.endswith((".index", ".timeindex"))}
    assert originals
    for name in originals:
        os.unlink(part / name)
    logdir = LogDir.open(copy, LogConfig(fsync=False))
    assert logdir.had_clean_shutdown
    logdir.close()
    for name, content in originals.items():
        assert (part / name).read_bytes() == content, name


def test_real_kafka_dir_imports_checkpoints(tmp_path):
    source = TESTDATA / "kafka-real" / "berkayakcay__toy-node-log-collector/@3c85883/kafka-data"
    copy = tmp_path / "logs"
    shutil.copytree(source, copy)
    logdir = LogDir.open(copy, LogConfig(fsync=False))
    assert not logdir.had_clean_shutdown          # this broker was not shut down cleanly
    assert logdir.partitions() == [("topic-logx-001", p) for p in range(3)]
    watermarks = {p: logdir.partition("topic-logx-001", p).high_watermark for p in range(3)}
    assert watermarks == {0: 17, 1: 16, 2: 17}
    for p, count in [(0, 17), (1, 16), (2, 17)]:
        log = logdir.partition("topic-logx-001", p)
        assert log.log_end_offset == count and [tuple(e) for e in log.epoch_cache.entries] == [(0, 0)]
    assert logdir.recovery_report == {}
    logdir.close()
    stored = LogDir.open(copy, LogConfig(fsync=False))
    assert stored.meta.get_partition("topic-logx-001", 1).high_watermark == 16
    stored.close()


def test_delete_partition(tmp_path):
    logdir = LogDir.open(tmp_path, CONFIG)
    fill(logdir.partition("t", 0), 5)
    fill(logdir.partition("t", 1), 5)
    logdir.checkpoint()
    assert logdir.delete_partition("t", 0) is True
    assert logdir.delete_partition("t", 0) is False
    assert not (tmp_path / "t-0").exists() and logdir.partitions() == [("t", 1)]
    assert logdir.meta.get_partition("t", 0) is None
    logdir.close()
    (tmp_path / "t-9.0123-delete").mkdir()          # a delete interrupted by a crash
    (tmp_path / "t-9.0123-delete" / f"{0:020d}.log").write_bytes(b"")
    logdir = LogDir.open(tmp_path, CONFIG)
    assert not (tmp_path / "t-9.0123-delete").exists() and logdir.partitions() == [("t", 1)]
    logdir.close()


def _three_segments(root):
    config = LogConfig(segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=4096, fsync=False)
    logdir = LogDir.open(root, config)
    log = logdir.partition("t", 0)
    for _ in range(40):
        log.append_as_leader([b"x" * 50], 0)
    assert len(log.segments) == 3 and len(log.segments[0].offset_index_entries()) == 5
    logdir.close()
    return config, os.path.join(root, "t-0", "00000000000000000000.index")


@pytest.mark.parametrize("clean, check", [(True, "open"), (True, "first_use"), (False, "first_use")])
def test_an_index_whose_trim_was_lost_is_rebuilt(tmp_path, clean, check, caplog):
    # The roll trimmed segment 0's index; a crash kept the pre-allocated length (zero entries at
    # the end).  Trusted, the zeros break lookups and truncation (stale entries past the cut).
    # After a clean shutdown with sealed_segment_check="first_use" it is rebuilt when first used.
    config, index = _three_segments(tmp_path)
    config = dataclasses.replace(config, sealed_segment_check=check)
    with open(index, "ab") as f:
        f.write(b"\0" * 64)
    if not clean:
        os.unlink(tmp_path / CLEAN_SHUTDOWN_FILE)
    logdir = LogDir.open(tmp_path, config)
    log = logdir.partition("t", 0)
    at_open = not clean or check == "open"
    assert bool(logdir.recovery_report.get(("t", 0))) == at_open
    if at_open:
        assert logdir.recovery_report[("t", 0)][0][2].startswith("rebuilt: offset index entry (0, 0)")
    assert [o for o, _ in log.segments[0].offset_index_entries()] == [3, 6, 9, 12, 15]
    assert ("index rebuilt at first use: offset index entry (0, 0)" in caplog.text) == (not at_open)
    if not at_open:             # and the log's report says so (LogDir's was taken at the open)
        assert [(b, c, why.split(":")[0]) for b, c, why in log.recovery_report] == [(0, 0, "rebuilt at first use")]
    log.truncate_to(3)
    assert log.segments[0].offset_index_entries() == [] and invariants.check_replica("t-0", log) == []


def test_after_a_crash_every_index_entry_is_checked(tmp_path):
    # A torn page inside the index (zeros in the middle) is only found by the thorough check,
    # which runs after an unclean shutdown.
    config, index = _three_segments(tmp_path)
    with open(index, "r+b") as f:
        f.seek(16)
        f.write(b"\0" * 8)
    os.unlink(tmp_path / CLEAN_SHUTDOWN_FILE)
    logdir = LogDir.open(tmp_path, config)
    assert "out of order" in logdir.recovery_report[("t", 0)][0][2]
    assert [o for o, _ in logdir.partition("t", 0).segments[0].offset_index_entries()] == [3, 6, 9, 12, 15]


def test_after_a_crash_every_time_index_entry_is_checked(tmp_path):
    # The time index's torn middle entry (a timestamp going back) is found by the same
    # thorough check (in C: plog_segment_index_check), and only after an unclean shutdown.
    config = LogConfig(segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=4096, fsync=False)
    with LogDir.open(tmp_path, config) as logdir:
        log = logdir.partition("t", 0)
        for i in range(40):
            log.append_as_leader(build_batch([b"x" * 50], base_timestamp=1_000 + i), 0)
        entries = log.segments[0].time_index_entries()
        assert len(log.segments) == 3 and len(entries) >= 4
    with open(tmp_path / "t-0" / "00000000000000000000.timeindex", "r+b") as f:
        f.seek(12)
        f.write(b"\0" * 8)                       # the second entry's timestamp becomes 0
    with LogDir.open(tmp_path, config) as clean:
        assert clean.recovery_report == {}       # a clean open looks at the last two only
    os.unlink(tmp_path / CLEAN_SHUTDOWN_FILE)
    logdir = LogDir.open(tmp_path, config)
    assert logdir.recovery_report[("t", 0)][0][2].startswith(f"rebuilt: time index entry (0, {entries[1][1]}) is out of order")
    assert logdir.partition("t", 0).segments[0].time_index_entries() == entries


def test_the_open_pauses_the_collector_and_restores_it(tmp_path, monkeypatch):
    # The bulk open runs with the cyclic collector off (30 % of a 2,000-partition open) and
    # leaves it as it found it -- on, off, and after a failed open.
    import gc

    seen = []
    real = LogDir._load
    monkeypatch.setattr(LogDir, "_load", lambda self, seam: (seen.append(gc.isenabled()), real(self, seam)))
    LogDir.open(tmp_path / "a", LogConfig(fsync=False)).close()
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        LogDir.open(tmp_path / "b", LogConfig(fsync=False)).close()
        assert not gc.isenabled()
    finally:
        gc.enable()
    monkeypatch.setattr(LogDir, "_load", lambda self, seam: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        LogDir.open(tmp_path / "c", LogConfig(fsync=False))
    assert gc.isenabled()


# ---- recovery threads (Kafka's num.recovery.threads.per.data.dir) ----------------------------

def _partitions_to_open(root):
    """Twelve partitions of a few segments each; t-3 ends in a torn batch (recovery cuts it
    after an unclean shutdown) and t-5 has a damaged sealed segment (it stays unopened)."""
    with LogDir.open(root, CONFIG) as logdir:
        for p in range(12):
            fill(logdir.partition("t", p), count=8 + p, epoch=p % 3)
    with open(sorted((root / "t-3").glob("*.log"))[-1], "ab") as f:
        f.write(build_batch([b"torn"] * 4, base_offset=10_000)[:40])
    with open(sorted((root / "t-5").glob("*.log"))[1], "r+b") as f:
        f.write((0).to_bytes(8, "big"))                 # a base offset going backwards


def _opened(root, threads):
    config = dataclasses.replace(CONFIG, sealed_segment_check="open")     # t-5 refused at the open
    with LogDir.open(root, config, recovery_threads=threads) as logdir:
        state = (logdir.partitions(), [(k, log.log_end_offset, log.log_start_offset, values(log)[-1:])
                                       for k, log in logdir.logs().items()],
                 {k: [(base, cut, why.split(":")[0]) for base, cut, why in report]
                  for k, report in logdir.recovery_report.items()},
                 {k: (type(e).__name__, os.path.basename(e.file), e.position, e.offset) for k, e in logdir.unopened.items()})
    return state


@pytest.mark.parametrize("clean", [True, False])
def test_recovery_threads_open_what_one_thread_opens(tmp_path, clean):
    """recovery_threads=4 opens the partitions on four threads: the same logs, registered in
    the same order, the same damaged partition left unopened with the same error, the same
    recovery report -- after a clean and after an unclean shutdown."""
    _partitions_to_open(tmp_path / "src")
    if not clean:
        remove_marker(tmp_path / "src")
    shutil.copytree(tmp_path / "src", tmp_path / "one")
    shutil.copytree(tmp_path / "src", tmp_path / "four")
    serial, threaded = _opened(tmp_path / "one", 1), _opened(tmp_path / "four", 4)
    assert threaded == serial
    partitions, _logs, report, unopened = threaded
    # After a clean shutdown the torn tail of t-3 is damage too (it is not recovered).
    assert list(unopened) == ([("t", 3), ("t", 5)] if clean else [("t", 5)])
    assert len(partitions) == 12 - len(unopened) and (("t", 3) in report) == (not clean)


def test_a_failure_on_one_open_thread_fails_the_open_and_releases_every_log(tmp_path):
    """An I/O error while one thread opens its partition fails LogDir.open with that error;
    every log the other threads opened is released (no descriptor left open, the dir lock
    free) and the next open, with the disk working, opens them all."""
    with LogDir.open(tmp_path, CONFIG) as logdir:
        for p in range(8):
            fill(logdir.partition("t", p), count=6)

    class FailingOneLog(sio.PosixIO):
        def pread(self, fd, length, offset):
            path = os.readlink(f"/proc/self/fd/{fd}")
            if "/t-5/" in path and path.endswith(".log"):
                raise OSError(errno.EIO, os.strerror(errno.EIO), path)
            return super().pread(fd, length, offset)

    descriptors = len(os.listdir("/proc/self/fd"))
    with sio.using(FailingOneLog()):
        with pytest.raises(errors.StorageIOError) as caught:
            LogDir.open(tmp_path, CONFIG, recovery_threads=4)
    assert "/t-5/" in caught.value.file and caught.value.errno == errno.EIO
    assert len(os.listdir("/proc/self/fd")) == descriptors
    with LogDir.open(tmp_path, CONFIG, recovery_threads=4) as logdir:
        assert [log.log_end_offset for log in logdir.logs().values()] == [6] * 8


@pytest.mark.parametrize("threads", [0, -1, 1.5, "2"])
def test_recovery_threads_must_be_a_positive_int(tmp_path, threads):
    with pytest.raises(ValueError):
        LogDir.open(tmp_path, CONFIG, recovery_threads=threads)
