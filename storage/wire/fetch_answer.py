"""The Fetch response's bytes, laid out by hand for each version served, and its records left
in their segment files (issue 33: Kafka's FetchResponse written with FileRecords.writeTo).

`encode(key, version, correlation_id, body)` takes the dict apis.fetch builds -- the one
codec.encode_response takes -- and returns the size-prefixed frame: bytes, or a `Pieces` when a
partition's records are a FileSlice (storage/log/file_slice.py), a large view, or a view past
the answer's copy budget (COPY_BYTES), which then stand as pieces of their own between the
bytes around them, never copied here.
wire/sendfile.py sends a Pieces (os.sendfile for the slices).

The layout (Kafka's FetchResponse.json; which version has what):

  size int32, correlation id int32, [v12+ response header tagged fields]
  throttle_time_ms int32
  v7+: error_code int16, session_id int32
  responses array of topic: v4-12 topic string, v13+ topic_id uuid
    partitions array of: partition_index int32, error_code int16, high_watermark int64,
      last_stable_offset int64, v5+: log_start_offset int64,
      aborted_transactions nullable array of (producer_id int64, first_offset int64),
      v11+: preferred_read_replica int32, records nullable bytes,
      v12+ tagged: 0 diverging_epoch (epoch int32, end_offset int64), 1 current_leader
      (leader_id int32, leader_epoch int32), 2 snapshot_id (end_offset int64, epoch int32),
      each written only when it is not its default (-1, -1)
  v16+ tagged: 0 node_endpoints array of (node_id int32, host string, port int32, rack
    nullable string), written only when not empty

v12+ are flexible: arrays and strings carry unsigned-varint lengths plus one (zero: null), and
every structure ends with its tagged fields (a count, then tag, size, value each).  A field the
codec requires and the dict lacks is a KeyError here too.  tests/wire/test_fetch_answer.py
checks every version byte for byte against codec.encode_response over many shapes.
"""
from __future__ import annotations

import datetime
import functools
import struct
import uuid
from typing import NamedTuple

from ..core import io as _io
from ..core.varint import put_uvarint
from ..log.file_slice import FileSlice
from . import session

API_KEY = 1
# Records at least this large travel as a piece of their own (a FileSlice always does); smaller
# ones are copied into the frame while the answer's copies stay within COPY_BYTES (the rest are
# pieces too): an answer without pieces is one bytes object, one write, and none of a pieced
# answer's sending (sendfile.send, its timeout, its drain).  Copying up to 128 KiB (then two
# copies in Python, ~20 us; one since JOIN_BYTES, below) cost less: answers of 64 KiB records,
# 1.16x MB/s and 1.14x less broker CPU than writing them as pieces (10 pairs; docs/performance.md,
# the fetch floor).
OWN_PIECE_BYTES = 128 * 1024
COPY_BYTES = OWN_PIECE_BYTES
# Records at least this large are sent from their segment file (a FileSlice); smaller ones stay a
# view of the segment's mapping: copied into the frame (above), or beyond the copy budget written
# with the bytes around them in one writev (sendfile.send).  A sendfile costs two more system
# calls and two small packets (the header's before it, the few bytes after it), each a pass
# through the TCP stack: on loopback, a raw consumer's answers of 64 KiB records cost the broker
# 1.27x less CPU and came 1.32x faster in one writev than by sendfile (10 pairs;
# docs/performance.md, the fetch floor).  Above this size the copy a write makes (the kernel's,
# page cache to socket) is what sendfile saves on a network card that gathers.
SENDFILE_MIN_BYTES = 128 * 1024
# Records copied into the answer at least this large are joined once with the bytes around them
# (b"".join) rather than added to the frame's bytearray and copied again into its bytes: 64 KiB
# of records, encode 10.6 -> 6.3 us; smaller ones are added in place (a join costs more there).
JOIN_BYTES = 8 * 1024

_i32 = struct.Struct(">i")
_HEAD = struct.Struct(">ii")
_SESSION = struct.Struct(">hi")
_ABORTED = struct.Struct(">qq")
_NULL32 = _i32.pack(-1)
_ZERO_UUID = bytes(16)


class Layout(NamedTuple):
    flexible: bool          # v12+
    session: bool           # v7+: error_code, session_id
    log_start: bool         # v5+
    preferred: bool         # v11+
    topic_ids: bool         # v13+
    node_endpoints: bool    # v16+
    partition: struct.Struct    # the fixed fields a partition opens with


@functools.cache
def layout(version: int) -> Layout:
    if version < 4:
        raise ValueError(f"Fetch v{version} is not laid out here (v4 and later)")
    log_start = version >= 5
    return Layout(version >= 12, version >= 7, log_start, version >= 11, version >= 13, version >= 16,
                  struct.Struct(">ihqqq" if log_start else ">ihqq"))


def zero_copy_here() -> bool:
    """Whether the records of this connection's answer may stay in their files: not a TLS
    connection (the kernel cannot encrypt what sendfile sends), and the engine's files are the
    POSIX seam's (a simulated file system's descriptors are not the kernel's)."""
    return not session.current().tls and type(_io.current()) is _io.PosixIO


def records_of(manager, answer):
    """A read's records (`answer`: the replica manager's FetchResponsePartition) as a FileSlice
    of its segment file when they are large enough to be worth a sendfile and the log can say
    where they lie; else as they are (a view of the segment: not copied either)."""
    records = answer.records
    if len(records) < SENDFILE_MIN_BYTES or not isinstance(records, memoryview):
        return records
    hosted = manager.partitions.get((answer.topic, answer.partition))
    found = hosted.log.file_slice(records) if hosted is not None else None
    return records if found is None else found


class Pieces:
    """A response frame in pieces: bytes-like ones, and FileSlices whose bytes are in their
    files.  `close()` lets the slices' descriptors go (the sender calls it once sent)."""

    __slots__ = ("parts",)

    def __init__(self, parts: list):
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def slices(self) -> list[FileSlice]:
        return [p for p in self.parts if type(p) is FileSlice]

    def join(self) -> bytes:
        """The frame's bytes (a slice's as it was read)."""
        return b"".join(p.view if type(p) is FileSlice else p for p in self.parts)

    def close(self) -> None:
        for p in self.parts:
            if type(p) is FileSlice:
                p.close()


def _length(out: bytearray, flexible: bool, n: int | None) -> None:
    """An array's or a records field's length (None: null)."""
    if flexible:
        put_uvarint(out, 0 if n is None else n + 1)
    else:
        out += _i32.pack(-1 if n is None else n)


def _string(out: bytearray, flexible: bool, value: str | None) -> None:
    if value is None:
        out += b"\0" if flexible else b"\xff\xff"
        return
    data = value.encode()
    if flexible:
        put_uvarint(out, len(data) + 1)
    else:
        out += struct.pack(">h", len(data))
    out += data


def _uuid(value) -> bytes:
    if value is None:
        return _ZERO_UUID
    if isinstance(value, uuid.UUID):
        return value.bytes
    return int(value).to_bytes(16, "big")


def _ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


def _tagged(out: bytearray, fields: list[tuple[int, bytes]]) -> None:
    put_uvarint(out, len(fields))
    for tag, value in fields:
        put_uvarint(out, tag)
        put_uvarint(out, len(value))
        out += value


def _partition_tags(p: dict) -> list[tuple[int, bytes]]:
    tags = []
    value = p.get("diverging_epoch")
    if value is not None:
        epoch, end_offset = value.get("epoch", -1), value.get("end_offset", -1)
        if (epoch, end_offset) != (-1, -1):
            tags.append((0, struct.pack(">iqB", epoch, end_offset, 0)))
    value = p.get("current_leader")
    if value is not None:
        leader_id, leader_epoch = value.get("leader_id", -1), value.get("leader_epoch", -1)
        if (leader_id, leader_epoch) != (-1, -1):
            tags.append((1, struct.pack(">iiB", leader_id, leader_epoch, 0)))
    value = p.get("snapshot_id")
    if value is not None:
        end_offset, epoch = value.get("end_offset", -1), value.get("epoch", -1)
        if (end_offset, epoch) != (-1, -1):
            tags.append((2, struct.pack(">qiB", end_offset, epoch, 0)))
    return tags


def _node_endpoints(endpoints) -> bytes:
    out = bytearray()
    put_uvarint(out, len(endpoints) + 1)
    for e in endpoints:
        out += _i32.pack(e["node_id"])
        _string(out, True, e["host"])
        out += _i32.pack(e["port"])
        _string(out, True, e.get("rack"))
        out.append(0)
    return bytes(out)


def encode(key: int, version: int, correlation_id: int, body: dict) -> bytes | Pieces:
    """The Fetch response frame of `body` for `version` (codec.encode_response's contract):
    bytes, or Pieces when records travel on their own."""
    assert key == API_KEY, key
    lay = layout(version)
    flexible = lay.flexible
    out = bytearray(_HEAD.pack(0, correlation_id))
    if flexible:
        out.append(0)                   # response header v1: no tagged fields
    throttle = body.get("throttle_time", 0)
    out += _i32.pack(throttle if type(throttle) is int else _ms(throttle))
    if lay.session:
        out += _SESSION.pack(body["error_code"], body.get("session_id", 0))
    parts: list = []
    copied: list = []                   # where in `parts` the records to be copied lie
    budget = COPY_BYTES                 # what records may still be copied into the frame
    topics = body["responses"]
    if flexible and len(topics) < 0x7F:
        out.append(len(topics) + 1)
    else:
        _length(out, flexible, len(topics))
    for t in topics:
        if lay.topic_ids:
            topic_id = t["topic_id"]
            out += topic_id.to_bytes(16, "big") if type(topic_id) is int else _uuid(topic_id)
        else:
            _string(out, flexible, t["topic"])
        partitions = t["partitions"]
        if flexible and len(partitions) < 0x7F:
            out.append(len(partitions) + 1)
        else:
            _length(out, flexible, len(partitions))
        for p in partitions:
            out, budget = _partition(out, parts, lay, p, budget, copied)
        if flexible:
            out.append(0)
    if flexible:
        endpoints = body.get("node_endpoints") if lay.node_endpoints else None
        if endpoints:
            _tagged(out, [(0, _node_endpoints(endpoints))])
        else:
            out.append(0)
    if not parts:
        _i32.pack_into(out, 0, len(out) - 4)
        return bytes(out)
    parts.append(out)
    _i32.pack_into(parts[0], 0, sum(map(len, parts)) - 4)
    if len(copied) * 2 + 1 == len(parts):
        return b"".join(parts)          # the records copied once, with the bytes around them
    return Pieces(_merged(parts, copied))


def _merged(parts: list, copied: list) -> list:
    """`parts` (the bytes between records at even places, records at odd ones) with the records
    to be copied joined to the bytes around them: bytes, then each piece of its own followed by
    the bytes after it."""
    out, merged, copy = [], bytearray(), set(copied)
    for i, part in enumerate(parts):
        if i % 2 == 0 or i in copy:
            merged += part
        else:
            out += [merged, part]
            merged = bytearray()
    out.append(merged)
    return out


def _partition(out: bytearray, parts: list, lay: Layout, p: dict, budget: int,
               copied: list) -> tuple[bytearray, int]:
    """One partition's fields onto `out`; its records go to `parts` (after the bytes before them)
    and a new bytearray, returned, takes what follows; with it the copy budget (COPY_BYTES) left.
    Records to be copied (their place in `parts` noted in `copied`) are joined with the bytes
    around them once, by encode, not added to `out` and copied again into the answer's bytes.  The common lengths (a short array, null, records under 16 KiB) are
    written in place: a consumer's fetch answers are mostly those."""
    flexible = lay.flexible
    if lay.log_start:
        out += lay.partition.pack(p["partition_index"], p["error_code"], p["high_watermark"],
                                  p.get("last_stable_offset", -1), p.get("log_start_offset", -1))
    else:
        out += lay.partition.pack(p["partition_index"], p["error_code"], p["high_watermark"],
                                  p.get("last_stable_offset", -1))
    aborted = p["aborted_transactions"]
    if aborted is None:
        if flexible:
            out.append(0)
        else:
            out += _NULL32
    else:
        _length(out, flexible, len(aborted))
        for a in aborted:
            out += _ABORTED.pack(a["producer_id"], a["first_offset"])
            if flexible:
                out.append(0)
    if lay.preferred:
        out += _i32.pack(p.get("preferred_read_replica", -1))
    records = p["records"]
    if records is None:
        _length(out, flexible, None)
    else:
        size = len(records)
        if flexible and size < 0x3FFF:
            out += bytes((size + 1,)) if size < 0x7F else bytes(((size + 1) & 0x7F | 0x80, (size + 1) >> 7))
        else:
            _length(out, flexible, size)
        if type(records) is FileSlice or size >= OWN_PIECE_BYTES or size > budget:
            parts.append(out)
            parts.append(records)
            out = bytearray()
        elif size < JOIN_BYTES:
            out += records
            budget -= size
        else:
            copied.append(len(parts) + 1)   # joined with the bytes around it once (encode)
            parts.append(out)
            parts.append(records)
            out = bytearray()
            budget -= size
    if flexible:
        diverging = p.get("diverging_epoch")
        if (diverging is None or (diverging.get("epoch", -1) == -1 and diverging.get("end_offset", -1) == -1)) \
                and p.get("current_leader") is None and p.get("snapshot_id") is None:
            out.append(0)               # no tagged fields (the common answer)
        else:
            _tagged(out, _partition_tags(p))
    return out, budget
