"""A TLS listener (SSL, SASL_SSL) that accepts its sockets itself and has the running loop do each
one's handshake (`loop.connect_accepted_socket(..., ssl=)`), on asyncio's loop and uvloop alike.

Why not `create_server` and then `loop.start_tls` on the new transport: the ClientHello must reach
the TLS layer, and a plain transport holds it back only if its reading is paused until start_tls
takes over.  asyncio's loop starts reading before the protocol's connection_made, where a pause
holds; uvloop starts reading after it (a pause there does nothing), so a ClientHello read before
start_tls went to the plain protocol and the handshake timed out (most connections, under load).
Here no plain protocol ever reads: the loop's TLS protocol owns the socket from the start.

FrameServer keeps a TlsListener as it keeps an asyncio.Server: `sockets`, `close()`."""
from __future__ import annotations

import asyncio
import errno
import logging
import socket

log = logging.getLogger("storage.wire")

ACCEPT_RETRY_S = 0.1        # after an accept that failed for want of descriptors (EMFILE, ENFILE, ...)
_OUT_OF = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_CLOSED = (errno.EBADF, errno.EINVAL, errno.ENOTSOCK)


class TlsListener:
    """Listening sockets (one per address the host resolves to, as create_server binds them) and a
    task accepting on each; `accepted(sock, peer)` is called for each new connection (its socket
    non-blocking, nothing read from it)."""

    def __init__(self, sockets: list[socket.socket], accepted):
        self.sockets = sockets
        self._accepted = accepted
        self._tasks = []
        for sock in sockets:
            task = asyncio.get_running_loop().create_task(self._accept(sock))
            task.add_done_callback(lambda _, sock=sock: sock.close())     # once the loop has let go of it
            self._tasks.append(task)

    @classmethod
    async def open(cls, host: str | None, port: int, backlog: int, accepted) -> "TlsListener":
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        sockets: list[socket.socket] = []
        try:
            for family, address in dict.fromkeys((info[0], info[4]) for info in infos):
                sock = socket.create_server(address, family=family, backlog=backlog)    # IPv6 sockets v6-only
                sock.setblocking(False)
                sockets.append(sock)
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        return cls(sockets, accepted)

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in _CLOSED:            # the listening socket itself is gone
                    raise
                if exc.errno in _OUT_OF:
                    log.warning("accepting a TLS connection failed: %s; trying again", exc)
                    await asyncio.sleep(ACCEPT_RETRY_S)
                else:                               # one connection's own failure (reset before the
                    log.debug("accepting a TLS connection failed: %s", exc)     # accept): the next one
                continue
            conn.setblocking(False)
            self._accepted(conn, peer)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
