"""Sending an answer in pieces (fetch_answer.Pieces): its bytes through the connection's
stream writer (the bytes-like pieces between two slices in one transport.writelines), its
FileSlices from their segment files with os.sendfile -- Kafka's FileRecords.writeTo, whose
transferTo is sendfile on Linux.  The records never pass through Python.  A slice goes by one os.sendfile straight to the socket when the transport holds
nothing unsent, and what the socket did not take by asyncio's loop.sendfile (which waits until
the transport has sent what was written before, then calls os.sendfile as the socket takes more).

An event loop without a sendfile of its own (uvloop's loop.sendfile raises
NotImplementedError) still gets the one os.sendfile straight to the socket; what the socket did
not take of that slice is copied (the rest of the slice's view).

When it copies instead (the slice's view, written as bytes: what the read returned):
  - a TLS connection (writer.get_extra_info("sslcontext") is set: the kernel cannot encrypt),
    a platform without os.sendfile, or a transport that refuses it;
  - a slice no longer `intact()` before its send starts (its log was cut since the read: the
    file may hold other bytes there, the view still holds the read's).
A slice cut while it is being sent, or whose file ends before the slice does, cannot be put
right (part of it is on the wire): the connection is closed, as Kafka's writeTo throws when
the file was truncated during the write, and the client fetches again on a new one.

`stats` counts what went which way (tests read it; a broker's metrics may).
"""
from __future__ import annotations

import asyncio
import collections
import errno
import os

from ..log.file_slice import FileSlice

stats: collections.Counter = collections.Counter()     # sendfile_calls, sendfile_bytes, copied_bytes, cut


def summary() -> str:
    """`12 MiB by sendfile in 40 calls, 0 B copied, ...`: how this process sent FileSlices."""
    def size(n: int) -> str:
        return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} B"
    return (f"{size(stats['sendfile_bytes'])} by sendfile in {stats['sendfile_calls']} calls, "
            f"{size(stats['copied_bytes'])} copied, {stats['refused']} refused, {stats['cut']} cut while sent")


# os.sendfile's refusals of a file or socket it cannot serve (before sending anything).
_REFUSED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK})


class SliceCutError(ConnectionError):
    """A FileSlice's file changed while it was being sent: the connection must close."""


def native(writer: asyncio.StreamWriter) -> bool:
    """Whether FileSlices may go by os.sendfile on this connection."""
    return writer.get_extra_info("sslcontext") is None and hasattr(os, "sendfile")


def loop_sendfile() -> bool:
    """Whether the running loop sends a file itself as the socket takes it (asyncio's); uvloop's
    loop.sendfile is AbstractEventLoop's, which raises NotImplementedError."""
    return type(asyncio.get_running_loop()).sendfile is not asyncio.AbstractEventLoop.sendfile


async def send(writer: asyncio.StreamWriter, pieces) -> None:
    """Write `pieces` (fetch_answer.Pieces) to `writer` and drain it; the caller closes them.
    The bytes between two slices (or before the first, after the last) go in one write."""
    zero_copy, by_loop = native(writer), loop_sendfile()
    run: list = []                      # bytes-like parts not yet written, in order
    for part in pieces.parts:
        if type(part) is not FileSlice:
            run.append(part)
            continue
        if zero_copy and part.intact():
            _write(writer, run, zero_copy)
            run = []
            sent = await _send_slice(writer, part, by_loop)
            if sent is not None:
                stats["sendfile_bytes"] += sent
                if not by_loop and sent < part.length and part.intact():
                    run.append(part.view[sent:])    # the loop cannot wait for room: the rest copied
                    stats["copied_bytes"] += part.length - sent
                    sent = part.length
                if sent != part.length or not part.intact():
                    stats["cut"] += 1
                    raise SliceCutError(f"{part!r}: the file ended or was cut after {sent} bytes were sent")
                continue
            zero_copy = False           # refused before a byte was sent: copy this and the rest
            stats["refused"] += 1
        run.append(part.view)
        stats["copied_bytes"] += part.length
    _write(writer, run, zero_copy)
    await writer.drain()


def _write(writer, parts: list, gather: bool) -> None:
    """Write `parts` in order: several in one transport.writelines when `gather` (a plain
    socket: uvloop's transport sends them in one writev, the views as they are -- an answer's
    header, its records from the segment's mapping and the bytes after them in one system call
    and one pass through the TCP stack, not three; asyncio's joins them, then writes once), else
    one write each (TLS: the layer copies each as it encrypts)."""
    if not parts:
        return
    if len(parts) == 1 or not gather:
        for part in parts:
            writer.write(part)
        return
    flush = getattr(writer, "flush", None)      # a Connection's held answers go first
    if flush is not None:
        flush()
    writer.transport.writelines(parts)


async def _send_slice(writer: asyncio.StreamWriter, part: FileSlice, by_loop: bool = True) -> int | None:
    """Send `part` from its file: the bytes sent, or None when sendfile was refused before any
    was.  First one os.sendfile straight to the socket when the transport holds nothing unsent
    (what it wrote before is on the socket, and it writes nothing itself until it is given
    more): the common answer goes in that one call, without asyncio's sendfile set-up (an
    fstat, a seek, pausing and resuming the reading: ~5 system calls); what the socket did not
    take goes by loop.sendfile, which waits for room (`by_loop`), else back to the caller."""
    transport = writer.transport
    if transport.is_closing():
        raise ConnectionResetError("the connection closed before the answer was sent")
    sent = 0
    sock = writer.get_extra_info("socket")
    if sock is not None and transport.get_write_buffer_size() == 0:
        try:
            sent = os.sendfile(sock.fileno(), part.fd, part.position, part.length)
        except (BlockingIOError, InterruptedError):
            pass                        # the socket is full: loop.sendfile waits for room
        except OSError as exc:
            if exc.errno not in _REFUSED:
                raise                   # the peer went away (EPIPE, ECONNRESET): a ConnectionError
            return None
        stats["sendfile_calls"] += 1
        if sent == part.length:
            return sent
    if not by_loop:
        return sent                     # what the socket took at once; the caller copies the rest
    try:
        rest = await asyncio.get_running_loop().sendfile(transport, part, part.position + sent, part.length - sent,
                                                         fallback=False)
    except (asyncio.SendfileNotAvailableError, NotImplementedError, RuntimeError):
        # Raised before a byte of this call was sent (asyncio's contract).
        if transport.is_closing():
            raise ConnectionResetError("the connection closed while the answer was sent") from None
        if sent:
            raise
        return None
    stats["sendfile_calls"] += 1
    return sent + rest
