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
import tempfile

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


FULL = BenchSizes(quick=False, append_total_bytes=256 * MiB, rounds=7, warmup_rounds=1,
                  paired_rounds=9, build_batches=100, build_records=1000, build_rounds=9)
QUICK = BenchSizes(quick=True, append_total_bytes=8 * MiB, rounds=1, warmup_rounds=0,
                   paired_rounds=1, build_batches=5, build_records=1000, build_rounds=1)


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
