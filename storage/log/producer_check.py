"""The leader's producer check in C, for the common case: an idempotent producer's next batch.

A client's batch with a producer id must pass the producer-state check (storage/log/producer.py)
before it is written.  For the batch that simply follows its producer's last one -- one batch,
same epoch, no transaction, the next sequence -- that check is three comparisons, and the C
append makes them itself (PLOG_VALIDATE_PRODUCERS, csrc/plog.h): the log keeps up to
PLOG_EXPECTED_PRODUCERS producers' (id, epoch, next sequence) in the append's plog_validate
struct, C writes a batch that matches one of them and advances that sequence, and refuses
(PLOG_EPRODUCER, nothing written) any other batch with a producer id, which then takes the
Python path and is learnt.  After a C-checked write, `commit` records the batch in the
producer's entry exactly as the Python path would (one more BatchMetadata, the timestamp).
Every leader append asks C so (storage/log/appends.py): the coordinator's appends, and a client's
when the tests turn the expectations off, expect no producer, so C sends each batch with a
producer id back to the Python check, after the chunk's own checks, as Kafka orders them.

The expectations are a cache of the producer state: any change the manager makes that did not
come through here (a follower append, a marker, truncation, reload, expiry) bumps
`ProducerStateManager.changes`, and `sync` then empties them before the next append.
"""
from __future__ import annotations

from ..core._native import lib
from ..core.files import INT32_MAX
from .producer import BatchMetadata, ProducerStateManager, _new_batch_metadata

SLOTS = lib.PLOG_EXPECTED_PRODUCERS
ENABLED = True          # read when a log opens; tests turn the expectations off to compare with the Python check


class ExpectedProducers:
    __slots__ = ("manager", "v", "entries", "seen", "next_slot")

    def __init__(self, manager: ProducerStateManager, v):
        self.manager = manager
        self.v = v                          # the client append's plog_validate
        self.entries: list = [None] * SLOTS  # the ProducerStateEntry behind each slot
        self.seen = -1
        self.next_slot = 0

    def sync(self) -> None:
        """Forget every expectation when the producer state changed behind our back."""
        if self.manager.changes != self.seen:
            self.v.expected_count = 0
            self.entries = [None] * SLOTS
            self.next_slot = 0
            self.seen = self.manager.changes

    def commit(self, slot: int, info) -> None:
        """C wrote the next batch of the producer in `slot` (AppendInfo `info`): record it."""
        entry = self.entries[slot]
        batches = entry.batch_metadata
        delta = info[1] - info[0]
        batches.append(_new_batch_metadata(BatchMetadata, (batches[-1][0] + 1 + delta, info[1], delta, info[2])))
        entry.last_timestamp = info[2]

    def learn(self, producer_ids, changes_before: int) -> None:
        """After a Python-checked append that changed only these producers' entries: expect
        each one's next batch (when it may come without a check), and accept the change."""
        v, producers = self.v, self.manager.producers
        for pid in producer_ids:
            entry = producers.get(pid)
            slot = next((i for i in range(v.expected_count) if v.expected_id[i] == pid), None)
            eligible = (entry is not None and entry.current_txn_first_offset is None and entry.batch_metadata
                        and entry.batch_metadata[-1][0] < INT32_MAX)
            if not eligible:
                if slot is not None:
                    v.expected_id[slot] = -1
                    self.entries[slot] = None
                continue
            if slot is None:
                slot = self.next_slot
                self.next_slot = (slot + 1) % SLOTS
                v.expected_count = max(v.expected_count, slot + 1)
            v.expected_id[slot] = pid
            v.expected_epoch[slot] = entry.producer_epoch
            v.expected_sequence[slot] = entry.batch_metadata[-1][0] + 1
            self.entries[slot] = entry
        if self.seen == changes_before:
            self.seen = self.manager.changes
