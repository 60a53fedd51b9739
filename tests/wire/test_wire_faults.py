"""I/O failures under the wire front end, injected through the I/O seam (storage.core.io): every
path ends in the failure state -- the request that met the failure and every later one get
KAFKA_STORAGE_ERROR (56) or the group coordinator's COORDINATOR_NOT_AVAILABLE, nothing is
acknowledged, the broker's periodic loop stops it (Kafka halts a broker whose last log dir
failed), and a controller whose metadata log fails stops too."""
from __future__ import annotations

import asyncio
import errno

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from faulty_io import FaultyIO  # noqa: E402

from storage import LogConfig  # noqa: E402
from storage.core import io as sio  # noqa: E402
from storage.core.errors import Errors, LogDirOfflineError  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.wire import codec  # noqa: E402
from storage.wire.controller_server import ControllerServer  # noqa: E402
from storage.wire.node import Node  # noqa: E402
from storage.wire.server import BrokerServer  # noqa: E402

STORAGE_ERROR = Errors.KAFKA_STORAGE_ERROR


def produce(server, loop, value: bytes, acks: int = -1):
    frame = codec.encode_request(0, 9, 1, "t", {"transactional_id": None, "acks": acks, "timeout": 1000,
                                                "topic_data": [{"name": "t", "partition_data": [
                                                    {"index": 0, "records": build_batch([value])}]}]})
    answer = loop.run_until_complete(server._dispatch(frame[4:]))
    if isinstance(answer, asyncio.Future):          # acks=-1 waiting for the high watermark
        answer = loop.run_until_complete(answer)
    return codec.decode_response(0, 9, answer[4:])[1].responses[0].partition_responses[0]


def commit(server, loop, offset: int):
    frame = codec.encode_request(8, 8, 2, "t", {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                  "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    answer = loop.run_until_complete(server._dispatch(frame[4:]))
    return codec.decode_response(8, 8, answer[4:])[1].topics[0].partitions[0].error_code


@pytest.mark.parametrize("operation", ["pwrite", "fsync"])
def test_a_failed_write_under_produce_and_commit_is_the_failure_state(tmp_path, operation):
    seam = FaultyIO()
    loop = asyncio.new_event_loop()
    with sio.using(seam):
        node = Node(tmp_path / "node", offsets_partitions=1, log_config=LogConfig(fsync=True), background=False)
        server = BrokerServer(node, initial_rebalance_delay_ms=0)
        try:
            loop.run_until_complete(node.ensure_offsets_topic())
            loop.run_until_complete(node.create_topic("t", 1, 1))
            server.serve_groups()
            assert produce(server, loop, b"kept").error_code == Errors.NONE
            assert commit(server, loop, 1) == Errors.NONE
            seam.fail[operation] = (errno.EIO, 0)
            if operation == "fsync":
                with pytest.raises(LogDirOfflineError):
                    node.logdir.flush()                   # the flush fails: the dir goes offline
            else:
                assert produce(server, loop, b"lost").error_code == STORAGE_ERROR
            assert seam.fired == [operation] and node.logdir.offline
            # Nothing is acknowledged after the failure, and a failed fsync is not retried into success.
            assert produce(server, loop, b"later").error_code == STORAGE_ERROR
            assert produce(server, loop, b"later", acks=1).error_code == STORAGE_ERROR
            assert commit(server, loop, 2) == Errors.COORDINATOR_NOT_AVAILABLE
            # The periodic loop stops the broker.
            loop.run_until_complete(asyncio.wait_for(server._tick(), 5))
            assert server._stopped.is_set()
        finally:
            with pytest.raises(LogDirOfflineError):
                loop.run_until_complete(node.shutdown())      # an offline dir claims no clean close
            loop.close()


def test_a_failed_metadata_log_write_stops_the_controller(tmp_path):
    seam = FaultyIO()
    loop = asyncio.new_event_loop()
    with sio.using(seam):
        server = ControllerServer(tmp_path / "controller", "127.0.0.1", 0)
        try:
            server.sync()
            request = codec.build(codec._request_class(62, 3), {
                "broker_id": 1, "cluster_id": "c", "incarnation_id": 5, "listeners": [], "features": [],
                "rack": None, "previous_broker_epoch": -1})
            seam.fail["fsync"] = (errno.EIO, 0)           # the metadata log's flush
            with pytest.raises(LogDirOfflineError):
                loop.run_until_complete(server.register(None, request))
            assert seam.fired == ["fsync"] and server.logdir.offline
            assert server._stopped.is_set()               # the process stops (serve() closes it)
            with pytest.raises(LogDirOfflineError):
                server.sync()                             # never retried into success
        finally:
            with pytest.raises(LogDirOfflineError):
                loop.run_until_complete(server.close())
            loop.close()
