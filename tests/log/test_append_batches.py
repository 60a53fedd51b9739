"""PartitionLog.append_batches: separate batch buffers appended as one chunk, all or nothing,
with the leader's or the follower's rules (the same log as appending the concatenation)."""
from __future__ import annotations

import errno

import pytest
from faulty_io import FaultyIO
from hypothesis import given
from hypothesis import strategies as st

import storage
from storage import LogConfig, LogDir, PartitionLog
from storage.core import errors
from storage.core import io as sio
from tests.tiers import tiered

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256, fsync=False)


def batches(count: int, first_offset: int = 0, records: int = 3, epoch: int = 1) -> list[bytes]:
    return [bytes(storage.build_batch([b"r%d-%d" % (i, j) for j in range(records)], base_offset=first_offset + i * records,
                                      partition_leader_epoch=epoch)) for i in range(count)]


def files(log: PartitionLog) -> list[bytes]:
    return [open(s.log_path, "rb").read() for s in log.segments]


def test_follower_batches_make_the_log_the_concatenation_makes(tmp_path):
    data = batches(40, epoch=2) + batches(10, first_offset=120, epoch=3)
    with PartitionLog.open(tmp_path / "a-0", CONFIG) as a, PartitionLog.open(tmp_path / "b-0", CONFIG) as b:
        for i in range(0, len(data), 7):
            info = a.append_batches(data[i:i + 7], as_leader=False)
            assert info == b.append_as_follower(b"".join(data[i:i + 7]))
        assert files(a) == files(b) and len(a.segments) > 1          # rolls happen between calls
        assert a.epoch_cache.entries == b.epoch_cache.entries == [(2, 0), (3, 120)]


def test_leader_batches_get_offsets_and_the_epoch(tmp_path):
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_as_leader([b"first"], leader_epoch=4)
        info = log.append_batches(batches(5, first_offset=1000, epoch=-1), as_leader=True, leader_epoch=5)
        assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (1, 15, 5, 15)
        got = [(b.base_offset, b.partition_leader_epoch) for b in log.batches()]
        assert got == [(0, 4)] + [(1 + 3 * i, 5) for i in range(5)]
        assert log.epoch_cache.entries == [(4, 0), (5, 1)]
        with pytest.raises(ValueError):
            log.append_batches(batches(1), as_leader=True)           # a leader append needs an epoch


def test_a_bad_batch_anywhere_writes_nothing_and_is_named(tmp_path):
    data = batches(6)
    bad = bytearray(data[3])
    bad[-1] ^= 0xFF
    data[3] = bytes(bad)
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_batches(batches(2, first_offset=100), as_leader=False)
        before = (log.log_end_offset, log.size_bytes, files(log))
        for as_leader in (False, True):
            shifted = batches(3, first_offset=200) + [data[3]] + batches(2, first_offset=212)
            with pytest.raises(errors.CorruptRecordError) as info:
                log.append_batches(shifted, as_leader=as_leader, leader_epoch=1)
            assert info.value.position == sum(map(len, shifted[:3])) and "CRC" in str(info.value)
            assert (log.log_end_offset, log.size_bytes, files(log)) == before


def test_a_partial_batch_at_the_end_is_refused_not_cut(tmp_path):
    data = batches(3)
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        with pytest.raises(errors.CorruptRecordError) as info:
            log.append_batches(data[:2] + [data[2][:40]], as_leader=False)
        assert info.value.position == len(data[0]) + len(data[1])
        assert log.size_bytes == 0 and log.log_end_offset == 0
        # A batch split across two buffers is whole once gathered: the same bytes.
        info = log.append_batches([data[0][:30], data[0][30:]], as_leader=False)
        assert info.last_offset == 2 and log.append_batches([], as_leader=False).batch_count == 0


@pytest.mark.parametrize("write", ["append_batches", "leader bytes", "follower pieces"])
@pytest.mark.parametrize("operation", ["pwrite", "ftruncate"])
def test_an_io_failure_takes_the_dir_offline_and_keeps_what_was_there(tmp_path, operation, write):
    """Through the gathering copy (append_batches), through the vectored write of a
    leader's immutable bytes (PLOG_APPEND_READONLY, test_append_chunk.py) and through a
    follower's pieces written as they lie (plog_segment_append_pieces)."""
    seam = FaultyIO()
    with sio.using(seam):
        logdir = LogDir.open(tmp_path / "d", LogConfig(fsync=True))
        log = logdir.partition("t", 0)
        log.append_batches(batches(4), as_leader=True, leader_epoch=0)
        log.flush()
        seam.fail["pwrite"] = (errno.EIO, 0)
        if operation == "ftruncate":            # the cut-back after the failed write fails too
            seam.fail["ftruncate"] = (errno.EIO, 0)
        with pytest.raises(errors.LogDirOfflineError):
            if write == "append_batches":
                log.append_batches(batches(4), as_leader=True, leader_epoch=0)
            elif write == "follower pieces":
                log.append_batches(batches(4, first_offset=12), as_leader=False)
            else:
                log.append_as_leader(b"".join(batches(4)), 0)
        assert seam.fired[0] == "pwrite"
        with pytest.raises(errors.LogDirOfflineError):
            log.append_batches(batches(1), as_leader=False)
        with pytest.raises(errors.LogDirOfflineError):
            logdir.close()
    with LogDir.open(tmp_path / "d", LogConfig(fsync=True)) as reopened:
        assert [b.base_offset for b in reopened.partition("t", 0).batches()][:4] == [0, 3, 6, 9]


# ---- a follower's pieces, written as they lie (plog_segment_append_pieces) --------------------

class VectoredIO(sio.PosixIO):
    """The POSIX seam, recording each vectored write as (buffers, bytes)."""

    def __init__(self):
        self.vectored = []

    def pwritev(self, fd, buffers, offset):
        self.vectored.append((len(buffers), sum(map(len, buffers))))
        return super().pwritev(fd, buffers, offset)


def test_follower_pieces_are_written_as_they_lie_in_vectored_groups(tmp_path, monkeypatch):
    """No gathering copy (the gathered path is made to fail), one vectored write per group of
    at most PLOG_IOV_MAX pieces and 1 MiB (a larger piece alone)."""
    def gathered(*args, **kwargs):
        raise AssertionError("a follower's bytes were gathered")
    big = [bytes(storage.build_batch([bytes(700_000)], base_offset=3 + i)) for i in range(3)]
    seam = VectoredIO()
    with sio.using(seam), PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False)) as log:
        log.append_batches(batches(1), as_leader=False)             # an empty log is gathered (restart rule)
        monkeypatch.setattr(PartitionLog, "_follower_chunk", gathered)
        seam.vectored.clear()
        info = log.append_batches(big, as_leader=False)
        assert (info.first_offset, info.last_offset, info.batch_count) == (3, 5, 3)
        assert seam.vectored == [(1, len(big[0])), (1, len(big[1])), (1, len(big[2]))]
        seam.vectored.clear()
        many = batches(300, first_offset=6, records=1)
        info = log.append_batches(many, as_leader=False)
        assert (info.first_offset, info.last_offset, info.size_bytes) == (6, 305, sum(map(len, many)))
        assert seam.vectored == [(256, sum(map(len, many[:256]))), (44, sum(map(len, many[256:])))]
        assert [b.base_offset for b in log.batches()] == [0, 3, 4, 5] + list(range(6, 306))


def test_a_crc_error_in_a_later_group_leaves_the_log_as_it_was(tmp_path):
    data = [bytes(storage.build_batch([bytes(600_000)], base_offset=10 + i)) for i in range(4)]
    bad = bytearray(data[3])
    bad[-1] ^= 1
    data[3] = bytes(bad)
    seam = VectoredIO()
    with sio.using(seam), PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False)) as log:
        log.append_batches(batches(2), as_leader=False)
        before = (log.log_end_offset, log.size_bytes, files(log))
        seam.vectored.clear()
        with pytest.raises(errors.CorruptRecordError) as info:
            log.append_batches(data, as_leader=False)
        assert info.value.position == sum(map(len, data[:3])) and "CRC" in str(info.value)
        assert seam.vectored[0] == (1, len(data[0]))        # the pieces' groups went out before the mismatch
        assert (log.log_end_offset, log.size_bytes, files(log)) == before


def piece_lists():
    """Follower chunks cut into pieces: runs of batches with gaps, epoch changes (more than the
    64 plog_validate holds), producer ids; sometimes damaged (an overlap, a flipped byte, a
    batch cut across two pieces, an empty piece)."""
    batch = st.tuples(st.integers(1, 4), st.integers(0, 3), st.integers(0, 80), st.booleans())
    return st.tuples(st.lists(batch, min_size=2, max_size=90), st.integers(1, 12),
                     st.sampled_from(["none"] * 6 + ["overlap", "flip", "cut", "empty"]), st.integers(0, 10**6))


def make_pieces(spec, next_offset: int) -> list[bytes]:
    rows, per_piece, damage, where = spec
    out, offset, sequence = [], next_offset, 0
    for records, gap, epoch, producer in rows:
        offset += gap
        out.append(bytes(storage.build_batch(
            [b"x" * records] * records, base_offset=offset, partition_leader_epoch=epoch,
            producer_id=7 if producer else -1, producer_epoch=0 if producer else -1,
            base_sequence=sequence if producer else -1, base_timestamp=1000)))
        sequence += records if producer else 0
        offset += records
    at = where % len(out)
    if damage == "overlap" and len(out) > 1:
        out[at], out[at - 1] = out[at - 1], out[at]
    elif damage == "flip":
        bad = bytearray(out[at])
        bad[where % len(bad)] ^= 0x10
        out[at] = bytes(bad)
    pieces = [b"".join(out[i:i + per_piece]) for i in range(0, len(out), per_piece)]
    at = where % len(pieces)
    if damage == "cut" and len(pieces[at]) > 30:
        pieces[at:at + 1] = [pieces[at][:30], pieces[at][30:]]
    elif damage == "empty":
        pieces.insert(at, b"")
    return pieces


def outcome(log, pieces, gathered: bool):
    try:
        info = log.append_batches([bytearray(b"".join(pieces))] if gathered else pieces, as_leader=False)
    except errors.StorageError as exc:
        info = (type(exc).__name__, str(exc).replace(str(log.path), "LOG"))
    producers = {pid: (e.producer_epoch, e.last_sequence, e.last_offset) for pid, e in
                 log.producer_state.active_producers.items()}
    return info, log.log_end_offset, files(log), log.epoch_cache.entries, producers


@tiered(150, deadline=None)
@given(first=piece_lists(), second=piece_lists())
def test_pieces_append_as_their_concatenation_would(tmp_path_factory, first, second):
    """The property behind plog_segment_append_pieces: every outcome (AppendInfo or error,
    files, epochs, producer state) is the gathered chunk's; a refusal falls back to it."""
    root = tmp_path_factory.mktemp("pieces")
    config = LogConfig(segment_bytes=24 << 10, index_interval_bytes=256, fsync=False)    # rolls now and then
    with PartitionLog.open(root / "a-0", config) as a, PartitionLog.open(root / "b-0", config) as b:
        for log in (a, b):
            log.append_batches([bytes(storage.build_batch([b"seed"], partition_leader_epoch=0, base_timestamp=1000))],
                               as_leader=False)
        for spec in (first, second):
            pieces = make_pieces(spec, a.log_end_offset)
            assert outcome(a, pieces, gathered=False) == outcome(b, pieces, gathered=True)


@pytest.mark.parametrize("as_leader", [False, True])
def test_an_iterator_of_batches_is_read_once_whichever_path_takes_it(tmp_path, as_leader):
    """A generator is consumed once: a path that falls back (here: bytearrays, not bytes) must
    still see every batch."""
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as log:
        log.append_batches(batches(1), as_leader=False)
        for kind in (bytes, bytearray):
            info = log.append_batches((kind(b) for b in batches(3, first_offset=log.log_end_offset)),
                                      as_leader=as_leader, leader_epoch=1)
            assert info.batch_count == 3
        assert log.log_end_offset == 21
