"""What `--metrics-listen`'s request metrics cost a broker: its CPU per Produce request (utime +
stime, /proc/PID/stat) with the metrics on against the same broker with them off, and against
another tree's broker with them on (the main before a change).  Not a pytest module: run it as

    python benchmarks/metrics_cost.py [--rounds 6] [--other /work/main]

Two workloads; a round of one runs it in slices, each slice on every broker in turn (the order
rotating slice by slice), so the machine's other load falls on all brokers alike; a broker's CPU
is the sum over its threads of the time on CPU (/proc/PID/task/*/schedstat, in ns: the 10 ms
ticks of utime and stime are too coarse for slices):
  one     one-record Produce requests (100-byte value, acks=1, v9) sent one at a time, each
          answer awaited before the next is sent (served from the receive callback);
  16k     16 KiB Produce requests (15 x 1 KiB records) sent pipelined (bench_floor.send_all).
Each broker is a `storage serve --no-fsync` process of its own tree (PYTHONPATH), its topic made
with confluent-kafka's AdminClient.  Prints per round and workload the CPU per request (us) of
every broker and the ratios to the broker with metrics off.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from bench_floor import send_all  # noqa: E402
from wirelib import VALUE  # noqa: E402

import storage  # noqa: E402
from storage.wire import codec  # noqa: E402

TOPIC = "cost"
_READY = re.compile(r"node \d+ listening on [\d.]+:(\d+) pid (\d+)")


def frame(correlation_id: int, batch: bytes) -> bytes:
    body = {"transactional_id": None, "acks": 1, "timeout": 30_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}
    return codec.encode_request(0, 9, correlation_id, "metrics-cost", body)


class Server:
    """One broker process of `tree`, with or without --metrics-listen."""

    def __init__(self, name: str, tree: str, metrics: bool, data_dir: str):
        self.name = name
        argv = [sys.executable, "-m", "storage", "serve", "--data-dir", data_dir, "--listen", "127.0.0.1:0",
                "--no-fsync", "--log-level", "WARNING"]
        if metrics:
            argv += ["--metrics-listen", "127.0.0.1:0"]
        self.proc = subprocess.Popen(argv, cwd=tree, env={**os.environ, "PYTHONPATH": tree},
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(3):
            found = _READY.search(self.proc.stdout.readline())
            if found:
                break
        else:
            self.proc.kill()
            raise RuntimeError(f"{name}: no ready line")
        self.port, self.pid = int(found.group(1)), int(found.group(2))
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}"})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(30)

    def cpu_ns(self) -> int:
        total = 0
        for task in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except FileNotFoundError:       # a thread that ended meanwhile
                pass
        return total

    def cpu_ns_of(self, run, frames: list[bytes]) -> int:
        before = self.cpu_ns()
        run(self.port, frames)
        return self.cpu_ns() - before

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self.proc.stdout.close()


def one_at_a_time(port: int, frames: list[bytes]) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for f in frames:
            sock.sendall(f)
            pending = b""
            while len(pending) < 4 or len(pending) < 4 + struct.unpack_from(">i", pending)[0]:
                data = sock.recv(1 << 16)
                assert data, "the broker closed the connection"
                pending += data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--other", action="append", default=[],
                        help="another tree to compare with, metrics on (repeatable; default /work/main)")
    parser.add_argument("--slices", type=int, default=20, help="slices a round")
    parser.add_argument("--one", type=int, default=500, help="one-record requests a slice")
    parser.add_argument("--pipelined", type=int, default=200, help="16 KiB requests a slice")
    args = parser.parse_args()
    workloads = {"one": (one_at_a_time, [frame(i, storage.build_batch([b"v" * 100])) for i in range(args.one)]),
                 "16k": (send_all, [frame(i, storage.build_batch([VALUE] * 15)) for i in range(args.pipelined)])}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        servers = [Server("off", ROOT, False, f"{tmp}/off"), Server("on", ROOT, True, f"{tmp}/on")]
        servers += [Server(f"other{i}-on", tree, True, f"{tmp}/other{i}")
                    for i, tree in enumerate(args.other or ["/work/main"])]
        try:
            for run, frames in workloads.values():      # warm each broker once
                for s in servers:
                    s.cpu_ns_of(run, frames)
            print("load", os.getloadavg(), flush=True)
            ratios: dict = {}
            for r in range(args.rounds):
                for name, (run, frames) in workloads.items():
                    ns = dict.fromkeys((s.name for s in servers), 0)
                    for i in range(args.slices):
                        turn = i % len(servers)
                        for s in servers[turn:] + servers[:turn]:
                            ns[s.name] += s.cpu_ns_of(run, frames)
                    us = {k: v / 1e3 / (args.slices * len(frames)) for k, v in ns.items()}
                    pairs = [(f"{k}/off", us[k] / us["off"]) for k in us if k != "off"]
                    pairs += [(f"on/{k}", us["on"] / us[k]) for k in us if k.startswith("other")]
                    print(f"round {r} {name:>3}: " + " ".join(f"{k} {v:6.1f}" for k, v in us.items()) + "  " +
                          " ".join(f"{pair} {value:.3f}" for pair, value in pairs), flush=True)
                    for pair, value in pairs:
                        ratios.setdefault((name, pair), []).append(value)
            for (name, pair), values in ratios.items():
                print(f"{name:>3} {pair:>12}: median {statistics.median(values):.3f}"
                      f" ({min(values):.3f}-{max(values):.3f}, {len(values)} rounds)")
            print("load", os.getloadavg())
        finally:
            for s in servers:
                s.stop()


if __name__ == "__main__":
    main()
