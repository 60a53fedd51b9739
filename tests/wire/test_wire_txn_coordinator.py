"""The transaction coordinator's state machine and errors in raw frames (storage/wire/
txn_coordinator.py): cases of Kafka's TransactionCoordinatorTest (named where each is ported,
in our words), the transaction timeout (a periodic abort that fences the producer),
DescribeTransactions / ListTransactions (KIP-664), and the state found in `__transaction_state`
after a SIGKILL: a transaction in PrepareCommit is completed by the restarted coordinator."""
from __future__ import annotations

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

import os  # noqa: E402
import time  # noqa: E402

from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.dir.logdir import LogDir  # noqa: E402
from storage.wire import codec, txn_state  # noqa: E402
from tests.wire_support import Broker, raw_exchange  # noqa: E402

OPTIONS = ("--transaction-partitions", "3", "--transaction-max-timeout-ms", "60000",
           "--transaction-abort-interval-ms", "200")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("txn-coord") / "data", *OPTIONS).start()
    _ask(b, 3, 12, {"topics": [{"name": "data", "topic_id": 0}], "allow_auto_topic_creation": True,
                    "include_topic_authorized_operations": False})
    yield b
    b.stop()


def _ask(broker, key, version, body, correlation_id=7):
    frame = codec.encode_request(key, version, correlation_id, "txn-test", body)
    answer = raw_exchange((broker.host, broker.port), frame)
    assert answer is not None, broker.stderr()[-2000:]
    got_id, response = codec.decode_response(key, version, answer)
    assert got_id == correlation_id
    return response


def _find(broker, *ids):
    return _ask(broker, 10, 4, {"key_type": 1, "coordinator_keys": list(ids)}).coordinators


def _init(broker, tid, timeout_ms=30_000, pid=-1, epoch=-1, version=4):
    for _ in range(50):
        r = _ask(broker, 22, version, {"transactional_id": tid, "transaction_timeout": timeout_ms,
                                       "producer_id": pid, "producer_epoch": epoch})
        if r.error_code not in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                                Errors.CONCURRENT_TRANSACTIONS):
            return r
        _find(broker, tid)
        time.sleep(0.1)
    return r


def _add(broker, tid, pid, epoch, partitions=(("data", 0),), version=3):
    topics: dict = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    r = _ask(broker, 24, version, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                   "v3_and_below_producer_epoch": epoch,
                                   "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def _end(broker, tid, pid, epoch, commit, version=3):
    return _ask(broker, 26, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                      "committed": commit}).error_code


def _describe(broker, tid):
    return _ask(broker, 65, 0, {"transactional_ids": [tid]}).transaction_states[0]


def _wait_state(broker, tid, state, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = _describe(broker, tid)
        if got.transaction_state == state:
            return got
        time.sleep(0.1)
    raise AssertionError(f"{tid} never reached {state}: {got}")


def test_find_coordinator_batched_and_init(broker):
    coordinators = _find(broker, "a", "b")
    assert [c.error_code for c in coordinators] == [0, 0] and {c.node_id for c in coordinators} == {1}
    # shouldInitPidWithEpochZeroForNewTransactionalId / shouldIncrementEpoch...WhenExistingEmptyTransaction
    first = _init(broker, "t-init")
    assert first.error_code == 0 and first.producer_epoch == 0
    again = _init(broker, "t-init")
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, first.producer_id, 1)
    # shouldReturnInvalidRequestWhenTransactionalIdIsEmpty
    assert _init(broker, "").error_code == Errors.INVALID_REQUEST
    # the timeout above transaction.max.timeout.ms (and 0) is refused
    assert _init(broker, "t-init", timeout_ms=60_001).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
    assert _init(broker, "t-init", timeout_ms=0).error_code == Errors.INVALID_TRANSACTION_TIMEOUT


def test_kip360_expected_producer_id_and_epoch(broker):
    base = _init(broker, "t-360")
    # testInitProducerIdWithCurrentEpochProvided: the current epoch given, the epoch is bumped
    bumped = _init(broker, "t-360", pid=base.producer_id, epoch=base.producer_epoch)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, base.producer_id, 1)
    # a retry of that bump whose answer was lost: the same epoch again
    retry = _init(broker, "t-360", pid=base.producer_id, epoch=base.producer_epoch)
    assert (retry.error_code, retry.producer_epoch) == (0, 1)
    # testFenceProducerWhenMappingExistsWithDifferentProducerId
    assert _init(broker, "t-360", pid=base.producer_id + 999, epoch=0).error_code == Errors.PRODUCER_FENCED
    # testInitProducerIdStaleCurrentEpochProvided: once bumped again, epoch 0 is neither the current
    # nor the last epoch (v3 says INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis)
    assert _init(broker, "t-360", pid=base.producer_id, epoch=1).producer_epoch == 2
    stale = _init(broker, "t-360", pid=base.producer_id, epoch=0)
    assert stale.error_code == Errors.PRODUCER_FENCED
    assert _init(broker, "t-360", pid=base.producer_id, epoch=0, version=3).error_code == Errors.INVALID_PRODUCER_EPOCH
    # only one of id and epoch given
    assert _init(broker, "t-360", pid=base.producer_id, epoch=-1).error_code == Errors.INVALID_REQUEST


def test_add_partitions_and_end_txn_errors(broker):
    r = _init(broker, "t-add")
    pid, epoch = r.producer_id, r.producer_epoch
    # shouldRespondWithInvalidPidMappingOnAddPartitionsToTransactionWhenTransactionalIdNotPresent
    assert set(_add(broker, "t-unknown", pid, epoch).values()) == {Errors.INVALID_PRODUCER_ID_MAPPING}
    assert set(_add(broker, "t-add", pid + 1, epoch).values()) == {Errors.INVALID_PRODUCER_ID_MAPPING}
    # shouldRespondWithProducerFencedOnAddPartitionsWhenEpochsAreDifferent (v1: INVALID_PRODUCER_EPOCH)
    assert set(_add(broker, "t-add", pid, epoch + 1).values()) == {Errors.PRODUCER_FENCED}
    assert set(_add(broker, "t-add", pid, epoch + 1, version=1).values()) == {Errors.INVALID_PRODUCER_EPOCH}
    # an unknown partition fails the request; the others are not attempted
    assert _add(broker, "t-add", pid, epoch, [("data", 0), ("data", 7)]) == {
        ("data", 0): Errors.OPERATION_NOT_ATTEMPTED, ("data", 7): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    # EndTxn of an Empty transaction
    assert _end(broker, "t-add", pid, epoch, True) == Errors.INVALID_TXN_STATE
    # shouldReplyWithInvalidPidMappingOnEndTxnWhenTxnIdDoesntExist / ...PidDosentMatchMapped
    assert _end(broker, "t-none", pid, epoch, True) == Errors.INVALID_PRODUCER_ID_MAPPING
    assert _end(broker, "t-add", pid + 1, epoch, True) == Errors.INVALID_PRODUCER_ID_MAPPING
    assert _add(broker, "t-add", pid, epoch) == {("data", 0): Errors.NONE}
    described = _describe(broker, "t-add")
    assert (described.error_code, described.transaction_state, described.producer_id) == (0, "Ongoing", pid)
    assert [(t.topic, list(t.partitions)) for t in described.topics] == [("data", [0])]
    # shouldReturnInvalidEpochOnEndTxnWhenEpochIsLarger / ...Smaller
    assert _end(broker, "t-add", pid, epoch + 1, True) == Errors.PRODUCER_FENCED
    assert _end(broker, "t-add", pid, epoch + 1, True, version=1) == Errors.INVALID_PRODUCER_EPOCH
    assert _end(broker, "t-add", pid, epoch, True) == Errors.NONE
    _wait_state(broker, "t-add", "CompleteCommit")
    # shouldReturnOkOnEndTxnWhenStatusIsCompleteCommitAndResultIsCommit, and the opposite result refused
    assert _end(broker, "t-add", pid, epoch, True) == Errors.NONE
    assert _end(broker, "t-add", pid, epoch, False) == Errors.INVALID_TXN_STATE
    # shouldRespondWithSuccessOnAddPartitionsWhenStateIsCompleteCommit: the next transaction begins
    assert _add(broker, "t-add", pid, epoch) == {("data", 0): Errors.NONE}
    assert _end(broker, "t-add", pid, epoch, False) == Errors.NONE
    _wait_state(broker, "t-add", "CompleteAbort")
    assert _end(broker, "t-add", pid, epoch, False) == Errors.NONE
    assert _end(broker, "t-add", pid, epoch, True) == Errors.INVALID_TXN_STATE


def test_init_during_ongoing_transaction_fences_and_aborts(broker):
    """shouldAbortTransactionOnHandleInitPidWhenExistingTransactionInOngoingState: the open
    transaction is aborted under a bumped epoch, the client is told CONCURRENT_TRANSACTIONS and
    gets the epoch after it on its retry; the old epoch is fenced."""
    r = _init(broker, "t-fence")
    pid, epoch = r.producer_id, r.producer_epoch
    assert _add(broker, "t-fence", pid, epoch) == {("data", 0): Errors.NONE}
    first = _ask(broker, 22, 4, {"transactional_id": "t-fence", "transaction_timeout": 30_000,
                                 "producer_id": -1, "producer_epoch": -1})
    assert first.error_code == Errors.CONCURRENT_TRANSACTIONS
    again = _init(broker, "t-fence")
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, pid, epoch + 2)
    assert set(_add(broker, "t-fence", pid, epoch).values()) == {Errors.PRODUCER_FENCED}
    assert _end(broker, "t-fence", pid, epoch, True) == Errors.PRODUCER_FENCED


def test_timed_out_transaction_is_aborted_and_fenced(broker):
    """shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch: past transaction.timeout.ms the
    periodic check aborts the transaction with the producer's epoch bumped."""
    r = _init(broker, "t-timeout", timeout_ms=300)
    pid, epoch = r.producer_id, r.producer_epoch
    assert _add(broker, "t-timeout", pid, epoch) == {("data", 0): Errors.NONE}
    done = _wait_state(broker, "t-timeout", "CompleteAbort")
    assert done.producer_epoch == epoch + 1
    assert _end(broker, "t-timeout", pid, epoch, True) == Errors.PRODUCER_FENCED


def test_list_and_describe_transactions(broker):
    r = _init(broker, "t-list")
    assert _add(broker, "t-list", r.producer_id, r.producer_epoch) == {("data", 0): Errors.NONE}
    listed = _ask(broker, 66, 1, {"state_filters": ["Ongoing", "NoSuchState"], "producer_id_filters": [],
                                  "duration_filter": -1})
    assert listed.error_code == 0 and list(listed.unknown_state_filters) == ["NoSuchState"]
    assert ("t-list", r.producer_id, "Ongoing") in [(t.transactional_id, t.producer_id, t.transaction_state)
                                                    for t in listed.transaction_states]
    by_pid = _ask(broker, 66, 0, {"state_filters": [], "producer_id_filters": [r.producer_id]})
    assert [t.transactional_id for t in by_pid.transaction_states] == ["t-list"]
    # testDescribeTransactionsWithEmptyTransactionalId, and an id never seen
    assert _describe(broker, "").error_code == Errors.INVALID_REQUEST
    assert _describe(broker, "t-never").error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND
    assert _end(broker, "t-list", r.producer_id, r.producer_epoch, False) == Errors.NONE


def _txn_partition_leader_epoch(logs: str, partition: int) -> int:
    with LogDir.open(logs, LogConfig(fsync=False), background=False) as d:
        return d.partition("__transaction_state", partition).latest_epoch


def test_prepare_commit_found_after_sigkill_is_completed(tmp_path):
    """A coordinator killed between PrepareCommit and its markers: the restarted broker loads
    `__transaction_state`, sends the markers and writes CompleteCommit, so a read_committed
    fetch returns the transaction's records (the state is written into the stopped broker's
    log, as a SIGKILL right after the PrepareCommit write leaves it)."""
    b = Broker(tmp_path / "data", *OPTIONS).start()
    try:
        _ask(b, 3, 12, {"topics": [{"name": "data", "topic_id": 0}], "allow_auto_topic_creation": True,
                        "include_topic_authorized_operations": False})
        r = _init(b, "t-crash")
        pid, epoch = r.producer_id, r.producer_epoch
        assert _add(b, "t-crash", pid, epoch) == {("data", 0): Errors.NONE}
        batch = build_batch([b"x1", b"x2"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            is_transactional=True)
        produced = _ask(b, 0, 9, {"transactional_id": "t-crash", "acks": -1, "timeout": 5000, "topic_data": [
            {"name": "data", "partition_data": [{"index": 0, "records": batch}]}]})
        assert produced.responses[0].partition_responses[0].error_code == 0
    finally:
        b.kill()
    logs = os.path.join(b.data_dir, "logs")
    partition = txn_state.txn_partition("t-crash", 3)
    meta = txn_state.TxnMetadata("t-crash", pid, epoch, timeout_ms=30_000, state=txn_state.PREPARE_COMMIT,
                                 partitions={("data", 0)}, start_ms=int(time.time() * 1000),
                                 update_ms=int(time.time() * 1000))
    with LogDir.open(logs, LogConfig(fsync=False), background=False) as d:
        log = d.partition("__transaction_state", partition)
        log.append_as_leader(build_batch([(txn_state.record_key("t-crash"), txn_state.record_value(meta))]),
                             log.latest_epoch)
        log.flush()
    b.start()
    try:
        done = _wait_state(b, "t-crash", "CompleteCommit", 20)
        assert (done.producer_id, done.producer_epoch) == (pid, epoch)
        body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 1,
                "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                "topics": [{"topic": "data", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                            "fetch_offset": 0, "last_fetched_epoch": -1,
                                                            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
        part = _ask(b, 1, 12, body).responses[0].partitions[0]
        assert part.error_code == 0 and part.last_stable_offset == part.high_watermark == 3
        assert not part.aborted_transactions
    finally:
        b.stop()


def _offset_fetch(broker, group, stable):
    r = _ask(broker, 9, 8, {"groups": [{"group_id": group, "topics": [{"name": "data", "partition_indexes": [0]}]}],
                            "require_stable": stable})
    p = r.groups[0].topics[0].partitions[0]
    return p.error_code, p.committed_offset


def _txn_commit_offset(broker, tid, group, pid, epoch, offset):
    assert _ask(broker, 25, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                "group_id": group}).error_code == 0
    r = _ask(broker, 28, 3, {"transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                             "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                                 {"name": "data", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                  "committed_leader_epoch": -1,
                                                                  "committed_metadata": ""}]}]})
    return r.topics[0].partitions[0].error_code


def test_txn_offsets_visible_with_the_commit_marker_only(broker):
    """TxnOffsetCommit's offsets are not the group's until the commit marker lands: OffsetFetch
    without require_stable sees the offset before, with it (KIP-447) UNSTABLE_OFFSET_COMMIT;
    an aborted transaction's offsets never become visible."""
    r = _init(broker, "t-offsets")
    pid, epoch = r.producer_id, r.producer_epoch
    assert _txn_commit_offset(broker, "t-offsets", "g-txn", pid, epoch, 5) == 0
    assert _offset_fetch(broker, "g-txn", False) == (0, -1)
    assert _offset_fetch(broker, "g-txn", True) == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
    assert _end(broker, "t-offsets", pid, epoch, True) == 0
    _wait_state(broker, "t-offsets", "CompleteCommit")
    deadline = time.monotonic() + 10
    while _offset_fetch(broker, "g-txn", True)[1] != 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _offset_fetch(broker, "g-txn", True) == (0, 5)
    assert _txn_commit_offset(broker, "t-offsets", "g-txn", pid, epoch, 9) == 0
    assert _end(broker, "t-offsets", pid, epoch, False) == 0
    _wait_state(broker, "t-offsets", "CompleteAbort")
    deadline = time.monotonic() + 10
    while _offset_fetch(broker, "g-txn", True)[0] != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _offset_fetch(broker, "g-txn", True) == (0, 5)


def test_exhausted_epoch_gets_a_new_producer_id(tmp_path):
    """shouldGenerateNewProducerIdIfEpochsExhausted: a transactional id whose epoch reached
    Short.MaxValue - 1 (its record written into the stopped broker's `__transaction_state`)
    gets a new producer id at epoch 0 on its next InitProducerId; with KIP-360's expected
    id/epoch the old id is remembered, so a retry naming it is not fenced."""
    b = Broker(tmp_path / "data", *OPTIONS).start()
    try:
        old = _init(b, "t-exhausted")
    finally:
        b.stop()
    meta = txn_state.TxnMetadata("t-exhausted", old.producer_id, txn_state.MAX_EPOCH - 1, timeout_ms=30_000,
                                 state=txn_state.COMPLETE_COMMIT, update_ms=int(time.time() * 1000))
    with LogDir.open(os.path.join(b.data_dir, "logs"), LogConfig(fsync=False), background=False) as d:
        log = d.partition("__transaction_state", txn_state.txn_partition("t-exhausted", 3))
        log.append_as_leader(build_batch([(txn_state.record_key("t-exhausted"), txn_state.record_value(meta))]),
                             log.latest_epoch)
        log.flush()
    b.start()
    try:
        new = _init(b, "t-exhausted", pid=old.producer_id, epoch=txn_state.MAX_EPOCH - 1)
        assert new.error_code == 0 and new.producer_id != old.producer_id and new.producer_epoch == 0
        # testRetryInitProducerIdAfterProducerIdRotation: the same request again is the lost answer's retry
        again = _init(b, "t-exhausted", pid=old.producer_id, epoch=txn_state.MAX_EPOCH - 1)
        assert (again.error_code, again.producer_id) == (0, new.producer_id)
    finally:
        b.stop()


def test_add_partitions_v4_batched_and_verify_only(broker):
    """AddPartitionsToTxn v4, the broker form: several transactions in one request, and
    verify_only (testVerifyPartitionHandling): NONE for a partition in the transaction,
    INVALID_TXN_STATE for one that is not, PRODUCER_FENCED for another epoch, nothing added."""
    a, b = _init(broker, "t-v4-a"), _init(broker, "t-v4-b")

    def ask(*txns):
        r = _ask(broker, 24, 4, {"transactions": [
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "verify_only": verify,
             "topics": [{"name": "data", "partitions": [0]}]} for tid, pid, epoch, verify in txns]})
        assert r.error_code == 0
        return {t.transactional_id: [p.partition_error_code for tr in t.topic_results for p in tr.results_by_partition]
                for t in r.results_by_transaction}

    assert ask(("t-v4-a", a.producer_id, a.producer_epoch, True),
               ("t-v4-b", b.producer_id, b.producer_epoch, False)) == {"t-v4-a": [Errors.INVALID_TXN_STATE],
                                                                       "t-v4-b": [Errors.NONE]}
    assert ask(("t-v4-b", b.producer_id, b.producer_epoch, True)) == {"t-v4-b": [Errors.NONE]}
    assert ask(("t-v4-b", b.producer_id, b.producer_epoch + 1, True)) == {"t-v4-b": [Errors.PRODUCER_FENCED]}
    assert _end(broker, "t-v4-b", b.producer_id, b.producer_epoch, False) == 0


def _listed(broker) -> list[str]:
    listed = _ask(broker, 66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
    return [t.transactional_id for t in listed.transaction_states]


def _wait_forgotten(broker, *tids, timeout_s=15.0) -> None:
    """Until ListTransactions names none of `tids` (DescribeTransactions of an Empty id carries
    a start time of -1, as Kafka's, which kio's reader refuses)."""
    deadline = time.monotonic() + timeout_s
    while set(tids) & set(listed := _listed(broker)):
        assert time.monotonic() < deadline, f"{tids} were never forgotten: {listed}"
        time.sleep(0.1)


def test_idle_transactional_ids_expire_and_stay_forgotten_after_a_restart(tmp_path):
    """transactional.id.expiration.ms (Kafka's removeExpiredTransactionalIds, through the wire):
    an id left Empty and one left CompleteCommit are forgotten once idle past it -- gone from
    DescribeTransactions and ListTransactions, their tombstones in __transaction_state, so a
    restarted broker does not bring them back -- while an Ongoing transaction's id stays; the
    next InitProducerId of a forgotten id starts afresh with a new producer id."""
    options = (*OPTIONS, "--transactional-id-expiration-ms", "1000", "--transaction-remove-expired-interval-ms", "100")
    b = Broker(tmp_path / "data", *options).start()
    try:
        _ask(b, 3, 12, {"topics": [{"name": "data", "topic_id": 0}], "allow_auto_topic_creation": True,
                        "include_topic_authorized_operations": False})
        idle = _init(b, "t-idle")
        done = _init(b, "t-done")
        assert _add(b, "t-done", done.producer_id, done.producer_epoch) == {("data", 0): Errors.NONE}
        assert _end(b, "t-done", done.producer_id, done.producer_epoch, True) == Errors.NONE
        _wait_state(b, "t-done", "CompleteCommit")
        opened = _init(b, "t-open")
        assert _add(b, "t-open", opened.producer_id, opened.producer_epoch) == {("data", 0): Errors.NONE}
        _wait_forgotten(b, "t-idle", "t-done")
        assert _describe(b, "t-done").error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND
        assert _describe(b, "t-open").transaction_state == "Ongoing"
        assert _listed(b) == ["t-open"]
        again = _init(b, "t-idle")
        assert again.error_code == 0 and again.producer_id != idle.producer_id and again.producer_epoch == 0
    finally:
        b.stop()
    b.start()
    try:
        assert _describe(b, "t-done").error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND
        assert _describe(b, "t-open").transaction_state == "Ongoing"
        assert "t-done" not in _listed(b)
    finally:
        b.stop()
