"""The group coordinator's administrative APIs: ListGroups, DescribeGroups, DeleteGroups
(API 42) and OffsetDelete (API 47), over the coordinator of storage/wire/groups.py.

Deletions are tombstones in `__consumer_offsets` (a record with the group's or the offset's
key and no value, Kafka's format), written before anyone is answered, so a restart -- which
replays the partition -- agrees with what the client was told.  The rules are Kafka's
(ClassicGroup.validateDeleteGroup / validateOffsetDelete, OffsetMetadataManager.deleteOffsets):
only an Empty group can be deleted; a group with members keeps the offsets of the topics its
consumers subscribe to (GROUP_SUBSCRIBED_TO_TOPIC), and one whose protocol type is not
"consumer" (its subscriptions unreadable) keeps them all (NON_EMPTY_GROUP).
"""
from __future__ import annotations

import struct

from ..core.errors import Errors
from ..topics import coordinator_records as cr
from .admin_apis import GROUP_OPERATIONS, operations
from .group_model import EMPTY, Group, partition_errors
from .groups import GroupCoordinator

CLASSIC = "classic"                          # KIP-848's group type of every group here


def subscribed_topics(g: Group) -> set[str]:
    """The topics a consumer group's members subscribe to, read from their protocol metadata
    (ConsumerProtocolSubscription: int16 version, then an array of topic names; every version
    starts so).  Before the group has a protocol, every protocol each member offered."""
    topics: set[str] = set()
    for mem in g.members.values():
        for name, metadata in mem.protocols:
            if g.protocol is None or name == g.protocol:
                topics |= _subscription_topics(metadata)
    return topics


def _subscription_topics(metadata: bytes) -> set[str]:
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        at, out = 6, set()
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", metadata, at)
            out.add(metadata[at + 2:at + 2 + size].decode())
            at += 2 + size
        return out
    except (struct.error, UnicodeDecodeError):
        return set()


def _group_tombstone(group_id: str) -> tuple[bytes, None]:
    return cr.encode(cr.GROUP_METADATA_KEY, {"group": group_id}, 2), None


def _offset_tombstone(group_id: str, topic: str, partition: int) -> tuple[bytes, None]:
    return cr.encode(cr.OFFSET_COMMIT_KEY, {"group": group_id, "topic": topic, "partition": partition}, 1), None


class GroupAdmin:
    def __init__(self, coordinator: GroupCoordinator):
        self.coordinator = coordinator

    async def list_groups(self, header, request) -> dict:
        """Every group of the offsets partitions this broker leads; v4's states filter and v5's
        types filter (KIP-848) compare case-insensitively, as Kafka's."""
        c = self.coordinator
        states = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
        c.load_led_partitions()
        led = c.led_partitions()
        if types and CLASSIC not in types:
            return {"error_code": Errors.NONE, "groups": []}
        return {"error_code": Errors.NONE,
                "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state,
                            "group_type": CLASSIC}
                           for g in c.groups.values()
                           if c.partition_for(g.group_id) in led and (not states or g.state.lower() in states)]}

    async def describe_groups(self, header, request) -> dict:
        allowed = operations(getattr(request, "include_authorized_operations", False), GROUP_OPERATIONS)
        out = []
        for group_id in request.groups:
            answer = {"error_code": Errors.NONE, "group_id": group_id, "group_state": "Dead", "protocol_type": "",
                      "protocol_data": "", "members": [], "authorized_operations": allowed}
            code = self.coordinator.check_coordinator(group_id)
            g = self.coordinator.groups.get(group_id)
            if code:
                answer["error_code"] = code
            elif g is not None:
                answer.update(group_state=g.state, protocol_type=g.protocol_type or "", protocol_data=g.protocol or "",
                              members=[{"member_id": mem.member_id, "group_instance_id": mem.group_instance_id,
                                        "client_id": mem.client_id, "client_host": mem.client_host,
                                        "member_metadata": mem.metadata(g.protocol) if g.protocol else b"",
                                        "member_assignment": mem.assignment} for mem in g.members.values()])
            out.append(answer)
        return {"groups": out}

    async def delete_groups(self, header, request) -> dict:
        return {"results": [{"group_id": group_id, "error_code": await self._delete_group(group_id)}
                            for group_id in request.groups_names]}

    async def _delete_group(self, group_id: str) -> int:
        c = self.coordinator
        if not group_id:
            return Errors.INVALID_GROUP_ID
        code = c.check_coordinator(group_id)
        if code:
            return code
        g = c.groups.get(group_id)
        if g is None:
            return Errors.GROUP_ID_NOT_FOUND
        if g.state != EMPTY:
            return Errors.NON_EMPTY_GROUP
        records = [_offset_tombstone(group_id, topic, partition) for topic, partition in sorted(g.offsets)]
        code = await c.write(group_id, [*records, _group_tombstone(group_id)])
        if code == Errors.NONE and c.groups.get(group_id) is g and g.state == EMPTY:
            del c.groups[group_id]
        return code

    async def offset_delete(self, header, request) -> dict:
        c = self.coordinator

        def failed(code: int) -> dict:
            return {"error_code": code, "topics": []}

        if not request.group_id:
            return failed(Errors.INVALID_GROUP_ID)
        codes = c.unknown_partitions(request.topics)
        code = c.check_coordinator(request.group_id)
        g = c.groups.get(request.group_id)
        if code:
            return failed(code)
        if g is None:
            return failed(Errors.GROUP_ID_NOT_FOUND)
        if g.state != EMPTY and g.protocol_type != "consumer":
            return failed(Errors.NON_EMPTY_GROUP)
        subscribed = subscribed_topics(g) if g.state != EMPTY else set()
        deleted = []
        for t in request.topics:
            for p in t.partitions:
                key = (t.name, p.partition_index)
                if key in codes:
                    continue
                if t.name in subscribed:
                    codes[key] = Errors.GROUP_SUBSCRIBED_TO_TOPIC
                elif key in g.offsets:
                    deleted.append(key)
        if deleted:
            code = await c.write(request.group_id, [_offset_tombstone(request.group_id, *key) for key in deleted])
            if code:
                return failed(code)
            for key in deleted:
                g.offsets.pop(key, None)
        return partition_errors(request.topics, codes)

