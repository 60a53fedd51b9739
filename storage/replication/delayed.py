"""The acks=all produces (and transaction markers) a leader holds until its high watermark passes
them: Kafka's DelayedProduce purgatory, cut out of storage/replication/replica.py.

Kept per partition so the high watermark's move asks one dict whether anything waits on that
partition -- nothing, for acks 0/1 traffic -- instead of scanning every waiter of the broker.
Each waiter keeps the order it came in: a partition's are completed or failed in that order,
and the timeout expires them in the broker-wide order they were added (the simulator's trace
depends on the order callbacks run).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

from .messages import ProduceResponse, produce_response


@dataclass
class DelayedProduce:
    topic: str
    partition: int
    required_offset: int
    base_offset: int
    callback: Callable[[ProduceResponse], None]
    deadline_ms: int
    log_append_time: int = -1           # the append's (ProduceResponse.log_append_time)
    seq: int = field(default=0, compare=False)

    def answer(self, code: int) -> ProduceResponse:
        """Its answer: its first offset and log append time with `code` (Kafka's DelayedProduce
        keeps the append's PartitionResponse and sets only its error)."""
        return produce_response(self.topic, self.partition, code, self.base_offset, append_time=self.log_append_time)


def log_append_time(log, info) -> int:
    """Kafka's LogAppendInfo.logAppendTime of an append's AppendInfo: a LogAppendTime topic's
    stamp (its max timestamp) or a retried batch's max timestamp (duplicate.timestamp); -1
    otherwise.  (info[7]: duplicate, info[2]: max timestamp -- cheaper than the names.)"""
    return info[2] if info[7] or log.config.message_timestamp_type != "CreateTime" else -1


class DelayedProduces:
    """The waiting produces, by (topic, partition)."""

    def __init__(self):
        self._by_key: dict[tuple[str, int], list[DelayedProduce]] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return sum(len(waiting) for waiting in self._by_key.values())

    def add(self, delayed: DelayedProduce) -> None:
        delayed.seq = next(self._seq)
        self._by_key.setdefault((delayed.topic, delayed.partition), []).append(delayed)

    def waiting(self, key: tuple[str, int]) -> bool:
        """Whether any produce waits on the partition `key`."""
        return key in self._by_key

    def take_reached(self, key: tuple[str, int], high_watermark: int) -> list[DelayedProduce]:
        """Remove and return (in arrival order) the waiters of `key` the high watermark passed."""
        waiting = self._by_key.get(key)
        if not waiting:
            return []
        done = [d for d in waiting if d.required_offset <= high_watermark]
        if done:
            self._keep(key, [d for d in waiting if d.required_offset > high_watermark])
        return done

    def take_all(self, key: tuple[str, int]) -> list[DelayedProduce]:
        """Remove and return every waiter of `key` (leadership lost, the dir offline, shutdown)."""
        return self._by_key.pop(key, [])

    def take_expired(self, now_ms: int) -> list[DelayedProduce]:
        """Remove and return the waiters past their deadline, in the order they were added."""
        expired = []
        for key, waiting in list(self._by_key.items()):
            gone = [d for d in waiting if d.deadline_ms <= now_ms]
            if gone:
                expired += gone
                self._keep(key, [d for d in waiting if d.deadline_ms > now_ms])
        expired.sort(key=lambda d: d.seq)
        return expired

    def _keep(self, key: tuple[str, int], rest: list[DelayedProduce]) -> None:
        if rest:
            self._by_key[key] = rest
        else:
            del self._by_key[key]
