"""Peak memory of appending and of recovering a log, at two log sizes (256 MiB and 1 GiB in a
full run): the engine's memory must not grow with the log beyond its mmap'd indexes.

Each case runs in its own subprocess (this file run as a script), so that no peak of another
case, of pytest or of the prebuilt workloads leaks into it.  The child imports the engine,
prepares what it needs (a StampedBatches template: one 1 MiB bytearray reused for every
chunk, so the input costs no memory per byte), then resets the kernel's peak-RSS counter
(writing 5 to /proc/self/clear_refs) and records its baseline; while the case runs, a thread
samples /proc/self/status every 2 ms for the peak of RssAnon (anonymous memory: heap, Python
objects, C allocations), which has no kernel high-water mark of its own.  Reported (bytes):

  anon_growth    peak RssAnon - baseline RssAnon: what must not grow with the log size
  hwm_growth     VmHWM at the end (peak RSS since the reset) - baseline VmRSS: includes the
                 file pages of mappings once touched (a recovery maps and reads the whole
                 .log, so this grows by the log's size; the index mappings count here too)
  file_growth    RssFile + RssShmem at the end - at baseline (mapped file pages resident)

  append    a fresh PartitionLog (LogConfig(fsync=False), 1 GiB segments), append_as_follower
            of 1 MiB chunks of 16 KiB batches up to the size, then close
  recover   PartitionLog.open(the log the append case wrote, recovery_point=0): CRC check
            and index rebuild of every batch, then close

The "time" pytest-benchmark records for these cases is the subprocess's, not a measurement.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- the child -------------------------------------------------------------------------------

def _status() -> dict:
    from benchlib import proc_status
    return proc_status()


class _Sampler(threading.Thread):
    def __init__(self, interval: float = 0.002):
        super().__init__(daemon=True)
        self.interval = interval
        self.peak_anon = 0
        self.samples = 0
        self._stop_event = threading.Event()

    def sample(self):
        anon = _status().get("RssAnon", 0)
        self.samples += 1
        if anon > self.peak_anon:
            self.peak_anon = anon

    def run(self):
        while not self._stop_event.is_set():
            self.sample()
            time.sleep(self.interval)

    def stop(self):
        self._stop_event.set()
        self.join()
        self.sample()


def child(mode: str, path: str, size: int) -> dict:
    sys.path.insert(0, HERE)
    from benchlib import StampedBatches

    import storage

    config = storage.LogConfig(fsync=False)
    stamped = StampedBatches()
    count = stamped.batches_for(size)
    sampler = _Sampler()
    sampler.start()
    time.sleep(0.01)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")            # reset VmHWM to the current RSS
        hwm_reset = True
    except OSError:
        hwm_reset = False
    base = _status()
    sampler.peak_anon = base.get("RssAnon", 0)
    start = time.perf_counter()
    if mode == "append":
        log = storage.PartitionLog.open(path, config)
        stamped.append_to(log, count)
        leo = log.log_end_offset
        log.close()
    elif mode == "recover":
        log = storage.PartitionLog.open(path, config, recovery_point=0)
        assert log.recovery_report == [], log.recovery_report
        leo = log.log_end_offset
        end_open = _status()
        log.close()
    else:
        raise ValueError(mode)
    elapsed = time.perf_counter() - start
    sampler.stop()
    end = _status()
    if mode == "recover":       # the mapping is gone after close; its pages counted while open
        end = {**end, **{k: max(end.get(k, 0), end_open.get(k, 0)) for k in ("RssFile", "RssShmem")}}
    assert leo == count * stamped.records_per_batch
    file_keys = ("RssFile", "RssShmem")
    return {
        "mode": mode, "log_bytes": count * stamped.batch_size, "seconds": elapsed,
        "baseline": base, "end": end, "hwm_reset": hwm_reset, "samples": sampler.samples,
        "anon_growth": max(0, sampler.peak_anon - base.get("RssAnon", 0)),
        "hwm_growth": max(0, end.get("VmHWM", 0) - base.get("VmRSS", 0)),
        "file_growth": max(0, sum(end.get(k, 0) for k in file_keys) - sum(base.get(k, 0) for k in file_keys)),
        "peak_anon": sampler.peak_anon,
    }


# ---- the cases -------------------------------------------------------------------------------

def run_child(mode: str, path: str, size: int) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), mode, path, str(size)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if out.returncode != 0:
        raise AssertionError(f"memory child {mode} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


try:
    import pytest
except ImportError:             # the child does not need it
    pytest = None

if pytest is not None:
    @pytest.fixture(scope="module")
    def memory_logs(fresh_dirs):
        """Log dirs written by the append cases, by size, for the recover cases to reuse."""
        logs: dict[int, str] = {}
        yield logs
        for path in logs.values():
            fresh_dirs.discard(os.path.dirname(path))

    @pytest.mark.parametrize("mode", ["append", "recover"])
    def test_memory(benchmark, sizes, fresh_dirs, memory_logs, mode, memory_log_bytes):
        size = memory_log_bytes
        if mode == "append" or size not in memory_logs:
            if mode == "recover":       # run alone (-k): write the log first, in its own child
                path = os.path.join(fresh_dirs.new("memory"), "t-0")
                run_child("append", path, size)
                memory_logs[size] = path
        results = []

        def setup():
            if mode == "append":
                old = memory_logs.pop(size, None)
                if old:
                    fresh_dirs.discard(os.path.dirname(old))
                memory_logs[size] = os.path.join(fresh_dirs.new("memory"), "t-0")
            return (), {}

        def case():
            results.append(run_child(mode, memory_logs[size], size))

        benchmark.group = "memory"
        benchmark.pedantic(case, setup=setup, rounds=1, iterations=1)
        result = results[-1]
        benchmark.extra_info.update(label=f"{mode} {result['log_bytes'] >> 20} MiB", role="ours", unit="memory",
                                    **result)


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
