"""`python -m storage cluster`: a controller and N brokers as separate processes on loopback,
supervised -- each one's node id, address and pid printed when it is up, an exit reported,
every process stopped by its pid (SIGTERM, then SIGKILL) when the supervisor is told to stop."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

_READY = re.compile(r"(node|controller) (\d+) listening on ([\d.]+):(\d+) pid (\d+)")


def start_process(argv: list[str], log_path: str, *, timeout_s: float = 60) -> tuple[subprocess.Popen, re.Match]:
    """`python -m storage ARGV...` with stderr appended to `log_path`; returns once it printed its
    ready line (node or controller id, address, pid), which the match holds.  RuntimeError (and
    the process killed) when it does not within `timeout_s`."""
    with open(log_path, "ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "storage", *argv], stdout=subprocess.PIPE, stderr=err,
                                text=True)
    deadline, line = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline and not line and proc.poll() is None:
        line = proc.stdout.readline()
    found = _READY.search(line)
    if not found:
        stop_process(proc, signal.SIGKILL)
        proc.stdout.close()
        raise RuntimeError(f"`storage {argv[0]}` did not start; see {log_path}")
    return proc, found


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 30) -> None:
    """Send `sig` by pid and wait; SIGKILL when it does not end in `timeout_s`."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):                    # brokers first, the controller last
        stop_process(proc)


def _metrics(args, offset: int) -> list[str]:
    """--metrics-listen for the process at `offset` from --metrics-base-port (none without it)."""
    base = getattr(args, "metrics_base_port", None)
    return [] if base is None else ["--metrics-listen", f"127.0.0.1:{base + offset}"]


def _log_level(args) -> list[str]:
    level = getattr(args, "log_level", None)
    return [] if level is None else ["--log-level", level]


def _acls(args) -> list[str]:
    """Every broker's ACL flags (ACLs on with --authorizer; the brokers' own requests to each
    other are User:ANONYMOUS on PLAINTEXT, so it needs CLUSTER_ACTION or to be a super user)."""
    out = ["--authorizer", args.authorizer] if getattr(args, "authorizer", "") else []
    return out + (["--super-users", args.super_users] if getattr(args, "super_users", "") else [])


def run_cluster(args) -> int:
    root = os.path.abspath(args.data_dir)
    os.makedirs(root, exist_ok=True)
    procs: list[subprocess.Popen] = []
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        controller_port = args.base_port + 100
        proc, found = start_process(["controller", "--data-dir", os.path.join(root, "controller-data"), "--listen",
                              f"127.0.0.1:{controller_port}", "--min-insync-replicas",
                              str(args.min_insync_replicas), *_metrics(args, 100), *_log_level(args)],
                                     os.path.join(root, "controller.log"))
        procs.append(proc)
        print(f"controller {found.group(2)} at {found.group(3)}:{found.group(4)} pid {found.group(5)}", flush=True)
        for n in range(1, args.brokers + 1):
            proc, found = start_process(["serve", "--data-dir", os.path.join(root, f"broker-{n}"), "--node-id", str(n),
                                  "--listen", f"127.0.0.1:{args.base_port + n - 1}", "--controller",
                                  f"127.0.0.1:{controller_port}", "--replication-factor",
                                  str(min(3, args.brokers)), "--min-insync-replicas", str(args.min_insync_replicas),
                                  *_metrics(args, n - 1), *_log_level(args), *_acls(args)],
                                 os.path.join(root, f"broker-{n}.log"))
            procs.append(proc)
            print(f"broker {n} at {found.group(3)}:{found.group(4)} pid {found.group(5)}", flush=True)
        bootstrap = ",".join(f"127.0.0.1:{args.base_port + n}" for n in range(args.brokers))
        print(f"cluster up: bootstrap.servers={bootstrap} (logs under {root}; Ctrl-C or SIGTERM stops it)", flush=True)
        reported = set()
        while not stopping:
            for i, proc in enumerate(procs):
                if proc.poll() is not None and i not in reported:
                    reported.add(i)
                    print(f"{'controller' if i == 0 else f'broker {i}'} (pid {proc.pid}) exited with "
                          f"{proc.returncode}", flush=True)
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        _stop(procs)
        for proc in procs:
            if proc.stdout is not None:
                proc.stdout.close()
    print("cluster stopped", flush=True)
    return 0
