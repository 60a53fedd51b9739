"""TLS on SSL listeners (issue 34): Kafka's PEM settings (ssl.keystore.location with the key and
its chain in one file, ssl.key.password, ssl.truststore.location, ssl.client.auth), real clients
producing and consuming over TLS, mutual TLS, the principal a client certificate proves (RFC 2253,
as Kafka's DefaultKafkaPrincipalBuilder; its test testPrincipalIfSSLPeerIsNotAuthenticated and
X500Principal's own forms, in our words), a broken handshake closing only its connection, a
cluster whose brokers and controller talk TLS, and bad settings refused at start naming them."""
from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
pytest.importorskip("cryptography")
from storage.wire import codec  # noqa: E402
from storage.wire.listeners import Listener  # noqa: E402
from storage.wire.tls import TlsConfigError, TlsSettings, rfc2253  # noqa: E402
from tests.tls_support import api_versions_server, make_pki  # noqa: E402
from tests.wire_support import Broker, Cluster  # noqa: E402


@pytest.fixture
def pki(tmp_path):
    ca = make_pki(tmp_path / "pki")
    ca.server = ca.issue("server", [("CN", "localhost")], server=True)
    ca.alice = ca.issue("alice", [("C", "US"), ("O", "example"), ("OU", "eng"), ("CN", "alice")])
    return ca


def _ssl_flags(pki, *extra):
    return ("--ssl-keystore", pki.server, "--ssl-truststore", pki.truststore, *extra)


# ---- the principal: a certificate's subject in RFC 2253 form ----
def test_a_subject_is_written_as_x500principal_writes_it():
    subject = ((("countryName", "US"),), (("organizationName", "example"),),
               (("organizationalUnitName", "eng"),), (("commonName", "alice"),))
    assert rfc2253(subject) == "CN=alice,OU=eng,O=example,C=US"
    # Multi-valued RDNs join with +; RFC 2253's specials are escaped, a leading or trailing blank too.
    assert rfc2253(((("commonName", "a,b"), ("userId", "x+y")), (("domainComponent", " com "),))) == \
        "DC=\\ com\\ ,CN=a\\,b+UID=x\\+y"
    assert rfc2253(((("commonName", '#1 "q" <a>;=\\'),),)) == 'CN=\\#1 \\"q\\" \\<a\\>\\;\\=\\\\'


# ---- settings refused at start, naming them ----
def test_bad_tls_settings_are_refused_naming_the_setting(pki, tmp_path):
    other = make_pki(tmp_path / "other", "other")
    mismatched = tmp_path / "mismatch.pem"
    alice, server = open(pki.alice).read(), open(pki.server).read()
    mismatched.write_text(alice[:alice.index("-----BEGIN CERT")] + server[server.index("-----BEGIN CERT"):])
    locked = pki.issue("locked", [("CN", "localhost")], server=True, password=b"s3cret")
    unreadable = tmp_path / "unreadable.pem"
    unreadable.write_text("x")
    unreadable.chmod(0)
    cases = [(TlsSettings(), "ssl.keystore.location: an SSL or SASL_SSL listener needs a keystore"),
             (TlsSettings(str(tmp_path / "none.pem")), "no such file"),
             (TlsSettings(pki.truststore), "ssl.keystore.location"),                # a certificate, no key
             (TlsSettings(str(mismatched)), "does not match the certificate"),
             (TlsSettings(locked), "ssl.key.password"),
             (TlsSettings(locked, "wrong"), "ssl.key.password"),
             (TlsSettings(pki.server, client_auth="required"), "ssl.truststore.location"),
             (TlsSettings(pki.server, truststore=pki.server + ".x", client_auth="requested"), "no such file"),
             (TlsSettings(pki.server, client_auth="maybe"), "ssl.client.auth")]
    import os
    if os.geteuid() != 0:
        cases.append((TlsSettings(str(unreadable)), "not readable"))
    for settings, words in cases:
        with pytest.raises(TlsConfigError) as refused:
            settings.server_context()
        assert words in str(refused.value), (settings, str(refused.value))
    assert TlsSettings(locked, "s3cret").server_context() is not None
    assert TlsSettings(pki.server, truststore=other.truststore, client_auth="required").server_context() is not None


def test_serve_refuses_a_bad_keystore_at_start_naming_it(pki, tmp_path):
    for argv, words in ((["--listeners", "SSL://127.0.0.1:0"], "ssl.keystore.location: an SSL or SASL_SSL"),
                        (["--listeners", "SSL://127.0.0.1:0", "--ssl-keystore", str(tmp_path / "no.pem")],
                         f"ssl.keystore.location {tmp_path / 'no.pem'}: no such file"),
                        (["--listeners", "SSL://127.0.0.1:0", "--ssl-keystore", pki.truststore],
                         "ssl.keystore.location")):
        done = subprocess.run([sys.executable, "-m", "storage", "serve", "--data-dir", str(tmp_path / "d"), *argv],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr)
        assert not (tmp_path / "d").exists()


# ---- in-process: the Session of a TLS connection ----
def _exchange(port: int, context: ssl.SSLContext | None) -> bytes | None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        s = context.wrap_socket(raw, server_hostname="localhost") if context is not None else raw
        s.sendall(codec.encode_request(18, 0, 7, "t", {}))
        head = s.recv(4)
        return head or None


def _refused(port: int, context: ssl.SSLContext) -> bool:
    """Whether the broker refused the connection: under TLS 1.3 the client's handshake ends
    before the server checks its certificate, so the refusal is an alert or the end of the stream."""
    try:
        return _exchange(port, context) is None
    except (ssl.SSLError, ConnectionError):
        return True


def test_the_session_of_a_tls_connection_carries_the_certificate_s_principal(pki):
    seen = []

    def client(keystore=None):
        context = ssl.create_default_context(cafile=pki.truststore)
        if keystore:
            context.load_cert_chain(keystore)
        return context

    async def main(client_auth):
        server, port = await api_versions_server(
            TlsSettings(pki.server, truststore=pki.truststore, client_auth=client_auth).server_context(),
            Listener("SECURE", "SSL", "127.0.0.1", 0),
            lambda s: seen.append((client_auth, s.listener, s.protocol, s.principal)))
        answers = [await asyncio.to_thread(_exchange, port, client(keystore)) for keystore in (pki.alice, None)]
        server.stop_listening()
        return answers

    assert all(asyncio.run(main("requested")))
    # The principal is the subject as X500Principal.getName() (RFC 2253) writes it, which for
    # these attributes is cryptography's RFC 4514 form too.
    from cryptography import x509
    pem = open(pki.alice, "rb").read()
    subject = x509.load_pem_x509_certificate(pem[pem.index(b"-----BEGIN CERTIFICATE"):]).subject.rfc4514_string()
    assert subject == "CN=alice,OU=eng,O=example,C=US"
    assert seen == [("requested", "SECURE", "SSL", f"User:{subject}"), ("requested", "SECURE", "SSL", "User:ANONYMOUS")]
    seen.clear()
    assert all(asyncio.run(main("none")))       # no certificate asked for: anonymous, even with one
    assert seen == [("none", "SECURE", "SSL", "User:ANONYMOUS")] * 2


def test_a_sasl_ssl_connection_is_tls_first_and_unauthenticated_until_sasl(pki):
    seen = []

    async def main():
        server, port = await api_versions_server(
            TlsSettings(pki.server).server_context(), Listener("CLIENTS", "SASL_SSL", "127.0.0.1", 0),
            lambda s: seen.append((s.listener, s.protocol, s.tls, s.sasl, s.authenticated)))
        answers = [await asyncio.to_thread(_exchange, port, ssl.create_default_context(cafile=pki.truststore)),
                   await asyncio.to_thread(_exchange, port, None)]
        server.stop_listening()
        return answers
    assert asyncio.run(main())[1] is None           # plaintext on a SASL_SSL port: closed
    assert seen == [("CLIENTS", "SASL_SSL", True, True, False)]


# ---- brokers over TLS ----
def _consume(consumer, want: int, deadline_s: float = 30) -> list:
    got, deadline = [], time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value())
    return got


def test_real_clients_produce_and_consume_over_ssl_and_metadata_tells_each_listener_its_port(pki, tmp_path):
    broker = Broker(tmp_path / "b", "--listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                    *_ssl_flags(pki)).start()
    try:
        plain, secure = broker.listeners["PLAINTEXT"][1], broker.listeners["SSL"][1]
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient
        tls = {"security.protocol": "SSL", "ssl.ca.location": pki.truststore}
        told = AdminClient({"bootstrap.servers": secure, **tls}).list_topics(timeout=20).brokers[1]
        assert f"{told.host}:{told.port}" == secure
        told = AdminClient({"bootstrap.servers": plain}).list_topics(timeout=20).brokers[1]
        assert f"{told.host}:{told.port}" == plain
        producer = Producer({"bootstrap.servers": secure, **tls})
        for i in range(5):
            producer.produce("s", f"c{i}".encode())
        assert producer.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": secure, **tls, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["s"])
        assert _consume(consumer, 5) == [f"c{i}".encode() for i in range(5)]
        consumer.close()
        # kafka-python too, over the same listener.
        import kafka
        kp = kafka.KafkaProducer(bootstrap_servers=secure, security_protocol="SSL", ssl_cafile=pki.truststore)
        kp.send("s", b"k5").get(20)
        kp.close()
        kc = kafka.KafkaConsumer("s", bootstrap_servers=secure, security_protocol="SSL", ssl_cafile=pki.truststore,
                                 auto_offset_reset="earliest", consumer_timeout_ms=10_000)
        assert [m.value for m in kc][-1] == b"k5"
        kc.close()
    finally:
        broker.stop()


def test_mutual_tls_refuses_a_client_without_a_certificate_and_a_plaintext_one_does_not_stop_it(pki, tmp_path):
    broker = Broker(tmp_path / "b", "--listeners", "SSL://127.0.0.1:0",
                    *_ssl_flags(pki, "--ssl-client-auth", "required")).start()
    try:
        secure = broker.listeners["SSL"][1]
        port = int(secure.rpartition(":")[2])
        # A plaintext client on the TLS port: its connection is closed, one line logged.
        assert _exchange(port, None) is None
        # No client certificate under `required`: refused.
        assert _refused(port, ssl.create_default_context(cafile=pki.truststore))
        # A certificate from a CA not trusted: refused too.
        stranger = make_pki(tmp_path / "stranger", "stranger")
        context = ssl.create_default_context(cafile=pki.truststore)
        context.load_cert_chain(stranger.issue("mallory", [("CN", "mallory")]))
        assert _refused(port, context)
        # With alice's certificate: served, by a real client as well.
        context = ssl.create_default_context(cafile=pki.truststore)
        context.load_cert_chain(pki.alice)
        assert _exchange(port, context) is not None
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": secure, "security.protocol": "SSL", "ssl.ca.location": pki.truststore,
                             "ssl.certificate.location": pki.alice, "ssl.key.location": pki.alice})
        producer.produce("m", b"v")
        assert producer.flush(20) == 0
        assert broker.alive()
        failures = [line for line in broker.stderr().splitlines() if "TLS handshake with" in line]
        assert len(failures) >= 3 and all("failed" in line for line in failures)
        assert "Traceback" not in broker.stderr()
    finally:
        broker.stop()


def test_a_cluster_replicates_over_an_ssl_inter_broker_listener_and_reaches_its_controller_over_tls(pki, tmp_path):
    tls = _ssl_flags(pki, "--ssl-client-auth", "required")
    cluster = Cluster(tmp_path, brokers=3, controller_args=("--listeners", "SSL://127.0.0.1:0", *tls),
                      broker_args=("--listeners", "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                                   "--controller-security-protocol", "SSL", *tls))
    try:
        plain = ",".join(b.listeners["PLAINTEXT"][1] for b in cluster.brokers.values())
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": plain})
        admin.create_topics([NewTopic("r", 2, 3)])["r"].result(30)
        producer = Producer({"bootstrap.servers": plain, "acks": "all"})
        for i in range(20):
            producer.produce("r", f"v{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        cluster.wait_in_sync("r")
        cluster.assert_replicas_identical("r")
        for b in cluster.brokers.values():
            assert "TLS handshake" not in b.stderr()
    finally:
        cluster.stop()


def test_a_node_checks_the_host_name_of_the_tls_listener_it_connects_to_unless_told_not_to(pki):
    # Kafka's ssl.endpoint.identification.algorithm: https (the default) checks the certificate
    # names the host connected to; empty trusts any certificate the truststore's CAs signed.
    from storage.wire.client import Peer, PeerError
    elsewhere = pki.issue("elsewhere", [("CN", "broker.example")])       # no 127.0.0.1 in it

    async def main(algorithm: str):
        server, port = await api_versions_server(TlsSettings(elsewhere).server_context(),
                                                 Listener("SSL", "SSL", "127.0.0.1", 0))
        peer = Peer("127.0.0.1", port, timeout_s=10, tls=TlsSettings(
            truststore=pki.truststore, endpoint_identification=algorithm).client_context())
        try:
            return (await peer.call(18, 0, {})).error_code
        except PeerError as exc:
            return str(exc)
        finally:
            peer.close()
            server.stop_listening()
    assert "CERTIFICATE_VERIFY_FAILED" in asyncio.run(main("https"))
    assert asyncio.run(main("")) == 0
    with pytest.raises(TlsConfigError):
        TlsSettings(endpoint_identification="http").client_context()
