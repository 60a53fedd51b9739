"""The leader's producer check in C (storage/log/producer_check.py, PLOG_VALIDATE_PRODUCERS): an
expected producer's next batch is checked and written by one C call; everything else comes
back to the Python check.  It is a cache of the producer state, so it must answer exactly as
the Python check does, whatever happened to the state in between."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import LogConfig, PartitionLog, build_batch
from storage.core import errors
from storage.log import producer, producer_check
from tests.tiers import examples

CONFIG = LogConfig(fsync=False, segment_bytes=4096)


def batch(pid, seq, count=1, *, epoch=0, txn=False):
    return build_batch([b"v" * 10] * count, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=txn)


def open_log(path, monkeypatch, *, in_c=True, python_fast=True):
    monkeypatch.setattr(producer_check, "ENABLED", in_c)
    log = PartitionLog.open(path, CONFIG)
    log._python_fast = python_fast
    return log


def state(log):
    return {pid: (e.producer_epoch, e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset,
                  [(m.last_seq, m.last_offset, m.offset_delta) for m in e.batch_metadata])
            for pid, e in log.producer_state.active_producers.items()}


def slots_in_use(log):
    v = log._leader_append["client"].v
    return [v.expected_id[i] for i in range(v.expected_count) if v.expected_id[i] >= 0]


def test_a_producers_next_batches_go_through_c(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", monkeypatch)
    log.append_as_leader(batch(7, 0), 0)                  # learnt by the Python check
    assert slots_in_use(log) == [7]
    changes = log.producer_state.changes
    for seq in range(1, 8):
        info = log.append_as_leader(batch(7, seq), 0)
        assert log._leader_append["client"].v.expected_hit == 0 and not info.duplicate
    assert log.producer_state.changes == changes         # C-checked: the manager never ran
    entry = log.producer_state.active_producers[7]
    assert [m.last_seq for m in entry.batch_metadata] == [3, 4, 5, 6, 7]
    assert entry.last_offset == 7
    assert log.append_as_leader(batch(7, 5), 0).duplicate          # a retry: back to the Python check
    with pytest.raises(errors.OutOfOrderSequenceError):
        log.append_as_leader(batch(7, 10), 0)
    log.close()


def test_a_truncation_empties_the_expectations(tmp_path, monkeypatch):
    """Without the changes counter, C would still expect sequence 5 after the cut and accept
    it where the log holds only sequences 0..2 (an out-of-order batch written)."""
    log = open_log(tmp_path / "t-0", monkeypatch)
    for seq in range(5):
        log.append_as_leader(batch(7, seq), 0)
    log.truncate_to(3)
    assert log.producer_state.active_producers[7].last_sequence == 2
    with pytest.raises(errors.OutOfOrderSequenceError):
        log.append_as_leader(batch(7, 5), 0)
    assert log.append_as_leader(batch(7, 3), 0).first_offset == 3
    log.close()


def test_a_change_it_did_not_make_is_seen_before_the_next_append(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", monkeypatch)
    log.append_as_leader(batch(7, 0), 0)
    log.append_as_leader(batch(7, 1), 0)
    # The state moves on without the leader's append path (as a reload or a follower would).
    log.producer_state.remove_expired_producers(now_ms=2**62)
    assert 7 not in log.producer_state.active_producers
    log.append_as_leader(batch(7, 0, epoch=1), 0)                 # a new epoch, from sequence 0
    assert log.producer_state.active_producers[7].producer_epoch == 1
    log.close()


def test_a_sequence_about_to_wrap_is_left_to_python(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", monkeypatch)
    top = 2**31 - 1
    log.append_as_leader(batch(7, top - 3), 0)
    log.append_as_leader(batch(7, top - 2, 2), 0)                # last sequence 2^31-2: still expected
    assert slots_in_use(log) == [7]
    log.append_as_leader(batch(7, top), 0)                       # C writes it, then forgets the producer
    assert slots_in_use(log) == []
    log.append_as_leader(batch(7, 0), 0)                         # the wrap, checked in Python
    assert log.producer_state.active_producers[7].last_sequence == 0
    log.close()


def test_many_producers_take_turns_in_the_slots(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", monkeypatch)
    producers = range(100, 100 + producer_check.SLOTS + 5)
    for seq in range(3):
        for pid in producers:
            log.append_as_leader(batch(pid, seq), 0)
    assert len(slots_in_use(log)) == producer_check.SLOTS
    assert all(log.producer_state.active_producers[p].last_sequence == 2 for p in producers)
    log.close()


# One step of the model: (kind, producer, epoch, sequence jump, record count, transactional)
_STEP = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 40), st.sampled_from([0, 0, 0, 1]),
              st.sampled_from([1, 1, 1, 1, 0, 2, -1]), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("pair"), st.integers(1, 4), st.just(0), st.just(1), st.integers(1, 2), st.just(False)),
    st.tuples(st.sampled_from(["truncate", "marker", "expire", "roll"]), st.integers(1, 40), st.just(0),
              st.integers(0, 30), st.just(1), st.booleans()),
)


def _data(step, nexts, top) -> bytes | None:
    kind, pid, epoch, jump, count, flag = step
    if kind not in ("append", "pair"):
        return None
    seq = max(nexts.get((pid, epoch), top) + jump - 1, 0) % 2**31
    data = batch(pid, seq, count, epoch=epoch, txn=flag and pid % 3 == 0)
    if kind == "pair":       # two producers' batches in one chunk
        data += batch(pid + 50, nexts.get((pid + 50, 0), 0), 1)
    return data


def _apply(log, step, data) -> tuple:
    kind, pid, epoch, jump, count, flag = step
    try:
        if data is not None:
            info = log.append_as_leader(data, 0)
            return ("ok", info.first_offset, info.last_offset, info.duplicate)
        if kind == "truncate":
            log.truncate_to(max(log.log_end_offset - jump, 0))
        elif kind == "marker":
            log.append_txn_marker(pid, epoch, flag, coordinator_epoch=0, leader_epoch=0)
        elif kind == "expire":
            log.remove_expired_producers(2**62)
        else:
            log.roll()
        return (kind, log.log_end_offset)
    except errors.ProducerStateError as exc:
        return (type(exc).__name__,)


@pytest.mark.examples
def test_the_c_check_answers_as_the_python_checks(tmp_path, monkeypatch):
    """Three logs take the same random steps -- appends from up to 40 producers (more than the
    slots), retries, gaps, epoch bumps, transactions, two producers in one chunk, truncations,
    markers, expiry, rolls, sequences near the wrap: the C check, the Python next-in-sequence
    path alone, and the general Python check answer alike and end in the same state."""
    import storage.log.partition
    monkeypatch.setattr(storage.log.partition, "_now_ms", lambda: 1_700_000_000_000)    # markers' timestamps alike
    runs = [0]

    @settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(_STEP, min_size=1, max_size=60), st.sampled_from([0, 2**31 - 6]))
    def check(steps, top):
        runs[0] += 1
        kinds = [(True, True), (False, True), (False, False)]
        logs = [open_log(tmp_path / f"{runs[0]}-{c}-{p}", monkeypatch, in_c=c, python_fast=p) for c, p in kinds]
        try:
            nexts = {}
            for step in steps:
                answers = []
                data = _data(step, nexts, top)
                for log in logs:
                    monkeypatch.setattr(producer, "_FAST_PATH", log._python_fast)
                    answers.append(_apply(log, step, data))
                assert answers[0] == answers[1] == answers[2], (step, answers)
                kind, pid, epoch, _jump, count, _flag = step
                if kind in ("append", "pair") and answers[0][0] == "ok" and not answers[0][3]:
                    seq = max(nexts.get((pid, epoch), top) + step[3] - 1, 0) % 2**31
                    nexts[(pid, epoch)] = (seq + count) % 2**31
                    if kind == "pair":
                        nexts[(pid + 50, 0)] = nexts.get((pid + 50, 0), 0) + 1
                assert state(logs[0]) == state(logs[1]) == state(logs[2]), step
                assert logs[0].log_end_offset == logs[1].log_end_offset == logs[2].log_end_offset
        finally:
            for log in logs:
                log.close()

    check()
