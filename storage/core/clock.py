"""The engine's two clocks: wall-clock milliseconds for what Kafka stamps and compares with
record timestamps (segment age, retention, producer expiry, markers), and monotonic
milliseconds for intervals and timeouts (schedules, request deadlines), which a wall-clock
jump must not shorten or stretch."""
from __future__ import annotations

import time


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_seconds() -> float:
    """Wall-clock seconds, as prometheus_client stamps a series' `_created` (wire/metrics.py)."""
    return time.time()
