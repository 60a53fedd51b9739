"""Kafka's own Java client (kafka-clients 3.9.1, the jar the JVM interop tests use) against a
`python -m storage serve` process (slow tier): tests/jvm/WireClientCheck.java creates a topic,
produces keyed records idempotently with acks=all, consumes in a group, commits, and resumes at
the committed offsets.  Skips with the reason when java/javac or the jars are missing."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_interop_jvm import ensure_jars, jar_cache, java_major
from tests.wire_support import Broker, readme_table, served_versions

pytestmark = pytest.mark.slow
pytest.importorskip("kio", reason="the wire front end needs kio")

SOURCE = Path(__file__).resolve().parent / "jvm" / "WireClientCheck.java"


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory) -> str:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None or java_major(tool) < 17:
            pytest.skip(f"{tool} 17+ not on PATH: the Java client test needs a JDK 17+")
    try:
        jars = ensure_jars(jar_cache())
    except RuntimeError as exc:
        pytest.skip(f"Kafka jars unavailable: {exc}")
    classes = tmp_path_factory.mktemp("wire-client-check")
    jar_path = os.pathsep.join(map(str, jars))
    proc = subprocess.run(["javac", "-d", str(classes), "-cp", jar_path, str(SOURCE)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}{proc.stderr}"
    return os.pathsep.join([str(classes), jar_path])


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
    used = served_versions(broker.stderr())
    table = readme_table()
    column = next(c for c in next(iter(table.values())) if c.startswith("Java kafka-clients"))
    claimed = {api: row[column] for api, row in table.items() if row[column] != "-"}
    assert claimed == {api: ", ".join(f"v{v}" for v in sorted(vs)) for api, vs in used.items()}
