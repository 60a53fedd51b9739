"""Every file-name rule of a partition directory, in one place (Kafka's LogFileUtils): a segment's
files are its base offset as 20 zero-padded decimal digits and a suffix; the producer-state
snapshots are named the same way by their offset; a file on its way out, or half-way through a
compaction, carries one more suffix.  Also the widths of Kafka's integer fields the names and
indexes are bound by (an offset index entry holds an offset relative to its segment's base in 32
bits, so a segment spans at most INT32_MAX offsets)."""
from __future__ import annotations

import os

INT32_MAX = 2**31 - 1          # Java's Integer.MAX_VALUE
INT64_MAX = 2**63 - 1          # Java's Long.MAX_VALUE

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"          # a producer-state snapshot
DELETED_SUFFIX = ".deleted"            # a segment file waiting for file.delete.delay.ms
CLEANED_SUFFIX = ".cleaned"            # the cleaner's output before the swap
SWAP_SUFFIX = ".swap"                  # the cleaner's output, complete, before it takes the final name

SEGMENT_FILE_KINDS = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)    # Kafka's order
LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)

_NAME_DIGITS = 20


def segment_name(offset: int) -> str:
    """Kafka's file prefix: the offset as 20 zero-padded decimal digits."""
    return f"{offset:0{_NAME_DIGITS}d}"


def segment_file(directory: str, offset: int, suffix: str) -> str:
    """The path of the file of `suffix` named by `offset` in `directory`."""
    return os.path.join(directory, segment_name(offset) + suffix)


def segment_base(name: str, suffix: str | None = None) -> int | None:
    """The offset a file name starts with (20 decimal digits, then a suffix -- `suffix` exactly,
    when given), or None for any other name, including 20 digits beyond int64."""
    stem, dot, rest = name.partition(".")
    if not dot or len(stem) != _NAME_DIGITS or not stem.isdigit():
        return None
    if suffix is not None and "." + rest != suffix:
        return None
    base = int(stem)
    return base if base <= INT64_MAX else None
