#!/usr/bin/env python3
"""Issue 33's table from pytest-benchmark's JSON: every figure through the wire as a ratio with
its spread, the goal and a verdict, the broker's CPU per MB, and charts (PNG, matplotlib).

    python benchmarks/wire_table.py BENCH.json [--charts DIR]

`./dev bench` runs it last: it prints the table and writes DIR/wire-throughput.png,
DIR/wire-latency.png and DIR/wire-ratios.png (DIR: beside RESULTS.md).  report.py puts the same
table in RESULTS.md.  A ratio is the median of the paired runs' ratios (A B, then B A), shown
with the lowest and highest of them and their count: "0.12x (0.11-0.13, n 3)".
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# (figure, group, pair, goal, size): pair "ours / peer" in the group's extra_info["pairs"];
# size picks one case of a parametrized group (extra_info["size"]).  Issue 33's rows in order.
ROWS = [
    ("produce, 1 partition, acks=1 / engine append (confluent-kafka)", "wire-produce-paired", "wire1 / engine", 0.5, None),
    ("produce, 1 partition, acks=1 / engine append (C client)", "wire-produce-paired", "c-wire1 / engine", 0.5, None),
    ("produce, 8 partitions, 4 connections / engine (C client)", "wire-produce8-paired", "c-wire8 / engine8", 0.6, None),
    ("produce, 8 partitions, 4 connections / engine (confluent-kafka)", "wire-produce8-paired", "wire8 / engine8", 0.6, None),
    ("fetch from offset 1 / loopback TCP (confluent-kafka)", "wire-fetch-paired", "wire / loopback", 0.5, None),
    ("fetch from offset 1 / loopback TCP (C client)", "wire-fetch-paired", "c-wire / loopback", 0.5, None),
    ("acks=all, RF 3 on 3 brokers / acks=all on 1 broker", "wire-cluster-paired", "rf3 / single", 0.5, None),
    ("RF 3 cluster with 100 idle partitions / none", "wire-idle-paired", "idle100 / none", 0.95, None),
    # The engine rows: bench_append's per-call group (docs/performance.md "The append figure").
    ("engine: one small batch per append_as_follower / os.write", "append-percall-paired", "ours-follower / os.write",
     0.5, "small"),
    ("engine: 16 KiB batches one per call / file.write", "append-percall-paired", "ours-follower / file.write", 0.9,
     "16KiB"),
]
EVENT_LOOP = [("broker on uvloop / asyncio's loop: produce", "produce-uvloop / produce-asyncio"),
              ("broker on uvloop / asyncio's loop: fetch", "fetch-uvloop / fetch-asyncio"),
              ("broker on uvloop / asyncio's loop: latency p50 (t asyncio / t uvloop)", "p50-uvloop / p50-asyncio")]
# bench_floor.py: server CPU per 16 KiB Produce request, the broker against a bare server
# (append + a fixed answer) and the engine in process: whether one core is the limit.
FLOOR = [("floor: broker CPU a request / bare server's on the same loop, uvloop (append + answer)",
          "broker / floor-uvloop"),
         ("floor: bare asyncio server / engine append, CPU a request (the most one process reaches)", "floor / engine"),
         ("floor: bare uvloop server / engine append, CPU a request", "floor-uvloop / engine"),
         ("floor: broker / engine append, CPU a request", "broker / engine")]
# bench_fetch_floor.py: what the broker itself serves a fetching consumer (a raw Fetch v16 client,
# the consumer's default max bytes) against its own answers sent back over loopback TCP.
FETCH_FLOOR = [("fetch floor: broker / loopback TCP of its answers (raw Fetch v16 client, 1 MiB a partition)",
                "broker / loopback", 0.5),
               ("fetch floor: broker / the same answers by os.sendfile from a file", "broker / sendfile", None)]
LATENCY_GOALS = {"p50": 200e-6, "p99": 1e-3}
CPU_GROUPS = ("wire-produce-paired", "wire-produce8-paired", "wire-fetch-paired", "wire-event-loop-paired",
              "wire-fetch-floor-paired")


def groups_of(data: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for b in data.get("benchmarks", []):
        out.setdefault(b.get("group") or "ungrouped", []).append(b)
    return out


def _find(groups, group: str, pair: str, size: str | None):
    for b in groups.get(group, []):
        extra = b.get("extra_info", {})
        if size is not None and extra.get("size") != size:
            continue
        if pair in extra.get("pairs", {}):
            return extra, extra["pairs"][pair]
    return None, None


def spread(ratios: list[float]) -> str:
    med = statistics.median(ratios)
    if len(ratios) == 1:
        return f"{med:.2f}x (n 1)"
    return f"{med:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}, n {len(ratios)})"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} us" if seconds < 1e-3 else f"{seconds * 1e3:,.1f} ms"


def rows(groups: dict) -> list[list[str]]:
    """[figure, measured, goal, verdict] for every row of issue 33's table."""
    out = []
    for figure, group, pair, goal, size in ROWS:
        extra, found = _find(groups, group, pair, size)
        if found is None:
            why = next((b["extra_info"].get("c_client") for b in groups.get(group, [])), None)
            skipped = pair.startswith("c-") and why not in (None, "built")
            out.append([figure, f"skipped: {why}" if skipped else "not measured in this run", f">= {goal:g}x", "-"])
            continue
        ours = found["ours"]
        rate = extra.get("throughput_MBps", {}).get(ours)
        text = spread(found["ratios"]) + (f"; {rate:,.0f} MB/s" if rate else "")
        if "idle_partitions" in extra:
            text += f"; {extra['idle_partitions']} idle partitions"
        out.append([figure, text, f">= {goal:g}x", "met" if found["median"] >= goal else "not met"])
    for b in groups.get("wire-produce-latency", []):
        extra = b["extra_info"]
        text = f"{_us(extra['p50'])} / {_us(extra['p99'])} (n {extra.get('n', '?')})"
        met = extra["p50"] <= LATENCY_GOALS["p50"] and extra["p99"] <= LATENCY_GOALS["p99"]
        out.append(["produce latency, one record at a time (acks=1, linger 0): p50 / p99", text,
                    "p50 <= 200 us, p99 <= 1 ms", "met" if met else "not met"])
    for figure, pair in EVENT_LOOP:
        extra, found = _find(groups, "wire-event-loop-paired", pair, None)
        if found is not None:
            out.append([f"{figure} ({extra.get('client', '?')})", spread(found["ratios"]), "> 1: uvloop pays", "-"])
    for figure, pair in FLOOR:
        extra, found = _find(groups, "wire-floor-paired", pair, None)
        if found is not None:
            ours, peer = pair.split(" / ")
            per = extra.get("cpu_per_request_us", {})
            text = spread(found["ratios"]) + (f"; {per[ours]:,.0f} / {per[peer]:,.0f} us" if ours in per and peer in per else "")
            out.append([figure, text, "(what bounds the produce rows)", "-"])
    for figure, pair, goal in FETCH_FLOOR:
        extra, found = _find(groups, "wire-fetch-floor-paired", pair, None)
        if found is not None:
            ours = found["ours"]
            rate = extra.get("throughput_MBps", {}).get(ours)
            cpu = extra.get("server_cpu_s_per_GB", {})
            text = spread(found["ratios"]) + (f"; {rate:,.0f} MB/s" if rate else "")
            if ours in cpu and found["peer"] in cpu:
                text += f"; server CPU {cpu[ours]:.2f} / {cpu[found['peer']]:.2f} s a GB"
            if goal is None:
                out.append([figure, text, "(a server that only sends them)", "-"])
            else:
                out.append([figure, text, f">= {goal:g}x", "met" if found["median"] >= goal else "not met"])
    return out


def cpu_rows(groups: dict) -> list[list[str]]:
    """[run, broker CPU ms per MB, its share of one core, the clients' share, MB/s] for every wire
    run that kept the broker's CPU seconds (wirelib.Side.timed)."""
    out = []
    for group in CPU_GROUPS:
        for b in groups.get(group, []):
            extra = b["extra_info"]
            mb = extra.get("bytes", 0) / 1e6
            for name, kept in extra.get("kept", {}).items():
                runs = [k for k in kept if "broker_cpu_s" in k]
                if not runs or not mb:
                    continue
                cpu = statistics.median(k["broker_cpu_s"] for k in runs)
                share = statistics.median(k["broker_cpu_s"] / k["wall_s"] for k in runs if k["wall_s"] > 0)
                clients = [k["client_cpu_s"] / k["wall_s"] for k in runs if "client_cpu_s" in k and k["wall_s"] > 0]
                rate = extra.get("throughput_MBps", {}).get(name)
                out.append([f"{group}: {extra['labels'].get(name, name)}", f"{cpu / mb * 1e3:.1f}", f"{share:.2f}",
                            f"{statistics.median(clients):.2f}" if clients else "-", f"{rate:,.0f}" if rate else "-"])
    return out


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in body]


def section(groups: dict) -> list[str]:
    """Markdown: issue 33's table and the broker's CPU (empty when no wire group ran)."""
    table = rows(groups)
    if not any(r[1] != "not measured in this run" for r in table):
        return []
    out = ["## Through the wire (issue 33)", "",
           "Paired medians with (lowest-highest, runs); throughput is the median run's.", ""]
    out += _table(["figure", "measured", "goal", ""], table) + [""]
    cpu = cpu_rows(groups)
    if cpu:
        out += ["Broker CPU (utime + stime of the broker process over each run): ms of CPU per MB moved, and "
                "CPU seconds / wall seconds (1.00: the broker used one whole core, its limit while it is one "
                "Python process); the clients' CPU seconds / wall seconds beside it (the two together near "
                "2.00: the machine's two cores are the bound).", ""]
        out += _table(["run", "CPU ms / MB", "broker's share of a core", "clients' share", "MB/s"], cpu) + [""]
    return out


# --- charts --------------------------------------------------------------------------------------

THROUGHPUT_GROUPS = ("wire-produce-paired", "wire-produce8-paired", "wire-fetch-paired", "wire-fetch-floor-paired", "wire-cluster-paired",
                     "wire-idle-paired")
COLOURS = {"ours": "tab:blue", "peer": "tab:grey", "limit": "tab:green", "ceiling": "tab:green"}


def charts(groups: dict, directory: str) -> list[str]:
    """wire-throughput.png, wire-latency.png and wire-ratios.png in `directory`; their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    bars = []
    for group in THROUGHPUT_GROUPS:
        for b in groups.get(group, []):
            extra = b["extra_info"]
            for name, rate in extra.get("throughput_MBps", {}).items():
                bars.append((f"{group.removeprefix('wire-').removesuffix('-paired')}: {extra['labels'][name]}",
                             rate, COLOURS.get(extra["roles"][name], "tab:grey")))
    if bars:
        fig, ax = plt.subplots(figsize=(10, 0.35 * len(bars) + 1.5))
        ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("MB/s, log scale (median of the paired runs; blue: through the broker, grey: engine, "
                      "green: loopback)")
        ax.set_title("Throughput through the wire and its peers")
        written.append(_save(fig, directory, "wire-throughput.png"))
    lat = []
    for b in groups.get("wire-produce-latency", []):
        lat.append(("produce one by one (asyncio loop)", b["extra_info"]["p50"], b["extra_info"]["p99"]))
    for b in groups.get("wire-event-loop-paired", []):
        med = b["extra_info"].get("median_seconds", {})
        for name in ("p50-asyncio", "p50-uvloop"):
            if name in med:
                lat.append((f"p50, {name.split('-')[1]} loop (event-loop pairs)", med[name], None))
    if lat:
        fig, ax = plt.subplots(figsize=(9, 0.6 * len(lat) + 1.5))
        labels = [x[0] for x in lat]
        ax.barh(labels, [x[1] * 1e6 for x in lat], color="tab:blue", label="p50")
        ax.barh(labels, [(x[2] or x[1]) * 1e6 - x[1] * 1e6 for x in lat], left=[x[1] * 1e6 for x in lat],
                color="tab:orange", label="p99 (above p50)")
        ax.axvline(LATENCY_GOALS["p50"] * 1e6, color="tab:blue", linestyle="--", linewidth=1)
        ax.axvline(LATENCY_GOALS["p99"] * 1e6, color="tab:orange", linestyle="--", linewidth=1)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("microseconds, log scale, produce() to its delivery report (dashed: the goals)")
        ax.legend(loc="lower right")
        ax.set_title("Produce latency, one 1 KiB record at a time, acks=1")
        written.append(_save(fig, directory, "wire-latency.png"))
    ratio_rows = []
    for figure, group, pair, goal, size in ROWS:
        _, found = _find(groups, group, pair, size)
        if found is not None:
            ratio_rows.append((figure, found["median"], min(found["ratios"]), max(found["ratios"]), goal))
    if ratio_rows:
        fig, ax = plt.subplots(figsize=(10, 0.4 * len(ratio_rows) + 1.5))
        names = [r[0] for r in ratio_rows]
        ax.barh(names, [r[1] for r in ratio_rows], color="tab:blue",
                xerr=[[r[1] - r[2] for r in ratio_rows], [r[3] - r[1] for r in ratio_rows]])
        ax.scatter([r[4] for r in ratio_rows], names, marker="|", s=300, color="tab:red", label="goal", zorder=3)
        ax.invert_yaxis()
        ax.set_xlabel("ratio (paired median, whiskers: lowest and highest pair)")
        ax.legend(loc="lower right")
        ax.set_title("Issue 33: ratios against their goals")
        written.append(_save(fig, directory, "wire-ratios.png"))
    return written


def _save(fig, directory: str, name: str) -> str:
    path = os.path.join(directory, name)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="pytest-benchmark --benchmark-json output")
    parser.add_argument("--charts", metavar="DIR", help="write the PNG charts there (default: none)")
    args = parser.parse_args(argv)
    with open(args.json) as f:
        groups = groups_of(json.load(f))
    lines = section(groups)
    print("\n".join(lines) if lines else "wire_table: no wire benchmark in this run")
    if args.charts:
        try:
            for path in charts(groups, args.charts):
                print(f"wrote {path}", file=sys.stderr)
        except ImportError:
            print("wire_table: matplotlib is not installed ([bench] extra): no charts", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
