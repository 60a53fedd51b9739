#!/usr/bin/env python3
"""librdkafka's C load generator, examples/rdkafka_performance.c, built once into the cache of
tools/rdkafka_suite.py (stdlib only), for the benchmarks' C-client rows (benchmarks/bench_wire_c.py).

    python tools/rdkafka_perf.py            build it (if not cached) and print its path
    python tools/rdkafka_perf.py --why      say why it cannot be built here, or its path

The library is the suite's: the same librdkafka 2.15.1 tree, fetched and configured by
rdkafka_suite (its `build_library`, `make -C src lib` only). The npm package that tree comes
from leaves out examples/, so the example's source is taken from the tree when it has one (a
full source checkout), else from Debian's librdkafka-dev package, which ships the file under
/usr/share/doc/librdkafka-dev/examples/ (`apt-get download`, unpacked with `dpkg-deb -x`; that
file is librdkafka 2.0.2's: it uses only the public API and rd.h's clock helpers, and builds
against 2.15.1 unchanged). It is linked statically against src/librdkafka.a, so the binary runs
wherever it was built. Nothing here reaches a host other than the two package registries.

`Unavailable` (with the reason) when there is no compiler, no cached tree and no npm, no apt:
the benchmark rows skip with that reason.
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = "rdkafka_performance.c"
DEBIAN_PACKAGE = "librdkafka-dev"
DEBIAN_EXAMPLE = Path("usr/share/doc/librdkafka-dev/examples") / EXAMPLE


def _suite():
    """tools/rdkafka_suite.py as a module (tools/ is not a package)."""
    if "rdkafka_suite" in sys.modules:
        return sys.modules["rdkafka_suite"]
    spec = importlib.util.spec_from_file_location("rdkafka_suite", HERE / "rdkafka_suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["rdkafka_suite"] = module
    spec.loader.exec_module(module)
    return module


class Unavailable(RuntimeError):
    """rdkafka_performance cannot be built on this machine (the message says why)."""


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def example_source(tree: Path, cache: Path) -> Path:
    """The example's C file: the tree's own, else the one Debian's librdkafka-dev ships."""
    own = tree / "examples" / EXAMPLE
    if own.exists():
        return own
    kept = cache / "perf" / "examples" / EXAMPLE        # ../src/rd.h from here is the tree's src/
    if kept.exists():
        return kept
    apt, dpkg = shutil.which("apt-get"), shutil.which("dpkg-deb")
    if apt is None or dpkg is None:
        raise Unavailable(f"the cached librdkafka tree has no examples/ and there is no apt-get/dpkg-deb "
                          f"to take {EXAMPLE} from Debian's {DEBIAN_PACKAGE}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            subprocess.run([apt, "download", DEBIAN_PACKAGE], cwd=tmp, check=True, timeout=300,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            debs = list(Path(tmp).glob(f"{DEBIAN_PACKAGE}_*.deb"))
            if len(debs) != 1:
                raise Unavailable(f"apt-get download {DEBIAN_PACKAGE} left {[d.name for d in debs]}")
            subprocess.run([dpkg, "-x", str(debs[0]), str(Path(tmp) / "x")], check=True, timeout=120)
        except subprocess.SubprocessError as exc:
            raise Unavailable(f"apt-get download {DEBIAN_PACKAGE} failed: {exc}") from None
        found = Path(tmp) / "x" / DEBIAN_EXAMPLE
        if not found.exists():
            raise Unavailable(f"Debian's {DEBIAN_PACKAGE} has no {DEBIAN_EXAMPLE}")
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, kept)
    return kept


def _static_libs(tree: Path) -> list[str]:
    """The libraries librdkafka.a needs, as its configure found them (Makefile.config's LIBS)."""
    libs: list[str] = []
    for line in (tree / "Makefile.config").read_text(errors="replace").splitlines():
        if m := re.match(r"LIBS\+?=\s*(.*)", line):
            libs += m.group(1).split()
    return libs or ["-lm", "-lz", "-ldl", "-lpthread", "-lrt"]


def build(cache: Path | None = None, jobs: int = 2) -> Path:
    """rdkafka_performance, built once into CACHE/perf/; returns its path."""
    suite = _suite()
    cache = cache or suite.CACHE
    binary = cache / "perf" / "rdkafka_performance"
    if binary.exists():
        return binary
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise Unavailable("no C compiler (cc, gcc or clang)")
    try:
        tree = suite.source_tree(cache)
        library = suite.build_library(cache, jobs)
    except suite.Unavailable as exc:
        raise Unavailable(str(exc)) from None
    source = example_source(tree, cache)
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")
    _say(f"rdkafka_perf: building {binary}")
    result = subprocess.run([cc, "-O2", "-I", str(tree / "src"), "-I", str(tree), "-o", str(partial), str(source),
                             str(library), *_static_libs(tree)], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise Unavailable(f"{EXAMPLE} did not build: {result.stderr.strip()[-800:]}")
    partial.rename(binary)
    return binary


def find() -> tuple[Path | None, str]:
    """(the binary, "") or (None, why it cannot be had here): builds it when it can."""
    try:
        return build(), ""
    except Unavailable as exc:
        return None, str(exc)
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


# --- running it --------------------------------------------------------------------------------

_PRODUCED = re.compile(r"% (\d+) messages produced \((\d+) bytes\), (\d+) delivered .*? in (\d+)ms")
_CONSUMED = re.compile(r"% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms")


def parse_summary(output: str) -> dict:
    """The closing summary of a -P or -C run (the last of the lines it prints every second):
    messages, bytes, delivered (producer), seconds by its own clock (from its first message to
    its last delivery report or consumed message)."""
    produced, consumed = _PRODUCED.findall(output), _CONSUMED.findall(output)
    if produced:
        messages, size, delivered, ms = map(int, produced[-1])
        return {"messages": messages, "bytes": size, "delivered": delivered, "seconds": ms / 1000}
    if consumed:
        messages, size, ms = map(int, consumed[-1])
        return {"messages": messages, "bytes": size, "delivered": messages, "seconds": ms / 1000}
    raise ValueError(f"no rdkafka_performance summary in: {output[-600:]!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--why", action="store_true", help="print the reason it cannot be built instead of failing")
    args = p.parse_args(argv)
    binary, why = find()
    if binary is None:
        print(f"rdkafka_performance unavailable: {why}", file=sys.stderr if not args.why else sys.stdout)
        return 0 if args.why else 1
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
