"""The classic group coordinator's model (storage/wire/groups.py): a group and its members,
the states, the limits, and the `__consumer_offsets` partition and record of a group's offset
(Kafka's GroupMetadataManager key and value formats, storage/topics/coordinator_records.py)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..core.errors import Errors
from ..topics import coordinator_records as cr

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
MIN_SESSION_TIMEOUT_MS, MAX_SESSION_TIMEOUT_MS = 6_000, 1_800_000   # group.{min,max}.session.timeout.ms
OFFSET_METADATA_MAX_BYTES = 4096                                     # offset.metadata.max.bytes
INVALID_COMMIT_OFFSET_SIZE = 28


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group_id: str, partitions: int) -> int:
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions        # Kafka's Utils.abs


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join: asyncio.Future | None = None
    sync: asyncio.Future | None = None
    last_heartbeat_ms: int = 0

    def metadata(self, protocol: str) -> bytes:
        return next(meta for name, meta in self.protocols if name == protocol)


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)       # member id -> expiry (MEMBER_ID_REQUIRED)
    offsets: dict[tuple[str, int], tuple[int, int, str]] = field(default_factory=dict)
    join_deadline_ms: int = 0
    initial_join: bool = False
    initial_remaining_ms: int = 0          # how far the first rebalance may still be extended
    new_member_added: bool = False         # a member joined during the current initial delay
    timer: asyncio.TimerHandle | None = None


def join_failure(code: int, member_id: str) -> dict:
    return {"error_code": code, "generation_id": -1, "protocol_name": None, "leader": "", "member_id": member_id,
            "members": []}


def partition_errors(topics, codes: dict[tuple[str, int], int]) -> dict:
    """An answer of topics and partitions (OffsetCommit's, OffsetDelete's) with their codes."""
    return {"error_code": Errors.NONE, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": codes.get((t.name, p.partition_index), Errors.NONE)}
                                        for p in t.partitions]} for t in topics]}


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return cr.encode(cr.OFFSET_COMMIT_KEY, {"group": group, "topic": topic,
                                                                   "partition": partition}, 1)


def offset_value(offset: int, epoch: int, metadata: str, timestamp: int) -> bytes:
    return cr.encode(cr.OFFSET_COMMIT_VALUE, {
        "offset": offset, "leaderEpoch": epoch, "metadata": metadata, "commitTimestamp": timestamp}, 3)
