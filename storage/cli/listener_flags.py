"""The listener and TLS flags of `storage serve` and `storage controller` (Kafka's listeners,
advertised.listeners, listener.security.protocol.map, inter.broker.listener.name and the ssl.*
PEM settings; storage/wire/listeners.py and tls.py), and their checks at start: a setting that
cannot be served is a usage error naming it (exit 2, nothing started)."""
from __future__ import annotations

from ..wire.listeners import ListenerError, resolve
from ..wire.tls import CLIENT_AUTH, TlsConfigError, TlsSettings
from .output import UsageError

DEFAULT_LISTEN = {"serve": "127.0.0.1:9092", "controller": "127.0.0.1:9093"}


def add(p, command: str) -> None:
    broker = command == "serve"
    p.add_argument("--listeners", metavar="NAME://HOST:PORT,...",
                   help="the listeners, each with its security protocol (Kafka's listeners; a name's protocol "
                        "from --listener-security-protocol-map, by default the name itself: PLAINTEXT, SSL, "
                        "SASL_PLAINTEXT, SASL_SSL); instead of --listen")
    p.add_argument("--listener-security-protocol-map", metavar="NAME:PROTOCOL,...",
                   help="each listener name's security protocol (Kafka's listener.security.protocol.map)")
    p.add_argument("--advertised-listeners", metavar="NAME://HOST:PORT,...",
                   help="what Metadata tells of each listener (Kafka's advertised.listeners; default: the "
                        "listeners' own addresses)")
    if broker:
        p.add_argument("--inter-broker-listener-name", metavar="NAME",
                       help="the listener other brokers fetch from (Kafka's inter.broker.listener.name; default "
                            "the one named after --security-inter-broker-protocol, PLAINTEXT)")
        p.add_argument("--security-inter-broker-protocol", metavar="PROTOCOL",
                       help="the inter-broker listener's name when --inter-broker-listener-name is not given "
                            "(Kafka's security.inter.broker.protocol)")
        p.add_argument("--controller-security-protocol", choices=("PLAINTEXT", "SSL"),
                       help="how to reach --controller (Kafka: controller.listener.names' protocol in "
                            "listener.security.protocol.map; default PLAINTEXT)")
    p.add_argument("--allow-plaintext", action="store_true",
                   help="serve a PLAINTEXT listener on an address other than loopback (refused by default: "
                        "no encryption, no authentication; property allow.plaintext.listeners, our own)")
    p.add_argument("--ssl-keystore", metavar="PEM", help="the private key and certificate chain of the SSL "
                   "listeners, one PEM file (Kafka's ssl.keystore.location with ssl.keystore.type=PEM)")
    p.add_argument("--ssl-key-password", metavar="PASSWORD", help="the keystore's key password when it is "
                   "encrypted (Kafka's ssl.key.password)")
    p.add_argument("--ssl-truststore", metavar="PEM", help="the CA certificates trusted, one PEM file (Kafka's "
                   "ssl.truststore.location with ssl.truststore.type=PEM)")
    p.add_argument("--ssl-endpoint-identification-algorithm", choices=("https", ""), default="https",
                   help="check the host name in the certificate of the TLS listener this node connects to (the "
                        "controller's, another broker's): https (default), or empty: not checked (Kafka's "
                        "ssl.endpoint.identification.algorithm)")
    p.add_argument("--ssl-client-auth", choices=tuple(CLIENT_AUTH), default="none",
                   help="ask clients of the SSL listeners for a certificate: none, requested, required (mutual "
                        "TLS; Kafka's ssl.client.auth)")


def listeners(args):
    """(listeners, the inter-broker one first; TlsSettings; the TLS listeners' SSLContext or None)
    from the flags, or UsageError naming the setting."""
    if args.listen is not None and args.listeners is not None:
        raise UsageError(f"{args.command}: give --listen (one PLAINTEXT listener) or --listeners, not both")
    if args.listeners is not None:
        spec = args.listeners
    else:
        listen = args.listen or DEFAULT_LISTEN[args.command]
        if ":" not in listen:
            raise UsageError(f"expected HOST:PORT (port 0-65535), not {listen!r}")
        spec = "PLAINTEXT://" + listen
    advertised = args.advertised_listeners
    if getattr(args, "advertised_host", None):
        if args.listeners is not None or advertised is not None:
            raise UsageError(f"{args.command}: --advertised-host goes with --listen; with --listeners or "
                             f"--advertised-listeners, say each listener's address in --advertised-listeners")
        advertised = f"PLAINTEXT://{args.advertised_host}:0"      # --advertised-host: the listener's port
    try:
        found, inter = resolve(spec, advertised=advertised, protocol_map=args.listener_security_protocol_map,
                               inter_broker_name=getattr(args, "inter_broker_listener_name", None),
                               inter_broker_protocol=getattr(args, "security_inter_broker_protocol", None),
                               allow_plaintext=args.allow_plaintext)
    except ListenerError as exc:
        raise UsageError(f"{args.command}: {exc}") from None
    if args.command == "controller":
        for listener in found:
            if listener.protocol not in ("PLAINTEXT", "SSL"):
                raise UsageError(f"controller: the listener {listener.name} is {listener.protocol}: a controller "
                                 f"serves PLAINTEXT or SSL")
    if getattr(args, "controller", None) and found[0].sasl:
        raise UsageError(f"serve: the inter-broker listener {inter} is {found[0].protocol}: brokers do not "
                         f"authenticate to each other with SASL yet (use a PLAINTEXT or SSL listener for them)")
    settings = TlsSettings(args.ssl_keystore, args.ssl_key_password, args.ssl_truststore, args.ssl_client_auth,
                           args.ssl_endpoint_identification_algorithm)
    try:
        context = settings.server_context() if any(listener.tls for listener in found) else None
        if getattr(args, "controller_security_protocol", None) == "SSL" or (found[0].tls and args.command == "serve"):
            settings.client_context()           # checked now, used by the broker's own connections
    except TlsConfigError as exc:
        raise UsageError(f"{args.command}: {exc}") from None
    return found, settings, context
