"""The in-process cluster over the channel: acks=all writes survive failovers, replicas converge,
and a seed decides the whole run."""
import errno
import hashlib
import os

from storage import LogConfig
from storage.core import io as sio
from storage.core.errors import Errors
from storage.sim.channel import Channel
from storage.sim.cluster import Cluster


def produce_all(cluster, values, acked):
    for value in values:
        for _attempt in range(20):
            response = cluster.produce("t", 0, [value])
            if response.error_code == Errors.NONE:
                acked.append(value)
                break
            cluster.run(200)


def converged(cluster):
    return cluster.run_until(lambda: cluster.replicas_caught_up("t", 0)
                             and len(cluster.state("t", 0).isr) == 3, 60_000)


def test_failovers_keep_every_acknowledged_write(tmp_path):
    cluster = Cluster(tmp_path, 3, seed=7, min_insync_replicas=2)
    cluster.create_partition("t", 0, [1, 2, 3])
    acked = []
    produce_all(cluster, [b"a%d" % i for i in range(10)], acked)
    first_leader = cluster.leader("t", 0)
    cluster.brokers[first_leader].crash()
    assert cluster.run_until(lambda: cluster.leader("t", 0) not in (-1, first_leader), 20_000)
    produce_all(cluster, [b"b%d" % i for i in range(10)], acked)
    cluster.brokers[first_leader].start()
    assert converged(cluster)
    second = cluster.leader("t", 0)
    cluster.brokers[second].crash()
    assert cluster.run_until(lambda: cluster.leader("t", 0) not in (-1, second), 20_000)
    produce_all(cluster, [b"c%d" % i for i in range(5)], acked)
    cluster.brokers[second].start()
    assert converged(cluster)
    logs = [cluster.batches(b, "t", 0) for b in (1, 2, 3)]
    assert logs[0] == logs[1] == logs[2]
    values = [v for _o, _e, v in cluster.records(cluster.leader("t", 0), "t", 0)]
    assert values == acked
    epochs = [e for _o, e, _v in cluster.records(1, "t", 0)]
    assert epochs == sorted(epochs) and len(set(epochs)) == 3
    cluster.close()


def run_lossy(root, seed):
    channel = Channel(seed, min_delay_ms=1, max_delay_ms=20, loss=0.05, duplicate=0.05, reorder=True)
    cluster = Cluster(root, 3, seed=seed, channel=channel, config=LogConfig(segment_bytes=4096, fsync=False))
    cluster.create_partition("t", 0, [1, 2, 3])
    acked = []
    produce_all(cluster, [b"v%d" % i for i in range(15)], acked)
    cluster.brokers[cluster.leader("t", 0)].restart()
    produce_all(cluster, [b"w%d" % i for i in range(15)], acked)
    assert converged(cluster)
    trace = hashlib.sha256(repr(channel.trace).encode()).hexdigest()
    result = (acked, [cluster.batches(b, "t", 0) for b in (1, 2, 3)], trace)
    cluster.close()
    return result


def test_lossy_network_converges_and_a_seed_decides_everything(tmp_path):
    acked, logs, trace = run_lossy(tmp_path / "a", 11)
    assert logs[0] == logs[1] == logs[2]
    assert len(acked) == 30
    again = run_lossy(tmp_path / "b", 11)
    assert again[0] == acked and again[2] == trace
    assert [[(b, l, e) for b, l, e, _crc in log] for log in again[1]] == [[(b, l, e) for b, l, e, _crc in log] for log in logs]


def test_an_answer_to_an_earlier_incarnation_is_dropped(tmp_path):
    # Simulator seed 400894: a registration answer meant for the previous process arrived after
    # a restart; taken as its own, the new incarnation heartbeated with a dead broker epoch and
    # stayed fenced forever.
    from storage.replication.messages import BrokerRegistrationResponse
    cluster = Cluster(tmp_path, 3, seed=3)
    node = cluster.brokers[1]
    stale = node._mine(node._on_registered)
    node.crash()
    node.start()
    cluster.run_until(lambda: node.registered, 5_000)
    epoch = node.broker_epoch
    stale(BrokerRegistrationResponse(Errors.NONE, epoch - 1))
    assert node.broker_epoch == epoch == cluster.controller.brokers[1].broker_epoch
    cluster.run(2_000)
    assert not cluster.controller.brokers[1].fenced
    cluster.close()


def test_a_fetch_answer_leaves_the_broker_as_bytes(tmp_path):
    """An answer travels through the channel after a delay, and what the leader's files hold
    by then (a crash that cut them, a restart that wrote others) must not show in an answer
    already sent: the node reads the records out when it answers (messages.sent), as a
    socket would.  The manager itself answers with a view of the segment (no copy)."""
    from storage.replication.messages import FetchPartition, FetchRequest
    cluster = Cluster(tmp_path, 3, seed=5)
    cluster.create_partition("t", 0, [1, 2, 3])
    produce_all(cluster, [b"a", b"b"], [])
    leader = cluster.leader("t", 0)
    follower = next(b for b in (1, 2, 3) if b != leader)
    node = cluster.brokers[leader]
    request = FetchRequest(follower, -1, [FetchPartition("t", 0, 0, cluster.state("t", 0).leader_epoch)])
    assert isinstance(node.manager.handle(request).partitions[0].records, memoryview)
    [answer] = node.handle(follower, request).partitions
    assert answer.error_code == Errors.NONE
    assert type(answer.records) is bytes and len(answer.records) > 0
    cluster.close()


class _FailingWritesUnder(sio.PosixIO):
    """The POSIX seam with pwrite failing (EIO) under one directory once armed."""

    def __init__(self):
        self.under = None

    def pwrite(self, fd, data, offset):
        if self.under is not None and os.readlink(f"/proc/self/fd/{fd}").startswith(str(self.under)):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return super().pwrite(fd, data, offset)


def test_a_broker_whose_log_dir_fails_halts_and_recovers_on_restart(tmp_path):
    # Kafka halts a broker whose last log dir went offline; the partition moves to another
    # leader, nothing acknowledged is lost, and the restarted broker recovers as after a crash.
    seam = _FailingWritesUnder()
    with sio.using(seam):
        cluster = Cluster(tmp_path, 3, seed=11, min_insync_replicas=2)
        cluster.create_partition("t", 0, [1, 2, 3])
        acked = []
        produce_all(cluster, [b"a%d" % i for i in range(5)], acked)
        assert converged(cluster)
        leader = cluster.leader("t", 0)
        node = cluster.brokers[leader]
        seam.under = node.path
        answer = cluster.produce("t", 0, [b"lost"])
        assert answer.error_code == Errors.KAFKA_STORAGE_ERROR
        cluster.run(10)
        assert not node.alive and node.halts == 1
        assert cluster.run_until(lambda: cluster.leader("t", 0) not in (-1, leader), 20_000)
        produce_all(cluster, [b"b%d" % i for i in range(5)], acked)
        seam.under = None
        node.start()
        assert not node.manager.logdir.had_clean_shutdown
        assert converged(cluster)
        logs = [cluster.batches(b, "t", 0) for b in (1, 2, 3)]
        assert logs[0] == logs[1] == logs[2]
        assert [v for _o, _e, v in cluster.records(cluster.leader("t", 0), "t", 0)] == acked
        cluster.close()
