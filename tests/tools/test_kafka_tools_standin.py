"""The stand-ins for Kafka's kafka-topics.sh and kafka-acls.sh that librdkafka's suite calls
(tools/kafka_tools_standin.py), against a broker with ACLs on: each option the suite passes does
what Kafka's script does, a refusal is exit status 1 with the broker's error, an option outside
them exit status 2.  The suite's own tests that call them (0045, 0077, 0109, 0115, 0119) run in
the slow tier (tests/interop/test_librdkafka_suite.py)."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

admin = pytest.importorskip("confluent_kafka.admin", reason="the stand-ins use confluent-kafka's AdminClient")
pytest.importorskip("kio", reason="the broker needs kio")

from tests.wire_support import Broker  # noqa: E402

STANDIN = Path(__file__).resolve().parents[2] / "tools" / "kafka_tools_standin.py"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("standin") / "data", "--authorizer",
               "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "--allow-everyone-if-no-acl-found").start()
    yield b
    b.stop()


def _run(tool: str, broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(STANDIN), tool, "--bootstrap-server", broker.bootstrap, *args],
                          capture_output=True, text=True, timeout=120)


_CLIENTS: dict = {}


def _client(broker):
    """One AdminClient a broker, kept: a client dropped before its futures resolve fails them."""
    if broker.bootstrap not in _CLIENTS:
        _CLIENTS[broker.bootstrap] = admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    return _CLIENTS[broker.bootstrap]


def _partitions(broker, topic: str) -> int:
    return len(_client(broker).list_topics(topic, timeout=10).topics[topic].partitions)


def test_topics_create_alter_delete(broker):
    done = _run("topics", broker, "--create", "--topic", "st-a", "--partitions", "2", "--replication-factor", "1",
                "--config", "cleanup.policy=compact", "--config", "segment.bytes=1048576")
    assert done.returncode == 0, done.stderr
    assert _partitions(broker, "st-a") == 2
    resource = admin.ConfigResource(admin.ResourceType.TOPIC, "st-a")
    configs = _client(broker).describe_configs([resource])[resource].result(10)
    assert (configs["cleanup.policy"].value, configs["segment.bytes"].value) == ("compact", "1048576")
    again = _run("topics", broker, "--create", "--topic", "st-a", "--partitions", "2")
    assert again.returncode == 1 and "already exists" in again.stderr.lower(), again.stderr
    bad = _run("topics", broker, "--create", "--topic", "st-b", "--config", "segment.bytes=-5")
    assert bad.returncode == 1, bad.stderr
    grown = _run("topics", broker, "--alter", "--topic", "st-a", "--partitions", "3")
    assert grown.returncode == 0, grown.stderr
    assert _partitions(broker, "st-a") == 3
    gone = _run("topics", broker, "--delete", "--topic", "st-a")
    assert gone.returncode == 0, gone.stderr
    deadline = time.monotonic() + 10
    while "st-a" in _client(broker).list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_acls_add_and_remove(broker):
    assert _run("topics", broker, "--create", "--topic", "st-denied", "--partitions", "1").returncode == 0
    added = _run("acls", broker, "--add", "--deny-principal", "User:*", "--operation", "All", "--deny-host", "*",
                 "--topic", "st-denied")
    assert added.returncode == 0, added.stderr
    allowed = _run("acls", broker, "--add", "--allow-principal", "User:*", "--operation", "Describe",
                   "--operation", "DescribeConfigs", "--topic", "st-denied")
    assert allowed.returncode == 0, allowed.stderr
    found = _client(broker).describe_acls(admin.AclBindingFilter(
        admin.ResourceType.TOPIC, "st-denied", admin.ResourcePatternType.ANY, None, None,
        admin.AclOperation.ANY, admin.AclPermissionType.ANY)).result(10)
    assert sorted((str(b.operation), str(b.permission_type), b.principal, b.host) for b in found) == sorted([
        ("AclOperation.ALL", "AclPermissionType.DENY", "User:*", "*"),
        ("AclOperation.DESCRIBE", "AclPermissionType.ALLOW", "User:*", "*"),
        ("AclOperation.DESCRIBE_CONFIGS", "AclPermissionType.ALLOW", "User:*", "*")])
    removed = _run("acls", broker, "--remove", "--deny-principal", "User:*", "--operation", "All", "--topic",
                   "st-denied")
    assert removed.returncode == 0, removed.stderr
    left = _client(broker).describe_acls(admin.AclBindingFilter(
        admin.ResourceType.TOPIC, "st-denied", admin.ResourcePatternType.ANY, None, None,
        admin.AclOperation.ANY, admin.AclPermissionType.DENY)).result(10)
    assert left == []


def test_options_outside_the_served_ones_are_refused(broker):
    assert _run("topics", broker, "--describe", "--topic", "x").returncode == 2
    assert _run("acls", broker, "--add", "--allow-principal", "User:a", "--operation", "Frobnicate",
                "--topic", "x").returncode == 2
    assert _run("topics", broker, "--alter", "--topic", "x", "--partitions", "2", "--config", "a=b").returncode == 2
