"""Helpers shared by the benchmark modules, conftest.py and report.py (not a test module).

Kept out of conftest.py so that bench modules can import them by a name no other
directory's conftest.py shadows.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import platform
import random
import shutil
import statistics
import struct
import tempfile
import time

KiB = 1 << 10
MiB = 1 << 20

VALUE_BYTES = 100          # the design doc's record size
BASE_TIMESTAMP = 1_700_000_000_000


# ---- sizes -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BenchSizes:
    quick: bool
    append_total_bytes: int     # bytes appended per round of an append case
    rounds: int                 # pedantic rounds per I/O case
    warmup_rounds: int
    paired_rounds: int          # K: A B pairs per (ours, peer) in the paired tests
    build_batches: int          # batches built per round of a build case
    build_records: int          # records per batch
    build_rounds: int
    # -- added with the read / recovery / epoch / replication / memory groups --
    slow_paired_rounds: int     # K for pairs with a slow peer (SQLite, kafka-python), 4+ s a pair
    records_total_bytes: int    # bytes per round of the records-path append (kafka-python builds)
    big_log_bytes: int          # the shared "1 GiB" log: read, recovery, replication catch-up
    point_reads: int            # random point reads per run (SQLite: a fifth)
    truncate_log_sizes: tuple   # log sizes at which truncate_to is timed
    truncate_rounds: int
    epoch_counts: tuple         # cache sizes at which end_offset_for is timed
    epoch_queries: int
    memory_log_sizes: tuple     # log sizes of the peak-memory subprocesses
    diverge_bytes: tuple        # (common prefix, divergent follower tail, leader's new tail)
    reopen_partitions: int
    elections: int
    # -- added with producer state and retention (bench_producers) --
    idempotent_bytes: int = 64 * MiB       # bytes appended per run of the idempotent-append pair
    retention_partitions: int = 10_000     # partitions a retention pass walks
    # -- added with the per-call append figure (bench_append.test_append_percall_paired) --
    small_batch_total_bytes: int = 8 * MiB  # bytes of one-record batches (~170 B each) a run


FULL = BenchSizes(quick=False, append_total_bytes=256 * MiB, rounds=7, warmup_rounds=1,
                  paired_rounds=9, build_batches=100, build_records=1000, build_rounds=9,
                  slow_paired_rounds=5, records_total_bytes=16 * MiB, big_log_bytes=1 << 30,
                  point_reads=50_000, truncate_log_sizes=(16 * MiB, 128 * MiB, 1 << 30), truncate_rounds=15,
                  epoch_counts=(100, 1_000, 10_000, 100_000), epoch_queries=100_000,
                  memory_log_sizes=(256 * MiB, 1 << 30), diverge_bytes=(256 * MiB, 64 * MiB, 64 * MiB),
                  reopen_partitions=1000, elections=50)
QUICK = BenchSizes(quick=True, append_total_bytes=8 * MiB, rounds=1, warmup_rounds=0,
                   paired_rounds=1, build_batches=5, build_records=1000, build_rounds=1,
                   slow_paired_rounds=1, records_total_bytes=1 * MiB, big_log_bytes=8 * MiB,
                   point_reads=1_000, truncate_log_sizes=(2 * MiB, 8 * MiB), truncate_rounds=1,
                   epoch_counts=(100, 10_000), epoch_queries=1_000,
                   memory_log_sizes=(4 * MiB, 8 * MiB), diverge_bytes=(4 * MiB, 1 * MiB, 1 * MiB),
                   reopen_partitions=20, elections=3, idempotent_bytes=2 * MiB, retention_partitions=50,
                   small_batch_total_bytes=256 * KiB)


# ---- fresh directories -------------------------------------------------------------------

class FreshDirs:
    """Hands out new empty directories under one root; `discard` deletes one (its pages in
    the page cache are freed with it)."""

    def __init__(self, root: str):
        self.root = root
        self._counter = itertools.count()

    def new(self, label: str = "d") -> str:
        path = os.path.join(self.root, f"{label}-{next(self._counter)}")
        os.makedirs(path)
        return path

    @staticmethod
    def discard(path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


# ---- records and prebuilt batches --------------------------------------------------------

def make_values(count: int, size: int = VALUE_BYTES, seed: int = 1) -> list[bytes]:
    """`count` distinct values of `size` bytes: hex text, which compresses about 2:1 (neither
    incompressible nor trivially so)."""
    rnd = random.Random(seed)
    return [rnd.randbytes((size + 1) // 2).hex().encode()[:size] for _ in range(count)]


def records_per_batch(batch_bytes: int, values: list[bytes]) -> int:
    """The largest record count whose uncompressed batch of values[:n] fits in batch_bytes."""
    import storage

    if len(storage.build_batch(values[:1])) > batch_bytes:
        raise ValueError(f"one record does not fit in {batch_bytes} bytes")
    lo, hi = 1, len(values)
    if len(storage.build_batch(values)) <= batch_bytes:
        return hi
    while hi - lo > 1:          # invariant: values[:lo] fits, values[:hi] does not
        mid = (lo + hi) // 2
        if len(storage.build_batch(values[:mid])) <= batch_bytes:
            lo = mid
        else:
            hi = mid
    return lo


@dataclasses.dataclass
class Workload:
    """Prebuilt batches for one append case.

    follower: batches with consecutive base offsets from 0 (what a follower fetches), to pass
              one by one to `append_as_follower`; LMDB keys are the same base offsets.
    leader:   the same records as producer batches (base offset 0, no leader epoch), to pass
              one by one to `append_as_leader`, which assigns offsets and stamps the epoch.
    Both lists hold the same number of bytes.
    """

    batch_target: int
    records_per_batch: int
    follower: list[bytes]
    leader: list[bytes]
    base_offsets: list[int]
    total_bytes: int
    total_records: int

    @property
    def batch_count(self) -> int:
        return len(self.follower)

    def info(self) -> dict:
        return {"bytes": self.total_bytes, "records": self.total_records, "batches": self.batch_count,
                "batch_bytes": self.total_bytes // self.batch_count, "records_per_batch": self.records_per_batch}


def prebuild_batches(batch_bytes: int, total_bytes: int, *, base_offset: int = 0) -> Workload:
    """Batches of at most `batch_bytes` each (100-byte values), `total_bytes` or just over in
    all, built with `storage.build_batch(..., base_offset=...)` so the follower batches carry
    correct consecutive offsets, plus the leader (producer) variant of each."""
    import storage

    values = make_values(max(16, batch_bytes // VALUE_BYTES + 1))
    per_batch = records_per_batch(batch_bytes, values)
    records = values[:per_batch]
    count = max(1, -(-total_bytes // len(storage.build_batch(records))))
    follower, leader, offsets = [], [], []
    offset = base_offset
    for i in range(count):
        ts = BASE_TIMESTAMP + i
        follower.append(storage.build_batch(records, base_offset=offset, partition_leader_epoch=0,
                                            base_timestamp=ts))
        leader.append(storage.build_batch(records, base_offset=0, base_timestamp=ts))
        offsets.append(offset)
        offset += per_batch
    total = sum(map(len, follower))
    assert total == sum(map(len, leader))
    return Workload(batch_bytes, per_batch, follower, leader, offsets, total, per_batch * count)


# ---- big logs from one stamped template -------------------------------------------------

BATCH_BYTES = 16 * KiB      # batch size of the shared logs (read, recovery, truncation, replication)
CHUNK_BYTES = 1 * MiB       # bytes per append_as_follower call when writing them


class StampedBatches:
    """Batches of `batch_bytes` (100-byte values) made by copying one prebuilt template and
    rewriting, per batch, its base offset, partition leader epoch and timestamps (base and max
    timestamp = BASE_TIMESTAMP + batch index, as in prebuild_batches) and its CRC: about 2 µs
    a batch, so a 1 GiB log is written in well under a second, whatever its size, without
    holding it in memory.  Every batch has the same size and record count."""

    _TS = struct.Struct(">qq")
    _CRC = struct.Struct(">I")

    def __init__(self, batch_bytes: int = BATCH_BYTES):
        import storage

        values = make_values(max(16, batch_bytes // VALUE_BYTES + 1))
        self.records_per_batch = records_per_batch(batch_bytes, values)
        self.values = values[:self.records_per_batch]
        self.template = storage.build_batch(self.values, base_offset=0, partition_leader_epoch=0,
                                            base_timestamp=BASE_TIMESTAMP)
        self.batch_size = len(self.template)
        first = storage.iter_batches(self.template).__next__()
        self._ts_delta = first.max_timestamp - first.base_timestamp

    def batches_for(self, total_bytes: int) -> int:
        """Whole batches in at most total_bytes (at least one)."""
        return max(1, total_bytes // self.batch_size)

    def chunks(self, batch_count: int, *, start_offset: int = 0, epoch: int = 0, first_index: int = 0,
               chunk_bytes: int = CHUNK_BYTES):
        """Yield (chunk, base offsets) for `batch_count` consecutive batches, at most chunk_bytes
        a chunk.  `chunk` is one bytearray reused (rewritten) for every chunk: consume it before
        asking for the next one."""
        from storage.core._native import ffi, lib

        size, per = self.batch_size, max(1, chunk_bytes // self.batch_size)
        buf = bytearray(self.template * per)
        pointer = ffi.from_buffer(buf)
        ts_pack, crc_pack = self._TS.pack_into, self._CRC.pack_into
        offset, index, left = start_offset, first_index, batch_count
        while left > 0:
            n = min(per, left)
            offsets = []
            for i in range(n):
                pos = i * size
                ts = BASE_TIMESTAMP + index
                ts_pack(buf, pos + 27, ts, ts + self._ts_delta)
                crc_pack(buf, pos + 17, lib.plog_crc32c(0, pointer + pos + 21, size - 21))
                lib.plog_batch_stamp(pointer + pos, offset, epoch)
                offsets.append(offset)
                offset += self.records_per_batch
                index += 1
            yield (buf if n == per else memoryview(buf)[:n * size]), offsets
            left -= n

    def append_to(self, log, batch_count: int, *, start_offset: int | None = None, epoch: int = 0,
                  first_index: int = 0) -> int:
        """append_as_follower `batch_count` batches to `log` (from its log end offset);
        returns the new log end offset."""
        start = log.log_end_offset if start_offset is None else start_offset
        for chunk, _ in self.chunks(batch_count, start_offset=start, epoch=epoch, first_index=first_index):
            log.append_as_follower(chunk)
        return log.log_end_offset


def write_log(path: str, total_bytes: int, config=None, *, stamped: StampedBatches | None = None,
              epoch: int = 0) -> dict:
    """Write a fresh log of whole 16 KiB batches (at most total_bytes) at `path`, close it
    cleanly; returns what report.py and the cases need to know about it."""
    import storage

    stamped = stamped or StampedBatches()
    config = config or storage.LogConfig(fsync=False)
    count = stamped.batches_for(total_bytes)
    log = storage.PartitionLog.open(path, config)
    try:
        stamped.append_to(log, count, epoch=epoch)
        info = {"bytes": log.size_bytes, "batches": count, "batch_bytes": stamped.batch_size,
                "records_per_batch": stamped.records_per_batch, "records": log.log_end_offset,
                "log_end_offset": log.log_end_offset, "segments": len(log.segments)}
    finally:
        log.close()
    return info


# ---- paired measurements -----------------------------------------------------------------

@dataclasses.dataclass
class Contender:
    """One side of a paired measurement.  `run()` does its own untimed set-up and clean-up and
    returns the seconds of the timed part (or a dict with "seconds" and anything to keep)."""

    name: str
    label: str
    role: str                   # "ours", "peer", "ceiling" or "limit"
    run: object                 # () -> float | dict
    setting: str = ""


def paired(contenders: list[Contender], pairs: list[tuple[str, str]], rounds: int, *,
           prime: bool = False, warmup: bool = True, amount: float | None = None,
           unit: str = "bytes") -> dict:
    """The paired measurement of bench_append.paired_append, for any contenders: for each
    (ours, peer) pair, `rounds` times, run both back to back (A B, then B A on the next round)
    and keep t_peer / t_ours, i.e. throughput(ours) / throughput(peer).  prime: one untimed
    run of the same contender just before each measured one.  Returns pairs with their
    ratios and median, every run's time, medians and (with `amount`) throughput.  A pair may
    carry its own round count as a third item (ours, peer, rounds): slow peers get fewer."""
    by_name = {c.name: c for c in contenders}
    if warmup:
        for c in contenders:
            c.run()
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
    kept: dict[str, list] = {c.name: [] for c in contenders}
    out_pairs: dict[str, dict] = {}

    def measure(c: Contender) -> float:
        if prime:
            c.run()
        result = c.run()
        if isinstance(result, dict):
            kept[c.name].append(result)
            return result["seconds"]
        return result

    for k in range(max([rounds] + [p[2] for p in pairs if len(p) > 2])):
        for pair in pairs:
            ours_name, peer_name = pair[0], pair[1]
            if k >= (pair[2] if len(pair) > 2 else rounds):
                continue
            ours, peer = by_name[ours_name], by_name[peer_name]
            order = (ours, peer) if k % 2 == 0 else (peer, ours)
            t = {}
            for c in order:
                t[c.name] = measure(c)
                times[c.name].append(t[c.name])
            entry = out_pairs.setdefault(f"{ours.name} / {peer.name}", {
                "ours": ours.name, "peer": peer.name, "peer_role": peer.role,
                "label": f"{ours.label} / {peer.label}", "ratios": []})
            entry["ratios"].append(t[peer.name] / t[ours.name])
    for entry in out_pairs.values():
        entry["median"] = statistics.median(entry["ratios"])
    result = {
        "paired": True,
        "pairs": out_pairs,
        "times": times,
        "median_seconds": {name: statistics.median(v) for name, v in times.items() if v},
        "labels": {c.name: c.label for c in contenders},
        "roles": {c.name: c.role for c in contenders},
        "settings": {c.name: c.setting for c in contenders if c.setting},
        "primed": prime,
        "unit": unit,
    }
    if amount:
        key = "throughput_MBps" if unit == "bytes" else "records_per_s"
        scale = 1e6 if unit == "bytes" else 1.0
        result[key] = {name: amount / m / scale for name, m in result["median_seconds"].items()}
    if any(kept.values()):
        result["kept"] = {name: v for name, v in kept.items() if v}
    return result


def pedantic_paired(benchmark, group: str, runner, *args, **options) -> dict:
    """One paired case: `runner(*args, **options)` (`paired`, or a module's own pairing such as
    bench_append.paired_append) run once under pytest-benchmark in `group`.  Pedantic, one round
    of one iteration: the runner alternates the contenders and times every run itself, so
    pytest-benchmark's own time of the whole is not the measurement.  Returns the runner's
    result (the pairs, their ratios and medians) for the case's extra_info."""
    benchmark.group = group
    return benchmark.pedantic(runner, args=args, kwargs=options, rounds=1, iterations=1)

# ---- latencies and memory ----------------------------------------------------------------

def percentiles(samples_ns: list[int], points=(50, 99)) -> dict:
    """{"p50": seconds, "p99": seconds, ...} of per-call times in nanoseconds (nearest rank)."""
    ordered = sorted(samples_ns)
    n = len(ordered)
    out = {}
    for p in points:
        rank = min(n - 1, max(0, -(-p * n // 100) - 1))
        out[f"p{p}"] = ordered[rank] / 1e9
    out["mean"] = sum(ordered) / n / 1e9
    out["n"] = n
    return out


def timer_overhead_ns(samples: int = 20_000) -> int:
    """Median of `t1 - t0` for back-to-back perf_counter_ns calls: what every per-call latency
    sample includes on top of the call itself."""
    pc = time.perf_counter_ns
    lat = []
    for _ in range(samples):
        t0 = pc()
        t1 = pc()
        lat.append(t1 - t0)
    lat.sort()
    return lat[len(lat) // 2]


def proc_status() -> dict:
    """Memory fields of /proc/self/status in bytes (VmHWM, VmRSS, RssAnon, RssFile, RssShmem)."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem", "VmPeak", "VmSize"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


# ---- machine -----------------------------------------------------------------------------

def machine_summary() -> dict:
    """CPU model and cores from /proc/cpuinfo, memory, kernel, Python."""
    model, cores = None, 0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cores += 1
                    model = model or line.split(":", 1)[1].strip()
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "cores": cores or os.cpu_count(),
        "mem_bytes": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "tmpdir": tempfile.gettempdir(),
    }
