"""The zero topic id and topic ids no topic has get Kafka's answers (issue 30, item 11), from the
broker's DeleteTopics v6, Metadata v12 and Fetch v13+ and the controller's DeleteTopics v6: kio
reads the zero id as None, and each handler used to raise TypeError (int(None)) and drop the
connection.  Through dispatch on an embedded node and an in-process controller (no sockets)."""
from __future__ import annotations

import asyncio
import types
import uuid

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors  # noqa: E402
from storage.wire import codec  # noqa: E402
from storage.wire.apis import delete_topics_targets  # noqa: E402
from storage.wire.controller_server import ControllerServer  # noqa: E402
from storage.wire.node import Node  # noqa: E402
from storage.wire.server import BrokerServer  # noqa: E402

UNKNOWN_ID = 0x1234
FETCH_PART = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
              "log_start_offset": -1, "partition_max_bytes": 1 << 20}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    node = Node(tmp_path_factory.mktemp("ids"), offsets_partitions=1, log_config=LogConfig(fsync=False),
                background=False)
    loop = asyncio.new_event_loop()
    server = BrokerServer(node, initial_rebalance_delay_ms=0)
    loop.run_until_complete(node.create_topic("known", 1, 1))
    yield server, loop
    loop.run_until_complete(node.shutdown())
    loop.close()


def _ask(server, loop, key: int, version: int, body: dict):
    before = sum(server.handler_errors.values())
    answer = loop.run_until_complete(asyncio.wait_for(
        server._dispatch(codec.encode_request(key, version, 3, "ids", body)[4:]), 10))
    assert sum(server.handler_errors.values()) == before, "the handler raised"
    return codec.decode_response(key, version, answer[4:])[1]


def _rows(response, field="responses"):
    return sorted((r.name or "", int(r.topic_id or 0), int(r.error_code.value), r.error_message or "")
                  for r in getattr(response, field))


def test_delete_topics_v6_zero_and_unknown_ids(broker):
    server, loop = broker
    response = _ask(server, loop, 20, 6, {"timeout": 1000, "topics": [
        {"name": None, "topic_id": 0}, {"name": None, "topic_id": UNKNOWN_ID}]})
    assert _rows(response) == [("", 0, Errors.INVALID_REQUEST, "Neither topic name nor id were specified."),
                               ("", UNKNOWN_ID, Errors.UNKNOWN_TOPIC_ID, "")]


def test_metadata_v12_null_name_with_the_zero_id_and_an_unknown_id(broker):
    server, loop = broker
    body = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    response = _ask(server, loop, 3, 12, dict(body, topics=[{"name": None, "topic_id": 0}, {"name": "known", "topic_id": 0}]))
    assert [(t.name, int(t.topic_id or 0), int(t.error_code.value)) for t in response.topics][0] == \
        (None, 0, Errors.UNKNOWN_TOPIC_ID)
    assert [(t.name, int(t.error_code.value)) for t in response.topics][1] == ("known", Errors.NONE)
    # Any non-zero id: the request names its topics by id (Kafka ignores the names then).
    known_id = server.node.topic_id("known")
    response = _ask(server, loop, 3, 12, dict(body, topics=[{"name": None, "topic_id": UNKNOWN_ID},
                                                             {"name": "ignored", "topic_id": known_id}]))
    assert sorted((t.name or "", int(t.topic_id or 0), int(t.error_code.value)) for t in response.topics) == \
        [("", UNKNOWN_ID, Errors.UNKNOWN_TOPIC_ID), ("known", known_id, Errors.NONE)]


def test_metadata_before_v12_refuses_a_null_name_as_a_whole(broker):
    server, loop = broker
    response = _ask(server, loop, 3, 11, {"topics": [{"name": None, "topic_id": 0}], "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    assert [int(t.error_code.value) for t in response.topics] == [Errors.INVALID_REQUEST]


@pytest.mark.parametrize("version", [13, 16])
def test_fetch_by_the_zero_id_is_unknown_topic_id(broker, version):
    server, loop = broker
    response = _ask(server, loop, 1, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic_id": 0, "partitions": [FETCH_PART]}, {"topic_id": UNKNOWN_ID, "partitions": [FETCH_PART]}]})
    assert sorted((int(t.topic_id or 0), int(t.partitions[0].error_code.value)) for t in response.responses) == \
        [(0, Errors.UNKNOWN_TOPIC_ID), (UNKNOWN_ID, Errors.UNKNOWN_TOPIC_ID)]


def test_controller_delete_topics_v6_zero_and_unknown_ids(tmp_path):
    server = ControllerServer(tmp_path / "controller", "127.0.0.1", 0)
    try:
        answer = asyncio.run(server._dispatch(codec.encode_request(20, 6, 3, "ids", {"timeout": 1000, "topics": [
            {"name": None, "topic_id": 0}, {"name": None, "topic_id": UNKNOWN_ID}, {"name": "absent", "topic_id": 0}]})[4:]))
    finally:
        server.controller.close()
        server.logdir.close()
    assert sum(server.handler_errors.values()) == 0
    assert _rows(codec.decode_response(20, 6, answer[4:])[1]) == [
        ("", 0, Errors.INVALID_REQUEST, "Neither topic name nor id were specified."),
        ("", UNKNOWN_ID, Errors.UNKNOWN_TOPIC_ID, ""),
        ("absent", 0, Errors.UNKNOWN_TOPIC_OR_PARTITION, "")]


def test_controller_alter_partition_by_the_zero_id_is_unknown_topic_id(tmp_path):
    """AlterPartition naming the zero topic id (kio reads it as None) or an unknown one gets
    UNKNOWN_TOPIC_ID for its partitions, as Kafka's controller answers an id it does not know."""
    server = ControllerServer(tmp_path / "controller", "127.0.0.1", 0)
    part = {"partition_index": 0, "leader_epoch": 0, "new_isr_with_epochs": [], "leader_recovery_state": 0,
            "partition_epoch": 0}
    try:
        answer = asyncio.run(server._dispatch(codec.encode_request(56, 3, 3, "ids", {
            "broker_id": 1, "broker_epoch": 1,
            "topics": [{"topic_id": 0, "partitions": [part]}, {"topic_id": UNKNOWN_ID, "partitions": [part]}]})[4:]))
    finally:
        server.controller.close()
        server.logdir.close()
    assert sum(server.handler_errors.values()) == 0
    response = codec.decode_response(56, 3, answer[4:])[1]
    assert [int(t.partitions[0].error_code.value) for t in response.topics] == [Errors.UNKNOWN_TOPIC_ID] * 2


# Kafka's ControllerApisTest.testInvalidDeleteTopicsRequest, in our words: neither name nor id,
# both, a name given twice, an id given twice, a name whose id was also given, an unknown id.
def test_delete_topics_targets_kafkas_invalid_cases():
    ids = {0x10: "foo", 0x20: "bar", 0x30: "baz"}
    topic = types.SimpleNamespace
    request = types.SimpleNamespace(topics=[
        topic(name=None, topic_id=None), topic(name="foo", topic_id=uuid.UUID(int=0x10)),
        topic(name="bar", topic_id=None), topic(name=None, topic_id=uuid.UUID(int=0x20)),
        topic(name="quux", topic_id=None), topic(name="quux", topic_id=None),
        topic(name=None, topic_id=uuid.UUID(int=0x30)), topic(name=None, topic_id=uuid.UUID(int=0x30)),
        topic(name=None, topic_id=uuid.UUID(int=0x99)), topic(name="plain", topic_id=None)])
    targets, answered = delete_topics_targets(request, ids.get)
    assert targets == [("plain", 0)]
    assert sorted(((a["name"] or ""), a["topic_id"], a["error_code"], a["error_message"] or "") for a in answered) == [
        ("", 0, Errors.INVALID_REQUEST, "Neither topic name nor id were specified."),
        ("", 0x30, Errors.INVALID_REQUEST, "Duplicate topic id."),
        ("", 0x99, Errors.UNKNOWN_TOPIC_ID, ""),
        ("bar", 0x20, Errors.INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied."),
        ("foo", 0x10, Errors.INVALID_REQUEST, "You may not specify both topic name and topic id."),
        ("quux", 0, Errors.INVALID_REQUEST, "Duplicate topic name.")]
