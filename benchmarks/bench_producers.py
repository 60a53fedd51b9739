"""Producer state and retention (issue 15's targets).

"idempotent-append-paired", alternated in pairs (A B, then B A), fsync off, one leader append
per prebuilt batch into a fresh log (opening and closing are not timed):
  idempotent  batches of producer 1, epoch 0, consecutive sequences: the C append checks
              the producer's epoch and next sequence (storage/log/producer_check.py), and the
              batch is recorded in the producer state
  plain       the same records in batches without a producer id
The ratio is t(plain) / t(idempotent): the goal is >= 0.90 (at most 10% overhead).  Two batch
sizes: 1 KiB (one record; the per-call overhead shows most) and 16 KiB.

"retention-pass-paired": one LogDir of `retention_partitions` partitions (10,000; two
segments each, recent timestamps), one retention pass with nothing to delete -- the steady
state a broker runs every 5 minutes:
  ours   LogDir.cleanup_logs(now): the three passes of every partition, pending deletions
  floor  the limit: a Python loop over the same logs reading, per partition, what the passes
         must read at least (the first segment's max timestamp and size, the next base, the
         high watermark)
The ratio is t(floor) / t(ours); per-partition seconds are reported too.
"""
from __future__ import annotations

import time

import pytest
from benchlib import Contender, KiB, paired

import storage

CONFIG = storage.LogConfig(fsync=False, segment_bytes=1 << 30)
SIZES = {"1KiB": 1 * KiB, "16KiB": 16 * KiB}


class Batches:
    def __init__(self, total_bytes: int, batch_bytes: int):
        value = b"v" * (batch_bytes - 80)
        count = max(total_bytes // batch_bytes, 10)
        self.idempotent = [storage.build_batch([value], producer_id=1, producer_epoch=0, base_sequence=i)
                           for i in range(count)]
        self.plain = [storage.build_batch([value]) for _ in range(count)]
        self.bytes = sum(len(b) for b in self.plain)


def _run(fresh_dirs, batches) -> float:
    path = fresh_dirs.new("producers")
    log = storage.PartitionLog.open(path, CONFIG)
    try:
        append = log.append_as_leader
        start = time.perf_counter()
        for batch in batches:
            append(batch, 0)
        return time.perf_counter() - start
    finally:
        log.close()
        fresh_dirs.discard(path)


@pytest.mark.parametrize("size_label", list(SIZES))
def test_idempotent_append_paired(benchmark, sizes, fresh_dirs, size_label):
    data = Batches(sizes.idempotent_bytes, SIZES[size_label])
    contenders = [
        Contender("idempotent", f"idempotent leader append, {size_label}", "ours",
                  lambda: _run(fresh_dirs, data.idempotent), "producer 1, consecutive sequences"),
        Contender("plain", f"plain leader append, {size_label}", "peer",
                  lambda: _run(fresh_dirs, data.plain), "the same records without a producer id"),
    ]
    benchmark.group = "idempotent-append-paired"
    result = benchmark.pedantic(paired, args=(contenders, [("idempotent", "plain")], sizes.paired_rounds),
                                kwargs={"warmup": not sizes.quick, "amount": data.bytes}, rounds=1, iterations=1)
    benchmark.extra_info.update(size=size_label, batches=len(data.plain), bytes=data.bytes, **result)


class ManyLogs:
    def __init__(self, fresh_dirs, partitions: int):
        self.path = fresh_dirs.new("retention")
        self.fresh_dirs = fresh_dirs
        self.logdir = storage.LogDir.open(self.path, CONFIG)
        self.partitions = partitions
        for p in range(partitions):
            log = self.logdir.partition("t", p)
            log.append_as_leader([b"x" * 100], 0)
            log.roll()
            log.append_as_leader([b"y" * 100], 0)
            log.update_high_watermark(log.log_end_offset)
        self.logs = list(self.logdir.logs().values())

    def ours(self) -> float:
        now = time.time_ns() // 1_000_000
        start = time.perf_counter()
        deleted = self.logdir.cleanup_logs(now)
        elapsed = time.perf_counter() - start
        assert deleted == 0
        return elapsed

    def floor(self) -> float:
        start = time.perf_counter()
        for log in self.logs:
            segments = log.segments
            first = segments[0]
            _ = (first.max_timestamp, first.size, segments[1].base_offset if len(segments) > 1 else None,
                 log.high_watermark, log.log_start_offset)
        return time.perf_counter() - start

    def close(self):
        self.logdir.close()
        self.fresh_dirs.discard(self.path)


@pytest.fixture(scope="module")
def many_logs(fresh_dirs, sizes):
    side = ManyLogs(fresh_dirs, sizes.retention_partitions)
    yield side
    side.close()


def test_retention_pass_paired(benchmark, sizes, many_logs):
    side = many_logs
    contenders = [
        Contender("ours", f"LogDir.cleanup_logs, {side.partitions} partitions", "ours", side.ours,
                  "a retention pass that deletes nothing (two segments a partition, recent)"),
        Contender("floor", "Python loop reading the inputs (limit)", "limit", side.floor,
                  "per partition: first segment's max timestamp and size, next base, HW, log start"),
    ]
    benchmark.group = "retention-pass-paired"
    result = benchmark.pedantic(paired, args=(contenders, [("ours", "floor")], sizes.paired_rounds),
                                kwargs={"warmup": not sizes.quick, "unit": "seconds"}, rounds=1, iterations=1)
    benchmark.extra_info.update(size=f"{side.partitions} partitions", partitions=side.partitions,
                                per_partition_s={k: v / side.partitions for k, v in result["median_seconds"].items()},
                                **result)
