"""Kafka's error response of each served API, for a request its handler failed to answer.

Kafka answers a request whose handling raised with `AbstractRequest.getErrorResponse`: the
response of that API with the exception's code where the response has a top-level error code,
else on every topic, partition, group or resource the request named -- the client gets an
answer it can act on, and the connection stays open.  `error_body(key, request, code)` is that
answer as a plain dict (codec.encode_error_response builds it for the request's version, with
every field it does not name zeroed); field names of several versions are given side by side,
the version's entity takes the ones it has.
"""
from __future__ import annotations


def _topic_name(t):
    return getattr(t, "name", None) or getattr(t, "topic", None)


def _partition_index(p) -> int:
    for name in ("partition_index", "partition", "index"):
        if hasattr(p, name):
            return getattr(p, name)
    raise AttributeError(f"{type(p).__qualname__} has no partition index")


def _partitions(items, code: int) -> list[dict]:
    return [{"partition_index": i, "partition": i, "error_code": code} for i in map(_partition_index, items or ())]


def _produce(request, code):
    return {"responses": [{"name": t.name, "partition_responses": [
        {"index": p.index, "error_code": code, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}
        for p in t.partition_data]} for t in request.topic_data]}


def _fetch(request, code):
    return {"error_code": code, "session_id": 0, "responses": [
        {"topic": getattr(t, "topic", ""), "topic_id": getattr(t, "topic_id", 0),
         "partitions": [dict(p, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, records=b"",
                             aborted_transactions=None, preferred_read_replica=-1)
                        for p in _partitions(t.partitions, code)]}
        for t in request.topics]}


def _by_topic(topic_key: str = "name"):
    """ListOffsets, OffsetCommit, OffsetForLeaderEpoch: the code on every partition asked for."""
    def body(request, code):
        return {"topics": [{topic_key: _topic_name(t), "partitions": [
            dict(p, offset=-1, timestamp=-1, end_offset=-1, leader_epoch=-1) for p in _partitions(t.partitions, code)]}
            for t in request.topics or ()]}
    return body


def _metadata(request, code):
    return {"brokers": [], "cluster_id": None, "controller_id": -1, "topics": [
        {"error_code": code, "name": t.name, "topic_id": getattr(t, "topic_id", None) or 0, "is_internal": False,
         "partitions": [], "topic_authorized_operations": -2147483648}
        for t in request.topics or ()]}


def _offset_fetch(request, code):
    groups = getattr(request, "groups", None)
    if groups is not None:          # v8: one answer per group
        return {"groups": [{"group_id": g.group_id, "error_code": code, "topics": []} for g in groups]}
    # Before v2 the response has no top-level code: every partition asked for carries it.
    return {"error_code": code, "topics": [
        {"name": t.name, "partitions": [{"partition_index": i, "error_code": code, "committed_offset": -1,
                                         "committed_leader_epoch": -1, "metadata": None}
                                        for i in t.partition_indexes]}
        for t in request.topics or ()]}


def _find_coordinator(request, code):
    keys = getattr(request, "coordinator_keys", None) or ()
    return {"error_code": code, "node_id": -1, "host": "", "port": -1,
            "coordinators": [{"key": k, "error_code": code, "node_id": -1, "host": "", "port": -1} for k in keys]}


def _top_level(request, code):
    return {"error_code": code}


def _join_group(request, code):
    return {"error_code": code, "generation_id": -1, "member_id": getattr(request, "member_id", ""), "members": []}


def _init_producer_id(request, code):
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


def _describe_groups(request, code):
    return {"groups": [{"error_code": code, "group_id": g, "members": []} for g in request.groups]}


def _create_topics(request, code):
    return {"topics": [{"name": t.name, "error_code": code, "num_partitions": -1, "replication_factor": -1}
                       for t in request.topics]}


def _delete_topics(request, code):
    names = getattr(request, "topic_names", None)
    topics = [(n, 0) for n in names] if names is not None else \
        [(t.name, getattr(t, "topic_id", 0)) for t in request.topics]
    return {"responses": [{"name": n, "topic_id": i, "error_code": code} for n, i in topics]}


def _describe_configs(request, code):
    return {"results": [{"error_code": code, "resource_type": r.resource_type, "resource_name": r.resource_name,
                         "configs": []} for r in request.resources]}


def _alter_configs(request, code):
    return {"responses": [{"error_code": code, "resource_type": r.resource_type, "resource_name": r.resource_name}
                          for r in request.resources]}


def _write_txn_markers(request, code):
    return {"markers": [{"producer_id": mk.producer_id, "topics": [
        {"name": t.name, "partitions": [{"partition_index": i, "error_code": code} for i in t.partition_indexes]}
        for t in mk.topics]} for mk in request.markers]}


def _describe_producers(request, code):
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": i, "error_code": code, "error_message": None, "active_producers": []}
        for i in t.partition_indexes]} for t in request.topics]}


def _add_partitions_to_txn(request, code):
    return {"error_code": code, "results_by_topic_v3_and_below": [
        {"name": t.name, "results_by_partition": [{"partition_index": i, "partition_error_code": code}
                                                  for i in t.partitions]}
        for t in getattr(request, "v3_and_below_topics", ()) or ()], "results_by_transaction": []}


def _txn_offset_commit(request, code):
    return {"topics": [{"name": t.name, "partitions": _partitions(t.partitions, code)} for t in request.topics]}


def _describe_transactions(request, code):
    return {"transaction_states": [{"error_code": code, "transactional_id": i, "transaction_state": "",
                                    "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
                                    "producer_epoch": 0, "topics": []} for i in request.transactional_ids]}


def _create_partitions(request, code):
    return {"results": [{"name": t.name, "error_code": code, "error_message": None} for t in request.topics]}


def _elect_leaders(request, code):
    return {"error_code": code, "replica_election_results": [
        {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": code, "error_message": None}
                                                for p in t.partitions]} for t in request.topic_partitions or ()]}


def _delete_records(request, code):
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "low_watermark": -1, "error_code": code} for p in t.partitions]}
        for t in request.topics]}


def _describe_log_dirs(request, code):
    """The top-level code (v3+), and one result with it for v1-2, which have none."""
    return {"error_code": code, "results": [{"error_code": code, "log_dir": "", "topics": []}]}


def _api_versions(request, code):
    return {"error_code": code, "api_keys": []}


_BODIES = {
    0: _produce, 1: _fetch, 2: _by_topic(), 3: _metadata,
    8: _by_topic(), 9: _offset_fetch, 10: _find_coordinator, 11: _join_group,
    12: _top_level, 13: lambda request, code: {"error_code": code, "members": []}, 14: _top_level,
    15: _describe_groups, 16: lambda request, code: {"error_code": code, "groups": []}, 18: _api_versions,
    19: _create_topics, 20: _delete_topics, 22: _init_producer_id,
    23: _by_topic("topic"), 24: _add_partitions_to_txn, 25: _top_level, 26: _top_level, 27: _write_txn_markers,
    28: _txn_offset_commit, 32: _describe_configs, 61: _describe_producers, 65: _describe_transactions,
    66: lambda request, code: {"error_code": code, "unknown_state_filters": [], "transaction_states": []},
    33: _alter_configs, 44: _alter_configs, 60: _top_level,
    21: _delete_records, 35: _describe_log_dirs, 37: _create_partitions, 43: _elect_leaders,
    42: lambda request, code: {"results": [{"group_id": g, "error_code": code} for g in request.groups_names]},
    47: _top_level,
    29: lambda request, code: {"error_code": code, "resources": []},
    30: lambda request, code: {"results": [{"error_code": code} for _ in request.creations]},
    31: lambda request, code: {"filter_results": [{"error_code": code, "matching_acls": []} for _ in request.filters]},
    56: _top_level, 62: _top_level, 63: _top_level, 67: _top_level,
    17: lambda request, code: {"error_code": code, "mechanisms": []},
    36: lambda request, code: {"error_code": code, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0},
    50: lambda request, code: {"error_code": code, "error_message": None, "results": []},
    51: lambda request, code: {"results": [{"user": u.name, "error_code": code, "error_message": None}
                                           for u in (*request.deletions, *request.upsertions)]},
}


# The APIs whose per-topic rows carry an error message: CreateTopics, DeleteTopics, CreatePartitions.
_MESSAGE_ROWS = {19: "topics", 20: "responses", 37: "results"}


def error_body(key: int, request, code: int, message: str | None = None) -> dict:
    """The body of `key`'s response answering `request` with `code` everywhere it can be said
    (and `message` where a row has an error message)."""
    body = _BODIES[key](request, code)
    if message is not None and key in _MESSAGE_ROWS:
        for row in body[_MESSAGE_ROWS[key]]:
            row["error_message"] = message
    return body
