"""Kafka's checks of a manual replica assignment (CreateTopics' `assignments`, CreatePartitions'),
as its KRaft controller makes them (ReplicationControlManager.validateManualPartitionAssignment
and the callers): each problem is INVALID_REPLICA_ASSIGNMENT with Kafka's message, or None.
Pure functions over what the controller knows (the registered brokers, which are active)."""
from __future__ import annotations

from collections.abc import Callable, Collection


class AssignmentError(Exception):
    """A refused assignment: its `error_code` and Kafka's message."""

    def __init__(self, error_code: int, message: str | None):
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def replicas_problem(replicas: list[int], registered: Collection[int], replication_factor: int | None) -> str | None:
    """One partition's replica list: not empty, every broker registered and named once, as
    many as `replication_factor` (None: any)."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker in sorted(replicas):
        if broker not in registered:
            return f"The manual partition assignment includes broker {broker}, but no such broker is registered."
        if broker == previous:
            return f"The manual partition assignment includes the broker {broker} more than once."
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        return (f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this "
                f"is not consistent with previous partitions, which have {replication_factor} replica(s).")
    return None


def in_sync(replicas: list[int], partition: int, active: Callable[[int], bool]) -> list[int]:
    """A new partition's ISR: its active replicas, in assignment order; none is a refusal."""
    isr = [b for b in replicas if active(b)]
    if not isr:
        raise AssignmentError(39, f"All brokers specified in the manual partition assignment for partition "
                                  f"{partition} are fenced or in controlled shutdown.")
    return isr


def topic_assignment(assignments: list[tuple[int, list[int]]], num_partitions: int, replication_factor: int,
                     registered: Collection[int], active: Callable[[int], bool]) -> dict[int, list[int]]:
    """CreateTopics' manual assignment [(partition index, broker ids)] -> partition -> replicas,
    or AssignmentError: num_partitions and replication_factor must be -1 (INVALID_REQUEST), each
    partition assigned once, the lists consistent in size, the ids consecutive from 0."""
    if replication_factor != -1:
        raise AssignmentError(42, "A manual partition assignment was specified, but replication factor was not "
                                  "set to -1.")
    if num_partitions != -1:
        raise AssignmentError(42, "A manual partition assignment was specified, but numPartitions was not set "
                                  "to -1.")
    out: dict[int, list[int]] = {}
    factor = None
    for index, replicas in assignments:
        if index in out:
            raise AssignmentError(39, f"Found multiple manual partition assignments for partition {index}")
        problem = replicas_problem(replicas, registered, factor)
        if problem:
            raise AssignmentError(39, problem)
        factor = len(replicas)
        in_sync(replicas, index, active)
        out[index] = list(replicas)
    if sorted(out) != list(range(len(out))):
        raise AssignmentError(39, "partitions should be a consecutive 0-based integer sequence")
    return out


def added_partitions(name: str, current: int, count: int, replication_factor: int,
                     assignments: list[list[int]] | None, registered: Collection[int]) -> list[list[int]] | None:
    """CreatePartitions' checks of growing `name` from `current` to `count` partitions: the
    manual replica lists of the new partitions (None: place them), or AssignmentError."""
    if count == current:
        raise AssignmentError(37, f"Topic already has {current} partition(s).")
    if count < current:
        raise AssignmentError(37, f"The topic {name} currently has {current} partition(s); {count} would not be "
                                  "an increase.")
    if assignments is None:
        return None
    if len(assignments) != count - current:
        raise AssignmentError(39, f"Attempted to add {count - current} additional partition(s), but only "
                                  f"{len(assignments)} assignment(s) were specified.")
    for replicas in assignments:
        problem = replicas_problem(replicas, registered, replication_factor)
        if problem:
            raise AssignmentError(39, problem)
    return [list(r) for r in assignments]
