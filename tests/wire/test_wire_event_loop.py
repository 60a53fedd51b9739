"""`--event-loop auto|asyncio|uvloop` (issue 33, "A fast event loop"): a broker, a controller and
every process of `storage cluster` run on the loop asked for; the default, auto, is uvloop when it
imports and asyncio's loop otherwise; either serves real clients the same, and uvloop asked for but
missing is a usage error.  The speed of each is measured by the wire benchmarks (benchmarks/) and
docs/performance.md, not here.  STORAGE_TEST_EVENT_LOOP runs every test broker of tests/wire_support
on one loop (the wire tests pass on both)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from storage.cli import build_parser, serve
from storage.cli.cluster import plan
from storage.cli.output import UsageError
from tests.wire_support import Broker, event_loop_flag

UVLOOP = "uvloop.Loop"
ASYNCIO = "asyncio.unix_events._UnixSelectorEventLoop"

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


@pytest.mark.parametrize("loop", ["asyncio", "uvloop", None])
def test_serve_runs_on_the_loop_asked_for(tmp_path, loop, monkeypatch):
    """None: no flag, the default (auto): uvloop, which the install has (a dependency)."""
    pytest.importorskip("uvloop")
    monkeypatch.delenv("STORAGE_TEST_EVENT_LOOP", raising=False)
    broker = Broker(tmp_path / "b", *(["--event-loop", loop] if loop else [])).start()
    try:
        got = _round_trip(broker.bootstrap, f"on-{loop}")
        assert got == [b"value-%d" % i for i in range(200)]
        assert f"event loop: {ASYNCIO if loop == 'asyncio' else UVLOOP}" in broker.stderr()
    finally:
        assert broker.stop() == 0
    assert "Traceback" not in broker.stderr()


@pytest.mark.parametrize("loop", ["asyncio", None])
def test_the_controller_runs_on_the_loop_asked_for(tmp_path, loop, monkeypatch):
    """The controller process takes --event-loop too (default auto: uvloop), and a SIGTERM stops it
    cleanly on either loop."""
    pytest.importorskip("uvloop")
    monkeypatch.delenv("STORAGE_TEST_EVENT_LOOP", raising=False)
    controller = Broker(tmp_path / "c", *(["--event-loop", loop] if loop else []), command="controller").start()
    try:
        assert f"event loop: {ASYNCIO if loop else UVLOOP}" in controller.stderr()
    finally:
        assert controller.stop() == 0
    assert "Traceback" not in controller.stderr()


def test_the_cluster_gives_every_process_its_loop(tmp_path):
    """`storage cluster --event-loop X` starts the controller and every broker with --event-loop X;
    without it, with the default (auto)."""
    parser = build_parser()
    for given, expected in ((["--event-loop", "asyncio"], "asyncio"), ([], "auto")):
        args = parser.parse_args(["cluster", "--data-dir", str(tmp_path), "--brokers", "2", *given])
        children = plan(args, str(tmp_path))
        assert [c.argv[0] for c in children] == ["controller", "serve", "serve"]
        for child in children:
            at = child.argv.index("--event-loop")
            assert child.argv[at + 1] == expected, child.argv


def test_auto_is_uvloop_when_it_imports_else_asyncio(monkeypatch):
    uvloop = pytest.importorskip("uvloop")
    assert serve.loop_factory("auto") is uvloop.new_event_loop
    assert serve.loop_factory("uvloop") is uvloop.new_event_loop
    assert serve.loop_factory("asyncio") is None
    monkeypatch.setitem(sys.modules, "uvloop", None)          # `import uvloop` raises ImportError
    assert serve.loop_factory("auto") is None                 # asyncio's loop, no error
    with pytest.raises(UsageError, match="uvloop is not installed"):
        serve.loop_factory("uvloop")
    assert serve.loop_factory("asyncio") is None


def test_the_test_brokers_loop_comes_from_the_environment(monkeypatch):
    """STORAGE_TEST_EVENT_LOOP (tests/wire_support): every serve and controller process of the
    tests on that loop, unless the test names its own."""
    monkeypatch.delenv("STORAGE_TEST_EVENT_LOOP", raising=False)
    assert event_loop_flag("serve") == []
    monkeypatch.setenv("STORAGE_TEST_EVENT_LOOP", "asyncio")
    assert event_loop_flag("serve") == event_loop_flag("controller") == ["--event-loop", "asyncio"]
    assert event_loop_flag("serve", ("--event-loop", "uvloop")) == []
    assert event_loop_flag("topics") == []


def test_unknown_loop_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "storage", "serve", "--data-dir", str(tmp_path / "d"),
                           "--event-loop", "trio"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--event-loop" in done.stderr


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_client_hello_sent_before_the_loop_accepts_reaches_the_tls_handshake(tmp_path, loop_kind):
    """The clients' ClientHellos are in the socket before the loop accepts (it is busy): each
    handshake still completes and the request is answered.  uvloop starts reading a new transport
    after its protocol's connection_made, so a listener that paused there and upgraded with
    loop.start_tls lost such a ClientHello to the plain protocol, and the handshake timed out
    (storage/wire/tls_accept.py)."""
    import asyncio
    import socket
    import ssl
    import threading
    import time

    from storage.wire import codec
    from storage.wire.listeners import Listener
    from storage.wire.tls import TlsSettings
    from tests.tls_support import api_versions_server, make_pki

    factory = serve.loop_factory(loop_kind)
    pki = make_pki(tmp_path / "pki")
    keystore = pki.issue("server", [("CN", "localhost")], server=True)
    clients = 4

    def exchange(port: int, out: list) -> None:
        context = ssl.create_default_context(cafile=pki.truststore)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as s:
                    s.sendall(codec.encode_request(18, 0, 7, "t", {}))
                    out.append(s.recv(4))
        except (OSError, TimeoutError) as exc:
            out.append(exc)

    async def main() -> list:
        server, port = await api_versions_server(TlsSettings(keystore).server_context(),
                                                 Listener("SECURE", "SSL", "127.0.0.1", 0))
        out: list = []
        threads = [threading.Thread(target=exchange, args=(port, out)) for _ in range(clients)]
        for t in threads:
            t.start()
        time.sleep(0.5)             # the loop is busy: the connections and their ClientHellos wait
        await asyncio.to_thread(lambda: [t.join(15) for t in threads])
        server.stop_listening()
        return out

    with asyncio.Runner(loop_factory=factory) as runner:
        out = runner.run(main())
    assert out == [b"\x00\x00\x00\x0a"] * clients
