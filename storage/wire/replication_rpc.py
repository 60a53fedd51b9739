"""The follower's requests on the wire: the replication layer's FetchRequest,
OffsetForLeaderEpochRequest and ListOffsetsRequest as Kafka's Fetch v16 (topics by id, the
replica state with the follower's broker epoch: KIP-903; LastFetchedEpoch: KIP-320),
OffsetForLeaderEpoch v4 and ListOffsets v7, and their answers back as the layer's responses."""
from __future__ import annotations

from ..replication import messages as m
from .client import Peer, PeerError

FETCH_VERSION, EPOCH_VERSION, LIST_OFFSETS_VERSION = 16, 4, 7
MAX_WAIT_MS = 500


async def exchange(node, peer: Peer, request):
    if isinstance(request, m.FetchRequest):
        return await _fetch(node, peer, request)
    if isinstance(request, m.OffsetForLeaderEpochRequest):
        return await _epochs(peer, request)
    if isinstance(request, m.ListOffsetsRequest):
        return await _list_offsets(peer, request)
    raise PeerError(f"no wire form for {type(request).__name__}")


async def _fetch(node, peer: Peer, request: m.FetchRequest) -> m.FetchResponse:
    by_topic: dict[str, list] = {}
    for item in request.partitions:
        by_topic.setdefault(item.topic, []).append(item)
    topics = [{"topic_id": node.topic_id(topic), "partitions": [
        {"partition": i.partition, "current_leader_epoch": i.current_leader_epoch, "fetch_offset": i.fetch_offset,
         "last_fetched_epoch": i.last_fetched_epoch, "log_start_offset": i.log_start_offset,
         "partition_max_bytes": i.partition_max_bytes} for i in items]} for topic, items in by_topic.items()]
    body = {"replica_state": {"replica_id": request.replica_id, "replica_epoch": request.replica_epoch},
            "max_wait": MAX_WAIT_MS, "min_bytes": 1, "max_bytes": 16 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [], "topics": topics}
    answer = await peer.call(1, FETCH_VERSION, body)
    out = []
    for t in answer.responses:
        name = node.topic_by_id(int(t.topic_id))
        if name is None:
            continue
        for p in t.partitions:
            diverging = None
            if p.diverging_epoch is not None and p.diverging_epoch.epoch != -1:
                diverging = m.EpochEndOffset(p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
            out.append(m.FetchResponsePartition(name, p.partition_index, int(p.error_code), p.high_watermark,
                                                p.log_start_offset, diverging, bytes(p.records or b""),
                                                p.last_stable_offset))
    return m.FetchResponse(out)


async def _epochs(peer: Peer, request: m.OffsetForLeaderEpochRequest) -> m.OffsetForLeaderEpochResponse:
    by_topic: dict[str, list] = {}
    for item in request.partitions:
        by_topic.setdefault(item.topic, []).append(item)
    body = {"replica_id": request.replica_id, "topics": [{"topic": topic, "partitions": [
        {"partition": i.partition, "current_leader_epoch": i.current_leader_epoch, "leader_epoch": i.leader_epoch}
        for i in items]} for topic, items in by_topic.items()]}
    answer = await peer.call(23, EPOCH_VERSION, body)
    return m.OffsetForLeaderEpochResponse([
        m.OffsetForLeaderEpochResult(t.topic, p.partition, int(p.error_code), p.leader_epoch, p.end_offset)
        for t in answer.topics for p in t.partitions])


async def _list_offsets(peer: Peer, request: m.ListOffsetsRequest) -> m.ListOffsetsResponse:
    body = {"replica_id": request.replica_id, "isolation_level": 0, "topics": [{"name": request.topic, "partitions": [
        {"partition_index": request.partition, "current_leader_epoch": request.current_leader_epoch,
         "timestamp": request.timestamp}]}]}
    answer = await peer.call(2, LIST_OFFSETS_VERSION, body)
    p = answer.topics[0].partitions[0]
    return m.ListOffsetsResponse(request.topic, request.partition, int(p.error_code), p.timestamp, p.offset,
                                 p.leader_epoch)
