"""The authorizer alone (storage/wire/authorizer.py): Kafka's StandardAuthorizerTest and
AclControlManagerTest cases in our words, each citing the test it ports."""
from __future__ import annotations

import pytest

from storage.wire import session
from storage.wire.authorizer import (
    DECISIONS_CACHED,
    Acl,
    AclFilter,
    Authorizer,
    Permission,
    new_acl_problem,
    parse_super_users,
)
from storage.wire.authorizer import Operation as O
from storage.wire.authorizer import PatternType as P
from storage.wire.authorizer import ResourceType as R

ALLOW, DENY = Permission.ALLOW, Permission.DENY


def who(name: str, host: str = "127.0.0.1") -> session.Session:
    return session.Session(principal=f"User:{name}", client_host=host)


def foo_acl(op, permission) -> Acl:
    """StandardAuthorizerTest.newFooAcl: topics prefixed foo_ for User:bob."""
    return Acl(R.TOPIC, "foo_", P.PREFIXED, "User:bob", "*", op, permission)


def bar_acl(op, permission) -> Acl:
    """StandardAuthorizerTest.newBarAcl: group bar, literal, for everyone."""
    return Acl(R.GROUP, "bar", P.LITERAL, "User:*", "*", op, permission)


def authorizer_with(*acls: Acl, **options) -> Authorizer:
    a = Authorizer(**options)
    a.load({i.to_bytes(16, "big"): acl for i, acl in enumerate(acls)})
    return a


def test_super_users_are_parsed_and_allowed_everything():
    # StandardAuthorizerTest.testGetConfiguredSuperUsers
    supers = parse_super_users("User:alice; User:chris;")
    assert supers == {"User:alice", "User:chris"}
    a = authorizer_with(Acl(R.TOPIC, "*", P.LITERAL, "User:*", "*", O.ALL, DENY), super_users=supers)
    assert a.authorize(who("alice"), O.WRITE, R.TOPIC, "t")
    assert not a.authorize(who("bob"), O.WRITE, R.TOPIC, "t")
    assert a.authorize(session.BROKER, O.CLUSTER_ACTION, R.CLUSTER, "kafka-cluster")    # the broker itself


@pytest.mark.parametrize("allow_if_no_acl", [True, False])
def test_allow_everyone_if_no_acl_found(allow_if_no_acl):
    # StandardAuthorizerTest.testAllowEveryoneIfNoAclFoundConfigEnabled / ...Disabled: an ACL on
    # topic1 for Alice refuses Bob there; topic2 has no ACL, so the setting decides.
    a = authorizer_with(Acl(R.TOPIC, "topic1", P.LITERAL, "User:Alice", "*", O.READ, ALLOW),
                        super_users={"User:alice", "User:chris"}, allow_if_no_acl=allow_if_no_acl)
    assert not a.authorize(who("Bob"), O.READ, R.TOPIC, "topic1")
    assert a.authorize(who("Bob"), O.READ, R.TOPIC, "topic2") is allow_if_no_acl


def test_find_result_implication():
    # StandardAuthorizerTest.testFindResultImplication
    bob = ("User:bob", "User:*")
    for op in (O.DESCRIBE, O.READ, O.WRITE, O.DELETE, O.ALTER):
        assert foo_acl(op, ALLOW).result(bob, "h", O.DESCRIBE) is True
    assert foo_acl(O.CREATE, ALLOW).result(bob, "h", O.DESCRIBE) is None
    for op in (O.READ, O.WRITE, O.DELETE, O.ALTER):         # a DENY implies nothing
        assert foo_acl(op, DENY).result(bob, "h", O.DESCRIBE) is None
    assert foo_acl(O.DESCRIBE, DENY).result(bob, "h", O.DESCRIBE) is False
    for op in (O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS):
        assert foo_acl(op, ALLOW).result(bob, "h", O.DESCRIBE_CONFIGS) is True
    assert foo_acl(O.ALTER_CONFIGS, DENY).result(bob, "h", O.DESCRIBE_CONFIGS) is None
    assert foo_acl(O.ALTER_CONFIGS, DENY).result(bob, "h", O.ALTER_CONFIGS) is False


def test_find_result_principal_matching():
    # StandardAuthorizerTest.testFindResultPrincipalMatching
    assert foo_acl(O.READ, ALLOW).result(("User:bob", "User:*"), "h", O.READ) is True
    assert foo_acl(O.READ, ALLOW).result(("User:alice", "User:*"), "h", O.READ) is None
    assert bar_acl(O.READ, DENY).result(("User:alice", "User:*"), "h", O.READ) is False


def test_list_acls():
    # StandardAuthorizerTest.testListAcls
    foo = [foo_acl(O.READ, ALLOW), foo_acl(O.WRITE, ALLOW)]
    bar = [bar_acl(O.DESCRIBE_CONFIGS, DENY), bar_acl(O.ALTER_CONFIGS, DENY)]
    a = authorizer_with(*foo, *bar)
    anything = AclFilter(R.ANY, None, P.ANY, None, None, O.ANY, Permission.ANY)
    assert set(a.describe(anything)) == set(foo + bar)
    a.load({k: v for k, v in a.acls.items() if v != foo[1]})
    assert set(a.describe(anything)) == {foo[0], *bar}
    assert a.describe(AclFilter(R.TOPIC, None, P.ANY, None, None, O.ANY, Permission.ANY)) == [foo[0]]


def test_simple_authorizations():
    # StandardAuthorizerTest.testSimpleAuthorizations
    a = authorizer_with(foo_acl(O.READ, ALLOW), foo_acl(O.WRITE, ALLOW), bar_acl(O.DESCRIBE_CONFIGS, ALLOW),
                        bar_acl(O.ALTER_CONFIGS, ALLOW))
    assert a.authorize(who("bob"), O.READ, R.TOPIC, "foo_")
    assert a.authorize(who("fred"), O.ALTER_CONFIGS, R.GROUP, "bar")


def test_deny_precedence_with_operation_all():
    # StandardAuthorizerTest.testDenyPrecedenceWithOperationAll
    a = authorizer_with(Acl(R.TOPIC, "foo", P.LITERAL, "User:alice", "*", O.ALL, DENY),
                        Acl(R.TOPIC, "foo", P.PREFIXED, "User:alice", "*", O.READ, ALLOW),
                        Acl(R.TOPIC, "foo", P.LITERAL, "User:*", "*", O.ALL, DENY),
                        Acl(R.TOPIC, "foo", P.PREFIXED, "User:*", "*", O.DESCRIBE, ALLOW))
    alice = [a.authorize(who("alice"), op, R.TOPIC, n) for op, n in
             ((O.WRITE, "foo"), (O.READ, "foo"), (O.DESCRIBE, "foo"), (O.READ, "foobar"))]
    assert alice == [False, False, False, True]
    bob = [a.authorize(who("bob"), op, R.TOPIC, n) for op, n in
           ((O.DESCRIBE, "foo"), (O.READ, "foo"), (O.WRITE, "foo"), (O.DESCRIBE, "foobaz"), (O.READ, "foobaz"))]
    assert bob == [False, False, False, True, False]


def test_topic_acl_with_operation_all():
    # StandardAuthorizerTest.testTopicAclWithOperationAll
    a = authorizer_with(Acl(R.TOPIC, "foo", P.LITERAL, "User:*", "*", O.ALL, ALLOW),
                        Acl(R.TOPIC, "bar", P.PREFIXED, "User:alice", "*", O.ALL, ALLOW),
                        Acl(R.TOPIC, "baz", P.LITERAL, "User:bob", "*", O.ALL, ALLOW))

    def asks(name, *actions):
        return [a.authorize(who(name), op, R.TOPIC, n) for op, n in actions]
    assert asks("alice", (O.WRITE, "foo"), (O.DESCRIBE_CONFIGS, "bar"), (O.DESCRIBE, "baz")) == [True, True, False]
    assert asks("bob", (O.WRITE, "foo"), (O.READ, "bar"), (O.DESCRIBE, "baz")) == [True, False, True]
    assert asks("malory", (O.DESCRIBE, "foo"), (O.WRITE, "bar"), (O.READ, "baz")) == [True, False, False]


def test_host_address_acl():
    # StandardAuthorizerTest.testHostAddressAclValidation: an ACL for one host applies there only
    a = authorizer_with(Acl(R.TOPIC, "t", P.LITERAL, "User:*", "10.0.0.1", O.READ, ALLOW),
                        Acl(R.TOPIC, "t", P.LITERAL, "User:*", "10.0.0.2", O.READ, DENY))
    assert a.authorize(who("x", "10.0.0.1"), O.READ, R.TOPIC, "t")
    assert not a.authorize(who("x", "10.0.0.2"), O.READ, R.TOPIC, "t")
    assert not a.authorize(who("x", "10.0.0.3"), O.READ, R.TOPIC, "t")


def test_prefix_acls():
    # StandardAuthorizerTest.testPrefixAcls
    a = authorizer_with(Acl(R.TOPIC, "fooa", P.PREFIXED, "User:alice", "*", O.ALL, ALLOW),
                        Acl(R.TOPIC, "foobar", P.LITERAL, "User:bob", "*", O.ALL, ALLOW),
                        Acl(R.TOPIC, "f", P.PREFIXED, "User:bob", "*", O.ALL, ALLOW))
    assert [a.authorize(who("bob"), op, R.TOPIC, n) for op, n in
            ((O.WRITE, "foobarr"), (O.READ, "goobar"), (O.READ, "fooa"))] == [True, False, True]
    assert [a.authorize(who("alice"), op, R.TOPIC, n) for op, n in
            ((O.DESCRIBE, "fooa"), (O.WRITE, "bar"), (O.READ, "baz"))] == [True, False, False]


def test_authorization_with_many_acls():
    # StandardAuthorizerTest.testAuthorizationWithManyAcls (shortened): many prefixes, the right one found
    acls = [Acl(R.TOPIC, f"t{i:04d}", P.PREFIXED, "User:u", "*", O.READ, ALLOW) for i in range(500)]
    a = authorizer_with(*acls)
    assert a.authorize(who("u"), O.READ, R.TOPIC, "t0420-x")
    assert not a.authorize(who("u"), O.READ, R.TOPIC, "t9999")


def test_authorize_by_resource_type():
    # Kafka's AuthorizerTest.testAuthorizeByResourceTypeDenyTakesPrecedence and friends, shortened
    a = authorizer_with(Acl(R.TOPIC, "a", P.LITERAL, "User:u", "*", O.WRITE, ALLOW))
    assert a.authorize_any(who("u"), O.WRITE, R.TOPIC)
    assert not a.authorize_any(who("v"), O.WRITE, R.TOPIC)
    a = authorizer_with(Acl(R.TOPIC, "a", P.LITERAL, "User:u", "*", O.WRITE, ALLOW),
                        Acl(R.TOPIC, "a", P.PREFIXED, "User:u", "*", O.WRITE, DENY))
    assert not a.authorize_any(who("u"), O.WRITE, R.TOPIC)
    a = authorizer_with(Acl(R.TOPIC, "a", P.PREFIXED, "User:u", "*", O.WRITE, ALLOW),
                        Acl(R.TOPIC, "*", P.LITERAL, "User:*", "*", O.WRITE, DENY))
    assert not a.authorize_any(who("u"), O.WRITE, R.TOPIC)


def test_authorized_operations_bits():
    a = authorizer_with(Acl(R.GROUP, "g", P.LITERAL, "User:u", "*", O.READ, ALLOW))
    assert a.authorized_operations(who("u"), R.GROUP, "g") == (1 << O.READ) | (1 << O.DESCRIBE)
    assert a.authorized_operations(who("v"), R.GROUP, "g") == 0


def test_validate_new_acl():
    # AclControlManagerTest.testValidateNewAcl
    ok = Acl(R.TOPIC, "t", P.LITERAL, "User:u", "*", O.READ, ALLOW)
    assert new_acl_problem(ok) is None
    assert new_acl_problem(Acl(R.CLUSTER, "kafka-cluster", P.LITERAL, "User:u", "*", O.ALTER, DENY)) is None
    cases = {"Invalid resourceType ANY": ok.__class__(R.ANY, "t", P.LITERAL, "User:u", "*", O.READ, ALLOW),
             "Invalid patternType MATCH": Acl(R.TOPIC, "t", P.MATCH, "User:u", "*", O.READ, ALLOW),
             "Invalid operation ANY": Acl(R.TOPIC, "t", P.LITERAL, "User:u", "*", O.ANY, ALLOW),
             "Invalid permissionType UNKNOWN": Acl(R.TOPIC, "t", P.LITERAL, "User:u", "*", O.READ, 0),
             "Resource name should not be empty": Acl(R.TOPIC, "", P.LITERAL, "User:u", "*", O.READ, ALLOW),
             "The only valid name for the CLUSTER resource is kafka-cluster":
                 Acl(R.CLUSTER, "c", P.LITERAL, "User:u", "*", O.ALTER, ALLOW),
             "Could not parse principal": Acl(R.TOPIC, "t", P.LITERAL, "bob", "*", O.READ, ALLOW)}
    for message, acl in cases.items():
        assert new_acl_problem(acl).startswith(message)


def test_validate_filter():
    # AclControlManagerTest.testValidateFilter
    def f(rt=R.ANY, pt=P.ANY, op=O.ANY, perm=Permission.ANY):
        return AclFilter(rt, None, pt, None, None, op, perm)
    assert f().problem() is None
    assert f(pt=P.UNKNOWN).problem() == "Unknown patternFilter."
    assert f(rt=R.UNKNOWN).problem() == "Unknown patternFilter."
    assert f(op=O.UNKNOWN).problem() == "Unknown entryFilter."
    assert f(perm=Permission.UNKNOWN).problem() == "Unknown entryFilter."


def test_filter_match_pattern():
    # ResourcePatternFilter's MATCH: the literal name, the `*` literal, and every prefix covering it
    acls = [Acl(R.TOPIC, "foo", P.LITERAL, "User:u", "*", O.READ, ALLOW),
            Acl(R.TOPIC, "*", P.LITERAL, "User:u", "*", O.READ, ALLOW),
            Acl(R.TOPIC, "fo", P.PREFIXED, "User:u", "*", O.READ, ALLOW),
            Acl(R.TOPIC, "bar", P.PREFIXED, "User:u", "*", O.READ, ALLOW),
            Acl(R.GROUP, "foo", P.LITERAL, "User:u", "*", O.READ, ALLOW)]
    a = authorizer_with(*acls)
    got = a.describe(AclFilter(R.TOPIC, "foo", P.MATCH, None, None, O.ANY, Permission.ANY))
    assert set(got) == set(acls[:3])
    assert a.describe(AclFilter(R.ANY, "foo", P.LITERAL, None, None, O.ANY, Permission.ANY)) == sorted(
        [acls[0], acls[4]])


def test_decisions_are_cached_until_the_acls_change():
    grant = Acl(R.TOPIC, "t", P.LITERAL, "User:u", "*", O.WRITE, ALLOW)
    a = authorizer_with(grant)
    assert a.authorize(who("u"), O.WRITE, R.TOPIC, "t")
    a.load({})                                                     # revoked: the cached answer goes too
    assert not a.authorize(who("u"), O.WRITE, R.TOPIC, "t")
    a.load({b"\0" * 16: grant})
    for i in range(DECISIONS_CACHED + 5):                          # past the bound: emptied, still right
        assert not a.authorize(who("u"), O.WRITE, R.TOPIC, f"x{i}")
    assert a.authorize(who("u"), O.WRITE, R.TOPIC, "t")
    assert not a.authorize(who("u", "10.1.1.1"), O.READ, R.TOPIC, "t")
