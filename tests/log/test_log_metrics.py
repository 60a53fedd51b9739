"""The engine's own counters (storage/log/metrics.py), read without the broker: each one moves
by what the log did, and only then."""
import os

from storage import LogConfig, LogDir, PartitionLog, Record, build_batch
from storage.log.metrics import FSYNC_BUCKETS_SECONDS


def test_appends_count_calls_batches_records_and_bytes(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    assert (log.metrics.appends, log.metrics.append_bytes) == (0, 0)
    a = log.append_as_leader([b"a", b"b", b"c"], leader_epoch=0)
    chunk = build_batch([b"d"], base_offset=0) + build_batch([b"e", b"f"], base_offset=1)
    b = log.append_as_leader(chunk, leader_epoch=0)
    m = log.metrics
    assert (m.appends, m.append_batches, m.append_records) == (2, 3, 6)
    assert m.append_bytes == a.size_bytes + b.size_bytes == log.size_bytes
    log.append_as_leader([], leader_epoch=0)             # nothing appended: nothing counted
    assert m.appends == 2
    log.close()


def test_a_held_metrics_object_sees_the_one_call_appends(tmp_path):
    """The one-call append counts in C (LogMetrics.counts): the LogMetrics a reader holds moves
    with it, as it moves with the general path's appends, and its sums and copies carry them."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    m = log.metrics
    log.append_as_follower(build_batch([b"a"], base_offset=0))           # the first: the general path
    second = build_batch([b"b", b"c"], base_offset=1)
    log.append_as_follower(second)                                       # the one-call path
    assert (m.appends, m.append_batches, m.append_records) == (2, 2, 3) and m.append_bytes == log.size_bytes
    copy = m.snapshot()
    log.append_as_follower(build_batch([b"d"], base_offset=3))
    assert (copy.appends, m.appends) == (2, 3) and "appends=3, append_batches=3" in repr(m)
    log.close()


def test_flushes_are_timed_into_a_histogram(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    log.append_as_leader([b"x"], leader_epoch=0)
    before = log.metrics.fsyncs
    log.flush()
    m = log.metrics
    assert m.fsyncs == before + 1
    assert 0 < m.fsync_seconds_max <= m.fsync_seconds_total
    assert len(m.fsync_buckets) == len(FSYNC_BUCKETS_SECONDS)
    assert m.fsync_buckets == sorted(m.fsync_buckets) and m.fsync_buckets[-1] <= m.fsyncs
    log.close()


def test_rolls_and_truncations_with_the_bytes_they_cut(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    for i in range(6):
        log.append_as_leader([b"v%d" % i * 20], leader_epoch=0)
    m = log.metrics
    assert m.rolls == len(log.segments) - 1 > 0
    size = log.size_bytes
    assert log.truncate_to(3)
    assert m.truncations == 1 and m.truncated_bytes == size - log.size_bytes > 0
    assert not log.truncate_to(100)                     # above the log end: nothing cut, nothing counted
    assert m.truncations == 1
    size = log.size_bytes
    log.truncate_fully_and_start_at(50)
    assert m.truncations == 2 and m.truncated_bytes > size
    log.close()


def test_a_recovery_counts_what_it_cut(tmp_path):
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, LogConfig())
    for i in range(3):
        log.append_as_leader([b"r%d" % i], leader_epoch=0)
    log.flush()
    segment = log.active_segment.log_path
    log.close()
    with open(segment, "r+b") as f:                       # a torn tail: half the last batch
        f.truncate(os.path.getsize(segment) - 10)
    log = PartitionLog.open(path, LogConfig(), recovery_point=0)
    m = log.metrics
    assert m.recoveries == 1
    assert m.recovered_bytes_cut == sum(cut for _base, cut, _why in log.recovery_report) > 0
    assert m.appends == 0
    log.close()


def test_cleaner_rounds_and_the_dir_sum(tmp_path):
    d = LogDir.open(tmp_path / "d", LogConfig(cleanup_policy="compact", segment_bytes=300))
    compacted = d.partition("c", 0)
    for i in range(12):
        compacted.append_as_leader([Record(key=b"k%d" % (i % 2), value=b"v" * 20)], leader_epoch=0)
    compacted.update_high_watermark(compacted.log_end_offset)
    compacted.compact(now_ms=0)
    assert compacted.metrics.cleaner_rounds == 1
    other = d.partition("t", 0)
    other.append_as_leader([Record(key=b"k", value=b"z")], leader_epoch=0)
    dm = d.metrics()
    assert dm.partitions == 2 and not dm.offline
    assert dm.logs.appends == compacted.metrics.appends + other.metrics.appends == 13
    assert dm.logs.cleaner_rounds == 1
    assert dm.segments == len(compacted.segments) + len(other.segments)
    assert dm.size_bytes == compacted.size_bytes + other.size_bytes
    assert dm.open_segments >= 1
    d.close()


def test_the_operations_guide_example_runs(tmp_path, capsys):
    from tests.test_readme import block
    code = block("m = log.metrics").replace('"/tmp/demo-dir"', repr(str(tmp_path / "demo-dir")))
    exec(compile(code, "<guide-operations>", "exec"), {})
    appends, records, size, fsyncs, longest = capsys.readouterr().out.split("\n")[0].split()
    assert (appends, records, fsyncs) == ("1", "2", "1") and int(size) > 0 and float(longest) > 0


def test_the_engine_imports_no_metrics_library():
    """The counters are plain numbers: embedding the engine (log, dir) loads no prometheus_client;
    only the broker's --metrics-listen does."""
    import subprocess
    import sys
    code = ("import sys, storage, storage.log.metrics, storage.dir.logdir; "
            "print(sorted(m for m in sys.modules if m.startswith('prometheus_client')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
