"""`python -m storage topics ...` and `python -m storage groups ...`: Kafka's kafka-topics.sh and
kafka-consumer-groups.sh on confluent-kafka's AdminClient (librdkafka), so they speak only the
Kafka protocol and work against any Kafka broker, ours or Apache Kafka's.

confluent-kafka is the `tools` extra and is imported only when a subcommand runs.  Every error
is one line on stderr naming Kafka's error (UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, ...),
exit 1; a bootstrap server that does not answer within --timeout seconds is one line, exit 1;
bad arguments, or the extra missing, exit 2."""
from __future__ import annotations

import argparse
import base64
import datetime
import json
import logging
import sys
from collections.abc import Iterator

from .output import OK, PROBLEMS, USAGE

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXTRA_MISSING = "the admin tools need the [tools] extra (pip install 'kafka-partition-storage[tools]')"

# librdkafka shortens a few of Kafka's error names; the tools print Kafka's (Errors.java).
KAFKA_NAMES = {"UNKNOWN_TOPIC_OR_PART": "UNKNOWN_TOPIC_OR_PARTITION", "NOT_LEADER_FOR_PARTITION":
               "NOT_LEADER_OR_FOLLOWER", "MSG_SIZE_TOO_LARGE": "MESSAGE_TOO_LARGE",
               "INVALID_MSG": "CORRUPT_MESSAGE", "INVALID_MSG_SIZE": "INVALID_FETCH_SIZE"}


class ToolError(Exception):
    """One line for stderr; exit 1 (2 when `usage`)."""

    def __init__(self, message: str, usage: bool = False):
        super().__init__(message)
        self.usage = usage


def kafka_error_line(error) -> str:
    """`NAME: message` for a confluent_kafka KafkaError, with Kafka's name for broker errors."""
    name = error.name()
    name = KAFKA_NAMES.get(name, name)
    text = error.str()
    return f"{name}: {text}" if text and text != name else name


def _ck():
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError as exc:
        raise ToolError(f"{EXTRA_MISSING}: {exc}", usage=True) from None
    return confluent_kafka


def _result(future, what: str, timeout: float):
    ck = _ck()
    try:
        return future.result(timeout=timeout)
    except ck.KafkaException as exc:
        raise ToolError(f"{what}: {kafka_error_line(exc.args[0])}") from None
    except TimeoutError:
        raise ToolError(f"{what}: REQUEST_TIMED_OUT: no answer within {timeout:g} s") from None


class Admin:
    """An AdminClient on --bootstrap-server, checked reachable before anything else is asked."""

    def __init__(self, args):
        ck = _ck()
        self.ck, self.timeout, self.bootstrap = ck, args.timeout, args.bootstrap_server
        quiet = logging.getLogger("storage.cli.admin_tools.librdkafka")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        self.conf = {"bootstrap.servers": self.bootstrap, "log_level": 0, "logger": quiet,
                     "socket.connection.setup.timeout.ms": max(1000, int(self.timeout * 1000)),
                     **security_conf(args)}
        try:
            self.client = ck.admin.AdminClient(dict(self.conf))
        except (ck.KafkaException, ValueError, TypeError) as exc:
            raise ToolError(f"--bootstrap-server {self.bootstrap!r}: {exc}", usage=True) from None
        self.metadata = self.refresh()

    def refresh(self):
        try:
            return self.client.list_topics(timeout=self.timeout)
        except self.ck.KafkaException as exc:
            raise ToolError(f"cannot reach the bootstrap server {self.bootstrap} within {self.timeout:g} s "
                            f"({kafka_error_line(exc.args[0])})") from None

    def wait(self, future, what: str):
        return _result(future, what, self.timeout)

    def topic(self, name: str):
        found = self.metadata.topics.get(name)
        if found is None or (found.error is not None and found.error.code() == 3):
            raise ToolError(f"topic '{name}': UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist")
        return found

    def offsets(self, partitions, spec) -> dict:
        """(topic, partition) -> offset answered by ListOffsets for `spec`."""
        if not partitions:
            return {}
        tps = {self.ck.TopicPartition(t, p): spec for t, p in partitions}
        futures = self.client.list_offsets(tps, request_timeout=self.timeout)
        return {(tp.topic, tp.partition): self.wait(f, f"list offsets of {tp.topic}-{tp.partition}").offset
                for tp, f in futures.items()}


def _emit(args, document, lines) -> int:
    if args.json:
        json.dump(document, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for line in lines:
            print(line)
    return OK


def _table(header: list[str], rows: list[list]) -> list[str]:
    cells = [header] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def _configs(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ToolError(f"--config {item!r}: expected KEY=VALUE", usage=True)
        out[key] = value
    return out


# ---- topics ---------------------------------------------------------------------------------

def topics_list(admin: Admin, args) -> int:
    names = sorted(t for t in admin.metadata.topics if not (args.exclude_internal and t.startswith("__")))
    return _emit(args, names, names)


def _dynamic_configs(admin: Admin, name: str) -> dict[str, str]:
    admin_mod = admin.ck.admin
    resource = admin_mod.ConfigResource(admin_mod.ResourceType.TOPIC, name)
    entries = admin.wait(admin.client.describe_configs([resource], request_timeout=admin.timeout)[resource],
                         f"describe configs of topic '{name}'")
    return {k: e.value for k, e in sorted(entries.items())
            if e.source == admin_mod.ConfigSource.DYNAMIC_TOPIC_CONFIG.value and not e.is_sensitive}


def _topic_ids(admin: Admin, names: list[str]) -> dict[str, str]:
    """Topic name -> id as Kafka prints it (Uuid.toString: URL-safe base64 without padding)."""
    if not names:
        return {}
    futures = admin.client.describe_topics(admin.ck.TopicCollection(names), request_timeout=admin.timeout)
    out = {}
    for name, future in futures.items():
        uuid = admin.wait(future, f"describe topic '{name}'").topic_id
        raw = b"".join((bits % 2**64).to_bytes(8, "big") for bits in
                       (uuid.get_most_significant_bits(), uuid.get_least_significant_bits()))
        out[name] = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return out


def topics_describe(admin: Admin, args) -> int:
    names = [args.topic] if args.topic else sorted(
        t for t in admin.metadata.topics if not (args.exclude_internal and t.startswith("__")))
    for name in names:
        admin.topic(name)
    ids = _topic_ids(admin, names)
    document, lines = [], []
    for name in names:
        meta = admin.topic(name)
        parts = [{"partition": p.id, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
                 for p in sorted(meta.partitions.values(), key=lambda p: p.id)]
        configs = _dynamic_configs(admin, name)
        rf = len(parts[0]["replicas"]) if parts else 0
        document.append({"topic": name, "topic_id": ids[name], "partition_count": len(parts),
                         "replication_factor": rf, "configs": configs, "partitions": parts})
        lines.append(f"Topic: {name}\tTopicId: {ids[name]}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}"
                     "\tConfigs: "
                     + ",".join(f"{k}={v}" for k, v in configs.items()))
        for p in parts:
            lines.append(f"\tTopic: {name}\tPartition: {p['partition']}\tLeader: {p['leader']}\tReplicas: "
                         f"{','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}")
    return _emit(args, document, lines)


def topics_create(admin: Admin, args) -> int:
    if args.if_not_exists and args.topic in admin.metadata.topics:
        return _emit(args, {"topic": args.topic, "created": False}, [])
    new = admin.ck.admin.NewTopic(args.topic, num_partitions=args.partitions if args.partitions else -1,
                                  replication_factor=args.replication_factor or -1, config=_configs(args.config))
    futures = admin.client.create_topics([new], operation_timeout=admin.timeout, request_timeout=admin.timeout)
    admin.wait(futures[args.topic], f"create topic '{args.topic}'")
    return _emit(args, {"topic": args.topic, "created": True}, [f"Created topic {args.topic}."])


def topics_delete(admin: Admin, args) -> int:
    if args.if_exists and args.topic not in admin.metadata.topics:
        return _emit(args, {"topic": args.topic, "deleted": False}, [])
    admin.topic(args.topic)
    futures = admin.client.delete_topics([args.topic], operation_timeout=admin.timeout,
                                         request_timeout=admin.timeout)
    admin.wait(futures[args.topic], f"delete topic '{args.topic}'")
    return _emit(args, {"topic": args.topic, "deleted": True}, [f"Deleted topic {args.topic}."])


def topics_alter_configs(admin: Admin, args) -> int:
    admin.topic(args.topic)
    mod = admin.ck.admin
    sets, deletes = _configs(args.config), list(args.delete_config or ())
    if not sets and not deletes:
        raise ToolError("alter-configs: give --config KEY=VALUE or --delete-config KEY", usage=True)
    entries = [mod.ConfigEntry(k, v, incremental_operation=mod.AlterConfigOpType.SET) for k, v in sets.items()]
    entries += [mod.ConfigEntry(k, None, incremental_operation=mod.AlterConfigOpType.DELETE) for k in deletes]
    resource = mod.ConfigResource(mod.ResourceType.TOPIC, args.topic, incremental_configs=entries)
    futures = admin.client.incremental_alter_configs([resource], request_timeout=admin.timeout)
    admin.wait(futures[resource], f"alter configs of topic '{args.topic}'")
    return _emit(args, {"topic": args.topic, "set": sets, "deleted": deletes},
                 [f"Completed updating config for topic {args.topic}."])


def topics_alter(admin: Admin, args) -> int:
    before = len(admin.topic(args.topic).partitions)
    new = admin.ck.admin.NewPartitions(args.topic, args.partitions)
    futures = admin.client.create_partitions([new], operation_timeout=admin.timeout, request_timeout=admin.timeout)
    admin.wait(futures[args.topic], f"add partitions to topic '{args.topic}'")
    return _emit(args, {"topic": args.topic, "partitions_before": before, "partitions": args.partitions},
                 [f"Topic {args.topic}: {before} -> {args.partitions} partitions."])


# ---- groups ---------------------------------------------------------------------------------

def _describe_group(admin: Admin, group: str):
    description = admin.wait(admin.client.describe_consumer_groups([group], request_timeout=admin.timeout)[group],
                             f"describe group '{group}'")
    if description.state == admin.ck.ConsumerGroupState.DEAD:
        raise ToolError(f"group '{group}': GROUP_ID_NOT_FOUND: consumer group '{group}' does not exist")
    return description


def _committed(admin: Admin, group: str) -> dict[tuple[str, int], int]:
    request = admin.ck.ConsumerGroupTopicPartitions(group)
    futures = admin.client.list_consumer_group_offsets([request], request_timeout=admin.timeout)
    answer = admin.wait(futures[group], f"fetch committed offsets of group '{group}'")
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions or () if tp.offset >= 0}


def groups_list(admin: Admin, args) -> int:
    groups = _list_groups(admin)
    lines = _table(["GROUP", "STATE"], [list(g) for g in groups]) if args.state else [g for g, _ in groups]
    return _emit(args, [{"group": g, "state": s} for g, s in groups], lines)


def _list_groups(admin: Admin) -> list[tuple[str, str]]:
    answer = admin.wait(admin.client.list_consumer_groups(request_timeout=admin.timeout), "list groups")
    if answer.errors:
        raise ToolError(f"list groups: {kafka_error_line(answer.errors[0].args[0])}")
    return sorted(((g.group_id, g.state.name) for g in answer.valid), key=lambda g: g[0])


def groups_describe(admin: Admin, args) -> int:
    if bool(args.group) == bool(args.all_groups):
        raise ToolError("describe: give --group G (repeatable) or --all-groups", usage=True)
    document, lines = [], []
    for group in args.group or [g for g, _ in _list_groups(admin)]:
        description = _describe_group(admin, group)
        committed = _committed(admin, group)
        owners = {}
        for m in description.members:
            for tp in (m.assignment.topic_partitions if m.assignment else ()):
                owners[(tp.topic, tp.partition)] = m
        partitions = sorted(set(committed) | set(owners))
        ends = admin.offsets(partitions, admin.ck.admin.OffsetSpec.latest())
        rows = []
        for key in partitions:
            offset, end, member = committed.get(key), ends.get(key), owners.get(key)
            rows.append({"group": group, "topic": key[0], "partition": key[1], "current_offset": offset,
                         "log_end_offset": end, "lag": None if offset is None or end is None else end - offset,
                         "consumer_id": member.member_id if member else None,
                         "host": member.host if member else None,
                         "client_id": member.client_id if member else None})
        document.append({"group": group, "state": description.state.name, "partitions": rows})
        if lines:
            lines.append("")
        if not description.members:
            lines.append(f"Consumer group '{group}' has no active members.")
        lines += _table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                         "HOST", "CLIENT-ID"], [list(r.values()) for r in rows])
    return _emit(args, document, lines)


def groups_delete(admin: Admin, args) -> int:
    futures = admin.client.delete_consumer_groups(list(args.group), request_timeout=admin.timeout)
    for group in args.group:
        admin.wait(futures[group], f"delete group '{group}'")
    return _emit(args, {"deleted": list(args.group)},
                 [f"Deletion of requested consumer groups ('{g}') was successful." for g in args.group])


def _reset_partitions(admin: Admin, args, committed) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    out = []
    for spec in args.topic:
        name, _, listed = spec.partition(":")
        meta = admin.topic(name)
        try:
            ids = sorted(meta.partitions) if not listed else [int(p) for p in listed.split(",")]
        except ValueError:
            raise ToolError(f"--topic {spec!r}: expected TOPIC or TOPIC:P,P...", usage=True) from None
        for p in ids:
            if p not in meta.partitions:
                raise ToolError(f"{name}-{p}: UNKNOWN_TOPIC_OR_PARTITION: the topic has no partition {p}")
        out += [(name, p) for p in ids]
    return out


def _timestamp_ms(text: str) -> int:
    """Kafka's --to-datetime: YYYY-MM-DDTHH:mm:SS[.sss][zone]; no zone is the local one, as Kafka."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss", usage=True) from None
    return int(moment.timestamp() * 1000)


def _targets(admin: Admin, args, partitions, committed) -> dict[tuple[str, int], int]:
    spec = admin.ck.admin.OffsetSpec
    earliest, latest = admin.offsets(partitions, spec.earliest()), admin.offsets(partitions, spec.latest())
    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_current:                     # without a committed offset: the log end, as Kafka
        return {k: committed.get(k, latest[k]) for k in partitions}
    if args.to_datetime is not None:
        found = admin.offsets(partitions, spec.for_timestamp(_timestamp_ms(args.to_datetime)))
        return {k: latest[k] if v < 0 else v for k, v in found.items()}    # none that late: the log end
    if args.shift_by is not None:
        wanted = {k: committed.get(k, latest[k]) + args.shift_by for k in partitions}
    else:
        wanted = {k: args.to_offset for k in partitions}
    # Out of range: the nearest end of the log, as kafka-consumer-groups.sh does.
    return {k: min(max(v, earliest[k]), latest[k]) for k, v in wanted.items()}


def groups_reset_offsets(admin: Admin, args) -> int:
    group = args.group[0]
    if len(args.group) != 1:
        raise ToolError("reset-offsets: give exactly one --group", usage=True)
    if not args.all_topics and not args.topic:
        raise ToolError("reset-offsets: give --topic TOPIC[:P,P...] or --all-topics", usage=True)
    description = admin.wait(admin.client.describe_consumer_groups([group], request_timeout=admin.timeout)[group],
                             f"describe group '{group}'")
    state = description.state
    if state not in (admin.ck.ConsumerGroupState.EMPTY, admin.ck.ConsumerGroupState.DEAD):
        raise ToolError(f"group '{group}': assignments can only be reset if the group is inactive, but the "
                        f"current state is {state.name} (stop its consumers first)")
    committed = _committed(admin, group) if state != admin.ck.ConsumerGroupState.DEAD else {}
    partitions = _reset_partitions(admin, args, committed)
    targets = _targets(admin, args, partitions, committed)
    if args.execute and targets:
        tps = [admin.ck.TopicPartition(t, p, o) for (t, p), o in sorted(targets.items())]
        request = admin.ck.ConsumerGroupTopicPartitions(group, tps)
        answer = admin.wait(admin.client.alter_consumer_group_offsets([request], request_timeout=admin.timeout)[group],
                            f"reset offsets of group '{group}'")
        for tp in answer.topic_partitions:
            if tp.error is not None:
                raise ToolError(f"{tp.topic}-{tp.partition}: {kafka_error_line(tp.error)}")
    rows = [{"group": group, "topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(targets.items())]
    lines = ([] if args.execute else ["(dry run: nothing changed; --execute to reset)"]) + _table(
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [list(r.values()) for r in rows])
    return _emit(args, {"group": group, "executed": bool(args.execute), "partitions": rows}, lines)


# ---- command line ---------------------------------------------------------------------------

TOPICS = {"list": topics_list, "describe": topics_describe, "create": topics_create, "delete": topics_delete,
          "alter-configs": topics_alter_configs, "alter": topics_alter}
GROUPS = {"list": groups_list, "describe": groups_describe, "delete": groups_delete,
          "reset-offsets": groups_reset_offsets}


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, 3600]")
    return value


def _connection(p) -> None:
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"a broker to start from (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--timeout", type=_seconds, default=10.0, metavar="SECONDS",
                   help="how long to wait for the cluster, and for each answer (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    _security(p)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _security(p) -> None:
    """The client's security settings (Kafka's --command-config properties, as flags)."""
    p.add_argument("--security-protocol", choices=SECURITY_PROTOCOLS, help="security.protocol (default PLAINTEXT)")
    p.add_argument("--sasl-mechanism", choices=SASL_MECHANISMS, help="sasl.mechanism (default PLAIN with a username)")
    p.add_argument("--sasl-username", metavar="USER", help="sasl.username")
    p.add_argument("--sasl-password", metavar="PASSWORD", help="sasl.password")


def security_conf(args) -> dict[str, str]:
    """librdkafka's settings for the security flags given (a SASL user implies SASL_PLAINTEXT)."""
    conf = {}
    user = getattr(args, "sasl_username", None)
    protocol = getattr(args, "security_protocol", None) or ("SASL_PLAINTEXT" if user else None)
    if protocol:
        conf["security.protocol"] = protocol
    if user is not None:
        conf.update({"sasl.mechanism": getattr(args, "sasl_mechanism", None) or "PLAIN", "sasl.username": user,
                     "sasl.password": getattr(args, "sasl_password", None) or ""})
    elif getattr(args, "sasl_mechanism", None):
        conf["sasl.mechanism"] = args.sasl_mechanism
    return conf


def action_parsers(sub, tool: str, text: str, actions) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """`tool`'s parser with one sub-parser per (name, help) in `actions`, each with the
    connection flags: (name, parser) for each, to add the action's own options to."""
    p = sub.add_parser(tool, help=text)
    parsers = p.add_subparsers(dest="action", required=True, parser_class=type(p))
    for name, help_text in actions:
        a = parsers.add_parser(name, help=help_text)
        _connection(a)
        yield name, a


def add_parsers(sub) -> None:
    for name, a in action_parsers(sub, "topics", "list, describe, create, delete topics and alter their configs "
                                  "(as kafka-topics.sh, on confluent-kafka)",
                                  (("list", "the topics' names"), ("describe", "partitions, leaders, replicas, ISR, configs"),
                                   ("create", "create a topic"), ("delete", "delete a topic"),
                                   ("alter-configs", "set (--config) or remove (--delete-config) topic configs"),
                                   ("alter", "more partitions (--partitions N), as kafka-topics.sh --alter"))):
        if name in ("list", "describe"):
            a.add_argument("--exclude-internal", action="store_true", help="leave out topics named __*")
        a.add_argument("--topic", required=name not in ("list", "describe"), help="the topic")
        if name == "alter":
            a.add_argument("--partitions", type=int, required=True, help="the new partition count (only grows)")
        if name == "create":
            a.add_argument("--partitions", type=int, help="partition count (default: the broker's num.partitions)")
            a.add_argument("--replication-factor", type=int, help="default: the broker's default.replication.factor")
            a.add_argument("--if-not-exists", action="store_true", help="no error when the topic exists")
        if name == "delete":
            a.add_argument("--if-exists", action="store_true", help="no error when the topic does not exist")
        if name in ("create", "alter-configs"):
            a.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
        if name == "alter-configs":
            a.add_argument("--delete-config", action="append", metavar="KEY", help="back to the default (repeatable)")

    for name, a in action_parsers(sub, "groups", "list, describe (offsets, log end, lag, members), delete consumer "
                                  "groups and reset their offsets (as kafka-consumer-groups.sh, on confluent-kafka)",
                                  (("list", "the groups' ids (--state: and states)"),
                                   ("describe", "per partition: committed offset, log end offset, lag, owning member"),
                                   ("delete", "delete groups with no members"),
                                   ("reset-offsets", "move an inactive group's committed offsets (dry run unless "
                                                     "--execute)"))):
        if name == "list":
            a.add_argument("--state", action="store_true", help="print each group's state too")
            continue
        a.add_argument("--group", action="append", required=name != "describe", help="a group id (repeatable)")
        if name == "describe":
            a.add_argument("--all-groups", action="store_true", help="every group the cluster has")
        if name == "reset-offsets":
            a.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                           help="a topic, or some of its partitions (repeatable)")
            a.add_argument("--all-topics", action="store_true", help="every partition the group has offsets for")
            to = a.add_mutually_exclusive_group(required=True)
            to.add_argument("--to-earliest", action="store_true", help="the log start offsets")
            to.add_argument("--to-latest", action="store_true", help="the log end offsets")
            to.add_argument("--to-current", action="store_true", help="the committed offsets (else the log end)")
            to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
            to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                            help="the first offset at or after this time")
            to.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (clamped)")
            run = a.add_mutually_exclusive_group()
            run.add_argument("--execute", action="store_true", help="commit the new offsets")
            run.add_argument("--dry-run", action="store_true", help="only print them (the default)")


def run_tool(action, args) -> int:
    """`action(Admin(args), args)`; a ToolError is one line on stderr, exit 1 (2 for usage)."""
    try:
        return action(Admin(args), args)
    except ToolError as exc:
        print(f"{'usage error' if exc.usage else 'error'}: {exc}", file=sys.stderr)
        return USAGE if exc.usage else PROBLEMS


def cmd_admin(args) -> int:
    """`topics ACTION` or `groups ACTION`: run it; one line on stderr and exit 1 on an error."""
    return run_tool((TOPICS if args.command == "topics" else GROUPS)[args.action], args)
