"""Finding partitions in a log dir (ours or Kafka's) and reading its offsets and metadata, read-only."""
from __future__ import annotations

import mmap
import os
from typing import NamedTuple

from .. import checkpoint, errors
from ..epoch import CHECKPOINT_FILE
from ..logdir import CLEAN_SHUTDOWN_FILE, parse_partition_dir
from ..segment import segment_base
from . import UsageError

LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX = ".log", ".index", ".timeindex", ".snapshot"


_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap")


_where = errors.location


class Issue(NamedTuple):
    """A problem (exit 1) or a warning (reported only), located like a StorageError."""

    kind: str
    message: str
    file: str | None = None
    position: int | None = None
    offset: int | None = None

    def line(self) -> str:
        where = _where(self.file, self.position, self.offset)
        return f"{where}: {self.message}" if where else self.message

    def to_json(self) -> dict:
        return {"kind": self.kind, "file": self.file, "position": self.position, "offset": self.offset,
                "message": self.message}


def _map_file(path: str):
    """The file's bytes, mapped read-only (b"" for an empty file).  Never closed explicitly:
    batch views may still point into it; the mapping goes with the last reference."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _has_segments(path: str) -> bool:
    try:
        return any(segment_base(n, LOG_SUFFIX) is not None for n in os.listdir(path))
    except OSError:
        return False


def partition_dirs(path: str) -> list[tuple[str, str, int, str]]:
    """(log dir, topic, partition, partition dir) under `path`, which is a log dir or one
    partition dir (a dir holding segments itself; a name that is not `<topic>-<partition>`
    gives partition -1)."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise UsageError(f"not a directory: {path}")
    key = parse_partition_dir(os.path.basename(path))
    looks_like_partition = _has_segments(path) or os.path.exists(os.path.join(path, CHECKPOINT_FILE))
    if looks_like_partition and not any(
            parse_partition_dir(n) and os.path.isdir(os.path.join(path, n)) for n in os.listdir(path)):
        topic, partition = key if key else (os.path.basename(path), -1)
        return [(os.path.dirname(path), topic, partition, path)]
    out = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        found = parse_partition_dir(name)
        if found is not None and os.path.isdir(full):
            out.append((path, found[0], found[1], full))
    markers = ("storage.mdb", "meta.properties", CLEAN_SHUTDOWN_FILE, checkpoint.RECOVERY_POINT_FILE)
    if not out and not any(os.path.exists(os.path.join(path, m)) for m in markers):
        raise UsageError(f"{path} is neither a log dir (one holding <topic>-<partition> dirs, storage.mdb or "
                         "meta.properties) nor a partition dir (one holding NNNNNNNNNNNNNNNNNNNN.log segments)")
    return out


def log_dir_offsets(log_dir: str) -> tuple[dict, str | None, list[Issue]]:
    """({(topic, partition): {"log_start_offset", "high_watermark", "recovery_point"}}, source,
    warnings) from our `storage.mdb` (read-only, no lock file) or Kafka's checkpoint files."""
    from ..meta import FILE_NAME as META_FILE

    warnings: list[Issue] = []
    mdb = os.path.join(log_dir, META_FILE)
    if os.path.exists(mdb):
        try:
            from ..meta import read_partition_offsets

            return {key: o._asdict() for key, o in read_partition_offsets(mdb).items()}, "storage.mdb", warnings
        except Exception as exc:   # lmdb raises its own types; a damaged store is a warning here
            warnings.append(Issue("metadata", f"cannot read the metadata store: {exc}", mdb))
            return {}, None, warnings
    join = os.path.join
    files = {"log_start_offset": checkpoint.LOG_START_OFFSET_FILE, "high_watermark": checkpoint.HIGH_WATERMARK_FILE,
             "recovery_point": checkpoint.RECOVERY_POINT_FILE}
    out: dict = {}
    found = False
    for field, name in files.items():
        path = join(log_dir, name)
        if not os.path.exists(path):
            continue
        found = True
        try:
            values = checkpoint.read_offsets(path)
        except checkpoint.OffsetCheckpointRangeError as exc:
            warnings.append(Issue("metadata", f"checkpoint holds an out-of-range value, not used: {exc.reason}", path))
            continue
        except (checkpoint.CheckpointError, OSError) as exc:
            warnings.append(Issue("metadata", f"unreadable checkpoint, ignored as Kafka does: {exc}", path))
            continue
        for key, value in values.items():
            out.setdefault(key, {})[field] = value
    return out, ("kafka checkpoints" if found else None), warnings

