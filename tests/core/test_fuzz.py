"""Garbage in, a StorageError out -- never a crash of the interpreter.

Mutated batches go through iteration, record decoding (with the CRC repaired so the C record
decoder sees the garbage) and segment recovery.
"""
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import LogConfig, PartitionLog, build_batch, iter_batches
from storage.core import errors
from storage.core._native import ffi, lib

BASE = b"".join([
    build_batch([(b"k1", b"v" * 30), (None, None), (b"k3", b"x", [("h", b"1"), ("n", None)])], base_offset=0),
    build_batch([b"a" * 100] * 3, base_offset=3, compression="gzip"),
    build_batch([b"z" * 50] * 2, base_offset=6, compression="zstd"),
])

mutations = st.lists(st.tuples(st.integers(0, len(BASE) - 1), st.integers(0, 255)), min_size=1, max_size=8)


def repair_crcs(data: bytearray) -> None:
    """Recompute each parseable v2 batch's CRC so corrupted records reach the decoder."""
    info = ffi.new("plog_batch_info *")
    pos = 0
    while pos < len(data):
        pointer = ffi.from_buffer(data)
        rc = lib.plog_batch_parse(pointer, len(data), pos, 0, info)
        if rc or info.magic != 2:
            return
        lib.plog_batch_finish(pointer + pos, info.size_bytes, info)
        pos += info.size_bytes


def decode_everything(data) -> None:
    try:
        for batch in iter_batches(data, verify=False):
            batch.is_valid()
            batch.records()
    except errors.StorageError:
        pass


@settings(max_examples=int(os.environ.get('FUZZ_EXAMPLES', 300)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=mutations, repair=st.booleans(), cut=st.integers(0, len(BASE)))
def test_mutated_batches_raise_storage_errors_only(mutations, repair, cut):
    data = bytearray(BASE)
    for position, value in mutations:
        data[position] = value
    if repair:
        repair_crcs(data)
    decode_everything(bytes(data[:cut]))
    decode_everything(bytes(data))


@settings(max_examples=int(os.environ.get('FUZZ_EXAMPLES', 60)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=mutations, tail=st.binary(max_size=200))
def test_recovery_of_garbage_segments(tmp_path_factory, mutations, tail):
    directory = tmp_path_factory.mktemp("fuzz") / "t-0"
    os.makedirs(directory)
    data = bytearray(BASE)
    for position, value in mutations:
        data[position] = value
    with open(directory / f"{0:020d}.log", "wb") as f:
        f.write(bytes(data) + tail)
    log = PartitionLog.open(directory, LogConfig(fsync=False))
    try:
        # Whatever survived recovery is a valid prefix: every batch checks out.
        for batch in log.batches():
            assert batch.is_valid()
        log.append_as_leader([b"after recovery"], 0)
    finally:
        log.close()
