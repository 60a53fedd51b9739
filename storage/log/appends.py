"""What an append returns (`AppendInfo`) and the C state of one kind of append."""
from __future__ import annotations

from typing import NamedTuple

from ..core._native import ffi, iovec_pieces, lib
from ..core.clock import wall_ms as _now_ms
from ..core.config import LogConfig
from ..core.records import iter_batches
from . import producer as _producer
from . import producer_check


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
        info = log._appended(state, ffi.from_buffer(joined), len(joined))
        if v.producer_batch_count:
            log._record_completed(_producer.apply_replicated(log.producer_state, joined))
        return info


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
