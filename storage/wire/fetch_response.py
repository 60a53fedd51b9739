"""The Fetch response as the follower reads it, by hand (v12-v16, flexible; replication_rpc
asks v16): struct reads of the fields, the records a view of the answer's frame, not a copy --
kio's decode of the answer (its entities, and a bytes copy of every partition's records) was the
largest share of a follower's Python time under acks=all RF 3 (issue 33).

The objects present the attributes of kio's entities of the same version (a zero topic id read
as None, error codes as ints, the throttle time a timedelta, a tagged field not sent its
default), except that the records are a read-only memoryview of the frame (None when null).
Anything the reader does not take on -- a version outside v12-v16, a length beyond the frame, a
null array where kio wants one, a varint longer than 5 bytes, bad UTF-8, a nested tagged field,
a tag it does not know, an error code kio does not know, a top-level tagged field (v16's node endpoints, sent only with
NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH), bytes left over -- is NotOurs, and `decode`
leaves the frame to kio (codec.decode_response), which reads it as it always did.
tests/wire/test_fetch_response.py checks both against kio's decode.

Layout after the response header (correlation id, tagged fields): throttle_time_ms int32,
error_code int16, session_id int32, responses (compact array: v12 topic compact string, v13+
topic id uuid; partitions compact array: partition_index int32, error_code int16,
high_watermark, last_stable_offset, log_start_offset int64, aborted_transactions compact
nullable array of (producer_id, first_offset int64, tagged fields), preferred_read_replica
int32, records compact nullable bytes, tagged fields 0 diverging_epoch (epoch int32,
end_offset int64), 1 current_leader (leader_id int32, leader_epoch int32), 2 snapshot_id
(end_offset int64, epoch int32); topic tagged fields), tagged fields.
"""
from __future__ import annotations

import datetime
import struct
import uuid

from kio.schema.errors import ErrorCode

from . import codec
from .request_header import Entity, NotOurs, read_uvarint

FETCH_KEY = 1
FIRST_VERSION, LAST_VERSION = 12, 16
_TOPIC_IDS_FROM = 13
_TOP = struct.Struct(">iBihi")              # correlation id, header tags (0), throttle, error, session
_PART_HEAD = struct.Struct(">ihqqqB")     # ... and the aborted transactions' count's first byte
_I32 = struct.Struct(">i")
_ABORTED = struct.Struct(">qqB")            # producer id, first offset, no tagged fields
_EPOCH_END = struct.Struct(">iqB")          # epoch, end offset, no tagged fields
_LEADER = struct.Struct(">iiB")
_SNAPSHOT = struct.Struct(">qiB")
# Topic ids and throttle times as kio reads them (immutable: one object serves every answer
# naming it); a follower is told of the same few on every fetch.
_IDS: dict[bytes, uuid.UUID | None] = {bytes(16): None}
_UNSEEN = object()
_THROTTLES: dict[int, datetime.timedelta] = {}
_CACHED_MAX = 4096
_KNOWN_ERRORS = frozenset(int(e) for e in ErrorCode)     # kio refuses any other code


class EpochEndOffset(Entity):
    __slots__ = ("epoch", "end_offset")

    def __init__(self, epoch: int = -1, end_offset: int = -1):
        self.epoch, self.end_offset = epoch, end_offset


class LeaderIdAndEpoch(Entity):
    __slots__ = ("leader_id", "leader_epoch")

    def __init__(self, leader_id: int = -1, leader_epoch: int = -1):
        self.leader_id, self.leader_epoch = leader_id, leader_epoch


class SnapshotId(Entity):
    __slots__ = ("end_offset", "epoch")

    def __init__(self, end_offset: int = -1, epoch: int = -1):
        self.end_offset, self.epoch = end_offset, epoch


class AbortedTransaction(Entity):
    __slots__ = ("producer_id", "first_offset")

    def __init__(self, producer_id: int, first_offset: int):
        self.producer_id, self.first_offset = producer_id, first_offset


# The defaults a partition's tagged fields take when not sent (never changed: shared).
NO_DIVERGING, NO_LEADER, NO_SNAPSHOT = EpochEndOffset(), LeaderIdAndEpoch(), SnapshotId()


class PartitionData(Entity):
    __slots__ = ("partition_index", "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "diverging_epoch", "current_leader", "snapshot_id", "aborted_transactions",
                 "preferred_read_replica", "records")


class FetchableTopicResponse(Entity):
    __slots__ = ("topic", "topic_id", "partitions")     # `topic` up to v12, `topic_id` from v13 (one is unset)


class FetchResponse(Entity):
    __slots__ = ("throttle_time", "error_code", "session_id", "responses", "node_endpoints")   # the last from v16

    def __init__(self, throttle_time, error_code: int, session_id: int, responses: tuple):
        self.throttle_time, self.error_code, self.session_id = throttle_time, error_code, session_id
        self.responses = responses


def decode(version: int, frame: bytes):
    """(correlation id, response) of a Fetch response frame (no size prefix): read by hand,
    or by kio (codec.decode_response) when the reader leaves it."""
    try:
        return read(version, frame)
    except NotOurs:
        return codec.decode_response(FETCH_KEY, version, frame)


def read(version: int, frame: bytes):
    """(correlation id, FetchResponse) read by hand; NotOurs for anything unusual (see above)."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise NotOurs
    data = frame if type(frame) is bytes else bytes(frame)     # bytes index faster than a view
    view = memoryview(frame).toreadonly()       # the records' views (of the caller's frame)
    end = len(data)
    try:
        correlation_id, header_tags, throttle_ms, error_code, session_id = _TOP.unpack_from(data, 0)
        if header_tags or error_code not in _KNOWN_ERRORS:
            raise NotOurs
        at = _TOP.size
        count = data[at]
        at = at + 1 if count < 0x80 else read_uvarint(data, at, end)[1]
        if count >= 0x80:
            count = read_uvarint(data, _TOP.size, end)[0]
        if not count:
            raise NotOurs
        topics = []
        by_id = version >= _TOPIC_IDS_FROM
        for _ in range(count - 1):
            topic = FetchableTopicResponse()
            if by_id:
                raw = data[at:at + 16]
                topic_id = _IDS.get(raw, _UNSEEN)
                if topic_id is _UNSEEN:
                    if len(raw) != 16:
                        raise NotOurs
                    topic_id = uuid.UUID(bytes=raw)
                    if len(_IDS) < _CACHED_MAX:
                        _IDS[raw] = topic_id
                topic.topic_id, at = topic_id, at + 16
            else:
                size, at = read_uvarint(data, at, end)
                if not size or at + size - 1 > end:
                    raise NotOurs
                topic.topic, at = str(data[at:at + size - 1], "utf-8"), at + size - 1
            topic.partitions, at = _partitions(data, view, at, end)
            if data[at]:            # the topic's tagged fields: none
                raise NotOurs
            topics.append(topic)
            at += 1
        if at + 1 != end or data[at]:           # no top-level tagged fields, nothing after
            raise NotOurs
    except (struct.error, UnicodeDecodeError, IndexError):
        raise NotOurs from None
    throttle = _THROTTLES.get(throttle_ms)
    if throttle is None:
        throttle = datetime.timedelta(milliseconds=throttle_ms)
        if len(_THROTTLES) < _CACHED_MAX:
            _THROTTLES[throttle_ms] = throttle
    response = FetchResponse(throttle, error_code, session_id, tuple(topics))
    if version >= 16:
        response.node_endpoints = ()
    return correlation_id, response


def _partitions(data: bytes, view, at: int, end: int) -> tuple[tuple, int]:
    count, at = read_uvarint(data, at, end)
    if not count:
        raise NotOurs
    out = []
    unpack_head, unpack_i32, known = _PART_HEAD.unpack_from, _I32.unpack_from, _KNOWN_ERRORS
    for _ in range(count - 1):
        p = PartitionData()
        p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset, aborted = \
            unpack_head(data, at)
        if p.error_code not in known:
            raise NotOurs
        at += _PART_HEAD.size
        if aborted >= 0x80:
            aborted, at = read_uvarint(data, at - 1, end)
        if aborted:
            txns = []
            for _ in range(aborted - 1):
                producer_id, first_offset, tags = _ABORTED.unpack_from(data, at)
                if tags:
                    raise NotOurs
                txns.append(AbortedTransaction(producer_id, first_offset))
                at += _ABORTED.size
            p.aborted_transactions = tuple(txns)
        else:
            p.aborted_transactions = None
        p.preferred_read_replica = unpack_i32(data, at)[0]
        size, at = read_uvarint(data, at + 4, end)
        if size:
            size -= 1
            if at + size > end:
                raise NotOurs
            p.records, at = view[at:at + size], at + size
        else:
            p.records = None
        p.diverging_epoch, p.current_leader, p.snapshot_id = NO_DIVERGING, NO_LEADER, NO_SNAPSHOT
        tags = data[at]
        at += 1
        if tags:
            at = _partition_tags(data, p, at - 1, end)
        out.append(p)
    return tuple(out), at


def _partition_tags(data: bytes, p: PartitionData, at: int, end: int) -> int:
    """Read a partition's tagged fields (at its count) into `p`; the position after them."""
    tags, at = read_uvarint(data, at, end)
    last = -1
    for _ in range(tags):
        tag, at = read_uvarint(data, at, end)
        size, at = read_uvarint(data, at, end)
        if tag <= last or at + size > end:
            raise NotOurs
        last = tag
        if tag == 0 and size == _EPOCH_END.size:
            epoch, offset, nested = _EPOCH_END.unpack_from(data, at)
            p.diverging_epoch = EpochEndOffset(epoch, offset)
        elif tag == 1 and size == _LEADER.size:
            leader, epoch, nested = _LEADER.unpack_from(data, at)
            p.current_leader = LeaderIdAndEpoch(leader, epoch)
        elif tag == 2 and size == _SNAPSHOT.size:
            offset, epoch, nested = _SNAPSHOT.unpack_from(data, at)
            p.snapshot_id = SnapshotId(offset, epoch)
        else:
            raise NotOurs
        if nested:
            raise NotOurs
        at += size
    return at
