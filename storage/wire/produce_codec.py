"""Produce's request read and response written without kio's per-field reader and writer.

The request: `read_request(frame)` walks the header and the topic and partition arrays of a
Produce frame (v3..v12: the versions whose request names topics by name) with struct reads,
and gives each partition's records as a memoryview of the frame -- no copy of the records, no
entity built per field.  Every length is checked against the bytes left, as bounds.py does.
Anything it does not take on -- a length beyond the frame, a null where the version has none,
a varint longer than 5 bytes, bad UTF-8, a tagged field -- makes it return None, and the
caller parses the frame through kio (codec.parse_request), which answers such a frame exactly
as before: the fast path only ever accepts what kio and bounds.py accept, and reads it alike
(tests/wire/test_produce_codec.py checks both against kio for every version and many shapes).
A producer sends the same bytes up to its records in every request of one partition: the last
few such shapes are remembered (_Known), and a frame that starts as one has only its records
and what follows them read (the walk's answer, the walk's fallbacks); one writing to several
partitions of a topic sends the same bytes up to the topic's name (_KnownTopic: its partitions
are walked). Flexible versions (v9+, librdkafka's) are walked by _read_flexible, one-byte
lengths inline.

The response: `encode_response(version, correlation_id, body)` lays out the size-prefixed
Produce response (v3..v12; v13 names topics by id) for the handler's dict -- the dict codec.encode_response takes --
with struct packs: per partition the fixed fields in one pack, KIP-467's record_errors and
error_message from v8, the current_leader tagged field (v10+, written only when it is not
Kafka's default -1/-1, as kio does) and the node_endpoints tagged field at the top level.
Byte for byte what codec.encode_response writes (checked over every version, hypothesis).
The common answer -- one topic, one partition's row as apis.produce writes it, no error text --
is three pieces: the bytes around the row, laid out once per version and topic, and one pack.
"""
from __future__ import annotations

import datetime
import struct

from ..core.varint import uvarint
from .request_header import NotOurs, RequestHeader, read_uvarint

PRODUCE_KEY = 0
FIRST_VERSION, LAST_REQUEST_VERSION, LAST_RESPONSE_VERSION = 3, 12, 12
FLEXIBLE_FROM = 9

_HEADER = struct.Struct(">hhih")         # api key, version, correlation id, client id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_SIZE_CORRELATION = struct.Struct(">ii")
_PARTITION_V3 = struct.Struct(">ihqq")      # index, error code, base offset, log append time
_PARTITION_V5 = struct.Struct(">ihqqq")     # ... log start offset
_LEADER = struct.Struct(">iib")             # current_leader: leader id, epoch, no tagged fields


class PartitionProduceData:
    __slots__ = ("index", "records")

    def __init__(self, index: int, records):
        self.index = index
        self.records = records          # a memoryview of the frame, or None

    def __repr__(self) -> str:
        size = None if self.records is None else len(self.records)
        return f"PartitionProduceData(index={self.index}, records=<{size} bytes>)"


class TopicProduceData:
    __slots__ = ("name", "partition_data")

    def __init__(self, name: str, partition_data: tuple):
        self.name = name
        self.partition_data = partition_data

    def __repr__(self) -> str:
        return f"TopicProduceData(name={self.name!r}, partition_data={self.partition_data!r})"


class ProduceRequest:
    """A Produce request as kio's entity presents it to a handler (`timeout` in milliseconds)."""

    __slots__ = ("__version__", "transactional_id", "acks", "timeout", "topic_data")

    def __init__(self, version: int, transactional_id, acks: int, timeout: int, topic_data: tuple):
        self.__version__ = version
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout = timeout
        self.topic_data = topic_data

    def replace(self, **changes) -> "ProduceRequest":
        """A copy with `changes` (dataclasses.replace for kio's entities; authz splits a request)."""
        fields = {name: getattr(self, name) for name in ("transactional_id", "acks", "timeout", "topic_data")}
        return ProduceRequest(self.__version__, **{**fields, **changes})

    def __repr__(self) -> str:
        return (f"ProduceRequest(v{self.__version__}, transactional_id={self.transactional_id!r}, acks={self.acks}, "
                f"timeout={self.timeout}, topic_data={self.topic_data!r})")


# ---- the request --------------------------------------------------------------------------------

def read_request(frame) -> tuple[RequestHeader, ProduceRequest] | None:
    """(header, request) of a Produce frame of v3..v12, or None to have kio parse it."""
    try:
        hit = known_parts(frame)
        if hit is not None:
            return hit[0].read(frame, hit[1])
        return _read(memoryview(frame), len(frame))
    except (NotOurs, struct.error, UnicodeDecodeError, IndexError):
        return None


def known_parts(frame) -> tuple["_Known", tuple] | None:
    """(shape, parts) of a Produce frame (`bytes`) of one topic that starts as a request read
    before -- the shape: its version, acks, transactional id and topic (and its partition, for a
    one-partition shape); the parts: (partition index, records) pairs in the frame's order, the
    records a view of `frame` (None: null) -- or None (then the walk reads it).  The express
    path's read (express.py), and read_request's first step."""
    if frame.__class__ is not bytes:
        return None
    try:
        for known in _RECENT:
            if frame.startswith(known.tail, 8) and frame.startswith(known.head):
                parts = known.parts(frame)
                return None if parts is False else (known, parts)
    except (NotOurs, struct.error, IndexError):
        pass
    return None


class _Known:
    """A one-topic, one-partition request read in full before: every byte up to its records'
    length (all but the correlation id) names the same header fields, acks, timeout, topic and
    partition, so a frame that starts with those bytes needs only its records read.  A
    producer sends such frames over and over (one per batch): this skips the walk of the
    fields that never change (~2/3 of the read; the answer is the walk's, byte for byte)."""

    __slots__ = ("head", "tail", "at", "flexible", "version", "client_id", "transactional_id", "acks", "timeout",
                 "name", "index")

    def __init__(self, frame: bytes, at: int, header: RequestHeader, request: "ProduceRequest"):
        self.head, self.tail, self.at = frame[:4], frame[8:at], at
        self.flexible = request.__version__ >= FLEXIBLE_FROM
        self.version, self.client_id = request.__version__, header.client_id
        self.transactional_id, self.acks, self.timeout = request.transactional_id, request.acks, request.timeout
        topic = request.topic_data[0]
        self.name, self.index = topic.name, topic.partition_data[0].index

    def parts(self, frame: bytes):
        """((index, records),) of `frame` (records a view of it; None: null), or False when the rest
        is not the one shape (then the walk reads it)."""
        end = len(frame)
        if self.flexible:
            size, at = _compact(frame, self.at, end)
        else:
            size, at = _I32.unpack_from(frame, self.at)[0], self.at + 4
            if size < -1 or size > end - at:
                return False
        records = None
        if size >= 0:
            records, at = memoryview(frame)[at:at + size], at + size
        if self.flexible and (frame[at] or frame[at + 1] or frame[at + 2]):    # the three tagged fields
            return False
        return ((self.index, records),)

    def read(self, frame: bytes, parts) -> tuple[RequestHeader, "ProduceRequest"]:
        """(header, request) of `frame`, whose parts() are `parts`."""
        return (RequestHeader(PRODUCE_KEY, self.version, _I32.unpack_from(frame, 4)[0], self.client_id),
                ProduceRequest(self.version, self.transactional_id, self.acks, self.timeout,
                               (TopicProduceData(self.name, tuple(PartitionProduceData(i, r) for i, r in parts)),)))


class _KnownTopic(_Known):
    """A one-topic request of several partitions read in full before: every byte up to the end of
    its topic's name is the same, so a frame that starts with those bytes needs only its
    partitions read (a producer writing to several partitions of a topic sends such requests,
    with whichever partitions have a batch ready)."""

    __slots__ = ()

    def __init__(self, frame: bytes, at: int, header: RequestHeader, request: "ProduceRequest"):
        super().__init__(frame, at, header, request)
        self.index = -1

    def parts(self, frame: bytes):
        """The (index, records) pairs of `frame`, or False (as _Known.parts)."""
        end, flexible, view = len(frame), self.flexible, memoryview(frame)
        if flexible:
            count, at = _compact(frame, self.at, end)
        else:
            count, at = _length(frame, self.at, end, True)
        if count < 1 or count > (end - at) // 5:
            return False
        parts = []
        for _ in range(count):
            index = _I32.unpack_from(frame, at)[0]
            size, at = _compact(frame, at + 4, end) if flexible else _length(frame, at + 4, end, True)
            records = None
            if size >= 0:
                records, at = view[at:at + size], at + size
            if flexible:
                if frame[at]:
                    return False        # tagged fields of a partition
                at += 1
            parts.append((index, records))
        if flexible and (frame[at] or frame[at + 1]):      # the topic's and the request's tagged fields
            return False
        return parts


_RECENT: list[_Known] = []      # the last few shapes read (most recent first; one a producer, about)
_RECENT_MAX = 4


def _remember(view, at: int, header: RequestHeader, request: "ProduceRequest", shape=_Known) -> None:
    frame = view.obj
    if frame.__class__ is bytes:
        _RECENT.insert(0, shape(frame, at, header, request))
        del _RECENT[_RECENT_MAX:]


def _remember_shape(view, count: int, records_at: int, named: int, header: RequestHeader,
                    request: "ProduceRequest") -> None:
    """A one-topic request's shape remembered: through its partition (one partition), or through
    its topic's name (several)."""
    if count == 1:
        _remember(view, records_at, header, request)
    elif count > 1:
        _remember(view, named, header, request, _KnownTopic)


def _length(view, at: int, end: int, wide: bool) -> tuple[int, int]:
    """(length, -1 for null; position after it) of a classic version's string (wide: bytes or an
    array), refused beyond the bytes left.  Flexible versions: _compact."""
    if wide:
        length, at = _I32.unpack_from(view, at)[0], at + 4
    else:
        length, at = _I16.unpack_from(view, at)[0], at + 2
    if length < -1 or length > end - at:
        raise NotOurs
    return length, at


def _string(view, at: int, end: int, nullable: bool) -> tuple[str | None, int]:
    length, at = _length(view, at, end, False)
    if length < 0:
        if not nullable:
            raise NotOurs
        return None, at
    return str(view[at:at + length], "utf-8"), at + length


def _read(view, end: int):
    key, version, correlation_id, client_length = _HEADER.unpack_from(view, 0)
    if key != PRODUCE_KEY or not FIRST_VERSION <= version <= LAST_REQUEST_VERSION:
        raise NotOurs
    at = 10
    if client_length < -1 or client_length > end - at:
        raise NotOurs
    client_id = None
    if client_length >= 0:
        client_id, at = str(view[at:at + client_length], "utf-8"), at + client_length
    if version >= FLEXIBLE_FROM:
        return _read_flexible(view, end, RequestHeader(PRODUCE_KEY, version, correlation_id, client_id), at)
    transactional_id, at = _string(view, at, end, True)
    acks, timeout = _ACKS_TIMEOUT.unpack_from(view, at)
    topic_count, at = _length(view, at + 6, end, True)
    if topic_count < 0:
        raise NotOurs
    topics, records_at = [], 0
    for _ in range(topic_count):
        name, at = _string(view, at, end, False)
        named = at
        count, at = _length(view, at, end, True)
        if count < 0:
            raise NotOurs
        parts = []
        for _ in range(count):
            index, records_at = _I32.unpack_from(view, at)[0], at + 4
            size, at = _length(view, records_at, end, True)
            records = None
            if size >= 0:
                records, at = view[at:at + size], at + size
            parts.append(PartitionProduceData(index, records))
        topics.append(TopicProduceData(name, tuple(parts)))
    # Bytes after the request are ignored, as codec.parse_request does.
    header = RequestHeader(PRODUCE_KEY, version, correlation_id, client_id)
    request = ProduceRequest(version, transactional_id, acks, timeout, tuple(topics))
    if topic_count == 1:
        _remember_shape(view, count, records_at, named, header, request)
    return header, request


def _compact(view, at: int, end: int) -> tuple[int, int]:
    """A flexible version's compact length: (length, -1 for null; position after it), refused
    beyond the bytes left."""
    byte = view[at]
    if byte < 0x80:
        length, at = byte - 1, at + 1
    elif view[at + 1] < 0x80:       # two bytes: records of 127 bytes to 16 KiB
        length, at = (byte & 0x7F | view[at + 1] << 7) - 1, at + 2
    else:
        raw, at = read_uvarint(view, at, end)
        length = raw - 1
    if length < -1 or length > end - at:
        raise NotOurs
    return length, at


def _read_flexible(view, end: int, header: RequestHeader, at: int):
    """_read's walk of a flexible version (v9+: compact lengths, tagged fields), with the one-byte
    lengths read inline (a read past the frame is an IndexError: kio's walk, as any NotOurs)."""
    if view[at]:
        raise NotOurs               # tagged fields in the header
    at += 1
    length, at = _compact(view, at, end)
    transactional_id = None
    if length >= 0:
        transactional_id, at = str(view[at:at + length], "utf-8"), at + length
    acks, timeout = _ACKS_TIMEOUT.unpack_from(view, at)
    at += 6
    topic_count, at = _compact(view, at, end)
    if topic_count < 0:
        raise NotOurs
    topics, records_at = [], 0
    for _ in range(topic_count):
        length, at = _compact(view, at, end)
        if length < 0:
            raise NotOurs
        name, at = str(view[at:at + length], "utf-8"), at + length
        named = at
        count, at = _compact(view, at, end)
        if count < 0:
            raise NotOurs
        parts = []
        for _ in range(count):
            index, records_at = _I32.unpack_from(view, at)[0], at + 4
            size, at = _compact(view, records_at, end)
            records = None
            if size >= 0:
                records, at = view[at:at + size], at + size
            if view[at]:
                raise NotOurs
            at += 1
            parts.append(PartitionProduceData(index, records))
        if view[at]:
            raise NotOurs
        at += 1
        topics.append(TopicProduceData(name, tuple(parts)))
    if view[at]:
        raise NotOurs
    # Bytes after the request are ignored, as codec.parse_request does.
    request = ProduceRequest(header.request_api_version, transactional_id, acks, timeout, tuple(topics))
    if topic_count == 1:
        _remember_shape(view, count, records_at, named, header, request)
    return header, request


# ---- the response -------------------------------------------------------------------------------

def _put_string(out: bytearray, text: str | None, flexible: bool) -> None:
    if text is None:
        out += b"\0" if flexible else b"\xff\xff"
        return
    data = text.encode()
    out += uvarint(len(data) + 1) if flexible else _I16.pack(len(data))
    out += data


def _put_count(out: bytearray, count: int, flexible: bool) -> None:
    out += uvarint(count + 1) if flexible else _I32.pack(count)


def _millis(value) -> int:
    """An int of milliseconds from what codec.build accepts (an int, None, a datetime or timedelta)."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return value


# The row apis.produce writes for a partition, and the one whose bytes are laid out ahead of
# time when it is all a response holds: no record errors, no message, none of the later fields.
ROW_KEYS = frozenset(("index", "error_code", "base_offset", "log_append_time", "log_start_offset", "record_errors",
                      "error_message"))
_ROW_BYTES = 4 + _PARTITION_V5.size      # the correlation id and the fixed fields


def encode_response(version: int, correlation_id: int, body: dict) -> bytes:
    """The size-prefixed Produce response of `version` for `body` (codec.encode_response's dict:
    missing fields take the schema's defaults, extra ones are ignored)."""
    topics = body["responses"]
    if len(topics) == 1 and len(body) == 1 and version >= 5:
        topic = topics[0]
        rows = topic["partition_responses"]
        if len(rows) == 1:
            p = rows[0]
            if p.keys() == ROW_KEYS and not p["record_errors"] and p["error_message"] is None:
                return encode_row(version, correlation_id, topic["name"], p["index"], int(p["error_code"]),
                                  p["base_offset"], p["log_start_offset"], p["log_append_time"])
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(_SIZE_CORRELATION.pack(0, correlation_id))
    if flexible:
        out += b"\0"                # response header v1: no tagged fields
    topics = body["responses"]
    _put_count(out, len(topics), flexible)
    for topic in topics:
        _put_string(out, topic["name"], flexible)
        parts = topic["partition_responses"]
        _put_count(out, len(parts), flexible)
        for p in parts:
            _put_partition(out, p, version, flexible)
        if flexible:
            out += b"\0"
    out += _I32.pack(_millis(body.get("throttle_time", 0)))
    if flexible:
        endpoints = body.get("node_endpoints") or () if version >= 10 else ()
        if endpoints:
            out += b"\1\0"          # one tagged field, tag 0: node_endpoints
            out += uvarint(len(value := _endpoints(endpoints))) + value
        else:
            out += b"\0"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_row(version: int, correlation_id: int, name: str, index: int, error_code: int, base_offset: int,
               log_start_offset: int, log_append_time: int = -1) -> bytes:
    """The size-prefixed Produce response (v5+) of one topic's one partition, no record errors and
    no message: encode_response's shortcut, for the express path too."""
    head, row_tail, tail = _LAYOUT.get((version, name)) or _layout(version, name)
    count = b"\2" if version >= FLEXIBLE_FROM else b"\0\0\0\1"
    return b"".join((_SIZE_CORRELATION.pack(len(head) + len(count) + _ROW_BYTES + len(row_tail) + len(tail),
                                            correlation_id), head, count,
                     _PARTITION_V5.pack(index, error_code, base_offset, log_append_time, log_start_offset), row_tail,
                     tail))


def encode_rows(version: int, correlation_id: int, name: str, rows) -> bytes:
    """The size-prefixed Produce response (v5+) of one topic's partitions, each row (index, base
    offset, log start offset, log append time) without an error, record errors or a message (the
    express path)."""
    head, row_tail, tail = _LAYOUT.get((version, name)) or _layout(version, name)
    out = [b"", head, uvarint(len(rows) + 1) if version >= FLEXIBLE_FROM else _I32.pack(len(rows))]
    pack = _PARTITION_V5.pack
    for index, base_offset, log_start_offset, log_append_time in rows:
        out.append(pack(index, 0, base_offset, log_append_time, log_start_offset))
        out.append(row_tail)
    out.append(tail)
    out[0] = _SIZE_CORRELATION.pack(sum(map(len, out)) + 4, correlation_id)
    return b"".join(out)


_LAYOUT: dict[tuple[int, str], tuple[bytes, bytes, bytes]] = {}


def _layout(version: int, name: str) -> tuple[bytes, bytes, bytes]:
    """The bytes of a one-topic response without errors, for `version` and topic `name`: before
    its partitions' count (after the correlation id), after each row's fixed fields, and after
    the rows."""
    flexible = version >= FLEXIBLE_FROM
    head, row_tail, tail = bytearray(b"\0" if flexible else b""), bytearray(), bytearray()
    _put_count(head, 1, flexible)
    _put_string(head, name, flexible)
    if version >= 8:
        _put_count(row_tail, 0, flexible)       # record_errors
        _put_string(row_tail, None, flexible)   # error_message
    if flexible:
        row_tail += b"\0"                       # the partition's tagged fields
        tail += b"\0"                           # the topic's
    tail += _I32.pack(0)                        # throttle_time
    if flexible:
        tail += b"\0"
    if len(_LAYOUT) >= 1024:
        _LAYOUT.clear()
    _LAYOUT[(version, name)] = layout = (bytes(head), bytes(row_tail), bytes(tail))
    return layout


def _put_partition(out: bytearray, p: dict, version: int, flexible: bool) -> None:
    index, code, base = p["index"], int(p["error_code"]), p["base_offset"]
    append_time = _millis(p.get("log_append_time"))
    if version >= 5:
        out += _PARTITION_V5.pack(index, code, base, append_time, p.get("log_start_offset", -1))
    else:
        out += _PARTITION_V3.pack(index, code, base, append_time)
    if version >= 8:
        errors = p["record_errors"]
        _put_count(out, len(errors), flexible)
        for e in errors:
            out += _I32.pack(e["batch_index"])
            _put_string(out, e.get("batch_index_error_message"), flexible)
            if flexible:
                out += b"\0"
        _put_string(out, p.get("error_message"), flexible)
    if not flexible:
        return
    leader = p.get("current_leader") if version >= 10 else None
    if leader is not None:
        leader_id, epoch = leader.get("leader_id", -1), leader.get("leader_epoch", -1)
        if (leader_id, epoch) != (-1, -1):
            out += b"\1\0\x09"      # one tagged field, tag 0 (current_leader), 9 bytes
            out += _LEADER.pack(leader_id, epoch, 0)
            return
    out += b"\0"


def _endpoints(endpoints) -> bytes:
    out = bytearray(uvarint(len(endpoints) + 1))
    for e in endpoints:
        out += _I32.pack(e["node_id"])
        _put_string(out, e["host"], True)
        out += _I32.pack(e["port"])
        _put_string(out, e.get("rack"), True)
        out += b"\0"
    return bytes(out)
