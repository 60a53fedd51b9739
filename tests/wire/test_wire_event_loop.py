"""`storage serve --event-loop asyncio|uvloop` (issue 33, "A fast event loop"): the broker runs on
the loop asked for, serves real clients the same on either, and refuses uvloop cleanly when it is
not installed.  The speed of each is measured by the wire benchmarks (benchmarks/), not here."""
from __future__ import annotations

import subprocess
import sys

import pytest

from storage.cli import serve
from storage.cli.output import UsageError
from tests.wire_support import Broker

ck = pytest.importorskip("confluent_kafka")


def _round_trip(bootstrap: str, topic: str, count: int = 200) -> list[bytes]:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i)
    assert producer.flush(30) == 0
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "loop", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    got = []
    for _ in range(60):
        got += [m.value() for m in consumer.consume(500, 0.5) if not m.error()]
        if len(got) >= count:
            break
    consumer.close()
    return got


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_runs_on_the_loop_asked_for(tmp_path, loop):
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    broker = Broker(tmp_path / "b", "--event-loop", loop).start()
    try:
        got = _round_trip(broker.bootstrap, f"on-{loop}")
        assert got == [b"value-%d" % i for i in range(200)]
        expected = "uvloop.Loop" if loop == "uvloop" else "asyncio.unix_events._UnixSelectorEventLoop"
        assert f"event loop: {expected}" in broker.stderr()
    finally:
        assert broker.stop() == 0


def test_uvloop_missing_is_a_usage_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)          # `import uvloop` raises ImportError
    with pytest.raises(UsageError, match="uvloop is not installed"):
        serve.loop_factory("uvloop")
    assert serve.loop_factory("asyncio") is None


def test_unknown_loop_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "storage", "serve", "--data-dir", str(tmp_path / "d"),
                           "--event-loop", "trio"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--event-loop" in done.stderr
