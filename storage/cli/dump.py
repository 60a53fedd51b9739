"""`storage dump-log --files F ...`: Kafka's kafka-dump-log."""
from __future__ import annotations

from ..inspect.dump import _Dump
from .output import OK, PROBLEMS, UsageError


def cmd_dump_log(args) -> int:
    files = [f for item in args.files for f in item.split(",") if f]
    if not files:
        raise UsageError("--files needs at least one file")
    if args.offsets_decoder or args.transaction_log_decoder:
        args.print_data_log = True          # as Kafka's tool: any decoder prints the data
    return PROBLEMS if _Dump(args).run(files) else OK

