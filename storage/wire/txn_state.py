"""A transactional id's state as Kafka's TransactionMetadata keeps it, its transitions, and its
record in `__transaction_state` (Kafka's TransactionLogKey / TransactionLogValue, through
storage/topics/coordinator_records.py), for the transaction coordinator (txn_coordinator.py).

States, as Kafka's: Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) -> PrepareCommit
or PrepareAbort (EndTxn; the markers go out) -> CompleteCommit or CompleteAbort (every
partition has its marker) -> Ongoing again with the next transaction, or Empty on the next
InitProducerId.  PrepareEpochFence is never written: it is the pending step of fencing an
Ongoing transaction (a second InitProducerId, the transaction timeout), which writes
PrepareAbort with the producer's epoch bumped.

Every transition is computed here as a new `TxnMetadata` (Kafka's TxnTransitMetadata); the
coordinator writes its record and adopts it only once the write is acknowledged.
"""
from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass, field

from ..core.errors import Errors
from ..topics import coordinator_records as cr
from .group_model import offsets_partition

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT = "Empty", "Ongoing", "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"
STATES = cr.TRANSACTION_STATES          # the record's transactionStatus is the index in this tuple
NO_PRODUCER_ID, NO_PRODUCER_EPOCH = -1, -1
MAX_EPOCH = 32767                       # Short.MaxValue


def txn_partition(transactional_id: str, partitions: int) -> int:
    """The `__transaction_state` partition of a transactional id: abs(String.hashCode) %
    partitions with Kafka's Utils.abs, the group ids' hashing."""
    return offsets_partition(transactional_id, partitions)


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60_000
    state: str = EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    pending: str | None = None          # the state a transition in flight goes to (not persisted)
    failed_fence: bool = False          # an epoch fence bumped the epoch but its write failed

    # ---- Kafka's TransactionMetadata transitions: each returns the new metadata ----------------
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1

    def _next(self, **changes) -> "TxnMetadata":
        return dataclasses.replace(self, partitions=set(changes.pop("partitions", self.partitions)),
                                   pending=None, failed_fence=False, **changes)

    def increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now: int) -> "TxnMetadata | int":
        """InitProducerId for the same producer id: the epoch bumped (or the same one again for
        a retry of a bump whose answer was lost), the state Empty; PRODUCER_FENCED when the
        expected epoch is neither the current nor the last one."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return Errors.PRODUCER_FENCED
        return self._next(producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms, state=EMPTY,
                          partitions=(), start_ms=-1, update_ms=now)

    def rotate_producer_id(self, producer_id: int, timeout_ms: int, now: int, record_last_epoch: bool) -> "TxnMetadata":
        """The epoch is exhausted: a new producer id at epoch 0 (KIP-360)."""
        return self._next(producer_id=producer_id, previous_producer_id=self.producer_id, producer_epoch=0,
                          last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                          timeout_ms=timeout_ms, state=EMPTY, partitions=(), start_ms=-1, update_ms=now)

    def fence_epoch(self) -> "TxnMetadata | int":
        """An Ongoing transaction a new producer (or the timeout) ends: its epoch bumped, so the
        producer that began it is fenced, to be aborted (Kafka's prepareFenceProducerEpoch: an
        exhausted epoch is bumped too, up to Short.MaxValue; a fence whose write failed is not
        bumped again, that epoch was never handed out)."""
        if self.producer_epoch >= MAX_EPOCH:
            return Errors.UNKNOWN_SERVER_ERROR       # Kafka's IllegalStateException: it would overflow
        epoch = self.producer_epoch if self.failed_fence else self.producer_epoch + 1
        return self._next(producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH)

    def add_partitions(self, partitions, now: int) -> "TxnMetadata":
        start = now if self.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) else self.start_ms
        keep = self.partitions if self.state == ONGOING else set()
        return self._next(state=ONGOING, partitions=keep | set(partitions), start_ms=start, update_ms=now)

    def prepare_end(self, commit: bool, now: int) -> "TxnMetadata":
        return self._next(state=PREPARE_COMMIT if commit else PREPARE_ABORT, update_ms=now)

    def complete(self, now: int) -> "TxnMetadata":
        return self._next(state=COMPLETE_COMMIT if self.state == PREPARE_COMMIT else COMPLETE_ABORT,
                          partitions=(), update_ms=now)


# ---- the record ------------------------------------------------------------------------------
def record_key(transactional_id: str) -> bytes:
    return cr.encode(cr.TRANSACTION_LOG_KEY, {"transactionalId": transactional_id}, 0)


def record_value(meta: TxnMetadata) -> bytes:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        topics.setdefault(topic, []).append(partition)
    return cr.encode(cr.TRANSACTION_LOG_VALUE, {
        "producerId": meta.producer_id, "producerEpoch": meta.producer_epoch,
        "transactionTimeoutMs": meta.timeout_ms, "transactionStatus": STATES.index(meta.state),
        "transactionPartitions": [{"topic": t, "partitionIds": ps} for t, ps in topics.items()],
        "transactionLastUpdateTimestampMs": meta.update_ms, "transactionStartTimestampMs": meta.start_ms}, 0)


def read_record(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None] | None:
    """(transactional id, metadata or None for a tombstone) of a `__transaction_state` record;
    None for a key of another version (Kafka's loader skips it).  Raises RecordFormatError or
    struct.error on bytes that do not parse."""
    if struct.unpack_from(">h", key)[0] != 0:
        return None
    transactional_id = cr.decode(cr.TRANSACTION_LOG_KEY, key[2:], 0)["transactionalId"]
    if value is None:
        return transactional_id, None
    version = struct.unpack_from(">h", value)[0]
    v = cr.decode(cr.TRANSACTION_LOG_VALUE, value[2:], version)
    state = STATES[v["transactionStatus"]]
    partitions = {(t["topic"], p) for t in v["transactionPartitions"] or () for p in t["partitionIds"]}
    return transactional_id, TxnMetadata(
        transactional_id, v["producerId"], v["producerEpoch"], NO_PRODUCER_EPOCH,
        v.get("previousProducerId", -1), v.get("nextProducerId", -1), v["transactionTimeoutMs"], state,
        partitions if state != EMPTY else set(), v["transactionStartTimestampMs"], v["transactionLastUpdateTimestampMs"])
