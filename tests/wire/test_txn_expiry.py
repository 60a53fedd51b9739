"""Transactional id expiry (TxnCoordinator.expire_idle_ids, Kafka's
TransactionStateManager.removeExpiredTransactionalIds): the cases of Kafka's
TransactionStateManagerTest, in our words, against a coordinator whose node is a stand-in that
records the tombstone batches written to `__transaction_state` and answers them with a chosen
error.  The same through the wire, with a broker's restart: test_wire_txn_coordinator.py."""
from __future__ import annotations

import asyncio
import types

import pytest

from storage.core.errors import Errors, StorageError
from storage.core.records import iter_batches
from storage.replication.messages import PartitionState
from storage.wire import txn_state as ts
from storage.wire.rules import TRANSACTION_STATE_TOPIC
from storage.wire.txn_coordinator import TxnCoordinator, TxnSettings

PARTITIONS = 3
EPOCH = 5
OLD, RECENT = 0, 2**62          # update_ms: long idle, and in the future (never idle long enough)


class _Node:
    """The coordinator's view of its broker: it leads every __transaction_state partition at
    EPOCH; handle_produce keeps each batch and answers with `code` (or holds the answer when
    `hold` is set, for a test to release)."""

    def __init__(self, code: int = Errors.NONE, max_message_bytes: int = 1_048_588, offline=()):
        self.node_id, self.metadata_changes, self.code, self.hold = 1, 0, code, False
        self.written: dict[int, list[bytes]] = {}
        self.held: list = []
        self.leader, self.leader_epoch = 1, EPOCH
        self.manager = types.SimpleNamespace(handle_produce=self._produce)
        config = types.SimpleNamespace(max_message_bytes=max_message_bytes)

        def partition(topic, index):
            if index in offline:
                raise StorageError(f"{topic}-{index} is offline")
            return types.SimpleNamespace(config=config)
        self.logdir = types.SimpleNamespace(partition=partition)

    def partitions_of(self, topic):
        return [self.partition_state(topic, p) for p in range(PARTITIONS)]

    def partition_state(self, topic, partition):
        return PartitionState(topic, partition, self.leader, self.leader_epoch, 0, [1, 2], [1, 2])

    def pump(self):
        pass

    def _produce(self, request, callback):
        assert request.topic == TRANSACTION_STATE_TOPIC and request.acks == -1
        self.written.setdefault(request.partition, []).append(request.records)
        answer = types.SimpleNamespace(error_code=self.code)
        if self.hold:
            self.held.append(lambda: callback(answer))
        else:
            callback(answer)


def _coordinator(node: _Node, **metas: tuple[str, int]) -> TxnCoordinator:
    """A coordinator over `node` holding transactional id -> (state, update_ms)."""
    txn = TxnCoordinator(node, None, None, None, TxnSettings(partitions=PARTITIONS, id_expiration_ms=60_000))
    txn._loaded = {p: EPOCH for p in range(PARTITIONS)}
    for number, (tid, (state, update_ms)) in enumerate(metas.items()):
        partitions = {("data", 0)} if state in (ts.ONGOING, ts.PREPARE_COMMIT, ts.PREPARE_ABORT) else set()
        txn.txns[tid] = ts.TxnMetadata(tid, 1000 + number, 3, state=state, partitions=partitions,
                                       start_ms=update_ms, update_ms=update_ms)
    return txn


def _expire(txn: TxnCoordinator) -> int:
    async def run():
        found = txn.expire_idle_ids()
        await asyncio.gather(*txn._tasks)
        return found
    return asyncio.run(run())


def _tombstones(node: _Node) -> dict[int, list[list[str]]]:
    """partition -> each batch's transactional ids; every record a tombstone (no value)."""
    out: dict[int, list[list[str]]] = {}
    for partition, batches in node.written.items():
        for records in batches:
            for batch in iter_batches(records):
                ids = []
                for record in batch.records():
                    assert record.value is None
                    read = ts.read_record(record.key, None)
                    assert read is not None and read[1] is None
                    ids.append(read[0])
                out.setdefault(partition, []).append(ids)
    return out


def _usable(txn: TxnCoordinator, tid: str) -> bool:
    meta = txn.txns.get(tid)
    return meta is not None and meta.pending is None


@pytest.mark.parametrize("state", [ts.COMPLETE_COMMIT, ts.COMPLETE_ABORT, ts.EMPTY])
def test_idle_ids_in_an_expirable_state_are_removed(state):
    # shouldRemoveCompleteCommitExpiredTransactionalIds, ...CompleteAbort..., shouldRemoveEmpty...
    node = _Node()
    txn = _coordinator(node, one=(state, OLD), two=(state, RECENT))
    assert _expire(txn) == 1
    assert "one" not in txn.txns
    assert _usable(txn, "two")
    assert [ids for batches in _tombstones(node).values() for ids in batches] == [["one"]]
    assert list(node.written) == [txn.partition_for("one")]


def test_ids_stay_when_the_tombstone_write_fails():
    # shouldNotRemoveExpiredTransactionalIdsIfLogAppendFails
    node = _Node(code=Errors.NOT_ENOUGH_REPLICAS)
    txn = _coordinator(node, one=(ts.COMPLETE_ABORT, OLD), two=(ts.COMPLETE_ABORT, RECENT))
    assert _expire(txn) == 1
    assert _usable(txn, "one") and _usable(txn, "two")
    assert txn.txns["one"].state == ts.COMPLETE_ABORT


@pytest.mark.parametrize("state", [ts.ONGOING, ts.PREPARE_ABORT, ts.PREPARE_COMMIT])
def test_ids_with_a_transaction_open_or_ending_stay(state):
    # shouldNotRemoveOngoingTransactionalIds, shouldNotRemovePrepareAbort..., ...PrepareCommit...
    node = _Node()
    txn = _coordinator(node, one=(state, OLD), two=(state, RECENT))
    assert _expire(txn) == 0
    assert _usable(txn, "one") and _usable(txn, "two")
    assert node.written == {}


def test_tombstones_are_split_by_the_partitions_max_message_bytes():
    # testTransactionExpirationShouldRespectBatchSize: 1,000 ids, batches of at most 512 bytes
    node = _Node(max_message_bytes=512)
    ids = {f"txn-{n}": (ts.COMPLETE_COMMIT, OLD) for n in range(1000)}
    txn = _coordinator(node, **ids)
    assert _expire(txn) == 1000
    assert txn.txns == {}
    written = _tombstones(node)
    assert set(written) == set(range(PARTITIONS))
    for partition, batches in written.items():
        assert len(batches) > 1
        assert all(len(records) <= 512 for records in node.written[partition])
        assert all(txn.partition_for(tid) == partition for ids_ in batches for tid in ids_)
    assert sorted(tid for batches in written.values() for ids_ in batches for tid in ids_) == sorted(ids)


def test_a_batch_too_large_is_attempted_and_the_ids_stay():
    # testTransactionalExpirationWithTooSmallBatchSize: the expiry does not get stuck; each id
    # is tried in a batch of its own, refused (MESSAGE_TOO_LARGE), and stays
    node = _Node(code=Errors.MESSAGE_TOO_LARGE, max_message_bytes=16)
    ids = {f"txn-{n}": (ts.EMPTY, OLD) for n in range(20)}
    txn = _coordinator(node, **ids)
    assert _expire(txn) == 20
    assert all(len(records) > 16 for batches in node.written.values() for records in batches)
    assert sum(len(b) for b in node.written.values()) == 20
    assert all(_usable(txn, tid) for tid in ids)


def test_an_offline_partition_keeps_its_ids():
    # testTransactionalExpirationWithOfflineLogDir: partition 1's log is offline
    node = _Node(offline=(1,))
    ids = {f"txn-{n}": (ts.COMPLETE_ABORT, OLD) for n in range(20)}
    txn = _coordinator(node, **ids)
    on_one = {tid for tid in ids if txn.partition_for(tid) == 1}
    assert on_one and len(on_one) < len(ids)
    _expire(txn)
    assert set(node.written) == set(range(PARTITIONS)) - {1}
    assert set(txn.txns) == on_one


def test_an_id_never_initialized_expires():
    # testTransactionExpirationShouldNotFailWithUninitializedTransactionMetadata: InitProducerId
    # made the metadata (no epoch yet) and its write failed; the id is never used again
    node = _Node()
    txn = _coordinator(node)
    txn.txns["id"] = ts.TxnMetadata("id", 7, update_ms=OLD)
    assert txn.txns["id"].producer_epoch == ts.NO_PRODUCER_EPOCH
    assert _expire(txn) == 1
    assert txn.txns == {} and [ids for b in _tombstones(node).values() for ids in b] == [["id"]]


def test_an_id_is_busy_while_its_tombstone_is_written_and_stays_if_the_coordinator_moved():
    node = _Node()
    node.hold = True
    txn = _coordinator(node, one=(ts.EMPTY, OLD))

    async def run():
        assert txn.expire_idle_ids() == 1
        meta = txn.txns["one"]
        assert meta.pending == ts.DEAD           # InitProducerId and the rest answer CONCURRENT_TRANSACTIONS
        assert txn.expire_idle_ids() == 0        # not written twice
        while not node.held:
            await asyncio.sleep(0)               # the write task runs up to its acks=all wait
        node.leader_epoch = EPOCH + 1            # another broker led the partition meanwhile
        for release in node.held:
            release()
        await asyncio.gather(*txn._tasks)
        return meta
    meta = asyncio.run(run())
    assert txn.txns["one"] is meta and meta.pending is None


def test_partitions_led_elsewhere_are_left_to_their_coordinator():
    node = _Node()
    txn = _coordinator(node, one=(ts.EMPTY, OLD))
    node.leader = 2         # the partitions' leader is now another broker
    assert _expire(txn) == 0
    assert node.written == {} and _usable(txn, "one")


def test_an_init_waiting_for_a_producer_id_does_not_race_the_expiry():
    """InitProducerId of an idle id whose epoch is exhausted waits for a new producer id (KIP-360:
    node.next_producer_id); the expiry that starts meanwhile marks the id Dead and writes its
    tombstone.  Kafka's coordinator holds the id's lock from its check to its transition, so the
    two never interleave: here the Init, resumed, must see the pending expiry and answer
    CONCURRENT_TRANSACTIONS -- not write its own record over the expiry's (the tombstone then
    drops the id from memory while the producer holds the id and epoch the Init answered)."""
    node = _Node()
    node.hold = True
    txn = _coordinator(node)
    txn.txns["one"] = ts.TxnMetadata("one", 1000, ts.MAX_EPOCH - 1, state=ts.COMPLETE_COMMIT, update_ms=OLD)

    async def run():
        given = asyncio.get_running_loop().create_future()

        async def next_producer_id():
            return await given
        node.next_producer_id = next_producer_id
        init = asyncio.ensure_future(txn._init("one", 60_000, None))
        while not _waiting(init):
            await asyncio.sleep(0)
        assert txn.expire_idle_ids() == 1       # the id is Dead-pending; its tombstone is in flight
        given.set_result(2000)                  # the new producer id: the Init goes on
        for _ in range(5):
            await asyncio.sleep(0)
        while node.held:                        # the writes answered in their order
            node.held.pop(0)()
            for _ in range(5):
                await asyncio.sleep(0)
        code, new = await init
        await asyncio.gather(*txn._tasks)
        return code, new
    code, new = asyncio.run(run())
    if code == Errors.NONE:     # the Init won: the coordinator must know what it answered
        assert txn.txns.get("one") is not None and txn.txns["one"].producer_id == new.producer_id
    else:
        assert code == Errors.CONCURRENT_TRANSACTIONS and "one" not in txn.txns


def _waiting(task) -> bool:
    """Whether `task` waits on a future (it ran up to its first suspension)."""
    return getattr(task, "_fut_waiter", None) is not None
