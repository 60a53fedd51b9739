"""`python -m storage.sim`: named scenarios, the cluster simulator, mutation runs, and the
single-node crash enumeration.

    python -m storage.sim scenario NAME [--json] [--disable-guard ID]
    python -m storage.sim run --seeds N [--first-seed S] [--profile safety|beyond] [--steps K] [--json]
    python -m storage.sim mutate ID --seeds N [--first-seed S] [--json]
    python -m storage.sim crash [--max-length 2] [--json]
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile

from ..core import guards


def _progress(total: int, label: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=label, file=sys.stderr, disable=not sys.stderr.isatty())


def cmd_scenario(args) -> int:
    from . import stories

    guards.enter_simulation()
    with tempfile.TemporaryDirectory() as root:
        try:
            if args.disable_guard:
                with guards.disabled(args.disable_guard):
                    report = stories.run(args.name, root)
            else:
                report = stories.run(args.name, root)
        except KeyError as exc:
            print(f"error: {exc.args[0]}", file=sys.stderr)
            return 2
    report["disabled_guard"] = args.disable_guard
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(f"scenario {report['scenario']} ({report['profile']} profile)")
        for note in report["notes"]:
            print(f"  {note}")
        s = report["partition"]
        print(f"  partition: leader {s['leader']} epoch {s['leader_epoch']} ISR {s['isr']} "
              f"recovery state {s['leader_recovery_state']}")
        for broker, info in report["brokers"].items():
            if info.get("alive") and "log_end_offset" in info:
                print(f"  broker {broker}: LEO {info['log_end_offset']} HW {info['high_watermark']} "
                      f"epochs {info['epochs']} batches {len(info['batches'])}")
            else:
                print(f"  broker {broker}: down")
        for line in report["data_loss"]:
            print(f"  data loss (beyond the fault budget, allowed): {line}")
        print("  violations: " + ("none" if not report["violations"] else ""))
        for line in report["violations"]:
            print(f"    {line}")
    return 1 if report["violations"] else 0


def cmd_run(args) -> int:
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    from .simulator import run_job

    jobs = [(seed, args.profile, args.steps) for seed in seeds]
    results = []
    bar = _progress(len(seeds), "seeds")
    with contextlib.ExitStack() as stack:
        if args.jobs > 1:
            import multiprocessing

            pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(args.jobs))
            runs = pool.imap(run_job, jobs, chunksize=4)
        else:
            runs = map(run_job, jobs)
        for result in runs:
            results.append(result)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    faults: dict[str, int] = {}
    for r in results:
        for k, v in r.faults.items():
            faults[k] = faults.get(k, 0) + v
    failed = [r for r in results if r.violations]
    trace_hash = hashlib.sha256("".join(r.trace_hash for r in results).encode()).hexdigest()[:16]
    summary = {"seeds": len(results), "first_seed": args.first_seed, "profile": args.profile,
               "steps": sum(r.steps for r in results), "faults": faults, "trace_hash": trace_hash,
               "violations": [{"seed": r.seed, "violations": r.violations[:5]} for r in failed]}
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print(f"{len(results)} seeds, {summary['steps']} steps, profile {args.profile}, trace hash {trace_hash}")
        print("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())))
        print(f"seeds with violations: {len(failed)}")
        for r in failed[:10]:
            print(f"  seed {r.seed}: {r.violations[0]}")
            print(f"    replay: python -m storage.sim run --seeds 1 --first-seed {r.seed} --profile {args.profile}")
            print(f"    trace tail: {r.trace[0][-5:] if r.trace else []}")
    return 1 if failed else 0


REGRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions.json")


def load_regressions(path: str = REGRESSIONS) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"mutations": {}, "seeds": []}


def _judge(kind: str, name, guard: str | None, steps: int, profile: str = "safety") -> list[str]:
    """Violations of one recipe, story or seed, with `guard` off (None: every guard on)."""
    from . import recipes, stories

    context = guards.disabled(guard) if guard and guard != "C1" else contextlib.nullcontext()
    with context, tempfile.TemporaryDirectory() as root:
        if kind == "recipe":
            return recipes.run(name, os.path.join(root, "r"))["violations"]
        if kind == "scenario":
            return stories.run(name, os.path.join(root, "s"))["violations"]
        if kind == "crash":     # the single-node enumeration, sequences of `name` operations
            from .crash import enumerate_crashes
            return enumerate_crashes(os.path.join(root, "c"), max_length=name).violations
        from .simulator import run_seed
        result = run_seed(name, os.path.join(root, "seed"), profile=profile, steps=steps)
        if guard == "C1":
            return [v for v in result.violations if "lost-write" in v]
        return result.violations


def find_catch(guard: str, seeds: list[int], steps: int, *, only_seeds: bool = False) -> dict:
    """The first recipe, KIP story or seed whose run shows a violation with `guard` switched off
    (and, for a seed, none with it on: only then is the violation the guard's)."""
    from . import recipes, stories

    out = {"guard": guard, "caught": False, "kind": None, "seed": None, "violation": None, "steps": steps,
           "description": guards.CATALOGUE.get(guard, CALIBRATION if guard == "C1" else None)}
    if guard == "M0":
        for seed in seeds:
            if seed % 100 == 0:
                return {**out, "caught": True, "kind": "seed", "seed": seed, "profile": "safety",
                        "violation": "M0 canary: seed % 100 == 0"}
        return out
    if guard != "C1" and not only_seeds:
        candidates = [("recipe", name) for name in recipes.for_guard(guard)]
        candidates += [("scenario", name) for name in stories.SCENARIOS]
        candidates += [("crash", 1)]
        for kind, name in candidates:          # recipes and the KIPs' stories first
            found = _judge(kind, name, guard, steps)
            if found:
                return {**out, "caught": True, "kind": kind, "seed": name, "violation": found[0]}
    profile = "calibration" if guard == "C1" else "swarm"     # swarm: one seed in ten beyond the budget
    bar = _progress(len(seeds), guard)
    try:
        for seed in seeds:
            found = _judge("seed", seed, guard, steps, profile)
            if bar is not None:
                bar.update(1)
            if not found:
                continue
            if guard != "C1" and _judge("seed", seed, None, steps, profile):
                continue      # fails with the guard on too: not the guard's violation
            return {**out, "caught": True, "kind": "seed", "seed": seed, "profile": profile, "violation": found[0]}
    finally:
        if bar is not None:
            bar.close()
    if guard != "C1" and not only_seeds:
        found = _judge("crash", 2, guard, steps)
        if found:
            return {**out, "caught": True, "kind": "crash", "seed": 2, "violation": found[0]}
    return out


CALIBRATION = "C1 calibration: unclean elections with no budget; the history checker must report lost-write"


def cmd_mutate(args) -> int:
    guards.enter_simulation()
    if args.guard not in guards.CATALOGUE and args.guard != "C1":
        print(f"error: unknown guard {args.guard}; known: {', '.join(guards.CATALOGUE)}, C1", file=sys.stderr)
        return 2
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    out = find_catch(args.guard, seeds, args.steps, only_seeds=args.only_seeds)
    if out["caught"] and args.store:
        data = load_regressions()
        data["mutations"][args.guard] = {k: out[k] for k in ("kind", "seed", "violation", "steps")
                                         } | ({"profile": out["profile"]} if "profile" in out else {})
        with open(REGRESSIONS, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(f"{args.guard}: {'caught' if out['caught'] else 'NOT caught'}"
              + (f" by {out['kind']} {out['seed']}: {out['violation']}" if out["caught"] else ""))
    return 0 if out["caught"] else 1


def cmd_regress(args) -> int:
    """Replay every stored regression: each mutation's recipe, story or seed must still show a
    violation with its guard off and none with it on; each stored seed must run clean."""
    guards.enter_simulation()
    data = load_regressions(args.file)
    failures, rows = [], []
    for guard, entry in sorted(data["mutations"].items(), key=lambda kv: (len(kv[0]), kv[0])):
        kind, name, steps = entry["kind"], entry["seed"], entry.get("steps", 200)
        profile = entry.get("profile", "safety")
        off = _judge(kind, name, guard, steps, profile)
        on = [] if guard in ("M0", "C1") else _judge(kind, name, None, steps, profile)
        ok = bool(off) and not on
        rows.append({"guard": guard, "kind": kind, "seed": name, "caught": bool(off), "clean_with_guard": not on,
                     "violation": off[0] if off else None})
        if not ok:
            failures.append(f"{guard} ({kind} {name}): " + ("not caught any more" if not off else f"fails with the "
                                                             f"guard on: {on[0]}"))
    for entry in data.get("seeds", []):
        found = _judge("seed", entry["seed"], None, entry.get("steps", 200), entry.get("profile", "safety"))
        rows.append({"seed": entry["seed"], "profile": entry.get("profile", "safety"), "clean": not found,
                     "note": entry.get("note")})
        if found:
            failures.append(f"seed {entry['seed']} ({entry.get('note')}): {found[0]}")
    if args.json:
        print(json.dumps({"replayed": len(rows), "failures": failures, "rows": rows}, sort_keys=True))
    else:
        for row in rows:
            if "guard" in row:
                print(f"{row['guard']:>4}: {row['kind']} {row['seed']}: "
                      f"{'caught' if row['caught'] else 'NOT caught'}, "
                      f"{'clean' if row['clean_with_guard'] else 'FAILS'} with the guard on")
            else:
                print(f"seed {row['seed']} ({row['profile']}): {'clean' if row['clean'] else 'FAILS'}  {row['note'] or ''}")
        print(f"{len(rows)} regressions replayed, {len(failures)} failed")
        for line in failures:
            print(f"  {line}")
    return 1 if failures else 0


def cmd_crash(args) -> int:
    from .crash import enumerate_crashes
    from .crash_compaction import enumerate_compaction_crashes, enumerate_compaction_io_faults

    with tempfile.TemporaryDirectory() as root:
        if args.compaction:
            outcome = enumerate_compaction_crashes(os.path.join(root, "w"))
            faults = enumerate_compaction_io_faults(os.path.join(root, "f"))
            outcome.crash_points += faults.crash_points
            outcome.states += faults.states
            outcome.violations += faults.violations
        else:
            outcome = enumerate_crashes(os.path.join(root, "w"), max_length=args.max_length)
    summary = {"sequences": outcome.sequences, "crash_points": outcome.crash_points, "states": outcome.states,
               "violations": outcome.violations[:20]}
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print(f"{outcome.sequences} sequences, {outcome.crash_points} crash points, {outcome.states} states, "
              f"{len(outcome.violations)} violations")
        for line in outcome.violations[:20]:
            print(f"  {line}")
    return 1 if outcome.violations else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m storage.sim",
                                     description="Named scenarios, the cluster simulator, mutation runs and the "
                                                 "single-node crash enumeration.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("scenario", help="replay a KIP's story")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.add_argument("--disable-guard", metavar="ID")
    p = sub.add_parser("run", help="run the cluster simulator over seeds")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--profile", choices=("safety", "beyond", "calibration", "swarm"), default="safety")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--jobs", type=int, default=1, help="worker processes (a long run: one per core)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("mutate", help="switch a guard off and look for the violation it prevents")
    p.add_argument("guard")
    p.add_argument("--seeds", type=int, default=50)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--store", action="store_true", help="store the catch in the regression file")
    p.add_argument("--only-seeds", action="store_true",
                   help="random seeds only (no recipe, story or crash enumeration): the swarm's own score")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("regress", help="replay every stored regression (mutations and seeds)")
    p.add_argument("--file", default=REGRESSIONS)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("crash", help="single-node exhaustive crash enumeration")
    p.add_argument("--max-length", type=int, default=2)
    p.add_argument("--compaction", action="store_true",
                   help="the compaction enumerations instead: crashes and I/O errors at every operation "
                        "of a clean (storage/sim/crash_compaction.py, I21, I16)")
    p.add_argument("--json", action="store_true")
    parser.add_argument("--log-level", default="ERROR", help="the storage loggers' level (default ERROR: the "
                        "simulated crashes, recoveries and unclean elections are the report's, not stderr's)")
    args = parser.parse_args(argv)
    logging.getLogger("storage").setLevel(args.log_level.upper())
    return {"scenario": cmd_scenario, "run": cmd_run, "mutate": cmd_mutate, "regress": cmd_regress,
            "crash": cmd_crash}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
