"""The users' SCRAM credentials through real clients and `storage users` (issue 34): confluent-kafka's
AdminClient alter_user_scram_credentials / describe_user_scram_credentials against `storage serve`
(User:ANONYMOUS on its loopback PLAINTEXT listener), Kafka's refusals, a restart keeping them, and
a 2-broker `storage cluster` where one broker's change is seen by the other (the controller
process's metadata log carries the records)."""
from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from storage.cli import main  # noqa: E402
from tests.wire_support import Broker, Cluster  # noqa: E402

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def upsert(user: str, mechanism, password: str, iterations: int = 4096):
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password.encode())


def alter(admin: AdminClient, alterations) -> dict[str, str | None]:
    """user -> None, or the Kafka error name of its refusal."""
    out = {}
    for user, future in admin.alter_user_scram_credentials(alterations, request_timeout=10).items():
        try:
            future.result(15)
            out[user] = None
        except KafkaException as exc:
            out[user] = exc.args[0].name()
    return out


def described(admin: AdminClient) -> dict[str, list[tuple[str, int]]]:
    found = admin.describe_user_scram_credentials(request_timeout=10).result(15)
    return {user: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
            for user, d in found.items()}


def test_admin_client_alters_and_describes_and_a_restart_keeps_them(tmp_path):
    b = Broker(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert described(admin) == {}
        assert alter(admin, [upsert("alice", SHA256, "a-secret", 8192), upsert("bob", SHA512, "b-secret")]) == \
            {"alice": None, "bob": None}
        assert alter(admin, [upsert("alice", SHA512, "a-secret")]) == {"alice": None}
        assert described(admin) == {"alice": [("SCRAM_SHA_256", 8192), ("SCRAM_SHA_512", 4096)],
                                    "bob": [("SCRAM_SHA_512", 4096)]}
        # Kafka's refusals (ScramControlManager): too many iterations, deleting what is absent.
        assert alter(admin, [upsert("carol", SHA256, "c", 16385)]) == {"carol": "UNACCEPTABLE_CREDENTIAL"}
        assert alter(admin, [UserScramCredentialDeletion("nobody", SHA256)]) == {"nobody": "RESOURCE_NOT_FOUND"}
        [unknown] = admin.describe_user_scram_credentials(["zed"], request_timeout=10).values()
        with pytest.raises(KafkaException) as refused:
            unknown.result(15)
        assert refused.value.args[0].name() == "RESOURCE_NOT_FOUND"
        assert alter(admin, [UserScramCredentialDeletion("bob", SHA512)]) == {"bob": None}
        b.stop()
        b.start()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert described(admin) == {"alice": [("SCRAM_SHA_256", 8192), ("SCRAM_SHA_512", 4096)]}
    finally:
        b.kill()


def eventually(ask, want=None, timeout_s: float = 20.0):
    """ask() until it answers `want` (or, with no `want`, anything non-empty) or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = ask()
        except KafkaException:          # a broker or the controller still starting
            got = None
        if (got == want if want is not None else bool(got)) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_librdkafka_0081_user_scram_credentials_sequence(tmp_path):
    """librdkafka's 0081-admin do_test_UserScramCredentials (with null bytes): an unknown user is
    RESOURCE_NOT_FOUND per user (no request error); a salt and password with NUL bytes at 10000
    iterations are kept; describe shows SCRAM-SHA-256/10000; the deletion leaves none."""
    b = Broker(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        [unknown] = admin.describe_user_scram_credentials(["scram-user"], request_timeout=10).values()
        with pytest.raises(KafkaException) as refused:
            unknown.result(15)
        assert refused.value.args[0].name() == "RESOURCE_NOT_FOUND"
        alteration = UserScramCredentialUpsertion("scram-user", ScramCredentialInfo(SHA256, 10000), b"\0as\0word",
                                                  b"s\0l\0")
        assert alter(admin, [alteration]) == {"scram-user": None}
        assert described(admin) == {"scram-user": [("SCRAM_SHA_256", 10000)]}
        assert alter(admin, [UserScramCredentialDeletion("scram-user", SHA256)]) == {"scram-user": None}
        assert described(admin) == {}
    finally:
        b.kill()


def run(capsys, broker, *argv):
    code = main([*argv, "--bootstrap-server", broker.bootstrap, "--timeout", "10"])
    out, err = capsys.readouterr()
    return code, out, err


def test_users_tool(tmp_path, capsys):
    b = Broker(tmp_path / "data").start()
    try:
        code, out, err = run(capsys, b, "users", "set-password", "--user", "dora", "--password", "d-secret",
                             "--mechanism", "SCRAM-SHA-512", "--iterations", "5000")
        assert (code, out.strip()) == (0, "user 'dora': SCRAM-SHA-512 credential set (5000 iterations)"), err
        assert run(capsys, b, "users", "set-password", "--user", "ed", "--password", "e")[0] == 0
        code, out, _ = run(capsys, b, "users", "describe")
        assert out.splitlines() == ["USER MECHANISM     ITERATIONS", "dora SCRAM-SHA-512 5000",
                                    "ed   SCRAM-SHA-256 4096"]
        code, out, _ = run(capsys, b, "users", "describe", "--user", "ed", "--json")
        assert json.loads(out) == [{"user": "ed", "mechanism": "SCRAM-SHA-256", "iterations": 4096}]
        code, out, _ = run(capsys, b, "users", "list", "--json")
        assert json.loads(out) == ["dora", "ed"]
        assert run(capsys, b, "users", "delete", "--user", "ed")[0] == 0
        code, out, err = run(capsys, b, "users", "delete", "--user", "ed")
        assert code == 1 and err.startswith("error: delete the SCRAM-SHA-256 credential of user 'ed': "
                                            "RESOURCE_NOT_FOUND"), err
        code, _, err = run(capsys, b, "users", "set-password", "--user", "x", "--password", "p", "--iterations", "100")
        assert code == 2 and "4096..16384" in err
    finally:
        b.kill()


def test_cluster_brokers_share_the_credentials(tmp_path):
    """AlterUserScramCredentials on broker 1 goes to the controller process; broker 2 replays the
    UserScramCredentialRecord from the metadata log (and again after the controller restarts)."""
    cluster = Cluster(tmp_path, brokers=2, min_isr=1)
    try:
        one = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
        two = AdminClient({"bootstrap.servers": cluster.brokers[2].bootstrap})
        assert alter(one, [upsert("fay", SHA256, "f-secret", 4500)]) == {"fay": None}
        assert alter(one, [upsert("gus", SHA256, "x", 16385)]) == {"gus": "UNACCEPTABLE_CREDENTIAL"}
        assert eventually(lambda: described(two)) == {"fay": [("SCRAM_SHA_256", 4500)]}
        cluster.controller.stop()
        cluster.controller.start()
        assert eventually(lambda: alter(two, [UserScramCredentialDeletion("fay", SHA256)]),
                          {"fay": None}) == {"fay": None}
        assert eventually(lambda: described(one), {}) == {}
    finally:
        cluster.kill()
