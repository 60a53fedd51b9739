"""ACLs through real clients: confluent-kafka's AdminClient creates, describes and deletes them,
an embedded broker keeps them over a restart, every broker of a cluster sees them, and
User:ANONYMOUS (the PLAINTEXT principal) is refused -- produce, consume, group join, topic
creation -- until a grant makes each work; a DENY beats an ALLOW; prefixed patterns.

The broker starts once with `--super-users User:ANONYMOUS` to grant ANONYMOUS ALTER and DESCRIBE
on the cluster (so it may manage ACLs) and to create a topic with one record; it then runs with
`--authorizer` alone, as an operator's broker does."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [test] extra")
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from storage.core.errors import Errors  # noqa: E402
from storage.wire import codec  # noqa: E402
from tests.wire_support import Broker, free_port_base, raw_exchange  # noqa: E402

AUTHORIZER = ("--authorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
ME = "User:ANONYMOUS"
ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)


def acl(resource, name, op, permission=AclPermissionType.ALLOW, pattern=ResourcePatternType.LITERAL,
        principal=ME) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", op, permission)


CLUSTER_ACLS = [acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
                acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def grant(bootstrap: str, *bindings: AclBinding) -> None:
    client = admin(bootstrap)             # kept alive until the futures resolve
    for future in client.create_acls(list(bindings)).values():
        assert future.result(20) is None


def revoke(bootstrap: str, *bindings: AclBinding) -> None:
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]
    client = admin(bootstrap)
    for future in client.delete_acls(filters).values():
        future.result(20)


def describe(bootstrap: str, f: AclBindingFilter, timeout_s: float = 20) -> list:
    client = admin(bootstrap)
    return client.describe_acls(f).result(timeout_s)


def produce(bootstrap: str, topic: str) -> ck.KafkaError | None:
    delivered = []
    producer = ck.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 6000,
                            "allow.auto.create.topics": False})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    assert delivered, "no delivery report"
    return delivered[0]


def code_of(exc: ck.KafkaException) -> int:
    return exc.args[0].code()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("acls") / "data"
    b = Broker(data, *AUTHORIZER, "--super-users", ME).start()
    try:
        grant(b.bootstrap, *CLUSTER_ACLS)
        client = admin(b.bootstrap)
        for future in client.create_topics([NewTopic("t", 1, 1)]).values():
            future.result(20)
        assert produce(b.bootstrap, "t") is None
    finally:
        b.stop()
    b = Broker(data, *AUTHORIZER).start()
    yield b
    b.stop()


def test_acls_are_kept_over_a_restart_and_described(broker):
    got = describe(broker.bootstrap, ANY_ACL)
    assert sorted(map(str, got)) == sorted(map(str, CLUSTER_ACLS))
    topics_only = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                   AclPermissionType.ANY)
    assert describe(broker.bootstrap, topics_only) == []


def test_produce_is_refused_until_write_is_granted(broker):
    assert produce(broker.bootstrap, "t").code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(broker.bootstrap, acl(ResourceType.TOPIC, "t", AclOperation.WRITE))
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        low, high = consumer.get_watermark_offsets(ck.TopicPartition("t", 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (0, 1), "the refused produce wrote nothing"
    assert produce(broker.bootstrap, "t") is None


def test_a_deny_beats_an_allow(broker):
    grant(broker.bootstrap, acl(ResourceType.TOPIC, "d", AclOperation.ALL, pattern=ResourcePatternType.PREFIXED),
          acl(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE))
    client = admin(broker.bootstrap)
    for future in client.create_topics([NewTopic("deny-me", 1, 1)]).values():
        future.result(20)
    assert produce(broker.bootstrap, "deny-me") is None
    grant(broker.bootstrap, acl(ResourceType.TOPIC, "deny-me", AclOperation.WRITE, AclPermissionType.DENY))
    assert produce(broker.bootstrap, "deny-me").code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    revoke(broker.bootstrap, acl(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE))


def test_an_acks_all_produce_over_an_allowed_and_a_denied_topic_answers_both(broker):
    """The allowed topic's records wait for the high watermark (the answer comes later,
    storage/wire/later.py); the refused topic's row joins that answer (KafkaApis answers the
    unauthorized partitions beside the appended ones)."""
    from storage.core.records import build_batch
    create = acl(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)
    grant(broker.bootstrap, acl(ResourceType.TOPIC, "mix-ok", AclOperation.ALL), create)
    try:
        client = admin(broker.bootstrap)     # kept alive until the futures resolve
        for future in client.create_topics([NewTopic("mix-ok", 1, 1)]).values():
            future.result(20)
    finally:
        revoke(broker.bootstrap, create)     # the other tests of this broker grant their own
    part = [{"index": 0, "records": build_batch([b"x"])}]
    answer = ask(broker, 0, 9, {"transactional_id": None, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": "mix-ok", "partition_data": part}, {"name": "mix-no", "partition_data": part}]})
    rows = {t.name: [(p.error_code, p.base_offset) for p in t.partition_responses] for t in answer.responses}
    assert rows == {"mix-ok": [(Errors.NONE, 0)], "mix-no": [(Errors.TOPIC_AUTHORIZATION_FAILED, -1)]}


def test_create_topic_needs_create_on_the_cluster_or_a_prefix(broker):
    client = admin(broker.bootstrap)
    with pytest.raises(ck.KafkaException) as refused:
        client.create_topics([NewTopic("new-a", 1, 1)])["new-a"].result(20)
    assert code_of(refused.value) == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(broker.bootstrap, acl(ResourceType.TOPIC, "new-", AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED))
    client.create_topics([NewTopic("new-a", 1, 1)])["new-a"].result(20)
    with pytest.raises(ck.KafkaException) as refused:
        client.create_topics([NewTopic("old-a", 1, 1)])["old-a"].result(20)
    assert code_of(refused.value) == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED


def consume_one(bootstrap: str, group: str, topic: str, timeout_s: float = 20) -> tuple[ck.KafkaError | None, bytes]:
    """The first error or record a new consumer of `group` sees on `topic`."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "session.timeout.ms": 6000})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                return message.error(), b""
            return None, message.value()
        return None, b""
    finally:
        consumer.close()


def test_consume_needs_read_on_the_group_and_the_topic(broker):
    group = f"g-{uuid.uuid4().hex[:6]}"
    error, _ = consume_one(broker.bootstrap, group, "t")
    assert error is not None and error.code() in (ck.KafkaError.GROUP_AUTHORIZATION_FAILED,
                                                  ck.KafkaError.TOPIC_AUTHORIZATION_FAILED), error
    grant(broker.bootstrap, acl(ResourceType.TOPIC, "t", AclOperation.READ))
    error, _ = consume_one(broker.bootstrap, group, "t")
    assert error is not None and error.code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED, error
    grant(broker.bootstrap, acl(ResourceType.GROUP, group, AclOperation.READ))
    error, value = consume_one(broker.bootstrap, group, "t")
    assert error is None and value == b"v"


def ask(broker, key, version, body):
    answer = raw_exchange((broker.host, broker.port), codec.encode_request(key, version, 9, "t", body))
    assert answer is not None, broker.stderr()[-2000:]
    return codec.decode_response(key, version, answer)[1]


def test_group_join_is_refused_with_group_authorization_failed(broker):
    answer = ask(broker, 11, 5, {"group_id": "nobody", "session_timeout": 6000, "rebalance_timeout": 6000,
                                 "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                 "protocols": [{"name": "range", "metadata": b""}]})
    assert answer.error_code == Errors.GROUP_AUTHORIZATION_FAILED


def test_metadata_leaves_out_topics_not_described(broker):
    grant(broker.bootstrap, acl(ResourceType.TOPIC, "t", AclOperation.DESCRIBE),
          acl(ResourceType.TOPIC, "t", AclOperation.WRITE))     # (also granted above: this test runs alone too)
    topics = admin(broker.bootstrap).list_topics(timeout=10).topics
    assert "t" in topics and "__consumer_offsets" not in topics
    answer = ask(broker, 3, 12, {"topics": [{"name": "t", "topic_id": None}, {"name": "new-a", "topic_id": None}],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": True})
    t, new = answer.topics
    assert (t.error_code, new.error_code) == (Errors.NONE, Errors.TOPIC_AUTHORIZATION_FAILED)    # CREATE only
    operations = {op for op in range(32) if t.topic_authorized_operations >> op & 1}
    assert {AclOperation.WRITE.value, AclOperation.DESCRIBE.value} <= operations
    assert AclOperation.DELETE.value not in operations
    answer = ask(broker, 3, 12, {"topics": [{"name": "old-b", "topic_id": None}], "allow_auto_topic_creation": True,
                                 "include_topic_authorized_operations": False})
    assert answer.topics[0].error_code == Errors.TOPIC_AUTHORIZATION_FAILED


def test_the_acl_apis_refuse_a_principal_without_cluster_rights(broker):
    # ALTER on the cluster implies DESCRIBE; a DENY of DESCRIBE takes it away (and a DENY implies
    # nothing, so ALTER stays to delete it again).
    deny = acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE, AclPermissionType.DENY)
    grant(broker.bootstrap, deny)
    try:
        assert describe(broker.bootstrap, ANY_ACL) == []      # librdkafka hands back no error, and no ACL
        answer = ask(broker, 29, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                     "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                     "operation": 1, "permission_type": 1})
        assert (answer.error_code, answer.resources) == (Errors.CLUSTER_AUTHORIZATION_FAILED, ())
    finally:
        revoke(broker.bootstrap, deny)
    assert describe(broker.bootstrap, ANY_ACL)


def test_invalid_acls_and_filters_are_invalid_request(broker):
    bad = {"resource_type": 4, "resource_name": "my-cluster", "resource_pattern_type": 3, "principal": ME,
           "host": "*", "operation": 7, "permission_type": 3}
    answer = ask(broker, 30, 3, {"creations": [bad, dict(bad, resource_name="kafka-cluster", principal="bob")]})
    assert [r.error_code for r in answer.results] == [Errors.INVALID_REQUEST] * 2
    assert "kafka-cluster" in answer.results[0].error_message
    answer = ask(broker, 31, 3, {"filters": [{"resource_type_filter": 2, "resource_name_filter": None,
                                              "pattern_type_filter": 0, "principal_filter": None, "host_filter": None,
                                              "operation": 1, "permission_type": 1}]})
    assert answer.filter_results[0].error_code == Errors.INVALID_REQUEST


def test_acl_apis_without_an_authorizer_are_security_disabled(tmp_path):
    b = Broker(tmp_path / "plain").start()
    try:
        client = admin(b.bootstrap)
        with pytest.raises(ck.KafkaException) as refused:
            client.create_acls([acl(ResourceType.TOPIC, "t", AclOperation.READ)])[
                acl(ResourceType.TOPIC, "t", AclOperation.READ)].result(20)
        assert code_of(refused.value) == ck.KafkaError.SECURITY_DISABLED
        answer = ask(b, 29, 1, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        assert answer.error_code == Errors.SECURITY_DISABLED
    finally:
        b.stop()


def test_every_broker_of_a_storage_cluster_sees_the_acls(tmp_path):
    """`storage cluster --authorizer ... --super-users User:ANONYMOUS`: an ACL created through one
    broker is described by both (the controller's AccessControlEntryRecord, replayed by each),
    its deletion too; replication, checked as Kafka checks it, works for the super user."""
    base = free_port_base()
    # min ISR 2: at the stop the last broker leads nothing, so its controlled shutdown does not
    # wait out its 15 s bound (a sole ISR member keeps its leaderships, as in Kafka)
    proc = subprocess.Popen([sys.executable, "-m", "storage", "cluster", "--brokers", "2", "--data-dir",
                             str(tmp_path / "c"), "--base-port", str(base), "--min-insync-replicas", "2",
                             *AUTHORIZER, "--super-users", ME], stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(4)]
        assert "cluster up" in lines[3], lines
        brokers = [f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"]
        made = acl(ResourceType.TOPIC, "shared-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED)
        grant(brokers[0], made)
        for b in brokers:
            assert [str(a) for a in describe(b, ANY_ACL)] == [str(made)]
        client = admin(",".join(brokers))
        client.create_topics([NewTopic("shared-1", 1, 2)])["shared-1"].result(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and \
                len(client.list_topics("shared-1", timeout=10).topics["shared-1"].partitions[0].isrs) < 2:
            time.sleep(0.3)
        assert len(client.list_topics("shared-1", timeout=10).topics["shared-1"].partitions[0].isrs) == 2
        revoke(brokers[1], made)
        for b in brokers:
            assert describe(b, ANY_ACL) == []
    finally:
        os.kill(proc.pid, signal.SIGTERM)        # the supervisor stops its processes by pid
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        proc.stdout.close()


def storage_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "storage", *argv], capture_output=True, text=True, timeout=60)


def test_the_acls_tool_creates_lists_and_deletes(broker):
    where = ("--bootstrap-server", broker.bootstrap)
    made = storage_cli("acls", "create", *where, "--allow-principal", "User:tool", "--operation", "read",
                       "--operation", "write", "--topic", "tool-", "--resource-pattern-type", "prefixed")
    assert made.returncode == 0, made.stderr
    listed = storage_cli("acls", "list", *where, "--topic", "tool-", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["acls"]
    assert sorted((r["name"], r["pattern_type"], r["principal"], r["operation"]) for r in rows) == [
        ("tool-", "PREFIXED", "User:tool", "READ"), ("tool-", "PREFIXED", "User:tool", "WRITE")]
    gone = storage_cli("acls", "delete", *where, "--allow-principal", "User:tool", "--topic", "tool-",
                       "--resource-pattern-type", "prefixed", "--json")
    assert gone.returncode == 0, gone.stderr
    assert len(json.loads(gone.stdout)["deleted"]) == 2
    assert json.loads(storage_cli("acls", "list", *where, "--topic", "tool-", "--json").stdout)["acls"] == []
    bad = storage_cli("acls", "create", *where, "--allow-principal", "User:tool", "--topic", "x",
                      "--resource-pattern-type", "match")
    assert bad.returncode == 2 and "literal or prefixed" in bad.stderr


def test_transactional_and_idempotent_producers(broker):
    # A transactional id needs WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent
    # producer's InitProducerId is allowed by WRITE on some topic (Kafka 3.x: no IDEMPOTENT_WRITE).
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-a",
                            "transaction.timeout.ms": 10_000})
    with pytest.raises(ck.KafkaException) as refused:
        producer.init_transactions(15)
    assert code_of(refused.value) == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grant(broker.bootstrap, acl(ResourceType.TRANSACTIONAL_ID, "tx-", AclOperation.WRITE,
                                pattern=ResourcePatternType.PREFIXED),
          acl(ResourceType.TOPIC, "t", AclOperation.WRITE))
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-b",
                            "transaction.timeout.ms": 10_000})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("t", b"in a transaction")
    producer.commit_transaction(15)
    delivered = []
    idempotent = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                              "message.timeout.ms": 6000})
    idempotent.produce("t", b"once", on_delivery=lambda err, msg: delivered.append(err))
    idempotent.flush(15)
    assert delivered == [None]


def test_a_topic_made_without_describe_configs_is_answered_without_its_configs(broker):
    # Kafka's ControllerApisTest.testCreateTopics ("indescribable"): a topic the principal may
    # create but not DESCRIBE_CONFIGS is made, answered with no configs, partition count -1,
    # replication factor -1 and topic_config_error_code TOPIC_AUTHORIZATION_FAILED.
    grant(broker.bootstrap, acl(ResourceType.TOPIC, "cfg-", AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED),
          acl(ResourceType.TOPIC, "cfg-seen", AclOperation.DESCRIBE_CONFIGS))
    answer = ask(broker, 19, 7, {"topics": [
        {"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
        for name in ("cfg-seen", "cfg-hidden")], "timeout_ms": 20000, "validate_only": False})
    rows = {t.name: t for t in answer.topics}
    seen, hidden = rows["cfg-seen"], rows["cfg-hidden"]
    assert (seen.error_code, seen.num_partitions, seen.replication_factor, seen.topic_config_error_code) == \
        (Errors.NONE, 2, 1, Errors.NONE)
    assert any(c.name == "cleanup.policy" for c in seen.configs)
    assert (hidden.error_code, hidden.num_partitions, hidden.replication_factor, hidden.topic_config_error_code,
            tuple(hidden.configs)) == (Errors.NONE, -1, -1, Errors.TOPIC_AUTHORIZATION_FAILED, ())
