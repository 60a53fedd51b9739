"""What the hand-made readers (produce_codec, fetch_request, fetch_response) share: the request
header they give a handler (the fields it reads, with kio's RequestHeader's names), the exception
that leaves a frame to kio, the unsigned-varint read, and the slotted entity their objects are."""
from __future__ import annotations

VARINT_BYTES_MAX = 5        # an int32's varint


class NotOurs(Exception):
    """The frame is left to kio (codec.parse_request), which answers it as it always did."""


def read_uvarint(view, at: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at `at`; NotOurs if cut or too long."""
    value = shift = 0
    for i in range(VARINT_BYTES_MAX):
        if at + i >= end:
            raise NotOurs
        byte = view[at + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at + i + 1
        shift += 7
    raise NotOurs


class RequestHeader:
    __slots__ = ("request_api_key", "request_api_version", "correlation_id", "client_id")

    def __init__(self, api_key: int, version: int, correlation_id: int, client_id: str | None):
        self.request_api_key = api_key
        self.request_api_version = version
        self.correlation_id = correlation_id
        self.client_id = client_id

    def __repr__(self) -> str:
        return (f"RequestHeader(key {self.request_api_key} v{self.request_api_version}, #{self.correlation_id}, "
                f"{self.client_id!r})")


class Entity:
    """An object read by hand, its slots set as kio's entity of the version has them (the unset
    ones absent); equal to another of its type with the same slots set alike."""

    __slots__ = ()

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and present(self) == present(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in present(self).items())})"


def present(entity) -> dict:
    """The attributes an entity has (its set slots)."""
    return {name: getattr(entity, name) for cls in type(entity).__mro__ for name in getattr(cls, "__slots__", ())
            if hasattr(entity, name)}
