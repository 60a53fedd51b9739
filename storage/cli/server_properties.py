"""`storage serve --config server.properties` and `storage controller --config ...`: Kafka's broker
property names mapped onto the commands' flags (docs/guide-operations.md#configuration has the
table).  A property is converted by its flag's own argparse type, so the file and the flag take the
same values and ranges; the file's values become the subcommand's defaults and the command line is
parsed again, so a flag given there wins.  An unknown property, or a value the flag would refuse, is
a usage error naming the file, the line and the property (exit 2, nothing started)."""
from __future__ import annotations

import argparse
import re

from ..wire.limits import ConnectionLimits
from ..wire.listeners import DEFAULT_MAP
from . import properties
from .output import UsageError

# Properties Kafka's broker has that this one accepts and does not use: logged once at start as
# ignored.  Only these; any other name not in a command's table is refused.
IGNORED = {
    "num.network.threads": "one asyncio event loop serves every connection",
    "num.io.threads": "requests are handled on the event loop",
    "num.replica.fetchers": "a follower fetches with one fetcher per leader",
    "num.recovery.threads.per.data.dir": "the log dir is recovered by one thread",
    "background.threads": "background work runs on the event loop",
    "socket.send.buffer.bytes": "the OS default socket buffers are used",
    "socket.receive.buffer.bytes": "the OS default socket buffers are used",
    "socket.request.max.bytes": "the request size limit is fixed at Kafka's default, 104857600",
    "log.flush.scheduler.interval.ms": "each log's flush.ms is checked every second",
    "log.retention.check.interval.ms": "retention runs on the broker's own schedule",
    "offsets.topic.replication.factor": "__consumer_offsets gets min(default.replication.factor, 3) replicas",
    "transaction.state.log.replication.factor": "__transaction_state gets min(default.replication.factor, 3) "
                                                "replicas",
    "transaction.state.log.min.isr": "__transaction_state uses the broker's min.insync.replicas",
    "share.coordinator.state.topic.replication.factor": "share groups (KIP-932) are not served",
    "share.coordinator.state.topic.min.isr": "share groups (KIP-932) are not served",
}

# Kafka name -> the flag's dest, converted by the flag's type (or checked against its choices).
_CONNECTION = {"connections.max.idle.ms": "connections_max_idle_ms", "max.connections": "max_connections",
               "max.connections.per.ip": "max_connections_per_ip",
               "queued.max.request.bytes": "queued_max_request_bytes", "request.timeout.ms": "request_timeout_ms"}
_TLS = {"ssl.keystore.location": "ssl_keystore", "ssl.key.password": "ssl_key_password",
        "ssl.truststore.location": "ssl_truststore", "ssl.client.auth": "ssl_client_auth",
        "ssl.endpoint.identification.algorithm": "ssl_endpoint_identification_algorithm"}
_COMMON = {**_CONNECTION, **_TLS, "min.insync.replicas": "min_insync_replicas", "node.id": "node_id"}
FLAGS = {
    "serve": {**_COMMON, "broker.id": "node_id", "num.partitions": "num_partitions",
              "default.replication.factor": "replication_factor",
              "offsets.topic.num.partitions": "offsets_partitions",
              "replica.lag.time.max.ms": "replica_lag_time_max_ms", "fetch.max.bytes": "fetch_max_bytes",
              "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
              "transaction.state.log.num.partitions": "transaction_partitions",
              "transaction.max.timeout.ms": "transaction_max_timeout_ms",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "transaction_abort_interval_ms",
              "transactional.id.expiration.ms": "transactional_id_expiration_ms",
              "transaction.remove.expired.transaction.cleanup.interval.ms": "transaction_remove_expired_interval_ms",
              "max.incremental.fetch.session.cache.slots": "max_incremental_fetch_session_cache_slots",
              "compression.type": "compression_type", "log.retention.bytes": "log_retention_bytes",
              "log.segment.bytes": "log_segment_bytes", "message.max.bytes": "message_max_bytes",
              "log.flush.interval.messages": "log_flush_interval_messages",
              "log.flush.interval.ms": "log_flush_interval_ms",
              "log.message.timestamp.type": "log_message_timestamp_type",
              "log.cleaner.backoff.ms": "log_cleaner_backoff_ms",
              "authorizer.class.name": "authorizer", "super.users": "super_users",
              "sasl.enabled.mechanisms": "sasl_enabled_mechanisms"},
    "controller": {**_COMMON, "broker.session.timeout.ms": "session_timeout_ms"},
}
# Booleans (Kafka's: true or false, any case): Kafka name -> (dest, whether the flag is the negation).
BOOLEANS = {"serve": {"auto.create.topics.enable": ("no_auto_create_topics", True),
                      "log.cleaner.enable": ("no_log_cleaner", True),
                      "allow.plaintext.listeners": ("allow_plaintext", False),
                      "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", False)},
            "controller": {"unclean.leader.election.enable": ("unclean_leader_election", False),
                           "allow.plaintext.listeners": ("allow_plaintext", False)}}
# Several Kafka names for one flag, the first given winning (Kafka's precedence): name -> factor to ms.
_UNITS = {"serve": {"log_retention_ms": [("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                                         ("log.retention.hours", 3_600_000)],
                    "log_roll_ms": [("log.roll.ms", 1), ("log.roll.hours", 3_600_000)]}}
# Read together below: the listener, the log dir, the roles and the controller's address.
_STRUCTURE = {"listeners", "advertised.listeners", "log.dirs", "log.dir", "process.roles", "controller.listener.names",
              "listener.security.protocol.map", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
              "inter.broker.listener.name", "security.inter.broker.protocol", "ssl.keystore.type",
              "ssl.truststore.type"}
_PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
SUBPARSERS: dict[str, argparse.ArgumentParser] = {}


def register(command: str, parser: argparse.ArgumentParser) -> None:
    """serve.add_parsers: the subcommand whose defaults a --config file sets."""
    SUBPARSERS[command] = parser


class _Refused(Exception):
    pass


def known(command: str) -> set[str]:
    """Every property name `command --config` takes (used or ignored)."""
    return (set(FLAGS[command]) | (broker_only() if command == "controller" else set()) | set(BOOLEANS.get(command, {})) | set(IGNORED) | _STRUCTURE
            | {name for names in _UNITS.get(command, {}).values() for name, _ in names})


def broker_only() -> set[str]:
    """The broker's properties a controller's file may carry too (Kafka's controller.properties
    does): the controller ignores them."""
    return (set(FLAGS["serve"]) | set(BOOLEANS["serve"]) | {n for names in _UNITS["serve"].values() for n, _ in names}) \
        - set(FLAGS["controller"]) - set(BOOLEANS["controller"])


def load_file(path: str) -> dict:
    """The entries of a properties file, or UsageError naming the file (and the line)."""
    try:
        return properties.load(path)
    except properties.PropertiesError as exc:
        raise UsageError(f"{path}, {exc}") from None
    except OSError as exc:
        raise UsageError(f"--config {path}: {exc.strerror or exc}") from None


def read(command: str, path: str, parser: argparse.ArgumentParser) -> dict:
    """The flag values a properties file gives `command` ({dest: value}; `config_ignored` lists the
    ignored names), or UsageError naming the file, line and property."""
    entries = load_file(path)
    actions = getattr(parser, "actions_by_dest", {})
    values: dict = {}

    def refuse(entry, why: str):
        raise UsageError(f"{path}, line {entry.line}: {entry.key}={entry.value!r}: {why}")

    for key, entry in entries.items():
        if key not in known(command):
            raise UsageError(f"{path}, line {entry.line}: unknown property {key!r} "
                             f"(docs/guide-operations.md#configuration lists those `storage {command}` takes)")
        try:
            if key in FLAGS[command]:
                values[FLAGS[command][key]] = _convert(actions[FLAGS[command][key]], entry.value)
            elif key in BOOLEANS.get(command, {}):
                dest, negated = BOOLEANS[command][key]
                values[dest] = _boolean(entry.value) != negated
        except _Refused as exc:
            refuse(entry, str(exc))
    for key in _CONNECTION:                 # their flags are plain ints, checked by ConnectionLimits
        if key in entries:
            try:
                ConnectionLimits(**{FLAGS[command][key]: values[FLAGS[command][key]]})
            except ValueError as exc:
                refuse(entries[key], str(exc))
    if "node.id" in entries and "broker.id" in entries and values.get("node_id") is not None and \
            _convert(actions["node_id"], entries["node.id"].value) != \
            _convert(actions["node_id"], entries["broker.id"].value):
        refuse(entries["broker.id"], "broker.id and node.id differ")
    for dest, names in _UNITS.get(command, {}).items():
        # Each given one must be valid (Kafka parses them all); the first in `names` is used.
        given = [(entries[name], factor) for name, factor in names if name in entries]
        for entry, factor in reversed(given):
            try:
                if not re.fullmatch(r"[+-]?[0-9]+", entry.value.strip()):
                    raise _Refused("not a whole number")
                number = int(entry.value.strip())
                values[dest] = _convert(actions[dest], str(-1 if number < 0 and dest == "log_retention_ms"
                                                           else number * factor))
            except _Refused as exc:
                refuse(entry, str(exc))
    _structure(command, entries, values, refuse)
    values["config_ignored"] = sorted(key for key in entries if key in IGNORED
                                      or (command == "controller" and key in broker_only()))
    return values


def _convert(action: argparse.Action, text: str):
    try:
        value = action.type(text) if action.type is not None else text.strip()
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise _Refused(str(exc) or f"not a valid {action.dest}") from None
    if action.choices is not None and value not in action.choices:
        raise _Refused(f"not one of {', '.join(action.choices)}")
    return value


def _boolean(text: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise _Refused("expected true or false")
    return text.strip().lower() == "true"


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _structure(command: str, entries: dict, values: dict, refuse) -> None:
    roles = set(_list(entries["process.roles"].value)) if "process.roles" in entries else None
    if roles is not None and (not roles or roles - {"broker", "controller"}
                              or (command == "controller") != (roles == {"controller"})):
        refuse(entries["process.roles"], "`storage serve` is process.roles=broker (with a controller's "
                                         "address) or broker,controller (embedded); `storage controller` "
                                         "is process.roles=controller")
    controller_names = set(_list(entries["controller.listener.names"].value)) \
        if "controller.listener.names" in entries else set()
    protocols = {}
    if "listener.security.protocol.map" in entries:
        for pair in _list(entries["listener.security.protocol.map"].value):
            name, sep, protocol = pair.partition(":")
            if not sep or protocol.strip() not in _PROTOCOLS:
                refuse(entries["listener.security.protocol.map"], f"expected NAME:PROTOCOL pairs, not {pair!r}")
            protocols[name.strip()] = protocol.strip()
    for name in ("listener.security.protocol.map", "advertised.listeners", "inter.broker.listener.name",
                 "security.inter.broker.protocol"):
        if name in entries and "listeners" not in entries:
            refuse(entries[name], "needs listeners")
    # Combined mode: the embedded controller takes no listener, so its listener is left out.
    skipped = controller_names if command == "serve" and roles and "controller" in roles else set()
    if "listeners" in entries:
        chosen = _listeners(entries["listeners"], protocols, controller_names, skipped, refuse)
        if not chosen:
            refuse(entries["listeners"], "no listener left to serve")
        told = None
        if "advertised.listeners" in entries:
            told = _listeners(entries["advertised.listeners"], protocols, controller_names, skipped, refuse)
        _choose_listeners(command, entries, chosen, told, protocols, controller_names, values)
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if key in entries and entries[key].value.strip().upper() != "PEM":
            refuse(entries[key], "only PEM files are read (JKS and PKCS12 are not)")
    controller_protocol = next((protocols.get(name, "PLAINTEXT") for name in controller_names), None)
    if command == "serve" and controller_protocol is not None and not (roles and "controller" in roles):
        if controller_protocol not in ("PLAINTEXT", "SSL"):
            refuse(entries["controller.listener.names"], f"the controller's listener is {controller_protocol}: "
                                                         f"a controller serves PLAINTEXT or SSL")
        values["controller_security_protocol"] = controller_protocol
    dirs = entries.get("log.dirs") or entries.get("log.dir")
    if dirs is not None:
        if len(_list(dirs.value)) != 1:
            refuse(dirs, "exactly one log dir is served (JBOD is not)")
        values["data_dir"] = _list(dirs.value)[0]
    address = _controller_address(entries, refuse)
    if command == "serve":
        if roles == {"broker"} and address is None:
            refuse(entries["process.roles"], "a broker alone needs controller.quorum.voters or "
                                             "controller.quorum.bootstrap.servers")
        if address is not None and not (roles and "controller" in roles):
            values["controller"] = address


def _listeners(entry, protocols: dict, controller_names: set, skipped: set, refuse) -> list[tuple[str, str, str]]:
    """(name, host, port) of each listener of a `listeners` / `advertised.listeners` entry, those
    named in `skipped` left out."""
    out = []
    for listener in _list(entry.value):
        name, sep, address = listener.partition("://")
        protocol = protocols.get(name, name if name in _PROTOCOLS else
                                 "PLAINTEXT" if name in controller_names else None)
        host, colon, port = address.rpartition(":")
        if not sep or not colon or protocol is None:
            refuse(entry, f"expected NAME://HOST:PORT with a known security protocol, not {listener!r}")
        if any(n == name for n, _, _ in out):
            refuse(entry, f"the listener name {name} appears twice")
        if name not in skipped:
            out.append((name, host.strip("[]"), port))
    return out


def _choose_listeners(command: str, entries: dict, chosen: list, told: list | None, protocols: dict,
                      controller_names: set, values: dict) -> None:
    """One PLAINTEXT listener told on its own port: --listen (and --advertised-host); anything
    else: --listeners with its protocol map and --advertised-listeners (checked at start)."""
    name, host, port = chosen[0]
    protocol = protocols.get(name, name if name in _PROTOCOLS else "PLAINTEXT")
    same = told is None or (len(told) == 1 and told[0][0] == name and told[0][2] == port and told[0][1])
    if len(chosen) == 1 and protocol == "PLAINTEXT" and same:
        values["listen"] = f"{host or '0.0.0.0'}:{port}"
        if told and command == "serve":
            values["advertised_host"] = told[0][1]
    else:
        values["listeners"] = ",".join(f"{n}://{h or '0.0.0.0'}:{p}" for n, h, p in chosen)
        full = {**{n: "PLAINTEXT" for n in controller_names}, **(protocols or DEFAULT_MAP)}
        values["listener_security_protocol_map"] = ",".join(f"{n}:{p}" for n, p in full.items())
        if told:
            values["advertised_listeners"] = ",".join(f"{n}://{h}:{p}" for n, h, p in told)
    if command == "serve":
        for key, dest in (("inter.broker.listener.name", "inter_broker_listener_name"),
                          ("security.inter.broker.protocol", "security_inter_broker_protocol")):
            if key in entries and "listeners" in values:
                values[dest] = entries[key].value.strip()


def _controller_address(entries: dict, refuse) -> str | None:
    """The one controller's HOST:PORT from Kafka's voters (ID@HOST:PORT) or bootstrap servers."""
    for key in ("controller.quorum.voters", "controller.quorum.bootstrap.servers"):
        if key in entries:
            items = _list(entries[key].value)
            if len(items) != 1:
                refuse(entries[key], "exactly one controller is served (a controller quorum is not)")
            address = items[0].partition("@")[2] if key.endswith("voters") else items[0]
            if ":" not in address:
                refuse(entries[key], "expected ID@HOST:PORT" if key.endswith("voters") else "expected HOST:PORT")
            return address
    return None


def apply_config(parser: argparse.ArgumentParser, argv: list[str], args) -> argparse.Namespace:
    """The command line parsed again over the --config file's values (a flag given wins; --listen
    or --listeners given replaces the file's listeners and what it advertised, whichever form the
    file's took)."""
    subparser = SUBPARSERS[args.command]
    values = read(args.command, args.config, subparser)
    if any(a.split("=")[0] in ("--listen", "--listeners") for a in argv):
        for dest in ("listen", "listeners", "advertised_host", "advertised_listeners"):
            values.pop(dest, None)
    subparser.set_defaults(**values)
    return parser.parse_args(argv)
