"""`--metrics-listen`: a broker's and the controller's Prometheus endpoint, scraped during a run
of real clients (confluent-kafka: acks=all produce, a group that consumes and commits); the
values move as the run did (docs/guide-operations.md)."""
from __future__ import annotations

import re
import socket
import struct
import urllib.request

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import storage  # noqa: E402
from storage.wire import codec  # noqa: E402
from tests.wire_support import Broker, free_port_base  # noqa: E402

N = 120
_METRICS = re.compile(r"metrics listening on ([\d.]+):(\d+)")


def start_with_metrics(data_dir, *extra, command="serve") -> tuple[Broker, str]:
    broker = Broker(data_dir, "--metrics-listen", "127.0.0.1:0", *extra, command=command).start()
    line = broker.proc.stdout.readline()
    found = _METRICS.search(line)
    if not found:
        broker.kill()
        raise RuntimeError(f"no metrics line: {line!r}")
    return broker, f"http://{found.group(1)}:{found.group(2)}/metrics"


def scrape(url: str) -> dict:
    """{(sample name, frozenset of labels): value} of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def broker(tmp_path):
    b, url = start_with_metrics(tmp_path / "data", "--no-auto-create-topics")
    yield b, url
    b.kill()


def test_a_produce_consume_run_moves_the_metrics(broker):
    b, url = broker
    before = scrape(url)
    assert value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic="m") == 0
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("m", 1, 1)])["m"].result(30)
    # A refused request: auto-create is off, so a Metadata for an unknown topic is answered
    # UNKNOWN_TOPIC_OR_PARTITION.
    admin.list_topics(topic="nope", timeout=10)

    delivered = []
    producer = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5,
                            "batch.num.messages": 40})
    for i in range(N):
        producer.produce("m", key=b"k%d" % (i % 5), value=b"value-%04d" % i,
                         on_delivery=lambda err, msg: err is None and delivered.append(msg.offset()))
    assert producer.flush(30) == 0
    assert sorted(delivered) == list(range(N))

    consumer = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    try:
        consumer.subscribe(["m"])
        got = []
        while len(got) < N:
            msg = consumer.poll(10)
            assert msg is not None, f"consumed {len(got)} of {N}"
            assert msg.error() is None, msg.error()
            got.append(msg)
        half = ck.TopicPartition("m", 0, N // 2)
        consumer.commit(offsets=[half], asynchronous=False)
        during = scrape(url)
        consumer.commit(asynchronous=False)
        after = scrape(url)
    finally:
        consumer.close()

    # Bytes in are the acknowledged batches, which are all the log holds; records in are N.
    bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic="m")
    assert bytes_in == value(after, "kafka_log_log_size", topic="m", partition="0") > N * 10
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="m") == N
    assert value(after, "kafka_log_log_logendoffset", topic="m", partition="0") == N
    assert value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic="m") >= bytes_in
    produces = value(after, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert 1 <= produces <= N
    assert value(after, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce") == produces
    assert value(after, "kafka_network_requestmetrics_requests_total", request="OffsetCommit") == 2
    assert value(after, "kafka_network_requestmetrics_errors_total", request="Metadata",
                 error="UNKNOWN_TOPIC_OR_PARTITION") >= 1
    assert value(after, "kafka_network_requestmetrics_errors_total", request="Produce",
                 error="UNKNOWN_TOPIC_OR_PARTITION") == 0
    # Lag: high watermark - committed offset, per group and partition.
    assert value(during, "kafka_consumergroup_lag", group="g", topic="m", partition="0") == N - N // 2
    assert value(after, "kafka_consumergroup_lag", group="g", topic="m", partition="0") == 0
    assert value(after, "kafka_consumergroup_current_offset", group="g", topic="m", partition="0") == N
    # The engine's counters and the process.
    assert value(after, "storage_log_append_records_total") >= N
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_server_replicamanager_leadercount") >= 1
    assert value(after, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    assert value(after, "storage_log_open_segments") >= 1
    assert value(after, "process_open_fds") > 0
    assert value(during, "kafka_server_socketservermetrics_connection_count") >= 1
    # A deleted topic's series go.
    admin.delete_topics(["m"])["m"].result(30)
    gone = _wait_for(url, lambda s: ("kafka_server_brokertopicmetrics_bytesin_total", frozenset({("topic", "m")}))
                     not in s, timeout_s=20)
    assert ("kafka_server_brokertopicmetrics_bytesin_total", frozenset({("topic", "m")})) not in gone
    assert ("kafka_log_log_size", frozenset({("topic", "m"), ("partition", "0")})) not in gone


def test_the_controller_serves_its_metrics(tmp_path):
    controller, url = start_with_metrics(tmp_path / "controller", command="controller")
    try:
        samples = scrape(url)
        assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
        assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
        assert ("kafka_controller_controllerstats_leaderelections_total", frozenset()) in samples
        assert value(samples, "kafka_network_requestmetrics_requests_total", request="ApiVersions") == 0
    finally:
        controller.kill()


def test_a_bad_metrics_address_is_refused(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "storage", "serve", "--data-dir", str(tmp_path / "d"),
                          "--metrics-listen", "nohostport"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "HOST:PORT" in out.stderr


def _wait_for(url: str, check, timeout_s: float = 40.0) -> dict:
    import time
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(url)
        if check(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.5)


def test_storage_cluster_serves_metrics_and_they_see_a_broker_die(tmp_path):
    """`storage cluster --metrics-base-port`: the controller's and each broker's endpoint; a
    broker killed with SIGKILL is fenced: the controller counts it, elects new leaders and
    reports the partition it alone held offline; the survivor reports under-replicated
    partitions."""
    import os
    import signal
    import subprocess
    import sys
    base = free_port_base()
    metrics = free_port_base()
    while {metrics + d for d in (0, 1, 100)} & {base + d for d in (0, 1, 100)}:     # two free bases may overlap
        metrics = free_port_base()
    proc = subprocess.Popen([sys.executable, "-m", "storage", "cluster", "--brokers", "2", "--data-dir",
                             str(tmp_path / "c"), "--base-port", str(base), "--min-insync-replicas", "1",
                             "--metrics-base-port", str(metrics)], stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(4)]
        assert "cluster up" in lines[3], lines
        pids = [int(line.rsplit("pid ", 1)[1].split()[0]) for line in lines[:3]]
        controller = f"http://127.0.0.1:{metrics + 100}/metrics"
        broker1 = f"http://127.0.0.1:{metrics}/metrics"
        samples = _wait_for(controller, lambda s: value(s, "kafka_controller_kafkacontroller_activebrokercount") == 2)
        assert value(samples, "kafka_controller_kafkacontroller_activebrokercount") == 2
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{base}"})
        for f in admin.create_topics([NewTopic("both", 2, 2), NewTopic("solo", 2, 1)]).values():
            f.result(30)
        samples = _wait_for(controller, lambda s: value(s, "kafka_controller_kafkacontroller_globaltopiccount") >= 2)
        assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
        elections = value(samples, "kafka_controller_controllerstats_leaderelections_total")
        os.kill(pids[2], signal.SIGKILL)          # broker 2
        samples = _wait_for(controller, lambda s: value(s, "kafka_controller_kafkacontroller_fencedbrokercount") == 1
                            and value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") >= 1)
        assert value(samples, "kafka_controller_kafkacontroller_fencedbrokercount") == 1
        assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 1   # solo's on broker 2
        assert value(samples, "kafka_controller_controllerstats_leaderelections_total") >= elections + 1
        samples = _wait_for(broker1, lambda s: value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 2)
        assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 2     # both's two
        # Broker 1 now leads every partition alone: its controlled shutdown would wait out its
        # 15 s bound (the controller does not release a sole leader); nothing is checked after.
        os.kill(pids[1], signal.SIGKILL)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            proc.stdout.close()


def test_a_broker_scrape_moves_by_a_known_mix(tmp_path):
    """A broker with --metrics-listen: a scrape before and after raw Produce requests -- five
    one at a time (served from the receive callback), five pipelined, one to a topic that does
    not exist -- moves the Produce series by exactly those, and nothing else changes shape."""
    broker, url = start_with_metrics(tmp_path / "data", "--no-auto-create-topics")
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("k", 1, 1)])["k"].result(30)
        batch = storage.build_batch([b"v" * 100])

        def frame(i: int, topic: str = "k") -> bytes:
            return codec.encode_request(0, 9, i, "mix", {
                "transactional_id": None, "acks": 1, "timeout": 30_000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        before = scrape(url)
        with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
            for i in range(5):
                sock.sendall(frame(i))
                _read_answers(sock, 1)
            sock.sendall(b"".join(frame(i) for i in range(5, 10)) + frame(10, "nope"))
            _read_answers(sock, 6)
        after = scrape(url)
    finally:
        broker.kill()
    moved = {k: after[k] - before.get(k, 0.0) for k in after if not k[0].endswith("_created")}
    produce = frozenset({("request", "Produce")})
    assert moved[("kafka_network_requestmetrics_requests_total", produce)] == 11
    assert moved[("kafka_network_requestmetrics_totaltime_seconds_count", produce)] == 11
    assert moved[("kafka_network_requestmetrics_totaltime_seconds_bucket", produce | {("le", "+Inf")})] == 11
    assert moved[("kafka_network_requestmetrics_totaltime_seconds_sum", produce)] > 0
    assert moved[("kafka_network_requestmetrics_errors_total",
                  produce | {("error", "UNKNOWN_TOPIC_OR_PARTITION")})] == 1
    assert {k: v for k, v in moved.items() if k[0].startswith("kafka_network") and v and "Produce" not in str(k)} == {}
    # Every series before is there after; the new ones are Produce's (its first requests).
    assert set(before) <= set(after)
    assert all(("request", "Produce") in labels for name, labels in set(after) - set(before)
               if name.startswith("kafka_network"))


def _read_answers(sock: socket.socket, count: int) -> None:
    pending = b""
    while count:
        while len(pending) < 4 or len(pending) < 4 + struct.unpack_from(">i", pending)[0]:
            data = sock.recv(1 << 16)
            assert data, "the broker closed the connection"
            pending += data
        pending = pending[4 + struct.unpack_from(">i", pending)[0]:]
        count -= 1
