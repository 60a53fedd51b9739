"""What a client may not ask of a broker or a controller: the one place each rule lives, called
from every path that applies the request (the broker's APIs for an embedded `Node` and a
`ClusterNode`, and the controller process itself), so no path can skip it.

Internal topics -- Kafka's `Topic.isInternal` (`__consumer_offsets`, `__transaction_state`)
and `__cluster_metadata` -- belong to the broker: the group coordinator's offsets and groups,
the transaction coordinator's state, the controller's metadata log.  A client's request on
one gets:

  Produce       INVALID_TOPIC_EXCEPTION: Kafka's ReplicaManager.appendToLocalLog ("Cannot
                append to internal topic", internalTopicsAllowed false, which KafkaApis sets for
                every client id but its own admin tool's).  The coordinator writes through the
                replica manager directly and is not a client.
  CreateTopics  INVALID_REQUEST: Kafka's answer for `__cluster_metadata` (ControllerApis and
                KafkaApis createTopics, "Creation of internal topic ... is prohibited").  Kafka
                lets a client create `__consumer_offsets` first; here the broker creates it itself
                (50 partitions, compacted), so a client's 1-partition, delete-policy copy cannot
                take its place.  The broker's own creation reaches the controller's port with the
                broker's client id (`client.CLIENT_ID`), as Kafka trusts its admin client id.
  DeleteTopics  INVALID_REQUEST: Kafka's ControllerApis.deleteTopics checks only authorization
                (its tools refuse internal topics on the client side); TOPIC_DELETION_DISABLED
                means delete.topic.enable=false for every topic, which is not the case here.

Batches from a client (Produce):

  transactional INVALID_TXN_STATE when the request names no transactional id (Kafka's answer
                for a transactional write to a partition that is not in a transaction,
                ReplicaManager's "Partition was not added to the transaction"): no coordinator
                could ever end such a transaction, and its open offset would hold the last
                stable offset, read_committed consumers and the cleaner.  With a transactional
                id the batch is appended (txn_coordinator.py ends it), as Kafka without
                transaction.partition.verification.enable.
  control       INVALID_RECORD: Kafka's LogValidator ("Clients are not allowed to write
                control records").  Markers come only from the broker (origin "coordinator").
"""
from __future__ import annotations

import struct

from ..core._native import lib
from ..core.errors import Errors

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
METADATA_TOPIC = "__cluster_metadata"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, METADATA_TOPIC})

# The v2 batch header: base offset (8), length (4), leader epoch (4), magic (1), crc (4),
# attributes (2), whose transactional and control bits are the C core's.
_LENGTH_AT, _MAGIC_AT, _ATTRIBUTES_AT, _HEADER_BYTES = 8, 16, 21, 23
_TRANSACTIONAL, _CONTROL = lib.PLOG_ATTR_TRANSACTIONAL, lib.PLOG_ATTR_CONTROL
assert _TRANSACTIONAL | _CONTROL < 0x100, "produce_problem reads the attributes' low byte"
_I32 = struct.Struct(">i")


def is_internal(topic: str | None) -> bool:
    return topic in INTERNAL_TOPICS


def create_problem(name: str, *, internal_allowed: bool = False) -> tuple[int, str] | None:
    """(error code, message) when `name` may not be created; None otherwise.  internal_allowed:
    the broker's own creation of the coordinators' topics (never of the metadata log's)."""
    if is_internal(name) and (not internal_allowed or name == METADATA_TOPIC):
        return Errors.INVALID_REQUEST, f"topic {name!r} is internal: the broker creates it, a client may not"
    return None


def delete_problem(name: str) -> tuple[int, str] | None:
    """(error code, message) when `name` may not be deleted; None otherwise."""
    if is_internal(name):
        return Errors.INVALID_REQUEST, f"topic {name!r} is internal and cannot be deleted"
    return None


def produce_problem(topic: str, records, transactional_id: str | None = None) -> tuple[int, str] | None:
    """(error code, message) when a client may not write `records` (v2 batches as sent: bytes or
    a view of bytes) to `topic`; None otherwise.  Reads only batch headers: a malformed buffer
    is left to the append, which names what is wrong with it."""
    if topic in INTERNAL_TOPICS:
        return Errors.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {topic!r}"
    position, size = 0, len(records)
    while position + _HEADER_BYTES <= size:
        length = _I32.unpack_from(records, position + _LENGTH_AT)[0]
        if records[position + _MAGIC_AT] != 2 or length <= 0:
            return None
        attributes = records[position + _ATTRIBUTES_AT + 1]     # the low byte holds both bits
        if attributes & _CONTROL:
            return Errors.INVALID_RECORD, f"clients may not write control batches (to {topic!r} at byte {position})"
        if attributes & _TRANSACTIONAL and transactional_id is None:
            return (Errors.INVALID_TXN_STATE,
                    f"transactional batch to {topic!r} refused: the request names no transactional id, "
                    f"so no transaction coordinator could end the transaction")
        position += 12 + length
    return None
