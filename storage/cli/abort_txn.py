"""`storage abort-txn DIR --topic T --partition P (--start-offset O | --producer-id X
--producer-epoch E) [--dry-run]`: abort a hanging transaction in a stopped broker's log dir
(Kafka's `kafka-transactions.sh abort`, KIP-664), ours or one a Kafka broker wrote.

The dir must be stopped: the tool takes its `.lock` both ways a broker holds it (our LogDir's
flock, Kafka's FileChannel lock, a POSIX record lock: logdir.locked_for_tool, as `recover` does)
and refuses a live dir, naming the process that holds it.  --dry-run lists the partition's open transactions from its batches and changes
nothing.  Otherwise the dir must have been stopped cleanly (its `.kafka_cleanshutdown`: else the
broker's next start must recover it first), the partition is read as `storage verify` reads it
(any problem is refused, naming where, and nothing is written), then opened with the offsets the
dir records (storage.mdb, or Kafka's checkpoint files, which are left as they are) and
storage.dir.hanging.abort_transaction
writes the ABORT marker; a clean-shutdown marker is taken away while the log is open and put
back, byte for byte, once it is closed (a crash in between leaves an unclean dir, which the next
open recovers).
"""
from __future__ import annotations

import os

from ..core import errors
from ..core import io as _io
from ..dir import hanging
from ..dir.logdir import CLEAN_SHUTDOWN_FILE, locked_for_tool
from ..inspect.discovery import LOG_SUFFIX, LogFile, log_dir_offsets, segment_base
from ..inspect.scan import scan_partition
from .output import OK, UsageError, _print_json


def add_parser(sub, common) -> None:
    p = sub.add_parser("abort-txn", help="abort a hanging transaction in a stopped broker's log dir (KIP-664)",
                       description="Write an ABORT marker for an open transaction of one partition, as Kafka's "
                                   "kafka-transactions.sh abort does through its coordinator: the last stable "
                                   "offset moves, read_committed consumers and the cleaner go on.  For a stopped "
                                   "broker's dir (ours or Kafka's); a live dir is refused.")
    p.add_argument("dir", metavar="DIR", help="the broker's log dir")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", required=True, type=int)
    p.add_argument("--start-offset", type=int, help="the first offset of the open transaction to abort")
    p.add_argument("--producer-id", type=int, help="the producer id of the open transaction (with --producer-epoch)")
    p.add_argument("--producer-epoch", type=int, help="that producer's current epoch")
    p.add_argument("--coordinator-epoch", type=int,
                   help="the marker's coordinator epoch (default: the last one the partition saw, at least 0)")
    p.add_argument("--dry-run", action="store_true", help="list the open transactions; change nothing")
    common(p)


def cmd_abort_txn(args) -> int:
    path = os.path.join(args.dir, f"{args.topic}-{args.partition}")
    if not os.path.isdir(path):
        raise UsageError(f"{path}: no such partition dir")
    by_producer = args.producer_id is not None or args.producer_epoch is not None
    if not args.dry_run:
        if (args.start_offset is not None) == by_producer:
            raise UsageError("name the transaction: --start-offset O, or --producer-id X --producer-epoch E")
        if by_producer and (args.producer_id is None or args.producer_epoch is None):
            raise UsageError("--producer-id and --producer-epoch go together")
    with locked_for_tool(args.dir, "abort-txn"):
        if args.dry_run:
            found, aborted = hanging.scan_open_transactions(_batches(path)), None
        else:
            found, aborted = _abort(args, path)
    return _report(args, path, found, aborted)


def _batches(path: str):
    for name in sorted(n for n in os.listdir(path) if segment_base(n, LOG_SUFFIX) is not None):
        yield from LogFile(os.path.join(path, name)).batches()


def _abort(args, path: str):
    """Open the partition, abort, close it; ([open transactions before], the aborted one and
    its marker's AppendInfo)."""
    from ..core.config import LogConfig
    from ..log.partition import PartitionLog

    offsets, _source, _warnings = log_dir_offsets(args.dir)
    meta = offsets.get((args.topic, args.partition), {})
    seam = _io.current()
    marker = os.path.join(args.dir, CLEAN_SHUTDOWN_FILE)
    if not os.path.exists(marker):
        raise errors.StorageError(f"no {CLEAN_SHUTDOWN_FILE}: the broker did not stop cleanly; its next start "
                                  "(or `storage recover`) must recover the dir before anything is appended",
                                  file=args.dir)
    problems = scan_partition(args.dir, args.topic, args.partition, path,
                              offsets={(args.topic, args.partition): meta}, check_indexes=False).problems
    if problems:
        raise errors.CorruptRecordError(f"damaged, nothing written ({len(problems)} problem(s), "
                                        f"`storage verify` lists them): {problems[0].line()}", file=path)
    marker_bytes = open(marker, "rb").read()
    seam.unlink(marker)
    seam.fsync_dir(args.dir)
    start = meta.get("log_start_offset", -1)
    log = PartitionLog.open(path, LogConfig(), recovery_point=max(meta.get("recovery_point", 0), 0),
                            log_start_offset=start if start >= 0 else None,
                            high_watermark=meta.get("high_watermark"), clean_shutdown=True)
    try:
        found = hanging.open_transactions(log)
        if args.start_offset is not None:
            txn = hanging.find_open_transaction(log, args.start_offset)
        else:
            txn = next((t for t in found if t.producer_id == args.producer_id), None)
        pid, epoch = (txn.producer_id, txn.producer_epoch) if txn else (args.producer_id, args.producer_epoch)
        info = hanging.abort_transaction(log, pid, epoch, coordinator_epoch=args.coordinator_epoch)
        aborted = {**txn.as_dict(), "marker_offset": info.first_offset, "leader_epoch": log.latest_epoch}
    finally:
        log.close()                         # a failed close leaves the dir unclean: no marker back
        seam.write_file_atomic(marker, marker_bytes)
    return found, aborted


def _report(args, path: str, found: list, aborted: dict | None) -> int:
    name = f"{args.topic}-{args.partition}"
    if args.json:
        _print_json({"path": os.path.abspath(path), "topic": args.topic, "partition": args.partition,
                     "open_transactions": [t.as_dict() for t in found], "aborted": aborted})
        return OK
    if aborted is None and not found:
        print(f"{name}: no open transaction")
    for t in found if aborted is None else ():
        print(f"{name}: open transaction of producer {t.producer_id} (epoch {t.producer_epoch}, coordinator epoch "
              f"{t.coordinator_epoch}) from offset {t.first_offset}, last sequence {t.last_sequence}")
    if aborted is not None:
        print(f"{name}: aborted producer {aborted['producer_id']} (epoch {aborted['producer_epoch']}), open from offset "
              f"{aborted['first_offset']}: ABORT marker at offset {aborted['marker_offset']} "
              f"(leader epoch {aborted['leader_epoch']})")
    return OK
