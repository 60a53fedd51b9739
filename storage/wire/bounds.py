"""Every length of a request frame, checked against the bytes left before kio parses it.

kio's native parser preallocates a collection of the size a frame claims: a 19-byte Metadata
v12 frame whose topics array claims 2^32-1 entries asks for ~34 GB and the process aborts
(SIGABRT, no Python exception to catch).  Kafka's readers refuse such a frame first ("Tried to
allocate a collection of size N, but there are only M bytes remaining") and close the
connection; this module does the same from our side, since kio cannot be told.

`check(frame, header_cls, request_cls)` walks the frame along the schema kio's own entity
classes carry (the field order, each field's `kafka_type`, arrays, nested and nullable structs,
tagged fields and their sizes) without building anything, and raises FrameBoundsError naming
the field at the first length that exceeds the bytes left:

* an array's count (int32, or unsigned varint - 1 in flexible versions) may not exceed the
  bytes left; each element is then walked, so a count of small elements is bounded too;
* a string's (int16 / varint) or bytes' and records' (int32 / varint) length may not exceed
  the bytes left;
* null (-1, or varint 0) is refused where the version's field is not nullable (kio would read
  it and hand the handler a None where the schema promises a value);
* a flexible struct's tagged-field count may not exceed the bytes left, each tagged field's
  size may not exceed them, and a known tagged field is walked within its size;
* an unsigned varint longer than 5 bytes is refused (Kafka's "Varint is too long").

The walk reads only what is fixed-size or a length, and skips strings and bytes whole, so its
cost on a large Produce is a few steps per topic and partition, not per byte.  A frame that
passes may still be malformed in ways that allocate nothing (a bad UTF-8 string, a bad
nullable-struct marker): kio refuses those itself.
"""
from __future__ import annotations

import dataclasses
import functools
import struct

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

# Bytes of each fixed-size kafka_type kio's schemas use.
FIXED_BYTES = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
               "uint64": 8, "float64": 8, "uuid": 16, "bool": 1, "error_code": 2, "timedelta_i32": 4,
               "timedelta_i64": 8, "datetime_i64": 8}
VARINT_BYTES_MAX = 5

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class FrameBoundsError(ValueError):
    """A request frame with a length beyond its bytes, or a length field cut short."""


def check(frame, header_cls, request_cls) -> None:
    """Raise FrameBoundsError unless every length in `frame` (header and body) fits in it."""
    view = memoryview(frame)
    end = len(view)
    at = _walker(header_cls, True)(view, 0, end)
    _walker(request_cls, False)(view, at, end)


def length_positions(frame, header_cls, request_cls) -> list[tuple[int, str, str]]:
    """(offset, encoding, field) of every length field in a well-formed `frame`, in order; the
    encoding is "varint", "int32" or "int16".  The fuzzer puts its length bombs there."""
    found: list[tuple[int, str, str]] = []
    view = memoryview(frame)
    global _recording
    _recording = found
    try:
        at = _walker(header_cls, True)(view, 0, len(view))
        _walker(request_cls, False)(view, at, len(view))
    finally:
        _recording = None
    return found


# ---- the walk ---------------------------------------------------------------------------------

# Where length_positions collects the length fields while it walks (None: not collecting).
# The walk never awaits, so one module-level list cannot be seen by two walks at once.
_recording: list | None = None


def _note(at: int, encoding: str, name: str) -> None:
    if _recording is not None:
        _recording.append((at, encoding, name))


def _need(at: int, size: int, end: int, name: str) -> None:
    if size > end - at:
        raise FrameBoundsError(f"{name}: needs {size} bytes at offset {at}, only {max(end - at, 0)} remain")


def _uvarint(view, at: int, end: int, name: str) -> tuple[int, int]:
    if at < end and view[at] < 0x80:                # the common case: one byte
        return view[at], at + 1
    value = shift = 0
    for i in range(VARINT_BYTES_MAX):
        if at + i >= end:
            raise FrameBoundsError(f"{name}: a varint cut short at offset {at + i}")
        byte = view[at + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at + i + 1
        shift += 7
    raise FrameBoundsError(f"{name}: a varint longer than {VARINT_BYTES_MAX} bytes at offset {at}")


def _length(view, at: int, end: int, name: str, compact: bool, legacy: struct.Struct, kind: str,
            nullable: bool):
    """(length or None for null, position after the length field); refuses a length beyond
    the bytes left (Kafka: "Tried to allocate a collection of size N, but there are only M
    bytes remaining") and a null where the version's field is not nullable (Kafka: "non-nullable
    field ... was serialized as null"; kio would hand the handler a None)."""
    if compact:
        _note(at, "varint", name)
        raw, after = _uvarint(view, at, end, name)
        length = raw - 1
    else:
        _note(at, "int16" if legacy is _INT16 else "int32", name)
        _need(at, legacy.size, end, name)
        length = legacy.unpack_from(view, at)[0]
        after = at + legacy.size
        if length < -1:
            raise FrameBoundsError(f"{name}: negative {kind} length {length} at offset {at}")
    if length > end - after:
        raise FrameBoundsError(f"{name}: a {kind} of {length} claimed at offset {at}, "
                               f"only {end - after} bytes remain")
    if length == -1:
        if not nullable:
            raise FrameBoundsError(f"{name}: null at offset {at}, but the field is not nullable in this version")
        return None, after
    return length, after


def _skip_sized(name: str, compact: bool, legacy: struct.Struct, kind: str, nullable: bool):
    def step(view, at, end):
        length, after = _length(view, at, end, name, compact, legacy, kind, nullable)
        return after + (length or 0)
    return step


def _fixed(name: str, size: int):
    def step(view, at, end):
        _need(at, size, end, name)
        return at + size
    return step


def _array(name: str, compact: bool, item, nullable: bool):
    def step(view, at, end):
        count, at = _length(view, at, end, name, compact, _INT32, "collection", nullable)
        for _ in range(count or 0):
            at = item(view, at, end)
        return at
    return step


def _nullable_struct(name: str, walk):
    def step(view, at, end):
        _need(at, 1, end, name)
        marker = view[at]
        return at + 1 if marker == 0xFF else walk(view, at + 1, end)
    return step


def _primitive(name: str, kafka_type: str, compact: bool, nullable: bool):
    if kafka_type in FIXED_BYTES:
        return _fixed(name, FIXED_BYTES[kafka_type])
    if kafka_type == "string":
        return _skip_sized(name, compact, _INT16, "string", nullable)
    if kafka_type in ("bytes", "records"):
        return _skip_sized(name, compact, _INT32, "bytes", nullable)
    raise NotImplementedError(f"{name}: no bound for kafka_type {kafka_type!r}")


def _field_step(cls, field, is_header: bool, is_tag: bool):
    name = f"{cls.__qualname__}.{field.name}"
    compact = cls.__flexible__ and not (is_header and field.name == "client_id")
    kind = classify_field(field)
    # A tagged field's nullability is its presence (kio reads its value as not nullable), but
    # its value may still be encoded as null: accepted there.
    nullable = is_tag or is_optional(field)
    if isinstance(kind, EntityTupleField):
        return _array(name, compact, _walker(kind.type_, False), nullable)
    if isinstance(kind, PrimitiveTupleField):
        return _array(name, compact, _primitive(name, field.metadata["kafka_type"], compact, False), nullable)
    if isinstance(kind, EntityField):
        walk = _walker(kind.type_, False)
        return _nullable_struct(name, walk) if is_optional(field) and not is_tag else walk
    return _primitive(name, field.metadata["kafka_type"], compact, nullable)


@functools.cache
def _walker(cls, is_header: bool):
    """A function (view, at, end) -> the offset after one `cls` at `at`."""
    steps, tagged = [], {}
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is None:
            steps.append(_field_step(cls, field, is_header, False))
        else:
            tagged[int(tag)] = _field_step(cls, field, is_header, True)
    name = cls.__qualname__
    flexible = cls.__flexible__

    def walk(view, at, end):
        for step in steps:
            at = step(view, at, end)
        if flexible:
            at = _tagged_fields(view, at, end, name, tagged)
        return at
    return walk


def _tagged_fields(view, at: int, end: int, name: str, tagged: dict) -> int:
    if _recording is None and at < end and view[at] == 0:
        return at + 1                               # the common case: no tagged fields
    where = f"{name} tagged fields"
    _note(at, "varint", where)
    count, at = _uvarint(view, at, end, where)
    if count > end - at:
        raise FrameBoundsError(f"{where}: {count} claimed at offset {at}, only {end - at} bytes remain")
    for _ in range(count):
        tag, at = _uvarint(view, at, end, where)
        _note(at, "varint", f"{where} (tag {tag} size)")
        size, at = _uvarint(view, at, end, f"{where} (tag {tag})")
        if size > end - at:
            raise FrameBoundsError(f"{where}: tag {tag} of {size} bytes at offset {at}, only {end - at} remain")
        step = tagged.get(tag)
        if step is not None and step(view, at, at + size) != at + size:
            raise FrameBoundsError(f"{where}: tag {tag} does not fill its {size} bytes at offset {at}")
        at += size
    return at
