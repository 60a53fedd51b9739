"""Reopen time of a clean log dir with 1,000 partitions (the leader-epoch work's ask).

The log dir is written once for the module: LogDir.open(path, LogConfig(fsync=False)), 1,000
partitions "t-0" ... "t-999", four 16 KiB batches each (64 KiB, one segment), an epoch entry
each, then close() -- the clean-shutdown marker and the metadata store are written.

"logdir-reopen-paired", alternated in pairs (A B, then B A):
  ours    LogDir.open(path, LogConfig(fsync=False)): marker read and deleted, metadata read,
          every partition opened without recovery (clean: indexes trusted, sanity-checked,
          mapped; the epoch checkpoint read).  Closing again (which writes the marker back)
          is not timed; nothing is written in the timed part except the marker's deletion.
  floor   the limit: the syscalls any reopen needs, from Python -- listdir of the log dir,
          and per partition listdir, os.open + os.fstat + os.close of its .log, .index and
          .timeindex, and reading its leader-epoch-checkpoint
The pair ratio is t(floor) / t(ours) (ours' share of the floor); `slow_paired_rounds` pairs.

"logdir-reopen-sealed-paired": what sealed segments cost a clean reopen; 200 partitions (a
fifth of the above) of 20 segments (19 sealed, one 4 KiB batch each; LogConfig(segment_bytes=
16 KiB)), and the same partitions with one segment of one batch:
  first-use    LogDir.open with sealed_segment_check="first_use" (the default): sealed
               segments are opened at their first use (Kafka's KAFKA-7283)
  at-open      sealed_segment_check="open": each sealed segment opened and checked now
  one-segment  the one-segment dir, first-use: the ratio against it is 1.0 when sealed
               segments cost the open nothing

"logdir-reopen-threads-paired": the same reopen on 4 recovery threads (LogDir.open's
recovery_threads, Kafka's num.recovery.threads.per.data.dir) against 1, pair ratio t(1) / t(4):
  warm    the page cache holds every file (as above): the threads only take turns at the GIL;
  cold    the page cache dropped before every run (sync; echo 3 > /proc/sys/vm/drop_caches,
          untimed; root only, skipped otherwise): the opens wait for the disk, and four
          threads overlap those waits.
"""
from __future__ import annotations

import os
import time

import pytest
from benchlib import Contender, paired, pedantic_paired

import storage

TOPIC = "t"
BATCHES_PER_PARTITION = 4
CONFIG = storage.LogConfig(fsync=False)


class ManyPartitions:
    def __init__(self, fresh_dirs, stamped, partitions: int):
        self.path = fresh_dirs.new("logdir-1000")
        self.partitions = partitions
        self.fresh_dirs = fresh_dirs
        logdir = storage.LogDir.open(self.path, CONFIG)
        for p in range(partitions):
            log = logdir.partition(TOPIC, p)
            log.assign_epoch_start_offset(1, 0)
            stamped.append_to(log, BATCHES_PER_PARTITION, epoch=1)
        self.leo = BATCHES_PER_PARTITION * stamped.records_per_batch
        self.bytes = partitions * BATCHES_PER_PARTITION * stamped.batch_size
        logdir.close()
        self.dirs = sorted(n for n in os.listdir(self.path) if n.startswith(f"{TOPIC}-"))
        assert len(self.dirs) == partitions

    def ours(self, threads: int = 1, cold: bool = False) -> float:
        if cold:
            drop_page_cache()
        start = time.perf_counter()
        logdir = storage.LogDir.open(self.path, CONFIG, recovery_threads=threads)
        elapsed = time.perf_counter() - start
        try:
            assert logdir.had_clean_shutdown and not logdir.recovery_report
            logs = logdir.logs()
            assert len(logs) == self.partitions
            assert all(log.log_end_offset == self.leo for log in logs.values())
        finally:
            logdir.close()
        return elapsed

    def floor(self) -> float:
        join, listdir, open_, fstat, close = os.path.join, os.listdir, os.open, os.fstat, os.close
        start = time.perf_counter()
        for name in listdir(self.path):
            directory = join(self.path, name)
            if not name.startswith(f"{TOPIC}-"):
                continue
            listdir(directory)
            for suffix in (".log", ".index", ".timeindex"):
                fd = open_(join(directory, "00000000000000000000" + suffix), os.O_RDONLY)
                fstat(fd)
                close(fd)
            with open(join(directory, "leader-epoch-checkpoint"), "rb") as f:
                f.read()
        return time.perf_counter() - start

    def close(self):
        self.fresh_dirs.discard(self.path)


class SealedPartitions:
    SEGMENTS = 20

    def __init__(self, fresh_dirs, partitions: int):
        self.fresh_dirs = fresh_dirs
        self.partitions = partitions
        config = storage.LogConfig(fsync=False, segment_bytes=16 * 1024, epoch_flush="deferred")
        self.paths = {}
        for segments in (self.SEGMENTS, 1):
            path = self.paths[segments] = fresh_dirs.new(f"logdir-sealed-{segments}")
            with storage.LogDir.open(path, config) as logdir:
                for p in range(partitions):
                    log = logdir.partition(TOPIC, p)
                    for _ in range(segments):
                        log.append_as_leader([b"x" * 4000], 0)
                        if len(log.segments) < segments:
                            log.roll()

    def open(self, segments: int, check: str) -> float:
        config = storage.LogConfig(fsync=False, segment_bytes=16 * 1024, sealed_segment_check=check)
        start = time.perf_counter()
        logdir = storage.LogDir.open(self.paths[segments], config)
        elapsed = time.perf_counter() - start
        try:
            logs = logdir.logs()
            assert len(logs) == self.partitions and not logdir.unopened
            assert all(len(log.segments) == segments and log.log_end_offset == segments for log in logs.values())
        finally:
            logdir.close()
        return elapsed

    def close(self):
        for path in self.paths.values():
            self.fresh_dirs.discard(path)


DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_page_cache() -> None:
    os.sync()
    with open(DROP_CACHES, "w") as f:
        f.write("3")


def can_drop_page_cache() -> bool:
    return os.access(DROP_CACHES, os.W_OK)


@pytest.fixture(scope="module")
def many_partitions(fresh_dirs, stamped, sizes):
    side = ManyPartitions(fresh_dirs, stamped, sizes.reopen_partitions)
    yield side
    side.close()


def test_logdir_reopen_paired(benchmark, sizes, many_partitions):
    side = many_partitions
    contenders = [
        Contender("ours", f"LogDir.open, {side.partitions} partitions", "ours", side.ours,
                  "LogDir.open(path, LogConfig(fsync=False)) of a cleanly closed dir"),
        Contender("floor", "syscall floor (limit)", "limit", side.floor,
                  "listdir + per partition: listdir, open/fstat/close x3, read leader-epoch-checkpoint"),
    ]
    result = pedantic_paired(benchmark, "logdir-reopen-paired", paired, contenders, [("ours", "floor")],
                             sizes.slow_paired_rounds, warmup=not sizes.quick, unit="seconds")
    detail = (f"{BATCHES_PER_PARTITION} batches of 16 KiB and one epoch entry a partition, "
              f"{side.bytes / 2**20:.0f} MiB in all, cleanly closed")
    benchmark.extra_info.update(size=f"{side.partitions} partitions", detail=detail, partitions=side.partitions,
                                bytes=side.bytes,
                                per_partition_s={k: v / side.partitions for k, v in result["median_seconds"].items()},
                                **result)


@pytest.mark.parametrize("cache", ["warm", "cold"])
def test_logdir_reopen_threads_paired(benchmark, sizes, many_partitions, cache):
    if cache == "cold" and not can_drop_page_cache():
        pytest.skip(f"the cold case drops the page cache: {DROP_CACHES} is not writable (root only)")
    if cache == "cold" and sizes.quick:
        pytest.skip("the cold case drops the machine's page cache: full runs only")
    side = many_partitions
    cold = cache == "cold"
    contenders = [
        Contender("threads-4", f"LogDir.open, 4 recovery threads, {cache} cache", "ours",
                  lambda: side.ours(4, cold), "LogDir.open(path, config, recovery_threads=4)"),
        Contender("threads-1", f"LogDir.open, 1 thread, {cache} cache", "peer",
                  lambda: side.ours(1, cold), "LogDir.open(path, config) (recovery_threads=1, the default)"),
    ]
    result = pedantic_paired(benchmark, "logdir-reopen-threads-paired", paired, contenders,
                             [("threads-4", "threads-1")], sizes.slow_paired_rounds, warmup=not sizes.quick,
                             unit="seconds")
    detail = (f"{side.partitions} partitions, {cache} page cache"
              + ("" if not cold else " (dropped, untimed, before every run)"))
    benchmark.extra_info.update(size=f"{side.partitions} partitions, {cache}", detail=detail,
                                partitions=side.partitions,
                                per_partition_s={k: v / side.partitions for k, v in result["median_seconds"].items()},
                                **result)


@pytest.fixture(scope="module")
def sealed_partitions(fresh_dirs, sizes):
    side = SealedPartitions(fresh_dirs, max(sizes.reopen_partitions // 5, 4))
    yield side
    side.close()


def test_logdir_reopen_sealed_paired(benchmark, sizes, sealed_partitions):
    side = sealed_partitions
    n = side.SEGMENTS
    contenders = [
        Contender("first-use", f"LogDir.open, {n} segments a partition, sealed ones opened at first use", "ours",
                  lambda: side.open(n, "first_use"), 'sealed_segment_check="first_use" (the default)'),
        Contender("at-open", f"LogDir.open, {n} segments a partition, each checked at the open", "peer",
                  lambda: side.open(n, "open"), 'sealed_segment_check="open"'),
        Contender("one-segment", "LogDir.open, one segment a partition", "limit",
                  lambda: side.open(1, "first_use"), "the same partitions with one segment each"),
    ]
    pairs = [("first-use", "at-open"), ("first-use", "one-segment")]
    result = pedantic_paired(benchmark, "logdir-reopen-sealed-paired", paired, contenders, pairs,
                             sizes.slow_paired_rounds, warmup=not sizes.quick, unit="seconds")
    medians = result["median_seconds"]
    per_sealed = {k: (medians[k] - medians["one-segment"]) / side.partitions / (n - 1) for k in ("first-use", "at-open")}
    benchmark.extra_info.update(size=f"{side.partitions} partitions x {n} segments", partitions=side.partitions,
                                segments=n, per_partition_s={k: v / side.partitions for k, v in medians.items()},
                                per_sealed_segment_s=per_sealed, **result)
