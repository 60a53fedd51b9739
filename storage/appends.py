"""What an append returns (`AppendInfo`) and the C state of one kind of append."""
from __future__ import annotations

from typing import NamedTuple

from . import producer_check
from ._native import ffi, lib
from .config import LogConfig


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    batch_count: int
    record_count: int
    size_bytes: int
    duplicate: bool = False     # a retried idempotent batch: its first offsets, nothing written


class _Recheck(Exception):
    """PLOG_ERECHECK: validator.recheck must see the chunk before C can append it."""


class _ProducerCheck(Exception):
    """PLOG_EPRODUCER: the producer state must check the chunk before C can append it."""


_EPOCH_MIXED = lib.PLOG_EPOCH_MIXED
# AppendInfo from the seven int64 fields plog_validate leads with (plog.h): what
# NamedTuple._make does, without its length check (the C layout fixes the length).
_new_append_info = tuple.__new__
_C_APPEND_FIELDS = 7


class _AppendState:
    """The plog_validate struct of one kind of append, with its limits set, and an int64 view
    of its leading AppendInfo fields."""

    __slots__ = ("v", "out")

    def __init__(self, config: LogConfig, flags: int, max_batch_bytes: int):
        self.v = ffi.new("plog_validate *")
        self.v.flags = flags
        self.v.max_batch_bytes = max_batch_bytes
        self.v.segment_bytes = config.segment_bytes
        self.v.segment_ms = config.segment_ms
        self.out = memoryview(ffi.buffer(self.v)).cast("B")[:_C_APPEND_FIELDS * 8].cast("q")


# ---- the states of a log, made on its first append of each kind ------------------------------
# ~1.6 KiB of C memory each (plog_validate); most open partitions append in one role only.

_LEADER_FLAGS = lib.PLOG_VALIDATE_ASSIGN_OFFSETS | lib.PLOG_VALIDATE_STAMP_EPOCH


def _client_flags() -> int:
    """A producer's leader appends: Kafka's LogValidator checks, and the producer check in C
    unless the tests turned it off (producer_check.ENABLED; the log reads this at its open)."""
    return _LEADER_FLAGS | lib.PLOG_VALIDATE_CLIENT | (lib.PLOG_VALIDATE_PRODUCERS if producer_check.ENABLED else 0)


def _leader_state(log, origin: str) -> _AppendState:
    """`log`'s state for leader appends from `origin` ("client": with its expected producers)."""
    with log._lock:
        state = log._leader_append.get(origin)
        if state is None:
            flags = log._client_flags if origin == "client" else _LEADER_FLAGS
            state = _AppendState(log.config, flags, log.config.max_message_bytes)
            if origin == "client":
                log._expected = producer_check.ExpectedProducers(log.producer_state, state.v)
            log._leader_append[origin] = state
        return state


def _follower_state(log) -> _AppendState:
    log._follower_append = _AppendState(log.config, lib.PLOG_VALIDATE_REQUIRE_FIRST, 0)
    return log._follower_append
