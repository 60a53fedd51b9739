"""The express path of a Produce (issue 33's lean produce path): the common request -- one topic,
one partition, acks 0 or 1, no transactional id, v5 or later, of a shape read before -- served
in one call from the connection's loop, without the dispatch, the handler's coroutine, the
request's and the response's objects and dicts.

What it skips is only what the general path (FrameServer._dispatch -> ClientApis.produce ->
ReplicaManager.handle_produce -> the Produce encoder) would build and throw away; what it does is
the same, in the same order: the version served and the node ready, SASL's gate, the request
counted, the internal-topic and batch checks (rules.produce_problem), the replica manager's
handle_produce (every leadership, epoch and storage check, the append, the high watermark), the
appends' wake of waiting fetches (node.pump), the request metrics, and the answer byte for byte
(tests/wire/test_express.py compares both paths).  Anything else goes the general way: a frame it
does not know (the first of a producer's shape, other APIs), the ACL check on (authz wraps the
handler), DEBUG logging on, a request the rules refuse (the general path writes that answer), an
answer with an error or a record error (encoded by the general encoder).
"""
from __future__ import annotations

import logging
import time

from ..core.errors import Errors
from ..replication.messages import ProduceRequest
from . import codec, produce_codec, sasl
from .rules import produce_problem

log = logging.getLogger("storage.wire")

NOT_MINE = object()     # serve()'s answer for a frame left to the general path
FIRST_VERSION = 5       # the versions whose one-row answer produce_codec.encode_row lays out


class ProduceExpress:
    """The express path of one broker's server: `serve(frame)` -> the answer (bytes), None (acks=0:
    none), or NOT_MINE."""

    def __init__(self, server, apis, handler) -> None:
        self.server, self.apis = server, apis
        self.handler = handler          # the Produce handler as registered: another one (authz) -> not ours
        self.taken = 0                  # requests served here
        self.versions = frozenset(v for v in range(FIRST_VERSION, produce_codec.LAST_REQUEST_VERSION + 1)
                                  if codec.is_supported(produce_codec.PRODUCE_KEY, v, server.supported))

    def serve(self, frame: bytes):
        hit = produce_codec.known_records(frame)
        if hit is None:
            return NOT_MINE
        shape, records = hit
        server, version, acks = self.server, shape.version, shape.acks
        if (records is None or acks not in (0, 1) or shape.transactional_id is not None
                or version not in self.versions or server.handlers[0] is not self.handler
                or not server.ready.is_set() or not sasl.allowed(produce_codec.PRODUCE_KEY)
                or log.isEnabledFor(logging.DEBUG) or produce_problem(shape.name, records) is not None):
            return NOT_MINE
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        server.served[(produce_codec.PRODUCE_KEY, version)] += 1
        self.taken += 1
        started = time.perf_counter()
        node = self.apis.node
        try:
            answer = node.manager.handle_produce(ProduceRequest(shape.name, shape.index, records, acks))
            node.pump()         # the append woke the fetches waiting on it (ReplicaManager.on_append)
            if acks == 0:
                body = None
            elif answer.error_code == Errors.NONE and answer.base_offset >= 0 and not answer.record_errors \
                    and answer.error_message is None:
                if server.observer is not None:
                    server.observer.answered(produce_codec.PRODUCE_KEY, started, None)
                hosted = node.manager.partitions.get((shape.name, shape.index))
                return produce_codec.encode_row(version, correlation_id, shape.name, shape.index, Errors.NONE,
                                                answer.base_offset, hosted.log.log_start_offset if hosted else -1)
            else:
                body = {"responses": self.apis.produce_rows([answer], {})}
        except Exception as exc:
            header, request = shape.read(frame, records)
            return server.answer_failure(exc, produce_codec.PRODUCE_KEY, version, correlation_id, header, request,
                                         started)
        return server.answer_body(body, produce_codec.PRODUCE_KEY, version, correlation_id, started)
