"""`python -m storage` (and the `storage` console script).

`demo`: a short walkthrough of a log dir -- append as leader under two epochs, read back, a
crash that tears the last write, and the unclean reopen that recovers; `audit`: the fleet
audit on Spark (storage/spark).  Later issues grow the CLI and the cluster demo.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from . import LogConfig, LogDir, Record, build_batch, iter_batches


def _say(text: str = "") -> None:
    print(text, flush=True)


def _files(path: str) -> str:
    return ", ".join(f"{name} ({os.path.getsize(os.path.join(path, name))} B)"
                     for name in sorted(os.listdir(path)))


def _crash(logdir: LogDir) -> None:
    """What a killed process leaves: nothing sealed, trimmed or checkpointed, no marker."""
    for log in logdir.logs().values():
        for segment in log.segments:
            segment.close()
    logdir.meta.close()


def demo(directory: str | None) -> int:
    owned = directory is None
    root = tempfile.mkdtemp(prefix="storage-demo-") if owned else directory
    path = os.path.join(root, "broker-1")
    if os.path.exists(path):
        shutil.rmtree(path)
    config = LogConfig(segment_bytes=4096, index_interval_bytes=1024, fsync=True)
    try:
        _say(f"1. A log dir at {path}; partition orders-0 with segments of {config.segment_bytes} bytes.")
        logdir = LogDir.open(path, config)
        log = logdir.partition("orders", 0)
        t0 = 1_700_000_000_000
        for i in range(40):
            epoch = 0 if i < 25 else 1
            if i in (0, 25):
                log.assign_epoch_start_offset(epoch)   # what a new leader does first
            records = [Record(key=b"customer-%d" % (i % 7), value=b'{"order": %d, "amount": %d}' % (i, 10 * i),
                              headers=[("source", b"demo")], timestamp=t0 + 1000 * i)]
            log.append_as_leader(records * 5, leader_epoch=epoch, compression="zstd" if i % 4 == 0 else "none")
        _say(f"   appended 40 batches as leader (epoch 0, then epoch 1 from batch 25): log end offset "
             f"{log.log_end_offset}, {len(log.segments)} segments")
        _say(f"   leader-epoch-checkpoint: {[tuple(e) for e in log.epoch_cache.entries]}")
        _say(f"   files: {_files(log.path)}")

        _say("2. Read back from offset 42 (whole batches, zero-copy):")
        for batch in iter_batches(log.read(42, 700)):
            first = batch.records()[0]
            _say(f"   batch {batch.base_offset}..{batch.last_offset} epoch {batch.partition_leader_epoch} "
                 f"{batch.compression:>4} crc 0x{batch.crc:08x} -> first record key={first.key!r} "
                 f"value={first.value!r}")
        found = log.offset_for_timestamp(t0 + 30_500)
        _say(f"   first record at or after t0+30.5s: offset {found.offset} (epoch {found.leader_epoch})")
        _say(f"   OffsetForLeaderEpoch(0) on this log: {log.end_offset_for_epoch(0)} (epoch, end offset)")

        logdir.flush()
        durable = log.recovery_point
        _say(f"3. flush(): everything below offset {durable} is durable; the recovery point is checkpointed.")
        log.append_as_leader([b"not flushed"], leader_epoch=1)
        torn = build_batch([b"torn write " * 20], base_offset=log.log_end_offset, partition_leader_epoch=1)
        active = log.active_segment.log_path
        _say(f"   one more batch is appended, then the process dies while writing the next one: "
             f"{len(torn) // 2} of its {len(torn)} bytes reach {os.path.basename(active)}.")
        with open(active, "ab") as f:
            f.write(torn[: len(torn) // 2])
        _crash(logdir)

        _say("4. Reopen: no clean-shutdown marker, so recovery scans from the recovery point,")
        _say("   checks sizes and CRC-32C, rebuilds the indexes, cuts the torn tail, repairs the epochs.")
        logdir = LogDir.open(path, config)
        log = logdir.partition("orders", 0)
        for base, truncated, reason in logdir.recovery_report.get(("orders", 0), []):
            _say(f"   segment {base:020d}: truncated {truncated} bytes ({reason})")
        last = list(iter_batches(log.read(log.log_end_offset - 1, 1 << 20)))[-1]
        _say(f"   log end offset {log.log_end_offset}; last batch {last.base_offset}..{last.last_offset} "
             f"value={last.records()[-1].value!r}; epochs {[tuple(e) for e in log.epoch_cache.entries]}")
        logdir.close()
        reopened = LogDir.open(path, config)
        _say(f"5. Closed cleanly (marker written); reopening skips recovery: had_clean_shutdown="
             f"{reopened.had_clean_shutdown}, log end offset {reopened.partition('orders', 0).log_end_offset}.")
        reopened.close()
        return 0
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "audit":
        # The fleet audit has its own argument parser (storage/spark/audit.py); Spark is only
        # imported when it runs.
        from .spark.audit import main as audit_main

        return audit_main(argv[1:])
    parser = argparse.ArgumentParser(prog="storage", description="Kafka-compatible partition-log storage")
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="walk through append, read, crash and recovery")
    p_demo.add_argument("--dir", help="keep the demo's files under this directory (default: a temporary one)")
    sub.add_parser("audit", help="audit broker log dirs with Spark (python -m storage audit --help)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.dir)
    return 2


if __name__ == "__main__":
    sys.exit(main())
