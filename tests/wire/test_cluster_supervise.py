"""`storage cluster` as an operator runs it: a broker that dies is reported with the command that
starts it again (and that command brings it back into the cluster), `--supervise` restarts it on
its own and gives up on one that dies at every start, `cluster status` shows leaders and ISRs and
exits 1 while a partition is under-replicated, and `--config` gives every broker Kafka's broker
properties.  Loopback only; every process stopped by its pid."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [test] extra")

from storage.cli import cluster as cluster_module  # noqa: E402
from tests.wire_support import free_port_base  # noqa: E402


class Supervisor:
    """`python -m storage cluster ...` with its stdout gathered line by line by a reader thread (a
    wait for a line that never comes ends at its deadline, not in a blocked readline)."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "storage", "cluster", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def until(self, text: str, timeout_s: float = 60) -> str:
        """The first line (from the start) containing `text`, waiting up to `timeout_s` for it."""
        deadline = time.monotonic() + timeout_s
        while True:
            for line in list(self.lines):
                if text in line:
                    return line
            if time.monotonic() > deadline or (self.proc.poll() is not None and not self._reader.is_alive()):
                raise AssertionError(f"no line with {text!r}: {self.lines}")
            time.sleep(0.05)

    def pid(self, label: str) -> int:
        return int(self.until(f"{label} at ").rsplit("pid ", 1)[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)
        self.proc.stdout.close()


def status(base: int) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "storage", "cluster", "status", "--bootstrap-server",
                           f"127.0.0.1:{base}", "--timeout", "10"], capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def wait_status(base: int, healthy: bool, timeout_s: float = 45) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        rc, out = status(base)
        if (rc == 0) == healthy or time.monotonic() > deadline:
            assert (rc == 0) == healthy, out
            return out
        time.sleep(0.5)


def test_a_dead_broker_is_reported_with_the_command_that_brings_it_back(tmp_path):
    """Also: `cluster --config` gives every broker num.partitions (an auto-created topic has 3),
    and `cluster status` marks the dead broker's partitions under-replicated (exit 1) and is
    healthy again (exit 0) once the printed command has restarted it and it caught up."""
    config = tmp_path / "server.properties"
    config.write_text("num.partitions=3\nlog.retention.hours=1\n")
    base = free_port_base()
    cluster = Supervisor("--brokers", "2", "--data-dir", str(tmp_path / "c"), "--base-port", str(base),
                         "--min-insync-replicas", "1", "--config", str(config))
    restarted = None
    try:
        cluster.until("cluster up")
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{base}", "acks": "all"})
        for i in range(30):
            producer.produce("auto", value=b"v%d" % i)
        assert producer.flush(30) == 0
        out = wait_status(base, healthy=True)
        assert [line.split()[1] for line in out.splitlines() if line.startswith("auto ")] == ["0", "1", "2"], out
        assert "2 brokers in Metadata" in out
        os.kill(cluster.pid("broker 2"), signal.SIGKILL)
        assert "exited with signal SIGKILL" in cluster.until("broker 2 (pid")
        command = cluster.until("restart it with: ").split("restart it with: ", 1)[1]
        out = wait_status(base, healthy=False)
        assert "UNDER-REPLICATED" in out and "replica 2 down or fenced" in out, out
        # `exec`: the shell becomes the broker, so the pid stopped below is the broker's own.
        restarted = subprocess.Popen("exec " + command, shell=True, stdout=subprocess.PIPE, text=True)
        assert restarted.stdout.readline().startswith("node 2 listening on"), command
        out = wait_status(base, healthy=True)
        assert "UNDER-REPLICATED" not in out
        # Nothing is checked after: broker 1 goes first, so that neither broker is stopped while it
        # leads every partition alone (its controlled shutdown would wait out its 15 s bound).
        os.kill(cluster.pid("broker 1"), signal.SIGKILL)
    finally:
        if restarted is not None:
            restarted.send_signal(signal.SIGTERM)
            try:
                restarted.wait(30)
            except subprocess.TimeoutExpired:
                restarted.kill()
                restarted.wait(10)
            restarted.stdout.close()
        cluster.stop()


@pytest.mark.slow
def test_supervise_restarts_a_killed_broker_and_leaves_down_one_that_dies_at_every_start(tmp_path):
    base = free_port_base()
    root = tmp_path / "c"
    cluster = Supervisor("--brokers", "1", "--data-dir", str(root), "--base-port", str(base),
                         "--min-insync-replicas", "1", "--supervise")
    try:
        cluster.until("cluster up")
        time.sleep(cluster_module.QUICK_DEATH_S)        # a broker that ran a while is restarted at once
        os.kill(cluster.pid("broker 1"), signal.SIGKILL)
        cluster.until("broker 1: restarting in 0 s")
        back = cluster.until("broker 1 restarted (restart 1)")
        pid = int(back.rsplit("pid ", 1)[1])
        wait_status(base, healthy=True)
        # Now it cannot start at all: its data dir is a file.  The supervisor is paused while the
        # dir is swapped so it cannot restart the broker in between.
        os.kill(cluster.proc.pid, signal.SIGSTOP)
        os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root / "broker-1")
        (root / "broker-1").write_text("not a directory")
        os.kill(cluster.proc.pid, signal.SIGCONT)
        given_up = cluster.until("left down", timeout_s=90)
        assert "broker 1 died 4 times in a row" in given_up and "restart it with:" in given_up, cluster.lines
        # The SIGKILL counts as a quick death when the broker had run less than QUICK_DEATH_S.
        killed = next(line for line in cluster.lines if line.startswith(f"broker 1 (pid {pid}) exited"))
        ran_s = float(killed.split(" after ")[1].split(" s;")[0])
        failed = cluster_module.MAX_QUICK_DEATHS - (1 if ran_s < cluster_module.QUICK_DEATH_S else 0)
        assert sum("restart" in line and "failed" in line for line in cluster.lines) == failed, cluster.lines
        time.sleep(1.5)
        assert cluster.lines[-1] == given_up                # no restart after it gave up
        assert cluster.proc.poll() is None                  # the supervisor itself goes on
    finally:
        cluster.stop()


def test_cluster_config_refuses_what_the_cluster_sets_itself(tmp_path):
    for line in ("node.id=4", "listeners=PLAINTEXT://127.0.0.1:9092", "log.dirs=/tmp/x"):
        config = tmp_path / "c.properties"
        config.write_text(f"num.partitions=2\n{line}\n")
        done = subprocess.run([sys.executable, "-m", "storage", "cluster", "--data-dir", str(tmp_path / "c"),
                               "--config", str(config)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert f"line 2: {line.split('=')[0]} is set by `storage cluster`" in done.stderr
        assert not (tmp_path / "c" / "controller.log").exists()          # nothing was started
    config.write_text("num.partitions=many\n")
    done = subprocess.run([sys.executable, "-m", "storage", "cluster", "--data-dir", str(tmp_path / "c"),
                           "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "num.partitions" in done.stderr, done.stderr


def test_cluster_status_of_an_unreachable_bootstrap_server_is_one_line_exit_1():
    base = free_port_base()
    rc, out = status(base)
    assert rc == 1 and out.startswith("error: cannot reach the bootstrap server"), out
