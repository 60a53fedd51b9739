"""SASL on a SASL_PLAINTEXT or SASL_SSL listener, as Kafka's SaslServerAuthenticator does it:
SaslHandshake (API 17, v1) names the mechanism, SaslAuthenticate (API 36, v0-2) carries its
tokens, and until they succeed a connection is served ApiVersions, SaslHandshake and
SaslAuthenticate only -- any other request closes it (server.FrameServer asks `allowed`).

Mechanisms (`sasl.enabled.mechanisms`, default here PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; Kafka's
default is GSSAPI, which is not served):
  - SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802/7677, through scramp's server) against the user's
    credential in the cluster metadata (scram.py);
  - PLAIN (RFC 4616): the password is checked against the user's stored SCRAM credential (salted
    with its salt and iterations, the keys compared in constant time).  Kafka keeps PLAIN users
    in its JAAS file instead; here a user exists for PLAIN once it has a SCRAM credential.

Answers as Kafka's: a mechanism not enabled is UNSUPPORTED_SASL_MECHANISM with the enabled
list; a wrong password or unknown user SASL_AUTHENTICATION_FAILED (for SCRAM Kafka's "Authentication
failed during authentication due to invalid credentials with SASL mechanism ..."; PLAIN's own
messages); either closes the connection once the answer is sent, 100 ms late (Kafka's
connection.failed.authentication.delay.ms).  A handshake or authenticate
out of turn is ILLEGAL_SASL_STATE (closing the connection while it is not authenticated, as
Kafka's authenticator does; after success the connection stays, as Kafka's KafkaApis answers).
On success the connection's Session has the principal `User:NAME` and is authenticated; the
session lifetime is 0 (no KIP-368 re-authentication).  SaslHandshake v0 (the unframed
GSSAPI-era tokens) is not served: every client we know uses v1.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass

from ..core.errors import Errors
from . import scram, session

log = logging.getLogger("storage.wire")

DEFAULT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KNOWN_MECHANISMS = DEFAULT_MECHANISMS
SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
INVALID_CREDENTIALS = "Authentication failed during authentication due to invalid credentials with SASL mechanism "
# Kafka's connection.failed.authentication.delay.ms (default 100): a failed authentication is
# answered, and its connection closed, this much later, to slow a password-guessing client.
FAILED_AUTHENTICATION_DELAY_S = 0.1


class AuthenticationFailed(Exception):
    """SASL_AUTHENTICATION_FAILED with this message to the client."""


@dataclass
class _Exchange:
    """One connection's SASL exchange."""
    mechanism: str | None = None
    server: object = None           # scramp's ScramServer during a SCRAM exchange
    user: str | None = None
    failed: bool = False            # the answer being sent is the connection's last


_EXCHANGE: contextvars.ContextVar[_Exchange | None] = contextvars.ContextVar("storage.wire.sasl", default=None)


def allowed(api_key: int) -> bool:
    """Whether the current connection may send a request of `api_key` now."""
    return session.current().authenticated or api_key in BEFORE_AUTHENTICATION


def closing() -> bool:
    """Whether the current connection is to be closed once its answer is sent (a failed exchange)."""
    exchange = _EXCHANGE.get()
    return exchange is not None and exchange.failed


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """`sasl.enabled.mechanisms`: a comma-separated list, each one this broker serves."""
    names = tuple(dict.fromkeys(n.strip().upper() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in KNOWN_MECHANISMS]
    if unknown or not names:
        raise ValueError(f"sasl.enabled.mechanisms: {', '.join(unknown) or 'empty'}; served: {', '.join(KNOWN_MECHANISMS)}")
    return names


def _unescape(saslname: str) -> str:
    """RFC 5802's saslname: `=2C` is a comma, `=3D` an equals sign."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


class SaslApis:
    """SaslHandshake and SaslAuthenticate over `node`'s replayed credentials; the enabled
    mechanisms are `node.sasl_mechanisms` (set by `storage serve`) or the default."""

    def __init__(self, node):
        self.node = node

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return tuple(getattr(self.node, "sasl_mechanisms", None) or DEFAULT_MECHANISMS)

    def _fail_unauthenticated(self, exchange: _Exchange | None) -> None:
        """Out of turn on a connection not yet authenticated: its last answer."""
        if not session.current().authenticated:
            if exchange is None:
                exchange = _Exchange()
                _EXCHANGE.set(exchange)
            exchange.failed = True

    async def sasl_handshake(self, header, request) -> dict:
        s, exchange = session.current(), _EXCHANGE.get()
        mechanisms = list(self.mechanisms)
        if not s.sasl or s.authenticated or exchange is not None:
            self._fail_unauthenticated(exchange)
            return {"error_code": Errors.ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
        exchange = _Exchange()
        _EXCHANGE.set(exchange)
        if request.mechanism not in mechanisms:
            exchange.failed = True
            log.info("SASL handshake from %s: mechanism %r is not enabled (%s)", s.client_host, request.mechanism,
                     ", ".join(mechanisms))
            await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
            return {"error_code": Errors.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
        exchange.mechanism = request.mechanism
        return {"error_code": Errors.NONE, "mechanisms": mechanisms}

    async def sasl_authenticate(self, header, request) -> dict:
        s, exchange = session.current(), _EXCHANGE.get()
        if s.authenticated or exchange is None or exchange.mechanism is None:
            self._fail_unauthenticated(exchange)
            return _answer(Errors.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request: no SASL handshake "
                           "in progress" if not s.authenticated else "The connection is already authenticated")
        try:
            if exchange.mechanism == "PLAIN":
                token = await self._plain(exchange, bytes(request.auth_bytes))
            else:
                token = self._scram(exchange, bytes(request.auth_bytes))
        except AuthenticationFailed as exc:
            exchange.failed = True
            log.info("SASL %s authentication from %s failed: %s", exchange.mechanism, s.client_host, exc)
            await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
            return _answer(Errors.SASL_AUTHENTICATION_FAILED, str(exc))
        if exchange.user is not None and exchange.server is None:
            s.principal, s.authenticated = f"User:{exchange.user}", True
            log.debug("SASL %s: %s authenticated from %s", exchange.mechanism, s.principal, s.client_host)
        return _answer(Errors.NONE, None, token)

    async def _plain(self, exchange: _Exchange, token: bytes) -> bytes:
        """RFC 4616's message `authzid NUL authcid NUL passwd`, with PlainSaslServer's messages."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: Invalid username or password") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        held = self.node.scram_credentials()
        candidates = [(m, held[(user, m)]) for m in scram.MECHANISMS if (user, m) in held]
        # The key derivation (4096+ PBKDF2 rounds) runs beside the event loop.
        matches = await asyncio.to_thread(lambda: any([scram.password_matches(m, c, password) for m, c in candidates]))
        if not matches:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        exchange.user = user
        return b""

    def _scram(self, exchange: _Exchange, token: bytes) -> bytes:
        """The client-first message (answered with the server-first), then the client-final
        (answered with the server-final, the exchange done); any failure is Kafka's generic
        message, which does not tell whether the user exists."""
        import scramp

        mechanism = exchange.mechanism
        held = self.node.scram_credentials()

        def credential(saslname: str):
            found = held.get((_unescape(saslname), scram.TYPES[mechanism]))
            if found is None:
                raise AuthenticationFailed("Authentication failed: Invalid user credentials")
            return found.salt, found.stored_key, found.server_key, found.iterations

        opening = exchange.server is None
        try:
            text = token.decode("utf-8")
            if opening:
                exchange.server = scramp.ScramMechanism(mechanism).make_server(credential)
                exchange.server.set_client_first(text)
                exchange.user = _user_of(text)
                first = exchange.server.get_server_first()
            else:
                exchange.server.set_client_final(text)
                final = exchange.server.get_server_final()
        except (AuthenticationFailed, scramp.ScramException, UnicodeDecodeError, ValueError, IndexError) as exc:
            log.debug("SASL %s: %s", mechanism, exc)
            raise AuthenticationFailed(INVALID_CREDENTIALS + mechanism) from None
        if opening:
            authzid = text.split(",", 2)[1]
            if authzid.startswith("a=") and _unescape(authzid[2:]) != exchange.user:
                raise AuthenticationFailed("Authentication failed: Client requested an authorization id that "
                                           "is different from username")
            return first.encode("utf-8")
        exchange.server = None
        return final.encode("utf-8")


def _user_of(client_first: str) -> str:
    """The user (`n=`) of a SCRAM client-first message, unescaped."""
    bare = client_first.split(",", 2)[2]
    for attribute in bare.split(","):
        if attribute.startswith("n="):
            return _unescape(attribute[2:])
    raise ValueError("no user in the client-first message")


def _answer(code: int, message: str | None, token: bytes = b"") -> dict:
    return {"error_code": code, "error_message": message, "auth_bytes": token, "session_lifetime": 0}
