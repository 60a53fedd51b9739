"""The I/O seam: every file operation of the engine, C and Python, goes through here.

`current()` is the seam in use.  By default it is `PosixIO`, whose file operations are the C
core's POSIX implementation (so Python and C share one code path) and whose namespace
operations (rename, unlink, directory fsync) are `os` calls.  `install(io)` replaces it for
the whole process -- the C core then calls back into the installed object through cffi
`extern "Python"` callbacks -- and `using(io)` does so for a `with` block.  A simulated file
system (storage.sim, for crash tests) subclasses `PosixIO` and overrides what it records.

Contract of each method: raise OSError (with errno) on failure, return as documented.
`fsync(fd, flags)` with `SYNC_NOOP` in flags is a flush point while fsync is disabled
(`LogConfig(fsync=False)`): the POSIX seam skips the system call, a simulator still sees it.
"""
from __future__ import annotations

import contextlib
import errno as _errno
import os
import threading

from ._native import ffi, lib

SYNC_NOOP = lib.PLOG_SYNC_NOOP
O_READ = lib.PLOG_O_READ
O_WRITE = lib.PLOG_O_WRITE
O_CREATE = lib.PLOG_O_CREATE
O_TRUNCATE = lib.PLOG_O_TRUNCATE


def _raise(rc: int, what: str, path=None) -> None:
    if rc:
        raise OSError(rc, f"{what}: {os.strerror(rc)}", None if path is None else str(path))


class PosixIO:
    """The production seam: real files, real fsync (unless SYNC_NOOP)."""

    # ---- file operations (the C core reaches these through the callbacks below) ----
    def open(self, path, flags: int) -> int:
        fd = ffi.new("int *")
        _raise(lib.plog_posix_open(os.fsencode(path), flags, fd), "open", path)
        return fd[0]

    def close(self, fd: int) -> None:
        _raise(lib.plog_posix_close(fd), "close")

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        buf = bytearray(length)
        done = ffi.new("size_t *")
        _raise(lib.plog_posix_pread(fd, ffi.from_buffer(buf), length, offset, done), "pread")
        return bytes(buf[: done[0]])

    def pwrite(self, fd: int, data, offset: int) -> None:
        _raise(lib.plog_posix_pwrite(fd, ffi.from_buffer(data), len(data), offset), "pwrite")

    def pwritev(self, fd: int, buffers: list, offset: int) -> None:
        """Write the buffers one after another from offset, everything or an error.  Through
        one pwrite of their concatenation: a seam that overrides pwrite (a simulator, a fault
        injector) sees the vectored write as the one write of those bytes it is.  (Without an
        installed seam the C core calls writev itself and never comes here.)"""
        self.pwrite(fd, b"".join(buffers), offset)

    def fsync(self, fd: int, flags: int = 0) -> None:
        _raise(lib.plog_posix_fsync(fd, flags), "fsync")

    def ftruncate(self, fd: int, size: int) -> None:
        _raise(lib.plog_posix_ftruncate(fd, size), "ftruncate")

    def fsize(self, fd: int) -> int:
        out = ffi.new("int64_t *")
        _raise(lib.plog_posix_fsize(fd, out), "fstat")
        return out[0]

    def mmap(self, fd: int, length: int, writable: bool) -> int:
        """Map `length` bytes of fd shared; return the address as an int (0 for length 0)."""
        out = ffi.new("uint8_t **")
        _raise(lib.plog_posix_mmap(fd, length, 1 if writable else 0, out), "mmap")
        return int(ffi.cast("uintptr_t", out[0]))

    def munmap(self, address: int, length: int) -> None:
        _raise(lib.plog_posix_munmap(ffi.cast("uint8_t *", address), length), "munmap")

    def msync(self, address: int, length: int, flags: int = 0) -> None:
        _raise(lib.plog_posix_msync(ffi.cast("uint8_t *", address), length, flags), "msync")

    # ---- namespace operations (Python only) ----
    def rename(self, source, target) -> None:
        os.replace(source, target)

    def unlink(self, path) -> None:
        os.unlink(path)

    def fsync_dir(self, path, flags: int = 0) -> None:
        if flags & SYNC_NOOP:
            return
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mkdir(self, path) -> None:
        """Create the directory (and missing parents); an existing directory is fine."""
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise
        except FileNotFoundError:
            os.makedirs(path, exist_ok=True)

    def rmdir(self, path) -> None:
        os.rmdir(path)

    def listdir(self, path) -> list[str]:
        return os.listdir(path)

    def list_entries(self, path) -> tuple[list[str], set[str]]:
        """(the names in a directory, those of them that are directories): listdir and isdir
        of each name -- one scandir without a stat per name when neither is overridden."""
        cls = type(self)
        if cls.listdir is PosixIO.listdir and cls.isdir is PosixIO.isdir:
            names, dirs = [], set()
            with os.scandir(path) as entries:
                for entry in entries:
                    names.append(entry.name)
                    if entry.is_dir():
                        dirs.add(entry.name)
            return names, dirs
        names = self.listdir(path)
        return names, {n for n in names if self.isdir(os.path.join(path, n))}

    def exists(self, path) -> bool:
        return os.path.exists(path)

    def isdir(self, path) -> bool:
        return os.path.isdir(path)

    def file_size(self, path) -> int:
        return os.path.getsize(path)

    def mtime_ms(self, path) -> int:
        """The file's modification time in ms (retention's age of a segment without timestamps)."""
        return os.stat(path).st_mtime_ns // 1_000_000

    # ---- whole small files (checkpoints), written through the operations above ----
    def read_file(self, path) -> bytes:
        cls = type(self)
        if cls.open is PosixIO.open and cls.pread is PosixIO.pread and cls.fsize is PosixIO.fsize \
                and cls.close is PosixIO.close:
            # The same four calls without the seam's wrappers: a checkpoint a partition open.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                data = os.read(fd, size)
                while len(data) < size:       # a read returns at most 2 GiB
                    more = os.read(fd, size - len(data))
                    if not more:
                        break
                    data += more
                return data
            finally:
                os.close(fd)
        fd = self.open(path, O_READ)
        try:
            return self.pread(fd, self.fsize(fd), 0)
        finally:
            self.close(fd)

    def write_file_atomic(self, path, data: bytes, *, sync: bool = True) -> None:
        """tmp -> fsync -> rename -> fsync(dir): readers see the old or the new file, never a mix."""
        path = os.fspath(path)
        tmp = path + ".tmp"
        flags = 0 if sync else SYNC_NOOP
        fd = self.open(tmp, O_READ | O_WRITE | O_CREATE | O_TRUNCATE)
        try:
            self.pwrite(fd, data, 0)
            self.fsync(fd, flags)
        finally:
            self.close(fd)
        try:
            self.rename(tmp, path)
        finally:
            self.fsync_dir(os.path.dirname(path) or ".", flags)


_default = PosixIO()
_current: PosixIO = _default
_lock = threading.Lock()
_callback_error = threading.local()


def current() -> PosixIO:
    return _current


def install(io: PosixIO | None) -> PosixIO:
    """Make `io` the seam for the whole process (None restores POSIX); returns the previous one."""
    global _current
    with _lock:
        previous = _current
        _current = io if io is not None else _default
        lib.plog_io_use_python(0 if _current is _default else 1)
    return previous


@contextlib.contextmanager
def using(io: PosixIO):
    previous = install(io)
    try:
        yield io
    finally:
        install(previous)


def take_callback_error() -> BaseException | None:
    """The non-OSError exception a callback swallowed for the C core, if any (then cleared)."""
    exc = getattr(_callback_error, "value", None)
    _callback_error.value = None
    return exc


# ---- callbacks from the C seam (active only after install() of a non-default seam) ----

def _guard(fn):
    def wrapper(*args):
        try:
            return fn(*args)
        except OSError as exc:
            return exc.errno or _errno.EIO
        except BaseException as exc:  # noqa: BLE001 - must not unwind through C
            _callback_error.value = exc
            return lib.PLOG_ECALLBACK

    wrapper.__name__ = fn.__name__
    return wrapper


@ffi.def_extern(name="_plog_py_open")
@_guard
def _py_open(path, flags, fd_out):
    fd_out[0] = _current.open(os.fsdecode(ffi.string(path)), flags)
    return 0


@ffi.def_extern(name="_plog_py_close")
@_guard
def _py_close(fd):
    _current.close(fd)
    return 0


@ffi.def_extern(name="_plog_py_pread")
@_guard
def _py_pread(fd, buf, length, offset, read_out):
    data = _current.pread(fd, length, offset)
    ffi.memmove(buf, data, len(data))
    read_out[0] = len(data)
    return 0


@ffi.def_extern(name="_plog_py_pwrite")
@_guard
def _py_pwrite(fd, buf, length, offset):
    _current.pwrite(fd, ffi.buffer(buf, length), offset)
    return 0


@ffi.def_extern(name="_plog_py_pwritev")
@_guard
def _py_pwritev(fd, iov, count, offset):
    _current.pwritev(fd, [ffi.buffer(iov[i].base, iov[i].length) for i in range(count)], offset)
    return 0


@ffi.def_extern(name="_plog_py_fsync")
@_guard
def _py_fsync(fd, flags):
    _current.fsync(fd, flags)
    return 0


@ffi.def_extern(name="_plog_py_ftruncate")
@_guard
def _py_ftruncate(fd, size):
    _current.ftruncate(fd, size)
    return 0


@ffi.def_extern(name="_plog_py_fsize")
@_guard
def _py_fsize(fd, size_out):
    size_out[0] = _current.fsize(fd)
    return 0


@ffi.def_extern(name="_plog_py_mmap")
@_guard
def _py_mmap(fd, length, writable, addr_out):
    addr_out[0] = ffi.cast("uint8_t *", _current.mmap(fd, length, bool(writable)))
    return 0


@ffi.def_extern(name="_plog_py_munmap")
@_guard
def _py_munmap(addr, length):
    _current.munmap(int(ffi.cast("uintptr_t", addr)), length)
    return 0


@ffi.def_extern(name="_plog_py_msync")
@_guard
def _py_msync(addr, length, flags):
    _current.msync(int(ffi.cast("uintptr_t", addr)), length, flags)
    return 0
