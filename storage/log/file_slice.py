"""`FileSlice`: where a read's bytes lie in their segment file, for a sender that hands the
kernel a file range instead of the bytes (os.sendfile; Kafka's FileRecords.writeTo).

A read (PartitionLog.read) returns a view of the segment's read mapping.  `PartitionLog.
file_slice(offset, view)` gives, for such a view, the `.log` it lies in as a descriptor of its
own (os.dup of the segment's), its position and its length, and keeps the view.

Invariants:
  - the descriptor is the slice's: the open-segment cache may close the segment's own
    descriptors, retention or the cleaner may close, rename and unlink the segment, and the
    slice still reads the same inode (an unlinked file lives while a descriptor holds it).
    `close()` lets it go; a slice never closed is closed when it is collected;
  - the bytes at [position, position + length) of that inode are the view's for as long as
    `intact()`: the only operation that changes bytes already written to a `.log` is a cut
    (Segment.truncate_to, recovery), after which new bytes may land where the cut ones were.
    Each cut counts in the log's SegmentHome, and the slice remembers the count it was made
    at.  Once a cut happened, the view -- whose pages the cut made private copies of -- holds
    the bytes of the read, and the file may not.
"""
from __future__ import annotations

import os


class FileSlice:
    __slots__ = ("view", "fd", "position", "length", "_home", "_cuts")

    def __init__(self, view: memoryview, fd: int, position: int, home):
        self.view = view
        self.fd = fd
        self.position = position
        self.length = len(view)
        self._home = home
        self._cuts = home.cuts

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        """The descriptor (a file object's method: asyncio's loop.sendfile takes one)."""
        return self.fd

    def intact(self) -> bool:
        """The file still holds the view's bytes at [position, position + length): no cut of
        the log since the slice was made."""
        return self._home.cuts == self._cuts

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self):
        self.close()

    def __repr__(self) -> str:
        return f"FileSlice(fd={self.fd}, position={self.position}, length={self.length}, intact={self.intact()})"
