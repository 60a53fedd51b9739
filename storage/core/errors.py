"""Errors of the storage engine, and Kafka's numeric error codes.

Two vocabularies, never mixed: bad bytes (on disk or from a peer) raise a subclass of
`StorageError` that names the file, the byte position and the offset where it was found;
programmer errors are plain `assert`s or `ValueError`/`TypeError` from argument checks.
Every `StorageError` subclass carries `error_code`, the Kafka error a replica would answer
with, and also inherits the builtin that fits (`ValueError`, `OSError`, ...), so callers may
catch either.
"""
from __future__ import annotations

from enum import IntEnum

from ._native import ffi, lib


class Errors(IntEnum):
    """Kafka's error codes (clients/.../protocol/Errors.java), as used on replication answers."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    INVALID_TIMESTAMP = 32
    INVALID_REPLICA_ASSIGNMENT = 39
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    UNSUPPORTED_COMPRESSION_TYPE = 76
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    UNKNOWN_PRODUCER_ID = 59
    PRODUCER_FENCED = 90
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    INVALID_REPLICATION_FACTOR = 38
    OFFSET_NOT_AVAILABLE = 78
    LISTENER_NOT_FOUND = 72
    # The front end's (storage/wire): topics, configs and consumer groups.
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_CONFIG = 40
    POLICY_VIOLATION = 44
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    INVALID_UPDATE_VERSION = 95
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    TRANSACTIONAL_ID_NOT_FOUND = 105
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    SASL_AUTHENTICATION_FAILED = 58
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93


def location(file, position=None, offset=None) -> str:
    """"file, position P, offset O" -- how every error and report names where a problem is."""
    parts = []
    if file is not None:
        parts.append(str(file))
    if position is not None and position >= 0:
        parts.append(f"position {position}")
    if offset is not None and offset >= 0:
        parts.append(f"offset {offset}")
    return ", ".join(parts)


def _rebuild(cls, args, state):
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class StorageError(Exception):
    """Base of every engine error.  `file`, `position` and `offset` say where, when known."""

    error_code = Errors.UNKNOWN_SERVER_ERROR
    # KIP-467: (index in its batch, message) of each record a check refused, and the message a
    # Produce response carries (Kafka's RecordValidationException); empty / None otherwise.
    record_errors: tuple = ()
    produce_message: str | None = None

    def __init__(self, message: str, *, file=None, position=None, offset=None):
        self.reason = message
        self.file = None if file is None else str(file)
        self.position = position
        self.offset = offset
        where = location(file, position, offset)
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self):
        # Errors cross process boundaries (the simulator's --jobs pool, Spark executors): rebuild
        # them from their attributes, not by calling __init__ again with the formatted message.
        return _rebuild, (type(self), self.args, self.__dict__)


class CorruptRecordError(StorageError, ValueError):
    """A batch fails its size, magic or CRC check, or a record inside it is malformed."""

    error_code = Errors.CORRUPT_MESSAGE


class CorruptSegmentError(CorruptRecordError):
    """A segment the open must trust (below the recovery point, or after a clean shutdown) is
    damaged: the partition does not open, and nothing is cut or deleted (storage/log/loader.py).
    The code is KAFKA_STORAGE_ERROR: the partition is unavailable from this log dir."""

    error_code = Errors.KAFKA_STORAGE_ERROR


class InvalidRecordError(CorruptRecordError):
    """A record inside an otherwise valid batch is malformed (Kafka's InvalidRecordException)."""

    error_code = Errors.INVALID_RECORD


def record_validation(cls, record_errors: list, *, file=None, position=None, offset=None) -> StorageError:
    """Kafka's LogValidator.processRecordErrors: one error for a batch's refused records
    (`cls` InvalidTimestampError when any is a timestamp's, else InvalidRecordError), its
    record_errors and the message a Produce response gives (Kafka's own words)."""
    if cls is InvalidTimestampError:
        message = "One or more records have been rejected due to invalid timestamp"
    else:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
        message = (f"One or more records have been rejected due to {len(record_errors)} record errors in total, "
                   f"and only showing the first three errors at most: [{shown}]")
    error = cls(f"{message} ({record_errors[0][1]})", file=file, position=position, offset=offset)
    error.record_errors = tuple(record_errors)
    error.produce_message = message
    return error


class InvalidTimestampError(StorageError, ValueError):
    """A producer batch carries timestamps the leader does not accept (Kafka's
    InvalidTimestampException): LogAppendTime set by the producer, or a timestamp that
    overflows."""

    error_code = Errors.INVALID_TIMESTAMP


class RecordTooLargeError(StorageError, ValueError):
    """A batch is larger than `max_message_bytes`."""

    error_code = Errors.MESSAGE_TOO_LARGE


class RecordListTooLargeError(StorageError, ValueError):
    """One append is larger than a whole segment (`segment_bytes`)."""

    error_code = Errors.RECORD_LIST_TOO_LARGE


class OffsetsOutOfOrderError(StorageError, ValueError):
    """Batches of a follower append do not have strictly increasing offsets."""

    error_code = Errors.INVALID_RECORD


class UnexpectedAppendOffsetError(StorageError, ValueError):
    """A follower append starts below the log end offset."""

    error_code = Errors.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(StorageError, IndexError):
    """The requested offset is below the log start offset or beyond the log end offset."""

    error_code = Errors.OFFSET_OUT_OF_RANGE


class UnsupportedCodecError(StorageError, RuntimeError):
    """A batch uses a codec that cannot be read here (library missing) or written at all."""

    error_code = Errors.UNSUPPORTED_COMPRESSION_TYPE


class LogClosedError(StorageError, RuntimeError):
    """An operation on a closed log."""

    error_code = Errors.KAFKA_STORAGE_ERROR


class StorageIOError(StorageError, OSError):
    """The operating system (or the simulated file system) failed an I/O operation."""

    error_code = Errors.KAFKA_STORAGE_ERROR

    def __init__(self, message: str, *, errno: int | None = None, file=None, position=None, offset=None):
        StorageError.__init__(self, message, file=file, position=position, offset=offset)
        self.errno = errno


class OutOfDescriptorsError(StorageIOError):
    """An open failed because the process (EMFILE) or the system (ENFILE) has no descriptor
    left: a limit of the moment, not a disk failure.  The call fails, nothing was written, the
    log dir stays online and the same call succeeds once descriptors are free.  KAFKA_STORAGE_ERROR
    is retriable for Kafka's clients (they refresh metadata and retry)."""

    error_code = Errors.KAFKA_STORAGE_ERROR


class LogDirLockedError(StorageError, RuntimeError):
    """The log dir is locked by another process (Kafka's `.lock` file), or this LogDir was
    superseded by a newer open of the same dir in this process."""

    error_code = Errors.KAFKA_STORAGE_ERROR


class LogDirOfflineError(StorageIOError):
    """The log dir went offline after an I/O failure (Kafka's log-dir failure channel).

    Raised by the call that failed and by every later call on the dir's partitions: after a
    failed write or fsync the state of the page cache is unknown, so nothing may be retried into
    success.  `log_dir` names the dir, `first_failure` is the error that took it offline.
    Reopening the dir (a new `LogDir.open`) recovers it as after an unclean shutdown."""

    error_code = Errors.KAFKA_STORAGE_ERROR

    def __init__(self, log_dir: str, first_failure: BaseException, *, operation: str = ""):
        self.log_dir = str(log_dir)
        self.first_failure = first_failure
        self.operation = operation
        errno = getattr(first_failure, "errno", None)
        StorageIOError.__init__(self, f"log dir is offline since {operation or 'an I/O failure'} failed: "
                                      f"{first_failure}", errno=errno, file=log_dir)


# ---- idempotent and transactional producers (storage/log/producer.py) ----

class ProducerStateError(StorageError, ValueError):
    """A producer's batch breaks the rules of its producer state (Kafka's ProducerAppendInfo);
    nothing was written."""


class OutOfOrderSequenceError(ProducerStateError):
    """The batch's first sequence does not follow the producer's last one (or a new producer
    epoch does not start at 0)."""

    error_code = Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(ProducerStateError):
    """The batch's producer epoch is older than the producer's current one (a zombie)."""

    error_code = Errors.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(ProducerStateError):
    """A non-transactional batch from a producer with an open transaction."""

    error_code = Errors.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(ProducerStateError):
    """A transaction marker from a coordinator epoch older than the last one seen."""

    error_code = Errors.TRANSACTION_COORDINATOR_FENCED


class CorruptSnapshotError(CorruptRecordError):
    """A producer-state snapshot fails its version, size or CRC check (it is deleted and the
    state rebuilt from an older snapshot or the log, as Kafka does)."""


# ---- C results (csrc/plog.h) --------------------------------------------------------------
# The one place a C result becomes Python's: its text and the exception it raises.

def error_text(rc: int) -> str:
    """plog_strerror's text for a C result: the errno's for a positive one, the core's for a
    PLOG_E* code."""
    return ffi.string(lib.plog_strerror(rc)).decode()


# The one map from a C error code to the exception it becomes.  Positive codes are errno
# values (StorageIOError); codes not listed are StorageError.
_ERROR_CLASSES = {
    lib.PLOG_ECRC: CorruptRecordError,
    lib.PLOG_ECORRUPT: CorruptRecordError,
    lib.PLOG_EMAGIC: CorruptRecordError,
    lib.PLOG_EPARTIAL: CorruptRecordError,
    lib.PLOG_EEMPTY: CorruptRecordError,
    lib.PLOG_ERECORD: InvalidRecordError,
    lib.PLOG_ETIMESTAMP: InvalidTimestampError,
    lib.PLOG_ETOOLARGE: RecordTooLargeError,
    lib.PLOG_ELISTTOOLARGE: RecordListTooLargeError,
    lib.PLOG_EORDER: OffsetsOutOfOrderError,
    lib.PLOG_EAPPENDOFFSET: UnexpectedAppendOffsetError,
}


def error_class(rc: int) -> type[StorageError]:
    """The exception class for a nonzero C result."""
    if rc > 0:
        return StorageIOError
    return _ERROR_CLASSES.get(rc, StorageError)
