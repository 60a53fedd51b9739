"""The express path of a Produce (issue 33's lean produce path): the common request -- one topic,
one or several partitions, acks 0 or 1, no transactional id, v5 or later, of a shape read
before (produce_codec.known_parts) -- served in one call from the connection's loop, without
the dispatch, the handler's coroutine, the request's and the response's objects and dicts.

What it skips is only what the general path (FrameServer._dispatch -> ClientApis.produce ->
ReplicaManager.handle_produce -> the Produce encoder) would build and throw away; what it does is
the same, in the same order: the version served and the node ready, SASL's gate, the ACL check
(authz.produce_passes: WRITE on the topic), the request counted, the internal-topic and batch
checks (rules.produce_problem), the replica manager's handle_produce in its tuple form, which
makes no request or answer objects (every leadership, epoch and storage check, the append, the
high watermark), the appends' wake of waiting fetches (node.pump), the request metrics, and the
answer byte for byte (tests/wire/test_express.py compares both paths).  Anything else goes the
general way: a frame it does not know (the first of a producer's shape, other APIs), a topic the
session may not write (the general path refuses it), DEBUG logging on, a request the rules
refuse, an answer with an error or a record error (encoded by the general encoder); an acks=0
request that met an error closes the connection (later.Close), as on the general path.
"""
from __future__ import annotations

import logging
import time

from ..core.errors import Errors
from ..replication.messages import produce_response
from . import authz, codec, produce_codec, sasl
from .later import Close
from .rules import produce_problem

log = logging.getLogger("storage.wire")

NOT_MINE = object()     # serve()'s answer for a frame left to the general path
FIRST_VERSION = 5       # the versions whose one-row answer produce_codec.encode_row lays out


class ProduceExpress:
    """The express path of one broker's server: `serve(frame)` -> the answer (bytes), None (acks=0:
    none), a later.Close (acks=0 with an error), or NOT_MINE."""

    def __init__(self, server, apis, handler) -> None:
        self.server, self.apis = server, apis
        self.handler = handler          # ClientApis.produce (authz may guard it: produce_passes)
        self.taken = 0                  # requests served here
        self.versions = frozenset(v for v in range(FIRST_VERSION, produce_codec.LAST_REQUEST_VERSION + 1)
                                  if codec.is_supported(produce_codec.PRODUCE_KEY, v, server.supported))
        self._fit = None                # the last shape whose own fields _fits passed

    def _fits(self, shape) -> bool:
        """Whether a request of `shape` may take this path as far as its own fields say: acks 0
        or 1, no transactional id, a version served here (remembered: a producer sends one shape)."""
        if shape.acks not in (0, 1) or shape.transactional_id is not None or shape.version not in self.versions:
            return False
        self._fit = shape
        return True

    def serve(self, frame: bytes):
        hit = produce_codec.known_parts(frame)
        if hit is None:
            return NOT_MINE
        shape, parts = hit
        if shape is not self._fit and not self._fits(shape):
            return NOT_MINE
        server, version, acks, name = self.server, shape.version, shape.acks, shape.name
        if (not server.ready.is_set() or not sasl.allowed(produce_codec.PRODUCE_KEY)
                or log.isEnabledFor(logging.DEBUG)
                or (server.handlers[0] is not self.handler
                    and not authz.produce_passes(self.apis.node, self.handler, server.handlers[0], name))):
            return NOT_MINE
        for _, records in parts:
            if records is None or produce_problem(name, records, version) is not None:
                return NOT_MINE
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        server.served[(produce_codec.PRODUCE_KEY, version)] += 1
        self.taken += 1
        started = time.perf_counter()
        node = self.apis.node
        handle = node.manager.handle_produce     # given (topic, partition, records): a tuple back
        try:
            if len(parts) == 1:         # the common case: one partition
                index, records = parts[0]
                rows = [(index, *handle((name, index, records)))]
            else:
                rows = [(index, *handle((name, index, records))) for index, records in parts]
            node.pump()         # the appends woke the fetches waiting on them (ReplicaManager.on_append)
            body = None
            if acks == 0:       # no answer; an error closes the connection (later.Close)
                for row in rows:        # not any(): its generator costs ~0.2 us a request
                    if row[1] != Errors.NONE:
                        body = Close(self._body(name, rows))
                        break
            elif len(rows) == 1 and rows[0][1] == Errors.NONE and rows[0][2] >= 0:
                if server.observer is not None:
                    server.observer.answered(produce_codec.PRODUCE_KEY, started, None)
                index, _, base_offset, log_start, _, append_time = rows[0]
                return produce_codec.encode_row(version, correlation_id, name, index, Errors.NONE, base_offset,
                                                log_start, append_time)
            elif len(rows) > 1 and _plain(rows):
                if server.observer is not None:
                    server.observer.answered(produce_codec.PRODUCE_KEY, started, None)
                return produce_codec.encode_rows(version, correlation_id, name,
                                                 [(index, base, start, at) for index, _, base, start, _, at in rows])
            else:   # an error or a record error: the general encoder writes the answer
                body = self._body(name, rows)
        except Exception as exc:
            header, request = shape.read(frame, parts)
            return server.answer_failure(exc, produce_codec.PRODUCE_KEY, version, correlation_id, header, request,
                                         started)
        return server.answer_body(body, produce_codec.PRODUCE_KEY, version, correlation_id, started)

    def _body(self, name: str, rows: list) -> dict:
        """The general encoder's body of `rows` (an error or a record error among them)."""
        answers = [produce_response(name, index, code, base, failure, at) for index, code, base, _, failure, at in rows]
        return {"responses": self.apis.produce_rows(answers, {})}


def _plain(rows: list) -> bool:
    """Whether every row (index, error code, base offset, log start, failure, log append time) is a
    plain success (the general encoder writes the others: an error, record errors, a message)."""
    for row in rows:
        if row[1] != Errors.NONE or row[2] < 0:
            return False
    return True
