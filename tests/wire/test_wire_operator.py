"""Operator mistakes against real processes on loopback (tests/wire_support.py helpers; every
process stopped by its pid): a second broker started on a live data dir, a broker whose
registration another process took over, a SIGTERM of a whole cluster."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from tests.wire_support import Broker  # noqa: E402


@pytest.fixture
def controller(tmp_path):
    c = Broker(tmp_path / "controller", "--session-timeout-ms", "3000", command="controller").start()
    yield c
    c.kill()


def _broker(tmp_path, controller, node_id: int = 1, name: str = "broker-1") -> Broker:
    return Broker(tmp_path / name, "--node-id", str(node_id), "--controller", f"127.0.0.1:{controller.port}")


def _count(broker: Broker, text: str) -> int:
    return broker.stderr().count(text)


def test_a_second_broker_on_a_live_data_dir_exits_before_it_registers(tmp_path, controller):
    """The lock first: the second process names the holder and exits 1 without registering, so
    the running broker's epoch does not move and its heartbeats go on being accepted (before,
    the second one registered first: the first's heartbeats were refused with
    STALE_BROKER_EPOCH twice a second for ever)."""
    first = _broker(tmp_path, controller).start()
    try:
        second = subprocess.run(
            [sys.executable, "-m", "storage", "serve", "--data-dir", first.data_dir, "--node-id", "1",
             "--controller", f"127.0.0.1:{controller.port}", "--listen", "127.0.0.1:0", "--no-fsync"],
            capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, second.stderr[-2000:]
        assert f"locked by process {first.pid} " in second.stderr, second.stderr[-2000:]
        assert "registered" not in second.stderr
        time.sleep(2.5)                     # five heartbeat intervals
        assert first.alive()
        assert _count(first, "heartbeat refused") == 0 and _count(first, "stale") == 0, first.stderr()[-2000:]
        assert _count(first, "registered with broker epoch") == 1
    finally:
        first.stop()


async def _register(port: int, node_id: int) -> int:
    from storage.wire.client import Peer
    body = {"broker_id": node_id, "cluster_id": "storage-cluster", "incarnation_id": uuid.uuid4(),
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1, "security_protocol": 0}],
            "features": [], "rack": None, "is_migrating_zk_broker": False, "log_dirs": [],
            "previous_broker_epoch": -1}
    peer = Peer("127.0.0.1", port)
    try:
        answer = await peer.call(62, 3, body)
    finally:
        peer.close()
    return int(answer.error_code)


async def _listed_brokers(port: int) -> list[int]:
    from storage.wire.client import Peer
    peer = Peer("127.0.0.1", port)
    try:
        answer = await peer.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
    finally:
        peer.close()
    return [b.node_id for b in answer.brokers]


def test_a_broker_whose_registration_was_taken_over_registers_again(tmp_path, controller):
    """Another registration of the node id (a new incarnation) makes this broker's epoch stale:
    it registers again instead of being refused (error 77) for ever, and serves unfenced."""
    broker = _broker(tmp_path, controller).start()
    try:
        assert asyncio.run(_register(controller.port, 1)) == 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _count(broker, "registered with broker epoch") < 2:
            time.sleep(0.2)
        assert _count(broker, "registered with broker epoch") == 2, broker.stderr()[-3000:]
        time.sleep(2.5)
        refusals = _count(broker, "heartbeat refused")
        time.sleep(2.5)                     # no refusal since: its heartbeats are accepted again
        assert _count(broker, "heartbeat refused") == refusals, broker.stderr()[-3000:]
        assert asyncio.run(_listed_brokers(broker.port)) == [1]      # unfenced: Metadata lists it
    finally:
        broker.stop()


def _controller_epoch(data_dir) -> int:
    import json
    import os

    import lmdb
    env = lmdb.open(os.path.join(str(data_dir), "controller", "storage.mdb"), subdir=False, readonly=True,
                    lock=False, max_dbs=4)
    try:
        with env.begin(db=env.open_db(b"documents", create=False)) as txn:
            return json.loads(txn.get(b"controller"))["controller_epoch"]
    finally:
        env.close()


def test_a_second_embedded_broker_on_a_live_data_dir_touches_nothing(tmp_path):
    """The embedded broker takes the log dir's lock before it opens its controller store (whose
    load starts a new controller epoch): the second process names the holder and exits 1."""
    first = Broker(tmp_path / "solo").start()
    try:
        epoch = _controller_epoch(first.data_dir)
        second = subprocess.run([sys.executable, "-m", "storage", "serve", "--data-dir", first.data_dir,
                                 "--listen", "127.0.0.1:0", "--no-fsync"], capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, second.stderr[-2000:]
        assert f"locked by process {first.pid} " in second.stderr, second.stderr[-2000:]
        assert _controller_epoch(first.data_dir) == epoch
        assert first.alive()
    finally:
        first.stop()



def _assert_quiet(*processes) -> None:
    for process in processes:
        text = process.stderr()
        assert "Traceback" not in text and " ERROR " not in text and "CRITICAL" not in text, \
            f"{process.data_dir}:\n{text[-4000:]}"


def test_sigterm_with_idle_connections_open_logs_no_traceback(tmp_path, controller):
    """A controlled shutdown is quiet: a controller and a broker, each with a client connection
    open and idle, SIGTERM to both, and neither's stderr holds a traceback or an ERROR line
    (before: asyncio logged 'ERROR asyncio: Exception in callback' with a CancelledError
    traceback for every connection handler still waiting when the event loop closed)."""
    import socket
    broker = _broker(tmp_path, controller).start()
    idle = [socket.create_connection(("127.0.0.1", p.port), timeout=10) for p in (broker, controller)]
    try:
        assert broker.stop() == 0 and controller.stop() == 0
    finally:
        broker.kill()
        for s in idle:
            s.close()
    _assert_quiet(broker, controller)


@pytest.mark.slow
def test_sigterm_of_a_replicating_cluster_logs_no_traceback(tmp_path):
    """The same with two brokers replicating a topic (fetchers connected to each other)."""
    from confluent_kafka.admin import NewTopic

    from tests.wire_support import Cluster
    # min ISR 2: the last broker to stop leaves the ISR for the ELR and leads nothing, so it stops at
    # once (with min ISR 1 it stays the leader and waits out the 15 s controlled-shutdown bound)
    cluster = Cluster(tmp_path, brokers=2, min_isr=2)
    try:
        admin = cluster.admin()
        for future in admin.create_topics([NewTopic("quiet", num_partitions=2, replication_factor=2)]).values():
            future.result(30)
        cluster.wait_in_sync("quiet", timeout_s=30)
        codes = [b.stop() for b in cluster.brokers.values()] + [cluster.controller.stop()]
    finally:
        cluster.kill()
    assert codes == [0, 0, 0]
    _assert_quiet(*cluster.brokers.values(), cluster.controller)


def test_two_live_brokers_with_one_node_id_do_not_fence_each_other_twice_a_second(tmp_path, controller):
    """Re-registering is for a registration taken over once; two live brokers configured with
    the same node id (different data dirs) would otherwise take it from each other at every
    heartbeat: each registers again at most every 10 s and says why, once."""
    first = _broker(tmp_path, controller).start()
    second = _broker(tmp_path, controller, name="broker-1-again")
    try:
        second.start()
        time.sleep(6)
        registrations = _count(first, "registered with broker epoch") + _count(second, "registered with broker epoch")
        assert registrations <= 4, first.stderr()[-2000:] + second.stderr()[-2000:]
        assert _count(first, "another live broker registers node id 1") + \
            _count(second, "another live broker registers node id 1") >= 1
    finally:
        second.kill()
        first.kill()


def test_sigterm_of_an_embedded_broker_with_an_idle_connection_logs_no_traceback(tmp_path):
    import socket
    broker = Broker(tmp_path / "solo").start()
    idle = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    try:
        assert broker.stop() == 0
    finally:
        broker.kill()
        idle.close()
    _assert_quiet(broker)
