"""Batch headers in bulk: every batch of a buffer (a read, a fetch answer, a segment file)
parsed, and CRC-checked, by one C call, its header fields returned as typed columns.

`batch_columns(buffer)` is what a reader uses when it needs the headers of many batches and
not a Python object per batch: one call validates a whole `PartitionLog.read` (Kafka's
`ensureValid` of every batch of a fetch), and the columns are memoryviews of C arrays --
`array`-like in plain Python, zero-copy into numpy (`numpy.frombuffer`) or Arrow
(`to_arrow()`, when pyarrow is installed: the Spark source's form).

Rules are those of `records.iter_batches` (Kafka's in-memory iteration): the scan stops
quietly at a partial tail; a batch that cannot be delimited (size or magic) stops it with an
error naming the file, position and offset, and so does a CRC mismatch with crc="raise".
"""
from __future__ import annotations

import struct

from . import errors
from ._native import ffi, lib
from .records import CODEC_NAMES, RecordBatch, _describe, error_class, mapped_source

# (name, struct format) in the order the block is laid out: widest first, so every column
# starts aligned for its type.
_COLUMNS = (("position", "q"), ("base_offset", "q"), ("last_offset", "q"), ("base_timestamp", "q"),
            ("max_timestamp", "q"), ("producer_id", "q"), ("size_bytes", "q"),
            ("partition_leader_epoch", "i"), ("record_count", "i"), ("base_sequence", "i"), ("crc", "I"),
            ("attributes", "h"), ("producer_epoch", "h"), ("magic", "b"), ("crc_valid", "b"))
_WIDTH = {f: struct.calcsize(f) for _, f in _COLUMNS}
_ROW_BYTES = sum(_WIDTH[f] for _, f in _COLUMNS)
_C_TYPES = {"q": "int64_t *", "i": "int32_t *", "I": "uint32_t *", "h": "int16_t *", "b": "int8_t *"}
_ARROW_TYPES = {"q": "int64", "i": "int32", "I": "uint32", "h": "int16", "b": "int8"}
CRC_MODES = ("raise", "flag", "skip")


class BatchColumns:
    """The header fields of `len(self)` batches of `data`, one memoryview per field
    (`position`, `base_offset`, `last_offset`, `size_bytes`, `partition_leader_epoch`, `magic`,
    `crc`, `crc_valid` (1, 0, or -1 when not checked), `attributes`, `base_timestamp`,
    `max_timestamp`, `producer_id`, `producer_epoch`, `base_sequence`, `record_count`).

    `end` is the position after the last batch; `stop` says why the scan ended there: None
    (the buffer's end), "partial" (an incomplete batch follows: a fetch cut by size, or a
    torn write) or the reason a batch could not be delimited (only with strict=False).

    Header fields only: a compressed v0/v1 wrapper has the offset its header carries (its
    last inner message's) as base and last offset, and record_count 1; `batch(i)` decodes
    its inner messages when they are wanted (RecordBatch does)."""

    __slots__ = ("data", "end", "stop", "source", "start_position", "_block") + \
        tuple(name for name, _ in _COLUMNS)

    def __len__(self) -> int:
        return len(self.position)

    def columns(self) -> dict[str, memoryview]:
        """Field name -> its column."""
        return {name: getattr(self, name) for name, _ in _COLUMNS}

    def batch(self, i: int) -> RecordBatch:
        """The i-th batch itself (a zero-copy view), for its records."""
        position, size = self.position[i], self.size_bytes[i]
        return RecordBatch(self.data[position:position + size], source=self.source,
                           position=self.start_position + position)

    def compression(self, i: int) -> str:
        return CODEC_NAMES[self.attributes[i] & 0x7]

    def arrow(self, name: str, start: int = 0, end: int | None = None):
        """Rows [start, end) of one column as a pyarrow array of its C type, sharing its memory."""
        import pyarrow as pa
        column = getattr(self, name)[start:end]
        return pa.Array.from_buffers(getattr(pa, _ARROW_TYPES[column.format])(), len(column),
                                     [None, pa.py_buffer(column)])

    def to_arrow(self):
        """A pyarrow.RecordBatch of the columns, sharing their memory (kept alive by it)."""
        import pyarrow as pa
        return pa.RecordBatch.from_arrays([self.arrow(name) for name, _ in _COLUMNS],
                                          names=[name for name, _ in _COLUMNS])

    def __repr__(self) -> str:
        return f"BatchColumns({len(self)} batches, end={self.end}, stop={self.stop!r})"


def batch_columns(buffer, *, crc: str = "raise", strict: bool = True, source=None, start_position: int = 0,
                  max_batch_bytes: int = 0) -> BatchColumns:
    """Parse (and CRC-check) every batch of `buffer` in one C call; see the module doc.

    crc: "raise" (a mismatch raises CorruptRecordError naming the batch), "flag" (kept in
    `crc_valid`, nothing raised: an audit) or "skip" (not computed).
    strict: a batch that cannot be delimited raises (Kafka's reader); with strict=False the
    columns end before it and `stop` says why.
    source, start_position: the file and position of buffer[0], for error messages (a view
    returned by PartitionLog.read names its segment by itself)."""
    if crc not in CRC_MODES:
        raise ValueError(f"crc must be one of {CRC_MODES}, not {crc!r}")
    view = memoryview(buffer).cast("B") if not isinstance(buffer, memoryview) or buffer.format != "B" else buffer
    out = BatchColumns()
    out.data, out.source, out.start_position = view, source, start_position
    c = ffi.new("plog_batch_columns *")
    with ffi.from_buffer(view) as buf:
        lib.plog_batch_columns_scan(buf, len(view), max_batch_bytes, 0, c)      # counting pass
        rows = c.count
        block = out._block = ffi.new("char[]", max(rows, 1) * _ROW_BYTES)
        offset = 0
        pointers = {}
        for name, fmt in _COLUMNS:
            pointers[name] = (offset, fmt)
            setattr(c, name, ffi.cast(_C_TYPES[fmt], block + offset))
            offset += rows * _WIDTH[fmt]
        c.capacity = rows
        lib.plog_batch_columns_scan(buf, len(view), max_batch_bytes, crc != "skip", c)
    whole = ffi.buffer(block, rows * _ROW_BYTES)
    for name, (offset, fmt) in pointers.items():
        setattr(out, name, memoryview(whole)[offset:offset + rows * _WIDTH[fmt]].cast(fmt))
    out.end = c.end
    if crc == "raise" and c.first_invalid >= 0:         # before any later stop, as a reader meets them
        i = c.first_invalid
        file, position = _where(view, out, out.position[i])
        raise errors.CorruptRecordError(f"CRC mismatch (stored 0x{out.crc[i]:08x})", file=file,
                                        position=position, offset=out.base_offset[i])
    stop = c.stop
    if stop == 0:
        out.stop = None
    elif stop == lib.PLOG_EPARTIAL:
        out.stop = "partial"
    else:
        out.stop = _describe(stop, view, c.end)
        if strict:
            _raise_at(view, out, stop, c.end)
    return out


def _where(view, out: BatchColumns, position: int) -> tuple:
    if out.source is not None:
        return out.source, out.start_position + position
    file, start = mapped_source(view)
    return file, start + position


def _raise_at(view, out: BatchColumns, rc: int, position: int):
    file, where = _where(view, out, position)
    offset = struct.unpack_from(">q", view, position)[0] if len(view) - position >= 8 else None
    raise error_class(rc)(_describe(rc, view, position), file=file, position=where, offset=offset)
