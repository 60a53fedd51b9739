"""`PartitionLog`: one partition's segments, appended as leader or follower, read, rolled,
truncated, with a log start offset, a high watermark and a recovery point.

Invariants (checked by tests/log/test_log_model.py after every step):
  - segments are sorted by base offset, do not overlap, and only the last one is active;
  - log_start_offset <= high_watermark <= log_end_offset, recovery_point <= log_end_offset;
  - offsets in the log strictly increase; a leader append assigns offsets from the log end
    offset and stamps the leader epoch; a follower append keeps the batches' own offsets and
    must start at or after the log end offset;
  - an append is all or nothing: a rejected chunk leaves the files and the offsets untouched;
  - every batch below the recovery point was flushed (fsync'd, or a flush point when fsync
    is disabled) before the recovery point moved past it.

Kafka's semantics are kept where they are surprising: truncation is batch-granular but sets
the log end offset to the requested target (docs/kafka-formats.md 2.5), a segment rolls when the
append would push it past segment_bytes (never splitting a chunk), and the log start offset
may only move up to the high watermark.
"""
from __future__ import annotations

import os
import threading

from ..core import errors, guards
from ..core import io as _io
from ..core._native import ffi, lib
from ..core.clock import wall_ms as _now_ms
from ..core.config import LogConfig
from ..core.failure import LogDirFailureChannel, guarded
from ..core.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_name
from ..core.records import _build
from . import cleaner as _cleaner
from . import producer as _producer
from . import retention as _retention
from .appends import (
    AppendInfo,
    _AppendState,
    _client_flags,
    _follower_pieces,
    _follower_state,
    _leader_state,
    append_chunk,
)
from .epoch import CHECKPOINT_FILE, LeaderEpochCache
from .loader import Loader, list_or_create, repair_epoch_cache
from .reads import LogReads
from .segment import Segment, SegmentHome
from .txnindex import AbortedTxn

_ORIGINS = ("client", "coordinator")


def _check_leader_append(leader_epoch: int, origin: str) -> None:
    if leader_epoch < 0:
        raise ValueError("leader_epoch must be >= 0")
    if origin not in _ORIGINS:
        raise ValueError(f"origin must be one of {_ORIGINS}")


class PartitionLog(LogReads):
    """A partition directory of segments.  Use `PartitionLog.open(path, config)`."""

    def __init__(self, path, config: LogConfig | None = None, *, recovery_point: int | None = None,
                 log_start_offset: int | None = None, clean_shutdown: bool = False,
                 high_watermark: int | None = None, failure_channel: LogDirFailureChannel | None = None,
                 recover_mode: str = "strict", log_start_offset_trusted: bool = True):
        self.path = os.fspath(path)
        self._log_start_trusted = log_start_offset_trusted
        self.config = config or LogConfig()
        # Shared by every partition of a LogDir; a log opened on its own has its own.
        self.failure_channel = failure_channel or LogDirFailureChannel(os.path.dirname(self.path) or self.path)
        self._lock = threading.RLock()
        self._closed = False
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._dir_dirty = False
        self.parent_dir_dirty = False       # set by LogDir for a partition it created lazily
        self._pending_deletes: list[tuple[int, list[str]]] = []   # (due ms, *.deleted paths): retention
        self.first_dirty_offset: int | None = None   # the cleaner's checkpoint (LogDir keeps it)
        self._truncations = 0                         # a cleaner round aborts when this moved
        self._leader_append: dict[str, _AppendState] = {}   # each kind's in/out struct, made at its first (appends.py)
        self._client_flags = _client_flags()        # producer_check.ENABLED, read at the open
        self._follower_append: _AppendState | None = None
        self.on_recovery_point_lowered = None   # LogDir persists the lowered recovery point
        self._recovered: list[tuple] = []   # (base, end, epoch changes, producer batches) a recovered segment
        self.recovery_report: list[tuple[int, int, str]] = []
        self.segment_home = SegmentHome(self.path, self.config, self._lock, self.recovery_report, self.failure_channel)
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
            self._load(seam, listing, recovery_point or 0, log_start_offset, clean_shutdown, recover_mode)
            # Kafka's load resizes the active segment's indexes (creating their files); LazyIndex after.
            if self.segments[-1].attach_indexes():
                self._dir_dirty = True
            repair_epoch_cache(self)
            _producer.remove_stray_and_rebuild(self.producer_state, self, _now_ms())
            if high_watermark is not None:
                self.update_high_watermark(high_watermark)
        except BaseException as exc:
            # A failed open releases everything it opened, and an I/O failure names the dir.
            self._release_segments()
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

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # An offline log still releases everything; its error must not hide the one in flight.
        try:
            self.close()
        except errors.LogDirOfflineError:
            if exc_type is None:
                raise

    # ---- loading (docs/kafka-formats.md 5.2-5.4) ----
    def _load(self, seam, listing, recovery_point: int, log_start_offset: int | None, clean: bool,
              recover_mode: str = "strict") -> None:
        # The per-segment decision (trust, recover, rebuild the index, refuse) is loader.py's table.
        Loader(self, seam, recovery_point, clean, recover_mode).load(listing)
        start = self.segments[0].base_offset if self.segments else 0
        if log_start_offset is not None:
            start = max(start, log_start_offset)
        leo = self.segments[-1].next_offset if self.segments else start
        if leo < start and self.size_bytes and recover_mode != "force" and not self._log_start_trusted:
            # Kafka drops every segment here, and for our own checkpoint that is right (a
            # batch-granular truncation inside the batch holding the log start leaves only data
            # below it).  A value imported from a Kafka checkpoint file may be wrong, though: it
            # must not delete the log without the user's explicit choice.
            for segment in self.segments:
                segment.close()
            self.segments.clear()
            self._bases.clear()
            raise errors.CorruptSegmentError(
                f"the imported log start offset {start} is above the log end offset {leo}: refusing to "
                f"delete every segment (open with recover_mode='force' to do what Kafka does)", file=self.path)
        if leo < start:
            # Kafka: the log ends below the checkpointed start offset -> drop everything.
            for segment in self.segments:
                segment.delete()
            self.segments.clear()
            self._bases.clear()
            self.epoch_cache.clear_and_flush()
        if not self.segments:
            self._new_segment(start)
            leo = start
        self.log_start_offset = start
        self.log_end_offset = leo
        self.high_watermark = start
        self.recovery_point = leo if clean else min(recovery_point, leo)
        if self.recovery_point < start:
            self.recovery_point = start

    def _new_segment(self, base_offset: int) -> Segment:
        prefix = os.path.join(self.path, segment_name(base_offset))
        seam = _io.current()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            if seam.exists(prefix + suffix):
                seam.unlink(prefix + suffix)
        segment = Segment(self.segment_home, base_offset, create=True, active=True)
        self.segments.append(segment)
        self._bases.append(base_offset)
        self._dir_dirty = True
        return segment

    # ---- state ----
    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def _ensure_open(self) -> None:
        if self._closed:
            raise errors.LogClosedError("log is closed", file=self.path)

    @guarded
    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log_start_offset, log_end_offset]."""
        with self._lock:
            self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
            self.unvouched_high_watermark_above = None
            self.producer_state.on_high_watermark_updated(self.high_watermark)   # markers now replicated
            return self.high_watermark

    # ---- appends ----
    @guarded
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
        _check_leader_append(leader_epoch, origin)
        prebuilt = isinstance(records_or_batches, (bytes, bytearray, memoryview))
        if prebuilt:
            chunk = records_or_batches      # copied unless immutable (bytes: C stamps header copies)
            return self._leader_chunk(chunk if chunk.__class__ is bytes else bytearray(chunk), leader_epoch, origin)
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
        return _follower_pieces(self, pieces) or self._follower_chunk(bytearray().join(pieces), partial_tail=False)

    def _leader_chunk(self, buf, leader_epoch: int, origin: str, prebuilt: bool = True) -> AppendInfo:
        """A leader's chunk: a bytearray this log owns (rewritten in place: offsets, epoch), or
        immutable bytes (written with stamped copies of the headers, PLOG_APPEND_READONLY)."""
        if prebuilt and not buf:
            return self._nothing_appended()
        state = self._leader_append.get(origin) or _leader_state(self, origin)
        if origin == "client" and self.config.compacts:
            _cleaner.require_keys(buf, self.path)      # Kafka's LogValidator for compacted topics
        # Our own builder's batch: its records and max timestamp are right.
        flags = state.flags if prebuilt else state.flags | lib.PLOG_VALIDATE_RECHECKED
        with self._lock:
            self._ensure_open()
            return append_chunk(self, state, buf, leader_epoch, flags)

    @guarded
    def append_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                          leader_epoch: int) -> AppendInfo:
        """Write the end-transaction marker (COMMIT or ABORT) a transaction coordinator sends
        (Kafka's WriteTxnMarkers -> appendAsLeader with the coordinator origin): the
        producer's transaction closes; an aborted one is recorded in the transaction index."""
        marker = _producer.end_txn_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, _now_ms())
        return self.append_as_leader(marker, leader_epoch, origin="coordinator")

    def _record_completed(self, completed) -> None:
        """Aborted transactions go to the transaction index of the segment holding their marker."""
        for txn, last_stable in completed:
            if txn.is_aborted:
                segment = self.segments[self._segment_index(txn.last_offset)]
                entry = AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, last_stable)
                if segment.append_aborted(entry):
                    self._dir_dirty = True      # a new file: its name is durable at the next flush

    @guarded
    def append_as_follower(self, batches) -> AppendInfo:
        """Append batches fetched from the leader as they are: CRC checked, offsets strictly
        increasing, the first at or after the log end offset (gaps allowed)."""
        return self._follower_chunk(batches, partial_tail=True)

    def _follower_chunk(self, batches, partial_tail: bool) -> AppendInfo:
        with self._lock:
            self._ensure_open()
            state = self._follower_append or _follower_state(self)
            return append_chunk(self, state, batches, -1, state.flags, partial_tail)

    def _nothing_appended(self) -> AppendInfo:
        """Kafka's UnifiedLog.append returns early for an empty record set: nothing changes.
        first_offset and last_offset are -1 (Kafka's unknown offsets), every count 0."""
        with self._lock:
            self._ensure_open()
            return AppendInfo(-1, -1, -1, -1, 0, 0, 0)

    def _maybe_restart_empty_log(self, pointer, length: int) -> None:
        """Kafka's follower special case (docs/kafka-formats.md 6.7): an empty log whose first fetched
        batch starts below the log end offset but reaches it restarts at that batch's base."""
        if self.log_end_offset != self.log_start_offset or self.size_bytes:
            return
        info = ffi.new("plog_batch_info *")
        if lib.plog_batch_parse(pointer, length, 0, 0, info) == 0 and \
                info.base_offset < self.log_end_offset <= info.last_offset:
            self._truncate_fully(info.base_offset)

    def _roll_to(self, base_offset: int) -> Segment:
        old = self.segments[-1]
        if base_offset < old.next_offset or base_offset < old.base_offset:
            # Kafka's LocalLog.roll refuses too: a new segment may not start inside the last one.
            raise errors.StorageError(f"cannot roll to offset {base_offset}: the active segment "
                                      f"{old.base_offset} already holds offsets up to {old.next_offset - 1}",
                                      file=old.log_path, offset=base_offset)
        if old.size == 0 and old.base_offset == base_offset:
            return old
        # An empty active segment at another base stays, sealed, as Kafka keeps it: it
        # records where the log ended (e.g. after a truncation past its last batch).
        old.seal()
        # Kafka flushes the rolled segment (asynchronously) and moves the recovery point.  A
        # deferred epoch file goes first: no segment is durable before the epochs it starts.
        self.epoch_cache.flush()
        old.flush()
        # Kafka's roll: a producer-state snapshot at the new base (the state of every batch below).
        self.producer_state.update_map_end_offset(base_offset)
        self.producer_state.take_snapshot()
        segment = self._new_segment(base_offset)
        self._flush_dir()
        self.recovery_point = max(self.recovery_point, base_offset)
        return segment

    @guarded
    def roll(self) -> Segment:
        """Start a new active segment at the log end offset (no-op when the active segment is
        empty and already starts there)."""
        with self._lock:
            self._ensure_open()
            return self._roll_to(self.log_end_offset)

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
            self._ensure_open()
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
            self._ensure_open()
            if offset >= self.log_end_offset:
                if guards.on("M25"):
                    # Kafka's UnifiedLog.truncateTo: an epoch entry starting at the log end
                    # offset goes even when the target lies beyond it
                    # (testTruncateToEndOffsetClearsEpochCache).
                    self._after_truncate(self.log_end_offset)
                return False
            self._truncations += 1
            if offset < self.segments[0].base_offset:
                self._truncate_fully(offset)
                return True
            # Highest first: any crash in between leaves a prefix of the old log.
            deleted = False
            while len(self.segments) > 1 and self.segments[-1].base_offset > offset:
                self.segments.pop().delete()
                self._bases.pop()
                deleted = True
            if deleted:
                # The deletions must be durable before the cut below can be: otherwise a crash
                # could keep the cut segment and bring a deleted later one back (found by the
                # crash enumeration: truncate, truncate, roll).
                self._flush_dir()
            active = self.segments[-1]
            active.truncate_to(offset)
            if not active.active:
                active.unseal()
            # Stricter than Kafka: the cut is durable at once.  Otherwise a crash that loses the
            # page cache can bring the removed batches back -- divergent ones, of a newer epoch
            # than the data refetched over them -- and they would pass recovery (found by the
            # cluster simulator: unclean recovery then preferred the resurrected epoch).
            if active.flush():
                self._flush_dir()       # its index files were created now
            self.log_end_offset = offset
            lowered = offset < self.recovery_point
            self.recovery_point = min(self.recovery_point, offset)
            self.high_watermark = min(self.high_watermark, offset)
            if lowered:
                self._store_lowered_recovery_point()
            self.log_start_offset = min(self.log_start_offset, offset)
            self._after_truncate(offset)
            _producer.rebuild(self.producer_state, self, _now_ms(), truncation=True)
            return True

    def _after_truncate(self, offset: int) -> None:
        # Also when offset >= the log end offset: an epoch starting there goes (KAFKA-10706).
        self.epoch_cache.truncate_from_end(offset)

    def _truncate_fully(self, offset: int) -> None:
        self._truncations += 1
        while self.segments:
            self.segments.pop().delete()
        self._bases.clear()
        self._new_segment(offset)
        self._flush_dir()           # the old segments must not come back after a crash
        self._flush_dir()
        self.epoch_cache.clear_and_flush()
        self.producer_state.truncate_fully_and_start_at(offset)
        lowered = offset < self.recovery_point
        self.log_start_offset = self.log_end_offset = self.recovery_point = offset
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
            self._ensure_open()
            self._truncate_fully(offset)

    @guarded
    def increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (DeleteRecords / retention) and delete whole segments
        below it.  Like Kafka, it may not pass the high watermark.  Returns whether it moved."""
        with self._lock:
            self._ensure_open()
            if offset > self.high_watermark:
                raise errors.OffsetOutOfRangeError(
                    f"cannot raise the log start offset to {offset}: above the high watermark "
                    f"{self.high_watermark}", file=self.path, offset=offset)
            if offset <= self.log_start_offset:
                return False
            # A segment goes when the next one starts at or below the new start offset.
            while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
                self.segments.pop(0).delete()
                self._bases.pop(0)
                self._dir_dirty = True
            self._advance_log_start(offset)
            return True

    def _advance_log_start(self, offset: int) -> None:
        """The log start moves up (DeleteRecords, retention): the epoch cache, the producer
        state and the producer snapshots of deleted segments follow (Kafka's
        maybeIncrementLogStartOffset, deleteProducerSnapshots)."""
        if offset <= self.log_start_offset:
            return
        self.log_start_offset = offset
        self.recovery_point = max(self.recovery_point, offset)
        self.epoch_cache.truncate_from_start(offset)
        self.producer_state.on_log_start_offset_incremented(offset)
        self.producer_state.delete_snapshots_before(self.segments[0].base_offset)

    @guarded
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Kafka's retention pass (storage/log/retention.py): segments below the log start offset,
        then (with "delete" in cleanup_policy) beyond retention_bytes, then older than
        retention_ms; never past the high watermark.  Returns how many segments went."""
        with self._lock:
            self._ensure_open()
            return _retention.delete_old_segments(self, _now_ms() if now_ms is None else now_ms)

    @guarded
    def compact(self, now_ms: int | None = None) -> "_cleaner.CleanerStats":
        """One round of Kafka's log cleaner (storage/log/cleaner.py) from `first_dirty_offset` up to
        the first uncleanable offset, as far as the offset map reaches; the dirty ratio is the
        caller's (LogDir.clean_logs) to judge.  Appends go on while it runs; a truncation or a
        deletion of its segments meanwhile aborts the rest of the round (stats.aborted)."""
        with self._lock:
            self._ensure_open()
            if not self.config.compacts:
                raise ValueError(f"{self.path}: cleanup_policy {self.config.cleanup_policy!r} does not compact")
        return _cleaner.compact(self, _now_ms() if now_ms is None else now_ms)

    @guarded
    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for producer_id_expiration_ms (never one with an open
        transaction); returns how many went."""
        with self._lock:
            self._ensure_open()
            return self.producer_state.remove_expired_producers(_now_ms() if now_ms is None else now_ms)

    @guarded
    def delete_pending_files(self, now_ms: int | None = None) -> int:
        """Remove the files of deleted segments whose file_delete_delay_ms is over."""
        with self._lock:
            return _retention.delete_pending_files(self, _now_ms() if now_ms is None else now_ms)

    # ---- durability ----
    @property
    def _sync_flags(self) -> int:
        return 0 if self.config.fsync else _io.SYNC_NOOP

    def _flush_dir(self) -> None:
        _io.current().fsync_dir(self.path, self._sync_flags)
        self._dir_dirty = False

    @guarded
    def flush(self) -> None:
        """fsync every segment with data past the recovery point (a flush point when fsync is
        disabled) and the directory if files came or went; the recovery point becomes the
        log end offset."""
        with self._lock:
            self._ensure_open()
            if self.parent_dir_dirty:       # a partition LogDir created lazily (epoch_flush="deferred")
                _io.current().fsync_dir(os.path.dirname(self.path), self._sync_flags)
                self.parent_dir_dirty = False
            self.epoch_cache.flush()
            for segment in self.segments[max(self._segment_index(self.recovery_point), 0):]:    # none below it
                if segment.next_offset > self.recovery_point or segment is self.segments[-1]:
                    if segment.flush():
                        self._dir_dirty = True      # its index files were created now
            if self._dir_dirty:
                self._flush_dir()
            self.recovery_point = self.log_end_offset

    def close(self) -> None:
        """Seal the active segment (final time-index entry, trimmed indexes), flush, close.
        The directory then opens with `clean_shutdown=True` without recovery.  On an offline
        log dir: release everything, write nothing, raise LogDirOfflineError."""
        with self._lock:
            if self._closed:
                self.failure_channel.check()     # a retried close claims no success either
                return
            if not self.failure_channel.offline:
                try:
                    if self.segments[-1].seal():
                        self._dir_dirty = True
                    self.flush()
                    self.producer_state.update_map_end_offset(self.log_end_offset)
                    self.producer_state.take_snapshot()     # what the next open loads
                except OSError as exc:   # also the LogDirOfflineError of flush: the first failure stays
                    self.failure_channel.fail(exc, "close")
                except errors.StorageError:
                    # Not an I/O failure (a damaged trusted index refuses the final entry): release, say so.
                    self._closed = True
                    self._release_segments()
                    raise
            # Offline: release everything, write nothing (no seal, no flush): reopened as after a crash.
            self._closed = True
            self._release_segments()
            self.failure_channel.check()

    def _release_segments(self) -> None:
        for segment in self.segments:
            try:
                segment.close()
            except OSError:
                pass    # releasing can only fail on a bad descriptor; nothing is written

    def _check_invariants(self) -> None:
        """Raise AssertionError unless the log's state is one docs/reliability.md allows (I8, I9):
        segments in base-offset order without overlap (gaps allowed), the log end offset at or
        above the last segment's next offset, log start <= high watermark <= log end, recovery point <=
        log end, epoch entries below the log end, and every segment's and the cache's own
        invariants (for model-based tests, after every step)."""
        segments = list(self.segments)
        assert segments, "a log always has an active segment"
        for a, b in zip(segments, segments[1:]):
            assert a.base_offset < b.base_offset and a.next_offset <= b.base_offset, (a, b)
        # At most the last segment's next offset, or above it after a truncation inside a batch
        # (Kafka's truncateTo sets the log end offset to the target; the whole batch went).
        assert segments[-1].next_offset <= self.log_end_offset, (self.log_end_offset, segments[-1])
        assert self.log_start_offset <= self.high_watermark <= self.log_end_offset, \
            (self.log_start_offset, self.high_watermark, self.log_end_offset)
        assert self.recovery_point <= self.log_end_offset, (self.recovery_point, self.log_end_offset)
        for segment in segments:
            segment._check_invariants()
        self.epoch_cache._check_invariants()
        assert all(e.start_offset <= self.log_end_offset for e in self.epoch_cache.entries), \
            (self.epoch_cache.entries, self.log_end_offset)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.path!r}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, segments={len(self.segments)})")
