"""Output helpers shared by the commands: exit statuses, usage errors, JSON (progress bars and
counted nouns come from storage.inspect.progress)."""
from __future__ import annotations

import json
import sys

from ..inspect import UsageError  # noqa: F401 - the commands raise it; main maps it to USAGE

USAGE, PROBLEMS, OK = 2, 1, 0


def _print_json(document) -> None:
    json.dump(document, sys.stdout, indent=1)
    sys.stdout.write("\n")
