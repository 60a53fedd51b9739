"""DescribeProducers (API 61) and WriteTxnMarkers (API 27): what Kafka's
`kafka-transactions.sh describe-producers`, `find-hanging` and `abort` send to a partition's
leader (KIP-664), so that an operator can find and abort a hanging transaction on a live broker.

DescribeProducers answers, for each partition this broker leads, its active producers (id,
epoch, last sequence, last timestamp, coordinator epoch, the first offset of the open
transaction or -1), as Kafka's ReplicaManager.activeProducerState; a partition it does not lead
gets NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION.  WriteTxnMarkers goes to
the replica manager's handle_write_txn_markers (the marker written with the coordinator origin,
answered once the high watermark passes it, as Kafka's acks=all): the producer state refuses a
stale producer epoch (INVALID_PRODUCER_EPOCH) or coordinator epoch
(TRANSACTION_COORDINATOR_FENCED); a partition this broker does not lead gets
NOT_LEADER_OR_FOLLOWER.  For a stopped broker's dir, `python -m storage abort-txn` does the same
offline (storage/cli/abort_txn.py).

Served when codec.SUPPORTED has 27: ("WriteTxnMarkers", 1, 2) and 61: ("DescribeProducers", 0, 0),
and BrokerServer.handlers maps 27 and 61 to TxnAdminApis.write_txn_markers / describe_producers.
"""
from __future__ import annotations

import asyncio

from ..core.errors import Errors
from ..replication import messages as m
from .broker import MetadataSource


class TxnAdminApis:
    def __init__(self, node: MetadataSource, notifier):
        self.node = node
        self.notifier = notifier
        self.on_written = None      # (producer id, commit, [(topic, partition)]) -> None

    # ---- DescribeProducers -------------------------------------------------------------------
    def _producers(self, topic: str, index: int) -> dict:
        p, code = self.node.manager.leader_partition(topic, index)
        if code:
            return {"partition_index": index, "error_code": code, "error_message": None, "active_producers": []}
        with p.log.local.lock:
            entries = list(p.log.producer_state.active_producers.items())
        producers = [{"producer_id": pid, "producer_epoch": e.producer_epoch, "last_sequence": e.last_sequence,
                      "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                      "current_txn_start_offset": -1 if e.current_txn_first_offset is None
                      else e.current_txn_first_offset} for pid, e in sorted(entries)]
        return {"partition_index": index, "error_code": Errors.NONE, "error_message": None,
                "active_producers": producers}

    async def describe_producers(self, header, request) -> dict:
        return {"throttle_time": 0, "topics": [
            {"name": t.name, "partitions": [self._producers(t.name, int(i)) for i in t.partition_indexes]}
            for t in request.topics]}

    # ---- WriteTxnMarkers ---------------------------------------------------------------------
    async def write_markers(self, markers: list[m.TxnMarker]) -> m.WriteTxnMarkersResponse:
        """Write `markers` on the partitions this broker leads (acks=all), then tell `on_written`
        (the group coordinator: a transaction's offsets on `__consumer_offsets` become visible
        with its commit marker) what was written."""
        done = asyncio.get_running_loop().create_future()
        self.node.manager.handle_write_txn_markers(
            m.WriteTxnMarkersRequest(markers), callback=lambda r: done.done() or done.set_result(r))
        self.node.pump()
        self.notifier.notify({key for marker in markers for key in marker.partitions})
        answer = await done
        if self.on_written is not None:
            for marker in markers:
                codes = answer.errors.get(marker.producer_id, {})
                self.on_written(marker.producer_id, marker.commit,
                                [key for key in marker.partitions if codes.get(key) == Errors.NONE])
        return answer

    async def write_txn_markers(self, header, request) -> dict:
        markers = [m.TxnMarker(int(w.producer_id), int(w.producer_epoch), bool(w.transaction_result),
                               [(t.name, int(i)) for t in w.topics for i in t.partition_indexes],
                               int(w.coordinator_epoch)) for w in request.markers]
        answer = await self.write_markers(markers)
        return {"markers": [
            {"producer_id": w.producer_id, "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": i, "error_code": answer.errors.get(int(w.producer_id), {}).get(
                        (t.name, int(i)), Errors.UNKNOWN_SERVER_ERROR)} for i in t.partition_indexes]}
                for t in w.topics]}
            for w in request.markers]}
