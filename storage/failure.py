"""The failure state of a log dir: Kafka's LogDirFailureChannel, in our words.

Any I/O error on a log dir -- EIO, ENOSPC, EDQUOT, EROFS or any other OSError from a write,
fsync, truncate, rename, index write or read -- takes the whole dir offline.  From then on every
call on any of its partitions raises `errors.LogDirOfflineError` (Kafka's KAFKA_STORAGE_ERROR,
56) naming the dir and the first failure, and nothing writes to the dir again:

  - after a failed fsync the page cache may have dropped the dirty pages (fsyncgate), so a later
    fsync that succeeds proves nothing; a flush is never retried into success and the recovery
    point never moves past data whose fsync failed;
  - close() releases descriptors and mappings but neither seals, flushes nor writes the
    clean-shutdown marker, so the next `LogDir.open` recovers the dir as after a crash.

Invariant: once `first_failure` is set it never changes and is never cleared; only a new open
of the dir (a new channel) starts clean.
"""
from __future__ import annotations

import functools
import threading

from . import errors


class LogDirFailureChannel:
    """The failure state shared by a log dir and all its partitions."""

    __slots__ = ("log_dir", "first_failure", "operation", "_lock")

    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        self.first_failure: BaseException | None = None
        self.operation = ""
        self._lock = threading.Lock()

    @property
    def offline(self) -> bool:
        return self.first_failure is not None

    def error(self) -> errors.LogDirOfflineError:
        return errors.LogDirOfflineError(self.log_dir, self.first_failure, operation=self.operation)

    def check(self) -> None:
        """Raise LogDirOfflineError when the dir is offline."""
        if self.first_failure is not None:
            raise self.error()

    def fail(self, exc: BaseException, operation: str) -> errors.LogDirOfflineError:
        """Record `exc` (the first failure wins) and return the error to raise."""
        with self._lock:
            if self.first_failure is None:
                self.first_failure = exc
                self.operation = operation
        return self.error()


def is_io_failure(exc: BaseException) -> bool:
    """An error that must take the dir offline: an OSError from the file system (StorageIOError
    and the metadata store's errors are OSErrors too), never a refusal of bad input."""
    return isinstance(exc, OSError) and not isinstance(exc, errors.LogDirOfflineError)


def guarded(method):
    """Wrap a method of an object with a `failure_channel`: refuse when the dir is offline, and
    turn an I/O failure into the dir's failure state."""
    operation = method.__name__

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        channel = self.failure_channel
        if channel.first_failure is not None:
            raise channel.error()
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            if not is_io_failure(exc):
                raise
            raise channel.fail(exc, operation) from exc

    return wrapper
