"""storage/wire/tls_accept.py: a TLS listener accepts its sockets itself, so a failed accept is
its own to survive -- one connection's failure (reset before it was accepted) must not end the
listener; running out of descriptors waits and tries again."""
from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from storage.wire import tls_accept


def _accepting(failures: list[OSError]):
    """A TlsListener on loopback whose first accepts raise `failures`, then accept for real; the
    sockets accepted, after one client connects."""
    async def main():
        loop = asyncio.get_running_loop()
        real = loop.sock_accept

        async def flaky(sock):
            if failures:
                raise failures.pop(0)
            return await real(sock)
        loop.sock_accept = flaky
        got: list = []
        arrived = asyncio.Event()

        def accepted(sock, peer):
            got.append(sock)
            arrived.set()
        listener = await tls_accept.TlsListener.open("127.0.0.1", 0, 8, accepted)
        port = listener.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        try:
            await asyncio.wait_for(arrived.wait(), 5)
        finally:
            client.close()
            listener.close()
            for sock in got:
                sock.close()
        return got, listener
    return asyncio.run(main())


@pytest.mark.parametrize("code", [errno.ECONNABORTED, errno.EPROTO, errno.EPERM])
def test_one_connections_failed_accept_does_not_end_the_listener(code):
    got, _ = _accepting([OSError(code, "failed before the accept")])
    assert len(got) == 1


def test_out_of_descriptors_waits_and_accepts_again(monkeypatch):
    monkeypatch.setattr(tls_accept, "ACCEPT_RETRY_S", 0.01)
    got, _ = _accepting([OSError(errno.EMFILE, "Too many open files")] * 2)
    assert len(got) == 1

