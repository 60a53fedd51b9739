"""`python -m storage topics ...` and `python -m storage groups ...` (storage/cli/admin_tools.py)
against one `storage serve`: the topic life cycle, a group's offsets, log end and lag as
kafka-consumer-groups.sh --describe prints them, reset-offsets (dry run, --execute, refused while
the group has members, as Kafka's ConsumerGroupCommand refuses), and the error lines."""
from __future__ import annotations

import json
import re
import socket
import sys
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [tools] and [test] extras")

from storage.cli import main  # noqa: E402
from tests.wire_support import Broker, Cluster  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("admin-tools") / "data").start()
    yield b
    b.stop()


def run(capsys, broker, *argv):
    """(exit status, stdout, stderr) of `python -m storage ARGV --bootstrap-server B`."""
    code = main([*argv, "--bootstrap-server", broker.bootstrap, "--timeout", "10"])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, broker, *argv):
    code, out, err = run(capsys, broker, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_topic_life_cycle(capsys, broker):
    code, out, err = run(capsys, broker, "topics", "create", "--topic", "life", "--partitions", "3",
                         "--replication-factor", "1", "--config", "retention.ms=86400000")
    assert (code, out.strip()) == (0, "Created topic life."), err
    assert "life" in run_json(capsys, broker, "topics", "list")

    [described] = run_json(capsys, broker, "topics", "describe", "--topic", "life")
    assert described["partition_count"] == 3 and described["replication_factor"] == 1
    assert described["configs"] == {"retention.ms": "86400000"}        # only the topic's own configs
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in described["partitions"]] == \
        [(i, 1, [1], [1]) for i in range(3)]
    # The topic id as Kafka prints a Uuid: URL-safe base64, no padding (librdkafka's str() is plain base64).
    client = ck.admin.AdminClient({"bootstrap.servers": broker.bootstrap})      # alive until answered
    [answer] = client.describe_topics(ck.TopicCollection(["life"])).values()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", described["topic_id"])
    assert described["topic_id"] == str(answer.result(10).topic_id).translate(str.maketrans("+/", "-_")).rstrip("=")
    code, out, _ = run(capsys, broker, "topics", "describe", "--topic", "life")
    assert out.splitlines()[0] == (f"Topic: life\tTopicId: {described['topic_id']}\tPartitionCount: 3\t"
                                   "ReplicationFactor: 1\tConfigs: retention.ms=86400000")
    assert out.splitlines()[1] == "\tTopic: life\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1"

    code, _, err = run(capsys, broker, "topics", "alter-configs", "--topic", "life", "--config",
                       "cleanup.policy=compact", "--delete-config", "retention.ms")
    assert code == 0, err
    assert run_json(capsys, broker, "topics", "describe", "--topic", "life")[0]["configs"] == \
        {"cleanup.policy": "compact"}

    code, out, err = run(capsys, broker, "topics", "alter", "--topic", "life", "--partitions", "5")
    assert (code, out.strip()) == (0, "Topic life: 3 -> 5 partitions."), err
    assert run_json(capsys, broker, "topics", "describe", "--topic", "life")[0]["partition_count"] == 5
    code, _, err = run(capsys, broker, "topics", "alter", "--topic", "life", "--partitions", "2")
    assert code == 1 and "INVALID_PARTITIONS" in err and len(err.splitlines()) == 1     # never fewer

    code, out, err = run(capsys, broker, "topics", "delete", "--topic", "life")
    assert (code, out.strip()) == (0, "Deleted topic life."), err
    deadline = time.monotonic() + 10
    while "life" in run_json(capsys, broker, "topics", "list") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "life" not in run_json(capsys, broker, "topics", "list")


def test_topic_errors_are_one_line_with_kafkas_name(capsys, broker):
    for argv, name in ((("topics", "describe", "--topic", "no-such"), "UNKNOWN_TOPIC_OR_PARTITION"),
                       (("topics", "delete", "--topic", "no-such"), "UNKNOWN_TOPIC_OR_PARTITION"),
                       (("topics", "alter-configs", "--topic", "no-such", "--config", "retention.ms=1"),
                        "UNKNOWN_TOPIC_OR_PARTITION"),
                       (("topics", "create", "--topic", "bad", "--config", "no.such.config=1"), "INVALID_CONFIG")):
        code, out, err = run(capsys, broker, *argv)
        assert code == 1 and out == "", (argv, out, err)
        assert len(err.splitlines()) == 1 and name in err, (argv, err)
    run(capsys, broker, "topics", "create", "--topic", "twice")
    code, _, err = run(capsys, broker, "topics", "create", "--topic", "twice")
    assert code == 1 and "TOPIC_ALREADY_EXISTS" in err and len(err.splitlines()) == 1
    assert run(capsys, broker, "topics", "create", "--topic", "twice", "--if-not-exists")[0] == 0
    code, _, err = run(capsys, broker, "topics", "alter-configs", "--topic", "twice", "--config", "no.such.config=1")
    assert code == 1 and "INVALID_CONFIG" in err and len(err.splitlines()) == 1


def test_unreachable_bootstrap_is_one_line_and_exit_1_in_bounded_time(capsys):
    with socket.socket() as s:                     # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for argv in (("topics", "list"), ("groups", "list")):
        began = time.monotonic()
        code = main([*argv, "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "2"])
        out, err = capsys.readouterr()
        assert time.monotonic() - began < 10
        assert code == 1 and out == "" and len(err.splitlines()) == 1
        assert f"cannot reach the bootstrap server 127.0.0.1:{port}" in err
    assert main(["topics", "list", "--timeout", "0"]) == 2                 # a usage error, nothing asked
    assert "--timeout" in capsys.readouterr().err


def test_missing_extra_names_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)         # `import confluent_kafka` fails
    assert main(["topics", "list"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "kafka-partition-storage[tools]" in err


def _produce(bootstrap: str, topic: str, counts: list[int]) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    for partition, count in enumerate(counts):
        for i in range(count):
            producer.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=partition)
    assert producer.flush(20) == 0


def _consumer(bootstrap: str, group: str, **extra) -> ck.Consumer:
    return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                        "auto.offset.reset": "earliest", "client.id": "lag-reader", **extra})


def test_group_describe_lag_reset_and_delete(capsys, broker):
    assert run(capsys, broker, "topics", "create", "--topic", "lagged", "--partitions", "2")[0] == 0
    _produce(broker.bootstrap, "lagged", [10, 6])
    consumer = _consumer(broker.bootstrap, "readers")
    try:
        consumer.subscribe(["lagged"])
        seen, deadline = 0, time.monotonic() + 30
        while seen < 16 and time.monotonic() < deadline:
            message = consumer.poll(1)
            seen += message is not None and message.error() is None
        assert seen == 16
        consumer.commit(offsets=[ck.TopicPartition("lagged", 0, 7), ck.TopicPartition("lagged", 1, 6)],
                        asynchronous=False)

        # Active: each partition names its owner; reset-offsets is refused and changes nothing.
        [group] = run_json(capsys, broker, "groups", "describe", "--group", "readers")
        assert group["state"] == "STABLE"
        rows = {r["partition"]: r for r in group["partitions"]}
        assert [(rows[p]["current_offset"], rows[p]["log_end_offset"], rows[p]["lag"]) for p in (0, 1)] == \
            [(7, 10, 3), (6, 6, 0)]
        assert {r["client_id"] for r in rows.values()} == {"lag-reader"}
        assert all(r["consumer_id"] and r["host"] for r in rows.values())
        code, out, _ = run(capsys, broker, "groups", "describe", "--group", "readers")
        assert out.splitlines()[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                               "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert out.splitlines()[1].split()[:6] == ["readers", "lagged", "0", "7", "10", "3"]
        code, out, err = run(capsys, broker, "groups", "reset-offsets", "--group", "readers", "--all-topics",
                             "--to-earliest", "--execute")
        assert code == 1 and out == "" and "inactive" in err and "STABLE" in err and len(err.splitlines()) == 1
        code, _, err = run(capsys, broker, "groups", "delete", "--group", "readers")
        assert code == 1 and "NON_EMPTY_GROUP" in err and len(err.splitlines()) == 1
    finally:
        consumer.close()

    # Empty: a dry run prints the plan and changes nothing; --execute moves the offsets.
    [group] = run_json(capsys, broker, "groups", "describe", "--group", "readers")
    assert group["state"] == "EMPTY" and {r["consumer_id"] for r in group["partitions"]} == {None}
    plan = run_json(capsys, broker, "groups", "reset-offsets", "--group", "readers", "--all-topics", "--to-earliest")
    assert not plan["executed"] and [r["new_offset"] for r in plan["partitions"]] == [0, 0]
    [group] = run_json(capsys, broker, "groups", "describe", "--group", "readers")
    assert [r["current_offset"] for r in group["partitions"]] == [7, 6]
    done = run_json(capsys, broker, "groups", "reset-offsets", "--group", "readers", "--all-topics",
                    "--to-earliest", "--execute")
    assert done["executed"]
    [group] = run_json(capsys, broker, "groups", "describe", "--group", "readers")
    assert [(r["current_offset"], r["lag"]) for r in group["partitions"]] == [(0, 10), (0, 6)]
    run_json(capsys, broker, "groups", "reset-offsets", "--group", "readers", "--topic", "lagged:0",
             "--to-offset", "99", "--execute")                    # past the log end: the log end
    run_json(capsys, broker, "groups", "reset-offsets", "--group", "readers", "--topic", "lagged:1",
             "--shift-by", "4", "--execute")
    [group] = run_json(capsys, broker, "groups", "describe", "--group", "readers")
    assert [(r["current_offset"], r["lag"]) for r in group["partitions"]] == [(10, 0), (4, 2)]
    done = run_json(capsys, broker, "groups", "reset-offsets", "--group", "readers", "--topic", "lagged",
                    "--to-datetime", "2000-01-01T00:00:00.000", "--execute")
    assert [r["new_offset"] for r in done["partitions"]] == [0, 0]

    assert {"group": "readers", "state": "EMPTY"} in run_json(capsys, broker, "groups", "list")
    assert "readers" in {g["group"] for g in run_json(capsys, broker, "groups", "describe", "--all-groups")}
    code, out, err = run(capsys, broker, "groups", "delete", "--group", "readers")
    assert code == 0, err
    code, _, err = run(capsys, broker, "groups", "describe", "--group", "readers")
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err and len(err.splitlines()) == 1


def test_reset_offsets_of_a_new_group(capsys, broker):
    """Kafka's ResetConsumerGroupOffsetTest: testResetOffsetsExistingTopic (a group that never
    existed gets offsets: printed without --execute or with --dry-run, committed with --execute)
    and testResetOffsetsNotExistingGroup (--all-topics of a missing group: nothing to reset)."""
    assert run(capsys, broker, "topics", "create", "--topic", "fresh", "--partitions", "1")[0] == 0
    _produce(broker.bootstrap, "fresh", [100])
    for extra in ((), ("--dry-run",), ("--execute",)):
        done = run_json(capsys, broker, "groups", "reset-offsets", "--group", "new.group", "--topic", "fresh",
                        "--to-offset", "50", *extra)
        assert [(r["topic"], r["partition"], r["new_offset"]) for r in done["partitions"]] == [("fresh", 0, 50)]
        code, out, err = run(capsys, broker, "groups", "describe", "--group", "new.group", "--json")
        if extra != ("--execute",):
            assert code == 1 and "GROUP_ID_NOT_FOUND" in err          # nothing committed yet
    assert [(r["current_offset"], r["log_end_offset"], r["lag"]) for r in json.loads(out)[0]["partitions"]] == \
        [(50, 100, 50)]
    code, _, err = run(capsys, broker, "groups", "reset-offsets", "--group", "new.group", "--topic", "fresh:x",
                       "--to-earliest")
    assert code == 2 and "fresh:x" in err and len(err.splitlines()) == 1
    code, _, err = run(capsys, broker, "groups", "reset-offsets", "--group", "new.group", "--topic", "fresh:3",
                       "--to-earliest")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err and len(err.splitlines()) == 1
    done = run_json(capsys, broker, "groups", "reset-offsets", "--group", "missing.group", "--all-topics",
                    "--to-current", "--execute")
    assert done["partitions"] == []


def test_against_a_three_broker_cluster(capsys, tmp_path):
    """`storage cluster` mode (a controller process and three brokers): the replicas and ISR of a
    topic created by the tool, the configs it set, and a group's offsets through its coordinator."""
    cluster = Cluster(tmp_path, min_isr=2)
    try:
        code, _, err = run(capsys, cluster, "topics", "create", "--topic", "spread", "--partitions", "2",
                           "--replication-factor", "3", "--config", "min.insync.replicas=2")
        assert code == 0, err
        cluster.wait_in_sync("spread")
        [described] = run_json(capsys, cluster, "topics", "describe", "--topic", "spread")
        assert described["replication_factor"] == 3 and described["configs"] == {"min.insync.replicas": "2"}
        for p in described["partitions"]:
            assert sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3]
            assert p["leader"] in p["replicas"]
        _produce(cluster.bootstrap, "spread", [5, 8])
        done = run_json(capsys, cluster, "groups", "reset-offsets", "--group", "spread-readers", "--topic", "spread",
                        "--to-latest", "--execute")
        assert [r["new_offset"] for r in done["partitions"]] == [5, 8]
        [group] = run_json(capsys, cluster, "groups", "describe", "--group", "spread-readers")
        assert [(r["current_offset"], r["log_end_offset"], r["lag"]) for r in group["partitions"]] == \
            [(5, 5, 0), (8, 8, 0)]
        assert run(capsys, cluster, "groups", "delete", "--group", "spread-readers")[0] == 0
        assert run(capsys, cluster, "topics", "delete", "--topic", "spread")[0] == 0
    finally:
        cluster.stop()
