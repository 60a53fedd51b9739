"""The cluster's story in its logs (issue 34, docs/guide-operations.md "Logs"): one INFO line, with
its facts, for each thing an operator asks about after an incident -- a broker registered, fenced
or unfenced, a leader elected (clean or not) with its epoch and ISR, the ISR shrunk or expanded
and why, the controller accepting the AlterPartition, a follower truncated and why.  Kafka logs
the same facts in QuorumController / ReplicationControlManager (registration, fencing,
elections), Partition.scala (maybeShrinkIsr / maybeExpandIsr) and AbstractFetcherThread
(truncation); these are our sentences.  Driven through the hand rig and the KIP stories."""
import logging
import re

import pytest

from storage.core import guards
from storage.sim import stories
from storage.sim.rig import Rig


@pytest.fixture(autouse=True)
def simulation():
    guards.enter_simulation()
    yield
    guards.enable_all()


def lines(caplog, logger: str, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]


def one(caplog, logger: str, pattern: str, level: int = logging.INFO) -> str:
    found = [line for line in lines(caplog, logger, level) if re.search(pattern, line)]
    assert len(found) == 1, (pattern, lines(caplog, logger, level))
    return found[0]


def test_registration_unfencing_fencing_and_a_clean_failover(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="storage")
    rig = Rig.with_partition(tmp_path, 3)
    for b in (1, 2, 3):
        one(caplog, "storage.controller", rf"^registered broker {b} with broker epoch {b} \(incarnation {b}-{b}\); "
                                          r"fenced until it catches up$")
        one(caplog, "storage.controller", rf"^unfenced broker {b} \(broker epoch {b}\): it caught up with the "
                                          r"metadata log$")
    caplog.clear()
    rig.crash(1)                                         # the leader's session expires
    one(caplog, "storage.controller", r"^fenced broker 1 \(broker epoch 1\): its session expired$")
    one(caplog, "storage.controller", r"^elected leader 2 of t-0 with leader epoch 1 and ISR \[2, 3\] \(clean: "
                                      r"an ISR member; broker 1 left: fenced or re-registered\)$")
    caplog.clear()
    rig.start(1)                                         # back, a new incarnation after a crash
    one(caplog, "storage.controller", r"^registered broker 1 with broker epoch 4 \(incarnation 1-4\), after an "
                                      r"unclean shutdown \(KIP-966\); fenced until it catches up$")
    one(caplog, "storage.controller", r"^unfenced broker 1 \(broker epoch 4\)")


def test_an_unclean_election_is_a_warning_with_its_epoch_and_isr(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="storage")
    stories.kip704_unclean_recovery(tmp_path)
    one(caplog, "storage.controller", r"^t-0 has no leader \(leader epoch 1, ISR \[1\], ELR \[\]\): broker 1 left")
    one(caplog, "storage.controller", r"^elected leader 2 of t-0 with leader epoch 2 and ISR \[2\] UNCLEANLY: no "
                                      r"ISR or eligible replica is active; records it lacks are lost$", logging.WARNING)
    # KIP-704: the recovered leader's AlterPartition carries RECOVERED; the controller says so.
    one(caplog, "storage.controller", r"^accepted AlterPartition of t-0 from leader 2: ISR \[2\] -> \[2\] \(leader "
                                      r"epoch 2, partition epoch 4\), RECOVERED$")


def test_isr_shrink_and_expand_say_which_replica_and_why(tmp_path, caplog):
    # Partition.maybeShrinkIsr ("Shrinking ISR ... Out of sync replicas ...") and maybeExpandIsr.
    caplog.set_level(logging.INFO, logger="storage")
    rig = Rig.with_partition(tmp_path, 2)
    rig.produce(1, [b"x"])
    rig.replicate()
    caplog.clear()
    rig.now[0] += 40_000                                 # replica 2 silent past replica.lag.time.max.ms
    rig.nodes[1].tick()
    one(caplog, "storage.replica", r"^t-0: shrinking the ISR from \[1, 2\]: replica 2 \(log end offset 1, last "
                                   r"caught up 40000 ms ago\) out of sync \(high watermark 1, log end 1, "
                                   r"replica.lag.time.max.ms 30000\)$")
    rig.alter()
    one(caplog, "storage.controller", r"^accepted AlterPartition of t-0 from leader 1: ISR \[1, 2\] -> \[1\] "
                                      r"\(leader epoch 0, partition epoch 1\)$")
    one(caplog, "storage.replica", r"^t-0: ISR updated to \[1\] \(partition epoch 1\)$")
    caplog.clear()
    rig.replicate()
    one(caplog, "storage.replica", r"^t-0: expanding the ISR from \[1\] to add replica 2: it caught up to offset 1 "
                                   r"\(high watermark 1, leader epoch 0 from offset 0\)$")
    one(caplog, "storage.controller", r"^accepted AlterPartition of t-0 from leader 1: ISR \[1\] -> \[1, 2\]")


def test_a_rejected_alter_partition_is_logged_with_its_error(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="storage")
    rig = Rig.with_partition(tmp_path, 2)
    rig.now[0] += 40_000
    rig.nodes[1].tick()
    (request,) = rig.nodes[1].take_alter_partition_requests()
    rig.crash(1)                                         # leadership moves while the request is in flight
    assert rig.controller.handle_alter_partition(request).error_code != 0
    one(caplog, "storage.controller", r"^rejected AlterPartition of t-0 from broker 1 \(leader epoch 0, ISR \[1\]\): "
                                      r"FENCED_LEADER_EPOCH$")


def test_a_truncation_by_diverging_epoch_names_from_to_and_the_leader_epoch(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="storage")
    stories.kip320_diverging_epoch(tmp_path)
    one(caplog, "storage.replica", r"^t-0: truncating the follower's log from offset 2 to 1: a diverging epoch "
                                   r"\(KIP-320\): the leader ends epoch 0 at offset 2 \(leader 1, leader epoch 3\)$")


def test_a_truncation_by_offset_for_leader_epoch(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="storage")
    stories.kip101_scenario2(tmp_path)
    one(caplog, "storage.replica", r"^t-0: truncating the follower's log from offset 2 to 1: OffsetForLeaderEpoch "
                                   r"of epoch 0: the leader ends epoch 0 at offset 1 \(leader 2, leader epoch 1\)$")
