"""Hypothesis example counts by tier. A property test decorated `@tiered(N, ...)` instead of
`@settings(max_examples=N, ...)` runs a quarter of its examples (at least 25) in the default
tier (`./dev test`) and carries the `examples` mark; the slow tier in CI (`.ci/run`:
STORAGE_TEST_EXAMPLES=full, `-m "slow or examples"`) runs it again with all N. Same strategies,
same checks: only how many draws the default tier makes."""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

FULL = os.environ.get("STORAGE_TEST_EXAMPLES") == "full"


def examples(full: int) -> int:
    """This tier's example count for a test whose full count is `full`."""
    return full if FULL else max(25, full // 4)


def tiered(full: int, **options):
    """settings(max_examples=examples(full), **options) and the `examples` mark."""
    def wrap(test):
        return pytest.mark.examples(settings(max_examples=examples(full), **options)(test))
    return wrap
