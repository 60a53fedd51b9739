"""Reads from the page cache (docs/design.md "Performance targets": sequential fetch >= LMDB's read-all; point
read by offset p50 <= 3 µs).

Every contender reads the same batches: the session's big log (conftest.big_log: 1 GiB of
16 KiB batches in a full run), copied once into an LMDB environment (key: 8-byte big-endian
base offset, value: the batch) and a SQLite table (offset INTEGER PRIMARY KEY, batch BLOB;
WAL, synchronous=OFF).  Everything is written before the first timed run and stays in the
page cache (24 GiB here); each contender is run once untimed first (paired's warm-up), so
its mappings are faulted in.  Nothing is written while reading, so there are no fresh files.

Sequential fetch ("read-seq-paired"), one pass over the whole log per run:
  ours             PartitionLog.read(offset, 1 MiB) as a fetch does (whole batches), copied
                   into bytes as ReplicaManager's fetch does; the next offset from the last
                   batch header (one lib.plog_scan_buffer call over the chunk, no CRC)
  ours-zero-copy   the same without the copy (the memoryview is the answer)
  lmdb             one read txn, cursor.iternext(values) with buffers=False: each value copied
                   into bytes (py-lmdb's default; the design's "LMDB read-all")
  lmdb-zero-copy   the same with buffers=True (memoryviews into the map)
  sqlite           SELECT batch FROM log ORDER BY offset (each blob copied into bytes)
  mmap-memcpy      the limit: one warm mmap of the .log, bytes(mm[pos:pos + 1 MiB]) per MiB
Pairs: ours with lmdb (the target), sqlite (`slow_paired_rounds` only) and the limit;
ours-zero-copy with lmdb-zero-copy.

Point reads ("read-point-paired"): the same list of uniformly random offsets for everyone,
each call timed alone with perf_counter_ns (the timer's own cost, reported, is included):
  ours             PartitionLog.read(offset, 1): the batch holding offset, zero-copy
  lmdb             cursor.set_range(8-byte key) then prev() unless exact (buffers=True)
  sqlite           SELECT batch FROM log WHERE offset <= ? ORDER BY offset DESC LIMIT 1
                   (a fifth of the reads: it is ~5x slower)
  bisect+mmap      the limit: bisect.bisect_right on a Python list of base offsets and a
                   memoryview slice of a warm mmap -- the least a Python lookup can do
The pair ratio is p50(peer) / p50(ours) of one run each; p50 and p99 per run are kept.
`point_reads` (50,000) reads a run, paired_rounds // 3 rounds.
"""
from __future__ import annotations

import bisect
import mmap
import os
import random
import shutil
import sqlite3
import statistics
from time import perf_counter as _now
from time import perf_counter_ns as _now_ns

import lmdb
import pytest
from benchlib import CHUNK_BYTES, Contender, paired, percentiles, timer_overhead_ns

import storage
from storage.core._native import ffi, lib

FETCH_BYTES = 1 << 20           # max_bytes of a fetch (the fetcher's default)
SEGMENT_FILE = "00000000000000000000.log"


class ReadSide:
    """The big log opened for reading, and its LMDB and SQLite copies."""

    def __init__(self, big_log, root: str):
        self.info = big_log
        self.log = storage.PartitionLog.open(big_log["path"], big_log["config"], clean_shutdown=True)
        assert self.log.log_end_offset == big_log["log_end_offset"]
        self.leo = self.log.log_end_offset
        self.bytes = self.log.size_bytes
        assert len(self.log.segments) == 1, "the read cases assume one segment"
        self.batch_size = big_log["batch_bytes"]
        # One pass over the batches gives every peer the same bytes and the limit its bases.
        self.bases, self.positions = [], []
        view = self.log.segments[0].view()
        for b in self.log.batches():
            self.bases.append(b.base_offset)
            self.positions.append(b.position)
        self.positions.append(self.bytes)
        self.lmdb_path = os.path.join(root, "lmdb")
        os.makedirs(self.lmdb_path)
        env = lmdb.open(self.lmdb_path, map_size=2 * self.bytes + (64 << 20), sync=False, metasync=False,
                        writemap=True)
        per_txn = max(1, CHUNK_BYTES // self.batch_size)
        for start in range(0, len(self.bases), per_txn):
            with env.begin(write=True) as txn:
                for i in range(start, min(start + per_txn, len(self.bases))):
                    txn.put(self.bases[i].to_bytes(8, "big"), view[self.positions[i]:self.positions[i + 1]],
                            append=True)
        env.close()
        self.env = lmdb.open(self.lmdb_path, readonly=True, lock=False, map_size=2 * self.bytes + (64 << 20))
        assert self.env.stat()["entries"] == len(self.bases)
        self.sqlite_path = os.path.join(root, "log.db")
        db = sqlite3.connect(self.sqlite_path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE TABLE log (offset INTEGER PRIMARY KEY, batch BLOB NOT NULL)")
        for start in range(0, len(self.bases), per_txn):
            end = min(start + per_txn, len(self.bases))
            db.execute("BEGIN")
            db.executemany("INSERT INTO log (offset, batch) VALUES (?, ?)",
                           [(self.bases[i], view[self.positions[i]:self.positions[i + 1]]) for i in range(start, end)])
            db.execute("COMMIT")
        self.db = db
        del view
        self._file = open(os.path.join(big_log["path"], SEGMENT_FILE), "rb")
        self.mm = mmap.mmap(self._file.fileno(), 0, prot=mmap.PROT_READ)
        self.scan = ffi.new("plog_scan *")

    def close(self):
        self.mm.close()
        self._file.close()
        self.db.close()
        self.env.close()
        self.log.close()

    # ---- sequential --------------------------------------------------------------------
    def _next_offset(self, chunk) -> int:
        scan = self.scan
        scan.base_offset, scan.index_interval_bytes, scan.check_crc, scan.epoch_capacity = 0, 0, 0, 0
        with ffi.from_buffer(chunk) as pointer:
            lib.plog_scan_buffer(pointer, len(chunk), scan, ffi.NULL)
        return scan.last_offset + 1

    def seq_ours(self, copy: bool) -> float:
        read, leo, next_offset = self.log.read, self.leo, self._next_offset
        offset = total = 0
        start = _now()
        while offset < leo:
            chunk = read(offset, FETCH_BYTES)
            if copy:
                chunk = bytes(chunk)
            total += len(chunk)
            offset = next_offset(chunk)
        elapsed = _now() - start
        assert total == self.bytes
        return elapsed

    def seq_lmdb(self, buffers: bool) -> float:
        total = 0
        start = _now()
        with self.env.begin(buffers=buffers) as txn:
            for value in txn.cursor().iternext(keys=False, values=True):
                total += len(value)
        elapsed = _now() - start
        assert total == self.bytes
        return elapsed

    def seq_sqlite(self) -> float:
        total = 0
        start = _now()
        for (value,) in self.db.execute("SELECT batch FROM log ORDER BY offset"):
            total += len(value)
        elapsed = _now() - start
        assert total == self.bytes
        return elapsed

    def seq_mmap(self) -> float:
        mm, size, step = self.mm, self.bytes, FETCH_BYTES
        total = 0
        start = _now()
        for position in range(0, size, step):
            total += len(mm[position:position + step])
        elapsed = _now() - start
        assert total == self.bytes
        return elapsed

    # ---- point reads -------------------------------------------------------------------
    def point_ours(self, targets) -> list[int]:
        read, pc = self.log.read, _now_ns
        lat = [0] * len(targets)
        for i, offset in enumerate(targets):
            t0 = pc()
            read(offset, 1)
            lat[i] = pc() - t0
        return lat

    def point_lmdb(self, targets) -> list[int]:
        pc = _now_ns
        lat = [0] * len(targets)
        with self.env.begin(buffers=True) as txn:
            cursor = txn.cursor()
            for i, offset in enumerate(targets):
                t0 = pc()
                key = offset.to_bytes(8, "big")
                if cursor.set_range(key):
                    if cursor.key() != key:
                        cursor.prev()
                else:
                    cursor.last()
                cursor.value()
                lat[i] = pc() - t0
        return lat

    def point_sqlite(self, targets) -> list[int]:
        execute, pc = self.db.execute, _now_ns
        query = "SELECT batch FROM log WHERE offset <= ? ORDER BY offset DESC LIMIT 1"
        lat = [0] * len(targets)
        for i, offset in enumerate(targets):
            t0 = pc()
            execute(query, (offset,)).fetchone()
            lat[i] = pc() - t0
        return lat

    def point_limit(self, targets) -> list[int]:
        bases, positions, view, pc = self.bases, self.positions, memoryview(self.mm), _now_ns
        find = bisect.bisect_right
        lat = [0] * len(targets)
        for i, offset in enumerate(targets):
            t0 = pc()
            j = find(bases, offset) - 1
            view[positions[j]:positions[j + 1]]
            lat[i] = pc() - t0
        view.release()
        return lat

    def check_point_reads(self, targets) -> None:
        """Untimed: every reader returns the batch that holds the offset."""
        with self.env.begin(buffers=False) as txn:
            cursor = txn.cursor()
            for offset in targets[:200]:
                ours = storage.iter_batches(bytes(self.log.read(offset, 1))).__next__()
                assert ours.base_offset <= offset <= ours.last_offset
                key = offset.to_bytes(8, "big")
                if cursor.set_range(key):
                    if cursor.key() != key:
                        cursor.prev()
                else:
                    cursor.last()
                assert cursor.value() == bytes(self.log.read(offset, 1))
                (blob,) = self.db.execute("SELECT batch FROM log WHERE offset <= ? ORDER BY offset DESC LIMIT 1",
                                          (offset,)).fetchone()
                assert blob == cursor.value()


@pytest.fixture(scope="module")
def read_side(big_log, fresh_dirs):
    root = fresh_dirs.new("read-peers")
    side = ReadSide(big_log, root)
    yield side
    side.close()
    shutil.rmtree(root, ignore_errors=True)


def test_read_sequential_paired(benchmark, sizes, read_side):
    side = read_side
    contenders = [
        Contender("ours", "ours (read 1 MiB, copied)", "ours", lambda: side.seq_ours(True),
                  "PartitionLog.read(offset, 1 MiB) -> bytes(); next offset from lib.plog_scan_buffer"),
        Contender("lmdb", "LMDB read-all (buffers=False)", "peer", lambda: side.seq_lmdb(False),
                  "lmdb.open(readonly=True, lock=False); txn.cursor().iternext(keys=False), buffers=False"),
        Contender("sqlite", "SQLite read-all", "peer", side.seq_sqlite,
                  "WAL, synchronous=OFF; SELECT batch FROM log ORDER BY offset"),
        Contender("mmap-memcpy", "mmap memcpy (limit)", "limit", side.seq_mmap,
                  "one warm mmap of the .log; bytes(mm[pos:pos + 1 MiB]) per MiB"),
        Contender("ours-zero-copy", "ours (read 1 MiB, zero-copy)", "ours", lambda: side.seq_ours(False),
                  "PartitionLog.read(offset, 1 MiB), memoryview kept as is"),
        Contender("lmdb-zero-copy", "LMDB read-all (buffers=True)", "peer", lambda: side.seq_lmdb(True),
                  "txn.cursor().iternext(keys=False), buffers=True"),
    ]
    pairs = [("ours", "lmdb"), ("ours", "sqlite", sizes.slow_paired_rounds), ("ours", "mmap-memcpy"),
             ("ours-zero-copy", "lmdb-zero-copy")]
    benchmark.group = "read-seq-paired"
    result = benchmark.pedantic(paired, args=(contenders, pairs, sizes.paired_rounds),
                                kwargs={"amount": side.bytes, "warmup": not sizes.quick}, rounds=1, iterations=1)
    benchmark.extra_info.update(size="sequential fetch", bytes=side.bytes, batches=len(side.bases),
                                batch_bytes=side.batch_size, fetch_bytes=FETCH_BYTES, **result)


def test_read_point_paired(benchmark, sizes, read_side):
    side = read_side
    rnd = random.Random(7)
    targets = [rnd.randrange(side.leo) for _ in range(sizes.point_reads)]
    sqlite_targets = targets[:max(1, len(targets) // 5)]
    side.check_point_reads(targets)

    def latency(fn, targets_):
        def run():
            lat = fn(targets_)
            stats = percentiles(lat)
            return {"seconds": stats["p50"], **stats}
        return run

    contenders = [
        Contender("ours", "ours (PartitionLog.read(offset, 1))", "ours", latency(side.point_ours, targets),
                  "PartitionLog.read(offset, 1): the whole batch holding offset, zero-copy memoryview"),
        Contender("lmdb", "LMDB cursor.set_range", "peer", latency(side.point_lmdb, targets),
                  "one read txn, buffers=True; set_range(8-byte key), prev() unless exact; value()"),
        Contender("sqlite", "SQLite indexed SELECT", "peer", latency(side.point_sqlite, sqlite_targets),
                  "SELECT batch FROM log WHERE offset <= ? ORDER BY offset DESC LIMIT 1 (fetchone)"),
        Contender("bisect+mmap", "bisect + mmap slice (limit)", "limit", latency(side.point_limit, targets),
                  "bisect.bisect_right(list of base offsets) + memoryview slice of a warm mmap"),
    ]
    pairs = [("ours", "lmdb"), ("ours", "sqlite"), ("ours", "bisect+mmap")]
    rounds = max(1, sizes.paired_rounds // 3)
    benchmark.group = "read-point-paired"
    result = benchmark.pedantic(paired, args=(contenders, pairs, rounds), kwargs={"warmup": not sizes.quick, "unit": "latency"},
                                rounds=1, iterations=1)
    kept = result.pop("kept")
    latency_summary = {}
    for name, runs in kept.items():
        latency_summary[name] = {
            "p50": statistics.median([r["p50"] for r in runs]), "p99": statistics.median([r["p99"] for r in runs]),
            "mean": statistics.median([r["mean"] for r in runs]), "reads_per_run": runs[0]["n"], "runs": len(runs)}
    benchmark.extra_info.update(size="point reads", bytes=side.bytes, batches=len(side.bases),
                                batch_bytes=side.batch_size, reads=len(targets), latency=latency_summary,
                                timer_overhead_s=timer_overhead_ns() / 1e9, **result)
