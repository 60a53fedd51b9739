"""What a client may not do, over TCP: write to, create or delete the internal topics (on a
broker, embedded or in a cluster, and on the controller's port), fetch as the leader's own
follower, make one Fetch answer grow past max_bytes or with copies of a partition, write
control batches, or transactional ones in a request that names no transactional id.  After each refused
request the broker restarts and its groups work."""
from __future__ import annotations

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")

from storage.core.errors import Errors  # noqa: E402
from storage.core.records import build_batch, iter_batches  # noqa: E402
from storage.wire import codec  # noqa: E402
from storage.wire.client import CLIENT_ID as BROKER_CLIENT_ID  # noqa: E402
from storage.wire.group_model import offsets_partition  # noqa: E402
from storage.wire.rules import INTERNAL_TOPICS  # noqa: E402
from tests.wire_support import Broker, raw_exchange  # noqa: E402

OFFSETS = "__consumer_offsets"


def ask(node, key, version, body, client_id="rules-test"):
    frame = codec.encode_request(key, version, 7, client_id, body)
    answer = raw_exchange((node.host, node.port), frame)
    assert answer is not None, node.stderr()[-3000:]
    return codec.decode_response(key, version, answer)[1]


def produce(node, topic, records, partition=0, acks=1):
    return ask(node, 0, 9, {"transactional_id": None, "acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]}).responses[0] \
        .partition_responses[0]


def create(node, name, partitions=1, configs=None):
    return ask(node, 19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                         "assignments": [], "configs": [{"name": k, "value": v}
                                                                        for k, v in (configs or {}).items()]}],
                             "timeout": 5000, "validate_only": False}).topics[0]


def delete(node, name):
    return ask(node, 20, 6, {"topics": [{"name": name, "topic_id": 0}], "timeout": 5000}).responses[0]


def metadata(node, topic):
    return ask(node, 3, 12, {"topics": [{"name": topic, "topic_id": 0}], "allow_auto_topic_creation": True,
                             "include_topic_authorized_operations": False}).topics[0]


def find_coordinator(node, group):
    return ask(node, 10, 3, {"key": group, "key_type": 0})


def commit(node, group, offset, topic="data"):
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    return ask(node, 8, 8, body).topics[0].partitions[0].error_code


def committed(node, group, topic="data"):
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}], "require_stable": False}
    part = ask(node, 9, 7, body).topics[0].partitions[0]
    return part.error_code, part.committed_offset


def group_works(node, group, offset):
    """FindCoordinator, OffsetCommit and OffsetFetch of `group` answer as Kafka's would."""
    found = find_coordinator(node, group)
    assert found.error_code == 0, found
    assert create(node, "data").error_code in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS)   # commits need the topic
    assert commit(node, group, offset) == 0
    assert committed(node, group) == (0, offset)


def fetch(node, parts, max_bytes, replica_id=-1, version=12):
    """parts: [(topic, partition, offset, partition_max_bytes)] in this order; the answer's
    [(topic, partition, error, records)] in the answer's order."""
    topics = []
    for topic, partition, offset, partition_max in parts:
        if not topics or topics[-1]["topic"] != topic:
            topics.append({"topic": topic, "partitions": []})
        topics[-1]["partitions"].append({"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                                         "last_fetched_epoch": -1, "log_start_offset": -1,
                                         "partition_max_bytes": partition_max})
    body = {"replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [], "topics": topics}
    answer = ask(node, 1, version, body)
    return [(t.topic, p.partition_index, p.error_code, bytes(p.records or b""))
            for t in answer.responses for p in t.partitions]


def end_offset(node, topic, partition=0):
    answer = ask(node, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
    return answer.topics[0].partitions[0].offset


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data").start()
    yield b
    b.stop()


# ---- item: internal topics ---------------------------------------------------------------------

def test_a_client_cannot_create_the_offsets_topic_before_the_first_group_request(broker):
    """Kafka's answer for __cluster_metadata (ControllerApis.createTopics: INVALID_REQUEST),
    here for every internal topic: a 1-partition, delete-policy __consumer_offsets would make
    every group's coordinator a partition that does not exist."""
    for name in sorted(INTERNAL_TOPICS):
        made = create(broker, name, 1, {"cleanup.policy": "delete"})
        assert made.error_code == Errors.INVALID_REQUEST and name in made.error_message, made
    group_works(broker, "g1", 5)
    described = ask(broker, 32, 4, {"resources": [{"resource_type": 2, "resource_name": OFFSETS,
                                                   "configuration_keys": ["cleanup.policy"]}],
                                    "include_synonyms": False, "include_documentation": False}).results[0]
    assert [(c.name, c.value) for c in described.configs] == [("cleanup.policy", "compact")]
    assert len(metadata(broker, OFFSETS).partitions) == 5            # the broker's --offsets-partitions
    broker.stop()
    broker.start()
    assert committed(broker, "g1") == (0, 5)
    group_works(broker, "g2", 6)


def test_metadata_auto_creates_no_internal_topic_but_other_double_underscore_names(broker):
    """Only the internal names are the broker's: Kafka auto-creates `__mine` as any other topic."""
    for name in sorted(INTERNAL_TOPICS):
        assert metadata(broker, name).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    made = metadata(broker, "__mine")
    assert made.error_code == 0 and len(made.partitions) == 1 and not made.is_internal
    assert delete(broker, "__mine").error_code == 0
    group_works(broker, "g", 1)
    described = metadata(broker, OFFSETS)
    assert described.is_internal and len(described.partitions) == 5


def test_a_client_cannot_delete_or_produce_to_an_internal_topic(broker):
    group_works(broker, "victim", 3)
    for name in sorted(INTERNAL_TOPICS):
        gone = delete(broker, name)
        assert gone.error_code == Errors.INVALID_REQUEST and name in gone.error_message, gone
    assert len(metadata(broker, OFFSETS).partitions) == 5
    # A forged commit for another group, written where the coordinator would read it after a
    # restart: Kafka's ReplicaManager refuses it (INVALID_TOPIC_EXCEPTION).
    forged_key = b"\x00\x01" + b"\x00\x06victim" + b"\x00\x04data" + b"\x00\x00\x00\x00"
    forged_value = b"\x00\x01" + (999).to_bytes(8, "big") + b"\x00\x00" + (0).to_bytes(8, "big") \
        + (-1).to_bytes(8, "big", signed=True)
    victim_partition = offsets_partition("victim", 5)
    before = end_offset(broker, OFFSETS, victim_partition)
    answer = produce(broker, OFFSETS, build_batch([(forged_key, forged_value)]), partition=victim_partition)
    assert answer.error_code == Errors.INVALID_TOPIC_EXCEPTION and OFFSETS in answer.error_message
    assert end_offset(broker, OFFSETS, victim_partition) == before
    for name in ("__transaction_state", "__cluster_metadata"):
        assert produce(broker, name, build_batch([b"x"])).error_code == Errors.INVALID_TOPIC_EXCEPTION
    broker.stop()
    broker.start()
    assert committed(broker, "victim") == (0, 3)
    group_works(broker, "other", 4)


def test_the_coordinator_hashes_over_the_partitions_the_offsets_topic_has(tmp_path):
    """A broker restarted with another --offsets-partitions keeps finding its groups: Kafka's
    coordinator takes the count from the topic (offsets.topic.num.partitions only creates it)."""
    data = tmp_path / "data"
    first = Broker(data, "--offsets-partitions", "2").start()
    try:
        groups = [f"group-{i}" for i in range(8)]
        assert {offsets_partition(g, 5) for g in groups} - {0, 1}     # some hash past partition 1 over 5
        for i, g in enumerate(groups):
            group_works(first, g, i + 10)
    finally:
        first.stop()
    again = Broker(data).start()            # --offsets-partitions 5 now
    try:
        assert len(metadata(again, OFFSETS).partitions) == 2
        for i, g in enumerate(groups):
            assert committed(again, g) == (0, i + 10)
            group_works(again, g, i + 20)
    finally:
        again.stop()


def test_list_groups_after_a_restart_with_fewer_offsets_partitions_lists_every_group(tmp_path):
    """The coordinator loads every offsets partition the topic has when it takes them over, not
    only the first --offsets-partitions: a restart with a smaller flag still lists every group."""
    data = tmp_path / "data"
    first = Broker(data).start()            # --offsets-partitions 5
    try:
        groups = [f"listed-{i}" for i in range(8)]
        assert {offsets_partition(g, 5) for g in groups} - {0, 1}
        for i, g in enumerate(groups):
            group_works(first, g, i + 10)
    finally:
        first.stop()
    again = Broker(data, "--offsets-partitions", "2").start()
    try:
        listed = ask(again, 16, 4, {"states_filter": []})
        assert listed.error_code == 0 and sorted(g.group_id for g in listed.groups) == sorted(groups)
    finally:
        again.stop()


def test_the_controller_port_refuses_clients_internal_topics(tmp_path):
    """The controller process applies the rule itself: a client that sends CreateTopics or
    DeleteTopics straight to it is refused; a broker's creation (its client id) passes the rule
    (here to be refused for want of registered brokers: the slow cluster test creates it)."""
    controller = Broker(tmp_path / "controller", command="controller").start()
    try:
        for name in sorted(INTERNAL_TOPICS):
            made = create(controller, name, 1, {"cleanup.policy": "delete"})
            assert made.error_code == Errors.INVALID_REQUEST and name in made.error_message, made
        for name in (OFFSETS, "__transaction_state", "__cluster_metadata"):
            assert delete(controller, name).error_code == Errors.INVALID_REQUEST, name
        by_broker = ask(controller, 19, 7, {"topics": [{"name": OFFSETS, "num_partitions": 3, "replication_factor": 1,
                                                        "assignments": [], "configs": []}],
                                            "timeout": 5000, "validate_only": False}, client_id=BROKER_CLIENT_ID)
        assert by_broker.topics[0].error_code == Errors.INVALID_REPLICATION_FACTOR
    finally:
        controller.stop()


@pytest.mark.slow
def test_internal_topics_in_a_cluster_and_on_the_controller_port(tmp_path):
    """The same rules at a cluster broker (which forwards to the controller) and at the
    controller's own port; a cluster broker still creates the offsets topic itself."""
    controller = Broker(tmp_path / "controller", command="controller").start()
    node = None
    try:
        node = Broker(tmp_path / "broker-1", "--node-id", "1", "--controller", f"127.0.0.1:{controller.port}").start()
        group_works(node, "g", 7)
        assert len(metadata(node, OFFSETS).partitions) == 5
        for target in (controller, node):
            for name in (OFFSETS, "__transaction_state", "__cluster_metadata"):
                assert delete(target, name).error_code == Errors.INVALID_REQUEST, (target.command, name)
        assert len(metadata(node, OFFSETS).partitions) == 5
        for target in (controller, node):
            for name in sorted(INTERNAL_TOPICS):
                made = create(target, name, 1, {"cleanup.policy": "delete"})
                assert made.error_code == Errors.INVALID_REQUEST, (target.command, made)
        assert produce(node, OFFSETS, build_batch([b"x"])).error_code == Errors.INVALID_TOPIC_EXCEPTION
        node.stop()
        node.start()
        assert committed(node, "g") == (0, 7)
        group_works(node, "h", 8)
    finally:
        if node is not None:
            node.stop()
        controller.stop()


# ---- item: fetch as the leader ---------------------------------------------------------------------

def test_a_fetch_with_the_leaders_own_id_is_refused_and_acks_all_still_completes(broker):
    metadata(broker, "data")
    assert produce(broker, "data", build_batch([b"a"])).error_code == 0
    for version in (12, 4):
        answer = fetch(broker, [("data", 0, 0, 1 << 20)], 1 << 20, replica_id=1, version=version)
        assert answer[0][2] == Errors.NOT_LEADER_OR_FOLLOWER and not answer[0][3]
    answer = produce(broker, "data", build_batch([b"b"]), acks=-1)
    assert answer.error_code == 0 and answer.base_offset == 1
    got = fetch(broker, [("data", 0, 0, 1 << 20)], 1 << 20)
    assert got[0][2] == 0 and _values(got[0][3]) == [b"a", b"b"]


def test_a_fetch_with_any_negative_replica_id_reads_as_a_consumer(broker):
    """Kafka's FetchRequest.isConsumer: -2 (the debugging consumer) and any other negative id
    fetch as a consumer, up to the high watermark; only ids >= 0 are followers."""
    metadata(broker, "neg")
    assert produce(broker, "neg", build_batch([b"a"])).error_code == 0
    for replica_id in (-2, -7):
        got = fetch(broker, [("neg", 0, 0, 1 << 20)], 1 << 20, replica_id=replica_id)
        assert got[0][2] == 0 and _values(got[0][3]) == [b"a"]


# ---- item: fetch size (KIP-74) ---------------------------------------------------------------------

@pytest.fixture
def capped(tmp_path):
    b = Broker(tmp_path / "capped", "--fetch-max-bytes", "20000", "--num-partitions", "3").start()
    yield b
    b.stop()


def _fill(node, topic, partitions, batches, value_bytes):
    """Each partition gets `batches` batches of one record of `value_bytes`; the batch size."""
    metadata(node, topic)
    size = 0
    for p in range(partitions):
        for _ in range(batches):
            batch = build_batch([bytes([65 + p]) * value_bytes])
            size = len(batch)
            assert produce(node, topic, batch, partition=p).error_code == 0
    return size


def test_fetch_respects_partition_order_and_size_limits(capped):
    """Ported from Kafka's FetchRequestTest.testBrokerRespectsPartitionsOrderAndSizeLimits:
    the partitions in request order, each up to its partition_max_bytes, the total up to
    max_bytes, a later partition only with what fits; the request order decides who gets data."""
    batch = _fill(capped, "ordered", 3, 4, 1000)
    parts = [("ordered", p, 0, 2 * batch + 10) for p in (2, 0, 1)]
    got = fetch(capped, parts, 3 * batch + 10)
    assert [(t, p, e) for t, p, e, _ in got] == [("ordered", p, 0) for p in (2, 0, 1)]
    sizes = [len(r) for *_, r in got]
    assert sizes == [2 * batch, batch, 0]                         # 2 fit, then 1 of the 2 that would
    assert sum(sizes) <= 3 * batch + 10
    got = fetch(capped, [("ordered", p, 0, 2 * batch + 10) for p in (1, 2, 0)], 3 * batch + 10)
    assert [len(r) for *_, r in got] == [2 * batch, batch, 0]
    assert [_values(r) for *_, r in got[:2]] == [[b"B" * 1000] * 2, [b"C" * 1000]]    # each one's own records


def _values(records: bytes) -> list[bytes]:
    return [r.value for b in iter_batches(records) for r in b.records()]


def test_the_first_batch_comes_whole_even_past_every_limit(capped):
    batch = _fill(capped, "large", 2, 1, 30_000)                  # larger than --fetch-max-bytes 20000
    got = fetch(capped, [("large", 0, 0, 100), ("large", 1, 0, 100)], 100)
    assert [len(r) for *_, r in got] == [batch, 0]
    got = fetch(capped, [("large", 0, 1, 100), ("large", 1, 0, 100)], 100)   # partition 0 at its end
    assert [len(r) for *_, r in got] == [0, batch]


def test_the_broker_caps_max_bytes_with_fetch_max_bytes(capped):
    batch = _fill(capped, "capped", 3, 10, 1000)
    got = fetch(capped, [("capped", p, 0, 1 << 20) for p in range(3)], 1 << 30)
    total = sum(len(r) for *_, r in got)
    assert 20000 - batch < total <= 20000


def test_a_partition_listed_many_times_is_answered_once(capped):
    batch = _fill(capped, "copies", 1, 15, 1000)
    assert 15 * batch < 20000
    got = fetch(capped, [("copies", 0, 0, 1 << 20)] * 300, 1 << 30)
    assert len(got) == 1 and len(got[0][3]) == 15 * batch


# ---- item: transactional and control batches from clients ----------------------------------------

def test_transactional_and_control_batches_from_a_client_are_refused(broker):
    metadata(broker, "data")
    assert produce(broker, "data", build_batch([b"plain"])).error_code == 0
    transactional = build_batch([b"t"], producer_id=4000, producer_epoch=0, base_sequence=0, is_transactional=True)
    answer = produce(broker, "data", transactional)
    assert answer.error_code == Errors.INVALID_TXN_STATE and "transaction" in answer.error_message
    marker = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], producer_id=4000, producer_epoch=0,
                         is_transactional=True, is_control=True)
    assert produce(broker, "data", marker).error_code == Errors.INVALID_RECORD
    plain_then_transactional = build_batch([b"p"]) + transactional     # two batches: Kafka's rule first
    assert produce(broker, "data", plain_then_transactional).error_code == Errors.INVALID_RECORD
    assert end_offset(broker, "data") == 1
    assert ask(broker, 2, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
        {"name": "data", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}).topics[0].partitions[0].offset == 1
    group_works(broker, "g", 1)                 # the coordinator's own writes still go in
    broker.stop()
    broker.start()
    assert end_offset(broker, "data") == 1 and committed(broker, "g") == (0, 1)
