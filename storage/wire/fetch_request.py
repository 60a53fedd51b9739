"""A follower's Fetch request laid out by hand (v16 only, the version replication_rpc sends):
byte for byte what kio's writer makes of the same body (tests/wire/test_fetch_request.py
checks), without building its entities -- that was a third of a follower's Python time per
fetch under acks=all (issue 33).

Fetch v16 (flexible): request header v2 (api key, version, correlation id, the client id as a
legacy nullable string, no tagged fields), then max_wait_ms, min_bytes, max_bytes,
isolation_level, session_id, session_epoch, topics (compact array: topic id, partitions:
partition, current leader epoch, fetch offset, last fetched epoch, log start offset, partition
max bytes), forgotten topics (topic id, partitions), rack id, and the tagged fields: the replica
state (tag 1, KIP-903) when it is not the default (-1, -1); the cluster id (tag 0) is never sent.
"""
from __future__ import annotations

import struct

VERSION = 16
_HEAD = struct.Struct(">hhi")
_TOP = struct.Struct(">iiibii")
_PART = struct.Struct(">iiqiqi")
_STATE = struct.Struct(">iqB")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _uuid(value) -> bytes:
    return int(getattr(value, "int", value) or 0).to_bytes(16, "big")


def encode(correlation_id: int, client_id: str | None, body: dict) -> bytes:
    """The size-prefixed Fetch v16 request frame of `body` (codec.encode_request's dict)."""
    out = [b"", _HEAD.pack(1, VERSION, correlation_id)]
    if client_id is None:
        out.append(b"\xff\xff")
    else:
        name = client_id.encode()
        out += [struct.pack(">h", len(name)), name]
    out.append(b"\0")                   # the header's tagged fields
    out.append(_TOP.pack(body["max_wait"], body["min_bytes"], body["max_bytes"], body["isolation_level"],
                         body["session_id"], body["session_epoch"]))
    topics = body["topics"]
    out.append(_uvarint(len(topics) + 1))
    for t in topics:
        parts = t["partitions"]
        out += [_uuid(t["topic_id"]), _uvarint(len(parts) + 1)]
        for p in parts:
            out += [_PART.pack(p["partition"], p["current_leader_epoch"], p["fetch_offset"], p["last_fetched_epoch"],
                               p["log_start_offset"], p["partition_max_bytes"]), b"\0"]
        out.append(b"\0")
    forgotten = body["forgotten_topics_data"]
    out.append(_uvarint(len(forgotten) + 1))
    for t in forgotten:
        parts = t["partitions"]
        out += [_uuid(t["topic_id"]), _uvarint(len(parts) + 1), struct.pack(f">{len(parts)}i", *parts), b"\0"]
    rack = body["rack_id"].encode()
    out += [_uvarint(len(rack) + 1), rack]
    state = body.get("replica_state")
    if state is not None and (state["replica_id"], state["replica_epoch"]) != (-1, -1):
        out += [b"\x01\x01", _uvarint(_STATE.size), _STATE.pack(state["replica_id"], state["replica_epoch"], 0)]
    else:
        out.append(b"\0")
    frame = b"".join(out)
    return struct.pack(">i", len(frame)) + frame
