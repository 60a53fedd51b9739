"""ACLs as Kafka's StandardAuthorizer keeps and applies them: the bindings, the filters that
describe and delete them, and the decision for one action of one session.

A binding (`Acl`) names a resource pattern -- a resource type, a name (`*` is every name) and a
pattern type, LITERAL (that name) or PREFIXED (every name that starts with it) -- and an entry:
a principal (`User:NAME`, `User:*` for everyone), a host (`*` for any), an operation and a
permission, ALLOW or DENY.  The decision (StandardAuthorizerData.authorize / findResult):

  - the broker's own session (session.BROKER) and the super users (`super.users`) may do anything;
  - among the bindings whose pattern covers the resource and whose principal and host match the
    session, a DENY for the operation (or ALL) refuses, whatever else allows;
  - else an ALLOW for the operation, or ALL, or one that implies it, allows: READ, WRITE,
    DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS (ALLOW only: a
    DENY of READ does not deny DESCRIBE);
  - else, when no binding at all covers the resource (for any principal), the answer is
    `allow.everyone.if.no.acl.found` (false by default); otherwise refused.

The enum values are Kafka's wire codes (ResourceType, PatternType, AclOperation,
AclPermissionType); an authorized-operations field is the bit set of AclOperation codes.
Pure: no I/O, no broker; the broker rebuilds its Authorizer from the replayed ACL records.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"      # the one name of the CLUSTER resource
DECISIONS_CACHED = 10_000            # Authorizer's decision cache holds at most this many


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


O = Operation
IMPLIES_DESCRIBE = frozenset({O.DESCRIBE, O.READ, O.WRITE, O.DELETE, O.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS})
# The operations an authorized-operations field reports per resource type (Kafka's
# AclEntry.supportedOperations).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (O.READ, O.WRITE, O.CREATE, O.DESCRIBE, O.DELETE, O.ALTER, O.DESCRIBE_CONFIGS,
                         O.ALTER_CONFIGS),
    ResourceType.GROUP: (O.READ, O.DESCRIBE, O.DELETE, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (O.CREATE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS, O.IDEMPOTENT_WRITE,
                           O.ALTER, O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (O.DESCRIBE, O.WRITE),
}


@dataclass(frozen=True, order=True)
class Acl:
    """One binding (Kafka's AclBinding / StandardAcl); the fields are the wire codes."""
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def covers(self, name: str) -> bool:
        """Whether this binding's pattern covers the resource `name` (a LITERAL name or `*`;
        a PREFIXED one)."""
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name == name or self.resource_name == WILDCARD

    def result(self, principals: tuple[str, str], host: str, operation: int) -> bool | None:
        """StandardAuthorizerData.findResult: True (allowed), False (denied), None (no say)."""
        if self.principal not in principals or (self.host != WILDCARD and self.host != host):
            return None
        if self.operation != O.ALL:
            if self.permission == Permission.ALLOW:
                if operation == O.DESCRIBE:
                    if self.operation not in IMPLIES_DESCRIBE:
                        return None
                elif operation == O.DESCRIBE_CONFIGS:
                    if self.operation not in IMPLIES_DESCRIBE_CONFIGS:
                        return None
                elif operation != self.operation:
                    return None
            elif operation != self.operation:
                return None
        return self.permission == Permission.ALLOW


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter (Kafka's AclBindingFilter): ANY, MATCH and null name,
    principal and host match more than one binding."""
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def problem(self) -> str | None:
        """AclControlManager.validateFilter: an unknown part is INVALID_REQUEST."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.operation == O.UNKNOWN or self.permission == Permission.UNKNOWN:
            return "Unknown entryFilter."
        if self.resource_type not in set(ResourceType) or self.pattern_type not in set(PatternType) \
                or self.operation not in set(Operation) or self.permission not in set(Permission):
            return "Unknown patternFilter." if self.pattern_type not in set(PatternType) \
                or self.resource_type not in set(ResourceType) else "Unknown entryFilter."
        return None

    def matches(self, acl: Acl) -> bool:
        """ResourcePatternFilter.matches and AccessControlEntryFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        if self.resource_name is not None:
            if pt == PatternType.MATCH:
                if acl.pattern_type == PatternType.PREFIXED:
                    if not self.resource_name.startswith(acl.resource_name):
                        return False
                elif acl.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif self.resource_name != acl.resource_name:
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != O.ANY and self.operation != acl.operation:
            return False
        return self.permission == Permission.ANY or self.permission == acl.permission


def new_acl_problem(acl: Acl) -> str | None:
    """Why a binding may not be created (INVALID_REQUEST), or None: AclControlManager.validateNewAcl
    and the broker's checks before it (AclApis.handleCreateAcls), and a principal of the form
    TYPE:NAME (SecurityUtils.parseKafkaPrincipal)."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or acl.resource_type not in set(ResourceType):
        return f"Invalid resourceType {_name(ResourceType, acl.resource_type)}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {_name(PatternType, acl.pattern_type)}"
    if acl.operation in (O.UNKNOWN, O.ANY) or acl.operation not in set(Operation):
        return f"Invalid operation {_name(Operation, acl.operation)}"
    if acl.permission not in (Permission.DENY, Permission.ALLOW):
        return f"Invalid permissionType {_name(Permission, acl.permission)}"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    kind, _, name = acl.principal.partition(":")
    if not kind or not name:
        return f"Could not parse principal from `{acl.principal}` (no colon is found separating the " \
               "principal type from the principal name)"
    return None


def _name(enum_type, value: int) -> str:
    try:
        return enum_type(value).name
    except ValueError:
        return str(value)


def parse_super_users(value: str | None) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (`User:a;User:b`)."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class Authorizer:
    """The bindings in force (id -> Acl, as the metadata records carry them) and the decision.
    `super_users` and `allow_if_no_acl` are `super.users` and `allow.everyone.if.no.acl.found`."""

    def __init__(self, super_users=(), *, allow_if_no_acl: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.acls: dict[bytes, Acl] = {}
        self._literal: dict[tuple[int, str], list[Acl]] = {}     # (resource type, name or *) -> bindings
        self._prefixed: dict[tuple[int, str], list[Acl]] = {}    # (resource type, prefix) -> PREFIXED ones
        self._prefix_lengths: dict[int, list[int]] = {}          # resource type -> the prefixes' lengths
        # Decisions made since the last load: (principal, host, operation, type, name) -> allowed.
        # A client asks the same question on every request (a producer's topic), so the hot path
        # is one dict lookup; emptied by every change of the ACLs, and when it fills.
        self._decided: dict[tuple, bool] = {}

    def load(self, acls: dict[bytes, Acl]) -> None:
        """Replace every binding (the broker's replayed image)."""
        self.acls = dict(acls)
        self._literal, self._prefixed, lengths = {}, {}, {}
        for acl in self.acls.values():
            key = (acl.resource_type, acl.resource_name)
            if acl.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
            else:
                self._literal.setdefault(key, []).append(acl)
        self._prefix_lengths = {t: sorted(n) for t, n in lengths.items()}
        self._decided = {}

    def describe(self, f: AclFilter) -> list[Acl]:
        """The bindings `f` matches, in a stable order."""
        return sorted({acl for acl in self.acls.values() if f.matches(acl)})

    def _covering(self, resource_type: int, name: str):
        yield from self._literal.get((resource_type, name), ())
        if name != WILDCARD:
            yield from self._literal.get((resource_type, WILDCARD), ())
        for length in self._prefix_lengths.get(resource_type, ()):      # one lookup per prefix length held
            if length > len(name):
                break
            yield from self._prefixed.get((resource_type, name[:length]), ())

    def authorize(self, s, operation: int, resource_type: int, name: str) -> bool:
        """Whether session `s` (session.Session) may do `operation` on the resource."""
        if s.internal or s.principal in self.super_users:
            return True
        key = (s.principal, s.client_host, operation, resource_type, name)
        decided = self._decided.get(key)
        if decided is None:
            if len(self._decided) >= DECISIONS_CACHED:
                self._decided.clear()
            decided = self._decided[key] = self._decide(s, operation, resource_type, name)
        return decided

    def _decide(self, s, operation: int, resource_type: int, name: str) -> bool:
        principals = (s.principal, WILDCARD_PRINCIPAL)
        found, allowed = False, False
        for acl in self._covering(resource_type, name):
            found = True
            result = acl.result(principals, s.client_host, operation)
            if result is False:
                return False
            allowed = allowed or bool(result)
        return allowed or (not found and self.allow_if_no_acl)

    def authorize_any(self, s, operation: int, resource_type: int) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: whether some resource of the type allows
        `operation` to `s` -- an ALLOW binding (the operation or ALL) for the session whose
        pattern no DENY of the same covers: a DENY of `*`, of the same literal name, or a
        PREFIXED DENY whose prefix starts it."""
        if s.internal or s.principal in self.super_users:
            return True
        principals = (s.principal, WILDCARD_PRINCIPAL)

        def applies(acl: Acl, permission: int) -> bool:
            return (acl.resource_type == resource_type and acl.permission == permission
                    and acl.principal in principals and acl.host in (WILDCARD, s.client_host)
                    and acl.operation in (operation, O.ALL))

        denies = [a for a in self.acls.values() if applies(a, Permission.DENY)]
        if any(d.pattern_type == PatternType.LITERAL and d.resource_name == WILDCARD for d in denies):
            return False
        for allow in self.acls.values():
            if not applies(allow, Permission.ALLOW):
                continue
            denied = any((d.pattern_type == PatternType.PREFIXED and allow.resource_name.startswith(d.resource_name))
                         or (d.pattern_type == allow.pattern_type == PatternType.LITERAL
                             and d.resource_name == allow.resource_name) for d in denies)
            if not denied:
                return True
        # As Kafka's default authorizeByResourceType ends: a resource no binding names literally
        # (super users, `*` and empty-prefix bindings, allow.everyone.if.no.acl.found decide).
        return self.authorize(s, operation, resource_type, "hardcode")

    def authorized_operations(self, s, resource_type: int, name: str) -> int:
        """An authorized-operations bit field: bit N set when operation N is allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(s, op, resource_type, name):
                bits |= 1 << op
        return bits
