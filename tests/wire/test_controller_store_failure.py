"""A failed commit of the controller's LMDB store is the failure state (issue 30, item 10).

The wire guide's rule (docs/guide-broker.md): the process enters the failure state and stops; a
client gets an error code, never a dropped connection.  So: the request that met the failure is answered
KAFKA_STORAGE_ERROR (56), the in-memory state stays the store's last commit (nothing of the
change published), every later commit is refused, the broker acknowledges nothing more and its
periodic loop stops it; `storage controller` likewise.  The failure is injected at the store's
commit (mdb_txn_commit: Input/output error), and for real on a full tmpfs when root.
"""
from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage import LogConfig  # noqa: E402
from storage.core.errors import Errors, LogDirOfflineError  # noqa: E402
from storage.dir.meta import MetadataError, MetaStore  # noqa: E402
from storage.replication.controller import Controller  # noqa: E402
from storage.replication.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest  # noqa: E402
from storage.wire import codec  # noqa: E402
from storage.wire.controller_server import ControllerServer  # noqa: E402
from storage.wire.node import Node  # noqa: E402
from storage.wire.server import BrokerServer  # noqa: E402
from tests.log.test_full_disk import small_disk  # noqa: E402,F401  (the tmpfs fixture)
from tests.wire.test_wire_faults import produce  # noqa: E402

STORAGE_ERROR = Errors.KAFKA_STORAGE_ERROR


def fail_next_commit(store: MetaStore) -> list:
    """The store's next write fails as LMDB's commit on a failing disk does; returns the list
    of failures it raised."""
    fired = []
    original = store.write_batch

    def write_batch(**kwargs):
        if not fired:
            fired.append(kwargs)
            raise MetadataError("metadata write failed: mdb_txn_commit: Input/output error", file=store.path)
        return original(**kwargs)
    store.write_batch = write_batch
    return fired


def controller_with_a_broker(path) -> Controller:
    c = Controller(path)
    epoch = c.register_broker(BrokerRegistrationRequest(1, "a", -1)).broker_epoch
    c.heartbeat(BrokerHeartbeatRequest(1, epoch))
    c.create_topic("kept", 2, 1)
    c.take_outbox()
    return c


def snapshot(c: Controller):
    return copy.deepcopy((c.partitions, c.topics, c.brokers, c.next_producer_id, c.next_broker_epoch))


@pytest.mark.parametrize("change", ["create_topic", "delete_topic", "allocate_producer_ids", "fence_broker"])
def test_a_failed_commit_leaves_memory_as_the_store_and_refuses_every_later_commit(tmp_path, change):
    c = controller_with_a_broker(tmp_path / "c")
    before = snapshot(c)
    fired = fail_next_commit(c.store)
    calls = {"create_topic": lambda: c.create_topic("new", 3, 1), "delete_topic": lambda: c.delete_topic("kept"),
             "allocate_producer_ids": lambda: c.allocate_producer_ids(1000), "fence_broker": lambda: c.fence_broker(1)}
    with pytest.raises(LogDirOfflineError) as caught:
        calls[change]()
    assert fired and caught.value.error_code == STORAGE_ERROR
    assert "mdb_txn_commit: Input/output error" in str(caught.value)
    assert snapshot(c) == before                          # not half-applied in memory
    assert c.take_outbox() == []                          # nothing of it published (no StopReplica)
    assert c.failure_channel.offline
    with pytest.raises(LogDirOfflineError):               # the store works again; the process does not
        c.create_topic("later", 1, 1)
    assert "later" not in c.topics and snapshot(c) == before
    c.close()
    reopened = Controller(tmp_path / "c")
    assert set(reopened.topics) == {"kept"} and reopened.next_producer_id == before[3]
    reopened.close()


def create_topics(server, loop, name: str, partitions: int = 1):
    frame = codec.encode_request(19, 5, 3, "t", {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000, "validate_only": False})
    answer = loop.run_until_complete(server._dispatch(frame[4:]))
    return codec.decode_response(19, 5, answer[4:])[1].topics[0]


def init_producer_id(server, loop) -> int:
    frame = codec.encode_request(22, 4, 4, "t", {"transactional_id": None, "transaction_timeout": 60000,
                                                 "producer_id": -1, "producer_epoch": -1})
    answer = loop.run_until_complete(server._dispatch(frame[4:]))
    return codec.decode_response(22, 4, answer[4:])[1].error_code


def test_the_embedded_controller_store_failing_is_the_brokers_failure_state(tmp_path):
    loop = asyncio.new_event_loop()
    node = Node(tmp_path / "node", offsets_partitions=1, log_config=LogConfig(fsync=True), background=False)
    node._producer_ids = (0, 0)
    server = BrokerServer(node, initial_rebalance_delay_ms=0)
    server.serve_groups()
    try:
        loop.run_until_complete(node.create_topic("t", 1, 1))
        assert produce(server, loop, b"kept").error_code == Errors.NONE
        fired = fail_next_commit(node.controller.store)
        answer = create_topics(server, loop, "new", 4)        # an answer, not a dropped connection
        assert fired and answer.error_code == STORAGE_ERROR
        assert "mdb_txn_commit" in answer.error_message
        assert "new" not in node.topic_names() and node.logdir.offline
        # Nothing is acknowledged after the failure, and the periodic loop stops the broker.
        assert produce(server, loop, b"later").error_code == STORAGE_ERROR
        assert produce(server, loop, b"later", acks=1).error_code == STORAGE_ERROR
        assert init_producer_id(server, loop) == STORAGE_ERROR
        assert create_topics(server, loop, "again").error_code == STORAGE_ERROR
        loop.run_until_complete(asyncio.wait_for(server._tick(), 5))
        assert server._stopped.is_set()
    finally:
        with pytest.raises(LogDirOfflineError):
            loop.run_until_complete(node.shutdown())          # an offline dir claims no clean close
        loop.close()


def test_the_controller_process_answers_the_failure_and_stops(tmp_path):
    loop = asyncio.new_event_loop()
    server = ControllerServer(tmp_path / "controller", "127.0.0.1", 0)
    try:
        server.sync()
        register = codec.encode_request(62, 3, 1, "b", {
            "broker_id": 1, "cluster_id": "c", "incarnation_id": 5, "listeners": [], "features": [],
            "rack": None, "previous_broker_epoch": -1})
        answer = loop.run_until_complete(server._dispatch(register[4:]))
        registered = codec.decode_response(62, 3, answer[4:])[1]
        assert registered.error_code == Errors.NONE
        server.controller.heartbeat(BrokerHeartbeatRequest(1, registered.broker_epoch))     # unfenced
        server.sync()
        fired = fail_next_commit(server.controller.store)
        frame = codec.encode_request(19, 7, 2, "b", {"topics": [{
            "name": "new", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout_ms": 5000, "validate_only": False})
        answer = loop.run_until_complete(server._dispatch(frame[4:]))
        topic = codec.decode_response(19, 7, answer[4:])[1].topics[0]
        assert fired and topic.error_code == STORAGE_ERROR and "new" not in server.controller.topics
        assert "mdb_txn_commit" in topic.error_message
        assert server._stopped.is_set() and server.logdir.offline
        answer = loop.run_until_complete(server._dispatch(register[4:]))
        assert codec.decode_response(62, 3, answer[4:])[1].error_code == STORAGE_ERROR
    finally:
        with pytest.raises(LogDirOfflineError):
            loop.run_until_complete(server.close())
        loop.close()


FULL_DISK_CHILD = """
    import asyncio, logging, os, sys
    logging.basicConfig(level=logging.WARNING)      # an embedder's logging: the engine's lines on stderr
    from storage import LogConfig
    from storage.wire import codec
    from storage.wire.node import Node
    from storage.wire.server import BrokerServer
    loop = asyncio.new_event_loop()
    node = Node(sys.argv[1], offsets_partitions=1, log_config=LogConfig(fsync=True), background=False)
    server = BrokerServer(node, initial_rebalance_delay_ms=0)
    server.serve_groups()
    fd = os.open(os.path.join(sys.argv[1], "filler"), os.O_WRONLY | os.O_CREAT)
    try:                                                         # the disk fills up
        while True:
            os.write(fd, bytes(4096))
    except OSError:
        os.close(fd)
    frame = codec.encode_request(19, 5, 3, "t", {"topics": [{
        "name": "new", "num_partitions": 500, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000, "validate_only": False})
    answer = loop.run_until_complete(server._dispatch(frame[4:]))
    topic = codec.decode_response(19, 5, answer[4:])[1].topics[0]
    loop.run_until_complete(asyncio.wait_for(server._tick(), 5))
    print(topic.error_code, "new" in node.topic_names(), node.logdir.offline, server._stopped.is_set())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_the_embedded_controller_store_on_a_full_disk(small_disk):  # noqa: F811  (the fixture)
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(FULL_DISK_CHILD), str(small_disk / "node")],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.split() == [str(int(STORAGE_ERROR)), "False", "True", "True"], child.stdout
    assert "the controller store" in child.stderr and "failed to commit" in child.stderr



def test_a_fencing_whose_commit_fails_stops_the_controller(tmp_path):
    """The periodic loop's own commit (fencing a silent broker) failing stops the process too."""
    loop = asyncio.new_event_loop()
    server = ControllerServer(tmp_path / "controller", "127.0.0.1", 0, session_timeout_ms=1)
    try:
        server.sync()
        registered = server.controller.register_broker(BrokerRegistrationRequest(1, "a", -1))
        server.controller.heartbeat(BrokerHeartbeatRequest(1, registered.broker_epoch))
        server.last_heartbeat[1] = -10**9                   # silent for long: fenced at the next tick
        fired = fail_next_commit(server.controller.store)
        loop.run_until_complete(asyncio.wait_for(server._tick(), 5))
        assert fired and server._stopped.is_set() and server.logdir.offline
        assert not server.controller.brokers[1].fenced      # as last committed
    finally:
        with pytest.raises(LogDirOfflineError):
            loop.run_until_complete(server.close())
        loop.close()
