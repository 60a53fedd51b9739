"""The loader's decision table (storage/log/loader.py), a test per row, and what recovery must
never destroy (issue 13 item 3).

Kafka's LogLoaderTest checks that recovery accepts offset gaps between segments (compacted
and follower logs have them): testRecoveryOfSegmentWithOffsetOverflow-style logs and
testLogRecoversToCorrectOffset; the cases here are ours.
"""
import dataclasses
import os
import tempfile

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from storage import LogConfig, LogDir, PartitionLog, Record, build_batch, iter_batches
from storage.core import errors
from storage.core import io as sio
from storage.core._native import lib
from storage.core.files import segment_base
from storage.log.loader import DECISIONS, Action, decide

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100, segment_index_bytes=1024, fsync=False)


# ---- the table, row by row ----------------------------------------------------------------

@pytest.mark.parametrize("marker,place,index,headers,action", [
    ("unclean", "candidate", "ok", "ok", Action.RECOVER),
    ("unclean", "candidate", "damaged", "*", Action.RECOVER),
    ("clean", "candidate", "ok", "ok", Action.TRUST),
    ("unclean", "below", "ok", "ok", Action.TRUST),
    ("clean", "below", "damaged", "*", Action.REBUILD_INDEX),
    ("unclean", "below", "damaged", "*", Action.REBUILD_INDEX),
    ("clean", "candidate", "ok", "damaged", Action.REFUSE),
    ("unclean", "below", "ok", "damaged", Action.REFUSE),
])
def test_decision_rows(marker, place, index, headers, action):
    assert decide(marker, place, index, headers) is action


def test_every_row_is_reachable_and_the_table_is_total():
    seen = set()
    for marker in ("clean", "unclean"):
        for place in ("candidate", "below"):
            for index in ("ok", "damaged"):
                for headers in ("ok", "damaged", "*"):
                    if index == "damaged" and headers != "*" or index == "ok" and headers == "*":
                        continue
                    seen.add(decide(marker, place, index, headers))
    assert seen == {row[-1] for row in DECISIONS}


# ---- gaps are legal ---------------------------------------------------------------------------

def _gappy_follower(path, count=30, step=3):
    log = PartitionLog.open(path, CONFIG)
    for i in range(count):
        log.append_as_follower(build_batch([b"v%03d" % i * 8], base_offset=i * step, partition_leader_epoch=1))
    log.flush()
    bases = [s.base_offset for s in log.segments]
    log.close()
    return bases


@pytest.mark.parametrize("clean", [True, False])
def test_segments_that_do_not_abut_survive_every_open(tmp_path, clean):
    """Follower appends with offset gaps, across rolls (a new segment starts at the incoming
    batch's base offset, past the previous segment's end): every flushed batch is there after
    any reopen -- from recovery point 0 too, where the old loader deleted every segment after
    the first gap (19 of 30 batches)."""
    path = tmp_path / "t-0"
    bases = _gappy_follower(path)
    assert len(bases) > 3
    log = PartitionLog.open(path, CONFIG, recovery_point=0, clean_shutdown=clean)
    assert [b.base_offset for b in log.batches()] == [i * 3 for i in range(30)]
    assert [s.base_offset for s in log.segments] == bases
    assert not any(cut for _base, cut, _why in log.recovery_report)
    log.close()


def test_verify_and_recover_agree_on_a_gappy_log(tmp_path):
    from storage.cli import main

    _gappy_follower(tmp_path / "d" / "t-0")
    assert main(["verify", str(tmp_path / "d"), "--no-progress"]) == 0
    assert main(["recover", str(tmp_path / "d"), "--no-progress"]) == 0
    log = PartitionLog.open(tmp_path / "d" / "t-0", CONFIG)
    assert sum(1 for _ in log.batches()) == 30
    log.close()


# ---- damage below the recovery point: refuse, or cut only when forced -------------------------

def _flushed_log(path, batches=40):
    log = PartitionLog.open(path, CONFIG)
    for i in range(batches):
        log.append_as_leader([b"w%03d" % i * 10], 2)
    log.flush()
    segments = [(s.base_offset, s.log_path) for s in log.segments]
    leo = log.log_end_offset
    log.close()
    return segments, leo


def _flip(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x40]))


def test_damage_in_a_sealed_segment_below_the_recovery_point_refuses_the_open(tmp_path):
    """An index problem makes the loader rebuild the index; the scan that rebuilds it finds a
    damaged batch below the recovery point: the open fails, naming file, position and offset,
    and no file changes (the old loader cut the segment and deleted every later, durable one)."""
    path = tmp_path / "t-0"
    segments, leo = _flushed_log(path)
    base, victim = segments[1]
    os.remove(victim.replace(".log", ".index"))             # the loader must scan this one
    _flip(victim, 200)                                      # inside a batch, under its CRC
    before = {n: (path / n).read_bytes() for n in os.listdir(path)}
    with pytest.raises(errors.CorruptSegmentError) as info:
        PartitionLog.open(path, CONFIG, recovery_point=leo)
    assert info.value.file == victim and info.value.position >= 0 and info.value.offset >= base
    assert {n: (path / n).read_bytes() for n in os.listdir(path)} == before
    # The explicit choice cuts there and says what went.
    log = PartitionLog.open(path, CONFIG, recovery_point=leo, recover_mode="force")
    assert log.log_end_offset == info.value.offset
    kinds = {why.split(":")[0] for _b, _c, why in log.recovery_report}
    assert "deleted" in kinds and any(b == base and c > 0 for b, c, _w in log.recovery_report)
    assert not any(os.path.exists(p) for b, p in segments[2:])
    log.close()


def _two_partitions_one_damaged(root, config=CONFIG):
    """Partitions a-0 and b-0 closed cleanly; a-0's second segment (sealed) has a base offset
    going backwards (outside the CRC).  Returns the damaged file."""
    with LogDir.open(root, config) as logdir:
        for name in ("a", "b"):
            log = logdir.partition(name, 0)
            for i in range(30):
                log.append_as_leader([b"x%03d" % i * 10], 1)
    victim = sorted((root / "a-0").glob("*.log"))[1]
    with open(victim, "r+b") as f:
        f.write((0).to_bytes(8, "big"))
    return victim


def test_a_partition_refused_by_logdir_leaves_the_others_open_and_no_marker(tmp_path):
    config = dataclasses.replace(CONFIG, sealed_segment_check="open")
    _two_partitions_one_damaged(tmp_path / "d", config)
    with LogDir.open(tmp_path / "d", config) as logdir:
        assert set(logdir.unopened) == {("a", 0)} and logdir.partitions() == [("b", 0)]
        with pytest.raises(errors.CorruptSegmentError):
            logdir.partition("a", 0)
        assert logdir.partition("b", 0).log_end_offset == 30
    assert not (tmp_path / "d" / ".kafka_cleanshutdown").exists()


def test_a_damaged_sealed_segment_after_a_clean_shutdown_is_refused_at_its_first_use(tmp_path):
    # sealed_segment_check="first_use" (the default, Kafka's KAFKA-7283): the partition opens
    # without opening its sealed segments; the first read of the damaged one raises the error
    # the open would have raised, and changes nothing.
    victim = _two_partitions_one_damaged(tmp_path / "d")
    before = {p.name: p.read_bytes() for p in (tmp_path / "d" / "a-0").iterdir()}
    with LogDir.open(tmp_path / "d", CONFIG) as logdir:
        assert logdir.unopened == {} and logdir.partitions() == [("a", 0), ("b", 0)]
        log = logdir.partition("a", 0)
        assert log.log_end_offset == 30 and repr(log.segments[1]).endswith("not opened)")
        base = log.segments[1].base_offset
        for _ in range(2):                       # refused again: it stays unopened
            with pytest.raises(errors.CorruptSegmentError) as info:
                list(log.batches(base))
            assert info.value.file == str(victim) and info.value.position == 0, info.value
            assert repr(log.segments[1]).endswith("not opened)")
        assert [b.base_offset for b in log.batches(log.segments[-1].base_offset)]     # the rest reads
        assert log.append_as_leader([b"after"], 1).first_offset == 30
        assert logdir.partition("b", 0).log_end_offset == 30
    assert {p.name: p.read_bytes() for p in (tmp_path / "d" / "a-0").iterdir()
            if p.name in before and p.name.startswith(victim.name[:20])} == \
        {n: d for n, d in before.items() if n.startswith(victim.name[:20])}


# ---- names and leftovers ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["99999999999999999999.log", "00000000000000000000.log.foo",
                                  "000000000000000000001.log", "0000000000000000000a.log",
                                  "00000000000000000000.index.bak"])
def test_hostile_file_names_are_ignored(tmp_path, name):
    path = tmp_path / "t-0"
    _flushed_log(path, batches=5)
    (path / name).write_bytes(b"junk")
    log = PartitionLog.open(path, CONFIG, recovery_point=0)
    assert [b.base_offset for b in log.batches()] == list(range(5))
    log.close()


def test_a_directory_named_like_a_segment_is_ignored(tmp_path):
    path = tmp_path / "t-0"
    _flushed_log(path, batches=5)
    (path / f"{100:020d}.log").mkdir()
    log = PartitionLog.open(path, CONFIG, recovery_point=0)
    assert log.log_end_offset == 5
    log.close()


def test_segment_base_parses_only_kafka_names():
    assert segment_base("00000000000000000042.log", ".log") == 42
    assert segment_base("00000000000000000042.log.deleted") == 42
    assert segment_base("99999999999999999999.log") is None       # beyond int64
    assert segment_base("00000000000000000042.index", ".log") is None


def test_epoch_checkpoint_tmp_leftover_is_removed(tmp_path):
    path = tmp_path / "t-0"
    _flushed_log(path, batches=3)
    (path / "leader-epoch-checkpoint.tmp").write_bytes(b"0\n1\n5 0\n")
    log = PartitionLog.open(path, CONFIG)
    assert not (path / "leader-epoch-checkpoint.tmp").exists()
    assert [tuple(e) for e in log.epoch_cache.entries] == [(2, 0)]
    assert [b.base_offset for b in iter_batches(log.read(0, 1 << 20))][0] == 0
    log.close()


def test_a_tmp_leftover_without_its_checkpoint_is_replaced_by_the_new_checkpoint(tmp_path):
    """A crash between the tmp file's write and its rename (swarm seed 75) leaves the tmp and no
    checkpoint.  The open's cache writes the checkpoint it misses (sync flush) through that same
    tmp name, and the loader, which lists the dir once, must not then try to remove the tmp it
    saw before: the open succeeds."""
    path = tmp_path / "t-0"
    _flushed_log(path, batches=3)
    (path / "leader-epoch-checkpoint").rename(path / "leader-epoch-checkpoint.tmp")
    log = PartitionLog.open(path, CONFIG)
    assert not (path / "leader-epoch-checkpoint.tmp").exists() and (path / "leader-epoch-checkpoint").exists()
    assert log.log_end_offset == 3
    log.close()


def test_recover_refuses_damage_below_the_recovery_point_unless_forced(tmp_path, capsys):
    """`storage recover` recovers from the recovery point the dir records; damage below it is
    reported (file, position, offset), nothing changes, exit 1; `--force` cuts it and the
    report says what went."""
    from storage.cli import main

    with LogDir.open(tmp_path / "d", CONFIG) as logdir:
        log = logdir.partition("t", 0)
        for i in range(40):
            log.append_as_leader([b"y%03d" % i * 10], 1)
    victim = sorted((tmp_path / "d" / "t-0").glob("*.log"))[1]
    _flip(str(victim), 100)
    (tmp_path / "d" / ".kafka_cleanshutdown").unlink()
    before = {p.name: p.read_bytes() for p in (tmp_path / "d" / "t-0").iterdir()}
    capsys.readouterr()
    assert main(["recover", str(tmp_path / "d"), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "REFUSED" in out and str(victim) in out and "--force" in out
    assert {p.name: p.read_bytes() for p in (tmp_path / "d" / "t-0").iterdir()} == before
    assert main(["verify", str(tmp_path / "d"), "--no-progress"]) == 1      # verify sees it too
    assert main(["recover", str(tmp_path / "d"), "--no-progress", "--force"]) == 1
    out = capsys.readouterr().out
    assert "CUT" in out and "deleted" in out
    assert main(["verify", str(tmp_path / "d"), "--no-progress"]) == 0


# ---- out-of-range checkpoint values --------------------------------------------------------

def _kafka_style_dir(root):
    """A log dir without our metadata store (as Kafka leaves it), with one partition."""
    with LogDir.open(root, CONFIG) as logdir:
        log = logdir.partition("t", 0)
        for i in range(20):
            log.append_as_leader([b"k%03d" % i * 10], 1)
    os.remove(os.path.join(root, "storage.mdb"))
    for name in os.listdir(root):
        if name.startswith("storage.mdb"):
            os.remove(os.path.join(root, name))


@pytest.mark.parametrize("value", [str(2**63), "-5"])
def test_an_out_of_range_checkpoint_value_is_a_clear_error(tmp_path, value):
    root = str(tmp_path / "d")
    _kafka_style_dir(root)
    with open(os.path.join(root, "recovery-point-offset-checkpoint"), "w") as f:
        f.write(f"0\n1\nt 0 {value}\n")
    before = {n: open(os.path.join(root, "t-0", n), "rb").read() for n in os.listdir(os.path.join(root, "t-0"))}
    with pytest.raises(errors.StorageError) as info:
        LogDir.open(root, CONFIG)
    assert "recovery-point-offset-checkpoint" in str(info.value) and "line 3" in str(info.value)
    assert {n: open(os.path.join(root, "t-0", n), "rb").read() for n in os.listdir(os.path.join(root, "t-0"))} \
        == before
    from storage.cli import main  # the CLI: one line, no traceback

    assert main(["verify", root, "--no-progress"]) in (0, 1)


def test_a_log_start_offset_above_the_log_end_deletes_nothing(tmp_path):
    """Kafka drops every segment when the checkpointed log start offset is above the recovered
    log end; a log start offset is never above the high watermark when it is written, so that
    means lost data or a wrong file: the partition is refused instead, unless forced."""
    root = str(tmp_path / "d")
    _kafka_style_dir(root)
    with open(os.path.join(root, "log-start-offset-checkpoint"), "w") as f:
        f.write("0\n1\nt 0 1000000\n")
    with LogDir.open(root, CONFIG) as logdir:
        assert ("t", 0) in logdir.unopened
        assert "above the log end offset 20" in str(logdir.unopened[("t", 0)])
    assert len([n for n in os.listdir(os.path.join(root, "t-0")) if n.endswith(".log")]) > 1
    # The bogus value is not carried into the metadata store: the next open keeps everything.
    with LogDir.open(root, CONFIG) as logdir:
        assert logdir.partition("t", 0).log_end_offset == 20


# ---- the clean open's header walk -------------------------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.integers(0, 9000), st.integers(0, 2**41)), min_size=1, max_size=30),
       interval=st.sampled_from([64, 4096, 1 << 20]), chunked=st.booleans(), cut=st.none() | st.integers(1, 30))
@example(batches=[(0, 0), (0, 604_800_001)], interval=64, chunked=False, cut=1)    # more than a week apart
def test_a_clean_open_reads_back_what_the_appends_left(tmp_path, batches, interval, chunked, cut):
    """A clean open walks the batch headers after the last index hint by pread, through a 4 KiB
    window (batch sizes here straddle it, and with a 1 MiB index interval there is no hint at
    all).  It derives the log end, the max timestamp and its offset the appends (and a
    truncation, when `cut` asks for one) left -- each batch holds one record, so they are the
    count kept, the largest timestamp kept and its first offset -- and agrees with the same
    walk over a mapping of the file."""
    # One segment: no roll by size, nor by time (timestamps here lie up to 2^41 ms apart).
    config = LogConfig(segment_bytes=1 << 20, segment_ms=2**62, index_interval_bytes=interval, fsync=False)
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "t-0")
    log = PartitionLog.open(path, config)
    built = [build_batch([Record(value=b"v" * size, timestamp=ts)], partition_leader_epoch=1) for size, ts in batches]
    if chunked:      # one follower chunk: one index entry at most (Kafka's rule per append)
        log.append_as_follower(b"".join(_rebased(data, offset) for offset, data in enumerate(built)))
    else:
        for data in built:
            log.append_as_leader(data, 1)
    if cut is not None and cut < len(batches):
        log.truncate_to(cut)
        batches = batches[:cut]
    stamps = [ts for _size, ts in batches]
    expected = (len(batches), max(stamps), stamps.index(max(stamps)))
    assert (log.log_end_offset, log.segments[-1].max_timestamp, log.segments[-1].offset_of_max_timestamp) == expected
    log.close()
    log = PartitionLog.open(path, config, clean_shutdown=True)
    segment = log.segments[-1]
    assert (log.log_end_offset, segment.max_timestamp, segment.offset_of_max_timestamp) == expected
    assert not segment.index_suspect and not log.recovery_report
    mapped = lib.plog_segment_load(segment.native, segment.log_pointer())       # the same walk, mapped
    assert mapped == 0 and (segment.next_offset, segment.max_timestamp, segment.offset_of_max_timestamp) == expected
    log.close()


def test_a_clean_open_walks_the_active_segment_from_its_last_index_entry(tmp_path):
    """The walk that finds the active segment's end starts at its last offset-index entry, not
    at the batch holding its largest timestamp: the time index's last entry already holds the
    largest timestamp of every batch up to that entry's (both are added together).  Here the
    first of 400 batches has the largest timestamp; the walk used to read every header from it
    to the end (a pread each), now it reads the first batch and the few after the last entry,
    and finds the same end, largest timestamp and its offset."""
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=1024, fsync=False)
    path = str(tmp_path / "t-0")
    log = PartitionLog.open(path, config)
    for i in range(400):
        ts = 2_000_000 if i == 0 else 1_000_000 + i
        log.append_as_leader(build_batch([Record(value=b"v" * 200, timestamp=ts)], partition_leader_epoch=1), 1)
    expected = (log.log_end_offset, log.segments[-1].max_timestamp, log.segments[-1].offset_of_max_timestamp)
    assert expected == (400, 2_000_000, 0)
    log.close()

    log_reads = []

    class CountLogReads(sio.PosixIO):
        def pread(self, fd, length, offset):
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
                log_reads.append(offset)
            return super().pread(fd, length, offset)

    with sio.using(CountLogReads()):
        log = PartitionLog.open(path, config, clean_shutdown=True)
    segment = log.segments[-1]
    assert (log.log_end_offset, segment.max_timestamp, segment.offset_of_max_timestamp) == expected
    assert not segment.index_suspect and len(log_reads) <= 3, log_reads
    log.close()


def _rebased(batch: bytes, base_offset: int) -> bytes:
    data = bytearray(batch)
    data[0:8] = base_offset.to_bytes(8, "big")        # the base offset is outside the CRC
    return bytes(data)
