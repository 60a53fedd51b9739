"""Several listeners, each with its security protocol (issue 34): parsing as Kafka's listeners,
advertised.listeners, listener.security.protocol.map and inter.broker.listener.name are read
(Kafka's KafkaConfigTest and ListenerNameTest cases, in our words); each connection's Session
names its listener; Metadata, FindCoordinator and DescribeCluster answer with the address of the
listener the request arrived on (Kafka's rule); a cluster registers every listener and
replicates over the inter-broker one; a PLAINTEXT listener off loopback is refused at start
unless --allow-plaintext."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from storage.wire import codec, session  # noqa: E402
from storage.wire.listeners import ListenerError, loopback, resolve  # noqa: E402
from storage.wire.server import FrameServer  # noqa: E402
from tests.wire_support import Broker, Cluster  # noqa: E402

TWO = ("--listeners", "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
       "--listener-security-protocol-map", "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT")


# ---- parsing (KafkaConfigTest: listeners, advertised listeners, the protocol map) ----
def test_a_listener_named_after_a_protocol_has_it_and_the_inter_broker_one_comes_first():
    found, inter = resolve("SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092")
    assert inter == "PLAINTEXT"
    assert [(x.name, x.protocol, x.port) for x in found] == [("PLAINTEXT", "PLAINTEXT", 9092), ("SSL", "SSL", 9093)]
    found, inter = resolve("A://127.0.0.1:1,B://[::1]:2", protocol_map="a:ssl,B:SASL_PLAINTEXT",
                           advertised="B://b.example:20", inter_broker_name="B")
    assert inter == "B" and [x.endpoint() for x in found] == [("B", "b.example", 20, 2), ("A", "127.0.0.1", 1, 1)]
    assert resolve("SSL://127.0.0.1:1", inter_broker_protocol="SSL")[1] == "SSL"
    assert resolve("ONLY://127.0.0.1:1", protocol_map="ONLY:SSL")[1] == "ONLY"     # one listener: its own


@pytest.mark.parametrize("listeners, options, words", [
    ("PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", {}, "appears twice"),
    ("INTERNAL://127.0.0.1:1", {}, "no security protocol for the listener INTERNAL"),
    # KafkaConfigTest.testListenerNameMissingFromListenerSecurityProtocolMap: a map given replaces the default
    ("SSL://127.0.0.1:1", {"protocol_map": "PLAINTEXT:PLAINTEXT"}, "no security protocol for the listener SSL"),
    ("PLAINTEXT://127.0.0.1:1", {"protocol_map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
    ("PLAINTEXT://127.0.0.1", {}, "expected NAME://HOST:PORT"),
    ("PLAINTEXT://127.0.0.1:1", {"advertised": "SSL://a:1"}, "SSL is not one of the listeners"),
    ("PLAINTEXT://127.0.0.1:1", {"advertised": "PLAINTEXT://0.0.0.0:1"}, "a host clients can reach"),
    ("PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:2", {"inter_broker_name": "OTHER"}, "inter.broker.listener.name"),
    ("SSL://127.0.0.1:2", {"inter_broker_protocol": "PLAINTEXT"}, "security.inter.broker.protocol"),
    # KafkaConfigTest.testInterBrokerListenerNameAndSecurityProtocolSet: both is an error
    ("SSL://127.0.0.1:2", {"inter_broker_protocol": "SSL", "inter_broker_name": "SSL"}, "exclusive"),
    ("PLAINTEXT://0.0.0.0:9092", {}, "--allow-plaintext"),
    ("PLAINTEXT://:9092", {}, "--allow-plaintext"),
    ("PLAINTEXT://10.1.2.3:9092,SSL://0.0.0.0:9093", {}, "PLAINTEXT://10.1.2.3:9092 is PLAINTEXT"),
])
def test_a_listener_setting_that_cannot_be_served_is_refused_naming_it(listeners, options, words):
    with pytest.raises(ListenerError) as refused:
        resolve(listeners, **options)
    assert words in str(refused.value)


def test_plaintext_off_loopback_needs_allow_plaintext_and_tls_or_sasl_does_not():
    assert resolve("PLAINTEXT://0.0.0.0:9092", allow_plaintext=True)[0][0].host == "0.0.0.0"
    for protocol in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        assert resolve(f"{protocol}://0.0.0.0:9092")[0][0].protocol == protocol
    assert [loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "localhost", "0.0.0.0", "", "::", "10.0.0.1",
                                  "example.com")] == [True] * 4 + [False] * 5


def test_serve_refuses_plaintext_off_loopback_at_start(tmp_path):
    # Refused before anything binds or is created (so 0.0.0.0 is never listened on here).
    for argv, words in ((["--listen", "0.0.0.0:0"], "PLAINTEXT://0.0.0.0:0 is PLAINTEXT"),
                        (["--listeners", "PLAINTEXT://:0"], "--allow-plaintext"),
                        (["--listen", "127.0.0.1:0", "--listeners", "SSL://127.0.0.1:0"], "not both"),
                        (["--listeners", "SSL://127.0.0.1:0", "--advertised-host", "h"], "--advertised-host goes with")):
        done = subprocess.run([sys.executable, "-m", "storage", "serve", "--data-dir", str(tmp_path / "d"), *argv],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr)
        assert not (tmp_path / "d").exists()


def test_the_controller_reads_the_endpoints_it_stored_before_several_listeners():
    from storage.wire.metadata import BrokerEntry, endpoint_list
    assert endpoint_list(["127.0.0.1", 9092]) == [("PLAINTEXT", "127.0.0.1", 9092, 0)]     # (host, port) of old
    assert endpoint_list([["SSL", "h", 1, 1], ["PLAINTEXT", "h", 2, 0]]) == [("SSL", "h", 1, 1), ("PLAINTEXT", "h", 2, 0)]
    assert endpoint_list(None) == []
    b = BrokerEntry(1, 1, b"", "h", 1, endpoints=(("SSL", "h", 1), ("PLAINTEXT", "p", 2)))
    assert (b.address(), b.address("PLAINTEXT"), b.address("SASL_SSL")) == (("h", 1), ("p", 2), ("", -1))


# ---- each connection's Session names its listener ----
def test_each_connection_s_session_carries_its_listener_s_name_and_protocol():
    seen = []

    async def main():
        server = FrameServer(codec.SUPPORTED)

        async def api_versions(header, request):
            seen.append(session.current())
            return {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}
        server.handlers[18] = api_versions
        from storage.wire.listeners import Listener
        ports = [await server.listen("127.0.0.1", 0, Listener(name, protocol, "127.0.0.1", 0))
                 for name, protocol in (("INTERNAL", "PLAINTEXT"), ("CLIENTS", "SASL_PLAINTEXT"))]
        for port in ports:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            frame = codec.encode_request(18, 0, 1, "t", {})
            writer.write(frame)
            size = int.from_bytes(await reader.readexactly(4), "big")
            await reader.readexactly(size)
            writer.close()
        server.stop_listening()
    asyncio.run(asyncio.wait_for(main(), 30))
    assert [(s.listener, s.protocol, s.authenticated, s.client_host) for s in seen] == [
        ("INTERNAL", "PLAINTEXT", True, "127.0.0.1"), ("CLIENTS", "SASL_PLAINTEXT", False, "127.0.0.1")]


# ---- Metadata, FindCoordinator, DescribeCluster: the listener the request arrived on ----
def _addresses(bootstrap: str):
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = {b.id: f"{b.host}:{b.port}" for b in admin.list_topics(timeout=20).brokers.values()}
    cluster = admin.describe_cluster(request_timeout=20).result(30)
    described = {n.id: f"{n.host}:{n.port}" for n in cluster.nodes}
    return brokers, described


def test_an_embedded_broker_tells_each_listener_its_own_address(tmp_path):
    broker = Broker(tmp_path / "b", *TWO, "--advertised-listeners",
                    "INTERNAL://127.0.0.1:0,EXTERNAL://localhost:0").start()
    try:
        internal, external = broker.listeners["INTERNAL"][1], broker.listeners["EXTERNAL"][1]
        assert broker.bootstrap == internal         # the ready line names the inter-broker listener
        external_told = "localhost:" + external.rpartition(":")[2]
        assert _addresses(internal) == ({1: internal}, {1: internal})
        assert _addresses(external) == ({1: external_told}, {1: external_told})
        # A consumer group's coordinator is found on the listener asked, and the group works there.
        from confluent_kafka import Consumer, Producer
        producer = Producer({"bootstrap.servers": external})
        producer.produce("t", b"v")
        assert producer.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": external, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["t"])
        message = None
        for _ in range(40):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                break
        assert message is not None and message.value() == b"v"
        consumer.commit(asynchronous=False)
        consumer.close()
    finally:
        broker.stop()


def test_a_cluster_registers_every_listener_and_replicates_over_the_inter_broker_one(tmp_path):
    cluster = Cluster(tmp_path, brokers=3, broker_args=(*TWO, "--inter-broker-listener-name", "INTERNAL"))
    try:
        externals = {n: b.listeners["EXTERNAL"][1] for n, b in cluster.brokers.items()}
        internals = {n: b.listeners["INTERNAL"][1] for n, b in cluster.brokers.items()}
        assert _addresses(externals[2]) == (externals, externals)
        assert _addresses(internals[3]) == (internals, internals)
        cluster.create("r", 2)
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": externals[1], "acks": "all"})
        for i in range(20):
            producer.produce("r", f"v{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        cluster.wait_in_sync("r")
        cluster.assert_replicas_identical("r")
    finally:
        cluster.stop()
