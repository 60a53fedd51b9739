"""The one broker of both modes (wire/broker.py; issue 31, section 3): the replica manager gets
LeaderAndIsr, StopReplica and MetadataUpdate with the controller epoch the metadata records
were written in, so its stale-controller check holds in the process mode too (the broker used
to send them with the manager's own epoch, which no record could ever be stale against), and
the embedded broker (its controller in the process) and a cluster's broker (replaying the
controller process's metadata log) hand the manager the same messages for the same metadata.

No sockets: the controller process's state and log are driven in-process (ControllerServer,
not listening) and its log's bytes are replayed as the broker's metadata fetch replays them."""
from __future__ import annotations

import asyncio
import uuid

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors  # noqa: E402
from storage.replication import messages as m  # noqa: E402
from storage.replication.replica import ReplicaManager  # noqa: E402
from storage.topics import metadata_records as mr  # noqa: E402
from storage.wire.cluster_node import ClusterNode  # noqa: E402
from storage.wire.controller_server import ControllerServer  # noqa: E402
from storage.wire.metadata import _partition_fields  # noqa: E402
from storage.wire.node import Node  # noqa: E402

OPTIONS = dict(node_id=1, offsets_partitions=1, log_config=LogConfig(fsync=False), background=False)


@pytest.fixture
def handled(monkeypatch):
    """Every message a replica manager is handed, by the broker that handed it."""
    seen: list = []
    original = ReplicaManager.handle

    def recording(self, message):
        seen.append(message)
        return original(self, message)
    monkeypatch.setattr(ReplicaManager, "handle", recording)
    return seen


def _controller_messages(seen) -> list:
    return [x for x in seen if isinstance(x, (m.LeaderAndIsrRequest, m.StopReplicaRequest, m.MetadataUpdate))]


class ProcessMode:
    """A cluster's broker and the controller process, the metadata log between them replayed
    in-process: the same records, batches and epochs as over TCP."""

    def __init__(self, tmp_path):
        self.server = ControllerServer(tmp_path / "controller", "127.0.0.1", 0)
        self.broker = ClusterNode(tmp_path / "broker", controller=("127.0.0.1", 1), **OPTIONS)
        self.server.endpoints[1] = (self.broker.host, self.broker.port)
        c = self.server.controller
        registered = c.register_broker(m.BrokerRegistrationRequest(1, uuid.uuid4().hex, -1))
        self.broker.broker_epoch = registered.broker_epoch
        self.sync()
        self.broker.catch_up()
        c.heartbeat(m.BrokerHeartbeatRequest(1, registered.broker_epoch))       # unfenced
        self.sync()

    def sync(self) -> None:
        """The controller writes what changed; the broker fetches the log from where it is."""
        self.server.sync()
        link = self.broker.link
        link._replay(bytes(self.server.log.read(link.metadata_offset, 1 << 20)))

    def create_topic(self, name: str, partitions: int) -> None:
        assert self.server.controller.create_topic(name, partitions, 1, {}) == Errors.NONE
        self.sync()

    def delete_topic(self, name: str) -> None:
        assert self.server.controller.delete_topic(name) == Errors.NONE
        self.sync()

    def close(self) -> None:
        asyncio.run(self.broker.shutdown())
        asyncio.run(self.server.close())


def test_process_mode_hands_the_manager_the_controllers_epoch_and_refuses_a_stale_one(tmp_path, handled):
    mode = ProcessMode(tmp_path)
    try:
        mode.create_topic("t", 1)
        epoch = mode.server.controller.controller_epoch
        manager = mode.broker.manager
        assert epoch >= 1 and manager.controller_epoch == epoch
        assert {x.controller_epoch for x in _controller_messages(handled)} == {epoch}
        assert manager.partition_state("t", 0).leader == 1
        # A controller of an older epoch says the partition lost its leader: refused.
        state = mode.broker.partition_state("t", 0).copy()
        state.leader, state.leader_epoch, state.partition_epoch = m.NO_LEADER, state.leader_epoch + 1, \
            state.partition_epoch + 1
        record = mr.encode(3, _partition_fields(mode.broker.topic_id("t"), state))
        handled.clear()
        mode.broker.replay(epoch - 1, [record])
        assert [type(x) for x in handled] == [m.LeaderAndIsrRequest]
        assert manager.partition_state("t", 0).leader == 1, "a stale controller's LeaderAndIsr was applied"
        # The same record from the current controller applies.
        mode.broker.replay(epoch, [record])
        assert manager.partition_state("t", 0).leader == m.NO_LEADER
    finally:
        mode.close()


def test_embedded_and_process_mode_give_the_manager_the_same_messages(tmp_path, handled):
    node = Node(tmp_path / "embedded", **OPTIONS)
    try:
        asyncio.run(node.create_topic("t", 2, 1))
        asyncio.run(node.delete_topic("t"))
        embedded = _controller_messages(handled)
        epoch = node.controller.controller_epoch
    finally:
        asyncio.run(node.shutdown())
    handled.clear()
    mode = ProcessMode(tmp_path / "process")
    try:
        mode.create_topic("t", 2)
        mode.delete_topic("t")
        process = _controller_messages(handled)
    finally:
        mode.close()
    assert {x.controller_epoch for x in embedded} == {epoch}
    assert [type(x).__name__ for x in embedded] == ["MetadataUpdate", "MetadataUpdate", "LeaderAndIsrRequest",
                                                    "LeaderAndIsrRequest", "StopReplicaRequest"]
    assert embedded == process
