"""The common append is one Python frame and one C call (PartitionLog.append_as_follower /
append_as_leader, issue 33's per-call engine path), and it makes the log the general path
makes: the same files, AppendInfo, epochs, producer state and counters, through rolls, epoch
changes, producer batches, partial tails and refusals."""
from __future__ import annotations

import errno
import sys

import pytest
from faulty_io import FaultyIO

import storage
from storage import LogConfig, PartitionLog
from storage.core import errors
from storage.core import io as sio

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256, fsync=False)


def frames_and_c_calls(call) -> tuple[list[str], list[str]]:
    """(Python functions entered, C functions of the core called) while `call()` runs: the
    cffi module's (plog_*) and the one-call append's (Appender.append, csrc/pyrecords.c, which
    calls plog_segment_append_chunk)."""
    python, native = [], []

    def profile(frame, event, arg):
        if event == "call":
            python.append(frame.f_code.co_name)
        elif event == "c_call" and getattr(arg, "__name__", "").startswith("plog_"):
            native.append(arg.__name__)
        elif event == "c_call" and type(getattr(arg, "__self__", None)).__name__ == "Appender":
            native.append("Appender." + arg.__name__)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return python[:-1] if python and python[-1] == "frames_and_c_calls" else python, native


def follower_batch(offset: int, epoch: int = 1, **kwargs) -> bytes:
    return storage.build_batch([b"v%d " % offset * 20], base_offset=offset, partition_leader_epoch=epoch, **kwargs)


def test_a_follower_append_is_one_frame_and_one_c_call(tmp_path):
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_as_follower(follower_batch(0))          # the first: an empty log's rule, the state made
        batch = follower_batch(1)
        python, native = frames_and_c_calls(lambda: log.append_as_follower(batch))
        assert python == ["<lambda>", "append_as_follower"]
        assert native == ["Appender.append"]
        assert log.log_end_offset == 2


def test_a_leader_append_is_one_frame_and_one_c_call(tmp_path):
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_as_leader(storage.build_batch([b"first"]), 4)
        batch = storage.build_batch([b"second"])
        python, native = frames_and_c_calls(lambda: log.append_as_leader(batch, 4))
        assert python == ["<lambda>", "append_as_leader"]
        assert native == ["Appender.append"]
        assert log.log_end_offset == 2 and log.latest_epoch == 4


def test_the_one_call_answer_is_an_append_info(tmp_path):
    """C makes the common append's AppendInfo (csrc/pyrecords.c): the NamedTuple itself, as the
    general path's -- its type, fields, equality, repr and pickling."""
    import pickle

    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_as_follower(follower_batch(0))
        batch = follower_batch(1) + follower_batch(2)
        python, native = frames_and_c_calls(lambda: log.append_as_follower(batch))
        assert native == ["Appender.append"]
        info = log.append_as_follower(follower_batch(3))
        assert type(info) is storage.AppendInfo and len(info) == 8
        assert info == storage.AppendInfo(3, 3, info.max_timestamp, 3, 1, 1, len(follower_batch(3)), False)
        assert info.duplicate is False and info._asdict()["first_offset"] == 3
        assert repr(info).startswith("AppendInfo(first_offset=3, last_offset=3,")
        assert pickle.loads(pickle.dumps(info)) == info and hash(info) == hash(tuple(info))
        assert (log.metrics.appends, log.metrics.append_batches, log.metrics.append_records) == (3, 4, 4)


def test_an_epoch_past_int32_is_refused_on_the_one_call_path_as_before(tmp_path):
    """C's int32 epoch: the one call refuses a larger one (OverflowError, as cffi's argument
    check did), nothing written."""
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_as_leader(storage.build_batch([b"first"]), 4)
        before = _state(log)
        with pytest.raises(OverflowError):
            log.append_as_leader(storage.build_batch([b"second"]), 2**31)
        assert _state(log) == before


def _state(log: PartitionLog):
    return (log.log_start_offset, log.log_end_offset, log.epoch_cache.entries, len(log.segments),
            [open(s.log_path, "rb").read() for s in log.segments],
            sorted((pid, e.producer_epoch, e.last_timestamp, list(e.batch_metadata)) for pid, e in log.producer_state.producers.items()),
            (log.metrics.appends, log.metrics.append_batches, log.metrics.append_records, log.metrics.append_bytes))


def _outcome(append, data):
    try:
        return append(data)
    except errors.StorageError as exc:
        return type(exc).__name__


def test_the_one_frame_path_makes_the_log_the_general_path_makes(tmp_path):
    """`bytes` take the one-frame path; the same chunks as bytearrays take the general loop."""
    chunks = [follower_batch(i, epoch=1) for i in range(30)]                 # rolls at 4 KiB
    chunks += [follower_batch(30 + i, epoch=2 + i // 10) for i in range(20)]    # new epochs
    chunks.append(storage.build_batch([b"p"], base_offset=50, partition_leader_epoch=3, producer_id=7,
                                      producer_epoch=0, base_sequence=0))    # a producer batch
    chunks.append(follower_batch(51, epoch=3) + follower_batch(52, epoch=3)[:20])   # a partial tail
    chunks.append(follower_batch(10, epoch=3))                               # below the log end
    bad = bytearray(follower_batch(60, epoch=3))
    bad[-1] ^= 1
    chunks.append(bytes(bad))                                                # a CRC mismatch
    chunks.append(follower_batch(60, epoch=3))
    with PartitionLog.open(tmp_path / "a-0", CONFIG) as fast, PartitionLog.open(tmp_path / "b-0", CONFIG) as slow:
        for chunk in chunks:
            assert _outcome(fast.append_as_follower, chunk) == _outcome(slow.append_as_follower, bytearray(chunk))
            assert _state(fast) == _state(slow)
            fast.check_invariants()
        assert len(fast.segments) > 1 and fast.epoch_cache.entries[-1] == (3, 40)


def test_leader_appends_on_the_one_frame_path_match_the_general_path(tmp_path):
    def producer_batch(seq: int, pid: int = 9) -> bytes:
        return storage.build_batch([b"x" * 100], producer_id=pid, producer_epoch=0, base_sequence=seq)

    chunks = [storage.build_batch([b"a" * 200]) for _ in range(20)] + [producer_batch(i) for i in range(10)]
    chunks += [producer_batch(3), producer_batch(20), storage.build_batch([b"z"], producer_id=11, producer_epoch=0,
                                                                          base_sequence=0)]
    with PartitionLog.open(tmp_path / "a-0", CONFIG) as fast, PartitionLog.open(tmp_path / "b-0", CONFIG) as slow:
        for i, chunk in enumerate(chunks):
            epoch = 1 if i < 25 else 2                       # the epoch moves once on the way
            assert _outcome(lambda c, e=epoch: fast.append_as_leader(c, e), chunk) == \
                _outcome(lambda c, e=epoch: slow.append_as_leader(c, e), bytearray(chunk))
            assert _state(fast) == _state(slow)
            fast.check_invariants()


class CountingIO(FaultyIO):
    def __init__(self):
        super().__init__()
        self.writes = 0

    def pwrite(self, fd, data, offset):
        self.writes += 1
        return super().pwrite(fd, data, offset)


@pytest.mark.parametrize("role", ["follower", "leader"])
def test_a_failed_write_on_the_one_frame_path_takes_the_dir_offline_once(tmp_path, role):
    """The write goes through the I/O seam as ever: its failure is the dir's failure state, and
    the write is not tried a second time."""
    seam = CountingIO()
    with sio.using(seam):
        log = PartitionLog.open(tmp_path / "t-0", CONFIG)
        if role == "follower":
            append, first, second = log.append_as_follower, follower_batch(0), follower_batch(1)
        else:
            def append(chunk):
                return log.append_as_leader(chunk, 1)
            first, second = storage.build_batch([b"a"]), storage.build_batch([b"b"])
        append(first)
        writes = seam.writes
        seam.fail["pwrite"] = (errno.EIO, 0)
        with pytest.raises(errors.LogDirOfflineError):
            append(second)
        assert seam.fired == ["pwrite"] and seam.writes == writes + 1
        assert log.failure_channel.offline and log.log_end_offset == 1
        with pytest.raises(errors.LogDirOfflineError):
            append(second)
        with pytest.raises(errors.LogDirOfflineError):
            log.close()


def test_a_leader_append_of_a_read_only_view_of_bytes_is_one_frame_too(tmp_path):
    """The broker's case: a produce request's records are a view of its frame, not bytes."""
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_as_leader(storage.build_batch([b"first"]), 4)
        frame = b"head" + storage.build_batch([b"second"]) + b"tail"
        view = memoryview(frame)[4:-4]
        python, native = frames_and_c_calls(lambda: log.append_as_leader(view, 4))
        assert python == ["<lambda>", "append_as_leader"]
        assert native == ["Appender.append"]
        assert log.log_end_offset == 2 and log.latest_epoch == 4


def test_a_follower_append_of_a_read_only_view_of_bytes_is_one_frame_too(tmp_path):
    """The broker's case: a fetch answer's records are a view of its frame (wire/fetch_response),
    appended as they lie, the same log as from bytes."""
    with PartitionLog.open(tmp_path / "b-0", CONFIG) as b, PartitionLog.open(tmp_path / "a-0", CONFIG) as a:
        first = follower_batch(0)
        b.append_as_follower(first)
        a.append_as_follower(first)      # a's segment the latest opened: the one-frame path's
        batch = follower_batch(1) + follower_batch(2)
        frame = b"head" + batch + b"tail"
        view = memoryview(frame)[4:-4]
        python, native = frames_and_c_calls(lambda: a.append_as_follower(view))
        assert python == ["<lambda>", "append_as_follower"]
        assert native == ["Appender.append"]
        assert a.log_end_offset == 3 and frame == b"head" + batch + b"tail"
        b.append_as_follower(batch)
        assert _state(a) == _state(b)
        view.release()          # nothing holds the view's buffer (a held export refuses this)


def test_a_read_only_view_is_appended_as_it_lies(tmp_path):
    """A produce request's records arrive as a read-only memoryview of its frame: the leader
    appends them as it appends `bytes` (stamped copies of the headers, the view never written)
    and copies nothing of the chunk; a writable view is still copied first."""
    import tracemalloc

    chunk = b"".join(storage.build_batch([b"r" * 1000] * 100, base_timestamp=1_700_000_000_000 + i)
                     for i in range(40))                        # ~4 MiB
    frame = b"header--" + chunk + b"--trailer"
    view = memoryview(frame)[8:8 + len(chunk)]
    config = LogConfig(segment_bytes=64 << 20, fsync=False)
    with PartitionLog.open(tmp_path / "a-0", config) as a, PartitionLog.open(tmp_path / "b-0", config) as b:
        first = storage.build_batch([b"first"], base_timestamp=1_700_000_000_000)
        a.append_as_leader(first, 2)
        b.append_as_leader(first, 2)
        tracemalloc.start()
        try:
            info = a.append_as_leader(view, 2)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < len(chunk) // 4, peak                    # the chunk was not copied
        assert frame[8:8 + len(chunk)] == chunk                # nor written to
        assert info == b.append_as_leader(chunk, 2)
        assert _state(a) == _state(b)
        writable = bytearray(chunk)
        assert a.append_as_leader(memoryview(writable), 2) == b.append_as_leader(bytes(writable), 2)
        assert writable == chunk and _state(a) == _state(b)


_VIEW_IN_A_CYCLE = r"""
import errno, gc, sys
import storage
from storage import LogConfig, PartitionLog
from storage.core import errors, io as sio
from faulty_io import FaultyIO

for i in range(20):
    seam = FaultyIO()
    with sio.using(seam):
        log = PartitionLog.open(f"{sys.argv[1]}/t{i}-0", LogConfig(segment_bytes=4096, fsync=False))
        follower = sys.argv[2] == "follower"
        log.append_as_leader(storage.build_batch([b"a"]), 1)
        seam.fail["pwrite"] = (errno.EIO, 0)
        frame = b"head" + storage.build_batch([b"b"], base_offset=1) + b"tail"
        try:
            if follower:
                log.append_as_follower(memoryview(frame)[4:-4])
            else:
                log.append_as_leader(memoryview(frame)[4:-4], 1)
        except errors.LogDirOfflineError:
            pass        # kept by the failure channel: its traceback holds append_as_leader's frame
        try:
            log.close()
        except errors.LogDirOfflineError:
            pass
        del frame, log
    gc.collect()
print("collected")
"""


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_a_failed_append_of_a_view_leaves_nothing_the_collector_trips_on(tmp_path, role):
    """The failure channel keeps the first failure, whose traceback holds the append's frame: a
    cycle.  A view the frame had exported to C and not released made the collector that clears
    that cycle crash the process (a segfault); run in a child so such a crash fails this test."""
    import os
    import subprocess
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", _VIEW_IN_A_CYCLE, str(tmp_path), role], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0 and "collected" in done.stdout, (done.returncode, done.stderr[-2000:])
