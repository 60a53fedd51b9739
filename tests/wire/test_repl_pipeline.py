"""How many acks=all Produce answers may wait on one connection (later.MAX_LATER): a producer
that pipelines (librdkafka: max.in.flight 1,000,000 by default, 5 when idempotent) keeps that
many batches appended ahead of the replication round that acknowledges them, so one follower
Fetch carries more of them and a megabyte costs fewer rounds at the leader.  The harness is the
connection tests' (a handler whose answers come when the test says)."""
from __future__ import annotations

import socket

from storage.wire.later import MAX_LATER
from tests.wire.test_wire_connection import Deferring, answer_id, api_versions, go, nothing_to_read, serving, wait_for

PIPELINED = 64      # requests one connection reads ahead while all their answers wait


def test_a_connection_reads_64_requests_ahead_while_their_answers_wait():
    assert MAX_LATER >= PIPELINED
    with serving(Deferring) as (server, loop, address), socket.create_connection(address, timeout=10) as s:
        s.sendall(b"".join(api_versions(i, f"later-{i}") for i in range(PIPELINED)))
        assert wait_for(lambda: len(server.names) == PIPELINED), len(server.names)
        assert nothing_to_read(s)           # none answered yet: the first still waits
        for i in reversed(range(PIPELINED)):
            go(server, loop, f"later-{i}")
        assert [answer_id(s) for _ in range(PIPELINED)] == list(range(PIPELINED))   # in request order
