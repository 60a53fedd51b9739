"""Transactions in the log: end-transaction markers, the last stable offset, the transaction
index and read_committed reads.  Our version of Kafka's TransactionIndexTest and of the
transaction cases of UnifiedLogTest and LogLoaderTest, named after them."""
import os
import struct

import pytest

from storage import LogConfig, PartitionLog, build_batch, iter_batches
from storage.core import errors
from storage.log.txnindex import ENTRY_BYTES, AbortedTxn, TransactionIndex

CONFIG = LogConfig(fsync=False, segment_bytes=5 << 20)
EPOCH = 0
TXNS = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]


# ---- the index file (TransactionIndexTest) ---------------------------------------------------

@pytest.fixture
def index(tmp_path):
    return TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"))


def test_position_set_correctly_when_opened(index):      # testPositionSetCorrectlyWhenOpened
    for txn in TXNS:
        index.append(txn)
    reopened = TransactionIndex(index.path)
    reopened.append(AbortedTxn(3, 50, 60, 55))
    assert TransactionIndex(index.path).entries() == TXNS + [AbortedTxn(3, 50, 60, 55)]


def test_entries_are_kafkas_34_bytes(index):             # testAbortedTxnSerde
    index.append(AbortedTxn(983493, 137, 299, 200))
    data = open(index.path, "rb").read()
    assert len(data) == ENTRY_BYTES == 34
    assert struct.unpack(">hqqqq", data) == (0, 983493, 137, 299, 200)


@pytest.mark.parametrize("last", [15, 10])
def test_last_offset_must_increase(index, last):         # testLastOffsetMustIncrease, testLastOffsetCannotDecrease
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(errors.StorageError):
        index.append(AbortedTxn(0, 0, last, 11))


def test_collect_aborted_transactions(index):            # testCollectAbortedTransactions
    for txn in TXNS:
        index.append(txn)
    assert index.collect(0, 100) == (TXNS, False)
    assert index.collect(0, 32) == (TXNS[:3], True)
    assert index.collect(0, 35) == (TXNS, True)
    assert index.collect(10, 35) == (TXNS, True)
    assert index.collect(11, 35) == (TXNS[1:], True)
    assert index.collect(20, 41) == (TXNS[2:], False)


def test_truncate(index):                                 # testTruncate
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    for txn in txns:
        index.append(txn)
    index.truncate_to(51)
    assert index.collect(0, 100)[0] == txns
    index.truncate_to(50)
    assert index.collect(0, 100)[0] == txns[:3]
    assert os.path.getsize(index.path) == 3 * ENTRY_BYTES
    index.truncate_to(0)
    assert index.collect(0, 100)[0] == [] and os.path.getsize(index.path) == 0


def test_a_torn_last_entry_is_cut_off_when_read(index):
    for txn in TXNS[:2]:
        index.append(txn)
    with open(index.path, "ab") as f:
        f.write(b"\x00" * 20)                             # a crash inside the third append
    assert TransactionIndex(index.path).entries() == TXNS[:2]
    assert os.path.getsize(index.path) == 2 * ENTRY_BYTES


def test_flush_of_a_new_index(index):                     # testFlush
    index.flush()
    assert not os.path.exists(index.path)                 # no file until the first entry
    assert index.append(AbortedTxn(0, 0, 10, 2)) is True  # created now: the dir needs a fsync
    index.flush()
    assert os.path.getsize(index.path) == ENTRY_BYTES


# ---- the log ---------------------------------------------------------------------------------

class Producer:
    """A transactional producer appending as a client would (sequences continue per producer)."""

    def __init__(self, log, pid, epoch=0):
        self.log, self.pid, self.epoch, self.seq = log, pid, epoch, 0

    def append(self, count, *, txn=True):
        info = self.log.append_as_leader(build_batch([b"r"] * count, producer_id=self.pid, producer_epoch=self.epoch,
                                                     base_sequence=self.seq, is_transactional=txn), EPOCH)
        self.seq += count
        return info

    def end(self, commit):
        return self.log.append_txn_marker(self.pid, self.epoch, commit, coordinator_epoch=0, leader_epoch=EPOCH)


def plain(log, count):
    return log.append_as_leader([b"p"] * count, EPOCH)


def aborted(log):
    return log.collect_aborted_transactions(0, log.log_end_offset)


@pytest.fixture
def log(tmp_path):
    with PartitionLog.open(tmp_path / "t-0", CONFIG) as opened:
        yield opened


def test_first_unstable_offset_with_transactional_data(log):   # testFirstUnstableOffsetWithTransactionalData
    p = Producer(log, 137, epoch=5)
    first = p.append(3)
    assert log.producer_state.first_unstable_offset() == first.first_offset
    p.append(1)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == first.first_offset == 0
    commit = p.end(True)
    assert log.producer_state.first_unstable_offset() == 0      # until the marker is below the HW
    assert log.last_stable_offset == 0
    log.update_high_watermark(commit.last_offset + 1)
    assert log.producer_state.first_unstable_offset() is None
    assert log.last_stable_offset == log.high_watermark == 5


def test_the_marker_is_kafkas_control_batch(log):
    p = Producer(log, 9, epoch=2)
    p.append(2)
    info = log.append_txn_marker(9, 2, False, coordinator_epoch=7, leader_epoch=EPOCH)
    assert (info.first_offset, info.last_offset) == (2, 2)
    marker = list(iter_batches(log.read(2, 1 << 20)))[0]
    assert marker.is_control and marker.is_transactional and marker.producer_id == 9 and marker.producer_epoch == 2
    [record] = marker.records()
    assert struct.unpack(">hh", record.key) == (0, 0) and struct.unpack(">hi", record.value) == (0, 7)   # ABORT


def test_transaction_index_updated(log):                  # testTransactionIndexUpdated
    p1, p2, p3, p4 = (Producer(log, pid) for pid in (1, 2, 3, 4))
    p1.append(5)          # 5
    plain(log, 3)         # 8
    p2.append(2)          # 10
    p1.append(4)          # 14
    p3.append(3)          # 17
    plain(log, 2)         # 19
    p1.append(10)         # 29
    p1.end(False)         # 30
    p2.append(6)          # 36
    p4.append(3)          # 39
    plain(log, 10)        # 49
    p3.append(9)          # 58
    p3.end(True)          # 59
    p4.append(8)          # 67
    p2.append(7)          # 74
    p2.end(False)         # 75
    plain(log, 10)        # 85
    p4.append(4)          # 89
    p4.end(True)          # 90
    assert aborted(log) == [AbortedTxn(1, 0, 29, 8), AbortedTxn(2, 8, 74, 36)]
    log.update_high_watermark(30)
    assert log.last_stable_offset == 8
    log.update_high_watermark(75)
    assert log.last_stable_offset == 36
    log.update_high_watermark(log.log_end_offset)
    assert log.producer_state.first_unstable_offset() is None and log.last_stable_offset == 90


def test_transaction_index_updated_through_replication(tmp_path, log):   # testTransactionIndexUpdatedThroughReplication
    p1, p2 = Producer(log, 1), Producer(log, 2)
    p1.append(5)
    plain(log, 3)
    p2.append(2)
    p1.end(False)
    p2.append(4)
    p2.end(False)
    with PartitionLog.open(tmp_path / "follower-0", CONFIG) as follower:
        follower.append_as_follower(bytes(log.read(0, 1 << 20)))
        assert aborted(follower) == aborted(log) == [AbortedTxn(1, 0, 10, 8), AbortedTxn(2, 8, 15, 16)]
        assert follower.producer_state.first_undecided_offset() is None


def test_last_stable_offset_with_mixed_producer_data(log):   # testLastStableOffsetWithMixedProducerData
    a, b = Producer(log, 137, epoch=5), Producer(log, 983, epoch=5)
    first = a.append(3)
    plain(log, 3)
    second = b.append(3)
    assert log.producer_state.first_unstable_offset() == first.first_offset
    abort = a.end(False)
    log.update_high_watermark(abort.last_offset + 1)
    assert log.last_stable_offset == second.first_offset
    commit = b.end(True)
    log.update_high_watermark(commit.last_offset + 1)
    assert log.last_stable_offset == log.log_end_offset


def test_aborted_transaction_spanning_multiple_segments(tmp_path):   # testAbortedTransactionSpanningMultipleSegments
    size = len(build_batch([b"a", b"b", b"c"], producer_id=137, producer_epoch=5, base_sequence=0,
                           is_transactional=True))
    with PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False, segment_bytes=size)) as log:
        p = Producer(log, 137, epoch=5)
        p.append(3)
        p.append(3)                                        # spills into the second segment
        assert [s.base_offset for s in log.segments] == [0, 3]
        abort = p.end(False)
        log.update_high_watermark(abort.last_offset + 1)
        assert log.producer_state.first_unstable_offset() is None
        assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(137, 0, 6, 7)]
        assert os.path.exists(tmp_path / "t-0" / f"{6:020d}.txnindex")
        assert not os.path.exists(tmp_path / "t-0" / f"{0:020d}.txnindex")


def test_fetch_up_to_last_stable_offset(log):             # testFetchUpToLastStableOffset
    p = Producer(log, 5)
    plain(log, 2)
    p.append(3)
    plain(log, 2)
    log.update_high_watermark(log.log_end_offset)
    committed = list(iter_batches(log.read(0, 1 << 20, isolation="read_committed")))
    assert [b.base_offset for b in committed] == [0]      # stops at the open transaction at 2
    assert bytes(log.read(2, 1 << 20, isolation="read_committed")) == b""
    uncommitted = list(iter_batches(log.read(0, 1 << 20, isolation="read_uncommitted")))
    assert [b.base_offset for b in uncommitted] == [0, 2, 5]
    p.end(True)
    assert [b.base_offset for b in iter_batches(log.read(0, 1 << 20, isolation="read_uncommitted"))] == [0, 2, 5]
    log.update_high_watermark(log.log_end_offset)
    assert [b.base_offset for b in iter_batches(log.read(0, 1 << 20, isolation="read_committed"))] == [0, 2, 5, 7]
    with pytest.raises(ValueError):
        log.read(0, 10, isolation="serializable")


def test_zombie_coordinator_and_fenced_producer(log):     # testZombieCoordinatorFencedEmptyTransaction, testEndTxnWithFencedProducerEpoch
    p = Producer(log, 1, epoch=1)
    p.append(1)
    log.append_txn_marker(1, 1, True, coordinator_epoch=2, leader_epoch=EPOCH)
    with pytest.raises(errors.TransactionCoordinatorFencedError):
        log.append_txn_marker(1, 1, True, coordinator_epoch=1, leader_epoch=EPOCH)
    with pytest.raises(errors.InvalidProducerEpochError):
        log.append_txn_marker(1, 0, False, coordinator_epoch=2, leader_epoch=EPOCH)
    assert log.log_end_offset == 2


def test_last_stable_offset_does_not_exceed_log_start_offset(log):
    # testLastStableOffsetDoesNotExceedLogStartOffsetMidSegment
    p = Producer(log, 1)
    plain(log, 1)
    p.append(3)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 1
    log.increment_log_start_offset(3)
    assert log.last_stable_offset == 3


def test_truncation_cuts_the_transaction_index_and_reopens_the_transaction(log):
    p = Producer(log, 1)
    p.append(3)
    abort = p.end(False)
    assert aborted(log) == [AbortedTxn(1, 0, 3, 4)]
    log.truncate_to(abort.last_offset)
    assert aborted(log) == []
    assert log.producer_state.first_undecided_offset() == 0      # the transaction is open again
    p.end(False)
    assert aborted(log) == [AbortedTxn(1, 0, 3, 4)]


@pytest.mark.parametrize("snapshots", ["kept", "deleted"])
def test_recovery_rebuilds_the_transaction_index(tmp_path, snapshots):
    # testFullTransactionIndexRecovery, testRecoverOnlyLastSegment, testRecoverLastSegmentWithNoSnapshots (LogLoaderTest)
    config = LogConfig(fsync=False, segment_bytes=1024)
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, config)
    producers = [Producer(log, pid) for pid in range(1, 6)]
    for round_ in range(6):
        for i, p in enumerate(producers):
            p.append(2)
            if (round_ + i) % 3 == 0:
                p.end((round_ + i) % 2 == 0)
            plain(log, 1)
    for p in producers:
        if log.producer_state.active_producers[p.pid].current_txn_first_offset is not None:
            p.end(False)
    expected, end = aborted(log), log.log_end_offset
    assert len(expected) > 3 and len(log.segments) > 3
    log.close()
    for name in os.listdir(path):
        if name.endswith(".txnindex") or (snapshots == "deleted" and name.endswith(".snapshot")):
            os.unlink(path / name)
    with PartitionLog.open(path, config) as again:            # unclean: every segment recovered
        assert again.log_end_offset == end
        assert aborted(again) == expected                     # every index derived again
    for name in os.listdir(path):
        if name.endswith(".txnindex"):
            os.unlink(path / name)
    newest = max(s for s in (int(n[:20]) for n in os.listdir(path) if n.endswith(".snapshot")))
    with PartitionLog.open(path, config, clean_shutdown=True) as again:   # nothing recovered
        # the index below the newest snapshot is trusted as it is (here: deleted by hand)
        assert aborted(again) == [t for t in expected if t.last_offset >= newest]


def test_a_damaged_index_tail_is_dropped_not_trusted_nor_fatal(index):
    """CI swarm seeds 371858 and 371924: torn sectors left a transaction index whose tail was
    garbage (an unknown version); the partition refused to open.  It is derived data: the
    tail from the first bad entry goes, and the load's replay writes what belongs there."""
    for txn in TXNS[:2]:
        index.append(txn)
    with open(index.path, "ab") as f:
        f.write(struct.pack(">hqqqq", 7, 1, 2, 3, 4) + struct.pack(">hqqqq", 0, 1, 9, 3, 4))   # bad version; first > last
    assert TransactionIndex(index.path).entries() == TXNS[:2]
    assert os.path.getsize(index.path) == 2 * ENTRY_BYTES
