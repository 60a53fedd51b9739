"""The processes' own logs tell the story (docs/guide-operations.md "Logs"): a `storage serve`
SIGKILLed after a torn write says on its next start, at WARNING, what recovery cut -- the file,
the byte position and offset, how many bytes; a `storage cluster` whose leader is SIGKILLed has
the controller say that it fenced that broker and elected a new leader, with its epoch and ISR.
Loopback only; every process is stopped by its pid."""
from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [test] extra")

from storage import build_batch  # noqa: E402
from tests.wire_support import Broker, free_port_base  # noqa: E402

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"     # the processes' line prefix: time, level, logger


def test_a_sigkilled_broker_says_what_recovery_cut_after_a_torn_write(tmp_path):
    broker = Broker(tmp_path / "b").start()
    try:
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce("torn", value=b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
        broker.kill()                                   # SIGKILL: no clean shutdown marker
        (segment,) = glob.glob(str(tmp_path / "b" / "**" / "torn-0" / "*.log"), recursive=True)
        size = os.path.getsize(segment)
        torn = build_batch([b"half"], base_offset=10)
        with open(segment, "ab") as f:                  # a write the crash tore in half
            f.write(torn[: len(torn) // 2])
        broker.start()
        found = re.search(rf"{STAMP} WARNING storage\.log\.loader: {re.escape(segment)}: recovery cut "
                          rf"{len(torn) // 2} bytes at byte position {size} \(offset 10\): .+; the log now ends "
                          rf"at offset 10\n", broker.stderr())
        assert found, broker.stderr()[-3000:]
    finally:
        broker.kill()


def test_storage_cluster_controller_logs_a_killed_leaders_fencing_and_the_election(tmp_path):
    base = free_port_base()
    proc = subprocess.Popen([sys.executable, "-m", "storage", "cluster", "--brokers", "2", "--data-dir",
                             str(tmp_path / "c"), "--base-port", str(base), "--min-insync-replicas", "2",
                             "--log-level", "INFO"], stdout=subprocess.PIPE, text=True)
    pids: dict[int, int] = {}
    try:
        lines = [proc.stdout.readline() for _ in range(4)]
        assert "cluster up" in lines[3], lines
        pids = {int(line.split()[1]): int(line.rsplit("pid ", 1)[1].split()[0]) for line in lines[1:3]}
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{base},127.0.0.1:{base + 1}"})
        admin.create_topics([NewTopic("story", num_partitions=1, replication_factor=2)])["story"].result(30)
        leader = admin.list_topics("story", timeout=10).topics["story"].partitions[0].leader
        other = 1 if leader == 2 else 2
        log_path = tmp_path / "c" / "controller.log"
        deadline = time.monotonic() + 30                # both replicas in the ISR before the crash
        while time.monotonic() < deadline and len(admin.list_topics("story", timeout=10)
                                                  .topics["story"].partitions[0].isrs) < 2:
            time.sleep(0.3)
        os.kill(pids[leader], signal.SIGKILL)
        fenced = rf"{STAMP} INFO storage\.controller: fenced broker {leader} \(broker epoch \d+\): its session " \
                 rf"timed out: no heartbeat for 9000 ms \(broker\.session\.timeout\.ms\)\n"
        elected = rf"{STAMP} INFO storage\.controller: elected leader {other} of story-0 with leader epoch 1 and " \
                  rf"ISR \[{other}\] \(clean: an ISR member; broker {leader} left: fenced or re-registered\)\n"
        deadline, text = time.monotonic() + 40, ""
        while time.monotonic() < deadline and not (re.search(fenced, text) and re.search(elected, text)):
            time.sleep(0.5)
            text = log_path.read_text()
        assert re.search(fenced, text) and re.search(elected, text), text[-3000:]
        assert re.search(fenced, text).start() < re.search(elected, text).start()
        assert re.search(rf"INFO storage\.controller: registered broker {leader} with broker epoch \d+", text)
        # min ISR 2: the survivor left the ISR for the ELR at the SIGTERM and leads nothing, so it
        # stops at once (with min ISR 1 it stays the leader and waits out the 15 s shutdown bound)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:                          # the supervisor stops its processes by pid
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                for pid in pids.values():                # it could not: its brokers, by their pids
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        proc.stdout.close()
