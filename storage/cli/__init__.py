"""The command line: `python -m storage SUBCOMMAND` (and the `storage` console script).

    dump-log --files F [F ...]   Kafka's kafka-dump-log on .log, .index, .timeindex, .snapshot
                                 and leader-epoch-checkpoint files (ours or Kafka's)
    verify DIR                   read-only check of a log dir: CRCs, structure, indexes, epochs
    recover DIR                  offline unclean-shutdown recovery, with what was truncated
    epochs DIR TOPIC-PARTITION   the leader-epoch-checkpoint next to the lineage in the batches
    abort-txn DIR --topic T ...  abort a hanging transaction in a stopped broker's dir (KIP-664)
    audit DIR [DIR ...]          the fleet audit on Spark (storage/spark/audit.py)
    serve --data-dir DIR         a Kafka-protocol broker (embedded controller, or --controller)
    controller --data-dir DIR    the controller of a multi-process cluster
    cluster --data-dir DIR       a local cluster: a controller and N brokers, supervised
    demo                         a three-broker cluster story ending with the fleet audit
    topics ACTION                list/describe/create/delete/alter/alter-configs topics (confluent-kafka)
    groups ACTION                list/describe/delete/reset-offsets consumer groups (confluent-kafka)
    acls ACTION                  list/create/delete ACLs (confluent-kafka)

Conventions shared by every subcommand:
  - `--json` prints one JSON document on stdout instead of text;
  - a problem is one line naming the file, the byte position and the offset where it was
    found (`<file>, position P, offset O: what`), as `storage.core.errors.StorageError` does;
  - exit status 0 = nothing wrong, 1 = problems found (or, for `recover`, data was cut),
    2 = usage error (bad arguments, a path that does not exist);
  - progress bars (tqdm, when installed) go to stderr and only when stderr is a terminal;
  - `verify`, `epochs` and `dump-log` never write: segments are read by pread in windows (never
    mapped: a live broker may truncate them) and the LMDB metadata store is opened read-only
    without its lock file, so they work on a live broker's dir;
  - `recover` (the one tool that writes a log dir) holds the dir's `.lock` as a broker does and
    refuses a dir another process holds, with one line naming the holder (the pid its lock
    file records, and that process's command line); `recover --dry-run` writes only copies.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from .._version import __version__
from ..core import errors
from .abort_txn import add_parser as add_abort_txn_parser
from .abort_txn import cmd_abort_txn
from .acl_tools import add_parser as add_acl_parser
from .acl_tools import cmd_acls
from .admin_tools import add_parsers as add_admin_parsers
from .admin_tools import cmd_admin
from .demo import run_demo
from .dump import cmd_dump_log
from .epochs import cmd_epochs
from .output import OK, PROBLEMS, USAGE, UsageError
from .recover import cmd_recover
from .serve import add_parsers as add_serve_parsers
from .serve import cmd_cluster, cmd_controller, cmd_serve
from .server_properties import apply_config
from .users import add_parser as add_users_parser
from .users import cmd_users
from .verify import cmd_verify


class _Parser(argparse.ArgumentParser):
    def add_argument(self, *names, **options):
        # Kept by dest: `--config FILE` converts a property with its flag's own type and range.
        action = super().add_argument(*names, **options)
        self.__dict__.setdefault("actions_by_dest", {})[action.dest] = action
        return action

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def common(p, json_help="print one JSON document instead of text"):
    """The options every inspecting tool has."""
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="storage", description="Kafka-compatible partition-log storage: tools and demo.",
                     epilog="Exit status: 0 ok, 1 problems found (recover: data was cut), 2 usage error.")
    parser.add_argument("--version", action="version", version=f"storage (kafka-partition-storage) {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("dump-log", help="print segments, indexes, snapshots and epoch checkpoints as Kafka's "
                                        "kafka-dump-log does",
                       description="Kafka's kafka-dump-log (DumpLogSegments) output for .log, .index, .timeindex "
                                   "and .snapshot files, plus leader-epoch-checkpoint files.")
    p.add_argument("--files", nargs="+", required=True, metavar="FILE",
                   help="files to dump (space or comma separated)")
    p.add_argument("--print-data-log", action="store_true",
                   help="print the records' keys and payloads (implies --deep-iteration)")
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only batch headers")
    p.add_argument("--verify-index-only", action="store_true",
                   help="check the index entries against the log without printing them")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="only the index sanity check a broker runs at startup")
    p.add_argument("--skip-record-metadata", action="store_true", help="only keys and payloads on record lines")
    decoders = p.add_mutually_exclusive_group()
    decoders.add_argument("--offsets-decoder", action="store_true",
                          help="decode records as __consumer_offsets ones (implies --print-data-log)")
    decoders.add_argument("--transaction-log-decoder", action="store_true",
                          help="decode records as __transaction_state ones (implies --print-data-log)")
    common(p)

    p = sub.add_parser("verify", help="read-only check of a log dir: CRCs, indexes, epoch lineage",
                       description="Check every partition of a log dir (ours or Kafka's) without changing "
                                   "anything: batch sizes, magic and CRC-32C, offsets strictly increasing, torn "
                                   "tails, both indexes of every segment, and the leader-epoch-checkpoint against "
                                   "the epochs found in the batches.  Exit 1 when anything is wrong.")
    p.add_argument("dir", metavar="DIR", help="a broker log dir (or one partition dir)")
    p.add_argument("--quiet", action="store_true", help="only the partitions with problems, no warnings")
    common(p)

    p = sub.add_parser("recover", help="offline unclean-shutdown recovery, reporting what was truncated",
                       description="Run Kafka's unclean-shutdown recovery on every partition (no clean-shutdown "
                                   "marker needed) from the recovery point the dir records (0 when it records "
                                   "none): CRCs and sizes checked, indexes rebuilt, each log cut at its first "
                                   "invalid batch, later segments deleted, the epoch checkpoint repaired.  Damage "
                                   "below the recovery point is reported and nothing is changed, unless --force.  "
                                   "For a stopped broker only: it takes the dir's .lock and refuses a dir another "
                                   "process holds, naming it.  Exit 1 when data was cut, a partition refused or "
                                   "the dir is in use.")
    p.add_argument("dir", metavar="DIR", help="a broker log dir (or one partition dir)")
    p.add_argument("--dry-run", action="store_true", help="recover copies in a temporary dir; change nothing")
    p.add_argument("--force", action="store_true",
                   help="recover every segment from offset 0 and cut at the first invalid batch even below the "
                        "recovery point (without it, such damage is reported and nothing is changed)")
    p.add_argument("--quiet", action="store_true", help="only what was cut")
    common(p)

    p = sub.add_parser("epochs", help="the leader-epoch-checkpoint next to the epochs found in the batches")
    p.add_argument("dir", metavar="DIR", help="a broker log dir (or the partition dir itself)")
    p.add_argument("partition", metavar="TOPIC-PARTITION", nargs="?", help="e.g. orders-0")
    common(p)

    add_abort_txn_parser(sub, common)

    p = sub.add_parser("demo", help="a three-broker cluster: crashes, an unclean election, truncation, KIP-903, "
                                    "then the fleet audit",
                       description="A controller and three brokers in this process, on log dirs under a temporary "
                                   "directory (or --dir): acks=all writes, two brokers crash and lose their page "
                                   "cache, an unclean election (KIP-704 RECOVERING), followers truncate by "
                                   "OffsetForLeaderEpoch, a stale AlterPartition is rejected (KIP-903), then the "
                                   "fleet audit over the three log dirs (Spark, or a local table).")
    p.add_argument("--dir", help="keep the cluster's files under this directory (default: a temporary one)")
    p.add_argument("--no-spark", action="store_true", help="end with the local comparison table, not Spark")
    p.add_argument("--no-wire", action="store_true", help="skip the chapters with Kafka clients and broker processes")
    p.add_argument("--master", default="local[2]", help="Spark master for the audit (default local[2])")

    add_serve_parsers(sub)
    add_admin_parsers(sub)
    add_acl_parser(sub)
    add_users_parser(sub)

    sub.add_parser("audit", help="audit broker log dirs with Spark (python -m storage audit --help)",
                   add_help=False)
    return parser


def _audit(argv: list[str]) -> int:
    try:
        from ..spark.audit import main as audit_main
    except ImportError as exc:
        print(f"error: the audit needs the [spark] extra (pip install 'kafka-partition-storage[spark]'): {exc}",
              file=sys.stderr)
        return USAGE
    return audit_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "audit":
        # The fleet audit has its own parser (storage/spark/audit.py); Spark is imported only
        # when it runs.
        return _audit(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command in ("serve", "controller") and args.config is not None:     # --config FILE
            args = apply_config(parser, argv, args)
    except UsageError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        print(f"(python -m storage {argv[0] if argv and not argv[0].startswith('-') else ''} --help for help)"
              .replace("  ", " "), file=sys.stderr)
        return USAGE
    except SystemExit as exc:          # --help, --version
        return int(exc.code or 0)
    engine_log = logging.getLogger("storage")
    level = engine_log.level
    if args.command not in ("serve", "controller", "cluster") and not logging.getLogger().handlers:
        # A tool reports what it did itself (recover: every cut); with no logging configured, the
        # engine's own warnings of the same events would be printed a second time by Python's
        # last-resort handler.  Errors stay; the level is restored when the command ends.
        engine_log.setLevel(logging.ERROR)
    try:
        return _run(args)
    finally:
        engine_log.setLevel(level)


def _run(args) -> int:
    commands = {"dump-log": cmd_dump_log, "verify": cmd_verify, "recover": cmd_recover, "epochs": cmd_epochs,
                "abort-txn": cmd_abort_txn, "serve": cmd_serve, "controller": cmd_controller, "cluster": cmd_cluster,
                "topics": cmd_admin, "groups": cmd_admin, "acls": cmd_acls, "users": cmd_users}
    try:
        if args.command == "demo":
            return run_demo(args.dir, spark=not args.no_spark, master=args.master, wire=not args.no_wire)
        return commands[args.command](args)
    except UsageError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        return USAGE
    except errors.StorageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return PROBLEMS
    except BrokenPipeError:            # `storage dump-log ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return OK
    except OSError as exc:              # unreadable files, a full disk during recover, ...
        where = exc.filename if exc.filename is not None else "I/O"
        print(f"error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return PROBLEMS
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

