"""A member that stops heartbeating is removed when its session expires in every state of the
group, a rebalance in progress included (Kafka's heartbeat expiration runs in PreparingRebalance
too: GroupCoordinatorTest.testSessionTimeoutDuringRebalance). Found by librdkafka's test 0084
(destroy_flags): a consumer destroyed without closing left its member behind, and the next
consumer's join waited out the member's rebalance timeout (300 s) instead of its session (6 s)."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.errors import Errors  # noqa: E402
from storage.wire import groups as groups_module  # noqa: E402
from storage.wire.groups import STABLE  # noqa: E402
from tests.wire.test_wire_groups import HEADER, PROTOCOLS, Groups, request  # noqa: E402

SESSION_MS, REBALANCE_MS = 6_000, 300_000


@pytest.fixture
def groups(tmp_path):
    g = Groups(tmp_path / "node")
    yield g
    g.close()


async def _join(groups, member_id=""):
    return await groups.coordinator.join_group(HEADER, request(
        11, 5, group_id="g", session_timeout=SESSION_MS, rebalance_timeout=REBALANCE_MS, member_id=member_id,
        group_instance_id=None, protocol_type="consumer", protocols=PROTOCOLS))


def test_a_silent_member_expires_by_its_session_while_the_group_rebalances(groups, monkeypatch):
    clock = [1_000_000]
    monkeypatch.setattr(groups_module, "monotonic_ms", lambda: clock[0])

    async def scenario():
        gone = (await _join(groups))["member_id"]
        joined = await _join(groups, gone)
        assert (joined["error_code"], joined["generation_id"]) == (Errors.NONE, 1)
        await groups.sync(gone, 1, [(gone, b"all")])
        assert groups.coordinator.groups["g"].state == STABLE
        # `gone` never heartbeats again; a new member's join starts a rebalance.
        newcomer = (await _join(groups))["member_id"]
        waiting = asyncio.ensure_future(_join(groups, newcomer))
        await asyncio.sleep(0)
        clock[0] += SESSION_MS - 1
        groups.coordinator.tick()
        await asyncio.sleep(0)
        assert not waiting.done()                   # within its session `gone` may still rejoin
        clock[0] += 2
        groups.coordinator.tick()
        return gone, newcomer, await asyncio.wait_for(waiting, 5)
    gone, newcomer, answer = asyncio.run(scenario())
    assert (answer["error_code"], answer["generation_id"]) == (Errors.NONE, 2)
    assert answer["leader"] == newcomer
    assert [m["member_id"] for m in answer["members"]] == [newcomer]
    assert gone not in groups.coordinator.groups["g"].members


def test_a_member_waiting_in_its_join_is_not_expired(groups, monkeypatch):
    # Kafka keeps a member that has rejoined alive (MemberMetadata.isAwaitingJoin): only the ones
    # that did not rejoin are expired.
    clock = [1_000_000]
    monkeypatch.setattr(groups_module, "monotonic_ms", lambda: clock[0])

    async def scenario():
        first = (await _join(groups))["member_id"]
        await _join(groups, first)
        await groups.sync(first, 1, [(first, b"all")])
        second = (await _join(groups))["member_id"]
        waiting = asyncio.ensure_future(_join(groups, second))
        await asyncio.sleep(0)
        clock[0] += SESSION_MS + 1
        groups.coordinator.tick()                  # `first` expires, `second` is in its join
        return second, await asyncio.wait_for(waiting, 5)
    second, answer = asyncio.run(scenario())
    assert (answer["error_code"], answer["member_id"]) == (Errors.NONE, second)
    assert list(groups.coordinator.groups["g"].members) == [second]
