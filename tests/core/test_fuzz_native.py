"""The sanitizer tier's fuzz run: random and mutated batches through every C entry point.

Meant for a build with PLOG_SANITIZE=address,undefined (and -fno-wrapv, see
csrc/build_plog.py), where any out-of-bounds access, use after free or signed overflow aborts
the run; `.ci/sanitize` builds one and runs this file.  In a normal build it still checks that
garbage gives errors, not crashes.  Seeded: FUZZ_SEED and FUZZ_ROUNDS choose the run.
"""
import os
import random

import pytest

from storage import LogConfig, PartitionLog, batch_columns, build_batch, iter_batches
from storage.core import errors
from storage.core._native import ffi, lib

pytestmark = pytest.mark.sanitize

SEED = int(os.environ.get("FUZZ_SEED", "1"))
ROUNDS = int(os.environ.get("FUZZ_ROUNDS", "3000"))


def _corpus() -> list[bytes]:
    out = [
        build_batch([(b"k1", b"v" * 30), (None, None), (b"k3", b"x", [("h", b"1"), ("n", None)])], base_offset=0),
        build_batch([b"a" * 100] * 3, base_offset=3, compression="gzip"),
        build_batch([b"z" * 50] * 2, base_offset=6, compression="zstd"),
        build_batch([b""], base_offset=2**40, partition_leader_epoch=2**31 - 1),
        build_batch([(b"k", b"v", [("x" * 300, b"y" * 300)])] * 5, base_offset=9),
    ]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for directory in (os.path.join(here, "data"),):
        for root, _dirs, names in os.walk(directory):
            for name in sorted(names):
                if name.endswith(".log") and len(out) < 40:
                    with open(os.path.join(root, name), "rb") as f:
                        data = f.read(1 << 16)
                    if data:
                        out.append(data)
    return out


def _mutate(rng: random.Random, data: bytes) -> bytearray:
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        if not data:
            break
        if kind < 0.6:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind < 0.75:      # a field to an extreme: lengths, counts, deltas, offsets
            position = rng.randrange(len(data))
            data[position:position + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff",
                                                       b"\x00\x00\x00\x00"])
        elif kind < 0.9:
            del data[rng.randrange(len(data)):]
        else:
            data += rng.randbytes(rng.randint(1, 64))
    return data


def _repair(data: bytearray) -> None:
    info = ffi.new("plog_batch_info *")
    pos = 0
    with ffi.from_buffer(data) as pointer:
        while pos < len(data):
            if lib.plog_batch_parse(pointer, len(data), pos, 0, info) or info.magic != 2:
                return
            lib.plog_batch_finish(pointer + pos, info.size_bytes, info)
            pos += info.size_bytes


def _through_every_entry_point(data: bytearray, tmp_path, n: int) -> None:
    length = len(data)
    info = ffi.new("plog_batch_info *")
    with ffi.from_buffer(data) as pointer:
        for position in range(0, min(length, 64)):
            if lib.plog_batch_parse(pointer, length, position, 0, info) == 0:
                lib.plog_batch_crc_ok(pointer + position, info)
        scan = ffi.new("plog_scan *")
        epochs, offsets = ffi.new("int32_t[]", 8), ffi.new("int64_t[]", 8)
        scan.epoch_capacity, scan.epochs, scan.epoch_offsets, scan.check_crc = 8, epochs, offsets, 1
        lib.plog_scan_buffer(pointer, length, scan, ffi.NULL)
        lib.plog_batches_span(pointer, length, 0, 1 << 20, -1)
        md, ep = ffi.new("int64_t *"), ffi.new("int64_t *")
        for start in {0, min(length, 61), min(length, 70)}:     # a records section from anywhere in the input
            lib.plog_records_check(pointer + start, length - start, 3, md, ep)
    leader = lib.PLOG_VALIDATE_ASSIGN_OFFSETS | lib.PLOG_VALIDATE_STAMP_EPOCH
    for flags in (lib.PLOG_VALIDATE_REQUIRE_FIRST, leader, leader | lib.PLOG_VALIDATE_CLIENT):
        copy = bytearray(data)
        v = ffi.new("plog_validate *")
        v.flags, v.next_offset, v.max_batch_bytes = flags, 0, 1 << 20
        with ffi.from_buffer(copy) as pointer:
            lib.plog_validate_chunk(pointer, len(copy), v)
    for crc in ("flag", "skip"):            # the bulk header scan (two passes: count, then fill)
        batch_columns(data, crc=crc, strict=False)
    try:
        for batch in iter_batches(bytes(data), verify=False):
            batch.is_valid()
            batch.records(max_decompressed_bytes=1 << 22)
    except errors.StorageError:
        pass
    if n % 10 == 0:              # the segment entry points: append, recover, find, read, truncate
        directory = tmp_path / f"p{n}" / "t-0"
        log = PartitionLog.open(directory, LogConfig(segment_bytes=4096, index_interval_bytes=64, fsync=False))
        with ffi.from_buffer(data) as pointer:      # where the first batch ends: pieces of whole batches
            first = lib.plog_batches_span(pointer, len(data), 0, 1, -1)
        try:
            for append in (log.append_as_follower, lambda chunk: log.append_as_leader(chunk, 1),
                           lambda chunk: log.append_batches([chunk[:len(chunk) // 2], chunk[len(chunk) // 2:]],
                                                            as_leader=False),
                           lambda chunk: log.append_batches([chunk[:first], chunk[first:]], as_leader=False)):
                try:
                    append(bytes(data))
                except errors.StorageError:
                    pass
            for offset in range(log.log_start_offset, min(log.log_end_offset, log.log_start_offset + 20)):
                log.read(offset, 100)
            if log.log_end_offset > log.log_start_offset:
                log.truncate_to(log.log_start_offset + (log.log_end_offset - log.log_start_offset) // 2)
        finally:
            log.close()
        with open(directory / f"{0:020d}.log", "ab") as f:
            f.write(bytes(data))
        try:
            PartitionLog.open(directory, LogConfig(segment_bytes=4096, index_interval_bytes=64, fsync=False),
                              recovery_point=0).close()
        except errors.StorageError:
            pass
        with open(directory / f"{0:020d}.index", "r+b") as f:      # the index check over damaged entries
            f.write(bytes(data[:64]))
        try:
            reopened = PartitionLog.open(directory, LogConfig(segment_bytes=4096, index_interval_bytes=64,
                                                              fsync=False), clean_shutdown=True)
            for segment in reopened.segments:
                segment.index_problem(thorough=True)
            reopened.close()
        except errors.StorageError:
            pass


def test_the_module_under_test_is_the_sanitized_one():
    """In the sanitizer tier (PLOG_EXPECT_SANITIZED=1) the tier proves nothing unless the
    imported core is the ASan + UBSan build."""
    if not os.environ.get("PLOG_EXPECT_SANITIZED"):
        pytest.skip("not the sanitizer tier")
    import subprocess

    import storage._plog

    linked = subprocess.run(["ldd", storage._plog.__file__], capture_output=True, text=True).stdout
    assert "libasan" in linked and "libubsan" in linked, (storage._plog.__file__, linked)


def test_random_and_mutated_batches_through_every_c_entry_point(tmp_path):
    rng = random.Random(SEED)
    corpus = _corpus()
    for n in range(ROUNDS):
        if rng.random() < 0.1:
            data = bytearray(rng.randbytes(rng.randint(0, 300)))
        else:
            data = _mutate(rng, rng.choice(corpus))
            if rng.random() < 0.5:
                _repair(data)      # so that corrupted records get past the CRC to the decoders
        _through_every_entry_point(data, tmp_path, n)
