"""Append throughput, fsync off (docs/design.md "Performance targets": ours >= 90% of a plain Python file.write
of the same bytes, the ceiling, and >= 1.5x LMDB).

Every case writes the same prebuilt batches (conftest.prebuild_batches), one call per batch,
into a fresh directory per round, and closes what it wrote; opening happens in `setup` and
is not timed.  The peers:

  ours-follower   PartitionLog.append_as_follower(batch) of batches with consecutive offsets
  ours-leader     PartitionLog.append_as_leader(batch, epoch) of producer batches (offsets
                  assigned, epoch stamped: the batch is copied and rewritten)
  file.write      open(path, "wb") then f.write(batch) per batch: the ceiling, no validation
  lmdb-writemap   one write transaction per batch, put(8-byte big-endian base offset, batch,
  lmdb            append=True); sync=False, metasync=False; writemap=True / False.
                  Both settings run: which is faster depends on the batch size here
                  (writemap wins on 16 KiB values, loses on 1 MiB ones), and the report
                  compares against the faster one.
  sqlite          sqlite3, journal_mode=WAL, synchronous=OFF, table (offset INTEGER PRIMARY
                  KEY, batch BLOB NOT NULL), one INSERT per batch in autocommit mode (one
                  transaction per batch, like LMDB); closing (the WAL checkpoint) is timed.

The records path (a log made from Python records, not from prebuilt batches), on a smaller
volume (`records_total_bytes`, 16 MiB a round: kafka-python builds ~0.3 M records/s, so the
256 MiB of the other cases would take ~9 s a run):

  ours-records       PartitionLog.append_as_leader(values, 5): one call per batch, built in C
  kafka-python-log   DefaultRecordBatchBuilder per batch (one .append per record), base
                     offset and leader epoch stamped into the built batch with struct (what a
                     broker does), then f.write of it to a plain file: the log a pure-Python
                     stack writes.

Groups "append-16KiB" and "append-1MiB" hold one pedantic case per peer (rounds of the same
peer back to back, after one warm-up round); "append-paired" holds the A B A B measurement
the target ratios come from (see conftest's docstring), each measured run preceded by an
untimed run of the same peer (paired_append's `prime`), which puts every peer in the state
the pedantic cases measure it in.  SQLite (~1.7 s a run at 16 KiB) is paired with
ours-follower only (the same input: batches with their offsets) and for `slow_paired_rounds`
rounds; the records path has its own paired test ("16KiB-records", "1MiB-records") in the
same group.

The per-call figure (group "append-percall-paired"; docs/performance.md "The append figure"
is the one method every table uses): append_as_follower (and append_as_leader), one batch a
call, against one write(2) of the same bytes a batch, fsync off, close timed, every run in a
fresh directory and primed by an untimed run of the same peer, the pairs alternated (A B,
then B A), K rounds, the median ratio and its spread reported.  Two batch sizes:

  small   one 100-byte record a batch (~170 bytes), 8 MiB a run, against `os.write` (a
          buffered file.write would gather these into 8 KiB writes: no per-call baseline);
  16KiB   the append-paired workload (256 MiB a run), against `file.write`, which passes a
          write larger than its 8 KiB buffer straight to one write(2): the same baseline.

`python benchmarks/bench_append.py [--rounds K]` runs this group alone, outside pytest.
"""
from __future__ import annotations

import functools
import os
import sqlite3
import struct
import time
import warnings

import lmdb
import pytest
from benchlib import Contender, KiB, MiB, Workload, make_values, paired, pedantic_paired, prebuild_batches

import storage

with warnings.catch_warnings():     # kafka-python 3.0.12 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

LEADER_EPOCH = 5
SEGMENT_FILE = "00000000000000000000.log"


def _log_config() -> storage.LogConfig:
    return storage.LogConfig(segment_bytes=1 << 30, fsync=False)


class Peer:
    name = label = role = setting = ""

    def open(self, directory: str, wl: Workload):
        """Untimed: make what `run` writes into; returns the state `run` takes."""
        raise NotImplementedError

    def run(self, state) -> None:
        """Timed: append every batch, then close."""
        raise NotImplementedError

    def check(self, state, wl: Workload) -> None:
        """Untimed: what was written is all there."""


class _State:
    __slots__ = ("directory", "target", "batches", "keys")

    def __init__(self, directory, target, batches, keys=None):
        self.directory, self.target, self.batches, self.keys = directory, target, batches, keys


class OursFollower(Peer):
    name, label, role = "ours-follower", "ours (append_as_follower)", "ours"
    setting = "LogConfig(segment_bytes=1<<30, fsync=False); one append_as_follower per batch"

    def open(self, directory, wl):
        return _State(directory, storage.PartitionLog.open(directory, _log_config()), wl.follower)

    def run(self, state):
        log = state.target
        append = log.append_as_follower
        for batch in state.batches:
            append(batch)
        log.close()

    def check(self, state, wl):
        assert state.target.log_end_offset == wl.total_records
        assert os.path.getsize(os.path.join(state.directory, SEGMENT_FILE)) == wl.total_bytes


class OursLeader(OursFollower):
    name, label, role = "ours-leader", "ours (append_as_leader)", "ours"
    setting = "LogConfig(segment_bytes=1<<30, fsync=False); one append_as_leader(batch, 5) per batch"

    def open(self, directory, wl):
        return _State(directory, storage.PartitionLog.open(directory, _log_config()), wl.leader)

    def run(self, state):
        log = state.target
        append = log.append_as_leader
        for batch in state.batches:
            append(batch, LEADER_EPOCH)
        log.close()


class FileWrite(Peer):
    name, label, role = "file.write", "file.write (ceiling)", "ceiling"
    setting = "open(path, 'wb') (buffered, default buffer); one f.write per batch; no fsync"

    def open(self, directory, wl):
        return _State(directory, open(os.path.join(directory, SEGMENT_FILE), "wb"), wl.follower)

    def run(self, state):
        f = state.target
        write = f.write
        for batch in state.batches:
            write(batch)
        f.close()

    def check(self, state, wl):
        assert os.path.getsize(os.path.join(state.directory, SEGMENT_FILE)) == wl.total_bytes


class OsWrite(FileWrite):
    name, label, role = "os.write", "os.write (one write(2) a batch)", "ceiling"
    setting = "os.open(path, O_WRONLY | O_CREAT | O_TRUNC); one os.write per batch; os.close; no fsync"

    def open(self, directory, wl):
        fd = os.open(os.path.join(directory, SEGMENT_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        return _State(directory, fd, wl.follower)

    def run(self, state):
        fd, write = state.target, os.write
        for batch in state.batches:
            write(fd, batch)
        os.close(fd)


class Lmdb(Peer):
    role = "peer"

    def __init__(self, writemap: bool):
        self.writemap = writemap
        self.name = "lmdb-writemap" if writemap else "lmdb"
        self.label = f"LMDB (writemap={writemap})"
        self.setting = (f"lmdb.open(sync=False, metasync=False, writemap={writemap}); one write txn per batch, "
                        f"put(8-byte big-endian base offset, batch, append=True)")

    def open(self, directory, wl):
        env = lmdb.open(directory, map_size=2 * wl.total_bytes + 64 * MiB, sync=False, metasync=False,
                        writemap=self.writemap, max_dbs=0)
        keys = [offset.to_bytes(8, "big") for offset in wl.base_offsets]
        return _State(directory, env, wl.follower, keys)

    def run(self, state):
        env = state.target
        begin = env.begin
        for key, batch in zip(state.keys, state.batches):
            with begin(write=True) as txn:
                txn.put(key, batch, append=True)
        env.close()

    def check(self, state, wl):
        env = lmdb.open(state.directory, readonly=True, lock=False)
        try:
            assert env.stat()["entries"] == wl.batch_count
            with env.begin() as txn:
                assert txn.get(state.keys[-1]) == wl.follower[-1]
        finally:
            env.close()


class Sqlite(Peer):
    name, label, role = "sqlite", "SQLite (WAL, synchronous=OFF)", "peer"
    setting = ("sqlite3: journal_mode=WAL, synchronous=OFF; table (offset INTEGER PRIMARY KEY, batch BLOB NOT NULL); "
               "one INSERT per batch, autocommit (a transaction per batch); close (WAL checkpoint) timed")
    FILE_NAME = "log.db"
    INSERT = "INSERT INTO log (offset, batch) VALUES (?, ?)"

    def open(self, directory, wl):
        db = sqlite3.connect(os.path.join(directory, self.FILE_NAME), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE TABLE log (offset INTEGER PRIMARY KEY, batch BLOB NOT NULL)")
        return _State(directory, db, wl.follower, wl.base_offsets)

    def run(self, state):
        db = state.target
        execute, insert = db.execute, self.INSERT
        for key, batch in zip(state.keys, state.batches):
            execute(insert, (key, batch))
        db.close()

    def check(self, state, wl):
        db = sqlite3.connect(os.path.join(state.directory, self.FILE_NAME))
        try:
            assert db.execute("SELECT count(*) FROM log").fetchone()[0] == wl.batch_count
            assert db.execute("SELECT batch FROM log WHERE offset = ?", (state.keys[-1],)).fetchone()[0] == wl.follower[-1]
        finally:
            db.close()


# ---- the records path: a log made from Python records ---------------------------------------

class RecordsWorkload:
    """`batch_count` batches of the same `values` (100 bytes each), about total_bytes in all."""

    def __init__(self, batch_bytes: int, total_bytes: int):
        wl = prebuild_batches(batch_bytes, total_bytes)
        self.batch_bytes = batch_bytes
        self.values = make_values(wl.records_per_batch)
        self.batch_count = wl.batch_count
        self.records_per_batch = wl.records_per_batch
        self.total_bytes = wl.total_bytes
        self.total_records = wl.total_records

    def info(self) -> dict:
        return {"bytes": self.total_bytes, "records": self.total_records, "batches": self.batch_count,
                "batch_bytes": self.total_bytes // self.batch_count, "records_per_batch": self.records_per_batch}


class OursRecords(Peer):
    name, label, role = "ours-records", "ours (append_as_leader of records)", "ours"
    setting = "LogConfig(segment_bytes=1<<30, fsync=False); one append_as_leader(list of values, 5) per batch"

    def open(self, directory, wl):
        return _State(directory, storage.PartitionLog.open(directory, _log_config()), wl.values, wl.batch_count)

    def run(self, state):
        log = state.target
        append, values = log.append_as_leader, state.batches
        for _ in range(state.keys):
            append(values, LEADER_EPOCH)
        log.close()

    def check(self, state, wl):
        assert state.target.log_end_offset == wl.total_records
        assert os.path.getsize(os.path.join(state.directory, SEGMENT_FILE)) == wl.total_bytes


class KafkaPythonLog(Peer):
    name, label, role = "kafka-python-log", "kafka-python-built log (file.write)", "peer"
    setting = ("DefaultRecordBatchBuilder(magic=2, no compression) per batch, .append(offset, ts, None, value, []) "
               "per record, base offset and epoch stamped with struct.pack_into, f.write to open(path, 'wb')")
    _STAMP = struct.Struct(">q")
    _EPOCH = struct.Struct(">i")

    def open(self, directory, wl):
        return _State(directory, open(os.path.join(directory, SEGMENT_FILE), "wb"), wl.values, wl.batch_count)

    def run(self, state):
        f = state.target
        write, values = f.write, state.batches
        stamp, stamp_epoch = self._STAMP.pack_into, self._EPOCH.pack_into
        headers: list = []
        offset = 0
        for _ in range(state.keys):
            builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                                producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                                batch_size=64 << 20)
            append = builder.append
            ts = int(time.time() * 1000)
            for delta, value in enumerate(values):
                append(delta, ts, None, value, headers)
            batch = builder.build()
            stamp(batch, 0, offset)
            stamp_epoch(batch, 12, LEADER_EPOCH)
            write(batch)
            offset += len(values)
        f.close()

    def check(self, state, wl):
        assert os.path.getsize(os.path.join(state.directory, SEGMENT_FILE)) == wl.total_bytes
        with open(os.path.join(state.directory, SEGMENT_FILE), "rb") as f:
            batches = list(storage.iter_batches(f.read()))
        assert len(batches) == wl.batch_count and batches[-1].last_offset == wl.total_records - 1


FOLLOWER, LEADER, FILE, OS_WRITE = OursFollower(), OursLeader(), FileWrite(), OsWrite()
LMDB_WRITEMAP, LMDB_PLAIN = Lmdb(writemap=True), Lmdb(writemap=False)
SQLITE = Sqlite()
OURS_RECORDS, KAFKA_PYTHON_LOG = OursRecords(), KafkaPythonLog()
PEERS = [FOLLOWER, FILE, LEADER, LMDB_WRITEMAP, LMDB_PLAIN, SQLITE]
RECORDS_PEERS = [OURS_RECORDS, KAFKA_PYTHON_LOG]
SIZES = {"16KiB": 16 * KiB, "1MiB": 1 * MiB}


def _cases():
    for size_label, batch_bytes in SIZES.items():
        for peer in PEERS + RECORDS_PEERS:
            yield pytest.param(size_label, batch_bytes, peer, id=f"{size_label}-{peer.name}")


# What timed_run reads: wall time (the suite), or the process's CPU time, user and system
# (`--clock cpu` of the command line: on a machine other processes load, a run's wall time
# counts the time it waited for a core; its CPU time does not, and it still counts the
# kernel's copy of every write into the page cache).
CLOCK = [time.perf_counter]


def timed_run(peer: Peer, wl: Workload, fresh_dirs) -> float:
    """One untimed open, one timed run (appends + close), one untimed check and delete."""
    directory = fresh_dirs.new(peer.name)
    try:
        state = peer.open(directory, wl)
        start = CLOCK[0]()
        peer.run(state)
        elapsed = CLOCK[0]() - start
        peer.check(state, wl)
        return elapsed
    finally:
        fresh_dirs.discard(directory)


@pytest.fixture(scope="session")
def records_workload(sizes):
    cache = {}

    def get(batch_bytes: int) -> RecordsWorkload:
        if batch_bytes not in cache:
            cache[batch_bytes] = RecordsWorkload(batch_bytes, sizes.records_total_bytes)
        return cache[batch_bytes]

    return get


@pytest.mark.parametrize("size_label,batch_bytes,peer", list(_cases()))
def test_append(benchmark, workload, records_workload, sizes, fresh_dirs, size_label, batch_bytes, peer):
    wl = records_workload(batch_bytes) if peer in RECORDS_PEERS else workload(batch_bytes)
    benchmark.group = f"append-{size_label}"
    benchmark.extra_info.update(wl.info())
    benchmark.extra_info.update(peer=peer.name, label=peer.label, role=peer.role, setting=peer.setting)

    def setup():
        return (peer.open(fresh_dirs.new(peer.name), wl),), {}

    def teardown(state):
        try:
            peer.check(state, wl)
        finally:
            fresh_dirs.discard(state.directory)

    benchmark.pedantic(peer.run, setup=setup, teardown=teardown, rounds=sizes.rounds,
                       warmup_rounds=sizes.warmup_rounds, iterations=1)


PAIRS = [(ours, peer) for ours in (FOLLOWER, LEADER) for peer in (FILE, LMDB_WRITEMAP, LMDB_PLAIN)]
SLOW_PAIRS = [(FOLLOWER, SQLITE)]           # run for `slow_rounds` rounds only
RECORDS_PAIRS = [(OURS_RECORDS, KAFKA_PYTHON_LOG)]


def paired_append(wl: Workload, fresh_dirs, rounds: int, *, warmup: bool = True, prime: bool = True,
                  slow_rounds: int | None = None, pairs=None, peers=None, slow_pairs=None) -> dict:
    """benchlib.paired over the append peers: for each (ours, peer) pair, `rounds` times, run
    both back to back (A B, then B A on the next round), and keep the ratio of the pair:
    throughput(ours) / throughput(peer) = t_peer / t_ours.  Returns the per-pair ratios and medians and every run's time.

    prime: run each measured run once untimed just before (A' A B' B), so every peer writes
    into page-cache pages that its own previous run has just freed.  Without it LMDB with
    writemap=True is bimodal here (about 2.3 GB/s when its previous run ended less than ~2 s
    before, about 0.4 GB/s after a few seconds spent on other peers: its mmap page faults
    suffer most from the idle-page effect), and its pair ratios depend on the schedule.

    slow_pairs (default SLOW_PAIRS) run in the first `slow_rounds` rounds only (default:
    all); pairs / peers default to PAIRS / PEERS (the records-path test passes its own)."""
    peers = PEERS if peers is None else peers
    all_pairs = PAIRS if pairs is None else pairs
    slow_pairs = SLOW_PAIRS if slow_pairs is None else slow_pairs
    slow_rounds = rounds if slow_rounds is None else min(slow_rounds, rounds)
    contenders = [Contender(peer.name, peer.label, peer.role, functools.partial(timed_run, peer, wl, fresh_dirs),
                            peer.setting) for peer in peers]
    named_pairs = ([(ours.name, peer.name) for ours, peer in all_pairs]
                   + [(ours.name, peer.name, slow_rounds) for ours, peer in slow_pairs])
    return paired(contenders, named_pairs, rounds, prime=prime, warmup=warmup, amount=wl.total_bytes)


@pytest.mark.parametrize("size_label,batch_bytes", list(SIZES.items()), ids=list(SIZES))
def test_append_paired(benchmark, workload, sizes, fresh_dirs, size_label, batch_bytes):
    wl = workload(batch_bytes)
    result = pedantic_paired(benchmark, "append-paired", paired_append, wl, fresh_dirs, sizes.paired_rounds,
                             warmup=not sizes.quick, slow_rounds=sizes.slow_paired_rounds)
    benchmark.extra_info.update(wl.info())
    benchmark.extra_info.update(size=size_label, **result)


@pytest.mark.parametrize("size_label,batch_bytes", list(SIZES.items()), ids=[f"{s}-records" for s in SIZES])
def test_append_records_paired(benchmark, records_workload, sizes, fresh_dirs, size_label, batch_bytes):
    """ours-records / kafka-python-log on `records_total_bytes`, primed like paired_append."""
    wl = records_workload(batch_bytes)
    result = pedantic_paired(benchmark, "append-paired", paired_append, wl, fresh_dirs,
                             sizes.slow_paired_rounds, warmup=not sizes.quick, pairs=RECORDS_PAIRS,
                             peers=RECORDS_PEERS, slow_pairs=[])
    benchmark.extra_info.update(wl.info())
    benchmark.extra_info.update(size=f"{size_label}-records", **result)


# ---- the per-call figure: one method for every table (module docstring) ----------------------

SMALL_BATCH_BYTES = 200         # one 100-byte record a batch
PERCALL = {"small": (SMALL_BATCH_BYTES, OS_WRITE), "16KiB": (16 * KiB, FILE)}


def percall_workload(size_label: str, sizes, workload=None) -> Workload:
    """The batches of one per-call row: the append-paired workload at 16 KiB (`workload`, the
    session's, when given), small_batch_total_bytes of one-record batches for "small"."""
    batch_bytes = PERCALL[size_label][0]
    if size_label == "small":
        return prebuild_batches(batch_bytes, sizes.small_batch_total_bytes)
    return workload(batch_bytes) if workload else prebuild_batches(batch_bytes, sizes.append_total_bytes)


def paired_percall(wl: Workload, fresh_dirs, baseline: Peer, rounds: int, *, warmup: bool = True) -> dict:
    """ours-follower and ours-leader against `baseline`, paired, alternated and primed."""
    return paired_append(wl, fresh_dirs, rounds, warmup=warmup, prime=True, pairs=[(FOLLOWER, baseline), (LEADER, baseline)],
                         peers=[FOLLOWER, LEADER, baseline], slow_pairs=[])


@pytest.mark.parametrize("size_label", list(PERCALL))
def test_append_percall_paired(benchmark, workload, sizes, fresh_dirs, size_label):
    wl = percall_workload(size_label, sizes, workload)
    result = pedantic_paired(benchmark, "append-percall-paired", paired_percall, wl, fresh_dirs, PERCALL[size_label][1],
                             sizes.paired_rounds, warmup=not sizes.quick)
    benchmark.extra_info.update(wl.info())
    benchmark.extra_info.update(size=size_label, **result)


def main(argv=None) -> int:
    """The per-call group alone, outside pytest: each pair's median ratio and its spread."""
    import argparse
    import dataclasses
    import tempfile

    from benchlib import FULL, FreshDirs

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--rounds", type=int, default=FULL.paired_rounds, help="K: pairs per (ours, baseline)")
    parser.add_argument("--small-bytes", type=int, default=FULL.small_batch_total_bytes)
    parser.add_argument("--big-bytes", type=int, default=FULL.append_total_bytes, help="bytes of 16 KiB batches a run")
    parser.add_argument("--sizes", default=",".join(PERCALL), help="comma-separated: small,16KiB")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the process's CPU time (user + system), for a loaded machine")
    args = parser.parse_args(argv)
    CLOCK[0] = time.process_time if args.clock == "cpu" else time.perf_counter
    sizes = dataclasses.replace(FULL, small_batch_total_bytes=args.small_bytes, append_total_bytes=args.big_bytes)
    with tempfile.TemporaryDirectory(prefix="bench-percall-") as root:
        for label in args.sizes.split(","):
            wl = percall_workload(label, sizes)
            result = paired_percall(wl, FreshDirs(root), PERCALL[label][1], args.rounds)
            for pair in result["pairs"].values():
                ratios = sorted(pair["ratios"])
                print(f"{label:6s} {pair['ours']:14s} / {pair['peer']:10s} median {pair['median']:.3f} "
                      f"[{ratios[0]:.3f}, {ratios[-1]:.3f}] K={len(ratios)} "
                      f"({wl.batch_count} batches of {wl.total_bytes // wl.batch_count} B)")
            for name, seconds in result["median_seconds"].items():
                print(f"{label:6s} {name:14s} {seconds / wl.batch_count * 1e6:.2f} us a call (median run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
