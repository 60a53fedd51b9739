"""`OffsetAnswers`: how a broker's `ReplicaManager` (storage/replication/replica.py) answers
ListOffsets and DeleteRecords, and the low watermark DeleteRecords reports (Kafka's
Partition.lowWatermarkIfLeader).

A mixin of ReplicaManager, apart from it to keep replica.py within the module size.  It uses
the manager's partitions, broker_id, metadata and leader_partition (the leader's checks,
KIP-704's RECOVERING included).

Invariants:
  - a consumer is never told an offset at or past the high watermark (but the earliest), and a
    new leader whose high watermark is below its epoch start offset answers OFFSET_NOT_AVAILABLE
    (as Kafka's Partition.fetchOffsetForTimestamp);
  - DeleteRecords moves the log start only up to the high watermark.
"""
from __future__ import annotations

from ..core.errors import Errors
from ..log.reads import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from .messages import (
    CONSUMER_REPLICA_ID,
    NO_EPOCH,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)


class OffsetAnswers:
    """ListOffsets and DeleteRecords as the leader answers them (a ReplicaManager mixin)."""

    def handle_list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        def answer(code, timestamp=-1, offset=-1, epoch=NO_EPOCH):
            return ListOffsetsResponse(request.topic, request.partition, code, timestamp, offset, epoch)

        p, code = self.leader_partition(request.topic, request.partition, request.current_leader_epoch)
        if code:
            return answer(code)
        log = p.log
        consumer = request.replica_id == CONSUMER_REPLICA_ID
        if consumer and p.leader_epoch_start_offset > log.high_watermark and request.timestamp != EARLIEST_TIMESTAMP:
            return answer(Errors.OFFSET_NOT_AVAILABLE)      # a new leader's HW has not caught up yet
        if request.timestamp == LATEST_TIMESTAMP:
            offset = log.high_watermark if consumer else log.log_end_offset
            return answer(Errors.NONE, -1, offset, log.epoch_for_offset(offset - 1) if offset > 0 else NO_EPOCH)
        found = log.offset_for_timestamp(request.timestamp) if request.timestamp in (EARLIEST_TIMESTAMP, MAX_TIMESTAMP) \
            or request.timestamp >= 0 else None
        if found is None or (consumer and found.offset >= log.high_watermark and request.timestamp != EARLIEST_TIMESTAMP):
            return answer(Errors.NONE)
        epoch = found.leader_epoch if found.leader_epoch is not None else NO_EPOCH
        return answer(Errors.NONE, found.timestamp, found.offset, epoch)

    def low_watermark(self, topic: str, partition: int) -> int | None:
        """The lowest log start offset of a led partition's replicas on live brokers (Kafka's
        Partition.lowWatermarkIfLeader: a follower counts with what its last fetch said, -1
        before any); None when this broker does not lead it."""
        p = self.partitions.get((topic, partition))
        if p is None or p.leader != self.broker_id:
            return None
        low = p.log.log_start_offset
        for b, follower in p.followers.items():
            info = self.metadata.get(b)
            if b in p.replicas and info is not None and not info.fenced:
                low = min(low, follower.log_start_offset)
        return low

    def handle_delete_records(self, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        p, code = self.leader_partition(request.topic, request.partition)
        if code:
            return DeleteRecordsResponse(request.topic, request.partition, code)
        log = p.log
        offset = log.high_watermark if request.offset == -1 else request.offset
        if offset < 0 or offset > log.high_watermark:
            return DeleteRecordsResponse(request.topic, request.partition, Errors.OFFSET_OUT_OF_RANGE)
        log.increment_log_start_offset(offset)
        return DeleteRecordsResponse(request.topic, request.partition, Errors.NONE, log.log_start_offset)
