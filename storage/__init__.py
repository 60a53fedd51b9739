"""An embedded storage engine for Kafka-style partition logs and leader-epoch caches.

Public API (docs/design.md "Public API"): build_batch, iter_batches, batch_columns, RecordBatch, Record, LeaderEpochCache,
EpochEntry, LogConfig, LogDir, PartitionLog, errors.  The C core is loaded (and checked for a
stale build) on import.
"""
from ._version import __version__
from .core import errors, io  # noqa: F401 -- io: the I/O seam, `from storage import io` as before
from .core._native import NativeBuildError
from .core.columns import BatchColumns, batch_columns
from .core.config import LogConfig
from .core.records import Record, RecordBatch, build_batch, iter_batches
from .dir.logdir import LogDir
from .log.epoch import EpochEntry, LeaderEpochCache
from .log.partition import AppendInfo, PartitionLog
from .log.reads import TimestampAndOffset

__all__ = [
    "AppendInfo", "BatchColumns", "EpochEntry", "LeaderEpochCache", "LogConfig", "LogDir", "NativeBuildError", "PartitionLog", "Record", "RecordBatch",
    "TimestampAndOffset", "__version__", "batch_columns", "build_batch", "errors", "iter_batches",
]
