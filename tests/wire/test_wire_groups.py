"""The group coordinator (storage/wire/groups.py) driven directly, case by case, as Kafka's
GroupCoordinatorTest drives its GroupCoordinator: each test names the Kafka test whose case
it ports (in our words; the error codes are Kafka's).  An embedded Node on a temporary dir
holds `__consumer_offsets`; no sockets."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.config import LogConfig  # noqa: E402
from storage.core.errors import Errors  # noqa: E402
from storage.wire import codec  # noqa: E402
from storage.wire.group_model import EMPTY, STABLE  # noqa: E402
from storage.wire.groups import GroupCoordinator  # noqa: E402
from storage.wire.groups_admin import GroupAdmin  # noqa: E402
from storage.wire.node import Node  # noqa: E402

HEADER = SimpleNamespace(client_id="test-client")
PROTOCOLS = [{"name": "range", "metadata": b"sub"}]


def request(key: int, version: int, **body):
    return codec.build(codec._request_class(key, version), body)


class Groups:
    def __init__(self, path, offsets_partitions: int = 1):
        self.path = path
        self.node = Node(path, offsets_partitions=offsets_partitions, log_config=LogConfig(fsync=False),
                         background=False)
        asyncio.run(self.node.ensure_offsets_topic())     # what a client's FindCoordinator does
        if self.node.topic_id("t") == 0:                  # the topic the tests commit offsets of
            asyncio.run(self.node.create_topic("t", 2, 1))
        self.coordinator = GroupCoordinator(self.node, initial_rebalance_delay_ms=0)

    def close(self):
        asyncio.run(self.node.shutdown())

    async def join(self, member_id="", *, group="g", session=10_000, version=5, protocol_type="consumer",
                   protocols=PROTOCOLS, rebalance=None):
        return await self.coordinator.join_group(HEADER, request(
            11, version, group_id=group, session_timeout=session, rebalance_timeout=rebalance or session,
            member_id=member_id,
            group_instance_id=None, protocol_type=protocol_type, protocols=protocols))

    async def joined(self, group="g"):
        """A member that went through MEMBER_ID_REQUIRED (v5) and joined: (member id, answer)."""
        first = await self.join(group=group)
        assert first["error_code"] == Errors.MEMBER_ID_REQUIRED
        answer = await self.join(first["member_id"], group=group)
        return first["member_id"], answer

    async def sync(self, member_id, generation, assignments=(), group="g"):
        return await self.coordinator.sync_group(HEADER, request(
            14, 5, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocol_name="range",
            assignments=[{"member_id": m, "assignment": a} for m, a in assignments]))

    async def heartbeat(self, member_id, generation, group="g"):
        return (await self.coordinator.heartbeat(HEADER, request(
            12, 4, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None)))["error_code"]

    async def commit(self, member_id, generation, offsets, group="g"):
        answer = await self.coordinator.offset_commit(HEADER, request(
            8, 8, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=None, topics=[{"name": t, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]} for (t, p), o in offsets.items()]))
        return {(t["name"], p["partition_index"]): p["error_code"] for t in answer["topics"] for p in t["partitions"]}

    async def fetch(self, group="g", topics=None):
        answer = await self.coordinator.offset_fetch(HEADER, request(
            9, 7, group_id=group, topics=topics, require_stable=False))
        return {(t["name"], p["partition_index"]): p["committed_offset"] for t in answer["topics"]
                for p in t["partitions"]}

    async def leave(self, member_id, group="g"):
        answer = await self.coordinator.leave_group(HEADER, request(
            13, 5, group_id=group, members=[{"member_id": member_id, "group_instance_id": None, "reason": None}]))
        return answer["members"][0]["error_code"]


@pytest.fixture
def groups(tmp_path):
    g = Groups(tmp_path / "node")
    yield g
    g.close()


def run(coroutine):
    return asyncio.run(coroutine)


def test_join_group_session_timeout_too_small_and_too_large(groups):
    # GroupCoordinatorTest.testJoinGroupSessionTimeoutTooSmall / testJoinGroupSessionTimeoutTooLarge
    assert run(groups.join(session=5_999))["error_code"] == Errors.INVALID_SESSION_TIMEOUT
    assert run(groups.join(session=1_800_001))["error_code"] == Errors.INVALID_SESSION_TIMEOUT


def test_join_group_unknown_member_of_a_new_group(groups):
    # GroupCoordinatorTest.testJoinGroupUnknownConsumerNewGroup
    assert run(groups.join("some-member"))["error_code"] == Errors.UNKNOWN_MEMBER_ID


def test_join_group_empty_protocols_and_empty_protocol_type(groups):
    # GroupCoordinatorTest.testJoinGroupWithEmptyGroupProtocol / testJoinGroupWithEmptyProtocolType
    assert run(groups.join(protocols=[]))["error_code"] == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert run(groups.join(protocol_type=""))["error_code"] == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_join_group_inconsistent_protocol_type_and_protocols(groups):
    # GroupCoordinatorTest.testJoinGroupInconsistentProtocolType / testJoinGroupInconsistentGroupProtocol
    async def scenario():
        await groups.joined()
        other_type = await groups.join(protocol_type="connect")
        other_protocol = await groups.join(protocols=[{"name": "roundrobin", "metadata": b""}])
        return other_type["error_code"], other_protocol["error_code"]
    assert run(scenario()) == (Errors.INCONSISTENT_GROUP_PROTOCOL, Errors.INCONSISTENT_GROUP_PROTOCOL)


def test_join_requires_a_member_id_from_v4_and_not_before(groups):
    # KIP-394 (GroupCoordinatorTest.testJoinGroupShouldReceiveErrorIfGroupOverMaxSize's neighbour
    # testNewMemberJoinExpiration uses the same round trip): v4+ first get MEMBER_ID_REQUIRED
    # with the id to use; v3 joins at once with a generated id.
    async def scenario():
        first = await groups.join(version=4)
        old = await groups.join(version=3, group="old")
        return first, old
    first, old = run(scenario())
    assert first["error_code"] == Errors.MEMBER_ID_REQUIRED and first["member_id"].startswith("test-client-")
    assert old["error_code"] == Errors.NONE and old["member_id"].startswith("test-client-")
    assert old["generation_id"] == 1 and old["leader"] == old["member_id"]


def test_two_members_rebalance_leader_assigns_and_both_get_their_assignment(groups):
    # GroupCoordinatorTest.testSyncGroupLeaderAfterFollower-style flow: both join one generation,
    # only the leader receives the member list, the leader's SyncGroup hands out assignments.
    async def scenario():
        a_id, a = await groups.joined()
        assert (a["error_code"], a["generation_id"]) == (Errors.NONE, 1)
        assert (await groups.sync(a_id, 1, [(a_id, b"all")]))["assignment"] == b"all"
        b_first = await groups.join()
        b_join = asyncio.ensure_future(groups.join(b_first["member_id"]))
        await asyncio.sleep(0)
        assert await groups.heartbeat(a_id, 1) == Errors.REBALANCE_IN_PROGRESS
        a_again = await groups.join(a_id)
        b = await b_join
        assert a_again["generation_id"] == b["generation_id"] == 2
        assert a_again["leader"] == b["leader"] == a_id
        assert sorted(m["member_id"] for m in a_again["members"]) == sorted([a_id, b["member_id"]])
        assert b["members"] == []
        follower_sync = asyncio.ensure_future(groups.sync(b["member_id"], 2))
        await asyncio.sleep(0)
        leader_sync = await groups.sync(a_id, 2, [(a_id, b"p0"), (b["member_id"], b"p1")])
        return leader_sync, await follower_sync
    leader_sync, follower_sync = run(scenario())
    assert (leader_sync["error_code"], leader_sync["assignment"]) == (Errors.NONE, b"p0")
    assert (follower_sync["error_code"], follower_sync["assignment"]) == (Errors.NONE, b"p1")
    assert groups.coordinator.groups["g"].state == STABLE


def test_heartbeat_unknown_group_unknown_member_and_illegal_generation(groups):
    # GroupCoordinatorTest.testHeartbeatUnknownGroup / testHeartbeatUnknownConsumerExistingGroup /
    # testHeartbeatIllegalGeneration
    async def scenario():
        unknown_group = await groups.heartbeat("m", 1, group="nobody")
        member, answer = await groups.joined()
        await groups.sync(member, 1, [(member, b"")])
        return (unknown_group, await groups.heartbeat("not-a-member", 1), await groups.heartbeat(member, 2),
                await groups.heartbeat(member, 1))
    assert run(scenario()) == (Errors.UNKNOWN_MEMBER_ID, Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION,
                               Errors.NONE)


def test_sync_group_from_unknown_member_and_illegal_generation(groups):
    # GroupCoordinatorTest.testSyncGroupFromUnknownMember / testSyncGroupFromIllegalGeneration
    async def scenario():
        member, _ = await groups.joined()
        unknown = await groups.sync("stranger", 1)
        illegal = await groups.sync(member, 7)
        return unknown["error_code"], illegal["error_code"]
    assert run(scenario()) == (Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION)


def test_commit_offsets_rules(groups):
    # GroupCoordinatorTest.testCommitOffsetFromUnknownGroup (a generation for an unknown group),
    # testCommitOffsetInCompletingRebalance, testCommitAndFetchOffsetsWithEmptyGroup (a simple
    # commit, generation -1, to an empty group), testCommitOffsetFromIllegalGeneration
    async def scenario():
        tp = ("t", 0)
        unknown = await groups.commit("m", 1, {tp: 5}, group="nobody")
        simple = await groups.commit("", -1, {tp: 7}, group="standalone")
        fetched = await groups.fetch(group="standalone")
        member, _ = await groups.joined()
        completing = await groups.commit(member, 1, {tp: 3})
        await groups.sync(member, 1, [(member, b"")])
        illegal = await groups.commit(member, 5, {tp: 3})
        ok = await groups.commit(member, 1, {tp: 3})
        return unknown[tp], simple[tp], fetched[tp], completing[tp], illegal[tp], ok[tp], await groups.fetch()
    unknown, simple, fetched, completing, illegal, ok, group_offsets = run(scenario())
    assert unknown == Errors.ILLEGAL_GENERATION
    assert (simple, fetched) == (Errors.NONE, 7)
    assert completing == Errors.REBALANCE_IN_PROGRESS
    assert illegal == Errors.ILLEGAL_GENERATION
    assert ok == Errors.NONE and group_offsets == {("t", 0): 3}


def test_leave_group_unknown_member_then_the_last_member_leaves(groups):
    # GroupCoordinatorTest.testLeaveGroupUnknownConsumerExistingGroup / testValidLeaveGroup
    async def scenario():
        member, _ = await groups.joined()
        await groups.sync(member, 1, [(member, b"")])
        return await groups.leave("stranger"), await groups.leave(member)
    assert run(scenario()) == (Errors.UNKNOWN_MEMBER_ID, Errors.NONE)
    group = groups.coordinator.groups["g"]
    assert group.state == EMPTY and group.generation == 2 and not group.members


def test_committed_offsets_and_generation_survive_a_restart(tmp_path):
    # GroupMetadataManagerTest.testLoadOffsetsWithoutGroup / testLoadGroupWithTombstone's
    # premise: what the coordinator wrote to __consumer_offsets is what a new coordinator loads.
    first = Groups(tmp_path / "node")
    try:
        async def write():
            member, _ = await first.joined()
            await first.sync(member, 1, [(member, b"")])
            return await first.commit(member, 1, {("t", 0): 42, ("t", 1): 7})
        assert set(run(write()).values()) == {Errors.NONE}
    finally:
        first.close()
    second = Groups(tmp_path / "node")
    try:
        assert run(second.fetch()) == {("t", 0): 42, ("t", 1): 7}
        group = second.coordinator.groups["g"]
        # Kafka's loader: a group record with members is Stable, its members as they were.
        assert (group.generation, group.protocol_type, group.state, group.protocol) == (1, "consumer", STABLE, "range")
        assert list(group.members) == [group.leader]
    finally:
        second.close()


def test_join_before_the_offsets_topic_exists_is_not_coordinator(tmp_path):
    # GroupCoordinatorTest.testJoinGroupWrongCoordinator: a broker that does not lead the group's
    # offsets partition answers NOT_COORDINATOR (here: no __consumer_offsets yet).
    node = Node(tmp_path / "bare", offsets_partitions=1, log_config=LogConfig(fsync=False), background=False)
    try:
        coordinator = GroupCoordinator(node, initial_rebalance_delay_ms=0)
        answer = run(coordinator.join_group(HEADER, request(
            11, 5, group_id="g", session_timeout=10_000, rebalance_timeout=10_000, member_id="",
            group_instance_id=None, protocol_type="consumer", protocols=PROTOCOLS)))
        assert answer["error_code"] == Errors.NOT_COORDINATOR
    finally:
        run(node.shutdown())


def _listed(coordinator, states=()) -> dict[str, str]:
    answer = run(GroupAdmin(coordinator).list_groups(HEADER, request(16, 4, states_filter=list(states))))
    assert answer["error_code"] == Errors.NONE
    return {g["group_id"]: g["group_state"] for g in answer["groups"]}


def test_list_groups_after_a_restart_lists_every_group_of_every_offsets_partition(tmp_path):
    # GroupMetadataManagerTest's load cases (loadGroupsAndOffsets on a partition's election):
    # the coordinator loads every offsets partition it leads when it takes it over, so a
    # ListGroups right after a restart answers with all the groups, not only those whose
    # partition a request has touched (it answered [] before).
    names = [f"group-{i}" for i in range(12)]
    first = Groups(tmp_path / "node", offsets_partitions=5)
    try:
        async def write():
            for name in names:
                member, _ = await first.joined(group=name)
                await first.sync(member, 1, [(member, b"")], group=name)
                assert set((await first.commit(member, 1, {("t", 0): 5}, group=name)).values()) == {Errors.NONE}
        run(write())
        assert len({first.coordinator.partition_for(n) for n in names}) > 1
    finally:
        first.close()
    second = Groups(tmp_path / "node", offsets_partitions=5)
    try:
        assert _listed(second.coordinator) == {name: STABLE for name in names}     # their members loaded
        assert _listed(second.coordinator, ["stable"]).keys() == set(names)
        assert _listed(second.coordinator, [EMPTY]) == {}
    finally:
        second.close()


def test_the_tick_loads_the_offsets_partitions_it_leads(tmp_path):
    first = Groups(tmp_path / "node", offsets_partitions=3)
    try:
        async def write():
            for name in ("a", "b", "c", "d"):
                member, _ = await first.joined(group=name)
                await first.sync(member, 1, [(member, b"")], group=name)
                assert set((await first.commit(member, 1, {("t", 0): 1}, group=name)).values()) == {Errors.NONE}
        run(write())
    finally:
        first.close()
    second = Groups(tmp_path / "node", offsets_partitions=3)
    try:
        assert second.coordinator.groups == {}
        second.coordinator.tick()
        assert set(second.coordinator.groups) == {"a", "b", "c", "d"}
        assert second.coordinator.groups["c"].offsets[("t", 0)][0] == 1
    finally:
        second.close()


def test_initial_delay_is_extended_while_members_join_up_to_the_rebalance_timeout(groups):
    # GroupCoordinatorTest.testDelayRebalanceUptoRebalanceTimeout, in real time: a delay D and a
    # rebalance timeout 2D.  Two members join at once; at D a member has joined during the delay,
    # so the group waits D more (the last of its 2D); a third member joining then is in the
    # first generation with the other two, which completes at 2D, not before.  librdkafka's
    # 0113 (l_unsubscribe) counts on consumers that subscribe together sharing one generation.
    delay = 400
    groups.coordinator.initial_rebalance_delay_ms = delay

    async def member(after_s=0.0):
        await asyncio.sleep(after_s)
        first = await groups.join(rebalance=2 * delay)
        return await groups.join(first["member_id"], rebalance=2 * delay)

    async def scenario():
        loop = asyncio.get_running_loop()
        start = loop.time()
        one, two = loop.create_task(member()), loop.create_task(member())
        three = loop.create_task(member(after_s=(delay + 150) / 1000))
        await asyncio.sleep((delay + 100) / 1000)
        assert not one.done() and not two.done()          # extended at D: the second member joined
        answers = await asyncio.gather(one, two, three)
        return answers, loop.time() - start

    answers, elapsed = run(scenario())
    assert [a["error_code"] for a in answers] == [Errors.NONE] * 3
    assert {a["generation_id"] for a in answers} == {1}
    assert max(len(a["members"]) for a in answers) == 3   # the leader sees all three
    assert 2 * delay / 1000 - 0.05 <= elapsed < 2 * delay / 1000 + 0.5


def test_initial_delay_is_not_extended_when_nobody_else_joins(groups):
    # GroupCoordinatorTest.testDelayInitialRebalanceByGroupInitialRebalanceDelayOnEmptyGroup:
    # one member alone waits the delay once, though its rebalance timeout is longer.
    groups.coordinator.initial_rebalance_delay_ms = 300

    async def scenario():
        loop = asyncio.get_running_loop()
        start = loop.time()
        first = await groups.join(rebalance=10_000)
        answer = await groups.join(first["member_id"], rebalance=10_000)
        return answer, loop.time() - start

    answer, elapsed = run(scenario())
    assert answer["error_code"] == Errors.NONE and answer["generation_id"] == 1
    assert 0.25 <= elapsed < 0.8
