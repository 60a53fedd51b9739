"""Index files are created lazily, as Kafka's LazyIndex makes them: a segment made by a roll has
no `.index`/`.timeindex` until its first flush or seal (its entries live in memory until
then, see csrc/index.c); opening a log creates the active segment's files, as Kafka's load
does when it resizes the active segment's indexes.

Ported: LogSegmentTest.testChangeFileSuffixes (the index files of a fresh segment are not
created eagerly, and renaming/deleting the segment does not create them);
LogLoaderTest.testLogEndLessThanStartAfterReopen's last assertions are in test_logdir.py.
"""
from __future__ import annotations

import os

import storage.core.io as sio
from storage import LogConfig, PartitionLog
from storage.sim.fs import SimFS

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=64, fsync=False)


def index_files(segment) -> tuple[bool, bool]:
    return os.path.exists(segment.index_path), os.path.exists(segment.time_index_path)


def test_a_rolled_segment_has_no_index_files_until_its_first_flush(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    assert index_files(log.active_segment) == (True, True)      # the load creates them
    log.append_as_leader([b"x" * 100] * 3, 1)
    log.roll()
    new = log.active_segment
    assert index_files(new) == (False, False)
    for _i in range(20):
        log.append_as_leader([b"y" * 100], 1)
    assert new.offset_index_entries() and index_files(new) == (False, False)
    # reads and lookups use the entries in memory
    assert log.read(10, 1 << 20) is not None and log.offset_for_timestamp(0).offset == 0
    log.flush()
    assert index_files(new) == (True, True)
    assert os.path.getsize(new.index_path) == 8 * len(new.offset_index_entries())
    assert os.path.getsize(new.time_index_path) == 12 * len(new.time_index_entries())
    log.close()


def test_deleting_or_suspending_a_lazy_segment_creates_nothing(tmp_path):
    """testChangeFileSuffixes: renaming (here: deleting, which renames to .deleted first) a
    segment whose index files were never made does not make them; neither does closing its
    descriptors in the open-segment cache and reopening them."""
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    log.append_as_leader([b"x"], 1)
    log.roll()
    log.append_as_leader([b"y"], 1)
    lazy = log.active_segment
    lazy._suspend()
    lazy._use()
    assert index_files(lazy) == (False, False)
    log.truncate_fully_and_start_at(100)          # deletes every segment, the lazy one too
    assert not os.path.exists(lazy.log_path) and index_files(lazy) == (False, False)
    # the new segment at 100 is lazy too, until its first flush (here: the close's seal)
    assert sorted(n for n in os.listdir(log.path) if n.startswith("0")) == [f"{100:020d}.log"]
    log.close()
    assert sorted(n for n in os.listdir(log.path) if n.startswith("0")) == [
        f"{100:020d}.index", f"{100:020d}.log", f"{100:020d}.snapshot", f"{100:020d}.timeindex"]


def test_index_files_created_by_a_flush_survive_a_crash(tmp_path):
    """The directory entries of index files created at a flush are made durable by it: after a
    crash that keeps only what was fsynced, the flushed segment's files are all there."""
    fs = SimFS(tmp_path, seed=3)
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=64, fsync=True)
    with sio.using(fs):
        log = PartitionLog.open(tmp_path / "t-0", config)
        log.append_as_leader([b"x" * 100] * 2, 1)
        log.roll()
        for _ in range(5):
            log.append_as_leader([b"y" * 100], 1)
        rolled = log.active_segment
        log.flush()
        entries = rolled.offset_index_entries()
        state = fs.state(tmp_path, mode="a")        # the page cache lost: only what is durable
    assert state[rolled.index_path] == b"".join(
        (offset - rolled.base_offset).to_bytes(4, "big") + position.to_bytes(4, "big")
        for offset, position in entries)
    assert rolled.time_index_path in state and rolled.log_path in state


def test_a_crash_before_the_first_flush_recovers_and_creates_the_files(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    log.append_as_leader([b"x"], 1)
    log.roll()
    log.append_as_leader([b"y"] * 4, 1)
    lazy_paths = (log.active_segment.index_path, log.active_segment.time_index_path)
    for segment in log.segments:        # a crash: descriptors go, nothing is sealed or flushed
        segment.close()
    assert not any(os.path.exists(p) for p in lazy_paths)
    reopened = PartitionLog.open(tmp_path / "t-0", CONFIG, recovery_point=0)
    assert reopened.log_end_offset == 5
    assert all(os.path.exists(p) for p in lazy_paths)
    reopened.close()
