"""A broker's listeners as Kafka configures them: `listeners=NAME://HOST:PORT,...`, each name's
security protocol from `listener.security.protocol.map` (Kafka's default map names a listener
after its protocol: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), what each tells clients
(`advertised.listeners`, by default the listener's own address), and the listener the brokers
use to reach each other (`inter.broker.listener.name`, else the listener named after
`security.inter.broker.protocol`, PLAINTEXT by default).

Every connection's Session carries its listener's name and protocol; Metadata, FindCoordinator
and DescribeCluster answer with each broker's address on the listener the request arrived on
(Kafka's rule: a broker lacking that listener is left out).

Secure by default (our own rule, not Kafka's): a PLAINTEXT listener bound to an address other
than loopback (0.0.0.0 and :: included) is refused unless `allow.plaintext.listeners=true`
(`--allow-plaintext`): it would serve anyone on the network with neither encryption nor
authentication.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .session import PROTOCOLS

DEFAULT_MAP = {p: p for p in PROTOCOLS}
PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}     # Kafka's SecurityProtocol ids


class ListenerError(ValueError):
    """A listener setting that cannot be served; the message names the setting."""


@dataclass
class Listener:
    name: str
    protocol: str
    host: str                   # where it binds ("" or 0.0.0.0: every address)
    port: int                   # 0: any free port, replaced by the bound one at start
    advertised_host: str = ""   # what Metadata tells (advertised.listeners; default the host)
    advertised_port: int = 0    # 0: the bound port

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def endpoint(self) -> tuple[str, str, int, int]:
        """(name, host, port, protocol id) as BrokerRegistration and RegisterBrokerRecord carry it."""
        return (self.name, self.advertised_host or self.host, self.advertised_port or self.port,
                PROTOCOL_IDS[self.protocol])


def parse_map(text: str | None) -> dict[str, str]:
    """listener.security.protocol.map: `NAME:PROTOCOL,...` (None: Kafka's default map)."""
    if text is None:
        return dict(DEFAULT_MAP)
    out = {}
    for pair in _items(text):
        name, sep, protocol = pair.partition(":")
        if not sep or not name.strip() or protocol.strip().upper() not in PROTOCOLS:
            raise ListenerError(f"listener.security.protocol.map: expected NAME:PROTOCOL pairs (PROTOCOL one of "
                                f"{', '.join(PROTOCOLS)}), not {pair!r}")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


def parse(text: str, setting: str = "listeners") -> list[tuple[str, str, int]]:
    """(NAME, host, port) of each `NAME://HOST:PORT` of `text` (an IPv6 host in brackets)."""
    out = []
    for item in _items(text):
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not name or not colon or not port.isascii() or not port.isdigit() or int(port) > 65535:
            raise ListenerError(f"{setting}: expected NAME://HOST:PORT (port 0-65535), not {item!r}")
        name = name.strip().upper()
        if any(n == name for n, _, _ in out):
            raise ListenerError(f"{setting}: the listener name {name} appears twice")
        out.append((name, host.strip().strip("[]"), int(port)))
    if not out:
        raise ListenerError(f"{setting}: no listener given")
    return out


def resolve(listeners: str, *, advertised: str | None = None, protocol_map: str | None = None,
            inter_broker_name: str | None = None, inter_broker_protocol: str | None = None,
            allow_plaintext: bool = False) -> tuple[list[Listener], str]:
    """The listeners (the inter-broker one first) and the inter-broker listener's name, or
    ListenerError naming the setting."""
    protocols = parse_map(protocol_map)
    out = []
    for name, host, port in parse(listeners):
        if name not in protocols:
            raise ListenerError(f"listeners: no security protocol for the listener {name} "
                                f"(listener.security.protocol.map has {', '.join(sorted(protocols))})")
        out.append(Listener(name, protocols[name], host, port, host, 0))
    if advertised is not None:
        by_name = {listener.name: listener for listener in out}
        for name, host, port in parse(advertised, "advertised.listeners"):
            if name not in by_name:
                raise ListenerError(f"advertised.listeners: {name} is not one of the listeners")
            if not host or host in ("0.0.0.0", "::"):
                raise ListenerError(f"advertised.listeners: {name} needs a host clients can reach, not {host!r}")
            by_name[name].advertised_host, by_name[name].advertised_port = host, port
    for listener in out:
        if listener.protocol == "PLAINTEXT" and not loopback(listener.host) and not allow_plaintext:
            raise ListenerError(f"listeners: {listener.name}://{listener.host or '0.0.0.0'}:{listener.port} is "
                                f"PLAINTEXT (no TLS, no SASL) on an address other than loopback; use SSL or "
                                f"SASL_SSL, or say --allow-plaintext (allow.plaintext.listeners=true)")
    chosen = _inter_broker(out, inter_broker_name, inter_broker_protocol)
    out.sort(key=lambda listener: listener.name != chosen)
    return out, chosen


def _inter_broker(listeners: list[Listener], name: str | None, protocol: str | None) -> str:
    names = [listener.name for listener in listeners]
    if name is not None and protocol is not None:
        raise ListenerError("inter.broker.listener.name and security.inter.broker.protocol are exclusive")
    if name is not None:
        if name.strip().upper() not in names:
            raise ListenerError(f"inter.broker.listener.name: {name} is not one of the listeners ({', '.join(names)})")
        return name.strip().upper()
    if protocol is not None:
        wanted = protocol.strip().upper()
        if wanted not in PROTOCOLS or wanted not in names:
            raise ListenerError(f"security.inter.broker.protocol: no listener is named {protocol} "
                                f"(the listeners: {', '.join(names)})")
        return wanted
    # Kafka's default is the PLAINTEXT listener; one listener of another name is its own.
    return "PLAINTEXT" if "PLAINTEXT" in names else names[0]


def loopback(host: str) -> bool:
    """Whether `host` is a loopback address or `localhost` (0.0.0.0 and "" bind every address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]
