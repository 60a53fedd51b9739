"""SimFS: a simulated file system under the engine's I/O seam, with fsync disabled.

The real files are the page cache.  SimFS records what each flush point made durable -- a
file's data at its fsync (or the fsync the engine would have made: `SYNC_NOOP` flush points
count), a directory's names at its fsync -- and on a crash rewrites the files under a
directory to one state the fault model allows (docs/reliability.md 1.1):

  S1 page-cache loss, one of four modes: (a) nothing volatile survives; (b) a per-file prefix
     of the volatile appends and a prefix of the volatile namespace changes survive (ordered);
     (c) any subset of the changed 4 KiB pages and of the namespace changes survives;
     (d) everything survives (a process crash);
  S3 a torn 512-byte sector inside a surviving volatile page (zeros, garbage or old data);
  S4 a file's new size survives without its data (a zero-filled tail);
  S5 a rename persists as old-only, new-only or both; a create or unlink is lost; a renamed
     file keeps its name but not its data (a zero-length checkpoint);
  S9 a sticky bit flip in durable data;
  S12 the whole directory is wiped.
Every choice comes from the seeded generator passed in, so the same seed gives the same state.

Use it in your own crash tests:

    fs = SimFS(root, seed=7)
    with storage.core.io.using(fs):
        ... run the engine on files under root ...
    fs.crash(root, mode="b")            # or fs.crash(root, faults=("S3",))
    ... reopen with the real seam and check what survived ...
"""
from __future__ import annotations

import collections
import os
import random
import shutil

from ..core.io import PosixIO

PAGE_BYTES = 4096
# LMDB does its own I/O (not through the seam) and its own durability: the metadata store is
# left alone by crashes ("LMDB aside").
UNTRACKED_PREFIXES = ("storage.mdb",)


def _untracked(path: str) -> bool:
    return os.path.basename(path).startswith(UNTRACKED_PREFIXES)
SECTOR_BYTES = 512
MODES = ("a", "b", "c", "d")


class CrashNow(Exception):
    """Raised by SimFS at the crash point chosen with `crash_after`; `path` names the file the
    interrupted operation was on (None when the operation names none)."""

    path = None
    kind = None


class SimFS(PosixIO):
    """A PosixIO that records durability; `crash()` applies a fault-model state."""

    def __init__(self, root, seed: int = 0):
        self.root = os.path.abspath(os.fspath(root))
        self.random = random.Random(seed)
        self.counts: collections.Counter = collections.Counter()
        self.crash_after: int | None = None     # raise CrashNow at this mutating operation
        self.last_crash: CrashNow | None = None  # the last CrashNow raised
        self.crash_match: str | None = None      # with crash_after: the first mutation from there
                                                 # on of a file whose name contains this
        self.mutations = 0
        self._next_inode = 0
        self.inode_of: dict[str, int] = {}      # the current (volatile) namespace
        self.durable_ns: dict[str, int] = {}    # the names a crash in mode (a) keeps
        self.durable_data: dict[int, bytes] = {}
        self.pending_ns: list[tuple] = []       # namespace changes since their dir's fsync
        self.truncated_to: dict[int, int] = {}  # inode -> smallest size it was cut to since its fsync
        self.fd_inode: dict[int, int] = {}
        self.fd_path: dict[int, str] = {}
        self.injected: list[dict] = []          # S7/S8 faults armed with inject()
        self.failures: list[tuple] = []         # (operation, errno, mutation) of every injected failure
        self.adopt()

    # ---- bookkeeping ----
    def _tracked(self, path) -> bool:
        path = os.path.abspath(os.fspath(path))
        return (path == self.root or path.startswith(self.root + os.sep)) and not _untracked(path)

    def _new_inode(self) -> int:
        self._next_inode += 1
        return self._next_inode

    def adopt(self, subtree=None) -> None:
        """Take the files now under subtree (default: root) as durable -- a fresh start, or the
        state a crash left there.  What lies outside subtree keeps its bookkeeping: another
        node's page cache is not flushed by this node's crash."""
        subtree = os.path.abspath(os.fspath(subtree or self.root))
        within = lambda p: p == subtree or p.startswith(subtree + os.sep)  # noqa: E731
        gone = {inode for path, inode in self.inode_of.items() if within(path)}
        gone |= {inode for path, inode in self.durable_ns.items() if within(path)}
        self.inode_of = {p: i for p, i in self.inode_of.items() if not within(p)}
        self.durable_ns = {p: i for p, i in self.durable_ns.items() if not within(p)}
        self.pending_ns = [op for op in self.pending_ns if not any(within(n) for n in op[1:-1] if isinstance(n, str))]
        for inode in gone:
            self.durable_data.pop(inode, None)
            self.truncated_to.pop(inode, None)
        self.fd_inode = {fd: i for fd, i in self.fd_inode.items() if i not in gone}
        self.fd_path = {fd: p for fd, p in self.fd_path.items() if fd in self.fd_inode}
        for directory, _dirs, files in os.walk(subtree):
            for name in files:
                path = os.path.join(directory, name)
                if _untracked(path):
                    continue
                inode = self._new_inode()
                self.inode_of[path] = inode
                self.durable_ns[path] = inode
                with open(path, "rb") as f:
                    self.durable_data[inode] = f.read()

    def inject(self, operation: str, code: int, *, after: int = 0, sticky: bool = False, path=None) -> None:
        """S7/S8: fail the operation (`write`, `fsync`, `truncate`, `rename`, `unlink`, `create`,
        `fsync_dir`, `read`, or `any` mutation) with OSError(code) once `after` more of them
        succeeded; `sticky` keeps failing it.  A failed fsync makes nothing durable (fsyncgate:
        what it should have flushed stays volatile, and a crash draws it like any page cache)."""
        self.injected.append({"operation": operation, "errno": code, "after": after, "sticky": sticky,
                              "path": None if path is None else os.path.abspath(os.fspath(path))})

    def _maybe_fail(self, kind: str, path=None) -> None:
        for spec in self.injected:
            if spec["operation"] not in (kind, "any") or spec["operation"] == "any" and kind == "read":
                continue
            if spec["path"] is not None and (path is None or not str(path).startswith(spec["path"])):
                continue
            if spec["after"] > 0:
                spec["after"] -= 1
                continue
            if not spec["sticky"]:
                self.injected.remove(spec)
            self.counts[f"failed-{kind}"] += 1
            self.failures.append((kind, spec["errno"], self.mutations))
            raise OSError(spec["errno"], f"{os.strerror(spec['errno'])} (injected by SimFS)", path)

    def _mutation(self, kind: str, path=None) -> None:
        self.counts[kind] += 1
        self.mutations += 1
        if self.crash_after is not None and self.mutations >= self.crash_after and (
                self.crash_match is None or path is not None and self.crash_match in os.path.basename(path)):
            self.crash_after = self.crash_match = None
            crash = CrashNow(f"crash at mutation {self.mutations} ({kind}{f' {path}' if path else ''})")
            crash.path, crash.kind = (None if path is None else os.fspath(path)), kind
            self.last_crash = crash     # C and the failure state may wrap it; the caller looks here
            raise crash
        if self.injected:
            self._maybe_fail(kind, path)

    # ---- the seam ----
    def open(self, path, flags):
        path = os.path.abspath(os.fspath(path))
        tracked = self._tracked(path)
        if tracked and path not in self.inode_of:
            if flags & 4:   # O_CREATE
                self._mutation("create", path)
                inode = self._new_inode()
                self.inode_of[path] = inode
                self.pending_ns.append(("create", path, inode))
        elif tracked and flags & 8:   # O_TRUNCATE of an existing file
            self._mutation("truncate", path)
            self._note_truncate(self.inode_of[path], 0)
        fd = super().open(path, flags)
        if tracked and path in self.inode_of:
            self.fd_inode[fd] = self.inode_of[path]
            self.fd_path[fd] = path        # for inject(path=...): the name it was opened by
        return fd

    def close(self, fd):
        self.fd_inode.pop(fd, None)
        self.fd_path.pop(fd, None)
        return super().close(fd)

    def pread(self, fd, length, offset):
        if self.injected and fd in self.fd_inode:
            self._maybe_fail("read", self.fd_path.get(fd))
        return super().pread(fd, length, offset)

    def pwrite(self, fd, data, offset):
        if fd in self.fd_inode:
            self._mutation("write", self.fd_path.get(fd))
        return super().pwrite(fd, data, offset)

    def _note_truncate(self, inode: int, size: int) -> None:
        self.truncated_to[inode] = min(size, self.truncated_to.get(inode, size))

    def ftruncate(self, fd, size):
        if fd in self.fd_inode:
            self._mutation("truncate", self.fd_path.get(fd))
            self._note_truncate(self.fd_inode[fd], size)
        return super().ftruncate(fd, size)

    def fsync(self, fd, flags=0):
        # Every flush point counts, with fsync disabled too: that is the production ordering.
        inode = self.fd_inode.get(fd)
        if inode is not None:
            self._mutation("fsync", self.fd_path.get(fd))
            self.durable_data[inode] = super().pread(fd, super().fsize(fd), 0)
            self.truncated_to.pop(inode, None)
        return super().fsync(fd, flags | 1)

    def msync(self, address, length, flags=0):
        self.counts["msync"] += 1
        return super().msync(address, length, flags | 1)

    def rename(self, source, target):
        source, target = os.path.abspath(source), os.path.abspath(target)
        if self._tracked(source):
            self._mutation("rename", source)
            if os.path.isdir(source):
                # A directory rename moves every name under it at once; like any rename it is
                # durable once its parent directory is fsynced (Kafka's -delete renames).
                prefix = source + os.sep
                for path in [p for p in self.inode_of if p.startswith(prefix)]:
                    self.inode_of[target + os.sep + path[len(prefix):]] = self.inode_of.pop(path)
                self.pending_ns.append(("rename_dir", source, target))
            else:
                inode = self.inode_of.pop(source, None)
                if inode is not None:
                    self.inode_of[target] = inode
                    self.pending_ns.append(("rename", source, target, inode))
        return super().rename(source, target)

    def unlink(self, path):
        path = os.path.abspath(path)
        if self._tracked(path):
            self._mutation("unlink", path)
            inode = self.inode_of.pop(path, None)
            self.pending_ns.append(("unlink", path, inode))
        return super().unlink(path)

    def fsync_dir(self, path, flags=0):
        path = os.path.abspath(path)
        if self._tracked(path):
            self._mutation("fsync_dir", path)
            keep = []
            for op in self.pending_ns:
                names = [op[1]] if op[0] not in ("rename", "rename_dir") else [op[1], op[2]]
                if all(os.path.dirname(n) == path for n in names):
                    self._apply_ns(self.durable_ns, op)
                else:
                    keep.append(op)
            self.pending_ns = keep
        return super().fsync_dir(path, flags | 1)

    @staticmethod
    def _apply_ns(namespace: dict, op: tuple) -> None:
        if op[0] == "create":
            namespace[op[1]] = op[2]
        elif op[0] == "rename_dir":
            prefix = op[1] + os.sep
            for path in [p for p in namespace if p.startswith(prefix)]:
                namespace[op[2] + os.sep + path[len(prefix):]] = namespace.pop(path)
        elif op[0] == "rename":
            namespace.pop(op[1], None)
            namespace[op[2]] = op[3]
        else:
            namespace.pop(op[1], None)

    # ---- crash states ----
    def _current(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def state(self, subtree=None, *, mode: str = "a", faults=()) -> dict[str, bytes]:
        """The files under subtree (default: root) after a crash in `mode` with `faults`."""
        subtree = os.path.abspath(os.fspath(subtree or self.root))
        within = lambda p: p == subtree or p.startswith(subtree + os.sep)  # noqa: E731
        rng = self.random
        if "S12" in faults:
            return {}
        if mode == "d":
            return {p: self._current(p) for p in self.inode_of if within(p) and os.path.exists(p)}
        namespace = dict(self.durable_ns)
        pending = [op for op in self.pending_ns if within(op[1])]
        if mode == "b":
            for op in pending[: rng.randint(0, len(pending))]:
                self._apply_ns(namespace, op)
        elif mode == "c" or "S5" in faults:
            for op in pending:
                if op[0] == "rename":
                    choice = rng.choice(("old", "new", "both"))
                    if choice == "new":
                        self._apply_ns(namespace, op)
                    elif choice == "both":
                        namespace[op[2]] = op[3]
                elif rng.random() < 0.5:
                    self._apply_ns(namespace, op)
        files = {}
        for path, inode in namespace.items():
            if not within(path):
                continue
            durable = self.durable_data.get(inode, b"")
            live_path = next((p for p, i in self.inode_of.items() if i == inode), None)
            current = self._current(live_path) if live_path and os.path.exists(live_path) else durable
            files[path] = self._data(durable, current, mode, faults, self.truncated_to.get(inode))
        if "S5" in faults:
            # The name persisted, the data did not -- only for a file not fsynced before its
            # rename (S6: write-temp, fsync, rename, fsync(dir) shows the old or the new version).
            renamed = [op[2] for op in pending if op[0] == "rename" and op[2] in files
                       and not self._synced(op[3], op[2])]
            for path in renamed:
                if rng.random() < 0.5:
                    files[path] = b""
        if "S9" in faults:
            candidates = [p for p, data in files.items() if data]
            if candidates:
                path = rng.choice(sorted(candidates))
                data = bytearray(files[path])
                position = rng.randrange(len(data))
                data[position] ^= 1 << rng.randrange(8)
                files[path] = bytes(data)
        return files

    def _synced(self, inode: int, path: str) -> bool:
        """Whether the file's current content is what its last fsync made durable."""
        live = next((p for p, i in self.inode_of.items() if i == inode), None)
        return live is not None and os.path.exists(live) and self.durable_data.get(inode) == self._current(live)

    def _data(self, durable: bytes, current: bytes, mode: str, faults, truncated_to: int | None = None) -> bytes:
        rng = self.random
        if durable == current or mode == "a":
            data = durable
        elif mode in "bc" and truncated_to is not None and truncated_to < len(durable) and rng.random() < 0.5:
            # The truncation reached the disk, the writes after it did not (ordered prefix).
            data = durable[:truncated_to]
        elif mode == "b":
            if current.startswith(durable):
                data = current[: rng.randint(len(durable), len(current))]
            else:
                data = current if rng.random() < 0.5 else durable
        else:   # "c": any subset of the changed pages, either size
            size = rng.choice((len(durable), len(current)))
            out = bytearray(current[:size].ljust(size, b"\0"))
            for start in range(0, size, PAGE_BYTES):
                if rng.random() < 0.5:
                    old = durable[start:start + PAGE_BYTES].ljust(min(PAGE_BYTES, size - start), b"\0")
                    out[start:start + len(old)] = old[: size - start]
            data = bytes(out)
        if "S4" in faults and len(current) > len(durable) and current.startswith(durable):
            data = durable + b"\0" * (len(current) - len(durable))
        if "S3" in faults and len(data) > len(durable):
            data = bytearray(data)
            # A torn sector among the new bytes; what was durable before stays (S9 is bit rot).
            start = max(rng.randrange(len(durable), len(data)) // SECTOR_BYTES * SECTOR_BYTES, len(durable))
            end = min((start // SECTOR_BYTES + 1) * SECTOR_BYTES, len(data))
            kind = rng.choice(("zeros", "garbage", "old"))
            if kind == "zeros":
                data[start:end] = b"\0" * (end - start)
            elif kind == "garbage":
                data[start:end] = bytes(rng.randrange(256) for _ in range(end - start))
            else:
                old = durable[start:end]
                data[start:start + len(old)] = old
            data = bytes(data)
        return data

    def crash(self, subtree=None, *, mode: str = "a", faults=()) -> dict[str, bytes]:
        """Rewrite the files under subtree to a crash state and take it as durable."""
        subtree = os.path.abspath(os.fspath(subtree or self.root))
        files = self.state(subtree, mode=mode, faults=faults)
        self.counts[f"crash-{mode}"] += 1
        for fault in faults:
            self.counts[fault] += 1
        write_tree(subtree, files)
        self.adopt(subtree)
        return files


def write_tree(subtree: str, files: dict[str, bytes]) -> None:
    """Make the directory tree under subtree hold exactly `files` (directories are kept)."""
    for directory, _dirs, names in os.walk(subtree):
        for name in names:
            path = os.path.join(directory, name)
            if path not in files and not _untracked(path):
                os.unlink(path)
    for path, data in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def snapshot(subtree) -> dict[str, bytes]:
    out = {}
    for directory, _dirs, names in os.walk(subtree):
        for name in names:
            path = os.path.join(directory, name)
            if not _untracked(path):
                with open(path, "rb") as f:
                    out[path] = f.read()
    return out


def wipe(subtree) -> None:
    shutil.rmtree(subtree, ignore_errors=True)
    os.makedirs(subtree, exist_ok=True)
