"""`python -m storage cluster status`: a running cluster's brokers and, for every partition, its
leader, replicas and ISR, with what is wrong: OFFLINE (no leader), UNDER-REPLICATED (an ISR smaller
than the replica set, Kafka's kafka-topics --under-replicated-partitions), and each replica on a
broker the cluster does not list (down or fenced: KRaft's Metadata leaves fenced brokers out).

Built on confluent-kafka's AdminClient like `storage topics` (admin_tools), so it works against
Apache Kafka too.  Exit 0 when every partition is led and fully replicated, 1 when one is not (for
scripts and health checks), 2 for bad arguments.  Internal topics' partitions are summed up in one
line unless one of them is not healthy or --all is given."""
from __future__ import annotations

from .admin_tools import Admin, _connection, _emit, _result, _table, run_tool
from .output import OK, PROBLEMS


def add_arguments(p) -> None:
    _connection(p)
    p.add_argument("--all", action="store_true", help="list the internal topics' partitions too")


def _state(partition, brokers: set[int]) -> list[str]:
    problems = []
    if partition.leader < 0:
        problems.append("OFFLINE")
    if set(partition.isrs) < set(partition.replicas):
        problems.append("UNDER-REPLICATED")
    down = sorted(r for r in partition.replicas if r not in brokers)
    if down:
        problems.append("replica" + ("s " if len(down) > 1 else " ") + ",".join(map(str, down))
                        + " down or fenced (not in Metadata)")
    return problems


def _document(admin: Admin, include_internal: bool) -> dict:
    described = _result(admin.client.describe_cluster(), "DescribeCluster", admin.timeout)
    metadata = admin.refresh()
    brokers = {node.id: f"{node.host}:{node.port}" for node in described.nodes}
    controller = described.controller.id if described.controller is not None else None
    partitions, hidden = [], {"partitions": 0, "healthy": 0}
    for name in sorted(metadata.topics):
        topic = metadata.topics[name]
        if topic.error is not None:
            partitions.append({"topic": name, "partition": None, "error": topic.error.str()})
            continue
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            row = {"topic": name, "partition": index, "leader": p.leader, "replicas": list(p.replicas),
                   "isr": list(p.isrs), "problems": _state(p, set(brokers))}
            if name.startswith("__") and not include_internal and not row["problems"]:
                hidden["partitions"] += 1
                hidden["healthy"] += 1
                continue
            partitions.append(row)
    return {"cluster_id": described.cluster_id, "controller_id": controller,
            "brokers": [{"id": i, "address": brokers[i]} for i in sorted(brokers)],
            "partitions": partitions, "internal_partitions_not_listed": hidden["partitions"]}


def _lines(doc: dict) -> list[str]:
    count = len(doc["brokers"])
    lines = [f"cluster {doc['cluster_id']}: {count} broker{'s' if count != 1 else ''} in Metadata"]
    lines += _table(["BROKER", "ADDRESS"], [[b["id"], b["address"]] for b in doc["brokers"]])
    rows = []
    for p in doc["partitions"]:
        if p["partition"] is None:
            rows.append([p["topic"], "-", "-", "-", "-", p["error"]])
            continue
        rows.append([p["topic"], p["partition"], p["leader"] if p["leader"] >= 0 else "none",
                     ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])),
                     "; ".join(p["problems"]) or "ok"])
    lines.append("")
    lines += _table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "STATUS"], rows)
    if doc["internal_partitions_not_listed"]:
        lines.append(f"(and {doc['internal_partitions_not_listed']} partitions of internal topics, all ok: "
                     "--all lists them)")
    return lines


def _status(admin: Admin, args) -> int:
    doc = _document(admin, args.all)
    _emit(args, doc, _lines(doc))
    degraded = any(p.get("problems") or p["partition"] is None for p in doc["partitions"])
    return PROBLEMS if degraded else OK


def cluster_status(args) -> int:
    return run_tool(_status, args)
