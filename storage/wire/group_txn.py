"""Transactional offsets of the group coordinator (storage/wire/groups.py): TxnOffsetCommit
writes a transaction's offsets to the group's `__consumer_offsets` partition as a batch of the
producer, and they become the group's committed offsets only when the transaction's commit
marker lands there (Kafka's GroupCoordinator.handleTxnCommitOffsets and the marker's completion
in GroupMetadataManager); an abort drops them."""
from __future__ import annotations

import struct

from ..core.clock import wall_ms
from ..core.errors import Errors
from ..topics import coordinator_records as cr
from .group_model import EMPTY, OFFSET_METADATA_MAX_BYTES, Group, offset_key, offset_value
from .rules import OFFSETS_TOPIC


class TxnOffsets:
    """Mixed into GroupCoordinator: its groups, partitions and appends are the coordinator's."""

    def _stage_txn(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        kind = struct.unpack_from(">h", key)[0]
        if kind not in (0, 1) or value is None:
            return
        k = cr.decode(cr.OFFSET_COMMIT_KEY, key[2:], kind)
        v = cr.decode(cr.OFFSET_COMMIT_VALUE, value[2:], struct.unpack_from(">h", value)[0])
        self.txn_offsets.setdefault(producer_id, {})[(k["group"], k["topic"], k["partition"])] = (
            v["offset"], v.get("leaderEpoch", -1), v["metadata"])

    def _end_txn(self, producer_id: int, commit: bool, partition: int) -> None:
        pending = self.txn_offsets.get(producer_id, {})
        for key in [k for k in pending if self.partition_for(k[0]) == partition]:
            value = pending.pop(key)
            if commit:
                self.groups.setdefault(key[0], Group(key[0])).offsets[key[1:]] = value
        if not pending:
            self.txn_offsets.pop(producer_id, None)

    def complete_txn(self, producer_id: int, commit: bool, partitions) -> None:
        """A transaction's marker was written on `partitions`: its offsets on those of
        `__consumer_offsets` become the groups' committed offsets (commit) or are dropped."""
        for topic, partition in partitions:
            if topic == OFFSETS_TOPIC:
                self._end_txn(producer_id, commit, partition)

    async def txn_offset_commit(self, header, request) -> dict:
        """Offsets written to the group's partition in the producer's transaction, visible to
        OffsetFetch once the commit marker lands (Kafka's GroupCoordinator.handleTxnCommitOffsets)."""
        code = self._coordinator_error(request.group_id)
        g = self.groups.get(request.group_id)
        member_id, generation = getattr(request, "member_id", ""), getattr(request, "generation_id", -1)
        if code:
            pass
        elif g is None or (generation < 0 and g.state == EMPTY):
            g = g or self.groups.setdefault(request.group_id, Group(request.group_id))
        elif member_id and member_id not in g.members:
            code = Errors.UNKNOWN_MEMBER_ID
        elif generation >= 0 and generation != g.generation:
            code = Errors.ILLEGAL_GENERATION
        records, wanted, now = [], [], wall_ms()
        for t in request.topics:
            for p in t.partitions:
                metadata = p.committed_metadata or ""
                part_code = code or (Errors.OFFSET_METADATA_TOO_LARGE
                                     if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES else Errors.NONE)
                epoch = getattr(p, "committed_leader_epoch", -1)
                wanted.append((t.name, p.partition_index, part_code, (p.committed_offset, epoch, metadata)))
                if not part_code:
                    records.append((offset_key(g.group_id, t.name, p.partition_index),
                                    offset_value(p.committed_offset, epoch, metadata, now)))
        producer = (request.producer_id, request.producer_epoch)
        stored = await self._append(g.group_id, records, producer) if records else Errors.NONE
        items: dict[str, list] = {}
        for topic, partition, part_code, value in wanted:
            if not part_code and not stored:
                self.txn_offsets.setdefault(producer[0], {})[(g.group_id, topic, partition)] = value
            items.setdefault(topic, []).append({"partition_index": partition, "error_code": part_code or stored})
        return {"topics": [{"name": t, "partitions": parts} for t, parts in items.items()]}
