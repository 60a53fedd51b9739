"""Who is on the other end of a connection: the listener it arrived on, that listener's security
protocol, and the principal it proved (Kafka's KafkaPrincipal, `User:NAME`; `User:ANONYMOUS` on a
PLAINTEXT listener, as Kafka's DefaultKafkaPrincipalBuilder says).

The front end (server.FrameServer) opens one Session per connection and sets it as the connection
task's `current()` before the first request is read; every handler awaited for that connection,
and every task it starts, sees the same Session (asyncio copies the context into a task).  A
handler outside any connection (the broker's own timers, in-process tests) sees the broker's own
session: the internal principal, which every authorization check allows.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class Session:
    listener: str = "PLAINTEXT"         # the listener's name (listeners=NAME://HOST:PORT)
    protocol: str = "PLAINTEXT"         # its security protocol, one of PROTOCOLS
    principal: str = ANONYMOUS          # `User:NAME` once proved (TLS certificate or SASL)
    client_host: str = ""               # the peer's address, for host-restricted ACLs
    authenticated: bool = True          # False on a SASL listener until SaslAuthenticate succeeds
    internal: bool = False              # the broker itself (its timers, in-process calls)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


BROKER = Session(listener="", protocol="PLAINTEXT", principal="User:broker", internal=True)

_CURRENT: contextvars.ContextVar[Session] = contextvars.ContextVar("storage.wire.session", default=BROKER)


def current() -> Session:
    """The session of the connection whose request is being served (BROKER outside any)."""
    return _CURRENT.get()


def enter(session: Session) -> None:
    """Make `session` current for the calling task (one connection's handler task)."""
    _CURRENT.set(session)
