"""Append throughput, fsync off (design.md targets: ours >= 90% of a plain Python file.write
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

Groups "append-16KiB" and "append-1MiB" hold one pedantic case per peer (rounds of the same
peer back to back, after one warm-up round); "append-paired" holds the A B A B measurement
the target ratios come from (see conftest's docstring), each measured run preceded by an
untimed run of the same peer (paired_append's `prime`), which puts every peer in the state
the pedantic cases measure it in.
"""
from __future__ import annotations

import os
import statistics
import time

import lmdb
import pytest

import storage
from benchlib import KiB, MiB, Workload

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


FOLLOWER, LEADER, FILE = OursFollower(), OursLeader(), FileWrite()
LMDB_WRITEMAP, LMDB_PLAIN = Lmdb(writemap=True), Lmdb(writemap=False)
PEERS = [FOLLOWER, FILE, LEADER, LMDB_WRITEMAP, LMDB_PLAIN]
SIZES = {"16KiB": 16 * KiB, "1MiB": 1 * MiB}


def _cases():
    for size_label, batch_bytes in SIZES.items():
        for peer in PEERS:
            yield pytest.param(size_label, batch_bytes, peer, id=f"{size_label}-{peer.name}")


def timed_run(peer: Peer, wl: Workload, fresh_dirs) -> float:
    """One untimed open, one timed run (appends + close), one untimed check and delete."""
    directory = fresh_dirs.new(peer.name)
    try:
        state = peer.open(directory, wl)
        start = time.perf_counter()
        peer.run(state)
        elapsed = time.perf_counter() - start
        peer.check(state, wl)
        return elapsed
    finally:
        fresh_dirs.discard(directory)


@pytest.mark.parametrize("size_label,batch_bytes,peer", list(_cases()))
def test_append(benchmark, workload, sizes, fresh_dirs, size_label, batch_bytes, peer):
    wl = workload(batch_bytes)
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


def paired_append(wl: Workload, fresh_dirs, rounds: int, *, warmup: bool = True, prime: bool = True) -> dict:
    """For each (ours, peer) pair, `rounds` times: run both back to back (A B, then B A on
    the next round), and keep the ratio of the pair: throughput(ours) / throughput(peer) =
    t_peer / t_ours.  Returns the per-pair ratios and medians and every run's time.

    prime: run each measured run once untimed just before (A' A B' B), so every peer writes
    into page-cache pages that its own previous run has just freed.  Without it LMDB with
    writemap=True is bimodal here (about 2.3 GB/s when its previous run ended less than ~2 s
    before, about 0.4 GB/s after a few seconds spent on other peers: its mmap page faults
    suffer most from the idle-page effect), and its pair ratios depend on the schedule."""
    if warmup:
        for peer in PEERS:
            timed_run(peer, wl, fresh_dirs)
    times: dict[str, list[float]] = {peer.name: [] for peer in PEERS}
    pairs: dict[str, dict] = {}
    for k in range(rounds):
        for ours, peer in PAIRS:
            order = (ours, peer) if k % 2 == 0 else (peer, ours)
            t = {}
            for p in order:
                if prime:
                    timed_run(p, wl, fresh_dirs)
                t[p.name] = timed_run(p, wl, fresh_dirs)
                times[p.name].append(t[p.name])
            entry = pairs.setdefault(f"{ours.name} / {peer.name}", {
                "ours": ours.name, "peer": peer.name, "peer_role": peer.role,
                "label": f"{ours.label} / {peer.label}", "ratios": []})
            entry["ratios"].append(t[peer.name] / t[ours.name])
    for entry in pairs.values():
        entry["median"] = statistics.median(entry["ratios"])
    return {
        "pairs": pairs,
        "times": times,
        "median_seconds": {name: statistics.median(v) for name, v in times.items()},
        "throughput_MBps": {name: wl.total_bytes / statistics.median(v) / 1e6 for name, v in times.items()},
        "settings": {peer.name: peer.setting for peer in PEERS},
        "primed": prime,
    }


@pytest.mark.parametrize("size_label,batch_bytes", list(SIZES.items()), ids=list(SIZES))
def test_append_paired(benchmark, workload, sizes, fresh_dirs, size_label, batch_bytes):
    wl = workload(batch_bytes)
    benchmark.group = "append-paired"
    result = benchmark.pedantic(paired_append, args=(wl, fresh_dirs, sizes.paired_rounds),
                                kwargs={"warmup": not sizes.quick}, rounds=1, iterations=1)
    benchmark.extra_info.update(wl.info())
    benchmark.extra_info.update(paired=True, size=size_label, unit="bytes", **result)
