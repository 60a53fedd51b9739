"""Users' SCRAM credentials, kept in the cluster metadata as KRaft keeps them (KIP-554):
AlterUserScramCredentials (API 51) and DescribeUserScramCredentials (API 50), and the
credential arithmetic SASL's PLAIN and SCRAM mechanisms check against (sasl.py).

The client salts the password (the request carries the salt, the iterations and the salted
password, never the password); the controller derives the stored key and the server key from
it (RFC 5802: ClientKey = HMAC(SaltedPassword, "Client Key"), StoredKey = H(ClientKey),
ServerKey = HMAC(SaltedPassword, "Server Key")), keeps them in its store and publishes each
change as a UserScramCredentialRecord or a RemoveUserScramCredentialRecord (metadata records
11 and 12), which every broker replays into its image (metadata.MetadataImage.scram).  The
checks are Kafka's ScramControlManager's: a user named twice in one request is
DUPLICATE_RESOURCE, an empty name UNACCEPTABLE_CREDENTIAL, a mechanism other than
SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2) UNSUPPORTED_SASL_MECHANISM, iterations outside
4096..16384 UNACCEPTABLE_CREDENTIAL, deleting a credential that is not there RESOURCE_NOT_FOUND.
Describe answers each user's mechanisms and iterations, never a salt or a key (ScramImage).
"""
from __future__ import annotations

import hashlib
import hmac
import weakref
from dataclasses import dataclass

from ..core.errors import Errors

MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}      # ScramMechanism.type() -> its name
TYPES = {name: t for t, name in MECHANISMS.items()}
HASHES = {1: "sha256", 2: "sha512"}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384                # both mechanisms' minimum; Kafka's maximum
DOCUMENT = "scram_credentials"                              # the controller store's document
TWICE = "A user credential cannot be altered twice in the same request"


@dataclass(frozen=True)
class Credential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:          # the keys never reach a log
        return f"Credential(iterations={self.iterations}, salt=[hidden], keys=[hidden])"


def salted_password(mechanism: int, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC (what a client sends in an upsertion)."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode("utf-8"), salt, iterations)


def derive(mechanism: int, salted: bytes) -> tuple[bytes, bytes]:
    """(stored key, server key) of a salted password."""
    h = HASHES[mechanism]
    client_key = hmac.digest(salted, b"Client Key", h)
    return hashlib.new(h, client_key).digest(), hmac.digest(salted, b"Server Key", h)


def password_matches(mechanism: int, credential: Credential, password: str) -> bool:
    """Whether `password` is the one `credential` was made from (keys compared in constant time)."""
    stored, _ = derive(mechanism, salted_password(mechanism, password, credential.salt, credential.iterations))
    return hmac.compare_digest(stored, credential.stored_key)


# ---- the controller's side -----------------------------------------------------------------------
_HELD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()     # Controller -> {(user, type): Credential}


def held(controller) -> dict[tuple[str, int], Credential]:
    """The credentials the controller holds (read from its store once)."""
    found = _HELD.get(controller)
    if found is None:
        store = getattr(controller, "store", None)
        document = (store.get_document(DOCUMENT) if store is not None else None) or {}
        found = {(row["name"], row["mechanism"]): Credential(bytes.fromhex(row["salt"]), bytes.fromhex(row["stored_key"]),
                                                            bytes.fromhex(row["server_key"]), row["iterations"])
                 for row in document.get("credentials", [])}
        _HELD[controller] = found
    return found


def _problem(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISMS:
        return Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def alter(controller, deletions: list[tuple[str, int]],
          upsertions: list[tuple[str, int, int, bytes, bytes]]) -> list[tuple[str, int, str | None]]:
    """Kafka's ScramControlManager.alterCredentials: (user, error code, message) per user named;
    the valid changes are committed to the controller's store together (LogDirOfflineError if
    that commit fails) and published by the controller's next records_for."""
    current = held(controller)
    errors: dict[str, tuple[int, str]] = {}
    deletes: dict[str, tuple[str, int]] = {}
    upserts: dict[str, tuple[str, int, int, bytes, bytes]] = {}
    for name, mechanism in deletions:
        if name in errors:
            continue
        if deletes.pop(name, None) is not None:
            errors[name] = (Errors.DUPLICATE_RESOURCE, TWICE)
            continue
        problem = _problem(name, mechanism)
        if problem is None and (name, mechanism) not in current:
            problem = Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        if problem:
            errors[name] = problem
        else:
            deletes[name] = (name, mechanism)
    for upsertion in upsertions:
        name, mechanism, iterations = upsertion[:3]
        if name in errors:
            continue
        if deletes.pop(name, None) is not None or upserts.pop(name, None) is not None:
            errors[name] = (Errors.DUPLICATE_RESOURCE, TWICE)
            continue
        problem = _problem(name, mechanism)
        if problem is None and iterations < MIN_ITERATIONS:
            problem = Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        elif problem is None and iterations > MAX_ITERATIONS:
            problem = Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        if problem:
            errors[name] = problem
        else:
            upserts[name] = upsertion
    if deletes or upserts:
        changed = dict(current)
        for key in deletes.values():
            changed.pop(key, None)
        for name, mechanism, iterations, salt, salted in upserts.values():
            changed[(name, mechanism)] = Credential(bytes(salt), *derive(mechanism, bytes(salted)), iterations)
        controller.put_document(DOCUMENT, {"credentials": [
            {"name": n, "mechanism": m, "salt": c.salt.hex(), "stored_key": c.stored_key.hex(),
             "server_key": c.server_key.hex(), "iterations": c.iterations} for (n, m), c in sorted(changed.items())]})
        _HELD[controller] = changed
    return ([(name, Errors.NONE, None) for name in [*deletes, *upserts]]
            + [(name, code, message) for name, (code, message) in errors.items()])


def records(controller, published: dict[tuple[str, int], Credential]) -> list[tuple[int, dict]]:
    """The records that bring `published` (an image's credentials) to the controller's."""
    want = held(controller)
    out = []
    for (name, mechanism), c in sorted(want.items()):
        if published.get((name, mechanism)) != c:
            out.append((11, {"name": name, "mechanism": mechanism, "salt": c.salt, "storedKey": c.stored_key,
                             "serverKey": c.server_key, "iterations": c.iterations}))
    for name, mechanism in sorted(set(published) - set(want)):
        out.append((12, {"name": name, "mechanism": mechanism}))
    return out


# ---- the broker's side ---------------------------------------------------------------------------
def describe(credentials: dict[tuple[str, int], Credential], users: list[str] | None) -> list[dict]:
    """Kafka's ScramImage.describe: every user with a credential when `users` is empty, else each
    named (DUPLICATE_RESOURCE for one named twice, RESOURCE_NOT_FOUND for one without any)."""
    if not users:
        names = {name: False for name, _ in sorted(credentials)}
    else:
        names = {}
        for name in users:
            names[name] = name in names
    results = []
    for name, twice in names.items():
        infos = [{"mechanism": m, "iterations": c.iterations} for (n, m), c in sorted(credentials.items()) if n == name]
        if twice:
            code, message, infos = (Errors.DUPLICATE_RESOURCE,
                                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                                    [])
        elif not infos:
            code, message = Errors.RESOURCE_NOT_FOUND, f"Attempt to describe a user credential that does not exist: {name}"
        else:
            code, message = Errors.NONE, None
        results.append({"user": name, "error_code": code, "error_message": message, "credential_infos": infos})
    return results


def request_changes(request) -> tuple[list[tuple[str, int]], list[tuple[str, int, int, bytes, bytes]]]:
    """(deletions, upsertions) of an AlterUserScramCredentials request."""
    return ([(d.name, int(d.mechanism)) for d in request.deletions],
            [(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
             for u in request.upsertions])


def alter_answer(results: list[tuple[str, int, str | None]]) -> dict:
    return {"throttle_time": 0, "results": [{"user": u, "error_code": int(c), "error_message": m}
                                            for u, c, m in results]}


class ScramApis:
    """The two APIs on a broker: describe from its replayed image, alter through its controller."""

    def __init__(self, node):
        self.node = node

    async def describe_user_scram_credentials(self, header, request) -> dict:
        users = [u.name for u in request.users] if request.users else None
        return {"throttle_time": 0, "error_code": Errors.NONE, "error_message": None,
                "results": describe(self.node.scram_credentials(), users)}

    async def alter_user_scram_credentials(self, header, request) -> dict:
        deletions, upsertions = request_changes(request)
        return alter_answer(await self.node.alter_scram_credentials(deletions, upsertions))
