"""Progress on stderr (tqdm, only on a terminal) and counted nouns, for long read-only work."""
from __future__ import annotations

import sys


def _progress(total: int, desc: str, enabled: bool, unit: str = "B"):
    """A tqdm bar on stderr (only on a terminal), or a stand-in that does nothing."""
    if enabled and sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", unit_divisor=1024,
                        leave=False, file=sys.stderr, dynamic_ncols=True, mininterval=0.2)
    return _NoProgress()


class _NoProgress:
    def update(self, n=1):
        pass

    def set_description_str(self, text):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Spinner:
    """Elapsed seconds on stderr while something slow without progress of its own runs (a
    terminal and tqdm only)."""

    def __init__(self, desc: str):
        self.desc = desc
        self.bar = None
        self.thread = None
        self.stop = None

    def __enter__(self):
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                return self
            import threading

            self.bar = tqdm(total=None, desc=self.desc, bar_format="{desc}: {elapsed}", file=sys.stderr, leave=False)
            self.stop = threading.Event()

            def tick():
                while not self.stop.wait(0.5):
                    self.bar.refresh()

            self.thread = threading.Thread(target=tick, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.stop.set()
            self.thread.join()
            self.bar.close()
        return False


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("ch") else f"{n} {word}s"
