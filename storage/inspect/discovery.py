"""Finding partitions and segments in log dirs (ours or Kafka's) and reading their offsets and
metadata, read-only.  The command line (`partition_dirs`) and the Spark data source and audit
(`discover`, `segments`) find partitions with the same rules:

  - a log dir: every `<topic>-<partition>` sub-directory is a partition (Kafka's naming,
    `storage.dir.logdir.parse_partition_dir`; `-delete`, `-future` and `-stray` dirs are skipped);
  - a partition dir, i.e. a directory holding `NNNNNNNNNNNNNNNNNNNN.log` files itself: its
    parent is the log dir, and a name that is not `<topic>-<partition>` gives topic = the name,
    partition = -1;
  - for `discover` also one `.log` segment file, or a glob pattern (`/data/broker-*/kafka-logs`).
A segment is a file named by a 20-digit base offset and `.log`; `.deleted`, `.cleaned` and
`.swap` leftovers end differently and are never read.
"""
from __future__ import annotations

import glob
import os
from typing import Iterator, NamedTuple

from ..core import checkpoint, errors
from ..core.files import INDEX_SUFFIX, LEFTOVER_SUFFIXES, LOG_SUFFIX, SNAPSHOT_SUFFIX, TIME_INDEX_SUFFIX, segment_base  # noqa: E402,F401
from ..core.records import RecordBatch, iter_batches
from ..dir.logdir import CLEAN_SHUTDOWN_FILE, parse_partition_dir
from ..log.epoch import CHECKPOINT_FILE
from ..log.loader import SCAN_WINDOW, first_window, whole_batch_window
from . import UsageError

_LEFTOVER_SUFFIXES = LEFTOVER_SUFFIXES


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


class LogFile:
    """A `.log` file read by pread in windows, never mapped: the file may be a live broker's,
    and its truncation (a follower's, after a leader change) under a mapping would kill this
    process with SIGBUS; read this way the walk ends where the file now ends.  `size` is its
    length when opened; a batch larger than `window` is read whole; a batch's view keeps its
    window alive, nothing more."""

    def __init__(self, path: str, window: int = SCAN_WINDOW):
        self.path = path
        self.window = window
        self.size = os.path.getsize(path)

    def batches(self) -> Iterator[RecordBatch]:
        """The batches, as `iter_batches` gives them (verify off; positions in the file): it
        stops at a partial tail and raises CorruptRecordError on a size or magic failure."""
        with open(self.path, "rb", buffering=0) as f:
            fd, pos = f.fileno(), 0
            window = first_window(fd, self.window)
            while True:
                data = os.pread(fd, window, pos)
                end = 0
                for batch in iter_batches(data, verify=False, source=self.path, start_position=pos):
                    end = batch.position + batch.size_bytes - pos
                    yield batch
                if end:
                    pos += end
                    continue
                if len(data) < window:
                    return              # the end of the file, or a partial batch at it
                window = whole_batch_window(fd, data, pos)      # one batch larger than the window
                if window is None:
                    return              # it runs past the end: a partial batch


def _has_segments(path: str) -> bool:
    try:
        with os.scandir(path) as entries:
            return any(segment_base(e.name, LOG_SUFFIX) is not None and e.is_file() for e in entries)
    except OSError:
        return False


def _name_key(path: str) -> tuple[str, int]:
    key = parse_partition_dir(os.path.basename(path))
    return key if key is not None else (os.path.basename(path), -1)


def _child_partitions(path: str) -> list[tuple[str, int, str]]:
    """(topic, partition, dir) of every `<topic>-<partition>` sub-directory, by name."""
    out = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        found = parse_partition_dir(name)
        if found is not None and os.path.isdir(full):
            out.append((found[0], found[1], full))
    return out


def partition_dirs(path: str) -> list[tuple[str, str, int, str]]:
    """(log dir, topic, partition, partition dir) under `path`, which is a log dir or one
    partition dir (a dir holding segments itself; a name that is not `<topic>-<partition>`
    gives partition -1)."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise UsageError(f"not a directory: {path}")
    children = _child_partitions(path)
    looks_like_partition = _has_segments(path) or os.path.exists(os.path.join(path, CHECKPOINT_FILE))
    if looks_like_partition and not children:
        return [(os.path.dirname(path), *_name_key(path), path)]
    out = [(path, topic, partition, full) for topic, partition, full in children]
    markers = ("storage.mdb", "meta.properties", CLEAN_SHUTDOWN_FILE, checkpoint.RECOVERY_POINT_FILE)
    if not out and not any(os.path.exists(os.path.join(path, m)) for m in markers):
        raise UsageError(f"{path} is neither a log dir (one holding <topic>-<partition> dirs, storage.mdb or "
                         "meta.properties) nor a partition dir (one holding NNNNNNNNNNNNNNNNNNNN.log segments)")
    return out


def read_epoch_checkpoint(partition_dir: str) -> tuple[list[tuple[int, int]] | None, str | None]:
    """(the leader-epoch-checkpoint's (epoch, start offset) pairs, None), (None, why) when it
    cannot be read, (None, None) when there is none: the one reader the tools use."""
    path = os.path.join(partition_dir, CHECKPOINT_FILE)
    if not os.path.exists(path):
        return None, None
    try:
        return [(int(e), int(o)) for e, o in checkpoint.read(path, 2)], None
    except checkpoint.CheckpointError as exc:
        return None, exc.reason
    except ValueError as exc:
        return None, f"non-integer epoch or offset ({exc})"
    except OSError as exc:
        return None, f"cannot read it: {exc.strerror or exc}"


def broker_id(log_dir: str) -> int | None:
    """The broker.id (ZooKeeper mode) or node.id (KRaft) in a Kafka log dir's meta.properties."""
    try:
        with open(os.path.join(log_dir, "meta.properties"), encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key in ("broker.id", "node.id"):
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def log_dir_offsets(log_dir: str) -> tuple[dict, str | None, list[Issue]]:
    """({(topic, partition): {"log_start_offset", "high_watermark", "recovery_point"}}, source,
    warnings) from our `storage.mdb` (read-only, no lock file) or Kafka's checkpoint files."""
    from ..dir.meta import FILE_NAME as META_FILE

    warnings: list[Issue] = []
    mdb = os.path.join(log_dir, META_FILE)
    if os.path.exists(mdb):
        try:
            from ..dir.meta import read_partition_offsets

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



# ---- segments of many log dirs, for the Spark data source and audit ---------------------------

_GLOB_CHARS = set("*?[")


class SegmentRef(NamedTuple):
    """One segment file of one replica of one topic-partition (picklable)."""

    log_dir: str
    topic: str
    partition: int
    base_offset: int
    path: str
    size_bytes: int
    is_last: bool          # the partition's newest segment (its tail may be torn)


class PartitionRef(NamedTuple):
    """One partition dir (one replica) and its segments, oldest first."""

    log_dir: str
    topic: str
    partition: int
    path: str
    segments: tuple


def _segments_of(path: str) -> list[tuple[int, str, int]]:
    found = []
    with os.scandir(path) as entries:
        for entry in entries:
            base = segment_base(entry.name, LOG_SUFFIX)
            if base is not None and entry.is_file():
                found.append((base, entry.path, entry.stat().st_size))
    found.sort()
    return found


def _partition_ref(log_dir: str, path: str, topic: str, partition: int) -> PartitionRef:
    segments = _segments_of(path)
    refs = tuple(SegmentRef(log_dir, topic, partition, base, seg_path, size, i == len(segments) - 1)
                 for i, (base, seg_path, size) in enumerate(segments))
    return PartitionRef(log_dir, topic, partition, path, refs)


def expand(paths) -> list[str]:
    """Absolute paths, globs expanded; a path that does not exist raises FileNotFoundError."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for raw in paths:
        path = os.path.abspath(os.path.expanduser(os.fspath(raw)))
        if not os.path.exists(path) and _GLOB_CHARS & set(path):
            matches = sorted(glob.glob(path))
            if not matches:
                raise FileNotFoundError(f"partitionlog: no path matches {raw!r}")
            out.extend(os.path.abspath(m) for m in matches)
        elif not os.path.exists(path):
            raise FileNotFoundError(f"partitionlog: no such file or directory: {raw!r}")
        else:
            out.append(path)
    return out


def _add_segment_file(partitions: dict, path: str) -> None:
    base = segment_base(os.path.basename(path), LOG_SUFFIX)
    if base is None:
        raise ValueError(f"partitionlog: {path} is not a segment file (NNNNNNNNNNNNNNNNNNNN.log)")
    directory = os.path.dirname(path)
    topic, partition = _name_key(directory)
    ref = PartitionRef(os.path.dirname(directory), topic, partition, directory, ())
    known = partitions.get((ref.log_dir, directory), ref)
    segment = SegmentRef(ref.log_dir, topic, partition, base, path, os.path.getsize(path), False)
    partitions[(ref.log_dir, directory)] = known._replace(segments=tuple(sorted(set(known.segments) | {segment})))


def discover(paths) -> list[PartitionRef]:
    """Every partition dir under `paths` (log dirs, partition dirs, segment files or globs),
    sorted by (log dir, topic, partition).  Partition dirs without segments are included; a
    directory that holds neither gives nothing (a fleet has empty log dirs)."""
    partitions: dict[tuple[str, str], PartitionRef] = {}
    for path in expand(paths):
        if os.path.isfile(path):
            _add_segment_file(partitions, path)
        elif _has_segments(path):
            partitions[(os.path.dirname(path), path)] = _partition_ref(os.path.dirname(path), path, *_name_key(path))
        else:
            for topic, partition, full in _child_partitions(path):
                partitions[(path, full)] = _partition_ref(path, full, topic, partition)
    out = []
    for ref in partitions.values():
        if ref.segments and not any(s.is_last for s in ref.segments):
            # Segment files named one by one: only the newest of a partition may be torn.
            last = max(ref.segments)
            ref = ref._replace(segments=tuple(s._replace(is_last=s is last) for s in ref.segments))
        out.append(ref)
    out.sort(key=lambda r: (r.log_dir, r.topic, r.partition, r.path))
    return out


def segments(paths) -> list[SegmentRef]:
    return [s for ref in discover(paths) for s in ref.segments]
