"""`storage dump-log --files F ...`: Kafka's kafka-dump-log."""
from __future__ import annotations

from ..inspect.dump import _Dump
from .output import OK, PROBLEMS, UsageError


def cmd_dump_log(args) -> int:
    files = [f for item in args.files for f in item.split(",") if f]
    if not files:
        raise UsageError("--files needs at least one file")
    return PROBLEMS if _Dump(args).run(files) else OK

