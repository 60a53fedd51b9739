#!/usr/bin/env python3
"""Turn pytest-benchmark's JSON into a markdown report of ratios against the design targets.

    python -m pytest benchmarks --benchmark-only --benchmark-json=BENCH.json
    python benchmarks/report.py BENCH.json [--out benchmarks/RESULTS.md]

For each group: a table of cases (median time, throughput from extra_info's bytes or
records and the median, throughput relative to the ceiling or to ours) and the ratios
ours / each peer.  Paired groups ("*-paired", where ours and each peer ran back to back,
A B then B A) give the medians of the per-pair ratios: those are the numbers the design
targets are judged on, and the summary at the top lists them.

Ratios are throughput(ours) / throughput(peer), so > 1 means ours is faster; against a
ceiling or a limit (file.write, mmap memcpy, raw CRC-32C, a syscall floor) they are shown as
percentages.  Groups measured in time rather than bytes (truncate_to, end_offset_for, point
reads, elections, reopen, memory) have their own tables: latencies as p50 / p99, costs at
several log sizes with the growth from the smallest to the largest.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wire_table  # noqa: E402  (issue 33's table, beside this file)

# (group, peer role or name, minimum ratio, description) -- docs/design.md "Performance targets"
APPEND_CEILING_TARGET = 0.90
APPEND_LMDB_TARGET = 1.5
BUILD_KAFKA_TARGET = 10.0
BUILD_RECORDS_PER_S_TARGET = 5_000_000
READ_SEQ_LMDB_TARGET = 1.0              # sequential fetch >= LMDB's read-all
POINT_READ_P50_TARGET = 3e-6            # point read by offset p50 <= 3 µs
RECOVERY_CRC32C_TARGET = 0.5            # recovery scan >= 50 % of the crc32c package
# Issue 18, against Kafka's own classes in a warm JVM (bench_jvm.py) and the machine's limits.
JVM_TARGETS = {
    ("jvm-append-paired", "ours-follower", "kafka"): 1.1,
    ("jvm-append-paired", "ours-follower", "file.write"): 0.9,
    ("jvm-append-paired", "ours-batches64", "lmdb-writemap"): 1.5,
    ("jvm-build-paired", "ours", "kafka"): 1.2,
    ("jvm-read-paired", "ours", "kafka"): 1.0,
}
# Issue 33's engine rows (bench_append's per-call figure): a small batch per call vs os.write,
# a 16 KiB batch per call vs file.write.
PERCALL_TARGETS = {
    ("append-percall-paired", "ours-follower", "os.write"): 0.5,
    ("append-percall-paired", "ours-follower", "file.write"): 0.9,
}
# "never grows with log size": cost at the largest size / at the smallest, with room for noise
TRUNCATE_FLAT_TOLERANCE = 1.5
# "grows with log(epochs)": p50 growth at most this times log(N_max) / log(N_min)
EPOCH_LOG_TOLERANCE = 1.5
# peak anonymous memory: growth at the largest log minus growth at the smallest
MEMORY_ANON_TOLERANCE = 4 << 20
LIMIT_ROLES = ("ceiling", "limit")


# ---- formatting --------------------------------------------------------------------------

def fmt_time(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
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


def volume_text(extra: dict, unit: str) -> str:
    """What one round did, from a benchmark's extra_info, naming only what the benchmark recorded
    (a missing count is left out, never printed as None)."""
    batches, batch_bytes = extra.get("batches"), extra.get("batch_bytes")
    per_batch = extra.get("records_per_batch")
    if unit == "bytes":
        text = f"{(extra.get('bytes') or 0) / 2**20:.0f} MiB"
        if batches:
            text += f" in {batches} batches" + (f" of {batch_bytes} bytes" if batch_bytes else "")
        return text + (f" ({per_batch} records of 100 bytes each)" if per_batch else "")
    shape = [f"{batches} batches" + (f" of {per_batch}" if per_batch else "")] if batches else []
    shape.append(f"{extra.get('value_bytes', 100)}-byte values")
    records = extra.get("records")
    return (f"{records} records" if records is not None else "records") + f" ({', '.join(shape)})"


def fmt_ratio(x: float | None) -> str:
    """A ratio to the ceiling, as a percentage."""
    return "–" if x is None else f"{x:.0%}"


def fmt_x(x: float) -> str:
    return f"{x:.2f}×"


PERCENT_GROUPS = ("recovery-paired",)     # targets stated as a share of the peer's speed


def fmt_for(pair: dict, group: str = ""):
    """Percent against a ceiling or limit (or in a group whose target is a share), × against a peer."""
    return fmt_ratio if pair.get("peer_role") in LIMIT_ROLES or group in PERCENT_GROUPS else fmt_x


def fmt_bytes(n: float) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / 1024:.0f} KiB"


def verdict_max(value: float, maximum: float) -> str:
    return "meets" if value <= maximum else "**misses**"


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
    if bench.get("session_seconds"):
        lines.append(f"- Whole run (pytest session, collection to JSON): {bench['session_seconds'] / 60:.1f} min")
    scale = bench.get("sizes")
    if scale:
        lines.append(
            f"- Scale: append {fmt_bytes(scale['append_total_bytes'])} a run (records path "
            f"{fmt_bytes(scale['records_total_bytes'])}); read, recovery and catch-up on a "
            f"{fmt_bytes(scale['big_log_bytes'])} log; memory at "
            + ", ".join(fmt_bytes(x) for x in scale["memory_log_sizes"])
            + "; truncate_to at " + ", ".join(fmt_bytes(x) for x in scale["truncate_log_sizes"])
            + f"; {scale['reopen_partitions']} partitions reopened; {scale['elections']} elections; "
            f"K = {scale['paired_rounds']} pairs ({scale['slow_paired_rounds']} with slow peers). "
            "1 GiB wherever the issue asks for it; scaled down, to stay within 10 minutes: the records path "
            "(kafka-python builds ~0.3 M records/s), the divergent follower (prefix, cut, refetch = "
            + " / ".join(fmt_bytes(x) for x in scale["diverge_bytes"]) + ") and the number of catch-up pairs (3)")
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
    volumes = {b.get("extra_info", {}).get("bytes") for b in benches}
    if len(volumes) > 1:        # e.g. the records path on a smaller volume: say which case did what
        for row, b in zip(rows, sorted(benches, key=lambda b: -rates[b["name"]])):
            extra = b.get("extra_info", {})
            row[0] = f"{row[0]} ({fmt_bytes(extra.get('bytes', 0))}, {extra.get('batches')} batches)"
        benches = sorted(benches, key=lambda b: -(b.get("extra_info", {}).get("bytes") or 0))
    first = benches[0].get("extra_info", {})
    work = volume_text(first, unit)
    mixed = " (cases marked with another volume wrote that instead)" if len(volumes) > 1 else ""
    out = [f"### {name}", "", f"Per round: {work}{mixed}. Median and min over the rounds; throughput from the median.", ""]
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
                if (o["extra_info"].get("peer") == "ours-records") != (p["extra_info"].get("peer") == "kafka-python-log"):
                    continue        # the records path is compared with the records path only
                f = fmt_ratio if p["extra_info"].get("role") in LIMIT_ROLES else fmt_x
                ratio_rows.append([case_label(o), case_label(p), f(rates[o["name"]] / rates[p["name"]])])
        out += table(["ours", "peer", "ours / peer"], ratio_rows)
    settings = {case_label(b): b["extra_info"].get("setting") for b in benches if b.get("extra_info", {}).get("setting")}
    if settings:
        out += ["", "Settings:", ""] + [f"- {label}: `{s}`" for label, s in settings.items()]
    return out + [""]


def target_for(group: str, pair: dict) -> float | None:
    if group == "append-paired":
        if pair.get("peer_role") == "ceiling":
            return APPEND_CEILING_TARGET
        return APPEND_LMDB_TARGET if pair.get("peer", "").startswith("lmdb") else None
    if group == "build-paired":
        return BUILD_KAFKA_TARGET
    if group == "read-seq-paired" and (pair.get("ours"), pair.get("peer")) == ("ours", "lmdb"):
        return READ_SEQ_LMDB_TARGET
    if group == "recovery-paired" and pair.get("peer") == "crc32c":
        return RECOVERY_CRC32C_TARGET
    key = (group, pair.get("ours"), pair.get("peer"))
    return PERCALL_TARGETS.get(key) or JVM_TARGETS.get(key)


GROUP_NOTES = {
    "append-percall-paired": "One batch a call against one write(2) of the same bytes a batch (os.write for small "
                             "batches, file.write for 16 KiB ones), primed, paired, alternated: docs/performance.md "
                             "\"The append figure\".",
    "read-seq-paired": "One pass over the whole log per run, everything in the page cache; bench_read's docstring "
                       "says what each reader does.",
    "read-point-paired": "Uniformly random offsets, each read timed alone; the pair ratio is p50(peer) / p50(ours) "
                         "(> 1: ours is faster).",
    "recovery-paired": "Recovery (CRC check of every batch + rebuild of both indexes, fresh index files) against "
                       "CRC-32C alone over the same bytes.",
    "replication-catchup-paired": "An empty follower catches up the whole log in process, in a fresh directory "
                                  "every run (set-up and clean-up untimed).",
    "replication-diverge-paired": "A follower with a divergent tail is truncated to the common prefix and refetches "
                                  "the leader's tail; ratio t(offsets-for-epoch) / t(diverging-epoch).",
    "elections-paired": "N leader elections with fsync on; ratio t(sync) / t(deferred): how many times cheaper the "
                        "deferred epoch flush makes them.",
    "logdir-reopen-paired": "Clean reopen of a log dir; the ratio against the syscall floor is ours' share of it.",
    "logdir-reopen-sealed-paired": "Clean reopen of partitions of 20 segments: sealed segments opened at first use "
                                   "(the default) against each checked at the open, and against the same partitions "
                                   "with one segment (1.0: the sealed segments cost the open nothing).",
    "logdir-reopen-threads-paired": "The same reopen on 4 recovery threads against 1 (ratio t(1) / t(4)), with the "
                                    "page cache warm, and dropped before every run (cold; root only).",
    "wire-floor-paired": "bench_floor.py: each run's time is the server process's CPU seconds (utime + stime) for the "
                         "same prebuilt 16 KiB Produce requests (the engine's: its process time), so a ratio compares "
                         "CPU per request; what bounds the produce rows (docs/performance.md, the produce floor).",
    "wire-fetch-floor-paired": "bench_fetch_floor.py: a raw client fetches a full topic with prebuilt Fetch v16 frames "
                               "(librdkafka's version and default max bytes, one request in flight) from the broker, "
                               "and the same answers, recorded, from a bare loopback server (from memory; by "
                               "os.sendfile); each run keeps the server's CPU seconds: what the broker itself can "
                               "serve, the client costing about what the loopback reader costs.",
    "jvm-append-paired": "Against Kafka's FileRecords.append (kafka-clients, warm JVM, timed inside the JVM) and the "
                         "machine's limits; 16 KiB batches, fsync off, close timed.",
    "jvm-build-paired": "Against Kafka's MemoryRecordsBuilder (warm JVM): uncompressed batches of 100-byte values.",
    "jvm-read-paired": "1 MiB fetches over the big log, every batch CRC-checked, against Kafka's FileRecords slice "
                       "read (each batch loaded and ensureValid'd, warm JVM).",
}


def paired_group(name: str, benches: list[dict]) -> list[str]:
    out = [f"### {name}", ""]
    out.append("Ours and each peer run back to back (A B, then B A on the next round)"
               + (", each run writing fresh files" if name.startswith("append") else "")
               + (" and preceded by an untimed run of the same peer (primed)"
                  if any(b["extra_info"].get("primed") for b in benches) else "")
               + "; the ratio is t(peer) / t(ours) of one pair, i.e. throughput(ours) / throughput(peer). "
               "Median, min and max over the pairs.")
    if name in GROUP_NOTES:
        out.append(GROUP_NOTES[name])
    out.append("")
    for b in benches:
        extra = b["extra_info"]
        unit = extra.get("unit", "bytes")
        labels = extra.get("labels", {})
        label = extra.get("size") or b["name"]
        if unit in ("bytes", "records"):
            out.append(f"**{label}**: {volume_text(extra, unit)} per run.")
        elif unit == "latency":
            out.append(f"**{label}**: {extra.get('reads')} random offsets per run over "
                       f"{fmt_bytes(extra.get('bytes', 0))}" + (f" ({extra['batches']} batches)" if extra.get("batches")
                                                                 else "")
                       + f"; timer overhead (included in every sample) {fmt_time(extra.get('timer_overhead_s', 0))}.")
        else:
            out.append(f"**{label}**" + (f": {extra['detail']}" if extra.get("detail") else "") + ".")
        out.append("")
        rows = []
        for pair in extra["pairs"].values():
            ratios = pair["ratios"]
            target = target_for(name, pair)
            f = fmt_for(pair, name)
            rows.append([pair["label"], f(pair["median"]), f(min(ratios)), f(max(ratios)),
                         len(ratios), f"≥ {f(target)}" if target else "–",
                         verdict(pair["median"], target) if target else "–"])
        out += table(["ours / peer", "median", "min", "max", "pairs", "target", ""], rows)
        out.append("")
        rate_rows = []
        if unit == "latency":
            lat = extra.get("latency", {})
            for peer in sorted(lat, key=lambda p: lat[p]["p50"]):
                v = lat[peer]
                rate_rows.append([labels.get(peer, peer), v["runs"], v["reads_per_run"], fmt_time(v["p50"]),
                                  fmt_time(v["p99"]), fmt_time(v["mean"])])
            out += table(["reader", "runs", "reads a run", "p50", "p99", "mean"], rate_rows)
        elif unit == "seconds":
            per = extra.get("per_election_s") or extra.get("per_partition_s")
            per_header = "per election" if extra.get("per_election_s") else "per partition"
            for peer, median in sorted(extra["median_seconds"].items(), key=lambda kv: kv[1]):
                row = [labels.get(peer, peer), len(extra["times"][peer]), fmt_time(median)]
                if per:
                    row.append(fmt_time(per[peer]))
                rate_rows.append(row)
            out += table(["run", "runs", "median time"] + ([per_header] if per else []), rate_rows)
        else:
            rate_key = "throughput_MBps" if unit == "bytes" else "records_per_s"
            for peer, median in sorted(extra["median_seconds"].items(), key=lambda kv: kv[1]):
                rate = extra[rate_key][peer]
                rate_rows.append([labels.get(peer, peer) if labels else peer, len(extra["times"][peer]),
                                  fmt_time(median), fmt_rate(rate * 1e6 if unit == "bytes" else rate, unit)])
            out += table(["run", "runs", "median time", "throughput"], rate_rows)
        settings = extra.get("settings") or {}
        if settings and name not in ("append-paired",):
            out += ["", "Settings:", ""] + [f"- {labels.get(k, k)}: `{v}`" for k, v in settings.items()]
        out.append("")
    return out


# ---- groups measured in time or memory ---------------------------------------------------

def _growth(values: list[tuple[float, float]]) -> float | None:
    """value at the largest x / value at the smallest x."""
    if len(values) < 2:
        return None
    values = sorted(values)
    return values[-1][1] / values[0][1] if values[0][1] else None


def truncate_rows(benches: list[dict]) -> dict[str, dict]:
    """Per segment config: sizes with their median time, and the growth t(largest) / t(smaller)
    as the median over pairs (1 / the median of t(smaller) / t(largest), an odd count)."""
    out = {}
    for b in benches:
        extra = b["extra_info"]
        logs = extra["logs"]
        sizes = sorted(logs, key=lambda n: logs[n]["log_bytes"])
        growth = {pair["peer"]: 1 / pair["median"] for pair in extra["pairs"].values()}
        out[extra["segments_config"]] = {"sizes": sizes, "logs": logs, "median": extra["median_seconds"],
                                         "runs": {k: len(v) for k, v in extra["times"].items()}, "growth": growth,
                                         "pairs": extra["pairs"]}
    return out


def truncate_group(name: str, benches: list[dict]) -> list[str]:
    out = [f"### {name}", "",
           "PartitionLog.truncate_to removing the same last batches of logs of growing size (appended back, "
           "untimed, after each run); the largest log paired with each smaller one (A B, then B A). "
           "Growth: median over the pairs of t(largest) / t(smaller).", ""]
    rows = []
    for config, item in truncate_rows(benches).items():
        largest = item["sizes"][-1]
        for size in item["sizes"]:
            log = item["logs"][size]
            growth = item["growth"].get(size)
            rows.append([config, fmt_bytes(log["log_bytes"]), log["segments"], fmt_bytes(log["truncated_bytes"]),
                         item["runs"][size], fmt_time(item["median"][size]),
                         "–" if size == largest else f"{growth:.2f}× (over {len(item['pairs'][f'{largest} / {size}']['ratios'])} pairs)"])
    out += table(["segments", "log size", "segment files", "truncated", "runs", "median", "largest log / this one"],
                 rows)
    return out + [""]


def end_offset_group(name: str, benches: list[dict]) -> list[str]:
    import math
    out = [f"### {name}", "",
           "LeaderEpochCache.end_offset_for(epoch, log_end_offset) on a cache of N epochs, random epochs (half "
           "cached, half between two cached ones), each call timed alone; p50 is the lowest of the runs' p50s, "
           "p99 and mean the median of the runs'.", ""]
    benches = sorted(benches, key=lambda b: b["extra_info"]["epochs"])
    base = benches[0]["extra_info"]
    rows = []
    for b in benches:
        extra = b["extra_info"]
        lat = extra["latency"]
        log_ratio = math.log(extra["epochs"]) / math.log(base["epochs"])
        rows.append([f"{extra['epochs']:,}", extra["queries"], lat["runs"], fmt_time(lat["p50"]), fmt_time(lat["p99"]),
                     fmt_time(lat["mean"]), f"{lat['p50'] / base['latency']['p50']:.2f}×", f"{log_ratio:.2f}×",
                     f"{extra['epochs'] / base['epochs']:,.0f}×"])
    out += table(["epochs", "queries a run", "runs", "p50", "p99", "mean", "p50 vs fewest",
                  "log(N) ratio", "N ratio"], rows)
    overhead = benches[0]["extra_info"].get("timer_overhead_s")
    if overhead:
        out += ["", f"Timer overhead included in every sample: {fmt_time(overhead)}."]
    return out + [""]


def memory_group(name: str, benches: list[dict]) -> list[str]:
    out = [f"### {name}", "",
           "One subprocess per case (bench_memory's docstring). anon: peak RssAnon - baseline (sampled every 2 ms); "
           "HWM: VmHWM after the case (reset before it) - baseline VmRSS, which counts mapped file pages once "
           "touched; file: RssFile + RssShmem growth (the mappings' resident pages).", ""]
    rows = []
    for b in sorted(benches, key=lambda b: (b["extra_info"]["mode"], b["extra_info"]["log_bytes"])):
        extra = b["extra_info"]
        rows.append([extra["mode"], fmt_bytes(extra["log_bytes"]), fmt_bytes(extra["anon_growth"]),
                     fmt_bytes(extra["hwm_growth"]), fmt_bytes(extra["file_growth"]),
                     fmt_bytes(extra["baseline"].get("VmRSS", 0)), fmt_time(extra["seconds"]), extra["samples"]])
    out += table(["case", "log", "anon growth", "HWM growth", "file pages", "baseline RSS", "time", "samples"], rows)
    return out + [""]


def memory_by_mode(benches: list[dict]) -> dict[str, list[tuple[int, dict]]]:
    out: dict[str, list] = {}
    for b in benches:
        extra = b["extra_info"]
        out.setdefault(extra["mode"], []).append((extra["log_bytes"], extra))
    for v in out.values():
        v.sort(key=lambda r: r[0])
    return out


def _partition_memory_rows(extra: dict) -> list[list[str]]:
    one, sealed = extra["one_segment"], extra["per_sealed_segment"]
    return [[f"state per open partition at {extra['partitions']:,} partitions, one segment: anon / fds / maps",
             f"{one['anon_bytes']:,.0f} B / {one['fds']:.2f} / {one['maps']:.2f}"],
            ["added by each sealed segment (4 segments vs 1): anon / fds / maps",
             f"{sealed['anon_bytes']:,.0f} B / {sealed['fds']:.2f} / {sealed['maps']:.2f}"]]


def partition_memory_group(name: str, benches: list[dict]) -> list[str]:
    out = [f"### {name}", "", "Anonymous memory, descriptors and mappings a `LogDir.open` adds per partition "
           "(a child process; `benchmarks/bench_partitions_memory.py`).", ""]
    for b in benches:
        out += table(["measure", "per partition"], _partition_memory_rows(b["extra_info"]))
    return out + [""]


def latency_group(name: str, benches: list[dict]) -> list[str]:
    """Cases that record a latency distribution (unit "latency": p50, p99, mean over n samples)."""
    out = [f"### {name}", "", "Each sample timed alone; p50, p99 and mean over the samples of the run.", ""]
    rows = [[case_label(b), b["extra_info"].get("n", "–"), fmt_time(b["extra_info"]["p50"]),
             fmt_time(b["extra_info"]["p99"]), fmt_time(b["extra_info"]["mean"])] for b in benches]
    return out + table(["case", "samples", "p50", "p99", "mean"], rows) + [""]


CUSTOM_GROUPS = {"truncate-paired": truncate_group, "epoch-end-offset": end_offset_group, "memory": memory_group,
                 "partition-memory": partition_memory_group, "wire-produce-latency": latency_group}


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
    rows += summary_new_groups(groups)
    if not rows:
        return []
    return ["## Targets (paired medians)", ""] + table(["measure", "measured", "target", ""], rows) + [""]


def _pair_rows(groups, group: str, title) -> list[list[str]]:
    rows = []
    for b in groups.get(group, []):
        extra = b["extra_info"]
        for pair in extra["pairs"].values():
            target = target_for(group, pair)
            f = fmt_for(pair, group)
            rows.append([title(extra, pair), f(pair["median"]), f"≥ {f(target)}" if target else "–",
                         verdict(pair["median"], target) if target else "–"])
    return rows


def summary_new_groups(groups: dict[str, list[dict]]) -> list[list[str]]:
    import math
    rows = []
    for b in groups.get("append-paired", []):       # peers without a design target: informational
        extra = b["extra_info"]
        for pair in extra["pairs"].values():
            if pair["peer"] in ("sqlite", "kafka-python-log"):
                rows.append([f"append {extra['size']}, {pair['ours']} / {pair['peer']}", fmt_x(pair["median"]), "–", "–"])
    rows += _pair_rows(groups, "append-percall-paired", lambda e, p: f"append {e['size']} one per call, {p['ours']} / {p['peer']}")
    rows += _pair_rows(groups, "read-seq-paired", lambda e, p: f"sequential fetch, {p['ours']} / {p['peer']}")
    for b in groups.get("read-point-paired", []):
        extra = b["extra_info"]
        lat = extra.get("latency", {})
        if "ours" in lat:
            rows.append(["point read by offset, ours p50", fmt_time(lat["ours"]["p50"]),
                         f"≤ {fmt_time(POINT_READ_P50_TARGET)}", verdict_max(lat["ours"]["p50"], POINT_READ_P50_TARGET)])
            rows.append(["point read by offset, ours p99", fmt_time(lat["ours"]["p99"]), "–", "–"])
        for pair in extra["pairs"].values():
            rows.append([f"point read, p50 {pair['peer']} / p50 ours", fmt_for(pair)(pair["median"]), "–", "–"])
    rows += _pair_rows(groups, "recovery-paired", lambda e, p: f"recovery scan, {p['ours']} / {p['peer']}")
    for group, what in (("jvm-append-paired", "append 16KiB"), ("jvm-build-paired", "build (none)"),
                        ("jvm-read-paired", "read + CRC-validate 16KiB, 1 MiB fetches")):
        rows += _pair_rows(groups, group, lambda e, p, what=what: f"{what}, {p['ours']} / {p['peer']} (JVM group)")
    ends = sorted(groups.get("epoch-end-offset", []), key=lambda b: b["extra_info"]["epochs"])
    for b in ends:
        if b["extra_info"]["epochs"] == 10_000:
            lat = b["extra_info"]["latency"]
            rows.append(["end_offset_for, 10,000 epochs, p50 / p99", f"{fmt_time(lat['p50'])} / {fmt_time(lat['p99'])}",
                         "–", "–"])
    if len(ends) >= 2:
        lo, hi = ends[0]["extra_info"], ends[-1]["extra_info"]
        growth = hi["latency"]["p50"] / lo["latency"]["p50"]
        log_ratio = math.log(hi["epochs"]) / math.log(lo["epochs"])
        rows.append([f"end_offset_for p50 growth, {hi['epochs']:,} / {lo['epochs']:,} epochs", f"{growth:.2f}×",
                     f"≤ {EPOCH_LOG_TOLERANCE:.1f} × log ratio {log_ratio:.2f} = {EPOCH_LOG_TOLERANCE * log_ratio:.2f}×",
                     verdict_max(growth, EPOCH_LOG_TOLERANCE * log_ratio)])
    for config, item in truncate_rows(groups.get("truncate-paired", [])).items():
        sizes = item["sizes"]
        times = " / ".join(f"{fmt_bytes(item['logs'][n]['log_bytes'])}: {fmt_time(item['median'][n])}" for n in sizes)
        rows.append([f"truncate_to of {fmt_bytes(item['logs'][sizes[0]]['truncated_bytes'])}, {config} ({times})",
                     "–", "–", "–"])
        if len(sizes) >= 2:
            growth = item["growth"][sizes[0]]
            rows.append([f"truncate_to cost growth, {config}, {fmt_bytes(item['logs'][sizes[-1]]['log_bytes'])} / "
                         f"{fmt_bytes(item['logs'][sizes[0]]['log_bytes'])} log (paired)", f"{growth:.2f}×",
                         f"≤ {TRUNCATE_FLAT_TOLERANCE:.1f}× (flat)", verdict_max(growth, TRUNCATE_FLAT_TOLERANCE)])
    rows += _pair_rows(groups, "replication-catchup-paired", lambda e, p: f"follower catch-up, {p['ours']} / {p['peer']}")
    for b in groups.get("replication-catchup-paired", []):
        extra = b["extra_info"]
        rate = extra["throughput_MBps"].get("ours-fetcher")
        if rate:
            rows.append([f"follower catch-up of {fmt_bytes(extra['bytes'])} through the fetcher",
                         f"{fmt_time(extra['median_seconds']['ours-fetcher'])} ({fmt_rate(rate * 1e6, 'bytes')})", "–", "–"])
    for b in groups.get("replication-diverge-paired", []):
        extra = b["extra_info"]
        for run, t in extra["median_seconds"].items():
            rows.append([f"divergent follower ({fmt_bytes(extra['divergent_bytes'])} cut, "
                         f"{fmt_bytes(extra['tail_bytes'])} refetched), {run}", fmt_time(t), "–", "–"])
    for mode, items in memory_by_mode(groups.get("memory", [])).items():
        for log_bytes, extra in items:
            rows.append([f"peak memory, {mode} {fmt_bytes(log_bytes)}: anon / HWM growth",
                         f"{fmt_bytes(extra['anon_growth'])} / {fmt_bytes(extra['hwm_growth'])}", "–", "–"])
        if len(items) >= 2:
            grow = items[-1][1]["anon_growth"] - items[0][1]["anon_growth"]
            rows.append([f"peak anon memory growth with the log, {mode} "
                         f"{fmt_bytes(items[-1][0])} vs {fmt_bytes(items[0][0])}", fmt_bytes(max(grow, 0)),
                         f"≤ {fmt_bytes(MEMORY_ANON_TOLERANCE)} (flat)", verdict_max(grow, MEMORY_ANON_TOLERANCE)])
    for b in groups.get("logdir-reopen-paired", []):
        extra = b["extra_info"]
        t = extra["median_seconds"]["ours"]
        rows.append([f"clean reopen, {extra['partitions']} partitions", f"{fmt_time(t)} "
                     f"({fmt_time(extra['per_partition_s']['ours'])} a partition)", "–", "–"])
        for pair in extra["pairs"].values():
            rows.append(["clean reopen, ours / syscall floor", fmt_ratio(pair["median"]), "–", "–"])
    for b in groups.get("logdir-reopen-sealed-paired", []):
        extra = b["extra_info"]
        per = extra["per_sealed_segment_s"]
        rows.append([f"clean reopen, {extra['size']}: each sealed segment adds, first use / at the open",
                     f"{fmt_time(per['first-use'])} / {fmt_time(per['at-open'])}", "–", "–"])
        for pair in extra["pairs"].values():
            rows.append([f"clean reopen, {extra['size']}: {pair['ours']} / {pair['peer']}", fmt_ratio(pair["median"]),
                         "–", "–"])
    for b in groups.get("logdir-reopen-threads-paired", []):
        extra = b["extra_info"]
        per = extra["per_partition_s"]
        for pair in extra["pairs"].values():
            rows.append([f"clean reopen, {extra['size']}: 4 recovery threads / 1 "
                         f"({fmt_time(per['threads-4'])} / {fmt_time(per['threads-1'])} a partition)",
                         fmt_x(pair["median"]), "–", "–"])
    for b in groups.get("partition-memory", []):
        rows += [row + ["–", "–"] for row in _partition_memory_rows(b["extra_info"])]
    for b in groups.get("elections-paired", []):
        extra = b["extra_info"]
        per = extra["per_election_s"]
        rows.append(["leader election (fsync on), per election: deferred / sync",
                     f"{fmt_time(per['deferred'])} / {fmt_time(per['sync'])}", "–", "–"])
        for pair in extra["pairs"].values():
            rows.append([f"{extra['elections']} elections, t(sync) / t(deferred)", fmt_x(pair["median"]), "–", "–"])
    return rows


GROUP_ORDER = ["append-paired", "append-percall-paired", "append-16KiB", "append-1MiB", "build-paired", "build", "read-seq-paired",
               "read-point-paired", "recovery-paired", "epoch-end-offset", "truncate-paired", "replication-catchup-paired",
               "replication-diverge-paired", "memory", "logdir-reopen-paired", "logdir-reopen-sealed-paired",
               "logdir-reopen-threads-paired",
               "elections-paired",
               "jvm-append-paired", "jvm-build-paired", "jvm-read-paired"]


def render(data: dict) -> str:
    groups: dict[str, list[dict]] = {}
    for b in data.get("benchmarks", []):
        groups.setdefault(b.get("group") or "ungrouped", []).append(b)
    lines = ["# Benchmark results", "",
             "Generated by `benchmarks/report.py` from pytest-benchmark's JSON "
             "(`python -m pytest benchmarks --benchmark-only --benchmark-json=...`). "
             "fsync off everywhere (except the elections group); ratios are throughput(ours) / throughput(peer), "
             "percentages against a ceiling or limit.", ""]
    lines += machine_lines(data) + [""]
    lines += summary(groups)
    lines += wire_table.section(groups)
    lines += ["## Groups", ""]
    for name in sorted(groups, key=lambda g: (GROUP_ORDER.index(g) if g in GROUP_ORDER else len(GROUP_ORDER), g)):
        benches = groups[name]
        if name in CUSTOM_GROUPS:
            lines += CUSTOM_GROUPS[name](name, benches)
        elif all(b.get("extra_info", {}).get("paired") for b in benches):
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
