"""`python -m storage` (and the `storage` console script, `storage.__main__:main`).

The subcommands live in storage/cli/ (one module per command): dump-log, verify, recover, epochs, demo, and audit
(dispatched to storage/spark/audit.py, which alone imports Spark).
"""
from __future__ import annotations

import sys

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
