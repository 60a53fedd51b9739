"""Compacted replicas compared by what they mean, not byte for byte.

Two replicas of a compacted topic clean at their own times: one may hold a batch rewritten
without its superseded records, or no batch at all where the other still has the originals.
Comparing batches would call that divergence.  What must agree instead, over the offsets both
replicas cover:
  - a record both hold at one offset is the same record (key and value);
  - every key's latest value is the same in both (a tombstone and no record are the same:
    the cleaner removes tombstones after delete_retention_ms), unless a replica holds a record
    of that key past the end of the other: a follower that lags holds a prefix of the log, and
    the replica that is ahead may have cleaned away, below the follower's end, every record of
    a key that a later record beyond it supersedes (Kafka's cleaner cleans up to the last
    stable offset, not up to the slowest follower's end); the follower gets that record when
    it catches up.  Records of transactional and control batches take part in the first rule
    only: a cleaner removes aborted records and spent markers on its own schedule.
The first divergent offset is the smallest offset of a record that breaks either rule.
A partition is compacted when its log dir's `cleaner-offset-checkpoint` lists it (Kafka's
cleaner and ours write it for every log they clean).
"""
from __future__ import annotations

import os

from ..core import checkpoint, errors
from ..dir.logdir import parse_partition_dir
from .discovery import LOG_SUFFIX, LogFile, segment_base


def is_compacted(log_dir: str, topic: str, partition: int) -> bool:
    try:
        listed = checkpoint.read_offsets_lenient(os.path.join(log_dir, checkpoint.CLEANER_OFFSET_FILE))
    except (OSError, errors.StorageError):
        return False
    return (topic, partition) in listed


def partition_is_compacted(path: str) -> bool:
    """is_compacted for a partition dir `<log dir>/<topic>-<partition>`."""
    key = parse_partition_dir(os.path.basename(os.path.normpath(path)))
    return key is not None and is_compacted(os.path.dirname(os.path.normpath(path)), *key)


def _records(path: str) -> dict[int, tuple[bytes | None, bytes | None, bool, bool]]:
    """offset -> (key, value, plain, control) of every readable record of a partition dir; plain
    is False for records of transactional or control batches."""
    out = {}
    logs = sorted(n for n in os.listdir(path) if segment_base(n, LOG_SUFFIX) is not None)
    for name in logs:
        try:
            for batch in LogFile(os.path.join(path, name)).batches():
                if batch.is_valid():
                    plain = not batch.is_transactional and not batch.is_control
                    for r in batch.records():
                        out[r.offset] = (bytes(r.key) if r.key is not None else None,
                                         bytes(r.value) if r.value is not None else None, plain,
                                         batch.is_control)
        except errors.StorageError:
            pass                     # the structural scan reports it; compare what was readable
    return out


def record_conflict(replicas: list[tuple[str, str]]) -> dict | None:
    """replicas: (log dir, partition dir) pairs.  None, or {"offset", "batch_count", "batches"}
    in first_conflict's shape (one entry per replica holding a record at that offset; here
    "last_offset" is the record's offset and "crc" None)."""
    held = {log_dir: _records(path) for log_dir, path in replicas}
    ranges = {d: (min(r), max(r) + 1) for d, r in held.items() if r}
    bad: set[int] = set()
    dirs = sorted(ranges)
    for i, a in enumerate(dirs):
        for b in dirs[i + 1:]:
            low, high = max(ranges[a][0], ranges[b][0]), min(ranges[a][1], ranges[b][1])
            if low >= high:
                continue
            ra, rb = held[a], held[b]
            bad.update(o for o in ra if low <= o < high and o in rb and ra[o] != rb[o])
            latest_a, latest_b = _latest(ra, low, high), _latest(rb, low, high)
            beyond = _keys_from(ra, high) | _keys_from(rb, high)     # superseded past the overlap
            for key in (set(latest_a) | set(latest_b)) - beyond:
                (oa, va), (ob, vb) = latest_a.get(key, (None, None)), latest_b.get(key, (None, None))
                if va != vb:
                    bad.add(min(o for o in (oa, ob) if o is not None))
    if not bad:
        return None
    offset = min(bad)
    return {"offset": offset, "batch_count": len(bad),
            "batches": [{"log_dir": d, "last_offset": offset, "crc": None, "partition_leader_epoch": None,
                         "crc_valid": True} for d in dirs if offset in held[d]]}


def _latest(records: dict, low: int, high: int) -> dict:
    """key -> (offset, value) of the latest record of each key in [low, high); tombstones are
    None values (the same as no record)."""
    out = {}
    for offset in sorted(o for o in records if low <= o < high):
        key, value, plain, _control = records[offset]
        if key is not None and plain:
            out[key] = (offset, value)
    return out


def _keys_from(records: dict, offset: int) -> set:
    """The keys of the records at or after `offset` (any batch but a control one: a committed
    transactional record supersedes older ones too)."""
    return {key for o, (key, _value, _plain, control) in records.items()
            if o >= offset and key is not None and not control}
