"""Kafka's own Java client (kafka-clients 3.9.1, the jar the JVM interop tests use) against a
`python -m storage serve` process (slow tier): tests/interop/jvm/WireClientCheck.java creates a topic,
produces keyed records idempotently with acks=all, consumes in a group, commits, and resumes at
the committed offsets.  Skips with the reason when java/javac or the jars are missing."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.interop.test_interop_jvm import jvm_classpath
from tests.wire_support import Broker, assert_readme_column

pytestmark = pytest.mark.slow
pytest.importorskip("kio", reason="the wire front end needs kio")

SOURCE = Path(__file__).resolve().parents[1] / "interop" / "jvm" / "WireClientCheck.java"


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory) -> str:
    return jvm_classpath(tmp_path_factory, SOURCE, "the Java client test")


def test_java_client_produce_consume_commit_resume(tmp_path, java_classpath):
    broker = Broker(tmp_path / "data").start()
    try:
        proc = subprocess.run(["java", "-cp", java_classpath, "WireClientCheck", broker.bootstrap, "java-orders",
                               "java-group", "200"], capture_output=True, text=True, timeout=240)
    finally:
        broker.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr + broker.stderr()[-3000:]
    assert proc.stdout.splitlines() == ["created java-orders 3", "produced 200", "consumed 200", "produced 10",
                                        "consumed 10", "ok 200 10"]
    assert_readme_column("Java kafka-clients", broker.stderr())


TXN_SOURCE = Path(__file__).resolve().parents[1] / "interop" / "jvm" / "WireTxnCheck.java"


def test_java_client_exactly_once_consume_transform_produce(tmp_path, tmp_path_factory):
    """kafka-clients' transactional producer and read_committed consumer (tests/interop/jvm/
    WireTxnCheck.java): every input record copied once, the aborted record never read, the
    group's offsets committed with the transactions, and the Admin client's listTransactions /
    describeTransactions (KIP-664) answered."""
    classpath = jvm_classpath(tmp_path_factory, TXN_SOURCE, "the Java transactions test")
    broker = Broker(tmp_path / "data", "--transaction-partitions", "3").start()
    try:
        proc = subprocess.run(["java", "-cp", classpath, "WireTxnCheck", broker.bootstrap, "eos-in", "eos-out",
                               "eos-group", "50"], capture_output=True, text=True, timeout=240)
    finally:
        broker.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr + broker.stderr()[-3000:]
    assert proc.stdout.splitlines() == ["produced 50", "copied 50", "read 50", "committed 50",
                                        "listed java-eos CompleteCommit", "described CompleteCommit 0", "ok 50 true"]
