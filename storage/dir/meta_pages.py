"""Which pages of an LMDB file its B-trees reference: the check that a file is not truncated.

LMDB maps the file and follows page numbers from the current meta page down its two trees
(the free list and the main tree, whose leaves hold the named databases' roots); touching a
page past the file's end is SIGBUS, which kills the process.  The file's length is not the
meta page's `last_pgno`: a transaction that allocates pages and frees them again before it
commits counts them in `last_pgno` but never writes them, so a healthy file can end before
that page (a big topic created then deleted on the controller store does this).  The check
is therefore on the pages LMDB can actually reach: every page referenced from the current
meta page, read with pread (never through the map), must lie inside the file.

The layout read here is LMDB's on-disk format (lmdb.h / mdb.c, 64-bit builds, the machine's
byte order): a 16-byte page header (pgno, pad, flags, lower/upper or an overflow page's
count), then 16-bit node offsets; a node is lo, hi, flags, key size (16 bits each), the key,
the data.  A branch node's child page is lo | hi << 16 | flags << 32; a leaf's F_BIGDATA data
is the first overflow page's number, its F_SUBDATA data a database record (root at +40).
"""
from __future__ import annotations

import os
import struct

_HEADER = struct.Struct("=QHHHH")       # pgno, pad, flags, lower, upper
_OVERFLOW_PAGES = struct.Struct("=I")   # at offset 12 of an overflow page
_NODE = struct.Struct("=HHHH")          # lo, hi, flags, key size
_PGNO = struct.Struct("=Q")
_META = struct.Struct("=IIQQ")          # magic, version, address, map size
_META_AT = 16
_DB_SIZE = 48
_DB_ROOT_AT = 40
_LAST_PGNO_AT = _META_AT + _META.size + 2 * _DB_SIZE
_TXNID_AT = _LAST_PGNO_AT + 8
_MAGIC = 0xBEEFC0DE
_P_INVALID = (1 << 64) - 1
P_BRANCH, P_LEAF, P_OVERFLOW, P_LEAF2 = 0x01, 0x02, 0x04, 0x20
F_BIGDATA, F_SUBDATA = 0x01, 0x02


def _current_meta(read, psize: int) -> bytes:
    """The meta page LMDB uses: of the two, the one with the larger transaction id (meta 0
    on a tie, as mdb_env_pick_meta)."""
    metas = [read(n * psize, psize) for n in (0, 1)]
    txnids = [_PGNO.unpack_from(m, _TXNID_AT)[0] for m in metas]
    return metas[1] if txnids[0] < txnids[1] else metas[0]


def _roots(meta: bytes) -> list[int]:
    dbs = _META_AT + _META.size
    return [_PGNO.unpack_from(meta, dbs + i * _DB_SIZE + _DB_ROOT_AT)[0] for i in (0, 1)]


def _children(page: bytes, psize: int) -> list[tuple[int, bool]]:
    """(page number, is an overflow run) of every page this tree page references."""
    _, _, flags, lower, _ = _HEADER.unpack_from(page)
    if flags & P_LEAF2 or not flags & (P_BRANCH | P_LEAF):
        return []                       # fixed-size duplicates hold no page numbers; garbage is LMDB's error
    found = []
    for i in range(max(0, min(lower, psize) - _HEADER.size) // 2):
        at = struct.unpack_from("=H", page, _HEADER.size + 2 * i)[0]
        if at + _NODE.size > psize:
            continue
        lo, hi, node_flags, ksize = _NODE.unpack_from(page, at)
        data = at + _NODE.size + ksize
        if flags & P_BRANCH:
            found.append((lo | hi << 16 | node_flags << 32, False))
        elif node_flags & F_BIGDATA and data + _PGNO.size <= psize:
            found.append((_PGNO.unpack_from(page, data)[0], True))
        elif node_flags & F_SUBDATA and data + _DB_SIZE <= psize:
            found.append((_PGNO.unpack_from(page, data + _DB_ROOT_AT)[0], False))
    return found


def missing_page(path, psize: int) -> str | None:
    """None when every page the current meta page's trees reference lies inside the file;
    otherwise a sentence naming the first page that does not."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size

        def read(offset, length):
            return os.pread(fd, length, offset)

        if size < 2 * psize:
            return f"file is {size} bytes, shorter than its two {psize}-byte meta pages"
        meta = _current_meta(read, psize)
        if _META.unpack_from(meta, _META_AT)[0] != _MAGIC:
            return None                 # not an LMDB meta page: LMDB itself refuses it
        pages = size // psize
        stack = [(root, False) for root in _roots(meta)]
        seen = set()
        while stack:
            pgno, overflow = stack.pop()
            if pgno in seen or pgno == _P_INVALID:    # an empty database has no root
                continue
            seen.add(pgno)
            if pgno >= pages:
                return f"file is {size} bytes, its trees reference page {pgno} (bytes {pgno * psize}-{(pgno + 1) * psize})"
            page = read(pgno * psize, psize)
            if overflow:
                if not _HEADER.unpack_from(page)[2] & P_OVERFLOW:
                    continue            # not an overflow page: LMDB reports that as corrupt
                count = _OVERFLOW_PAGES.unpack_from(page, 12)[0]
                if pgno + count > pages:
                    return (f"file is {size} bytes, its trees reference overflow pages {pgno}-{pgno + count - 1} "
                            f"(to byte {(pgno + count) * psize})")
                continue
            stack.extend(_children(page, psize))
        return None
    finally:
        os.close(fd)
