"""ReplicaManager.handle_produce's tuple form (the wire's express path, session 40): an acks 0 or 1
Produce given as (topic, partition, records) answers (error code, base offset, log start offset,
failure) without request or response objects, and does what the ProduceRequest form does --
the same checks in the same order, the same append, observers, stats and high watermark.

Each case runs on two fresh managers, one through each form, and compares the answers, the
logs, the observers' calls and the topic stats.
"""
from __future__ import annotations

import pytest

from storage import LogConfig, LogDir, Record, build_batch
from storage.core import io as sio
from storage.core.errors import Errors
from storage.replication.messages import RECOVERING, MetadataUpdate, ProduceRequest
from storage.replication.replica import ReplicaManager
from tests.replication.test_replica import TOPIC, _FailingWrites, brokers, state


def _manager(path, partition_state, policy: str) -> tuple[ReplicaManager, list]:
    config = LogConfig(fsync=False, cleanup_policy=policy)
    manager = ReplicaManager(1, LogDir.open(path, config), broker_epoch=101, clock=lambda: 1_000)
    manager.apply_metadata(MetadataUpdate(1, brokers()))
    manager.apply_partition_state(partition_state)
    calls = []
    manager.on_append = lambda key: calls.append(("append", key))
    manager.on_high_watermark = lambda key: calls.append(("high watermark", key))
    return manager, calls


def _corrupt() -> bytes:
    batch = bytearray(build_batch([b"x"] * 2))
    batch[-1] ^= 0xFF           # the last record's byte: the CRC no longer matches
    return bytes(batch)


CASES = {       # name: (partition state, partition produced to, records[, cleanup.policy])
    "led alone": (state(1, 2, [1], replicas=(1,)), 0, build_batch([b"p"] * 3)),
    "led, a follower in the ISR": (state(1, 2, [1, 2], replicas=(1, 2)), 0, build_batch([b"p"] * 3)),
    "a partition not hosted": (state(1, 2, [1], replicas=(1,)), 5, build_batch([b"p"])),
    "a follower": (state(2, 2, [1, 2]), 0, build_batch([b"p"])),
    "a RECOVERING leader (M17)": (state(1, 4, [1], replicas=(1,), recovery=RECOVERING), 0, build_batch([b"p"])),
    "a corrupt batch (CORRUPT_MESSAGE)": (state(1, 2, [1], replicas=(1,)), 0, _corrupt()),
    "a record without a key on a compacted topic (record errors)":
        (state(1, 2, [1], replicas=(1,)), 0, build_batch([Record(b"v", key=None)]), "compact"),
}


def _both(tmp_path, partition_state, partition, records, acks, seam=None, policy="delete"):
    """(answer, log end, high watermark, observer calls, topic stats) through each form: the
    object form's answer as (code, base offset, record errors, message), the tuple form's too,
    plus its log start offset beside the log's."""
    out = []
    for form in ("object", "tuple"):
        manager, calls = _manager(tmp_path / form, partition_state, policy)
        first = build_batch([Record(b"first", key=b"k")])
        manager.handle_produce(ProduceRequest(TOPIC, 0, first, acks))    # (refused alike off the lead)
        log = manager.logdir.partition(TOPIC, 0)
        if seam is not None:
            seam.armed = True
        if form == "object":
            a = manager.handle_produce(ProduceRequest(TOPIC, partition, records, acks))
            answer, start = (a.error_code, a.base_offset, a.record_errors, a.error_message), None
        else:
            code, base_offset, start, failure, append_time = manager.handle_produce((TOPIC, partition, records))
            answer = (code, base_offset, failure.record_errors if failure else (),
                      failure.produce_message if failure else None)
            assert start == (log.log_start_offset if code == Errors.NONE else -1)
            assert append_time == -1        # a CreateTime topic (tests/wire/test_log_append_time_wire.py: the other)
        out.append((answer, log.log_end_offset, log.high_watermark, calls, manager.topic_stats, manager.offline))
        if seam is not None:
            seam.armed = False
        if not manager.logdir.offline:
            manager.logdir.close()
    return out


@pytest.mark.parametrize("acks", [0, 1])
@pytest.mark.parametrize("case", CASES)
def test_the_tuple_form_answers_and_does_as_the_object_form(tmp_path, case, acks):
    partition_state, partition, records, *policy = CASES[case]
    by_object, by_tuple = _both(tmp_path, partition_state, partition, records, acks, policy=(policy or ["delete"])[0])
    assert by_tuple == by_object
    if case == "led alone":     # the high watermark is the log end: the leader is its only replica
        answer, end, high_watermark, calls, stats, _ = by_tuple
        assert answer[:2] == (Errors.NONE, 1) and end == high_watermark == 4
        assert calls == [("append", (TOPIC, 0)), ("high watermark", (TOPIC, 0))] * 2
        assert stats[TOPIC][1] == 4
    if case.endswith("(record errors)"):
        answer = by_tuple[0]
        assert answer[0] == Errors.INVALID_RECORD and answer[2] and answer[3], answer


def test_a_failed_write_takes_the_dir_offline_alike(tmp_path):
    seam = _FailingWrites()
    with sio.using(seam):
        by_object, by_tuple = _both(tmp_path, state(1, 2, [1], replicas=(1,)), 0, build_batch([b"p"]), 1, seam)
    assert by_tuple == by_object
    assert by_tuple[0][0] == Errors.KAFKA_STORAGE_ERROR and by_tuple[-1]      # answered, and offline
