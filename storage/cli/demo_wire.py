"""The demo's wire chapter: a broker process (`python -m storage serve`) that an unmodified Kafka
client (kafka-python) produces to and consumes from in a group; the broker is killed with
SIGKILL and restarted, and every acknowledged record and the committed offset are still there."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

_READY = re.compile(r"listening on ([\d.]+):(\d+) pid (\d+)")
TOPIC, GROUP, RECORDS, FIRST_READ = "payments", "ledger", 100, 60


class DemoError(RuntimeError):
    pass


def _say(text: str = "") -> None:
    print(text, flush=True)


class _BrokerProcess:
    def __init__(self, data_dir: str):
        self.data_dir, self.port, self.proc = data_dir, 0, None
        self.stderr_path = data_dir + ".log"

    def start(self) -> None:
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "storage", "serve", "--data-dir", self.data_dir,
                 "--listen", f"127.0.0.1:{self.port}", "--group-initial-rebalance-delay-ms", "0",
                 "--offsets-partitions", "5"], stdout=subprocess.PIPE, stderr=err, text=True)
        deadline, line = time.monotonic() + 30, ""
        while time.monotonic() < deadline and not line and self.proc.poll() is None:
            line = self.proc.stdout.readline()
        found = _READY.search(line)
        if not found:
            self.stop(signal.SIGKILL)
            raise DemoError(f"the broker did not start; see {self.stderr_path}")
        self.port = int(found.group(2))

    def stop(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.proc is not None:
            self.proc.stdout.close()
        self.proc = None

    def log_lines(self, needle: str) -> list[str]:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return [line.split(": ", 1)[-1].strip() for line in f if needle in line]


def demo_wire(root: str) -> None:
    try:
        import kafka  # noqa: F401
    except ImportError:
        _say("11. Kafka clients over the wire: skipped, kafka-python is not installed "
             "(pip install 'kafka-partition-storage[clients]')")
        return
    broker = _BrokerProcess(os.path.join(root, "wire-broker"))
    broker.start()
    try:
        _story(broker)
    finally:
        broker.stop(signal.SIGTERM)


def _story(broker: _BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    address = f"127.0.0.1:{broker.port}"
    producer = KafkaProducer(bootstrap_servers=address, acks="all", enable_idempotence=True)
    acked = [producer.send(TOPIC, key=b"account-%d" % (i % 4), value=b"payment %d" % i).get(30)
             for i in range(RECORDS)]
    producer.close()
    _say(f"11. Kafka clients over the wire: `python -m storage serve` (pid {broker.proc.pid}) on {address}. "
         f"kafka-python, unmodified, produced {len(acked)} keyed payments (idempotent, acks=all): offsets "
         f"{acked[0].offset}..{acked[-1].offset} acknowledged.")
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=address, group_id=GROUP, auto_offset_reset="earliest",
                             enable_auto_commit=False, max_poll_records=FIRST_READ)
    first = _poll(consumer, FIRST_READ)
    consumer.commit()
    consumer.close()
    _say(f"   Group {GROUP!r} read {len(first)} and committed offset {first[-1].offset + 1} (kept in "
         f"__consumer_offsets, Kafka's format). Now the broker is killed with SIGKILL -- no shutdown at all.")
    broker.stop(signal.SIGKILL)
    broker.start()
    recovered = broker.log_lines("unclean restart")
    _say(f"   Restarted (pid {broker.proc.pid}): the log dir is recovered as after an unclean shutdown; "
         f"{recovered[-1] if recovered else 'no partition needed a new leader'}.")
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=address, group_id=GROUP, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    committed = consumer.committed(tp)
    rest = _poll(consumer, RECORDS - FIRST_READ)
    consumer.close()
    values = [r.value for r in first + rest]
    if committed != FIRST_READ or values != [b"payment %d" % i for i in range(RECORDS)]:
        raise DemoError(f"after the crash: committed {committed}, {len(values)} records read")
    _say(f"   The group resumed at its committed offset {committed} and read the other {len(rest)}: all "
         f"{RECORDS} acknowledged payments, each once, in order. SIGTERM then stops it with a controlled "
         f"shutdown (KIP-841).")


def _poll(consumer, want: int) -> list:
    got, deadline = [], time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500, max_records=want - len(got)).values():
            got.extend(records)
    return sorted(got, key=lambda r: r.offset)
