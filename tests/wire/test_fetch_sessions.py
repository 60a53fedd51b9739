"""Incremental fetch sessions (KIP-227, issue 32 item 4): the cache and the contexts, with cases
of Kafka's FetchSessionTest (core/src/test/scala/unit/kafka/server/FetchSessionTest.scala) in
our words, then Fetch frames against `storage serve`, then real consumers of many partitions
(kafka-python opens incremental sessions when the broker gives an id)."""
from __future__ import annotations

import re
import time

import pytest

from storage.core.errors import Errors
from storage.replication import messages as m
from storage.wire.fetch_sessions import INVALID_SESSION_ID, FetchManager, FetchSessionCache, next_epoch


class Clock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


def _parts(n: int, topic: str = "t") -> list:
    return [m.FetchPartition(topic, i, 0, -1, -1, -1, 1000) for i in range(n)]


def _answer(p, hw: int = 10, records: bytes = b"", error: int = Errors.NONE):
    return m.FetchResponsePartition(p.topic, p.partition, error, hw, 0, records=records)


def _full(manager, parts, *, privileged=False, version=12, hw=10):
    context = manager.new_context(version, 0, 0, privileged, parts, [], {"t": 5})
    assert context.kind == "full"
    return context.answer([_answer(p, hw) for p in parts])


# ---- the cache: FetchSessionTest's eviction cases ----------------------------------------------

def test_session_cache_evicts_by_staleness_then_size():
    """testSessionCache: three slots; a fourth evicts only a stale entry, then (once every
    entry is older than the eviction time) the smallest one if the newcomer is larger."""
    clock = Clock()
    cache = FetchSessionCache(3, 100, clock=clock)
    ids = [cache.maybe_create(False, dict.fromkeys(range(n)), False) for n in (10, 20, 30)]
    assert all(ids) and len(cache) == 3
    clock.now = 5
    cache.touch(cache.get(ids[2]), clock.now)     # so ids[1] is the least recently used (ids are random)
    clock.now = 10
    assert cache.maybe_create(False, dict.fromkeys(range(40)), False) == INVALID_SESSION_ID   # none old enough
    clock.now = 20
    cache.touch(cache.get(ids[0]), clock.now)
    clock.now = 115                   # ids[1] and ids[2] idle > 100 ms: the least recently used goes
    new = cache.maybe_create(False, dict.fromkeys(range(40)), False)
    assert new and cache.get(ids[1]) is None and len(cache) == 3
    clock.now = 120
    for session_id in (ids[0], ids[2], new):
        cache.touch(cache.get(session_id), clock.now)      # all used now, ids[0] and ids[2] older than 100
    assert cache.maybe_create(False, dict.fromkeys(range(5)), False) == INVALID_SESSION_ID   # smaller than all
    bigger = cache.maybe_create(False, dict.fromkeys(range(15)), False)
    assert bigger and cache.get(ids[0]) is None                  # the smallest evictable (10 partitions)
    assert cache.evictions == 2


def test_privileged_sessions_evict_consumers_and_are_kept():
    """testPrivilegedSessionHandling: a follower's session evicts a consumer's at once; a
    consumer's cannot evict a young follower's."""
    clock = Clock()
    cache = FetchSessionCache(2, 100, clock=clock)
    consumer = cache.maybe_create(False, dict.fromkeys(range(50)), False)
    follower = cache.maybe_create(True, dict.fromkeys(range(1)), False)
    follower2 = cache.maybe_create(True, dict.fromkeys(range(1)), False)
    assert follower2 and cache.get(consumer) is None          # privileged beats unprivileged
    clock.now = 50
    assert cache.maybe_create(False, dict.fromkeys(range(500)), False) == INVALID_SESSION_ID
    assert {follower, follower2} == set(cache.sessions)


def test_epochs_wrap_as_kafkas():
    assert (next_epoch(-1), next_epoch(0), next_epoch(7), next_epoch(2**31 - 1)) == (-1, 1, 8, 1)


# ---- contexts: FetchSessionTest.testIncrementalFetchSession and friends -------------------------

def test_incremental_fetch_answers_only_partitions_with_news():
    manager = FetchManager(FetchSessionCache(10, 1000, clock=Clock()))
    parts = _parts(4)
    code, session_id, answered = _full(manager, parts)
    assert code == Errors.NONE and session_id != INVALID_SESSION_ID and len(answered) == 4
    context = manager.new_context(12, session_id, 1, False, [], [], {})
    assert context.kind == "incremental" and [p.partition for p in context.partitions] == [0, 1, 2, 3]
    read = [_answer(parts[0]), _answer(parts[1], hw=11), _answer(parts[2], records=b"x" * 70),
            _answer(parts[3], error=Errors.NOT_LEADER_OR_FOLLOWER)]
    code, same, answered = context.answer(read)
    assert (code, same) == (Errors.NONE, session_id)
    assert [p.partition for p in answered] == [1, 2, 3]     # unchanged 0 left out
    # 2 returned records: it moves to the end of the session's order (fairness)
    context = manager.new_context(12, session_id, 2, False, [], [], {})
    assert [p.partition for p in context.partitions] == [0, 1, 3, 2]
    # an error is answered again until it goes away, then the partition once more
    code, _, answered = context.answer([_answer(parts[0]), _answer(parts[1], hw=11),
                                        _answer(parts[3]), _answer(parts[2])])
    assert [p.partition for p in answered] == [3]


def test_incremental_requests_update_add_and_forget_partitions():
    manager = FetchManager(FetchSessionCache(10, 1000, clock=Clock()))
    parts = _parts(3)
    _, session_id, _ = _full(manager, parts)
    moved = m.FetchPartition("t", 1, 55, -1, -1, -1, 1000)
    added = m.FetchPartition("u", 0, 0, -1, -1, -1, 1000)
    context = manager.new_context(12, session_id, 1, False, [moved, added], [("t", 0)], {})
    assert [(p.topic, p.partition, p.fetch_offset) for p in context.partitions] == [("t", 1, 55), ("t", 2, 0),
                                                                                     ("u", 0, 0)]
    context.answer([_answer(p) for p in context.partitions])
    # forgetting every partition closes the session: a sessionless answer (testZeroSizeFetchSession)
    context = manager.new_context(12, session_id, 2, False, [], [("t", 1), ("t", 2), ("u", 0)], {})
    assert context.kind == "sessionless" and manager.cache.get(session_id) is None


def test_session_errors_and_closing():
    manager = FetchManager(FetchSessionCache(10, 1000, clock=Clock()))
    _, session_id, _ = _full(manager, _parts(2))
    assert manager.new_context(12, session_id + 1, 1, False, [], [], {}).error == Errors.FETCH_SESSION_ID_NOT_FOUND
    assert manager.new_context(12, session_id, 5, False, [], [], {}).error == Errors.INVALID_FETCH_SESSION_EPOCH
    assert manager.new_context(13, session_id, 1, False, [], [], {}).error == Errors.FETCH_SESSION_TOPIC_ID_ERROR
    assert manager.new_context(12, session_id, 1, False, [], [], {}).kind == "incremental"
    # a repeated epoch (a retried request) is refused: the session moved on
    assert manager.new_context(12, session_id, 1, False, [], [], {}).error == Errors.INVALID_FETCH_SESSION_EPOCH
    # epoch -1 with the id: closed, and answered without a session
    context = manager.new_context(12, session_id, -1, False, _parts(2), [], {})
    assert context.kind == "sessionless" and context.answer([])[1] == INVALID_SESSION_ID
    assert manager.cache.get(session_id) is None


def test_a_full_fetch_with_no_room_gets_no_session():
    manager = FetchManager(FetchSessionCache(1, 1000, clock=Clock()))
    assert _full(manager, _parts(2))[1] != INVALID_SESSION_ID
    assert _full(manager, _parts(1))[1] == INVALID_SESSION_ID


# ---- Fetch frames against `storage serve` ------------------------------------------------------

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

from storage.core.records import build_batch  # noqa: E402
from storage.wire import codec  # noqa: E402
from tests.wire_support import Broker, raw_exchange  # noqa: E402

PARTITIONS = 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory, request):
    request.getfixturevalue  # noqa: B018 -- module scope, one broker for the frame tests
    b = Broker(tmp_path_factory.mktemp("sessions") / "data").start()
    yield b
    b.kill()


def _exchange(broker, key: int, version: int, body: dict):
    frame = codec.encode_request(key, version, 1, "sessions", body)
    answer = raw_exchange((broker.host, broker.port), frame)
    assert answer is not None, broker.stderr()[-3000:]
    return len(frame), len(answer), codec.decode_response(key, version, answer)[1]


def _create(broker, name: str, partitions: int):
    _, _, r = _exchange(broker, 19, 7, {"topics": [{"name": name, "num_partitions": partitions,
                                                     "replication_factor": 1, "assignments": [], "configs": []}],
                                         "timeout": 5000, "validate_only": False})
    assert r.topics[0].error_code == Errors.NONE
    _, _, meta = _exchange(broker, 3, 12, {"topics": [{"name": name, "topic_id": None}],
                                           "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
    return meta.topics[0].topic_id


def _produce(broker, topic: str, partition: int, value: bytes):
    _, _, r = _exchange(broker, 0, 9, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": build_batch([value])}]}]})
    assert r.responses[0].partition_responses[0].error_code == Errors.NONE


def _fetch(broker, version, session_id, epoch, topics, forgotten=(), topic_id=None):
    key = "topic_id" if version >= 13 else "topic"
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "",
            "forgotten_topics_data": [{key: topic_id if version >= 13 else name, "partitions": list(parts)}
                                      for name, parts in forgotten],
            "topics": [{key: topic_id if version >= 13 else name,
                        "partitions": [{"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
                                        "last_fetched_epoch": -1, "log_start_offset": -1,
                                        "partition_max_bytes": 1 << 16} for p, offset in parts]}
                       for name, parts in topics]}
    return _exchange(broker, 1, version, body)


def _answered(response) -> list[int]:
    return sorted(p.partition_index for t in response.responses for p in t.partitions)


@pytest.mark.parametrize("version", [12, 13])
def test_sessions_over_the_wire_and_the_bytes_they_save(broker, version):
    topic = f"many-v{version}"
    topic_id = _create(broker, topic, PARTITIONS)
    every = [(topic, [(p, 0) for p in range(PARTITIONS)])]
    full_request, full_answer, full = _fetch(broker, version, 0, 0, every, topic_id=topic_id)
    assert full.error_code == Errors.NONE and full.session_id != 0 and len(_answered(full)) == PARTITIONS
    session = full.session_id
    # nothing new: the incremental request names no partition and its answer holds none
    small_request, small_answer, quiet = _fetch(broker, version, session, 1, [], topic_id=topic_id)
    assert (quiet.error_code, quiet.session_id, _answered(quiet)) == (Errors.NONE, session, [])
    print(f"\nFetch v{version}, {PARTITIONS} partitions: full request {full_request} B, answer {full_answer} B; "
          f"incremental with no news: request {small_request} B, answer {small_answer} B")
    assert small_request * 10 < full_request and small_answer * 10 < full_answer
    # news on two partitions: only those come back, with their records
    _produce(broker, topic, 7, b"seven")
    _produce(broker, topic, 42, b"forty-two")
    _, _, news = _fetch(broker, version, session, 2, [], topic_id=topic_id)
    assert _answered(news) == [7, 42]
    # move 7 on (its offset updated in the session: nothing new there, not answered), forget 42;
    # news on 42 is then never answered, news on 7 is
    _, _, moved = _fetch(broker, version, session, 3, [(topic, [(7, 1)])], forgotten=[(topic, [42])],
                         topic_id=topic_id)
    assert _answered(moved) == []
    _produce(broker, topic, 42, b"forty-two again")
    _produce(broker, topic, 7, b"seven again")
    _, _, after = _fetch(broker, version, session, 4, [], topic_id=topic_id)
    assert _answered(after) == [7]
    (records,) = [p.records for t in after.responses for p in t.partitions]
    assert b"seven again" in bytes(records) and b"seven\x00" not in bytes(records)
    # errors: a wrong epoch, an unknown id, the other topic-id mode
    assert _fetch(broker, version, session, 9, [], topic_id=topic_id)[2].error_code == \
        Errors.INVALID_FETCH_SESSION_EPOCH
    assert _fetch(broker, version, session ^ 1, 5, [], topic_id=topic_id)[2].error_code == \
        Errors.FETCH_SESSION_ID_NOT_FOUND
    other = 12 if version == 13 else 13
    assert _fetch(broker, other, session, 5, [], topic_id=topic_id)[2].error_code == \
        Errors.FETCH_SESSION_TOPIC_ID_ERROR
    # close it: epoch -1 with the id answers in full, without a session; the id is gone
    _, _, closed = _fetch(broker, version, session, -1, [(topic, [(0, 0)])], topic_id=topic_id)
    assert (closed.error_code, closed.session_id, _answered(closed)) == (Errors.NONE, 0, [0])
    assert _fetch(broker, version, session, 5, [], topic_id=topic_id)[2].error_code == \
        Errors.FETCH_SESSION_ID_NOT_FOUND


def test_a_broker_with_no_session_slots_makes_no_session(tmp_path):
    b = Broker(tmp_path / "data", "--max-incremental-fetch-session-cache-slots", "0").start()
    try:
        _create(b, "t", 2)
        _, _, r = _fetch(b, 12, 0, 0, [("t", [(0, 0), (1, 0)])])
        assert (r.error_code, r.session_id, _answered(r)) == (Errors.NONE, 0, [0, 1])
    finally:
        b.kill()


def test_sessionless_fetch_makes_no_session(broker):
    _create(broker, "plain", 3)
    _, _, r = _fetch(broker, 12, 0, -1, [("plain", [(0, 0), (1, 0)])])
    assert (r.error_code, r.session_id, _answered(r)) == (Errors.NONE, 0, [0, 1])


# ---- real consumers of many partitions ---------------------------------------------------------

def test_kafka_python_consumes_many_partitions_through_an_incremental_session(tmp_path, monkeypatch):
    from kafka import KafkaConsumer, KafkaProducer
    monkeypatch.setenv("STORAGE_WIRE_LOG_LEVEL", "DEBUG")
    b = Broker(tmp_path / "data").start()
    try:
        _create(b, "wide", 60)
        producer = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5)
        sent = {(p, b"v-%d-%d" % (p, i)) for p in range(60) for i in range(3)}
        for p, value in sorted(sent):
            producer.send("wide", value=value, partition=p)
        producer.flush(30)
        consumer = KafkaConsumer("wide", bootstrap_servers=b.bootstrap, auto_offset_reset="earliest",
                                 group_id="wide-group", fetch_max_wait_ms=100)
        got, deadline = set(), time.monotonic() + 40
        while len(got) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                got |= {(r.partition, r.value) for r in records}
        # more records after the session is established: the incremental fetches carry them
        for p in (3, 59):
            producer.send("wide", value=b"late-%d" % p, partition=p)
            sent.add((p, b"late-%d" % p))
        producer.flush(30)
        while len(got) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                got |= {(r.partition, r.value) for r in records}
        idle = time.monotonic() + 2                 # a quiet while: incremental fetches with no news
        while time.monotonic() < idle:
            for records in consumer.poll(timeout_ms=300).values():
                got |= {(r.partition, r.value) for r in records}
        consumer.close()
        producer.close()
        assert got == sent
        lines = re.findall(r"fetch session (\d+) epoch (-?\d+) \((\w+)\): (\d+) partitions asked, (\d+) read, "
                           r"(\d+) answered", b.stderr())
        incremental = [line for line in lines if line[2] == "incremental"]
        assert incremental, "kafka-python never fetched incrementally"
        asked = [int(line[3]) for line in incremental]
        read = [int(line[4]) for line in incremental]
        print(f"\nkafka-python: {len(lines)} fetches, {len(incremental)} incremental; partitions named per "
              f"incremental request: max {max(asked)}, mean {sum(asked) / len(asked):.1f} (of {max(read)} read)")
        assert len(incremental) >= 5 and sorted(asked)[len(asked) // 2] == 0 and max(read) == 60
    finally:
        b.kill()


def test_confluent_kafka_consumes_many_partitions(tmp_path, monkeypatch):
    ck = pytest.importorskip("confluent_kafka")
    monkeypatch.setenv("STORAGE_WIRE_LOG_LEVEL", "DEBUG")
    b = Broker(tmp_path / "data").start()
    try:
        _create(b, "wide-ck", 40)
        producer = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        sent = {(p, b"v-%d-%d" % (p, i)) for p in range(40) for i in range(3)}
        for p, value in sorted(sent):
            producer.produce("wide-ck", value=value, partition=p)
        assert producer.flush(30) == 0
        consumer = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "wide-ck",
                                "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
        consumer.subscribe(["wide-ck"])
        got, deadline = set(), time.monotonic() + 40
        while len(got) < len(sent) and time.monotonic() < deadline:
            message = consumer.poll(0.3)
            if message is not None and message.error() is None:
                got.add((message.partition(), message.value()))
        consumer.close()
        assert got == sent
        kinds = re.findall(r"fetch session -?\d+ epoch -?\d+ \((\w+)\)", b.stderr())
        print(f"\nconfluent-kafka {ck.libversion()[0]}: {len(kinds)} fetches: "
              f"{ {k: kinds.count(k) for k in set(kinds)} }")
    finally:
        b.kill()
