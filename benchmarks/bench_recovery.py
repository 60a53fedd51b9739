"""Unclean-shutdown recovery of a 1 GiB log (docs/design.md "Performance targets": recovery scan -- CRC-validate
and rebuild indexes -- >= 50 % of the `crc32c` package's speed over the same bytes).

The log is the session's big log (conftest.big_log: 1 GiB of 16 KiB batches, one segment).
Contenders, alternated in pairs (A B, then B A), each over the same bytes:

  ours              PartitionLog.open(path, LogConfig(fsync=False), recovery_point=0): every
                    batch's CRC checked and both indexes rebuilt by one C scan
                    (plog_segment_recover), after the .index and .timeindex files were deleted
                    untimed (fresh index files every run); the log is mapped anew by the open,
                    so its page faults are part of the time.  Closing is not timed.
  crc32c            the `crc32c` package, crc32c.crc32c() of the whole .log through one warm
                    (already faulted) mmap: the package's speed, the design's reference
  crc32c-fresh-mmap the same through a new mmap made in the timed part (its page faults
                    included, like ours)
  plog_crc32c       the limit: lib.plog_crc32c(0, pointer, length) of the whole .log through
                    the warm mmap -- raw CRC-32C of the engine's C core, no parsing

Pairs: ours with each of the three.  Ratios are t(peer) / t(ours) = speed(ours) / speed(peer).
"""
from __future__ import annotations

import mmap
import os
import time

import crc32c
import pytest
from benchlib import Contender, paired

import storage
from storage.core._native import ffi, lib

SEGMENT_FILE = "00000000000000000000.log"


class RecoverySide:
    def __init__(self, big_log):
        self.info = big_log
        self.path = big_log["path"]
        self.config = big_log["config"]
        self.log_path = os.path.join(self.path, SEGMENT_FILE)
        self.bytes = os.path.getsize(self.log_path)
        assert self.bytes == big_log["bytes"]
        self._file = open(self.log_path, "rb")
        self.mm = mmap.mmap(self._file.fileno(), 0, prot=mmap.PROT_READ)
        self.expected_crc = crc32c.crc32c(self.mm)     # also faults the warm mapping in
        with ffi.from_buffer(self.mm) as pointer:
            assert lib.plog_crc32c(0, pointer, self.bytes) == self.expected_crc

    def close(self):
        self.mm.close()
        self._file.close()

    def ours(self) -> float:
        for name in os.listdir(self.path):
            if name.endswith((".index", ".timeindex")):
                os.unlink(os.path.join(self.path, name))
        start = time.perf_counter()
        log = storage.PartitionLog.open(self.path, self.config, recovery_point=0)
        elapsed = time.perf_counter() - start
        try:
            assert log.recovery_report == [], log.recovery_report
            assert log.log_end_offset == self.info["log_end_offset"] and log.size_bytes == self.bytes
        finally:
            log.close()
        return elapsed

    def crc32c_warm(self) -> float:
        start = time.perf_counter()
        value = crc32c.crc32c(self.mm)
        elapsed = time.perf_counter() - start
        assert value == self.expected_crc
        return elapsed

    def crc32c_fresh(self) -> float:
        with open(self.log_path, "rb") as f:
            start = time.perf_counter()
            mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            value = crc32c.crc32c(mm)
            elapsed = time.perf_counter() - start
            mm.close()
        assert value == self.expected_crc
        return elapsed

    def plog_crc32c(self) -> float:
        with ffi.from_buffer(self.mm) as pointer:
            start = time.perf_counter()
            value = lib.plog_crc32c(0, pointer, self.bytes)
            elapsed = time.perf_counter() - start
        assert value == self.expected_crc
        return elapsed


@pytest.fixture(scope="module")
def recovery_side(big_log):
    side = RecoverySide(big_log)
    yield side
    side.close()


def test_recovery_paired(benchmark, sizes, recovery_side):
    side = recovery_side
    contenders = [
        Contender("ours", "ours (recover: CRC + index rebuild)", "ours", side.ours,
                  "PartitionLog.open(path, LogConfig(fsync=False), recovery_point=0), index files deleted before"),
        Contender("crc32c", "crc32c package (warm mmap)", "peer", side.crc32c_warm,
                  f"crc32c.crc32c(mm) over the whole .log, one warm mmap (crc32c {crc32c.__version__ if hasattr(crc32c, '__version__') else ''})"),
        Contender("crc32c-fresh-mmap", "crc32c package (fresh mmap)", "peer", side.crc32c_fresh,
                  "mmap.mmap(fd, 0) + crc32c.crc32c(mm), both timed"),
        Contender("plog_crc32c", "raw CRC-32C, plog_crc32c (limit)", "limit", side.plog_crc32c,
                  f"lib.plog_crc32c(0, pointer, length) over the warm mmap (CRC path: {lib.plog_crc32c_path()})"),
    ]
    pairs = [("ours", "crc32c"), ("ours", "crc32c-fresh-mmap"), ("ours", "plog_crc32c")]
    benchmark.group = "recovery-paired"
    result = benchmark.pedantic(paired, args=(contenders, pairs, sizes.paired_rounds),
                                kwargs={"amount": side.bytes, "warmup": not sizes.quick}, rounds=1, iterations=1)
    benchmark.extra_info.update(size="recovery scan", bytes=side.bytes, batches=side.info["batches"],
                                batch_bytes=side.info["batch_bytes"], **result)
