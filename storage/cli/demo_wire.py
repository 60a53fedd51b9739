"""The demo's wire chapter: a broker process (`python -m storage serve`) that an unmodified Kafka
client (kafka-python) produces to and consumes from in a group; the broker is killed with
SIGKILL and restarted, and every acknowledged record and the committed offset are still there."""
from __future__ import annotations

import os
import signal
import time

from .cluster import start_process, stop_process

CLUSTER_TOPIC, SESSION_MS = "ledger", 3000
TOPIC, GROUP, RECORDS, FIRST_READ = "payments", "ledger", 100, 60


class DemoError(RuntimeError):
    pass


def _say(text: str = "") -> None:
    print(text, flush=True)


class _BrokerProcess:
    def __init__(self, data_dir: str, *extra: str, command: str = "serve"):
        self.data_dir, self.port, self.proc = data_dir, 0, None
        self.stderr_path = data_dir + ".log"
        self.command = command
        self.extra = extra if command != "serve" else \
            ("--group-initial-rebalance-delay-ms", "0", "--offsets-partitions", "5", *extra)

    def start(self) -> None:
        try:
            self.proc, found = start_process([self.command, "--data-dir", self.data_dir, "--listen",
                                              f"127.0.0.1:{self.port}", *self.extra], self.stderr_path, timeout_s=30)
        except RuntimeError as exc:
            raise DemoError(str(exc)) from None
        self.port = int(found.group(4))

    def stop(self, sig: int) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig, timeout_s=20)
            self.proc.stdout.close()
        self.proc = None

    def log_lines(self, needle: str) -> list[str]:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return [line.split(": ", 1)[-1].strip() for line in f if needle in line]


def demo_wire(root: str) -> None:
    try:
        import kafka  # noqa: F401
    except ImportError:
        _say("11. Kafka clients over the wire: skipped, kafka-python is not installed "
             "(pip install 'kafka-partition-storage[clients]')")
        return
    broker = _BrokerProcess(os.path.join(root, "wire-broker"))
    broker.start()
    try:
        _story(broker)
    finally:
        broker.stop(signal.SIGTERM)


def _story(broker: _BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    address = f"127.0.0.1:{broker.port}"
    producer = KafkaProducer(bootstrap_servers=address, acks="all", enable_idempotence=True)
    acked = [producer.send(TOPIC, key=b"account-%d" % (i % 4), value=b"payment %d" % i).get(30)
             for i in range(RECORDS)]
    producer.close()
    _say(f"11. Kafka clients over the wire: `python -m storage serve` (pid {broker.proc.pid}) on {address}. "
         f"kafka-python, unmodified, produced {len(acked)} keyed payments (idempotent, acks=all): offsets "
         f"{acked[0].offset}..{acked[-1].offset} acknowledged.")
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=address, group_id=GROUP, auto_offset_reset="earliest",
                             enable_auto_commit=False, max_poll_records=FIRST_READ)
    consumer.partitions_for_topic(TOPIC)    # _poll's note: the topic's metadata before the group is joined
    first = _poll(consumer, FIRST_READ)
    consumer.commit()
    consumer.close()
    _say(f"   Group {GROUP!r} read {len(first)} and committed offset {first[-1].offset + 1} (kept in "
         f"__consumer_offsets, Kafka's format). Now the broker is killed with SIGKILL -- no shutdown at all.")
    broker.stop(signal.SIGKILL)
    broker.start()
    recovered = broker.log_lines("unclean restart")
    _say(f"   Restarted (pid {broker.proc.pid}): the log dir is recovered as after an unclean shutdown; "
         f"{recovered[-1] if recovered else 'no partition needed a new leader'}.")
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=address, group_id=GROUP, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    consumer.partitions_for_topic(TOPIC)    # _poll's note: the topic's metadata before the group is joined
    tp = TopicPartition(TOPIC, 0)
    committed = consumer.committed(tp)
    rest = _poll(consumer, RECORDS - FIRST_READ)
    consumer.close()
    values = [r.value for r in first + rest]
    if committed != FIRST_READ or values != [b"payment %d" % i for i in range(RECORDS)]:
        raise DemoError(f"after the crash: committed {committed}, {len(values)} records read")
    _say(f"   The group resumed at its committed offset {committed} and read the other {len(rest)}: all "
         f"{RECORDS} acknowledged payments, each once, in order. SIGTERM then stops it with a controlled "
         f"shutdown (KIP-841).")


def _poll(consumer, want: int) -> list:
    """Up to `want` records in 30 s.  The consumer must know its topic's partitions before its
    first poll joins the group: kafka-python's group leader assigns from the metadata it holds
    then ("No partition metadata for topic ..." assigns nothing), and a topic subscribed by name
    does not wait for its metadata before the join (only a pattern does); the metadata that comes
    after may not make it rejoin, and the poll gets nothing (1 demo run in 5 did, before)."""
    got, deadline = [], time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500, max_records=want - len(got)).values():
            got.extend(records)
    return sorted(got, key=lambda r: r.offset)


# ---- chapter 12: a cluster of processes --------------------------------------------------------

def demo_cluster(root: str) -> None:
    try:
        import kafka  # noqa: F401
    except ImportError:
        _say("12. A cluster of processes: skipped, kafka-python is not installed")
        return
    os.makedirs(os.path.join(root, "cluster"), exist_ok=True)
    controller = _BrokerProcess(os.path.join(root, "cluster", "controller"), "--min-insync-replicas", "2",
                                "--session-timeout-ms", str(SESSION_MS), command="controller")
    controller.start()
    brokers = {n: _BrokerProcess(os.path.join(root, "cluster", f"broker-{n}"), "--node-id", str(n), "--controller",
                                 f"127.0.0.1:{controller.port}", "--replication-factor", "3",
                                 "--min-insync-replicas", "2", "--replica-lag-time-max-ms", "3000")
               for n in (1, 2, 3)}
    try:
        for b in brokers.values():
            b.start()
        _cluster_story(controller, brokers)
    finally:
        for b in brokers.values():
            b.stop(signal.SIGTERM)
        controller.stop(signal.SIGTERM)
    from ..inspect.compare import local_comparison
    _text, rows = local_comparison([os.path.join(b.data_dir, "logs") for b in brokers.values()])
    row = next(r for r in rows if r["topic"] == CLUSTER_TOPIC)
    if row["verdict"] != "consistent" or len(row["replicas"]) != 3:
        raise DemoError(f"the replicas of {CLUSTER_TOPIC}-0 disagree: {row['verdict']}")
    _say(f"   After a controlled shutdown of all three, the local comparison (the Spark audit's rule) finds the "
         f"replicas of {CLUSTER_TOPIC}-0 {row['verdict']}: same batches, same epochs.")


def _leader(bootstrap: str) -> tuple[int, int]:
    """(leader, leader epoch) of the topic's partition 0, from the brokers' metadata."""
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (topic,) = admin.describe_topics([CLUSTER_TOPIC])
        part = next(p for p in topic["partitions"] if p["partition_index"] == 0)
        return part["leader_id"], part["leader_epoch"]
    finally:
        admin.close()


def _cluster_story(controller: _BrokerProcess, brokers: dict) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers.values())
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(CLUSTER_TOPIC, 1, 3, topic_configs={"min.insync.replicas": "2"})])
    admin.close()
    leader, epoch = _leader(bootstrap)
    _say(f"12. A cluster of processes: `python -m storage controller` (pid {controller.proc.pid}) and three "
         f"`storage serve --controller` brokers (pids {', '.join(str(b.proc.pid) for b in brokers.values())}). "
         f"Topic {CLUSTER_TOPIC!r}: replication factor 3, min.insync.replicas 2; partition 0 is led by broker "
         f"{leader} (leader epoch {epoch}).")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, retries=20,
                             request_timeout_ms=15_000)
    acked = [producer.send(CLUSTER_TOPIC, value=b"entry %d" % i).get(30) for i in range(150)]
    brokers[leader].stop(signal.SIGKILL)
    _say(f"   kafka-python wrote 150 entries with acks=all, then broker {leader}, the leader, was killed with "
         f"SIGKILL. The controller fences it after {SESSION_MS} ms without heartbeats and elects another ISR member.")
    acked += [producer.send(CLUSTER_TOPIC, value=b"entry %d" % i).get(60) for i in range(150, 300)]
    producer.close()
    new_leader, new_epoch = _leader(bootstrap)
    _say(f"   The producer followed the new leader, broker {new_leader} (leader epoch {new_epoch}), and wrote 150 "
         f"more. Broker {leader} restarts: it registers as unclean (KIP-966), asks the leader where its epoch "
         f"ended and truncates any divergent tail (KIP-320), then rejoins the ISR.")
    brokers[leader].start()
    truncations = _wait_for_isr(bootstrap, brokers[leader])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(CLUSTER_TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records = _poll(consumer, 300)
    consumer.close()
    values = [r.value for r in records]
    if values != [b"entry %d" % i for i in range(300)] or [a.offset for a in acked] != list(range(300)):
        raise DemoError(f"the cluster lost or reordered acknowledged entries: {len(values)} read")
    _say(f"   {truncations or f'Broker {leader} had nothing to truncate: every entry it held was replicated'}. "
         f"All 300 acknowledged entries are there, each once, in order.")


def _wait_for_isr(bootstrap: str, restarted: _BrokerProcess) -> str:
    from kafka.admin import KafkaAdminClient
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            (topic,) = admin.describe_topics([CLUSTER_TOPIC])
        finally:
            admin.close()
        if len(topic["partitions"][0]["isr_nodes"]) == 3:
            break
        time.sleep(0.3)
    else:
        raise DemoError("the restarted broker did not rejoin the ISR")
    lines = restarted.log_lines("truncated to offset")
    return f"The restarted broker logged: {lines[-1]}" if lines else ""
