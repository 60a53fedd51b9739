"""`Notifier`: the requests waiting on partitions (a Fetch's long poll, DeleteRecords), woken
the moment what they wait for moves -- Kafka's delayed-operation purgatory, keyed by partition.

A waiter waits on a set of (topic, partition) keys of one kind and is woken by a notify of any
of them of that kind, or by a broadcast (`notify()`: the metadata changed, so leaderships and
epochs may have).  The kinds are what moved:

  - END: the log end offset, by an append as leader -- what a follower's fetch waits for
    (ReplicaManager.on_append);
  - HIGH_WATERMARK: the high watermark, and with it what consumers may read (the last stable
    offset follows it) -- what a consumer's fetch waits for (ReplicaManager.on_high_watermark);
  - LOW_WATERMARK: a follower's fetch reported its log start -- what DeleteRecords waits for.

So a follower's fetch is answered as soon as a batch is appended, an acks=all produce as soon as
the followers' fetches moved the high watermark (the manager completes it then), a consumer as
soon as the high watermark moved; and a partition that does not move costs nothing: no timer
wakes its waiters (an idle fetch waits out its max wait).  `woken` counts the waiters woken (a
test's seam).
"""
from __future__ import annotations

import asyncio

END, HIGH_WATERMARK, LOW_WATERMARK = "end", "hw", "low"
KINDS = (END, HIGH_WATERMARK, LOW_WATERMARK)


class Notifier:
    def __init__(self):
        self._waiters: dict[tuple, list[asyncio.Future]] = {}     # (kind, key) -> waiting futures
        self._everyone: list[asyncio.Future] = []                 # waiters on broadcasts only
        self.woken = 0
        self.observers: list = []       # observer(keys, kind) after each notify (fetch sessions)

    def notify(self, keys=None, kind: str | None = None) -> None:
        """Wake the waiters on any of `keys` of `kind` (None: of every kind); with no keys,
        every waiter (a broadcast).  The observers hear every notify, waiters or not (a follower
        session's still partition moved by an append while none of its fetches waits must be
        read at its next fetch: ClientApis._still_moved)."""
        if keys is None:
            groups, self._waiters = list(self._waiters.values()), {}
            groups.append(self._everyone)
            self._everyone = []
        elif not self._waiters:
            groups = ()         # nobody waits on a key (an append with no fetch waiting on it)
        else:
            pop = self._waiters.pop
            kinds = KINDS if kind is None else (kind,)
            groups = [g for g in (pop((k, key), None) for key in keys for k in kinds) if g is not None]
        for group in groups:
            for future in group:
                if not future.done():
                    future.set_result(None)
                    self.woken += 1
        for observer in self.observers:
            observer(keys, kind)

    async def wait(self, seconds: float, keys=None, kind: str = HIGH_WATERMARK) -> None:
        """Until a notify of one of `keys` of `kind` (None: a broadcast) or `seconds` passed."""
        if seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        slots = [self._everyone] if keys is None else [self._waiters.setdefault((kind, key), []) for key in set(keys)]
        for slot in slots:
            slot.append(future)
        timer = loop.call_later(seconds, _expire, future)
        try:
            await future
        finally:
            timer.cancel()
            for slot in slots:      # a slot a notify took is no longer in the table: harmless
                if future in slot:
                    slot.remove(future)
            if keys is not None:
                for key in set(keys):
                    if not self._waiters.get((kind, key), True):
                        del self._waiters[(kind, key)]

    def waiting(self, kind: str | None = None) -> int:
        """How many (kind, partition) waiter sets are registered (a test's seam)."""
        return sum(1 for (k, _), group in self._waiters.items() if group and kind in (None, k))


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


async def long_poll(notifier: Notifier, max_wait_ms: int, attempt, keys=None, kind: str = HIGH_WATERMARK):
    """A long poll: `attempt()` -> (answer, done) now, and again each time `notifier` wakes
    `keys` of `kind` (None: a broadcast), until done or `max_wait_ms` passed; the last answer.
    The clock is read once before the first attempt and again only when it is not done."""
    if max_wait_ms <= 0:
        return attempt()[0]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    while True:
        answer, done = attempt()
        if done:
            return answer
        remaining = deadline - loop.time()
        if remaining <= 0:
            return answer
        await notifier.wait(remaining, keys, kind)
