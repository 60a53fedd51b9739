"""`storage serve --config server.properties` and `storage controller --config ...` as processes:
the broker listens where the file's `listeners` says, keeps its data where `log.dirs` says, and
serves the file's num.partitions, retention and node id (seen through confluent-kafka's
Metadata and DescribeConfigs); a flag overrides the file; the ignored properties are logged once;
a 2-process cluster is configured from Kafka's controller and broker files.  The refusals
(unknown property, out-of-range value: exit 2, nothing started) are in tests/tools/test_properties.py
and here once through the process."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType  # noqa: E402

_READY = re.compile(r"(?:node|controller) (\d+) listening on (\S+):(\d+) pid (\d+)")


class Process:
    """One `python -m storage COMMAND --config FILE ...`, stopped by its pid."""

    def __init__(self, tmp_path, name: str, command: str, properties: str, *flags: str):
        self.config = tmp_path / f"{name}.properties"
        self.config.write_text(properties)
        self.log = tmp_path / f"{name}.stderr"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "storage", command, "--config", str(self.config),
                                          *flags], stdout=subprocess.PIPE, stderr=err, text=True)
        self.line = ""

    def ready(self, timeout: float = 30.0) -> tuple[int, str]:
        """(node id, HOST:PORT) from the process's ready line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.line:
            self.line = self.proc.stdout.readline()
            if self.proc.poll() is not None:
                break
        found = _READY.search(self.line)
        assert found, f"did not start: {self.line!r} {self.stderr()[-2000:]}"
        return int(found.group(1)), f"{found.group(2)}:{found.group(3)}"

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc.stdout.close()


def broker_configs(admin: AdminClient, node_id: int) -> dict:
    resource = ConfigResource(ResourceType.BROKER, str(node_id))
    return admin.describe_configs([resource])[resource].result(10)


def test_a_broker_serves_what_its_properties_file_says(tmp_path):
    data = tmp_path / "kafka-data"
    properties = (f"# a broker configured as Kafka's are\nnode.id = 7\nlisteners=PLAINTEXT://127.0.0.1:0\n"
                  f"log.dirs={data}\nnum.partitions: 3\nlog.retention.minutes=90\nlog.retention.hours=5\n"
                  "log.segment.bytes=2097152\noffsets.topic.num.partitions=5\ngroup.initial.rebalance.delay.ms=0\n"
                  "auto.create.topics.enable=\\\n    false\nnum.network.threads=3\nsocket.send.buffer.bytes=102400\n")
    # The flag wins over the file even where it gives the flag's default (1 GiB).
    p = Process(tmp_path, "server", "serve", properties, "--no-fsync", "--log-segment-bytes", "1073741824")
    try:
        node_id, address = p.ready()
        assert node_id == 7 and address.startswith("127.0.0.1:")
        assert (data / "logs").is_dir()
        admin = AdminClient({"bootstrap.servers": address})
        for f in admin.create_topics([NewTopic("from-file")]).values():     # the broker's num.partitions
            f.result(10)
        assert len(admin.list_topics(timeout=10).topics["from-file"].partitions) == 3
        configs = broker_configs(admin, 7)
        assert configs["num.partitions"].value == "3"
        assert configs["log.retention.ms"].value == str(90 * 60_000)          # minutes over hours
        assert configs["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert configs["log.segment.bytes"].value == "1073741824"             # the flag over the file
        assert configs["auto.create.topics.enable"].value == "false"
        topic = ConfigResource(ResourceType.TOPIC, "from-file")
        assert admin.describe_configs([topic])[topic].result(10)["retention.ms"].value == str(90 * 60_000)
        log = p.stderr()
        for name in ("num.network.threads", "socket.send.buffer.bytes"):
            assert len(re.findall(rf"{name} is ignored", log)) == 1, log[-2000:]
    finally:
        p.stop()


def test_a_cluster_from_kafka_controller_and_broker_files(tmp_path):
    controller = Process(tmp_path, "controller", "controller",
                         f"process.roles=controller\nnode.id=3001\nlisteners=CONTROLLER://127.0.0.1:0\n"
                         f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path / 'controller'}\n"
                         "num.io.threads=8\n")
    broker = None
    try:
        controller_id, controller_address = controller.ready()
        assert controller_id == 3001
        broker = Process(tmp_path, "broker", "serve",
                         f"process.roles=broker\nnode.id=2\nlisteners=PLAINTEXT://127.0.0.1:0\n"
                         f"controller.quorum.voters=3001@{controller_address}\nlog.dirs={tmp_path / 'broker'}\n"
                         "num.partitions=2\noffsets.topic.num.partitions=5\n", "--no-fsync")
        node_id, address = broker.ready()
        admin = AdminClient({"bootstrap.servers": address})
        for f in admin.create_topics([NewTopic("t")]).values():
            f.result(10)
        metadata = admin.list_topics(timeout=10)
        assert len(metadata.topics["t"].partitions) == 2 and set(metadata.brokers) == {2}
        assert "num.io.threads is ignored" in controller.stderr()
    finally:
        if broker is not None:
            broker.stop()
        controller.stop()


def test_combined_mode_advertises_its_advertised_listener(tmp_path):
    # Kafka's config/kraft/server.properties shape: broker and controller in one process (ours
    # embedded), the controller's listener dropped, Metadata telling the advertised host.
    p = Process(tmp_path, "server", "serve",
                f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@localhost:9093\n"
                "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\n"
                "advertised.listeners=PLAINTEXT://broker.invalid:0,CONTROLLER://localhost:9093\n"
                f"log.dirs={tmp_path / 'combined'}\noffsets.topic.num.partitions=5\n", "--no-fsync")
    try:
        node_id, address = p.ready()
        assert address.startswith("broker.invalid:")      # it listens on 127.0.0.1, not there
        port = address.rpartition(":")[2]
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        broker = admin.list_topics(timeout=10).brokers[1]
        assert (broker.host, broker.port) == ("broker.invalid", int(port))
    finally:
        p.stop()


def test_a_refused_file_exits_2_and_starts_nothing(tmp_path):
    data = tmp_path / "data"
    p = Process(tmp_path, "server", "serve", f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={data}\n"
                                             "# the next is Kafka's but not served\nlog.cleaner.io.max.bytes.per.second=1\n")
    try:
        assert p.proc.wait(30) == 2
        assert p.proc.stdout.read() == ""
        assert "server.properties, line 4: unknown property 'log.cleaner.io.max.bytes.per.second'" in p.stderr()
        assert not data.exists()
    finally:
        p.stop()
