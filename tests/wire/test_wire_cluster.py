"""A cluster of real processes on loopback: `python -m storage controller` and three
`python -m storage serve --controller` brokers, driven by confluent-kafka (librdkafka).

- default tier: a replication-factor-3 topic takes acks=all writes, a follower killed with
  SIGKILL and restarted catches up, and all replicas hold identical logs (the local comparison
  of storage/inspect, the one the Spark audit uses);
- slow tier, Jepsen-style: producers run while brokers -- leaders and followers -- are killed
  with SIGKILL and restarted (bounded: a few kills in well under a minute); at the end every
  acknowledged record is present exactly once, at its acknowledged offset, and the replicas'
  logs are identical.
Every process is stopped by its pid at the end, whatever happens."""
from __future__ import annotations

import os
import random
import re
import threading
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the [test] extra")

from tests.wire_support import SESSION_MS, Cluster, free_port_base  # noqa: E402


class Producer(threading.Thread):
    """Idempotent acks=all producer of "seq-N" values, recording what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                     "linger.ms": 2, "message.timeout.ms": 60_000})
        self.topic = topic
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: list = []
        self.sent = 0
        self.stopping = threading.Event()

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.failed.append(err)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.producer.produce(self.topic, key=b"k%d" % (self.sent % 16), value=b"seq-%d" % self.sent,
                                      on_delivery=self._report)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.producer.flush(90)


def check_acked_exactly_once(acked, read) -> int:
    """Every acknowledged value is in its partition once, at its acknowledged offset; returns
    how many acknowledgements carried no offset (librdkafka's idempotent producer reports a
    batch it learns was persisted -- from a later batch's success after a retry -- without
    one): those must be present once all the same."""
    by_partition: dict[int, dict[int, bytes]] = {}
    positions: dict[int, dict[bytes, int]] = {}
    for pid, records in read.items():
        values = [v for _, v in records]
        assert len(values) == len(set(values)), f"partition {pid}: a value appears twice"
        by_partition[pid] = dict(records)
        positions[pid] = {v: o for o, v in records}
    unknown = 0
    for pid, offset, value in acked:
        if offset is None:
            unknown += 1
            assert value in positions[pid], f"acknowledged {value!r} (no offset reported) is missing from {pid}"
            continue
        assert by_partition[pid].get(offset) == value, \
            f"acknowledged {value!r} at {pid}/{offset} is {'missing' if offset not in by_partition[pid] else 'replaced'}"
    return unknown


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.kill()


def test_replicated_writes_survive_a_killed_follower(cluster):
    cluster.create("orders", 2)
    leaders = {pid: p.leader for pid, p in cluster.partitions("orders").items()}
    producer = Producer(cluster.bootstrap, "orders")
    producer.start()
    time.sleep(1.0)
    follower = next(b for b in (1, 2, 3) if b not in leaders.values()) if len(set(leaders.values())) < 3 \
        else next(b for b in (1, 2, 3) if b != leaders[0])
    cluster.brokers[follower].kill()
    time.sleep(1.5)
    cluster.brokers[follower].start()
    time.sleep(1.5)
    producer.stopping.set()
    producer.join(120)
    assert producer.acked and not producer.failed, producer.failed[:3]
    cluster.wait_in_sync("orders")
    check_acked_exactly_once(producer.acked, cluster.read_all("orders"))
    cluster.stop()
    cluster.assert_replicas_identical("orders")


@pytest.mark.slow
def test_jepsen_kill_leaders_and_followers_no_acknowledged_record_lost(cluster):
    rng = random.Random(20261126)
    cluster.create("jepsen", 3)
    producer = Producer(cluster.bootstrap, "jepsen")
    producer.start()
    kills = []
    for _ in range(4):                                      # bounded: four kills, ~30 s
        time.sleep(2.0)
        parts = cluster.partitions("jepsen")
        leaders = sorted({p.leader for p in parts.values() if p.leader >= 0})
        victim = rng.choice(leaders) if rng.random() < 0.6 and leaders else rng.choice(sorted(cluster.brokers))
        kills.append((victim, "leader" if victim in leaders else "follower"))
        cluster.brokers[victim].kill()
        time.sleep(SESSION_MS / 1000 + 1.0)                 # fenced, leadership moved
        cluster.brokers[victim].start()
        cluster.wait_in_sync("jepsen")
    time.sleep(1.0)
    producer.stopping.set()
    producer.join(120)
    assert len(producer.acked) > 500, (len(producer.acked), producer.failed[:3])
    cluster.wait_in_sync("jepsen")
    unknown = check_acked_exactly_once(producer.acked, cluster.read_all("jepsen"))
    print(f"jepsen: {len(producer.acked)} acknowledged ({unknown} without an offset), kills {kills}")
    cluster.stop()
    cluster.assert_replicas_identical("jepsen")
    assert any(kind == "leader" for _, kind in kills), kills


def test_sigterm_moves_leadership_away_before_the_broker_stops(cluster):
    """KIP-841: a SIGTERM'd broker asks the controller to take its leaderships and waits for
    should_shut_down; its partitions have another leader before the process exits, and the
    restarted broker registers with the epoch its clean-shutdown marker kept (KIP-966)."""
    cluster.create("calm", 3)
    cluster.create("tables", 1, config={"cleanup.policy": "compact", "retention.ms": "3600000"})
    victim = cluster.partitions("calm")[0].leader
    producer = Producer(cluster.bootstrap, "calm")
    producer.start()
    time.sleep(1.0)
    assert cluster.brokers[victim].stop() == 0
    parts = cluster.partitions("calm")
    assert all(p.leader not in (victim, -1) for p in parts.values()), [(p.id, p.leader) for p in parts.values()]
    cluster.brokers[victim].start()
    cluster.wait_in_sync("calm")
    producer.stopping.set()
    producer.join(120)
    assert producer.acked and not producer.failed, producer.failed[:3]
    check_acked_exactly_once(producer.acked, cluster.read_all("calm"))
    log = cluster.brokers[victim].stderr()
    first_epoch = int(re.search(r"registered with broker epoch (\d+) \(previous -1\)", log).group(1))
    assert f"(previous {first_epoch})" in log                 # the clean shutdown kept its epoch
    # The restarted broker opened its existing partitions with their topics' configs from the
    # metadata log (not the defaults: a compacted topic must never open under delete retention).
    reopened = re.findall(r"opened \d+ partitions; topic overrides in force: (.*)", log)
    assert len(reopened) == 2 and "tables: {'cleanup_policy': 'compact', 'retention_ms': 3600000}" in reopened[1], \
        reopened
    cluster.stop()
    cluster.assert_replicas_identical("calm")


def test_storage_cluster_command_starts_and_stops_every_process(tmp_path):
    import signal
    import subprocess
    import sys
    base = free_port_base()
    proc = subprocess.Popen([sys.executable, "-m", "storage", "cluster", "--brokers", "2", "--data-dir",
                             str(tmp_path / "c"), "--base-port", str(base), "--min-insync-replicas", "1"],
                            stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(4)]
        assert lines[0].startswith("controller 3000 at 127.0.0.1:") and " pid " in lines[0], lines
        assert lines[1].startswith(f"broker 1 at 127.0.0.1:{base} pid"), lines
        assert lines[2].startswith(f"broker 2 at 127.0.0.1:{base + 1} pid"), lines
        assert "cluster up: bootstrap.servers=" in lines[3], lines
        pids = [int(line.rsplit("pid ", 1)[1].split()[0]) for line in lines[:3]]
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
        assert "cluster stopped" in proc.stdout.read()
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()


def test_kip320_a_restarted_leader_truncates_its_unreplicated_tail(cluster):
    """KIP-101/279/320 across processes: the followers are frozen (SIGSTOP) while the leader
    takes acks=1 writes, then the leader is killed; a follower becomes leader in a new epoch
    without those writes. The old leader restarts, fetches with its last epoch, is told where
    that epoch ended on the new leader (DivergingEpoch) and truncates the tail it alone had;
    the acks=all records all stay, and the three logs end identical."""
    import signal
    cluster.create("kip320", 1)
    leader = cluster.partitions("kip320")[0].leader
    followers = [b for b in cluster.brokers if b != leader]
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(20):
        producer.produce("kip320", value=b"committed-%d" % i)
    assert producer.flush(30) == 0
    for b in followers:
        os.kill(cluster.brokers[b].pid, signal.SIGSTOP)
    try:
        # The followers' fetches already waiting at the leader end (empty) after their 500 ms
        # long poll; only then does the leader take writes no follower can ask for.
        time.sleep(0.8)
        lone = ck.Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "1",
                            "enable.idempotence": False})
        for i in range(5):
            lone.produce("kip320", value=b"unreplicated-%d" % i)
        assert lone.flush(10) == 0                            # acknowledged by the leader alone
        cluster.brokers[leader].kill()
    finally:
        for b in followers:
            os.kill(cluster.brokers[b].pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and cluster.partitions("kip320")[0].leader in (leader, -1):
        time.sleep(0.2)
    new_leader = cluster.partitions("kip320")[0].leader
    assert new_leader in followers
    for i in range(20, 30):
        producer.produce("kip320", value=b"committed-%d" % i)
    assert producer.flush(30) == 0
    cluster.brokers[leader].start()
    cluster.wait_in_sync("kip320")
    assert re.search(r"kip320-0: truncating the follower's log from offset \d+ to 20: a diverging epoch \(KIP-320\)",
                     cluster.brokers[leader].stderr()), cluster.brokers[leader].stderr()[-2000:]
    values = [v for _, v in cluster.read_all("kip320")[0]]
    assert values == [b"committed-%d" % i for i in range(30)]
    cluster.stop()
    cluster.assert_replicas_identical("kip320")


def _partition_records(controller_dir, topic: str) -> list[dict]:
    """The PartitionRecords of `topic` in the controller's metadata log, in order."""
    from storage import LogConfig, PartitionLog
    from storage.topics import metadata_records as mr
    log = PartitionLog.open(controller_dir / "metadata" / "__cluster_metadata-0", LogConfig(fsync=False))
    try:
        decoded = [mr.decode(r.value) for b in log.batches() for r in b.records()]
    finally:
        log.close()
    ids = {f["name"]: f["topicId"] for key, _, f in decoded if key == 2}
    return [f for key, _, f in decoded if key == 3 and f["topicId"] == ids[topic]]


def test_kip704_unclean_election_across_processes(tmp_path):
    """KIP-704 across processes (`storage controller --unclean-leader-election`): broker B is
    frozen until the controller fences it (ISR [A]); A takes writes B never sees and is killed;
    B returns, and with no ISR member left the controller elects it uncleanly -- RECOVERING in
    the metadata log, then RECOVERED once its recovery completes. The old leader A restarts and
    truncates the writes only it had (the price of an unclean election, by design); the two
    logs end identical."""
    import signal
    cluster = Cluster(tmp_path, brokers=2, min_isr=1, controller_args=("--unclean-leader-election",))
    try:
        cluster.create("kip704", 1, replication_factor=2)
        a = cluster.partitions("kip704")[0].leader
        b = next(n for n in cluster.brokers if n != a)
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(10):
            producer.produce("kip704", value=b"both-%d" % i)
        assert producer.flush(30) == 0
        os.kill(cluster.brokers[b].pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and len(cluster.partitions("kip704")[0].isrs) > 1:
                time.sleep(0.2)                              # fenced after the session timeout
            assert cluster.partitions("kip704")[0].isrs == [a]
            lone = ck.Producer({"bootstrap.servers": cluster.brokers[a].bootstrap, "acks": "all"})
            for i in range(5):
                lone.produce("kip704", value=b"only-a-%d" % i)
            assert lone.flush(10) == 0                        # acknowledged: the ISR was [A]
            cluster.brokers[a].kill()
        finally:
            os.kill(cluster.brokers[b].pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and cluster.partitions("kip704")[0].leader != b:
            time.sleep(0.2)
        assert cluster.partitions("kip704")[0].leader == b
        for i in range(10, 15):
            producer.produce("kip704", value=b"both-%d" % i)
        assert producer.flush(30) == 0
        cluster.brokers[a].start()
        cluster.wait_in_sync("kip704")
        assert re.search(r"kip704-0: truncating the follower's log from offset \d+ to 10: ", cluster.brokers[a].stderr())
        values = [v for _, v in cluster.read_all("kip704")[0]]
        assert values == [b"both-%d" % i for i in range(15)]
        cluster.stop()
        states = [(f["leader"], f["leaderRecoveryState"]) for f in _partition_records(tmp_path / "controller",
                                                                                      "kip704")]
        recovering = states.index((b, 1))                   # elected uncleanly: RECOVERING ...
        assert (b, 0) in states[recovering + 1:]            # ... then RECOVERED
        cluster.assert_replicas_identical("kip704")
    finally:
        cluster.kill()
