"""Running out of file descriptors is not a disk failure (issue 30, item 9).

EMFILE (this process) or ENFILE (the system) on a segment's open or roll fails that call with
OutOfDescriptorsError (KAFKA_STORAGE_ERROR, retriable for Kafka's clients), logged; the log dir
stays online and the same append succeeds once descriptors are free, leaving a log that
verifies.  Injected through the I/O seam at each open a roll makes, and for real in a child
process with a lowered RLIMIT_NOFILE.
"""
import errno
import os
import subprocess
import sys
import textwrap

import pytest
from faulty_io import FaultyIO

from storage import LogConfig, LogDir
from storage.core import errors
from storage.core import io as sio
from storage.core.records import build_batch


class OpenFaultyIO(FaultyIO):
    """FaultyIO whose opens fail too: `fail["open"] = (errno, opens to let pass)`."""

    def open(self, path, flags):
        self._maybe_fail("open", path)
        return super().open(path, flags)


def values_of(plog) -> list[bytes]:
    return [r.value for b in plog.batches(0) for r in b.records()]


# A roll with fsync opens, in order: the rolled segment's two index files (created at its seal),
# the producer snapshot's temporary file, then the new segment's .log; 0..3 reach each of them.
@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
@pytest.mark.parametrize("opens_before", [0, 1, 2, 3])
def test_out_of_descriptors_in_a_roll_fails_the_append_and_the_dir_stays_online(tmp_path, code, opens_before):
    seam = OpenFaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "logs", LogConfig(segment_bytes=200, fsync=True), background=False)
        plog = logdir.partition("t", 0)
        for i in range(2):
            plog.append_as_leader(build_batch([b"a%d" % i + b"x" * 100]), 0)
        seam.fail["open"] = (code, opens_before)
        with pytest.raises(errors.OutOfDescriptorsError) as caught:
            plog.append_as_leader(build_batch([b"refused" + b"x" * 100]), 0)
        assert seam.fired == ["open"]
        assert caught.value.error_code == errors.Errors.KAFKA_STORAGE_ERROR
        assert caught.value.errno == code and "out of file descriptors" in str(caught.value)
        assert not logdir.offline
        # Descriptors are back: the same append, and more, succeed; the log closes cleanly.
        for i in range(3):
            plog.append_as_leader(build_batch([b"b%d" % i + b"x" * 100]), 0)
        expected = [b"a0", b"a1", b"b0", b"b1", b"b2"]
        assert [v[:2] for v in values_of(plog)] == expected
        logdir.close()
    reopened = LogDir.open(tmp_path / "logs", LogConfig(segment_bytes=200, fsync=True), background=False)
    try:
        assert reopened.had_clean_shutdown
        assert [v[:2] for v in values_of(reopened.partition("t", 0))] == expected
    finally:
        reopened.close()


def test_out_of_descriptors_when_a_partition_is_created_leaves_the_dir_online(tmp_path):
    seam = OpenFaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "logs", LogConfig(fsync=True), background=False)
        seam.fail["open"] = (errno.EMFILE, 0)
        with pytest.raises(errors.OutOfDescriptorsError):
            logdir.partition("t", 0)
        assert not logdir.offline
        logdir.partition("t", 0).append_as_leader(build_batch([b"v"]), 0)
        logdir.close()


def test_an_io_error_on_open_still_takes_the_dir_offline(tmp_path):
    """The control: only running out of descriptors is spared, EIO on an open is a disk failure."""
    seam = OpenFaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "logs", LogConfig(segment_bytes=200, fsync=True), background=False)
        plog = logdir.partition("t", 0)
        plog.append_as_leader(build_batch([b"x" * 100]), 0)
        seam.fail["open"] = (errno.EIO, 0)
        with pytest.raises(errors.LogDirOfflineError):
            plog.append_as_leader(build_batch([b"y" * 100]), 0)
        assert logdir.offline
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()


CHILD = """
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    from storage import LogConfig, LogDir, errors, segment_home
    from storage.core.records import build_batch
    segment_home.set_open_segments_max(16)
    logdir = LogDir.open(sys.argv[1], LogConfig(segment_bytes=200, fsync=True), background=False)
    plog = logdir.partition("t", 0)
    for i in range(3):
        plog.append_as_leader(build_batch([b"x" * 100]), 0)
    hog = []
    try:
        while True:
            hog.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        assert exc.errno == 24
    for fd in hog[len(hog) - int(sys.argv[2]):]:
        os.close(fd)
    del hog[len(hog) - int(sys.argv[2]):]
    failed = 0
    for i in range(3):
        try:
            plog.append_as_leader(build_batch([b"y" * 100]), 0)
        except errors.OutOfDescriptorsError as exc:
            failed += 1
            assert exc.error_code == 56 and not logdir.offline, exc
    for fd in hog:
        os.close(fd)
    for i in range(3):
        plog.append_as_leader(build_batch([b"z" * 100]), 0)
    logdir.close()
    print("failed", failed, "offline", logdir.offline, "end", plog.log_end_offset)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_NOFILE and /dev/null as on Linux")
@pytest.mark.parametrize("free", [0, 3])
def test_a_real_emfile_under_a_lowered_rlimit_in_a_child_process(tmp_path, free):
    """The descriptors run out for real (RLIMIT_NOFILE 64, the rest held by the child): the
    rolls that meet EMFILE fail, the dir stays online, later appends succeed and `storage
    verify` finds the log sound."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(tmp_path / "logs"), str(free)],
                           capture_output=True, text=True, timeout=60, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    words = child.stdout.split()
    assert words[:4] == ["failed", "3", "offline", "False"], child.stdout
    assert "for want of file descriptors" in child.stderr and "the dir stays online" in child.stderr
    verify = subprocess.run([sys.executable, "-m", "storage", "verify", str(tmp_path / "logs")],
                            capture_output=True, text=True, timeout=60, env=env)
    assert verify.returncode == 0 and "0 problems" in verify.stdout, verify.stdout + verify.stderr


def test_a_topic_whose_partition_meets_emfile_is_created_when_descriptors_are_back(tmp_path):
    """The broker side: CreateTopics is answered (the controller committed the topic), the
    partition the replica manager could not open is opened at a later pump, and produce works."""
    import asyncio

    pytest.importorskip("kio", reason="the wire front end needs kio")
    from storage.wire.node import Node
    from storage.wire.server import BrokerServer
    from tests.wire.test_controller_store_failure import create_topics
    from tests.wire.test_wire_faults import produce

    seam = OpenFaultyIO()
    loop = asyncio.new_event_loop()
    with sio.using(seam):
        node = Node(tmp_path / "node", offsets_partitions=1, log_config=LogConfig(fsync=True), background=False)
        server = BrokerServer(node, initial_rebalance_delay_ms=0)
        server.serve_groups()
        try:
            seam.fail["open"] = (errno.EMFILE, 0)
            assert create_topics(server, loop, "t").error_code == errors.Errors.NONE
            assert seam.fired == ["open"] and not node.logdir.offline
            assert ("t", 0) not in node.manager.partitions        # its files could not be opened
            node.pump()                                           # the periodic loop's next pump
            assert produce(server, loop, b"v").error_code == errors.Errors.NONE
        finally:
            loop.run_until_complete(node.shutdown())
            loop.close()


@pytest.mark.parametrize("opens_before", [0, 1, 2])
def test_out_of_descriptors_when_a_suspended_segment_reopens(tmp_path, opens_before):
    """The open-segment cache suspended the segment (its descriptors closed); its reopen for a
    read meets EMFILE at its .log, .index or .timeindex: that read fails, the dir stays online,
    the next read reopens it whole."""
    from storage.log import segment_home
    limit = segment_home.open_segments.limit
    seam = OpenFaultyIO()
    segment_home.set_open_segments_max(16)
    try:
        with sio.using(seam):
            logdir = LogDir.open(tmp_path / "logs", LogConfig(fsync=True), background=False)
            logs = [logdir.partition("t", i) for i in range(20)]
            for i, plog in enumerate(logs):
                plog.append_as_leader(build_batch([b"v%d" % i]), 0)
            seam.fail["open"] = (errno.EMFILE, opens_before)
            with pytest.raises(errors.OutOfDescriptorsError):
                logs[0].read(0, 1 << 20)                  # what a Fetch calls
            assert seam.fired == ["open"] and not logdir.offline
            assert bytes(logs[0].read(0, 1 << 20)) == bytes(logs[0].read(0, 1 << 20)) != b""
            assert values_of(logs[0]) == [b"v0"]
            logs[0].append_as_leader(build_batch([b"w"]), 0)
            logdir.close()
    finally:
        segment_home.open_segments.limit = limit


def test_the_background_thread_retries_a_task_that_ran_out_of_descriptors(tmp_path, caplog):
    """A periodic flush whose index files cannot be opened (EMFILE) is logged and runs again at
    its next turn; the thread goes on and the dir stays online (it used to end the thread)."""
    import time

    from storage.dir.background import BackgroundConfig

    seam = OpenFaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "logs", LogConfig(segment_bytes=200, fsync=True), background=True,
                             background_config=BackgroundConfig(flush_interval_ms=20))
        try:
            plog = logdir.partition("t", 0)
            with plog._lock:                                     # the flush waits until the fault is armed
                plog.append_as_leader(build_batch([b"v" * 100]), 0)
                plog.append_as_leader(build_batch([b"w" * 100]), 0)     # a roll: the new segment's
                seam.fail["open"] = (errno.EMFILE, 0)                    # index files wait for a flush
            deadline = time.monotonic() + 10
            while (not seam.fired or logdir.background_runs.get("flush", 0) < 2) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert seam.fired == ["open"] and logdir.background_runs.get("flush", 0) >= 2
            assert not logdir.offline and logdir.background_error is None
            assert plog.recovery_point == plog.log_end_offset == 2      # the retried flush did it
            assert "background flush" in caplog.text and "out of file descriptors" in caplog.text
        finally:
            logdir.close()


def test_emfile_on_the_epoch_checkpoint_after_the_records_are_written_does_not_fail_the_append(tmp_path):
    """An append writes its records, then assigns the epochs they start (the leader-epoch
    checkpoint's file): failing there would fail an append whose records are in the log (a
    producer's retry would write them twice, past its idempotence state too).  The entry is
    kept in memory and written at the next flush, before any segment."""
    seam = OpenFaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "logs", LogConfig(fsync=True), background=False)
        plog = logdir.partition("t", 0)
        plog.append_as_leader(build_batch([b"a"]), 0)
        seam.fail["open"] = (errno.EMFILE, 0)
        info = plog.append_as_leader(build_batch([b"b"]), 3)      # a new epoch: the checkpoint is written
        assert seam.fired == ["open"] and info.first_offset == 1 and not logdir.offline
        assert plog.epoch_cache.dirty and plog.latest_epoch == 3
        plog.flush()
        assert not plog.epoch_cache.dirty
        logdir.close()
    with open(tmp_path / "logs" / "t-0" / "leader-epoch-checkpoint") as f:
        assert f.read().split("\n")[2:4] == ["0 0", "3 1"]


def test_emfile_on_the_transaction_index_after_an_abort_marker_is_the_failure_state(tmp_path):
    """The abort marker is written before its transaction index entry: an entry that cannot be
    written would show the aborted records as committed to read_committed readers, so running
    out of descriptors there takes the dir offline (its reopen rebuilds the index from the log)."""
    seam = OpenFaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "logs", LogConfig(fsync=True), background=False)
        plog = logdir.partition("t", 0)
        plog.append_as_leader(build_batch([b"r"], producer_id=7, producer_epoch=0, base_sequence=0,
                                          is_transactional=True), 0)
        seam.fail["open"] = (errno.EMFILE, 0)
        with pytest.raises(errors.LogDirOfflineError) as caught:
            plog.append_txn_marker(7, 0, False, coordinator_epoch=0, leader_epoch=0)
        assert seam.fired == ["open"] and logdir.offline
        assert caught.value.errno == errno.EMFILE and "transaction index append" in str(caught.value)
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
    reopened = LogDir.open(tmp_path / "logs", LogConfig(fsync=True), background=False)
    try:
        plog = reopened.partition("t", 0)
        assert plog.log_end_offset == 2
        assert [t.producer_id for t in plog.segments[0].txn_index.entries()] == [7]
    finally:
        reopened.close()


def test_out_of_descriptors_inside_a_truncation_is_still_the_failure_state(tmp_path):
    """A truncation changes files in several steps that only a reopen's recovery makes whole:
    not in RETRIABLE_WITHOUT_DESCRIPTORS, so EMFILE there (its suspended segment's reopen) takes
    the dir offline as any I/O failure."""
    from storage.log import segment_home
    limit = segment_home.open_segments.limit
    seam = OpenFaultyIO()
    segment_home.set_open_segments_max(16)
    try:
        with sio.using(seam):
            logdir = LogDir.open(tmp_path / "logs", LogConfig(fsync=True), background=False)
            logs = [logdir.partition("t", i) for i in range(20)]
            for plog in logs:
                plog.append_as_leader(build_batch([b"a"]), 0)
                plog.append_as_leader(build_batch([b"b"]), 0)
            seam.fail["open"] = (errno.EMFILE, 0)
            with pytest.raises(errors.LogDirOfflineError) as caught:
                logs[0].truncate_to(1)
            assert seam.fired == ["open"] and logdir.offline and caught.value.errno == errno.EMFILE
            with pytest.raises(errors.LogDirOfflineError):
                logdir.close()
    finally:
        segment_home.open_segments.limit = limit
