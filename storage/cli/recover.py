"""`storage recover DIR`: offline unclean-shutdown recovery, with a report of what was cut."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from bisect import bisect_left

from ..core import errors
from ..core.files import segment_file
from ..dir.logdir import CLEAN_SHUTDOWN_FILE, locked_for_tool
from ..inspect.discovery import (
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    _where,
    log_dir_offsets,
    partition_dirs,
    read_epoch_checkpoint,
    segment_base,
)
from ..inspect.lineage import _entries, _lineage_text
from ..inspect.progress import _plural, _progress
from ..inspect.scan import _partition_bytes, scan_partition
from .output import OK, PROBLEMS, _print_json


def _segment_sizes(path: str) -> dict[int, int]:
    return {b: os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
            if (b := segment_base(n, LOG_SUFFIX)) is not None}


def _segment_changes(before, sizes_before: dict, sizes_after: dict, report: dict, path: str):
    """(segment entries, bytes truncated, segments deleted): what the recovery did to each
    segment, from the sizes before and after and the loader's report."""
    segments, truncated_total, deleted = [], 0, 0
    for seg in before.segments:
        base = seg.base_offset
        entry = {"base_offset": base, "file": seg.path, "bytes_before": sizes_before[base],
                 "bytes_after": sizes_after.get(base), "truncated_bytes": 0, "status": "ok", "reason": None,
                 "position": None, "first_offset_removed": None, "batches_removed": 0}
        after = sizes_after.get(base)
        if after is None:
            entry.update(status="deleted", truncated_bytes=sizes_before[base],
                         reason="after the first invalid batch: nothing after it is trusted",
                         position=0, batches_removed=seg.batch_count, first_offset_removed=seg.first_offset)
            deleted += 1
        elif after < sizes_before[base]:
            cut = bisect_left(seg.positions, after)
            entry.update(status="truncated", truncated_bytes=sizes_before[base] - after, position=after,
                         reason=report.get(base, (0, "cut"))[1] or "invalid data",
                         batches_removed=seg.batch_count - cut,
                         first_offset_removed=seg.base_offsets[cut] if cut < seg.batch_count else None)
        elif base in report and report[base][1].startswith("rebuilt"):
            entry.update(status="rebuilt", reason=report[base][1])
        truncated_total += entry["truncated_bytes"]
        segments.append(entry)
    for base in sorted(set(sizes_after) - set(sizes_before)):
        segments.append({"base_offset": base, "file": segment_file(path, base, LOG_SUFFIX),
                         "bytes_before": None, "bytes_after": sizes_after[base], "truncated_bytes": 0,
                         "status": "created", "reason": "an empty partition gets its first segment",
                         "position": None, "first_offset_removed": None, "batches_removed": 0})
    return segments, truncated_total, deleted


def _recover_partition(log_dir: str, topic: str, partition: int, path: str, meta: dict, progress,
                       force: bool = False) -> dict:
    """Kafka's unclean recovery of one partition (storage/log/loader.py decides per segment): from
    the recovery point the metadata records, refusing damage below it; with `force`, from
    offset 0, cutting at the first invalid batch wherever it is."""
    from ..core.config import LogConfig
    from ..log.partition import PartitionLog

    before = scan_partition(log_dir, topic, partition, path, offsets={(topic, partition): meta}, check_indexes=False)
    sizes_before = {s.base_offset: s.size for s in before.segments}
    checkpoint_before = before.checkpoint
    snapshots_before = sorted(n for n in os.listdir(path) if segment_base(n, SNAPSHOT_SUFFIX) is not None)
    start = meta.get("log_start_offset", -1)
    recovery_point = 0 if force else max(meta.get("recovery_point", 0), 0)
    # Offline, the whole partition is read anyway: "scan" makes the loader read every segment it
    # would trust in full, so a damaged batch wholly below the recovery point is refused too.
    try:
        log = PartitionLog.open(path, LogConfig(), recovery_point=recovery_point,
                                log_start_offset=start if start >= 0 else None, clean_shutdown=False,
                                recover_mode="force" if force else "scan")
    except errors.CorruptSegmentError as exc:
        progress.update(sum(sizes_before.values()))
        return {"topic": topic, "partition": partition, "path": path, "refused": str(exc),
                "log_end_offset_before": before.log_end_offset, "log_end_offset": before.log_end_offset,
                "log_start_offset": before.log_start_offset, "truncated_bytes": 0, "segments_deleted": 0,
                "changed": False, "epochs_before": None, "epochs_after": None, "checkpoint_error_before": None,
                "notes": [], "segments": []}
    try:
        report = {base: (truncated, reason) for base, truncated, reason in log.recovery_report if base >= 0}
        notes = [reason for base, _t, reason in log.recovery_report if base < 0]
        leo, log_start = log.log_end_offset, log.log_start_offset
    finally:
        log.close()
    progress.update(sum(sizes_before.values()))
    segments, truncated_total, deleted = _segment_changes(before, sizes_before, _segment_sizes(path), report, path)
    for name in snapshots_before:
        base = segment_base(name, SNAPSHOT_SUFFIX)
        if base > leo and not os.path.exists(os.path.join(path, name)):
            notes.append(f"{name}: producer-state snapshot beyond the new log end offset {leo}, deleted "
                         "(as Kafka's load deletes it)")
    after_epochs, _ = read_epoch_checkpoint(path)
    return {"topic": topic, "partition": partition, "path": path,
            "log_end_offset_before": before.log_end_offset, "log_end_offset": leo, "log_start_offset": log_start,
            "truncated_bytes": truncated_total, "segments_deleted": deleted,
            "changed": truncated_total > 0,
            "epochs_before": None if checkpoint_before is None else _entries(checkpoint_before),
            "epochs_after": None if after_epochs is None else _entries(after_epochs),
            "checkpoint_error_before": before.checkpoint_error, "refused": None,
            "notes": notes, "segments": segments}


def _update_metadata(log_dir: str, results: list[dict], old: dict) -> bool:
    """Our log dirs: the recovered logs are flushed, so recovery point := log end offset, and the
    high watermark is clamped to it.  Kafka's checkpoint files are left to Kafka's loader."""
    from ..dir.meta import FILE_NAME as META_FILE
    from ..dir.meta import MetaStore, PartitionOffsets

    if not os.path.exists(os.path.join(log_dir, META_FILE)):
        return False
    store = MetaStore(log_dir)
    try:
        store.put_partitions({
            (r["topic"], r["partition"]): PartitionOffsets(
                r["log_end_offset"], r["log_start_offset"],
                min(old.get((r["topic"], r["partition"]), {}).get("high_watermark", r["log_end_offset"]),
                    r["log_end_offset"]))
            for r in results if r["partition"] >= 0})
    finally:
        store.close()
    return True


def cmd_recover(args) -> int:
    target = os.path.abspath(args.dir)
    parts = partition_dirs(target)
    with contextlib.ExitStack() as locks:
        if not args.dry_run:            # a dry run writes only its scratch copies
            for log_dir in dict.fromkeys(log_dir for log_dir, *_ in parts):
                locks.enter_context(locked_for_tool(log_dir, "recover"))
        return _recover(args, target, parts)


def _recover(args, target: str, parts: list) -> int:
    scratch = None
    if args.dry_run:
        scratch = tempfile.mkdtemp(prefix="storage-recover-")
        copied = []
        for log_dir, topic, partition, path in parts:
            destination = os.path.join(scratch, os.path.basename(path))
            shutil.copytree(path, destination)
            copied.append((log_dir, topic, partition, destination))
        work = copied
    else:
        work = parts
    try:
        metadata = {}
        for log_dir, *_ in parts:
            if log_dir not in metadata:
                metadata[log_dir] = log_dir_offsets(log_dir)[0]
        total = sum(_partition_bytes(p) for *_, p in work)
        results = []
        with _progress(total, "recover", not args.no_progress) as bar:
            for (_, topic, partition, path), (original_dir, _t, _p, original_path) in zip(work, parts):
                bar.set_description_str(f"{topic}-{partition}")
                meta = metadata[original_dir].get((topic, partition), {})
                result = _recover_partition(original_dir, topic, partition, path, meta, bar, force=args.force)
                if args.dry_run:        # report the real paths, not the scratch copy's
                    result["path"] = original_path
                    for s in result["segments"]:
                        s["file"] = os.path.join(original_path, os.path.basename(s["file"]))
                results.append(result)
        metadata_updated = False
        if not args.dry_run:
            for log_dir in metadata:
                metadata_updated |= _update_metadata(
                    log_dir, [r for r, p in zip(results, parts) if p[0] == log_dir and not r["refused"]],
                    metadata[log_dir])
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    changed = [r for r in results if r["changed"]]
    refused = [r for r in results if r["refused"]]
    truncated = sum(r["truncated_bytes"] for r in results)
    marker = any(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in metadata)
    if args.json:
        _print_json({"path": target, "dry_run": args.dry_run, "changed": bool(changed), "truncated_bytes": truncated,
                     "segments_deleted": sum(r["segments_deleted"] for r in results),
                     "metadata_updated": metadata_updated, "clean_shutdown_marker": marker,
                     "refused": len(refused), "partitions": results})
        return PROBLEMS if changed or refused else OK
    _print_report(results, args, changed, refused, truncated, metadata_updated)
    return PROBLEMS if changed or refused else OK


def _print_report(results: list[dict], args, changed: list, refused: list, truncated: int,
                  metadata_updated: bool) -> None:
    """The text report: per partition what was cut and why, then one summary line."""
    verb = "would be" if args.dry_run else "were"
    for r in results:
        name = f"{r['topic']}-{r['partition']}" if r["partition"] >= 0 else r["topic"]
        if r["refused"]:
            print(f"{name}: REFUSED, nothing changed: {r['refused']}")
            continue
        leo = f"log end offset {r['log_end_offset_before']}" + (
            f" -> {r['log_end_offset']}" if r["log_end_offset"] != r["log_end_offset_before"] else "")
        print(f"{name}: {'nothing to cut' if not r['changed'] else 'CUT'}; {leo}")
        for s in r["segments"]:
            name = os.path.basename(s["file"])
            if s["status"] == "truncated":
                offsets = f", offsets from {s['first_offset_removed']} ({s['batches_removed']} batches)" \
                    if s["first_offset_removed"] is not None else ""
                print(f"  {_where(s['file'], s['position'], s['first_offset_removed'])}: {s['truncated_bytes']} bytes "
                      f"{verb} truncated{offsets}: {s['reason']}")
            elif s["status"] == "deleted":
                print(f"  {s['file']}: {'would be' if args.dry_run else 'was'} deleted ({s['bytes_before']} bytes, "
                      f"{s['batches_removed']} batches), {s['reason']}")
            elif s["status"] in ("rebuilt", "created") and not args.quiet:
                print(f"  {s['file']}: {s['reason']}")
        if r["epochs_before"] != r["epochs_after"] and r["epochs_after"] is not None:
            old = "none" if r["epochs_before"] is None else _lineage_text(
                [(e["epoch"], e["start_offset"]) for e in r["epochs_before"]])
            new = _lineage_text([(e["epoch"], e["start_offset"]) for e in r["epochs_after"]])
            print(f"  leader-epoch-checkpoint: {old} -> {new}")
        for note in r["notes"]:
            print(f"  {note}")
    what = "dry run (nothing written): " if args.dry_run else ""
    print(f"{what}recovered {_plural(len(results), 'partition')}: {len(changed)} cut, {truncated} bytes truncated, "
          f"{_plural(sum(r['segments_deleted'] for r in results), 'segment')} deleted"
          + ("; metadata store updated" if metadata_updated else "")
          + (f"; {_plural(len(refused), 'partition')} refused (damage below the recovery point: "
             f"`recover --force` cuts it)" if refused else ""))
