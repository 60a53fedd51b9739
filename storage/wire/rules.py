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

Batches from a client (Produce), checked in this order (Kafka's: the records in KafkaApis, the
internal topic in ReplicaManager, the control bit in LogValidator):

  records       Kafka's ProduceRequest.validateRecords (KafkaApis.handleProduceRequest, per
                partition, after the ACL and a partition the cluster has; every version served
                here is v3+), over the batches as Kafka's ByteBufferLogInputStream reads them:
                  no whole batch (empty, or less than one)   INVALID_RECORD
                  a first batch of magic 0 or 1              INVALID_RECORD
                  zstd (codec 4) below Produce v7            UNSUPPORTED_COMPRESSION_TYPE
                  a second whole batch                       INVALID_RECORD
                  a Length under 14, a magic outside 0..2    CORRUPT_MESSAGE
                with the text of Kafka's exception as the error message (Kafka sends none).
                Bytes after the one batch that are not a whole batch pass here, as in Kafka.
  internal      the topic rule above.
  control       INVALID_RECORD: Kafka's LogValidator ("Clients are not allowed to write
                control records").  Markers come only from the broker (origin "coordinator").
  transactional INVALID_TXN_STATE when the request names no transactional id (Kafka's answer
                for a transactional write to a partition that is not in a transaction,
                ReplicaManager's "Partition was not added to the transaction"): no coordinator
                could ever end such a transaction, and its open offset would hold the last
                stable offset, read_committed consumers and the cleaner.  With a transactional
                id the batch is appended (txn_coordinator.py ends it), as Kafka without
                transaction.partition.verification.enable.
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
# attributes (2), whose transactional and control bits are the C core's and whose low 3 bits
# are the codec.  Kafka's in-memory batch reader (ByteBufferLogInputStream.nextBatchSize) needs
# 12 bytes for the length and 17 for the magic, and calls a length under 14 corrupt.
_LENGTH_AT, _MAGIC_AT, _ATTRIBUTES_AT = 8, 16, 21
_LOG_OVERHEAD, _UP_TO_MAGIC, _LENGTH_MIN = 12, 17, 14
_SMALLEST_WHOLE = _LOG_OVERHEAD + _LENGTH_MIN     # the common case's test needs no other bound
_TRANSACTIONAL, _CONTROL = lib.PLOG_ATTR_TRANSACTIONAL, lib.PLOG_ATTR_CONTROL
assert _TRANSACTIONAL | _CONTROL < 0x100, "produce_problem reads the attributes' low byte"
_CODEC_BITS, _ZSTD, ZSTD_FIRST_VERSION = 0x07, 4, 7     # Produce v7 brought zstd (KIP-110)
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


def produce_problem(topic: str, records, version: int, transactional_id: str | None = None) -> tuple[int, str] | None:
    """(error code, message) when a client's Produce of `version` may not write `records` (as
    sent: bytes or a view of bytes) to `topic`; None otherwise.  Reads only the first batch's
    header, and a second one's when the first does not fill `records`: the common case (one v2
    batch whose length fills the records) is a few integer reads.  A malformed batch that
    passes is left to the append, which names what is wrong with it."""
    size = len(records)
    if (size < _SMALLEST_WHOLE or _I32.unpack_from(records, _LENGTH_AT)[0] + _LOG_OVERHEAD != size
            or records[_MAGIC_AT] != 2):
        problem = records_problem(records, version)
        if problem is not None:
            return problem
    attributes = records[_ATTRIBUTES_AT + 1]        # the low byte: codec, transactional, control
    if version < ZSTD_FIRST_VERSION and attributes & _CODEC_BITS == _ZSTD:
        return _zstd_refused(version)
    if topic in INTERNAL_TOPICS:
        return Errors.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {topic!r}"
    if attributes & _CONTROL:
        return Errors.INVALID_RECORD, f"clients may not write control batches (to {topic!r})"
    if attributes & _TRANSACTIONAL and transactional_id is None:
        return (Errors.INVALID_TXN_STATE,
                f"transactional batch to {topic!r} refused: the request names no transactional id, "
                f"so no transaction coordinator could end the transaction")
    return None


def records_problem(records, version: int) -> tuple[int, str] | None:
    """Kafka's ProduceRequest.validateRecords (v3+) of one partition's records, its rules in its
    order: (error code, Kafka's text) or None.  When it passes, the first batch is whole and of
    magic 2."""
    first = _whole_batch(records, 0)
    if type(first) is tuple:
        return first
    if not first:
        return (Errors.INVALID_RECORD,
                f"Produce requests with version {version} must have at least one record batch per partition")
    if records[_MAGIC_AT] != 2:
        return (Errors.INVALID_RECORD, f"Produce requests with version {version} are only allowed to contain "
                                       f"record batches with magic version 2")
    if version < ZSTD_FIRST_VERSION and records[_ATTRIBUTES_AT + 1] & _CODEC_BITS == _ZSTD:
        return _zstd_refused(version)
    second = _whole_batch(records, first)
    if type(second) is tuple:
        return second
    if second:
        return (Errors.INVALID_RECORD, f"Produce requests with version {version} are only allowed to contain "
                                       f"exactly one record batch per partition")
    return None


def _zstd_refused(version: int) -> tuple[int, str]:
    return (Errors.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression")


def _whole_batch(records, position: int) -> int | tuple[int, str]:
    """Kafka's ByteBufferLogInputStream.nextBatch at `position`: the bytes of the whole batch
    there (12 + its length); 0 when there is none (fewer than 12 bytes left, fewer than 17, or a
    batch longer than what is left: the end of the records); (CORRUPT_MESSAGE, Kafka's text) for
    a length under 14 or a magic outside 0..2."""
    left = len(records) - position
    if left < _LOG_OVERHEAD:
        return 0
    length = _I32.unpack_from(records, position + _LENGTH_AT)[0]
    if length < _LENGTH_MIN:
        return (Errors.CORRUPT_MESSAGE,
                f"Record size {length} is less than the minimum record overhead ({_LENGTH_MIN})")
    if left < _UP_TO_MAGIC:
        return 0
    magic = records[position + _MAGIC_AT]
    if magic > 2:
        return Errors.CORRUPT_MESSAGE, f"Invalid magic found in record: {magic - 256 if magic > 127 else magic}"
    return length + _LOG_OVERHEAD if left >= length + _LOG_OVERHEAD else 0
