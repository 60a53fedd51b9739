"""Leader epochs and truncation (docs/design.md "Performance targets": OffsetForLeaderEpoch and truncation cost
grows with log(epochs) and with bytes truncated, never with log size), and the leader-epoch
work's deferred epoch flush.

"epoch-end-offset": LeaderEpochCache.end_offset_for(epoch, log_end_offset) on a memory-only
  cache (no checkpoint file) of N epochs (even epochs 0, 2, ..., each starting 1000 offsets
  after the previous one), N in `epoch_counts` (100 ... 100,000; the issue asks for 10,000).
  The queried epochs are uniformly random in [0, 2N): half are cached, half fall between
  two cached epochs (the next-higher rule).  Each call is timed alone (perf_counter_ns);
  p50 and p99 per N.  Cost should grow like log(N): the report gives p50(largest N) /
  p50(smallest N).

"truncate-paired": PartitionLog.truncate_to(offset) removing the last 64 batches (1 MiB) of a
  log of size S, S in `truncate_log_sizes` (16 MiB, 128 MiB, 1 GiB), with 1 GiB segments (one
  segment) and with 64 MiB segments (up to 17).  The logs stay open for the module; each run
  truncates (timed) and appends the 64 batches back (untimed), so every run truncates the
  same bytes of the same log.  The largest log is paired with each smaller one (A B, then
  B A), `truncate_rounds` (15) pairs: cost must not grow with S, and the report gives the
  median of t(largest) / t(smaller) per pair.

"elections-paired": N leader elections on one partition = N calls of
  log.assign_epoch_start_offset(epoch) with LogConfig(fsync=True), each followed (untimed) by
  one small leader append so the next epoch starts at a later offset.  "sync" writes and
  fsyncs the leader-epoch-checkpoint at every assign (Kafka's behaviour); "deferred"
  (LogConfig(epoch_flush="deferred")) only marks it dirty, and its timed part ends with the
  one epoch_cache.flush() that makes the N elections durable (what the next log flush does).
  Each run in a fresh directory; the pair ratio is t(sync) / t(deferred).
"""
from __future__ import annotations

import os
import random
import time

import pytest
from benchlib import Contender, MiB, paired, percentiles, timer_overhead_ns

import storage

EPOCH_STRIDE = 1000
TRUNCATE_BATCHES = 64
SEGMENT_CONFIGS = {"1GiB-segments": 1 << 30, "64MiB-segments": 64 * MiB}


# ---- end_offset_for ------------------------------------------------------------------------

def epoch_cache(n: int) -> storage.LeaderEpochCache:
    cache = storage.LeaderEpochCache(None)
    for i in range(n):
        cache.assign(2 * i, i * EPOCH_STRIDE)
    assert len(cache) == n
    return cache


def time_end_offset_for(cache, queries: list[int], log_end_offset: int) -> list[int]:
    end_offset_for, pc = cache.end_offset_for, time.perf_counter_ns
    lat = [0] * len(queries)
    for i, epoch in enumerate(queries):
        t0 = pc()
        end_offset_for(epoch, log_end_offset)
        lat[i] = pc() - t0
    return lat


def test_end_offset_for(benchmark, sizes, epoch_count):      # epoch_count: conftest.pytest_generate_tests
    epochs = epoch_count
    cache = epoch_cache(epochs)
    leo = epochs * EPOCH_STRIDE + 10
    rnd = random.Random(epochs)
    queries = [rnd.randrange(2 * epochs) for _ in range(sizes.epoch_queries)]
    # The answers are right (untimed): the next-higher rule on a sample.
    for q in queries[:100]:
        epoch, end = cache.end_offset_for(q, leo)
        i = q // 2
        if q % 2 == 0:
            assert (epoch, end) == (q, leo if i == epochs - 1 else (i + 1) * EPOCH_STRIDE)
        else:
            assert epoch == q - 1 and end == ((i + 1) * EPOCH_STRIDE if i + 1 < epochs else leo)
    runs = []

    def run():
        lat = time_end_offset_for(cache, queries, leo)
        runs.append(percentiles(lat))

    benchmark.group = "epoch-end-offset"
    benchmark.pedantic(run, rounds=max(1, sizes.rounds // 2), warmup_rounds=sizes.warmup_rounds, iterations=1)
    benchmark.extra_info.update(
        epochs=epochs, queries=len(queries), label=f"end_offset_for, {epochs:,} epochs", role="ours",
        latency={"p50": min(r["p50"] for r in runs), "p99": sorted(r["p99"] for r in runs)[len(runs) // 2],
                 "mean": sorted(r["mean"] for r in runs)[len(runs) // 2], "runs": len(runs)},
        latency_runs=runs, timer_overhead_s=timer_overhead_ns() / 1e9, unit="latency")


# ---- truncate_to -----------------------------------------------------------------------------

class TruncateLogs:
    """One open log per (segment size, log size), written once for the module."""

    def __init__(self, fresh_dirs, stamped, log_sizes):
        self.fresh_dirs, self.stamped = fresh_dirs, stamped
        self.logs: dict[tuple[str, int], tuple] = {}
        self.log_sizes = log_sizes

    def get(self, segments: str, size: int):
        key = (segments, size)
        if key not in self.logs:
            directory = self.fresh_dirs.new(f"truncate-{segments}-{size >> 20}MiB")
            config = storage.LogConfig(segment_bytes=SEGMENT_CONFIGS[segments], fsync=False)
            log = storage.PartitionLog.open(directory, config)
            count = self.stamped.batches_for(size)
            self.stamped.append_to(log, count)
            self.logs[key] = (directory, log, count)
        return self.logs[key]

    def close(self):
        for directory, log, _ in self.logs.values():
            log.close()
            self.fresh_dirs.discard(directory)


@pytest.fixture(scope="module")
def truncate_logs(fresh_dirs, stamped, sizes):
    logs = TruncateLogs(fresh_dirs, stamped, sizes.truncate_log_sizes)
    yield logs
    logs.close()


def truncate_run(log, stamped, count: int):
    """One contender run: truncate_to the base offset of the last 64 batches (timed), then
    append them back (untimed) so that every run truncates the same bytes of the same log."""
    removed = min(TRUNCATE_BATCHES, count - 1)
    keep = count - removed
    target = keep * stamped.records_per_batch
    leo, size = log.log_end_offset, log.size_bytes

    def run() -> float:
        assert log.log_end_offset == leo
        start = time.perf_counter()
        log.truncate_to(target)
        elapsed = time.perf_counter() - start
        assert log.log_end_offset == target
        stamped.append_to(log, removed, first_index=keep)
        assert log.log_end_offset == leo and log.size_bytes == size
        return elapsed

    return run, removed


@pytest.mark.parametrize("segments", list(SEGMENT_CONFIGS))
def test_truncate_paired(benchmark, sizes, stamped, truncate_logs, segments):
    contenders, info = [], {}
    for log_bytes in sizes.truncate_log_sizes:
        directory, log, count = truncate_logs.get(segments, log_bytes)
        run, removed = truncate_run(log, stamped, count)
        name = f"{log_bytes >> 20}MiB"
        contenders.append(Contender(name, f"log of {log_bytes >> 20} MiB", "ours", run,
                                    f"LogConfig(segment_bytes={SEGMENT_CONFIGS[segments]}, fsync=False)"))
        info[name] = {"log_bytes": log.size_bytes, "segments": len(log.segments),
                      "truncated_bytes": removed * stamped.batch_size, "truncated_batches": removed}
    largest = contenders[-1].name
    pairs = [(largest, c.name) for c in contenders[:-1]]
    benchmark.group = "truncate-paired"
    result = benchmark.pedantic(paired, args=(contenders, pairs, sizes.truncate_rounds),
                                kwargs={"warmup": not sizes.quick, "unit": "seconds"}, rounds=1, iterations=1)
    benchmark.extra_info.update(size=f"truncate_to, {segments}", segments_config=segments,
                                segment_bytes=SEGMENT_CONFIGS[segments], logs=info, **result)


# ---- leader elections: sync vs deferred epoch flush -----------------------------------------

def election_run(fresh_dirs, mode: str, elections: int) -> dict:
    """One run: a fresh partition dir, LogConfig(fsync=True, epoch_flush=mode), `elections`
    assign_epoch_start_offset calls (timed) with one small leader append after each (untimed)."""
    directory = fresh_dirs.new(f"elections-{mode}")
    try:
        log = storage.PartitionLog.open(directory, storage.LogConfig(fsync=True, epoch_flush=mode))
        batch = storage.build_batch([b"x" * 100], base_timestamp=1_700_000_000_000)
        log.append_as_leader(batch, 0)
        writes_before = log.epoch_cache.writes
        elapsed = 0.0
        pc = time.perf_counter
        for epoch in range(1, elections + 1):
            t0 = pc()
            log.assign_epoch_start_offset(epoch)
            elapsed += pc() - t0
            log.append_as_leader(batch, epoch)
        t0 = pc()
        log.epoch_cache.flush()
        elapsed += pc() - t0
        writes = log.epoch_cache.writes - writes_before
        assert [e.epoch for e in log.epoch_cache.entries][-1] == elections
        log.close()
        with open(os.path.join(directory, "leader-epoch-checkpoint")) as f:
            assert f.read().splitlines()[1] == str(elections + 1)      # entries 0..N on disk
        return {"seconds": elapsed, "checkpoint_writes": writes}
    finally:
        fresh_dirs.discard(directory)


def test_elections_paired(benchmark, sizes, fresh_dirs):
    n = sizes.elections
    contenders = [
        Contender("deferred", "epoch_flush='deferred'", "ours", lambda: election_run(fresh_dirs, "deferred", n),
                  f"LogConfig(fsync=True, epoch_flush='deferred'); {n} assign_epoch_start_offset + 1 epoch_cache.flush()"),
        Contender("sync", "epoch_flush='sync'", "peer", lambda: election_run(fresh_dirs, "sync", n),
                  f"LogConfig(fsync=True, epoch_flush='sync'); {n} assign_epoch_start_offset (a checkpoint write each)"),
    ]
    benchmark.group = "elections-paired"
    result = benchmark.pedantic(paired, args=(contenders, [("deferred", "sync")], sizes.slow_paired_rounds),
                                kwargs={"warmup": not sizes.quick, "unit": "seconds"}, rounds=1, iterations=1)
    kept = result.pop("kept")
    benchmark.extra_info.update(
        size=f"{n} elections", elections=n,
        detail="fsync on, a fresh partition dir a run, one small leader append (untimed) after each election",
        per_election_s={name: result["median_seconds"][name] / n for name in result["median_seconds"]},
        checkpoint_writes={name: runs[0]["checkpoint_writes"] for name, runs in kept.items()}, **result)
