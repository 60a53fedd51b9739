"""Replication, in process: ReplicaManagers driven by direct calls (the way storage/sim/rig.py does,
without a controller or the simulated clock), every fetch answered at once.

"replication-catchup-paired": an empty follower catches up the session's big log (1 GiB of
16 KiB batches) from the leader, in a fresh directory every run:
  ours-fetcher   the follower's ReplicaFetcher: poll() -> the leader's handle_fetch (reads up
                 to 1 MiB a fetch and copies it into bytes) -> fetcher.handle_response ->
                 append_as_follower (CRC check, index), until the follower's log end offset
                 is the leader's; the follower starts from an empty log (no epoch: it
                 truncates to its high watermark, 0, then fetches)
  ours-direct    the engine without the protocol: leader_log.read(offset, 1 MiB) appended as
                 is (zero-copy) with follower_log.append_as_follower
  copy           the limit: 1 MiB memoryview slices of a warm mmap of the leader's .log
                 written with an unbuffered f.write to a new file -- the kernel's one copy
                 from page cache to page cache, no user-space copy, no validation (a bytes
                 copy per MiB made this "limit" slower than ours: its 1 MiB allocations)
Pairs: ours-fetcher with copy and with ours-direct; ours-direct with copy; 3 rounds (each run
writes 1 GiB), each measured run primed by an untimed run of the same contender just before
(as in bench_append: without it the copy, the fastest writer, lands on freshly reclaimed
page-cache pages in most runs and measures 3-4x slower than alone).  Set-up (the follower's LogDir and ReplicaManager) and clean-up (close,
delete) are not timed.

"replication-diverge-paired": a follower that diverged -- it holds the common prefix P
(epoch 1) and then D bytes more in epoch 1 that the leader never had; the leader holds P and
then L bytes in epoch 2 and leads in epoch 3 -- is started (untimed: open its LogDir, make
the ReplicaManager) and driven until it holds exactly the leader's log: the timed part is
apply_partition_state (it becomes a follower) plus the fetch loop, i.e. the truncation to P
and the refetch of L.  (P, D, L) = `diverge_bytes` (256, 64, 64 MiB).  Two ways:
  diverging-epoch      truncate_on_fetch=True (KIP-320/595): the first fetch carries
                       LastFetchedEpoch=1, the leader answers DivergingEpoch(1, P)
  offsets-for-epoch    truncate_on_fetch=False (KIP-101/279): OffsetForLeaderEpoch(1) first
Their paired ratio is t(offsets-for-epoch) / t(diverging-epoch); the report also gives each
one's time against a catch-up of L bytes alone at the ours-fetcher rate.
"""
from __future__ import annotations

import mmap
import os
import time

import pytest
from benchlib import CHUNK_BYTES, Contender, paired, pedantic_paired

import storage
from storage.replication import messages as m
from storage.replication.replica import ReplicaManager

TOPIC, PARTITION = "t", 0
LEADER, FOLLOWER = 1, 2
SEGMENT_FILE = "00000000000000000000.log"
CONFIG = storage.LogConfig(fsync=False)


def state(leader_epoch: int) -> m.PartitionState:
    return m.PartitionState(TOPIC, PARTITION, LEADER, leader_epoch, leader_epoch, [LEADER], [LEADER, FOLLOWER])


def manager(broker_id: int, path: str, *, truncate_on_fetch: bool = True) -> ReplicaManager:
    return ReplicaManager(broker_id, storage.LogDir.open(path, CONFIG),
                          fetcher_options={"truncate_on_fetch": truncate_on_fetch, "backoff_ms": 0})


def deliver(leader: ReplicaManager, request):
    if isinstance(request, m.FetchRequest):
        return leader.handle_fetch(request)
    if isinstance(request, m.OffsetForLeaderEpochRequest):
        return leader.handle_offset_for_leader_epoch(request)
    return leader.handle_list_offsets(request)


def fetch_round(leader: ReplicaManager, follower: ReplicaManager) -> None:
    """Whatever the follower's fetcher has ready, answered by the leader at once."""
    fetcher = follower.fetcher
    for leader_id, request in fetcher.poll():
        fetcher.handle_response(leader_id, request, deliver(leader, request))


def replicate_until_caught_up(leader: ReplicaManager, follower: ReplicaManager, max_rounds: int) -> int:
    """Fetch rounds until the follower holds the leader's log: the same log end offset, the
    same epoch at its last batch, and fetching; returns the rounds."""
    leader_log = leader.logdir.partition(TOPIC, PARTITION)
    target = leader_log.log_end_offset
    target_epoch = leader_log.epoch_cache.epoch_for_offset(target - 1)
    log = follower.logdir.partition(TOPIC, PARTITION)
    fetcher = follower.fetcher
    rounds = 0
    while (log.log_end_offset != target or log.epoch_cache.epoch_for_offset(target - 1) != target_epoch
           or fetcher.partitions[(TOPIC, PARTITION)].state != "Fetching"):
        rounds += 1
        if rounds > max_rounds:
            raise AssertionError(f"no progress: follower at {log.log_end_offset}, leader at {target}")
        fetch_round(leader, follower)
    return rounds


def same_log(a, b) -> None:
    assert a.log_end_offset == b.log_end_offset and a.size_bytes == b.size_bytes
    assert [(e.epoch, e.start_offset) for e in b.epoch_cache.entries if e.start_offset < b.log_end_offset] == \
        [(e.epoch, e.start_offset) for e in a.epoch_cache.entries if e.start_offset < a.log_end_offset]


# ---- catch-up ----------------------------------------------------------------------------------

class CatchUp:
    LEADER_EPOCH = 1

    def __init__(self, big_log, fresh_dirs):
        self.fresh_dirs = fresh_dirs
        self.info = big_log
        # The big log's root holds t-0/: opened as broker 1's log dir (recovered once, untimed).
        self.leader = manager(LEADER, big_log["root"])
        self.leader.apply_partition_state(state(self.LEADER_EPOCH))
        self.leader_log = self.leader.logdir.partition(TOPIC, PARTITION)
        assert self.leader_log.log_end_offset == big_log["log_end_offset"]
        self.bytes = self.leader_log.size_bytes
        self._file = open(os.path.join(self.leader_log.path, SEGMENT_FILE), "rb")
        self.mm = mmap.mmap(self._file.fileno(), 0, prot=mmap.PROT_READ)
        self.max_rounds = 4 * (self.bytes // CHUNK_BYTES + 10)

    def close(self):
        self.mm.close()
        self._file.close()
        self.leader.shutdown()

    def fetcher(self) -> float:
        directory = self.fresh_dirs.new("follower")
        try:
            follower = manager(FOLLOWER, directory)
            start = time.perf_counter()
            follower.apply_partition_state(state(self.LEADER_EPOCH))
            replicate_until_caught_up(self.leader, follower, self.max_rounds)
            elapsed = time.perf_counter() - start
            same_log(self.leader_log, follower.logdir.partition(TOPIC, PARTITION))
            follower.shutdown()
            return elapsed
        finally:
            self.fresh_dirs.discard(directory)

    def direct(self) -> float:
        directory = self.fresh_dirs.new("direct")
        try:
            log = storage.PartitionLog.open(directory, CONFIG)
            read, append, leo = self.leader_log.read, log.append_as_follower, self.leader_log.log_end_offset
            start = time.perf_counter()
            while log.log_end_offset < leo:
                append(read(log.log_end_offset, CHUNK_BYTES))
            elapsed = time.perf_counter() - start
            assert log.size_bytes == self.bytes
            log.close()
            return elapsed
        finally:
            self.fresh_dirs.discard(directory)

    def copy(self) -> float:
        directory = self.fresh_dirs.new("copy")
        try:
            view, size, step = memoryview(self.mm), self.bytes, CHUNK_BYTES
            f = open(os.path.join(directory, SEGMENT_FILE), "wb", buffering=0)
            start = time.perf_counter()
            write = f.write
            for position in range(0, size, step):
                write(view[position:position + step])
            f.close()
            elapsed = time.perf_counter() - start
            view.release()
            assert os.path.getsize(os.path.join(directory, SEGMENT_FILE)) == self.bytes
            return elapsed
        finally:
            self.fresh_dirs.discard(directory)


@pytest.fixture(scope="module")
def catch_up(big_log, fresh_dirs):
    side = CatchUp(big_log, fresh_dirs)
    yield side
    side.close()


def test_replication_catchup_paired(benchmark, sizes, catch_up):
    side = catch_up
    contenders = [
        Contender("ours-fetcher", "ours (ReplicaFetcher <-> handle_fetch)", "ours", side.fetcher,
                  "follower ReplicaManager: fetcher.poll() -> leader.handle_fetch (1 MiB, bytes) -> "
                  "fetcher.handle_response -> append_as_follower"),
        Contender("ours-direct", "ours (log.read -> append_as_follower)", "ours", side.direct,
                  "leader_log.read(offset, 1 MiB) -> follower_log.append_as_follower, zero-copy"),
        Contender("copy", "mmap -> file.write copy (limit)", "limit", side.copy,
                  "memoryview(mm)[pos:pos + 1 MiB] of a warm mmap -> open(path, 'wb', buffering=0).write, new file"),
    ]
    pairs = [("ours-fetcher", "copy"), ("ours-fetcher", "ours-direct"), ("ours-direct", "copy")]
    rounds = max(1, sizes.slow_paired_rounds - 2)     # 3: a run writes 1 GiB into a fresh directory
    result = pedantic_paired(benchmark, "replication-catchup-paired", paired, contenders, pairs, rounds,
                             amount=side.bytes, warmup=not sizes.quick, prime=not sizes.quick)
    benchmark.extra_info.update(size="follower catch-up", bytes=side.bytes, batches=side.info["batches"],
                                batch_bytes=side.info["batch_bytes"], fetch_bytes=CHUNK_BYTES, **result)


# ---- divergent follower ------------------------------------------------------------------------

class Diverge:
    """Leader: P in epoch 1, L in epoch 2, leading in epoch 3.  Follower: P + D in epoch 1."""

    EPOCH = 3

    def __init__(self, fresh_dirs, stamped, diverge_bytes):
        self.fresh_dirs, self.stamped = fresh_dirs, stamped
        prefix, divergent, tail = diverge_bytes
        self.prefix_batches = stamped.batches_for(prefix)
        self.divergent_batches = stamped.batches_for(divergent)
        self.tail_batches = stamped.batches_for(tail)
        self.prefix_offset = self.prefix_batches * stamped.records_per_batch
        self.leader_root = fresh_dirs.new("diverge-leader")
        logdir = storage.LogDir.open(self.leader_root, CONFIG)
        log = logdir.partition(TOPIC, PARTITION)
        stamped.append_to(log, self.prefix_batches, epoch=1)
        stamped.append_to(log, self.tail_batches, epoch=2, first_index=self.prefix_batches)
        logdir.close()
        self.leader = manager(LEADER, self.leader_root)
        self.leader.apply_partition_state(state(self.EPOCH))
        self.leader_log = self.leader.logdir.partition(TOPIC, PARTITION)
        assert [tuple(e) for e in self.leader_log.epoch_cache.entries] == \
            [(1, 0), (2, self.prefix_offset), (self.EPOCH, self.leader_log.log_end_offset)]
        self.info = {"prefix_bytes": self.prefix_batches * stamped.batch_size,
                     "divergent_bytes": self.divergent_batches * stamped.batch_size,
                     "tail_bytes": self.tail_batches * stamped.batch_size,
                     "prefix_offset": self.prefix_offset}

    def follower_dir(self) -> str:
        """Untimed: a fresh, cleanly closed log dir holding P + D, all in epoch 1."""
        directory = self.fresh_dirs.new("diverge-follower")
        logdir = storage.LogDir.open(directory, CONFIG)
        log = logdir.partition(TOPIC, PARTITION)
        self.stamped.append_to(log, self.prefix_batches + self.divergent_batches, epoch=1)
        logdir.close()
        return directory

    def run(self, truncate_on_fetch: bool) -> float:
        directory = self.follower_dir()
        try:
            follower = manager(FOLLOWER, directory, truncate_on_fetch=truncate_on_fetch)
            start = time.perf_counter()
            follower.apply_partition_state(state(self.EPOCH))
            replicate_until_caught_up(self.leader, follower, 10 * (self.tail_batches + 10))
            elapsed = time.perf_counter() - start
            assert follower.fetcher.truncations == [(TOPIC, PARTITION, self.prefix_offset)], follower.fetcher.truncations
            same_log(self.leader_log, follower.logdir.partition(TOPIC, PARTITION))
            follower.shutdown()
            return elapsed
        finally:
            self.fresh_dirs.discard(directory)

    def close(self):
        self.leader.shutdown()
        self.fresh_dirs.discard(self.leader_root)


@pytest.fixture(scope="module")
def diverge(fresh_dirs, stamped, sizes):
    side = Diverge(fresh_dirs, stamped, sizes.diverge_bytes)
    yield side
    side.close()


def test_replication_diverge_paired(benchmark, sizes, diverge):
    side = diverge
    contenders = [
        Contender("diverging-epoch", "truncate_on_fetch=True (DivergingEpoch)", "ours", lambda: side.run(True),
                  "ReplicaFetcher(truncate_on_fetch=True): Fetch(LastFetchedEpoch=1) -> DivergingEpoch -> truncate_to(P) -> fetch L"),
        Contender("offsets-for-epoch", "truncate_on_fetch=False (OffsetForLeaderEpoch)", "ours", lambda: side.run(False),
                  "ReplicaFetcher(truncate_on_fetch=False): OffsetForLeaderEpoch(1) -> truncate_to(P) -> fetch L"),
    ]
    result = pedantic_paired(benchmark, "replication-diverge-paired", paired, contenders,
                             [("diverging-epoch", "offsets-for-epoch")], sizes.slow_paired_rounds,
                             warmup=not sizes.quick, unit="seconds")
    detail = (f"common prefix {side.info['prefix_bytes'] / 2**20:.0f} MiB (epoch 1), follower's divergent tail "
              f"{side.info['divergent_bytes'] / 2**20:.0f} MiB (epoch 1) cut, leader's tail {side.info['tail_bytes'] / 2**20:.0f} MiB "
              f"(epoch 2) refetched, leader in epoch {side.EPOCH}")
    benchmark.extra_info.update(size="divergent follower", detail=detail, bytes=side.info["tail_bytes"], **side.info,
                                **result)


# ---- acks=all on three replicas ------------------------------------------------------------

class AcksAll:
    """"replication-acks-all-paired": a leader and two followers (three ReplicaManagers, three
    log dirs, in process), replication factor 3, every follower in the ISR.  `acks-all` sends
    the stamped 16 KiB batches as produce requests of `per_request` batches with acks=-1; after
    each request every follower runs one fetch round (its fetch reports its log end, which moves
    the leader's high watermark, and takes the new data: Kafka's pipelining), and the run ends
    when every request has been answered.  `3x-append` is the same bytes appended three times
    with no replication: append_as_leader on one log, append_as_follower on two more.  Ratio
    t(3x-append) / t(acks-all): 1.0 would mean replication costs nothing beyond the writes."""

    REPLICAS = (1, 2, 3)

    def __init__(self, fresh_dirs, stamped, total_bytes: int, per_request: int):
        self.fresh_dirs = fresh_dirs
        self.per_request = per_request
        size = stamped.batch_size
        self.batches = []
        for chunk, _ in stamped.chunks(stamped.batches_for(total_bytes)):      # producer batches (offset 0 each)
            self.batches += [bytes(chunk[i:i + size]) for i in range(0, len(chunk), size)]
        self.requests = [b"".join(self.batches[i:i + per_request]) for i in range(0, len(self.batches), per_request)]
        self.bytes = sum(map(len, self.requests))

    def _state(self) -> m.PartitionState:
        return m.PartitionState(TOPIC, PARTITION, 1, 1, 1, list(self.REPLICAS), list(self.REPLICAS))

    def acks_all(self) -> float:
        dirs = {b: self.fresh_dirs.new(f"acks-all-{b}") for b in self.REPLICAS}
        try:
            managers = {b: manager(b, dirs[b]) for b in self.REPLICAS}
            for mgr in managers.values():
                mgr.apply_partition_state(self._state())
            leader, followers = managers[1], [managers[2], managers[3]]
            answered = []
            start = time.perf_counter()
            for records in self.requests:
                leader.handle_produce(m.ProduceRequest(TOPIC, PARTITION, records, -1), answered.append)
                for f in followers:
                    fetch_round(leader, f)
            for _ in range(4):
                if len(answered) == len(self.requests):
                    break
                for f in followers:
                    fetch_round(leader, f)
            elapsed = time.perf_counter() - start
            assert len(answered) == len(self.requests) and all(a.error_code == 0 for a in answered), answered[-1:]
            for mgr in managers.values():
                mgr.shutdown()
            return elapsed
        finally:
            for d in dirs.values():
                self.fresh_dirs.discard(d)

    def three_appends(self) -> float:
        dirs = [self.fresh_dirs.new(f"raw-{i}") for i in range(3)]
        try:
            logs = [storage.PartitionLog.open(os.path.join(d, "t-0"), CONFIG) for d in dirs]
            start = time.perf_counter()
            leader = logs[0]
            for records in self.requests:
                info = leader.append_as_leader(records, 1)
                chunk = leader.read(info.first_offset, len(records))
                logs[1].append_as_follower(chunk)
                logs[2].append_as_follower(chunk)
            elapsed = time.perf_counter() - start
            assert all(log.size_bytes == self.bytes for log in logs)
            for log in logs:
                log.close()
            return elapsed
        finally:
            for d in dirs:
                self.fresh_dirs.discard(d)


@pytest.mark.parametrize("per_request", [1, 64])
def test_replication_acks_all_paired(benchmark, sizes, fresh_dirs, stamped, per_request):
    side = AcksAll(fresh_dirs, stamped, min(sizes.append_total_bytes, 128 << 20), per_request)
    label = f"{per_request} batch{'es' if per_request > 1 else ''} of 16 KiB a request"
    contenders = [
        Contender("acks-all", f"ours, 3 replicas, acks=all ({label})", "ours", side.acks_all,
                  "three ReplicaManagers in process; one fetch round per follower after each produce request"),
        Contender("3x-append", "3 raw appends (no replication)", "peer", side.three_appends,
                  "append_as_leader on one log, append_as_follower of the same chunk on two more")]
    result = pedantic_paired(benchmark, "replication-acks-all-paired", paired, contenders,
                             [("acks-all", "3x-append")], sizes.paired_rounds, amount=3 * side.bytes)
    benchmark.extra_info.update(size=label, bytes=side.bytes, requests=len(side.requests), **result)
