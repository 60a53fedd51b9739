"""Loading a partition directory: Kafka's LogLoader, with the per-segment recovery decision as
one table (docs/kafka-formats.md 5.2-5.5).

The loader walks the `.log` files in offset order and, for each segment, looks up what to do in
DECISIONS from four facts:

  marker    "clean" when the log dir had a clean shutdown, else "unclean";
  place     "candidate" for the segment holding the recovery point and every later one (Kafka's
            LogSegments.values(recoveryPoint, MAX): what an unclean open recovers), "below" for
            a segment wholly below the recovery point;
  index     "ok" or "damaged" (a missing index file, a length that is not whole entries, entries
            out of order or outside the segment, a file longer than segment_index_bytes, a hint
            that points at the wrong batch);
  headers   "ok" or "damaged": the batch headers the open walks (plog_segment_load, from the last
            index hint to the end) are consistent; "*" where the open does not look.

  | marker  | place     | index   | headers | action        |
  |---------|-----------|---------|---------|---------------|
  | unclean | candidate | *       | *       | recover       |
  | *       | *         | ok      | ok      | trust         |
  | *       | *         | damaged | *       | rebuild-index |
  | *       | *         | ok      | damaged | refuse        |

  trust          load from the indexes, nothing rewritten;
  recover        Kafka's LogSegment.recover: validate every batch (size, CRC, offsets), rebuild
                 both indexes, cut the .log at the first invalid batch; when bytes were cut, every
                 later segment goes too (they are candidates as well: above the recovery point);
  rebuild-index  scan every batch (size, CRC, offsets) and rebuild the indexes, never cutting: a
                 damaged batch found by the scan turns the action into refuse;
  refuse         the partition does not open: CorruptSegmentError names the file, the byte
                 position and the offset of the first damaged batch; nothing is deleted or cut.
                 With recover_mode="force" (the user's explicit choice, `storage recover --force`)
                 the segment is cut there instead, every later segment is deleted, and
                 `recovery_report` says exactly what went.

recover_mode="scan" (what `storage recover` uses) also reads every trusted segment in full and
refuses one that recovery would cut.  Whether a segment is damaged is decided in one place, for
the loader, `storage recover` and `storage verify` alike: `_scan` (plog_scan_buffer, the scan
plog_segment_recover cuts by), offline through `scan_log_file`.

After a clean shutdown (recover_mode "strict", LogConfig.sealed_segment_check "first_use", the
default) every sealed segment whose index files are listed is left unopened (OnDiskSegment) and
looked up in the table at its first use instead (`check_on_first_use`, marker clean): trusted,
its index rebuilt, or refused with CorruptSegmentError from the call that used it, nothing
changed -- Kafka does not look at such segments at the open either (KAFKA-7283).

Segments that do not abut (an offset gap between one segment's last batch and the next one's
base offset) are legal -- follower appends with gaps and compacted topics make them -- and are
kept, as Kafka keeps them.  Damage below the recovery point is never repaired silently.

Leftovers are removed first (`.deleted`, `.cleaned`, `.swap` files, index files without a
`.log`, a `leader-epoch-checkpoint.tmp`); names that are not Kafka segment names are ignored.
"""
from __future__ import annotations

import enum
import functools
import logging
import os
import struct

from ..core import errors, guards
from ..core._native import ffi, lib
from ..core.clock import wall_ms
from ..core.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_base,
    segment_name,
)
from ..core.records import BATCH_OVERHEAD, LOG_OVERHEAD, iter_batches
from . import producer as _producer
from .epoch import CHECKPOINT_FILE
from .segment import OnDiskSegment, ScanReport, Segment

RECOVER_MODES = ("strict", "scan", "force")
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX)
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_CANDIDATE_SUFFIXES = (*_LEFTOVER_SUFFIXES, SWAP_SUFFIX, CHECKPOINT_FILE + ".tmp")
_log = logging.getLogger(__name__)


class Action(enum.Enum):
    TRUST = "trust"
    RECOVER = "recover"
    REBUILD_INDEX = "rebuild-index"
    REFUSE = "refuse"


# (marker, place, index, headers) -> action; the first matching row wins ("*" matches anything).
DECISIONS: tuple[tuple[str, str, str, str, Action], ...] = (
    ("unclean", "candidate", "*", "*", Action.RECOVER),
    ("*", "*", "ok", "ok", Action.TRUST),
    ("*", "*", "damaged", "*", Action.REBUILD_INDEX),
    ("*", "*", "ok", "damaged", Action.REFUSE),
)


@functools.lru_cache(maxsize=None)      # 4 small facts: asked once per segment at every open
def decide(marker: str, place: str, index: str, headers: str) -> Action:
    """The action DECISIONS gives for one segment."""
    for row_marker, row_place, row_index, row_headers, action in DECISIONS:
        if all(row in ("*", fact) for row, fact in ((row_marker, marker), (row_place, place),
                                                     (row_index, index), (row_headers, headers))):
            return action
    raise AssertionError(f"no decision for {(marker, place, index, headers)}")


def list_or_create(seam, path: str) -> tuple[list[str], set[str]]:
    """A partition dir's (names, directories among them), the dir created when missing."""
    try:
        return seam.list_entries(path)
    except FileNotFoundError:
        seam.mkdir(path)
        return seam.list_entries(path)


def remove_leftovers(seam, path: str, listing: tuple[list[str], set[str]] | None = None) -> tuple[list[int], set[str]]:
    """Remove what an interrupted delete or checkpoint write left, finish or undo an
    interrupted compaction swap (Kafka's LogLoader: `.cleaned` files go, and with them every
    `.swap` file at or above the lowest of them -- that round is undone; the other `.swap`
    files replace the segment files in their range and take their final names); return the
    `.log` base offsets in order and the names left in the dir.  `listing`: the dir's
    (names, dirs) when the caller has just listed it."""
    names, dirs = listing or seam.list_entries(path)
    # What this step may remove or finish, in one pass: most dirs have none of it.
    candidates = [n for n in names if n.endswith(_CANDIDATE_SUFFIXES) and n not in dirs]
    removed = False
    if candidates:
        lowest_cleaned = min((segment_base(n) for n in candidates if n.endswith(CLEANED_SUFFIX)
                              and segment_base(n) is not None), default=None)
        for name in candidates:
            undone_swap = name.endswith(SWAP_SUFFIX) and lowest_cleaned is not None and \
                (segment_base(name) is None or segment_base(name) >= lowest_cleaned)
            if name.endswith(_LEFTOVER_SUFFIXES) or name == CHECKPOINT_FILE + ".tmp" or undone_swap:
                seam.unlink(os.path.join(path, name))
                removed = True
        if removed:
            names, dirs = seam.list_entries(path)
        swaps = [n for n in names if n.endswith(SWAP_SUFFIX) and n not in dirs]
        if swaps:
            _finish_swap(seam, path, swaps, names)
            names, dirs = seam.list_entries(path)
            removed = True
    logs, indexes = [], []
    for name in names:
        if name.endswith(LOG_SUFFIX):
            base = segment_base(name, LOG_SUFFIX)
            if base is not None and name not in dirs:
                logs.append(base)
        elif name.endswith(_INDEX_SUFFIXES) and name not in dirs:
            indexes.append(name)
    logs.sort()
    listed = set(names)
    log_set, files = None, listed - dirs
    for name in indexes:   # index files without their .log
        if name.partition(".")[0] + LOG_SUFFIX in files:
            continue        # (the common case, without parsing the name)
        base = segment_base(name)
        if log_set is None:
            log_set = set(logs)
        if base is not None and base not in log_set:
            seam.unlink(os.path.join(path, name))
            removed = True
    return logs, set(seam.listdir(path)) if removed else listed


def _finish_swap(seam, path: str, swaps: list[str], names: list[str]) -> None:
    """The swap files are complete (flushed before any was renamed `.swap`): the files of the
    old segments in [lowest swap base, highest swap next offset) go, as in Kafka, and the swap
    `.log` files take their final names.  Stricter than Kafka: the index files of a swapped
    segment (swap or final: after a crash a final name may still hold the old segment's index,
    or the range rule may have removed the new one) are removed too, so the load rebuilds its
    offset, time and transaction indexes from the log."""
    low, high = None, None
    for name in swaps:
        base = segment_base(name)
        if base is None or name[:-len(SWAP_SUFFIX)] != segment_name(base) + LOG_SUFFIX:
            continue
        data = seam.read_file(os.path.join(path, name))
        end = base
        for batch in iter_batches(data, verify=False, source=os.path.join(path, name)):
            end = batch.last_offset + 1
        low = base if low is None else min(low, base)
        high = end if high is None else max(high, end)
    if low is not None:
        for name in names:
            base = segment_base(name)
            if not name.endswith(SWAP_SUFFIX) and base is not None and low <= base < high:
                seam.unlink(os.path.join(path, name))
    swapped = {segment_base(n) for n in swaps} - {None}
    for name in seam.listdir(path):
        if segment_base(name) in swapped and name.endswith(_INDEX_SUFFIXES):
            seam.unlink(os.path.join(path, name))
    for name in swaps:
        if segment_base(name) is not None and name[:-len(SWAP_SUFFIX)].endswith(LOG_SUFFIX):
            seam.rename(os.path.join(path, name), os.path.join(path, name[:-len(SWAP_SUFFIX)]))
        else:
            seam.unlink(os.path.join(path, name))
    seam.fsync_dir(path)


def is_candidate(i: int, bases: list[int], recovery_point: int) -> bool:
    """The segment holding the recovery point and every later one (LogSegments.values)."""
    return i == len(bases) - 1 or bases[i + 1] > recovery_point


def _damage_error(segment: Segment, report, what: str) -> errors.CorruptSegmentError:
    return errors.CorruptSegmentError(
        f"{what}: {report.stop_reason or 'invalid batch'}; below the recovery point nothing is repaired "
        f"silently (open with recover_mode='force', or run `storage recover --force`, to cut it there)",
        file=segment.log_path, position=report.stop_position, offset=report.stop_offset)


def _scan(pointer, size: int, base_offset: int):
    """The recovery verdict on a segment's bytes: plog_scan_buffer with the checks
    plog_segment_recover makes (sizes, magic, CRC, offsets within the segment), nothing changed.
    valid_bytes < size is exactly what recovery would cut.  The one implementation of "is this
    segment damaged": the loader's refusals, `storage recover` and `storage verify` all ask it."""
    scan = ffi.new("plog_scan *")
    scan.base_offset = base_offset
    scan.check_crc = 1
    lib.plog_scan_buffer(pointer if size else ffi.NULL, size, scan, ffi.NULL)
    return ScanReport(scan, [])


def _dry_scan(segment: Segment):
    """Scan every batch of an open segment without changing anything (see _scan)."""
    return _scan(segment.log_pointer() if segment.size else ffi.NULL, segment.size, segment.base_offset)


SCAN_WINDOW = 2 << 20       # a window that stays in cache: the scan runs as fast as over a mapping
_BATCH_LENGTH = struct.Struct(">i")       # a batch's length field, after its base offset


def first_window(fd: int, window: int) -> int:
    """The first read of a file read in windows: `window`, at least a batch header (so that C
    has judged the length and magic of a batch it calls partial), and one byte past a file
    smaller than that (that read finds the end: one small buffer, one call)."""
    return min(max(window, BATCH_OVERHEAD), os.fstat(fd).st_size + 1)


def whole_batch_window(fd: int, data, origin: int) -> int | None:
    """`data`, read at `origin`, is a full window holding no whole batch (C found its length and
    magic sound): the window that holds that batch whole, or None when it runs past the file's
    end (a partial tail)."""
    need = _BATCH_LENGTH.unpack_from(data, 8)[0] + LOG_OVERHEAD
    return None if origin + need > os.fstat(fd).st_size else need


def scan_log_file(path: str, base_offset: int | None = None, *, window: int = SCAN_WINDOW) -> ScanReport:
    """The recovery verdict (see _scan) on a `.log` file read offline; the base offset defaults
    to the one in the file name.  Read by pread, `window` bytes at a time (a batch larger than
    that whole), never mapped: the file may be a live broker's, and its truncation under a
    mapping would kill this process with SIGBUS -- here the scan ends where the file now ends."""
    if base_offset is None:
        base_offset = segment_base(os.path.basename(path), LOG_SUFFIX)
        if base_offset is None:
            raise ValueError(f"{path}: not a segment file name")
    scan = ffi.new("plog_scan *")
    scan.base_offset = base_offset
    scan.check_crc = 1
    last_epoch = ffi.new("int32_t *")
    lib.plog_scan_start(scan, last_epoch)
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        window = first_window(fd, window)
        buffer = bytearray(window)          # one buffer, read into again
        while True:
            origin = scan.valid_bytes
            if len(buffer) < window:
                buffer = bytearray(window)
            length = os.preadv(fd, [memoryview(buffer)[:window]], origin)
            more = length == window
            with ffi.from_buffer(buffer) as pointer:
                lib.plog_scan_window(pointer, length, origin, more, scan, last_epoch)
                if more and not scan.stop and scan.valid_bytes == origin:
                    # One batch larger than the window: read it whole, unless it runs past the end.
                    window = whole_batch_window(fd, buffer, origin)
                    if window is None:
                        lib.plog_scan_window(pointer, length, origin, 0, scan, last_epoch)
                        break
                    continue
            if scan.stop or not more:
                break
    return ScanReport(scan, [])


def verdict(segment: Segment, marker: str, place: str, index_missing: bool = False):
    """(action, index problem, damage) for a segment the open does not recover outright: its
    indexes checked (with every entry after an unclean shutdown) and its headers walked from
    the last index hint; `damage` is the CorruptSegmentError to refuse it with (REFUSE, or
    REBUILD_INDEX over batches a scan finds damaged), else None."""
    problem = "index file missing" if index_missing else segment.index_problem(thorough=marker == "unclean")
    headers = "*"
    if problem is None:
        try:
            segment.load()
            headers = "ok"
            if segment.index_suspect:
                problem = "an offset-index entry points at the wrong batch"
        except errors.CorruptRecordError as exc:
            headers = "damaged"
            header_error = exc
    action = decide(marker, place, "damaged" if problem else "ok", headers)
    damage = None
    if action is Action.REFUSE:
        damage = _damage_error(segment, _dry_scan(segment), f"batch headers are damaged ({header_error.reason})")
    elif action is Action.REBUILD_INDEX:
        scan = _dry_scan(segment)
        if scan.valid_bytes != segment.size:
            damage = _damage_error(segment, scan, "a segment whose index had to be rebuilt is damaged")
    return action, problem, damage


def check_on_first_use(segment: Segment) -> None:
    """The open's decision for a sealed segment a clean open left unopened (OnDiskSegment),
    made at its first use: trusted, its indexes rebuilt from its batches (every batch scanned
    valid first; nothing is cut), or refused with CorruptSegmentError (nothing changed)."""
    action, problem, damage = verdict(segment, "clean", "below")
    if damage is not None:
        raise damage
    if action is Action.REBUILD_INDEX:
        segment.reopen_active()
        segment.recover(check_crc=True)
        segment.seal()
        segment.flush()             # as the load's rebuild (_recover) does
        _log.warning("%s: index rebuilt at first use: %s", segment.log_path, problem)
        if segment.home.report is not None:
            segment.home.report.append((segment.base_offset, 0, f"rebuilt at first use: {problem}"))


OnDiskSegment.first_use_check = staticmethod(check_on_first_use)   # (segment.py cannot import this module)


class Loader:
    """One load of a partition's directory into its LocalLog (used by PartitionLog.__init__):
    `load` the segments, then `offsets` (Kafka's LoadedLogOffsets) and `recovered`."""

    def __init__(self, local, producer_state, seam, recovery_point: int, clean: bool, recover_mode: str):
        if recover_mode not in RECOVER_MODES:
            raise ValueError(f"recover_mode must be one of {RECOVER_MODES}")
        self.local = local
        self.producer_state = producer_state
        self.recovery_report = local.recovery_report
        self.recovered: list[tuple] = []   # (base, end, epoch changes, producer batches) a recovered segment
        self.seam = seam
        self.recovery_point = recovery_point
        self.clean = clean
        self.force = recover_mode == "force"
        self.scan_trusted = recover_mode == "scan"
        self._missing: list[str] = []      # index files of the current segment that did not exist

    def _open_segment(self, base: int, active: bool) -> Segment:
        return Segment(self.local.segment_home, base, create=False, active=active)

    def load(self, listing: tuple[list[str], set[str]] | None = None) -> None:
        local = self.local
        logs, names = remove_leftovers(self.seam, local.path, listing)
        self.producer_state.use_listing(names)          # its snapshots: no second listing of the dir
        marker = "clean" if self.clean else "unclean"
        # After a clean shutdown the sealed segments are opened at their first use (Kafka's
        # KAFKA-7283), unless the config or the recover mode (scan, force) asks to look now.
        defer = self.clean and not (self.force or self.scan_trusted) and local.config.sealed_segment_check == "first_use"
        for i, base in enumerate(logs):
            place = "candidate" if is_candidate(i, logs, self.recovery_point) else "below"
            stem = segment_name(base)
            index_missing = stem + INDEX_SUFFIX not in names
            last = i == len(logs) - 1
            if defer and not last and not index_missing and stem + TIME_INDEX_SUFFIX in names:
                local.add_segment(OnDiskSegment.of(local.segment_home, base))
                continue
            self._missing = [os.path.join(local.path, stem + suffix) for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                             if stem + suffix not in names]
            action = decide(marker, place, "*", "*") if (marker, place) == ("unclean", "candidate") else None
            # The last segment is opened active (its index entries read into memory), as it
            # stays: not mapped sealed first and copied out at the unseal.
            segment = self._open_segment(base, active=action is Action.RECOVER or index_missing or last)
            local.add_segment(segment)
            if action is None:
                action, problem, damage = verdict(segment, marker, place, index_missing)
                if action is Action.TRUST:
                    if self.scan_trusted:
                        # The offline recovery reads everything anyway: a damaged batch below the
                        # recovery point is refused even where the open would not have looked.
                        scan = _dry_scan(segment)
                        if scan.valid_bytes != segment.size:
                            self._release()
                            raise _damage_error(segment, scan, "a segment the open trusts is damaged")
                    continue
                if damage is not None and not self.force:
                    self._release()
                    raise damage
                if not segment.active:
                    segment.reopen_active()
                if action is Action.REBUILD_INDEX:
                    self.recovery_report.append((base, 0, f"rebuilt: {problem}"))
            if self._recover(i, logs, segment):
                break
        if local.segments:
            last = local.segments[-1]
            last.unseal()
            if segment_name(last.base_offset) + TXN_INDEX_SUFFIX not in names:
                last.txn_index_absent()          # the producer-state rebuild asks for it

    def offsets(self, log_start_offset: int | None, log_start_trusted: bool, epoch_cache) -> tuple[int, int, int]:
        """After `load`: (log start offset, log end offset, recovery point) of the loaded log
        (Kafka's LoadedLogOffsets), given the checkpointed log start offset.  A log that ends
        below it is dropped (and restarted empty there), as Kafka does."""
        local = self.local
        segments = local.segments
        start = segments[0].base_offset if segments else 0
        if log_start_offset is not None:
            start = max(start, log_start_offset)
        leo = segments[-1].next_offset if segments else start
        if leo < start and local.size_bytes and not self.force and not log_start_trusted:
            # Kafka drops every segment here, and for our own checkpoint that is right (a
            # batch-granular truncation inside the batch holding the log start leaves only data
            # below it).  A value imported from a Kafka checkpoint file may be wrong, though: it
            # must not delete the log without the user's explicit choice.
            local.forget_segments()
            raise errors.CorruptSegmentError(
                f"the imported log start offset {start} is above the log end offset {leo}: refusing to "
                f"delete every segment (open with recover_mode='force' to do what Kafka does)", file=local.path)
        if leo < start:
            # Kafka: the log ends below the checkpointed start offset -> drop everything.
            local.forget_segments(delete=True)
            epoch_cache.clear_and_flush()
        if not segments:
            local.new_segment(start)
            leo = start
        return start, leo, max(leo if self.clean else min(self.recovery_point, leo), start)

    def _recover(self, i: int, logs: list[int], segment: Segment) -> bool:
        """Kafka's LogSegment.recover of one segment; True when it cut and later segments went."""
        local = self.local
        base = segment.base_offset
        truncated, report = segment.recover(check_crc=guards.on("M24"))
        segment.seal()
        self.recovered.append(recovered_entry(segment, report))
        metrics = local.metrics
        metrics.recoveries += 1
        if not truncated:
            return False
        metrics.recovered_bytes_cut += truncated
        metrics.recovered_segments_deleted += len(logs) - i - 1
        self.recovery_report.append((base, truncated, report.stop_reason or ""))
        _log.warning("%s: recovery cut %d bytes at byte position %d (offset %d): %s; the log now ends at offset "
                     "%d%s", segment.log_path, truncated, report.stop_position, report.stop_offset,
                     report.stop_reason or "an invalid batch", segment.next_offset,
                     f"; {len(logs) - i - 1} later segments deleted" if logs[i + 1:] else "")
        # Kafka: after the first invalid batch nothing is trusted; later segments go.  Highest
        # first, and durably before anything else happens: a crash during recovery must not
        # bring a later segment back behind the cut one.
        for later in reversed(logs[i + 1:]):
            doomed = self._open_segment(later, active=False)
            _log.warning("%s: deleted by recovery: it follows the invalid batch at offset %d", doomed.log_path,
                         report.stop_offset)
            doomed.delete()
            self.recovery_report.append((later, -1, f"deleted: after the first invalid batch at offset "
                                                    f"{report.stop_offset} in segment {base}"))
        if logs[i + 1:]:
            local.flush_dir()
        segment.flush()
        return True

    def _release(self) -> None:
        """Before refusing: close what was opened and remove the empty index files the open of
        the refused segment created, so a refused open changes no file."""
        self.local.forget_segments()
        for path in self._missing:
            if self.seam.exists(path) and self.seam.file_size(path) == 0:
                self.seam.unlink(path)


def load(log, seam, listing, recovery_point: int, log_start_offset: int | None, log_start_trusted: bool,
         clean: bool, recover_mode: str) -> None:
    """Kafka's LogLoader.load for a PartitionLog (its producer state and epoch cache made, its
    LocalLog's lock held): the segments into the LocalLog (Loader), the log's offsets, the epoch
    cache repaired and the producer state rebuilt from its snapshots and the log."""
    local = log.local
    loader = Loader(local, log.producer_state, seam, recovery_point, clean, recover_mode)
    loader.load(listing)
    if not clean and loader.recovered and not any(cut > 0 for _base, cut, _why in loader.recovery_report):
        _log.info("%s: recovery after an unclean shutdown checked %d segment(s) from offset %d: nothing was cut",
                  local.path, len(loader.recovered), recovery_point)
    start, log.log_end_offset, local.recovery_point = loader.offsets(log_start_offset, log_start_trusted,
                                                                      log.epoch_cache)
    log.log_start_offset = log.high_watermark = start
    # Kafka's load resizes the active segment's indexes (creating their files); LazyIndex after.
    if local.active_segment.attach_indexes():
        local.dir_dirty = True
    repair_epoch_cache(log, loader.recovered)
    _producer.remove_stray_and_rebuild(log.producer_state, log, wall_ms(), loader.recovered)


# ---- the epoch cache after a load ------------------------------------------------------------

def recovered_entry(segment: Segment, report) -> tuple:
    """What the load keeps of a recovered segment: (base, end, its epoch changes -- applied by
    _reconcile_epochs --, how many batches with a producer id it holds)."""
    epochs = report.epochs if report.epoch_count <= len(report.epochs) else segment.scan_epochs()
    return segment.base_offset, segment.next_offset, list(epochs), report.producer_batch_count

def _reconcile_epochs(log, recovered: list[tuple]) -> None:
    """LogSegment.recover assigns a batch's epoch when it is newer than the cache's latest.
    Stricter than Kafka: when the cache's entries over a recovered segment are not exactly
    the epoch changes of its batches (the checkpoint describes data a crash took back, or
    older data a crash brought back), the batches win: the cache is cut at that segment and
    rebuilt from the batches of it and every later segment."""
    if not recovered:
        return
    cache = log.epoch_cache
    lowest = 0 if guards.on("M21") else 1

    def changes_of(epochs, floor_epoch):
        out, latest = [], floor_epoch
        for epoch, offset in epochs:
            if epoch >= lowest and (latest is None or epoch > latest):
                out.append((epoch, offset))
                latest = epoch
        return out

    for base, end, epochs, _producers in recovered:
        before = cache.epoch_for_offset(base - 1) if base > 0 else None
        expected = changes_of(epochs, before)
        cached = [tuple(e) for e in cache.entries if base <= e.start_offset < min(end, log.log_end_offset)]
        if cached != expected and not (log.config.compacts and _agrees_compacted(log, base, lowest)):
            cache.truncate_from_end(base)
            for segment in log.segments:
                if segment.base_offset >= base:
                    for epoch, offset in changes_of(segment.scan_epochs(), cache.latest_epoch):
                        cache.assign(epoch, offset)
            break
    for _base, _end, epochs, _producers in recovered:   # Kafka's rule for the rest
        for epoch, offset in changes_of(epochs, cache.latest_epoch):
            cache.assign(epoch, offset)

def _agrees_compacted(log, base: int, lowest: int) -> bool:
    """A compacted segment whose epoch changes differ from the cache's only because the cleaner
    removed batches (an epoch's first batches, or all of them): every batch still carries the
    epoch the cache gives its offset.  Then the cache stays -- rebuilding it from the batches
    would move an epoch's start past records a follower must truncate (OffsetForLeaderEpoch
    would answer a later end offset for the epoch before)."""
    segment = next(s for s in log.segments if s.base_offset == base)
    for batch in iter_batches(segment.view(), verify=False, source=segment.log_path):
        epoch = batch.partition_leader_epoch
        if epoch >= lowest and log.epoch_cache.epoch_for_offset(batch.base_offset) != epoch:
            return False
    return True


def repair_epoch_cache(log, recovered: list[tuple]) -> None:
    """The epoch cache after a load, as Kafka's LogLoader leaves it: recovered segments' epochs
    (Loader.recovered) reconciled, a malformed checkpoint rebuilt from the batches, cut at the
    log end and start."""
    _reconcile_epochs(log, recovered)
    cache = log.epoch_cache
    if cache.load_error is not None:
        # A malformed checkpoint is never trusted: rebuild it from every batch.
        log.recovery_report.append((-1, 0, f"leader-epoch-checkpoint rebuilt: {cache.load_error}"))
        for segment in log.segments:
            for epoch, offset in segment.scan_epochs():
                if epoch >= 0 and (cache.latest_epoch is None or epoch > cache.latest_epoch):
                    cache.assign(epoch, offset)
        cache.flush()
        cache.load_error = None
    if guards.on("M20"):
        cache.truncate_from_end(log.log_end_offset)
    cache.truncate_from_start(log.log_start_offset)
    earliest = cache.earliest_entry
    if earliest is not None and earliest.start_offset > log.log_start_offset:
        # Batches between the log start and the earliest entry: a crash came between moving
        # the cache's start up and checkpointing the log start offset.  Give them their epochs.
        head = []
        for batch in log.batches(log.log_start_offset):
            if batch.base_offset >= earliest.start_offset:
                break
            epoch = batch.partition_leader_epoch
            if batch.magic >= 2 and epoch >= 0 and (not head or epoch > head[-1][0]):
                head.append((epoch, max(batch.base_offset, log.log_start_offset)))
        cache.restore_head(head)
