"""The metadata publication is change-driven (storage/wire/metadata.py, `Publication`): a
controller at rest -- the controller process's 100 ms tick and heartbeats, the embedded node's
heartbeats -- compares nothing, as Kafka's controller writes metadata records only when its
state changes; every change is still published; and the tests' checking mode (tests/conftest.py)
catches a change that `Controller.changes` did not count."""
from __future__ import annotations

import asyncio
import os

import pytest

from storage.core.errors import Errors
from storage.replication.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from storage.wire import metadata
from storage.wire.controller_server import ControllerServer
from storage.wire.node import Node


@pytest.fixture
def comparisons(monkeypatch):
    """How many times records_for compared the controller's state with an image (the checking
    mode off, as in production)."""
    monkeypatch.delenv(metadata.CHECK_ENV, raising=False)
    calls = []
    real = metadata.records_for

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(metadata, "records_for", counted)
    return calls


@pytest.fixture
def server(tmp_path):
    server = ControllerServer(tmp_path / "controller", "127.0.0.1", 0)
    yield server
    server.controller.close()
    server.logdir.close()


def _unfenced(controller, broker_id: int) -> None:
    epoch = controller.register_broker(BrokerRegistrationRequest(broker_id, f"inc-{broker_id}")).broker_epoch
    controller.heartbeat(BrokerHeartbeatRequest(broker_id, epoch))


def test_a_controller_at_rest_compares_nothing(server, comparisons):
    _unfenced(server.controller, 1)
    server.sync()
    end = server.log.log_end_offset
    assert end > 0 and comparisons == [1]
    for _ in range(20):             # 2 s of the controller process's ticks
        server.sync()
    assert comparisons == [1]
    assert server.log.log_end_offset == end


def test_every_change_is_still_published(server, comparisons):
    c = server.controller
    _unfenced(c, 1)
    server.sync()
    end = server.log.log_end_offset
    assert c.create_topic("t", 2, 1) == Errors.NONE
    server.sync()
    assert server.log.log_end_offset > end and set(server.image.partitions) == {("t", 0), ("t", 1)}
    end = server.log.log_end_offset
    c.fence_broker(1)
    server.sync()
    assert server.log.log_end_offset > end and server.image.brokers[1].fenced
    assert server.image.partitions[("t", 0)].isr == [1]     # the last member stays (no leader)
    assert server.image.partitions[("t", 0)].leader == -1


def test_a_change_not_counted_is_caught_by_the_checking_mode(server, tmp_path, monkeypatch):
    c = server.controller
    _unfenced(c, 1)
    _unfenced(c, 2)
    c.create_topic("t", 1, 2)
    monkeypatch.delenv(metadata.CHECK_ENV, raising=False)
    server.sync()
    end = server.log.log_end_offset
    c.partitions[("t", 0)].isr = [c.partitions[("t", 0)].leader]    # behind the counter's back
    c.partitions[("t", 0)].partition_epoch += 1
    server.sync()
    assert server.log.log_end_offset == end          # unchecked, the change is never published
    monkeypatch.setenv(metadata.CHECK_ENV, str(tmp_path / "skips"))
    server.sync()
    assert server.log.log_end_offset > end           # the checking mode publishes it, and says so
    (said,) = os.listdir(tmp_path / "skips")
    assert "did not bump Controller.changes" in (tmp_path / "skips" / said).read_text()
    assert "[3]" in (tmp_path / "skips" / said).read_text()      # a PartitionRecord


def test_the_embedded_node_at_rest_compares_nothing(tmp_path, comparisons):
    node = Node(tmp_path / "node", offsets_partitions=1, background=False)
    try:
        link = node.link
        link._heartbeat()               # after the cluster id's document (a change: compared once)
        before = len(comparisons)
        for _ in range(5):
            link._heartbeat()           # what its 2 s heartbeat does
        assert len(comparisons) == before
        assert link.controller.create_topic("t", 1, 1) == Errors.NONE
        link.publish()
        assert len(comparisons) == before + 1 and node.partition_state("t", 0) is not None
        node.port = node.port + 1       # the listener's port published (its endpoints changed)
        link.publish()
        assert len(comparisons) == before + 2 and node.image.brokers[node.node_id].port == node.port
    finally:
        asyncio.run(node.shutdown())
