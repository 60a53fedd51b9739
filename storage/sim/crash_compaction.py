"""Crash enumeration of log compaction (storage/log/cleaner.py), as storage/sim/crash.py does for the
other operations: a compacted partition with overwritten keys, a tombstone, an idempotent
producer and an aborted transaction, flushed; then short sequences of "clean" (LogDir.clean_logs:
the rewrite, the .cleaned -> .swap -> final swap, the cleaner checkpoint), "append" (a fresh key)
and "flush", crashed at every mutating I/O operation, each crash in several of the fault
model's states (S1 a-d, S3, S4, S5), then reopened and checked:

  I21 compaction never changes what a key means: for every key of the flushed prefix the
      recovered log's latest value is the prefix's latest value (a tombstone and no record are
      the same), every recovered record (offset, key, value) was written by the run, offsets
      strictly increase, nothing durable is lost (the log end offset is at least the prefix's),
      and no `.cleaned`/`.swap` file is left; plus I8/I9 (check_replica) and I17 (the producer
      state and aborted transactions the recovered batches give).
"""
from __future__ import annotations

import errno
import os
import shutil

from ..core import errors
from ..core import io as sio
from ..core.config import LogConfig
from ..core.files import CLEANED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX
from ..core.records import Record, build_batch, iter_batches
from ..dir.logdir import LogDir
from . import invariants
from .crash import STATES, Outcome, _check_producers, _is_crash, _meta_files, close_reporting
from .fs import SimFS, snapshot, write_tree

TOPIC = "c"
CONFIG = LogConfig(segment_bytes=420, index_interval_bytes=100, segment_index_bytes=240, fsync=False,
                   cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
NOW = 1_700_000_000_000
SEQUENCES = (("clean",), ("clean", "flush"), ("append", "clean"), ("clean", "append"), ("clean", "clean"))


def _open(root: str) -> LogDir:
    return LogDir.open(root, LogConfig(fsync=False), topic_configs={TOPIC: CONFIG})


def _prepare(root: str) -> None:
    with _open(root) as logdir:
        log = logdir.partition(TOPIC, 0)
        log.assign_epoch_start_offset(0)
        for i in range(12):
            log.append_as_leader([Record(key=b"k%d" % (i % 4), value=b"v%d" % i, timestamp=NOW + i)], 0)
        log.append_as_leader([Record(key=b"k1", value=None, timestamp=NOW + 20)], 0)       # a tombstone
        log.append_as_leader(build_batch([(b"k2", b"idem")], producer_id=7, producer_epoch=0, base_sequence=0), 0)
        log.append_as_leader(build_batch([(b"k3", b"aborted")], producer_id=8, producer_epoch=0, base_sequence=0,
                                         is_transactional=True), 0)
        log.append_txn_marker(8, 0, False, coordinator_epoch=0, leader_epoch=0)
        log.append_as_leader([Record(key=b"k0", value=b"last", timestamp=NOW + 30)], 0)
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        logdir.flush()


def _records(files: dict, partition_dir: str) -> list[tuple[int, bytes | None, bytes | None, bool]]:
    out = []
    for path in sorted(p for p in files if os.path.dirname(p) == partition_dir and p.endswith(LOG_SUFFIX)):
        for batch in iter_batches(files[path], verify=False):
            if batch.is_valid():
                out += [(r.offset, r.key, r.value, batch.is_control) for r in batch.records()]
    return out


def _latest(records, aborted_values=frozenset()) -> dict:
    out = {}
    for _offset, key, value, control in records:
        if not control and key is not None and value not in aborted_values:
            out[key] = value
    return out


def _apply(logdir, log, operation: str, step: int) -> None:
    if operation == "clean":
        logdir.clean_logs(now_ms=NOW)
    elif operation == "append":
        log.append_as_leader([Record(key=b"n%d" % step, value=b"new", timestamp=NOW + 100 + step)], 0)
        log.update_high_watermark(log.log_end_offset)
    elif operation == "flush":
        logdir.flush()


def _check(root: str, before: dict, written: set, floor: int, label: str) -> list[str]:
    try:
        logdir = _open(root)
    except Exception as exc:   # noqa: BLE001 - anything here is a finding
        return [f"{label}: reopen raised {exc!r}"]
    out = []
    try:
        log = logdir.partition(TOPIC, 0)
        batches = list(log.batches(log.segments[0].base_offset))
        records = [(r.offset, r.key, r.value, b.is_control) for b in batches for r in b.records()]
        got = _latest(records, {b"aborted"})
        for key, value in before.items():
            if got.get(key) != value:
                out.append(f"I21 {label}: key {key!r} is {got.get(key)!r}, was {value!r}")
        strays = [r for r in records if r not in written]
        if strays:
            out.append(f"I21 {label}: records the run never wrote: {strays[:3]}")
        offsets = [r[0] for r in records]
        if offsets != sorted(set(offsets)):
            out.append(f"I21 {label}: offsets not strictly increasing")
        if log.log_end_offset < floor:
            out.append(f"I21 {label}: durable data lost (log end offset {log.log_end_offset} < {floor})")
        left = [n for n in os.listdir(log.path) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
        if left:
            out.append(f"I21 {label}: left behind {left}")
        out += [f"{v} [{label}]" for v in invariants.check_replica("node", log)]
        out += [f"{v} [{label}]" for v in _check_producers(log, batches)]
        log.append_as_leader([Record(key=b"after", value=b"recovery")], log.epoch_cache.latest_epoch or 0)
    except Exception as exc:   # noqa: BLE001
        out.append(f"{label}: {exc!r}")
    finally:
        out += close_reporting(logdir, label)
    return out


def _pristine(workdir: str):
    """The flushed prefix every run starts from: (base dir, pristine dir, partition dir under
    base, its records, each key's latest value)."""
    base, pristine_dir = os.path.join(workdir, "base"), os.path.join(workdir, "pristine")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(pristine_dir)
    _prepare(pristine_dir)
    partition_dir = os.path.join(os.path.abspath(base), f"{TOPIC}-0")
    prefix = _records({os.path.join(os.path.abspath(base), os.path.relpath(p, pristine_dir)): d
                       for p, d in snapshot(pristine_dir).items()}, partition_dir)
    return base, pristine_dir, partition_dir, prefix, _latest(prefix, {b"aborted"})


def enumerate_compaction_crashes(workdir: str, *, sequences=SEQUENCES, seed: int = 0,
                                 states_per_point: int | None = None) -> Outcome:
    base, pristine_dir, partition_dir, prefix, before = _pristine(workdir)
    states = STATES[: states_per_point or len(STATES)]
    outcome = Outcome()
    for sequence in sequences:
        outcome.sequences += 1
        point = 1
        while True:
            shutil.rmtree(base, ignore_errors=True)
            shutil.copytree(pristine_dir, base)
            fs = SimFS(base, seed=seed * 1_000_003 + outcome.sequences * 1009 + point)
            written = set(prefix)
            crashed = False
            with sio.using(fs):
                logdir = _open(base)
                log = logdir.partition(TOPIC, 0)
                floor = log.log_end_offset
                fs.crash_after = fs.mutations + point
                try:
                    for step, operation in enumerate(sequence):
                        if operation == "append":
                            written.add((log.log_end_offset, b"n%d" % step, b"new", False))
                        _apply(logdir, log, operation, step)
                        written |= set(_records(snapshot(base), partition_dir))
                except Exception as exc:   # noqa: BLE001 - CrashNow, or the I/O error it became
                    crashed = _is_crash(exc)
                    if not crashed:
                        raise
                for segment in log.segments:
                    segment.close()
                logdir.meta.close()
            if not crashed:
                break
            outcome.crash_points += 1
            at_crash = snapshot(base)
            written |= set(_records(at_crash, partition_dir))
            meta = {p: open(p, "rb").read() for p in _meta_files(base)}
            for number, (mode, faults) in enumerate(states):
                write_tree(os.path.abspath(base), at_crash)
                for path, data in meta.items():
                    with open(path, "wb") as f:
                        f.write(data)
                write_tree(os.path.abspath(base), fs.state(base, mode=mode, faults=faults))
                label = f"{'+'.join(sequence)} crash@{point} {mode}{'+' + '+'.join(faults) if faults else ''}#{number}"
                outcome.states += 1
                outcome.violations += _check(base, before, written, floor, label)
            point += 1
    return outcome


def enumerate_compaction_io_faults(workdir: str, *, codes=(errno.EIO, errno.ENOSPC), seed: int = 0,
                                   states=(("d", ()), ("a", ()), ("c", ()))) -> Outcome:
    """S7/S8 during a clean: every mutation of LogDir.clean_logs fails in turn with each errno.
    The call must end in the failure state (LogDirOfflineError naming that errno) and the dir
    must refuse everything afterwards (I16); then the machine crashes and the reopened log
    passes I21 (every key's latest value kept, nothing invented, nothing durable lost)."""
    base, pristine_dir, partition_dir, prefix, before = _pristine(workdir)
    outcome = Outcome(sequences=1)
    for code in codes:
        point = 0
        while True:
            shutil.rmtree(base, ignore_errors=True)
            shutil.copytree(pristine_dir, base)
            fs = SimFS(base, seed=seed * 1_000_003 + point)
            label = f"clean {errno.errorcode[code]}@{point}"
            with sio.using(fs):
                logdir = _open(base)
                log = logdir.partition(TOPIC, 0)
                floor = log.log_end_offset
                fs.inject("any", code, after=point)
                try:
                    logdir.clean_logs(now_ms=NOW)
                except errors.LogDirOfflineError as exc:
                    if getattr(exc.first_failure, "errno", None) != code:
                        outcome.violations.append(f"{label}: the failure names {exc.first_failure!r}")
                except Exception as exc:   # noqa: BLE001 - anything else is a finding
                    outcome.violations.append(f"{label}: clean_logs raised {exc!r}, not LogDirOfflineError")
                else:
                    fs.injected.clear()
                    logdir.close()
                    break              # the clean finished before this point: every point covered
                outcome.crash_points += 1
                attempts = (lambda log=log: log.append_as_leader([Record(key=b"x", value=b"y")], 0),
                            lambda logdir=logdir: logdir.clean_logs(now_ms=NOW),
                            lambda logdir=logdir: logdir.close())
                for attempt in attempts:
                    try:
                        attempt()
                        outcome.violations.append(f"I16 {label}: the offline dir accepted an operation")
                    except errors.LogDirOfflineError:
                        pass
            at_failure = snapshot(base)
            meta = {p: open(p, "rb").read() for p in _meta_files(base)}
            for mode, faults in states:
                write_tree(os.path.abspath(base), at_failure)
                for path, data in meta.items():
                    with open(path, "wb") as f:
                        f.write(data)
                write_tree(os.path.abspath(base), fs.state(base, mode=mode, faults=faults))
                outcome.states += 1
                outcome.violations += _check(base, before, set(prefix), floor, f"{label} then crash {mode}")
            point += 1
    return outcome
