"""LeaderEpochCache: Kafka's LeaderEpochFileCacheTest behaviours in our words, the checkpoint
file, the deferred flush, and a model check against a literal reading of docs/kafka-formats.md 4."""
import errno
import os

import pytest
from conftest import TESTDATA
from hypothesis import given
from hypothesis import strategies as st

from storage import EpochEntry, LeaderEpochCache
from storage.core import checkpoint
from tests.tiers import tiered


def cache_with(*entries, path=None):
    cache = LeaderEpochCache(path)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def pairs(cache):
    return [tuple(e) for e in cache.entries]


# ---- assign -----------------------------------------------------------------------------

def test_assign_and_end_offset_of_latest_epoch_is_the_log_end():
    cache = cache_with((2, 10))
    assert cache.latest_epoch == 2
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_first_assignment_of_an_epoch_wins():
    cache = cache_with((2, 6), (2, 7))
    assert pairs(cache) == [(2, 6)]
    assert cache.assign(2, 6) is False


def test_same_latest_epoch_with_an_earlier_offset_replaces_it():
    cache = cache_with((2, 6), (3, 8), (4, 11))
    assert cache.assign(4, 10) is True
    assert pairs(cache) == [(2, 6), (3, 8), (4, 10)]


def test_older_epoch_removes_every_later_entry():
    assert pairs(cache_with((1, 5), (2, 6), (1, 7))) == [(1, 7)]
    assert pairs(cache_with((2, 6), (3, 5))) == [(3, 5)]          # offsets must increase too
    assert pairs(cache_with((1, 5), (3, 10), (2, 12))) == [(1, 5), (2, 12)]


def test_negative_epoch_or_offset_is_an_argument_error():
    cache = LeaderEpochCache(None)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -5)


def test_many_leader_changes_are_tracked_in_order():
    cache = LeaderEpochCache(None)
    for epoch in range(0, 50, 2):
        cache.assign(epoch, epoch * 10)
    assert [e.epoch for e in cache.entries] == list(range(0, 50, 2))


# ---- end_offset_for (KIP-101, KIP-279) ------------------------------------------------------

def test_end_offset_sentinels():
    assert LeaderEpochCache(None).end_offset_for(0, 100) == (-1, -1)       # empty cache
    assert LeaderEpochCache(None).end_offset_for(-1, 100) == (-1, -1)      # undefined epoch
    assert cache_with((2, 100)).end_offset_for(3, 200) == (-1, -1)         # above every epoch
    assert cache_with((2, 100)).end_offset_for(-1, 200) == (-1, -1)


def test_requested_epoch_below_the_first_is_echoed_with_the_first_start():
    cache = cache_with((5, 11), (6, 12))
    assert cache.end_offset_for(4, 20) == (4, 11)
    assert cache_with((1, 0)).end_offset_for(0, 5) == (0, 0)               # docs/kafka-formats.md 11.3


def test_end_offset_is_the_start_of_the_next_larger_epoch():
    cache = cache_with((0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(0, 30) == (0, 13)
    assert cache.end_offset_for(1, 30) == (0, 13)    # not cached: the largest epoch below answers
    assert cache.end_offset_for(2, 30) == (2, 17)
    assert cache.end_offset_for(3, 30) == (2, 17)
    assert cache.end_offset_for(4, 30) == (4, 30)
    assert cache.end_offset_for(5, 30) == (-1, -1)


# ---- truncation ------------------------------------------------------------------------------

@pytest.mark.parametrize("end_offset,expected", [
    (8, [(2, 6)]),                       # an epoch starting exactly there goes
    (9, [(2, 6), (3, 8)]),
    (11, [(2, 6), (3, 8)]),
    (12, [(2, 6), (3, 8), (4, 11)]),     # beyond the latest start: nothing to do
    (6, []),
    (-1, [(2, 6), (3, 8), (4, 11)]),     # undefined: no-op
])
def test_truncate_from_end(end_offset, expected):
    cache = cache_with((2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(end_offset)
    assert pairs(cache) == expected


@pytest.mark.parametrize("start_offset,expected", [
    (5, [(2, 6), (3, 8), (4, 11)]),      # too early: nothing
    (6, [(2, 6), (3, 8), (4, 11)]),      # at the first start: removed and re-added unchanged
    (8, [(3, 8), (4, 11)]),
    (9, [(3, 9), (4, 11)]),              # between epochs: the surviving epoch moves up
    (11, [(4, 11)]),
    (15, [(4, 15)]),                     # past every entry: the latest epoch survives, moved up
    (-1, [(2, 6), (3, 8), (4, 11)]),
])
def test_truncate_from_start(start_offset, expected):
    cache = cache_with((2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start_offset)
    assert pairs(cache) == expected


def test_truncations_of_an_empty_cache_are_harmless():
    cache = LeaderEpochCache(None)
    assert cache.truncate_from_end(5) is False and cache.truncate_from_start(5) is False
    assert cache.latest_epoch is None and cache.latest_entry is None and cache.earliest_entry is None


# ---- queries -------------------------------------------------------------------------------

def test_navigation_queries():
    cache = cache_with((2, 6), (4, 11), (7, 20))
    assert cache.previous_epoch() == 4
    assert cache.previous_epoch(7) == 4 and cache.previous_epoch(5) == 4 and cache.previous_epoch(2) is None
    assert cache.previous_entry(4) == EpochEntry(2, 6)
    assert cache.next_epoch(2) == 4 and cache.next_epoch(3) == 4 and cache.next_epoch(7) is None
    assert cache.epoch_entry(4) == EpochEntry(4, 11) and cache.epoch_entry(3) is None
    assert cache.earliest_entry == (2, 6) and cache.latest_entry == (7, 20)
    assert cache_with((2, 6)).previous_epoch() is None


@pytest.mark.parametrize("offset,epoch", [(0, None), (5, None), (6, 2), (10, 2), (11, 4), (19, 4), (20, 7), (999, 7)])
def test_epoch_for_offset(offset, epoch):
    assert cache_with((2, 6), (4, 11), (7, 20)).epoch_for_offset(offset) == epoch


def test_epoch_entries_in_range_leaves_the_cache_alone():
    cache = cache_with((2, 6), (4, 11), (7, 20))
    assert [tuple(e) for e in cache.epoch_entries_in_range(8, 20)] == [(2, 8), (4, 11)]
    assert [tuple(e) for e in cache.epoch_entries_in_range(-1, 11)] == [(2, 6)]
    assert pairs(cache) == [(2, 6), (4, 11), (7, 20)]


# ---- the checkpoint file -----------------------------------------------------------------------

def test_file_format_and_persistence(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    assert path.read_bytes() == b"0\n0\n"                       # created empty
    for epoch, offset in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, offset)
        assert path.read_bytes().startswith(b"0\n")             # durable before assign returns
    assert path.read_bytes() == b"0\n3\n2 6\n3 8\n4 11\n"
    assert not os.path.exists(str(path) + ".tmp")
    assert pairs(LeaderEpochCache(path)) == [(2, 6), (3, 8), (4, 11)]
    cache.truncate_from_end(8)
    assert path.read_bytes() == b"0\n1\n2 6\n"
    cache.clear_and_flush()
    assert path.read_bytes() == b"0\n0\n"


def test_no_write_when_nothing_changed(tmp_path):
    cache = LeaderEpochCache(tmp_path / "cp")
    cache.assign(1, 0)
    writes = cache.writes
    cache.assign(1, 5)
    cache.truncate_from_end(10)
    cache.truncate_from_start(-1)
    assert cache.writes == writes


@pytest.mark.parametrize("content,reason", [
    (b"1\n0\n", "version"),
    (b"x\n", "version"),
    (b"0\n2\n1 0\n", "expected 2 entries"),
    (b"0\n1\n1 0 7\n", "malformed line"),
    (b"0\n1\n1\n", "malformed line"),
    (b"0\n1\none 0\n", "non-integer"),
    (b"0\nz\n", "entry count"),
    (b"0\n1\n-3 0\n", "negative"),
    (b"\xff\xfe", "UTF-8"),
])
def test_malformed_file_is_reported_not_trusted(tmp_path, content, reason):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    cache = LeaderEpochCache(path)
    assert cache.entries == []
    assert cache.load_error is not None and reason in str(cache.load_error)
    assert str(path) in str(cache.load_error)


def test_reading_reapplies_the_monotonicity_rules(tmp_path):
    path = tmp_path / "cp"
    path.write_bytes(b"0\n3\n1 0\n3 10\n2 12\n")     # a later, older epoch wipes the newer one
    assert pairs(LeaderEpochCache(path)) == [(1, 0), (2, 12)]


def test_empty_file_is_an_empty_cache(tmp_path):
    path = tmp_path / "cp"
    path.write_bytes(b"")
    cache = LeaderEpochCache(path)
    assert cache.entries == [] and cache.load_error is None


@pytest.mark.parametrize("relative,expected", [
    ("Jeong-Rae__KafkaDemo/@441d190/kraft-combined-logs/__cluster_metadata-0",
     [(1, 0), (2, 298), (3, 354), (5, 711), (6, 712)]),
    ("christseng89__RealTime_Analysis/@6c28121/kafka-logs/__cluster_metadata-0",
     [(1, 0), (2, 5), (3, 6), (4, 7), (5, 8)]),
])
def test_reads_checkpoints_written_by_kafka(relative, expected):
    path = TESTDATA / "kafka-real" / relative / "leader-epoch-checkpoint"
    entries = [(int(e), int(o)) for e, o in checkpoint.read(path, 2)]
    assert entries == expected
    assert checkpoint.format_lines(entries) == path.read_bytes()


# ---- deferred flush (KIP-101 step 3) -----------------------------------------------------------

def test_deferred_mode_writes_at_flush(tmp_path):
    path = tmp_path / "cp"
    cache = LeaderEpochCache(path, epoch_flush="deferred")
    assert not path.exists() and cache.dirty and cache.writes == 0   # created at the first flush
    cache.assign(1, 0)
    cache.assign(2, 10)
    assert not path.exists() and cache.dirty
    cache.flush()
    assert path.read_bytes() == b"0\n2\n1 0\n2 10\n" and not cache.dirty
    writes = cache.writes
    cache.flush()
    assert cache.writes == writes == 1


def test_a_deferred_partition_costs_no_fsync_until_its_first_flush(tmp_path):
    """Creating a partition and its first append write nothing durable with
    epoch_flush="deferred" (issue 18: no fsync per new partition); its first flush writes the
    epoch file, then makes the new dir's name durable in the log dir (Kafka flushes the parent
    dir lazily too), and a crash before that flush loses nothing that was flushed."""
    from faulty_io import FaultyIO

    from storage import LogConfig, LogDir
    from storage.core import io as sio

    class Counting(FaultyIO):
        def __init__(self):
            super().__init__()
            self.syncs = []

        def fsync(self, fd, flags=0):
            self.syncs.append("fsync")
            return super().fsync(fd, flags)

        def fsync_dir(self, path, flags=0):
            self.syncs.append(("dir", os.path.basename(path)))
            return super().fsync_dir(path, flags)

    seam = Counting()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", LogConfig(fsync=True, epoch_flush="deferred"))
        seam.syncs.clear()
        log = logdir.partition("t", 0)
        log.append_as_leader([b"a"], 3)
        assert seam.syncs == [] and not (tmp_path / "d" / "t-0" / "leader-epoch-checkpoint").exists()
        log.flush()
        assert ("dir", "d") in seam.syncs and log.epoch_cache.entries == [(3, 0)]
        assert (tmp_path / "d" / "t-0" / "leader-epoch-checkpoint").read_bytes() == b"0\n1\n3 0\n"
        logdir.close()


def test_unknown_flush_mode():
    with pytest.raises(ValueError):
        LeaderEpochCache(None, epoch_flush="sometimes")


# ---- model check -----------------------------------------------------------------------------

class Literal:
    """docs/kafka-formats.md 4.1-4.4 read word for word, on a plain list."""

    def __init__(self):
        self.entries = []

    def assign(self, epoch, offset):
        latest = self.entries[-1] if self.entries else None
        needed = latest is None or epoch != latest[0] or offset < latest[1]
        if needed:
            while self.entries and (self.entries[-1][0] >= epoch or self.entries[-1][1] >= offset):
                self.entries.pop()
            self.entries.append((epoch, offset))

    def end_offset_for(self, requested, leo):
        if requested == -1:
            return (-1, -1)
        if self.entries and self.entries[-1][0] == requested:
            return (requested, leo)
        higher = [e for e in self.entries if e[0] > requested]
        if not higher:
            return (-1, -1)
        lower = [e for e in self.entries if e[0] <= requested]
        if not lower:
            return (requested, higher[0][1])
        return (lower[-1][0], higher[0][1])

    def truncate_from_end(self, end):
        if end >= 0 and self.entries and self.entries[-1][1] >= end:
            while self.entries and self.entries[-1][1] >= end:
                self.entries.pop()

    def truncate_from_start(self, start):
        removed = None
        while self.entries and self.entries[0][1] <= start:
            removed = self.entries.pop(0)
        if removed is not None:
            self.entries.insert(0, (removed[0], start))

    def epoch_for_offset(self, offset):
        previous = None
        for epoch, start in self.entries:
            if start == offset:
                return epoch
            if start > offset:
                return previous
            previous = epoch
        return previous


operations = st.lists(st.one_of(
    st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
    st.tuples(st.just("end"), st.integers(-1, 60)),
    st.tuples(st.just("start"), st.integers(-1, 60)),
), max_size=40)


@tiered(300, deadline=None)
@given(operations=operations, queries=st.lists(st.integers(-1, 14), max_size=10),
       offsets=st.lists(st.integers(0, 70), max_size=10))
def test_matches_a_literal_reading_of_the_reference(tmp_path_factory, operations, queries, offsets):
    path = tmp_path_factory.mktemp("epochs") / "leader-epoch-checkpoint"
    cache, model = LeaderEpochCache(path), Literal()
    for op in operations:
        if op[0] == "assign":
            cache.assign(op[1], op[2])
            model.assign(op[1], op[2])
        elif op[0] == "end":
            cache.truncate_from_end(op[1])
            model.truncate_from_end(op[1])
        else:
            cache.truncate_from_start(op[1])
            model.truncate_from_start(op[1])
        assert pairs(cache) == model.entries
        cache.check_invariants()
        epochs = [e for e, _ in model.entries]
        starts = [o for _, o in model.entries]
        assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))
    for epoch in queries:
        assert cache.end_offset_for(epoch, 100) == model.end_offset_for(epoch, 100)
    for offset in offsets:
        assert cache.epoch_for_offset(offset) == model.epoch_for_offset(offset)
    assert pairs(LeaderEpochCache(path)) == model.entries     # what is on disk is what is in memory


@pytest.mark.parametrize("operation", ["fsync_dir", "fsync"])
def test_a_failed_first_flush_of_a_deferred_partition_takes_the_dir_offline(tmp_path, operation):
    """The deferred first flush (the parent dir's entry, the epoch file) is an I/O path like
    any other: its failure is the failure state (error 56), never retried into success."""
    from faulty_io import FaultyIO

    from storage import LogConfig, LogDir
    from storage.core import errors
    from storage.core import io as sio

    seam = FaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", LogConfig(fsync=True, epoch_flush="deferred"))
        log = logdir.partition("t", 0)
        log.append_as_leader([b"a"], 3)
        seam.fail[operation] = (errno.EIO, 0)
        with pytest.raises(errors.LogDirOfflineError) as info:
            log.flush()
        assert info.value.error_code == 56 and seam.fired == [operation]
        with pytest.raises(errors.LogDirOfflineError):
            log.flush()
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
