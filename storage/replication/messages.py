"""Requests and responses of the replication layer: plain dataclasses with Kafka's field names
(snake case of the message schemas' names) and Kafka's numeric error codes, so a caller can
put them on any wire.  Nothing here does I/O.

Sentinels, as in Kafka: -1 means "absent / undefined" for epochs and offsets
(CurrentLeaderEpoch -1 = "do not check"; ReplicaEpoch -1 = unknown); StopReplica's leader epoch
-2 (EPOCH_DURING_DELETE) overrides any epoch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import Errors

NO_EPOCH = -1
EPOCH_DURING_DELETE = -2
NO_LEADER = -1
CONSUMER_REPLICA_ID = -1

RECOVERED = 0
RECOVERING = 1
UNDEFINED_EPOCH_OFFSET = -1


def epoch_end_on_the_wire(log, leader_epoch: int) -> tuple[int, int]:
    """The log's OffsetForLeaderEpoch answer (PartitionLog.end_offset_for_epoch, None where the
    cache has none) as the protocol carries it: (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) = (-1, -1)."""
    found = log.end_offset_for_epoch(leader_epoch)
    return (NO_EPOCH, UNDEFINED_EPOCH_OFFSET) if found is None else found


# ---- controller -> broker -------------------------------------------------------------------

@dataclass
class PartitionState:
    """A partition's leadership record (Kafka's PartitionRecord / LeaderAndIsr)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]
    replicas: list[int]
    leader_recovery_state: int = RECOVERED
    elr: list[int] = field(default_factory=list)    # KIP-966 eligible leader replicas
    # KIP-966 LastKnownElr: ISR/ELR members taken out after an unclean restart while the
    # partition had nobody else; unclean recovery prefers them (they held the committed data).
    last_known_elr: list[int] = field(default_factory=list)

    def copy(self) -> "PartitionState":
        return PartitionState(self.topic, self.partition, self.leader, self.leader_epoch, self.partition_epoch,
                              list(self.isr), list(self.replicas), self.leader_recovery_state, list(self.elr),
                              list(self.last_known_elr))


@dataclass
class BrokerInfo:
    """What the metadata says of a broker (registration epoch, fencing, controlled shutdown)."""

    broker_id: int
    broker_epoch: int
    fenced: bool = False
    in_controlled_shutdown: bool = False


@dataclass
class MetadataUpdate:
    """The controller's view of the brokers, pushed to every broker."""

    controller_epoch: int
    brokers: dict[int, BrokerInfo]


@dataclass
class LeaderAndIsrRequest:
    controller_id: int
    controller_epoch: int
    partition_states: list[PartitionState]
    broker_epoch: int = -1          # the addressee's broker epoch (KIP-380); -1: not checked


@dataclass
class LeaderAndIsrResponse:
    error_code: int
    partition_errors: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class StopReplicaPartition:
    topic: str
    partition: int
    leader_epoch: int = NO_EPOCH
    delete_partition: bool = False


@dataclass
class StopReplicaRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: list[StopReplicaPartition]


@dataclass
class StopReplicaResponse:
    error_code: int
    partition_errors: dict[tuple[str, int], int] = field(default_factory=dict)


# ---- broker -> controller -------------------------------------------------------------------

@dataclass
class BrokerRegistrationRequest:
    broker_id: int
    incarnation_id: str
    previous_broker_epoch: int = -1     # KIP-966: from the clean-shutdown marker, -1 after a crash


@dataclass
class BrokerRegistrationResponse:
    error_code: int
    broker_epoch: int = -1


@dataclass
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    want_fence: bool = False
    want_shut_down: bool = False


@dataclass
class BrokerHeartbeatResponse:
    error_code: int
    is_fenced: bool = True
    should_shut_down: bool = False


@dataclass
class BrokerEpoch:
    broker_id: int
    broker_epoch: int = -1


@dataclass
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    topic: str
    partition: int
    leader_epoch: int
    new_isr_with_epochs: list[BrokerEpoch]
    leader_recovery_state: int
    partition_epoch: int

    @property
    def new_isr(self) -> list[int]:
        return [m.broker_id for m in self.new_isr_with_epochs]


@dataclass
class AlterPartitionResponse:
    error_code: int
    topic: str
    partition: int
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_EPOCH
    isr: list[int] = field(default_factory=list)
    leader_recovery_state: int = RECOVERED
    partition_epoch: int = -1


# ---- broker <-> broker / clients --------------------------------------------------------------

@dataclass
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    current_leader_epoch: int = NO_EPOCH
    last_fetched_epoch: int = NO_EPOCH
    log_start_offset: int = -1
    partition_max_bytes: int = 1 << 20


READ_UNCOMMITTED, READ_COMMITTED = 0, 1       # Kafka's IsolationLevel ids (FetchRequest v4+)


# A Fetch answer is one frame, whose size is an int32: no response may be larger, whatever a
# request's max_bytes says (a broker caps it further with fetch.max.bytes).
FETCH_RESPONSE_MAX_BYTES = (1 << 31) - 1 - (1 << 20)


@dataclass
class FetchRequest:
    replica_id: int                 # -1 for a consumer
    replica_epoch: int              # KIP-903: the follower's broker epoch, -1 unknown
    partitions: list[FetchPartition]
    isolation_level: int = READ_UNCOMMITTED   # a consumer's; followers always read to the log end
    max_bytes: int = FETCH_RESPONSE_MAX_BYTES  # the response's total (KIP-74); at least one batch
    # False: a read again of a fetch already applied (a long poll woken; Kafka's read from the
    # purgatory): the follower's state is not updated a second time.
    update_fetch_state: bool = True


@dataclass
class EpochEndOffset:
    epoch: int = NO_EPOCH
    end_offset: int = -1


@dataclass
class FetchResponsePartition:
    topic: str
    partition: int
    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    # The batches as the leader's files hold them: a read-only view of its segment (Kafka's
    # FileRecords slice), not a copy.  A transport takes the bytes when it sends (`sent`).
    records: bytes | memoryview = b""
    last_stable_offset: int = -1
    # read_committed only (None otherwise, as Kafka's null): the aborted transactions that
    # overlap the records, for the consumer to skip their batches.
    aborted_transactions: list[AbortedTransaction] | None = None


@dataclass
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass
class FetchResponse:
    partitions: list[FetchResponsePartition]


def sent(message):
    """`message` as a transport delivers it: the records of a fetch response read out of the
    leader's files now, as Kafka's network layer reads a FileRecords slice when it sends.  An
    answer that travels later (the simulator's channel, a socket) must not see what the files
    hold by then; a caller that uses the answer at once (an in-process follower) need not copy."""
    if isinstance(message, FetchResponse):
        for part in message.partitions:
            if not isinstance(part.records, bytes):
                part.records = bytes(part.records)
    return message


@dataclass
class OffsetForLeaderEpochPartition:
    topic: str
    partition: int
    leader_epoch: int
    current_leader_epoch: int = NO_EPOCH


@dataclass
class OffsetForLeaderEpochRequest:
    replica_id: int
    partitions: list[OffsetForLeaderEpochPartition]


@dataclass
class OffsetForLeaderEpochResult:
    topic: str
    partition: int
    error_code: int
    leader_epoch: int = NO_EPOCH
    end_offset: int = -1


@dataclass
class OffsetForLeaderEpochResponse:
    partitions: list[OffsetForLeaderEpochResult]


@dataclass
class ProduceRequest:
    topic: str
    partition: int
    records: bytes
    acks: int = -1                  # 0, 1 or -1 (all)
    origin: str = "client"          # "coordinator": a group coordinator's transactional offsets


@dataclass
class ProduceResponse:
    topic: str
    partition: int
    error_code: int
    base_offset: int = -1
    log_start_offset: int = -1
    record_errors: tuple = ()           # KIP-467: (batch index, message) of each refused record
    error_message: str | None = None
    # Kafka's LogAppendInfo.logAppendTime: the append's clock on a LogAppendTime topic, a retried
    # batch's max timestamp (UnifiedLog.append: duplicate.timestamp), else -1.  Set after the
    # answer is made, on the answers that carry one (a keyword argument costs every answer).
    log_append_time: int = -1


def produce_response(topic: str, partition: int, code: int, base_offset: int = -1, failure=None,
                     append_time: int = -1) -> ProduceResponse:
    """A Produce's answer of one partition; `failure` (a StorageError) gives its record errors
    and message, `append_time` its log append time."""
    response = ProduceResponse(topic, partition, code, base_offset)
    if append_time != -1:
        response.log_append_time = append_time
    if failure is not None:
        response.record_errors, response.error_message = failure.record_errors, failure.produce_message
    return response


@dataclass
class TxnMarker:
    """One transaction's end, for the partitions it wrote to (Kafka's WritableTxnMarker)."""
    producer_id: int
    producer_epoch: int
    commit: bool                    # Kafka's TransactionResult: True = COMMIT, False = ABORT
    partitions: list[tuple[str, int]]
    coordinator_epoch: int


@dataclass
class WriteTxnMarkersRequest:
    markers: list[TxnMarker]


@dataclass
class WriteTxnMarkersResponse:
    # producer id -> (topic, partition) -> error code
    errors: dict[int, dict[tuple[str, int], int]] = field(default_factory=dict)


@dataclass
class ListOffsetsRequest:
    replica_id: int
    topic: str
    partition: int
    timestamp: int                  # -2 earliest, -1 latest, -3 max timestamp, else a time
    current_leader_epoch: int = NO_EPOCH


@dataclass
class ListOffsetsResponse:
    topic: str
    partition: int
    error_code: int
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = NO_EPOCH


@dataclass
class DeleteRecordsRequest:
    topic: str
    partition: int
    offset: int                     # -1: the high watermark


@dataclass
class DeleteRecordsResponse:
    topic: str
    partition: int
    error_code: int
    low_watermark: int = -1


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return str(code)
