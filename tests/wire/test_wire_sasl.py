"""SASL PLAIN and SCRAM on a SASL_PLAINTEXT listener, and the users' SCRAM credentials (issue 34):
SaslHandshake and SaslAuthenticate as Kafka's SaslServerAuthenticator answers them, the
credentials as Kafka's ScramControlManager checks and keeps them (metadata records 11 and 12).
Real clients (confluent-kafka, kafka-python) against an embedded broker run in this process
with its listener's Session set to SASL_PLAINTEXT; raw frames for the refusals.  Kafka's tests
ported are named at each case."""
from __future__ import annotations

import asyncio
import inspect
import os
import socket
import struct
import threading

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("scramp")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors  # noqa: E402
from storage.replication.controller import Controller  # noqa: E402
from storage.topics import metadata_records as mr  # noqa: E402
from storage.wire import codec, scram  # noqa: E402
from storage.wire.metadata import MetadataImage  # noqa: E402
from storage.wire.node import Node  # noqa: E402
from storage.wire.server import BrokerServer  # noqa: E402
from storage.wire.session import Session  # noqa: E402
from tests.wire_support import Broker  # noqa: E402

try:                                        # the listeners of issue 34 (wire/listeners.py), once merged
    from storage.wire.listeners import Listener
except ImportError:
    Listener = None

SHA256, SHA512 = 1, 2
PASSWORD = "alice-secret"


def upsertion(name: str, mechanism: int, password: str, iterations: int = 4096, salt: bytes | None = None):
    salt = salt or os.urandom(16)
    return (name, mechanism, iterations, salt, scram.salted_password(mechanism, password, salt, iterations))


class InProcessBroker:
    """An embedded broker on an event loop in a thread, its listener SASL_PLAINTEXT (or `protocol`)."""

    def __init__(self, data_dir, protocol: str = "SASL_PLAINTEXT"):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.data_dir, self.protocol = data_dir, protocol
        self.server = self.call(self._start())

    async def _start(self) -> BrokerServer:
        self.node = Node(self.data_dir, port=0, offsets_partitions=1, log_config=LogConfig(fsync=False),
                         background=False)
        if Listener is not None:
            self.node.listeners = [Listener(self.protocol, self.protocol, "127.0.0.1", 0)]
        server = BrokerServer(self.node, initial_rebalance_delay_ms=0)
        server.listener = Session(listener=self.protocol, protocol=self.protocol)
        await server.start()
        return server

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.node.port}"

    def call(self, coroutine, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def add_users(self, *upsertions) -> list:
        return self.call(self.node.alter_scram_credentials([], list(upsertions)))

    def log_end(self, topic: str) -> int:
        async def end():
            return self.node.logdir.partition(topic, 0).log_end_offset if (topic, 0) in self.node.logdir.logs() else 0
        return self.call(end())

    def close(self) -> None:
        try:
            self.call(self.server.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@pytest.fixture
def broker(tmp_path):
    b = InProcessBroker(tmp_path / "data")
    assert b.add_users(upsertion("alice", SHA256, PASSWORD), upsertion("bob", SHA512, "bob-secret")) == [
        ("alice", Errors.NONE, None), ("bob", Errors.NONE, None)]
    yield b
    b.close()


def client_conf(b: InProcessBroker | str, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": b if isinstance(b, str) else b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password, "socket.timeout.ms": 5000}


def produce_and_consume(conf: dict, topic: str, n: int = 5) -> list[bytes]:
    producer = Producer(dict(conf, **{"message.timeout.ms": 10_000}))
    for i in range(n):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(15) == 0
    consumer = Consumer(dict(conf, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        for _ in range(100):
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
            if len(got) == n:
                break
    finally:
        consumer.close()
    return got


# ---- real clients -------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism,user,password", [("PLAIN", "alice", PASSWORD), ("SCRAM-SHA-256", "alice", PASSWORD),
                                                     ("SCRAM-SHA-512", "bob", "bob-secret"), ("PLAIN", "bob", "bob-secret")])
def test_confluent_kafka_produces_and_consumes(broker, mechanism, user, password):
    """SaslAuthenticatorTest.testValidSaslPlainOverPlaintext / testValidSaslScramMechanisms."""
    topic = "t-" + mechanism.lower()
    assert produce_and_consume(client_conf(broker, mechanism, user, password), topic) == [b"v%d" % i for i in range(5)]
    assert broker.log_end(topic) == 5


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_kafka_python_produces_and_consumes(broker, mechanism):
    kafka = pytest.importorskip("kafka")
    conf = dict(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username="alice", sasl_plain_password=PASSWORD)
    topic = "kp-" + mechanism.lower()
    producer = kafka.KafkaProducer(**conf)
    for i in range(3):
        producer.send(topic, b"k%d" % i).get(15)
    producer.close(5)
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, **conf)
    values = [m.value for m in consumer]
    consumer.close()
    assert values == [b"k0", b"k1", b"k2"]


@pytest.mark.parametrize("mechanism,user,password", [("SCRAM-SHA-256", "alice", "wrong"), ("PLAIN", "alice", "wrong"),
                                                     ("SCRAM-SHA-256", "nobody", "x"), ("PLAIN", "nobody", "x"),
                                                     ("SCRAM-SHA-512", "alice", PASSWORD)])
def test_wrong_password_or_unknown_user_is_refused_and_nothing_written(broker, mechanism, user, password):
    """SaslAuthenticatorTest.testInvalidPasswordSaslScram / testUnknownUserSaslScram /
    testInvalidPasswordSaslPlain / testInvalidUsernameSaslPlain /
    testUserCredentialsUnavailableForScramMechanism (alice has no SCRAM-SHA-512 credential)."""
    producer = Producer(dict(client_conf(broker, mechanism, user, password), **{"message.timeout.ms": 3000}))
    errors = []
    producer.produce("refused", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert broker.log_end("refused") == 0
    assert "refused" not in broker.node.topic_names()


# ---- raw frames: the exchange's answers ----------------------------------------------------------
class Conn:
    def __init__(self, b: InProcessBroker):
        self.s = socket.create_connection(("127.0.0.1", b.node.port), timeout=10)
        self.correlation = 0

    def ask(self, key: int, version: int, body: dict):
        self.correlation += 1
        self.s.sendall(codec.encode_request(key, version, self.correlation, "raw", body))
        head = self._read(4)
        if head is None:
            return None
        data = self._read(struct.unpack(">i", head)[0])
        return codec.decode_response(key, version, data)[1]

    def closed(self) -> bool:
        """Whether the broker closed the connection (within 2 s)."""
        self.s.settimeout(2)
        try:
            return self.s.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def _read(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            piece = self.s.recv(n - len(out))
            if not piece:
                return None
            out += piece
        return out

    def close(self) -> None:
        self.s.close()


def scram_client(mechanism: str, user: str, password: str):
    import scramp
    return scramp.ScramClient([mechanism], user, password)


def authenticate_scram(conn: Conn, mechanism: str, user: str, password: str):
    assert conn.ask(17, 1, {"mechanism": mechanism}).error_code == 0
    client = scram_client(mechanism, user, password)
    first = conn.ask(36, 2, {"auth_bytes": client.get_client_first().encode()})
    if first.error_code:
        return first
    client.set_server_first(first.auth_bytes.decode())
    final = conn.ask(36, 2, {"auth_bytes": client.get_client_final().encode()})
    if final.error_code == 0:
        client.set_server_final(final.auth_bytes.decode())     # the server proved it holds the key
    return final


def test_scram_exchange_then_requests_and_a_second_handshake_is_illegal(broker):
    """SaslAuthenticatorTest.testValidSaslScramSha256; a handshake after success is ILLEGAL_SASL_STATE
    (KafkaApis' answer) and the connection stays."""
    c = Conn(broker)
    try:
        assert c.ask(18, 3, {"client_software_name": "raw", "client_software_version": "1"}).error_code == 0
        final = authenticate_scram(c, "SCRAM-SHA-256", "alice", PASSWORD)
        assert final.error_code == 0 and final.session_lifetime.total_seconds() == 0
        assert c.ask(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False}).brokers
        again = c.ask(17, 1, {"mechanism": "PLAIN"})
        assert again.error_code == Errors.ILLEGAL_SASL_STATE
        assert c.ask(36, 2, {"auth_bytes": b"x"}).error_code == Errors.ILLEGAL_SASL_STATE
        assert c.ask(18, 3, {"client_software_name": "raw", "client_software_version": "1"}).error_code == 0
    finally:
        c.close()


def test_bad_scram_password_answers_kafkas_message_then_closes(broker):
    """SaslAuthenticatorTest.testInvalidPasswordSaslScram and testClientExceptionDoesNotContainSensitiveData:
    58 with the generic message, the connection closed after the answer."""
    c = Conn(broker)
    try:
        final = authenticate_scram(c, "SCRAM-SHA-256", "alice", "wrong")
        assert final.error_code == Errors.SASL_AUTHENTICATION_FAILED
        assert final.error_message == ("Authentication failed during authentication due to invalid credentials "
                                       "with SASL mechanism SCRAM-SHA-256")
        assert c.closed()
    finally:
        c.close()
    c = Conn(broker)
    try:                                                  # an unknown user: the same answer at the first message
        assert authenticate_scram(c, "SCRAM-SHA-256", "nobody", "x").error_message.endswith("SCRAM-SHA-256")
        assert c.closed()
    finally:
        c.close()


@pytest.mark.parametrize("token,message", [
    (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
    (b"\0\0pw", "Authentication failed: username not specified"),                  # testMissingUsernameSaslPlain
    (b"\0alice\0", "Authentication failed: password not specified"),               # testMissingPasswordSaslPlain
    (b"alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"mallory\0alice\0" + PASSWORD.encode(),
     "Authentication failed: Client requested an authorization id that is different from username")])
def test_plain_refusals(broker, token, message):
    """PlainSaslServer's messages (SaslAuthenticatorTest.testInvalidPasswordSaslPlain and the missing cases)."""
    c = Conn(broker)
    try:
        assert c.ask(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        answer = c.ask(36, 1, {"auth_bytes": token})
        assert (answer.error_code, answer.error_message) == (Errors.SASL_AUTHENTICATION_FAILED, message)
        assert c.closed()
    finally:
        c.close()


def test_a_failed_authentication_is_answered_after_kafkas_delay(broker):
    """connection.failed.authentication.delay.ms (100): the refusal comes no sooner."""
    import time
    c = Conn(broker)
    try:
        assert c.ask(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
        started = time.monotonic()              # an unknown user: refused at once, at the first message
        assert c.ask(36, 2, {"auth_bytes": b"n,,n=nobody,r=abc"}).error_code == Errors.SASL_AUTHENTICATION_FAILED
        assert time.monotonic() - started >= 0.1
    finally:
        c.close()


def test_plain_success_sets_the_principal(broker):
    c = Conn(broker)
    try:
        assert c.ask(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        assert c.ask(36, 0, {"auth_bytes": b"alice\0alice\0" + PASSWORD.encode()}).error_code == 0
        assert c.ask(50, 0, {"users": None}).error_code == 0
    finally:
        c.close()


def test_unsupported_mechanism_answers_the_enabled_list_then_closes(broker):
    """SaslAuthenticatorTest.testInvalidMechanism / testDisabledMechanism."""
    c = Conn(broker)
    try:
        answer = c.ask(17, 1, {"mechanism": "GSSAPI"})
        assert answer.error_code == Errors.UNSUPPORTED_SASL_MECHANISM
        assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert c.closed()
    finally:
        c.close()
    broker.node.sasl_mechanisms = ("SCRAM-SHA-512",)          # sasl.enabled.mechanisms=SCRAM-SHA-512
    c = Conn(broker)
    try:
        answer = c.ask(17, 1, {"mechanism": "PLAIN"})
        assert (answer.error_code, list(answer.mechanisms)) == (Errors.UNSUPPORTED_SASL_MECHANISM, ["SCRAM-SHA-512"])
    finally:
        c.close()


@pytest.mark.parametrize("key,version,body", [
    (3, 12, {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}),
    (0, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": []}),
    (51, 0, {"deletions": [], "upsertions": []})])
def test_a_request_before_authentication_closes_the_connection(broker, key, version, body):
    """SaslAuthenticatorTest.testDisallowedKafkaRequestsBeforeAuthentication and
    SaslServerAuthenticatorTest.testUnexpectedRequestType: no answer, the connection closed."""
    c = Conn(broker)
    try:
        assert c.ask(key, version, body) is None
    finally:
        c.close()
    c = Conn(broker)                                      # also in the middle of the exchange
    try:
        assert c.ask(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
        assert c.ask(key, version, body) is None
    finally:
        c.close()


def test_authenticate_before_handshake_and_a_second_handshake_are_illegal(broker):
    """SaslAuthenticatorTest.testInvalidApiVersionsRequestSequence's kin: out of turn is ILLEGAL_SASL_STATE,
    and the unauthenticated connection closes."""
    c = Conn(broker)
    try:
        assert c.ask(36, 2, {"auth_bytes": b"\0alice\0x"}).error_code == Errors.ILLEGAL_SASL_STATE
        assert c.closed()
    finally:
        c.close()
    c = Conn(broker)
    try:
        assert c.ask(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        assert c.ask(17, 1, {"mechanism": "PLAIN"}).error_code == Errors.ILLEGAL_SASL_STATE
        assert c.closed()
    finally:
        c.close()


def test_plaintext_listener_answers_sasl_requests_illegal_state(tmp_path):
    """On a PLAINTEXT listener the SASL APIs are KafkaApis': ILLEGAL_SASL_STATE, the connection stays."""
    b = InProcessBroker(tmp_path / "plain", protocol="PLAINTEXT")
    c = Conn(b)
    try:
        assert c.ask(17, 1, {"mechanism": "PLAIN"}).error_code == Errors.ILLEGAL_SASL_STATE
        assert c.ask(36, 2, {"auth_bytes": b""}).error_code == Errors.ILLEGAL_SASL_STATE
        assert c.ask(18, 3, {"client_software_name": "raw", "client_software_version": "1"}).error_code == 0
    finally:
        c.close()
        b.close()


# ---- the credentials: ScramControlManager's checks, the records, describe ------------------------
@pytest.fixture
def controller(tmp_path):
    c = Controller(str(tmp_path / "controller"))
    yield c
    c.close()


def test_alter_checks(controller):
    """ScramControlManager.validateUpsertion / validateDeletion / alterCredentials' duplicate rule."""
    results = scram.alter(controller, [("ghost", SHA256), ("", SHA256), ("x", 7)], [
        upsertion("few", SHA256, "p", iterations=4095), upsertion("many", SHA512, "p", iterations=16385),
        upsertion("twice", SHA256, "p"), upsertion("twice", SHA512, "p"), upsertion("ok", SHA256, "p"),
        ("bad-mechanism", 3, 4096, b"s", b"p")])
    assert sorted((u, c, m) for u, c, m in results) == sorted([
        ("ghost", Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        ("", Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        ("x", Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        ("few", Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        ("many", Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        ("twice", Errors.DUPLICATE_RESOURCE, scram.TWICE),
        ("ok", Errors.NONE, None),
        ("bad-mechanism", Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")])
    assert set(scram.held(controller)) == {("ok", SHA256)}
    # A deletion and an upsertion of one user in one request: DUPLICATE_RESOURCE, nothing changed.
    assert scram.alter(controller, [("ok", SHA256)], [upsertion("ok", SHA512, "p")]) == [
        ("ok", Errors.DUPLICATE_RESOURCE, scram.TWICE)]
    assert scram.alter(controller, [("ok", SHA256)], []) == [("ok", Errors.NONE, None)]
    assert scram.held(controller) == {}


def test_keys_are_derived_from_the_salted_password_and_kept_in_the_store(tmp_path):
    """ScramControlManager.finishUpsertion: stored and server keys from the client's salted password
    (RFC 5802); a new controller on the same store holds them (ScramCredentialValueTest's equality)."""
    c = Controller(str(tmp_path / "controller"))
    name, mechanism, iterations, salt, salted = upsertion("carol", SHA512, "pw", iterations=8192)
    assert scram.alter(c, [], [(name, mechanism, iterations, salt, salted)]) == [("carol", Errors.NONE, None)]
    held = scram.held(c)[("carol", SHA512)]
    c.close()
    again = Controller(str(tmp_path / "controller"))
    try:
        assert scram.held(again)[("carol", SHA512)] == held
        assert held.salt == salt and held.iterations == 8192
        assert scram.password_matches(SHA512, held, "pw") and not scram.password_matches(SHA512, held, "pW")
        assert "[hidden]" in repr(held) and salt.hex() not in repr(held)
    finally:
        again.close()


def test_records_round_trip_and_replay(controller):
    """UserScramCredentialRecord (11) and RemoveUserScramCredentialRecord (12) in Kafka's frame;
    ScramImageTest.testApplyDelta1's shape: an upsert then a removal replayed into the image."""
    image = MetadataImage()
    scram.alter(controller, [], [upsertion("dave", SHA256, "pw")])
    values = [v for v in _records(controller, image)]
    kinds = [mr.decode(v)[0] for v in values]
    assert kinds == [11]
    assert values[0][:3] == bytes([1, 11, 0])                 # frame version 1, type 11, version 0
    assert image.scram[("dave", SHA256)] == scram.held(controller)[("dave", SHA256)]
    assert _records(controller, image) == []                  # nothing more to publish
    scram.alter(controller, [("dave", SHA256)], [])
    values = _records(controller, image)
    assert [mr.decode(v) for v in values] == [(12, 0, {"name": "dave", "mechanism": SHA256})]
    assert image.scram == {}


def _records(controller, image):
    from storage.wire.metadata import records_for
    return records_for(controller, image, {})


def test_describe_lists_mechanisms_and_iterations_never_keys():
    """ScramImage.describe: all users, named users, a user named twice, an unknown user."""
    held = {("a", SHA256): scram.Credential(b"s", b"k1", b"k2", 4096), ("a", SHA512): scram.Credential(b"s", b"k", b"k", 8192),
            ("b", SHA256): scram.Credential(b"s", b"k", b"k", 5000)}
    assert scram.describe(held, None) == [
        {"user": "a", "error_code": 0, "error_message": None,
         "credential_infos": [{"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 8192}]},
        {"user": "b", "error_code": 0, "error_message": None, "credential_infos": [{"mechanism": 1, "iterations": 5000}]}]
    rows = {r["user"]: (r["error_code"], r["error_message"]) for r in scram.describe(held, ["b", "zed", "a", "a"])}
    assert rows == {"b": (0, None),
                    "zed": (Errors.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist: zed"),
                    "a": (Errors.DUPLICATE_RESOURCE,
                          "Cannot describe SCRAM credentials for the same user twice in a single request: a")}


def _configured(tmp_path, text: str):
    from storage.cli import build_parser
    from storage.cli.server_properties import apply_config
    f = tmp_path / "server.properties"
    f.write_text(text)
    argv = ["serve", "--config", str(f)]
    parser = build_parser()
    return apply_config(parser, argv, parser.parse_args(argv))


def test_sasl_enabled_mechanisms_property_and_flag(tmp_path):
    from storage.cli.output import UsageError
    assert _configured(tmp_path, "").sasl_enabled_mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert _configured(tmp_path, "sasl.enabled.mechanisms=SCRAM-SHA-512, plain\n").sasl_enabled_mechanisms == \
        ("SCRAM-SHA-512", "PLAIN")
    with pytest.raises(UsageError) as refused:                  # Kafka's default, not served here
        _configured(tmp_path, "sasl.enabled.mechanisms=GSSAPI\n")
    assert "sasl.enabled.mechanisms" in str(refused.value) and "GSSAPI" in str(refused.value)


# ---- end to end: `storage serve --listeners PLAINTEXT://...,SASL_PLAINTEXT://...` ---------------
needs_listeners = pytest.mark.skipif("--listeners" not in inspect.getsource(Broker.start),
                                     reason="this tree's broker has one listener")


def _kafka_python_round_trip(bootstrap: str, mechanism: str, user: str, password: str, topic: str) -> list[bytes]:
    kafka = pytest.importorskip("kafka")
    conf = dict(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password)
    producer = kafka.KafkaProducer(**conf)
    for i in range(3):
        producer.send(topic, b"k%d" % i).get(15)
    producer.close(5)
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, **conf)
    values = [m.value for m in consumer]
    consumer.close()
    return values


@needs_listeners
def test_end_to_end_users_added_on_plaintext_used_on_sasl(tmp_path):
    """The first users are added by User:ANONYMOUS with AdminClient on the loopback PLAINTEXT
    listener, then confluent-kafka and kafka-python produce and consume on the SASL_PLAINTEXT one
    with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; a wrong password writes nothing; a restart keeps
    the users."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    b = Broker(tmp_path / "data", "--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0").start()
    try:
        plain = b.listeners["PLAINTEXT"][1]
        admin = AdminClient({"bootstrap.servers": plain})
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"a-pw"),
            UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"b-pw")])
        for future in futures.values():
            future.result(15)
        sasl = b.listeners["SASL_PLAINTEXT"][1]
        for mechanism, user, password in (("PLAIN", "alice", "a-pw"), ("SCRAM-SHA-256", "alice", "a-pw"),
                                          ("SCRAM-SHA-512", "bob", "b-pw")):
            topic = "e2e-" + mechanism.lower()
            assert produce_and_consume(client_conf(sasl, mechanism, user, password), topic) == \
                [b"v%d" % i for i in range(5)]
        assert _kafka_python_round_trip(sasl, "SCRAM-SHA-512", "bob", "b-pw", "e2e-kp") == [b"k0", b"k1", b"k2"]
        producer = Producer(dict(client_conf(sasl, "SCRAM-SHA-256", "alice", "wrong"), **{"message.timeout.ms": 3000}))
        failed = []
        producer.produce("e2e-refused", b"x", on_delivery=lambda err, msg: failed.append(err))
        producer.flush(10)
        assert failed and failed[0] is not None
        assert "e2e-refused" not in admin.list_topics(timeout=10).topics        # nothing created, nothing written
        b.stop()
        b.start()
        sasl = b.listeners["SASL_PLAINTEXT"][1]
        assert produce_and_consume(client_conf(sasl, "SCRAM-SHA-256", "alice", "a-pw"), "e2e-after") == \
            [b"v%d" % i for i in range(5)]
    finally:
        b.kill()


@needs_listeners
def test_sasl_ssl_and_the_users_tool_over_sasl(tmp_path, capsys):
    """SASL over TLS (SASL_SSL): confluent-kafka with SCRAM-SHA-512 and kafka-python with PLAIN;
    then `storage users` itself authenticates with SASL to add a user (the tools' security flags)."""
    pytest.importorskip("cryptography")
    from storage.cli import main
    from tests.tls_support import make_pki
    ca = make_pki(tmp_path / "pki")
    server = ca.issue("server", [("CN", "localhost")], server=True)
    b = Broker(tmp_path / "data", "--listeners", "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
               "--ssl-keystore", server, "--ssl-truststore", ca.truststore).start()
    try:
        plain, secure = b.listeners["PLAINTEXT"][1], b.listeners["SASL_SSL"][1]
        assert main(["users", "set-password", "--bootstrap-server", plain, "--user", "admin", "--password", "adm",
                     "--mechanism", "SCRAM-SHA-512"]) == 0
        tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": ca.truststore}
        conf = dict(client_conf(secure, "SCRAM-SHA-512", "admin", "adm"), **tls)
        assert produce_and_consume(conf, "over-tls") == [b"v%d" % i for i in range(5)]
        kafka = pytest.importorskip("kafka")
        kp = kafka.KafkaProducer(bootstrap_servers=secure, security_protocol="SASL_SSL", ssl_cafile=ca.truststore,
                                 sasl_mechanism="PLAIN", sasl_plain_username="admin", sasl_plain_password="adm")
        kp.send("over-tls", b"k").get(20)
        kp.close()
        capsys.readouterr()
        sasl = b.listeners["SASL_PLAINTEXT"][1]
        assert main(["users", "set-password", "--bootstrap-server", sasl, "--sasl-mechanism", "SCRAM-SHA-512",
                     "--sasl-username", "admin", "--sasl-password", "adm", "--user", "eve", "--password", "e"]) == 0
        assert main(["users", "list", "--bootstrap-server", sasl, "--sasl-username", "admin",
                     "--sasl-password", "wrong", "--timeout", "3"]) == 1          # refused: no answer
        capsys.readouterr()
        assert main(["users", "list", "--bootstrap-server", plain, "--json"]) == 0
        assert capsys.readouterr().out.split() == ["[", '"admin",', '"eve"', "]"]
    finally:
        b.kill()
