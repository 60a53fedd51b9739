"""The Kafka wire format, through kio (Kafka's message schemas, generated; a Rust parser).

Nothing here knows the engine.  A request frame is parsed into kio's entity for its API key
and version; a response is built from a plain dict -- the same dict for every version of an
API -- into the version's entity (`build`), which drops the fields the version does not have
and converts ints to kio's types (error codes, timedeltas, datetimes).  A field the version
needs that the dict does not give is an error, never a silent zero.

Framing, as Kafka's: a 4-byte big-endian size, then the header and the body.  Flexible
versions use request header v2 and response header v1 (tagged fields), except ApiVersions'
response, which always has header v0 so a client of any version can read it (KIP-511).
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import typing
import uuid
from types import NoneType, UnionType

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta, i64Timedelta

from . import bounds, fetch_request, produce_codec

MAX_REQUEST_BYTES = 100 * 1024 * 1024      # Kafka's socket.request.max.bytes default
UNSUPPORTED_VERSION = 35
API_VERSIONS_KEY = 18

# What this broker serves: API key -> (name, lowest version, highest version).
SUPPORTED: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 9),
    1: ("Fetch", 4, 16),
    2: ("ListOffsets", 1, 10),
    3: ("Metadata", 0, 12),
    8: ("OffsetCommit", 2, 8),
    9: ("OffsetFetch", 1, 8),
    10: ("FindCoordinator", 0, 4),
    11: ("JoinGroup", 0, 9),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 5),
    16: ("ListGroups", 0, 5),
    17: ("SaslHandshake", 1, 1),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 6),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 4),
    23: ("OffsetForLeaderEpoch", 2, 4),
    24: ("AddPartitionsToTxn", 0, 4),
    25: ("AddOffsetsToTxn", 0, 3),
    26: ("EndTxn", 0, 3),
    27: ("WriteTxnMarkers", 1, 2),
    28: ("TxnOffsetCommit", 0, 3),
    29: ("DescribeAcls", 1, 3),
    30: ("CreateAcls", 1, 3),
    31: ("DeleteAcls", 1, 3),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    35: ("DescribeLogDirs", 1, 4),
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 3),
    42: ("DeleteGroups", 0, 2),
    43: ("ElectLeaders", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    47: ("OffsetDelete", 0, 0),
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
    60: ("DescribeCluster", 0, 2),
    61: ("DescribeProducers", 0, 0),
    65: ("DescribeTransactions", 0, 0),
    66: ("ListTransactions", 0, 1),
}


# What the controller process serves: its RPCs, the metadata log's Fetch, topic admin.
CONTROLLER_SUPPORTED: dict[int, tuple[str, int, int]] = {
    1: ("Fetch", 12, 16),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 6),
    33: ("AlterConfigs", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    37: ("CreatePartitions", 0, 3),
    43: ("ElectLeaders", 0, 2),
    51: ("AlterUserScramCredentials", 0, 0),
    56: ("AlterPartition", 2, 3),
    62: ("BrokerRegistration", 3, 3),
    63: ("BrokerHeartbeat", 0, 1),
    67: ("AllocateProducerIds", 0, 0),
    30: ("CreateAcls", 3, 3),           # forwarded by the brokers
    31: ("DeleteAcls", 3, 3),
}


class ProtocolError(Exception):
    """A frame this broker cannot answer: the connection is closed with this reason logged
    (Kafka's InvalidRequestException path)."""


class InvalidRequestError(Exception):
    """A request kio could read that Kafka refuses as a whole (its InvalidRequestException from
    a handler): the server answers it with the API's error response, INVALID_REQUEST, and the
    connection stays open."""

    error_code = 42     # Kafka's INVALID_REQUEST


def api_name(key: int) -> str:
    entry = SUPPORTED.get(key) or CONTROLLER_SUPPORTED.get(key)
    return entry[0] if entry else f"api key {key}"


@functools.cache
def _request_class(key: int, version: int):
    return load_request_schema(key, version)


@functools.cache
def _response_class(key: int, version: int):
    return load_response_schema(key, version)


@functools.cache
def _reader(cls):
    return entity_reader(cls)


@functools.cache
def _writer(cls):
    return entity_writer(cls)


def peek_api(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame (its first 8 bytes)."""
    if len(frame) < 8:
        raise ProtocolError(f"a request of {len(frame)} bytes is shorter than a request header")
    return struct.unpack_from(">hhi", frame)


def is_supported(key: int, version: int, table: dict | None = None) -> bool:
    entry = (SUPPORTED if table is None else table).get(key)
    return entry is not None and entry[1] <= version <= entry[2]


def parse_request(frame: bytes):
    """(header, request entity) of a frame whose API and version are supported.  A Produce
    frame is read by produce_codec (its records a view of the frame) unless it leaves the frame
    to kio (a malformed one, or one with tagged fields): then as any other.  A Fetch frame is
    read by fetch_request alike (kio's for what it leaves)."""
    key, version, _ = peek_api(frame)
    if key == produce_codec.PRODUCE_KEY:
        fast = produce_codec.read_request(frame)
        if fast is not None:
            return fast
    elif key == fetch_request.FETCH_KEY:
        fast = fetch_request.read_request(frame)
        if fast is not None:
            return fast
    return parse_request_kio(frame)


def parse_request_kio(frame: bytes):
    """parse_request through kio's entities (for every API; the Produce fast path's reference)."""
    key, version, _ = peek_api(frame)
    cls = _request_class(key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    try:
        # Before kio sees the frame: its native parser preallocates what a length claims.
        bounds.check(frame, header_cls, cls)
    except bounds.FrameBoundsError as exc:
        raise ProtocolError(f"{api_name(key)} v{version}: malformed request: {exc}") from None
    try:
        header, used = _reader(header_cls)(frame, 0)
        request, size = _reader(cls)(frame, used)
    except Exception as exc:            # kio's parser: truncated or malformed bytes
        raise ProtocolError(f"{api_name(key)} v{version}: malformed request ({type(exc).__name__}: {exc})") from None
    # Bytes after the request are ignored, as Kafka's RequestContext.parseRequest leaves them
    # unread: librdkafka's Metadata v9+ for all topics carries 3 (its issue 5049: a null topics
    # array written into a 4-byte slot), and Kafka answers it.
    return header, request


def encode_request(key: int, version: int, correlation_id: int, client_id: str | None, body: dict) -> bytes:
    """A size-prefixed request frame (the broker's own client side and the tests use it); a
    follower's Fetch v16 laid out by hand (fetch_request.py: the same bytes)."""
    if key == 1 and version == fetch_request.VERSION:
        return fetch_request.encode(correlation_id, client_id, body)
    cls = _request_class(key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    _writer(header_cls)(out, header_cls(request_api_key=key, request_api_version=version,
                                        correlation_id=correlation_id, client_id=client_id))
    _writer(cls)(out, build(cls, body))
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return out.getvalue()


def encode_response(key: int, version: int, correlation_id: int, body: dict) -> bytes:
    """A size-prefixed response frame for `body`, built for the request's version (Produce's
    laid out by produce_codec, the same bytes)."""
    if key == produce_codec.PRODUCE_KEY and produce_codec.FIRST_VERSION <= version <= produce_codec.LAST_RESPONSE_VERSION:
        return produce_codec.encode_response(version, correlation_id, body)
    return encode_response_kio(key, version, correlation_id, body)


def encode_response_kio(key: int, version: int, correlation_id: int, body: dict) -> bytes:
    """encode_response through kio's writer (for every API; the Produce layout's reference)."""
    cls = _response_class(key, version)
    out = io.BytesIO()
    out.write(struct.pack(">ii", 0, correlation_id))
    if cls.__flexible__ and key != API_VERSIONS_KEY:
        out.write(b"\0")                # response header v1: no tagged fields
    _writer(cls)(out, build(cls, body))
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return out.getvalue()


def encode_error_response(key: int, version: int, correlation_id: int, body: dict) -> bytes:
    """encode_response for an error answer (error_answers.error_body): the fields `body` does
    not give, at any depth, are zero, empty or null instead of an error."""
    return encode_response_kio(key, version, correlation_id, _filled(_response_class(key, version), body))


def filled(key: int, version: int, body: dict) -> dict:
    """`body` with every field `key`'s response of `version` has and `body` does not give
    zeroed, at any depth (as encode_error_response does): a body to merge into another."""
    return _filled(_response_class(key, version), body)


def _filled(cls, values: dict) -> dict:
    hints = typing.get_type_hints(cls)
    out = dict(values)
    for f in dataclasses.fields(cls):
        inner, _ = _unwrap_optional(hints[f.name])
        item = typing.get_args(inner)[0] if typing.get_origin(inner) is tuple else None
        if f.name in out:
            if item is not None and dataclasses.is_dataclass(item) and out[f.name] is not None:
                out[f.name] = [_filled(item, v) for v in out[f.name]]
            elif dataclasses.is_dataclass(inner) and out[f.name] is not None:
                out[f.name] = _filled(inner, out[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if dataclasses.is_dataclass(inner):
                out[f.name] = _filled(inner, {})
            elif isinstance(inner, type) and issubclass(inner, bytes):
                out[f.name] = b""
            else:
                out[f.name] = _zero(hints[f.name])
    return out


def decode_response(key: int, version: int, frame: bytes):
    """(correlation id, response entity) of a response frame without its size prefix."""
    cls = _response_class(key, version)
    correlation_id = struct.unpack_from(">i", frame)[0]
    at = 4 + (1 if cls.__flexible__ and key != API_VERSIONS_KEY else 0)
    response, _ = _reader(cls)(frame, at)
    return correlation_id, response


# ---- dicts to kio entities --------------------------------------------------------------------

_ZERO_OK = frozenset({"throttle_time", "error_message", "tagged_fields"})


def _unwrap_optional(hint):
    if typing.get_origin(hint) in (UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not NoneType]
        return args[0], True
    return hint, False


def _converter(hint):
    """A function turning a plain value into what kio's writer expects for `hint`."""
    inner, optional = _unwrap_optional(hint)
    if typing.get_origin(inner) is tuple:
        item = _converter(typing.get_args(inner)[0])
        convert = lambda v: tuple(item(x) for x in v)       # noqa: E731
    elif dataclasses.is_dataclass(inner):
        convert = functools.partial(build, inner)
    elif inner is ErrorCode:
        convert = lambda v: v if isinstance(v, ErrorCode) else ErrorCode(int(v))   # noqa: E731
    elif inner in (i32Timedelta, i64Timedelta):
        convert = lambda v: v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=v)  # noqa: E731
    elif isinstance(inner, type) and issubclass(inner, datetime.datetime):
        convert = lambda v: v if isinstance(v, datetime.datetime) else \
            datetime.datetime.fromtimestamp(v / 1000, datetime.timezone.utc)    # noqa: E731
    elif inner is uuid.UUID:
        convert = lambda v: v if isinstance(v, uuid.UUID) else uuid.UUID(int=v)  # noqa: E731
    elif isinstance(inner, type) and issubclass(inner, str) and not optional:
        # A version whose string is not nullable carries "" where a later one carries null
        # (JoinGroup's protocol name before v7, error messages).
        convert = lambda v: "" if v is None else v          # noqa: E731
    else:
        convert = lambda v: v                                # noqa: E731
    if optional:
        return lambda v: None if v is None else convert(v)
    return convert


@functools.cache
def _plan(cls):
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        plan.append((f.name, _converter(hints[f.name]), has_default, _zero(hints[f.name])))
    return tuple(plan)


def _zero(hint):
    inner, optional = _unwrap_optional(hint)
    if optional:
        return None
    if typing.get_origin(inner) is tuple:
        return ()
    if inner in (i32Timedelta, i64Timedelta):
        return datetime.timedelta(0)
    if inner is str:
        return ""
    return 0


def build(cls, values: dict):
    """The kio entity `cls` from `values` (field name -> plain value); extra keys are ignored
    (another version's fields), missing ones take the schema's default."""
    kwargs = {}
    for name, convert, has_default, zero in _plan(cls):
        if name in values:
            kwargs[name] = convert(values[name])
        elif not has_default:
            if name not in _ZERO_OK:
                raise KeyError(f"{cls.__module__}.{cls.__qualname__} needs {name!r}")
            kwargs[name] = zero
    return cls(**kwargs)


def ms(value) -> int:
    """Milliseconds of a kio timedelta field (or an int already)."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)
