"""Every API's authorization, as Kafka's KafkaApis checks it, in front of the handlers.

With ACLs on (`authorizer.class.name` set: the broker's `authorizer`), `guard(handlers, node)`
wraps each served API's handler in its check for the connection's session (session.current()):

  - a check of the whole request (a group's JoinGroup, a transactional id's EndTxn, a cluster
    operation) answers it with Kafka's code everywhere (error_answers) and never calls the
    handler: nothing is written;
  - a check per topic, group or resource splits the request: the handler sees only the
    authorized part, the refused part is answered with TOPIC_AUTHORIZATION_FAILED (29),
    GROUP_AUTHORIZATION_FAILED (30), CLUSTER_AUTHORIZATION_FAILED (31) or
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), and the two answers are merged;
  - listings (Metadata of every topic, ListGroups, ListTransactions, OffsetFetch of every topic)
    leave out what the session may not DESCRIBE; the authorized-operations fields are computed
    from the ACLs.

The broker's own session (session.BROKER) is always allowed.  With ACLs off nothing is wrapped.
"""
from __future__ import annotations

import dataclasses

from ..core.errors import Errors
from . import codec, error_answers, session
from .authorizer import CLUSTER_NAME
from .authorizer import Operation as O
from .authorizer import ResourceType as R
from .later import Close, Later

TOPIC_DENIED = Errors.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = Errors.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = Errors.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
_UNSET_OPERATIONS = -2147483648


def guard(handlers: dict, node) -> dict:
    """`handlers` with each API's check in front, when `node` has ACLs on; else `handlers`."""
    if getattr(node, "authorizer", None) is None:
        return handlers
    checks = Checks(node)
    out = dict(handlers)
    for key, handler in handlers.items():
        check = checks.table.get(key)
        if check is not None:
            out[key] = _wrapped(check, key, handler)
    return out


def _wrapped(check, key: int, handler):
    async def checked(header, request):
        return await check(key, header, request, handler)
    checked.checks = handler        # what it guards (the express path's test: produce_passes)
    return checked


def produce_passes(node, handler, guarded, topic: str) -> bool:
    """Whether `guarded` (the Produce handler as registered) hands a Produce of `topic` alone, with
    no transactional id, to `handler` as it is: with ACLs off it is `handler`; with them on,
    Checks.produce passes it on unsplit when the session may WRITE the topic.  The express
    path's check (express.py): it serves only what reaches the handler untouched."""
    if guarded is handler:
        return True
    return getattr(guarded, "checks", None) is handler and allowed(node, O.WRITE, R.TOPIC, topic)


def allowed(node, operation: int, resource_type: int, name: str = CLUSTER_NAME) -> bool:
    """Whether the current session may do `operation` on the resource (always with ACLs off).
    The helper for handlers that check for themselves (the SCRAM credential APIs: DESCRIBE or
    ALTER on CLUSTER)."""
    authorizer = getattr(node, "authorizer", None)
    return authorizer is None or authorizer.authorize(session.current(), operation, resource_type, name)


def _replace(request, **changes):
    """`request` with `changes`: kio's entities are frozen dataclasses; produce_codec's Produce
    request (read without kio) has its own replace."""
    if dataclasses.is_dataclass(request):
        return dataclasses.replace(request, **changes)
    return request.replace(**changes)


def _name(t) -> str | None:
    return getattr(t, "name", None) or getattr(t, "topic", None)


def _merged(body: dict, answers: list[dict]) -> dict:
    """`body` with the lists of each refusal's answer appended to its own."""
    for answer in answers:
        for name, value in answer.items():
            if isinstance(value, list) and isinstance(body.get(name), (list, tuple)):
                body[name] = list(body[name]) + value
    return body


async def _merged_later(later: Later, answers: list[dict]) -> dict:
    return _merged(await later.rest, answers)


def _version(header) -> int:
    return int(header.request_api_version)


def _refusal(key: int, header, request, code: int) -> dict:
    """The whole request answered with `code` (every field the version has)."""
    return codec.filled(key, _version(header), error_answers.error_body(key, request, code))


class Checks:
    def __init__(self, node):
        self.node = node
        self.table = {
            0: self.produce, 1: self.fetch, 2: self.topics(O.DESCRIBE), 3: self.metadata,
            8: self.offset_commit, 9: self.offset_fetch, 10: self.find_coordinator,
            11: self.group(O.READ), 12: self.group(O.READ), 13: self.group(O.READ), 14: self.group(O.READ),
            15: self.describe_groups, 16: self.list_groups, 19: self.create_topics, 20: self.delete_topics,
            21: self.topics(O.DELETE), 22: self.init_producer_id, 23: self.offset_for_leader_epoch,
            24: self.add_partitions_to_txn, 25: self.add_offsets_to_txn, 26: self.txn_only,
            27: self.cluster(O.CLUSTER_ACTION), 28: self.txn_offset_commit, 32: self.configs(O.DESCRIBE_CONFIGS),
            33: self.configs(O.ALTER_CONFIGS), 44: self.configs(O.ALTER_CONFIGS), 35: self.cluster(O.DESCRIBE),
            37: self.topics(O.ALTER), 42: self.delete_groups, 43: self.cluster(O.ALTER),
            47: self.offset_delete, 60: self.describe_cluster, 61: self.topics(O.READ),
            65: self.describe_transactions, 66: self.list_transactions,
            50: self.cluster(O.DESCRIBE), 51: self.cluster(O.ALTER),     # the users' SCRAM credentials
        }

    # ---- the decision for the current session ----
    def ok(self, operation: int, resource_type: int, name: str = CLUSTER_NAME) -> bool:
        return self.node.authorizer.authorize(session.current(), operation, resource_type, name)

    def ops(self, resource_type: int, name: str = CLUSTER_NAME) -> int:
        return self.node.authorizer.authorized_operations(session.current(), resource_type, name)

    # ---- splitting a request ----
    async def split(self, key: int, header, request, field: str, refused: dict, handler, name_of=_name, *,
                    call_empty: bool = False):
        """The handler on `request` without the items of `field` that `refused` names (item
        name -> code), their answers merged into its own (call_empty: the handler answers even
        when nothing is left, for the fields only it fills).  `refused` empty: the handler as is."""
        if not refused:
            return await handler(header, request)
        items = getattr(request, field)
        kept = tuple(i for i in items if name_of(i) not in refused)
        answers = [_refusal(key, header, _replace(
            request, **{field: tuple(i for i in items if refused.get(name_of(i)) == code)}), code)
            for code in dict.fromkeys(refused.values())]
        if kept or call_empty:
            body = await handler(header, _replace(request, **{field: kept}))
            if body is None or type(body) is Close:
                # A Produce of acks=0: no answer, but a refused topic is an error, which closes
                # the connection (later.Close), counted with the handler's own errors.
                return Close(_merged(answers.pop(0) if body is None else body.body, answers))
            if type(body) is Later:     # an acks=-1 Produce: the refusals join its answer when it comes
                return Later(_merged_later(body, answers))
        else:
            body = answers.pop(0)
        return _merged(body, answers)

    def topics(self, operation: int, code: int = TOPIC_DENIED, field: str = "topics"):
        """Every topic of `field` needs `operation` on it."""
        async def check(key, header, request, handler):
            refused = {_name(t): code for t in getattr(request, field) or ()
                       if not self.ok(operation, R.TOPIC, _name(t))}
            return await self.split(key, header, request, field, refused, handler)
        return check

    def group(self, operation: int):
        async def check(key, header, request, handler):
            if not self.ok(operation, R.GROUP, request.group_id):
                return _refusal(key, header, request, GROUP_DENIED)
            return await handler(header, request)
        return check

    def cluster(self, operation: int):
        async def check(key, header, request, handler):
            if not self.ok(operation, R.CLUSTER):
                return _refusal(key, header, request, CLUSTER_DENIED)
            return await handler(header, request)
        return check

    # ---- the data APIs ----
    async def produce(self, key, header, request, handler):
        txn = request.transactional_id
        if txn is not None and not self.ok(O.WRITE, R.TRANSACTIONAL_ID, txn):
            body = _refusal(key, header, request, TXN_DENIED)
        else:
            body = await self.topics(O.WRITE, field="topic_data")(key, header, request, handler)
        if request.acks == 0 and type(body) is dict:    # acks=0, refused: no answer, the connection closes
            return Close(body)
        return body

    def _topic_name_of(self, t) -> str | None:
        name = getattr(t, "topic", None)
        if name:
            return name
        topic_id = getattr(t, "topic_id", None)
        return self.node.topic_by_id(int(topic_id)) if topic_id is not None else None

    async def fetch(self, key, header, request, handler):
        replica = getattr(request, "replica_id", -1)
        state = getattr(request, "replica_state", None)
        if state is not None and state.replica_id >= 0:
            replica = state.replica_id
        if replica >= 0:        # a follower: CLUSTER_ACTION, else every partition refused
            if not self.ok(O.CLUSTER_ACTION, R.CLUSTER):
                return _refusal(key, header, request, TOPIC_DENIED)
            return await handler(header, request)
        refused = {}
        for t in request.topics:
            name = self._topic_name_of(t)
            if name is not None and not self.ok(O.READ, R.TOPIC, name):
                refused[name] = TOPIC_DENIED
        body = await self.split(key, header, request, "topics", refused, handler, name_of=self._topic_name_of)
        # An incremental fetch (KIP-227) answers partitions its session holds, which this
        # request does not name: each is checked again, as Kafka checks the whole session.
        for row in body.get("responses") or ():
            name = self._topic_name_of(_Named(_row(row, "topic") if _has(row, "topic") else None,
                                              _row(row, "topic_id") if _has(row, "topic_id") else None))
            if name is not None and name not in refused and not self.ok(O.READ, R.TOPIC, name):
                for p in _row(row, "partitions"):
                    for field, value in (("error_code", TOPIC_DENIED), ("records", b""), ("high_watermark", -1),
                                         ("last_stable_offset", -1), ("aborted_transactions", None)):
                        _set(p, field, value)
        return body

    async def offset_for_leader_epoch(self, key, header, request, handler):
        if getattr(request, "replica_id", -2) >= 0:
            if not self.ok(O.CLUSTER_ACTION, R.CLUSTER):
                return _refusal(key, header, request, CLUSTER_DENIED)
            return await handler(header, request)
        return await self.topics(O.DESCRIBE)(key, header, request, handler)

    async def metadata(self, key, header, request, handler):
        """Named topics the session may not DESCRIBE are refused; one that does not exist and
        would be created needs CREATE on the cluster or the topic; a request for every topic
        leaves out the ones it may not DESCRIBE."""
        refused = {}
        create = getattr(request, "allow_auto_topic_creation", True) and self.node.auto_create_topics
        cluster_create = None
        for t in request.topics or ():
            name = t.name
            if name is None:
                continue
            if not self.ok(O.DESCRIBE, R.TOPIC, name):
                refused[name] = TOPIC_DENIED
            elif create and not self.node.topic_id(name):
                if cluster_create is None:
                    cluster_create = self.ok(O.CREATE, R.CLUSTER)
                if not cluster_create and not self.ok(O.CREATE, R.TOPIC, name):
                    refused[name] = TOPIC_DENIED
        body = await self.split(key, header, request, "topics", refused, handler, call_empty=_version(header) > 0)
        if request.topics is None or (_version(header) == 0 and not request.topics):    # every topic
            body["topics"] = [t for t in body["topics"] if self.ok(O.DESCRIBE, R.TOPIC, _row(t, "name"))]
        if getattr(request, "include_topic_authorized_operations", False):
            for t in body["topics"]:
                if _row(t, "error_code") == Errors.NONE:
                    _set(t, "topic_authorized_operations", self.ops(R.TOPIC, _row(t, "name")))
        if getattr(request, "include_cluster_authorized_operations", False):
            body["cluster_authorized_operations"] = self.ops(R.CLUSTER)
        return body

    # ---- groups ----
    async def offset_commit(self, key, header, request, handler):
        if not self.ok(O.READ, R.GROUP, request.group_id):
            return _refusal(key, header, request, GROUP_DENIED)
        return await self.topics(O.READ)(key, header, request, handler)

    async def offset_fetch(self, key, header, request, handler):
        groups = getattr(request, "groups", None)
        if groups is not None:       # v8: one answer per group
            refused = {g.group_id: GROUP_DENIED for g in groups if not self.ok(O.DESCRIBE, R.GROUP, g.group_id)}
            body = await self.split(key, header, request, "groups", refused, handler, name_of=lambda g: g.group_id)
            for g, asked in zip(body["groups"], [g for g in groups if g.group_id not in refused]):
                _set(g, "topics", self._offsets_seen(_row(g, "topics"), asked.topics is None))
            return body
        if not self.ok(O.DESCRIBE, R.GROUP, request.group_id):
            return _refusal(key, header, request, GROUP_DENIED)
        body = await handler(header, request)
        body["topics"] = self._offsets_seen(body["topics"], request.topics is None)
        return body

    def _offsets_seen(self, topics, every: bool) -> list:
        """OffsetFetch's topics: those the session may not DESCRIBE left out of an all-topics
        answer, else their partitions TOPIC_AUTHORIZATION_FAILED."""
        out = []
        for t in topics or ():
            if self.ok(O.DESCRIBE, R.TOPIC, _row(t, "name")):
                out.append(t)
            elif not every:
                for p in _row(t, "partitions"):
                    _set(p, "error_code", TOPIC_DENIED)
                    _set(p, "committed_offset", -1)
                out.append(t)
        return out

    async def offset_delete(self, key, header, request, handler):
        """DELETE on the group, READ on each topic (a refused topic's partitions answered
        TOPIC_AUTHORIZATION_FAILED, none of them deleted)."""
        if not self.ok(O.DELETE, R.GROUP, request.group_id):
            return _refusal(key, header, request, GROUP_DENIED)
        refused = [t for t in request.topics if not self.ok(O.READ, R.TOPIC, t.name)]
        if not refused:
            return await handler(header, request)
        kept = tuple(t for t in request.topics if t not in refused)
        body = await handler(header, _replace(request, topics=kept)) if kept else \
            codec.filled(key, _version(header), {"error_code": Errors.NONE, "topics": []})
        rows = [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": TOPIC_DENIED}
                                                for p in t.partitions]} for t in refused]
        body["topics"] = list(body.get("topics") or ()) + rows
        return body

    async def find_coordinator(self, key, header, request, handler):
        resource, code = (R.TRANSACTIONAL_ID, TXN_DENIED) if request.key_type == 1 else (R.GROUP, GROUP_DENIED)
        keys = getattr(request, "coordinator_keys", None)
        if keys:     # v4: one answer per key
            refused = {k: code for k in keys if not self.ok(O.DESCRIBE, resource, k)}
            return await self.split(key, header, request, "coordinator_keys", refused, handler, name_of=lambda k: k)
        if not self.ok(O.DESCRIBE, resource, request.key):
            return _refusal(key, header, request, code)
        return await handler(header, request)

    async def describe_groups(self, key, header, request, handler):
        refused = {g: GROUP_DENIED for g in request.groups if not self.ok(O.DESCRIBE, R.GROUP, g)}
        body = await self.split(key, header, request, "groups", refused, handler, name_of=lambda g: g)
        if getattr(request, "include_authorized_operations", False):
            for g in body["groups"]:
                if _row(g, "error_code") == Errors.NONE:
                    _set(g, "authorized_operations", self.ops(R.GROUP, _row(g, "group_id")))
        return body

    async def list_groups(self, key, header, request, handler):
        body = await handler(header, request)
        if not self.ok(O.DESCRIBE, R.CLUSTER):
            body["groups"] = [g for g in body["groups"] if self.ok(O.DESCRIBE, R.GROUP, _row(g, "group_id"))]
        return body

    async def delete_groups(self, key, header, request, handler):
        refused = {g: GROUP_DENIED for g in request.groups_names if not self.ok(O.DELETE, R.GROUP, g)}
        return await self.split(key, header, request, "groups_names", refused, handler, name_of=lambda g: g)

    # ---- topics and configs ----
    async def create_topics(self, key, header, request, handler):
        if self.ok(O.CREATE, R.CLUSTER):
            body = await handler(header, request)
        else:
            body = await self.topics(O.CREATE)(key, header, request, handler)
        # A topic made (or validated) for a principal without DESCRIBE_CONFIGS on it is answered
        # without its configs, partition count and replication factor, and topic_config_error_code
        # TOPIC_AUTHORIZATION_FAILED (v5+; Kafka's ReplicationControlManager.createTopic).
        if _version(header) >= 5:
            for t in body["topics"]:
                if isinstance(t, dict) and t.get("error_code") == Errors.NONE and \
                        not self.ok(O.DESCRIBE_CONFIGS, R.TOPIC, t["name"]):
                    t.update(configs=[], num_partitions=-1, replication_factor=-1, topic_config_error_code=TOPIC_DENIED)
        return body

    async def delete_topics(self, key, header, request, handler):
        if getattr(request, "topic_names", None) is not None:       # before v6
            refused = {n: TOPIC_DENIED for n in request.topic_names if not self.ok(O.DELETE, R.TOPIC, n)}
            return await self.split(key, header, request, "topic_names", refused, handler, name_of=lambda n: n)

        def name_of(t):
            return t.name or (self.node.topic_by_id(int(t.topic_id)) if t.topic_id is not None else None)
        refused = {name_of(t): TOPIC_DENIED for t in request.topics
                   if name_of(t) is not None and not self.ok(O.DELETE, R.TOPIC, name_of(t))}
        return await self.split(key, header, request, "topics", refused, handler, name_of=name_of)

    def configs(self, operation: int):
        """Describe/Alter(Incremental)Configs: a topic's on the topic, a broker's (or its
        loggers') on the cluster."""
        async def check(key, header, request, handler):
            refused = {}
            for r in request.resources:
                if r.resource_type == 2:
                    if not self.ok(operation, R.TOPIC, r.resource_name):
                        refused[(2, r.resource_name)] = TOPIC_DENIED
                elif not self.ok(operation, R.CLUSTER):
                    refused[(int(r.resource_type), r.resource_name)] = CLUSTER_DENIED
            return await self.split(key, header, request, "resources", refused, handler,
                                    name_of=lambda r: (int(r.resource_type), r.resource_name))
        return check

    async def describe_cluster(self, key, header, request, handler):
        if not self.ok(O.DESCRIBE, R.CLUSTER):
            return _refusal(key, header, request, CLUSTER_DENIED)
        body = await handler(header, request)
        if getattr(request, "include_cluster_authorized_operations", False):
            body["cluster_authorized_operations"] = self.ops(R.CLUSTER)
        return body

    # ---- transactions ----
    async def init_producer_id(self, key, header, request, handler):
        txn = request.transactional_id
        if txn is not None:
            if not self.ok(O.WRITE, R.TRANSACTIONAL_ID, txn):
                return _refusal(key, header, request, TXN_DENIED)
        elif not (self.ok(O.IDEMPOTENT_WRITE, R.CLUSTER)
                  or self.node.authorizer.authorize_any(session.current(), O.WRITE, R.TOPIC)):
            return _refusal(key, header, request, CLUSTER_DENIED)
        return await handler(header, request)

    async def txn_only(self, key, header, request, handler):
        if not self.ok(O.WRITE, R.TRANSACTIONAL_ID, request.transactional_id):
            return _refusal(key, header, request, TXN_DENIED)
        return await handler(header, request)

    async def add_offsets_to_txn(self, key, header, request, handler):
        if not self.ok(O.WRITE, R.TRANSACTIONAL_ID, request.transactional_id):
            return _refusal(key, header, request, TXN_DENIED)
        if not self.ok(O.READ, R.GROUP, request.group_id):
            return _refusal(key, header, request, GROUP_DENIED)
        return await handler(header, request)

    async def add_partitions_to_txn(self, key, header, request, handler):
        """A client's (v0-3, or v4's v3_and_below fields): WRITE on the transactional id and
        on every topic -- a refused topic refuses the request, the others OPERATION_NOT_ATTEMPTED.
        A broker's batch (v4 transactions): CLUSTER_ACTION."""
        if getattr(request, "transactions", None):
            if not self.ok(O.CLUSTER_ACTION, R.CLUSTER):
                return _refusal(key, header, request, CLUSTER_DENIED)
            return await handler(header, request)
        txn = getattr(request, "v3_and_below_transactional_id", None) or getattr(request, "transactional_id", "")
        if not self.ok(O.WRITE, R.TRANSACTIONAL_ID, txn):
            return _refusal(key, header, request, TXN_DENIED)
        field = "v3_and_below_topics" if hasattr(request, "v3_and_below_topics") else "topics"
        topics = getattr(request, field) or ()
        refused = {t.name for t in topics if not self.ok(O.WRITE, R.TOPIC, t.name)}
        if not refused:
            return await handler(header, request)
        body = _refusal(key, header, request, Errors.OPERATION_NOT_ATTEMPTED)
        for row in body.get("results_by_topic_v3_and_below") or body.get("results") or ():
            if row["name"] in refused:
                for p in row.get("results_by_partition") or row.get("results") or ():
                    p["partition_error_code"] = p["error_code"] = TOPIC_DENIED
        return body

    async def txn_offset_commit(self, key, header, request, handler):
        if not self.ok(O.WRITE, R.TRANSACTIONAL_ID, request.transactional_id):
            return _refusal(key, header, request, TXN_DENIED)
        if not self.ok(O.READ, R.GROUP, request.group_id):
            return _refusal(key, header, request, GROUP_DENIED)
        return await self.topics(O.READ)(key, header, request, handler)

    async def describe_transactions(self, key, header, request, handler):
        refused = {i: TXN_DENIED for i in request.transactional_ids if not self.ok(O.DESCRIBE, R.TRANSACTIONAL_ID, i)}
        return await self.split(key, header, request, "transactional_ids", refused, handler, name_of=lambda i: i)

    async def list_transactions(self, key, header, request, handler):
        body = await handler(header, request)
        body["transaction_states"] = [s for s in body["transaction_states"]
                                      if self.ok(O.DESCRIBE, R.TRANSACTIONAL_ID, _row(s, "transactional_id"))]
        return body


class _Named:
    """A response row's topic name and id, shaped as a request's topic (for _topic_name_of)."""

    def __init__(self, topic, topic_id):
        self.topic, self.topic_id = topic, topic_id


def _has(row, name: str) -> bool:
    return name in row if isinstance(row, dict) else hasattr(row, name)


def _row(row, name: str):
    return row[name] if isinstance(row, dict) else getattr(row, name)


def _set(row, name: str, value) -> None:
    if isinstance(row, dict):
        row[name] = value
    else:
        object.__setattr__(row, name, value)
