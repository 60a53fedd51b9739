"""Every API's check (storage/wire/authz.py) through the broker's dispatch, in process: an embedded
node with ACLs on, each request sent as User:ANONYMOUS (the PLAINTEXT principal), which may do
anything on topic `a`, group `ga` and transactional id `ta` and nothing else -- the refused part
gets Kafka's code (KafkaApis' handle* for each API), the rest is served, nothing refused is
written.  And the fuzz property of test_wire_fuzz with ACLs on: a mutated frame is answered or
refused, never a handler error."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from hypothesis import HealthCheck, given  # noqa: E402

from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.wire import codec, session  # noqa: E402
from storage.wire.authorizer import Acl, Authorizer, Permission  # noqa: E402  # noqa: E402
from storage.wire.authorizer import Operation as O
from storage.wire.authorizer import PatternType as P
from storage.wire.authorizer import ResourceType as R
from storage.wire.later import Close  # noqa: E402
from storage.wire.node import Node  # noqa: E402
from storage.wire.server import BrokerServer  # noqa: E402
from tests.tiers import tiered  # noqa: E402
from tests.wire.test_wire_fuzz import FRAMES, _mutations  # noqa: E402

ANON = "User:ANONYMOUS"
GRANTS = [Acl(R.TOPIC, "a", P.LITERAL, ANON, "*", O.ALL, Permission.ALLOW),
          Acl(R.GROUP, "ga", P.LITERAL, ANON, "*", O.ALL, Permission.ALLOW),
          Acl(R.TRANSACTIONAL_ID, "ta", P.LITERAL, ANON, "*", O.ALL, Permission.ALLOW)]
D, T, G, C, X = (Errors.NONE, Errors.TOPIC_AUTHORIZATION_FAILED, Errors.GROUP_AUTHORIZATION_FAILED,
                 Errors.CLUSTER_AUTHORIZATION_FAILED, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from storage.wire import apis
    saved, apis.MAX_WAIT_MS = apis.MAX_WAIT_MS, 50
    node = Node(tmp_path_factory.mktemp("authz"), offsets_partitions=1, log_config=LogConfig(fsync=False),
                background=False, authorizer=Authorizer())
    loop = asyncio.new_event_loop()
    server = BrokerServer(node, initial_rebalance_delay_ms=0)

    async def start():                   # as the broker itself: everything allowed
        server.serve_groups()
        for name in ("a", "b"):
            assert (await node.create_topic(name, 1, 1))[0] == Errors.NONE
        assert await node.create_acls(GRANTS) == [(Errors.NONE, None)] * len(GRANTS)
    loop.run_until_complete(start())
    yield server, loop
    loop.run_until_complete(node.shutdown())
    loop.close()
    apis.MAX_WAIT_MS = saved


def anonymous(server, loop, frame: bytes):
    async def run():
        session.enter(session.Session(client_host="127.0.0.1"))      # this task's connection
        return await server._dispatch(frame)
    return loop.run_until_complete(asyncio.wait_for(run(), 10))


def ask(broker, key: int, version: int, body: dict):
    server, loop = broker
    answer = anonymous(server, loop, codec.encode_request(key, version, 3, "authz", body)[4:])
    return codec.decode_response(key, version, answer[4:])[1]


def codes(rows, name="name", code="error_code") -> dict:
    return {getattr(r, name): int(getattr(r, code)) for r in rows}


def test_the_grants_replayed_into_the_authorizer(broker):
    server, _ = broker
    assert set(server.node.authorizer.acls.values()) == set(GRANTS)


def test_produce_writes_only_the_allowed_topic(broker):
    server, _ = broker
    ends = {t: server.node.logdir.partition(t, 0).log_end_offset for t in "ab"}
    answer = ask(broker, 0, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": t, "partition_data": [{"index": 0, "records": build_batch([b"x"])}]} for t in "ab"]})
    assert {r.name: int(r.partition_responses[0].error_code) for r in answer.responses} == {"a": D, "b": T}
    assert server.node.logdir.partition("a", 0).log_end_offset == ends["a"] + 1
    assert server.node.logdir.partition("b", 0).log_end_offset == ends["b"]
    answer = ask(broker, 0, 9, {"transactional_id": "tb", "acks": 1, "timeout": 1000, "topic_data": [
        {"name": "a", "partition_data": [{"index": 0, "records": build_batch([b"x"])}]}]})
    assert int(answer.responses[0].partition_responses[0].error_code) == X
    # acks=0: a refusal is an error in the response Kafka does not send: it closes the connection
    # (later.Close, with the response counted), whether all topics are refused or some, and the
    # allowed ones are written first (KafkaApis.handleProduceRequest).
    server, loop = broker
    for names, txn in (("b", None), ("ab", None), ("a", "tb")):
        frame = codec.encode_request(0, 9, 3, "authz", {"transactional_id": txn, "acks": 0, "timeout": 1000,
                                                       "topic_data": [{"name": t, "partition_data": [
                                                           {"index": 0, "records": build_batch([b"x"])}]}
                                                           for t in names]})[4:]
        closed = anonymous(server, loop, frame)
        assert type(closed) is Close, names
        if txn is None:
            got = {r["name"]: r["partition_responses"][0]["error_code"] for r in closed.body["responses"]}
            assert got["b"] == T and got.get("a", D) == D, closed.body
    assert server.node.logdir.partition("a", 0).log_end_offset == ends["a"] + 2
    assert server.node.logdir.partition("b", 0).log_end_offset == ends["b"]


def test_fetch_of_a_consumer_and_of_a_follower(broker):
    part = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": t, "partitions": [part]} for t in "ab"]}
    answer = ask(broker, 1, 12, body)
    assert {r.topic: int(r.partitions[0].error_code) for r in answer.responses} == {"a": D, "b": T}
    # A refused partition's records are empty, not null: librdkafka reads a null records field as
    # a protocol error ("invalid MessageSetSize -1"), never as the partition's error (its 0119).
    assert [r.partitions[0].records for r in answer.responses if r.topic == "b"] == [b""]
    answer = ask(broker, 1, 12, dict(body, replica_id=2))            # a follower needs CLUSTER_ACTION
    assert {int(r.partitions[0].error_code) for r in answer.responses} == {T}
    assert [r.partitions[0].records for r in answer.responses] == [b"", b""]


def test_metadata_of_every_topic_lists_only_described_ones(broker):
    answer = ask(broker, 3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": True})
    assert [t.name for t in answer.topics] == ["a"]
    assert answer.topics[0].topic_authorized_operations == sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


def test_transactions_need_write_on_the_transactional_id(broker):
    server, _ = broker
    init = {"transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
    assert int(ask(broker, 22, 4, dict(init, transactional_id="tb")).error_code) == X
    assert int(ask(broker, 22, 4, dict(init, transactional_id=None)).error_code) == D      # WRITE on topic a
    saved = dict(server.node.authorizer.acls)
    server.node.authorizer.load({})
    try:
        assert int(ask(broker, 22, 4, dict(init, transactional_id=None)).error_code) == C  # no WRITE anywhere
    finally:
        server.node.authorizer.load(saved)
    assert int(ask(broker, 26, 3, {"transactional_id": "tb", "producer_id": 1, "producer_epoch": 0,
                                   "committed": True}).error_code) == X
    assert int(ask(broker, 25, 3, {"transactional_id": "ta", "producer_id": 1, "producer_epoch": 0,
                                   "group_id": "gb"}).error_code) == G
    answer = ask(broker, 24, 3, {"v3_and_below_transactional_id": "ta", "v3_and_below_producer_id": 1,
                                 "v3_and_below_producer_epoch": 0,
                                 "v3_and_below_topics": [{"name": t, "partitions": [0]} for t in "ab"]})
    assert {r.name: int(r.results_by_partition[0].partition_error_code)
            for r in answer.results_by_topic_v3_and_below} == {"a": Errors.OPERATION_NOT_ATTEMPTED, "b": T}
    answer = ask(broker, 65, 0, {"transactional_ids": ["ta", "tb"]})
    assert codes(answer.transaction_states, "transactional_id")["tb"] == X
    answer = ask(broker, 27, 1, {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
                                              "coordinator_epoch": 0,
                                              "topics": [{"name": "a", "partition_indexes": [0]}]}]})
    assert int(answer.markers[0].topics[0].partitions[0].error_code) == C


def test_groups_need_their_operation_on_the_group(broker):
    answer = ask(broker, 10, 4, {"key_type": 0, "coordinator_keys": ["ga", "gb"]})
    assert codes(answer.coordinators, "key") == {"ga": D, "gb": G}
    for _ in range(50):                  # the coordinator of __consumer_offsets, created just now, loads
        answer = ask(broker, 15, 5, {"groups": ["ga", "gb"], "include_authorized_operations": True})
        if codes(answer.groups, "group_id")["ga"] != Errors.NOT_COORDINATOR:
            break
        broker[1].run_until_complete(asyncio.sleep(0.1))
    assert codes(answer.groups, "group_id") == {"ga": D, "gb": G}
    ga = next(g for g in answer.groups if g.group_id == "ga")
    assert ga.authorized_operations == sum(1 << op for op in (3, 6, 8, 10, 11))
    answer = ask(broker, 9, 8, {"groups": [{"group_id": g, "topics": None} for g in ("ga", "gb")],
                                "require_stable": False})
    assert codes(answer.groups, "group_id") == {"ga": D, "gb": G}
    assert int(ask(broker, 12, 4, {"group_id": "gb", "generation_id": 1, "member_id": "m",
                                   "group_instance_id": None}).error_code) == G
    answer = ask(broker, 42, 2, {"groups_names": ["gb"]})
    assert codes(answer.results, "group_id") == {"gb": G}


def test_topic_admin_and_configs(broker):
    server, _ = broker
    answer = ask(broker, 32, 4, {"resources": [{"resource_type": 2, "resource_name": t, "configuration_keys": None}
                                               for t in "ab"] + [{"resource_type": 4, "resource_name": "1",
                                                                  "configuration_keys": None}],
                                 "include_synonyms": False, "include_documentation": False})
    assert codes(answer.results, "resource_name") == {"a": D, "b": T, "1": C}
    answer = ask(broker, 20, 6, {"topics": [{"name": "b", "topic_id": None}], "timeout": 1000})
    assert codes(answer.responses) == {"b": T}
    assert "b" in server.node.topic_names()
    answer = ask(broker, 21, 2, {"topics": [{"name": "b", "partitions": [{"partition_index": 0, "offset": 0}]}],
                                 "timeout": 1000})
    assert int(answer.topics[0].partitions[0].error_code) == T
    answer = ask(broker, 37, 3, {"topics": [{"name": "b", "count": 2, "assignments": None}], "timeout": 1000,
                                 "validate_only": False})
    assert codes(answer.results) == {"b": T} and len(server.node.partitions_of("b")) == 1
    answer = ask(broker, 19, 7, {"topics": [{"name": "c", "num_partitions": 1, "replication_factor": 1,
                                             "assignments": [], "configs": []}], "timeout": 1000,
                                 "validate_only": False})
    assert codes(answer.topics) == {"c": T} and "c" not in server.node.topic_names()
    assert int(ask(broker, 43, 2, {"election_type": 0, "topic_partitions": None, "timeout": 1000}).error_code) == C
    assert int(ask(broker, 35, 4, {"topics": None}).error_code) == C
    assert int(ask(broker, 60, 1, {"include_cluster_authorized_operations": True,
                                   "endpoint_type": 1}).error_code) == C
    answer = ask(broker, 61, 0, {"topics": [{"name": t, "partition_indexes": [0]} for t in "ab"]})
    assert {t.name: int(t.partitions[0].error_code) for t in answer.topics} == {"a": D, "b": T}


@tiered(400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=_mutations())
def test_mutated_frames_under_acls_are_answered_or_refused(broker, frame):
    server, loop = broker
    raised = sum(server.handler_errors.values())
    try:
        answer = anonymous(server, loop, frame)
    except codec.ProtocolError:
        return
    assert answer is None or isinstance(answer, bytes)
    assert sum(server.handler_errors.values()) == raised, f"a handler raised: {server.handler_errors}"


def test_the_valid_frames_under_acls_are_answered(broker):
    server, loop = broker
    raised = sum(server.handler_errors.values())
    for frame in FRAMES:
        anonymous(server, loop, frame)
    assert sum(server.handler_errors.values()) == raised, f"a handler raised: {server.handler_errors}"


def test_an_incremental_fetch_checks_the_partitions_its_session_holds(broker):
    # KafkaApis.handleFetchRequest checks every partition of the fetch context, not only those
    # the request names: a session made while topic a was readable is refused once it is not.
    server, loop = broker
    part = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": 0, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": "a", "partitions": [part]}]}
    opened = ask(broker, 1, 12, body)
    assert opened.session_id > 0 and int(opened.responses[0].partitions[0].error_code) == D
    produced = ask(broker, 0, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": "a", "partition_data": [{"index": 0, "records": build_batch([b"y"])}]}]})
    assert int(produced.responses[0].partition_responses[0].error_code) == D      # new data for the session
    saved = dict(server.node.authorizer.acls)
    server.node.authorizer.load({k: v for k, v in saved.items() if v.resource_type != R.TOPIC})
    try:
        answer = ask(broker, 1, 12, dict(body, session_id=opened.session_id, session_epoch=1, topics=[]))
        rows = [(r.topic, int(p.error_code), p.records) for r in answer.responses for p in r.partitions]
        assert rows and all(code == T and records == b"" for _, code, records in rows), rows
    finally:
        server.node.authorizer.load(saved)


def test_metadata_v0_of_every_topic_and_offset_delete(broker):
    answer = ask(broker, 3, 0, {"topics": []})           # v0: an empty list is every topic
    assert [t.name for t in answer.topics] == ["a"]
    answer = ask(broker, 47, 0, {"group_id": "gb", "topics": []})
    assert int(answer.error_code) == G
    answer = ask(broker, 47, 0, {"group_id": "ga", "topics": [{"name": "b", "partitions": [{"partition_index": 0}]}]})
    assert [(t.name, int(t.partitions[0].error_code)) for t in answer.topics] == [("b", T)]


ACL_BODY = {"resource_type": 2, "resource_name": "fz", "resource_pattern_type": 4, "principal": "User:fz",
            "host": "*", "operation": 3, "permission_type": 3}
FILTER = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
          "host_filter": None, "operation": 1, "permission_type": 1}
ACL_FRAMES = [codec.encode_request(30, 3, 5, "fuzz", {"creations": [ACL_BODY]})[4:],
              codec.encode_request(29, 3, 5, "fuzz", FILTER)[4:],
              codec.encode_request(31, 3, 5, "fuzz", {"filters": [dict(FILTER, principal_filter="User:fz")]})[4:],
              codec.encode_request(30, 1, 5, "fuzz", {"creations": [ACL_BODY]})[4:]]


def _acl_mutations():
    from hypothesis import strategies as st
    frame = st.sampled_from(ACL_FRAMES)
    flipped = st.tuples(frame, st.integers(0, 10_000), st.integers(1, 255)).map(
        lambda f: f[0][:f[1] % len(f[0])] + bytes([f[0][f[1] % len(f[0])] ^ f[2]]) + f[0][f[1] % len(f[0]) + 1:])
    cut = st.tuples(frame, st.integers(0, 10_000)).map(lambda fc: fc[0][:fc[1] % len(fc[0])])
    return st.one_of(flipped, cut)


@tiered(300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=_acl_mutations())
def test_mutated_acl_frames_are_answered_or_refused(broker, frame):
    # As the broker's own session (everything allowed): the validation and the controller's
    # create and delete see the mutated bindings and filters, and must answer every one.
    server, loop = broker
    raised = sum(server.handler_errors.values())
    try:
        loop.run_until_complete(asyncio.wait_for(server._dispatch(frame), 10))
    except codec.ProtocolError:
        return
    assert sum(server.handler_errors.values()) == raised, f"a handler raised: {server.handler_errors}"
    loop.run_until_complete(server.node.create_acls(GRANTS))     # a mutated filter may have matched them


def test_the_users_scram_credentials_need_describe_and_alter_on_the_cluster(broker):
    """KafkaApis' handleDescribeUserScramCredentialsRequest / handleAlterUserScramCredentialsRequest:
    DESCRIBE and ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED and nothing stored."""
    server, _ = broker
    answer = ask(broker, 50, 0, {"users": None})
    assert int(answer.error_code) == C
    answer = ask(broker, 51, 0, {"deletions": [], "upsertions": [
        {"name": "mallory", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}]})
    assert [int(r.error_code) for r in answer.results] == [C]
    assert not any(user == "mallory" for user, _ in server.node.scram_credentials())
