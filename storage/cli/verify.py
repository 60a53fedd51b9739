"""`storage verify DIR`: the read-only check of a log dir."""
from __future__ import annotations

import os

from ..inspect.lineage import _lineage_text
from ..inspect.progress import _plural
from ..inspect.scan import scan_log_dir
from .output import OK, PROBLEMS, _print_json


def cmd_verify(args) -> int:
    scans, dir_warnings = scan_log_dir(args.dir, progress=not args.no_progress)
    problems = [p for s in scans for p in s.problems]
    warning_count = len(dir_warnings) + sum(len(s.warnings) for s in scans)
    summary = {"partitions": len(scans), "segments": sum(len(s.segments) for s in scans),
               "batches": sum(s.batch_count for s in scans),
               "bytes": sum(seg.size for s in scans for seg in s.segments),
               "problems": len(problems), "warnings": warning_count}
    if args.json:
        _print_json({"path": os.path.abspath(args.dir), "ok": not problems, "summary": summary,
                     "warnings": [w.to_json() for w in dir_warnings],
                     "partitions": [s.to_json() for s in scans]})
        return PROBLEMS if problems else OK
    for w in dir_warnings:
        print(f"warning: {w.line()}")
    for s in scans:
        if args.quiet and not s.problems:
            continue
        epochs = _lineage_text(s.lineage_pairs)
        agreement = {True: "checkpoint agrees", False: "checkpoint DISAGREES", None: "no checkpoint"}[s.agrees]
        span = f"offsets {s.log_start_offset}..{s.log_end_offset - 1}" if s.log_end_offset > s.log_start_offset \
            else f"empty at offset {s.log_end_offset}"
        status = "ok" if not s.problems else _plural(len(s.problems), "problem")
        print(f"{s.name}: {status}; {_plural(len(s.segments), 'segment')}, {_plural(s.batch_count, 'batch')}, "
              f"{span}, epochs {epochs} ({agreement})")
        for p in s.problems:
            print(f"  problem: {p.line()}")
        if not args.quiet:
            for w in s.warnings:
                print(f"  warning: {w.line()}")
    mb = summary["bytes"] / 1e6
    print(f"verified {_plural(summary['partitions'], 'partition')}, {_plural(summary['segments'], 'segment')}, "
          f"{_plural(summary['batches'], 'batch')} ({mb:.1f} MB): {_plural(len(problems), 'problem')}, "
          f"{_plural(warning_count, 'warning')}")
    return PROBLEMS if problems else OK

