"""One client connection's bytes for the front end (server.FrameServer): Kafka's frames parsed
straight from a receive buffer the socket reads into (asyncio's BufferedProtocol: recv_into, no
StreamReader, no bytes object per read), and the answers written to the transport.

The connection's handler task (FrameServer._requests) takes one frame at a time, in arrival
order, and awaits only when it must: when no whole frame is buffered (the next read), when the
transport holds more than its high-water mark of unsent answers (the client is not reading),
or when a handler waits.  So pipelined requests that arrived together are served without a
return to the event loop between them, and their answers go out in one write, in order, once no
whole frame is left (or as soon as the handler task waits for anything, so an answer is never
held behind a slow request).

While the task waits for the next request (wait_size), a frame that arrives whole, alone in the
buffer, may be served right in the receive callback by the server's `eager` (FrameServer._now: a
Produce), in the task's context: a one-record request sent one at a time then costs no wake of
the task (issue 33's latency row: ~10 % of the broker's CPU per request, bench-notes s38).  What
`eager` leaves wakes the task as before, and pipelined requests are the task's; a client that
stops reading, a request `eager` began that still waits, or MAX_LATER answers still to come hand
the connection back to the task as well.

Limits (limits.py), without a timer made per request: one watchdog timer per connection checks
the deadline of what the task is waiting for -- connections.max.idle.ms for the next request's
first bytes and for the client to read its answers, request.timeout.ms for the rest of a frame
whose size arrived -- and fails the wait with ConnectionTimeoutError.  The buffer holds at most
BUFFER_BYTES unread: beyond that reading pauses (the bytes stay in the kernel, the client is
throttled by TCP).  A frame larger than the buffer is gathered in pieces of its own as its
bytes arrive, never more than its own bytes read (a client that announces 60 MiB and sends 1000
bytes holds ~1000 bytes, not 60 MiB), then joined.
"""
from __future__ import annotations

import asyncio
import collections
import contextvars

from .later import MAX_LATER, Close
from .limits import ConnectionTimeoutError

BUFFER_BYTES = 64 * 1024        # the receive buffer: the unread bytes held beyond the frame asked for
PIECE_BYTES = 256 * 1024        # a frame larger than the buffer is gathered in pieces of at most this size
HELD_BYTES = 64 * 1024          # answers to pipelined requests held for one write, at most
_MIN_READ = 4096                # room asked of the buffer for one recv_into
_CLOSE = Close(None)            # in the answers still to come: the connection closes there


class Connection(asyncio.BufferedProtocol):
    """A connection's receive buffer, its wait for bytes, its answers' write.  `start` (an async
    fn(connection)) is run as the connection's task when the transport is made; a TLS
    connection's protocol is made after its handshake by a task already running (start=None)."""

    def __init__(self, start=None):
        self._start_task = start
        self.task: asyncio.Task | None = None
        self.transport: asyncio.BaseTransport | None = None
        self._loop = asyncio.get_event_loop()
        self._buf: bytearray | None = None
        self._view: memoryview | None = None
        self._head = 0              # first unconsumed byte
        self._end = 0               # end of the bytes received
        self._pieces: list | None = None    # a frame larger than the buffer, gathered piece by piece
        self._piece: bytearray | None = None
        self._piece_used = 0
        self._missing = 0           # that frame's bytes not yet received
        self._paused = False        # reading paused (buffer full)
        self._eof = False
        self._lost: BaseException | None = None
        self._waiter: asyncio.Future | None = None
        self._writing_paused = False
        self._pending: list | None = None       # answers not yet written (pipelined requests)
        self._pending_bytes = 0
        self._flush_soon = False
        self._later: collections.deque | None = None   # answers in request order behind one still to come
        self._want = 0              # unread bytes the task waits for before buffer_updated wakes it
        self._deadline = float("inf")
        self._why = ""
        self._timer: asyncio.TimerHandle | None = None
        # Served from the protocol's callback (FrameServer._now): fn(size, alone) -> whether it
        # served the whole frame of `size` bytes at the buffer's head (alone: nothing after it),
        # run in the task's context while the task waits for the next request (wait_size); the
        # task serves what it leaves.
        self.eager = None
        self._context: contextvars.Context | None = None    # the task's (a plain connection's)
        self._parked = False        # the task waits in wait_size for the next request
        self._idle_s = 0.0          # that wait's connections.max.idle.ms
        self._blocker: asyncio.Future | None = None     # an eagerly begun request still running
        self._closing = False       # close_after_answers: nothing more is read or served

    # ---- the protocol side (the event loop calls these) ----
    def connection_made(self, transport) -> None:
        self.transport = transport
        if self._start_task is not None:
            self._context = contextvars.copy_context()
            self.task = self._loop.create_task(self._start_task(self), context=self._context)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._pieces is not None:        # never more than the big frame's own bytes
            if self._piece is None:
                self._piece = bytearray(min(self._missing, PIECE_BYTES))
                self._piece_used = 0
            return memoryview(self._piece)[self._piece_used:]
        if self._buf is None or len(self._buf) - self._end < _MIN_READ:
            self._make_room()
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._pieces is not None:
            self._missing -= nbytes
            self._piece_used += nbytes
            if self._piece_used == len(self._piece):
                self._pieces.append(self._piece)
                self._piece = None
                if not self._missing:       # whole: nothing more is read until it is taken
                    self._pause()
            if not self._missing:           # the task waits for the whole frame, not for each piece
                self._wake()
            return
        if self._closing:           # the frames after a closing request are never served
            return
        self._end += nbytes
        if self._end - self._head >= BUFFER_BYTES and self.transport is not None:
            self._pause()
        if self._parked and self.eager is not None:
            if self._serve_eagerly():
                self._resume()          # room again, if a frame that filled the buffer paused reading above
            if self._end == self._head and self._parked:    # all served, nothing for the task
                return
        if self._end - self._head >= self._want:    # not woken for each part of a frame still arriving
            self._wake()

    def eof_received(self):
        self._eof = True
        self._wake()
        # Keep a plain connection open for the answers to what arrived before the EOF (asyncio's
        # streams do the same); TLS cannot half-close.
        return self.transport is not None and self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc) -> None:
        self._eof = True
        self._lost = exc or ConnectionResetError("the connection closed")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake()

    def _make_room(self) -> None:
        """Room at the buffer's end: the unconsumed bytes moved to its start."""
        held = self._end - self._head
        if self._buf is None:
            self._buf = bytearray(BUFFER_BYTES)
            self._view = memoryview(self._buf)
        elif held:
            self._buf[:held] = self._view[self._head:self._end]      # same length: no resize
        self._head, self._end = 0, held

    def _pause(self) -> None:
        if not self._paused:
            self._paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        """Read again, when there is room for what is read."""
        room = self._missing if self._pieces is not None else BUFFER_BYTES - (self._end - self._head)
        if self._paused and not self._lost and not self._closing and room > 0:
            self._paused = False
            self.transport.resume_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
            self._parked = False

    def _serve_eagerly(self) -> bool:
        """The whole frames at the buffer's head served now by `eager`, in the task's context,
        while the task waits for the next request: a request sent one at a time is answered
        without a wake of the task (issue 33's latency row), and pipelined ones the express path
        takes (eager's `alone` False) without the task's turn, their answers written together.
        The first frame `eager` leaves, and all after it, are the task's, as are bytes of a
        frame still arriving, a client that does not read its answers (the task drains them
        within connections.max.idle.ms), a request begun here that still runs (the task waits
        for it before the next), MAX_LATER answers still to come.  True when any was served."""
        self._parked = False        # not entered again from within
        served = False
        try:
            while self._end - self._head >= 4:
                size = self.next_size()
                held = self._end - self._head
                if (size < 0 or held < 4 + size or self._writing_paused
                        or self._blocker is not None or (self._later and len(self._later) >= MAX_LATER)):
                    break
                if not self._context.run(self.eager, size, held == 4 + size):
                    break
                served = True
        finally:
            if served:
                self._deadline = self._loop.time() + self._idle_s   # not idle: answered now
            if self._writing_paused or self._blocker is not None or (self._later and len(self._later) >= MAX_LATER):
                self._wake()        # the task drains, waits for the request begun or for answers to go
            waiter = self._waiter
            self._parked = waiter is not None and not waiter.done()
        return served

    # ---- the deadline of a wait (one timer per connection, moved by assignment) ----
    def _arm(self, deadline: float, why: str) -> None:
        self._deadline, self._why = deadline, why
        timer = self._timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._timer = self._loop.call_at(deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._loop.time() >= self._deadline:
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(ConnectionTimeoutError(self._why))
        elif self._deadline != float("inf") and not self._lost:
            self._timer = self._loop.call_at(self._deadline, self._check)

    async def _wait(self, read: bool = True) -> None:
        """Until something arrives (bytes, the end, room to write) or the deadline passes;
        reading again when `read`."""
        if read:
            self._resume()
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
            self._deadline = float("inf")

    # ---- the task side (FrameServer._requests) ----
    def next_size(self) -> int | None:
        """The next frame's declared size when its 4 bytes are here, else None."""
        head = self._head
        if self._end - head < 4:
            return None
        return int.from_bytes(self._view[head:head + 4], "big", signed=True)

    async def wait_size(self, idle_s: float, why: str, unread_why: str = "") -> int | None:
        """The next frame's size once its 4 bytes arrive (within `idle_s`); None at the end of
        the stream between frames.  IncompleteReadError when it ends within a size.  While it
        waits, `eager` may serve whole frames (_serve_eagerly): their answers are drained here
        within `idle_s` (`unread_why`), and a request begun there that still runs is waited for."""
        while True:
            if self._blocker is not None:       # begun eagerly, still running: the next waits for it
                blocker = self._blocker
                while not blocker.done():
                    await self._wait(read=False)
                self._blocker = None
            if self._writing_paused:
                await self.drain_within(idle_s, unread_why)
            if self._later and len(self._later) >= MAX_LATER:
                await self.later_below(MAX_LATER, idle_s, unread_why)
            size = self.next_size()
            if size is not None:
                return size
            if self._eof:
                if self._end != self._head:
                    raise asyncio.IncompleteReadError(bytes(self._view[self._head:self._end]), 4)
                return None
            self.flush()
            self._arm(self._loop.time() + idle_s, why)
            self._parked, self._idle_s = self._context is not None, idle_s
            try:
                await self._wait()
            finally:
                self._parked = False

    def peek(self, size: int) -> memoryview:
        """The whole frame of `size` bytes at the buffer's head (its size read), not consumed."""
        head = self._head + 4
        return self._view[head:head + size]

    def skip(self, size: int) -> None:
        """Consume the whole frame of `size` bytes at the buffer's head (peek's)."""
        stop = self._head + 4 + size
        if stop == self._end:
            self._head = self._end = 0
        else:
            self._head = stop

    def running(self, future: asyncio.Future) -> None:
        """A request begun by `eager` still runs in `future`: the next request waits for it."""
        self._blocker = future

    def take(self, size: int) -> bytes | None:
        """The frame of `size` bytes whose size was read, consumed, when it is all here; else
        None (and the buffer is readied to gather it: a frame larger than the buffer is gathered
        in pieces of its own, read as they arrive)."""
        if self._pieces is not None:
            if self._missing:
                return None
            pieces, self._pieces = self._pieces, None
            return b"".join(pieces)
        head = self._head
        stop = head + 4 + size
        if stop > self._end:
            if 4 + size > BUFFER_BYTES:
                held = self._view[head + 4:self._end].tobytes()
                self._head = self._end = 0
                self._pieces, self._piece, self._missing = [held], None, size - len(held)
            return None
        frame = self._view[head + 4:stop].tobytes()
        if stop == self._end:
            self._head = self._end = 0
        else:
            self._head = stop
        return frame

    async def gather(self, size: int, timeout_s: float, why) -> bytes:
        """The frame of `size` bytes, whole within `timeout_s` (why(bytes arrived) names the
        failure)."""
        deadline = self._loop.time() + timeout_s
        while True:
            frame = self.take(size)
            if frame is not None:
                return frame
            if self._eof:
                raise asyncio.IncompleteReadError(b"", size)
            self.flush()
            self._arm(deadline, why(self._gathered(size)))
            self._want = 4 + size           # the frame whole in the buffer (a piece-gathered one wakes when whole)
            try:
                await self._wait()
            finally:
                self._want = 0

    def _gathered(self, size: int) -> int:
        if self._pieces is not None:
            return size - self._missing
        return max(0, self._end - self._head - 4)

    def hold(self) -> None:
        """Stop reading (the next frame's memory is not yet granted)."""
        if self.transport is not None and not self._lost:
            self._pause()

    def whole_frame_buffered(self) -> bool:
        size = self.next_size()
        return size is not None and self._end - self._head >= 4 + size

    def answer(self, data: bytes) -> bool:
        """Write an answer: queued behind an answer still to come (answer_later); held while the
        next request is already here whole (so answers to pipelined requests go out in one write;
        at most HELD_BYTES held), else written now with those held before it.  True when it was
        queued and MAX_LATER answers now wait (the next request waits for the first: later_below)."""
        if self._later:
            self._later.append(data)
            return len(self._later) >= MAX_LATER
        head, held = self._head, self._end - self._head     # whole_frame_buffered, inline (per answer)
        if held >= 4 and held >= 4 + int.from_bytes(self._view[head:head + 4], "big", signed=True):
            if self._pending is None:
                self._pending, self._pending_bytes = [data], len(data)
                if not self._flush_soon:
                    self._flush_soon = True
                    self._loop.call_soon(self._flush_later)
            else:
                self._pending.append(data)
                self._pending_bytes += len(data)
            if self._pending_bytes >= HELD_BYTES:
                self.flush()
        elif self._pending is None:
            if not self.transport.is_closing():
                self.transport.write(data)
        else:
            self._pending.append(data)
            self.flush()
        return False

    def answer_later(self, future: asyncio.Future) -> None:
        """An answer still to come (a future of bytes or None: later.py): written in its turn, once
        it and the answers before it are there; the answers after it queue behind it.  A future
        that fails (no answer could be built) closes the connection."""
        if self._later is None:
            self._later = collections.deque()
        self._later.append(future)
        future.add_done_callback(self._later_done)

    async def later_below(self, count: int, idle_s: float, why: str) -> None:
        """Until fewer than `count` answers are still to come or queued behind one."""
        while self._later and len(self._later) >= count:
            if self._lost:
                raise ConnectionResetError("the connection closed while answers were still to come")
            self._arm(self._loop.time() + idle_s, f"{why} (an answer still to come)")
            await self._wait(read=False)

    def _later_done(self, _future) -> None:
        """Write what is there at the queue's head, in order, in one write."""
        later, ready = self._later, []
        while later:
            head = later[0]
            if type(head) is not bytes:
                if not head.done():
                    break
                if head.cancelled() or head.exception() is not None:
                    self.close()        # the rest cancelled; the server logged why (FrameServer._answer_later)
                    self._wake()
                    return
                head = head.result()
            later.popleft()
            if type(head) is Close:     # close_after_answers, or a handler's that waited: the answers
                # before it go, then the connection
                if ready and self.transport is not None and not self.transport.is_closing():
                    self.flush()
                    self.transport.write(b"".join(ready))
                self.close()
                self._wake()
                return
            if head is not None:
                ready.append(head)
        if ready and self.transport is not None and not self.transport.is_closing():
            self.flush()
            self.transport.write(ready[0] if len(ready) == 1 else b"".join(ready))
        self._wake()

    def flush(self) -> None:
        """Write the answers held."""
        pending = self._pending
        if pending is not None:
            self._pending = None
            if not self.transport.is_closing():
                self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def _flush_later(self) -> None:
        """The task waited while answers were held (a handler waits): write them now."""
        self._flush_soon = False
        if not self._lost:
            self.flush()

    @property
    def writing_paused(self) -> bool:
        return self._writing_paused

    def unsent_bytes(self) -> int:
        """Answers written or held and not yet taken by the socket."""
        held = self._pending_bytes if self._pending is not None else 0
        return held + (self.transport.get_write_buffer_size() if self.transport is not None else 0)

    async def drain_within(self, idle_s: float, why: str) -> None:
        """Wait while the transport holds more than its high-water mark (the client reads slowly)."""
        self.flush()
        while self._writing_paused:
            if self._lost:
                raise ConnectionResetError("the connection closed while an answer was sent")
            self._arm(self._loop.time() + idle_s, why)
            await self._wait(read=False)
        if self._lost:
            raise ConnectionResetError("the connection closed while an answer was sent")

    # ---- what sendfile.send and FrameServer use of a StreamWriter ----
    def write(self, data) -> None:
        self.flush()
        self.transport.write(data)

    async def drain(self) -> None:
        while self._writing_paused and not self._lost:
            await self._wait(read=False)
        if self._lost:
            raise ConnectionResetError("the connection closed while an answer was sent")

    def get_extra_info(self, name: str, default=None):
        return self.transport.get_extra_info(name, default)

    def close_after_answers(self) -> None:
        """Close once the answers still to come are written (a handler's later.Close: Kafka's
        closeConnection comes after the answers to the requests before it, since it reads a
        connection's next request only once the last is answered); the frames not yet served,
        and any that arrive, never are."""
        if not self._later:
            self.close()
            return
        self._head = self._end = 0
        self._closing = True
        if self.transport is not None:
            self._pause()
        done = self._loop.create_future()
        done.set_result(_CLOSE)
        self._later.append(done)

    def close(self) -> None:
        self._head = self._end = 0      # the frames not yet served never are: the connection ended
        later, self._later = self._later, None
        for item in later or ():
            if type(item) is not bytes:
                item.cancel()       # the connection ended: nobody reads these answers
        if self.transport is not None:
            self.flush()
            self.transport.close()
