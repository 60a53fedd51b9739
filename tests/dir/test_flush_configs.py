"""Kafka's topic configs flush.messages and flush.ms in the engine (LogConfig.flush_messages,
flush_ms): an append that leaves flush_messages or more offsets past the recovery point flushes
the log (Kafka's UnifiedLog.append), and the log dir's background thread flushes every log whose
last flush is flush_ms old (Kafka's LogManager.flushDirtyLogs, LogDir.flush_dirty_logs).  Both
are flushes like any other: a failed fsync takes the dir offline and nothing is retried into
success (storage/core/failure.py).  Faults through the I/O seam (FaultyIO), crashes on SimFS."""
import errno
import time

import pytest
from faulty_io import FaultyIO

from storage import LogConfig, LogDir, PartitionLog, build_batch
from storage.core import errors
from storage.core import io as sio
from storage.dir.background import BackgroundConfig

SMALL = dict(segment_bytes=4096, index_interval_bytes=128, segment_index_bytes=4096)


def _values(log):
    return [r.value for b in log.batches() for r in b.records()]


def test_the_configs_have_kafkas_defaults_and_ranges():
    """Kafka's LogConfig: flush.messages LONG atLeast(1), flush.ms LONG atLeast(0), both
    Long.MAX_VALUE by default."""
    config = LogConfig()
    assert config.flush_messages == config.flush_ms == 2**63 - 1
    LogConfig(flush_messages=1, flush_ms=0)
    for bad in (dict(flush_messages=0), dict(flush_ms=-1), dict(flush_messages=2**63), dict(flush_ms="1")):
        with pytest.raises(ValueError, match="flush"):
            LogConfig(**bad)


def test_appends_past_flush_messages_move_the_recovery_point(tmp_path):
    """Leader appends (the one-frame path and the general one), a follower's and append_batches:
    the append that leaves flush_messages offsets past the recovery point flushes, the others
    leave it; by default no append moves it."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_messages=3, **SMALL))
    points = []
    for i in range(7):
        log.append_as_leader([b"v%d" % i], 0)
        points.append(log.recovery_point)
    assert points == [0, 0, 3, 3, 3, 6, 6]
    log.append_as_leader([b"a", b"b", b"c", b"d"], 0)          # one batch of four crosses at once
    assert log.recovery_point == log.log_end_offset == 11
    log.append_batches([build_batch([b"e"]), build_batch([b"f"])], as_leader=True, leader_epoch=0)
    assert log.recovery_point == 11 and log.log_end_offset == 13
    log.append_as_leader(build_batch([b"g"]), 0)
    assert log.recovery_point == 14
    log.close()

    follower = PartitionLog.open(tmp_path / "f-0", LogConfig(flush_messages=2, **SMALL))
    for offset in range(5):
        follower.append_as_follower(build_batch([b"r%d" % offset], base_offset=offset, partition_leader_epoch=0))
    assert (follower.log_end_offset, follower.recovery_point) == (5, 4)
    follower.close()

    plain = PartitionLog.open(tmp_path / "p-0", LogConfig(**SMALL))
    for i in range(50):
        plain.append_as_leader([b"v%d" % i], 0)
    assert plain.recovery_point == 0
    plain.close()


def test_a_lowered_flush_messages_acts_on_the_open_log(tmp_path):
    """Kafka's UnifiedLog.updateConfig: the running log's next append reads the new count."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(**SMALL))
    for i in range(5):
        log.append_as_leader([b"v%d" % i], 0)
    assert log.recovery_point == 0
    log.reconfigure(LogConfig(flush_messages=2, **SMALL))
    log.append_as_leader([b"more"], 0)
    assert log.recovery_point == log.log_end_offset == 6
    log.close()


def test_what_flush_messages_flushed_survives_a_crash_that_loses_the_page_cache(tmp_path):
    """The flush is a real one: after a crash keeping nothing unsynced (SimFS mode a) the log
    reopens with the offsets below the last append-triggered flush, and without the config
    with nothing."""
    from storage.sim.fs import SimFS

    kept = {}
    for name, config in (("counted", LogConfig(flush_messages=2, fsync=False, **SMALL)),
                         ("default", LogConfig(fsync=False, **SMALL))):
        root = tmp_path / name
        root.mkdir()
        fs = SimFS(root, seed=1)
        with sio.using(fs):
            log = PartitionLog.open(root / "t-0", config)
            for i in range(5):
                log.append_as_leader([b"v%d" % i], 0)
            for segment in log.segments:
                segment.close()
        fs.crash(root, mode="a")
        with sio.using(fs):
            log = PartitionLog.open(root / "t-0", config)
            kept[name] = _values(log)
            log.close()
    assert kept == {"counted": [b"v0", b"v1", b"v2", b"v3"], "default": []}


def test_a_failed_flush_after_an_append_takes_the_dir_offline(tmp_path):
    """The append whose flush.messages flush fails raises LogDirOfflineError (its records are
    in the page cache, not durable: the recovery point stays); the disk recovering changes
    nothing, every later call refuses."""
    seam = FaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", LogConfig(**SMALL),
                             topic_configs={"t": LogConfig(flush_messages=2, **SMALL)})
        log = logdir.partition("t", 0)
        log.append_as_leader([b"a"], 0)
        log.append_as_leader([b"b"], 0)
        assert log.recovery_point == 2
        log.append_as_leader([b"c"], 0)
        seam.fail["fsync"] = (errno.EIO, 0)
        with pytest.raises(errors.LogDirOfflineError) as info:
            log.append_as_leader([b"d"], 0)
        assert info.value.first_failure.errno == errno.EIO and seam.fired == ["fsync"]
        assert logdir.offline and log.recovery_point == 2
        assert seam.fail == {}                     # the disk "recovered": nothing claims success
        for call in (lambda: log.append_as_leader([b"e"], 0), log.flush, logdir.flush_dirty_logs):
            with pytest.raises(errors.LogDirOfflineError):
                call()
        assert log.recovery_point == 2
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()


def test_flush_dirty_logs_flushes_the_logs_whose_last_flush_is_flush_ms_old(tmp_path):
    """Kafka's LogManager.flushDirtyLogs: timeSinceLastFlush >= flushMs, and only a log with
    data past its recovery point (Kafka's flush is a no-op on one without)."""
    timed = LogConfig(flush_ms=1000, **SMALL)
    with LogDir.open(tmp_path / "d", LogConfig(**SMALL), topic_configs={"timed": timed, "idle": timed}) as logdir:
        log, untimed, idle = logdir.partition("timed", 0), logdir.partition("untimed", 0), logdir.partition("idle", 0)
        for i in range(3):
            log.append_as_leader([b"v%d" % i], 0)
            untimed.append_as_leader([b"v%d" % i], 0)
        since = log.local.last_flush_ms
        assert logdir.flush_dirty_logs(since + 999) == 0
        assert log.recovery_point == 0
        assert logdir.flush_dirty_logs(idle.local.last_flush_ms + 1000) == 1
        assert (log.recovery_point, untimed.recovery_point, idle.recovery_point) == (3, 0, 0)
        assert log.local.last_flush_ms >= since
        log.append_as_leader([b"later"], 0)
        assert logdir.flush_dirty_logs(log.local.last_flush_ms + 999) == 0
        assert logdir.flush_dirty_logs(log.local.last_flush_ms + 1000) == 1
        assert log.recovery_point == 4 and untimed.recovery_point == 0


def _wait(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_the_background_thread_flushes_by_flush_ms(tmp_path):
    """Ported from Kafka's LogManagerTest.testTimeBasedFlush: a topic with flush.ms set, 200
    appends, and the background flusher moves the log's last flush time (here the recovery
    point too); a topic without it is left alone."""
    background = BackgroundConfig(flush_check_interval_ms=20)
    logdir = LogDir.open(tmp_path / "d", LogConfig(), background=True, background_config=background,
                         topic_configs={"timed": LogConfig(flush_ms=0)})      # one segment each: no roll flushes
    try:
        log, untimed = logdir.partition("timed", 0), logdir.partition("untimed", 0)
        last_flush = log.local.last_flush_ms
        for _ in range(200):
            log.append_as_leader([b"test"], 0)
            untimed.append_as_leader([b"test"], 0)
        assert _wait(lambda: log.recovery_point == 200)
        assert log.local.last_flush_ms >= last_flush and logdir.background_runs.get("flush_dirty", 0) >= 1
        assert untimed.recovery_point == 0
    finally:
        logdir.close()
    assert logdir.background_error is None


def test_a_failed_scheduled_flush_takes_the_dir_offline_and_is_never_retried(tmp_path):
    """The background thread's flush.ms flush fails its fsync: the dir goes offline, the thread
    ends (background_error), the recovery point stays; the disk recovering brings nothing back
    online and no later flush claims the data durable."""
    seam = FaultyIO()
    with sio.using(seam):
        background = BackgroundConfig(flush_check_interval_ms=20)
        logdir = LogDir.open(tmp_path / "d", LogConfig(**SMALL), background=True, background_config=background,
                             topic_configs={"t": LogConfig(flush_ms=0, **SMALL)})
        log = logdir.partition("t", 0)
        with log.local.lock:                    # the thread's flush waits until the fault is armed
            for i in range(3):
                log.append_as_leader([b"v%d" % i], 0)
            seam.fail["fsync"] = (errno.EIO, 0)
        assert _wait(lambda: logdir.offline)
        assert seam.fired == ["fsync"] and log.recovery_point == 0
        assert isinstance(logdir.failure, OSError) and logdir.failure.errno == errno.EIO
        assert seam.fail == {}
        with pytest.raises(errors.LogDirOfflineError):
            log.flush()
        with pytest.raises(errors.LogDirOfflineError):
            logdir.flush_dirty_logs()
        assert log.recovery_point == 0
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
        assert logdir.background_error is not None
