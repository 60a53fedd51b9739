"""`storage epochs DIR TOPIC-PARTITION`: the checkpoint next to the lineage in the batches."""
from __future__ import annotations

import os

from ..inspect.discovery import _where, log_dir_offsets, partition_dirs
from ..inspect.lineage import _entries
from ..inspect.progress import _plural, _progress
from ..inspect.scan import _partition_bytes, scan_partition
from ..log.epoch import CHECKPOINT_FILE
from .output import OK, PROBLEMS, UsageError, _print_json


def _find_partition(directory: str, name: str | None) -> tuple[str, str, int, str]:
    parts = partition_dirs(directory)
    if name is None:
        if len(parts) == 1:
            return parts[0]
        raise UsageError(f"{directory} holds {len(parts)} partitions: name one (TOPIC-PARTITION)")
    for part in parts:
        if os.path.basename(part[3]) == name or f"{part[1]}-{part[2]}" == name:
            return part
    known = ", ".join(f"{t}-{p}" for _d, t, p, _x in parts[:10]) or "none"
    raise UsageError(f"no partition {name} in {directory} (found: {known})")


def cmd_epochs(args) -> int:
    log_dir, topic, partition, path = _find_partition(args.dir, args.partition)
    offsets, _source, _w = log_dir_offsets(log_dir)
    with _progress(_partition_bytes(path), "epochs", not args.no_progress) as bar:
        ps = scan_partition(log_dir, topic, partition, path, offsets=offsets, progress=bar, check_indexes=False)
    if args.json:
        _print_json({"topic": topic, "partition": partition, "path": path,
                     "log_start_offset": ps.log_start_offset, "log_end_offset": ps.log_end_offset,
                     "batch_count": ps.batch_count,
                     "checkpoint": None if ps.checkpoint is None else _entries(ps.checkpoint),
                     "checkpoint_error": ps.checkpoint_error, "batches": ps.lineage, "anomalies": ps.anomalies,
                     "agrees": ps.agrees, "disagreement": ps.disagreement,
                     "problems": [p.to_json() for p in ps.problems if p.kind.startswith("epoch")]})
        return PROBLEMS if ps.agrees is False or ps.anomalies or ps.checkpoint_error else OK
    print(f"{ps.name} in {log_dir}: log start offset {ps.log_start_offset}, log end offset {ps.log_end_offset}, "
          f"{_plural(ps.batch_count, 'batch')}")
    rows = []
    from_checkpoint = {e: o for e, o in (ps.checkpoint or [])}
    from_batches = {e["epoch"]: e for e in ps.lineage}
    for epoch in sorted(set(from_checkpoint) | set(from_batches)):
        c = from_checkpoint.get(epoch)
        b = from_batches.get(epoch)
        mark = "" if (c is not None and b is not None and c == b["start_offset"]) else "<-"
        rows.append((str(epoch), "-" if c is None else str(c), "-" if b is None else str(b["start_offset"]),
                     "-" if b is None else str(b["last_offset"]), "-" if b is None else str(b["batch_count"]), mark))
    header = ("EPOCH", "CHECKPOINT START", "BATCHES START", "LAST OFFSET", "BATCHES", "")
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    for row in [header] + rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for a in ps.anomalies:
        print(f"anomaly: at offset {a['offset']} the epoch goes back from {a['previous_epoch']} to {a['epoch']}")
    if ps.checkpoint_error:
        print(f"error: {_where(os.path.join(path, CHECKPOINT_FILE))}: {ps.checkpoint_error}")
        return PROBLEMS
    if ps.agrees is None:
        print("no leader-epoch-checkpoint: nothing to compare")
    elif ps.agrees:
        print("the checkpoint agrees with the batches")
    else:
        print(f"the checkpoint DISAGREES with the batches: {ps.disagreement}")
    return PROBLEMS if ps.agrees is False or ps.anomalies else OK

