"""The append path of a partition log: one loop (`append_chunk`) that hands a chunk to C and
does what C's verdict asks, what an append returns (`AppendInfo`), and the C state of one kind
of append.

One C call (plog_segment_append_chunk, csrc/plog.h) validates a chunk, decides by Kafka's roll
rule (the only one: plog_segment_should_roll) and writes it.  When it cannot write the chunk
yet it says why, having written nothing, and the loop fixes that and calls again, with the
flags of that call as arguments:

  PLOG_ERECHECK   a compressed batch, or a max timestamp to set from the records: the
                  validator checks (and may rewrite) the chunk (storage/log/validator.py), then
                  the call is made with PLOG_VALIDATE_RECHECKED;
  PLOG_EPRODUCER  a batch with a producer id that is not an expected producer's next one
                  (storage/log/producer_check.py): the producer state checks it (a retried batch
                  is answered with its first offsets, nothing written), then the call is made
                  without PLOG_VALIDATE_PRODUCERS;
  PLOG_ECLOCK     the roll rule needs the time (a segment whose first batch carries no
                  timestamp: its age is counted from its creation): the call is made again
                  with the clock's reading (only then: the common append reads no clock);
  PLOG_EROLL      the active segment rolls, then the call is made with PLOG_APPEND_NO_ROLL;
  PLOG_EPARTIAL   (a follower's fetched chunk ending inside a batch) the whole batches
                  before the cut are appended.

Each verdict is acted on at most once (its flag is then set or cleared); any other answer is
an error, raised as Kafka names it.
"""
from __future__ import annotations

from typing import NamedTuple

from ..core import errors
from ..core._native import appender, ffi, iovec_pieces, lib
from ..core.clock import wall_ms as _now_ms
from ..core.config import LogConfig
from ..core.files import INT32_MAX
from ..core.records import iter_batches
from . import producer as _producer
from . import producer_check, validator


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    batch_count: int
    record_count: int
    size_bytes: int
    duplicate: bool = False     # a retried idempotent batch: its first offsets, nothing written



# Kafka's UnifiedLog.append returns early for an empty record set: nothing changes.
# first_offset and last_offset are -1 (Kafka's unknown offsets), every count 0.
NOTHING_APPENDED = AppendInfo(-1, -1, -1, -1, 0, 0, 0)

_ORIGINS = ("client", "coordinator")      # where a leader append comes from


def _check_leader_append(leader_epoch: int, origin: str) -> None:
    if leader_epoch < 0:
        raise ValueError("leader_epoch must be >= 0")
    if origin not in _ORIGINS:
        raise ValueError(f"origin must be one of {_ORIGINS}")


_EPOCH_MIXED = lib.PLOG_EPOCH_MIXED
# AppendInfo from the seven int64 fields plog_validate leads with (plog.h): what
# NamedTuple._make does, without its length check (the C layout fixes the length).
_new_append_info = tuple.__new__
# The int64 fields plog_validate leads with: AppendInfo's seven, then sole_epoch and
# producer_batch_count (at SOLE_EPOCH, PRODUCER_BATCHES of `_AppendState.out.tolist()`); one
# read of them is all C's answer to a common append costs.  out[7:] = NOT_DUPLICATE turns the
# list into AppendInfo's fields.
_C_APPEND_FIELDS = 9
SOLE_EPOCH, PRODUCER_BATCHES = 7, 8
NOT_DUPLICATE = (False,)

_ROLL, _RECHECK, _PRODUCER, _PARTIAL = lib.PLOG_EROLL, lib.PLOG_ERECHECK, lib.PLOG_EPRODUCER, lib.PLOG_EPARTIAL
_CLOCK = lib.PLOG_ECLOCK
_NO_ROLL, _RECHECKED, _PRODUCERS = lib.PLOG_APPEND_NO_ROLL, lib.PLOG_VALIDATE_RECHECKED, lib.PLOG_VALIDATE_PRODUCERS
_READONLY = lib.PLOG_APPEND_READONLY
# C's verdicts: nothing written, the loop below acts and calls again (PartitionLog's one-frame
# appends hand these to it).
CALL_AGAIN = frozenset((_ROLL, _RECHECK, _PRODUCER, _PARTIAL, _CLOCK))

# The chunk refusals that name their failing batch (the classes come from errors.error_class).
_REFUSALS = frozenset((lib.PLOG_ECRC, lib.PLOG_ECORRUPT, lib.PLOG_EMAGIC, lib.PLOG_EPARTIAL, lib.PLOG_EEMPTY,
                       lib.PLOG_ETOOLARGE, lib.PLOG_EORDER, lib.PLOG_EAPPENDOFFSET))


class _AppendState:
    """The plog_validate struct of one kind of append, with its limits set, an int64 view of
    its leading int64 fields (AppendInfo's, sole_epoch, producer_batch_count), the flags of its C calls, and (a client's leader appends)
    the producers C may check on its own."""

    __slots__ = ("v", "out", "flags", "origin", "expected", "metrics", "call")

    def __init__(self, config: LogConfig, flags: int, max_batch_bytes: int, origin: str | None = None):
        self.v = ffi.new("plog_validate *")
        self.v.max_batch_bytes = max_batch_bytes
        self.v.segment_bytes = config.segment_bytes
        self.v.segment_ms = config.segment_ms
        self.out = memoryview(ffi.buffer(self.v)).cast("B")[:_C_APPEND_FIELDS * 8].cast("q")
        self.flags = flags
        self.origin = origin                # None: a follower's appends
        self.expected: producer_check.ExpectedProducers | None = None
        self.metrics = None                 # the log's LogMetrics (set by the log that made it: count_into)
        # PartitionLog's one-call append (csrc/pyrecords.c's Appender.append, bound by count_into):
        # call(segment.address, data, log end offset, leader epoch, the cache's latest epoch) is
        # plog_segment_append_chunk with flags | READONLY into v, and, when C wrote the chunk and
        # it asks nothing more of the log (no new epoch; a follower's: no producer batch), the
        # four counters added and the AppendInfo made; else C's answer (an int), v filled as the
        # general path reads it.  The counters are the metrics' C block (LogMetrics.counts).
        self.call = None

    def count_into(self, metrics) -> None:
        """Count this state's appends into `metrics` (the log's LogMetrics)."""
        self.metrics = metrics
        self.call = appender(self.v, int(ffi.cast("uintptr_t", self.v)), self.flags | _READONLY, self.origin is None,
                             metrics.counts, AppendInfo).append


# ---- the states of a log, made on its first append of each kind ------------------------------
# ~1.6 KiB of C memory each (plog_validate); most open partitions append in one role only.

_LEADER_FLAGS = lib.PLOG_VALIDATE_ASSIGN_OFFSETS | lib.PLOG_VALIDATE_STAMP_EPOCH


def _client_flags() -> int:
    """A producer's leader appends: Kafka's LogValidator checks; C learns the producers it may
    check on its own unless the tests turned that off (producer_check.ENABLED, read at the
    open: without it every producer batch takes the Python check)."""
    return _LEADER_FLAGS | lib.PLOG_VALIDATE_CLIENT | (lib.PLOG_VALIDATE_PRODUCERS if producer_check.ENABLED else 0)


def new_leader_state(config: LogConfig, producer_state, origin: str, client_flags: int) -> _AppendState:
    """A new state for leader appends from `origin` ("client": with its expected producers, when
    `client_flags` let C check producers)."""
    flags = client_flags if origin == "client" else _LEADER_FLAGS
    if config.log_append_time:
        # The producer's batches were checked by validator.recheck before the stamp set the bit
        # C's check refuses (validator.stamp_log_append_time).
        flags &= ~lib.PLOG_VALIDATE_CLIENT
    # Every leader's batch with a producer id is written by C only when it expects it
    # (PLOG_VALIDATE_PRODUCERS); any other comes back to the producer state's check.
    state = _AppendState(config, flags | _PRODUCERS, config.batch_limit_bytes, origin)
    if origin == "client" and client_flags & _PRODUCERS:
        state.expected = producer_check.ExpectedProducers(producer_state, state.v)
    return state


def new_follower_state(config: LogConfig) -> _AppendState:
    return _AppendState(config, lib.PLOG_VALIDATE_REQUIRE_FIRST, 0)


# ---- the append loop -------------------------------------------------------------------------

def immutable_bytes(buf) -> bool:
    """`bytes`, or a read-only memoryview of bytes (a produce request's records, a view of the
    frame it came in): appended as they lie, never written to (PLOG_APPEND_READONLY), where
    anything else is a leader's to copy first."""
    return buf.__class__ is bytes or (buf.__class__ is memoryview and buf.readonly and buf.c_contiguous
                                      and buf.itemsize == 1)


def append_chunk(log, state: _AppendState, buf, leader_epoch: int, flags: int,
                 partial_tail: bool = False) -> AppendInfo:
    """Append the chunk in `buf` (a leader's: a bytearray the log owns, rewritten in place, or
    immutable bytes, written with stamped copies of its headers; a follower's: any buffer) to
    `log`, under its lock: C's verdicts acted on (see the module docstring), then the log end
    offset, the epochs and the producer state moved.  partial_tail: a follower's chunk ending
    inside a batch appends the whole batches before it (Kafka's FileRecords slices a fetch
    response by bytes; AppendInfo.size_bytes says how many were taken)."""
    v = state.v
    if immutable_bytes(buf):
        flags |= _READONLY
    if state.expected is not None:
        state.expected.sync()
    length = now = -1
    plan = None
    while True:
        with ffi.from_buffer(buf) as pointer:
            if length < 0:
                length = len(pointer)
                if not length:
                    return NOTHING_APPENDED
                if state.origin is None and log.log_end_offset == log.log_start_offset:
                    log.restart_empty_log(pointer, length)
            rc = log.local.segments[-1].append_chunk(pointer, length, log.log_end_offset, leader_epoch, flags, now, v)
            if rc == 0:
                return _written(log, state, pointer, length, plan)
            if rc == _CLOCK and now < 0:
                now = _now_ms()
                continue
            if rc == _ROLL and not flags & _NO_ROLL:
                _roll_for(log, v)
                flags |= _NO_ROLL
                continue
            if rc == _PARTIAL and partial_tail and v.error_position > 0:
                length, partial_tail = v.error_position, False
                continue
            if not (rc == _RECHECK and not flags & _RECHECKED or rc == _PRODUCER and flags & _PRODUCERS):
                raise _refusal(log, rc, v, pointer, length)
        if rc == _RECHECK:
            # Nothing was written: the validator checks (and may rewrite) a private copy.
            buf = bytearray(buf) if flags & _READONLY else buf
            validator.recheck(buf, file=f"{log.path} (appended data)")
            flags = (flags | _RECHECKED) & ~_READONLY
            continue
        plan = _producer.plan_leader_chunk(log.producer_state, buf, log.log_end_offset, state.origin,
                                           log.config.batch_limit_bytes)
        if plan is not None and plan.__class__ is not tuple and plan.duplicate is not None:
            d = plan.duplicate      # Kafka answers a retried batch with its first offsets
            return AppendInfo(d.first_offset, d.last_offset, d.timestamp, d.last_offset, 0, 0, 0, True)
        flags &= ~_PRODUCERS


def _roll_for(log, v) -> None:
    """PLOG_EROLL: the chunk is valid and the active segment must roll before it."""
    new_base = max(v.first_offset, log.log_end_offset)
    if v.last_offset - new_base > INT32_MAX:
        # Not even a new segment could hold it: refuse before rolling, so that a refused
        # append leaves no empty segment behind.
        raise errors.RecordListTooLargeError(
            f"offsets {v.first_offset}..{v.last_offset} span more than a segment can hold "
            f"(2^31 - 1 offsets past its base)", file=f"{log.path} (appended data)", offset=v.first_offset)
    log.roll_to(new_base)


def _written(log, state: _AppendState, pointer, length: int, plan) -> AppendInfo:
    """After C wrote the chunk: its AppendInfo, the epochs it starts (`pointer` is read only
    when more epochs changed than plog_validate holds), the log end offset, and the producer
    state (C's expected producer, the Python check's plan, or a follower's batches)."""
    v = state.v
    out = state.out.tolist()
    epoch = out[SOLE_EPOCH]
    out[SOLE_EPOCH:] = NOT_DUPLICATE
    info = _new_append_info(AppendInfo, out)
    metrics = state.metrics
    metrics.appends += 1
    metrics.append_batches += out[4]
    metrics.append_records += out[5]
    metrics.append_bytes += out[6]
    if epoch == _EPOCH_MIXED or (epoch >= 0 and epoch != log.epoch_cache.latest_epoch):
        assign_epochs(log, v, pointer, length)     # before the log end offset moves
    log.log_end_offset = info[1] + 1
    log.producer_state.last_map_offset = log.log_end_offset   # Kafka's updateMapEndOffset
    if state.expected is not None and v.expected_hit >= 0:
        state.expected.commit(v.expected_hit, info)
    elif plan is not None:
        changes = log.producer_state.changes
        completed = _producer.commit_append(log.producer_state, plan, info.first_offset)
        if completed:
            log.local.record_completed(completed)
        if state.expected is not None:
            state.expected.learn(_producer.planned_producers(plan), changes)
    elif state.origin is None and v.producer_batch_count:
        log.local.record_completed(_producer.apply_replicated(log.producer_state, ffi.buffer(pointer, length)))
    if log.log_end_offset - log.local.recovery_point >= log.config.flush_messages:
        flush_after_append(log)
    return info


def flush_after_append(log) -> None:
    """Kafka's flush.messages (UnifiedLog.append: unflushedMessages >= flushInterval, then
    flush): the append left flush_messages or more offsets past the recovery point, so the log
    is flushed now, under its lock, as every flush is (PartitionLog.flush: an I/O error takes
    the dir offline and the append's caller hears it; never retried into success).  Only for
    want of a descriptor the flush stays owed and the append stands (it is written): the next
    append, still past the count, flushes again."""
    try:
        log.flush()
    except errors.OutOfDescriptorsError:
        pass        # logged once where it was raised (failure.out_of_descriptors); the dir is online


def _refusal(log, rc: int, v, pointer, length: int) -> errors.StorageError:
    """The error for a chunk C refused (nothing written), as Kafka names it; the codes that
    are no refusal of the chunk come from the segment or the seam."""
    if rc in (lib.PLOG_ERECORD, lib.PLOG_ETIMESTAMP) and v.error_position >= 0:
        return validator.explain(ffi.buffer(pointer, length), v.error_position, rc,
                                 file=f"{log.path} (appended data)")
    if rc == lib.PLOG_ELISTTOOLARGE:
        return errors.RecordListTooLargeError(
            f"append of {length} bytes exceeds segment_bytes={log.config.segment_bytes}", file=log.path,
            offset=v.first_offset)
    # A refusal of the chunk names its failing batch (an empty chunk has none).
    if rc in _REFUSALS and (v.error_position >= 0 or rc == lib.PLOG_EEMPTY):
        reason = errors.error_text(rc)
        if rc == lib.PLOG_EAPPENDOFFSET:
            reason = f"first offset {v.error_offset} is below the log end offset {log.log_end_offset}"
        elif rc == lib.PLOG_ETOOLARGE:
            reason = f"batch larger than max_message_bytes={log.config.max_message_bytes}"
        return errors.error_class(rc)(reason, file=f"{log.path} (appended data)", position=v.error_position,
                               offset=v.error_offset)
    log.local.segments[-1].raise_for(rc, "append", offset=v.first_offset)
    return AssertionError(f"unexpected append result {rc}")   # raise_for raised for every rc != 0


def _follower_pieces(log, pieces: tuple, follower_state) -> "AppendInfo | None":
    """PartitionLog.append_batches as a follower with the caller's `bytes` written as they lie
    (plog_segment_append_pieces: one C call, vectored writes), or None when they are to be
    gathered into one chunk first: fewer than two, not all bytes, an empty log (Kafka's
    restart rule reads its first batch), a roll due or the time needed, or any refusal -- C
    wrote nothing then, and the gathered append rolls, or explains the refusal as it always
    has.  follower_state(): the log's follower append state (made at its first)."""
    # `pieces` (a tuple: no other thread can take a buffer out of it) holds the buffers while C
    # writes them without the GIL.
    packed = iovec_pieces(pieces) if len(pieces) > 1 else None
    if packed is None:
        return None
    local = log.local
    with local.lock:
        local.ensure_open()
        if log.log_end_offset == log.log_start_offset:
            return None
        state = follower_state()
        v = state.v
        rc = local.segments[-1].append_pieces(ffi.from_buffer("plog_iovec[]", packed), len(pieces), log.log_end_offset,
                                            state.flags, -1, v)
        if rc < 0:
            return None
        if rc:
            local.segments[-1].raise_for(rc, "append", offset=v.first_offset)
        joined = b""                    # what the producer state and an epoch overflow read
        if v.producer_batch_count or v.epoch_count > lib.PLOG_VALIDATE_MAX_EPOCHS:
            joined = b"".join(pieces)
        return _written(log, state, ffi.from_buffer(joined), len(joined), None)


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
