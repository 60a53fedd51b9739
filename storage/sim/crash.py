"""Single-node exhaustive crash enumeration (ALICE / CrashMonkey style).

For every sequence of up to N engine operations (append, roll, flush, truncate, epoch bump,
log-start increase) run after a fixed, flushed prefix, for every crash point (every mutating
I/O operation the sequence makes through the seam), and for a bounded set of crash states the
fault model allows there (S1 modes a-d, S3 torn sectors, S4 size before data, S5 metadata
loss), the log dir is reopened and checked:

  I12 the recovered log is a prefix of the log at the crash (byte-identical batches, nothing
      fabricated), contains every batch that was durable, and the clean-shutdown marker is
      absent (the run never closed cleanly);
  I8  epoch-cache integrity, and the cache equals the one rebuilt from the batches' epochs;
  I9  offset integrity, index entries on batch boundaries, segment bases.
"""
from __future__ import annotations

import errno
import itertools
import os
import shutil
from dataclasses import dataclass, field

from ..core import errors
from ..core import io as sio
from ..core.config import LogConfig
from ..core.files import LOG_SUFFIX
from ..core.records import build_batch, iter_batches
from ..dir.logdir import CLEAN_SHUTDOWN_FILE, LogDir
from ..log.producer import ProducerStateManager, apply_replicated
from . import invariants
from .fs import CrashNow, SimFS, snapshot, write_tree

OPERATIONS = ("append", "roll", "flush", "truncate", "epoch_bump", "log_start", "idempotent", "abort", "retention")
# The producer-state and retention operations write the snapshot, transaction-index and
# *.deleted files; the classic six are the replication-safety core.
CLASSIC = OPERATIONS[:6]
IDEMPOTENT_PID, TXN_PID = 7, 8
CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100, segment_index_bytes=240, fsync=False)
_FAR_FUTURE = 2**62
STATES = (("d", ()), ("a", ()), ("b", ()), ("b", ()), ("c", ()), ("c", ()), ("b", ("S3",)), ("b", ("S4",)),
          ("c", ("S5",)))


@dataclass
class Outcome:
    sequences: int = 0
    crash_points: int = 0
    states: int = 0
    violations: list = field(default_factory=list)


def _apply(log, logdir, operation: str, step: int) -> None:
    if operation == "append":
        log.append_as_leader([b"v%d-%d" % (step, i) for i in range(2)], log.epoch_cache.latest_epoch or 0)
    elif operation == "roll":
        log.roll()
    elif operation == "flush":
        logdir.flush()
    elif operation == "truncate":      # on an empty log: a truncation to its end (it changes nothing)
        log.truncate_to(max(log.log_start_offset, log.log_end_offset - 1))
    elif operation == "epoch_bump":
        log.assign_epoch_start_offset((log.epoch_cache.latest_epoch or 0) + 1)
    elif operation == "log_start":
        log.update_high_watermark(log.log_end_offset)
        if log.high_watermark > log.log_start_offset:
            log.increment_log_start_offset(log.log_start_offset + 1)
            logdir.checkpoint()
    elif operation in ("idempotent", "abort"):
        pid = IDEMPOTENT_PID if operation == "idempotent" else TXN_PID
        entry = log.producer_state.active_producers.get(pid)
        sequence = 0 if entry is None or entry.last_sequence < 0 else entry.last_sequence + 1
        batch = build_batch([b"p%d-%d" % (step, i) for i in range(2)], producer_id=pid, producer_epoch=0,
                            base_sequence=sequence, is_transactional=operation == "abort")
        log.append_as_leader(batch, log.epoch_cache.latest_epoch or 0)
        if operation == "abort":
            log.append_txn_marker(pid, 0, False, coordinator_epoch=0, leader_epoch=log.epoch_cache.latest_epoch or 0)
    elif operation == "retention":
        log.update_high_watermark(log.log_end_offset)
        log.delete_old_segments(now_ms=_FAR_FUTURE)      # every segment is past retention_ms
        logdir.checkpoint()


def _is_crash(exc: BaseException | None) -> bool:
    """CrashNow, or an error it became on its way through C and the failure state."""
    while exc is not None:
        if isinstance(exc, CrashNow):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _prepare(root: str) -> None:
    with LogDir.open(root, CONFIG) as logdir:
        log = logdir.partition("t", 0)
        log.assign_epoch_start_offset(0)
        for i in range(3):
            log.append_as_leader([b"base-%d" % i, b"x" * 30], 0)
        log.roll()
        log.append_as_leader([b"base-3"], 0)
        logdir.flush()


def _meta_files(root: str) -> list[str]:
    return [os.path.join(root, n) for n in os.listdir(root) if n.startswith("storage.mdb")]


def _batches_in(files: dict, partition_dir: str) -> list[bytes]:
    logs = sorted(p for p in files if os.path.dirname(p) == partition_dir and p.endswith(LOG_SUFFIX))
    out = []
    for path in logs:
        out += [b.to_bytes() for b in iter_batches(files[path], verify=False) if b.is_valid()]
    return out


def _holds_at_start(version: list[bytes], got: list[bytes]) -> bool:
    """`got` is `version` from some batch on (retention deletes from the front) up to some point."""
    if not got:
        return True
    starts = [i for i, batch in enumerate(version) if batch == got[0]]
    return any(version[i:i + len(got)] == got for i in starts)


def _rebuilt_epochs(batches) -> list[tuple[int, int]]:
    out = []
    for b in batches:
        if b.partition_leader_epoch >= 0 and (not out or b.partition_leader_epoch > out[-1][0]):
            out.append((b.partition_leader_epoch, b.base_offset))
    return out


def _check(root: str, versions: list[list[bytes]], floor: int, label: str) -> list[str]:
    """versions: the log's batches at every point of the run (any of them may be what the
    disk holds after a crash); floor: every offset below it was durable."""
    out = []
    try:
        logdir = LogDir.open(root, CONFIG)
    except Exception as exc:   # noqa: BLE001 - anything here is a finding
        return [f"{label}: reopen raised {exc!r}"]
    try:
        if logdir.had_clean_shutdown:
            out.append(f"I12 {label}: a clean-shutdown marker after a crash")
        log = logdir.partition("t", 0)
        batches = list(log.batches(log.segments[0].base_offset))
        got = [b.to_bytes() for b in batches]
        if not any(_holds_at_start(version, got) for version in versions):
            out.append(f"I12 {label}: the recovered log is not a prefix of the log at any point of the run "
                       "(after the batches retention deleted)")
        if log.log_end_offset < floor:
            out.append(f"I12 {label}: durable data lost (log end offset {log.log_end_offset} < {floor})")
        out += [f"{v} [{label}]" for v in invariants.check_replica("node", log)]
        rebuilt = [e for e in _rebuilt_epochs(batches) if e[1] >= log.log_start_offset]
        cache = [tuple(e) for e in log.epoch_cache.entries]
        if cache[-len(rebuilt):] != rebuilt if rebuilt else False:
            out.append(f"I8 {label}: cache {cache} differs from the batches' epochs {rebuilt}")
        out += [f"{v} [{label}]" for v in _check_producers(log, batches)]
        log.append_as_leader([b"after recovery"], (log.epoch_cache.latest_epoch or 0))
    except Exception as exc:   # noqa: BLE001
        out.append(f"{label}: {exc!r}")
    finally:
        out += close_reporting(logdir, label)
    return out


def close_reporting(logdir, label: str) -> list[str]:
    """Close a reopened dir after its checks; a close that raises is a finding."""
    try:
        logdir.close()
    except Exception as exc:   # noqa: BLE001
        return [f"{label}: close raised {exc!r}"]
    return []


def _check_producers(log, batches) -> list[str]:
    """I17: the producer state and the aborted transactions the open recovered are those the
    recovered batches from the log start give, replayed from scratch (only producers with a
    batch there are compared: one whose batches retention deleted may stay, as in Kafka)."""
    derived = ProducerStateManager("/nonexistent/derived")
    aborted = []
    for batch in batches:          # the state is built from the log start (below it: awaiting deletion)
        if batch.magic >= 2 and batch.producer_id >= 0 and batch.base_offset >= log.log_start_offset:
            aborted += [(t.producer_id, t.first_offset, t.last_offset, lso)
                        for t, lso in apply_replicated(derived, batch.view) if t.is_aborted]
    out = []
    for pid, entry in derived.active_producers.items():
        got = log.producer_state.active_producers.get(pid)
        want = (entry.producer_epoch, entry.last_sequence, entry.last_offset, entry.current_txn_first_offset)
        have = None if got is None else (got.producer_epoch, got.last_sequence, got.last_offset,
                                         got.current_txn_first_offset)
        if have != want:
            out.append(f"I17 producer {pid}: recovered {have}, the batches give {want}")
    recovered = [tuple(t) for t in log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)]
    expected = [t for t in aborted if t[2] >= log.log_start_offset]
    if recovered != expected:
        out.append(f"I17 aborted transactions: recovered {recovered}, the batches give {expected}")
    return out


def enumerate_crashes(workdir: str, *, max_length: int = 2, seed: int = 0, states_per_point: int | None = None,
                      progress=None, sequences=None) -> Outcome:
    """Run the enumeration under workdir; returns what was covered and every violation."""
    base = os.path.join(workdir, "base")
    pristine_dir = os.path.join(workdir, "pristine")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(pristine_dir)
    _prepare(pristine_dir)
    pristine = snapshot(pristine_dir)
    partition_dir = os.path.join(os.path.abspath(base), "t-0")
    pristine = {os.path.join(os.path.abspath(base), os.path.relpath(p, pristine_dir)): data
                for p, data in pristine.items()}
    states = STATES[: states_per_point or len(STATES)]
    outcome = Outcome()
    if sequences is None:
        sequences = [s for n in range(1, max_length + 1) for s in itertools.product(OPERATIONS, repeat=n)]
    for sequence in sequences:
        outcome.sequences += 1
        point = 1
        while True:
            shutil.rmtree(base, ignore_errors=True)
            shutil.copytree(pristine_dir, base)     # the metadata store too (SimFS leaves it alone)
            fs = SimFS(base, seed=seed * 1_000_003 + outcome.sequences * 1009 + point)
            crashed = False
            versions = [_batches_in(pristine, partition_dir)]
            floor = None
            with sio.using(fs):
                logdir = LogDir.open(base, CONFIG)
                log = logdir.partition("t", 0)
                floor = log.recovery_point
                fs.crash_after = fs.mutations + point     # crash points count from the sequence on
                try:
                    for step, operation in enumerate(sequence):
                        if operation == "truncate":   # data it removes was allowed to go
                            target = max(log.log_start_offset, log.log_end_offset - 1)
                            cut = next(iter(iter_batches(log.read(target, 1))), None) \
                                if target < log.log_end_offset else None
                            # batch-granular: the whole batch holding the target goes
                            floor = min(floor, cut.base_offset if cut is not None else target)
                        _apply(log, logdir, operation, step)
                        versions.append(_batches_in(snapshot(base), partition_dir))
                        floor = min(floor, log.log_end_offset)
                        if operation == "flush":
                            floor = log.recovery_point
                except Exception as exc:   # noqa: BLE001 - CrashNow, or the I/O error it became in C
                    crashed = _is_crash(exc)
                    if not crashed:
                        raise
                for segment in log.segments:   # the process is gone
                    segment.close()
                logdir.meta.close()
            if not crashed:
                break   # the sequence finished before this crash point: all points covered
            outcome.crash_points += 1
            at_crash = snapshot(base)
            meta_at_crash = {p: open(p, "rb").read() for p in _meta_files(base)}
            versions.append(_batches_in(at_crash, partition_dir))
            for number, (mode, faults) in enumerate(states):
                write_tree(os.path.abspath(base), at_crash)
                for path, data in meta_at_crash.items():
                    with open(path, "wb") as f:
                        f.write(data)
                files = fs.state(base, mode=mode, faults=faults)
                write_tree(os.path.abspath(base), files)
                label = f"{'+'.join(sequence)} crash@{point} {mode}{'+' + '+'.join(faults) if faults else ''}#{number}"
                outcome.states += 1
                outcome.violations += _check(base, versions, floor, label)
            if progress is not None:
                progress(outcome)
            point += 1
    marker = os.path.join(base, CLEAN_SHUTDOWN_FILE)
    if os.path.exists(marker):
        os.unlink(marker)
    return outcome


# ---- S8: an I/O error at every mutation point, then a crash ------------------------------------

def _refuses_everything(log, logdir, remaining) -> list[str]:
    """After a failure the dir acknowledges nothing (the failure-state invariant, I16)."""
    out = []
    for step, operation in enumerate(remaining):
        try:
            _apply(log, logdir, operation, 100 + step)
        except errors.LogDirOfflineError:
            continue
        except Exception as exc:   # noqa: BLE001
            out.append(f"{operation} after the failure raised {exc!r}, not LogDirOfflineError")
            continue
        if operation in OPERATIONS:
            out.append(f"{operation} after the failure succeeded")
    try:
        log.read(log.log_start_offset, 1)
        out.append("a read after the failure succeeded")
    except errors.LogDirOfflineError:
        pass
    try:
        logdir.close()
        out.append("close after the failure succeeded")
    except errors.LogDirOfflineError:
        pass
    return out


def enumerate_io_faults(workdir: str, *, max_length: int = 2, codes=(errno.EIO, errno.ENOSPC), seed: int = 0,
                        states=(("d", ()), ("a", ()), ("b", ()), ("c", ()))) -> Outcome:
    """For every operation sequence and every mutation point in it: fail that mutation with each
    errno (S8; a failed fsync makes nothing durable), check that the call raised
    LogDirOfflineError and that nothing is acknowledged afterwards (I16), then crash and check
    the recovered log (I12: a prefix of the run, holding everything flushed before the
    failure; no clean-shutdown marker)."""
    base = os.path.join(workdir, "base")
    pristine_dir = os.path.join(workdir, "pristine")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(pristine_dir)
    _prepare(pristine_dir)
    partition_dir = os.path.join(os.path.abspath(base), "t-0")
    pristine = {os.path.join(os.path.abspath(base), os.path.relpath(p, pristine_dir)): data
                for p, data in snapshot(pristine_dir).items()}
    outcome = Outcome()
    sequences = [s for n in range(1, max_length + 1) for s in itertools.product(OPERATIONS, repeat=n)]
    for sequence in sequences:
        outcome.sequences += 1
        for code in codes:
            point = 0
            while True:
                shutil.rmtree(base, ignore_errors=True)
                shutil.copytree(pristine_dir, base)
                fs = SimFS(base, seed=seed * 1_000_003 + outcome.sequences * 1009 + point)
                versions = [_batches_in(pristine, partition_dir)]
                label = f"{'+'.join(sequence)} {errno.errorcode[code]}@{point}"
                with sio.using(fs):
                    logdir = LogDir.open(base, CONFIG)
                    log = logdir.partition("t", 0)
                    floor = log.recovery_point
                    fs.inject("any", code, after=point)
                    failed_at = None
                    for step, operation in enumerate(sequence):
                        if operation == "truncate" and log.log_end_offset > log.log_start_offset:
                            # what a truncation removes may go even when it fails half-way
                            target = max(log.log_start_offset, log.log_end_offset - 1)
                            cut = next(iter(iter_batches(log.read(target, 1))), None)
                            floor = min(floor, cut.base_offset if cut is not None else target)
                        try:
                            _apply(log, logdir, operation, step)
                        except errors.LogDirOfflineError as exc:
                            if getattr(exc.first_failure, "errno", None) != code:
                                outcome.violations.append(f"{label}: the failure names {exc.first_failure!r}")
                            failed_at = step
                            break
                        except Exception as exc:   # noqa: BLE001
                            outcome.violations.append(f"{label}: {operation} raised {exc!r}")
                            failed_at = step
                            break
                        versions.append(_batches_in(snapshot(base), partition_dir))
                        if operation == "flush":
                            floor = log.recovery_point
                        elif operation == "truncate":
                            floor = min(floor, log.log_end_offset)
                    if failed_at is None:
                        try:
                            logdir.close()       # the close is a point to fail too
                        except errors.LogDirOfflineError:
                            failed_at = len(sequence)
                        else:
                            break   # the run ended before this mutation point: every point covered
                    outcome.crash_points += 1
                    outcome.violations += [f"I16 {label}: {v}" for v in
                                           _refuses_everything(log, logdir, sequence[failed_at + 1:])]
                    if os.path.exists(os.path.join(base, CLEAN_SHUTDOWN_FILE)):
                        outcome.violations.append(f"I12 {label}: a clean-shutdown marker after a failure")
                at_failure = snapshot(base)
                meta_at_failure = {p: open(p, "rb").read() for p in _meta_files(base)}
                versions.append(_batches_in(at_failure, partition_dir))
                for mode, faults in states:
                    write_tree(os.path.abspath(base), at_failure)
                    for path, data in meta_at_failure.items():    # the check before reopened it
                        with open(path, "wb") as f:
                            f.write(data)
                    write_tree(os.path.abspath(base), fs.state(base, mode=mode, faults=faults))
                    outcome.states += 1
                    outcome.violations += _check(base, versions, floor, f"{label} then crash {mode}")
                point += 1
    return outcome
