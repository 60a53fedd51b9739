"""`LeaderEpochCache`: epoch -> start offset, with Kafka's `leader-epoch-checkpoint` file.

Semantics are Kafka's LeaderEpochFileCache (docs/kafka-formats.md 4), KIP-101 and KIP-279:

Invariants after every mutation:
  - entries are sorted, epochs strictly increase and start offsets strictly increase;
  - with epoch_flush="sync" (Kafka's behaviour) an addition is durable before `assign`
    returns, so the file never lacks an entry; it may still hold entries that a truncation
    removed (truncations are written too, but a crash can come first) -- loading the log
    repairs that with truncate_from_end(log end offset) and truncate_from_start(log start);
  - with epoch_flush="deferred" (KIP-101 step 3's option) additions are only marked dirty and
    written by `flush()`, which the log calls before it flushes any segment: a segment in
    which an epoch starts is never durable before the epoch file that names it, and after a
    crash the missing tail is rebuilt from the batches above the recovery point;
  - the file is read strictly (version 0, count line, two integer fields a line); a malformed
    file is reported in `load_error` and the cache starts empty for the log to rebuild.

Lookups are binary searches: end_offset_for and epoch_for_offset cost O(log epochs).
"""
from __future__ import annotations

import bisect
import logging
import os
import threading
from typing import NamedTuple

from ..core import checkpoint, errors, guards
from ..core.config import FLUSH_MODES
from ..core.failure import is_out_of_descriptors

log = logging.getLogger("storage")

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_FILE = "leader-epoch-checkpoint"


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch -> start offset, optionally backed by a checkpoint file (None: memory only)."""

    def __init__(self, checkpoint_path=None, *, fsync: bool = True, epoch_flush: str = "sync"):
        if epoch_flush not in FLUSH_MODES:
            raise ValueError(f"epoch_flush must be one of {FLUSH_MODES}, not {epoch_flush!r}")
        self.path = None if checkpoint_path is None else os.fspath(checkpoint_path)
        self.fsync = fsync
        self.epoch_flush = epoch_flush
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        # The newest entry's epoch, None when empty: an attribute, kept by every change
        # (_track), so that the append's one frame reads it without a call.
        self.latest_epoch: int | None = None
        self._dirty = False
        self._lock = threading.RLock()
        self.load_error: checkpoint.CheckpointError | None = None
        self.writes = 0
        if self.path is not None:
            self._load()

    # ---- file ----
    def _load(self) -> None:
        try:
            lines = checkpoint.read_if_present(self.path, 2)
            if lines is None:
                # Kafka creates the file (empty) when the cache is created; a deferred cache
                # writes it at its first flush (a missing file is an empty cache), so creating a
                # partition costs no fsync.
                self._changed()
                return
            entries = [(int(e), int(o)) for e, o in lines]
        except checkpoint.CheckpointError as exc:
            self.load_error = exc
            return
        except ValueError as exc:
            self.load_error = checkpoint.CheckpointError(f"non-integer epoch or offset ({exc})", file=self.path)
            return
        for epoch, offset in entries:
            if epoch < 0 or offset < 0:
                self.load_error = checkpoint.CheckpointError(
                    f"negative epoch or offset in entry {epoch} {offset}", file=self.path)
                self._epochs, self._offsets = [], []
                self._track()
                return
            self._assign(epoch, offset)   # the same monotonicity rules, without rewriting

    def _write(self) -> None:
        if self.path is not None:
            try:
                checkpoint.write(self.path, list(zip(self._epochs, self._offsets)), sync=self.fsync)
            except errors.StorageError:
                raise
            except OSError as exc:          # the seam's bare OSError: say which file
                raise errors.StorageIOError(f"cannot write the leader-epoch-checkpoint: {exc.strerror or exc}",
                                            errno=exc.errno, file=self.path) from exc
            self.writes += 1
        self._dirty = False

    def _changed(self) -> None:
        if self.epoch_flush == "deferred":
            self._dirty = True
            return
        try:
            self._write()
        except OSError as exc:
            if not is_out_of_descriptors(exc):
                raise
            # No descriptor for the file (EMFILE, ENFILE): the change is in memory and its
            # caller's records may already be written (an append assigns epochs after C wrote
            # the chunk, before the log end offset moves), so it must not fail now; written at
            # the next flush, as a deferred cache's are -- before any segment is flushed, so no
            # segment is durable before the epochs it starts.
            self._dirty = True
            log.error("%s: out of file descriptors, written at the next flush: %s", self.path, exc)

    def flush(self) -> None:
        """Write the entries now (what a deferred cache does at each log flush)."""
        with self._lock:
            if self._dirty:
                self._write()

    @property
    def dirty(self) -> bool:
        return self._dirty

    # ---- mutations ----
    def _assign(self, epoch: int, start_offset: int) -> bool:
        epochs, offsets = self._epochs, self._offsets
        if epochs and epoch == epochs[-1] and start_offset >= offsets[-1]:
            return False   # the first assignment of the latest epoch wins
        while epochs and (epochs[-1] >= epoch or offsets[-1] >= start_offset):
            epochs.pop()
            offsets.pop()
        epochs.append(epoch)
        offsets.append(start_offset)
        self.latest_epoch = epoch
        return True

    def _track(self) -> None:
        self.latest_epoch = self._epochs[-1] if self._epochs else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; returns whether the cache changed.
        An older epoch (or an earlier offset) removes every later entry."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch and start offset must be >= 0, got ({epoch}, {start_offset})")
        with self._lock:
            if self._assign(epoch, start_offset):
                self._changed()
                return True
            return False

    def restore(self, entries) -> None:
        """Put back entries taken from `entries` before a failed change (memory only: the file
        holds the old or the new entries, and the next load reconciles either with the log)."""
        with self._lock:
            self._epochs = [e for e, _ in entries]
            self._offsets = [o for _, o in entries]
            self._track()

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop every entry starting at or after end_offset (the log was truncated there)."""
        with self._lock:
            if end_offset < 0 or not self._offsets or self._offsets[-1] < end_offset:
                return False
            cut = bisect.bisect_left(self._offsets, end_offset)
            del self._epochs[cut:]
            del self._offsets[cut:]
            self._track()
            self._changed()
            return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at start_offset: entries at or below it go, and the last of them
        comes back starting at start_offset (the earliest surviving epoch moves up)."""
        with self._lock:
            removed = bisect.bisect_right(self._offsets, start_offset)
            if removed == 0:
                return False
            epoch = self._epochs[removed - 1]
            if removed == 1 and self._offsets[0] == start_offset:
                return True     # removed and re-added unchanged: nothing to write
            self._epochs[:removed] = [epoch]
            self._offsets[:removed] = [start_offset]
            self._track()
            self._changed()
            return True

    def restore_head(self, head: list[tuple[int, int]]) -> bool:
        """Put back (epoch, start offset) entries below the earliest one: recovery found batches
        under it (a crash fell between truncate_from_start and the log start checkpoint).  An
        entry of the earliest epoch moves its start down; entries that would break the order
        are ignored."""
        with self._lock:
            epochs, offsets = [], []
            for epoch, start in head:
                if self._offsets and start >= self._offsets[0]:
                    break
                if self._epochs and epoch >= self._epochs[0]:
                    if epoch == self._epochs[0]:
                        self._offsets[0] = start
                        epochs.append(None)
                    break
                if not epochs or (epoch > epochs[-1] and start > offsets[-1]):
                    epochs.append(epoch)
                    offsets.append(start)
            if not epochs:
                return False
            if epochs[-1] is None:
                epochs.pop()
            self._epochs[:0] = epochs
            self._offsets[:0] = offsets
            self._track()
            self._changed()
            return True

    def clear_and_flush(self) -> None:
        with self._lock:
            self._epochs, self._offsets = [], []
            self._track()
            self._write()

    def clear(self) -> None:
        """Forget every entry in memory only."""
        with self._lock:
            self._epochs, self._offsets = [], []
            self._track()
            self._dirty = True

    # ---- queries ----
    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch (KIP-101, KIP-279): the end offset of an
        epoch is the start of the next larger cached epoch, or the log end offset for the latest.
        A requested epoch below the first cached one is echoed back with the first start offset;
        one above every cached epoch (or an empty cache) gives (-1, -1)."""
        with self._lock:
            epochs = self._epochs
            if requested_epoch == UNDEFINED_EPOCH:
                if not guards.on("M5"):
                    return UNDEFINED_EPOCH, log_end_offset     # KAFKA-6857: the log end offset
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if epochs and epochs[-1] == requested_epoch:
                return requested_epoch, log_end_offset
            higher = bisect.bisect_right(epochs, requested_epoch)
            if higher == len(epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return requested_epoch, self._offsets[0]
            return epochs[higher - 1], self._offsets[higher]

    @property
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets)]

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return EpochEntry(self._epochs[-1], self._offsets[-1]) if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return EpochEntry(self._epochs[0], self._offsets[0]) if self._epochs else None

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The epoch before the latest one, or with `epoch` the greatest cached epoch below it."""
        if epoch is None:
            with self._lock:
                return self._epochs[-2] if len(self._epochs) >= 2 else None
        entry = self.previous_entry(epoch)
        return entry.epoch if entry else None

    def previous_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            i = bisect.bisect_left(self._epochs, epoch)
            return EpochEntry(self._epochs[i - 1], self._offsets[i - 1]) if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        with self._lock:
            i = bisect.bisect_right(self._epochs, epoch)
            return self._epochs[i] if i < len(self._epochs) else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            i = bisect.bisect_left(self._epochs, epoch)
            if i < len(self._epochs) and self._epochs[i] == epoch:
                return EpochEntry(epoch, self._offsets[i])
            return None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at `offset` was written in; None where Kafka returns empty."""
        with self._lock:
            i = bisect.bisect_right(self._offsets, offset)
            return self._epochs[i - 1] if i > 0 else None

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """The entries as they would be after truncate_from_start(start) (when start >= 0) and
        truncate_from_end(end), without changing the cache."""
        copy = LeaderEpochCache(None)
        with self._lock:
            copy.restore(list(zip(self._epochs, self._offsets)))
        if start_offset >= 0:
            copy.truncate_from_start(start_offset)
        copy.truncate_from_end(end_offset)
        return copy.entries

    def check_invariants(self) -> None:
        """Raise AssertionError unless epochs and start offsets both strictly increase (I8's
        shape; for model-based tests, after every step)."""
        with self._lock:
            epochs, offsets = list(self._epochs), list(self._offsets)
        assert len(epochs) == len(offsets), (epochs, offsets)
        assert all(a < b for a, b in zip(epochs, epochs[1:])), f"epochs not increasing: {epochs}"
        assert all(a < b for a, b in zip(offsets, offsets[1:])), f"start offsets not increasing: {offsets}"
        assert all(e >= 0 for e in epochs) and all(o >= 0 for o in offsets), (epochs, offsets)
        assert self.latest_epoch == (epochs[-1] if epochs else None), (self.latest_epoch, epochs)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path!r}, entries={self.entries})"
