"""A reader of java.util.Properties files (Kafka's server.properties), as `Properties.load(InputStream)`
reads them: ISO-8859-1 text; `#` or `!` starting a comment line; `\\` at the end of a line (an odd
number of them) joining the next, whose leading blanks are dropped; a key ending at the first
unescaped `=`, `:` or blank, one `=`/`:` with blanks around it separating it from the value; the
escapes `\\t \\n \\r \\f \\uXXXX` and `\\c` -> `c` in keys and values.  Each entry keeps the number of the
line it starts on, so a refused property can be named with its line."""
from __future__ import annotations

import re
from typing import NamedTuple

_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A line that java.util.Properties would refuse too (a malformed \\uXXXX escape)."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line


class Entry(NamedTuple):
    key: str
    value: str
    line: int               # the (1-based) line the entry starts on


def _odd_backslashes(text: str) -> bool:
    return (len(text) - len(text.rstrip("\\"))) % 2 == 1


def _logical_lines(text: str):
    """(first line number, logical line): comments and blank lines skipped, continuations joined."""
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(lines):
        start, line = i + 1, lines[i].lstrip(_BLANKS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _odd_backslashes(line):
            line = line[:-1]
            if i == len(lines):          # a backslash at the end of the file continues nothing
                break
            line += lines[i].lstrip(_BLANKS)
            i += 1
        yield start, line


def _unescape(text: str, line: int) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        c = text[i + 1]
        if c == "u":
            digits = text[i + 2:i + 6]
            if len(digits) < 4 or not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise PropertiesError(line, f"malformed \\uXXXX escape: {text[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(c, c))
            i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """A logical line's raw key and raw value (escapes still in)."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _BLANKS:
            break
        i += 1
    key, i = line[:i], min(i, len(line))
    while i < len(line) and line[i] in _BLANKS:
        i += 1
    if i < len(line) and line[i] in "=:":
        i += 1
        while i < len(line) and line[i] in _BLANKS:
            i += 1
    return key, line[i:]


def parse(text: str) -> list[Entry]:
    """Every entry of a properties text in file order (a key given twice appears twice; the last
    one is the one java.util.Properties keeps)."""
    entries = []
    for number, line in _logical_lines(text):
        key, value = _split(line)
        entries.append(Entry(_unescape(key, number), _unescape(value, number), number))
    return entries


def load(path: str) -> dict[str, Entry]:
    """The properties of a file, the last of a key given twice winning (as java.util.Properties)."""
    with open(path, "rb") as f:
        text = f.read().decode("iso-8859-1")
    return {entry.key: entry for entry in parse(text)}
