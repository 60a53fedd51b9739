"""kafkajs 2.2.4 (Node.js) against a `python -m storage serve` process (slow tier):
tests/wire/node/wire_client_check.js creates a topic, produces keyed records idempotently with
acks=all, consumes in a group committing each offset, and resumes at the committed offsets.
kafkajs is installed once with npm into $KPS_NODE_CACHE or ~/.cache/kafka-partition-storage/node;
the test skips with the reason when node/npm are missing or the install fails."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.wire_support import Broker, assert_readme_column

pytestmark = pytest.mark.slow
pytest.importorskip("kio", reason="the wire front end needs kio")

KAFKAJS = "kafkajs@2.2.4"
SCRIPT = Path(__file__).resolve().parent / "node" / "wire_client_check.js"


@pytest.fixture(scope="module")
def node_path() -> str:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the kafkajs test")
    cache = Path(os.environ.get("KPS_NODE_CACHE") or Path.home() / ".cache" / "kafka-partition-storage" / "node")
    modules = cache / "node_modules"
    if not (modules / "kafkajs" / "package.json").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(cache), KAFKAJS],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode or not (modules / "kafkajs" / "package.json").is_file():
            lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
            pytest.skip(f"npm install {KAFKAJS} failed: {lines[-1] if lines else proc.returncode}")
    return str(modules)


def test_kafkajs_produce_consume_commit_resume(tmp_path, node_path):
    broker = Broker(tmp_path / "data").start()
    try:
        proc = subprocess.run(["node", str(SCRIPT), broker.bootstrap, "js-orders", "js-group", "200"],
                              capture_output=True, text=True, timeout=240, env={**os.environ, "NODE_PATH": node_path})
    finally:
        broker.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr + broker.stderr()[-3000:]
    assert proc.stdout.splitlines() == ["created js-orders 3", "produced 200", "consumed 200", "produced 10",
                                        "consumed 10", "ok 200 10"]
    assert_readme_column("kafkajs", broker.stderr())
