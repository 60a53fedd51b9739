"""The bare servers of bench_floor.py (not a test module): an asyncio server that reads
size-prefixed frames and answers each with 40 bytes carrying its correlation id, nothing else
(`echo`), or that also appends the frame's records with the engine first (`append`, the records
at the given offset and length of each frame: one Produce request's one batch).  No request
parsing, no validation beyond the engine's own, no metrics: the least a broker written on this
event loop and engine can do per request.

    python benchmarks/floor_server.py echo|append asyncio|uvloop RECORDS_AT RECORDS_LEN

prints "ready PORT PID" once listening on 127.0.0.1 (a free port), then serves until killed.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import struct
import sys
import tempfile

ANSWER_BYTES = 40


class Bare(asyncio.Protocol):
    def __init__(self, log, records_at: int, records_len: int):
        self.log, self.at, self.stop = log, records_at, records_at + records_len
        self.buffer = bytearray()
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        pos, end, answers = 0, len(buffer), []
        while end - pos >= 4:
            (size,) = struct.unpack_from(">i", buffer, pos)
            if end - pos - 4 < size:
                break
            frame = bytes(buffer[pos + 4:pos + 4 + size])
            if self.log is not None:
                self.log.append_as_leader(frame[self.at:self.stop], 5)
            answer = bytearray(4 + ANSWER_BYTES)
            struct.pack_into(">i", answer, 0, ANSWER_BYTES)
            answer[4:8] = frame[4:8]               # the correlation id
            answers.append(answer)
            pos += 4 + size
        del buffer[:pos]
        if answers:
            self.transport.write(b"".join(answers))


async def serve(mode: str, records_at: int, records_len: int) -> None:
    log = directory = None
    if mode == "append":
        import storage
        directory = tempfile.mkdtemp(prefix="bench-floor-")
        log = storage.PartitionLog.open(directory, storage.LogConfig(segment_bytes=1 << 30, fsync=False))
    try:
        server = await asyncio.get_running_loop().create_server(lambda: Bare(log, records_at, records_len),
                                                                "127.0.0.1", 0)
        print("ready", server.sockets[0].getsockname()[1], os.getpid(), flush=True)
        await asyncio.Event().wait()
    finally:
        if directory is not None:
            log.close()
            shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str]) -> None:
    mode, loop, records_at, records_len = argv[0], argv[1], int(argv[2]), int(argv[3])
    factory = None
    if loop == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(mode, records_at, records_len))


if __name__ == "__main__":
    main(sys.argv[1:])
