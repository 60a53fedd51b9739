"""Side by side with Apache Kafka's own storage classes (issue 18's table), in one run.

The JVM peer is `benchmarks/jvm/KafkaPeer.java` against kafka-clients 3.9.1 (the jars the
interop tests download: tests/interop/test_interop_jvm.py), compiled once and kept running in one JVM
for the whole session, warmed up (JIT) before any measured round; each of its runs is timed
inside the JVM with System.nanoTime and sent back over a pipe, so neither the start of the
JVM nor the pipe is counted.  Paired, alternating rounds (benchlib.paired: A B, then B A),
the ratio of each pair is t(peer) / t(ours) = throughput(ours) / throughput(peer).

Groups:
  jvm-append-paired  the session's 16 KiB batches (conftest.workload), fsync off, fresh file
                     per run, close timed:
      ours-follower    PartitionLog.append_as_follower per batch (CRC check in C, index)
      ours-batches64   PartitionLog.append_batches of 64 batches per call (follower rules)
      kafka            FileRecords.append per batch, each batch.ensureValid() first
      file.write       the ceiling; lmdb-writemap, a write transaction per batch
  jvm-build-paired   batches of 100-byte values, uncompressed:
      ours             storage.build_batch(values, base_offset=...)
      kafka            MemoryRecordsBuilder, one append(ts, null, value) per record
  jvm-read-paired    the session's big log (page cache), 1 MiB fetches, every batch CRC-checked:
      ours             PartitionLog.read(offset, 1 MiB) + storage.batch_columns(view) (one C
                       call validates the read), the next offset from its last column entry
      ours-iter        the same read with iter_batches(view) (a RecordBatch per batch)
      kafka            FileRecords.slice(position, 1 MiB), every batch loaded and ensureValid'd

Skips with its reason without java/javac 17+ or the jars.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench_append import FileWrite, Lmdb, OursFollower, Peer, _log_config, _State, timed_run
from benchlib import Contender, make_values, paired

import storage
from storage.core.records import iter_batches

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).resolve().parent / "jvm" / "KafkaPeer.java"
FETCH_BYTES = 1 << 20
BATCHES_PER_CALL = 64


class Jvm:
    """The KafkaPeer process: `run(command)` -> seconds the JVM measured."""

    def __init__(self, classpath: str):
        self.proc = subprocess.Popen(["java", "-Xms2g", "-Xmx4g", "-cp", classpath, "KafkaPeer"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        ready = self.proc.stdout.readline().split()
        if ready[:1] != ["ready"]:
            self.close()
            raise RuntimeError(f"KafkaPeer did not start: {ready}")
        self.version = ready[-1]

    def run(self, command: str) -> float:
        self.proc.stdin.write(command + "\n")
        answer = self.proc.stdout.readline().split(" ", 1)
        if answer[0] != "ns":
            raise RuntimeError(f"KafkaPeer: {command!r} -> {' '.join(answer).strip()}")
        return int(answer[1]) / 1e9

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture(scope="session")
def jvm(tmp_path_factory):
    sys.path.insert(0, str(ROOT))
    from tests.test_interop_jvm import jvm_classpath
    peer = Jvm(jvm_classpath(tmp_path_factory, SOURCE, "the JVM peer"))   # skips without a JDK 17+ or the jars
    yield peer
    peer.close()


def _warm(run, count: int = 5) -> None:
    """The JIT compiles the hot paths in the first runs: those are not measured."""
    for _ in range(count):
        run()


class OursBatches(OursFollower):
    name, label, role = "ours-batches64", "ours (append_batches, 64 per call)", "ours"
    setting = "LogConfig(segment_bytes=1<<30, fsync=False); append_batches(64 batches, as_leader=False)"

    def open(self, directory, wl):
        batches = wl.follower
        groups = [batches[i:i + BATCHES_PER_CALL] for i in range(0, len(batches), BATCHES_PER_CALL)]
        return _State(directory, storage.PartitionLog.open(directory, _log_config()), groups)

    def run(self, state):
        log = state.target
        append = log.append_batches
        for group in state.batches:
            append(group, as_leader=False)
        log.close()


def test_jvm_append_paired(benchmark, jvm, workload, sizes, fresh_dirs):
    wl = workload(16 * 1024)
    batches_file = os.path.join(fresh_dirs.new("jvm-input"), "batches")
    with open(batches_file, "wb") as f:
        for batch in wl.follower:
            f.write(batch)
    out_dir = fresh_dirs.new("jvm-append")

    def kafka() -> float:
        seconds = jvm.run(f"append {batches_file} {out_dir}/00000000000000000000.log")
        assert os.path.getsize(f"{out_dir}/00000000000000000000.log") == wl.total_bytes
        return seconds

    peers: list[Peer] = [OursFollower(), OursBatches(), FileWrite(), Lmdb(writemap=True)]
    contenders = [Contender(p.name, p.label, p.role, (lambda p=p: timed_run(p, wl, fresh_dirs)), p.setting)
                  for p in peers]
    contenders.append(Contender("kafka", f"Kafka FileRecords.append + ensureValid ({jvm.version})", "peer", kafka,
                                "one FileRecords.append per batch, batch.ensureValid() before it; close timed"))
    _warm(kafka)
    pairs = [("ours-follower", "kafka"), ("ours-follower", "file.write"), ("ours-batches64", "kafka"),
             ("ours-batches64", "file.write"), ("ours-batches64", "lmdb-writemap")]
    benchmark.group = "jvm-append-paired"
    result = benchmark.pedantic(paired, args=(contenders, pairs, sizes.paired_rounds),
                                kwargs={"amount": wl.total_bytes, "warmup": True}, rounds=1, iterations=1)
    benchmark.extra_info.update(size="16KiB", bytes=wl.total_bytes, batches=wl.batch_count, **result)


def test_jvm_build_paired(benchmark, jvm, sizes, fresh_dirs):
    values = make_values(sizes.build_records)
    value_file = os.path.join(fresh_dirs.new("jvm-values"), "value")
    with open(value_file, "wb") as f:
        f.write(values[0])
    batches, records = sizes.build_batches, len(values)

    def ours() -> float:
        build = storage.build_batch
        start = time.perf_counter()
        for i in range(batches):
            build(values, base_offset=i * records)
        return time.perf_counter() - start

    def kafka() -> float:
        return jvm.run(f"build {batches} {records} {value_file} none")

    _warm(kafka)
    contenders = [Contender("ours", "ours (build_batch)", "ours", ours, "storage.build_batch(values, base_offset=...)"),
                  Contender("kafka", f"Kafka MemoryRecordsBuilder ({jvm.version})", "peer", kafka,
                            "MemoryRecords.builder(heap buffer, NONE, CREATE_TIME, base) + append(ts, null, value)")]
    benchmark.group = "jvm-build-paired"
    result = benchmark.pedantic(paired, args=(contenders, [("ours", "kafka")], sizes.paired_rounds),
                                kwargs={"amount": batches * records, "unit": "records"}, rounds=1, iterations=1)
    benchmark.extra_info.update(size="build (none)", records=batches * records, value_bytes=len(values[0]),
                                **result)


def test_jvm_read_paired(benchmark, jvm, big_log, sizes):
    log_file = os.path.join(big_log["path"], "00000000000000000000.log")
    log = storage.PartitionLog.open(big_log["path"], big_log["config"])
    end = log.log_end_offset

    def ours() -> float:
        read, columns = log.read, storage.batch_columns
        start = time.perf_counter()
        offset = 0
        while offset < end:
            c = columns(read(offset, FETCH_BYTES))
            offset = c.last_offset[len(c) - 1] + 1
        return time.perf_counter() - start

    def ours_iter() -> float:
        read = log.read
        start = time.perf_counter()
        offset = 0
        while offset < end:
            for batch in iter_batches(read(offset, FETCH_BYTES)):
                offset = batch.last_offset + 1
        return time.perf_counter() - start

    def kafka() -> float:
        return jvm.run(f"read {log_file} {FETCH_BYTES}")

    _warm(kafka)
    contenders = [Contender("ours", "ours (read + batch_columns)", "ours", ours,
                            "PartitionLog.read(offset, 1 MiB) + batch_columns(view): every CRC in one C call"),
                  Contender("ours-iter", "ours (read + iter_batches)", "ours", ours_iter,
                            "PartitionLog.read(offset, 1 MiB) + iter_batches(view, verify=True)"),
                  Contender("kafka", f"Kafka FileRecords slice read ({jvm.version})", "peer", kafka,
                            "FileRecords.slice(position, 1 MiB).batches(), each ensureValid() (loads the batch)")]
    benchmark.group = "jvm-read-paired"
    try:
        result = benchmark.pedantic(paired, args=(contenders, [("ours", "kafka"), ("ours-iter", "kafka")],
                                                  sizes.paired_rounds),
                                    kwargs={"amount": big_log["bytes"]}, rounds=1, iterations=1)
    finally:
        log.close()
    benchmark.extra_info.update(size="16KiB", bytes=big_log["bytes"], batches=big_log["batches"], **result)
