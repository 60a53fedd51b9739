"""The transaction coordinator's 100 ms tick looks for the __transaction_state partitions this
broker leads only when the metadata moved (Broker.metadata_changes): at rest it scans nothing."""
from __future__ import annotations

import types

from storage.replication.messages import PartitionState
from storage.wire.rules import TRANSACTION_STATE_TOPIC
from storage.wire.txn_coordinator import TxnCoordinator


def test_the_tick_scans_the_metadata_only_after_it_moved():
    scans = []

    def partitions_of(topic):
        scans.append(topic)
        return [PartitionState(TRANSACTION_STATE_TOPIC, 0, 2, 0, 0, [2], [2])]     # led elsewhere

    node = types.SimpleNamespace(node_id=1, metadata_changes=1, partitions_of=partitions_of)
    txn = TxnCoordinator(node, None, None, None)
    for _ in range(5):
        txn.tick()
    assert scans == [TRANSACTION_STATE_TOPIC]
    node.metadata_changes += 1          # a batch of metadata records replayed
    txn.tick()
    txn.tick()
    assert scans == [TRANSACTION_STATE_TOPIC] * 2
