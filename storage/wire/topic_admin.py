"""The topic admin APIs.  Those that change the cluster metadata -- CreatePartitions (37) and
ElectLeaders (43) -- on both sides: the broker's handlers (`TopicAdminApis`, which ask the
controller through the broker's link, as KRaft brokers forward them) and what the controller
does with them (`grow_topics`, `elect`; the embedded LocalController and the controller process
call these on their `Controller`, then publish the change as metadata records).  And those a
partition's leader answers from its logs: DeleteRecords (21), DescribeLogDirs (35).
"""
from __future__ import annotations

import collections
import os
import shutil

from ..core.errors import Errors
from ..replication import messages as m
from . import apis, rules
from . import configs as topic_configs
from .broker import MetadataSource
from .codec import ms

PREFERRED, UNCLEAN = 0, 1          # ElectionType


def grow_topics(controller, topics: list[tuple[str, int, list[list[int]] | None]],
                validate_only: bool) -> list[tuple[str, int, str | None]]:
    """CreatePartitions on `controller`: [(topic, new count, manual lists or None)] ->
    [(topic, error code, message)], as Kafka's ControllerApis.createPartitions answers: a
    topic named twice gets one INVALID_REQUEST (ControllerApisTest.testCreatePartitionsRequest),
    each other one the controller's checks (ReplicationControlManager.createPartitions)."""
    named = collections.Counter(name for name, _, _ in topics)
    out = []
    for name, count, assignments in topics:
        if named[name] > 1:
            continue
        if count > topic_configs.MAX_PARTITIONS_PER_TOPIC:
            out.append((name, Errors.INVALID_PARTITIONS, topic_configs.partition_count_problem(count)))
            continue
        code, message = controller.create_partitions(name, count, assignments, validate_only=validate_only)
        out.append((name, code, message))
    out += [(name, Errors.INVALID_REQUEST, "Duplicate topic name.") for name, n in named.items() if n > 1]
    return out


def elect(controller, election_type: int,
          partitions: list[tuple[str, int]] | None) -> list[tuple[str, int, int, str | None]]:
    """ElectLeaders on `controller`: [(topic, partition, error code, message)].  None elects
    every partition and, as Kafka's ReplicationControlManager.electLeaders, leaves out those
    that need no election."""
    every = partitions is None
    out = []
    for topic, partition in (sorted(controller.partitions) if every else dict.fromkeys(partitions)):
        code, message = controller.elect_for_client(topic, partition, election_type)
        if not (every and code == Errors.ELECTION_NOT_NEEDED):
            out.append((topic, partition, code, message))
    return out


def _by_topic(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for topic, *rest in rows:
        out.setdefault(topic, []).append(rest)
    return out


def election_answer(rows, every_topic=()) -> dict:
    """The ElectLeaders response of elect's rows; an election of every partition has a row for
    each topic of `every_topic`, if empty (Kafka's electLeaders)."""
    grouped = {topic: [] for topic in every_topic}
    grouped.update(_by_topic(rows))
    return {"error_code": Errors.NONE, "replica_election_results": [
        {"topic": topic, "partition_result": [{"partition_id": p, "error_code": code, "error_message": message}
                                              for p, code, message in parts]}
        for topic, parts in grouped.items()]}


class TopicAdminApis:
    """The broker's CreatePartitions, ElectLeaders, DeleteRecords and DescribeLogDirs handlers
    (`notifier`: the one the follower fetches wake, for DeleteRecords' wait)."""

    def __init__(self, node: MetadataSource, notifier):
        self.node = node
        self.notifier = notifier

    async def create_partitions(self, header, request) -> dict:
        topics = [(t.name, t.count, None if t.assignments is None else [list(a.broker_ids) for a in t.assignments])
                  for t in request.topics]
        answers = await self.node.create_partitions(topics, bool(request.validate_only))
        return {"results": [{"name": n, "error_code": code, "error_message": message} for n, code, message in answers]}

    async def elect_leaders(self, header, request) -> dict:
        election_type = getattr(request, "election_type", PREFERRED)
        wanted = None if request.topic_partitions is None else \
            [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        rows = await self.node.elect_leaders(election_type, wanted)
        return election_answer(rows, self.node.topic_names() if wanted is None else ())

    async def delete_records(self, header, request) -> dict:
        """Each partition's log start offset raised to the offset asked (-1: the high watermark),
        as Kafka's ReplicaManager.deleteRecords: on the leader only, never past the high
        watermark (OFFSET_OUT_OF_RANGE), never on an internal topic (INVALID_TOPIC_EXCEPTION) or
        one without the delete cleanup policy (POLICY_VIOLATION).  Answered, as Kafka's
        DelayedDeleteRecords, once the low watermark -- the lowest log start of the replicas on
        live brokers, which followers report in their fetches -- reached the offset, or at the
        request's timeout with REQUEST_TIMED_OUT."""
        rows: dict[tuple[str, int], list] = {}
        pending: dict[tuple[str, int], int] = {}
        manager = self.node.manager
        for t in request.topics:
            for p in t.partitions:
                key = (t.name, p.partition_index)
                code, start = self._delete_records(t.name, p.partition_index, p.offset)
                rows[key] = [code, start]
                if code == Errors.NONE:
                    pending[key] = start if p.offset == -1 else p.offset
                    rows[key][1] = manager.low_watermark(*key)     # what a timed-out answer says
        self.node.pump()

        def attempt():
            for key, required in list(pending.items()):
                low = manager.low_watermark(*key)
                if low is None:
                    rows[key] = [Errors.NOT_LEADER_OR_FOLLOWER, -1]
                elif low >= required:
                    rows[key] = [Errors.NONE, low]
                else:
                    continue
                del pending[key]
            return None, not pending
        if pending:
            await apis.long_poll(self.notifier, min(ms(request.timeout), apis.MAX_WAIT_MS), attempt, set(pending),
                                 apis.LOW_WATERMARK)
        for key in pending:
            rows[key][0] = Errors.REQUEST_TIMED_OUT
        out: dict[str, list] = {}
        for (topic, index), (code, low) in rows.items():
            out.setdefault(topic, []).append({"partition_index": index, "low_watermark": low, "error_code": code})
        return {"topics": [{"name": t, "partitions": parts} for t, parts in out.items()]}

    def _delete_records(self, topic: str, partition: int, offset: int) -> tuple[int, int]:
        node = self.node
        if rules.is_internal(topic):
            return Errors.INVALID_TOPIC_EXCEPTION, -1
        if offset < 0 and offset != -1:
            return Errors.OFFSET_OUT_OF_RANGE, -1
        hosted = node.manager.partitions.get((topic, partition))
        if hosted is None:      # Kafka's getPartitionOrError: a partition the metadata has is led elsewhere
            known = node.partition_state(topic, partition) is not None
            return (Errors.NOT_LEADER_OR_FOLLOWER if known else Errors.UNKNOWN_TOPIC_OR_PARTITION), -1
        if "delete" not in hosted.log.config.cleanup_policy:
            return Errors.POLICY_VIOLATION, -1
        r = node.manager.handle(m.DeleteRecordsRequest(topic, partition, offset))
        return r.error_code, r.low_watermark

    async def describe_log_dirs(self, header, request) -> dict:
        """The broker's one log dir (Kafka's ReplicaManager.describeLogDirs): its partitions
        (those asked, null: every one) with their size in bytes, offset lag 0 (no future
        replica moves here: max(0, high watermark - log end) of the current log is 0) and
        is_future false; its disk's total and usable bytes (v4); KAFKA_STORAGE_ERROR and no
        partitions once the dir is offline."""
        logdir = self.node.logdir
        path = os.path.abspath(logdir.path)
        if logdir.offline:
            return {"error_code": Errors.NONE, "results": [
                {"error_code": Errors.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": [],
                 "total_bytes": -1, "usable_bytes": -1}]}
        wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
        rows: dict[str, list] = {}
        for (topic, partition), log in sorted(logdir.logs().items()):
            if wanted is None or (topic, partition) in wanted:
                lag = max(0, log.high_watermark - log.log_end_offset)
                rows.setdefault(topic, []).append({"partition_index": partition, "partition_size": log.size_bytes,
                                                   "offset_lag": lag, "is_future_key": False})
        try:
            usage = shutil.disk_usage(path)
            total, usable = usage.total, usage.free
        except OSError:
            total = usable = -1
        return {"error_code": Errors.NONE, "results": [
            {"error_code": Errors.NONE, "log_dir": path, "total_bytes": total, "usable_bytes": usable,
             "topics": [{"name": t, "partitions": parts} for t, parts in rows.items()]}]}
