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

The response: `encode_response(version, correlation_id, body)` lays out the size-prefixed
Produce response (v3..v12; v13 names topics by id) for the handler's dict -- the dict codec.encode_response takes --
with struct packs: per partition the fixed fields in one pack, KIP-467's record_errors and
error_message from v8, the current_leader tagged field (v10+, written only when it is not
Kafka's default -1/-1, as kio does) and the node_endpoints tagged field at the top level.
Byte for byte what codec.encode_response writes (checked over every version, hypothesis).
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
        return _read(memoryview(frame), len(frame))
    except (NotOurs, struct.error, UnicodeDecodeError):
        return None


def _length(view, at: int, end: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """(length, -1 for null; position after it) of a string (wide: bytes or an array),
    refused beyond the bytes left."""
    if flexible:
        if at < end and view[at] < 0x80:
            length, at = view[at] - 1, at + 1
        else:
            raw, at = read_uvarint(view, at, end)
            length = raw - 1
    elif wide:
        length, at = _I32.unpack_from(view, at)[0], at + 4
    else:
        length, at = _I16.unpack_from(view, at)[0], at + 2
    if length < -1 or length > end - at:
        raise NotOurs
    return length, at


def _string(view, at: int, end: int, flexible: bool, nullable: bool) -> tuple[str | None, int]:
    length, at = _length(view, at, end, flexible, False)
    if length < 0:
        if not nullable:
            raise NotOurs
        return None, at
    return str(view[at:at + length], "utf-8"), at + length


def _no_tagged_fields(view, at: int, end: int) -> int:
    if at >= end or view[at] != 0:
        raise NotOurs              # tagged fields (none is defined for Produce): kio's walk
    return at + 1


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
    flexible = version >= FLEXIBLE_FROM
    if flexible:
        at = _no_tagged_fields(view, at, end)
    transactional_id, at = _string(view, at, end, flexible, True)
    acks, timeout = _ACKS_TIMEOUT.unpack_from(view, at)
    topic_count, at = _length(view, at + 6, end, flexible, True)
    if topic_count < 0:
        raise NotOurs
    topics = []
    for _ in range(topic_count):
        name, at = _string(view, at, end, flexible, False)
        count, at = _length(view, at, end, flexible, True)
        if count < 0:
            raise NotOurs
        parts = []
        for _ in range(count):
            index = _I32.unpack_from(view, at)[0]
            size, at = _length(view, at + 4, end, flexible, True)
            records = None
            if size >= 0:
                records, at = view[at:at + size], at + size
            if flexible:
                at = _no_tagged_fields(view, at, end)
            parts.append(PartitionProduceData(index, records))
        if flexible:
            at = _no_tagged_fields(view, at, end)
        topics.append(TopicProduceData(name, tuple(parts)))
    if flexible:
        at = _no_tagged_fields(view, at, end)
    # Bytes after the request are ignored, as codec.parse_request does.
    return (RequestHeader(PRODUCE_KEY, version, correlation_id, client_id),
            ProduceRequest(version, transactional_id, acks, timeout, tuple(topics)))


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


def encode_response(version: int, correlation_id: int, body: dict) -> bytes:
    """The size-prefixed Produce response of `version` for `body` (codec.encode_response's dict:
    missing fields take the schema's defaults, extra ones are ignored)."""
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
