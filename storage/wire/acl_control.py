"""The ACLs at the controller (Kafka's AclControlManager): every binding with its id, kept in the
controller's store (the `acls` document) and published to the brokers as
AccessControlEntryRecord / RemoveAccessControlEntryRecord (metadata.records_for), so a restart
and every broker see them.  Both controllers hold one: the embedded node's LocalController and
the controller process (controller_server), which serves CreateAcls and DeleteAcls forwarded by
its brokers.

Also the translation between the ACL APIs' requests and answers (CreateAcls, DescribeAcls,
DeleteAcls v1-3) and `authorizer.Acl` / `AclFilter`, shared by the broker and the controller.
"""
from __future__ import annotations

import uuid

from ..core import errors
from ..core.errors import Errors
from . import authz
from .authorizer import Acl, AclFilter, Operation, ResourceType, new_acl_problem

DOCUMENT = "acls"
MAX_RECORDS_PER_USER_OP = 10_000     # Kafka's QuorumController.MAX_RECORDS_PER_USER_OP


class AclControl:
    """The controller's ACLs (`acls`: id -> Acl) over `controller`'s store."""

    def __init__(self, controller):
        self.controller = controller
        doc = controller.store.get_document(DOCUMENT) if controller.store is not None else None
        self.acls: dict[bytes, Acl] = {bytes.fromhex(i): Acl(*fields) for i, fields in (doc or {}).items()}

    def _commit(self, before: dict[bytes, Acl]) -> None:
        """The bindings into the store; on a failed commit memory goes back to `before` and
        the failure state's error goes on (nothing is published)."""
        try:
            self.controller.put_document(DOCUMENT, {i.hex(): list(_fields(a)) for i, a in self.acls.items()})
        except errors.StorageError:
            self.acls = before
            raise

    def create(self, acls: list[Acl]) -> list[tuple[int, str | None]]:
        """AclControlManager.createAcls: each binding validated; a new one gets an id, one held
        already succeeds again without a second copy."""
        before, results = dict(self.acls), []
        held = set(self.acls.values())
        for acl in acls:
            problem = new_acl_problem(acl)
            if problem:
                results.append((Errors.INVALID_REQUEST, problem))
                continue
            if acl not in held:
                held.add(acl)
                self.acls[uuid.uuid4().bytes] = acl
            results.append((Errors.NONE, None))
        if self.acls != before:
            self._commit(before)
        return results

    def delete(self, filters: list[AclFilter]) -> list[tuple[int, str | None, list[Acl]]]:
        """AclControlManager.deleteAcls: per filter, the bindings it matched (and removed); an
        unknown filter is INVALID_REQUEST; a binding two filters match is removed once."""
        before, results = dict(self.acls), []
        for f in filters:
            problem = f.problem()
            if problem:
                results.append((Errors.INVALID_REQUEST, problem, []))
                continue
            matched = [i for i, acl in before.items() if f.matches(acl)]
            if len(matched) > MAX_RECORDS_PER_USER_OP:
                results.append((Errors.INVALID_REQUEST, f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls "
                                                        "in a single delete operation.", []))
                continue
            for i in matched:
                self.acls.pop(i, None)
            results.append((Errors.NONE, None, sorted(before[i] for i in matched)))
        if self.acls != before:
            self._commit(before)
        return results


def _fields(acl: Acl) -> tuple:
    return (acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host, acl.operation,
            acl.permission)


# ---- the ACL APIs' requests and answers ----
def creations(request) -> list[Acl]:
    """CreateAcls' creations (v0 has no pattern type: LITERAL)."""
    return [Acl(int(c.resource_type), c.resource_name, int(getattr(c, "resource_pattern_type", 3)), c.principal,
                c.host, int(c.operation), int(c.permission_type)) for c in request.creations]


def filter_of(f) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter (v0 has no pattern type: LITERAL)."""
    return AclFilter(int(f.resource_type_filter), f.resource_name_filter, int(getattr(f, "pattern_type_filter", 3)),
                     f.principal_filter, f.host_filter, int(f.operation), int(f.permission_type))


def create_body(results: list[tuple[int, str | None]]) -> dict:
    return {"throttle_time": 0, "results": [{"error_code": c, "error_message": m} for c, m in results]}


def delete_body(results: list[tuple[int, str | None, list[Acl]]]) -> dict:
    return {"throttle_time": 0, "filter_results": [
        {"error_code": c, "error_message": m, "matching_acls": [
            {"error_code": Errors.NONE, "error_message": None, "resource_type": a.resource_type,
             "resource_name": a.resource_name, "pattern_type": a.pattern_type, "principal": a.principal,
             "host": a.host, "operation": a.operation, "permission_type": a.permission} for a in acls]}
        for c, m, acls in results]}


def deleted_of(answer) -> list[tuple[int, str | None, list[Acl]]]:
    """A DeleteAcls answer (the controller's, to a broker) as delete() returns it."""
    return [(int(r.error_code), r.error_message,
             [Acl(int(a.resource_type), a.resource_name, int(a.pattern_type), a.principal, a.host, int(a.operation),
                  int(a.permission_type)) for a in r.matching_acls]) for r in answer.filter_results]


def describe_body(code: int, message: str | None, acls: list[Acl]) -> dict:
    """DescribeAcls: the bindings grouped by resource pattern."""
    resources: dict[tuple, list] = {}
    for a in acls:
        resources.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
            {"principal": a.principal, "host": a.host, "operation": a.operation, "permission_type": a.permission})
    return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": [
        {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": entries}
        for (t, n, p), entries in resources.items()]}


class AclApis:
    """DescribeAcls, CreateAcls and DeleteAcls at a broker (AclApis.scala): SECURITY_DISABLED
    with ACLs off; DESCRIBE (to describe) or ALTER (to create and delete) on the cluster; the
    changes go through the controller (MetadataSource.create_acls / delete_acls), the
    descriptions come from this broker's replayed ACLs."""

    def __init__(self, node):
        self.node = node

    def _refusal(self, operation: int) -> tuple[int, str | None] | None:
        if self.node.authorizer is None:
            return Errors.SECURITY_DISABLED, "No Authorizer is configured."
        if not authz.allowed(self.node, operation, ResourceType.CLUSTER):
            return Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        return None

    async def describe_acls(self, header, request) -> dict:
        refusal = self._refusal(Operation.DESCRIBE)
        if refusal:
            return describe_body(*refusal, [])
        f = filter_of(request)
        problem = f.problem()
        if problem:
            return describe_body(Errors.INVALID_REQUEST, problem, [])
        return describe_body(Errors.NONE, None, self.node.authorizer.describe(f))

    async def create_acls(self, header, request) -> dict:
        refusal = self._refusal(Operation.ALTER)
        if refusal:
            return create_body([refusal] * len(request.creations))
        return create_body(await self.node.create_acls(creations(request)))

    async def delete_acls(self, header, request) -> dict:
        refusal = self._refusal(Operation.ALTER)
        if refusal:
            return delete_body([(*refusal, [])] * len(request.filters))
        return delete_body(await self.node.delete_acls([filter_of(f) for f in request.filters]))
