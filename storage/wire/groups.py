"""The classic consumer-group coordinator (Kafka's GroupCoordinator and GroupMetadataManager):
membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), rebalances, and committed offsets
kept in the `__consumer_offsets` log of this engine in Kafka's key/value format
(storage/topics/coordinator_records.py), so they survive restarts and Kafka's tools read them.

States, as Kafka's: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to
PreparingRebalance on any membership change.  A rebalance completes when every member has
rejoined, or at the rebalance timeout (members that did not rejoin are removed); an Empty
group's first rebalance waits group.initial.rebalance.delay.ms for more members, and the delay
again while members keep joining, up to the rebalance timeout (Kafka's InitialDelayedJoin).  The leader's
SyncGroup assignment is written to the log (GroupMetadataValue) before anyone is answered.  A
member whose session expires is removed.

The group's partition of `__consumer_offsets` is abs(java hashCode(group id)) % partitions, as
Kafka's, so a group's records land where Kafka would put them.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import uuid

from ..core.clock import monotonic_ms, wall_ms
from ..core.errors import Errors, StorageError
from ..core.records import build_batch
from ..replication import messages as m
from ..topics import coordinator_records as cr
from .broker import MetadataSource
from .codec import ms
from .group_model import (
    COMPLETING,
    EMPTY,
    INVALID_COMMIT_OFFSET_SIZE,
    MAX_SESSION_TIMEOUT_MS,
    MIN_SESSION_TIMEOUT_MS,
    OFFSET_METADATA_MAX_BYTES,
    PREPARING,
    STABLE,
    Group,
    Member,
    join_failure,
    offset_key,
    offset_value,
    offsets_partition,
    partition_errors,
)
from .group_txn import TxnOffsets
from .rules import OFFSETS_TOPIC

log = logging.getLogger("storage.wire")


class GroupCoordinator(TxnOffsets):
    def __init__(self, node: MetadataSource, *, initial_rebalance_delay_ms: int = 3_000):
        self.node = node
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.groups: dict[str, Group] = {}
        self._loaded: dict[int, int] = {}       # offsets partition -> the leader epoch it was loaded at
        self._offsets_count = (0, 0)            # (topic id, partition count) of __consumer_offsets
        self._load_failed: set[tuple[int, int]] = set()     # (partition, leader epoch) the tick could not load
        # TxnOffsetCommit's offsets until their transaction's marker: producer id ->
        # (group, topic, partition) -> (offset, leader epoch, metadata).
        self.txn_offsets: dict[int, dict[tuple[str, str, int], tuple[int, int, str]]] = {}
        self._writes: set[asyncio.Task] = set()             # group records written in the background

    # ---- the log ----------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        """The group's `__consumer_offsets` partition, hashed over the partitions the topic has
        (Kafka's coordinator reads the count from the metadata), the broker's
        --offsets-partitions only before the topic exists: a topic created with another count
        (an older broker's flag, a client before internal topics were refused) must not send
        groups to partitions that do not exist."""
        return offsets_partition(group_id, self._offsets_partition_count())

    def _offsets_partition_count(self) -> int:
        topic_id = self.node.topic_id(OFFSETS_TOPIC)
        if topic_id == 0:
            return self.node.offsets_partitions
        if self._offsets_count[0] != topic_id:
            self._offsets_count = (topic_id, len(self.node.partitions_of(OFFSETS_TOPIC)) or self.node.offsets_partitions)
        return self._offsets_count[1]

    def _coordinator_error(self, group_id: str) -> int:
        """NOT_COORDINATOR unless this broker leads the group's offsets partition; on the first
        request after it became leader (a new leader epoch) the partition's groups are loaded
        from the log, as Kafka's coordinator loads a partition it takes over."""
        partition = self.partition_for(group_id)
        state = self.node.partition_state(OFFSETS_TOPIC, partition)
        if state is None or state.leader != self.node.node_id:
            return Errors.NOT_COORDINATOR
        self._take_over(partition, state.leader_epoch)
        return Errors.NONE

    def _take_over(self, partition: int, leader_epoch: int) -> None:
        if self._loaded.get(partition) != leader_epoch:
            for gid in [g for g in self.groups if self.partition_for(g) == partition]:
                del self.groups[gid]
            self._load_partition(partition)
            self._loaded[partition] = leader_epoch

    def check_coordinator(self, group_id: str) -> int:
        """NOT_COORDINATOR or NONE (loading the group's partition first, see _coordinator_error)."""
        return self._coordinator_error(group_id)

    async def write(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append records (tombstones: a None value) to the group's partition; Kafka's error."""
        return await self._append(group_id, records)

    def led_partitions(self) -> dict[int, int]:
        return self._led_partitions()

    def _led_partitions(self) -> dict[int, int]:
        """offsets partition -> leader epoch, for every one this broker leads."""
        led = {}
        for partition in range(self._offsets_partition_count()):
            state = self.node.partition_state(OFFSETS_TOPIC, partition)
            if state is not None and state.leader == self.node.node_id:
                led[partition] = state.leader_epoch
        return led

    def load_led_partitions(self) -> None:
        """Load every offsets partition this broker leads and has not loaded at its current
        leader epoch: Kafka's coordinator loads a partition when it takes it over, so that
        ListGroups (and the first request of any group) sees every group after a restart or a
        leader change, not only those something has asked about."""
        for partition, epoch in self._led_partitions().items():
            if self._loaded.get(partition) == epoch or (partition, epoch) in self._load_failed:
                continue
            try:
                self._take_over(partition, epoch)
            except StorageError as exc:
                # Logged once per leader epoch; a request for one of its groups tries again
                # (and answers the error), the periodic work goes on.
                self._load_failed.add((partition, epoch))
                log.error("cannot load %s-%d (leader epoch %d): %s", OFFSETS_TOPIC, partition, epoch, exc)

    def _load_partition(self, partition: int) -> None:
        """Rebuild committed offsets and group generations from a `__consumer_offsets` partition."""
        plog, loaded = self.node.logdir.partition(OFFSETS_TOPIC, partition), 0
        for pending in self.txn_offsets.values():
            for key in [k for k in pending if self.partition_for(k[0]) == partition]:
                del pending[key]
        for batch in plog.batches():
            if batch.is_control:
                for record in batch.records():      # a transaction's end: its offsets apply or go
                    if record.key is not None and len(record.key) >= 4:
                        self._end_txn(batch.producer_id, struct.unpack_from(">h", record.key, 2)[0] == 1, partition)
                continue
            for record in batch.records():
                if record.key is None:
                    continue
                try:
                    if batch.is_transactional:
                        self._stage_txn(batch.producer_id, record.key, record.value)
                    else:
                        self._replay(record.key, record.value)
                    loaded += 1
                except (cr.RecordFormatError, struct.error) as exc:
                    # Kafka's loader stops at such a record; this one names it and goes on.
                    log.error("%s-%d offset %d: unreadable record skipped: %s", OFFSETS_TOPIC, partition,
                              record.offset, exc)
        if loaded:
            log.info("loaded %d records of %s-%d", loaded, OFFSETS_TOPIC, partition)

    def _replay(self, key: bytes, value: bytes | None) -> None:
        kind = struct.unpack_from(">h", key)[0]
        if kind in (0, 1):
            k = cr.decode(cr.OFFSET_COMMIT_KEY, key[2:], kind)
            group = self.groups.setdefault(k["group"], Group(k["group"]))
            if value is None:
                group.offsets.pop((k["topic"], k["partition"]), None)
                return
            version = struct.unpack_from(">h", value)[0]
            v = cr.decode(cr.OFFSET_COMMIT_VALUE, value[2:], version)
            group.offsets[(k["topic"], k["partition"])] = (v["offset"], v.get("leaderEpoch", -1), v["metadata"])
        elif kind == 2:
            k = cr.decode(cr.GROUP_METADATA_KEY, key[2:], kind)
            group = self.groups.setdefault(k["group"], Group(k["group"]))
            if value is None:                   # DeleteGroups' tombstone: its offsets have theirs
                self.groups[k["group"]] = Group(k["group"], offsets=group.offsets)
                if not group.offsets:
                    del self.groups[k["group"]]
                return
            version = struct.unpack_from(">h", value)[0]
            v = cr.decode(cr.GROUP_METADATA_VALUE, value[2:], version)
            group.generation, group.protocol_type = v["generation"], v["protocolType"] or None
            self._load_members(group, v)

    @staticmethod
    def _load_members(g: Group, v: dict) -> None:
        """The members of a loaded group record, as Kafka's loader: a group with members is
        Stable at its generation (their sessions run from now), so a static member that
        restarts with its instance id after a broker restart still finds its place."""
        now = monotonic_ms()
        g.protocol, g.leader = v.get("protocol"), v.get("leader")
        g.members = {mem["memberId"]: Member(
            mem["memberId"], mem.get("groupInstanceId"), mem["clientId"], mem["clientHost"], mem["sessionTimeout"],
            max(mem.get("rebalanceTimeout", -1), 0) or mem["sessionTimeout"],
            [(g.protocol or "", bytes(mem["subscription"]))], bytes(mem["assignment"]), last_heartbeat_ms=now)
            for mem in v["members"]}
        g.state = STABLE if g.members else EMPTY
        if not g.members:
            g.protocol, g.leader = None, None

    async def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]],
                      producer: tuple[int, int] | None = None) -> int:
        """Write records to the group's partition with acks=all; Kafka's coordinator error.
        producer: (id, epoch) of a transaction the records belong to (TxnOffsetCommit)."""
        if producer is None:
            batch, origin = build_batch([(k, v) for k, v in records]), "client"
        else:
            batch, origin = build_batch([(k, v) for k, v in records], producer_id=producer[0],
                                        producer_epoch=producer[1], is_transactional=True), "coordinator"
        done = asyncio.get_running_loop().create_future()
        self.node.manager.handle_produce(m.ProduceRequest(OFFSETS_TOPIC, self.partition_for(group_id), batch, -1,
                                                          origin), callback=lambda r: done.done() or done.set_result(r))
        self.node.pump()
        code = (await done).error_code
        if producer is not None and code in (Errors.INVALID_PRODUCER_EPOCH, Errors.PRODUCER_FENCED):
            return code
        if code in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH):
            return Errors.NOT_COORDINATOR
        if code in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE, Errors.INVALID_RECORD):
            return INVALID_COMMIT_OFFSET_SIZE
        if code != Errors.NONE:
            return Errors.COORDINATOR_NOT_AVAILABLE
        return code

    def _group_record(self, g: Group) -> tuple[bytes, bytes]:
        key = cr.encode(cr.GROUP_METADATA_KEY, {"group": g.group_id}, 2)
        members = [{"memberId": mem.member_id, "groupInstanceId": mem.group_instance_id, "clientId": mem.client_id,
                    "clientHost": mem.client_host, "rebalanceTimeout": mem.rebalance_timeout_ms,
                    "sessionTimeout": mem.session_timeout_ms,
                    "subscription": mem.metadata(g.protocol) if g.protocol else b"", "assignment": mem.assignment}
                   for mem in g.members.values()]
        value = cr.encode(cr.GROUP_METADATA_VALUE, {
            "protocolType": g.protocol_type or "", "generation": g.generation, "protocol": g.protocol,
            "leader": g.leader, "currentStateTimestamp": wall_ms(), "members": members}, 3)
        return key, value

    def _store_in_background(self, g: Group) -> None:
        """Write the group's record now that it is Empty (Kafka appends it when a rebalance ends
        with no members), so a restart does not bring back members that left; nobody waits."""
        task = asyncio.get_running_loop().create_task(self._append(g.group_id, [self._group_record(g)]))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    # ---- rebalancing ------------------------------------------------------------------------
    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        if g.state == COMPLETING:
            for mem in g.members.values():
                self._resolve(mem, "sync", {"error_code": Errors.REBALANCE_IN_PROGRESS, "assignment": b""})
        now = monotonic_ms()
        g.initial_join = g.state == EMPTY
        timeout = max((mem.rebalance_timeout_ms for mem in g.members.values()), default=0)
        delay = min(self.initial_rebalance_delay_ms, timeout or self.initial_rebalance_delay_ms)
        g.join_deadline_ms = now + (delay if g.initial_join else timeout)
        g.initial_remaining_ms, g.new_member_added = max(timeout - delay, 0), False
        g.state = PREPARING
        log.info("group %s rebalancing (generation %d): %s", g.group_id, g.generation, reason)
        self._arm(g)

    def _arm(self, g: Group) -> None:
        if g.timer is not None:
            g.timer.cancel()
        delay = max(g.join_deadline_ms - monotonic_ms(), 0) / 1000
        g.timer = asyncio.get_running_loop().call_later(delay, self._join_deadline, g)

    def _join_deadline(self, g: Group) -> None:
        g.timer = None
        if g.state == PREPARING and g.initial_join and g.new_member_added and g.initial_remaining_ms > 0:
            # Kafka's InitialDelayedJoin: a member joined during the delay, so wait once more
            # (at most the delay again) for others, up to the group's rebalance timeout in all.
            delay = min(self.initial_rebalance_delay_ms, g.initial_remaining_ms)
            g.initial_remaining_ms -= delay
            g.new_member_added = False
            g.join_deadline_ms = monotonic_ms() + delay
            self._arm(g)
            return
        if g.state == PREPARING:
            self._complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != PREPARING or g.initial_join:
            return
        if all(mem.join is not None for mem in g.members.values()) and not g.pending:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.timer is not None:
            g.timer.cancel()
            g.timer = None
        for member_id in [i for i, mem in g.members.items() if mem.join is None]:
            log.info("group %s: member %s did not rejoin in time, removed", g.group_id, member_id)
            del g.members[member_id]
        g.generation += 1
        if not g.members:
            g.state, g.protocol, g.leader = EMPTY, None, None
            self._store_in_background(g)
            return
        g.protocol = self._select_protocol(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = COMPLETING
        now = monotonic_ms()
        everyone = self._everyone(g)
        for mem in g.members.values():
            mem.last_heartbeat_ms = now
            self._resolve(mem, "join", self._join_answer(g, mem, everyone if mem.member_id == g.leader else []))

    @staticmethod
    def _everyone(g: Group) -> list[dict]:
        """The leader's JoinGroup member list."""
        return [{"member_id": mem.member_id, "group_instance_id": mem.group_instance_id,
                 "metadata": mem.metadata(g.protocol)} for mem in g.members.values()]

    @staticmethod
    def _select_protocol(g: Group) -> str:
        """Kafka's selectProtocol: among the protocols every member supports, the one most
        members list first (ties: the first such in the leader-to-be's order)."""
        common = set.intersection(*({name for name, _ in mem.protocols} for mem in g.members.values()))
        votes: dict[str, int] = {}
        for mem in g.members.values():
            choice = next(name for name, _ in mem.protocols if name in common)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    @staticmethod
    def _join_answer(g: Group, mem: Member, members: list) -> dict:
        return {"error_code": Errors.NONE, "generation_id": g.generation, "protocol_type": g.protocol_type,
                "protocol_name": g.protocol, "leader": g.leader or "", "member_id": mem.member_id,
                "members": members, "skip_assignment": False}

    @staticmethod
    def _resolve(mem: Member, which: str, answer: dict) -> None:
        future = getattr(mem, which)
        setattr(mem, which, None)
        if future is not None and not future.done():
            future.set_result(answer)

    def _remove_member(self, g: Group, member_id: str, reason: str) -> None:
        mem = g.members.pop(member_id)
        self._resolve(mem, "join", {"error_code": Errors.UNKNOWN_MEMBER_ID, "member_id": member_id})
        self._resolve(mem, "sync", {"error_code": Errors.UNKNOWN_MEMBER_ID, "assignment": b""})
        if g.state == PREPARING:
            self._maybe_complete_join(g)
            if not g.members and not g.initial_join:
                self._complete_join(g)
        else:
            self._prepare_rebalance(g, f"member {member_id} {reason}")
            if not g.members:
                self._complete_join(g)

    def tick(self) -> None:
        """Load the offsets partitions this broker took over; expire sessions (members that
        stopped heartbeating) and unclaimed member ids."""
        self.load_led_partitions()
        now = monotonic_ms()
        for g in list(self.groups.values()):
            expired = [member_id for member_id, expiry in g.pending.items() if expiry <= now]
            for member_id in expired:
                del g.pending[member_id]
            if expired:
                self._maybe_complete_join(g)
            if g.state in (STABLE, COMPLETING, PREPARING):    # a rebalance too, as Kafka; a member
                for mem in list(g.members.values()):           # waiting in its join is alive
                    if (now - mem.last_heartbeat_ms > mem.session_timeout_ms and mem.member_id in g.members
                            and mem.join is None):
                        self._remove_member(g, mem.member_id, "session expired")

    # ---- the APIs ---------------------------------------------------------------------------
    async def find_coordinator(self, header, request) -> dict:
        node = self.node
        keys = getattr(request, "coordinator_keys", None)
        keys = list(keys) if keys else [request.key]
        out = []
        for key in keys:
            code, node_id = Errors.NONE, node.node_id
            if getattr(request, "key_type", 0) != 0:
                code, node_id = Errors.COORDINATOR_NOT_AVAILABLE, -1     # no transaction coordinator
            else:
                await node.ensure_offsets_topic()
                state = node.partition_state(OFFSETS_TOPIC, self.partition_for(key))
                node_id = state.leader if state is not None else -1
                if node_id < 0:
                    code = Errors.COORDINATOR_NOT_AVAILABLE
            host, port = node.client_address_of(node_id)
            out.append({"key": key, "node_id": node_id, "host": host, "port": port, "error_code": code,
                        "error_message": None})
        if getattr(request, "coordinator_keys", None):
            return {"coordinators": out}
        first = out[0]
        return {k: first[k] for k in ("node_id", "host", "port", "error_code", "error_message")}

    @staticmethod
    def _static_member_id(g: Group, instance: str) -> str | None:
        return next((i for i, mem in g.members.items() if mem.group_instance_id == instance), None)

    def _instance_error(self, g: Group, member_id: str, instance: str | None) -> int:
        """Kafka's ClassicGroup.validateMember for a request naming a group.instance.id: the
        instance must be a member's, and this member id's -- an older incarnation of a
        restarted static member is FENCED_INSTANCE_ID."""
        if instance is None:
            return Errors.NONE
        static = self._static_member_id(g, instance)
        if static is None:
            return Errors.UNKNOWN_MEMBER_ID
        return Errors.FENCED_INSTANCE_ID if static != member_id else Errors.NONE

    def _member_error(self, g: Group | None, member_id: str, generation: int, instance: str | None = None) -> int:
        if g is not None and self._instance_error(g, member_id, instance):
            return self._instance_error(g, member_id, instance)
        if g is None or member_id not in g.members:
            return Errors.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return Errors.ILLEGAL_GENERATION
        return Errors.NONE

    async def join_group(self, header, request) -> dict:
        version = type(request).__version__
        session, rebalance = ms(request.session_timeout), ms(getattr(request, "rebalance_timeout", request.session_timeout))
        member_id = request.member_id

        def fail(code, **kw):
            return {"error_code": code, "generation_id": -1, "protocol_name": None, "leader": "",
                    "member_id": member_id, "members": [], **kw}

        if not request.group_id:
            return fail(Errors.INVALID_GROUP_ID)
        if self._coordinator_error(request.group_id):
            return fail(Errors.NOT_COORDINATOR)
        if not MIN_SESSION_TIMEOUT_MS <= session <= MAX_SESSION_TIMEOUT_MS:
            return fail(Errors.INVALID_SESSION_TIMEOUT)
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        g = self.groups.get(request.group_id)
        if not protocols or not request.protocol_type or (g is not None and g.members and (
                request.protocol_type != g.protocol_type
                or not set.intersection({n for n, _ in protocols},
                                        *({n for n, _ in mem.protocols} for mem in g.members.values())))):
            return fail(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if g is None:
            if member_id:
                return fail(Errors.UNKNOWN_MEMBER_ID)
            g = self.groups[request.group_id] = Group(request.group_id)
        instance = getattr(request, "group_instance_id", None)
        if not member_id:
            member_id = f"{header.client_id or 'consumer'}-{uuid.uuid4()}"
            if instance is not None and self._static_member_id(g, instance) is not None:
                return await self._rejoin_static(g, instance, member_id, protocols, session, rebalance, version)
            if version >= 4 and instance is None:     # a static member needs no round trip (KIP-345)
                g.pending[member_id] = monotonic_ms() + session
                return fail(Errors.MEMBER_ID_REQUIRED)
        elif self._instance_error(g, member_id, instance):        # an old incarnation: fenced, as Kafka's
            return fail(self._instance_error(g, member_id, instance))
        elif member_id not in g.members and member_id not in g.pending:
            return fail(Errors.UNKNOWN_MEMBER_ID)
        mem = g.members.get(member_id)
        if mem is not None and mem.protocols == protocols and g.state in (STABLE, COMPLETING) \
                and member_id != g.leader:
            return self._join_answer(g, mem, [])        # nothing changed: the current generation
        if mem is None:
            g.pending.pop(member_id, None)
            # Kafka extends only a new group's delay (generation 0), not a re-emptied group's.
            g.new_member_added = g.new_member_added or (g.state == PREPARING and g.initial_join and g.generation == 0)
            mem = g.members[member_id] = Member(member_id, getattr(request, "group_instance_id", None),
                                                header.client_id or "", "/127.0.0.1", session, rebalance, protocols)
        mem.protocols, mem.session_timeout_ms, mem.rebalance_timeout_ms = protocols, session, rebalance
        g.protocol_type = request.protocol_type
        mem.join = asyncio.get_running_loop().create_future()
        future = mem.join
        if g.state != PREPARING:
            self._prepare_rebalance(g, f"member {member_id} joined")
        self._maybe_complete_join(g)
        return await future

    async def _rejoin_static(self, g: Group, instance: str, new_id: str, protocols: list, session: int,
                             rebalance: int, version: int) -> dict:
        """KIP-345: a static member that restarted (a JoinGroup with its group.instance.id and no
        member id) takes its old member's place under a new member id; the old id's waiting
        JoinGroup/SyncGroup answers FENCED_INSTANCE_ID.  In a Stable group whose selected
        protocol stays the same nobody rebalances: the group record is written with the new id
        and the member gets the current generation (its SyncGroup then its assignment).
        Otherwise the group rebalances (Kafka's updateStaticMemberThenRebalanceOrCompleteJoin)."""
        old = g.members[self._static_member_id(g, instance)]
        current_leader = g.leader
        del g.members[old.member_id]
        self._resolve(old, "join", join_failure(Errors.FENCED_INSTANCE_ID, old.member_id))
        self._resolve(old, "sync", {"error_code": Errors.FENCED_INSTANCE_ID, "assignment": b""})
        mem = g.members[new_id] = dataclasses.replace(old, member_id=new_id, join=None, sync=None, protocols=protocols,
                                                      session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                                                      last_heartbeat_ms=monotonic_ms())
        if g.leader == old.member_id:
            g.leader = new_id
        log.info("group %s: static member %s rejoined as %s (was %s)", g.group_id, instance, new_id, old.member_id)
        if g.state == STABLE and self._select_protocol(g) == g.protocol:
            stored = await self._append(g.group_id, [self._group_record(g)])
            if stored:
                if g.members.get(new_id) is mem:        # the old id stays the instance's
                    del g.members[new_id]
                    g.members[old.member_id] = old
                    g.leader = current_leader if g.leader == new_id else g.leader
                return join_failure(stored, "")
            if version >= 9:                            # KIP-814: the leader learns the members, skips assigning
                leads = g.leader == new_id
                return {**self._join_answer(g, mem, self._everyone(g) if leads else []), "skip_assignment": leads}
            return {**self._join_answer(g, mem, []), "leader": current_leader}
        mem.join = asyncio.get_running_loop().create_future()
        future = mem.join
        if g.state == PREPARING:
            self._maybe_complete_join(g)
        else:
            self._prepare_rebalance(g, f"static member {instance} rejoined as {new_id}")
        return await future

    async def sync_group(self, header, request) -> dict:
        code = self._coordinator_error(request.group_id)
        g = self.groups.get(request.group_id)
        code = code or self._member_error(g, request.member_id, request.generation_id,
                                          getattr(request, "group_instance_id", None))
        if code == Errors.NONE and getattr(request, "protocol_name", None) not in (None, g.protocol):
            code = Errors.INCONSISTENT_GROUP_PROTOCOL
        if code == Errors.NONE and g.state == PREPARING:
            code = Errors.REBALANCE_IN_PROGRESS
        if code:
            return {"error_code": code, "assignment": b""}
        mem = g.members[request.member_id]
        mem.last_heartbeat_ms = monotonic_ms()
        answer = {"error_code": Errors.NONE, "protocol_type": g.protocol_type, "protocol_name": g.protocol}
        if g.state == STABLE:
            return {**answer, "assignment": mem.assignment}
        mem.sync = asyncio.get_running_loop().create_future()
        future = mem.sync
        if request.member_id == g.leader:
            generation = g.generation
            assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
            for other in g.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            stored = await self._append(g.group_id, [self._group_record(g)])
            if g.state == COMPLETING and g.generation == generation:
                if stored:
                    for other in g.members.values():
                        self._resolve(other, "sync", {"error_code": stored, "assignment": b""})
                    self._prepare_rebalance(g, f"the group's assignment was not stored (error {stored})")
                else:
                    g.state = STABLE
                    for other in g.members.values():
                        self._resolve(other, "sync", {**answer, "assignment": other.assignment})
        return await future

    async def heartbeat(self, header, request) -> dict:
        code = self._coordinator_error(request.group_id)
        g = self.groups.get(request.group_id)
        code = code or self._member_error(g, request.member_id, request.generation_id,
                                          getattr(request, "group_instance_id", None))
        if code == Errors.NONE:
            g.members[request.member_id].last_heartbeat_ms = monotonic_ms()
            if g.state == PREPARING:
                code = Errors.REBALANCE_IN_PROGRESS
        return {"error_code": code}

    async def leave_group(self, header, request) -> dict:
        if self._coordinator_error(request.group_id):
            return {"error_code": Errors.NOT_COORDINATOR, "members": []}
        g = self.groups.get(request.group_id)
        leaving = [(x.member_id, getattr(x, "group_instance_id", None)) for x in request.members] \
            if hasattr(request, "members") else [(request.member_id, None)]
        answers = [{"member_id": member_id, "group_instance_id": instance,
                    "error_code": self._leave(g, member_id, instance)} for member_id, instance in leaving]
        if hasattr(request, "members"):
            return {"error_code": Errors.NONE if g is not None else Errors.UNKNOWN_MEMBER_ID, "members": answers}
        return {"error_code": answers[0]["error_code"], "members": []}

    def _leave(self, g: Group | None, member_id: str, instance: str | None) -> int:
        """One member of a LeaveGroup (Kafka's classicGroupLeaveToClassicGroup): v3+ name
        static members by instance id, an admin's removal with no member id; a member id that
        is not the instance's current one is FENCED_INSTANCE_ID."""
        if g is None:
            return Errors.UNKNOWN_MEMBER_ID
        if not member_id:
            member_id = self._static_member_id(g, instance) if instance is not None else None
            if member_id is None:
                return Errors.UNKNOWN_MEMBER_ID
        elif member_id in g.pending:
            del g.pending[member_id]
            self._maybe_complete_join(g)
            return Errors.NONE
        elif self._member_error(g, member_id, g.generation, instance):
            return self._member_error(g, member_id, g.generation, instance)
        self._remove_member(g, member_id, "left the group")
        return Errors.NONE

    async def offset_commit(self, header, request) -> dict:
        generation = getattr(request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1))
        unknown = self.unknown_partitions(request.topics)
        if unknown and len(unknown) == sum(len(t.partitions) for t in request.topics):
            return partition_errors(request.topics, unknown)       # no partition for the coordinator
        code = self._coordinator_error(request.group_id)
        g = self.groups.get(request.group_id)
        if code:
            pass
        elif g is None:
            if generation >= 0:
                code = Errors.ILLEGAL_GENERATION
            else:
                g = self.groups[request.group_id] = Group(request.group_id)
        elif not (generation < 0 and g.state == EMPTY):      # Kafka's validateOffsetCommit, in its order
            code = self._member_error(g, request.member_id, generation, getattr(request, "group_instance_id", None)) \
                or (Errors.REBALANCE_IN_PROGRESS if g.state == COMPLETING else Errors.NONE)
        records, wanted, now = [], [], wall_ms()
        for t in request.topics:
            for p in t.partitions:
                metadata = p.committed_metadata or ""
                part_code = unknown.get((t.name, p.partition_index), code)
                if not part_code and len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                    part_code = Errors.OFFSET_METADATA_TOO_LARGE
                epoch = getattr(p, "committed_leader_epoch", -1)
                wanted.append((t.name, p.partition_index, part_code, (p.committed_offset, epoch, metadata)))
                if not part_code:
                    records.append((offset_key(g.group_id, t.name, p.partition_index),
                                    offset_value(p.committed_offset, epoch, metadata, now)))
        stored = await self._append(g.group_id, records) if records else Errors.NONE
        if g is not None and request.member_id in g.members:
            g.members[request.member_id].last_heartbeat_ms = monotonic_ms()
        items: dict[str, list] = {}
        for topic, partition, part_code, value in wanted:
            if not part_code and not stored:
                g.offsets[(topic, partition)] = value
            items.setdefault(topic, []).append({"partition_index": partition, "error_code": part_code or stored})
        return {"topics": [{"name": t, "partitions": parts} for t, parts in items.items()]}

    def unknown_partitions(self, topics) -> dict[tuple[str, int], int]:
        """(topic, partition) -> UNKNOWN_TOPIC_OR_PARTITION for each one of a request's topics
        that the metadata does not have: Kafka's KafkaApis answers those itself, before the
        coordinator sees the rest (librdkafka's test 0030 commits to a topic that is gone)."""
        return {(t.name, p.partition_index): Errors.UNKNOWN_TOPIC_OR_PARTITION for t in topics for p in t.partitions
                if self.node.partition_state(t.name, p.partition_index) is None}

    def _fetched(self, group_id: str, topics, require_stable: bool = False) -> list[dict]:
        """require_stable (OffsetFetch v7+, KIP-447): a partition with transactional offsets not
        yet ended answers UNSTABLE_OFFSET_COMMIT (the client asks again)."""
        g = self.groups.get(group_id)
        pending = {key[1:] for p in self.txn_offsets.values() for key in p if key[0] == group_id} \
            if require_stable else set()
        offsets = g.offsets if g is not None else {}
        if topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in topics}
        out = []
        for topic, partitions in wanted.items():
            parts = []
            for partition in partitions:
                offset, epoch, metadata = offsets.get((topic, partition), (-1, -1, ""))
                code = Errors.UNSTABLE_OFFSET_COMMIT if (topic, partition) in pending else Errors.NONE
                if code:
                    offset, epoch, metadata = -1, -1, ""
                parts.append({"partition_index": partition, "committed_offset": offset,
                              "committed_leader_epoch": epoch, "metadata": metadata, "error_code": code})
            out.append({"name": topic, "partitions": parts})
        return out

    async def offset_fetch(self, header, request) -> dict:
        if hasattr(request, "groups"):
            out = []
            for q in request.groups:
                code = self._coordinator_error(q.group_id)
                out.append({"group_id": q.group_id, "error_code": code, "topics": [] if code else
                            self._fetched(q.group_id, q.topics, bool(getattr(request, "require_stable", False)))})
            return {"groups": out}
        code = self._coordinator_error(request.group_id)
        stable = bool(getattr(request, "require_stable", False))
        return {"topics": [] if code else self._fetched(request.group_id, request.topics, stable), "error_code": code}
