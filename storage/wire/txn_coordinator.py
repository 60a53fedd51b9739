"""The transaction coordinator (Kafka's TransactionCoordinator, TransactionStateManager and
TransactionMarkerChannelManager): FindCoordinator for transactional ids (key type 1),
InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions (KIP-664), over `__transaction_state`.

A transactional id's coordinator is the leader of its `__transaction_state` partition
(txn_state.txn_partition); the partition's leader epoch is the coordinator epoch its markers
carry.  Every transition (txn_state.TxnMetadata) is written to that partition with acks=all
before it is answered or adopted.  When this broker becomes a partition's leader (a restart, a
SIGKILL, a leader change) it loads the partition's transactions -- at the first request for
one of them or at the next tick -- and completes each one it finds in PrepareCommit or
PrepareAbort (sends the markers again, then writes Complete*).

EndTxn is answered once Prepare* is written; the markers then go to every partition's leader
(this broker's replica manager through TxnAdminApis.write_markers, another broker by
WriteTxnMarkers v1), retried until each is written, and Complete* is written last.  Until then
the transactional id answers CONCURRENT_TRANSACTIONS.  An Ongoing transaction past its
transaction.timeout.ms is aborted by the periodic check with the producer's epoch bumped (the
producer is fenced), as Kafka's abortTimedOutTransactions.

A transactional id left idle (Empty, CompleteCommit or CompleteAbort, nothing in flight) for
transactional.id.expiration.ms is forgotten, as Kafka's removeExpiredTransactionalIds: a check
every transaction.remove.expired.transaction.cleanup.interval.ms writes a tombstone for it
(acks=all, batches within the partition's max.message.bytes) and drops it from memory once the
tombstone is acknowledged by the same coordinator epoch; until then the id answers
CONCURRENT_TRANSACTIONS, and a failed write leaves it as it was.  The next InitProducerId for
it starts afresh with a new producer id.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass

from ..core.clock import monotonic_ms, wall_ms
from ..core.errors import Errors, StorageError
from ..core.records import build_batch
from ..replication import messages as m
from ..topics import coordinator_records as cr
from . import txn_state as ts
from .broker import MetadataSource
from .client import Peer, PeerError
from .codec import ms
from .rules import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

log = logging.getLogger("storage.wire")

TXN_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 << 20)}
TXN_TOPIC_MAX_REPLICATION = 3
MARKER_RETRY_S = 0.1
# Marker answers that end the sending (Kafka's completion handler: the producer or the
# coordinator moved on); any other error is retried.
_MARKERS_GIVE_UP = (Errors.INVALID_PRODUCER_EPOCH, Errors.TRANSACTION_COORDINATOR_FENCED)


@dataclass
class TxnSettings:
    partitions: int = 50                    # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000           # transaction.max.timeout.ms
    abort_interval_ms: int = 10_000         # transaction.abort.timed.out.transaction.cleanup.interval.ms
    id_expiration_ms: int = 604_800_000     # transactional.id.expiration.ms (7 days)
    remove_interval_ms: int = 3_600_000     # transaction.remove.expired.transaction.cleanup.interval.ms


# Kafka's TransactionState.isExpirationAllowed: the states an idle id may be forgotten in.
_EXPIRABLE = (ts.EMPTY, ts.COMPLETE_COMMIT, ts.COMPLETE_ABORT)
_TOMBSTONE_BYTES = 24           # a tombstone record's bytes besides its key (length, attributes, deltas)
_BATCH_HEADER_BYTES = 61


def _chunks(metas: list, limit: int):
    """`metas` in runs whose tombstone batch stays within `limit` bytes (max.message.bytes);
    a run holds at least one id (Kafka attempts the append of even a batch too large)."""
    run, size = [], _BATCH_HEADER_BYTES
    for meta in metas:
        need = len(ts.record_key(meta.transactional_id)) + _TOMBSTONE_BYTES
        if run and size + need > limit:
            yield run
            run, size = [], _BATCH_HEADER_BYTES
        run.append(meta)
        size += need
    if run:
        yield run


def _fenced(code: int, version: int, first_with_fenced: int) -> int:
    """PRODUCER_FENCED as an older client understands it (KafkaApis: INVALID_PRODUCER_EPOCH)."""
    return Errors.INVALID_PRODUCER_EPOCH if code == Errors.PRODUCER_FENCED and version < first_with_fenced else code


class TxnCoordinator:
    def __init__(self, node: MetadataSource, groups, admin, apis, settings: TxnSettings | None = None):
        self.node, self.groups, self.admin, self.apis = node, groups, admin, apis
        self.settings = settings or TxnSettings()
        self.txns: dict[str, ts.TxnMetadata] = {}
        self._loaded: dict[int, int] = {}           # partition -> the leader epoch it was loaded at
        self._load_failed: set[tuple[int, int]] = set()
        self._peers: dict[int, Peer] = {}
        self._tasks: set[asyncio.Task] = set()
        self._next_abort_check = 0
        self._next_expiry_check = None  # monotonic ms; the first check one interval after the first tick
        self._metadata_seen = None      # node.metadata_changes when the tick last loaded

    # ---- the partition and its loading -------------------------------------------------------
    def _partition_count(self) -> int:
        return len(self.node.partitions_of(TRANSACTION_STATE_TOPIC)) or self.settings.partitions

    def partition_for(self, transactional_id: str) -> int:
        return ts.txn_partition(transactional_id, self._partition_count())

    async def ensure_topic(self) -> None:
        if self.node.topic_id(TRANSACTION_STATE_TOPIC) == 0:
            rf = min(self.node.replication_factor, TXN_TOPIC_MAX_REPLICATION)
            await self.node.create_topic(TRANSACTION_STATE_TOPIC, self.settings.partitions, rf,
                                         dict(TXN_TOPIC_CONFIGS), internal=True)

    def _coordinator(self, transactional_id: str) -> tuple[int, int]:
        """(NONE, coordinator epoch) when this broker leads the id's partition (loaded at its
        leader epoch first), else (NOT_COORDINATOR, -1)."""
        partition = self.partition_for(transactional_id)
        state = self.node.partition_state(TRANSACTION_STATE_TOPIC, partition)
        if state is None or state.leader != self.node.node_id:
            return Errors.NOT_COORDINATOR, -1
        self._take_over(partition, state.leader_epoch)
        return Errors.NONE, state.leader_epoch

    def _still(self, transactional_id: str, epoch: int) -> bool:
        return self._leads(self.partition_for(transactional_id), epoch)

    def _leads(self, partition: int, epoch: int) -> bool:
        """Whether this broker still leads `partition` of __transaction_state at leader epoch `epoch`."""
        state = self.node.partition_state(TRANSACTION_STATE_TOPIC, partition)
        return state is not None and state.leader == self.node.node_id and state.leader_epoch == epoch

    def _take_over(self, partition: int, epoch: int) -> None:
        if self._loaded.get(partition) == epoch:
            return
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[tid]
        loaded = self._load(partition)
        self._loaded[partition] = epoch
        for tid, meta in loaded.items():
            self.txns[tid] = meta
            if meta.state in (ts.PREPARE_COMMIT, ts.PREPARE_ABORT):
                log.info("transactional id %s found in %s on %s-%d: sending its markers again", tid, meta.state,
                         TRANSACTION_STATE_TOPIC, partition)
                self._spawn(self._send_markers(tid, epoch))
        if loaded:
            log.info("loaded %d transactional ids of %s-%d (coordinator epoch %d)", len(loaded),
                     TRANSACTION_STATE_TOPIC, partition, epoch)

    def _load(self, partition: int) -> dict[str, ts.TxnMetadata]:
        out: dict[str, ts.TxnMetadata] = {}
        plog = self.node.logdir.partition(TRANSACTION_STATE_TOPIC, partition)
        for batch in plog.batches():
            if batch.is_control:
                continue
            for record in batch.records():
                if record.key is None:
                    continue
                try:
                    read = ts.read_record(record.key, record.value)
                except (cr.RecordFormatError, struct.error, IndexError) as exc:
                    log.error("%s-%d offset %d: unreadable record skipped: %s", TRANSACTION_STATE_TOPIC, partition,
                              record.offset, exc)
                    continue
                if read is None:
                    continue
                tid, meta = read
                if meta is None:
                    out.pop(tid, None)
                else:
                    out[tid] = meta
        return out

    def load_led_partitions(self) -> None:
        for state in self.node.partitions_of(TRANSACTION_STATE_TOPIC):
            key = (state.partition, state.leader_epoch)
            if state.leader != self.node.node_id or self._loaded.get(state.partition) == state.leader_epoch \
                    or key in self._load_failed:
                continue
            try:
                self._take_over(*key)
            except StorageError as exc:
                self._load_failed.add(key)
                log.error("cannot load %s-%d (leader epoch %d): %s", TRANSACTION_STATE_TOPIC, *key, exc)

    def _led(self, meta: ts.TxnMetadata) -> bool:
        state = self.node.partition_state(TRANSACTION_STATE_TOPIC, self.partition_for(meta.transactional_id))
        return state is not None and state.leader == self.node.node_id

    def tick(self) -> None:
        """Load the partitions this broker took over (looked for only when the metadata moved:
        nothing else makes one led); abort the transactions past their timeout; forget the ids
        idle past transactional.id.expiration.ms."""
        changes = self.node.metadata_changes
        if changes != self._metadata_seen:
            self.load_led_partitions()
            self._metadata_seen = changes
        now = monotonic_ms()
        if self._next_expiry_check is None:
            self._next_expiry_check = now + self.settings.remove_interval_ms
        elif now >= self._next_expiry_check:
            self._next_expiry_check = now + self.settings.remove_interval_ms
            self.expire_idle_ids()
        if now < self._next_abort_check:
            return
        self._next_abort_check = now + self.settings.abort_interval_ms
        wall = wall_ms()
        for meta in list(self.txns.values()):
            if meta.state == ts.ONGOING and meta.pending is None and meta.start_ms + meta.timeout_ms < wall \
                    and self._led(meta):
                log.info("transactional id %s: its transaction (producer id %d, epoch %d) passed its timeout of "
                         "%d ms: aborting it", meta.transactional_id, meta.producer_id, meta.producer_epoch,
                         meta.timeout_ms)
                self._spawn(self._fence_and_abort(meta.transactional_id))

    # ---- transactional id expiry ---------------------------------------------------------------
    def expire_idle_ids(self) -> int:
        """Start forgetting the ids idle past transactional.id.expiration.ms on the partitions
        this broker leads (Kafka's removeExpiredTransactionalIds); the number found."""
        deadline = wall_ms() - self.settings.id_expiration_ms
        by_partition: dict[int, list[ts.TxnMetadata]] = {}
        for tid, meta in self.txns.items():
            if meta.pending is None and meta.state in _EXPIRABLE and meta.update_ms <= deadline:
                by_partition.setdefault(self.partition_for(tid), []).append(meta)
        found = 0
        for partition, metas in by_partition.items():
            state = self.node.partition_state(TRANSACTION_STATE_TOPIC, partition)
            if state is None or state.leader != self.node.node_id or self._loaded.get(partition) != state.leader_epoch:
                continue
            try:
                limit = self.node.logdir.partition(TRANSACTION_STATE_TOPIC, partition).config.max_message_bytes
            except StorageError as exc:     # Kafka: no log config (offline), this partition waits
                log.warning("transactional id expiry skips %s-%d: %s", TRANSACTION_STATE_TOPIC, partition, exc)
                continue
            for chunk in _chunks(metas, limit):
                for meta in chunk:
                    meta.pending = ts.DEAD
                found += len(chunk)
                self._spawn(self._write_tombstones(partition, state.leader_epoch, chunk))
        return found

    async def _write_tombstones(self, partition: int, epoch: int, metas: list[ts.TxnMetadata]) -> None:
        """One batch of tombstones (acks=all); each id forgotten once it is acknowledged and the
        coordinator epoch has not moved, else left as it was (Kafka's removeFromCacheCallback)."""
        try:
            code = await self._append_acked(partition, [(ts.record_key(meta.transactional_id), None) for meta in metas])
        finally:
            for meta in metas:
                if meta.pending == ts.DEAD:
                    meta.pending = None
        still = self._leads(partition, epoch)
        for meta in metas:
            tid = meta.transactional_id
            if code == Errors.NONE and still and self.txns.get(tid) is meta:
                del self.txns[tid]
            else:
                log.warning("transactional id %s not forgotten: its tombstone's write answered error %d%s", tid, code,
                            "" if still else " (the coordinator moved)")
        if code == Errors.NONE and still:
            log.info("forgot %d transactional ids idle for %d ms or more (%s-%d)", len(metas),
                     self.settings.id_expiration_ms, TRANSACTION_STATE_TOPIC, partition)

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for peer in self._peers.values():
            peer.close()

    # ---- writing a transition ----------------------------------------------------------------
    async def _append_acked(self, partition: int, records: list) -> int:
        """One batch of `records` appended to `partition` of __transaction_state with acks=all;
        the append's error code once the high watermark passes it (or it fails)."""
        done = asyncio.get_running_loop().create_future()
        self.node.manager.handle_produce(m.ProduceRequest(TRANSACTION_STATE_TOPIC, partition, build_batch(records), -1),
                                         callback=lambda r: done.done() or done.set_result(r))
        self.node.pump()
        return (await done).error_code

    async def _write(self, meta: ts.TxnMetadata, new: ts.TxnMetadata, epoch: int) -> int:
        """Write `new` (acks=all) and adopt it; Kafka's coordinator error when that fails."""
        tid = meta.transactional_id
        meta.pending = new.state
        code = await self._append_acked(self.partition_for(tid), [(ts.record_key(tid), ts.record_value(new))])
        meta.pending = None
        if code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH, Errors.KAFKA_STORAGE_ERROR):
            code = Errors.NOT_COORDINATOR
        elif code in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE):
            code = Errors.UNKNOWN_SERVER_ERROR
        elif code != Errors.NONE:
            code = Errors.COORDINATOR_NOT_AVAILABLE
        if code == Errors.NONE and not self._still(tid, epoch):
            code = Errors.NOT_COORDINATOR
        if code == Errors.NONE and self.txns.get(tid) is meta:
            self.txns[tid] = new
        elif code != Errors.NONE:
            log.info("transactional id %s: writing %s failed with error %d", tid, new.state, code)
        return code

    # ---- FindCoordinator ---------------------------------------------------------------------
    async def find_coordinator(self, header, request) -> dict:
        if getattr(request, "key_type", 0) != 1:
            return await self.groups.find_coordinator(header, request)
        keys = getattr(request, "coordinator_keys", None)
        keys = list(keys) if keys else [request.key]
        await self.ensure_topic()
        out = []
        for key in keys:
            state = self.node.partition_state(TRANSACTION_STATE_TOPIC, self.partition_for(key))
            node_id = state.leader if state is not None else -1
            code = Errors.NONE if node_id >= 0 else Errors.COORDINATOR_NOT_AVAILABLE
            host, port = self.node.client_address_of(node_id)
            out.append({"key": key, "node_id": node_id, "host": host, "port": port, "error_code": code,
                        "error_message": None})
        if getattr(request, "coordinator_keys", None):
            return {"coordinators": out}
        return {k: out[0][k] for k in ("node_id", "host", "port", "error_code", "error_message")}

    # ---- InitProducerId ----------------------------------------------------------------------
    async def init_producer_id(self, header, request) -> dict:
        if request.transactional_id is None:
            return await self.apis.init_producer_id(header, request)
        version = type(request).__version__
        pid, epoch = getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1)
        if pid == -1 and epoch == -1:
            expected = None
        elif pid >= 0 and epoch >= 0:
            expected = (pid, epoch)
        else:
            return {"error_code": Errors.INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
        code, meta = await self._init(request.transactional_id, ms(request.transaction_timeout), expected)
        if code:
            return {"error_code": _fenced(code, version, 4), "producer_id": -1, "producer_epoch": -1}
        log.info("initialized transactional id %s: producer id %d, epoch %d", meta.transactional_id,
                 meta.producer_id, meta.producer_epoch)
        return {"error_code": Errors.NONE, "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch}

    async def _init(self, tid: str, timeout_ms: int, expected) -> tuple[int, ts.TxnMetadata | None]:
        if not tid:
            return Errors.INVALID_REQUEST, None
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return Errors.INVALID_TRANSACTION_TIMEOUT, None
        code, epoch = self._coordinator(tid)
        if code:
            return code, None
        meta = self.txns.get(tid)
        if meta is None:
            try:
                producer_id = await self.node.next_producer_id()
            except StorageError as exc:
                return int(exc.error_code), None
            if not self._still(tid, epoch):
                return Errors.NOT_COORDINATOR, None
            meta = self.txns.setdefault(tid, ts.TxnMetadata(tid, producer_id, timeout_ms=timeout_ms,
                                                            update_ms=wall_ms()))
        if meta.pending is not None:
            return Errors.CONCURRENT_TRANSACTIONS, None
        if expected is not None and not (
                meta.producer_epoch == ts.NO_PRODUCER_EPOCH or expected[0] == meta.producer_id
                or (expected[0] == meta.previous_producer_id and expected[1] >= ts.MAX_EPOCH - 1)):
            return Errors.PRODUCER_FENCED, None
        if meta.state in (ts.PREPARE_COMMIT, ts.PREPARE_ABORT):
            return Errors.CONCURRENT_TRANSACTIONS, None
        if meta.state == ts.ONGOING:
            # Abort the open transaction under a bumped epoch (the producer that began it is
            # fenced); the client retries on CONCURRENT_TRANSACTIONS and gets the next epoch.
            code = await self._fence_and_abort(tid)
            return code or Errors.CONCURRENT_TRANSACTIONS, None
        if meta.state not in (ts.EMPTY, ts.COMPLETE_COMMIT, ts.COMPLETE_ABORT):
            return Errors.UNKNOWN_SERVER_ERROR, None
        now = wall_ms()
        if meta.epoch_exhausted() and (expected is None or expected[1] == meta.producer_epoch):
            try:
                producer_id = await self.node.next_producer_id()
            except StorageError as exc:
                return int(exc.error_code), None
            if meta.pending is not None or self.txns.get(tid) is not meta:
                # A transition began while this waited (the expiry's Dead, another Init): Kafka's
                # check and transition are one step under the id's lock.
                return Errors.CONCURRENT_TRANSACTIONS, None
            new = meta.rotate_producer_id(producer_id, timeout_ms, now, expected is not None)
        else:
            new = meta.increment_epoch(timeout_ms, None if expected is None else expected[1], now)
            if isinstance(new, int):
                return new, None
        code = await self._write(meta, new, epoch)
        return code, (new if not code else None)

    async def _fence_and_abort(self, tid: str) -> int:
        """Kafka's epoch fence: bump the epoch of an Ongoing transaction in memory (its producer
        is fenced at once), then abort it under the bumped epoch."""
        meta = self.txns.get(tid)
        if meta is None or meta.state != ts.ONGOING or meta.pending is not None:
            return Errors.CONCURRENT_TRANSACTIONS
        fenced = meta.fence_epoch()
        if isinstance(fenced, int):
            return fenced
        meta.producer_epoch, meta.last_producer_epoch = fenced.producer_epoch, ts.NO_PRODUCER_EPOCH
        code = await self._end(tid, meta.producer_id, meta.producer_epoch, False, from_client=False)
        meta.failed_fence = code != Errors.NONE
        return code

    def _owned(self, tid: str, producer_id: int):
        """(error code, the id's metadata, coordinator epoch) of a request that names a
        transactional id and its producer id: an empty id, a coordinator elsewhere, or a producer
        id that is not the id's are refused before anything else (AddPartitionsToTxn, EndTxn)."""
        if not tid:
            return Errors.INVALID_REQUEST, None, -1
        code, cepoch = self._coordinator(tid)
        if code:
            return code, None, cepoch
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING, None, cepoch
        return Errors.NONE, meta, cepoch

    # ---- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------
    async def _add(self, tid: str, producer_id: int, epoch: int, partitions) -> int:
        code, meta, cepoch = self._owned(tid, producer_id)
        if code:
            return code
        if meta.producer_epoch != epoch:
            return Errors.PRODUCER_FENCED
        if meta.pending is not None or meta.state in (ts.PREPARE_COMMIT, ts.PREPARE_ABORT):
            return Errors.CONCURRENT_TRANSACTIONS
        if meta.state == ts.ONGOING and set(partitions) <= meta.partitions:
            return Errors.NONE
        return await self._write(meta, meta.add_partitions(partitions, wall_ms()), cepoch)

    async def _add_codes(self, tid: str, producer_id: int, epoch: int, wanted, *, verify_only: bool = False,
                         version: int = 3) -> dict:
        """(topic, partition) -> error code of one transaction's AddPartitionsToTxn: an unknown
        partition fails the request (the others OPERATION_NOT_ATTEMPTED), as Kafka's KafkaApis."""
        unknown = {tp for tp in wanted if self.node.partition_state(*tp) is None}
        if unknown:
            return {tp: Errors.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else Errors.OPERATION_NOT_ATTEMPTED
                    for tp in wanted}
        if verify_only:
            return self._verify(tid, producer_id, epoch, wanted)
        return dict.fromkeys(wanted, _fenced(await self._add(tid, producer_id, epoch, wanted), version, 2))

    def _verify(self, tid: str, producer_id: int, epoch: int, wanted) -> dict:
        """v4's verify_only (KIP-890, what a partition leader asks before it appends a
        transactional batch): NONE for the partitions in the transaction, INVALID_TXN_STATE for
        the others (Kafka's handleVerifyPartitionsInTransaction; v5's TRANSACTION_ABORTABLE is
        not served)."""
        code = Errors.INVALID_REQUEST if not tid else self._coordinator(tid)[0]
        meta = self.txns.get(tid) if not code else None
        if not code and (meta is None or meta.producer_id != producer_id):
            code = Errors.INVALID_PRODUCER_ID_MAPPING
        elif not code and meta.producer_epoch != epoch:
            code = Errors.PRODUCER_FENCED
        elif not code and meta.state in (ts.PREPARE_COMMIT, ts.PREPARE_ABORT):
            code = Errors.CONCURRENT_TRANSACTIONS
        if code:
            return dict.fromkeys(wanted, code)
        return {tp: Errors.NONE if tp in meta.partitions else Errors.INVALID_TXN_STATE for tp in wanted}

    @staticmethod
    def _by_topic(codes: dict) -> list[dict]:
        topics: dict[str, list] = {}
        for (topic, partition), code in codes.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
        return [{"name": t, "results_by_partition": ps} for t, ps in topics.items()]

    async def add_partitions_to_txn(self, header, request) -> dict:
        version = type(request).__version__
        if version >= 4:        # the batched broker form: one result per transaction
            results = []
            for txn in request.transactions:
                wanted = [(t.name, int(p)) for t in txn.topics for p in t.partitions]
                codes = await self._add_codes(txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted,
                                              verify_only=bool(txn.verify_only), version=version)
                results.append({"transactional_id": txn.transactional_id, "topic_results": self._by_topic(codes)})
            return {"error_code": Errors.NONE, "results_by_transaction": results}
        wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
        codes = await self._add_codes(request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                      request.v3_and_below_producer_epoch, wanted, version=version)
        return {"results_by_topic_v3_and_below": self._by_topic(codes)}

    async def add_offsets_to_txn(self, header, request) -> dict:
        await self.node.ensure_offsets_topic()
        partition = (OFFSETS_TOPIC, self.groups.partition_for(request.group_id))
        code = await self._add(request.transactional_id, request.producer_id, request.producer_epoch, [partition])
        return {"error_code": _fenced(code, type(request).__version__, 2)}

    # ---- EndTxn and the markers --------------------------------------------------------------
    async def end_txn(self, header, request) -> dict:
        code = await self._end(request.transactional_id, request.producer_id, request.producer_epoch,
                               bool(request.committed), from_client=True)
        return {"error_code": _fenced(code, type(request).__version__, 2)}

    async def _end(self, tid: str, producer_id: int, epoch: int, commit: bool, *, from_client: bool) -> int:
        code, meta, cepoch = self._owned(tid, producer_id)
        if code:
            return code
        if (from_client and epoch != meta.producer_epoch) or epoch < meta.producer_epoch:
            return Errors.PRODUCER_FENCED
        if meta.pending is not None:
            return Errors.CONCURRENT_TRANSACTIONS
        wanted, prepared = (ts.COMPLETE_COMMIT, ts.PREPARE_COMMIT) if commit else (ts.COMPLETE_ABORT, ts.PREPARE_ABORT)
        if meta.state == wanted:
            return Errors.NONE                              # a retry of an EndTxn that completed
        if meta.state == prepared:
            return Errors.CONCURRENT_TRANSACTIONS           # its markers are still in flight
        if meta.state != ts.ONGOING:
            return Errors.INVALID_TXN_STATE
        code = await self._write(meta, meta.prepare_end(commit, wall_ms()), cepoch)
        if code == Errors.NONE:
            self._spawn(self._send_markers(tid, cepoch))
        return code

    async def _send_markers(self, tid: str, cepoch: int) -> None:
        """Write the markers of the transaction prepared on `tid` to every partition's leader,
        then Complete*; gives up when this broker stops being the coordinator at `cepoch`."""
        meta = self.txns.get(tid)
        if meta is None or meta.state not in (ts.PREPARE_COMMIT, ts.PREPARE_ABORT):
            return
        commit = meta.state == ts.PREPARE_COMMIT
        remaining = set(meta.partitions)
        while remaining:
            if not self._still(tid, cepoch) or self.txns.get(tid) is not meta:
                return
            by_leader: dict[int, list] = {}
            for tp in sorted(remaining):
                state = self.node.partition_state(*tp)
                if state is None:           # the topic was deleted: nothing to mark
                    remaining.discard(tp)
                elif state.leader >= 0:
                    by_leader.setdefault(state.leader, []).append(tp)
            answers = await asyncio.gather(*(self._markers_to(leader, parts, meta, commit, cepoch)
                                             for leader, parts in by_leader.items()))
            for codes in answers:
                for tp, code in codes.items():
                    if code == Errors.NONE:
                        remaining.discard(tp)
                    elif code in _MARKERS_GIVE_UP:
                        log.warning("transactional id %s: marker on %s-%d refused with error %d: not completed",
                                    tid, *tp, code)
                        return
            if remaining:
                await asyncio.sleep(MARKER_RETRY_S)
        while self._still(tid, cepoch) and self.txns.get(tid) is meta:
            code = await self._write(meta, meta.complete(wall_ms()), cepoch)
            if code in (Errors.NONE, Errors.NOT_COORDINATOR):
                return
            await asyncio.sleep(MARKER_RETRY_S)

    async def _markers_to(self, leader: int, parts, meta: ts.TxnMetadata, commit: bool, cepoch: int) -> dict:
        marker = m.TxnMarker(meta.producer_id, meta.producer_epoch, commit, list(parts), cepoch)
        if leader == self.node.node_id:
            answer = await self.admin.write_markers([marker])
            return answer.errors.get(meta.producer_id, {})
        host, port = self.node.address_of(leader)
        if port < 0:
            return {}
        peer = self._peers.get(leader)
        if peer is None or (peer.host, peer.port) != (host, port):
            peer = self._peers[leader] = Peer(host, port, tls=self.node.peer_tls)
        topics: dict[str, list[int]] = {}
        for topic, partition in parts:
            topics.setdefault(topic, []).append(partition)
        body = {"markers": [{"producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                             "transaction_result": commit, "coordinator_epoch": cepoch,
                             "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]}
        try:
            answer = await peer.call(27, 1, body)
        except PeerError as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, exc)
            return {}
        return {(t.name, int(p.partition_index)): int(p.error_code)
                for mk in answer.markers for t in mk.topics for p in t.partitions}

    # ---- DescribeTransactions / ListTransactions ---------------------------------------------
    async def describe_transactions(self, header, request) -> dict:
        out = []
        for tid in request.transactional_ids:
            # an error row carries the fields' defaults, as Kafka's (0, not -1)
            row = {"transactional_id": tid, "transaction_state": "", "transaction_timeout": 0,
                   "transaction_start_time": 0, "producer_id": 0, "producer_epoch": 0, "topics": []}
            code = Errors.INVALID_REQUEST if not tid else self._coordinator(tid)[0]
            meta = self.txns.get(tid) if not code else None
            if not code and (meta is None or meta.state == ts.DEAD):
                code = Errors.TRANSACTIONAL_ID_NOT_FOUND
            if not code:
                topics: dict[str, list[int]] = {}
                for topic, partition in sorted(meta.partitions):
                    topics.setdefault(topic, []).append(partition)
                row.update(transaction_state=meta.state, transaction_timeout=meta.timeout_ms,
                           transaction_start_time=meta.start_ms, producer_id=meta.producer_id,
                           producer_epoch=meta.producer_epoch,
                           topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()])
            out.append({"error_code": code, **row})
        return {"transaction_states": out}

    async def list_transactions(self, header, request) -> dict:
        self.load_led_partitions()
        states = set(request.state_filters or ())
        producers = set(request.producer_id_filters or ())
        duration = getattr(request, "duration_filter", -1)
        now = wall_ms()
        rows = [{"transactional_id": tid, "producer_id": meta.producer_id, "transaction_state": meta.state}
                for tid, meta in sorted(self.txns.items())
                if self._led(meta) and (not states or meta.state in states)
                and (not producers or meta.producer_id in producers)
                and (duration < 0 or now - meta.start_ms >= duration)]
        return {"error_code": Errors.NONE, "unknown_state_filters": sorted(states - set(ts.STATES)),
                "transaction_states": rows}
