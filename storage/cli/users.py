"""`python -m storage users ...`: the users' SCRAM credentials, as Kafka's `kafka-configs.sh
--entity-type users --alter --add-config 'SCRAM-SHA-256=[password=...]'` and `--describe` do, on
confluent-kafka's AdminClient (AlterUserScramCredentials, DescribeUserScramCredentials), so it
works against any Kafka broker.  The password is salted here, by the client (the broker never
sees it); describe tells each user's mechanisms and iterations, never a key.

  users list                                   the users with a credential
  users describe [--user U ...]                each one's mechanisms and iterations
  users set-password --user U [--password P]   add or replace U's credential (P from stdin if absent)
                     [--mechanism M] [--iterations N]
  users delete --user U [--mechanism M]        remove U's credential of one mechanism

Errors are admin_tools' (Kafka's error name, exit 1).  The connection flags, with the SASL ones
(`--security-protocol`, `--sasl-mechanism`, `--sasl-username`, `--sasl-password`), are
admin_tools'."""
from __future__ import annotations

import sys

from .admin_tools import Admin, ToolError, _emit, _table, action_parsers, run_tool

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
ITERATIONS = 4096          # Kafka's kafka-configs.sh default (and the minimum)


def _mechanism(admin: Admin, name: str):
    return getattr(admin.ck.admin.ScramMechanism, name.replace("-", "_"))


def _descriptions(admin: Admin, users: list[str] | None) -> dict:
    """user -> UserScramCredentialsDescription (all users when `users` is None)."""
    client = admin.client
    if users is None:
        return admin.wait(client.describe_user_scram_credentials(request_timeout=admin.timeout),
                          "describe user SCRAM credentials")
    futures = client.describe_user_scram_credentials(users, request_timeout=admin.timeout)
    return {user: admin.wait(future, f"describe user '{user}'") for user, future in futures.items()}


def users_list(admin: Admin, args) -> int:
    names = sorted(_descriptions(admin, None))
    return _emit(args, names, names)


def users_describe(admin: Admin, args) -> int:
    found = _descriptions(admin, list(dict.fromkeys(args.user)) if args.user else None)
    rows = [(user, info.mechanism.name.replace("_", "-"), info.iterations)
            for user, description in sorted(found.items()) for info in description.scram_credential_infos]
    document = [{"user": u, "mechanism": m, "iterations": i} for u, m, i in rows]
    return _emit(args, document, _table(["USER", "MECHANISM", "ITERATIONS"], [list(r) for r in rows]))


def users_set_password(admin: Admin, args) -> int:
    password = args.password if args.password is not None else sys.stdin.readline().rstrip("\n")
    if not password:
        raise ToolError("the password is empty (--password, or one line on stdin)", usage=True)
    a = admin.ck.admin
    info = a.ScramCredentialInfo(_mechanism(admin, args.mechanism), args.iterations)
    futures = admin.client.alter_user_scram_credentials(
        [a.UserScramCredentialUpsertion(args.user, info, password.encode("utf-8"))], request_timeout=admin.timeout)
    admin.wait(futures[args.user], f"set the {args.mechanism} password of user '{args.user}'")
    return _emit(args, {"user": args.user, "mechanism": args.mechanism, "iterations": args.iterations},
                 [f"user '{args.user}': {args.mechanism} credential set ({args.iterations} iterations)"])


def users_delete(admin: Admin, args) -> int:
    a = admin.ck.admin
    futures = admin.client.alter_user_scram_credentials(
        [a.UserScramCredentialDeletion(args.user, _mechanism(admin, args.mechanism))], request_timeout=admin.timeout)
    admin.wait(futures[args.user], f"delete the {args.mechanism} credential of user '{args.user}'")
    return _emit(args, {"user": args.user, "mechanism": args.mechanism, "deleted": True},
                 [f"user '{args.user}': {args.mechanism} credential deleted"])


USERS = {"list": users_list, "describe": users_describe, "set-password": users_set_password, "delete": users_delete}


def _iterations(text: str) -> int:
    if not text.isdigit() or not 4096 <= int(text) <= 16384:
        import argparse
        raise argparse.ArgumentTypeError(f"{text!r}: iterations must be 4096..16384 (Kafka's range)")
    return int(text)


def add_parser(sub) -> None:
    for name, a in action_parsers(sub, "users", "list, describe, set the password of and delete users' SCRAM "
                                  "credentials (as kafka-configs.sh --entity-type users, on confluent-kafka)",
                                  (("list", "the users with a SCRAM credential"),
                                   ("describe", "each user's mechanisms and iterations"),
                                   ("set-password", "add or replace a user's SCRAM credential"),
                                   ("delete", "remove a user's SCRAM credential of one mechanism"))):
        if name == "describe":
            a.add_argument("--user", action="append", help="a user (repeatable; default: every user)")
            continue
        if name == "list":
            continue
        a.add_argument("--user", required=True, help="the user")
        a.add_argument("--mechanism", choices=MECHANISMS, default="SCRAM-SHA-256",
                       help="the SCRAM mechanism (default SCRAM-SHA-256)")
        if name == "set-password":
            a.add_argument("--password", help="the password (default: one line read from stdin)")
            a.add_argument("--iterations", type=_iterations, default=ITERATIONS,
                           help=f"PBKDF2 iterations, 4096..16384 (default {ITERATIONS})")


def cmd_users(args) -> int:
    return run_tool(USERS[args.action], args)
