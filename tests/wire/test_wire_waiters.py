"""The waiting requests of a broker are woken by what they wait for and nothing else
(storage/wire/waiters.py), and a cluster's idle partitions cost one follower Fetch per leader per
max wait (storage/wire/cluster_node.py).

No timed assertions: the seams are counts -- the waiters a Notifier woke, the Fetch requests a
leader served.  The cluster runs in this process (a controller and three ClusterNode brokers on
loopback, one event loop), so the counts are read from the servers themselves.
"""
from __future__ import annotations

import asyncio

import pytest

from storage.core.config import LogConfig
from storage.wire.waiters import END, HIGH_WATERMARK, LOW_WATERMARK, Notifier, long_poll

pytest.importorskip("kio", reason="the wire front end needs kio")

A, B = ("a", 0), ("b", 0)


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


async def _woken_within(notifier, keys, kind, action, seconds: float = 5.0) -> bool:
    """Whether a waiter on `keys` of `kind` is woken by `action()` (before `seconds`)."""
    waiter = asyncio.ensure_future(notifier.wait(seconds, keys, kind))
    await asyncio.sleep(0)
    before = notifier.woken
    action()
    await asyncio.sleep(0)
    woken = notifier.woken > before
    if not waiter.done():
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    return woken


def test_an_idle_partitions_waiter_is_not_woken_by_another_partitions_append():
    async def scenario():
        n = Notifier()
        assert not await _woken_within(n, [A], END, lambda: n.notify([B], END))
        assert await _woken_within(n, [A, B], END, lambda: n.notify([B], END))
        assert n.waiting() == 0                 # nothing left registered after the waits ended
    run(scenario())


def test_observers_hear_a_notify_when_nobody_waits():
    """An append with no fetch waiting on it still reaches the observers (the fetch sessions: a
    still partition it moved is read at the follower's next fetch; without it that partition
    stayed still, and an acks=-1 produce waited for a high watermark no fetch would move)."""
    notifier, heard = Notifier(), []
    notifier.observers.append(lambda keys, kind: heard.append((keys, kind)))
    notifier.notify((("t", 0),), END)
    assert heard == [((("t", 0),), END)]


def test_each_kind_wakes_its_own_waiters_and_a_broadcast_wakes_all():
    async def scenario():
        n = Notifier()
        # A follower's fetch waits for the log end, not for the high watermark; a consumer's the
        # other way round; DeleteRecords for the low watermark.
        assert not await _woken_within(n, [A], END, lambda: n.notify([A], HIGH_WATERMARK))
        assert not await _woken_within(n, [A], HIGH_WATERMARK, lambda: n.notify([A], END))
        assert not await _woken_within(n, [A], HIGH_WATERMARK, lambda: n.notify([A], LOW_WATERMARK))
        assert await _woken_within(n, [A], LOW_WATERMARK, lambda: n.notify([A], LOW_WATERMARK))
        for kind in (END, HIGH_WATERMARK, LOW_WATERMARK):
            assert await _woken_within(n, [A], kind, lambda: n.notify([A]))      # any kind of A
            assert await _woken_within(n, [A], kind, n.notify)                   # the metadata moved
        assert n.waiting() == 0
    run(scenario())


def test_a_long_poll_on_a_still_partition_tries_twice():
    """Once at once and once at its max wait: no timer re-runs it in between (the broker's old
    100 ms tick woke every waiter)."""
    async def scenario():
        n, tries = Notifier(), []
        await long_poll(n, 300, lambda: (tries.append(1), False), [A], HIGH_WATERMARK)
        assert len(tries) == 2 and n.woken == 0 and n.waiting() == 0
    run(scenario())


# ---- a cluster in this process -------------------------------------------------------------------

IDLE_TOPICS, IDLE_PARTITIONS = 5, 20          # 100 idle partitions, made one topic at a time
IDLE_SECONDS = 2.0
FETCH_MAX_WAIT_S = 0.5


async def _start_cluster(root, **options):
    from storage.wire.cluster_node import ClusterNode
    from storage.wire.controller_server import ControllerServer
    from storage.wire.server import BrokerServer
    controller = ControllerServer(root / "controller", "127.0.0.1", 0, min_insync_replicas=2)
    await controller.start()
    servers = [BrokerServer(ClusterNode(root / f"broker-{n}", controller=("127.0.0.1", controller.port), node_id=n,
                                        host="127.0.0.1", port=0, replication_factor=3, min_insync_replicas=2,
                                        offsets_partitions=1, log_config=LogConfig(fsync=False), **options),
                            initial_rebalance_delay_ms=0) for n in (1, 2, 3)]
    await asyncio.gather(*(s.start() for s in servers))
    return controller, servers


async def _stop_cluster(controller, servers):
    from storage.wire import server as server_module
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda loop, context: None)     # cancelled connection handlers at the end
    await asyncio.gather(*(s.close() for s in servers), return_exceptions=True)
    await controller.close()
    for s in [*servers, controller]:
        await server_module._connections_end(s, 1.0)


def _follower_fetches(server) -> int:
    return sum(n for (key, _), n in server.served.items() if key == 1)


def test_idle_partitions_cost_one_follower_fetch_per_leader_per_max_wait_and_wake_nobody(tmp_path, monkeypatch):
    ck = pytest.importorskip("confluent_kafka")
    from storage.wire import replication_rpc

    async def scenario():
        controller, servers = await _start_cluster(tmp_path)
        try:
            first = servers[0].node
            for i in range(IDLE_TOPICS):
                assert (await first.create_topic(f"idle-{i}", IDLE_PARTITIONS, 3))[0] == 0
            assert (await first.create_topic("busy", 1, 3))[0] == 0
            await asyncio.sleep(1.5)                 # every follower has its partitions (joined at a fetch's end)
            fetches = [_follower_fetches(s) for s in servers]
            woken = [s.notifier.woken for s in servers]
            await asyncio.sleep(IDLE_SECONDS)
            served = [_follower_fetches(s) - f for s, f in zip(servers, fetches)]
            # Two followers of each leader, one Fetch each in flight holding all its partitions,
            # answered at its max wait: IDLE_SECONDS / 0.5 each, one more for the one in flight.
            # (The broker's 100 ms tick woke every waiting fetch, and partitions that joined a
            # follower while its fetch was out went in fetches of their own, for good.)
            bound = 2 * (int(IDLE_SECONDS / FETCH_MAX_WAIT_S) + 1)
            assert all(0 < n <= bound for n in served), (served, bound)
            assert [s.notifier.woken for s in servers] == woken       # nothing moved, nobody woken
            # Each follower fetches in an incremental session with each leader (KIP-227): an
            # idle partition is neither in its requests nor in the answers.
            assert [len(s.apis.fetch_sessions.cache) for s in servers] == [2, 2, 2]

            # An acks=all record: the append wakes the followers' fetches waiting on it, theirs
            # move the high watermark, the produce completes.  The followers' fetches now wait
            # 30 s: only a wake answers them (once the 0.5 s ones in flight came back).
            monkeypatch.setattr(replication_rpc, "MAX_WAIT_MS", 30_000)
            await asyncio.sleep(1.5)
            leader = next(s for s in servers if s.node.manager.partitions[("busy", 0)].leader == s.node.node_id)
            before = leader.notifier.woken
            producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{leader.node.port}", "acks": "all"})
            delivered = []
            producer.produce("busy", b"x", on_delivery=lambda err, msg: delivered.append(err))
            for _ in range(200):
                await asyncio.sleep(0.05)
                producer.poll(0)
                if delivered:
                    break
            assert delivered == [None]
            assert leader.notifier.woken - before == 2           # both followers' fetches, by the append
        finally:
            await _stop_cluster(controller, servers)
    asyncio.run(scenario())


# ---- the follower's incremental fetch session (KIP-227) ------------------------------------------

def _wanted(*positions):
    from storage.replication import messages as m
    return [m.FetchPartition("t", i, offset, 3, 3, 0, 1 << 20) for i, offset in enumerate(positions)]


def _told(partition: int, high_watermark: int, records: bytes = b"", code: int = 0):
    from storage.replication import messages as m
    return m.FetchResponsePartition("t", partition, code, high_watermark, 0, None, records, high_watermark)


def test_a_followers_session_sends_what_moved_and_answers_the_rest_with_what_the_leader_last_told():
    from storage.core.errors import Errors
    from storage.wire.replication_rpc import FollowerSession
    session = FollowerSession()
    sent, forgotten, session_id, epoch = session.next_request(_wanted(5, 9, 9))
    assert ([i.partition for i in sent], forgotten, session_id, epoch) == ([0, 1, 2], [], 0, 0)     # full
    answers = session.answered(77, _wanted(5, 9, 9), [_told(0, 5), _told(1, 9), _told(2, 9)])
    assert [(a.partition, a.high_watermark) for a in answers] == [(0, 5), (1, 9), (2, 9)]
    # Nothing moved: nothing sent, and the leader's empty answer means no news for anyone.
    sent, forgotten, session_id, epoch = session.next_request(_wanted(5, 9, 9))
    assert (sent, forgotten, session_id, epoch) == ([], [], 77, 1)
    assert session.answered(77, _wanted(5, 9, 9), []) == []
    assert session.unchanged == [("t", 0), ("t", 1), ("t", 2)]        # fetched again, nothing to apply
    # Partition 0 fetched on, partition 2 left (backing off): one sent, one forgotten.
    sent, forgotten, _, epoch = session.next_request(_wanted(6, 9))
    assert ([(i.partition, i.fetch_offset) for i in sent], forgotten, epoch) == ([(0, 6)], [("t", 2)], 2)
    answers = session.answered(77, _wanted(6, 9), [_told(1, 0, code=Errors.NOT_LEADER_OR_FOLLOWER)])
    assert [(a.partition, a.error_code) for a in answers] == [(1, Errors.NOT_LEADER_OR_FOLLOWER)]
    assert session.unchanged == [("t", 0)]
    # An error is asked about again (the leader answers it until it is gone).
    sent, _, _, _ = session.next_request(_wanted(6, 9))
    assert [i.partition for i in sent] == [1]
    # A lost session starts again in full, closing the old one at the leader.
    session.reset()
    sent, _, session_id, epoch = session.next_request(_wanted(6, 9))
    assert ([i.partition for i in sent], session_id, epoch) == ([0, 1], 77, 0)


def test_a_followers_session_keeps_the_parked_partitions_and_forgets_only_what_left():
    """The fetcher's parked partitions (answered unchanged) stay in the leader's session though
    the fetcher no longer lists them; one unparked and not fetched (backing off) is forgotten; a
    full fetch (a new session) carries them all."""
    from storage.wire.replication_rpc import FollowerSession
    parked, stirred = {}, set()

    def take():
        out = set(stirred)
        stirred.clear()
        return out
    session = FollowerSession(parked, take)
    session.next_request(_wanted(5, 9, 9))
    session.answered(77, _wanted(5, 9, 9), [_told(0, 5), _told(1, 9), _told(2, 9)])
    sent, forgotten, _, _ = session.next_request(_wanted(5, 9, 9))
    session.answered(77, _wanted(5, 9, 9), [])
    parked.update((("t", i.partition), i) for i in _wanted(5, 9, 9)[1:])     # the fetcher parks 1 and 2
    sent, forgotten, _, _ = session.next_request(_wanted(6))                  # only 0 is listed, moved
    assert ([(i.partition, i.fetch_offset) for i in sent], forgotten) == ([(0, 6)], [])
    session.answered(77, _wanted(6), [_told(0, 6)])
    # 2 is unparked (an error answer) and backs off: forgotten; 1 stays parked, in the session.
    del parked[("t", 2)]
    stirred.add(("t", 2))
    sent, forgotten, _, _ = session.next_request(_wanted(6))
    assert (sent, forgotten) == ([], [("t", 2)])
    assert sorted(session.sent) == [("t", 0), ("t", 1)]
    session.answered(77, _wanted(6), [])
    # 0 not listed (backing off) and not parked: forgotten; a new session's full fetch holds 1 too.
    sent, forgotten, _, _ = session.next_request([])
    assert (sent, forgotten) == ([], [("t", 0)])
    session.reset()
    sent, forgotten, session_id, epoch = session.next_request(_wanted(7))
    assert ([(i.partition, i.fetch_offset) for i in sent], epoch) == ([(0, 7), (1, 9)], 0)


# ---- the leader reads only the partitions that moved ---------------------------------------------

def _count_follower_reads(server, counts: dict) -> None:
    """Count, per (topic, partition), the partitions `server`'s manager reads for followers."""
    manager = server.node.manager
    handle_fetch = manager.handle_fetch

    def counting(request):
        if request.replica_id >= 0:
            for item in request.partitions:
                counts[(item.topic, item.partition)] = counts.get((item.topic, item.partition), 0) + 1
        return handle_fetch(request)
    manager.handle_fetch = counting


def test_a_leader_reads_only_the_partitions_that_moved_and_idle_followers_stay_caught_up(tmp_path):
    """100 idle RF 3 partitions beside a busy one: while acks=all records go to the busy one, no
    follower fetch reads an idle partition (each read one: 15-90 us of the leader's Python per
    partition per fetch), yet every idle partition's followers are caught up as of the latest
    fetch (Kafka's lastCaughtUpTimeMs: the ISR must not shrink) and stay in the ISR.  Main read
    every followed partition at every follower fetch: ~66 idle reads per record."""
    ck = pytest.importorskip("confluent_kafka")

    async def scenario():
        controller, servers = await _start_cluster(tmp_path)
        try:
            first = servers[0].node
            for i in range(IDLE_TOPICS):
                assert (await first.create_topic(f"idle-{i}", IDLE_PARTITIONS, 3))[0] == 0
            assert (await first.create_topic("busy", 1, 3))[0] == 0
            await asyncio.sleep(2.0)                 # every follower fetches every partition at its end
            leader = next(s for s in servers if s.node.manager.partitions[("busy", 0)].leader == s.node.node_id)
            counts: dict = {}
            _count_follower_reads(leader, counts)
            producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{leader.node.port}", "acks": "all",
                                    "linger.ms": 0})
            records, delivered = 20, []
            for n in range(records):
                producer.produce("busy", b"x%d" % n, on_delivery=lambda err, msg: delivered.append(err))
                for _ in range(200):
                    await asyncio.sleep(0.02)
                    producer.poll(0)
                    if len(delivered) > n:
                        break
            assert delivered == [None] * records
            manager = leader.node.manager
            led_idle = [k for k, p in manager.partitions.items()
                        if k[0].startswith("idle-") and p.leader == leader.node.node_id]
            assert len(led_idle) > 20
            assert counts.get(("busy", 0), 0) >= 2 * records        # both followers fetched each record
            idle_reads = sum(n for k, n in counts.items() if k[0].startswith("idle-"))
            assert idle_reads == 0, idle_reads
            # Still read at no fetch, yet caught up as of the latest: after 1.2 s of idle fetches
            # (max wait 0.5 s) every idle follower's caught-up time is later than before them.
            since = manager.clock()
            await asyncio.sleep(1.2)
            for key in led_idle:
                p = manager.partitions[key]
                assert sorted(p.isr) == [1, 2, 3], (key, p.isr)
                assert all(f.last_caught_up_time_ms >= since for f in p.followers.values()), key
            assert sum(n for k, n in counts.items() if k[0].startswith("idle-")) == 0
        finally:
            await _stop_cluster(controller, servers)
    asyncio.run(scenario())


def test_a_still_partitions_follower_that_stops_fetching_leaves_the_isr_and_the_one_that_fetches_stays(tmp_path):
    """A still partition is not read, but its followers' caught-up times move only with their
    fetches: a follower that stops fetching (its broker alive, heartbeating) falls out of the
    ISR after replica.lag.time.max.ms (Kafka's maybeShrinkIsr), the one that goes on fetching
    stays in."""
    async def scenario():
        controller, servers = await _start_cluster(tmp_path, replica_lag_time_max_ms=3000)
        try:
            assert (await servers[0].node.create_topic("quiet", 1, 3))[0] == 0
            await asyncio.sleep(2.0)                 # fetched, answered, still
            leader = next(s for s in servers if s.node.manager.partitions[("quiet", 0)].leader == s.node.node_id)
            partition = leader.node.manager.partitions[("quiet", 0)]
            assert sorted(partition.isr) == [1, 2, 3]
            stopped, going = [s for s in servers if s is not leader]
            stopped.node.manager.fetcher.poll = lambda fetching=(): []     # no more fetches from it
            for _ in range(300):
                await asyncio.sleep(0.1)
                if stopped.node.node_id not in partition.isr:
                    break
            assert stopped.node.node_id not in partition.isr
            assert going.node.node_id in partition.isr and leader.node.node_id in partition.isr
        finally:
            await _stop_cluster(controller, servers)
    asyncio.run(scenario())


def test_a_log_start_that_retention_moved_reaches_the_followers_of_a_still_partition(tmp_path):
    """A still partition (its followers caught up: no follower fetch reads it) whose log start a
    retention pass moves on the leader: the followers' next fetches read it again and take the
    new log start (Kafka's follower follows the leader's logStartOffset) -- told because the pass
    counts (LogDir.retention_moves), with no timed re-read of every still partition."""
    ck = pytest.importorskip("confluent_kafka")
    from storage.core.clock import wall_ms

    async def scenario():
        controller, servers = await _start_cluster(tmp_path)
        try:
            configs = {"segment.bytes": "1024", "retention.ms": "1000"}
            assert (await servers[0].node.create_topic("aging", 1, 3, configs))[0] == 0
            leader = next(s for s in servers if s.node.manager.partitions[("aging", 0)].leader == s.node.node_id)
            producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{leader.node.port}", "acks": "all",
                                    "linger.ms": 0})
            delivered = []
            for n in range(12):
                producer.produce("aging", b"x" * 300, on_delivery=lambda err, msg: delivered.append(err))
                for _ in range(200):
                    await asyncio.sleep(0.02)
                    producer.poll(0)
                    if len(delivered) > n:
                        break
            assert delivered == [None] * 12
            await asyncio.sleep(1.5)                 # every follower caught up: the partition is still
            logs = {s.node.node_id: s.node.manager.partitions[("aging", 0)].log for s in servers}
            assert len(logs[leader.node.node_id].segments) > 2
            assert leader.node.manager.logdir.cleanup_logs(wall_ms() + 60_000) > 0
            start = logs[leader.node.node_id].log_start_offset
            assert start > 0
            for _ in range(50):
                await asyncio.sleep(0.1)
                if all(log.log_start_offset == start for log in logs.values()):
                    break
            assert {n: log.log_start_offset for n, log in logs.items()} == dict.fromkeys(logs, start)
        finally:
            await _stop_cluster(controller, servers)
    asyncio.run(scenario())


# ---- the follower touches only the partitions that moved -----------------------------------------

def _count_follower_touches(server, counts: dict) -> None:
    """Count the fetch states `server`'s fetcher looks at to build a request (poll), the
    positions its fetch sessions compare (next_request), and the Fetch answers it applies."""
    fetcher = server.node.manager.fetcher
    ready, handle_response = fetcher._ready, fetcher.handle_response      # noqa: SLF001 (a seam)

    def counting_ready(fs, now):
        counts["states"] += 1
        return ready(fs, now)

    def counting_response(leader_id, request, response):
        counts["answers"] += type(request).__name__ == "FetchRequest"
        return handle_response(leader_id, request, response)
    fetcher._ready, fetcher.handle_response = counting_ready, counting_response     # noqa: SLF001


def test_a_follower_touches_only_the_partitions_that_moved_per_fetch_answer(tmp_path, monkeypatch):
    """100 idle RF 3 partitions beside a busy one: while acks=all records go to the busy one, a
    follower's work per Fetch answer -- the fetch states poll builds a request from, the positions
    its session compares -- follows the partitions that moved, not the ~67 it follows (the idle
    ones are parked: the leader's session holds their fetch).  Main looked at every followed
    partition at every wake of the fetcher loop: > 67 states and 67 positions per answer.  A
    parked partition that gets a record is answered by the leader's session and replicates."""
    ck = pytest.importorskip("confluent_kafka")
    from storage.wire import replication_rpc
    positions = replication_rpc._position                                   # noqa: SLF001 (a seam)
    counts = {"states": 0, "answers": 0, "positions": 0}

    def counting_position(item):
        counts["positions"] += 1
        return positions(item)
    monkeypatch.setattr(replication_rpc, "_position", counting_position)

    async def scenario():
        controller, servers = await _start_cluster(tmp_path)
        try:
            first = servers[0].node
            for i in range(IDLE_TOPICS):
                assert (await first.create_topic(f"idle-{i}", IDLE_PARTITIONS, 3))[0] == 0
            assert (await first.create_topic("busy", 1, 3))[0] == 0
            await asyncio.sleep(2.0)                 # every follower fetched every partition, answered unchanged
            leader = next(s for s in servers if s.node.manager.partitions[("busy", 0)].leader == s.node.node_id)
            followers = [s for s in servers if s is not leader]
            for s in followers:
                assert len(s.node.manager.fetcher.partitions) > 60
                _count_follower_touches(s, counts)
            counts["positions"] = 0
            producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{leader.node.port}", "acks": "all",
                                    "linger.ms": 0})
            delivered: list = []
            for n in range(20):
                producer.produce("busy", b"x%d" % n, on_delivery=lambda err, msg: delivered.append(err))
                for _ in range(250):
                    await asyncio.sleep(0.02)
                    producer.poll(0)
                    if len(delivered) > n:
                        break
            assert delivered == [None] * 20
            assert counts["answers"] >= 2 * 20, counts         # both followers fetched each record
            per_answer = (counts["states"] + counts["positions"]) / counts["answers"]
            assert per_answer < 10, counts
            # A parked idle partition that gets a record: the leader's session answers it.
            key = next(k for k, p in leader.node.manager.partitions.items()
                       if k[0].startswith("idle-") and p.leader == leader.node.node_id)
            done: list = []
            producer.produce(key[0], b"y", partition=key[1], on_delivery=lambda err, msg: done.append(err))
            for _ in range(250):
                await asyncio.sleep(0.02)
                producer.poll(0)
                if done:
                    break
            assert done == [None]
            for s in followers:
                assert s.node.manager.partitions[key].log.log_end_offset == 1
        finally:
            await _stop_cluster(controller, servers)
    asyncio.run(scenario())


# ---- acks=all produces pipelined on one connection (later.py) -------------------------------------

def test_pipelined_acks_all_produces_are_appended_while_the_first_waits_and_answered_in_order(tmp_path):
    """Three acks=-1 Produce requests sent together on one connection while the followers cannot
    fetch: all three are appended at once (the connection does not wait for the first one's high
    watermark before it reads the second: Redpanda's two stages, not Kafka's muted channel), and
    once the followers fetch again the answers come in request order with consecutive offsets."""
    from storage.core.records import build_batch
    from storage.wire import codec

    async def scenario():
        controller, servers = await _start_cluster(tmp_path)
        try:
            assert (await servers[0].node.create_topic("busy", 1, 3))[0] == 0
            for _ in range(100):
                leader = next((s for s in servers if s.node.manager.partitions.get(("busy", 0)) is not None
                               and s.node.manager.partitions[("busy", 0)].leader == s.node.node_id), None)
                if leader is not None and len(leader.node.manager.partitions[("busy", 0)].isr) == 3:
                    break
                await asyncio.sleep(0.05)
            partition = leader.node.manager.partitions[("busy", 0)]
            gate, fetch = asyncio.Event(), leader.handlers[1]

            async def held_fetch(header, request):      # the followers' fetches wait for the gate
                await gate.wait()
                return await fetch(header, request)
            leader.handlers[1] = held_fetch
            await asyncio.sleep(FETCH_MAX_WAIT_S + 0.2)     # the fetches in flight came back
            start = partition.log.log_end_offset
            reader, writer = await asyncio.open_connection("127.0.0.1", leader.node.port)
            frames = [codec.encode_request(0, 9, cid, "c", {
                "transactional_id": None, "acks": -1, "timeout": 20_000, "topic_data": [
                    {"name": "busy", "partition_data": [{"index": 0, "records": build_batch([b"r%d" % cid] * 2)}]}]})
                for cid in (1, 2, 3)]
            writer.write(b"".join(frames))
            for _ in range(200):
                if partition.log.log_end_offset == start + 6:
                    break
                await asyncio.sleep(0.02)
            # Held at the first, the connection would have appended one batch (start + 2).
            assert partition.log.log_end_offset == start + 6
            assert partition.log.high_watermark == start
            gate.set()
            answers = []
            for _ in frames:
                size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 20), "big")
                correlation_id, body = codec.decode_response(0, 9, await reader.readexactly(size))
                row = body.responses[0].partition_responses[0]
                answers.append((correlation_id, row.error_code, row.base_offset))
            assert answers == [(1, 0, start), (2, 0, start + 2), (3, 0, start + 4)]
            writer.close()
        finally:
            await _stop_cluster(controller, servers)
        # The cluster starts again with the three batches on every replica.
        controller, servers = await _start_cluster(tmp_path)
        try:
            for _ in range(200):
                ends = [s.node.manager.partitions[("busy", 0)].log.log_end_offset for s in servers
                        if ("busy", 0) in s.node.manager.partitions]
                if ends == [start + 6] * 3:
                    break
                await asyncio.sleep(0.05)
            assert ends == [start + 6] * 3
        finally:
            await _stop_cluster(controller, servers)
    asyncio.run(asyncio.wait_for(scenario(), 90))
