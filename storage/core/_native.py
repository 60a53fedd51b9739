"""Loads the C core (`storage._plog`) and refuses a missing, foreign or stale build.

The native module embeds "<package version>+<digest of csrc/>" (csrc/build_plog.py).  At
import we check the ABI number and the package version, and, in a source checkout where
csrc/ sits next to the package, that the sources were not changed since the build: a stale
module would otherwise fail later with an AttributeError or, worse, wrong results.
"""
from __future__ import annotations

import os

from .._version import __version__

_REBUILD = "rebuild it with `pip install -e .` (or `pip install .`) from the project root"
EXPECTED_ABI = 10


class NativeBuildError(ImportError):
    """The C core is missing, stale or was built from other sources."""


try:
    from .._plog import ffi, lib  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by tests through a subprocess
    raise NativeBuildError(f"storage: the native core storage._plog is not built ({exc}); {_REBUILD}") from exc


def _check() -> None:
    abi = lib.plog_abi_version() if hasattr(lib, "plog_abi_version") else None
    if abi != EXPECTED_ABI:
        raise NativeBuildError(f"storage: native core ABI {abi}, expected {EXPECTED_ABI}; {_REBUILD}")
    built = ffi.string(lib.plog_version()).decode()
    version, _, digest = built.partition("+")
    if version != __version__:
        raise NativeBuildError(f"storage: native core built for version {version}, package is {__version__}; {_REBUILD}")
    csrc = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "csrc")
    if os.path.isfile(os.path.join(csrc, "build_plog.py")) and not os.environ.get("PLOG_SKIP_STALE_CHECK"):
        current = _source_digest(csrc)
        if current != digest:
            raise NativeBuildError(
                f"storage: native core is stale (built from sources {digest}, csrc/ is now {current}); {_REBUILD}")


def _source_digest(csrc: str) -> str:
    """Same digest as csrc/build_plog.py:source_digest, computed without importing cffi's build."""
    import ast
    import hashlib
    import re

    with open(os.path.join(csrc, "build_plog.py"), encoding="utf-8") as f:
        sources = ast.literal_eval(re.search(r"SOURCES = (\[[^\]]*\])", f.read()).group(1))
    digest = hashlib.sha256()
    for name in sorted(sources + ["plog.h", "internal.h", "build_plog.py", "pyrecords.c"]):
        with open(os.path.join(csrc, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


_check()

try:
    from .._pyrecords import append_counts, appender  # noqa: F401 -- PartitionLog's one-call append (csrc/pyrecords.c)
    from .._pyrecords import bind as _bind_pyrecords
    from .._pyrecords import build as build_listed  # noqa: F401 -- build_batch's walk over a list (csrc/pyrecords.c)
    from .._pyrecords import decode as decode_records  # noqa: F401 -- RecordBatch.records() (csrc/pyrecords.c)
    from .._pyrecords import pieces as iovec_pieces  # noqa: F401 -- append_batches' buffers (csrc/pyrecords.c)
except ImportError as exc:  # pragma: no cover - a partial build
    raise NativeBuildError(f"storage: the native module storage._pyrecords is not built ({exc}); {_REBUILD}") from exc
_bind_pyrecords(*(int(ffi.cast("uintptr_t", ffi.addressof(lib, name))) for name in (
    "plog_records_encode_spans", "plog_batch_finish", "plog_varint_encode", "plog_records_decode",
    "plog_headers_decode", "plog_segment_append_chunk")))


def check(rc: int) -> int:
    """Raise OSError for a positive errno; return engine codes (negative) to the caller."""
    if rc > 0:
        raise OSError(rc, os.strerror(rc))
    return rc

