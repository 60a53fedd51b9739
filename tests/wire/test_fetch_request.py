"""The follower's Fetch v16 request laid out by hand (storage/wire/fetch_request.py) is byte for
byte what kio's writer makes of the same body, and the broker reads it back as it was built."""
from __future__ import annotations

import io
import random
import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from kio.index import load_request_schema  # noqa: E402
from kio.schema.request_header.v2.header import RequestHeader  # noqa: E402
from kio.serial import entity_writer  # noqa: E402

from storage.wire import codec, fetch_request  # noqa: E402


def _kio_frame(correlation_id: int, client_id, body: dict) -> bytes:
    cls = load_request_schema(1, fetch_request.VERSION)
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=1, request_api_version=fetch_request.VERSION,
                                                    correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(out, codec.build(cls, body))
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


def _body(rng: random.Random) -> dict:
    def part():
        return {"partition": rng.randrange(2**31), "current_leader_epoch": rng.randrange(-1, 2**31),
                "fetch_offset": rng.randrange(-1, 2**63), "last_fetched_epoch": rng.randrange(-1, 2**31),
                "log_start_offset": rng.randrange(-1, 2**63), "partition_max_bytes": rng.randrange(2**31)}
    return {"replica_state": {"replica_id": rng.choice([-1, 0, 1, 2**31 - 1]),
                              "replica_epoch": rng.choice([-1, 0, 7, 2**63 - 1])},
            "max_wait": rng.randrange(2**31), "min_bytes": rng.randrange(2**31), "max_bytes": rng.randrange(2**31),
            "isolation_level": rng.choice([0, 1]), "session_id": rng.randrange(2**31),
            "session_epoch": rng.randrange(-1, 2**31), "rack_id": rng.choice(["", "rack-1", "ü"]),
            "topics": [{"topic_id": rng.getrandbits(128), "partitions": [part() for _ in range(rng.randrange(4))]}
                       for _ in range(rng.randrange(4))],
            # 200 partitions: a length past one varint byte
            "forgotten_topics_data": [{"topic_id": rng.getrandbits(128),
                                       "partitions": [rng.randrange(2**31) for _ in range(rng.choice([0, 1, 200]))]}
                                      for _ in range(rng.randrange(3))]}


def test_a_fetch_v16_request_is_kios_bytes():
    rng = random.Random(33)
    for _ in range(300):
        body, correlation_id, client_id = _body(rng), rng.randrange(2**31), rng.choice([None, "", "storage-replica"])
        assert fetch_request.encode(correlation_id, client_id, body) == _kio_frame(correlation_id, client_id, body)
    body = _body(rng)
    assert codec.encode_request(1, 16, 5, "c", body) == _kio_frame(5, "c", body)     # the path the follower takes


def test_the_broker_reads_it_back():
    body = _body(random.Random(7))
    body["replica_state"] = {"replica_id": 2, "replica_epoch": 11}
    frame = fetch_request.encode(9, "storage-replica", body)
    header, request = codec.parse_request(frame[4:])
    assert (header.correlation_id, header.client_id) == (9, "storage-replica")
    assert (request.replica_state.replica_id, request.replica_state.replica_epoch) == (2, 11)
    assert request.session_epoch == body["session_epoch"]
    assert [[p.fetch_offset for p in t.partitions] for t in request.topics] == \
        [[p["fetch_offset"] for p in t["partitions"]] for t in body["topics"]]
