"""`python -m storage serve`: a broker with an embedded controller on this engine, speaking
Kafka's protocol (storage/wire).  SIGTERM or SIGINT is a controlled shutdown; SIGKILL a crash."""
from __future__ import annotations

import asyncio
import logging
import sys

from ..config import LogConfig
from .output import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="run a Kafka-protocol broker (embedded controller) on a data dir",
                       description="A single broker with an embedded controller: Kafka clients produce, fetch, "
                                   "use consumer groups and commit offsets.  DIR/logs is the Kafka log dir, "
                                   "DIR/controller the cluster metadata.  SIGTERM is a controlled shutdown.")
    p.add_argument("--data-dir", required=True, help="the broker's data directory (created if missing)")
    p.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT to listen on (port 0: any free port)")
    p.add_argument("--node-id", type=int, default=1, help="this broker's node id (default 1)")
    p.add_argument("--num-partitions", type=int, default=1, help="partitions of an auto-created topic")
    p.add_argument("--replication-factor", type=int, default=1, help="replication factor of an auto-created topic")
    p.add_argument("--no-auto-create-topics", action="store_true", help="Metadata does not create topics")
    p.add_argument("--offsets-partitions", type=int, default=50, help="partitions of __consumer_offsets")
    p.add_argument("--min-insync-replicas", type=int, default=1, help="the broker's min.insync.replicas")
    p.add_argument("--group-initial-rebalance-delay-ms", type=int, default=3000,
                   help="how long an empty group's first rebalance waits for more members (Kafka: 3000)")
    p.add_argument("--no-fsync", action="store_true", help="never fsync (tests only: a crash of the machine "
                                                          "loses acknowledged data)")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--listen must be HOST:PORT, not {text!r}")
    return host, int(port)


def cmd_serve(args) -> int:
    from ..wire.node import Node
    from ..wire.server import run

    host, port = _listen(args.listen)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    node = Node(args.data_dir, node_id=args.node_id, host=host, port=port, num_partitions=args.num_partitions,
                replication_factor=args.replication_factor, auto_create_topics=not args.no_auto_create_topics,
                offsets_partitions=args.offsets_partitions, min_insync_replicas=args.min_insync_replicas,
                log_config=LogConfig(fsync=not args.no_fsync))

    def ready(server) -> None:
        # One line on stdout for supervisors and tests: the node, its address and pid.
        import os
        print(f"node {node.node_id} listening on {node.host}:{node.port} pid {os.getpid()}", flush=True)

    asyncio.run(run(node, initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms, ready=ready))
    return 0
