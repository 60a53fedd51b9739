"""Metadata's partition rows for the listener a request arrived on (metadata.partition_row),
ported from Kafka's MetadataCacheTest (getTopicMetadataPartitionLeaderNotAvailable,
getTopicMetadataPartitionListenerNotAvailableOnLeader, getTopicMetadataReplicaNotAvailable,
getTopicMetadataIsrNotAvailable, testGetClusterMetadataWithOfflineReplicas) and KafkaApis'
version rules (v0 leaves unreachable replicas out; LISTENER_NOT_FOUND from v6)."""
import pytest

from storage.core.errors import Errors
from storage.replication.messages import PartitionState
from storage.wire.metadata import BrokerEntry, partition_row


def _broker(broker_id: int, *listeners: str, fenced: bool = False) -> BrokerEntry:
    endpoints = tuple((name, f"host{broker_id}", 9092 + i) for i, name in enumerate(listeners))
    host, port = (endpoints[0][1], endpoints[0][2]) if endpoints else ("", -1)
    return BrokerEntry(broker_id, 1, b"", host, port, fenced=fenced, endpoints=endpoints)


def _state(leader: int, replicas, isr) -> PartitionState:
    return PartitionState("topic", 0, leader, 1, 0, list(isr), list(replicas))


@pytest.mark.parametrize("version", [1, 5, 6, 12])
def test_a_leader_not_registered_is_not_available_at_any_version(version):
    row = partition_row(_state(1, [0], [0]), {0: _broker(0, "PLAINTEXT")}, "PLAINTEXT", version)
    assert (row["error_code"], row["leader_id"]) == (Errors.LEADER_NOT_AVAILABLE, -1)
    assert row["replica_nodes"] == [0] and row["isr_nodes"] == [0]


@pytest.mark.parametrize(("version", "code"), [(5, Errors.LEADER_NOT_AVAILABLE), (6, Errors.LISTENER_NOT_FOUND),
                                               (12, Errors.LISTENER_NOT_FOUND)])
def test_a_leader_without_the_listener_is_listener_not_found_from_v6(version, code):
    brokers = {0: _broker(0, "PLAINTEXT", "SSL"), 1: _broker(1, "PLAINTEXT")}
    row = partition_row(_state(1, [0], [0]), brokers, "SSL", version)
    assert (row["error_code"], row["leader_id"], row["leader_epoch"]) == (code, -1, 1)
    assert row["replica_nodes"] == [0] and row["isr_nodes"] == [0]
    # On the listener the leader has, the same partition has its leader.
    assert partition_row(_state(1, [0], [0]), brokers, "PLAINTEXT", version)["leader_id"] == 1


def test_an_unregistered_replica_is_listed_but_offline_and_v0_leaves_it_out():
    brokers = {0: _broker(0, "PLAINTEXT")}
    row = partition_row(_state(0, [0, 1], [0]), brokers, "PLAINTEXT", 1)
    assert (row["error_code"], row["replica_nodes"], row["isr_nodes"], row["offline_replicas"]) == (
        Errors.NONE, [0, 1], [0], [1])
    old = partition_row(_state(0, [0, 1], [0]), brokers, "PLAINTEXT", 0)
    assert (old["error_code"], old["replica_nodes"], old["isr_nodes"]) == (Errors.REPLICA_NOT_AVAILABLE, [0], [0])


def test_an_isr_member_not_registered_is_replica_not_available_at_v0_only():
    brokers = {0: _broker(0, "PLAINTEXT")}
    assert partition_row(_state(0, [0], [0, 1]), brokers, "PLAINTEXT", 1)["error_code"] == Errors.NONE
    old = partition_row(_state(0, [0], [0, 1]), brokers, "PLAINTEXT", 0)
    assert (old["error_code"], old["replica_nodes"], old["isr_nodes"]) == (Errors.REPLICA_NOT_AVAILABLE, [0], [0])


def test_offline_replicas_are_the_fenced_and_those_without_the_listener():
    brokers = {0: _broker(0, "PLAINTEXT"), 1: _broker(1), 2: _broker(2, "PLAINTEXT", fenced=True),
               3: _broker(3, "PLAINTEXT")}
    row = partition_row(_state(0, [0, 1, 2, 3], [0, 1, 2, 3]), brokers, "PLAINTEXT", 12)
    assert row["offline_replicas"] == [1, 2] and row["replica_nodes"] == [0, 1, 2, 3]
    assert row["error_code"] == Errors.NONE and row["leader_id"] == 0
