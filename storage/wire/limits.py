"""The limits of the network front end (storage/wire/server.py): how many connections, how long
one may stay silent, how many request bytes may be in memory -- Kafka's broker settings, with
Kafka's names:

  connections.max.idle.ms   600000   a connection silent this long is closed (Kafka's Selector);
  max.connections           derived  connections of the process (Kafka: unlimited; here what
                                     RLIMIT_NOFILE leaves after the log dir's segments);
  max.connections.per.ip    unlimited
  queued.max.request.bytes  100 MiB  request bytes read and not yet answered, all connections
                                     together (Kafka: -1, unlimited; -1 here too turns it off);
  request.timeout.ms        30000    a request must arrive whole within this time of its first
                                     byte (Kafka's client setting: a client has given up by then).

At max.connections or max.connections.per.ip the newest connection is closed as soon as it is
accepted (Kafka closes a connection over its IP's quota, and stops accepting at max.connections).

The descriptor budget: the open-segment cache (storage/log/segment_home.py) lets its segments hold
up to 3 x its limit descriptors (a quarter of the soft RLIMIT_NOFILE segments by default, so
about three quarters of the descriptors); `default_max_connections` gives connections what is
left after those and a reserve (an eighth, at least 32, and at least ACCEPT_BURST + 16) for the
metadata store, checkpoints, snapshots, the listening socket and the sockets of a flood of
connections accepted before they can be refused: a listening socket is read ACCEPT_BURST
sockets at a time (asyncio accepts up to its backlog per readiness), and each holds a
descriptor until its connection is refused.  So connections never take a descriptor a segment
roll needs; a limit set higher is warned about at start-up.

Memory: a frame is read in pieces as its bytes arrive (a client that trickles holds what it
sent, not its declared size), after its declared size is reserved in `RequestMemory` (Kafka's
MemoryPool): when the reservations of the connections reach queued.max.request.bytes, the next
frame waits (its connection is not read, as Kafka mutes it) until memory is released.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import resource
from dataclasses import dataclass

from ..core.files import INT32_MAX, INT64_MAX
from ..log.segment_home import open_segments

log = logging.getLogger("storage.wire")

UNLIMITED = INT32_MAX                      # Kafka's Int.MaxValue
DESCRIPTORS_PER_SEGMENT = 3                # .log, .index, .timeindex
# A listening socket's backlog, and so the sockets accepted at once before any is refused
# (Kafka's socket.listen.backlog.size default).
ACCEPT_BURST = 50
_UNLIMITED_NOFILE = 1 << 20                # what RLIM_INFINITY counts as


def descriptor_budget() -> tuple[int, int, int]:
    """(soft RLIMIT_NOFILE, descriptors the open segments may hold, the reserve)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = _UNLIMITED_NOFILE
    return soft, DESCRIPTORS_PER_SEGMENT * open_segments.limit, max(32, soft // 8, ACCEPT_BURST + 16)


def default_max_connections() -> int:
    """Connections the descriptors allow once the segments and the reserve have theirs (1 at
    least: with a tiny RLIMIT_NOFILE the broker still serves, one connection at a time)."""
    soft, segments, reserve = descriptor_budget()
    return max(1, soft - segments - reserve)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 0                       # 0: default_max_connections()
    max_connections_per_ip: int = UNLIMITED
    connections_max_idle_ms: int = 600_000
    queued_max_request_bytes: int = 100 << 20      # -1: unlimited
    request_timeout_ms: int = 30_000

    def __post_init__(self):
        def named(field: str) -> str:
            return f"{field.replace('_', '.')} (--{field.replace('_', '-')})"

        for field in ("max_connections_per_ip", "connections_max_idle_ms", "request_timeout_ms"):
            if getattr(self, field) < 1:
                raise ValueError(f"{named(field)} must be at least 1, not {getattr(self, field)}")
        # Kafka's types: connections.max.idle.ms is a LONG, the others INTs.
        for field, high in (("max_connections", INT32_MAX), ("max_connections_per_ip", INT32_MAX),
                            ("queued_max_request_bytes", INT32_MAX), ("request_timeout_ms", INT32_MAX),
                            ("connections_max_idle_ms", INT64_MAX)):
            if getattr(self, field) > high:
                raise ValueError(f"{named(field)} must be at most {high}, not {getattr(self, field)}")
        if self.max_connections < 0:
            raise ValueError(f"{named('max_connections')} must be at least 1 (0: derived from RLIMIT_NOFILE), "
                             f"not {self.max_connections}")
        if self.queued_max_request_bytes == 0 or self.queued_max_request_bytes < -1:
            raise ValueError(f"{named('queued_max_request_bytes')} must be -1 (unlimited) or at least 1, "
                             f"not {self.queued_max_request_bytes}")

    def resolved(self) -> "ConnectionLimits":
        """These limits with max.connections derived from RLIMIT_NOFILE when not set; warns when
        a set one exceeds what the descriptors allow."""
        allowed = default_max_connections()
        if self.max_connections == 0:
            return ConnectionLimits(allowed, self.max_connections_per_ip, self.connections_max_idle_ms,
                                    self.queued_max_request_bytes, self.request_timeout_ms)
        if self.max_connections > allowed:
            soft, segments, reserve = descriptor_budget()
            log.warning("max.connections=%d exceeds the %d connections RLIMIT_NOFILE %d allows after the open "
                        "segments (%d descriptors) and a reserve (%d): connections may starve segment rolls",
                        self.max_connections, allowed, soft, segments, reserve)
        return self


class ConnectionTimeoutError(Exception):
    """A connection stayed silent past connections.max.idle.ms, or a request did not arrive
    whole within request.timeout.ms: it is closed."""


class ConnectionGate:
    """Counts connections, in all and per IP; `admit` says why a new one is refused, or None."""

    def __init__(self, limits: ConnectionLimits):
        self.limits = limits
        self.count = 0
        self.per_ip: collections.Counter = collections.Counter()
        self.refused = 0

    def admit(self, ip: str) -> str | None:
        if self.count >= self.limits.max_connections:
            reason = f"max.connections={self.limits.max_connections} reached"
        elif self.per_ip[ip] >= self.limits.max_connections_per_ip:
            reason = f"max.connections.per.ip={self.limits.max_connections_per_ip} reached for {ip}"
        else:
            self.count += 1
            self.per_ip[ip] += 1
            return None
        self.refused += 1
        return reason

    def leave(self, ip: str) -> None:
        self.count -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]


class RequestMemory:
    """queued.max.request.bytes: bytes of requests read and not yet answered, across
    connections.  A reservation waits while the others hold the limit; one larger than the
    whole limit is granted when nothing else is reserved (a frame up to the size limit is
    always served eventually, as Kafka's pool lets one allocation overshoot)."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        self._waiters: collections.deque = collections.deque()

    def _fits(self, size: int) -> bool:
        return self.limit_bytes < 0 or self.used_bytes == 0 or self.used_bytes + size <= self.limit_bytes

    def try_reserve(self, size: int) -> bool:
        """Count `size` bytes now if they fit and nobody waits (no await: the common case)."""
        if not self.has_room(size):
            return False
        self.used_bytes += size
        return True

    def has_room(self, size: int) -> bool:
        """Whether try_reserve would count `size` bytes now (nothing counted): the test of a
        request served whole in one call, which holds no memory past it (the express path's)."""
        return not self._waiters and self._fits(size)

    async def reserve(self, size: int) -> None:
        """Wait until `size` bytes fit (first come, first served), then count them."""
        while self._waiters or not self._fits(size):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                self._waiters.remove(waiter)
                if waiter.done() and not waiter.cancelled():
                    self._wake()            # woken, then cancelled: the next one may fit
                raise
            self._waiters.remove(waiter)
            if self._fits(size):
                break
        self.used_bytes += size
        self._wake()

    def release(self, size: int) -> None:
        self.used_bytes -= size
        self._wake()

    def _wake(self) -> None:
        """Wake the oldest waiter (it wakes the next one once it has counted its bytes)."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
                return
