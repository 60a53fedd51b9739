"""The loopback peer of bench_fetch_floor.py (not a test module): a server that answers each
size-prefixed request frame it reads with the next of a file's recorded answer frames (the
broker's own answers to the same requests, recorded by the raw client), in order -- the same
bytes on the same kind of connection, with nothing computed: what moving them over loopback TCP
costs.  A blocking socket, one connection at a time, no event loop.

    python benchmarks/fetch_floor_server.py copy|sendfile ANSWERS_FILE

`copy`: every answer from memory with sendall (the file read once at the start); `sendfile`:
every answer from the file with os.sendfile (the kernel copies the page cache's pages: the
least a server that keeps its records in files can do).  Prints "ready PORT PID" once
listening on 127.0.0.1 (a free port), then serves until killed.
"""
from __future__ import annotations

import os
import socket
import struct
import sys


def _read_exact(conn: socket.socket, view: memoryview, n: int) -> bool:
    got = 0
    while got < n:
        k = conn.recv_into(view[got:n])
        if not k:
            return False
        got += k
    return True


def answers_of(data: bytes) -> list[tuple[int, int]]:
    """(position, length) of each size-prefixed frame in `data`, prefix included."""
    out, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        out.append((pos, 4 + size))
        pos += 4 + size
    return out


def serve(mode: str, path: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    frames = answers_of(data)
    fd = os.open(path, os.O_RDONLY)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    print("ready", listener.getsockname()[1], os.getpid(), flush=True)
    request = bytearray(1 << 16)
    view, source = memoryview(request), memoryview(data)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            for position, length in frames:
                if not _read_exact(conn, view, 4):
                    break
                (size,) = struct.unpack_from(">i", request)
                if not _read_exact(conn, view, size):
                    break
                if mode == "copy":
                    conn.sendall(source[position:position + length])
                    continue
                sent = 0
                while sent < length:
                    sent += os.sendfile(conn.fileno(), fd, position + sent, length - sent)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
