"""The background work of a `LogDir` (Kafka's LogManager scheduler, in one thread): the
retention pass, producer-id expiry, the offsets checkpoint and, when asked for, a periodic
flush.  Started by `LogDir.open(..., background=True)`, stopped (and joined) by close.

Each task runs at its own interval, Kafka's defaults: retention every 5 minutes
(log.retention.check.interval.ms), the checkpoint every minute
(log.flush.offset.checkpoint.interval.ms), producer-id expiry every 10 minutes
(producer.id.expiration.check.interval.ms); each log's flush.ms checked every second
(flush_check_interval_ms, Kafka's log.flush.scheduler.interval.ms: LogDir.flush_dirty_logs
flushes the logs whose last flush is flush_ms old; Kafka's broker default checks never, its
LogManager's own default every second); no periodic flush of every log unless
flush_interval_ms is set (log.flush.interval.ms is unlimited: replication, not fsync, is
Kafka's durability); the cleaner only when clean_interval_ms is set.

A task's I/O failure takes the dir offline (every operation of the dir says so from then on)
and ends the thread; `LogDir.background_error` keeps what ended it.  A task that ran out of
descriptors (OutOfDescriptorsError: a flush, the checkpoint) is logged and runs at its next turn.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from ..core import errors
from ..core.clock import monotonic_ms, wall_ms
from ..core.failure import is_io_failure

log = logging.getLogger("storage")


@dataclass(frozen=True)
class BackgroundConfig:
    retention_check_interval_ms: int = 300_000
    checkpoint_interval_ms: int = 60_000
    producer_expiration_check_interval_ms: int = 600_000
    flush_interval_ms: int | None = None
    flush_check_interval_ms: int | None = 1000      # each log's flush.ms (LogDir.flush_dirty_logs)
    clean_interval_ms: int | None = None        # the cleaner (LogDir.clean_logs); Kafka's backoff is 15 s

    def __post_init__(self):
        for name in ("retention_check_interval_ms", "checkpoint_interval_ms",
                     "producer_expiration_check_interval_ms", "flush_interval_ms", "flush_check_interval_ms",
                     "clean_interval_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0")


class Background(threading.Thread):
    def __init__(self, logdir, config: BackgroundConfig):
        super().__init__(name=f"logdir-background {logdir.path}", daemon=True)
        self.logdir = logdir
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.runs: dict[str, int] = {}
        tasks = {"retention": (config.retention_check_interval_ms, logdir.cleanup_logs),
                 "producer_expiration": (config.producer_expiration_check_interval_ms,
                                         logdir.remove_expired_producers),
                 "checkpoint": (config.checkpoint_interval_ms, logdir.checkpoint),
                 "flush": (config.flush_interval_ms, logdir.flush),
                 "flush_dirty": (config.flush_check_interval_ms, logdir.flush_dirty_logs),
                 "cleaner": (config.clean_interval_ms, logdir.clean_logs)}
        # Due times on the monotonic clock; the tasks that compare with timestamps get the wall clock.
        now = monotonic_ms()
        self.tasks = {name: [interval, now + interval, run] for name, (interval, run) in tasks.items()
                      if interval is not None}

    def run(self) -> None:
        while not self.stopping.is_set():
            now = monotonic_ms()
            wait = min(due for _i, due, _r in self.tasks.values()) - now
            if wait > 0 and self.stopping.wait(wait / 1000):
                return
            now = monotonic_ms()
            for name, task in self.tasks.items():
                interval, due, run = task
                if due > now or self.stopping.is_set():
                    continue
                try:
                    run(wall_ms()) if name in ("retention", "producer_expiration", "cleaner") else run()
                except errors.OutOfDescriptorsError as exc:
                    # No descriptor for a checkpoint's file: a limit of the moment, the task
                    # runs again at its next turn (the dir stays online).
                    log.error("background %s on %s: out of file descriptors, retried in %d ms: %s",
                              name, self.logdir.path, interval, exc)
                except BaseException as exc:     # offline, or a bug: either way the thread ends
                    self._stop_on(exc, name)
                    return
                else:
                    self.runs[name] = self.runs.get(name, 0) + 1
                task[1] = now + interval

    def _stop_on(self, exc: BaseException, name: str) -> None:
        self.error = exc
        if is_io_failure(exc):
            self.logdir.failure_channel.fail(exc, f"background {name}")

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()
