"""Kafka's checkpoint text files (docs/kafka-formats.md 3.1-3.2, 5.1).

    0                 <- version, always 0
    3                 <- number of entry lines
    <entry line>      <- fields separated by white space, a fixed number per line

`leader-epoch-checkpoint` lines are `<epoch> <start offset>`; the log-dir files
(`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint`) hold `<topic> <partition> <offset>`.

Invariants:
  - reading is strict: a wrong version, a missing or wrong count, a line with the wrong number
    of fields or a non-integer field raises `CheckpointError` naming the file and the line,
    never returns a partial list (an empty file is an empty list, as in Kafka);
  - writing is atomic through the I/O seam: tmp -> fsync -> rename -> fsync(dir), so a reader
    sees the old or the new content, never a mix (style.md "What not to copy": tinydb).
"""
from __future__ import annotations

from . import errors, guards
from . import io as _io
from .files import INT32_MAX, INT64_MAX

VERSION = 0


class CheckpointError(errors.CorruptRecordError):
    """A checkpoint file is malformed."""


def parse(text: str, fields: int, *, path=None) -> list[tuple[str, ...]]:
    """Entry lines of a checkpoint, each split into `fields` strings."""
    if text == "":
        return []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    def fail(line_number: int, reason: str):
        raise CheckpointError(f"line {line_number}: {reason}", file=path)

    try:
        version = int(lines[0].strip())
    except ValueError:
        fail(1, f"unrecognised version {lines[0]!r}")
    if version != VERSION:
        fail(1, f"unrecognised version {version}")
    if len(lines) < 2:
        return []
    try:
        count = int(lines[1].strip())
    except ValueError:
        fail(2, f"malformed entry count {lines[1]!r}")
    if count < 0:
        fail(2, f"negative entry count {count}")
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if len(parts) != fields:
            fail(number, f"malformed line {line!r}: expected {fields} fields")
        entries.append(tuple(parts))
    if len(entries) != count:
        fail(2, f"expected {count} entries but found {len(entries)}")
    return entries


def format_lines(entries) -> bytes:
    body = "".join(" ".join(str(f) for f in entry) + "\n" for entry in entries)
    return f"{VERSION}\n{len(entries)}\n{body}".encode()


def read(path, fields: int) -> list[tuple[str, ...]]:
    entries = read_if_present(path, fields)
    return [] if entries is None else entries


def read_if_present(path, fields: int) -> list[tuple[str, ...]] | None:
    """The entries, or None when there is no file (one open, no separate stat)."""
    seam = _io.current()
    try:
        data = seam.read_file(path)
    except FileNotFoundError:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"not UTF-8 text ({exc})", file=path) from exc
    return parse(text, fields, path=path)


def write(path, entries, *, sync: bool = True) -> None:
    seam = _io.current()
    if guards.on("M22"):
        seam.write_file_atomic(path, format_lines(entries), sync=sync)
        return
    # The mutation: rewrite in place, no fsync (what KAFKA-16541's fix forbids).
    fd = seam.open(path, _io.O_READ | _io.O_WRITE | _io.O_CREATE | _io.O_TRUNCATE)
    try:
        seam.pwrite(fd, format_lines(entries), 0)
    finally:
        seam.close(fd)


# ---- the log-dir offset checkpoints Kafka keeps (topic partition offset) ------------------

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"       # each compacted log's first dirty offset


def read_offsets(path) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset}; Kafka treats an unreadable file as empty (5.1), and so
    does this function's caller -- here a malformed file raises CheckpointError."""
    out = {}
    for number, (topic, partition, offset) in enumerate(read(path, 3), start=3):
        try:
            key, value = (topic, int(partition)), int(offset)
        except ValueError as exc:
            raise CheckpointError(f"line {number}: non-integer partition or offset in {topic} {partition} {offset}",
                                  file=path) from exc
        if not 0 <= key[1] <= INT32_MAX or not 0 <= value <= INT64_MAX:
            raise OffsetCheckpointRangeError(
                f"line {number}: {topic} {partition} {offset} is out of range (partitions are int32 and "
                f"offsets int64, both >= 0); nothing was loaded from this file", file=path)
        out[key] = value
    return out


class OffsetCheckpointRangeError(CheckpointError):
    """A log-dir checkpoint parses but names an impossible partition or offset: an error, not a
    file Kafka would treat as empty -- trusting or ignoring it could delete durable data."""


def read_offsets_lenient(path) -> dict[tuple[str, int], int]:
    """Kafka's rule for an unreadable log-dir checkpoint: treated as empty (docs/kafka-formats.md
    5.1).  A file that parses but holds out-of-range values is not unreadable: it raises."""
    try:
        return read_offsets(path)
    except OffsetCheckpointRangeError:
        raise
    except (CheckpointError, OSError):
        return {}
