"""Idempotent and transactional producer state: Kafka's ProducerStateManager, in our words.

Per producer id the log keeps an entry: the producer epoch, the metadata of its last five
batches (sequence range, last offset, timestamp), the last timestamp, the coordinator epoch of
the last transaction marker and the first offset of its open transaction.  A leader uses it to
refuse what Kafka refuses and to answer a retried batch with the offsets it got the first
time; a follower and the loader apply batches without validation (Kafka's REPLICATION origin).

Rules (ProducerAppendInfo, ProducerStateEntry):
  - an older producer epoch is refused (InvalidProducerEpochError, 47) except on replication;
  - a new epoch must start at sequence 0 unless the producer had no epoch yet; within an epoch
    the first sequence must follow the last one (wrapping from 2^31-1 to 0), else
    OutOfOrderSequenceError (45); a producer whose entry holds no batch (only a marker, or
    all its data retained away) may resume at any sequence in the same epoch;
  - a batch whose epoch and sequence range equal one of the last five is a duplicate: the
    caller answers it with that batch's offsets and writes nothing;
  - a transactional batch opens a transaction at its first offset; a non-transactional batch
    while one is open is InvalidTxnStateError (48); an end-transaction marker closes it
    (a marker from an older coordinator epoch: TransactionCoordinatorFencedError, 52); a
    marker with a newer producer epoch bumps the producer's epoch and drops its batches.

The entries and their snapshot files (`<offset>.snapshot`, Kafka's format) are
storage/log/producer_entry.py's; the manager here decides when a snapshot is taken, loaded, deleted.
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import NamedTuple

from ..core import errors
from ..core import io as _io
from ..core._native import ffi, lib
from ..core.files import INT32_MAX
from .producer_entry import (  # noqa: F401 (the state's names, as they were here)
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    NUM_BATCHES_TO_RETAIN,
    SNAPSHOT_SUFFIX,
    SNAPSHOT_VERSION,
    BatchMetadata,
    ProducerStateEntry,
    _new_batch_metadata,
    decode_snapshot,
    decrement_sequence,
    encode_snapshot,
    increment_sequence,
    read_snapshot,
    snapshot_offset,
    snapshot_path,
)

# Where an append comes from (Kafka's AppendOrigin): what is validated.
CLIENT, COORDINATOR, REPLICATION = "client", "coordinator", "replication"

ABORT, COMMIT = 0, 1                      # ControlRecordType of an end-transaction marker


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int          # the marker's offset
    is_aborted: bool


@dataclass
class TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None


class ProducerAppendInfo:
    """The changes one append makes to one producer's entry, validated as it goes (Kafka's
    ProducerAppendInfo).  Nothing changes in the manager until `ProducerStateManager.update`."""

    def __init__(self, where: str, producer_id: int, current: ProducerStateEntry, origin: str):
        self.where = where
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.updated = current.copy(with_batches=False)
        self.started_transactions: list[TxnMetadata] = []

    def _fail(self, cls, message: str, offset: int):
        raise cls(f"producer {self.producer_id}: {message}", file=self.where, offset=offset)

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        if producer_epoch < self.updated.producer_epoch and self.origin != REPLICATION:
            self._fail(errors.InvalidProducerEpochError, f"epoch {producer_epoch} is older than the current "
                       f"epoch {self.updated.producer_epoch}", offset)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        if producer_epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                self._fail(errors.OutOfOrderSequenceError, f"a new epoch {producer_epoch} must start at sequence "
                           f"0, not {first_seq} (current epoch {self.updated.producer_epoch})", offset)
            return
        if not self.updated.is_empty:
            last = self.updated.last_sequence
        elif producer_epoch == self.current.producer_epoch:
            last = self.current.last_sequence
        else:
            last = NO_SEQUENCE
        # No current epoch (the producer's data was all retained or deleted away): any sequence.
        in_sequence = first_seq == last + 1 or (first_seq == 0 and last == INT32_MAX)
        if self.current.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence:
            self._fail(errors.OutOfOrderSequenceError, f"sequence {first_seq} does not follow the last "
                       f"sequence {last} (epoch {producer_epoch})", offset)

    def append_data_batch(self, producer_epoch: int, first_seq: int, last_seq: int, last_timestamp: int,
                          first_offset: int, last_offset: int, is_transactional: bool) -> None:
        self._check_producer_epoch(producer_epoch, first_offset)
        if self.origin == CLIENT:
            self._check_sequence(producer_epoch, first_seq, first_offset)
        self.updated.add_batch(producer_epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        open_txn = self.updated.current_txn_first_offset
        if open_txn is not None and not is_transactional and self.origin != REPLICATION:
            # (Kafka throws on replication too, which would wedge a follower on data its
            # leader accepted; a follower and the loader apply what the leader wrote.)
            self._fail(errors.InvalidTxnStateError, "a non-transactional batch while the transaction begun at "
                       f"offset {open_txn} is open", first_offset)
        if open_txn is None and is_transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_transactions.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(self, marker: int, coordinator_epoch: int, producer_epoch: int, offset: int,
                              timestamp: int) -> CompletedTxn | None:
        self._check_producer_epoch(producer_epoch, offset)
        if self.updated.coordinator_epoch > coordinator_epoch and self.origin != REPLICATION:
            self._fail(errors.TransactionCoordinatorFencedError, f"marker from coordinator epoch "
                       f"{coordinator_epoch}, older than {self.updated.coordinator_epoch}", offset)
        first = self.updated.current_txn_first_offset
        completed = None if first is None else CompletedTxn(self.producer_id, first, offset, marker == ABORT)
        self.updated.maybe_update_producer_epoch(producer_epoch)   # a new epoch drops the batches
        self.updated.coordinator_epoch = coordinator_epoch
        self.updated.current_txn_first_offset = None
        self.updated.last_timestamp = timestamp
        return completed


# ---- the manager ----------------------------------------------------------------------------

class ProducerStateManager:
    """Every producer of one partition, its open and unreplicated transactions, and the
    partition's snapshot files (Kafka's ProducerStateManager)."""

    def __init__(self, directory: str, producer_id_expiration_ms: int = 86_400_000, *, sync: bool = True,
                 list_snapshots: bool = True):
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.sync = sync
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing_txns: dict[int, TxnMetadata] = {}        # by first offset
        self.unreplicated_txns: dict[int, TxnMetadata] = {}   # completed, marker above the HW
        # Snapshot offsets, ascending (a log's loader hands over its own listing: use_listing).
        self.snapshots: list[int] = self._list_snapshots() if list_snapshots else []
        self.last_map_offset = 0
        self.last_snap_offset = 0
        # Bumped by every change to the producers (the leader's C-side check, producer_check.py,
        # empties its expectations when it sees a change it did not make itself).
        self.changes = 0

    # ---- state ----
    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return self.producers

    @property
    def map_end_offset(self) -> int:
        return self.last_map_offset

    def is_empty(self) -> bool:
        return not self.producers and not self.unreplicated_txns

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare_update(self, producer_id: int, origin: str) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(self.directory, producer_id, current, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        if info.producer_id == NO_PRODUCER_ID:
            raise ValueError("no producer state for producer id -1")
        self.changes += 1
        entry = self.producers.get(info.producer_id)
        if entry is None:
            self.producers[info.producer_id] = info.updated
        else:
            entry.update_from(info.updated)
        for txn in info.started_transactions:
            self.ongoing_txns[txn.first_offset] = txn

    def update_map_end_offset(self, offset: int) -> None:
        self.last_map_offset = offset

    # ---- transactions ----
    def first_undecided_offset(self) -> int | None:
        return min(self.ongoing_txns) if self.ongoing_txns else None

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is open, or complete with its
        marker not yet below the high watermark."""
        candidates = [*self.ongoing_txns, *self.unreplicated_txns]
        return min(candidates) if candidates else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO to record with a completed transaction in the transaction index."""
        others = [first for first, txn in self.ongoing_txns.items() if txn.producer_id != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self.ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(f"{self.directory}: completing a transaction that was not started: {completed}")
        txn.last_offset = completed.last_offset
        self.unreplicated_txns[completed.first_offset] = txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        if self.unreplicated_txns:      # at every high watermark move: nothing to scan is the common case
            self._remove_unreplicated_below(high_watermark)

    def _remove_unreplicated_below(self, offset: int) -> None:
        for first in [f for f, t in self.unreplicated_txns.items() if t.last_offset < offset]:
            del self.unreplicated_txns[first]

    # ---- expiry, log start, truncation ----
    def _expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return entry.current_txn_first_offset is None and \
            now_ms - entry.last_timestamp >= self.producer_id_expiration_ms

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer_id_expiration_ms (never one with an open
        transaction).  Returns how many went."""
        gone = [pid for pid, entry in self.producers.items() if self._expired(entry, now_ms)]
        for pid in gone:
            del self.producers[pid]
        self.changes += 1
        return len(gone)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated_below(log_start_offset)
        self.last_map_offset = max(self.last_map_offset, log_start_offset)
        self.last_snap_offset = self.snapshots[-1] if self.snapshots else log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.changes += 1
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        self._delete_snapshots(list(self.snapshots))
        self.last_snap_offset = 0
        self.last_map_offset = offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int, *,
                            at_most: int | None = None) -> None:
        """Drop snapshots outside (log start, log end]; when the state no longer ends at
        `log_end_offset` (or `at_most` asks for an older start), reload it from the newest
        snapshot left at or below `at_most` (the caller replays the batches from
        `map_end_offset` up to the log end)."""
        self._delete_snapshots([s for s in self.snapshots if s > log_end_offset or s <= log_start_offset])
        if log_end_offset != self.last_map_offset or (at_most is not None and at_most < self.last_map_offset):
            self.changes += 1
            self.producers.clear()
            self.ongoing_txns.clear()
            self.unreplicated_txns.clear()
            self._load_latest_snapshot(log_start_offset, now_ms, log_end_offset if at_most is None else at_most)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _load_latest_snapshot(self, log_start_offset: int, now_ms: int, at_most: int) -> None:
        while True:
            usable = [s for s in self.snapshots if s <= at_most]
            if not usable:
                break
            offset = usable[-1]
            try:
                entries = read_snapshot(snapshot_path(self.directory, offset))
            except errors.CorruptSnapshotError:
                self._delete_snapshot(offset)   # Kafka's rule: a corrupt snapshot goes, try the one before
                continue
            for entry in entries:
                if not self._expired(entry, now_ms):
                    self.load_producer_entry(entry)
            self.last_snap_offset = self.last_map_offset = offset
            return
        self.last_snap_offset = self.last_map_offset = log_start_offset

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        self.changes += 1
        self.producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            first = entry.current_txn_first_offset
            self.ongoing_txns[first] = TxnMetadata(entry.producer_id, first)

    # ---- snapshot files ----
    def use_listing(self, names) -> None:
        """The snapshot files among the names of a fresh listing of the dir."""
        self.snapshots = sorted(o for o in map(snapshot_offset, (n for n in names if n.endswith(SNAPSHOT_SUFFIX)))
                                if o is not None)

    def _list_snapshots(self) -> list[int]:
        seam = _io.current()
        if not seam.exists(self.directory):
            return []
        return sorted(o for o in (snapshot_offset(n) for n in seam.listdir(self.directory)) if o is not None)

    def delete_snapshot(self, offset: int) -> None:
        """Remove the snapshot at `offset`, if there is one."""
        self._delete_snapshot(offset)

    def _delete_snapshot(self, offset: int) -> None:
        i = bisect.bisect_left(self.snapshots, offset)
        if i < len(self.snapshots) and self.snapshots[i] == offset:
            del self.snapshots[i]
        path = snapshot_path(self.directory, offset)
        seam = _io.current()
        if seam.exists(path):
            seam.unlink(path)

    def _delete_snapshots(self, offsets: list[int]) -> None:
        """Delete snapshots durably (the dir is fsynced): a snapshot above a truncation point
        that came back after a power loss would describe batches the log no longer has."""
        for offset in offsets:
            self._delete_snapshot(offset)
        if offsets:
            _io.current().fsync_dir(self.directory, 0 if self.sync else _io.SYNC_NOOP)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self.snapshots[-1] if self.snapshots else None

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return self.snapshots[0] if self.snapshots else None

    def take_snapshot(self, *, sync: bool | None = None) -> str | None:
        """Write `<map end offset>.snapshot` unless the newest snapshot is already there."""
        if self.last_map_offset <= self.last_snap_offset:
            return None
        offset = self.last_map_offset
        path = snapshot_path(self.directory, offset)
        data = encode_snapshot(sorted(self.producers.values(), key=lambda e: e.producer_id))
        _io.current().write_file_atomic(path, data, sync=self.sync if sync is None else sync)
        if offset not in self.snapshots:
            bisect.insort(self.snapshots, offset)
        self.last_snap_offset = offset
        return path

    def delete_snapshots_before(self, offset: int) -> None:
        self._delete_snapshots([s for s in self.snapshots if s < offset])

    def remove_stray_snapshots(self, segment_bases) -> None:
        """Delete snapshots not at a segment's base offset, except the newest stray one when
        it lies above every segment base (the one a clean shutdown wrote at the log end)."""
        bases = set(segment_bases)
        strays = [s for s in self.snapshots if s not in bases]
        keep = strays[-1] if strays and (not bases or strays[-1] > max(bases)) else None
        self._delete_snapshots([snap for snap in strays if snap != keep])


# ---- the log's side: which batches carry a producer, what an append changes ----------------

_V2_HEADER = struct.Struct(">qiiBIhiqqqhii")     # the 61-byte v2 batch header, records count last
_TRANSACTIONAL, _CONTROL = 0x10, 0x20


class ProducerBatch(NamedTuple):
    """The producer fields of one v2 batch of a chunk; `relative` is the count of offsets the
    batches before it take (a leader's assigned base offset is log end + relative)."""

    position: int
    base_offset: int
    relative: int
    last_offset_delta: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool


def producer_batches(view) -> list[ProducerBatch]:
    """The batches of a chunk of whole v2 batches that carry a producer id (header fields only;
    the C append has checked sizes and CRCs, or checks them before anything is written)."""
    out = []
    pos, n, relative = 0, len(view), 0
    while pos + _V2_HEADER.size <= n:
        base, length, _ple, magic, _crc, attributes, delta, _base_ts, max_ts, pid, epoch, sequence, _count = \
            _V2_HEADER.unpack_from(view, pos)
        if length < _V2_HEADER.size - 12 or pos + 12 + length > n:
            break           # not a whole batch: the C append refuses the chunk for it
        if magic >= 2 and pid >= 0:
            out.append(ProducerBatch(pos, base, relative, delta, max_ts, pid, epoch, sequence,
                                     bool(attributes & _TRANSACTIONAL), bool(attributes & _CONTROL)))
        relative += delta + 1
        pos += 12 + length
    return out


def end_txn_marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                         timestamp: int) -> bytes:
    """Kafka's end-transaction marker: a transactional control batch of one record whose key is
    (version 0, COMMIT or ABORT) and value (version 0, coordinator epoch) (EndTransactionMarker)."""
    from ..core.records import build_batch

    key = struct.pack(">hh", 0, COMMIT if commit else ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch([(key, value)], producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=NO_SEQUENCE, is_transactional=True, is_control=True, base_timestamp=timestamp)


def end_txn_marker(view, batch: ProducerBatch) -> tuple[int, int] | None:
    """(ABORT or COMMIT, coordinator epoch) of a control batch's first record; None for an
    empty control batch or another control type."""
    from ..core.records import iter_batches

    length = struct.unpack_from(">i", view, batch.position + 8)[0]
    try:
        [whole] = list(iter_batches(memoryview(view)[batch.position:batch.position + 12 + length], verify=False))
        records = whole.records()
    except (errors.StorageError, ValueError):
        return None         # a control batch whose record does not parse is no marker
    if not records or records[0].key is None or len(records[0].key) < 4 or records[0].value is None \
            or len(records[0].value) < 6:
        return None
    _version, kind = struct.unpack_from(">hh", records[0].key, 0)
    if kind not in (ABORT, COMMIT):
        return None
    return kind, struct.unpack_from(">i", records[0].value, 2)[0]


class ProducerPlan(NamedTuple):
    infos: dict            # producer id -> ProducerAppendInfo
    completed: list        # CompletedTxn, in log order
    duplicate: BatchMetadata | None


def plan_append(manager: ProducerStateManager, view, batches: list[ProducerBatch], *, log_end_offset: int | None,
                origin: str) -> ProducerPlan:
    """Kafka's analyzeAndValidateProducerState: the changes of an append, validated for its
    origin, before anything is written.  log_end_offset: a leader's (offsets are assigned from
    it); None keeps the batches' own offsets (follower, loader).  A client batch equal to one
    of the producer's last five makes the whole append a duplicate (Kafka answers the first)."""
    infos: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    for b in batches:
        first = b.base_offset if log_end_offset is None else log_end_offset + b.relative
        last_seq = NO_SEQUENCE if b.base_sequence == NO_SEQUENCE else \
            increment_sequence(b.base_sequence, b.last_offset_delta)
        if origin == CLIENT:
            entry = manager.last_entry(b.producer_id)
            duplicate = entry.find_duplicate(b.producer_epoch, b.base_sequence, last_seq) if entry else None
            if duplicate is not None:
                return ProducerPlan({}, [], duplicate)
        info = infos.get(b.producer_id)
        if info is None:
            info = infos[b.producer_id] = manager.prepare_update(b.producer_id, origin)
        if b.is_control:
            marker = end_txn_marker(view, b)
            if marker is not None:
                done = info.append_end_txn_marker(marker[0], marker[1], b.producer_epoch, first, b.max_timestamp)
                if done is not None:
                    completed.append(done)
        else:
            info.append_data_batch(b.producer_epoch, b.base_sequence, last_seq, b.max_timestamp, first,
                                   first + b.last_offset_delta, b.is_transactional)
    return ProducerPlan(infos, completed, None)


_NO_PRODUCER = b"\xff" * 8          # producer id -1, at header position 43


# Header bytes 8..57 in one read: length, magic, attributes, last offset delta, base and max
# timestamps, producer id, producer epoch, base sequence.
_HEAD = struct.Struct(">i4xB4xhiqqqhi")
_FAST_PATH = True                       # tests turn it off to compare with the general path


def plan_leader_chunk(manager: ProducerStateManager, buf, log_end_offset: int, origin: str,
                      max_batch_bytes: int):
    """The producer-state changes of a leader's chunk, validated before anything is written;
    None when no batch carries a producer id (one header read for a one-batch chunk), or when
    the chunk itself is unsound: Kafka checks the batches (sizes, CRCs) before the producer
    state, so the C append then refuses it with that error.

    A client's next batch in its producer's sequence (one batch, same epoch, not
    transactional, first sequence = last + 1, so no duplicate of the last five, no wrap) is
    planned as a bare tuple (entry, last sequence, delta, max timestamp): the general path
    would add exactly one BatchMetadata, and `commit_append` does only that."""
    n = len(buf)
    if n >= _V2_HEADER.size:
        length, magic, attributes, delta, _base_ts, max_ts, pid, epoch, sequence = _HEAD.unpack_from(buf, 8)
        if length + 12 == n:
            if pid < 0:
                return None
            if _FAST_PATH and magic == 2 and not attributes & (_TRANSACTIONAL | _CONTROL) and origin == CLIENT:
                entry = manager.producers.get(pid)
                if entry is not None and entry.producer_epoch == epoch and entry.current_txn_first_offset is None:
                    batches = entry.batch_metadata
                    if batches and sequence == batches[-1][0] + 1 and 0 <= delta <= INT32_MAX - sequence:
                        return (entry, sequence + delta, delta, max_ts)
    found = producer_batches(buf)
    if not found:
        return None
    try:
        return plan_append(manager, buf, found, log_end_offset=log_end_offset, origin=origin)
    except errors.ProducerStateError:
        if _chunk_is_sound(buf, max_batch_bytes):
            raise
        return None


def _chunk_is_sound(buf, max_batch_bytes: int) -> bool:
    """Whole v2 batches with valid CRCs (checked on a copy; the error path only)."""
    v = ffi.new("plog_validate *")
    v.max_batch_bytes = max_batch_bytes
    v.flags = lib.PLOG_VALIDATE_ASSIGN_OFFSETS      # a leader's chunk: its offsets are assigned
    copy = bytearray(buf)
    return lib.plog_validate_chunk(ffi.from_buffer(copy), len(copy), v) == 0


def apply_replicated(manager: ProducerStateManager, view) -> list[tuple[CompletedTxn, int]]:
    """A follower's written chunk, applied without validation (REPLICATION origin)."""
    return commit_append(manager, plan_append(manager, view, producer_batches(view), log_end_offset=None,
                                              origin=REPLICATION))


def planned_producers(plan) -> tuple[int, ...]:
    """The producers whose entries a plan of plan_leader_chunk changes."""
    if plan.__class__ is tuple:
        return (plan[0].producer_id,)
    return tuple(plan.infos)


def commit_append(manager: ProducerStateManager, plan, first_offset: int = -1) -> list[tuple[CompletedTxn, int]]:
    """Apply a planned append once it is written (first_offset: where it went); returns each
    completed transaction with the last stable offset to record for it (the transaction
    index's entry)."""
    if plan.__class__ is tuple:          # plan_leader_chunk's next batch in sequence
        entry, last_seq, delta, max_timestamp = plan
        entry.batch_metadata.append(_new_batch_metadata(BatchMetadata, (last_seq, first_offset + delta, delta,
                                                                        max_timestamp)))
        entry.last_timestamp = max_timestamp
        return ()
    for info in plan.infos.values():
        manager.update(info)
    out = []
    for txn in plan.completed:
        out.append((txn, manager.last_stable_offset(txn)))
        manager.complete_txn(txn)
    return out


def replay(manager: ProducerStateManager, log, start_offset: int, producer_free=frozenset()) -> None:
    """Apply the log's batches from `start_offset` to its end without validation (Kafka's
    loadProducersFromRecords: REPLICATION origin), except in the segments based at
    `producer_free` (known to hold no batch with a producer id)."""
    for cols, view in log.segment_columns(start_offset, skip_bases=producer_free):
        # Headers from one C call per segment; only the batches with a producer id are
        # visited in Python (a log without producers is replayed in milliseconds a GiB).
        magic, last, positions, sizes = cols.magic, cols.last_offset, cols.position, cols.size_bytes
        for i in [i for i, pid in enumerate(cols.producer_id) if pid >= 0]:
            if magic[i] >= 2 and last[i] >= start_offset:
                position = positions[i]
                log.local.record_completed(apply_replicated(manager, view[position:position + sizes[i]]))
    manager.update_map_end_offset(log.log_end_offset)


def rebuild(manager: ProducerStateManager, log, now_ms: int, *, at_most: int | None = None,
            truncation: bool = False, producer_free: frozenset | set = frozenset()) -> None:
    """After a load or a truncation: snapshots outside (log start, log end] go, the newest one
    left is loaded (or none: the state starts at the log start) and the batches above it are
    replayed (Kafka's rebuildProducerState).  Kafka then writes a snapshot at the log end; we
    leave that to the next roll or close, so that an open writes nothing new (it must work on
    a full disk) -- a crash before then replays the same batches again.

    A truncation of a log whose producer state was empty and up to date skips the replay, as
    Kafka's does (isEmptyBeforeTruncation: truncating cannot add producers; a log without
    idempotent producers is not rescanned at every follower truncation).  producer_free: the
    bases of segments the load's recovery scan just read whole and found without a batch
    carrying a producer id -- the replay has nothing to apply there and skips them."""
    empty_before = truncation and manager.is_empty() and manager.map_end_offset >= log.log_end_offset
    manager.truncate_and_reload(log.log_start_offset, log.log_end_offset, now_ms, at_most=at_most)
    start = max(manager.map_end_offset, log.log_start_offset)
    # The transaction indexes above the replay's start are derived again by the replay.
    for segment in log.segments[max(log.local.segment_index(start), 0):]:
        segment.txn_index.truncate_to(start, segment_base=segment.base_offset)
    if manager.map_end_offset < log.log_end_offset and not empty_before:
        replay(manager, log, start, producer_free)
    manager.update_map_end_offset(log.log_end_offset)


def remove_stray_and_rebuild(manager: ProducerStateManager, log, now_ms: int, recovered: list[tuple]) -> None:
    """The load's step (docs/kafka-formats.md 5.2, step 7): snapshots not at a segment base go (except the
    newest one above every base, which a clean shutdown wrote at the log end), then rebuild;
    `recovered`: Loader.recovered."""
    manager.remove_stray_snapshots(log.local.bases)
    # A recovered segment's transaction index is derived again, as Kafka's segment recovery
    # does: replay from a snapshot at or below the first recovered segment.
    rebuild(manager, log, now_ms, at_most=min((base for base, *_ in recovered), default=None),
            producer_free={base for base, _end, _e, producers in recovered if producers == 0})
