"""A follower's Fetch request laid out by hand (v16 only, the version replication_rpc sends):
byte for byte what kio's writer makes of the same body (tests/wire/test_fetch_request.py
checks), without building its entities -- that was a third of a follower's Python time per
fetch under acks=all (issue 33).

Fetch v16 (flexible): request header v2 (api key, version, correlation id, the client id as a
legacy nullable string, no tagged fields), then max_wait_ms, min_bytes, max_bytes,
isolation_level, session_id, session_epoch, topics (compact array: topic id, partitions:
partition, current leader epoch, fetch offset, last fetched epoch, log start offset, partition
max bytes), forgotten topics (topic id, partitions), rack id, and the tagged fields: the replica
state (tag 1, KIP-903) when it is not the default (-1, -1); the cluster id (tag 0) is never sent.
"""
from __future__ import annotations

import datetime
import struct
import uuid

from ..core.varint import uvarint
from .request_header import Entity, NotOurs, RequestHeader, present, read_uvarint

VERSION = 16
_HEAD = struct.Struct(">hhi")
_TOP = struct.Struct(">iiibii")
_PART = struct.Struct(">iiqiqi")
_STATE = struct.Struct(">iqB")


def _uuid(value) -> bytes:
    return int(getattr(value, "int", value) or 0).to_bytes(16, "big")


def encode(correlation_id: int, client_id: str | None, body: dict) -> bytes:
    """The size-prefixed Fetch v16 request frame of `body` (codec.encode_request's dict)."""
    out = [b"", _HEAD.pack(1, VERSION, correlation_id)]
    if client_id is None:
        out.append(b"\xff\xff")
    else:
        name = client_id.encode()
        out += [struct.pack(">h", len(name)), name]
    out.append(b"\0")                   # the header's tagged fields
    out.append(_TOP.pack(body["max_wait"], body["min_bytes"], body["max_bytes"], body["isolation_level"],
                         body["session_id"], body["session_epoch"]))
    topics = body["topics"]
    out.append(uvarint(len(topics) + 1))
    for t in topics:
        parts = t["partitions"]
        out += [_uuid(t["topic_id"]), uvarint(len(parts) + 1)]
        for p in parts:
            out += [_PART.pack(p["partition"], p["current_leader_epoch"], p["fetch_offset"], p["last_fetched_epoch"],
                               p["log_start_offset"], p["partition_max_bytes"]), b"\0"]
        out.append(b"\0")
    forgotten = body["forgotten_topics_data"]
    out.append(uvarint(len(forgotten) + 1))
    for t in forgotten:
        parts = t["partitions"]
        out += [_uuid(t["topic_id"]), uvarint(len(parts) + 1), struct.pack(f">{len(parts)}i", *parts), b"\0"]
    rack = body["rack_id"].encode()
    out += [uvarint(len(rack) + 1), rack]
    state = body.get("replica_state")
    if state is not None and (state["replica_id"], state["replica_epoch"]) != (-1, -1):
        out += [b"\x01\x01", uvarint(_STATE.size), _STATE.pack(state["replica_id"], state["replica_epoch"], 0)]
    else:
        out.append(b"\0")
    frame = b"".join(out)
    return struct.pack(">i", len(frame)) + frame


# ---- the request read (v4..v16, the versions the broker serves) ---------------------------------
#
# read_request(frame) walks a Fetch frame with struct reads into objects that present kio's
# entities' attributes for the frame's version (a field the version lacks is absent, as on kio's
# entity: getattr's default answers for it; topics named by name before v13, by id from v13, the
# zero id read as None; max_wait a timedelta; replica_id before v15, replica_state from v15, the
# default (-1, -1) when the tag is not sent; cluster_id (tag 0) from v12).  Anything it does not
# take on -- a length beyond the frame, a null array, a varint longer than 5 bytes, bad UTF-8, a
# tagged field other than the request's cluster id and replica state, or one of those whose size
# is not what it holds -- returns None, and codec.parse_request leaves the frame to kio, which
# answers it exactly as before (tests/wire/test_fetch_request_read.py checks both against kio).

FETCH_KEY = 1
FIRST_READ_VERSION, LAST_READ_VERSION = 4, 16
_FLEXIBLE_FROM, _TOPIC_IDS_FROM, _REPLICA_STATE_FROM = 12, 13, 15
_READ_HEADER = struct.Struct(">hhih")       # api key, version, correlation id, client id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TOP_V4 = struct.Struct(">iiiib")           # replica id, max wait, min bytes, max bytes, isolation
_TOP_V15 = struct.Struct(">iiib")           # v15+: the replica id moved into a tagged field
_SESSION = struct.Struct(">ii")
_REPLICA_STATE = struct.Struct(">iqb")      # replica id, epoch, no tagged fields
_PART_V4 = struct.Struct(">iqi")
_PART_V5 = struct.Struct(">iqqi")
_PART_V9 = struct.Struct(">iiqqi")
_PART_V12 = struct.Struct(">iiqiqib")       # ... and the partition's (empty) tagged fields
_ZERO_ID = bytes(16)
_STATE_TAG = b"\x01\x01\x0d"                 # one tagged field, tag 1, 13 bytes: the replica state alone
# Topic ids and wait times as kio reads them (immutable: one object serves every request naming
# it); a follower names the same few on every fetch.
_IDS: dict[bytes, uuid.UUID] = {}
_WAITS: dict[int, datetime.timedelta] = {}
_CACHED_MAX = 4096


class ReplicaState(Entity):
    __slots__ = ("replica_id", "replica_epoch")

    def __init__(self, replica_id: int = -1, replica_epoch: int = -1):
        self.replica_id, self.replica_epoch = replica_id, replica_epoch


class FetchPartition(Entity):
    __slots__ = ("partition", "current_leader_epoch", "fetch_offset", "last_fetched_epoch", "log_start_offset",
                 "partition_max_bytes")

    def __init__(self, partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
                 partition_max_bytes):
        self.partition, self.current_leader_epoch, self.fetch_offset = partition, current_leader_epoch, fetch_offset
        self.last_fetched_epoch, self.log_start_offset = last_fetched_epoch, log_start_offset
        self.partition_max_bytes = partition_max_bytes


class FetchTopic(Entity):
    """`topic` (a name, v4..v12) or `topic_id` (v13+), and `partitions`: FetchPartition (or, in a
    forgotten topic, partition indexes)."""

    __slots__ = ("topic", "topic_id", "partitions")


class FetchRequest(Entity):
    """A Fetch request as kio's entity of its version presents it to a handler (the class of
    each version, below, carries `__version__`)."""

    __slots__ = ("cluster_id", "replica_id", "replica_state", "max_wait", "min_bytes", "max_bytes",
                 "isolation_level", "session_id", "session_epoch", "topics", "forgotten_topics_data", "rack_id")
    __version__ = -1

    def replace(self, **changes) -> "FetchRequest":
        """A copy with `changes` (dataclasses.replace for kio's entities; authz splits a request)."""
        out = type(self).__new__(type(self))
        for name, value in {**present(self), **changes}.items():
            setattr(out, name, value)
        return out


_REQUEST_CLASSES = {v: type("FetchRequest", (FetchRequest,), {"__slots__": (), "__version__": v})
                    for v in range(FIRST_READ_VERSION, LAST_READ_VERSION + 1)}


def read_request(frame) -> tuple[RequestHeader, FetchRequest] | None:
    """(header, request) of a Fetch frame of v4..v16, or None to have kio parse it."""
    view = memoryview(frame)
    try:
        return _read(view, len(frame), True)
    except (NotOurs, struct.error, UnicodeDecodeError, ValueError, IndexError):
        pass            # not the common shape (or not ours at all): the whole walk decides
    try:
        return _read(view, len(frame))
    except (NotOurs, struct.error, UnicodeDecodeError, ValueError):
        return None


def _count(view, at: int, end: int, flexible: bool) -> tuple[int, int]:
    """(length, position after it) of an array or a string, refused if null or beyond the bytes left."""
    if flexible:
        if at < end and view[at] < 0x80:
            length, at = view[at] - 1, at + 1
        else:
            raw, at = read_uvarint(view, at, end)
            length = raw - 1
    else:
        length, at = _I32.unpack_from(view, at)[0], at + 4
    if length < 0 or length > end - at:
        raise NotOurs
    return length, at


def _string(view, at: int, end: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        length, at = _count(view, at, end, True)
    else:
        length, at = _I16.unpack_from(view, at)[0], at + 2
        if length < 0 or length > end - at:
            raise NotOurs
    return str(view[at:at + length], "utf-8"), at + length


def _topic_key(view, at: int, end: int, version: int, topic: FetchTopic) -> int:
    """The topic's name (before v13) or id set on `topic`; the position after it."""
    if version >= _TOPIC_IDS_FROM:
        raw = bytes(view[at:at + 16])
        if len(raw) != 16:
            raise NotOurs
        topic_id = _IDS.get(raw)
        if topic_id is None:
            if len(_IDS) >= _CACHED_MAX:
                _IDS.clear()
            topic_id = _IDS[raw] = uuid.UUID(bytes=raw)
        topic.topic_id = None if raw == _ZERO_ID else topic_id
        return at + 16
    topic.topic, at = _string(view, at, end, version >= _FLEXIBLE_FROM)
    return at


def _no_tags(view, at: int, end: int) -> int:
    if at >= end or view[at] != 0:
        raise NotOurs
    return at + 1


def _partitions(view, at: int, end: int, version: int, count: int) -> tuple[list, int]:
    parts = []
    if version >= _FLEXIBLE_FROM:
        stop = at + _PART_V12.size * count
        if stop > end:
            raise NotOurs
        for partition, leader_epoch, offset, last_epoch, start, most, tags in _PART_V12.iter_unpack(view[at:stop]):
            if tags:
                raise NotOurs
            parts.append(FetchPartition(partition, leader_epoch, offset, last_epoch, start, most))
        return parts, stop
    shape = _PART_V9 if version >= 9 else _PART_V5 if version >= 5 else _PART_V4
    for _ in range(count):
        fields = shape.unpack_from(view, at)
        at += shape.size
        if version >= 9:
            p = FetchPartition(fields[0], fields[1], fields[2], -1, fields[3], fields[4])
        elif version >= 5:
            p = FetchPartition(fields[0], -1, fields[1], -1, fields[2], fields[3])
            del p.current_leader_epoch
        else:
            p = FetchPartition(fields[0], -1, fields[1], -1, -1, fields[2])
            del p.current_leader_epoch, p.log_start_offset
        del p.last_fetched_epoch
        parts.append(p)
    return parts, at


def _tagged_fields(view, at: int, end: int, version: int, request: FetchRequest) -> int:
    """The request's tagged fields: cluster_id (tag 0) and, from v15, replica_state (tag 1)."""
    if at < end and view[at] == 0:
        return at + 1
    if version >= _REPLICA_STATE_FROM and view[at:at + 3] == _STATE_TAG:       # a follower's
        replica_id, epoch, tags = _REPLICA_STATE.unpack_from(view, at + 3)
        if tags:
            raise NotOurs
        request.replica_state = ReplicaState(replica_id, epoch)
        return at + 3 + _REPLICA_STATE.size
    count, at = read_uvarint(view, at, end)
    last = -1
    for _ in range(count):
        tag, at = read_uvarint(view, at, end)
        size, at = read_uvarint(view, at, end)
        if tag <= last or size > end - at:
            raise NotOurs
        last, stop = tag, at + size
        if tag == 0:
            length, at = read_uvarint(view, at, stop)
            if length == 0:
                request.cluster_id = None
            else:
                request.cluster_id, at = str(view[at:at + length - 1], "utf-8"), at + length - 1
        elif tag == 1 and version >= _REPLICA_STATE_FROM and size == _REPLICA_STATE.size:
            replica_id, epoch, tags = _REPLICA_STATE.unpack_from(view, at)
            if tags:
                raise NotOurs
            request.replica_state, at = ReplicaState(replica_id, epoch), stop
        else:
            raise NotOurs          # a tag this reader does not know: kio's walk
        if at != stop:
            raise NotOurs
    return at


# ---- the common shape (v13..v16), read in one pass ------------------------------------------
#
# A consumer's and a follower's fetch of v13+: topics by id, fewer than 127 topics and 127
# partitions a topic (one-byte counts), no forgotten topics, an empty rack id, and no tagged fields
# but the follower's replica state alone.  _common reads that shape with no call a field; anything
# else raises NotOurs (or runs past the frame: IndexError, struct.error) and read_request walks the
# frame again with _read's general walk, which decides -- so this accepts nothing that walk would
# not read alike (tests/wire/test_fetch_request_read.py checks both against kio).
_TOP_V13 = struct.Struct(">iiiibii")        # replica id, max wait, min/max bytes, isolation, session
_TOP_V15_SESSION = struct.Struct(">iiibii")
_PART_SIZE = _PART_V12.size
_NO_REPLICA_STATE = ReplicaState()           # the default (-1, -1): read only, shared


def _common(view, at: int, end: int, version: int, request: FetchRequest) -> None:
    if version >= _REPLICA_STATE_FROM:
        max_wait, request.min_bytes, request.max_bytes, request.isolation_level, request.session_id, \
            request.session_epoch = _TOP_V15_SESSION.unpack_from(view, at)
        at += _TOP_V15_SESSION.size
    else:
        request.replica_id, max_wait, request.min_bytes, request.max_bytes, request.isolation_level, \
            request.session_id, request.session_epoch = _TOP_V13.unpack_from(view, at)
        at += _TOP_V13.size
    wait = _WAITS.get(max_wait)
    if wait is None:
        raise NotOurs               # the general walk caches it
    request.max_wait = wait
    count = view[at] - 1
    at += 1
    if count < 0 or count >= 0x7F:
        raise NotOurs
    topics = []
    new_topic, new_partition = FetchTopic.__new__, FetchPartition.__new__
    for _ in range(count):
        raw = bytes(view[at:at + 16])
        topic_id = _IDS.get(raw)
        if topic_id is None or raw == _ZERO_ID:
            raise NotOurs           # the general walk reads (and caches) a new id
        n = view[at + 16] - 1
        at += 17
        stop = at + _PART_SIZE * n
        if n < 0 or n >= 0x7F or stop >= end or view[stop] != 0:
            raise NotOurs
        parts = []
        for partition, leader_epoch, offset, last_epoch, start, most, tags in _PART_V12.iter_unpack(view[at:stop]):
            if tags:
                raise NotOurs
            p = new_partition(FetchPartition)
            p.partition, p.current_leader_epoch, p.fetch_offset = partition, leader_epoch, offset
            p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes = last_epoch, start, most
            parts.append(p)
        topic = new_topic(FetchTopic)
        topic.topic_id, topic.partitions = topic_id, tuple(parts)
        topics.append(topic)
        at = stop + 1
    request.topics = tuple(topics)
    if view[at] != 1 or view[at + 1] != 1:
        raise NotOurs               # forgotten topics, or a rack id
    request.forgotten_topics_data, request.rack_id, request.cluster_id = (), "", None
    at += 2
    if view[at] == 0:
        if version >= _REPLICA_STATE_FROM:
            request.replica_state = _NO_REPLICA_STATE
        return
    if version < _REPLICA_STATE_FROM or view[at:at + 3] != _STATE_TAG:
        raise NotOurs
    replica_id, epoch, tags = _REPLICA_STATE.unpack_from(view, at + 3)
    if tags:
        raise NotOurs
    request.replica_state = ReplicaState(replica_id, epoch)


def _read(view, end: int, common: bool = False):
    key, version, correlation_id, client_length = _READ_HEADER.unpack_from(view, 0)
    if key != FETCH_KEY or not FIRST_READ_VERSION <= version <= LAST_READ_VERSION:
        raise NotOurs
    at = 10
    if client_length < -1 or client_length > end - at:
        raise NotOurs
    client_id = None
    if client_length >= 0:
        client_id, at = str(view[at:at + client_length], "utf-8"), at + client_length
    flexible = version >= _FLEXIBLE_FROM
    if flexible:
        if at >= end or view[at] != 0:
            raise NotOurs
        at += 1
    request = _REQUEST_CLASSES[version].__new__(_REQUEST_CLASSES[version])
    if common:
        if version < _TOPIC_IDS_FROM:
            raise NotOurs
        _common(view, at, end, version, request)
        return RequestHeader(FETCH_KEY, version, correlation_id, client_id), request
    if version >= _REPLICA_STATE_FROM:
        request.replica_state = ReplicaState()
        max_wait, request.min_bytes, request.max_bytes, request.isolation_level = _TOP_V15.unpack_from(view, at)
        at += _TOP_V15.size
    else:
        request.replica_id, max_wait, request.min_bytes, request.max_bytes, request.isolation_level = \
            _TOP_V4.unpack_from(view, at)
        at += _TOP_V4.size
    wait = _WAITS.get(max_wait)
    if wait is None:
        if len(_WAITS) >= _CACHED_MAX:
            _WAITS.clear()
        wait = _WAITS[max_wait] = datetime.timedelta(milliseconds=max_wait)
    request.max_wait = wait
    if version >= 7:
        request.session_id, request.session_epoch = _SESSION.unpack_from(view, at)
        at += 8
    topics = []
    count, at = _count(view, at, end, flexible)
    for _ in range(count):
        topic = FetchTopic()
        at = _topic_key(view, at, end, version, topic)
        n, at = _count(view, at, end, flexible)
        parts, at = _partitions(view, at, end, version, n)
        topic.partitions = tuple(parts)
        if flexible:
            at = _no_tags(view, at, end)
        topics.append(topic)
    request.topics = tuple(topics)
    if version >= 7:
        forgotten = []
        count, at = _count(view, at, end, flexible)
        for _ in range(count):
            topic = FetchTopic()
            at = _topic_key(view, at, end, version, topic)
            n, at = _count(view, at, end, flexible)
            topic.partitions = struct.unpack_from(f">{n}i", view, at)
            at += 4 * n
            if flexible:
                at = _no_tags(view, at, end)
            forgotten.append(topic)
        request.forgotten_topics_data = tuple(forgotten)
    if version >= 11:
        request.rack_id, at = _string(view, at, end, flexible)
    if flexible:
        request.cluster_id = None
        at = _tagged_fields(view, at, end, version, request)
    # Bytes after the request are ignored, as codec.parse_request does.
    return RequestHeader(FETCH_KEY, version, correlation_id, client_id), request
