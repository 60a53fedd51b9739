"""An in-process message channel with a simulated clock: delay, loss, duplication, reordering
and network partitions, all decided by one seeded random generator (same seed, same run).

`request(src, dst, message, on_response)` delivers `message` to dst's handler after a delay; the
handler's return value (when not None) travels back the same way to `on_response`.  `tell`
sends one-way.  Time only moves when `advance(ms)` is called; messages due by then are
delivered in (time, sequence) order, so a run is a deterministic function of the seed.
"""
from __future__ import annotations

import heapq
import random
from typing import Callable


class Channel:
    def __init__(self, seed: int = 0, *, min_delay_ms: int = 1, max_delay_ms: int = 1, loss: float = 0.0,
                 duplicate: float = 0.0, reorder: bool = False):
        self.random = random.Random(seed)
        self.min_delay_ms, self.max_delay_ms = min_delay_ms, max_delay_ms
        self.loss, self.duplicate, self.reorder = loss, duplicate, reorder
        self.now = 0
        self._queue: list = []
        self._sequence = 0
        self._handlers: dict[int, Callable] = {}
        self._last_due: dict[tuple[int, int], int] = {}
        self._cut: set[frozenset] = set()
        self.slow: dict[str, int] = {}     # message type name -> extra delay (uniform 0..ms), e.g. BUGGIFY
        self.delivered = 0
        self.dropped = 0
        self.trace: list[tuple] = []       # (time, src, dst, message type) of every delivery

    def register(self, node: int, handler: Callable) -> None:
        """handler(src, message) -> response or None."""
        self._handlers[node] = handler

    def unregister(self, node: int) -> None:
        self._handlers.pop(node, None)

    # ---- faults ----
    def partition(self, a: int, b: int) -> None:
        self._cut.add(frozenset((a, b)))

    def isolate(self, node: int, others) -> None:
        for other in others:
            if other != node:
                self.partition(node, other)

    def reconnect(self, a: int, b: int) -> None:
        """Heal the one link between a and b."""
        self._cut.discard(frozenset((a, b)))

    def heal(self) -> None:
        self._cut.clear()

    def connected(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self._cut

    # ---- sending ----
    def _schedule(self, src: int, dst: int, payload, on_response) -> None:
        if self.random.random() < self.loss:
            self.dropped += 1
            return
        copies = 2 if self.random.random() < self.duplicate else 1
        for _ in range(copies):
            due = self.now + self.random.randint(self.min_delay_ms, self.max_delay_ms)
            if self.slow:
                kind = type(payload.response if isinstance(payload, _Response) else payload).__name__
                if kind in self.slow:
                    due += self.random.randint(0, self.slow[kind])
            if not self.reorder:   # FIFO per link
                due = max(due, self._last_due.get((src, dst), 0))
                self._last_due[(src, dst)] = due
            self._sequence += 1
            heapq.heappush(self._queue, (due, self._sequence, src, dst, payload, on_response))

    def request(self, src: int, dst: int, message, on_response: Callable | None = None) -> None:
        self._schedule(src, dst, message, on_response)

    def tell(self, src: int, dst: int, message) -> None:
        self._schedule(src, dst, message, None)

    # ---- time ----
    def advance(self, ms: int) -> int:
        """Move the clock forward by ms, delivering everything due; returns deliveries made."""
        target = self.now + ms
        count = 0
        while self._queue and self._queue[0][0] <= target:
            due, _seq, src, dst, payload, on_response = heapq.heappop(self._queue)
            self.now = max(self.now, due)
            if not self.connected(src, dst) or dst not in self._handlers:
                self.dropped += 1
                continue
            self.delivered += 1
            count += 1
            self.trace.append((self.now, src, dst, type(payload).__name__))
            if isinstance(payload, _Response):
                payload.callback(payload.response)
                continue
            response = self._handlers[dst](src, payload)
            if response is not None and on_response is not None:
                self._schedule(dst, src, _Response(on_response, response), None)
        self.now = target
        return count

    @property
    def pending(self) -> int:
        return len(self._queue)


class _Response:
    __slots__ = ("callback", "response")

    def __init__(self, callback, response):
        self.callback, self.response = callback, response
