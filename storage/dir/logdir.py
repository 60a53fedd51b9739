"""`LogDir`: one broker log directory -- many `<topic>-<partition>/` logs, one metadata store,
the clean-shutdown marker, and loading with recovery (docs/kafka-formats.md 5).

Load sequence (`LogDir.open`):
  1. the clean-shutdown marker `.kafka_cleanshutdown` is read and deleted at once (and the
     directory fsync'd), so a crash while loading makes the next open unclean (KAFKA-10471);
  2. the metadata store (`storage.mdb`, LMDB) gives each partition's recovery point, log start
     offset and high watermark; a real Kafka log dir without one has its
     `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
     `replication-offset-checkpoint` imported (unreadable ones count as empty, as in Kafka);
  3. leftovers of deleted partitions (`*-delete` dirs) are removed;
  4. every partition dir is opened by `PartitionLog` with those values: after an unclean
     shutdown every segment from the one holding the recovery point on is recovered (one C
     scan per segment), the log is cut at the first invalid batch and later segments go, and
     the epoch cache is repaired (docs/kafka-formats.md 5.2-5.5).

Recovery decision table (a row per partition, tested in tests/dir/test_logdir.py):
  | marker | offsets known | what happens                                              |
  | yes    | yes           | no scan; indexes trusted unless missing                   |
  | yes    | no            | no scan (Kafka: a clean dir is trusted)                   |
  | no     | yes           | recover segments from the one holding the recovery point  |
  | no     | no            | recover every segment (recovery point 0)                  |

Invariants: the recovered log is a byte prefix of what was written and ends on a batch
boundary; everything below a recovery point that reached the store survives; the marker
is written only after every log was closed (flushed) and the store committed.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import fcntl
import gc
import json
import os
import re
import threading
import uuid

from ..core import checkpoint, errors, guards
from ..core import io as _io
from ..core.clock import monotonic_ms, wall_ms
from ..core.config import LogConfig
from ..core.failure import ClosedOnExit, LogDirFailureChannel, guarded
from ..log import cleaner as _cleaner
from ..log.metrics import DirMetrics, LogMetrics
from ..log.partition import PartitionLog
from ..log.segment import open_segments
from .background import Background, BackgroundConfig
from .meta import FILE_NAME as META_FILE
from .meta import MetaStore, PartitionOffsets

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_SPECIAL_SUFFIXES = ("-delete", "-future", "-stray")


LOCK_FILE = ".lock"
# This process's locks, by lock-file path: (descriptor, the LogDir holding it).  flock locks
# belong to an open file description, so a second open in this process must reuse the first
# one's descriptor; it supersedes that LogDir (as a simulated crash abandons it).
_held_locks: dict[str, tuple[int, "LogDir"]] = {}
_held_locks_lock = threading.Lock()


def lock_holder(lock_path: str) -> str:
    """Who holds a `.lock` file, as far as it tells: the process /proc/locks shows holding a
    lock on it (a Kafka broker's POSIX lock, our flock), else the pid its holder wrote into it
    when it locked (ours do; Kafka's lock file is empty), and that process's command line."""
    pid = _proc_locks_holder(lock_path)
    if pid is None:
        try:
            with open(lock_path, "rb") as f:
                pid = int(f.read(32).split()[0])
        except (OSError, ValueError, IndexError):
            return "another process (its .lock file records no pid)"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = " ".join(f.read(4096).replace(b"\0", b" ").decode(errors="replace").split())
    except OSError:
        command = ""
    return f"process {pid}" + (f" ({command[:200]})" if command else "")


def _proc_locks_holder(lock_path: str) -> int | None:
    """The pid /proc/locks shows holding a flock or POSIX lock on `lock_path`, or None."""
    try:
        inode = os.stat(lock_path).st_ino
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] in ("FLOCK", "POSIX", "OFDLCK") and fields[4].isdigit() \
                and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4])
    return None


def _take_lock_file(path: str, directory: str, why: str = "", *, posix: bool = False) -> int:
    """flock `path` exclusively without waiting and write this process's pid into it (so a
    refused opener can name the holder); a held lock is LogDirLockedError naming the holder.
    `posix`: a POSIX record lock too, which is what a Kafka broker holds (Java's
    FileChannel.tryLock; Linux keeps flock and POSIX locks apart) -- for short-lived tools only,
    since a process loses its POSIX locks on a file when it closes any descriptor of it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if posix:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise errors.LogDirLockedError(f"the log dir is locked by {lock_holder(path)}, the holder of its "
                                           f".lock file{why}", file=directory) from None
        raise errors.StorageIOError(f"cannot lock the log dir: {exc.strerror}", errno=exc.errno,
                                    file=path) from exc
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass        # the pid is a courtesy to a refused opener; the flock is the lock
    return fd


@contextlib.contextmanager
def locked_for_tool(directory: str, tool: str):
    """An offline tool that writes a log dir holds its `.lock` as our broker does (flock) and as
    Kafka's does (a POSIX lock): a dir a broker, ours or Kafka's, or another tool has open is
    refused with a LogDirLockedError naming the holder."""
    path = os.path.realpath(os.path.join(directory, LOCK_FILE))
    fd = _take_lock_file(path, directory, f"; {tool} writes the log dir: for a stopped broker only", posix=True)
    try:
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def hold_lock(directory) -> None:
    """Take a log dir's `.lock` before the LogDir opens: a broker takes it before anything else
    it does at start-up (registering with a controller moves the broker's epoch and fences the
    broker already running on the dir).  LogDir.open of this dir in this process adopts it;
    release_held_lock gives it back when no LogDir did."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    path = os.path.realpath(os.path.join(directory, LOCK_FILE))
    with _held_locks_lock:
        if path not in _held_locks:
            _held_locks[path] = (_take_lock_file(path, directory), None)


def release_held_lock(directory) -> None:
    """Give back a lock hold_lock took and no LogDir adopted (a LogDir releases its own)."""
    path = os.path.realpath(os.path.join(os.fspath(directory), LOCK_FILE))
    with _held_locks_lock:
        held = _held_locks.get(path)
        if held is None or held[1] is not None:
            return
        del _held_locks[path]
    try:
        fcntl.flock(held[0], fcntl.LOCK_UN)
    finally:
        os.close(held[0])


def _lock_dir(logdir: "LogDir") -> int:
    """Kafka's `.lock`: one process per log dir (flock, exclusive, non-blocking)."""
    path = os.path.realpath(os.path.join(logdir.path, LOCK_FILE))
    with _held_locks_lock:
        held = _held_locks.get(path)
        if held is not None:
            fd, previous = held
            if previous is not None and previous is not logdir and not previous.closed:
                previous.failure_channel.fail(
                    errors.LogDirLockedError("superseded by a newer LogDir.open of this dir in this process",
                                             file=previous.path), "superseded", announce=False)
                if previous.meta is not None:
                    previous.meta.close()    # LMDB allows one environment per file and process
            _held_locks[path] = (fd, logdir)
            return fd
        fd = _take_lock_file(path, logdir.path)
        _held_locks[path] = (fd, logdir)
        return fd


def _unlock_dir(logdir: "LogDir") -> None:
    path = os.path.realpath(os.path.join(logdir.path, LOCK_FILE))
    with _held_locks_lock:
        held = _held_locks.get(path)
        if held is None or held[1] is not logdir:
            return              # superseded: the newer LogDir holds the lock now
        del _held_locks[path]
        fd = held[0]
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a `<topic>-<partition>` dir name, None for anything else."""
    if name.endswith(_SPECIAL_SUFFIXES):
        return None
    match = _PARTITION_DIR.match(name)
    return (match["topic"], int(match["partition"])) if match else None


@contextlib.contextmanager
def _collector_paused():
    """The cyclic garbage collector off while the dir's partitions open: the open makes tens of
    long-lived objects a partition and no garbage cycles, and each collection the allocations
    trigger walks every object made so far (about 30 % of a 2,000-partition open).  Restored
    to what it was, even on failure; a collection can run when it is back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_clean_shutdown_epoch(path, seam=None) -> int:
    """The broker epoch the dir's clean-shutdown marker recorded, -1 without a (readable)
    marker; reads only, so a broker can register (KIP-966) before it opens the dir."""
    seam = seam or _io.current()
    marker = os.path.join(os.fspath(path), CLEAN_SHUTDOWN_FILE)
    try:
        return int(json.loads(seam.read_file(marker)).get("brokerEpoch", -1))
    except (ValueError, AttributeError, OSError):      # also the marker's absence
        return -1


class LogDir(ClosedOnExit):
    """A broker log directory.  Use `LogDir.open(path, config)` (a context manager)."""

    def __init__(self, path, config: LogConfig | None = None, *, broker_epoch: int = -1,
                 recover_mode: str = "strict", background: bool = False, recovery_threads: int = 1,
                 background_config: BackgroundConfig | None = None,
                 topic_configs: dict[str, LogConfig] | None = None):
        self.path = os.fspath(path)
        # Kafka's topic-level configs: a topic's partitions open with its LogConfig (read when a
        # partition opens; e.g. {"__consumer_offsets": LogConfig(cleanup_policy="compact")}).
        self.topic_configs: dict[str, LogConfig] = dict(topic_configs or {})
        self._background: Background | None = None
        self.background_error: BaseException | None = None
        self.recover_mode = recover_mode
        if not isinstance(recovery_threads, int) or recovery_threads < 1:
            raise ValueError(f"recovery_threads must be an int >= 1, not {recovery_threads!r}")
        # Kafka's num.recovery.threads.per.data.dir: partitions opened on this many threads.
        self.recovery_threads = recovery_threads
        self.config = config or LogConfig()
        self.broker_epoch = broker_epoch
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._partitions_lock = threading.RLock()
        self._closed = False
        self.retention_moves = 0        # retention passes that moved log starts (cleanup_logs)
        # Any I/O failure on this dir takes it, and every partition in it, offline (failure.py).
        self.failure_channel = LogDirFailureChannel(self.path)
        self.recovery_report: dict[tuple[str, int], list] = {}
        # Partitions whose segments below the recovery point are damaged (loader.py: refuse).
        self.unopened: dict[tuple[str, int], errors.StorageError] = {}
        self._imported: set[tuple[str, int]] = set()
        self.meta = None
        seam = _io.current()
        seam.mkdir(self.path)
        self._lock_fd = _lock_dir(self)
        try:
            with _collector_paused():
                self._load(seam)
        except BaseException as exc:
            # A failed open releases what it opened: logs, the metadata store, the lock.
            for log in self._logs.values():
                log.local.release_segments()
            if self.meta is not None:
                self.meta.close()
            _unlock_dir(self)
            if isinstance(exc, OSError) and not isinstance(exc, errors.StorageError):
                # An I/O error of the open itself (the marker's unlink, a directory fsync):
                # the dir is offline, as Kafka marks a dir that fails at startup.
                raise errors.LogDirOfflineError(self.path, exc, operation="open") from exc
            raise
        if background:
            self._background = Background(self, background_config or BackgroundConfig())
            self._background.start()

    def _load(self, seam) -> None:
        marker = os.path.join(self.path, CLEAN_SHUTDOWN_FILE)
        self.had_clean_shutdown = seam.exists(marker)
        # The epoch the clean shutdown recorded (KIP-966).
        self.previous_broker_epoch = read_clean_shutdown_epoch(self.path, seam) if self.had_clean_shutdown else -1
        if self.had_clean_shutdown and guards.on("M23"):
            seam.unlink(marker)
        # The dir is fsynced at every open, not only after removing a marker: a previous
        # incarnation may have died between its unlink of the marker and that fsync, and then
        # the unlink is still only in the page cache -- a later power loss would bring the
        # marker back over data this incarnation wrote, and the next open would trust it
        # (swarm seed 779403: a crash point inside the open).
        seam.fsync_dir(self.path, self._sync_flags)
        imported = {} if seam.exists(os.path.join(self.path, META_FILE)) else self._import_kafka_checkpoints()
        self._imported = set(imported)     # offsets from Kafka's files, not written by this engine
        self.meta = MetaStore(self.path, sync=self.config.fsync)
        stored = {**imported, **self.meta.partitions()}
        self._cleaner_offsets = checkpoint.read_offsets_lenient(os.path.join(self.path, checkpoint.CLEANER_OFFSET_FILE))
        names, dirs = seam.list_entries(self.path)      # one scandir: no stat per name
        keys = []
        for name in sorted(names):
            if name not in dirs:
                continue
            if name.endswith("-delete"):
                _remove_tree(os.path.join(self.path, name))
                continue
            key = parse_partition_dir(name)
            if key is not None:
                keys.append(key)
        self._open_partitions(keys, stored)
        if imported:
            self.checkpoint()
        if self.had_clean_shutdown and not guards.on("M23") and seam.exists(marker):
            seam.unlink(marker)   # the mutation: removed only after loading (KAFKA-10471)

    @classmethod
    def open(cls, path, config: LogConfig | None = None, **kwargs) -> "LogDir":
        return cls(path, config, **kwargs)

    @property
    def _sync_flags(self) -> int:
        return 0 if self.config.fsync else _io.SYNC_NOOP

    def _import_kafka_checkpoints(self) -> dict[tuple[str, int], PartitionOffsets]:
        join = os.path.join
        recovery = checkpoint.read_offsets_lenient(join(self.path, checkpoint.RECOVERY_POINT_FILE))
        starts = checkpoint.read_offsets_lenient(join(self.path, checkpoint.LOG_START_OFFSET_FILE))
        watermarks = checkpoint.read_offsets_lenient(join(self.path, checkpoint.HIGH_WATERMARK_FILE))
        return {key: PartitionOffsets(recovery.get(key, 0), starts.get(key, -1), watermarks.get(key, 0))
                for key in set(recovery) | set(starts) | set(watermarks)}

    def _open_partitions(self, keys: list[tuple[str, int]], stored: dict) -> None:
        """Open the partition dirs found at the open, in order, or on `recovery_threads`
        threads: what the opens wait for in the kernel (reads from a cold page cache, the
        recovery scans in C) overlaps then, while their Python takes turns.  Either way every
        log is registered in key order, a partition damaged below its recovery point stays
        unopened (its files untouched; it says why when asked for) and the others open; any
        other error fails the open, after every log opened so far is registered (and so
        released by the failed open)."""
        if self.recovery_threads == 1 or len(keys) < 2:
            for key in keys:
                try:
                    self._register(key, self._open_log(key, stored.get(key)))
                except errors.CorruptSegmentError as exc:
                    self.unopened[key] = exc
            return
        with concurrent.futures.ThreadPoolExecutor(self.recovery_threads, thread_name_prefix="logdir-open") as pool:
            opening = [(key, pool.submit(self._open_log, key, stored.get(key))) for key in keys]
        failure = None
        for key, future in opening:
            exc = future.exception()
            if exc is None:
                self._register(key, future.result())
            elif isinstance(exc, errors.CorruptSegmentError):
                self.unopened[key] = exc
            elif failure is None:
                failure = exc
        if failure is not None:
            raise failure

    def _open_partition(self, key: tuple[str, int], offsets: PartitionOffsets | None) -> PartitionLog:
        return self._register(key, self._open_log(key, offsets))

    def _open_log(self, key: tuple[str, int], offsets: PartitionOffsets | None) -> PartitionLog:
        topic, partition = key
        return PartitionLog.open(
            os.path.join(self.path, f"{topic}-{partition}"), self.topic_configs.get(topic, self.config),
            recovery_point=offsets.recovery_point if offsets else 0,
            log_start_offset=offsets.log_start_offset if offsets and offsets.log_start_offset >= 0 else None,
            high_watermark=offsets.high_watermark if offsets else None,
            clean_shutdown=self.had_clean_shutdown, failure_channel=self.failure_channel,
            recover_mode=self.recover_mode, log_start_offset_trusted=key not in self._imported)

    def _register(self, key: tuple[str, int], log: PartitionLog) -> PartitionLog:
        log.first_dirty_offset = self._cleaner_offsets.get(key)
        if log.recovery_report:
            self.recovery_report[key] = list(log.recovery_report)
        log.on_recovery_point_lowered = self._store_offsets
        self._logs[key] = log
        return log

    def _store_offsets(self, log: PartitionLog) -> None:
        key = next((k for k, v in self._logs.items() if v is log), None)
        if key is not None and not self._closed:
            self.meta.put_partitions({key: PartitionOffsets(log.recovery_point, log.log_start_offset,
                                                            log.high_watermark)})

    def _ensure_open(self) -> None:
        if self._closed:
            raise errors.LogClosedError("log dir is closed", file=self.path)

    # ---- failure state ----
    @property
    def offline(self) -> bool:
        """True once an I/O failure took this dir offline (see storage/core/failure.py)."""
        return self.failure_channel.offline

    @property
    def failure(self) -> BaseException | None:
        """The first I/O failure on this dir, or None while it is online."""
        return self.failure_channel.first_failure

    def offline_dirs(self) -> list[str]:
        """The log dirs of this LogDir that are offline: [] or [path] (Kafka's offline dirs)."""
        return [self.path] if self.offline else []

    def metrics(self) -> DirMetrics:
        """The engine's counters of every open partition summed (storage/log/metrics.py), and
        what the dir holds now: partitions, segments, bytes, offline, open segments."""
        logs = self._open_logs()
        total = LogMetrics()
        segments = size = 0
        for log in logs:
            total.add(log.metrics)
            segments += len(log.segments)
            size += log.size_bytes
        return DirMetrics(total, len(logs), segments, size, self.offline, len(open_segments))

    # ---- partitions ----
    @guarded
    def partition(self, topic: str, partition: int, create: bool = True) -> PartitionLog:
        """The log of topic-partition, created empty when missing (unless create=False)."""
        self._ensure_open()
        key = (topic, int(partition))
        log = self._logs.get(key)
        if log is not None:
            return log
        with self._partitions_lock:      # two threads creating one partition get one log
            return self._partition_locked(key, topic, partition, create)

    def _partition_locked(self, key, topic, partition, create) -> PartitionLog:
        log = self._logs.get(key)
        if log is not None:
            return log
        if key in self.unopened:
            raise self.unopened[key]
        if not create:
            raise errors.StorageError(f"no partition {topic}-{partition}", file=self.path)
        if not topic or "/" in topic or "\0" in topic:
            raise ValueError(f"invalid topic name {topic!r}")
        log = self._open_partition(key, None)
        if log.config.epoch_flush == "deferred":
            log.local.parent_dir_dirty = True     # the new dir's name is made durable by its first flush
        else:
            _io.current().fsync_dir(self.path, self._sync_flags)
        return log

    def _open_logs(self) -> list[PartitionLog]:
        """The open logs now (the lock held while copied: the background thread's passes and the
        metrics walk them while partitions come and go)."""
        with self._partitions_lock:
            return list(self._logs.values())

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self._logs)

    def logs(self) -> dict[tuple[str, int], PartitionLog]:
        return dict(self._logs)

    @guarded
    def delete_partition(self, topic: str, partition: int) -> bool:
        """Close and delete a partition's log (renamed to `*-delete` first, as Kafka does)."""
        self._ensure_open()
        log = self._logs.pop((topic, partition), None)
        if log is None:
            return False
        log.close()
        seam = _io.current()
        doomed = os.path.join(self.path, f"{topic}-{partition}.{uuid.uuid4().hex}-delete")
        seam.rename(log.path, doomed)
        seam.fsync_dir(self.path, self._sync_flags)
        self.meta.delete_partition(topic, partition)
        _remove_tree(doomed)
        return True

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- durability ----
    @guarded
    def checkpoint(self) -> None:
        """Commit every partition's recovery point, log start offset and high watermark in one
        metadata transaction."""
        self._ensure_open()
        with self._partitions_lock:      # the background thread checkpoints too
            logs = list(self._logs.items())
        self.meta.put_partitions({key: PartitionOffsets(log.recovery_point, log.log_start_offset, log.high_watermark)
                                  for key, log in logs})

    @guarded
    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """Kafka's LogManager.cleanupLogs: a retention pass over every partition
        (PartitionLog.delete_old_segments), then the files of deleted segments whose
        file_delete_delay_ms is over; the offsets are committed when anything went.  Returns
        how many segments went; `retention_moves` counts the passes that moved log starts (what
        a broker's fetch sessions watch: storage/wire/apis.py)."""
        self._ensure_open()
        now = wall_ms() if now_ms is None else now_ms
        logs = self._open_logs()
        total = 0
        for log in logs:
            total += log.delete_old_segments(now)
            log.delete_pending_files(now)
        if total:
            self.retention_moves += 1
            self.checkpoint()
        return total

    @guarded
    def clean_logs(self, now_ms: int | None = None) -> dict:
        """Kafka's cleaner manager: every compacted log whose dirty ratio is above
        min_cleanable_dirty_ratio (or whose oldest dirty data is past max_compaction_lag_ms) is
        cleaned once, the dirtiest first (PartitionLog.compact), and `cleaner-offset-checkpoint`
        records each log's next first dirty offset.  Returns {(topic, partition): CleanerStats}."""
        self._ensure_open()
        now = wall_ms() if now_ms is None else now_ms
        with self._partitions_lock:
            logs = {key: log for key, log in self._logs.items() if log.config.compacts}
        out = {}
        for key in _cleaner.filthiest_first(logs, now):
            out[key] = logs[key].compact(now)
            self._write_cleaner_checkpoint()
            logs[key].delete_pending_files(now)     # the replaced segments, once their delay is over
        return out

    @property
    def uncleanable_partitions(self) -> dict:
        """{(topic, partition): why} of the compacted logs the cleaner found damaged and skips
        (KIP-346's uncleanable partitions; storage/log/cleaner.py)."""
        with self._partitions_lock:
            logs = dict(self._logs)
        out = {}
        for key, log in logs.items():
            with log.local.lock:
                reason = _cleaner.uncleanable_reason(log)
            if reason is not None:
                out[key] = reason
        return out

    def _write_cleaner_checkpoint(self) -> None:
        with self._partitions_lock:
            entries = sorted((topic, partition, log.first_dirty_offset) for (topic, partition), log in self._logs.items()
                             if log.first_dirty_offset is not None)
        checkpoint.write(os.path.join(self.path, checkpoint.CLEANER_OFFSET_FILE), entries, sync=self.config.fsync)

    @guarded
    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget, in every partition, producers idle for producer_id_expiration_ms."""
        self._ensure_open()
        now = wall_ms() if now_ms is None else now_ms
        logs = self._open_logs()
        return sum(log.remove_expired_producers(now) for log in logs)

    @property
    def background_runs(self) -> dict[str, int]:
        """How many times each background task ran (empty without background=True)."""
        return dict(self._background.runs) if self._background is not None else {}

    @guarded
    def flush(self) -> None:
        """Flush every log (recovery points move to the log end offsets), then checkpoint."""
        self._ensure_open()
        logs = self._open_logs()
        for log in logs:
            log.flush()
        self.checkpoint()

    @guarded
    def flush_dirty_logs(self, now_ms: int | None = None) -> int:
        """Kafka's LogManager.flushDirtyLogs (the background thread's "flush_dirty" task): every
        log holding data past its recovery point whose last flush is flush_ms or more ago
        (`now_ms` and LocalLog.last_flush_ms: the monotonic clock) is flushed, as any flush (an
        I/O failure takes the dir offline; the thread then ends, nothing retried).  The
        recovery points reach the store with the next checkpoint, as in Kafka.  Returns how
        many logs were flushed."""
        self._ensure_open()
        now = monotonic_ms() if now_ms is None else now_ms
        logs = self._open_logs()
        flushed = 0
        for log in logs:
            if log.log_end_offset > log.recovery_point and now - log.local.last_flush_ms >= log.config.flush_ms:
                try:
                    log.flush()
                except errors.LogClosedError:
                    continue        # deleted (or closed) since the list was taken: nothing owed
                flushed += 1
        return flushed

    def close(self) -> None:
        """Close every log (sealed, flushed), commit the metadata, then write the clean-shutdown
        marker: the next open skips recovery.  After an I/O failure (now or before) nothing is
        written: descriptors are released and LogDirOfflineError is raised; the next open
        recovers the dir as after an unclean shutdown."""
        if self._closed:
            self.failure_channel.check()     # a retried close claims no success either
            return
        if self._background is not None:
            self._background.stop()          # no task runs while (or after) the logs close
            self.background_error = self._background.error
            self._background = None
        refused_close = None
        for log in self._logs.values():
            try:
                log.close()
            except OSError as exc:   # the LogDirOfflineError of an offline log included
                self.failure_channel.fail(exc, "close")
            except errors.StorageError as exc:
                refused_close = refused_close or exc
        if refused_close is not None and not self.failure_channel.offline:
            # A log that could not close cleanly: no offsets claimed, no marker.
            self._closed = True
            self.meta.close()
            _unlock_dir(self)
            raise refused_close
        if self.failure_channel.offline:
            # Nothing is written after a failure: no offsets, no clean-shutdown marker.
            self._closed = True
            self.meta.close()
            _unlock_dir(self)
            self.failure_channel.check()
        marker_path = os.path.join(self.path, CLEAN_SHUTDOWN_FILE)
        # As Kafka: the marker only when every log finished loading (a refused partition keeps
        # the next open careful too).
        write_marker = not self.unopened
        try:
            self.meta.put_partitions({key: PartitionOffsets(log.recovery_point, log.log_start_offset,
                                                            log.high_watermark)
                                      for key, log in self._logs.items()})
            self.meta.sync_to_disk()
            if write_marker:
                marker = json.dumps({"version": 0, "brokerEpoch": self.broker_epoch}).encode()
                _io.current().write_file_atomic(marker_path, marker, sync=self.config.fsync)
        except OSError as exc:
            # A marker whose write or directory fsync failed must not survive to claim a clean
            # shutdown (a retried close would otherwise write it again and succeed).
            self.failure_channel.fail(exc, "close")
            try:
                if _io.current().exists(marker_path):
                    _io.current().unlink(marker_path)
                    _io.current().fsync_dir(self.path, self._sync_flags)
            except OSError:
                pass    # best effort: every log was flushed before the marker was written
        finally:
            self._closed = True
            self.meta.close()
            _unlock_dir(self)
        self.failure_channel.check()

    def __repr__(self) -> str:
        return f"LogDir({self.path!r}, partitions={len(self._logs)}, had_clean_shutdown={self.had_clean_shutdown})"


def _remove_tree(path: str) -> None:
    seam = _io.current()
    for name in seam.listdir(path):
        full = os.path.join(path, name)
        if seam.isdir(full):
            _remove_tree(full)
        else:
            seam.unlink(full)
    seam.rmdir(path)
