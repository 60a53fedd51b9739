"""`python -m storage serve` (a broker), `python -m storage controller` (the controller of a
multi-process cluster) and `python -m storage cluster` (a local cluster of such processes), all
speaking Kafka's protocol (storage/wire).  SIGTERM or SIGINT is a controlled shutdown; SIGKILL a
crash."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys

from ..core.config import COMPRESSION_TYPES, TIMESTAMP_TYPES, LogConfig
from ..core.files import INT32_MAX, INT64_MAX
from ..wire.configs import MAX_PARTITIONS_PER_TOPIC
from . import listener_flags
from .cluster import add_cluster_parser
from .output import UsageError
from .server_properties import IGNORED, register

EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def loop_factory(event_loop: str):
    """The new-loop function of the kind asked for: None for asyncio's own, uvloop's
    new_event_loop for "uvloop" (a usage error when uvloop is not installed) and for "auto"
    when uvloop imports (else asyncio's: uvloop is a dependency, but a platform without its
    wheel still runs)."""
    if event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if event_loop == "auto":
            return None
        raise UsageError("--event-loop uvloop: uvloop is not installed (pip install uvloop)") from None
    return uvloop.new_event_loop


def add_event_loop_flag(p) -> None:
    """--event-loop, for every process that serves Kafka's protocol (serve, controller, cluster)."""
    p.add_argument("--event-loop", choices=EVENT_LOOPS, default="auto",
                   help="the network loop: auto (the default: uvloop when it imports, else asyncio's), "
                        "asyncio or uvloop (docs/performance.md measures both)")


def log_event_loop(name: str) -> None:
    """One line in the log naming the running loop's class (`event loop: uvloop.Loop`)."""
    loop = type(asyncio.get_running_loop())
    logging.getLogger(name).info("event loop: %s.%s", loop.__module__, loop.__qualname__)


def run_loop(main, factory=None):
    """Run the coroutine `main()` makes to its end on a new loop from `factory` (loop_factory)."""
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


def _ranged(low: int, high: int, kafka_name: str | None = None):
    """An argparse type: a whole number in [low, high], parsed as Kafka's ConfigDef parses its
    broker config `kafka_name` (trimmed, sign and decimal digits); anything else is a usage
    error naming the flag and the value (exit 2) -- never a broker that starts and fails later."""
    kind = "an int32" if high <= INT32_MAX else "an int64"

    def parse(text: str) -> int:
        trimmed = text.strip("".join(map(chr, range(0x21))))
        if not re.fullmatch(r"[+-]?[0-9]+", trimmed) or not low <= int(trimmed) <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind} in [{low}, {high}]"
                                             + (f" (Kafka's {kafka_name})" if kafka_name else ""))
        return int(trimmed)
    return parse


def add_parsers(sub) -> None:
    p = sub.add_parser("serve", help="run a Kafka-protocol broker on a data dir (embedded controller by default)",
                       description="A broker on this engine that Kafka clients use: produce, fetch, consumer groups, "
                                   "committed offsets.  Alone it runs an embedded controller; with --controller it "
                                   "joins a cluster whose controller runs as `python -m storage controller`.  "
                                   "DIR/logs is the Kafka log dir.  SIGTERM is a controlled shutdown.")
    register("serve", p)
    _config_flag(p)
    p.add_argument("--data-dir", help="the broker's data directory (created if missing; Kafka's log.dirs)")
    p.add_argument("--listen", help="HOST:PORT of one PLAINTEXT listener (port 0: any free port; default "
                                     "127.0.0.1:9092; --listeners for several, TLS, SASL)")
    listener_flags.add(p, "serve")
    p.add_argument("--advertised-host", metavar="HOST", help="the host Metadata tells clients and brokers to "
                   "connect to (Kafka's advertised.listeners; default: --listen's host)")
    p.add_argument("--node-id", type=_ranged(0, INT32_MAX, "node.id"), default=1, help="this broker's node id (default 1)")
    p.add_argument("--controller", metavar="HOST:PORT", help="the cluster's controller (default: embedded)")
    p.add_argument("--num-partitions", type=_ranged(1, MAX_PARTITIONS_PER_TOPIC, "num.partitions"), default=1, help="partitions of an auto-created topic")
    p.add_argument("--replication-factor", type=_ranged(1, 2**15 - 1, "default.replication.factor"), default=1, help="replication factor of an auto-created topic")
    p.add_argument("--no-auto-create-topics", action="store_true", help="Metadata does not create topics")
    p.add_argument("--offsets-partitions", type=_ranged(1, MAX_PARTITIONS_PER_TOPIC, "offsets.topic.num.partitions"), default=50, help="partitions of __consumer_offsets")
    p.add_argument("--min-insync-replicas", type=_ranged(1, INT32_MAX, "min.insync.replicas"), default=1, help="the broker's min.insync.replicas")
    p.add_argument("--replica-lag-time-max-ms", type=_ranged(1, INT64_MAX, "replica.lag.time.max.ms"), default=10_000,
                   help="a follower this far behind leaves the ISR (Kafka's replica.lag.time.max.ms)")
    p.add_argument("--fetch-max-bytes", type=_ranged(1, INT32_MAX, "fetch.max.bytes"), default=57_671_680,
                   help="the most one Fetch answer holds, whatever the request asks; the first batch is "
                        "sent whole even when larger (Kafka's fetch.max.bytes, default 55 MiB)")
    p.add_argument("--group-initial-rebalance-delay-ms", type=_ranged(0, INT32_MAX, "group.initial.rebalance.delay.ms"), default=3000,
                   help="how long an empty group's first rebalance waits for more members (Kafka: 3000)")
    _cleaner_and_transaction_flags(p)
    p.add_argument("--no-fsync", action="store_true", help="never fsync (tests only: a crash of the machine "
                                                          "loses acknowledged data)")
    p.add_argument("--max-incremental-fetch-session-cache-slots", type=_ranged(0, INT32_MAX,
                   "max.incremental.fetch.session.cache.slots"), default=1000,
                   help="incremental fetch sessions (KIP-227) the broker keeps at once (Kafka's default 1000; "
                        "0: none, every fetch is a full one)")
    p.add_argument("--compression-type", choices=COMPRESSION_TYPES, default="producer",
                   help="the codec of every topic that sets no compression.type: a producer's batch of another "
                        "codec is recompressed (Kafka's compression.type; default producer: kept as sent)")
    _log_flags(p)
    _acl_flags(p)
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    add_event_loop_flag(p)
    _metrics_flag(p)
    _connection_flags(p)
    _sasl_flags(p)

    p = sub.add_parser("controller", help="run the controller of a multi-process cluster",
                       description="The cluster's controller as its own process: broker registrations and "
                                   "heartbeats, fencing, elections, AlterPartition, topics, producer ids, and the "
                                   "metadata log brokers replay.  DIR/controller and DIR/metadata.")
    register("controller", p)
    _config_flag(p)
    p.add_argument("--data-dir", help="the controller's data directory (created if missing; Kafka's log.dirs)")
    p.add_argument("--node-id", type=_ranged(0, INT32_MAX, "node.id"), default=3000,
                   help="the controller's node id (default 3000)")
    p.add_argument("--listen", help="HOST:PORT of one PLAINTEXT listener (port 0: any free port; default "
                                     "127.0.0.1:9093; --listeners for an SSL one)")
    listener_flags.add(p, "controller")
    p.add_argument("--min-insync-replicas", type=_ranged(1, INT32_MAX, "min.insync.replicas"), default=1,
                   help="min.insync.replicas (KIP-966: ELR is kept above 1)")
    p.add_argument("--session-timeout-ms", type=_ranged(1, INT32_MAX, "broker.session.timeout.ms"), default=9000,
                   help="a broker silent this long is fenced (Kafka's broker.session.timeout.ms)")
    p.add_argument("--unclean-leader-election", action="store_true",
                   help="elect a replica outside the ISR when no ISR member is left (KIP-704: it leads as "
                        "RECOVERING until its recovery completes; acknowledged records it lacks are lost)")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    add_event_loop_flag(p)
    _metrics_flag(p)
    _connection_flags(p)

    add_cluster_parser(sub, _ranged, add_event_loop_flag)


def _cleaner_and_transaction_flags(p) -> None:
    """The log cleaner's and the transaction coordinator's flags."""
    p.add_argument("--log-cleaner-backoff-ms", type=_ranged(1, INT64_MAX, "log.cleaner.backoff.ms"), default=15_000,
                   help="how often the log cleaner looks for compacted logs to clean (Kafka: 15000)")
    p.add_argument("--no-log-cleaner", action="store_true",
                   help="no log cleaner: compacted topics are never compacted (Kafka's log.cleaner.enable=false)")
    p.add_argument("--transaction-partitions", type=_ranged(1, MAX_PARTITIONS_PER_TOPIC, "transaction.state.log.num.partitions"),
                   default=50, help="partitions of __transaction_state (default 50)")
    p.add_argument("--transaction-max-timeout-ms", type=_ranged(1, INT32_MAX, "transaction.max.timeout.ms"),
                   default=900_000, help="the longest transaction.timeout.ms a producer may ask (default 900000)")
    p.add_argument("--transaction-abort-interval-ms",
                   type=_ranged(1, INT32_MAX, "transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                   default=10_000, help="how often transactions past their timeout are looked for and aborted "
                                        "(default 10000)")
    p.add_argument("--transactional-id-expiration-ms", type=_ranged(1, INT32_MAX, "transactional.id.expiration.ms"),
                   default=604_800_000, help="a transactional id idle this long (no transaction open) is forgotten "
                                             "(default 604800000: 7 days)")
    p.add_argument("--transaction-remove-expired-interval-ms",
                   type=_ranged(1, INT32_MAX, "transaction.remove.expired.transaction.cleanup.interval.ms"),
                   default=3_600_000, help="how often idle transactional ids are looked for (default 3600000)")


def _acl_flags(p) -> None:
    """ACLs (docs/guide-operations.md#acls): on when --authorizer names any class."""
    p.add_argument("--authorizer", metavar="CLASS", default="",
                   help="turn ACLs on: every request is checked against the ACLs (Kafka's authorizer.class.name; "
                        "any non-empty value, e.g. org.apache.kafka.metadata.authorizer.StandardAuthorizer)")
    p.add_argument("--super-users", metavar="PRINCIPALS", default="",
                   help="principals allowed everything, separated by semicolons: User:admin;User:ops "
                        "(Kafka's super.users)")
    p.add_argument("--allow-everyone-if-no-acl-found", action="store_true",
                   help="a resource no ACL names is open to everyone (Kafka's allow.everyone.if.no.acl.found; "
                        "default: refused)")


def _authorizer(args):
    """The broker's Authorizer when --authorizer is set, else None (every request allowed)."""
    if not args.authorizer:
        return None
    from ..wire.authorizer import Authorizer, parse_super_users
    return Authorizer(parse_super_users(args.super_users), allow_if_no_acl=args.allow_everyone_if_no_acl_found)


def _log_flags(p) -> None:
    """The broker's defaults of the topic configs Kafka names log.* (LogConfig's fields)."""
    p.add_argument("--log-retention-ms", type=_ranged(-1, INT64_MAX, "log.retention.ms"), default=LogConfig.retention_ms,
                   help="retention.ms of every topic that sets none (-1: unlimited; default 7 days)")
    p.add_argument("--log-retention-bytes", type=_ranged(-2**63, INT64_MAX, "log.retention.bytes"), default=-1,
                   help="retention.bytes of every topic that sets none (-1: unlimited)")
    p.add_argument("--log-segment-bytes", type=_ranged(14, INT32_MAX, "log.segment.bytes"), default=LogConfig.segment_bytes,
                   help="segment.bytes of every topic that sets none (default 1 GiB)")
    p.add_argument("--log-roll-ms", type=_ranged(1, INT64_MAX, "log.roll.ms"), default=LogConfig.segment_ms,
                   help="segment.ms of every topic that sets none (default 7 days)")
    p.add_argument("--message-max-bytes", type=_ranged(0, INT32_MAX, "message.max.bytes"),
                   default=LogConfig.max_message_bytes, help="max.message.bytes of every topic that sets none")
    p.add_argument("--log-flush-interval-messages", type=_ranged(1, INT64_MAX, "log.flush.interval.messages"),
                   default=LogConfig.flush_messages, help="flush.messages of every topic that sets none: an append "
                   "leaving this many messages unflushed fsyncs the log (default: never)")
    p.add_argument("--log-flush-interval-ms", type=_ranged(0, INT64_MAX, "log.flush.interval.ms"),
                   default=LogConfig.flush_ms, help="flush.ms of every topic that sets none: a log whose last fsync "
                   "is this old is fsynced, checked every second (default: never)")
    p.add_argument("--log-message-timestamp-type", choices=TIMESTAMP_TYPES, default=LogConfig.message_timestamp_type,
                   help="message.timestamp.type of every topic that sets none: CreateTime (the producer's timestamps) "
                        "or LogAppendTime (the leader's clock at the append)")


def _config_flag(p) -> None:
    p.add_argument("--config", metavar="FILE", help="Kafka broker properties (server.properties); a flag given "
                                                    "overrides the file (docs/guide-operations.md#configuration)")


def _data_dir(args) -> str:
    if args.data_dir is None:
        raise UsageError(f"{args.command}: --data-dir (or log.dirs in a --config file) is required")
    return args.data_dir


def _log_ignored(args) -> None:
    for name in getattr(args, "config_ignored", ()):
        logging.getLogger("storage.config").info("%s: %s is ignored: %s", args.config, name,
                                                      IGNORED.get(name, "a broker's property"))


def _metrics_flag(p) -> None:
    p.add_argument("--metrics-listen", metavar="HOST:PORT", type=_metrics_address,
                   help="serve Prometheus metrics over HTTP there (port 0: any free port; docs/guide-operations.md)")


def _sasl_flags(p) -> None:
    p.add_argument("--sasl-enabled-mechanisms", type=_sasl_mechanisms, default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                   metavar="M[,M...]", help="the SASL mechanisms a SASL listener offers (Kafka's "
                   "sasl.enabled.mechanisms; default PLAIN,SCRAM-SHA-256,SCRAM-SHA-512)")


def _sasl_mechanisms(text: str) -> tuple[str, ...]:
    from ..wire.sasl import parse_mechanisms
    try:
        return parse_mechanisms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _metrics_address(text: str) -> tuple[str, int]:
    try:
        return _listen(text)
    except UsageError as exc:       # argparse names the option and says why
        raise argparse.ArgumentTypeError(str(exc)) from None


def _start_metrics(args, server) -> None:
    """--metrics-listen: the metrics endpoint, and one line on stdout saying where it is."""
    if args.metrics_listen is not None:
        from ..wire.metrics import serve_metrics
        metrics = serve_metrics(server, *args.metrics_listen)
        print(f"metrics listening on {args.metrics_listen[0]}:{metrics.port}", flush=True)


def _connection_flags(p) -> None:
    """Kafka's connection and request-memory limits (storage/wire/limits.py)."""
    p.add_argument("--connections-max-idle-ms", type=int, default=600_000,
                   help="close a connection silent this long (Kafka's connections.max.idle.ms, default 600000)")
    p.add_argument("--max-connections", type=int, default=0,
                   help="connections at once; the newest beyond is closed (Kafka's max.connections; default: "
                        "what RLIMIT_NOFILE leaves after the log dir's open segments and a reserve)")
    p.add_argument("--max-connections-per-ip", type=int, default=INT32_MAX,
                   help="connections from one IP address at once (Kafka's max.connections.per.ip; default "
                        "unlimited)")
    p.add_argument("--queued-max-request-bytes", type=int, default=100 << 20,
                   help="request bytes in memory across connections before reading waits (Kafka's "
                        "queued.max.request.bytes; default 104857600, -1 unlimited)")
    p.add_argument("--request-timeout-ms", type=int, default=30_000,
                   help="a request must arrive whole within this time of its first byte, or its connection "
                        "is closed (default 30000, Kafka's request.timeout.ms)")


def _connection_limits(args):
    from ..wire.limits import ConnectionLimits
    try:
        return ConnectionLimits(args.max_connections, args.max_connections_per_ip, args.connections_max_idle_ms,
                                args.queued_max_request_bytes, args.request_timeout_ms)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"expected HOST:PORT (port 0-65535), not {text!r}")
    return host, int(port)


def _logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def cmd_serve(args) -> int:
    from ..wire.server import run
    from ..wire.txn_coordinator import TxnSettings

    if args.listen is not None:
        _listen(args.listen)
    listeners, tls_settings, tls_context = listener_flags.listeners(args)
    host, port = listeners[0].host, listeners[0].port
    limits = _connection_limits(args)
    factory = loop_factory(args.event_loop)
    data_dir = _data_dir(args)
    _logging(args.log_level)
    _log_ignored(args)
    log_config = LogConfig(fsync=not args.no_fsync, compression_type=args.compression_type,
                           retention_ms=args.log_retention_ms, retention_bytes=args.log_retention_bytes,
                           segment_bytes=args.log_segment_bytes, segment_ms=args.log_roll_ms,
                           max_message_bytes=args.message_max_bytes, flush_messages=args.log_flush_interval_messages,
                           flush_ms=args.log_flush_interval_ms,
                           message_timestamp_type=args.log_message_timestamp_type)
    options = dict(node_id=args.node_id, host=listeners[0].advertised_host or host, port=port, num_partitions=args.num_partitions,
                   replication_factor=args.replication_factor, auto_create_topics=not args.no_auto_create_topics,
                   offsets_partitions=args.offsets_partitions, min_insync_replicas=args.min_insync_replicas,
                   log_config=log_config, fetch_max_bytes=args.fetch_max_bytes,
                   cleaner_backoff_ms=None if args.no_log_cleaner else args.log_cleaner_backoff_ms,
                   authorizer=_authorizer(args))
    if args.controller:
        from ..wire.cluster_node import ClusterNode
        client_tls = tls_settings.client_context() if listeners[0].tls or \
            args.controller_security_protocol == "SSL" else None
        node = ClusterNode(data_dir, controller=_listen(args.controller),
                           replica_lag_time_max_ms=args.replica_lag_time_max_ms,
                           controller_tls=client_tls if args.controller_security_protocol == "SSL" else None, **options)
        node.peer_tls = client_tls if listeners[0].tls else None     # the brokers fetch from each other over TLS
    else:
        from ..wire.node import Node
        node = Node(data_dir, **options)
    node.fetch_session_slots = args.max_incremental_fetch_session_cache_slots    # read by ClientApis
    node.sasl_mechanisms = args.sasl_enabled_mechanisms            # read by sasl.SaslApis
    node.bind_host = host
    node.listeners = listeners

    def ready(server) -> None:
        # One line on stdout for supervisors and tests: the node, its (inter-broker) address and pid;
        # then, with --listeners, one line per listener.
        log_event_loop("storage.serve")           # logged before the ready line a supervisor waits for
        print(f"node {node.node_id} listening on {node.host}:{node.port} pid {os.getpid()}", flush=True)
        _print_listeners(args, listeners)
        _start_metrics(args, server)

    txn = TxnSettings(args.transaction_partitions, args.transaction_max_timeout_ms, args.transaction_abort_interval_ms,
                      args.transactional_id_expiration_ms, args.transaction_remove_expired_interval_ms)
    run_loop(lambda: run(node, initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms, ready=ready,
                         limits=limits, txn=txn, tls=tls_context), factory)
    return 0


def cmd_controller(args) -> int:
    from ..wire.controller_server import ControllerServer
    from ..wire.server import serve

    if args.listen is not None:
        _listen(args.listen)
    listeners, _settings, tls_context = listener_flags.listeners(args)
    limits = _connection_limits(args)
    factory = loop_factory(args.event_loop)
    data_dir = _data_dir(args)
    _logging(args.log_level)
    _log_ignored(args)

    async def main() -> None:
        server = ControllerServer(data_dir, listeners[0].host, listeners[0].port, node_id=args.node_id,
                                  min_insync_replicas=args.min_insync_replicas,
                                  session_timeout_ms=args.session_timeout_ms,
                                  unclean_leader_election=args.unclean_leader_election, limits=limits)
        server.listeners, server.tls = listeners, tls_context

        def ready(s) -> None:
            log_event_loop("storage.controller")
            print(f"controller {s.node_id} listening on {s.host}:{s.port} pid {os.getpid()}", flush=True)
            _print_listeners(args, listeners)
            _start_metrics(args, s)
        await serve(server, ready)

    run_loop(main, factory)
    return 0


def _print_listeners(args, listeners) -> None:
    """With --listeners (not the --listen shorthand): one line per listener after the ready line."""
    if args.listeners is None:
        return
    for listener in listeners:
        print(f"listener {listener.name} {listener.protocol} on {listener.host or '0.0.0.0'}:{listener.port}",
              flush=True)


def cmd_cluster(args) -> int:
    from .cluster import run_cluster
    from .cluster_status import cluster_status
    if args.cluster_command == "status":
        return cluster_status(args)
    return run_cluster(args)
