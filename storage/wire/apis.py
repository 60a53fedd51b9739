"""The client APIs of a broker: each handler takes the kio request (any supported version) and
returns the response as a plain dict for `codec.build`, or None when Kafka sends no response
(Produce with acks=0).  Data requests go through the replica manager as the replication layer's
messages, so a client and a follower meet the same checks (epochs, KIP-320, KIP-704, the HW).
"""
from __future__ import annotations

import asyncio
import datetime
import logging

from ..core import errors
from ..core.errors import Errors
from ..replication import messages as m
from . import configs as topic_configs
from . import fetch_answer, rules
from .admin_apis import CLUSTER_OPERATIONS, TOPIC_OPERATIONS, operations
from .broker import MetadataSource
from .codec import SUPPORTED, InvalidRequestError, ms
from .fetch_sessions import FetchManager, FetchSessionCache
from .later import Close, Later
from .waiters import END, HIGH_WATERMARK, LOW_WATERMARK, Notifier, long_poll

log = logging.getLogger("storage.wire")

MAX_WAIT_MS = 30_000        # a fetch's wait is capped (a client asking more is waited this long)
SESSION = "\0session"       # waiter key (SESSION, id): a still partition of follower session id moved
EARLIEST_LOCAL_TIMESTAMP = -4   # ListOffsets v8+ (KIP-405)
LATEST_TIERED_TIMESTAMP = -5    # ListOffsets v9+ (KIP-1005)
_ONE_MS = datetime.timedelta(milliseconds=1)
# A partition answered without a diverging epoch (KIP-320): one dict every answer shares (read only).
_NO_DIVERGING = {"epoch": -1, "end_offset": -1}


def _partition_keys(topics, name_attr: str = "name", parts_attr: str = "partitions", index_attr: str = "partition_index"):
    for t in topics:
        for p in getattr(t, parts_attr):
            yield getattr(t, name_attr), getattr(p, index_attr), p


def _grouped(items, topic_key: str, parts_key: str) -> list[dict]:
    """[(topic, partition dict)] -> [{topic_key: topic, parts_key: [partition dicts]}], in order."""
    out: dict[str, list] = {}
    for topic, part in items:
        out.setdefault(topic, []).append(part)
    return [{topic_key: t, parts_key: parts} for t, parts in out.items()]


class ClientApis:
    def __init__(self, node: MetadataSource, notifier: Notifier):
        self.node = node
        self.notifier = notifier
        self.fetch_sessions = FetchManager(FetchSessionCache(getattr(node, "fetch_session_slots", 1000)))
        notifier.observers.append(self._still_moved)

    def _still_moved(self, keys, kind) -> None:
        """An append, a high watermark move or the metadata (keys None) moved `keys`: the
        follower sessions they were still in are read again, and their waiting fetch woken.  (A
        low watermark move is another follower's log start: nothing of this one's.)"""
        if kind == LOW_WATERMARK:
            return
        for session_id in self.fetch_sessions.cache.moved(keys):
            self.notifier.notify(((SESSION, session_id),), END)

    # ---- ApiVersions -------------------------------------------------------------------------
    @staticmethod
    def api_versions_body(error_code: int = Errors.NONE, table: dict | None = None) -> dict:
        return {"error_code": error_code,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                             for k, (_, lo, hi) in sorted((SUPPORTED if table is None else table).items())]}

    async def api_versions(self, header, request) -> dict:
        return self.api_versions_body()

    # ---- Metadata ----------------------------------------------------------------------------
    async def _topic_metadata(self, name: str, create: bool, version: int) -> dict:
        node = self.node
        parts = node.partitions_of(name)
        code = Errors.NONE
        if not parts and create and node.auto_create_topics and not rules.is_internal(name):
            code, _ = await node.create_topic(name)
            parts = node.partitions_of(name)
            if code == Errors.TOPIC_ALREADY_EXISTS:
                code = Errors.NONE
        elif not parts:
            code = Errors.UNKNOWN_TOPIC_OR_PARTITION
        return {"error_code": code, "name": name, "topic_id": node.topic_id(name),
                "is_internal": rules.is_internal(name), "partitions": node.partition_rows(name, version),
                "topic_authorized_operations": -2147483648}

    async def metadata(self, header, request) -> dict:
        node = self.node
        wanted = request.topics
        version = type(request).__version__
        unknown: list[dict] = []
        if wanted is None or (version == 0 and not wanted):
            names, create = node.topic_names(), False
        else:
            names, unknown = self._metadata_names(wanted, version)
            create = getattr(request, "allow_auto_topic_creation", True)
        topics = unknown + [await self._topic_metadata(n, create, version) for n in names]
        if getattr(request, "include_topic_authorized_operations", False):     # v8+: no authorizer, all of them
            for t in topics:
                if t["error_code"] == Errors.NONE:
                    t["topic_authorized_operations"] = TOPIC_OPERATIONS
        return {"brokers": [{"node_id": b, "host": host, "port": port, "rack": None} for b, host, port in node.brokers()],
                "cluster_id": node.cluster_id, "controller_id": node.controller_id, "topics": topics,
                "cluster_authorized_operations": operations(
                    getattr(request, "include_cluster_authorized_operations", False), CLUSTER_OPERATIONS)}

    def _metadata_names(self, wanted, version: int) -> tuple[list[str], list[dict]]:
        """The topic names a Metadata request asks for, and the rows it gets for the topics it
        names by nothing this broker knows.  As Kafka's KafkaApis: before v12 a null name is an
        INVALID_REQUEST (the whole request); from v12, if any topic id is not zero the request
        names its topics by id (the names are ignored) and an unknown id gets UNKNOWN_TOPIC_ID;
        kio reads the zero id as None.  A null name with the zero id names no topic: it gets
        UNKNOWN_TOPIC_ID too (Kafka has no rule for it; its cache finds no such topic)."""
        def unknown_row(topic_id: int) -> dict:
            return {"error_code": Errors.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id, "is_internal": False,
                    "partitions": [], "topic_authorized_operations": -2147483648}
        if version < 12 and any(t.name is None for t in wanted):
            raise InvalidRequestError(f"Metadata v{version}: a topic name is null (allowed from v12)")
        ids = [int(t.topic_id) for t in wanted if getattr(t, "topic_id", None)]
        if ids:
            known = {i: self.node.topic_by_id(i) for i in dict.fromkeys(ids)}
            return [n for n in known.values() if n is not None], [unknown_row(i) for i, n in known.items() if n is None]
        names = list(dict.fromkeys(t.name for t in wanted if t.name is not None))
        return names, [unknown_row(0)] if any(t.name is None for t in wanted) else []

    # ---- Produce -----------------------------------------------------------------------------
    async def produce(self, header, request) -> dict | Later | None:
        """Each partition's records (a view of the request frame) appended in one pass; acks 0/1,
        refusals and acks=-1 appends the high watermark covered at once (a partition of one
        replica) answer at once, the other acks=-1 ones with a Later: one wait for the answers
        still to come, which the connection does not wait for before it reads its next request."""
        manager, acks, transactional_id = self.node.manager, request.acks, request.transactional_id
        handle, problem_of, version = manager.handle_produce, rules.produce_problem, request.__version__
        answers, pending, refused = [], [], {}
        for t in request.topic_data:
            topic = t.name
            for part in t.partition_data:
                index, records = part.index, part.records or b""    # null: no batch, as empty
                problem = problem_of(topic, records, version, transactional_id)
                if problem:     # records Kafka refuses, an internal topic, a transactional or a control batch
                    answers.append(self._refused(topic, index, problem, refused))
                elif acks != -1:
                    answers.append(handle(m.ProduceRequest(topic, index, records, acks)))
                else:
                    done = asyncio.get_running_loop().create_future()
                    answer = handle(m.ProduceRequest(topic, index, records, acks),
                                    callback=lambda r, done=done: done.done() or done.set_result(r))
                    if answer is None and done.done():     # covered already (one replica): no wait
                        answer = done.result()
                    if answer is None:          # answered when the high watermark passes it
                        pending.append(done)
                    answers.append(answer if answer is not None else done)
        self.node.pump()        # the appends woke the fetches waiting on them (ReplicaManager.on_append)
        if pending:             # the wait does not hold the connection (later.py)
            return Later(self._produce_acked(pending, answers, refused))
        if acks == 0:       # no answer; an error anywhere closes the connection (later.Close)
            return None if not any(a.error_code for a in answers) else Close(
                {"responses": self.produce_rows(answers, refused)})
        return {"responses": self.produce_rows(answers, refused)}

    def _refused(self, topic: str, index: int, problem: tuple[int, str], refused: dict) -> m.ProduceResponse:
        """The answer of a partition whose records the rules refuse: UNKNOWN_TOPIC_OR_PARTITION
        first when the cluster has no such partition (Kafka's KafkaApis looks it up before it
        validates the records), but for an internal topic (the topic rule comes first here)."""
        if problem[0] != Errors.INVALID_TOPIC_EXCEPTION and self.node.partition_state(topic, index) is None:
            return m.ProduceResponse(topic, index, Errors.UNKNOWN_TOPIC_OR_PARTITION, -1)
        refused[(topic, index)] = problem[1]
        return m.ProduceResponse(topic, index, problem[0], -1)

    async def _produce_acked(self, pending: list, answers: list, refused: dict) -> dict:
        """An acks=-1 Produce's body, once the high watermark passed each partition's records (or
        they timed out)."""
        if len(pending) == 1:       # the common case: one partition (gather's future and callbacks not needed)
            await pending[0]
        else:
            await asyncio.gather(*pending)
        answers = [a.result() if isinstance(a, asyncio.Future) else a for a in answers]
        return {"responses": self.produce_rows(answers, refused)}

    def produce_rows(self, answers: list, refused: dict) -> list[dict]:
        """The response's topics, each with its partitions' rows (the keys produce_codec.ROW_KEYS)."""
        partitions = self.node.manager.partitions
        rows: dict[str, list] = {}
        for r in answers:
            topic, index, code = r.topic, r.partition, r.error_code
            if code == Errors.NONE and r.base_offset < 0:
                log.warning("produce to %s-%d answered without an offset", topic, index)
            hosted = partitions.get((topic, index))     # no copy of every log
            row = {"index": index, "error_code": code, "base_offset": r.base_offset,
                   "log_append_time": r.log_append_time, "log_start_offset": hosted.log.log_start_offset if hosted is not None else -1,
                   "record_errors": [{"batch_index": i, "batch_index_error_message": text}
                                     for i, text in r.record_errors] if r.record_errors else [],
                   "error_message": refused.get((topic, index), r.error_message) if refused else r.error_message}
            same = rows.get(topic)
            if same is None:
                rows[topic] = [row]
            else:
                same.append(row)
        return [{"name": t, "partition_responses": parts} for t, parts in rows.items()]

    # ---- Fetch -------------------------------------------------------------------------------
    def _fetch_request(self, request) -> tuple[m.FetchRequest, dict]:
        """The replication layer's FetchRequest, and topic name -> topic id of the request's
        topics (v13+ name topics by id; an id this broker does not know maps to no name)."""
        version = type(request).__version__
        state = request.replica_state if version >= 15 else None
        replica_id = state.replica_id if state is not None else getattr(request, "replica_id", -1)
        if replica_id < 0:          # Kafka's FetchRequest.isConsumer: every negative id (-2, the
            replica_id = m.CONSUMER_REPLICA_ID      # debugging consumer, too) reads as a consumer
        replica_epoch = state.replica_epoch if state is not None else -1
        parts, ids = [], {}
        by_id = version >= 13
        every_field = version >= 12     # current_leader_epoch (v9), log_start_offset (v5), last_fetched_epoch (v12)
        Partition = m.FetchPartition
        for t in request.topics:
            if not by_id:
                name = t.topic
                ids[name] = self.node.topic_id(name)
            else:
                # kio reads the zero id as None: no topic has it, the partitions get UNKNOWN_TOPIC_ID.
                topic_id = int(t.topic_id) if t.topic_id is not None else 0
                name = (topic_id and self.node.topic_by_id(topic_id)) or f"\0unknown-topic-id-{topic_id}"
                ids[name] = topic_id
            for p in t.partitions:
                if every_field:
                    parts.append(Partition(name, p.partition, p.fetch_offset, p.current_leader_epoch,
                                           p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes))
                    continue
                parts.append(Partition(name, p.partition, p.fetch_offset, getattr(p, "current_leader_epoch", -1),
                                       getattr(p, "last_fetched_epoch", -1), getattr(p, "log_start_offset", -1),
                                       p.partition_max_bytes))
        return m.FetchRequest(replica_id, replica_epoch, parts, getattr(request, "isolation_level", 0)), ids

    def _fetch_context(self, request, internal: m.FetchRequest, ids: dict):
        """The request's fetch session context (KIP-227, fetch_sessions.py); internal.partitions
        become the partitions it reads."""
        forgotten = []
        for t in getattr(request, "forgotten_topics_data", None) or ():
            name = getattr(t, "topic", None)
            if name is None:
                name = self.node.topic_by_id(int(t.topic_id) if t.topic_id is not None else 0)
            forgotten += [(name, p) for p in t.partitions] if name is not None else []
        context = self.fetch_sessions.new_context(
            type(request).__version__, getattr(request, "session_id", 0), getattr(request, "session_epoch", -1),
            internal.replica_id >= 0, internal.partitions, forgotten, ids,
            self._still_token(internal) if internal.replica_id >= 0 else None)
        internal.partitions = context.partitions
        return context

    def _still_token(self, internal: m.FetchRequest):
        """What a follower session's still partitions stay still under: no change of the
        manager's state but appends and high watermark moves (DeleteRecords and leadership are
        counted in `changes`), the same follower incarnation, no retention pass that moved log
        starts (LogDir.retention_moves: the next fetch reads them again and tells the new log
        start), the log dir online; None (never still) for a consumer."""
        manager = self.node.manager
        if internal.replica_id < 0 or manager.offline:
            return None
        return manager.changes, internal.replica_epoch, manager.logdir.retention_moves

    def _find_still(self, session_id: int, internal: m.FetchRequest, read: list) -> None:
        """After a follower's fetch is answered: the partitions it read that are now still
        (ReplicaManager.still_follower) join its session's still ones."""
        session = self.fetch_sessions.cache.followers.get(session_id)
        token = self._still_token(internal)
        if session is None:
            return
        if token != session.still_token:
            session.still.clear()
            session.still_token = token
        if token is None:
            return
        manager, names = self.node.manager, session.names
        for p in read:
            if p.error_code or p.diverging_epoch is not None:
                continue
            key = names.get((p.topic, p.partition))
            cached = session.partitions.get(key) if key is not None else None
            if cached is not None:
                follower = manager.still_follower((p.topic, p.partition), internal.replica_id, internal.replica_epoch,
                                                  cached.request.fetch_offset, cached.high_watermark,
                                                  cached.log_start_offset)
                if follower is not None:
                    session.still[cached.name] = follower

    async def fetch(self, header, request) -> dict:
        internal, ids = self._fetch_request(request)
        context = self._fetch_context(request, internal, ids)
        if context.kind == "error":
            return {"error_code": context.error, "session_id": 0, "responses": []}
        # KIP-74: the answer holds at most min(max_bytes, fetch.max.bytes), but one batch (v0-2
        # have no max_bytes: the broker's cap).
        internal.max_bytes = min(max(getattr(request, "max_bytes", self.node.fetch_max_bytes), 0),
                                 self.node.fetch_max_bytes)
        keys = set()
        for p in internal.partitions:
            keys.add((p.topic, p.partition))
        session = context.session if context.kind == "incremental" and context.session.still else None
        if session is not None:
            keys.add((SESSION, session.id))         # woken when one of its still partitions moves
        min_bytes = request.min_bytes

        def attempt():
            if session is not None and session.moved:   # still at first, moved since: read now
                for name in session.moved:
                    key = session.names.get(name)
                    if key is not None and name not in keys:
                        internal.partitions.append(session.partitions[key].request)
                        keys.add(name)
                session.moved = []
            response = self.node.manager.handle(internal)
            self.node.pump()
            if follower and internal.update_fetch_state:
                if session is not None:     # the fetch at their log end: their clocks move (Kafka's)
                    self.node.manager.touch_followers(session.still.values())
                self.notifier.notify(keys, LOW_WATERMARK)   # its log start (DeleteRecords' low watermark)
                internal.update_fetch_state = False     # read again when woken, applied once (Kafka's)
            # An error or a diverging epoch (KIP-320: the follower must truncate) is answered at once.
            size = 0
            for p in response.partitions:
                if p.error_code or p.diverging_epoch is not None:
                    return response, True
                size += len(p.records)
            return response, size >= min_bytes or not (internal.partitions or session)

        # A follower waits for its leader's log end to move, a consumer for the high watermark.
        follower = internal.replica_id >= 0
        wait = request.max_wait
        wait_ms = wait // _ONE_MS if type(wait) is datetime.timedelta else ms(wait)
        response = await long_poll(self.notifier, min(wait_ms, MAX_WAIT_MS), attempt, keys,
                                   END if follower else HIGH_WATERMARK)
        code, session_id, answered = context.answer(response.partitions)
        if follower and session_id and code == Errors.NONE:
            self._find_still(session_id, internal, response.partitions)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("fetch session %d epoch %d (%s): %d partitions asked, %d read, %d answered, session %d",
                      getattr(request, "session_id", 0), getattr(request, "session_epoch", -1), context.kind,
                      sum(len(t.partitions) for t in request.topics), len(internal.partitions), len(answered),
                      session_id)
        return self._fetch_answer(code, session_id, answered, ids)

    def _fetch_answer(self, code: int, session_id: int, answered: list, ids: dict) -> dict:
        """The Fetch response body of the `answered` partitions: its topics in the order their
        partitions come, one dict a partition (as fetch_answer.encode reads them)."""
        topics: dict[str, list] = {}
        zero_copy = fetch_answer.zero_copy_here()
        manager = self.node.manager
        for p in answered:
            aborted = None if p.aborted_transactions is None else \
                [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in p.aborted_transactions]
            diverging = p.diverging_epoch
            topic = p.topic
            parts = topics.get(topic)
            if parts is None:
                parts = topics[topic] = []
            parts.append({
                "partition_index": p.partition,
                "error_code": Errors.UNKNOWN_TOPIC_ID if topic.startswith("\0") else p.error_code,
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
                "diverging_epoch": _NO_DIVERGING if diverging is None else
                {"epoch": diverging.epoch, "end_offset": diverging.end_offset},
                "aborted_transactions": aborted, "preferred_read_replica": -1,
                # Not copied: a view of the segment, or a FileSlice of its file (sent with sendfile).
                "records": fetch_answer.records_of(manager, p)
                if zero_copy and len(p.records) >= fetch_answer.SENDFILE_MIN_BYTES else p.records})
        responses = []
        for t, parts in topics.items():
            responses.append({"topic": t, "topic_id": ids[t] if t in ids else self.node.topic_id(t), "partitions": parts})
        return {"error_code": code, "session_id": session_id, "responses": responses}

    # ---- ListOffsets -------------------------------------------------------------------------
    async def list_offsets(self, header, request) -> dict:
        read_committed = getattr(request, "isolation_level", 0) == m.READ_COMMITTED
        items = [(topic, self._list_offset(request.replica_id, topic, index, part, read_committed))
                 for topic, index, part in _partition_keys(request.topics)]
        return {"topics": _grouped(items, "name", "partitions")}

    def _list_offset(self, replica_id: int, topic: str, index: int, part, read_committed: bool) -> dict:
        """One partition's answer, as Kafka's Partition.fetchOffsetForTimestamp and
        UnifiedLog.fetchOffsetByTimestamp: earliest (-2) and earliest local (-4, KIP-405: the
        same without tiered storage), latest (-1: the high watermark, or the last stable offset
        read_committed, with the partition's leader epoch), max timestamp (-3, KIP-734),
        latest tiered (-5, KIP-1005: offset -1, nothing is tiered here), or by time; a found
        offset at or past what the client may read (HW, or LSO read_committed) is no offset."""
        asked = part.timestamp
        spec = -2 if asked in (EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP) else asked
        r = self.node.manager.handle(m.ListOffsetsRequest(replica_id, topic, index, spec,
                                                          getattr(part, "current_leader_epoch", -1)))
        timestamp, offset, epoch = r.timestamp, r.offset, r.leader_epoch
        hosted = self.node.manager.partitions.get((topic, index))
        if r.error_code == Errors.NONE and hosted is not None:
            lso = hosted.log.last_stable_offset
            if asked == LATEST_TIERED_TIMESTAMP:
                timestamp, offset, epoch = -1, -1, -1
            elif asked == -1 and replica_id < 0:
                offset, epoch = min(offset, lso) if read_committed else offset, hosted.leader_epoch
            elif read_committed and asked not in (-1, -2, EARLIEST_LOCAL_TIMESTAMP) and offset >= lso:
                timestamp, offset, epoch = -1, -1, -1
        return {"partition_index": index, "error_code": r.error_code, "timestamp": timestamp, "offset": offset,
                "leader_epoch": -1 if epoch is None else epoch}

    # ---- OffsetForLeaderEpoch ----------------------------------------------------------------
    async def offset_for_leader_epoch(self, header, request) -> dict:
        wanted = [m.OffsetForLeaderEpochPartition(t, i, p.leader_epoch, getattr(p, "current_leader_epoch", -1))
                  for t, i, p in _partition_keys(request.topics, "topic", "partitions", "partition")]
        response = self.node.manager.handle(m.OffsetForLeaderEpochRequest(getattr(request, "replica_id", -1), wanted))
        items = [(r.topic, {"error_code": r.error_code, "partition": r.partition, "leader_epoch": r.leader_epoch,
                            "end_offset": r.end_offset}) for r in response.partitions]
        return {"topics": _grouped(items, "topic", "partitions")}

    # ---- InitProducerId ----------------------------------------------------------------------
    async def init_producer_id(self, header, request) -> dict:
        if request.transactional_id is not None:
            # Transactions need a transaction coordinator, which this broker does not run yet.
            return {"error_code": Errors.INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
        # An idempotent producer gets a new id every time (Kafka's rule for a null transactional id).
        try:
            producer_id = await self.node.next_producer_id()
        except errors.StorageError as exc:      # the block's commit failed (the failure state), or its RPC
            return {"error_code": exc.error_code, "producer_id": -1, "producer_epoch": -1}
        return {"error_code": Errors.NONE, "producer_id": producer_id, "producer_epoch": 0}

    # ---- CreateTopics / DeleteTopics -----------------------------------------------------------
    async def create_topics(self, header, request) -> dict:
        node, out = self.node, []
        for t in request.topics:
            configs = {c.name: c.value for c in t.configs}
            assignments = [(a.partition_index, list(a.broker_ids)) for a in t.assignments]
            code, message = await node.create_topic(t.name, t.num_partitions, t.replication_factor, configs,
                                                    validate_only=request.validate_only, assignments=assignments)
            parts = node.partitions_of(t.name) if code == Errors.NONE else []
            described = []
            if code == Errors.NONE:
                min_isr = node.manager.topic_min_isr.get(t.name, node.manager.min_insync_replicas)
                described = [{"name": n, "value": v, "read_only": False,
                              "config_source": topic_configs.source(node.log_config, n, own),
                              "is_sensitive": False}
                             for n, v, own in topic_configs.describe(node.log_config, configs, min_isr)]
            out.append({"name": t.name, "topic_id": node.topic_id(t.name), "error_code": code,
                        "error_message": message, "num_partitions": len(parts) or -1,
                        "replication_factor": len(parts[0].replicas) if parts else -1, "configs": described})
        return {"topics": out}

    async def delete_topics(self, header, request) -> dict:
        node = self.node
        names, out = delete_topics_targets(request, node.topic_by_id)
        for name, _ in names:
            known_id = node.topic_id(name)
            code, message = rules.delete_problem(name) or (await node.delete_topic(name), None)
            out.append({"name": name, "topic_id": known_id, "error_code": code, "error_message": message})
        return {"responses": out}

    # ---- DescribeConfigs -----------------------------------------------------------------------


def delete_topics_targets(request, topic_by_id) -> tuple[list[tuple[str, int]], list[dict]]:
    """DeleteTopics' topics as Kafka's ControllerApis.deleteTopics reads them: the (name, id
    given or 0) to delete, and the rows already answered -- INVALID_REQUEST for a topic with
    neither name nor id (kio reads the zero id as None) or with both, and for a name or id given
    twice; UNKNOWN_TOPIC_ID for an id no topic has (ControllerApisTest.testInvalidDeleteTopicsRequest)."""
    answered: list[dict] = []

    def refuse(name, topic_id, code, message):
        answered.append({"name": name, "topic_id": topic_id, "error_code": code, "error_message": message})
    if getattr(request, "topics", None) is None:
        given = [(n, 0) for n in request.topic_names]
    else:
        given = [(t.name, int(t.topic_id) if t.topic_id is not None else 0) for t in request.topics]
    for name, topic_id in given:
        if name is None and not topic_id:
            refuse(None, 0, Errors.INVALID_REQUEST, "Neither topic name nor id were specified.")
        elif name is not None and topic_id:
            refuse(name, topic_id, Errors.INVALID_REQUEST, "You may not specify both topic name and topic id.")
    names = [n for n, i in given if n is not None and not i]
    ids = [i for n, i in given if n is None and i]
    for name in sorted({n for n in names if names.count(n) > 1}):
        refuse(name, 0, Errors.INVALID_REQUEST, "Duplicate topic name.")
    for topic_id in sorted({i for i in ids if ids.count(i) > 1}):
        refuse(None, topic_id, Errors.INVALID_REQUEST, "Duplicate topic id.")
    targets = [(n, 0) for n in names if names.count(n) == 1]
    for topic_id in (i for i in ids if ids.count(i) == 1):
        name = topic_by_id(topic_id)
        if name is None:
            refuse(None, topic_id, Errors.UNKNOWN_TOPIC_ID, None)
        elif name in names:
            refuse(name, topic_id, Errors.INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied.")
            targets = [t for t in targets if t[0] != name]
        else:
            targets.append((name, topic_id))
    return targets, answered


def storage_error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, errors.StorageError) else repr(exc)
