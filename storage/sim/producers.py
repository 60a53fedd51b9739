"""The simulator's idempotent and transactional producers (issue 15), on in one seed in four,
from their own generator so that the other seeds keep their traces.

The idempotent producer (producer id 1000) sends one batch at a time, acks=all, and resends the
same batch (same epoch and sequence) until it is answered: an error, a lost request or a broker
that died before answering all end in a retry, as a Kafka producer's do.  OUT_OF_ORDER_SEQUENCE
or an unknown producer (its state lost with an unclean election) makes it bump its epoch and
start again at sequence 0, dropping that batch, as Kafka's producer resets.  Its acknowledged
values join the client's, so the history checker's lost-write and duplicate checks (I13) judge
them too.

The transactional producer (producer id 2000) writes a transaction of one or two batches,
then -- acting as its coordinator -- has the leader write the end marker (commit or abort, a
WriteTxnMarkers request to the leader's ReplicaManager) and writes it again whenever a leader's producer state shows
the transaction open (the marker was lost with a truncation), as a coordinator retries
WriteTxnMarkers.

Invariants:
  I18  no idempotent value is in a log twice (a retried batch was a duplicate, not a new one);
  I19  on every replica the last stable offset is at most the first offset of any open
       transaction, and at most the high watermark;
  I20  a read_committed reader of the final leader (records below the LSO, minus the aborted
       transactions collect_aborted_transactions lists, as Kafka's consumer filters) never
       sees a value of a transaction an ABORT marker in that log ends (the log's decision: a
       marker the coordinator wrote may have been lost with a truncation and the transaction
       decided again).
"""
from __future__ import annotations

import random

from ..core.errors import Errors
from ..core.records import build_batch, iter_batches
from ..replication import messages as m

IDEMPOTENT_PID, TXN_PID = 1000, 2000
_RESET = (Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, Errors.UNKNOWN_PRODUCER_ID, Errors.INVALID_PRODUCER_EPOCH)


class Producers:
    def __init__(self, seed: int, topic: str, partition: int):
        self.rng = random.Random(f"producers-{seed}")
        self.on = self.rng.random() < 0.25
        self.topic, self.partition = topic, partition
        self.epoch, self.sequence = 0, 0
        self.in_flight: tuple[bytes, bytes] | None = None      # (value, batch) awaiting an answer
        self.waiting = False
        self.sent_values: set[bytes] = set()
        self.txn_epoch, self.txn_sequence = 0, 0
        self.txn_values: list[bytes] = []                       # of the open transaction
        self.txn_state = "idle"                                 # idle, open, ended
        self.txn_commit = False
        self.committed: set[bytes] = set()
        self.aborted: set[bytes] = set()
        self.count = 0

    # ---- the idempotent producer ----
    def produce(self, sim) -> None:
        """One produce step: the transactional producer one time in four, else the idempotent one."""
        if self.rng.random() < 0.25:
            self._transaction_step(sim)
            return
        if self.waiting:
            return
        if self.in_flight is None:
            value = b"s%d-i%d" % (sim.seed, self.count)
            self.count += 1
            batch = build_batch([value], producer_id=IDEMPOTENT_PID, producer_epoch=self.epoch,
                                base_sequence=self.sequence, base_timestamp=sim.channel.now)
            self.in_flight = (value, batch)
            self.sent_values.add(value)
        value, batch = self.in_flight
        manager = sim._leader_manager()
        if manager is None:
            return
        self.waiting = True
        leader = manager.broker_id

        def answered(response, value=value):
            if self.in_flight is None or self.in_flight[0] != value:
                return
            self.waiting = False
            if response.error_code == Errors.NONE:
                sim.client.acked[value] = response.base_offset
                self.in_flight, self.sequence = None, self.sequence + 1
            elif response.error_code in _RESET:
                self.in_flight, self.epoch, self.sequence = None, self.epoch + 1, 0
            if response.error_code == Errors.NONE and manager.logdir.offline:
                sim.result.violations.append(f"I16 broker {leader} acknowledged {value!r} after its log dir "
                                             f"went offline")

        manager.handle_produce(m.ProduceRequest(self.topic, self.partition, batch, -1), answered)

    def lost_answers(self) -> None:
        """A broker died or a request was lost: the in-flight batch is sent again."""
        self.waiting = False

    # ---- the transactional producer and its coordinator ----
    def _transaction_step(self, sim) -> None:
        if self.txn_state == "ended":
            self.txn_state = "idle"
        if self.txn_state == "idle":
            self.resend_lost_markers(sim)
        manager = sim._leader_manager()
        if manager is None:
            return
        p = manager.partitions.get((self.topic, self.partition))
        if self.txn_state == "idle" or (self.txn_state == "open" and len(self.txn_values) < 2
                                         and self.rng.random() < 0.5):
            value = b"s%d-t%d" % (sim.seed, self.count)
            self.count += 1
            batch = build_batch([value], producer_id=TXN_PID, producer_epoch=self.txn_epoch,
                                base_sequence=self.txn_sequence, is_transactional=True,
                                base_timestamp=sim.channel.now)
            response = manager.handle_produce(m.ProduceRequest(self.topic, self.partition, batch, 1))
            if response is not None and response.error_code == Errors.NONE:
                self.txn_values.append(value)
                self.txn_sequence += 1
                self.txn_state = "open"
            elif response is not None and response.error_code in _RESET:
                # The producer starts over with a bumped epoch; its coordinator aborts what the
                # log holds of the open transaction first (resend_lost_markers, next step).
                self.txn_epoch, self.txn_sequence, self.txn_state, self.txn_values = self.txn_epoch + 1, 0, "idle", []
            return
        if self.txn_state == "open":
            self.txn_commit = self.rng.random() < 0.5
            if self._write_marker(manager, p, self.txn_commit, self.txn_epoch):
                self.txn_values = []
                self.txn_state = "ended"

    def _write_marker(self, manager, p, commit: bool, epoch: int) -> bool:
        """As WriteTxnMarkers: only a leader (not recovering) takes the marker, in its epoch.  The
        decision covers what the leader's log holds of the open transaction (a batch the
        producer sent may be lost; a transaction whose earlier marker was lost is decided
        again), and the oracle records it for those values."""
        if p is None or p.leader != manager.broker_id or p.recovering or manager.logdir.offline:
            return False
        entry = p.log.producer_state.active_producers.get(TXN_PID)
        first = None if entry is None else entry.current_txn_first_offset
        values = set() if first is None else self._values_from(p.log, first)
        request = m.WriteTxnMarkersRequest([m.TxnMarker(TXN_PID, epoch, commit, [(self.topic, self.partition)], 0)])
        response = manager.handle_write_txn_markers(request)
        if response.errors[TXN_PID][(self.topic, self.partition)] != Errors.NONE:
            return False        # offline, fenced, too few in sync: the coordinator retries
        (self.committed if commit else self.aborted).update(values)
        (self.aborted if commit else self.committed).difference_update(values)
        return True

    def resend_lost_markers(self, sim) -> None:
        """A leader whose producer state shows a transaction open while the producer has none
        lost its marker (a truncation): the coordinator aborts it."""
        manager = sim._leader_manager()
        if manager is None:
            return
        p = manager.partitions.get((self.topic, self.partition))
        entry = p.log.producer_state.active_producers.get(TXN_PID) if p is not None else None
        if entry is not None and entry.current_txn_first_offset is not None:
            self._write_marker(manager, p, False, entry.producer_epoch)

    @staticmethod
    def _values_from(log, first_offset: int) -> set[bytes]:
        out = set()
        for batch in log.batches(first_offset):
            if batch.producer_id == TXN_PID and batch.is_transactional and not batch.is_control:
                out.update(r.value for r in batch.records())
        return out

    # ---- invariants ----
    def check(self, logs: dict) -> list[str]:
        out = []
        for b, log in logs.items():
            undecided = log.producer_state.first_undecided_offset()
            lso = log.last_stable_offset
            if lso > log.high_watermark:
                out.append(f"I19 broker {b}: last stable offset {lso} above the high watermark {log.high_watermark}")
            if undecided is not None and lso > max(undecided, log.log_start_offset):
                out.append(f"I19 broker {b}: last stable offset {lso} beyond the open transaction at {undecided}")
        return out

    def history(self, leader_log, leader) -> list[str]:
        out = []
        seen: dict[bytes, int] = {}
        for batch in leader_log.batches():
            if batch.is_control:
                continue
            for record in batch.records():
                if record.value in self.sent_values:
                    seen[record.value] = seen.get(record.value, 0) + 1
        twice = sorted(v for v, n in seen.items() if n > 1)
        if twice:
            out.append(f"I18 duplicate idempotent records: {twice[:3]}")
        visible = self._read_committed(leader, self.topic, self.partition)
        shown = sorted(self._aborted_in(leader_log) & visible)
        if shown:
            out.append(f"I20 a read_committed reader sees aborted records: {shown[:3]}")
        return out

    @staticmethod
    def _aborted_in(log) -> set[bytes]:
        """The values of every transaction an ABORT marker in the log ends (the log's own
        decisions: a marker the coordinator wrote may be lost with a truncation, and the
        transaction decided again)."""
        open_values: dict[int, list[bytes]] = {}
        aborted: set[bytes] = set()
        for batch in log.batches():
            if not batch.is_transactional:
                continue
            if batch.is_control:
                records = batch.records()
                ended = open_values.pop(batch.producer_id, [])
                if records and records[0].key is not None and records[0].key[2:4] == b"\x00\x00":
                    aborted.update(ended)                          # ABORT (control type 0)
                continue
            open_values.setdefault(batch.producer_id, []).extend(r.value for r in batch.records())
        return aborted

    @staticmethod
    def _read_committed(leader, topic: str, partition: int) -> set[bytes]:
        """What a read_committed consumer gets from the leader, from the log start to the LSO:
        read_committed Fetch requests, each response's aborted transactions applied as Kafka's
        consumer does (a transactional batch of a producer with an aborted transaction that
        started at or below its last offset is skipped, until that producer's ABORT marker)."""
        log = leader.partitions[(topic, partition)].log
        offset, out = log.log_start_offset, set()
        pending, aborted_producers = [], set()
        while True:
            request = m.FetchRequest(m.CONSUMER_REPLICA_ID, -1, [m.FetchPartition(topic, partition, offset)],
                                     isolation_level=m.READ_COMMITTED)
            [answer] = leader.handle_fetch(request).partitions
            batches = list(iter_batches(answer.records)) if answer.error_code == Errors.NONE else []
            if not batches:
                return out
            pending = sorted({(t.first_offset, t.producer_id) for t in answer.aborted_transactions or ()} |
                             set(pending))
            for batch in batches:
                offset = batch.last_offset + 1
                while pending and pending[0][0] <= batch.last_offset:
                    aborted_producers.add(pending.pop(0)[1])
                if batch.is_control:
                    records = batch.records()
                    if records and records[0].key is not None and records[0].key[2:4] == b"\x00\x00":
                        aborted_producers.discard(batch.producer_id)      # its ABORT marker
                    continue
                if batch.is_transactional and batch.producer_id in aborted_producers:
                    continue
                out.update(r.value for r in batch.records())
