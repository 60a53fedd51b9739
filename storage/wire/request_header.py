"""The request header the hand-made readers give a handler (produce_codec, fetch_request): the
fields it reads, with kio's RequestHeader's names."""
from __future__ import annotations


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
