"""`storage demo`: a three-broker cluster story ending with the fleet audit."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from ..core.errors import Errors
from ..inspect.compare import local_comparison
from ..inspect.lineage import _lineage_text
from ..inspect.progress import _Spinner
from ..replication.messages import RECOVERED, RECOVERING, error_name
from .demo_wire import DemoError as WireDemoError
from .demo_wire import demo_cluster, demo_wire
from .output import OK, PROBLEMS

DEMO_TOPIC = "orders"


DEMO_BROKERS = (1, 2, 3)


def _say(text: str = "") -> None:
    print(text, flush=True)


class DemoError(RuntimeError):
    """The simulated cluster did not do what the story expected (a bug, not a user error)."""


class _DemoStory:
    """The cluster story, step by step; every number it prints is read from the cluster."""

    def __init__(self, root: str):
        from ..core.config import LogConfig
        from ..sim.cluster import Cluster

        self.root = root
        self.hook_calls: list = []
        self.epoch_answers: list = []
        config = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=1024, fsync=False)
        self.cluster = Cluster(root, len(DEMO_BROKERS), seed=20240611, config=config, min_insync_replicas=2,
                               unclean_leader_election=False, recovery_hook=self._recovery_hook,
                               fetcher_options={"truncate_on_fetch": False})
        self.sent = 0

    # ---- helpers
    def _recovery_hook(self, partition) -> bool:
        self.hook_calls.append(partition.key)
        return False            # finishes later: complete_leader_recovery (KIP-704)

    def state(self):
        return self.cluster.state(DEMO_TOPIC, 0)

    def log(self, broker: int):
        return self.cluster.log(broker, DEMO_TOPIC, 0)

    def run_until(self, what: str, predicate, max_ms: int = 30_000) -> None:
        if not self.cluster.run_until(predicate, max_ms):
            raise DemoError(f"timed out waiting until {what} (simulated {max_ms} ms)")

    def describe(self) -> str:
        s = self.state()

        leader = "none" if s.leader < 0 else str(s.leader)
        elr = getattr(s, "elr", None)
        extra = f", ELR {elr}" if elr else ""
        extra += ", RECOVERING" if s.leader_recovery_state == RECOVERING else ""
        return f"leader {leader}, leader epoch {s.leader_epoch}, ISR {s.isr}{extra}"

    def ends(self, brokers=DEMO_BROKERS) -> str:
        return ", ".join(f"broker {b} {self.log(b).log_end_offset}" for b in brokers
                         if self.cluster.brokers[b].alive)

    def produce(self, batches: int, *, acks: int = -1):
        from ..core.records import Record

        responses = []
        for _ in range(batches):
            n = self.sent
            records = [Record(key=b"customer-%d" % ((n * 3 + k) % 7),
                              value=b'{"order": %d, "amount": %d}' % (n * 3 + k, 5 + (n * 3 + k) % 50))
                       for k in range(3)]
            response = self.cluster.produce(DEMO_TOPIC, 0, records, acks=acks, max_ms=5_000)
            responses.append(response)
            if response.error_code:
                break
            self.sent += 1
        return responses

    def produce_ok(self, batches: int) -> None:

        for response in self.produce(batches):
            if response.error_code:
                raise DemoError(f"produce failed: {error_name(response.error_code)}")

    def flush(self, broker: int) -> int:
        manager = self.cluster.brokers[broker].manager
        manager.logdir.flush()
        return self.log(broker).recovery_point

    def trace_offset_for_leader_epoch(self, leader: int) -> None:
        manager = self.cluster.brokers[leader].manager
        original = manager.handle_offset_for_leader_epoch

        def traced(request):
            response = original(request)
            for asked, answered in zip(request.partitions, response.partitions):
                self.epoch_answers.append((request.replica_id, asked.leader_epoch, answered))
            return response

        manager.handle_offset_for_leader_epoch = traced

    # ---- the story
    def run(self) -> None:
        points = self._start_and_write()
        hw, lost_from = self._lose_broker_3_then_power(points)
        self._unclean_election(hw, lost_from)
        self._broker_1_returns()
        self._stale_alter_partition()
        self._converged()

    def _start_and_write(self) -> list[int]:
        """Steps 1-2: the cluster starts, 20 acks=all batches, every broker flushes."""
        c = self.cluster
        _say("1. A controller and three brokers start in this process, each broker on its own log dir; "
             "messages between them go over a simulated network with a simulated clock.")
        c.create_partition(DEMO_TOPIC, 0, list(DEMO_BROKERS))
        # A new leader counts its followers as caught up only once they have fetched (the ISR
        # dips to [1] on its first tick): let the ISR settle before the first acks=all write.
        c.run(250)
        self.run_until("the ISR settled", lambda: len(self.state().isr) == 3
                       and c.replicas_caught_up(DEMO_TOPIC, 0) and self.state().leader == 1)
        _say(f"   Topic {DEMO_TOPIC}, partition 0, replicas [1, 2, 3], min.insync.replicas=2, unclean leader "
             f"election off: {self.describe()}.")

        self.produce_ok(20)
        self.run_until("the followers caught up", lambda: c.replicas_caught_up(DEMO_TOPIC, 0))
        points = [self.flush(b) for b in DEMO_BROKERS]
        _say(f"2. The producer sends {self.sent} batches of 3 records with acks=all: each is acknowledged once "
             f"every ISR member has it.")
        _say(f"   Log end offsets: {self.ends()}; high watermark {self.log(1).high_watermark}. Every broker "
             f"flushes (fsync): recovery points {points}.")

        return points

    def _lose_broker_3_then_power(self, points: list[int]) -> tuple[int, int]:
        """Steps 3-4: broker 3 dies, more writes, power loss on brokers 1 and 2."""
        c = self.cluster
        c.brokers[3].crash()
        self.run_until("broker 3 left the ISR", lambda: 3 not in self.state().isr)
        _say(f"3. Broker 3's process dies; its disk keeps offsets 0..{self.log(1).log_end_offset - 1}. Its "
             f"session expires, the controller fences it and shrinks the ISR: {self.describe()}.")
        self.produce_ok(10)
        point1 = self.flush(1)
        self.produce_ok(10)
        point2 = self.flush(2)
        self.produce_ok(5)
        hw = self.log(1).high_watermark
        lost_from = points[2]
        _say(f"   {self.sent - 20} more acks=all batches go to brokers 1 and 2: {self.ends((1, 2))}, high "
             f"watermark {hw}. Broker 1 last flushed at offset {point1}, broker 2 at {point2}; the rest is in "
             f"their page caches only.")

        before = {b: self.log(b).log_end_offset for b in (1, 2)}
        c.brokers[1].crash(lose_unflushed=True)
        c.brokers[2].crash(lose_unflushed=True)
        _say(f"4. Power loss on brokers 1 and 2: both processes die and their page caches are gone. On disk "
             f"broker 1 keeps {point1} of its {before[1]} offsets, broker 2 {point2} of {before[2]}.")
        self.run_until("brokers 1 and 2 fenced", lambda: all(c.controller.brokers[b].fenced for b in (1, 2))
                       and self.state().leader < 0)
        s = self.state()
        if getattr(s, "elr", None):
            why = ("KIP-966: the ISR fell below min.insync.replicas, so the brokers that left it keep their "
                   "eligibility in the ELR -- the high watermark cannot have passed what they hold")
        elif s.isr:
            why = "the last ISR member stays in the ISR, so the controller remembers who had the committed data"
        else:
            why = "no replica is known to hold all the committed data"
        _say(f"   Their sessions expire; the controller fences both: {self.describe()} ({why}).")

        return hw, lost_from

    def _unclean_election(self, hw: int, lost_from: int) -> None:
        """Step 5: broker 3 returns; the operator's unclean election; KIP-704 recovery."""
        c = self.cluster
        c.brokers[3].start()
        self.run_until("broker 3 registered", lambda: c.brokers[3].registered
                       and not c.controller.brokers[3].fenced)
        c.run(200)
        leader_log = self.log(3)
        s = self.state()
        eligible = "the ISR or the ELR" if getattr(s, "elr", None) is not None else "the ISR"
        _say(f"5. Broker 3 comes back with offsets 0..{leader_log.log_end_offset - 1} (epoch 0). It is not in "
             f"{eligible}, so no clean election is possible: {self.describe()} -- the partition is offline.")
        code = c.controller.elect_leader(DEMO_TOPIC, 0, unclean=True)
        c.controller_node.publish()
        self.run_until("broker 3 leads", lambda: c.brokers[3].manager.partition_state(DEMO_TOPIC, 0) is not None
                       and c.brokers[3].manager.partition_state(DEMO_TOPIC, 0).leader == 3)
        if code != Errors.NONE or self.state().leader_recovery_state != RECOVERING:
            raise DemoError(f"the unclean election did not happen ({error_name(code)})")
        _say(f"   The operator runs an unclean election: {self.describe()} (KIP-704). The new leader's "
             f"recovery hook was called for {', '.join(f'{t}-{p}' for t, p in self.hook_calls)}; "
             f"it is still working.")
        refused = self.produce(1, acks=1)[0]
        _say(f"   While RECOVERING the leader refuses produce, fetch and OffsetForLeaderEpoch: a produce gets "
             f"{error_name(refused.error_code)}.")
        c.brokers[3].manager.complete_leader_recovery(DEMO_TOPIC, 0)
        self.run_until("RECOVERED", lambda: self.state().leader_recovery_state == RECOVERED)
        _say(f"   The hook finishes; the leader sends AlterPartition(RECOVERED) and the controller accepts it: "
             f"{self.describe()}, partition epoch {self.state().partition_epoch}.")
        _say(f"   The price of the unclean election: offsets {lost_from}..{hw - 1} -- {hw - lost_from} records "
             f"acknowledged with acks=all -- are not on the new leader and will be truncated everywhere.")
        refused = self.produce(1)[0]
        _say(f"   With the ISR at [3] < min.insync.replicas=2, an acks=all produce gets "
             f"{error_name(refused.error_code)}.")


    def _broker_1_returns(self) -> None:
        """Step 6: broker 1 restarts, truncates by OffsetForLeaderEpoch and rejoins."""
        c = self.cluster
        self.trace_offset_for_leader_epoch(3)
        c.brokers[1].start()
        after_restart = self.log(1).log_end_offset
        epochs_before = [tuple(e) for e in self.log(1).epoch_cache.entries]
        self.run_until("broker 1 in the ISR", lambda: 1 in self.state().isr)
        _say(f"6. Broker 1 restarts. Its recovery finds its log ending at {after_restart} (epochs "
             f"{_lineage_text(epochs_before)}).")
        for _replica, epoch, answer in [a for a in self.epoch_answers if a[0] == 1][:2]:
            error = f" ({error_name(answer.error_code)})" if answer.error_code else ""
            _say(f"   It asks the leader OffsetForLeaderEpoch(epoch {epoch}) -> epoch {answer.leader_epoch}, end "
                 f"offset {answer.end_offset}{error}.")
        for _t, _p, offset in c.brokers[1].manager.fetcher.truncations:
            _say(f"   It truncates its log from {after_restart} to {offset} (everything after epoch 0 ended on "
                 f"the leader), fetches epoch {self.state().leader_epoch} and rejoins: {self.describe()}.")
        self.produce_ok(5)
        _say(f"   acks=all works again: 5 new batches in epoch {self.state().leader_epoch}, {self.ends((1, 3))}, "
             f"high watermark {self.log(3).high_watermark}.")


    def _stale_alter_partition(self) -> None:
        """Step 7: broker 2 restarts; its AlterPartition is held while it gets an empty disk (KIP-903)."""
        c = self.cluster
        manager = c.brokers[3].manager
        held: list = []

        def delayed():      # the network holds the leader's AlterPartition that adds broker 2
            out = []
            for request in type(manager).take_alter_partition_requests(manager):
                if 2 in request.new_isr:
                    if not held:
                        held.append(request)
                else:
                    out.append(request)
            return out

        manager.take_alter_partition_requests = delayed
        c.brokers[2].start()
        after_restart = self.log(2).log_end_offset
        self.run_until("the leader asked to add broker 2", lambda: bool(held))
        truncated = [o for _t, _p, o in c.brokers[2].manager.fetcher.truncations]
        answer = [a for a in self.epoch_answers if a[0] == 2][:1]
        request = held[0]
        old_epoch = {e.broker_id: e.broker_epoch for e in request.new_isr_with_epochs}[2]
        _say(f"7. Broker 2 restarts with its log ending at {after_restart}"
             + (f"; OffsetForLeaderEpoch(epoch {answer[0][1]}) -> end offset {answer[0][2].end_offset}" if answer
                else "")
             + (f"; it truncates to {truncated[0]}" if truncated else "")
             + f" and catches up to {self.log(2).log_end_offset}.")
        _say(f"   The leader sends AlterPartition to add it (ISR {request.new_isr}, broker 2 at broker epoch "
             f"{old_epoch}); the network holds that request back.")
        c.brokers[2].crash()
        c.brokers[2].start(wipe=True)
        self.run_until("broker 2 registered again", lambda: c.brokers[2].registered)
        new_epoch = c.controller.brokers[2].broker_epoch
        _say(f"   Meanwhile broker 2 gets a new, empty disk and restarts: a new incarnation, broker epoch "
             f"{new_epoch}, log end offset {self.log(2).log_end_offset}.")
        del manager.take_alter_partition_requests
        response = c.controller.handle_alter_partition(request)
        manager.handle_alter_partition_response(request, response)
        c.controller_node.publish()
        _say(f"   The stale AlterPartition arrives: the controller answers {error_name(response.error_code)} "
             f"(KIP-903: broker 2 is at epoch {new_epoch}, not {old_epoch}); {self.describe()}. Accepting it "
             f"would have put an empty replica in the ISR.")
        self.run_until("every replica in the ISR", lambda: c.replicas_caught_up(DEMO_TOPIC, 0)
                       and len(self.state().isr) == 3, 60_000)
        _say(f"   Broker 2 re-fetches everything from offset 0 and joins with its new epoch: {self.describe()}.")


    def _converged(self) -> None:
        """Step 8: every replica holds the same batches; clean shutdown."""
        c = self.cluster
        logs = {b: c.batches(b, DEMO_TOPIC, 0) for b in DEMO_BROKERS}
        if not logs[1] == logs[2] == logs[3]:
            raise DemoError("the replicas did not converge")
        epochs = {b: _lineage_text([tuple(e) for e in self.log(b).epoch_cache.entries]) for b in DEMO_BROKERS}
        _say(f"8. All three replicas hold the same {len(logs[1])} batches (offsets 0..{self.log(3).log_end_offset - 1},"
             f" CRCs equal); leader-epoch-checkpoint {epochs[3]} on each; high watermark "
             f"{self.log(3).high_watermark}. The brokers shut down cleanly after {c.channel.now / 1000:.1f} s of "
             f"simulated time.")
        c.close()


def _demo_audit(root: str, log_dirs: list[str], spark: bool, master: str) -> int:
    names = ", ".join(os.path.basename(d) for d in log_dirs)
    reason = None
    if not spark:
        reason = "--no-spark"
    else:
        try:
            from ..spark.audit import main as audit_main
            from ..spark.session import java_problem, pyspark_problem

            reason = pyspark_problem() or java_problem()
        except ImportError as exc:
            reason = f"storage.spark is not installed ({exc}); pip install 'kafka-partition-storage[spark]'"
    if reason is None:
        from ..spark.session import create_session

        _say(f"9. The fleet audit over {names}: a Spark job ({master}) reads every segment, compares the "
             f"replicas batch by batch and checks each epoch lineage.")
        out = os.path.join(root, "audit-out")
        started = time.monotonic()
        spark = None
        try:
            with _Spinner("   starting Spark"):
                spark = create_session(master)
            _say(f"   Spark {spark.version} started in {time.monotonic() - started:.1f} s.")
            code = audit_main([*log_dirs, "--master", master, "--out", out])
        except Exception as exc:        # Spark failing must not hide the story's end
            code, reason = 2, f"the Spark audit failed: {type(exc).__name__}: {exc}"
        finally:
            if spark is not None:
                spark.stop()
        if code != 2:
            return code
        reason = reason or "the Spark audit could not run (see above)"
    _say(f"9. The fleet audit without Spark ({reason}): the replicas compared here, batch by batch:")
    text, results = local_comparison(log_dirs)
    _say(text)
    return 1 if any(r["verdict"] != "consistent" for r in results) else 0


def _demo_compaction(root: str) -> None:
    """Step 10: a compacted topic, cleaned, reopened and verified."""
    from .. import LogConfig, LogDir, Record
    from ..inspect.scan import scan_partition

    path = os.path.join(root, "compacted")
    changelog = LogConfig(cleanup_policy="compact", segment_bytes=1024, fsync=False)
    with LogDir.open(path, LogConfig(fsync=False), topic_configs={"prices": changelog}) as logdir:
        log = logdir.partition("prices", 0)
        for i in range(30):
            log.append_as_leader([Record(key=b"sku-%d" % (i % 5), value=b"%d.%02d EUR" % (10 + i, i))], 0)
        log.append_as_leader([Record(key=b"sku-4", value=None)], 0)        # sku-4 is withdrawn
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        before = sum(b.record_count for b in log.batches())
        segments = len(log.segments) - 1
        stats = logdir.clean_logs()[("prices", 0)]
        kept = [(r.offset, r.key.decode(), None if r.value is None else r.value.decode())
                for b in log.batches() for r in b.records()]
    _say(f'10. A compacted topic (cleanup_policy="compact", as __consumer_offsets and changelogs are): 30 price '
         f"updates to 5 keys and a tombstone in {segments} sealed segments. LogDir.clean_logs maps each key's latest "
         f"offset and rewrites the segments ({stats.bytes_read} bytes read, {stats.bytes_written} written): "
         f"{before} records -> {len(kept)}, offsets kept (with gaps):")
    for offset, key, value in kept:
        _say(f"   offset {offset}: {key} = {value if value is not None else '(tombstone, kept for delete_retention_ms)'}")
    with LogDir.open(path, LogConfig(fsync=False), topic_configs={"prices": changelog}) as logdir:
        log = logdir.partition("prices", 0)
        again = [(r.offset, r.key.decode(), None if r.value is None else r.value.decode())
                 for b in log.batches() for r in b.records()]
        if again != kept:
            raise DemoError("the compacted log changed across a restart")
    scan = scan_partition(path, "prices", 0, os.path.join(path, "prices-0"))
    _say(f"   Reopened: the same records; cleaner-offset-checkpoint says the next clean starts at "
         f"{stats.end_offset}; verify: {len(scan.problems)} problems, epoch lineage "
         f"{'agrees' if scan.agrees else 'DISAGREES'} with the checkpoint.")


def run_demo(directory: str | None, *, spark: bool = True, master: str = "local[2]", wire: bool = True) -> int:
    started = time.monotonic()
    owned = directory is None
    root = tempfile.mkdtemp(prefix="storage-demo-") if owned else os.path.abspath(directory)
    os.makedirs(root, exist_ok=True)
    for name in [f"broker-{b}" for b in DEMO_BROKERS] + ["controller", "audit-out", "compacted", "wire-broker", "cluster"]:
        if os.path.exists(os.path.join(root, name)):
            shutil.rmtree(os.path.join(root, name))
    try:
        _say(f"storage demo: log dirs under {root}")
        try:
            _DemoStory(root).run()
        except DemoError as exc:
            print(f"error: demo: {exc}", file=sys.stderr)
            return PROBLEMS
        log_dirs = [os.path.join(root, f"broker-{b}") for b in DEMO_BROKERS]
        code = _demo_audit(root, log_dirs, spark, master)
        try:
            _demo_compaction(root)
            if wire:
                demo_wire(root)
                demo_cluster(root)
        except (DemoError, WireDemoError) as exc:
            print(f"error: demo: {exc}", file=sys.stderr)
            return PROBLEMS
        kept = " (its temporary directory is removed; keep the log dirs with --dir DIR)" if owned else \
            f"; files kept in {root} (try: python -m storage verify {log_dirs[0]})"
        _say(f"demo finished in {time.monotonic() - started:.1f} s{kept}")
        return OK if code == 0 else PROBLEMS
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)

