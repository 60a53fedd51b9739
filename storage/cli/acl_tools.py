"""`python -m storage acls list|create|delete`: Kafka's kafka-acls.sh for the common cases, on
confluent-kafka's AdminClient (CreateAcls, DescribeAcls, DeleteAcls), with its option names.

A binding is one principal (--allow-principal or --deny-principal, repeatable), host
(--allow-host / --deny-host, default `*`), operation (--operation, repeatable) and resource
(--topic, --group, --transactional-id, repeatable, or --cluster) with --resource-pattern-type
(create: literal or prefixed, default literal; list and delete also match and any; list's
default any).  create and delete make the cross product, as kafka-acls.sh does.  Errors as the
other admin tools: one line naming Kafka's error, exit 1; bad arguments exit 2."""
from __future__ import annotations

import itertools

from .admin_tools import ToolError, _emit, _table, action_parsers, run_tool

PATTERNS = ("literal", "prefixed", "match", "any")
OPERATIONS = ("all", "read", "write", "create", "delete", "alter", "describe", "cluster_action", "describe_configs",
              "alter_configs", "idempotent_write")


def _resources(args, ck, *, filtering: bool) -> list:
    """(ResourceType, name) of each resource the options name; none named: every one (list)."""
    rt = ck.admin.ResourceType
    out = [(rt.TOPIC, t) for t in args.topic or ()] + [(rt.GROUP, g) for g in args.group or ()]
    out += [(rt.TRANSACTIONAL_ID, i) for i in args.transactional_id or ()]
    if args.cluster:
        out.append((rt.BROKER, "kafka-cluster"))
    if not out:
        if not filtering:
            raise ToolError("name a resource: --topic, --group, --transactional-id or --cluster", usage=True)
        out.append((rt.ANY, None))
    return out


def _entries(args, ck, *, filtering: bool) -> list:
    """(principal, host, permission) of each entry the options name."""
    perm = ck.admin.AclPermissionType
    default = None if filtering else "*"      # a filter without a host matches every host
    out = [(p, args.allow_host or default, perm.ALLOW) for p in args.allow_principal or ()]
    out += [(p, args.deny_host or default, perm.DENY) for p in args.deny_principal or ()]
    if not out:
        if not filtering:
            raise ToolError("name a principal: --allow-principal or --deny-principal", usage=True)
        out.append((None, None, perm.ANY))
    return out


def _operations(args, ck, *, filtering: bool) -> list:
    op = ck.admin.AclOperation
    names = args.operation or ([] if filtering else ["all"])
    return [getattr(op, name.upper()) for name in names] or [op.ANY]


def _row(b) -> list:
    return [b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
            b.permission_type.name]


HEADER = ["RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]


def _document(bindings) -> list[dict]:
    return [dict(zip(("resource_type", "name", "pattern_type", "principal", "host", "operation", "permission"),
                     _row(b))) for b in bindings]


def _filters(admin, args, pattern: str):
    ck = admin.ck
    pt = getattr(ck.admin.ResourcePatternType, pattern.upper())
    return [ck.admin.AclBindingFilter(rt, name, pt, principal, host, op, perm)
            for (rt, name), (principal, host, perm), op in itertools.product(
                _resources(args, ck, filtering=True), _entries(args, ck, filtering=True),
                _operations(args, ck, filtering=True))]


def acls_list(admin, args) -> int:
    found = []
    for f in _filters(admin, args, args.resource_pattern_type or "any"):
        found += admin.wait(admin.client.describe_acls(f, request_timeout=admin.timeout), "describe acls")
    found = sorted(set(found), key=_row)
    return _emit(args, {"acls": _document(found)}, _table(HEADER, [_row(b) for b in found]) if found else [])


def acls_create(admin, args) -> int:
    ck = admin.ck
    pattern = args.resource_pattern_type or "literal"
    if pattern not in ("literal", "prefixed"):
        raise ToolError(f"--resource-pattern-type {pattern}: an ACL is literal or prefixed", usage=True)
    pt = getattr(ck.admin.ResourcePatternType, pattern.upper())
    bindings = [ck.admin.AclBinding(rt, name, pt, principal, host, op, perm)
                for (rt, name), (principal, host, perm), op in itertools.product(
                    _resources(args, ck, filtering=False), _entries(args, ck, filtering=False),
                    _operations(args, ck, filtering=False))]
    for binding, future in admin.client.create_acls(bindings, request_timeout=admin.timeout).items():
        admin.wait(future, f"create acl {' '.join(_row(binding))}")
    return _emit(args, {"created": _document(bindings)}, [f"created: {' '.join(_row(b))}" for b in bindings])


def acls_delete(admin, args) -> int:
    deleted = []
    filters = _filters(admin, args, args.resource_pattern_type or "literal")
    for _, future in admin.client.delete_acls(filters, request_timeout=admin.timeout).items():
        deleted += admin.wait(future, "delete acls")
    return _emit(args, {"deleted": _document(deleted)}, [f"deleted: {' '.join(_row(b))}" for b in deleted])


ACTIONS = {"list": acls_list, "create": acls_create, "delete": acls_delete}


def add_parser(sub) -> None:
    for _name, a in action_parsers(sub, "acls", "list, create, delete ACLs (as kafka-acls.sh, on confluent-kafka)",
                                   (("list", "the ACLs the options match (all of them by default)"),
                                    ("create", "the ACLs of every principal x operation x resource named"),
                                    ("delete", "the ACLs the options match"))):
        a.add_argument("--topic", action="append", help="a topic (repeatable)")
        a.add_argument("--group", action="append", help="a consumer group (repeatable)")
        a.add_argument("--transactional-id", action="append", help="a transactional id (repeatable)")
        a.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
        a.add_argument("--resource-pattern-type", choices=PATTERNS,
                       help="literal or prefixed names (list, delete: also match, any)")
        a.add_argument("--allow-principal", action="append", metavar="User:NAME", help="allowed (repeatable)")
        a.add_argument("--deny-principal", action="append", metavar="User:NAME", help="denied (repeatable)")
        a.add_argument("--allow-host", help="the allowed principals' host (create's default *)")
        a.add_argument("--deny-host", help="the denied principals' host (create's default *)")
        a.add_argument("--operation", action="append", choices=OPERATIONS, type=str.lower,
                       help="an operation (repeatable; create's default all)")


def cmd_acls(args) -> int:
    return run_tool(ACTIONS[args.action], args)
