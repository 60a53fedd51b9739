"""Fleet-audit throughput on Spark: local[1] against local[2] (a script, not a pytest case).

    python benchmarks/bench_audit.py [--partitions 4] [--brokers 2] [--batches 6400] [--rounds 3]
                                     [--fleet DIR] [--json OUT.json]

It writes one fleet with `storage.spark.generate` (realistic logs: rotating leaders, mixed
none/zstd/gzip batches, one injected fault of each kind so every branch of the analysis runs),
then audits it with each master in turn, alternating (local[1], local[2], local[1], ...) for
`--rounds` pairs.  Every audit runs in a fresh process with its own JVM: the process audits the
fleet once untimed (JVM start, Python workers, code generation) and once timed; the timed run
gives
  scan MB/s    segment bytes / seconds of the Spark job that reads every segment (the
               partitionlog data source: CRC check, fingerprint, Arrow rows) -- the part that
               spreads over cores;
  audit MB/s   segment bytes / seconds of the whole audit (scan + the Spark SQL analysis + the
               driver's small files and report).
Reported: the median of each over the rounds, and scaling = median local[2] / median local[1].
The machine is a shared 2-core VM; the load average at start and end is printed with the
numbers, because other processes on the same cores bend them.

pytest collects benchmarks/bench_*.py (benchmarks/conftest.py): this module defines no test
and imports nothing beyond the standard library at import time, so that stays harmless.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _child(master: str, dirs: list[str]) -> None:
    """One JVM: audit once untimed, once timed; print the timed run as JSON."""
    from storage.spark import audit
    from storage.spark.session import create_session

    spark = create_session(master, app_name="bench-audit")
    try:
        audit.run_audit(spark, dirs)
        report = audit.run_audit(spark, dirs)
    finally:
        spark.stop()
    verdicts = sorted(r["verdict"] for r in report["partitions"])
    print(json.dumps({"master": master, "bytes": report["bytes"], "segments": report["segments"],
                      "seconds": report["seconds"], "scan_seconds": report["scan_seconds"],
                      "verdicts": verdicts}))


def _run(master: str, dirs: list[str]) -> dict:
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", master, *dirs],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(f"audit on {master} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["scan_mb_per_s"] = result["bytes"] / 1e6 / result["scan_seconds"]
    result["audit_mb_per_s"] = result["bytes"] / 1e6 / result["seconds"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--fleet", help="where to write the fleet (default: a temporary directory, deleted)")
    parser.add_argument("--brokers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4, help="partitions per topic (2 topics)")
    parser.add_argument("--batches", type=int, default=6400, help="batches per partition (default: ~1 GB in all)")
    parser.add_argument("--records", type=int, default=40, help="records per batch")
    parser.add_argument("--value-bytes", type=int, default=250)
    parser.add_argument("--segment-bytes", type=int, default=32 << 20,
                        help="segment size (default 32 MiB; Kafka's default is 1 GiB: Spark's fixed cost per "
                             "task, one task per segment, is what small segments measure)")
    parser.add_argument("--rounds", type=int, default=3, help="(local[1], local[2]) pairs")
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--json", help="also write the results here")
    args, rest = parser.parse_known_args(argv)
    if args.child:
        _child(args.child, rest)
        return 0
    from storage.spark import generate
    from storage.spark.session import java_problem, pyspark_problem

    problem = pyspark_problem() or java_problem()
    if problem:
        print(f"bench_audit: {problem}", file=sys.stderr)
        return 2
    owned = args.fleet is None
    root = tempfile.mkdtemp(prefix="bench-audit-") if owned else args.fleet
    try:
        started = time.monotonic()
        fleet = generate.generate(os.path.join(root, "fleet"), brokers=args.brokers, topics=2,
                                  partitions=args.partitions, batches=args.batches, records=args.records,
                                  value_bytes=args.value_bytes, segment_bytes=args.segment_bytes,
                                  inject={"hidden": 1, "missing": 1, "tail": 1, "corrupt": 1, "lineage": 1},
                                  progress=sys.stderr.isatty())
        print(f"fleet: {len(fleet['partitions'])} partitions x {args.brokers} replicas, "
              f"{fleet['log_bytes'] / 1e6:.0f} MB of segments, generated in {time.monotonic() - started:.0f} s")
        masters = args.masters.split(",")
        load_start = os.getloadavg()
        runs = {m: [] for m in masters}
        for i in range(args.rounds):
            for master in (masters if i % 2 == 0 else masters[::-1]):
                result = _run(master, fleet["brokers"])
                runs[master].append(result)
                print(f"  round {i + 1} {master:9s} scan {result['scan_mb_per_s']:7.1f} MB/s "
                      f"({result['scan_seconds']:.2f} s)  audit {result['audit_mb_per_s']:7.1f} MB/s "
                      f"({result['seconds']:.2f} s)", flush=True)
        load_end = os.getloadavg()
        summary = {m: {"scan_mb_per_s": statistics.median(r["scan_mb_per_s"] for r in rs),
                       "audit_mb_per_s": statistics.median(r["audit_mb_per_s"] for r in rs),
                       "runs": rs} for m, rs in runs.items()}
        print(f"medians over {args.rounds} rounds ({fleet['log_bytes'] / 1e6:.0f} MB, "
              f"{runs[masters[0]][0]['segments']} segments; load average {load_start[0]:.2f} at start, "
              f"{load_end[0]:.2f} at end):")
        for master, s in summary.items():
            print(f"  {master:9s} scan {s['scan_mb_per_s']:7.1f} MB/s   audit {s['audit_mb_per_s']:7.1f} MB/s")
        if len(masters) == 2:
            one, two = (summary[m] for m in masters)
            print(f"  scaling {masters[1]} / {masters[0]}: scan {two['scan_mb_per_s'] / one['scan_mb_per_s']:.2f}x, "
                  f"audit {two['audit_mb_per_s'] / one['audit_mb_per_s']:.2f}x")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"fleet_bytes": fleet["log_bytes"], "load_start": load_start, "load_end": load_end,
                           "results": summary}, f, indent=1)
    finally:
        if owned:
            import shutil
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
