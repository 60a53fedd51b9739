"""An embedded storage engine for Kafka-style partition logs and leader-epoch caches.

Public API (design.md): build_batch, iter_batches, batch_columns, RecordBatch, Record, LeaderEpochCache,
EpochEntry, LogConfig, LogDir, PartitionLog, errors.  The C core is loaded (and checked for a
stale build) on import.
"""
from . import errors
from ._native import NativeBuildError
from ._version import __version__
from .columns import BatchColumns, batch_columns
from .config import LogConfig
from .epoch import EpochEntry, LeaderEpochCache
from .log import AppendInfo, PartitionLog
from .logdir import LogDir
from .reads import TimestampAndOffset
from .records import Record, RecordBatch, build_batch, iter_batches

__all__ = [
    "AppendInfo", "BatchColumns", "EpochEntry", "LeaderEpochCache", "LogConfig", "LogDir", "NativeBuildError", "PartitionLog", "Record", "RecordBatch",
    "TimestampAndOffset", "__version__", "batch_columns", "build_batch", "errors", "iter_batches",
]
