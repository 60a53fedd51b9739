"""`python -m storage cluster`: a controller and N brokers as separate processes on loopback,
supervised -- each one's node id, address and pid printed when it is up, every process stopped by
its pid (SIGTERM, then SIGKILL) when the supervisor is told to stop.

A process that exits while the cluster runs is reported with how it ended and the command line
that starts it again (its own stderr log appended to, as before).  With --supervise the
supervisor restarts it itself, as systemd's Restart=on-failure would: at once after a process that
ran a while, with a doubling backoff after one that died within QUICK_DEATH_S of its start, and
not at all after MAX_QUICK_DEATHS such deaths in a row (left down, with the log to read).

`--config FILE` gives every broker Kafka's broker properties (the per-broker settings of
server.properties: num.partitions, log.*, offsets.*, ...); what the cluster decides for each
process itself (node ids, listeners, log dirs, the controller's address, roles) is refused in it."""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .output import UsageError

_READY = re.compile(r"(node|controller) (\d+) listening on ([\d.]+):(\d+) pid (\d+)")
QUICK_DEATH_S = 10.0          # a process that dies this soon after its start died "quickly"
MAX_QUICK_DEATHS = 4          # --supervise leaves a process down after this many quick deaths in a row
FIRST_BACKOFF_S = 0.5         # before the restart after the first quick death; doubled after each
MAX_BACKOFF_S = 30.0
# The settings `storage cluster` makes for each process itself: refused in a cluster's --config.
CLUSTER_OWNED = ("node.id", "broker.id", "listeners", "advertised.listeners", "log.dirs", "log.dir",
                 "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
                 "controller.listener.names", "listener.security.protocol.map", "inter.broker.listener.name")


def add_cluster_parser(sub, ranged, event_loop_flag) -> None:
    from ..core.files import INT32_MAX
    p = sub.add_parser("cluster", help="start and supervise a local cluster: a controller and N brokers; "
                                       "`cluster status`: brokers, leaders and ISRs",
                       description="Starts `storage controller` and N `storage serve` processes on loopback, "
                                   "prints each one's node id, address and pid, says how to restart one that "
                                   "exits (or restarts it: --supervise), and stops them all (SIGTERM, by pid) on "
                                   "SIGTERM or Ctrl-C.  `storage cluster status` prints a running cluster's "
                                   "brokers and every partition's leader, replicas and ISR.")
    p.add_argument("--brokers", type=ranged(1, 100), default=3, help="how many brokers (default 3)")
    p.add_argument("--data-dir", help="DIR/controller-data, DIR/broker-N (required to start a cluster)")
    p.add_argument("--base-port", type=ranged(1, 65535 - 100), default=9092, help="broker N listens on base+N-1, "
                   "the controller on base+100 (default 9092)")
    p.add_argument("--min-insync-replicas", type=ranged(1, INT32_MAX, "min.insync.replicas"),
                   help="min.insync.replicas (default: the --config file's, else 2)")
    p.add_argument("--metrics-base-port", type=ranged(1, 65535 - 100), help="broker N serves its metrics on "
                   "base+N-1, the controller on base+100 (default: no metrics)")
    p.add_argument("--log-level", default="INFO", help="every process's logging level (default INFO); each "
                   "logs to DIR/controller.log or DIR/broker-N.log")
    event_loop_flag(p)                  # every process's --event-loop
    p.add_argument("--authorizer", metavar="CLASS", default="", help="every broker's --authorizer: ACLs on")
    p.add_argument("--super-users", metavar="PRINCIPALS", default="", help="every broker's --super-users")
    p.add_argument("--supervise", action="store_true", help="restart a broker or the controller that exits "
                   f"(backoff after a death within {QUICK_DEATH_S:g} s of its start; left down after "
                   f"{MAX_QUICK_DEATHS} such deaths in a row)")
    p.add_argument("--config", metavar="FILE", help="Kafka broker properties every broker reads (`serve --config`); "
                   "node ids, listeners, log dirs and the controller are the cluster's own and refused there")
    actions = p.add_subparsers(dest="cluster_command", metavar="{status}")
    s = actions.add_parser("status", help="a running cluster's brokers, and each partition's leader, replicas "
                                          "and ISR (exit 1 when a partition is offline or under-replicated)")
    from .cluster_status import add_arguments
    add_arguments(s)


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


@dataclass
class Child:
    """One supervised process: what starts it, and how its restarts went."""
    label: str                          # "controller", "broker 2"
    argv: list[str]                     # after `python -m storage`
    log_path: str
    proc: subprocess.Popen | None = None
    started: float = 0.0
    quick_deaths: int = 0               # in a row
    restarts: int = 0
    restart_at: float | None = None     # --supervise: when to start it again
    down: bool = False                  # exited and reported (left down, or waiting for its restart)
    history: list[str] = field(default_factory=list)

    def start(self) -> re.Match:
        self.proc, found = start_process(self.argv, self.log_path)
        self.started, self.down = time.monotonic(), False
        return found

    def command_line(self) -> str:
        """The shell command that starts it again, its stderr appended to its log as before."""
        return f"{shlex.join([sys.executable, '-m', 'storage', *self.argv])} 2>>{shlex.quote(self.log_path)}"

    def close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _metrics(args, offset: int) -> list[str]:
    """--metrics-listen for the process at `offset` from --metrics-base-port (none without it)."""
    base = getattr(args, "metrics_base_port", None)
    return [] if base is None else ["--metrics-listen", f"127.0.0.1:{base + offset}"]


def _process_flags(args) -> list[str]:
    """Every process's --log-level and --event-loop, as the cluster was given them."""
    level = getattr(args, "log_level", None)
    loop = getattr(args, "event_loop", None)
    return ([] if level is None else ["--log-level", level]) + ([] if loop is None else ["--event-loop", loop])


def cluster_config(path: str) -> dict:
    """The --config file checked as `storage serve --config` checks it (a bad file stops the
    cluster before anything starts), with the cluster's own settings refused by name."""
    from .server_properties import SUBPARSERS, load_file, read
    entries = load_file(path)
    for key, entry in entries.items():
        if key in CLUSTER_OWNED:
            raise UsageError(f"{path}, line {entry.line}: {key} is set by `storage cluster` for each process "
                             "(node ids, listeners, log dirs and the controller are the cluster's own)")
    read("serve", path, SUBPARSERS["serve"])
    return entries


def plan(args, root: str) -> list[Child]:
    """The controller and the brokers, with the flags each gets."""
    entries = cluster_config(os.path.abspath(args.config)) if args.config else {}
    config = ["--config", os.path.abspath(args.config)] if args.config else []
    min_isr = args.min_insync_replicas
    if min_isr is None:
        min_isr = int(entries["min.insync.replicas"].value.strip()) if "min.insync.replicas" in entries else 2
    controller_port = args.base_port + 100
    children = [Child("controller", ["controller", "--data-dir", os.path.join(root, "controller-data"), "--listen",
                                     f"127.0.0.1:{controller_port}", "--min-insync-replicas", str(min_isr),
                                     *_metrics(args, 100), *_process_flags(args)], os.path.join(root, "controller.log"))]
    replication = [] if "default.replication.factor" in entries else ["--replication-factor", str(min(3, args.brokers))]
    for n in range(1, args.brokers + 1):
        children.append(Child(f"broker {n}", ["serve", *config, "--data-dir", os.path.join(root, f"broker-{n}"),
                                              "--node-id", str(n), "--listen", f"127.0.0.1:{args.base_port + n - 1}",
                                              "--controller", f"127.0.0.1:{controller_port}", *replication,
                                              "--min-insync-replicas", str(min_isr), *_metrics(args, n - 1),
                                              *_process_flags(args), *_acls(args)], os.path.join(root, f"broker-{n}.log")))
    return children


def _say(text: str) -> None:
    print(text, flush=True)


def watch(child: Child, supervise: bool, now: float) -> None:
    """Report a child that exited; with --supervise, restart it when its backoff has passed."""
    if child.proc is not None and not child.down and child.proc.poll() is not None:
        child.down = True
        ran = now - child.started
        child.quick_deaths = child.quick_deaths + 1 if ran < QUICK_DEATH_S else 0
        _say(f"{child.label} (pid {child.proc.pid}) exited with {how_it_ended(child.proc.returncode)} "
             f"after {ran:.1f} s; its log: {child.log_path}")
        child.close()
        if not supervise:
            _say(f"restart it with: {child.command_line()}")
        else:
            _schedule(child, now)
    if supervise and child.restart_at is not None and now >= child.restart_at:
        child.restart_at = None
        child.restarts += 1
        try:
            found = child.start()
        except RuntimeError as exc:
            child.quick_deaths += 1
            _say(f"{child.label}: restart {child.restarts} failed: {exc}")
            _schedule(child, time.monotonic())
            return
        _say(f"{child.label} restarted (restart {child.restarts}): at {found.group(3)}:{found.group(4)} "
             f"pid {found.group(5)}")


def _schedule(child: Child, now: float) -> None:
    if child.quick_deaths >= MAX_QUICK_DEATHS:
        _say(f"{child.label} died {child.quick_deaths} times in a row within {QUICK_DEATH_S:g} s of its start: "
             f"left down (see {child.log_path}; restart it with: {child.command_line()})")
        return
    backoff = 0.0 if child.quick_deaths == 0 else min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (child.quick_deaths - 1))
    child.restart_at = now + backoff
    _say(f"{child.label}: restarting in {backoff:g} s")


def _acls(args) -> list[str]:
    """Every broker's ACL flags (ACLs on with --authorizer; the brokers' own requests to each
    other are User:ANONYMOUS on PLAINTEXT, so it needs CLUSTER_ACTION or to be a super user)."""
    out = ["--authorizer", args.authorizer] if getattr(args, "authorizer", "") else []
    return out + (["--super-users", args.super_users] if getattr(args, "super_users", "") else [])


def run_cluster(args) -> int:
    if args.data_dir is None:
        raise UsageError("cluster: --data-dir is required to start a cluster")
    root = os.path.abspath(args.data_dir)
    os.makedirs(root, exist_ok=True)
    children = plan(args, root)
    started: list[Child] = []
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        for child in children:
            found = child.start()
            started.append(child)
            name = "controller " + found.group(2) if child.label == "controller" else child.label
            _say(f"{name} at {found.group(3)}:{found.group(4)} pid {found.group(5)}")
        bootstrap = ",".join(f"127.0.0.1:{args.base_port + n}" for n in range(args.brokers))
        _say(f"cluster up: bootstrap.servers={bootstrap} (logs under {root}; Ctrl-C or SIGTERM stops it)")
        while not stopping:
            for child in children:
                watch(child, args.supervise, time.monotonic())
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        for child in reversed(started):           # brokers first, the controller last
            if child.proc is not None:
                stop_process(child.proc)
            child.close()
    _say("cluster stopped")
    return 0
