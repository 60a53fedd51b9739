"""Shared set-up of the pytest-benchmark suite (design.md, "Performance targets").

Run:    python -m pytest benchmarks --benchmark-only [--quick] [--benchmark-json=BENCH.json]
Report: python benchmarks/report.py BENCH.json --out benchmarks/RESULTS.md

The project's pytest configuration collects `tests/` only (testpaths), so a plain
`python -m pytest` never runs these.  The benchmark modules are named `bench_*.py` and this
conftest collects them (pytest_collect_file below) when `benchmarks/` is on the command line.

Rules every I/O case follows (the targets are ratios measured side by side on a 2-core VM):
  - fsync off everywhere (our LogConfig(fsync=False), LMDB sync=False/metasync=False, a plain
    file never fsync'd);
  - every round writes into a fresh, empty directory (pedantic mode, the directory made in
    `setup` and deleted in `teardown`), so every peer writes into newly allocated page-cache
    pages, in the same state;
  - ratios are taken from the paired tests (group "*-paired"), which alternate ours and each
    peer back to back (A B A B ...) and report the median of the per-pair ratios: writing into
    fresh page-cache pages after a couple of seconds idle can be up to 10x slower than warm,
    so medians of cases run minutes apart would compare machine states, not code.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import os
import platform
import random
import shutil
import tempfile

import pytest

import storage

KiB = 1 << 10
MiB = 1 << 20

VALUE_BYTES = 100          # the design doc's record size
BASE_TIMESTAMP = 1_700_000_000_000


# ---- collection --------------------------------------------------------------------------

def pytest_addoption(parser):
    group = parser.getgroup("storage benchmarks")
    group.addoption(
        "--quick", action="store_true", default=False,
        help="storage benchmarks: shrink data sizes and run one round per case (for CI smoke runs)")


def pytest_collect_file(file_path, parent):
    """Collect benchmarks/bench_*.py as test modules (pytest's default is test_*.py).

    Files pytest collects by itself are left to it: a bench file named on the command line
    (an 'initial path') or one already matching the configured python_files patterns."""
    if file_path.suffix != ".py" or not file_path.name.startswith("bench_"):
        return None
    if parent.session.isinitpath(file_path):
        return None
    if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in parent.config.getini("python_files")):
        return None
    ihook = parent.session.gethookproxy(file_path)
    return ihook.pytest_pycollect_makemodule(module_path=file_path, parent=parent)


def pytest_benchmark_update_machine_info(config, machine_info):
    """What report.py prints as 'machine': the CPU model and core count from /proc/cpuinfo."""
    machine_info["storage_bench"] = machine_summary()
    machine_info["storage_bench"]["quick"] = bool(config.getoption("--quick"))


def machine_summary() -> dict:
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
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
        "cores": os.cpu_count(),
        "mem_bytes": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "storage_version": storage.__version__,
        "tmpdir": tempfile.gettempdir(),
    }


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


@pytest.fixture(scope="session")
def quick(request) -> bool:
    return bool(request.config.getoption("--quick"))


@pytest.fixture(scope="session")
def sizes(quick) -> BenchSizes:
    if quick:
        return BenchSizes(quick=True, append_total_bytes=8 * MiB, rounds=1, warmup_rounds=0,
                          paired_rounds=1, build_batches=5, build_records=1000, build_rounds=1)
    return BenchSizes(quick=False, append_total_bytes=256 * MiB, rounds=7, warmup_rounds=1,
                      paired_rounds=9, build_batches=100, build_records=1000, build_rounds=9)


# ---- fresh directories -------------------------------------------------------------------

class FreshDirs:
    """Hands out new empty directories under one root; `discard` deletes one (its pages in
    the page cache are freed with it).  Everything left is removed when the session ends."""

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


@pytest.fixture(scope="session")
def fresh_dirs(tmp_path_factory) -> FreshDirs:
    root = tmp_path_factory.mktemp("storage-bench")
    dirs = FreshDirs(str(root))
    yield dirs
    shutil.rmtree(root, ignore_errors=True)


# ---- records and prebuilt batches --------------------------------------------------------

def make_values(count: int, size: int = VALUE_BYTES, seed: int = 1) -> list[bytes]:
    """`count` distinct values of `size` bytes, hex text (compresses about 2:1, like typical
    payloads; neither incompressible nor trivially so)."""
    rnd = random.Random(seed)
    return [rnd.randbytes((size + 1) // 2).hex().encode()[:size] for _ in range(count)]


def records_per_batch(batch_bytes: int, values: list[bytes]) -> int:
    """The largest record count whose uncompressed batch of `values` fits in batch_bytes."""
    lo, hi = 1, len(values)
    if len(storage.build_batch(values[:1])) > batch_bytes:
        raise ValueError(f"one record does not fit in {batch_bytes} bytes")
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
              one by one to `append_as_follower`; LMDB keys use the same offsets.
    leader:   the same records as producer batches (base offset 0, no leader epoch), to pass
              one by one to `append_as_leader`, which assigns offsets and stamps the epoch.
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
    """Batches of (at most) `batch_bytes` each, `total_bytes` or just over in all, built with
    `storage.build_batch(..., base_offset=...)` so the follower batches carry correct
    consecutive offsets, plus the leader (producer) variant of each."""
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


_workloads: dict[tuple[int, int], Workload] = {}


@pytest.fixture(scope="session")
def workload(sizes):
    """workload(batch_bytes) -> the session's Workload of that batch size (built once)."""

    def get(batch_bytes: int) -> Workload:
        key = (batch_bytes, sizes.append_total_bytes)
        if key not in _workloads:
            _workloads[key] = prebuild_batches(batch_bytes, sizes.append_total_bytes)
        return _workloads[key]

    yield get
    _workloads.clear()
