"""What an append returns (`AppendInfo`) and the C state of one kind of append."""
from __future__ import annotations

from typing import NamedTuple

from . import errors, producer_check, validator
from . import producer as _producer
from ._native import ffi, iovec_pieces, lib
from .clock import wall_ms as _now_ms
from .config import LogConfig
from .records import describe_error, error_class, iter_batches


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    batch_count: int
    record_count: int
    size_bytes: int
    duplicate: bool = False     # a retried idempotent batch: its first offsets, nothing written


class _Recheck(Exception):
    """PLOG_ERECHECK: validator.recheck must see the chunk before C can append it."""


class _ProducerCheck(Exception):
    """PLOG_EPRODUCER: the producer state must check the chunk before C can append it."""


_EPOCH_MIXED = lib.PLOG_EPOCH_MIXED
_INT32_MAX = 2**31 - 1

# The chunk refusals that name their failing batch (the classes come from records.error_class).
_REFUSALS = frozenset((lib.PLOG_ECRC, lib.PLOG_ECORRUPT, lib.PLOG_EMAGIC, lib.PLOG_EPARTIAL, lib.PLOG_EEMPTY,
                       lib.PLOG_ETOOLARGE, lib.PLOG_EORDER, lib.PLOG_EAPPENDOFFSET))
# AppendInfo from the seven int64 fields plog_validate leads with (plog.h): what
# NamedTuple._make does, without its length check (the C layout fixes the length).
_new_append_info = tuple.__new__
_C_APPEND_FIELDS = 7


class _AppendState:
    """The plog_validate struct of one kind of append, with its limits set, and an int64 view
    of its leading AppendInfo fields."""

    __slots__ = ("v", "out")

    def __init__(self, config: LogConfig, flags: int, max_batch_bytes: int):
        self.v = ffi.new("plog_validate *")
        self.v.flags = flags
        self.v.max_batch_bytes = max_batch_bytes
        self.v.segment_bytes = config.segment_bytes
        self.v.segment_ms = config.segment_ms
        self.out = memoryview(ffi.buffer(self.v)).cast("B")[:_C_APPEND_FIELDS * 8].cast("q")


# ---- the states of a log, made on its first append of each kind ------------------------------
# ~1.6 KiB of C memory each (plog_validate); most open partitions append in one role only.

_LEADER_FLAGS = lib.PLOG_VALIDATE_ASSIGN_OFFSETS | lib.PLOG_VALIDATE_STAMP_EPOCH


def _client_flags() -> int:
    """A producer's leader appends: Kafka's LogValidator checks, and the producer check in C
    unless the tests turned it off (producer_check.ENABLED; the log reads this at its open)."""
    return _LEADER_FLAGS | lib.PLOG_VALIDATE_CLIENT | (lib.PLOG_VALIDATE_PRODUCERS if producer_check.ENABLED else 0)


def _leader_state(log, origin: str) -> _AppendState:
    """`log`'s state for leader appends from `origin` ("client": with its expected producers)."""
    with log._lock:
        state = log._leader_append.get(origin)
        if state is None:
            flags = log._client_flags if origin == "client" else _LEADER_FLAGS
            state = _AppendState(log.config, flags, log.config.batch_limit_bytes)
            if origin == "client":
                log._expected = producer_check.ExpectedProducers(log.producer_state, state.v)
            log._leader_append[origin] = state
        return state


def _follower_state(log) -> _AppendState:
    log._follower_append = _AppendState(log.config, lib.PLOG_VALIDATE_REQUIRE_FIRST, 0)
    return log._follower_append


def _follower_pieces(log, pieces: tuple) -> "AppendInfo | None":
    """PartitionLog.append_batches as a follower with the caller's `bytes` written as they lie
    (plog_segment_append_pieces: one C call, vectored writes), or None when they are to be
    gathered into one chunk first: fewer than two, not all bytes, an empty log (Kafka's
    restart rule reads its first batch), a roll by age due, or any refusal -- C wrote nothing
    then, and the gathered append rolls, or explains the refusal as it always has."""
    # `pieces` (a tuple: no other thread can take a buffer out of it) holds the buffers while C
    # writes them without the GIL.
    packed = iovec_pieces(pieces) if len(pieces) > 1 else None
    if packed is None:
        return None
    with log._lock:
        log._ensure_open()
        segment = log.segments[-1]
        if log.log_end_offset == log.log_start_offset or segment.rolls_by_age(log.config.segment_ms, _now_ms):
            return None
        state = log._follower_append or _follower_state(log)
        v = state.v
        rc = segment.append_pieces(ffi.from_buffer("plog_iovec[]", packed), len(pieces), log.log_end_offset, v)
        if rc < 0:
            return None
        if rc:
            segment.raise_for(rc, "append", offset=v.first_offset)
        joined = b""                    # what the producer state and an epoch overflow read
        if v.producer_batch_count or v.epoch_count > lib.PLOG_VALIDATE_MAX_EPOCHS:
            joined = b"".join(pieces)
        info = _appended(log, state, ffi.from_buffer(joined), len(joined))
        if v.producer_batch_count:
            log._record_completed(_producer.apply_replicated(log.producer_state, joined))
        return info


def _append(log, state: "_AppendState", pointer, length: int, leader_epoch: int,
            partial_tail: bool = False) -> AppendInfo:
    """Validate, roll if Kafka would, write and index the chunk: one C call in the common
    case (plog_segment_append_chunk, which checks the CRCs as it writes).  partial_tail:
    a chunk ending inside a batch appends the whole batches before it (a follower's fetch
    response: Kafka's FileRecords slices by bytes); AppendInfo.size_bytes says how many
    bytes were taken.  C refuses such a chunk before writing anything, naming where the
    cut batch starts, so the common whole chunk pays no separate walk of its headers."""
    v = state.v
    segment = log.segments[-1]
    if segment.rolls_by_age(log.config.segment_ms, _now_ms):
        segment = log._roll_to(log.log_end_offset)
    rc = segment.append_chunk(pointer, length, log.log_end_offset, leader_epoch, v)
    if rc == lib.PLOG_EPARTIAL and partial_tail and v.error_position > 0:
        length = v.error_position
        rc = segment.append_chunk(pointer, length, log.log_end_offset, leader_epoch, v)
    if rc:
        _append_uncommon(log, rc, v, pointer, length, leader_epoch)
    return _appended(log, state, pointer, length)


def _appended(log, state: "_AppendState", pointer, length: int) -> AppendInfo:
    """After a chunk was written: its AppendInfo, the log end offset, the epochs it starts
    (`pointer` is read only when more epochs changed than plog_validate holds)."""
    v = state.v
    out = state.out.tolist()
    out.append(False)
    info = _new_append_info(AppendInfo, out)
    epoch = v.sole_epoch
    if epoch == _EPOCH_MIXED or (epoch >= 0 and epoch != log.epoch_cache.latest_epoch):
        assign_epochs(log, v, pointer, length)     # before the log end offset moves
    log.log_end_offset = info[1] + 1
    log.producer_state.last_map_offset = log.log_end_offset   # Kafka's updateMapEndOffset
    return info


def _append_uncommon(log, rc: int, v, pointer, length: int, leader_epoch: int) -> None:
    """Roll and append (PLOG_EROLL: the chunk was found valid, nothing written), or raise."""
    if rc == lib.PLOG_EROLL:
        new_base = max(v.first_offset, log.log_end_offset)
        if v.last_offset - new_base > _INT32_MAX:
            # Not even a new segment could hold it: refuse before rolling, so that a refused
            # append leaves no empty segment behind.
            raise errors.RecordListTooLargeError(
                f"offsets {v.first_offset}..{v.last_offset} span more than a segment can hold "
                f"(2^31 - 1 offsets past its base)", file=f"{log.path} (appended data)", offset=v.first_offset)
        segment = log._roll_to(new_base)
        v.flags |= lib.PLOG_APPEND_NO_ROLL
        try:
            rc = segment.append_chunk(pointer, length, log.log_end_offset, leader_epoch, v)
        finally:
            v.flags &= ~lib.PLOG_APPEND_NO_ROLL
        if rc == 0:
            return
    if rc == lib.PLOG_ERECHECK:
        raise _Recheck()
    if rc == lib.PLOG_EPRODUCER:
        raise _ProducerCheck()
    if rc in (lib.PLOG_ERECORD, lib.PLOG_ETIMESTAMP) and v.error_position >= 0:
        raise validator.explain(ffi.buffer(pointer, length), v.error_position, rc,
                                file=f"{log.path} (appended data)")
    if rc == lib.PLOG_ELISTTOOLARGE:
        raise errors.RecordListTooLargeError(
            f"append of {length} bytes exceeds segment_bytes={log.config.segment_bytes}", file=log.path,
            offset=v.first_offset)
    # A refusal of the chunk names its failing batch (an empty chunk has none); the other
    # codes come from the segment or the seam.
    if rc in _REFUSALS and (v.error_position >= 0 or rc == lib.PLOG_EEMPTY):
        cls = error_class(rc)
        reason = describe_error(rc)
        if rc == lib.PLOG_EAPPENDOFFSET:
            reason = f"first offset {v.error_offset} is below the log end offset {log.log_end_offset}"
        elif rc == lib.PLOG_ETOOLARGE:
            reason = f"batch larger than max_message_bytes={log.config.max_message_bytes}"
        raise cls(reason, file=f"{log.path} (appended data)", position=v.error_position,
                  offset=v.error_offset)
    log.segments[-1].raise_for(rc, "append", offset=v.first_offset)
    raise AssertionError(f"unexpected append result {rc}")   # _check raised for every rc != 0


def assign_epochs(log, v, pointer, length: int) -> None:
    """Kafka's append loop: every v2 batch's epoch is assigned at its base offset -- for a chunk
    C just wrote, before the log end offset moves.  When that fails (the leader-epoch-checkpoint
    cannot be written: an I/O error that takes the dir offline) the chunk is taken back."""
    cache = log.epoch_cache
    if v.epoch_count <= lib.PLOG_VALIDATE_MAX_EPOCHS:
        changes = [(v.epochs[i], v.epoch_offsets[i]) for i in range(v.epoch_count)]
    else:
        changes = [(b.partition_leader_epoch, b.base_offset)
                   for b in iter_batches(ffi.buffer(pointer, length), verify=False)]
    entries = cache.entries
    try:
        for epoch, offset in changes:
            if epoch >= 0:
                cache.assign(epoch, offset)
    except BaseException:
        take_back(log, entries)
        raise


def take_back(log, epoch_entries: list) -> None:
    """Undo a chunk C wrote whose epochs could not be recorded (the leader-epoch-checkpoint's
    write failed: an I/O error that takes the dir offline): the active segment is cut back to
    the log end offset (its bytes and index entries go; the log end offset and producer state
    were not moved yet) and the epoch cache holds what it held, so nothing of the chunk is
    visible and a restart finds the files as they were.  Kafka assigns the epoch before it
    appends (UnifiedLog.append); here C learns the epochs of a follower's chunk as it writes
    it, so the write is taken back instead.  A cut that fails too is left to the loader (the
    dir is offline already; its next open recovers the segment)."""
    log.epoch_cache.restore(epoch_entries)
    try:
        log.segments[-1].truncate_to(log.log_end_offset)
    except OSError:
        pass
