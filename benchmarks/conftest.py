"""Shared set-up of the pytest-benchmark suite (docs/design.md "Performance targets").

Run:    python -m pytest benchmarks --benchmark-only [--quick] [--benchmark-json=BENCH.json]
Report: python benchmarks/report.py BENCH.json --out benchmarks/RESULTS.md

The project's pytest configuration collects `tests/` only (testpaths), so a plain
`python -m pytest` never runs these.  The benchmark modules are named `bench_*.py` and this
conftest collects them (pytest_collect_file below) when `benchmarks/` is on the command line.

--quick shrinks the data (8 MiB per append round, 5 batches per build round, an 8 MiB "big"
log, 20 partitions, ...: benchlib.QUICK) and runs each case once, for a CI smoke run; its
numbers mean nothing.

Groups (one module each): append (bench_append), build (bench_build), read (bench_read),
recovery (bench_recovery), epoch and truncation, leader elections (bench_epoch), replication
(bench_replication), peak memory (bench_memory), log-dir reopen (bench_logdir).

Rules every I/O case follows (the targets are ratios measured side by side on a 2-core VM):
  - fsync off everywhere (our LogConfig(fsync=False), LMDB sync=False/metasync=False, a plain
    file never fsync'd);
  - every round writes into a fresh, empty directory (pedantic mode: the directory is made
    and opened in `setup`, checked and deleted in `teardown`, neither timed), so every peer
    writes into newly allocated page-cache pages, in the same state;
  - ratios come from the paired tests (groups "*-paired"), which alternate ours and each
    peer back to back (A B, then B A) and report the median of the per-pair ratios: writing
    into fresh page-cache pages after a couple of seconds idle can be up to 10x slower than
    warm, so medians of cases run at different times would compare machine states, not code.
    Each measured run in a pair is primed by an untimed run of the same peer just before it
    (bench_append.paired_append explains why: LMDB with writemap is the peer that needs it).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import shutil
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # benchlib, whatever --import-mode

import benchlib  # noqa: E402
from benchlib import FULL, QUICK, FreshDirs, StampedBatches, prebuild_batches, write_log  # noqa: E402

# ---- options and collection --------------------------------------------------------------

def pytest_addoption(parser):
    group = parser.getgroup("storage benchmarks")
    group.addoption(
        "--quick", action="store_true", default=False,
        help="storage benchmarks: shrink data sizes and run one round per case (CI smoke run)")


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


def pytest_generate_tests(metafunc):
    """Cases whose list depends on --quick (benchlib.FULL / QUICK): epoch counts, memory log sizes."""
    sizes = QUICK if metafunc.config.getoption("--quick", default=False) else FULL
    if "epoch_count" in metafunc.fixturenames:
        metafunc.parametrize("epoch_count", sizes.epoch_counts, ids=[f"{n}-epochs" for n in sizes.epoch_counts])
    if "memory_log_bytes" in metafunc.fixturenames:
        metafunc.parametrize("memory_log_bytes", sizes.memory_log_sizes,
                             ids=[f"{n >> 20}MiB" for n in sizes.memory_log_sizes])


def pytest_sessionstart(session):
    session.config.stash[_LOAD_AT_START] = _loadavg()
    session.config.stash[_STARTED] = time.time()


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


_LOAD_AT_START = pytest.StashKey[object]()
_STARTED = pytest.StashKey[float]()


def pytest_benchmark_update_machine_info(config, machine_info):
    """What report.py prints as the machine: CPU model and cores from /proc/cpuinfo, etc."""
    import storage

    summary = benchlib.machine_summary()
    summary["storage_version"] = storage.__version__
    summary["quick"] = bool(config.getoption("--quick", default=False))
    summary["sizes"] = dataclasses.asdict(QUICK if summary["quick"] else FULL)
    # Other processes share the 2 cores: the load average says whether they did.
    summary["loadavg_start"] = config.stash.get(_LOAD_AT_START, None)
    summary["loadavg_end"] = _loadavg()
    started = config.stash.get(_STARTED, None)
    summary["session_seconds"] = round(time.time() - started, 1) if started else None
    machine_info["storage_bench"] = summary


# ---- fixtures ----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def quick(request) -> bool:
    return bool(request.config.getoption("--quick"))


@pytest.fixture(scope="session")
def sizes(quick) -> benchlib.BenchSizes:
    """Data sizes and round counts (benchlib.FULL, or benchlib.QUICK with --quick)."""
    return QUICK if quick else FULL


@pytest.fixture(scope="session")
def fresh_dirs(tmp_path_factory):
    """FreshDirs: .new(label) -> a new empty directory, .discard(path) deletes it.  The root
    (under pytest's basetemp, on the same file system as /tmp) goes when the session ends."""
    root = tmp_path_factory.mktemp("storage-bench")
    yield FreshDirs(str(root))
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def workload(sizes):
    """workload(batch_bytes) -> the session's benchlib.Workload of that batch size, built once:
    follower batches with consecutive base offsets and the leader (producer) variant."""
    cache = {}

    def get(batch_bytes: int):
        if batch_bytes not in cache:
            cache[batch_bytes] = prebuild_batches(batch_bytes, sizes.append_total_bytes)
        return cache[batch_bytes]

    yield get
    cache.clear()


@pytest.fixture(scope="session")
def stamped():
    """benchlib.StampedBatches of 16 KiB: the batches of every shared log."""
    return StampedBatches()


@pytest.fixture(scope="session")
def big_log(sizes, fresh_dirs, stamped):
    """A clean (closed) log of `sizes.big_log_bytes` in 16 KiB batches (1 GiB in a full run),
    LogConfig(fsync=False) with the default 1 GiB segments, written once per session for the
    read, recovery and replication cases.  Cases may rebuild its indexes (recovery) or add an
    epoch entry at its end (a leader), never change its batches.  A dict: path, config and
    write_log's description (bytes, batches, batch_bytes, records_per_batch, log_end_offset)."""
    import storage

    path = fresh_dirs.new("big-log")
    config = storage.LogConfig(fsync=False)
    info = write_log(os.path.join(path, "t-0"), sizes.big_log_bytes, config, stamped=stamped)
    return {"root": path, "path": os.path.join(path, "t-0"), "config": config, **info}
