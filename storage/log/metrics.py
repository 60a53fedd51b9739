"""`LogMetrics`: the engine's own counters of one partition log, plain numbers anyone who
embeds the engine reads (`PartitionLog.metrics`, summed over a dir by `LogDir.metrics()`),
without the broker or any metrics library.

Invariants:
  - every field only grows (counters), except `fsync_seconds_max`, the largest one fsync took;
  - `fsync_buckets[i]` counts the fsyncs that took at most FSYNC_BUCKETS_SECONDS[i] seconds
    (cumulative, as Prometheus' histogram buckets are), so `fsync_buckets[-1] <= fsyncs`;
  - the append path pays four integer adds, nothing else: the counters are updated under the
    log's lock by the code that did the work, and read without it (a reader may see one append's
    counters half added; each number on its own is right).  The four append counters are a C
    block (`counts`, csrc/pyrecords.c's AppendCounts) that the one-call append adds to in C
    (appends._AppendState.call); `appends`, `append_batches`, `append_records` and
    `append_bytes` read and write it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

from ..core._native import append_counts

# Upper bounds (seconds) of the fsync latency histogram: 100 us to 10 s, as Kafka's
# LogFlushRateAndTimeMs timer spans a page-cache flush to a stalled disk.
FSYNC_BUCKETS_SECONDS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 10.0)


_APPEND_COUNTERS = ("appends", "append_batches", "append_records", "append_bytes")


def _counter(slot: str) -> property:
    """One of the four append counters: a read-write view of its slot in the C block."""
    return property(lambda self: getattr(self.counts, slot), lambda self, value: setattr(self.counts, slot, value),
                    doc=f"the append counter {slot!r} of the C block `counts`")


def _buckets() -> list[int]:
    return [0] * len(FSYNC_BUCKETS_SECONDS)


@dataclass(eq=False, slots=True)
class LogMetrics:
    """What one partition log did since it was opened (all counters start at 0 at the open)."""

    # appends (append calls that wrote something, leader or follower), append_batches,
    # append_records, append_bytes: the properties below, over this block
    counts: object = field(default_factory=append_counts, repr=False)
    fsyncs: int = 0                  # segment flushes (the .log and its indexes fsync'd)
    fsync_seconds_total: float = 0.0
    fsync_seconds_max: float = 0.0
    fsync_buckets: list[int] = field(default_factory=_buckets)
    rolls: int = 0                   # new active segments (a roll, not the first segment)
    truncations: int = 0             # truncate_to / truncate_fully_and_start_at that cut
    truncated_bytes: int = 0         # segment bytes those truncations removed
    recoveries: int = 0              # segments recovered at the open (Kafka's LogSegment.recover)
    recovered_bytes_cut: int = 0     # bytes those recoveries cut off a torn or corrupt tail
    recovered_segments_deleted: int = 0   # later segments deleted after an invalid batch
    cleaner_rounds: int = 0          # compaction rounds of this log (PartitionLog.compact)

    appends = _counter("appends")
    append_batches = _counter("batches")
    append_records = _counter("records")
    append_bytes = _counter("bytes")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _APPEND_COUNTERS) + ", " + \
            ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"LogMetrics({shown})"

    def fsync_timer(self):
        """The start of a timed fsync: pass it to `fsync_done`."""
        return time.perf_counter()

    def fsync_done(self, started: float) -> None:
        seconds = time.perf_counter() - started
        self.fsyncs += 1
        self.fsync_seconds_total += seconds
        if seconds > self.fsync_seconds_max:
            self.fsync_seconds_max = seconds
        buckets = self.fsync_buckets
        for i, bound in enumerate(FSYNC_BUCKETS_SECONDS):
            if seconds <= bound:
                buckets[i] += 1

    def add(self, other: "LogMetrics") -> None:
        """Add `other`'s counters into these (a dir's sum; the max is the larger max)."""
        for name in _APPEND_COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for f in fields(self):
            name = f.name
            if name == "counts":
                continue
            if name == "fsync_buckets":
                self.fsync_buckets = [a + b for a, b in zip(self.fsync_buckets, other.fsync_buckets)]
            elif name == "fsync_seconds_max":
                self.fsync_seconds_max = max(self.fsync_seconds_max, other.fsync_seconds_max)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def snapshot(self) -> "LogMetrics":
        """A copy: numbers that no longer move."""
        copy = LogMetrics()
        copy.add(self)
        return copy


@dataclass(eq=False)
class DirMetrics:
    """`LogDir.metrics()`: its partitions' counters summed, and what the dir holds now."""

    logs: LogMetrics
    partitions: int              # partition logs open in the dir
    segments: int                # segments of those logs (on disk)
    size_bytes: int              # the logs' bytes on disk
    offline: bool                # an I/O failure took the dir offline
    open_segments: int           # segments of this process holding descriptors (3 each)
