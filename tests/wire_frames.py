"""Request frames of every served API and version, with every field present: each array holds
one element, each nullable field a value, each tagged field a non-default value -- so every
length field the schema has appears in the frame (the length-bomb fuzzers put their bombs
there, bounds.length_positions finds them)."""
from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import typing
import uuid
from types import NoneType, UnionType

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta, i64Timedelta

from storage.wire import bounds, codec

BOMBS = {"varint": b"\xff\xff\xff\xff\x0f", "int32": struct.pack(">i", 2**31 - 1),
         "int16": struct.pack(">h", 2**15 - 1)}


def served(table: dict) -> list[tuple[int, int]]:
    return [(key, version) for key, (_, low, high) in sorted(table.items()) for version in range(low, high + 1)]


def _value(hint):
    if typing.get_origin(hint) in (UnionType, typing.Union):
        return _value(next(a for a in typing.get_args(hint) if a is not NoneType))
    if typing.get_origin(hint) is tuple:
        return (_value(typing.get_args(hint)[0]),)
    if dataclasses.is_dataclass(hint):
        return full_entity(hint)
    if hint is ErrorCode:
        return ErrorCode.none
    if hint in (i32Timedelta, i64Timedelta):
        return datetime.timedelta(milliseconds=7)
    if isinstance(hint, type) and issubclass(hint, datetime.datetime):
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    if hint is uuid.UUID:
        return uuid.UUID(int=7)
    if hint is bool:
        return True
    if isinstance(hint, type) and issubclass(hint, bytes):
        return hint(b"xy")
    if isinstance(hint, type) and issubclass(hint, str):
        return hint("ab")
    if isinstance(hint, type) and issubclass(hint, int):
        return hint(7)
    raise TypeError(f"no sample value for {hint!r}")


def full_entity(cls):
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _value(hints[f.name]) for f in dataclasses.fields(cls)})


def full_frame(key: int, version: int) -> bytes:
    """A request frame (no size prefix) of `key` v`version` with every field present."""
    cls = codec._request_class(key, version)
    header_cls = codec.RequestHeaderV2 if cls.__flexible__ else codec.RequestHeaderV1
    out = io.BytesIO()
    codec._writer(header_cls)(out, header_cls(request_api_key=key, request_api_version=version,
                                              correlation_id=7, client_id="frames"))
    codec._writer(cls)(out, full_entity(cls))
    return out.getvalue()


def bombs(key: int, version: int) -> list[tuple[str, bytes]]:
    """(field, frame) with one length of the full frame replaced by the largest it can claim."""
    frame = full_frame(key, version)
    cls = codec._request_class(key, version)
    header_cls = codec.RequestHeaderV2 if cls.__flexible__ else codec.RequestHeaderV1
    out = []
    for at, encoding, name in bounds.length_positions(frame, header_cls, cls):
        old_end = at + (len(_varint_at(frame, at)) if encoding == "varint" else {"int32": 4, "int16": 2}[encoding])
        out.append((f"{name} ({encoding} at {at})", frame[:at] + BOMBS[encoding] + frame[old_end:]))
    return out


def _varint_at(frame: bytes, at: int) -> bytes:
    end = at
    while frame[end] & 0x80:
        end += 1
    return frame[at:end + 1]
