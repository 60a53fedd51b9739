"""What the producer state keeps per producer id and the file it is kept in: a
`ProducerStateEntry` (epoch, the metadata of its last five batches, the coordinator epoch of its
last marker, the first offset of its open transaction), the sequence arithmetic its checks use,
and the snapshot file format (storage/log/producer.py is the state machine over these entries).

Snapshots: `<offset, 20 digits>.snapshot` in the partition dir, Kafka's format version 1
(ProducerSnapshot.json): version int16, CRC-32C uint32 of everything after it, then an int32
count of 46-byte entries (producer id int64, epoch int16, last sequence int32, last offset
int64, offset delta int32, timestamp int64, coordinator epoch int32, current transaction first
offset int64, -1 for none).  A snapshot at offset N holds the state of the batches below N;
only each producer's last batch is kept in it.  Written tmp -> fsync -> rename -> fsync(dir)
through the I/O seam (Kafka writes in place and flushes later; a torn snapshot is caught by
its CRC either way, ours is never torn).
"""
from __future__ import annotations

import struct
from collections import deque
from typing import NamedTuple

from ..core import errors
from ..core import io as _io
from ..core._native import ffi, lib
from ..core.files import INT32_MAX, SNAPSHOT_SUFFIX, segment_base, segment_file

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")           # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")       # 46 bytes, ProducerSnapshot.json's field order
_CRC_START = 6                            # the CRC covers the bytes after itself


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap from 2^31-1 to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


_new_batch_metadata = tuple.__new__      # BatchMetadata without NamedTuple's argument handling


class BatchMetadata(NamedTuple):
    """One of a producer's last batches (Kafka's BatchMetadata)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """A producer's state (Kafka's ProducerStateEntry)."""

    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batch_metadata")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH, coordinator_epoch: int = -1,
                 last_timestamp: int = NO_TIMESTAMP, current_txn_first_offset: int | None = None,
                 batch_metadata=()):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batch_metadata: deque[BatchMetadata] = deque(batch_metadata, maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_sequence(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_sequence(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def copy(self, *, with_batches: bool = True) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp,
                                  self.current_txn_first_offset, self.batch_metadata if with_batches else ())

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        if self.producer_epoch == producer_epoch:
            return False
        self.batch_metadata.clear()
        self.producer_epoch = producer_epoch
        return True

    def add_batch(self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update_from(self, newer: "ProducerStateEntry") -> None:
        """Take over what an append changed (Kafka's ProducerStateEntry.update)."""
        self.maybe_update_producer_epoch(newer.producer_epoch)
        self.batch_metadata.extend(newer.batch_metadata)
        self.coordinator_epoch = newer.coordinator_epoch
        self.current_txn_first_offset = newer.current_txn_first_offset
        self.last_timestamp = newer.last_timestamp

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batch_metadata:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def as_dict(self) -> dict:
        return {"producer_epoch": self.producer_epoch, "last_sequence": self.last_sequence,
                "last_offset": self.last_offset, "last_timestamp": self.last_timestamp,
                "coordinator_epoch": self.coordinator_epoch,
                "current_txn_first_offset": self.current_txn_first_offset}

    def __eq__(self, other) -> bool:
        return isinstance(other, ProducerStateEntry) and all(
            getattr(self, f) == getattr(other, f) for f in self.__slots__[:-1]) and \
            list(self.batch_metadata) == list(other.batch_metadata)

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producer_id={self.producer_id}, producer_epoch={self.producer_epoch}, "
                f"coordinator_epoch={self.coordinator_epoch}, last_timestamp={self.last_timestamp}, "
                f"current_txn_first_offset={self.current_txn_first_offset}, "
                f"batch_metadata={list(self.batch_metadata)})")


# ---- snapshots ----------------------------------------------------------------------------

def snapshot_path(directory: str, offset: int) -> str:
    return segment_file(directory, offset, SNAPSHOT_SUFFIX)


def snapshot_offset(name: str) -> int | None:
    """The offset a snapshot file is named by, None for any other name."""
    return segment_base(name, SNAPSHOT_SUFFIX)


def encode_snapshot(entries) -> bytes:
    body = bytearray(_HEADER.size + _ENTRY.size * len(entries))
    struct.pack_into(">i", body, _CRC_START, len(entries))
    for i, e in enumerate(entries):
        _ENTRY.pack_into(body, _HEADER.size + i * _ENTRY.size, e.producer_id, e.producer_epoch, e.last_sequence,
                         e.last_offset, e.last_offset_delta, e.last_timestamp, e.coordinator_epoch,
                         -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
    struct.pack_into(">h", body, 0, SNAPSHOT_VERSION)
    struct.pack_into(">I", body, 2, _crc32c(memoryview(body)[_CRC_START:]))
    return bytes(body)


def _crc32c(view) -> int:
    return lib.plog_crc32c(0, ffi.from_buffer(view), len(view)) if len(view) else 0


def decode_snapshot(data: bytes, *, file=None) -> list[ProducerStateEntry]:
    """Entries of a snapshot file's bytes; CorruptSnapshotError names what is wrong."""
    def corrupt(reason: str, position: int | None = None):
        return errors.CorruptSnapshotError(f"producer snapshot: {reason}", file=file, position=position)

    if len(data) < _HEADER.size:
        raise corrupt(f"{len(data)} bytes, shorter than its {_HEADER.size}-byte header")
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise corrupt(f"unknown version {version}", 0)
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise corrupt(f"{len(data)} bytes do not hold the {count} entries it announces", 6)
    computed = _crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise corrupt(f"CRC mismatch (stored 0x{crc:08x}, computed 0x{computed:08x})", 2)
    entries = []
    for pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn_first in \
            _ENTRY.iter_unpack(memoryview(data)[_HEADER.size:]):
        batches = (BatchMetadata(last_seq, last_offset, delta, timestamp),) if last_offset >= 0 else ()
        entries.append(ProducerStateEntry(pid, epoch, coordinator_epoch, timestamp,
                                          txn_first if txn_first >= 0 else None, batches))
    return entries


def read_snapshot(path) -> list[ProducerStateEntry]:
    return decode_snapshot(_io.current().read_file(path), file=path)
