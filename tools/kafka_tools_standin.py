"""Stand-ins for Kafka's `kafka-topics.sh` and `kafka-acls.sh`, for librdkafka's suite
(tools/rdkafka_suite.py puts them in the stand-in KAFKA_PATH's bin/): its tests call them with
system() (test_kafka_topics, test_kafka_cmd) to create, grow and delete topics and to add ACLs.
Kafka's own TopicCommand and AclCommand do what they are asked through the Admin API; so do
these, with confluent-kafka's AdminClient, for the options the suite passes:

  kafka-topics.sh --bootstrap-server HOSTS --create --topic T [--partitions N]
                  [--replication-factor R] [--config K=V ...]
  kafka-topics.sh --bootstrap-server HOSTS --alter --topic T --partitions N
  kafka-topics.sh --bootstrap-server HOSTS --delete --topic T
  kafka-acls.sh --bootstrap-server HOSTS (--add | --remove)
                [--allow-principal P ...] [--deny-principal P ...] [--allow-host H ...] [--deny-host H ...]
                [--operation OP ...] (--topic T | --group G | --transactional-id I | --cluster ...)
                [--resource-pattern-type literal|prefixed]

Exit status 0 when the broker accepted the request, 1 (with the error on stderr) otherwise, as
Kafka's scripts; an option outside these is refused (exit 2), never ignored.

Run as:  python tools/kafka_tools_standin.py topics|acls ARGS...
"""
from __future__ import annotations

import argparse
import sys

TIMEOUT_S = 30


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def _wait(futures: dict) -> int:
    """0 when every request succeeded, else 1 with each error printed."""
    failed = 0
    for name, future in futures.items():
        try:
            future.result(TIMEOUT_S)
        except Exception as exc:        # KafkaException and timeouts alike: the script's failure
            print(f"Error while executing on {name}: {exc}", file=sys.stderr)
            failed = 1
    return failed


def topics(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="kafka-topics.sh")
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    for name in ("--create", "--alter", "--delete"):
        action.add_argument(name, action="store_true")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int)
    p.add_argument("--replication-factor", type=int)
    p.add_argument("--config", action="append", default=[], help="K=V, repeated")
    args = p.parse_args(argv)
    from confluent_kafka.admin import NewPartitions, NewTopic
    admin = _admin(args.bootstrap_server)
    if args.create:
        configs = {}
        for item in args.config:
            key, sep, value = item.partition("=")
            if not sep:
                p.error(f"--config {item!r}: expected KEY=VALUE")
            configs[key] = value
        new = NewTopic(args.topic, num_partitions=args.partitions or -1,
                       replication_factor=args.replication_factor or -1, config=configs)
        return _wait(admin.create_topics([new], request_timeout=TIMEOUT_S))
    if args.alter:
        if args.partitions is None or args.config:
            p.error("--alter: only --partitions is served")
        return _wait(admin.create_partitions([NewPartitions(args.topic, args.partitions)],
                                             request_timeout=TIMEOUT_S))
    return _wait(admin.delete_topics([args.topic], request_timeout=TIMEOUT_S))


def _acl_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kafka-acls.sh")
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    for name in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host", "--operation"):
        p.add_argument(name, action="append", default=[])
    resource = p.add_mutually_exclusive_group(required=True)
    resource.add_argument("--topic")
    resource.add_argument("--group")
    resource.add_argument("--transactional-id")
    resource.add_argument("--cluster", action="store_true")
    p.add_argument("--resource-pattern-type", default="literal", choices=("literal", "prefixed"))
    p.add_argument("--force", action="store_true", help="(no prompt is asked anyway)")
    return p


def acls(argv: list[str]) -> int:
    p = _acl_parser()
    args = p.parse_args(argv)
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    if args.topic is not None:
        kind, name = ResourceType.TOPIC, args.topic
    elif args.group is not None:
        kind, name = ResourceType.GROUP, args.group
    elif args.transactional_id is not None:
        kind, name = ResourceType.TRANSACTIONAL_ID, args.transactional_id
    else:
        kind, name = ResourceType.BROKER, "kafka-cluster"
    pattern = ResourcePatternType[args.resource_pattern_type.upper()]
    operations = []
    for op in args.operation or ["All"]:
        # Kafka's names (Read, Write, DescribeConfigs, IdempotentWrite, All, ...) to the enum's
        words = "".join("_" + c if c.isupper() and i else c for i, c in enumerate(op)).upper()
        try:
            operations.append(AclOperation[words])
        except KeyError:
            p.error(f"--operation {op!r}: not an ACL operation")
    entries = [(principal, host, AclPermissionType.ALLOW)
               for principal in args.allow_principal for host in args.allow_host or ["*"]]
    entries += [(principal, host, AclPermissionType.DENY)
                for principal in args.deny_principal for host in args.deny_host or ["*"]]
    if not entries:
        p.error("no --allow-principal or --deny-principal")
    admin = _admin(args.bootstrap_server)
    if args.add:
        bindings = [AclBinding(kind, name, pattern, principal, host, op, permission)
                    for principal, host, permission in entries for op in operations]
        return _wait(admin.create_acls(bindings, request_timeout=TIMEOUT_S))
    filters = [AclBindingFilter(kind, name, pattern, principal, host, op, permission)
               for principal, host, permission in entries for op in operations]
    return _wait(admin.delete_acls(filters, request_timeout=TIMEOUT_S))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("topics", "acls"):
        print("usage: kafka_tools_standin.py topics|acls ARGS...", file=sys.stderr)
        return 2
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        print(f"{argv[0]}: needs confluent-kafka (pip install -e '.[tools]')", file=sys.stderr)
        return 1
    return (topics if argv[0] == "topics" else acls)(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
