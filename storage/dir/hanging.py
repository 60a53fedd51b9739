"""Hanging transactions: list a partition's open transactions and abort one (Kafka's KIP-664,
`kafka-transactions.sh describe-producers` / `find-hanging` / `abort`, for one log).

A transaction hangs when its producer began it on this partition and no coordinator will ever
send its marker (a coordinator that lost its state, a partition it never learned of, a
producer id expired before the marker came).  Its first offset holds the last stable offset
back: read_committed consumers stall there and the cleaner stops before it.  The operator's
way out, as in Kafka: find the producer id and epoch of the open transaction (Kafka's
DescribeProducers), then write an ABORT marker as the coordinator would (WriteTxnMarkers) with
that producer epoch and a coordinator epoch at least the last one seen.  The LSO then moves
(once the marker is below the high watermark), read_committed skips the aborted records, and
the cleaner goes on (and removes them).

`abort_transaction` refuses, naming the partition and the producer: a producer with no open
transaction here (nothing to abort: a marker would only fence the producer), and an epoch that
is not the producer's current one (a stale epoch: Kafka's INVALID_PRODUCER_EPOCH; a newer one
would fence a live producer).
"""
from __future__ import annotations

from typing import NamedTuple

from ..core import errors


class OpenTxn(NamedTuple):
    """One open transaction of a partition (the fields of Kafka's DescribeProducers answer)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    first_offset: int            # Kafka's currentTxnStartOffset
    last_sequence: int
    last_timestamp: int

    def as_dict(self) -> dict:
        return self._asdict()


def open_transactions(log) -> list[OpenTxn]:
    """The producers of `log` with an open transaction, the oldest first."""
    with log._lock:
        log._ensure_open()
        found = [OpenTxn(pid, e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset,
                         e.last_sequence, e.last_timestamp)
                 for pid, e in log.producer_state.active_producers.items() if e.current_txn_first_offset is not None]
    return sorted(found, key=lambda t: (t.first_offset, t.producer_id))


def find_open_transaction(log, start_offset: int) -> OpenTxn:
    """The open transaction that began at `start_offset` (kafka-transactions.sh abort
    --start-offset), or TransactionNotFoundError naming the ones that are open."""
    found = open_transactions(log)
    for txn in found:
        if txn.first_offset == start_offset:
            return txn
    opened = ", ".join(f"producer {t.producer_id} at offset {t.first_offset}" for t in found) or "none"
    raise errors.InvalidTxnStateError(f"no open transaction begins at offset {start_offset} (open: {opened})",
                                      file=log.path, offset=start_offset)


def abort_transaction(log, producer_id: int, producer_epoch: int, *, coordinator_epoch: int | None = None,
                      leader_epoch: int | None = None):
    """Write an ABORT marker for `producer_id`'s open transaction on `log`, as a coordinator's
    WriteTxnMarkers would (PartitionLog.append_txn_marker); returns its AppendInfo.
    coordinator_epoch: default the last one the partition saw (at least 0);
    leader_epoch: default the log's latest epoch (at least 0): no new epoch starts."""
    with log._lock:
        log._ensure_open()
        entry = log.producer_state.last_entry(producer_id)
        if entry is None or entry.current_txn_first_offset is None:
            raise errors.InvalidTxnStateError(f"producer {producer_id} has no open transaction in this partition: "
                                              "nothing to abort", file=log.path)
        if producer_epoch != entry.producer_epoch:
            kind = "stale" if producer_epoch < entry.producer_epoch else "not the producer's epoch"
            raise errors.InvalidProducerEpochError(
                f"producer {producer_id}: epoch {producer_epoch} is {kind}; its open transaction (from offset "
                f"{entry.current_txn_first_offset}) has epoch {entry.producer_epoch}", file=log.path,
                offset=entry.current_txn_first_offset)
        if coordinator_epoch is None:
            coordinator_epoch = max(entry.coordinator_epoch, 0)
        if leader_epoch is None:
            latest = log.latest_epoch
            leader_epoch = latest if latest is not None and latest >= 0 else 0
        return log.append_txn_marker(producer_id, producer_epoch, False, coordinator_epoch, leader_epoch)


def scan_open_transactions(batches) -> list[OpenTxn]:
    """The open transactions of a log read from its batches alone, from its first batch (what
    a load without producer snapshots replays): a transactional data batch opens its producer's
    transaction, a control batch (COMMIT or ABORT) closes it.  For read-only listings (the CLI's
    --dry-run, a dir that must not be opened); `open_transactions` of the opened log is the
    engine's answer."""
    state: dict[int, list] = {}      # pid -> [epoch, coordinator epoch, open from, last seq, last ts]
    for batch in batches:
        pid = batch.producer_id
        if pid < 0 or batch.magic < 2:
            continue
        entry = state.setdefault(pid, [batch.producer_epoch, -1, None, -1, -1])
        entry[0] = batch.producer_epoch
        entry[4] = batch.max_timestamp
        if batch.is_control:
            records = batch.records()
            value = bytes(records[0].value or b"") if records else b""
            if len(value) >= 6:
                entry[1] = int.from_bytes(value[2:6], "big", signed=True)
            entry[2] = None
            continue
        if batch.base_sequence >= 0:
            entry[3] = (batch.base_sequence + batch.last_offset - batch.base_offset) % (1 << 31)
        if batch.is_transactional and entry[2] is None:
            entry[2] = batch.base_offset
    found = [OpenTxn(pid, e[0], e[1], e[2], e[3], e[4]) for pid, e in state.items() if e[2] is not None]
    return sorted(found, key=lambda t: (t.first_offset, t.producer_id))
