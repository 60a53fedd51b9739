"""Log compaction (issue 16's targets).

"cleaning-paired", alternated in pairs (A B, then B A), fsync off: one partition of
`cleaner_bytes` of keyed 100-byte records (`cleaner_keys` distinct keys, each written many times,
in 16 KiB batches), sealed; then, on a fresh copy each run (the copy is not timed):
  ours   PartitionLog.compact: the offset map over the dirty log, then every segment rewritten
         with the latest record of each key and swapped in
  read   the floor it is judged against: a sequential read of the same segments with every
         batch's records decoded (iter_batches + records(), what the cleaner must read at least)
The ratio is t(read) / t(ours), reported with MB/s of dirty log.

"offset-map-memory": the memory of the offset map per million keys -- tracemalloc around
filling a cleaner.OffsetMap with 1,000,000 distinct keys (Kafka's SkimpyOffsetMap needs 24
bytes a key).
"""
from __future__ import annotations

import shutil
import time
import tracemalloc

import pytest
from benchlib import Contender, KiB, MiB, paired

import storage
from storage import Record
from storage.log import cleaner

CONFIG = storage.LogConfig(fsync=False, cleanup_policy="compact", segment_bytes=16 * MiB)


def _source(fresh_dirs, total: int, keys: int) -> str:
    path = fresh_dirs.new("cleaner-source")
    log = storage.PartitionLog.open(path, CONFIG)
    value = b"v" * 100
    per_batch = 16 * KiB // 130
    i = 0
    while log.size_bytes < total:
        log.append_as_leader([Record(key=b"key-%d" % ((i + j) % keys), value=value, timestamp=1_000 + i)
                              for j in range(per_batch)], 0)
        i += per_batch
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    log.close()
    return path


class Cleaning:
    def __init__(self, fresh_dirs, total: int, keys: int):
        self.fresh_dirs = fresh_dirs
        self.source = _source(fresh_dirs, total, keys)
        self.bytes = total

    def _copy(self) -> str:
        path = self.fresh_dirs.new("cleaner-run")
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(self.source, path)
        return path

    def ours(self) -> dict:
        path = self._copy()
        log = storage.PartitionLog.open(path, CONFIG)
        log.update_high_watermark(log.log_end_offset)     # a log opened alone starts at HW 0
        try:
            start = time.perf_counter()
            stats = log.compact(now_ms=10_000)
            elapsed = time.perf_counter() - start
            assert stats.records_written < stats.records_read
            return {"seconds": elapsed, "bytes_read": stats.bytes_read, "bytes_written": stats.bytes_written}
        finally:
            log.close()
            self.fresh_dirs.discard(path)

    def read(self) -> float:
        path = self._copy()
        log = storage.PartitionLog.open(path, CONFIG)
        try:
            start = time.perf_counter()
            count = 0
            for segment in log.segments[:-1]:
                for batch in storage.iter_batches(segment.view()):
                    count += len(batch.records())
            elapsed = time.perf_counter() - start
            assert count > 0
            return elapsed
        finally:
            log.close()
            self.fresh_dirs.discard(path)


def test_cleaning_paired(benchmark, sizes, fresh_dirs):
    total = 8 * MiB if sizes.quick else 128 * MiB
    keys = 1_000 if sizes.quick else 10_000
    side = Cleaning(fresh_dirs, total, keys)
    contenders = [
        Contender("ours", "PartitionLog.compact", "ours", side.ours, f"{keys} keys, 100-byte values, 16 KiB batches"),
        Contender("read", "sequential read + record decode (floor)", "limit", side.read,
                  "iter_batches + records() over the same segments"),
    ]
    benchmark.group = "cleaning-paired"
    result = benchmark.pedantic(paired, args=(contenders, [("ours", "read")], sizes.slow_paired_rounds),
                                kwargs={"warmup": False, "amount": side.bytes}, rounds=1, iterations=1)
    benchmark.extra_info.update(size=f"{total // MiB} MiB", keys=keys, bytes=side.bytes, **result)
    fresh_dirs.discard(side.source)


@pytest.mark.parametrize("keys", [1_000_000])
def test_offset_map_memory(benchmark, keys):
    def fill() -> dict:
        tracemalloc.start()
        offset_map = cleaner.OffsetMap(keys * cleaner.BYTES_PER_ENTRY * 2)
        for i in range(keys):
            offset_map.put(b"key-%d" % i, i)
        current, _peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(offset_map) == keys
        return {"bytes_per_key": current / keys, "kafka_bytes_per_key": cleaner.BYTES_PER_ENTRY}

    benchmark.group = "offset-map-memory"
    result = benchmark.pedantic(fill, rounds=1, iterations=1)
    benchmark.extra_info.update(keys=keys, **result)
