"""`Peer`: this broker's side of a connection to another node (the controller, a partition's
leader): Kafka's framing through the codec, one request at a time, a timeout on every
exchange, TLS when the other end's listener is SSL, and a fresh connection after any failure (the request fails with PeerError; the
caller's retry policy decides what happens next)."""
from __future__ import annotations

import asyncio
import itertools
import ssl
import struct

from . import codec

CLIENT_ID = "storage-broker"


class PeerError(Exception):
    """The exchange failed: connection refused or lost, timeout, or an unreadable answer."""


class Peer:
    def __init__(self, host: str, port: int, *, timeout_s: float = 10.0, tls: ssl.SSLContext | None = None):
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self.tls = tls          # TLS to an SSL listener: its certificate checked for `host`
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def call(self, key: int, version: int, body: dict, *, timeout_s: float | None = None, decode=None):
        """Send a request and return the decoded response entity (`decode(version, frame)` ->
        (correlation id, response) reads the answer when given: fetch_response.decode)."""
        async with self._lock:
            try:
                # asyncio.timeout, not wait_for: no task of its own per exchange (a follower makes
                # one a fetch; wait_for's task and its scheduling were a few % of its CPU).
                async with asyncio.timeout(timeout_s or self.timeout_s):
                    return await self._exchange(key, version, body, decode)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, struct.error, ValueError) as exc:
                self.close()
                raise PeerError(f"{codec.api_name(key)} to {self.host}:{self.port}: {type(exc).__name__}: {exc}") from None

    async def _exchange(self, key: int, version: int, body: dict, decode=None):
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.tls, server_hostname=self.host if self.tls is not None else None)
        correlation_id = next(self._ids)
        self._writer.write(codec.encode_request(key, version, correlation_id, CLIENT_ID, body))
        await self._writer.drain()
        size = struct.unpack(">i", await self._reader.readexactly(4))[0]
        frame = await self._reader.readexactly(size)
        got, response = decode(version, frame) if decode is not None else codec.decode_response(key, version, frame)
        if got != correlation_id:
            raise ValueError(f"correlation id {got}, expected {correlation_id}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
