"""Issue 33's measuring tools, without timing anything: tools/rdkafka_perf.py (reading the C load
generator's summary; the reason it gives where it cannot be built) and benchmarks/wire_table.py
(the ratio table, the broker's CPU per MB and the charts, from a pytest-benchmark JSON)."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


perf = _load("rdkafka_perf_under_test", ROOT / "tools" / "rdkafka_perf.py")
wire_table = _load("wire_table_under_test", ROOT / "benchmarks" / "wire_table.py")
report = _load("bench_report_for_wire", ROOT / "benchmarks" / "report.py")

PRODUCER_OUT = """% Sending 65536 messages of size 1024 bytes
% 22110 messages produced (22640640 bytes), 22110 delivered (offset 22109, 0 failed) in 1001ms: 22085 msgs/s and 22.62 MB/s, 0 produce failures, 43427 in queue, no compression
% 65536 messages produced (67108864 bytes), 65536 delivered (offset 65535, 0 failed) in 3231ms: 20278 msgs/s and 20.76 MB/s, 0 produce failures, 0 in queue, no compression
"""
CONSUMER_OUT = """% 0 messages (0 bytes) consumed in 0ms: 0 msgs/s (0.00 MB/s)
% 65536 messages (67108864 bytes) consumed in 219ms: 298811 msgs/s (305.98 MB/s)
% Average application fetch latency: 12us
"""


def test_the_last_summary_line_is_the_run():
    assert perf.parse_summary(PRODUCER_OUT) == {"messages": 65536, "bytes": 67108864, "delivered": 65536,
                                                "seconds": 3.231}
    assert perf.parse_summary(CONSUMER_OUT) == {"messages": 65536, "bytes": 67108864, "delivered": 65536,
                                                "seconds": 0.219}
    with pytest.raises(ValueError, match="no rdkafka_performance summary"):
        perf.parse_summary("%4|CONFWARN| nothing else\n")


def test_no_compiler_is_a_reason_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(perf.shutil, "which", lambda name: None)
    with pytest.raises(perf.Unavailable, match="no C compiler"):
        perf.build(cache=tmp_path)


def _paired(ratios: dict, labels: dict, roles: dict, extra=None) -> dict:
    pairs = {}
    for key, values in ratios.items():
        ours, peer = key.split(" / ")
        pairs[key] = {"ours": ours, "peer": peer, "peer_role": roles[peer], "label": key, "ratios": values,
                      "median": sorted(values)[len(values) // 2]}
    extra = extra or {}
    times = {name: [t] for name, t in extra.get("median_seconds", {}).items()}      # as benchlib.paired keeps them
    return {"paired": True, "pairs": pairs, "labels": labels, "roles": roles, "times": times, **extra}


def _bench_json() -> dict:
    produce = _paired({"wire1 / engine": [0.10, 0.12, 0.14], "c-wire1 / engine": [0.6, 0.55, 0.7]},
                      {"wire1": "ck", "c-wire1": "C", "engine": "engine"},
                      {"wire1": "ours", "c-wire1": "ours", "engine": "peer"},
                      {"bytes": 64_000_000, "throughput_MBps": {"wire1": 20.0, "c-wire1": 90.0, "engine": 160.0},
                       "median_seconds": {"wire1": 3.2, "c-wire1": 0.7, "engine": 0.4},
                       "kept": {"wire1": [{"seconds": 3.2, "broker_cpu_s": 1.6, "client_cpu_s": 2.4,
                                           "wall_s": 3.2}] * 3}})
    idle = _paired({"idle100 / none": [0.97]}, {"idle100": "idle", "none": "none"},
                   {"idle100": "ours", "none": "peer"},
                   {"idle_partitions": 100, "bytes": 64_000_000, "throughput_MBps": {"idle100": 9.0, "none": 9.3},
                    "median_seconds": {"idle100": 7.1, "none": 6.9}})
    latency = {"unit": "latency", "p50": 150e-6, "p99": 2e-3, "mean": 3e-4, "n": 2000}
    return {"benchmarks": [{"group": "wire-produce-paired", "extra_info": produce, "name": "produce",
                            "stats": {"median": 1}},
                           {"group": "wire-idle-paired", "extra_info": idle, "name": "idle", "stats": {"median": 1}},
                           {"group": "wire-produce-latency", "extra_info": latency, "name": "lat",
                            "stats": {"median": 1}}],
           "machine_info": {}, "commit_info": {}}


def test_the_table_has_every_row_with_its_spread_and_verdict():
    rows = {r[0]: r for r in wire_table.rows(wire_table.groups_of(_bench_json()))}
    ck = rows["produce, 1 partition, acks=1 / engine append (confluent-kafka)"]
    assert ck[1] == "0.12x (0.10-0.14, n 3); 20 MB/s" and ck[3] == "not met"
    assert rows["produce, 1 partition, acks=1 / engine append (C client)"][3] == "met"
    assert rows["RF 3 cluster with 100 idle partitions / none"][1] == "0.97x (n 1); 9 MB/s; 100 idle partitions"
    assert rows["fetch from offset 1 / loopback TCP (C client)"][1] == "not measured in this run"
    lat = rows["produce latency, one record at a time (acks=1, linger 0): p50 / p99"]
    assert lat[1] == "150 us / 2.0 ms (n 2000)" and lat[3] == "not met"
    assert len(rows) == len(wire_table.ROWS) + 1          # every row of the issue, and the latency


def test_a_c_client_that_could_not_be_built_says_why():
    data = _bench_json()
    fetch = _paired({"wire / loopback": [0.2]}, {"wire": "ck", "loopback": "lo"}, {"wire": "ours", "loopback": "limit"},
                    {"c_client": "no C compiler (cc, gcc or clang)"})
    data["benchmarks"].append({"group": "wire-fetch-paired", "extra_info": fetch, "name": "fetch", "stats": {}})
    rows = {r[0]: r for r in wire_table.rows(wire_table.groups_of(data))}
    assert rows["fetch from offset 1 / loopback TCP (C client)"][1] == "skipped: no C compiler (cc, gcc or clang)"
    assert rows["fetch from offset 1 / loopback TCP (confluent-kafka)"][1] == "0.20x (n 1)"


def test_event_loop_pairs_render_in_results_md():
    """bench_wire's event-loop group mixes produce, fetch and latency runs: benchlib.paired with
    unit "seconds" and no amount (report.py once failed on its missing throughput)."""
    benchlib = _load("benchlib_for_wire", ROOT / "benchmarks" / "benchlib.py")
    times = {"produce-uvloop": 1.0, "produce-asyncio": 1.2, "p50-uvloop": 4e-4, "p50-asyncio": 5e-4}
    contenders = [benchlib.Contender(name, name, "ours" if "uvloop" in name else "peer",
                                     lambda t=t: {"seconds": t, "broker_cpu_s": t / 2, "wall_s": t})
                  for name, t in times.items()]
    result = benchlib.paired(contenders, [("produce-uvloop", "produce-asyncio"), ("p50-uvloop", "p50-asyncio")], 1,
                             warmup=False, unit="seconds")
    data = _bench_json()
    data["benchmarks"].append({"group": "wire-event-loop-paired", "name": "loop", "stats": {},
                               "extra_info": {"bytes": 10_000_000, "client": "C", **result}})
    assert "### wire-event-loop-paired" in report.render(data)
    rows = {r[0]: r for r in wire_table.rows(wire_table.groups_of(data))}
    assert rows["broker on uvloop / asyncio's loop: produce (C)"][1] == "1.20x (n 1)"


def test_broker_cpu_per_mb_and_share_of_a_core():
    """The broker's CPU per MB and share of a core, and the clients' share beside it."""
    (row,) = wire_table.cpu_rows(wire_table.groups_of(_bench_json()))
    assert row == ["wire-produce-paired: ck", "25.0", "0.50", "0.75", "20"]


def test_results_md_carries_the_table():
    text = report.render(_bench_json())
    assert "## Through the wire (issue 33)" in text and "0.12x (0.10-0.14, n 3)" in text


def test_charts_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    written = wire_table.charts(wire_table.groups_of(_bench_json()), str(tmp_path))
    assert sorted(Path(p).name for p in written) == ["wire-latency.png", "wire-ratios.png", "wire-throughput.png"]
    assert all(Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)


def test_main_prints_the_table(tmp_path, capsys):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_bench_json()))
    assert wire_table.main([str(path)]) == 0
    assert "| produce, 1 partition, acks=1 / engine append (C client) | 0.60x (0.55-0.70, n 3); 90 MB/s" \
        in capsys.readouterr().out


def test_floor_pairs_render_with_cpu_per_request():
    """bench_floor's group (CPU seconds per run, no amount) renders in RESULTS.md and as the
    floor rows: each ratio with both contenders' CPU per request.  (The first full run failed in
    report.py: bench_floor paired without unit "seconds", so report.py looked for a throughput.)"""
    benchlib = _load("benchlib", ROOT / "benchmarks" / "benchlib.py")      # bench_floor imports it by name
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        floor = _load("bench_floor_under_test", ROOT / "benchmarks" / "bench_floor.py")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    cpu = {"broker": 1.6, "floor": 0.8, "floor-uvloop": 0.64, "echo": 0.3, "engine": 0.4}
    contenders = [benchlib.Contender(name, name, "ours" if name == "broker" else "peer", lambda t=t: t)
                  for name, t in cpu.items()]
    result = floor.floor_pairs(contenders, 1)
    data = _bench_json()
    data["benchmarks"].append({"group": "wire-floor-paired", "name": "floor", "stats": {},
                               "extra_info": {"requests": 10_000, **result,
                                              "cpu_per_request_us": {n: t / 10_000 * 1e6 for n, t in cpu.items()}}})
    assert "### wire-floor-paired" in report.render(data)
    rows = {r[0]: r for r in wire_table.rows(wire_table.groups_of(data))}
    assert rows["floor: broker CPU a request / bare server's on the same loop, uvloop (append + answer)"][1] == \
        "0.40x (n 1); 160 / 64 us"
    assert rows["floor: bare asyncio server / engine append, CPU a request (the most one process reaches)"][1] == \
        "0.50x (n 1); 80 / 40 us"
    assert rows["floor: broker / engine append, CPU a request"][1] == "0.25x (n 1); 160 / 40 us"
