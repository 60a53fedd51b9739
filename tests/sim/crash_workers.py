"""The slow tier's crash enumerations on every core: an enumeration's sequences (or its errnos)
are cut into a fixed number of shares, each share runs in a worker process (spawned, in its own
directory) through the same enumeration function, and the outcomes are added up. The sequences,
crash points and states covered are those of one serial run; only the SimFS seed of a sequence
(its random choices of what an unsynced write left) follows its place in its share, and the
shares do not depend on the machine, so a run repeats exactly."""
from __future__ import annotations

import contextlib
import multiprocessing
import os

from storage.core import guards
from storage.sim.crash import Outcome, enumerate_crashes, enumerate_io_faults
from storage.sim.crash_compaction import enumerate_compaction_crashes

SHARES = 4          # fixed, so the seeds do not depend on the core count
FUNCTIONS = {"crashes": enumerate_crashes, "io_faults": enumerate_io_faults,
             "compaction": enumerate_compaction_crashes}


def _run(job) -> Outcome:
    name, guard, workdir, kwargs = job
    guards.enter_simulation()          # as test_sim's autouse fixture does in the parent
    with guards.disabled(guard) if guard else contextlib.nullcontext():
        return FUNCTIONS[name](workdir, **kwargs)


def run_shares(name: str, workdir: str, shares: list[dict], *, guard: str | None = None) -> list[Outcome]:
    """Run FUNCTIONS[name](workdir/share-i, **shares[i]) for every share, as many at once as
    there are cores (with guard switched off in each worker, if given)."""
    jobs = [(name, guard, os.path.join(workdir, f"share-{i}"), share) for i, share in enumerate(shares)]
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        return pool.map(_run, jobs, chunksize=1)


def split(sequences) -> list[dict]:
    """The sequences dealt round-robin into SHARES shares (sequences of one length cost alike)."""
    sequences = list(sequences)
    return [{"sequences": sequences[i::SHARES]} for i in range(SHARES)]


def added(outcomes: list[Outcome], *, sequences: int | None = None) -> Outcome:
    """One outcome for the whole enumeration (sequences: the count, when every share ran them all)."""
    total = Outcome()
    for outcome in outcomes:
        total.sequences += outcome.sequences
        total.crash_points += outcome.crash_points
        total.states += outcome.states
        total.violations += outcome.violations
    if sequences is not None:
        total.sequences = sequences
    return total


def crashes(workdir: str, sequences, *, guard: str | None = None, **kwargs) -> Outcome:
    """enumerate_crashes over these sequences, in shares."""
    return added(run_shares("crashes", workdir, [{**s, **kwargs} for s in split(sequences)], guard=guard))


def compaction_crashes(workdir: str, sequences, **kwargs) -> Outcome:
    """enumerate_compaction_crashes over these sequences, in shares."""
    return added(run_shares("compaction", workdir, [{**s, **kwargs} for s in split(sequences)]))


def io_faults(workdir: str, *, codes, **kwargs) -> Outcome:
    """enumerate_io_faults with one share per errno: the seeds are a serial run's (they do not
    depend on the errno)."""
    outcomes = run_shares("io_faults", workdir, [{"codes": (code,), **kwargs} for code in codes])
    return added(outcomes, sequences=outcomes[0].sequences)
