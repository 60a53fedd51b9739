#!/usr/bin/env python3
"""Turn pytest-benchmark's JSON into a markdown report of ratios against the design targets.

    python -m pytest benchmarks --benchmark-only --benchmark-json=BENCH.json
    python benchmarks/report.py BENCH.json [--out benchmarks/RESULTS.md]

For each group: a table of cases (median time, throughput from extra_info's bytes or
records and the median, throughput relative to the ceiling or to ours) and the ratios
ours / each peer.  Paired groups ("*-paired", where ours and each peer ran back to back,
A B then B A) give the medians of the per-pair ratios: those are the numbers the design
targets are judged on, and the summary at the top lists them.

Ratios are throughput(ours) / throughput(peer), so > 1 means ours is faster.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# (group, peer role or name, minimum ratio, description) -- design.md "Performance targets"
APPEND_CEILING_TARGET = 0.90
APPEND_LMDB_TARGET = 1.5
BUILD_KAFKA_TARGET = 10.0
BUILD_RECORDS_PER_S_TARGET = 5_000_000


# ---- formatting --------------------------------------------------------------------------

def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def fmt_rate(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 1e6:,.0f} MB/s"
    if value >= 1e6:
        return f"{value / 1e6:.2f} M records/s"
    return f"{value / 1e3:,.0f} k records/s"


def fmt_ratio(x: float | None) -> str:
    """A ratio to the ceiling, as a percentage."""
    return "–" if x is None else f"{x:.0%}"


def fmt_x(x: float) -> str:
    return f"{x:.2f}×"


def verdict(value: float, minimum: float) -> str:
    return "meets" if value >= minimum else "**misses**"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


# ---- machine -----------------------------------------------------------------------------

def local_machine() -> dict:
    sys.path.insert(0, HERE)
    try:
        from benchlib import machine_summary
        return machine_summary()
    except Exception:   # report.py runs without the benchmark environment too
        return {"cpu_model": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                "python": platform.python_version(), "kernel": platform.release()}


def machine_lines(data: dict) -> list[str]:
    info = data.get("machine_info", {})
    bench = info.get("storage_bench")
    source = "recorded by the run"
    if not bench:
        bench = local_machine()
        source = "read from this machine by report.py (the JSON has none)"
    cpu = bench.get("cpu_model") or info.get("cpu", {}).get("brand_raw") or "?"
    cores = bench.get("cores") or info.get("cpu", {}).get("count") or "?"
    python = bench.get("python") or info.get("python_version") or "?"
    when = data.get("datetime", "")
    try:
        when = _dt.datetime.fromisoformat(when).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        pass
    commit = data.get("commit_info") or {}
    lines = [
        f"- Date: {when}",
        f"- Machine ({source}): {cpu}, {cores} cores"
        + (f", {bench['mem_bytes'] / 2**30:.0f} GiB RAM" if bench.get("mem_bytes") else "")
        + (f", Linux {bench['kernel']}" if bench.get("kernel") else ""),
        f"- Python {python}; pytest-benchmark {data.get('version', '?')}"
        + (f"; storage {bench['storage_version']}" if bench.get("storage_version") else ""),
    ]
    if bench.get("loadavg_start") or bench.get("loadavg_end"):
        def load(x):
            return "/".join(str(v) for v in x) if x else "?"
        lines.append(f"- Load average (1/5/15 min) when the run started: {load(bench.get('loadavg_start'))}, "
                     f"when it ended: {load(bench.get('loadavg_end'))} (about 1 is the benchmark itself; "
                     f"more means other processes shared the {cores} cores)")
    if commit.get("id"):
        lines.append(f"- Commit {commit['id'][:12]}" + (" (with uncommitted changes)" if commit.get("dirty") else ""))
    if bench.get("quick"):
        lines.append("- **--quick run**: shrunk data and one round per case; the numbers are a smoke test, not a measurement.")
    return lines


# ---- groups ------------------------------------------------------------------------------

def unit_of(bench: dict) -> tuple[str, float]:
    extra = bench.get("extra_info", {})
    if bench["group"].startswith("append") or extra.get("unit") == "bytes":
        return "bytes", float(extra.get("bytes", 0))
    return "records", float(extra.get("records", 0))


def case_label(bench: dict) -> str:
    extra = bench.get("extra_info", {})
    return extra.get("label") or bench["name"]


def plain_group(name: str, benches: list[dict]) -> list[str]:
    """A group of independent pedantic cases: one row per case, then ours / each other."""
    rows = []
    rates = {}
    for b in benches:
        unit, amount = unit_of(b)
        median = b["stats"]["median"]
        rates[b["name"]] = amount / median if median else 0.0
    ceiling = [b for b in benches if b.get("extra_info", {}).get("role") == "ceiling"]
    ceiling_rate = rates[ceiling[0]["name"]] if ceiling else None
    best_ours = max((rates[b["name"]] for b in benches if b.get("extra_info", {}).get("role") == "ours"), default=None)
    unit = unit_of(benches[0])[0]
    for b in sorted(benches, key=lambda b: -rates[b["name"]]):
        extra = b.get("extra_info", {})
        rel = rates[b["name"]] / ceiling_rate if ceiling_rate else (rates[b["name"]] / best_ours if best_ours else None)
        rows.append([case_label(b), extra.get("role", ""), b["stats"]["rounds"], fmt_time(b["stats"]["median"]),
                     fmt_time(b["stats"]["min"]), fmt_rate(rates[b["name"]], unit), fmt_ratio(rel)])
    rel_header = "vs ceiling" if ceiling_rate else "vs fastest ours"
    first = benches[0].get("extra_info", {})
    work = (f"{first.get('bytes', 0) / 2**20:.0f} MiB in {first.get('batches')} batches of "
            f"{first.get('batch_bytes')} bytes ({first.get('records_per_batch')} records of 100 bytes each)"
            if unit == "bytes" else
            f"{first.get('records')} records ({first.get('batches')} batches of {first.get('records_per_batch')}, "
            f"{first.get('value_bytes', 100)}-byte values)")
    out = [f"### {name}", "", f"Per round: {work}. Median and min over the rounds; throughput from the median.", ""]
    out += table(["case", "role", "rounds", "median", "min", "throughput", rel_header], rows)
    ours = [b for b in benches if b.get("extra_info", {}).get("role") == "ours"]
    others = [b for b in benches if b.get("extra_info", {}).get("role") != "ours"]
    if ours and others:
        out += ["", "Unpaired ratios (medians of cases run at different times; the paired group below is what the "
                    "targets are judged on):", ""]
        ratio_rows = []
        for o in ours:
            for p in others:
                if name == "build" and o["extra_info"].get("compression") != p["extra_info"].get("compression"):
                    continue
                f = fmt_ratio if p["extra_info"].get("role") == "ceiling" else fmt_x
                ratio_rows.append([case_label(o), case_label(p), f(rates[o["name"]] / rates[p["name"]])])
        out += table(["ours", "peer", "ours / peer"], ratio_rows)
    settings = {case_label(b): b["extra_info"].get("setting") for b in benches if b.get("extra_info", {}).get("setting")}
    if settings:
        out += ["", "Settings:", ""] + [f"- {label}: `{s}`" for label, s in settings.items()]
    return out + [""]


def target_for(group: str, pair: dict) -> float | None:
    if group == "append-paired":
        return APPEND_CEILING_TARGET if pair.get("peer_role") == "ceiling" else APPEND_LMDB_TARGET
    if group == "build-paired":
        return BUILD_KAFKA_TARGET
    return None


def paired_group(name: str, benches: list[dict]) -> list[str]:
    out = [f"### {name}", ""]
    out.append("Ours and each peer run back to back (A B, then B A on the next round)"
               + (", each run writing fresh files" if name.startswith("append") else "")
               + (" and preceded by an untimed run of the same peer (primed)"
                  if any(b["extra_info"].get("primed") for b in benches) else "")
               + "; the ratio is t(peer) / t(ours) of one pair, i.e. throughput(ours) / throughput(peer). "
               "Median, min and max over the pairs.")
    out.append("")
    for b in benches:
        extra = b["extra_info"]
        unit = extra.get("unit", "bytes")
        amount = extra.get("bytes") if unit == "bytes" else extra.get("records")
        if unit == "bytes":
            out.append(f"**{extra.get('size')}**: {amount / 2**20:.0f} MiB per run, {extra.get('batches')} batches of "
                       f"{extra.get('batch_bytes')} bytes.")
        else:
            out.append(f"**{extra.get('size')}**: {amount} records per run, {extra.get('batches')} batches of "
                       f"{extra.get('records_per_batch')}.")
        out.append("")
        rows = []
        for pair in extra["pairs"].values():
            ratios = pair["ratios"]
            target = target_for(name, pair)
            f = fmt_ratio if pair.get("peer_role") == "ceiling" else fmt_x
            rows.append([pair["label"], f(pair["median"]), f(min(ratios)), f(max(ratios)),
                         len(ratios), f"≥ {f(target)}" if target else "–",
                         verdict(pair["median"], target) if target else "–"])
        out += table(["ours / peer", "median", "min", "max", "pairs", "target", ""], rows)
        out.append("")
        rate_key = "throughput_MBps" if unit == "bytes" else "records_per_s"
        rate_rows = []
        for peer, median in sorted(extra["median_seconds"].items(), key=lambda kv: kv[1]):
            rate = extra[rate_key][peer]
            rate_rows.append([peer, len(extra["times"][peer]), fmt_time(median),
                              fmt_rate(rate * 1e6 if unit == "bytes" else rate, unit)])
        out += table(["run", "runs", "median time", "throughput"], rate_rows)
        out.append("")
    return out


# ---- summary -----------------------------------------------------------------------------

def summary(groups: dict[str, list[dict]]) -> list[str]:
    rows = []
    for b in groups.get("append-paired", []):
        extra = b["extra_info"]
        pairs = extra["pairs"]
        for ours in ("ours-follower", "ours-leader"):
            ceiling = pairs.get(f"{ours} / file.write")
            if ceiling:
                rows.append([f"append {extra['size']}, {ours} / file.write", fmt_ratio(ceiling["median"]),
                             f"≥ {fmt_ratio(APPEND_CEILING_TARGET)}", verdict(ceiling["median"], APPEND_CEILING_TARGET)])
            lmdb = {p["peer"]: p["median"] for p in pairs.values() if p["ours"] == ours and p["peer"].startswith("lmdb")}
            if lmdb:
                # The fair peer is LMDB at its fastest setting: the lowest ratio of ours to it.
                best_peer = min(lmdb, key=lmdb.get)
                rows.append([f"append {extra['size']}, {ours} / LMDB (fastest: {best_peer})",
                             fmt_x(lmdb[best_peer]), f"≥ {fmt_x(APPEND_LMDB_TARGET)}",
                             verdict(lmdb[best_peer], APPEND_LMDB_TARGET)])
    for b in groups.get("build-paired", []):
        extra = b["extra_info"]
        for pair in extra["pairs"].values():
            rows.append([f"build ({extra['size']}), ours / kafka-python", fmt_x(pair["median"]),
                         f"≥ {fmt_x(BUILD_KAFKA_TARGET)}", verdict(pair["median"], BUILD_KAFKA_TARGET)])
        if extra["size"] == "none":
            rate = extra["records_per_s"]["ours"]
            rows.append(["build (none), ours records/s (paired runs)", fmt_rate(rate, "records"),
                         "≥ 5 M records/s", verdict(rate, BUILD_RECORDS_PER_S_TARGET)])
    for b in groups.get("build", []):
        extra = b["extra_info"]
        if extra.get("builder") == "ours" and extra.get("compression") == "none":
            rate = extra["records"] / b["stats"]["median"]
            rows.append(["build (none), ours records/s (pedantic case)", fmt_rate(rate, "records"),
                         "≥ 5 M records/s", verdict(rate, BUILD_RECORDS_PER_S_TARGET)])
    if not rows:
        return []
    return ["## Targets (paired medians)", ""] + table(["measure", "measured", "target", ""], rows) + [""]


GROUP_ORDER = ["append-paired", "append-16KiB", "append-1MiB", "build-paired", "build"]


def render(data: dict) -> str:
    groups: dict[str, list[dict]] = {}
    for b in data.get("benchmarks", []):
        groups.setdefault(b.get("group") or "ungrouped", []).append(b)
    lines = ["# Benchmark results", "",
             "Generated by `benchmarks/report.py` from pytest-benchmark's JSON "
             "(`python -m pytest benchmarks --benchmark-only --benchmark-json=...`). "
             "fsync off everywhere; ratios are throughput(ours) / throughput(peer).", ""]
    lines += machine_lines(data) + [""]
    lines += summary(groups)
    lines += ["## Groups", ""]
    for name in sorted(groups, key=lambda g: (GROUP_ORDER.index(g) if g in GROUP_ORDER else len(GROUP_ORDER), g)):
        benches = groups[name]
        if all(b.get("extra_info", {}).get("paired") for b in benches):
            lines += paired_group(name, benches)
        else:
            lines += plain_group(name, benches)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="pytest-benchmark --benchmark-json output")
    parser.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"),
                        help="markdown file to write (default: benchmarks/RESULTS.md); '-' for stdout only")
    args = parser.parse_args(argv)
    with open(args.json) as f:
        data = json.load(f)
    text = render(data)
    if args.out != "-":
        with open(args.out, "w") as f:
            f.write(text)
        print(f"wrote {args.out}", file=sys.stderr)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
