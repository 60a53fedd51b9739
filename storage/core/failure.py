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

Running out of descriptors (EMFILE, ENFILE) is the exception for the operations that can be
repeated (RETRIABLE_WITHOUT_DESCRIPTORS: appends, rolls, flushes, reads, a partition's creation):
only an open fails so and no error of the disk was consumed, so the call raises
`errors.OutOfDescriptorsError` (KAFKA_STORAGE_ERROR, retriable), logged, and the dir stays online.

Invariant: once `first_failure` is set it never changes and is never cleared; only a new open
of the dir (a new channel) starts clean.
"""
from __future__ import annotations

import errno as _errno
import functools
import logging
import threading

from . import errors

log = logging.getLogger("storage")
_offline_log = logging.getLogger("storage.log")


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

    def fail(self, exc: BaseException, operation: str, *, announce: bool = True) -> errors.LogDirOfflineError:
        """Record `exc` (the first failure wins) and return the error to raise; the first failure
        is logged at ERROR with its cause unless `announce` is False (a dir superseded by a newer
        open of it in this process: nothing failed)."""
        with self._lock:
            first = self.first_failure is None
            if first:
                self.first_failure = exc
                self.operation = operation
        if first and announce:
            # Kafka's LogDirFailureChannel.maybeAddOfflineLogDir: one line, with the cause.
            _offline_log.error("log dir %s is offline: %s failed: %s; its partitions are no longer served",
                               self.log_dir, operation, exc)
        return self.error()


# The process (EMFILE) or the system (ENFILE) ran out of descriptors: a limit of this moment,
# not a fault of the disk (only an open fails so).  For the operations that can be repeated
# (RETRIABLE_WITHOUT_DESCRIPTORS) the call fails and the dir stays online.
OUT_OF_DESCRIPTORS = frozenset({_errno.EMFILE, _errno.ENFILE})


class ClosedOnExit:
    """`with x:` closes x at the end.  An offline dir still releases everything, and its error
    does not hide the one already in flight (a PartitionLog's, a LogDir's)."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except errors.LogDirOfflineError:
            if exc_type is None:
                raise


def is_out_of_descriptors(exc: BaseException) -> bool:
    """An open failed for want of descriptors (EMFILE, ENFILE), directly or as the cause (not
    the failure state entered for it: LogDirOfflineError carries its first failure's errno)."""
    if isinstance(exc, errors.LogDirOfflineError):
        return False
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in OUT_OF_DESCRIPTORS:
            return True
        exc = exc.__cause__
    return False


def is_io_failure(exc: BaseException) -> bool:
    """An error that must take the dir offline: an OSError from the file system (StorageIOError
    and the metadata store's errors are OSErrors too), never a refusal of bad input, and never
    an operation's OutOfDescriptorsError (the request failed, the dir stays: see guarded)."""
    return isinstance(exc, OSError) and not isinstance(exc, (errors.LogDirOfflineError, errors.OutOfDescriptorsError))


def out_of_descriptors(exc: BaseException, operation: str, log_dir: str) -> errors.OutOfDescriptorsError:
    """The error for a call that ran out of descriptors, logged once here: the request fails
    with KAFKA_STORAGE_ERROR (retriable), the dir stays online."""
    if isinstance(exc, errors.OutOfDescriptorsError):
        return exc
    log.error("%s on log dir %s failed for want of file descriptors (raise RLIMIT_NOFILE or lower "
              "--max-connections); the dir stays online: %s", operation, log_dir, exc)
    return errors.OutOfDescriptorsError(f"{operation} failed: out of file descriptors: {exc}",
                                        errno=getattr(exc, "errno", None), file=log_dir)


# The operations a call may fail for want of descriptors and leave the dir online: each either
# fails before it changes anything or, past its point of no return (an append's records
# written), defers what is left (the epoch checkpoint) or enters the failure state itself (the
# transaction index), so the same call succeeds when repeated.  Every other operation
# (truncations, retention and log-start moves, the cleaner's swaps, deletions) changes files in
# several steps that are only made whole by a reopen's recovery: for them running out of
# descriptors is still the failure state.
RETRIABLE_WITHOUT_DESCRIPTORS = frozenset({
    "append_as_leader", "append_batches", "append_as_follower", "append_txn_marker", "roll", "flush", "flush_dirty_logs",
    "update_high_watermark", "end_offset_for_epoch", "assign_epoch_start_offset", "remove_expired_producers",
    "partition", "checkpoint", "read", "collect_aborted_transactions", "offset_for_timestamp"})


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
            failure = _failure(channel, exc, operation)
            if failure is exc:
                raise                   # not an I/O failure: as it came (never `exc from exc`, a cycle)
            raise failure from exc

    return wrapper


def guarded_iteration(channel: LogDirFailureChannel, iterator, operation: str):
    """`iterator`'s items, an I/O failure met while producing one turned into the dir's failure
    state as `guarded` turns a call's: a generator's body runs at each next(), after any
    wrapper of the call that made it has returned."""
    try:
        yield from iterator
    except OSError as exc:
        failure = _failure(channel, exc, operation)
        if failure is exc:
            raise
        raise failure from exc


def failure_for(channel: LogDirFailureChannel, exc: OSError, operation: str) -> BaseException:
    """What `guarded` raises for `exc` (itself: re-raise it; else raise the answer from it), for
    a hot method that does the guard itself to stay one Python frame (PartitionLog's appends)."""
    return _failure(channel, exc, operation)


def _failure(channel: LogDirFailureChannel, exc: OSError, operation: str) -> BaseException:
    """What a guarded operation raises for `exc`: EMFILE/ENFILE a retriable error where the
    operation allows it, an I/O failure the dir's failure state, anything else itself."""
    if is_out_of_descriptors(exc):      # (an inner call's OutOfDescriptorsError too)
        if operation in RETRIABLE_WITHOUT_DESCRIPTORS:
            return out_of_descriptors(exc, operation, channel.log_dir)
        return channel.fail(exc, operation)
    if not is_io_failure(exc):
        return exc
    return channel.fail(exc, operation)
