"""What an open partition costs at 10,000 partitions (issue 18): anonymous memory, open file
descriptors and memory mappings per partition, with one segment and with four (three sealed),
so that growth with the number of sealed segments shows.

Each layout is written once (LogDir, LogConfig(fsync=False, segment_bytes=16 KiB), one 4 KiB
batch a segment, then close); then a child process (this file run as a script, so nothing of
pytest or of the writer is counted) imports the engine, collects garbage, reads RssAnon,
opens the dir (a clean open), collects garbage again and reads RssAnon, the number of open
fds (/proc/self/fd) and of mappings (/proc/self/maps).  Reported per partition:

  anon_bytes      (RssAnon after - before) / partitions: Python objects, C structs, LMDB
  fds, maps       open file descriptors and memory mappings / partitions
  per_sealed      (anon per partition with 4 segments - with 1) / 3: what one sealed
                  segment adds to a partition's state

The "time" pytest-benchmark records here is the child's, not a measurement.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SEGMENT_BYTES = 16 * 1024
BATCH_VALUE = b"x" * 4000


def write_dir(path: str, partitions: int, segments: int) -> None:
    import storage
    config = storage.LogConfig(fsync=False, segment_bytes=SEGMENT_BYTES, epoch_flush="deferred")
    with storage.LogDir.open(path, config) as logdir:
        for p in range(partitions):
            log = logdir.partition("t", p)
            for _ in range(segments):
                log.append_as_leader([BATCH_VALUE], 0)
                if len(log.segments) < segments:
                    log.roll()


def _counts() -> dict:
    from benchlib import proc_status
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    return {"anon": proc_status().get("RssAnon", 0), "fds": len(os.listdir("/proc/self/fd")), "maps": maps}


def child(path: str) -> dict:
    sys.path.insert(0, HERE)
    import storage
    gc.collect()
    before = _counts()
    logdir = storage.LogDir.open(path, storage.LogConfig(fsync=False, segment_bytes=SEGMENT_BYTES))
    partitions = len(logdir.partitions())
    segments = sum(len(log.segments) for log in logdir.logs().values())
    gc.collect()
    after = _counts()
    logdir.close()
    return {"partitions": partitions, "segments": segments,
            "anon_bytes": (after["anon"] - before["anon"]) / partitions,
            "fds": (after["fds"] - before["fds"]) / partitions, "maps": (after["maps"] - before["maps"]) / partitions}


def run_child(path: str) -> dict:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), path], capture_output=True, text=True,
                          timeout=900, cwd=HERE)
    if proc.returncode:
        raise RuntimeError(f"child failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if "pytest" in sys.modules:
    import pytest

    def test_partition_memory(benchmark, sizes, fresh_dirs):
        partitions = 200 if sizes.quick else 10_000
        results = {}
        for segments in (1, 4):
            path = fresh_dirs.new(f"partitions-{segments}")
            write_dir(path, partitions, segments)
            results[segments] = run_child(path)
            fresh_dirs.discard(path)
            assert results[segments]["partitions"] == partitions
            assert results[segments]["segments"] == partitions * segments
        one, four = results[1], results[4]
        benchmark.group = "partition-memory"
        benchmark.pedantic(lambda: None, rounds=1, iterations=1)
        benchmark.extra_info.update(
            unit="memory", partitions=partitions, one_segment=one, four_segments=four,
            per_sealed_segment={k: (four[k] - one[k]) / 3 for k in ("anon_bytes", "fds", "maps")})
        _ = pytest


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1])))
