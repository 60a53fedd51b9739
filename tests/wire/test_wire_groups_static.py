"""Static membership (KIP-345), the group admin APIs (DeleteGroups, OffsetDelete, ListGroups'
filters, DescribeGroups' authorized operations) and OffsetCommit of unknown partitions, driven
on the coordinator directly as Kafka's GroupMetadataManagerTest / OffsetMetadataManagerTest
drive theirs: each test names the Kafka test whose case it ports (in our words; the error
codes are Kafka's).  No sockets; the real clients are tests/wire/test_wire_groups_clients.py."""
from __future__ import annotations

import asyncio
import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.errors import Errors  # noqa: E402
from storage.wire.admin_apis import GROUP_OPERATIONS  # noqa: E402
from storage.wire.group_model import EMPTY, STABLE  # noqa: E402
from storage.wire.groups_admin import GroupAdmin  # noqa: E402
from tests.wire.test_wire_groups import HEADER, Groups, request, run  # noqa: E402


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: the topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


class Static(Groups):
    def __init__(self, path, **kw):
        super().__init__(path, **kw)
        self.admin = GroupAdmin(self.coordinator)

    async def join_static(self, instance, member_id="", *, group="g", version=5, protocols=None):
        protocols = protocols or [{"name": "range", "metadata": subscription("t")}]
        return await self.coordinator.join_group(HEADER, request(
            11, version, group_id=group, session_timeout=10_000, rebalance_timeout=10_000, member_id=member_id,
            group_instance_id=instance, protocol_type="consumer", protocols=protocols, reason=None))

    async def stable_static(self, instance, group="g", protocols=None):
        """A static member alone in a Stable group: its member id."""
        joined = await self.join_static(instance, group=group, protocols=protocols)
        assert joined["error_code"] == Errors.NONE, joined
        member = joined["member_id"]
        synced = await self.sync_static(member, instance, joined["generation_id"], [(member, b"mine")], group=group)
        assert synced["error_code"] == Errors.NONE
        return member

    async def sync_static(self, member, instance, generation, assignments=(), group="g"):
        return await self.coordinator.sync_group(HEADER, request(
            14, 5, group_id=group, generation_id=generation, member_id=member, group_instance_id=instance,
            protocol_type="consumer", protocol_name="range",
            assignments=[{"member_id": m, "assignment": a} for m, a in assignments]))

    async def heartbeat_static(self, member, instance, generation, group="g"):
        return (await self.coordinator.heartbeat(HEADER, request(
            12, 4, group_id=group, generation_id=generation, member_id=member,
            group_instance_id=instance)))["error_code"]

    async def commit_static(self, member, instance, generation, group="g"):
        answer = await self.coordinator.offset_commit(HEADER, request(
            8, 8, group_id=group, generation_id_or_member_epoch=generation, member_id=member,
            group_instance_id=instance, topics=[{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]))
        return answer["topics"][0]["partitions"][0]["error_code"]

    async def leave_many(self, members, group="g"):
        answer = await self.coordinator.leave_group(HEADER, request(13, 5, group_id=group, members=[
            {"member_id": m, "group_instance_id": i, "reason": None} for m, i in members]))
        return [row["error_code"] for row in answer["members"]]

    async def delete_groups(self, *names):
        answer = await self.admin.delete_groups(HEADER, request(42, 2, groups_names=list(names)))
        return {row["group_id"]: row["error_code"] for row in answer["results"]}

    async def delete_offsets(self, group, partitions):
        answer = await self.admin.offset_delete(HEADER, request(47, 0, group_id=group, topics=[
            {"name": t, "partitions": [{"partition_index": p}]} for t, p in partitions]))
        return answer["error_code"], {(t["name"], p["partition_index"]): p["error_code"]
                                      for t in answer["topics"] for p in t["partitions"]}


@pytest.fixture
def groups(tmp_path):
    g = Static(tmp_path / "node")
    yield g
    g.close()


# ---- static membership ----------------------------------------------------------------------

def test_static_member_joins_without_the_member_id_round_trip(groups):
    # GroupMetadataManagerTest.testStaticMemberJoinAsFirstMember: no MEMBER_ID_REQUIRED for a
    # member with a group.instance.id; it joins at once and leads generation 1.
    answer = run(groups.join_static("instance-a"))
    assert answer["error_code"] == Errors.NONE and answer["generation_id"] == 1
    assert answer["leader"] == answer["member_id"]
    assert [m["group_instance_id"] for m in answer["members"]] == ["instance-a"]


def test_a_restarted_static_follower_replaces_its_old_id_without_a_rebalance(groups):
    # testStaticMemberRejoinAsFollowerWithUnknownMemberId / testReplaceStaticMemberInStableStateNoError:
    # the restarted follower gets a new member id, the current generation and, at SyncGroup,
    # the assignment it had; the leader's heartbeats see no rebalance; the old id is fenced.
    async def scenario():
        leader = (await groups.join_static("leader"))["member_id"]
        follower_join = asyncio.ensure_future(groups.join_static("follower"))
        await asyncio.sleep(0)
        again = await groups.join_static("leader", leader)
        follower = await follower_join
        assert again["generation_id"] == follower["generation_id"] == 2
        old = follower["member_id"]
        follower_sync = asyncio.ensure_future(groups.sync_static(old, "follower", 2))
        await asyncio.sleep(0)
        await groups.sync_static(leader, "leader", 2, [(leader, b"L"), (old, b"F")])
        assert (await follower_sync)["assignment"] == b"F"
        rejoined = await groups.join_static("follower")
        new = rejoined["member_id"]
        synced = await groups.sync_static(new, "follower", rejoined["generation_id"])
        return old, new, rejoined, synced, leader
    old, new, rejoined, synced, leader = run(scenario())
    assert new != old and rejoined["error_code"] == Errors.NONE
    assert (rejoined["generation_id"], rejoined["leader"], rejoined["members"]) == (2, leader, [])
    assert (synced["error_code"], synced["assignment"]) == (Errors.NONE, b"F")
    g = groups.coordinator.groups["g"]
    assert g.state == STABLE and g.generation == 2 and set(g.members) == {leader, new}
    assert run(groups.heartbeat_static(leader, "leader", 2)) == Errors.NONE
    # testStaticMemberHeartbeatLeaderWithInvalidMemberId / testStaticMemberSyncAsLeaderWithInvalidMemberId
    assert run(groups.heartbeat_static(old, "follower", 2)) == Errors.FENCED_INSTANCE_ID
    assert run(groups.sync_static(old, "follower", 2))["error_code"] == Errors.FENCED_INSTANCE_ID
    assert run(groups.heartbeat_static(new, "follower", 2)) == Errors.NONE
    # ClassicGroup.validateOffsetCommit: the old id's commit is fenced too, the new id's is taken
    assert run(groups.commit_static(old, "follower", 2)) == Errors.FENCED_INSTANCE_ID
    assert run(groups.commit_static(new, "follower", 2)) == Errors.NONE
    # testStaticMemberFenceDuplicateRejoinedFollower: the old id's JoinGroup is fenced, not unknown
    assert run(groups.join_static("follower", old))["error_code"] == Errors.FENCED_INSTANCE_ID
    # testStaticMemberRejoinAsFollowerWithMismatchedInstanceId: a known member id, another's instance
    assert run(groups.join_static("follower", leader))["error_code"] == Errors.FENCED_INSTANCE_ID
    # testStaticMemberJoinWithUnknownInstanceIdAndKnownMemberId
    assert run(groups.join_static("nobody", new))["error_code"] == Errors.UNKNOWN_MEMBER_ID


def test_a_fenced_static_member_commit_during_a_rebalance_is_fenced(groups):
    # ClassicGroup.validateOffsetCommit checks the member before the CompletingRebalance state:
    # the replaced id's commit is FENCED_INSTANCE_ID, the current id's REBALANCE_IN_PROGRESS.
    async def scenario():
        old = (await groups.join_static("solo"))["member_id"]         # generation 1, not synced
        new = await groups.join_static("solo")                         # replaces it: a rebalance
        return (old, new, await groups.commit_static(old, "solo", new["generation_id"]),
                await groups.commit_static(new["member_id"], "solo", new["generation_id"]))
    old, new, fenced, current = run(scenario())
    assert new["error_code"] == Errors.NONE and new["generation_id"] == 2 and new["member_id"] != old
    assert (fenced, current) == (Errors.FENCED_INSTANCE_ID, Errors.REBALANCE_IN_PROGRESS)


def test_a_restarted_static_leader_is_told_to_skip_the_assignment_from_v9(groups):
    # testStaticMemberRejoinWithLeaderIdAndUnknownMemberId (its supportSkippingAssignment case):
    # v9 gives the new leader id the members and skip_assignment; before v9 it learns the
    # leader it replaced (so it does not assign) and no members.
    async def scenario():
        old = await groups.stable_static("solo")
        v9 = await groups.join_static("solo", version=9)
        v5 = await groups.join_static("solo")
        return old, v9, v5
    old, v9, v5 = run(scenario())
    assert v9["error_code"] == Errors.NONE and v9["leader"] == v9["member_id"] and v9["skip_assignment"] is True
    assert [m["member_id"] for m in v9["members"]] == [v9["member_id"]]
    assert v5["leader"] == v9["member_id"] != v5["member_id"] and v5["members"] == []
    assert groups.coordinator.groups["g"].leader == v5["member_id"]
    assert groups.coordinator.groups["g"].generation == 1


def test_a_static_member_rejoining_with_another_protocol_rebalances(groups):
    # testStaticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWithSelectedProtocolChanged:
    # when the selected protocol would change, the replacement triggers a rebalance.
    async def scenario():
        await groups.stable_static("solo", protocols=[{"name": "range", "metadata": subscription("t")},
                                                      {"name": "roundrobin", "metadata": subscription("t")}])
        return await groups.join_static("solo", protocols=[{"name": "roundrobin", "metadata": subscription("t")}])
    answer = run(scenario())
    assert answer["error_code"] == Errors.NONE and answer["generation_id"] == 2
    assert answer["protocol_name"] == "roundrobin"


def test_static_members_leave_in_a_batch_by_instance_id(groups):
    # testStaticMembersValidBatchLeaveGroup / testLeaveGroupWithFencedInstanceId /
    # testLeaveGroupStaticMemberWithUnknownMemberId / testStaticMembersLeaveUnknownGroup
    async def scenario():
        a = (await groups.join_static("a"))["member_id"]
        b_join = asyncio.ensure_future(groups.join_static("b"))
        await asyncio.sleep(0)
        await groups.join_static("a", a)
        b = (await b_join)["member_id"]
        fenced = await groups.leave_many([("other-member-id", "a")])
        unknown = await groups.leave_many([("", "nobody")])
        unknown_group = await groups.leave_many([("", "a")], group="none")
        both = await groups.leave_many([("", "a"), (b, "b")])
        return fenced, unknown, unknown_group, both
    fenced, unknown, unknown_group, both = run(scenario())
    assert fenced == [Errors.FENCED_INSTANCE_ID]
    assert unknown == [Errors.UNKNOWN_MEMBER_ID] and unknown_group == [Errors.UNKNOWN_MEMBER_ID]
    assert both == [Errors.NONE, Errors.NONE]
    assert groups.coordinator.groups["g"].state == EMPTY and not groups.coordinator.groups["g"].members


def test_session_timeout_removes_a_static_member(groups):
    # testSessionTimeoutExpirationStaticMember: a static member that stops heartbeating is
    # removed at its session timeout, as a dynamic one.
    member = run(groups.stable_static("solo"))
    g = groups.coordinator.groups["g"]
    g.members[member].last_heartbeat_ms -= 10_001
    run(_ticked(groups))
    assert not g.members and g.state == EMPTY


async def _ticked(groups):
    groups.coordinator.tick()


def test_static_member_ids_survive_a_restart_and_the_restarted_member_is_not_rebalanced(tmp_path):
    # GroupMetadataManagerTest.testLoadGroupWithStaticMember's premise (the instance id in the
    # group record) and KIP-345's point: after a coordinator restart the static member that
    # restarts too takes its place with no rebalance.
    first = Static(tmp_path / "node")
    try:
        member = run(first.stable_static("solo"))
    finally:
        first.close()
    second = Static(tmp_path / "node")
    try:
        assert run(second.heartbeat_static(member, "solo", 1)) == Errors.NONE     # loads the group
        g = second.coordinator.groups["g"]
        assert g.state == STABLE and g.members[member].group_instance_id == "solo"
        assert g.members[member].assignment == b"mine"

        async def restart_member():
            rejoined = await second.join_static("solo")
            return rejoined, await second.sync_static(rejoined["member_id"], "solo", rejoined["generation_id"])
        rejoined, synced = run(restart_member())
        assert rejoined["error_code"] == Errors.NONE and rejoined["generation_id"] == 1
        assert synced["assignment"] == b"mine" and g.generation == 1
        assert run(second.heartbeat_static(member, "solo", 1)) == Errors.FENCED_INSTANCE_ID
    finally:
        second.close()


def test_a_group_emptied_by_leaving_is_empty_after_a_restart(tmp_path):
    # Kafka appends the group record when a rebalance ends with no member, so the members that
    # left are not loaded back.
    first = Static(tmp_path / "node")
    try:
        async def scenario():
            member = await first.stable_static("solo")
            assert await first.leave_many([(member, "solo")]) == [Errors.NONE]
            await asyncio.sleep(0.2)            # the record is written in the background
        run(scenario())
    finally:
        first.close()
    second = Static(tmp_path / "node")
    try:
        second.coordinator.tick()
        g = second.coordinator.groups["g"]
        assert (g.state, g.members, g.generation) == (EMPTY, {}, 2)
    finally:
        second.close()


# ---- OffsetCommit of what does not exist ----------------------------------------------------

def test_commit_of_an_unknown_topic_or_partition_is_refused_per_partition(groups):
    # KafkaApis' metadata check before the coordinator (librdkafka's 0030): per partition,
    # also on the simple-commit path; a commit of only unknown partitions creates no group.
    async def scenario():
        only_unknown = await groups.commit("", -1, {("gone", 0): 1}, group="simple")
        mixed = await groups.commit("", -1, {("t", 0): 4, ("t", 9): 5, ("gone", 0): 6}, group="simple")
        member, _ = await groups.joined()
        await groups.sync(member, 1, [(member, b"")])
        as_member = await groups.commit(member, 1, {("t", 1): 2, ("gone", 3): 2})
        unknown_fetched = await groups.coordinator.offset_fetch(HEADER, request(
            9, 7, group_id="simple", topics=[{"name": "gone", "partition_indexes": [0]}], require_stable=False))
        return only_unknown, mixed, as_member, await groups.fetch(group="simple"), unknown_fetched
    only_unknown, mixed, as_member, fetched, unknown_fetched = run(scenario())
    assert only_unknown == {("gone", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert mixed == {("t", 0): Errors.NONE, ("t", 9): Errors.UNKNOWN_TOPIC_OR_PARTITION,
                     ("gone", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert as_member == {("t", 1): Errors.NONE, ("gone", 3): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert fetched == {("t", 0): 4}
    # OffsetFetch of an unknown topic is as before: no offset, no error (KafkaApis does not check it)
    [part] = unknown_fetched["topics"][0]["partitions"]
    assert (unknown_fetched["error_code"], part["error_code"]) == (Errors.NONE, Errors.NONE)
    assert part["committed_offset"] == -1


def test_admin_apis_of_a_broker_that_is_not_the_coordinator(tmp_path):
    # GroupCoordinatorServiceTest's NOT_COORDINATOR cases for deleteGroups / deleteOffsets /
    # describeGroups: here no broker leads the offsets partition (the topic does not exist).
    from storage.core.config import LogConfig
    from storage.wire.groups import GroupCoordinator
    from storage.wire.node import Node
    node = Node(tmp_path / "bare", offsets_partitions=1, log_config=LogConfig(fsync=False), background=False)
    try:
        admin = GroupAdmin(GroupCoordinator(node, initial_rebalance_delay_ms=0))
        deleted = run(admin.delete_groups(HEADER, request(42, 2, groups_names=["g"])))
        offsets = run(admin.offset_delete(HEADER, request(47, 0, group_id="g", topics=[])))
        described = run(admin.describe_groups(HEADER, request(15, 5, groups=["g"],
                                                              include_authorized_operations=False)))
        assert deleted["results"][0]["error_code"] == offsets["error_code"] == Errors.NOT_COORDINATOR
        assert described["groups"][0]["error_code"] == Errors.NOT_COORDINATOR
    finally:
        run(node.shutdown())


# ---- DeleteGroups and OffsetDelete ----------------------------------------------------------

def test_delete_groups_rules(groups):
    # GroupMetadataManagerTest / ClassicGroupTest.testValidateDeleteGroup: an Empty group (here a
    # simple one with offsets) is deleted, a group with members is NON_EMPTY_GROUP, an unknown
    # one GROUP_ID_NOT_FOUND; the deleted group's offsets are gone.
    async def scenario():
        await groups.commit("", -1, {("t", 0): 3}, group="simple")
        await groups.stable_static("solo", group="busy")
        codes = await groups.delete_groups("simple", "busy", "never", "")
        return codes, await groups.fetch(group="simple"), await groups.delete_groups("simple")
    codes, fetched, again = run(scenario())
    assert codes == {"simple": Errors.NONE, "busy": Errors.NON_EMPTY_GROUP, "never": Errors.GROUP_ID_NOT_FOUND,
                     "": Errors.INVALID_GROUP_ID}
    assert fetched == {} and again == {"simple": Errors.GROUP_ID_NOT_FOUND}
    assert "simple" not in groups.coordinator.groups


def test_offset_delete_rules(groups):
    # OffsetMetadataManagerTest.testDeleteOffsetsWithConsumerGroup-style cases on a classic group:
    # a topic a member subscribes to is GROUP_SUBSCRIBED_TO_TOPIC, another is deleted;
    # ClassicGroupTest.testValidateOffsetDelete: an unknown group is GROUP_ID_NOT_FOUND, a
    # non-consumer group with members NON_EMPTY_GROUP; an unknown partition is
    # UNKNOWN_TOPIC_OR_PARTITION (KafkaApis).
    async def scenario():
        await groups.node.create_topic("u", 1, 1)
        member = await groups.stable_static("solo")       # subscribes to "t"
        assert set((await groups.commit(member, 1, {("t", 0): 1, ("u", 0): 2}, group="g")).values()) == {0}
        busy = await groups.delete_offsets("g", [("t", 0), ("u", 0), ("t", 7)])
        left = await groups.fetch(group="g")
        unknown = await groups.delete_offsets("never", [("t", 0)])
        first = await groups.join(group="connect", protocol_type="connect")
        await groups.join(first["member_id"], group="connect", protocol_type="connect")
        return busy, left, unknown, await groups.delete_offsets("connect", [("t", 0)])
    busy, left, unknown, connect = run(scenario())
    assert busy == (Errors.NONE, {("t", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): Errors.NONE,
                                  ("t", 7): Errors.UNKNOWN_TOPIC_OR_PARTITION})
    assert left == {("t", 0): 1}
    assert unknown == (Errors.GROUP_ID_NOT_FOUND, {})
    assert connect == (Errors.NON_EMPTY_GROUP, {})


def test_deleted_offsets_and_groups_stay_deleted_after_a_restart(tmp_path):
    # GroupMetadataManagerTest.testLoadGroupWithTombstone / testLoadOffsetsWithTombstones: the
    # tombstones written to __consumer_offsets are what a restarted coordinator loads.
    first = Static(tmp_path / "node")
    try:
        async def scenario():
            await first.commit("", -1, {("t", 0): 3, ("t", 1): 4}, group="keep")
            await first.commit("", -1, {("t", 0): 5}, group="drop")
            assert await first.delete_offsets("keep", [("t", 1)]) == (Errors.NONE, {("t", 1): Errors.NONE})
            assert await first.delete_groups("drop") == {"drop": Errors.NONE}
        run(scenario())
    finally:
        first.close()
    second = Static(tmp_path / "node")
    try:
        second.coordinator.tick()
        assert "drop" not in second.coordinator.groups
        assert run(second.fetch(group="keep")) == {("t", 0): 3}
    finally:
        second.close()


# ---- ListGroups and DescribeGroups ----------------------------------------------------------

def test_list_groups_types_and_states_filters_and_describe_operations(groups):
    # GroupMetadataManagerTest.testListGroups (its type and state filters, case-insensitive);
    # DescribeGroups' include_authorized_operations (Kafka's group operations, all allowed).
    async def scenario():
        await groups.stable_static("solo", group="busy")
        await groups.commit("", -1, {("t", 0): 3}, group="simple")

        async def listed(**filters):
            answer = await groups.admin.list_groups(HEADER, request(16, 5, **filters))
            return {g["group_id"]: (g["group_state"], g["group_type"]) for g in answer["groups"]}

        lists = (await listed(states_filter=[], types_filter=["Classic"]), await listed(states_filter=[],
                 types_filter=["consumer"]), await listed(states_filter=["EMPTY"], types_filter=[]))
        described = [await groups.admin.describe_groups(HEADER, request(15, 5, groups=["busy", "none"],
                                                                        include_authorized_operations=asked))
                     for asked in (True, False)]
        return lists, described
    (classic, consumer, empty), (asked, not_asked) = run(scenario())
    assert classic == {"busy": (STABLE, "classic"), "simple": (EMPTY, "classic")}
    assert consumer == {} and empty == {"simple": (EMPTY, "classic")}
    assert [g["authorized_operations"] for g in asked["groups"]] == [GROUP_OPERATIONS] * 2 == [3400] * 2
    assert [g["authorized_operations"] for g in not_asked["groups"]] == [-2147483648] * 2
    assert [g["group_state"] for g in asked["groups"]] == [STABLE, "Dead"]
    assert asked["groups"][0]["members"][0]["group_instance_id"] == "solo"
