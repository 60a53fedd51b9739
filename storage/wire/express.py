"""The express path of a Produce (issue 33's lean produce path): the common request -- one topic,
one or several partitions, acks 0 or 1, no transactional id, v5 or later, of a shape read
before (produce_codec.known_parts) -- served in one call from the connection's loop, without
the dispatch, the handler's coroutine, the request's and the response's objects and dicts.

What it skips is only what the general path (FrameServer._dispatch -> ClientApis.produce ->
ReplicaManager.handle_produce -> the Produce encoder) would build and throw away; what it does is
the same, in the same order: the version served and the node ready, SASL's gate, the ACL check
(authz.produce_passes: WRITE on the topic), the request counted, the internal-topic and batch
checks (rules.produce_problem), the replica manager's handle_produce (every leadership, epoch and
storage check, the append, the high watermark), the appends' wake of waiting fetches
(node.pump), the request metrics, and the answer byte for byte (tests/wire/test_express.py
compares both paths).  Anything else goes the general way: a frame it does not know (the first
of a producer's shape, other APIs), a topic the session may not write (the general path refuses
it), DEBUG logging on, a request the rules refuse, an answer with an error or a record error
(encoded by the general encoder); an acks=0 request that met an error closes the connection
(later.Close), as on the general path.
"""
from __future__ import annotations

import logging
import time

from ..core.errors import Errors
from ..replication.messages import ProduceRequest
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

    def serve(self, frame: bytes):
        hit = produce_codec.known_parts(frame)
        if hit is None:
            return NOT_MINE
        shape, parts = hit
        server, version, acks, name = self.server, shape.version, shape.acks, shape.name
        if (acks not in (0, 1) or shape.transactional_id is not None or version not in self.versions
                or not server.ready.is_set() or not sasl.allowed(produce_codec.PRODUCE_KEY)
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
        manager = node.manager
        try:
            answers = []
            for index, records in parts:
                answers.append(manager.handle_produce(ProduceRequest(name, index, records, acks)))
            node.pump()         # the appends woke the fetches waiting on them (ReplicaManager.on_append)
            if acks == 0:       # no answer; an error closes the connection (later.Close)
                body = None
                for a in answers:       # not any(): its generator costs ~0.2 us a request
                    if a.error_code:
                        body = Close({"responses": self.apis.produce_rows(answers, {})})
                        break
            else:
                rows = _rows(answers, manager.partitions)
                if rows is not None:
                    if server.observer is not None:
                        server.observer.answered(produce_codec.PRODUCE_KEY, started, None)
                    if len(rows) == 1:
                        return produce_codec.encode_row(version, correlation_id, name, rows[0][0], Errors.NONE,
                                                        rows[0][1], rows[0][2])
                    return produce_codec.encode_rows(version, correlation_id, name, rows)
                body = {"responses": self.apis.produce_rows(answers, {})}
        except Exception as exc:
            header, request = shape.read(frame, parts)
            return server.answer_failure(exc, produce_codec.PRODUCE_KEY, version, correlation_id, header, request,
                                         started)
        return server.answer_body(body, produce_codec.PRODUCE_KEY, version, correlation_id, started)


def _rows(answers: list, partitions: dict) -> list[tuple[int, int, int]] | None:
    """(index, base offset, log start offset) of each answer, or None when one is not a plain
    success (an error, record errors, a message: the general encoder writes those)."""
    rows = []
    for a in answers:
        if a.error_code != Errors.NONE or a.base_offset < 0 or a.record_errors or a.error_message is not None:
            return None
        hosted = partitions.get((a.topic, a.partition))
        rows.append((a.partition, a.base_offset, hosted.log.log_start_offset if hosted is not None else -1))
    return rows
