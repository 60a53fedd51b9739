"""The follower's requests on the wire: the replication layer's FetchRequest,
OffsetForLeaderEpochRequest and ListOffsetsRequest as Kafka's Fetch v16 (topics by id, the
replica state with the follower's broker epoch: KIP-903; LastFetchedEpoch: KIP-320),
OffsetForLeaderEpoch v4 and ListOffsets v7, and their answers back as the layer's responses."""
from __future__ import annotations

from ..core.errors import Errors
from ..replication import messages as m
from . import fetch_response
from .client import Peer, PeerError

FETCH_VERSION, EPOCH_VERSION, LIST_OFFSETS_VERSION = 16, 4, 7
MAX_WAIT_MS = 500


async def exchange(node, peer: Peer, request, session: "FollowerSession | None" = None):
    """Send a replication request to its leader and return the layer's response (a Fetch in
    `session`, the follower's incremental fetch session with that leader, when one is given)."""
    if isinstance(request, m.FetchRequest):
        return await _fetch(node, peer, request, session)
    if isinstance(request, m.OffsetForLeaderEpochRequest):
        return await _epochs(peer, request)
    if isinstance(request, m.ListOffsetsRequest):
        return await _list_offsets(peer, request)
    raise PeerError(f"no wire form for {type(request).__name__}")


async def _fetch(node, peer: Peer, request: m.FetchRequest, session: "FollowerSession | None" = None,
                 retried: bool = False) -> m.FetchResponse:
    """The request as Fetch v16 -- in `session` (KIP-227: only what changed goes, only what has
    news comes back) when one is given -- and the answer for every partition of the request."""
    session = session if session is not None else FollowerSession()
    items, forgotten, session_id, epoch = session.next_request(request.partitions)
    topics = [{"topic_id": node.topic_id(topic), "partitions": [
        {"partition": i.partition, "current_leader_epoch": i.current_leader_epoch, "fetch_offset": i.fetch_offset,
         "last_fetched_epoch": i.last_fetched_epoch, "log_start_offset": i.log_start_offset,
         "partition_max_bytes": i.partition_max_bytes} for i in parts]} for topic, parts in _by_topic(items)]
    gone = [{"topic_id": node.topic_id(topic), "partitions": [k[1] for k in keys]}
            for topic, keys in _by_topic(forgotten, lambda k: k[0])]
    body = {"replica_state": {"replica_id": request.replica_id, "replica_epoch": request.replica_epoch},
            "max_wait": MAX_WAIT_MS, "min_bytes": 1, "max_bytes": 16 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "", "forgotten_topics_data": gone,
            "topics": topics}
    try:
        answer = await peer.call(1, FETCH_VERSION, body, decode=fetch_response.decode)
    except PeerError:
        session.reset()             # the leader may have moved the session's epoch, or not
        raise
    if answer.error_code:           # the session is gone (evicted, the leader restarted): a full fetch
        session.reset()
        if retried:
            raise PeerError(f"Fetch: error {int(answer.error_code)} twice")
        return await _fetch(node, peer, request, session, retried=True)
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
                                                p.log_start_offset, diverging, b"" if p.records is None else p.records,
                                                p.last_stable_offset))
    return m.FetchResponse(session.answered(answer.session_id, request.partitions, out))


def _by_topic(items, topic_of=lambda i: i.topic) -> list[tuple[str, list]]:
    out: dict[str, list] = {}
    for item in items:
        out.setdefault(topic_of(item), []).append(item)
    return list(out.items())


class FollowerSession:
    """A follower's incremental fetch session with one leader (KIP-227; Kafka's
    FetchSessionHandler): the first Fetch is full (epoch 0) and the leader answers it with a
    session id; later ones carry only the partitions whose fetch position changed (or that
    joined) and name those that left, and the leader answers only the partitions with news
    (records, a moved high watermark or log start, an error).  A partition of the request left
    out of the answer had none (`unchanged`: the fetcher parks it, handle_unchanged).  The
    session holds what the fetcher fetches from this leader plus what it parked there
    (`parked`, the fetcher's live dict, and `stirred`, those unparked since: ReplicaFetcher
    .parked_of / take_stirred), so the fetcher lists only what moved, and a fetch's size, and the
    work of building it and applying its answer, follow the partitions that move, not all those
    followed.  One Fetch in flight per session (the fetcher keeps one per leader)."""

    def __init__(self, parked: dict | None = None, take_stirred=None):
        self.parked = parked if parked is not None else {}
        self.take_stirred = take_stirred or set
        self.reset()

    def reset(self) -> None:
        """Start again with a full fetch (which closes the session at the leader, if any)."""
        self.closing = getattr(self, "session_id", 0)
        self.unchanged: list[tuple[str, int]] = []
        self.session_id, self.epoch = 0, 0
        self.sent: dict[tuple[str, int], tuple | None] = {}     # what the leader's session holds of each
        # What the leader's session told of (the answers themselves are not kept: their records
        # are views of the answer's frame, which would stay alive with them).
        self.told: set[tuple[str, int]] = set()
        self.last: list[tuple[str, int]] = []       # the keys of the latest request's items

    def next_request(self, items) -> tuple[list, list, int, int]:
        """(partitions to send, (topic, partition) keys to forget, session id, epoch)."""
        wanted = {(i.topic, i.partition): i for i in items}
        stirred = self.take_stirred()
        previous, self.last = self.last, list(wanted)
        if not self.session_id:
            # A full fetch: the parked partitions too (its answer names every one: unparked).
            wanted.update((k, i) for k, i in self.parked.items() if k not in wanted)
            self.sent = {k: _position(i) for k, i in wanted.items()}
            return list(wanted.values()), [], self.closing, 0
        changed = [i for k, i in wanted.items() if self.sent.get(k) != _position(i)]
        # The session holds what was wanted or parked at the latest request; of those, only the
        # latest request's items and the partitions unparked since can have left both.
        forgotten = [k for k in dict.fromkeys([*previous, *stirred])
                     if k in self.sent and k not in wanted and k not in self.parked]
        for k in forgotten:
            del self.sent[k]
            self.told.discard(k)
        self.sent.update({(i.topic, i.partition): _position(i) for i in changed})
        return changed, forgotten, self.session_id, self.epoch

    def answered(self, session_id: int, items, parts: list) -> list:
        """The leader's answers; `unchanged` lists the partitions of the request it left out
        (nothing new: the fetcher's handle_unchanged).  One it never told of is answered as an
        unknown error (it backs off and is asked again)."""
        if not self.session_id:
            self.session_id, self.epoch, self.closing = session_id, 1, 0
        else:
            self.epoch = 1 if self.epoch == 2**31 - 1 else self.epoch + 1
        if not session_id:          # the leader made no session (its cache is full): full fetches
            self.reset()
            self.closing = 0
        for p in parts:
            key = (p.topic, p.partition)
            if p.error_code:        # the leader answers it again until the error is gone
                self.told.discard(key)
                if key in self.sent:
                    self.sent[key] = None       # sent again if still fetched, else forgotten
            else:
                self.told.add(key)
        got = {(p.topic, p.partition) for p in parts}
        self.unchanged = []
        for i in items:
            key = (i.topic, i.partition)
            if key in got:
                continue
            if key in self.told:
                self.unchanged.append(key)
            else:
                parts.append(m.FetchResponsePartition(i.topic, i.partition, Errors.UNKNOWN_SERVER_ERROR))
        return parts


def _position(item: m.FetchPartition) -> tuple:
    return (item.fetch_offset, item.current_leader_epoch, item.last_fetched_epoch, item.log_start_offset,
            item.partition_max_bytes)


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
