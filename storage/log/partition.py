"""`PartitionLog`: one partition's segments, appended as leader or follower, read, rolled,
truncated, with a log start offset, a high watermark and a recovery point.

Invariants (checked by tests/log/test_log_model.py after every step; the segments' own are
storage/log/local.py's):
  - log_start_offset <= high_watermark <= log_end_offset, recovery_point <= log_end_offset;
  - offsets in the log strictly increase; a leader append assigns offsets from the log end
    offset and stamps the leader epoch; a follower append keeps the batches' own offsets and
    must start at or after the log end offset;
  - an append is all or nothing: a rejected chunk leaves the files and the offsets untouched.

Kafka's semantics are kept where they are surprising: truncation is batch-granular but sets
the log end offset to the requested target (docs/kafka-formats.md 2.5), a segment rolls when the
append would push it past segment_bytes (never splitting a chunk), and the log start offset
may only move up to the high watermark.
"""
from __future__ import annotations

import os

from ..core import errors, guards
from ..core import io as _io
from ..core._native import ffi, lib
from ..core.clock import wall_ms as _now_ms
from ..core.config import LogConfig
from ..core.failure import ClosedOnExit, LogDirFailureChannel, failure_for, guarded, guarded_iteration
from ..core.files import INT64_MAX
from ..core.records import _build
from . import cleaner as _cleaner
from . import producer as _producer
from . import reads as _reads
from . import retention as _retention
from . import validator
from .appends import (
    CALL_AGAIN,
    NOTHING_APPENDED,
    PRODUCER_BATCHES,
    AppendInfo,
    _AppendState,
    _check_leader_append,
    _client_flags,
    _follower_pieces,
    _refusal,
    _written,
    append_chunk,
    immutable_bytes,
    new_follower_state,
    new_leader_state,
)
from .epoch import CHECKPOINT_FILE, LeaderEpochCache
from .loader import list_or_create, load
from .local import LocalLog
from .metrics import LogMetrics
from .reads import ISOLATIONS, TimestampAndOffset
from .segment import Segment, open_segments
from .txnindex import AbortedTxn


def _plain_client(config: LogConfig) -> bool:
    """Whether a producer's batches need no Python pass before C's (_leader_chunk): no keys to
    require, no timestamp bounds, no recompression, no LogAppendTime to stamp -- and no
    flush.messages to count after it (appends._written does; the one-frame path stays free of
    the check)."""
    return not config.compacts and config.compression_type == "producer" and not config.log_append_time and \
        min(config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms) >= INT64_MAX and \
        config.flush_messages >= INT64_MAX


class PartitionLog(ClosedOnExit):
    """A partition directory of segments.  Use `PartitionLog.open(path, config)`."""

    def __init__(self, path, config: LogConfig | None = None, *, recovery_point: int | None = None,
                 log_start_offset: int | None = None, clean_shutdown: bool = False,
                 high_watermark: int | None = None, failure_channel: LogDirFailureChannel | None = None,
                 recover_mode: str = "strict", log_start_offset_trusted: bool = True):
        self.path = os.fspath(path)
        self.config = config or LogConfig()
        # Shared by every partition of a LogDir; a log opened on its own has its own.
        self.failure_channel = failure_channel or LogDirFailureChannel(os.path.dirname(self.path) or self.path)
        self.recovery_report: list[tuple[int, int, str]] = []
        # The segments, their lock, roll, truncation, flush and the recovery point (Kafka's LocalLog).
        self._local = local = LocalLog(self.path, self.config, self.failure_channel, self.recovery_report)
        self._lock = local.lock
        self.first_dirty_offset: int | None = None   # the cleaner's checkpoint (LogDir keeps it)
        self._leader_append: dict[str, _AppendState] = {}   # each kind's in/out struct, made at its first (appends.py)
        self._client_flags = _client_flags()        # producer_check.ENABLED, read at the open
        self._follower_append: _AppendState | None = None
        self._follower_fast: _AppendState | None = None    # the one-frame follower path's (None: not taken)
        self._client_plain = _plain_client(self.config)
        self.on_recovery_point_lowered = None   # LogDir persists the lowered recovery point
        self._lock.acquire()    # held while it loads: the open-segment cache leaves its segments alone
        try:
            seam = _io.current()
            listing = list_or_create(seam, self.path)      # the dir's one listing for the load
            self.producer_state = _producer.ProducerStateManager(
                self.path, self.config.producer_id_expiration_ms, sync=self.config.fsync, list_snapshots=False)
            self.epoch_cache = LeaderEpochCache(os.path.join(self.path, CHECKPOINT_FILE), fsync=self.config.fsync,
                                                epoch_flush=self.config.epoch_flush)
            if self.epoch_cache.writes:      # it wrote the checkpoint it missed: the listing is stale
                listing = None
            load(self, seam, listing, recovery_point or 0, log_start_offset, log_start_offset_trusted,
                 clean_shutdown, recover_mode)
            if high_watermark is not None:
                self.update_high_watermark(high_watermark)
        except BaseException as exc:
            # A failed open releases everything it opened, and an I/O failure names the dir.
            local.release_segments()
            if isinstance(exc, OSError) and not isinstance(exc, errors.StorageError):
                raise errors.StorageIOError(f"open failed: {exc.strerror or exc}", errno=exc.errno,
                                            file=exc.filename or self.path) from exc
            raise
        finally:
            self._lock.release()
        # After a crash only the data below the recovery point is known to be what the checkpointed
        # high watermark vouched for: above it the page cache may have given back an older, divergent
        # version.  Kafka keeps the high watermark; the replica layer caps it at the recovery point
        # (this is None once anything sets a new high watermark).
        self.unvouched_high_watermark_above = self.recovery_point \
            if not clean_shutdown and self.high_watermark > self.recovery_point else None

    @classmethod
    def open(cls, path, config: LogConfig | None = None, **kwargs) -> "PartitionLog":
        """Open (creating if needed) the partition directory at `path`.

        recovery_point: offset below which data is known durable (default 0: recover all);
        log_start_offset: checkpointed log start offset (default: first segment's base);
        clean_shutdown: True skips recovery, as Kafka does after a clean shutdown;
        high_watermark: checkpointed high watermark (clamped to the log);
        recover_mode: "strict" (default) refuses to open over damage below the recovery point
        (CorruptSegmentError naming file, position and offset); "force" cuts there instead and
        says what went in `recovery_report` (storage/log/loader.py has the decision table).
        The leader-epoch cache is loaded from `leader-epoch-checkpoint`, given the epochs of
        recovered batches, and truncated to the recovered log (docs/kafka-formats.md 5.2, 5.5).
        """
        return cls(path, config, **kwargs)

    def reconfigure(self, config: LogConfig) -> None:
        """Serve from now on with `config` (a topic's configs altered while it runs: Kafka's
        UnifiedLog.updateConfig).  The next append, roll, retention pass and cleaner round read
        it; the append structs made with the old limits are dropped and made again at the next
        append.  A config that changes the durability knobs (fsync, epoch_flush) is refused:
        they are the log dir's, fixed at the open."""
        if (config.fsync, config.epoch_flush) != (self.config.fsync, self.config.epoch_flush):
            raise ValueError(f"{self.path}: fsync and epoch_flush are fixed at the open")
        with self._lock:
            self.config = config
            self._local.reconfigure(config)
            self._leader_append.clear()
            self._follower_append = self._follower_fast = None
            self._client_plain = _plain_client(config)

    # ---- state ----
    @property
    def local(self) -> LocalLog:
        """The segments on disk, their lock, roll, truncation and flush (Kafka's LocalLog)."""
        return self._local

    @property
    def metrics(self) -> LogMetrics:
        """The engine's counters of this log since its open: appends, fsyncs and their latency,
        rolls, truncations, recoveries, cleaner rounds (storage/log/metrics.py)."""
        return self._local.metrics

    @property
    def segments(self) -> list[Segment]:
        return self._local.segments

    @property
    def active_segment(self) -> Segment:
        return self._local.segments[-1]

    @property
    def size_bytes(self) -> int:
        return self._local.size_bytes

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log_start_offset, log_end_offset].  Refused once
        the dir is offline, as a guarded call is; no I/O here, so the check is made inline (a
        leader calls this after every append it acknowledges)."""
        channel = self.failure_channel
        if channel.first_failure is not None:
            raise channel.error()
        with self._lock:
            self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
            self.unvouched_high_watermark_above = None
            self.producer_state.on_high_watermark_updated(self.high_watermark)   # markers now replicated
            return self.high_watermark

    # ---- appends ----
    def append_as_leader(self, records_or_batches, leader_epoch: int, *, compression: str = "none",
                         origin: str = "client") -> AppendInfo:
        """Append as the partition leader: offsets assigned from the log end offset, every
        batch stamped with `leader_epoch`.

        records_or_batches: a bytes-like object holding whole v2 batches (copied, then
        rewritten), or an iterable of records (as `build_batch` takes) built into one batch
        with `compression`.
        origin: "client" (a producer's batches, checked as Kafka's LogValidator does:
        storage/log/validator.py) or "coordinator" (the broker's own batches, such as
        transaction markers: control batches allowed, records not walked).
        """
        # The common case -- a producer's `bytes` (or a read-only view of bytes: the records of a
        # produce request, a view of its frame), a topic that asks no Python pass of them, the
        # active segment open, C's answer 0 and the epoch the cache's latest -- is this one frame
        # and one C call, which also counts the append and makes its AppendInfo
        # (_AppendState.call; the guard of `guarded` inline); anything else, C having written
        # nothing, is the general path below, which makes the same call again.
        channel = self.failure_channel
        if channel.first_failure is not None:
            raise channel.error()
        try:
            kind = records_or_batches.__class__
            if self._client_plain and origin == "client" and leader_epoch >= 0 and records_or_batches and (
                    kind is bytes or kind is memoryview and records_or_batches.readonly       # appends.immutable_bytes
                    and records_or_batches.c_contiguous and records_or_batches.itemsize == 1):
                # acquire/release, not `with`: the with statement's two special-method
                # lookups and three-argument __exit__ were ~0.4 us of the ~4 us call
                lock = self._lock
                lock.acquire()
                try:
                    state, local = self._leader_append.get("client"), self._local
                    expected = state and state.expected
                    if state is not None and not local.closed and open_segments.last is (active := local.segments[-1]) \
                            and (expected is None or expected.seen == expected.manager.changes):
                        info = state.call(active.address, records_or_batches, self.log_end_offset, leader_epoch,
                                          self.epoch_cache.latest_epoch)
                        if info.__class__ is AppendInfo:
                            self.log_end_offset = end = info[1] + 1
                            self.producer_state.last_map_offset = end
                            if expected is not None and state.out[PRODUCER_BATCHES] and state.v.expected_hit >= 0:
                                expected.commit(state.v.expected_hit, info)
                            return info
                        if info == 0 or info not in CALL_AGAIN:
                            # A view's buffer is released before anything leaves this frame (the house's
                            # `with ffi.from_buffer`): a view still exported when an exception's traceback
                            # puts this frame in a reference cycle crashes the collector that clears it.
                            with ffi.from_buffer(records_or_batches) as data:
                                if info == 0:
                                    return _written(self, state, data, len(records_or_batches), None)
                                raise _refusal(self, info, state.v, data, len(records_or_batches))
                finally:
                    lock.release()
            return self._leader_append_any(records_or_batches, leader_epoch, compression, origin)
        except OSError as exc:
            failure = failure_for(channel, exc, "append_as_leader")
            if failure is exc:
                raise
            raise failure from exc

    def _leader_append_any(self, records_or_batches, leader_epoch: int, compression: str, origin: str) -> AppendInfo:
        """append_as_leader's general path."""
        _check_leader_append(leader_epoch, origin)
        prebuilt = isinstance(records_or_batches, (bytes, bytearray, memoryview))
        if prebuilt:
            chunk = records_or_batches      # copied unless immutable (bytes: C stamps header copies)
            return self._leader_chunk(chunk if immutable_bytes(chunk) else bytearray(chunk), leader_epoch, origin)
        if isinstance(records_or_batches, (list, tuple)) and not records_or_batches:
            return self._nothing_appended()
        buf = _build(records_or_batches, base_offset=0, partition_leader_epoch=leader_epoch,
                     compression=compression, base_timestamp=None, producer_id=-1, producer_epoch=-1,
                     base_sequence=-1, is_transactional=False, is_control=False)
        return self._leader_chunk(buf, leader_epoch, origin, prebuilt=False)

    @guarded
    def append_batches(self, batches, *, as_leader: bool, leader_epoch: int = -1,
                       origin: str = "client") -> AppendInfo:
        """Append a list of separate batch buffers (bytes-like, each holding whole v2
        batches) as one chunk, all or nothing -- the rules of append_as_leader (as_leader=True,
        offsets assigned and `leader_epoch` stamped) or of append_as_follower, except that a
        partial batch at the end is refused, never cut off.  A follower's `bytes` are written
        as they lie, by vectored writes in one C call (appends._follower_pieces); anything
        else is gathered by one copy and appended by one C call and one write."""
        pieces = tuple(batches)         # once: an iterator must not be consumed by a path that falls back
        if as_leader:
            _check_leader_append(leader_epoch, origin)
            return self._leader_chunk(bytearray().join(pieces), leader_epoch, origin)
        return _follower_pieces(self, pieces, self._follower_state) or \
            self._follower_chunk(bytearray().join(pieces), partial_tail=False)

    def _leader_chunk(self, buf, leader_epoch: int, origin: str, prebuilt: bool = True) -> AppendInfo:
        """A leader's chunk: a bytearray this log owns (rewritten in place: offsets, epoch), or
        immutable bytes (written with stamped copies of the headers, PLOG_APPEND_READONLY)."""
        if prebuilt and not buf:
            return self._nothing_appended()
        state = self._leader_append.get(origin) or self._leader_state(origin)
        if origin == "client" and self.config.compacts:
            _cleaner.require_keys(buf, self.path)      # Kafka's LogValidator for compacted topics
        log_append_time = self.config.log_append_time   # Kafka's validateTimestamp: CreateTime's bounds only
        if origin == "client" and not log_append_time and min(self.config.message_timestamp_before_max_ms,
                                                              self.config.message_timestamp_after_max_ms) < INT64_MAX:
            validator.check_timestamps(buf, self.config, _now_ms(), file=self.path)
        if origin == "client" and self.config.compression_type != "producer":
            buf = validator.recompress(buf, self.config.target_codec, file=f"{self.path} (appended data)")
        if log_append_time:     # every batch stamped with one reading of the clock
            buf = validator.stamp_log_append_time(buf, _now_ms(), file=f"{self.path} (appended data)",
                                                  client=origin == "client")
        # Our own builder's batch: its records and max timestamp are right.
        flags = state.flags if prebuilt else state.flags | lib.PLOG_VALIDATE_RECHECKED
        with self._lock:
            self._local.ensure_open()
            return append_chunk(self, state, buf, leader_epoch, flags)

    def _leader_state(self, origin: str) -> _AppendState:
        """The state for leader appends from `origin`, made at its first (appends.py)."""
        with self._lock:
            state = self._leader_append.get(origin)
            if state is None:
                state = new_leader_state(self.config, self.producer_state, origin, self._client_flags)
                state.count_into(self._local.metrics)
                self._leader_append[origin] = state
            return state

    def _follower_state(self) -> _AppendState:
        if self._follower_append is None:
            self._follower_append = new_follower_state(self.config)
            self._follower_append.count_into(self._local.metrics)
            # A flush.messages to count after each append keeps the follower on the general path
            # (appends._written), as _plain_client keeps the leader.
            if self.config.flush_messages >= INT64_MAX:
                self._follower_fast = self._follower_append
        return self._follower_append

    @guarded
    def append_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                          leader_epoch: int) -> AppendInfo:
        """Write the end-transaction marker (COMMIT or ABORT) a transaction coordinator sends
        (Kafka's WriteTxnMarkers -> appendAsLeader with the coordinator origin): the
        producer's transaction closes; an aborted one is recorded in the transaction index."""
        marker = _producer.end_txn_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, _now_ms())
        return self.append_as_leader(marker, leader_epoch, origin="coordinator")

    def append_as_follower(self, batches) -> AppendInfo:
        """Append batches fetched from the leader as they are: CRC checked, offsets strictly
        increasing, the first at or after the log end offset (gaps allowed)."""
        # The common case -- `bytes` on a log that is not empty, the active segment open, C's
        # answer 0, no producer batch and no new epoch -- is this one frame and one C call,
        # which also counts the append and makes its AppendInfo (_AppendState.call; the guard of
        # `guarded` inline); a verdict of C (roll, clock, a partial tail: nothing was written)
        # goes the general way, which makes the same call again.
        channel = self.failure_channel
        if channel.first_failure is not None:
            raise channel.error()
        try:
            kind = batches.__class__
            if batches and (kind is bytes or kind is memoryview and batches.readonly      # a fetch answer's view
                            and batches.c_contiguous and batches.itemsize == 1):
                lock = self._lock       # acquire/release, not `with` (as append_as_leader)
                lock.acquire()
                try:
                    state, local = self._follower_fast, self._local
                    if state is not None and not local.closed and self.log_end_offset != self.log_start_offset \
                            and open_segments.last is (active := local.segments[-1]):
                        info = state.call(active.address, batches, self.log_end_offset, -1,
                                          self.epoch_cache.latest_epoch)
                        if info.__class__ is AppendInfo:
                            self.log_end_offset = end = info[1] + 1
                            self.producer_state.last_map_offset = end
                            return info
                        if info == 0 or info not in CALL_AGAIN:
                            with ffi.from_buffer(batches) as data:      # released before anything leaves (as above)
                                if info == 0:
                                    return _written(self, state, data, len(batches), None)
                                raise _refusal(self, info, state.v, data, len(batches))
                finally:
                    lock.release()
            return self._follower_chunk(batches, partial_tail=True)
        except OSError as exc:
            failure = failure_for(channel, exc, "append_as_follower")
            if failure is exc:
                raise
            raise failure from exc

    def _follower_chunk(self, batches, partial_tail: bool) -> AppendInfo:
        with self._lock:
            self._local.ensure_open()
            state = self._follower_state()
            return append_chunk(self, state, batches, -1, state.flags, partial_tail)

    def _nothing_appended(self) -> AppendInfo:
        """An empty record set appends nothing (appends.NOTHING_APPENDED) on an open log."""
        with self._lock:
            self._local.ensure_open()
            return NOTHING_APPENDED

    def restart_empty_log(self, pointer, length: int) -> None:
        """(A step of the append, under the lock.)  Kafka's follower special case (docs/kafka-formats.md 6.7): an empty log whose first fetched
        batch starts below the log end offset but reaches it restarts at that batch's base."""
        if self.log_end_offset != self.log_start_offset or self.size_bytes:
            return
        info = ffi.new("plog_batch_info *")
        if lib.plog_batch_parse(pointer, length, 0, 0, info) == 0 and \
                info.base_offset < self.log_end_offset <= info.last_offset:
            self._truncate_fully(info.base_offset)

    def roll_to(self, base_offset: int) -> Segment:
        """(A step of the append and of roll(), under the lock.)  A new active segment at `base_offset`."""
        return self._local.roll(base_offset, self._before_new_segment)

    def _before_new_segment(self, old: Segment, base_offset: int) -> None:
        # Kafka flushes the rolled segment (asynchronously) and moves the recovery point.  A
        # deferred epoch file goes first: no segment is durable before the epochs it starts.
        self.epoch_cache.flush()
        old.flush()
        # Kafka's roll: a producer-state snapshot at the new base (the state of every batch below).
        self.producer_state.update_map_end_offset(base_offset)
        self.producer_state.take_snapshot()

    @guarded
    def roll(self) -> Segment:
        """Start a new active segment at the log end offset (no-op when the active segment is
        empty and already starts there)."""
        with self._lock:
            self._local.ensure_open()
            return self.roll_to(self.log_end_offset)

    # ---- reads (storage/log/reads.py walks the segments) ----
    @guarded
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             isolation: str = "log_end") -> memoryview:
        """Whole batches, zero-copy, the first one holding `offset`; at least that batch even
        when it is larger than max_bytes, then more while the total stays within max_bytes
        and (with max_offset) their last offsets stay below max_offset.  Empty at the log end
        offset; OffsetOutOfRangeError outside [log_start_offset, log_end_offset].
        isolation: "log_end" (everything: a follower), "read_uncommitted" (below the high
        watermark) or "read_committed" (below the last stable offset), as Kafka's FetchIsolation."""
        if isolation != "log_end":
            if isolation not in ISOLATIONS:
                raise ValueError(f"isolation must be one of {ISOLATIONS}")
            bound = self.high_watermark if isolation == "read_uncommitted" else self.last_stable_offset
            max_offset = bound if max_offset is None else min(max_offset, bound)
        with self._lock:
            self._local.ensure_open()
            return _reads.read(self._local, offset, max_bytes, max_offset, self.log_start_offset, self.log_end_offset)

    def file_slice(self, view: memoryview):
        """Where `view`, whole batches that `read` returned, lies in its segment file: a
        FileSlice (storage/log/file_slice.py: a descriptor of its own, the position, the view;
        the caller closes it), or None when it cannot say (empty, or the segment's mapping was
        let go of since the read: the view's bytes are still good)."""
        with self._lock:
            if self._local.closed:
                return None
            return _reads.file_slice(self._local, view)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the oldest transaction that is open, or whose marker
        is not yet below the high watermark (at least the log start); else the high watermark."""
        with self._lock:       # update_high_watermark has let go of the transactions it replicated
            first = self.producer_state.first_unstable_offset()
            if first is not None and max(first, self.log_start_offset) < self.high_watermark:
                return max(first, self.log_start_offset)
            return self.high_watermark

    @guarded
    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset), from the
        transaction indexes of the segment holding start_offset on (Kafka's
        collectAbortedTransactions): what a read_committed reader of that range must skip."""
        with self._lock:
            self._local.ensure_open()
            return _reads.collect_aborted_transactions(self._local, start_offset, upper_bound_offset)

    def batches(self, start_offset: int | None = None):
        """Every batch from start_offset (default the log start) to the log end, zero-copy; safe
        against a concurrent writer (reads.batches says how)."""
        return guarded_iteration(self.failure_channel,
                                 _reads.batches(self._local, start_offset, lambda: self.log_start_offset), "batches")

    def segment_columns(self, start_offset: int | None = None, window: int = 1 << 20, *, skip_bases=()):
        """(BatchColumns, view) for the batches from the one holding start_offset (default the
        log start) to the log end, about `window` bytes at a time (reads.segment_columns);
        segments whose base offset is in skip_bases are passed over."""
        columns = _reads.segment_columns(self._local, start_offset, lambda: self.log_start_offset, window, skip_bases)
        return guarded_iteration(self.failure_channel, columns, "segment_columns")

    @guarded
    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets: the first record with timestamp >= `timestamp`.  Special values:
        EARLIEST_TIMESTAMP (-2), LATEST_TIMESTAMP (-1), MAX_TIMESTAMP (-3)."""
        with self._lock:
            self._local.ensure_open()
            return _reads.offset_for_timestamp(self._local, timestamp, self.log_start_offset, self.log_end_offset,
                                               self.epoch_cache)

    # ---- epochs ----
    def epoch_for_offset(self, offset: int) -> int | None:
        """The leader epoch the record at `offset` was written in (None before the first entry)."""
        return self.epoch_cache.epoch_for_offset(offset)

    @property
    def latest_epoch(self) -> int | None:
        """The leader epoch of the newest entry in the epoch cache, None when it is empty."""
        return self.epoch_cache.latest_epoch

    @guarded
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """OffsetForLeaderEpoch on this log: (epoch, end offset), None where the cache has no
        answer (UnifiedLog.endOffsetForEpoch).  The one answer: the leader's KIP-320 check, its
        OffsetForLeaderEpoch handler and the follower's truncation all ask this."""
        with self._lock:
            found_epoch, found_offset = self.epoch_cache.end_offset_for(epoch, self.log_end_offset)
            return None if found_offset == -1 else (found_epoch, found_offset)

    @guarded
    def assign_epoch_start_offset(self, epoch: int, start_offset: int | None = None) -> bool:
        """Record that `epoch` starts at start_offset (default: the log end offset), as a new
        leader does before anything else (Partition.makeLeader)."""
        with self._lock:
            self._local.ensure_open()
            return self.epoch_cache.assign(epoch, self.log_end_offset if start_offset is None else start_offset)

    # ---- truncation and retention ----
    @guarded
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or above `offset` (batch-granular: the batch holding it goes
        too) and set the log end offset to `offset`.  Returns whether the log changed.
        An offset at or above the log end offset changes nothing."""
        if offset < 0:
            raise ValueError("cannot truncate to a negative offset")
        with self._lock:
            self._local.ensure_open()
            if offset >= self.log_end_offset:
                if guards.on("M25"):
                    # Kafka's UnifiedLog.truncateTo: an epoch entry starting at the log end
                    # offset goes even when the target lies beyond it
                    # (testTruncateToEndOffsetClearsEpochCache, KAFKA-10706).
                    self.epoch_cache.truncate_from_end(self.log_end_offset)
                return False
            local = self._local
            if offset < local.segments[0].base_offset:
                local.truncations += 1      # (and once more by the full truncation)
                self._truncate_fully(offset)
                return True
            lowered = local.truncate_to(offset)
            self.log_end_offset = offset
            self.high_watermark = min(self.high_watermark, offset)
            if lowered:
                self._store_lowered_recovery_point()
            self.log_start_offset = min(self.log_start_offset, offset)
            self.epoch_cache.truncate_from_end(offset)
            _producer.rebuild(self.producer_state, self, _now_ms(), truncation=True)
            return True

    def _truncate_fully(self, offset: int) -> None:
        lowered = self._local.truncate_fully(offset)
        self.epoch_cache.clear_and_flush()
        self.producer_state.truncate_fully_and_start_at(offset)
        self.log_start_offset = self.log_end_offset = offset
        if guards.on("M26"):
            self.high_watermark = offset
        else:
            self.high_watermark = max(self.high_watermark, offset)
        if lowered:
            self._store_lowered_recovery_point()

    def _store_lowered_recovery_point(self) -> None:
        """Data below the stored recovery point changed (a truncation): the store must know
        before any rewrite of that range could be flushed, or a crash would skip its recovery.
        Both truncations call this, the cut inside the log and the restart below its start."""
        if self.on_recovery_point_lowered is not None:
            self.on_recovery_point_lowered(self)

    @guarded
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log, empty, at `offset` (log start, log end,
        recovery point and high watermark all become `offset`)."""
        if offset < 0:
            raise ValueError("offset must be >= 0")
        with self._lock:
            self._local.ensure_open()
            self._truncate_fully(offset)

    @guarded
    def increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (DeleteRecords / retention) and delete whole segments
        below it.  Like Kafka, it may not pass the high watermark.  Returns whether it moved."""
        with self._lock:
            self._local.ensure_open()
            if offset > self.high_watermark:
                raise errors.OffsetOutOfRangeError(
                    f"cannot raise the log start offset to {offset}: above the high watermark "
                    f"{self.high_watermark}", file=self.path, offset=offset)
            if offset <= self.log_start_offset:
                return False
            self._local.remove_leading(offset)     # a segment goes when the next starts at or below it
            self._advance_log_start(offset)
            return True

    def _advance_log_start(self, offset: int) -> None:
        """The log start moves up (DeleteRecords, retention): the epoch cache, the producer
        state and the producer snapshots of deleted segments follow (Kafka's
        maybeIncrementLogStartOffset, deleteProducerSnapshots)."""
        if offset <= self.log_start_offset:
            return
        self.log_start_offset = offset
        local = self._local
        local.recovery_point = max(local.recovery_point, offset)
        self.epoch_cache.truncate_from_start(offset)
        self.producer_state.on_log_start_offset_incremented(offset)
        self.producer_state.delete_snapshots_before(local.segments[0].base_offset)

    @guarded
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Kafka's retention pass (storage/log/retention.py): segments below the log start offset,
        then (with "delete" in cleanup_policy) beyond retention_bytes, then older than
        retention_ms; never past the high watermark.  Returns how many segments went."""
        with self._lock:
            self._local.ensure_open()
            return _retention.delete_old_segments(
                self._local, self.config, _now_ms() if now_ms is None else now_ms, high_watermark=self.high_watermark,
                log_start_offset=self.log_start_offset, log_end_offset=self.log_end_offset, roll=self.roll_to,
                advance_log_start=self._advance_log_start)

    @guarded
    def compact(self, now_ms: int | None = None) -> "_cleaner.CleanerStats":
        """One round of Kafka's log cleaner (storage/log/cleaner.py) from `first_dirty_offset` up to
        the first uncleanable offset, as far as the offset map reaches; the dirty ratio is the
        caller's (LogDir.clean_logs) to judge.  Appends go on while it runs; a truncation or a
        deletion of its segments meanwhile aborts the rest of the round (stats.aborted)."""
        with self._lock:
            self._local.ensure_open()
            if not self.config.compacts:
                raise ValueError(f"{self.path}: cleanup_policy {self.config.cleanup_policy!r} does not compact")
            self._local.metrics.cleaner_rounds += 1
        return _cleaner.compact(self, _now_ms() if now_ms is None else now_ms)

    @guarded
    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for producer_id_expiration_ms (never one with an open
        transaction); returns how many went."""
        with self._lock:
            self._local.ensure_open()
            return self.producer_state.remove_expired_producers(_now_ms() if now_ms is None else now_ms)

    @guarded
    def delete_pending_files(self, now_ms: int | None = None) -> int:
        """Remove the files of deleted segments whose file_delete_delay_ms is over."""
        with self._lock:
            return self._local.delete_pending_files(_now_ms() if now_ms is None else now_ms)

    # ---- durability ----
    @guarded
    def flush(self) -> None:
        """fsync every segment with data past the recovery point (a flush point when fsync is
        disabled) and the directory if files came or went; the recovery point becomes the
        log end offset."""
        with self._lock:
            local = self._local
            local.ensure_open()
            local.flush_parent_dir()
            self.epoch_cache.flush()
            local.flush(self.log_end_offset)

    def close(self) -> None:
        """Seal the active segment (final time-index entry, trimmed indexes), flush, close.
        The directory then opens with `clean_shutdown=True` without recovery.  On an offline
        log dir: release everything, write nothing, raise LogDirOfflineError."""
        local = self._local
        with self._lock:
            if local.closed:
                self.failure_channel.check()     # a retried close claims no success either
                return
            if not self.failure_channel.offline:
                try:
                    if local.active_segment.seal():
                        local.dir_dirty = True
                    self.flush()
                    self.producer_state.update_map_end_offset(self.log_end_offset)
                    self.producer_state.take_snapshot()     # what the next open loads
                except OSError as exc:   # also the LogDirOfflineError of flush: the first failure stays
                    self.failure_channel.fail(exc, "close")
                except errors.StorageError:
                    # Not an I/O failure (a damaged trusted index refuses the final entry): release, say so.
                    local.closed = True
                    local.release_segments()
                    raise
            # Offline: release everything, write nothing (no seal, no flush): reopened as after a crash.
            local.closed = True
            local.release_segments()
            self.failure_channel.check()

    def check_invariants(self) -> None:
        """Raise AssertionError unless the log's state is one docs/reliability.md allows: the
        segments' (LocalLog.check_invariants), log start <= high watermark <= log end, epoch
        entries below the log end, and the cache's own invariants (for model-based tests,
        after every step)."""
        self._local.check_invariants(self.log_end_offset)
        assert self.log_start_offset <= self.high_watermark <= self.log_end_offset, \
            (self.log_start_offset, self.high_watermark, self.log_end_offset)
        self.epoch_cache.check_invariants()
        assert all(e.start_offset <= self.log_end_offset for e in self.epoch_cache.entries), \
            (self.epoch_cache.entries, self.log_end_offset)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.path!r}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, segments={len(self.segments)})")
