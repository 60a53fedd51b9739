"""The I/O seam failing chosen operations, shared by the failure-state tests of the log and the dir."""
import os

from storage.core import io as sio


class FaultyIO(sio.PosixIO):
    """The POSIX seam failing chosen operations: `fail[name] = (errno, calls to let pass)`.
    Each armed fault fires once; `armed` counts how many are still waiting."""

    def __init__(self):
        self.fail = {}
        self.fired = []

    def _maybe_fail(self, name, path=None):
        spec = self.fail.get(name)
        if spec is None:
            return
        code, skip = spec
        if skip > 0:
            self.fail[name] = (code, skip - 1)
            return
        del self.fail[name]
        self.fired.append(name)
        raise OSError(code, os.strerror(code), path)

    def pwrite(self, fd, data, offset):
        self._maybe_fail("pwrite")
        return super().pwrite(fd, data, offset)

    def fsync(self, fd, flags=0):
        self._maybe_fail("fsync")
        return super().fsync(fd, flags)

    def ftruncate(self, fd, size):
        self._maybe_fail("ftruncate")
        return super().ftruncate(fd, size)

    def rename(self, source, target):
        self._maybe_fail("rename", source)
        return super().rename(source, target)

    def fsync_dir(self, path, flags=0):
        self._maybe_fail("fsync_dir", path)
        return super().fsync_dir(path, flags)
