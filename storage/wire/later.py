"""An answer still to come, for requests whose order-bound part runs before their wait.

A Produce with acks=-1 has two parts: its appends, which must run in the connection's order
(the next request's records go after this one's), and its wait for the high watermark to pass
them, which need not hold the connection.  Kafka mutes a connection while its request waits in
the purgatory, so one produce is in flight per connection and an acks=all producer's rate is one
batch per replication round; Redpanda's two-phase handlers (process_result_stages: a
"dispatched" future, then the response) read the next request once the first phase has run.  A handler that returns a `Later` has run its
first part; `rest` gives its body.  The connection still answers in request order
(connection.Connection.answer_later), and at most MAX_LATER answers wait per connection.

A handler may also answer with a `Close`: no answer, and the connection closes once the answers
before it are written -- Kafka's RequestChannel.closeConnection, for a Produce of acks=0 that met
an error on any partition, or failed as a whole (KafkaApis.handleProduceRequest: the producer,
which reads no answer, learns from the closed connection that something went wrong).
"""
from __future__ import annotations

MAX_LATER = 64      # answers still to come on one connection before the next request waits for the first
# (64, not 16: 64 batches of 16 KiB in flight give a replication round more to carry; bench-notes s37 replround)


class Later:
    """A handler's body still to come: `rest` is an awaitable of the body (a dict, or None for
    no answer)."""

    __slots__ = ("rest",)

    def __init__(self, rest) -> None:
        self.rest = rest


class Close:
    """A handler's answer that closes the connection instead (a Produce of acks=0 with an error):
    `body` is the response it would have been (None: the request failed as a whole), counted in
    the request metrics as Kafka's closeConnection counts its errors."""

    __slots__ = ("body",)

    def __init__(self, body) -> None:
        self.body = body

    def __eq__(self, other) -> bool:
        return type(other) is Close and other.body == self.body

    __hash__ = None

    def __repr__(self) -> str:
        return f"Close({self.body!r})"
