"""`<base>.txnindex`: the aborted transactions whose abort marker lies in a segment (Kafka's
TransactionIndex), so that a read_committed reader can skip their records.

An entry is 34 bytes, big-endian: version int16 (0), producer id int64, first offset int64
(the transaction's first batch), last offset int64 (its abort marker), last stable offset int64
(the LSO when the marker was written).  Entries are appended in marker order.  The file exists
only once a segment holds an abort marker (Kafka creates it lazily too); it goes with its
segment, is cut with it (entries whose marker is at or above the cut), fsynced with it, and is
derived data: the load rebuilds the entries above the producer-state snapshot it replays from,
and a torn or damaged tail (an entry of another version, or first offset above last) is dropped.

All file operations go through the I/O seam (storage/core/io.py).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from ..core import errors
from ..core import io as _io

ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = ENTRY.size          # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    __slots__ = ("path", "sync", "_entries", "_dirty")     # one per segment, for as long as it is open

    def __init__(self, path: str, *, sync: bool = True, entries: list[AbortedTxn] | None = None):
        self.path = path
        self.sync = sync
        self._entries = entries      # read on first use when None
        self._dirty = False

    # ---- reading ----
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        seam = _io.current()
        if not seam.exists(self.path):
            return []
        data = seam.read_file(self.path)
        whole = len(data) - len(data) % ENTRY_BYTES
        out = []
        for i in range(0, whole, ENTRY_BYTES):
            version, pid, first, last, lso = ENTRY.unpack_from(data, i)
            if version != VERSION or first > last:
                whole = i           # garbage (torn sectors after a crash): the rest goes too
                break
            out.append(AbortedTxn(pid, first, last, lso))
        if whole != len(data):
            # A torn or damaged tail (a crash during an append): derived data, cut off here and
            # rebuilt from the log by the load's replay, which covers every recovered segment.
            self._write_size(whole)
        return out

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound_offset), and whether the search is
        complete (an entry's LSO reached the bound: no later segment can hold an overlap)."""
        found, complete = [], False
        for txn in self.entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                complete = True
                break
        return found, complete

    # ---- writing ----
    def append(self, txn: AbortedTxn) -> bool:
        """Add an entry; returns True when the file was created now (its directory entry is
        not durable until the dir is fsynced)."""
        entries = self.entries()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise errors.StorageError(f"aborted transaction markers must come in offset order: {txn.last_offset} "
                                      f"after {entries[-1].last_offset}", file=self.path, offset=txn.last_offset)
        seam = _io.current()
        created = not seam.exists(self.path)
        fd = seam.open(self.path, _io.O_READ | _io.O_WRITE | _io.O_CREATE)
        try:
            seam.pwrite(fd, ENTRY.pack(VERSION, *txn), len(entries) * ENTRY_BYTES)
        finally:
            seam.close(fd)
        entries.append(txn)
        self._dirty = True
        return created

    def truncate_to(self, offset: int, *, segment_base: int | None = None) -> None:
        """Drop the entries whose marker is at or above `offset` (Kafka's TransactionIndex.truncateTo);
        with `segment_base`, also those whose marker lies below the segment (Kafka's sanity check
        fails on them: a torn entry that reached the disk as zeros)."""
        entries = self.entries()
        low = -1 if segment_base is None else segment_base
        keep = [t for t in entries if low <= t.last_offset < offset]
        if len(keep) != len(entries):
            self._write_size(len(keep) * ENTRY_BYTES)
            self._entries = keep

    def _write_size(self, size: int) -> None:
        seam = _io.current()
        fd = seam.open(self.path, _io.O_READ | _io.O_WRITE)
        try:
            seam.ftruncate(fd, size)
        finally:
            seam.close(fd)
        self._dirty = True

    def flush(self) -> None:
        if not self._dirty:
            return
        seam = _io.current()
        if seam.exists(self.path):
            fd = seam.open(self.path, _io.O_READ | _io.O_WRITE)
            try:
                seam.fsync(fd, 0 if self.sync else _io.SYNC_NOOP)
            finally:
                seam.close(fd)
        self._dirty = False
