"""The topic admin APIs that change the cluster metadata -- CreatePartitions (37) and
ElectLeaders (43) -- on both sides: the broker's handlers (`TopicAdminApis`, which ask the
controller through the broker's link, as KRaft brokers forward them) and what the controller
does with them (`grow_topics`, `elect`; the embedded LocalController and the controller process
call these on their `Controller`, then publish the change as metadata records).
"""
from __future__ import annotations

import collections

from ..core.errors import Errors
from . import configs as topic_configs
from .broker import MetadataSource

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


def election_answer(rows) -> dict:
    """The ElectLeaders response of elect's rows."""
    return {"error_code": Errors.NONE, "replica_election_results": [
        {"topic": topic, "partition_result": [{"partition_id": p, "error_code": code, "error_message": message}
                                              for p, code, message in parts]}
        for topic, parts in _by_topic(rows).items()]}


class TopicAdminApis:
    """The broker's CreatePartitions and ElectLeaders handlers."""

    def __init__(self, node: MetadataSource):
        self.node = node

    async def create_partitions(self, header, request) -> dict:
        topics = [(t.name, t.count, None if t.assignments is None else [list(a.broker_ids) for a in t.assignments])
                  for t in request.topics]
        answers = await self.node.create_partitions(topics, bool(request.validate_only))
        return {"results": [{"name": n, "error_code": code, "error_message": message} for n, code, message in answers]}

    async def elect_leaders(self, header, request) -> dict:
        election_type = getattr(request, "election_type", PREFERRED)
        wanted = None if request.topic_partitions is None else \
            [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        return election_answer(await self.node.elect_leaders(election_type, wanted))
