#!/usr/bin/env python3
"""librdkafka's own test suite against this project's broker (stdlib only).

    python tools/rdkafka_suite.py                  the representative subset (SUBSET below)
    python tools/rdkafka_suite.py --tests 0001,0002
    python tools/rdkafka_suite.py --all            every test number (broker-facing and local)
    python tools/rdkafka_suite.py --cluster ...    against a controller and 3 brokers
    RDKAFKA_SUITE_REPO=DIR python tools/rdkafka_suite.py ...   the broker from DIR's `storage`

The suite comes from a package registry (CI reaches no other host): the npm package
@confluentinc/kafka-javascript bundles librdkafka's whole tree, tests/ included, under
deps/librdkafka. `npm pack` fetches it once into the cache (checked against SHA256 below),
it is configured with what the machine has (OpenSSL, zstd, Cyrus SASL, RapidJSON when their
headers are there; never GSSAPI or curl) and librdkafka and the test-runner are built once
(make -j2).

Each test number then runs alone (`TESTS=NNNN ./test-runner -p1`, never quick mode -Q) with a
timeout, against a fresh broker (`python -m storage serve` on a loopback port, a temporary data
dir, the suite's scenario: auto-created topics of 4 partitions; `--no-auto-create-topics` for the
noautocreate scenario), or against a controller and three brokers when its topics need
replication factor 3; every process is stopped by its pid. A table follows: test, passed / failed /
not applicable / local, the reason or the failing check's message, seconds. Exit status 1 if a
test that ran failed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

PACKAGE = "@confluentinc/kafka-javascript"
PACKAGE_VERSION = "1.10.1"
LIBRDKAFKA_VERSION = "2.15.1"
SHA256 = "ada7d703bb1d3237e2292bfabf438d663b6160c9f1ac2a2406b5dc4257c81b66"
CACHE = Path(os.environ.get("RDKAFKA_SUITE_CACHE")
             or Path.home() / ".cache" / "kafka-partition-storage" / f"librdkafka-{LIBRDKAFKA_VERSION}")
ROOT = Path(__file__).resolve().parents[1]
# The broker version the tests assume (TEST_KAFKA_VERSION): Produce v3+ and record batches only,
# as Kafka 4.0 (tests skip their message-format v0/v1 parts for it).
KAFKA_VERSION = "4.0.0"

# Tests known to pass against `storage serve` at this branch, run by the slow tier
# (tests/interop/test_librdkafka_suite.py) and by default here; a few minutes in all.
SUBSET = ("0001", "0002", "0003", "0005", "0007", "0008", "0012", "0013", "0019", "0020", "0021",
          "0029", "0031", "0034", "0035", "0036", "0040", "0042", "0054", "0063", "0082", "0084",
          "0085", "0090", "0099", "0109", "0115", "0119", "0130", "0140", "0052")

# Test numbers that cannot apply to this broker, with the reason (decided from each test's
# source; the runner's own skips -- broker version, a missing KAFKA_PATH -- are reported too).
NOT_APPLICABLE = {
    "0066": "loads a plugin library built only with the suite's plugin targets",
    "0126": "needs an OAUTHBEARER/OIDC identity provider (SASL not served)",
    "0142": "SASL re-authentication (SASL not served)",
}
NEEDS_KAFKA_TOOLS = "needs Kafka's command-line tools (kafka-topics.sh under KAFKA_PATH)"
NEEDS_JAVA_CLIENTS = ("needs Java's kafka-clients (its Java producer, test_run_java): java, javac and the jars "
                      "of tests/interop/test_interop_jvm.py")
# The jars tests/interop/test_interop_jvm.py fetches (kafka-clients 3.9.1 and its codecs).
JAR_CACHE = Path(os.environ.get("KPS_JAR_CACHE") or Path.home() / ".cache" / "kafka-partition-storage" / "jars")
JARS = ("kafka-clients.jar", "zstd-jni.jar", "lz4-java.jar", "snappy-java.jar", "slf4j-api.jar")
SHARE_CONSUMERS = "share consumers (KIP-932, Kafka 4.2) are not served"


# --- fetching and building -------------------------------------------------------------------

class Unavailable(RuntimeError):
    """The suite is not cached and cannot be fetched (no npm, no registry)."""


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def source_tree(cache: Path = CACHE) -> Path:
    """librdkafka's tree in the cache, fetched with `npm pack` and checked once."""
    tree = cache / "librdkafka"
    if (tree / "tests" / "test.c").exists():
        return tree
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"package-{PACKAGE_VERSION}.tgz"
    if not tarball.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise Unavailable("npm is not installed: cannot fetch the suite (and the cache is empty)")
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            try:
                subprocess.run([npm, "pack", "--silent", f"{PACKAGE}@{PACKAGE_VERSION}"], cwd=tmp,
                               check=True, timeout=600, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            except subprocess.SubprocessError as exc:
                raise Unavailable(f"npm pack {PACKAGE}@{PACKAGE_VERSION} failed: {exc}") from None
            packed = list(Path(tmp).glob("*.tgz"))
            if len(packed) != 1:
                raise RuntimeError(f"npm pack left {packed}")
            packed[0].rename(tarball)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != SHA256:
        tarball.unlink()
        raise RuntimeError(f"{tarball.name}: sha256 {digest}, expected {SHA256}")
    staging = cache / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("package/deps/librdkafka/")]
        tar.extractall(staging, members=members, filter="data")
    (staging / "package" / "deps" / "librdkafka").rename(tree)
    shutil.rmtree(staging)
    return tree


def _configure_flags() -> list[str]:
    """Only what this machine can build: each optional library is off unless its header is there."""
    have = lambda header: any(Path(d, header).exists() for d in ("/usr/include", "/usr/local/include"))  # noqa: E731
    flags = ["--disable-gssapi", "--disable-curl", "--disable-lz4-ext"]
    if not have("openssl/ssl.h"):
        flags.append("--disable-ssl")
    if not have("zstd.h"):
        flags.append("--disable-zstd")
    if not have("sasl/sasl.h"):
        flags.append("--disable-sasl")
    return flags


def _steps(cache: Path, tree: Path, *targets: tuple[str, ...], jobs: int) -> None:
    """Configure the tree once, then `make -C DIR TARGET` for each (DIR, TARGET); build.log keeps the output."""
    log = cache / "build.log"
    with open(log, "ab") as out:
        def step(*argv: str) -> None:
            _say(f"rdkafka_suite: {' '.join(argv)} (log: {log})")
            subprocess.run(list(argv), cwd=tree, check=True, stdout=out, stderr=subprocess.STDOUT, timeout=1800)
        if not (tree / "Makefile.config").exists():
            step("./configure", *_configure_flags())
        for directory, target in targets:
            step("make", f"-j{jobs}", "-C", directory, target)


def build_library(cache: Path = CACHE, jobs: int = 2) -> Path:
    """librdkafka alone (src/librdkafka.a), built once; tools/rdkafka_perf.py links its load generator to it."""
    tree = source_tree(cache)
    library = tree / "src" / "librdkafka.a"
    if not library.exists():
        _steps(cache, tree, ("src", "lib"), jobs=jobs)
    return library


def build(cache: Path = CACHE, jobs: int = 2) -> Path:
    """The test-runner, built once (librdkafka, its C++ wrapper, the tests); returns its path."""
    tree = source_tree(cache)
    runner = tree / "tests" / "test-runner"
    if runner.exists():
        return runner
    started = time.monotonic()
    _steps(cache, tree, ("src", "lib"), ("src-cpp", "lib"), ("tests", "test-runner"), jobs=jobs)
    _say(f"rdkafka_suite: built in {time.monotonic() - started:.0f} s")
    return runner


# --- the catalogue -----------------------------------------------------------------------------

def catalogue(tree: Path) -> dict[str, list[dict]]:
    """Test number -> its entries in tests/test.c: name, flags, minimum broker version, scenario."""
    text = (tree / "tests" / "test.c").read_text(errors="replace")
    table = text[text.index("struct test tests[]"):]
    found: dict[str, list[dict]] = {}
    for match in re.finditer(r"_TEST\((\d{4})_(\w+),", table):
        depth, end = 1, match.end()
        while depth and end < len(table):
            depth += {"(": 1, ")": -1}.get(table[end], 0)
            end += 1
        body = table[match.end():end - 1]
        version = re.search(r"TEST_BRKVER\((\d+),\s*(\d+),\s*(\d+),\s*(\d+)\)", body)
        scenario = re.search(r'\.scenario\s*=\s*"(\w+)"', body)
        found.setdefault(match.group(1), []).append({
            "name": f"{match.group(1)}_{match.group(2)}",
            "local": "TEST_F_LOCAL" in body,
            "manual": "TEST_F_MANUAL" in body,
            "known_issue": re.search(r"TEST_F_KNOWN_ISSUE\b", body) is not None,
            "extra": extra.group(1) if (extra := re.search(r'\.extra\s*=\s*"([^"]*)"', body)) else "",
            "minver": tuple(int(v) for v in version.groups()) if version else (0, 0, 0, 0),
            "scenario": scenario.group(1) if scenario else "default",
        })
    return found


def plan(number: str, entries: list[dict], kafka_version: tuple) -> tuple[str, str]:
    """('run', its scenarios, comma-separated) for a broker-facing number, else ('local' | 'n/a', the
    reason). A scenario is the broker setup a test needs (librdkafka's tests/scenarios/: default
    auto-creates topics of 4 partitions, noautocreate does not)."""
    if number in NOT_APPLICABLE:
        return "n/a", NOT_APPLICABLE[number]
    # A test named *_mock runs against librdkafka's mock cluster even when not flagged local.
    broker = [e for e in entries if not e["local"] and not e["manual"] and not e["name"].endswith("_mock")]
    if not broker:
        manual = all(e["manual"] for e in entries)
        return "local", "a manual test (TEST_F_MANUAL)" if manual else "mock cluster or no broker: tests librdkafka alone"
    if all(e["known_issue"] for e in broker):
        return "n/a", f"flagged a known issue of librdkafka itself, not run by its suite {broker[0]['extra']}".rstrip()
    if all(e["minver"] >= (4, 2, 0, 0) for e in broker) and any("share" in e["name"] for e in broker):
        return "n/a", SHARE_CONSUMERS
    if all(e["minver"] > kafka_version for e in broker):
        return "n/a", f"needs broker version {'.'.join(map(str, broker[0]['minver']))}"
    return "run", ",".join(sorted({e["scenario"] for e in broker}))


# --- Java clients ------------------------------------------------------------------------------

def java_kafka_path(cache: Path = CACHE, jars: Path = JAR_CACHE) -> str | None:
    """A stand-in Kafka tree (KAFKA_PATH) for the suite: bin/kafka-topics.sh and
    bin/kafka-acls.sh (tools/kafka_tools_standin.py: what Kafka's scripts do, through the Admin
    API), and, for the tests that run a Java client (tests/java/*Cli.java through test_run_java,
    e.g. 0098's TransactionProducerCli), bin/kafka-run-class.sh running `java` on kafka-clients and
    its codec jars in libs/.  None when the test needs Java and java, javac or the jars are
    missing: such a test would run its Java half against nothing and fail on what it then reads."""
    home = cache / "kafka-standin"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    standin = ROOT / "tools" / "kafka_tools_standin.py"
    for script, command in (("kafka-topics.sh", "topics"), ("kafka-acls.sh", "acls")):
        path = home / "bin" / script
        path.write_text(f'#!/bin/sh\n# a stand-in (tools/kafka_tools_standin.py)\n'
                        f'exec "{sys.executable}" "{standin}" {command} "$@"\n')
        path.chmod(0o755)
    if shutil.which("java") is None or shutil.which("javac") is None or not all((jars / j).is_file() for j in JARS):
        (home / "bin" / "kafka-run-class.sh").unlink(missing_ok=True)
        return None
    (home / "libs").mkdir(exist_ok=True)
    for jar in JARS:                  # tests/java/Makefile globs libs/kafka-clients-*.jar
        link = home / "libs" / (jar.replace("kafka-clients", "kafka-clients-3.9.1"))
        if not link.exists():
            link.symlink_to(jars / jar)
    script = home / "bin" / "kafka-run-class.sh"
    script.write_text('#!/bin/sh\n# kafka-clients and its codecs only (rdkafka_suite.java_kafka_path)\n'
                      'exec java -cp "$CLASSPATH:$(dirname "$0")/../libs/*" "$@"\n')
    script.chmod(0o755)
    return str(home)


def runs_java(tree: Path, number: str) -> bool:
    """Whether test NUMBER's source starts a Java client (test_run_java)."""
    return any("test_run_java(" in f.read_text(errors="replace") for f in (tree / "tests").glob(f"{number}-*.c*"))


# --- brokers -----------------------------------------------------------------------------------

# Tests that start several consumers at once and count on them joining the group's first
# generation together: they assume Kafka's default group.initial.rebalance.delay.ms (3000).
# With the delay at 0 the first member's generation completes alone and the second one's join
# rebalances it, a race their timing checks lose now and then (0089: "did not expect message
# for at least 7095ms"; 0113's l_unsubscribe: two assign calls for its first consumer, not one).
KAFKA_DEFAULT_REBALANCE_DELAY = {"0089": 3000, "0113": 3000}

# Tests that manage ACLs run against a broker with ACLs on and the PLAINTEXT principal a super
# user (librdkafka's own harness runs them against an authorizer with the client allowed
# everything): 0081 creates, describes and deletes ACLs.
ACL_FLAGS = ["--authorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "--super-users",
             "User:ANONYMOUS;User:rdkafka"]
# Tests that deny a topic to every principal with kafka-acls.sh and expect the client to be
# refused: ACLs on, no super user, everything allowed where no ACL is found (librdkafka's own
# harness, trivup, configures its brokers so).
DENY_ACL_FLAGS = ["--authorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                  "--allow-everyone-if-no-acl-found"]
WITH_ACLS = {"0081": ACL_FLAGS, "0109": DENY_ACL_FLAGS, "0115": DENY_ACL_FLAGS, "0119": DENY_ACL_FLAGS}

# Test numbers that run longer than any --timeout a full pass gives: seconds they get at least.
# 0113 runs about 630 s whatever the delay (its six u_ sub-tests follow scripted timelines of
# 50-70 s each; 627 s at 3000, 588 s at 1000).
MIN_TIMEOUT = {"0113": 900}


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_USER, SASL_PASSWORD = "rdkafka", "rdkafka-suite-secret"


def _add_sasl_user(bootstrap: str) -> None:
    """The suite's SASL user, with a SCRAM-SHA-256 and a SCRAM-SHA-512 credential (PLAIN checks the
    password against them), made over the PLAINTEXT listener with AlterUserScramCredentials."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):   # one a request: Kafka's rule
        upsert = UserScramCredentialUpsertion(SASL_USER, ScramCredentialInfo(mechanism, 4096), SASL_PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)


class Brokers:
    """One `storage serve`, or a controller and three brokers (`cluster`), on loopback; the suite's
    scenario (tests/scenarios/): auto-created topics of 4 partitions, replication factor 3 on a
    cluster. Each process is stopped by its pid."""

    def __init__(self, workdir: Path, *, cluster: bool, auto_create: bool = True, rebalance_delay_ms: int = 0,
                 acls: list[str] = (), sasl: str | None = None):
        self.workdir, self.cluster, self.auto_create = workdir, cluster, auto_create
        self.acls = acls
        self.rebalance_delay_ms = rebalance_delay_ms
        self.procs: list[subprocess.Popen] = []
        self.bootstrap = ""
        self.sasl = sasl
        self.tools_bootstrap = ""       # where the stand-in tools connect: the PLAINTEXT listener
        self.client_conf = ""           # test.conf lines beside bootstrap.servers (the SASL ones)
        self.log = workdir / "broker.log"

    def _spawn(self, argv: list[str], timeout: float, listeners: dict | None = None) -> str:
        """`python -m storage ARGV` started; its HOST:PORT once it said it listens (and, given
        `listeners`, each listener's HOST:PORT by name, from the lines that follow)."""
        repo = os.environ.get("RDKAFKA_SUITE_REPO", str(ROOT))     # whose `storage` serves (another worktree)
        env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log, "ab") as err:
            proc = subprocess.Popen([sys.executable, "-m", "storage", *argv], cwd=repo, env=env,
                                    stdout=subprocess.PIPE, stderr=err, text=True)
        self.procs.append(proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            found = re.search(r"listening on ([\d.]+:\d+) pid", line)
            if found and listeners is None:
                return found.group(1)
            named = re.match(r"listener (\w+) \w+ on ([\d.]+:\d+)", line)
            if named and listeners is not None:
                listeners[named.group(1)] = named.group(2)
                if len(listeners) == 2:
                    return listeners["PLAINTEXT"]
        self.stop()
        raise RuntimeError(f"`storage {argv[0]}` did not start; see {self.log}")

    def start(self, timeout: float = 60) -> "Brokers":
        common = ["--num-partitions", "4", "--group-initial-rebalance-delay-ms", str(self.rebalance_delay_ms),
                  "--no-fsync"]
        if not self.auto_create:
            common.append("--no-auto-create-topics")
        common += self.acls
        if self.sasl and not self.cluster:
            listeners: dict[str, str] = {}
            self.tools_bootstrap = self._spawn(
                ["serve", "--data-dir", str(self.workdir / "data"), "--listeners",
                 "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", *common], timeout, listeners)
            self.bootstrap = listeners["SASL_PLAINTEXT"]
            try:
                _add_sasl_user(self.tools_bootstrap)
            except Exception:
                self.stop()
                raise
            self.client_conf = (f"security.protocol=SASL_PLAINTEXT\nsasl.mechanisms={self.sasl}\n"
                                f"sasl.username={SASL_USER}\nsasl.password={SASL_PASSWORD}\n")
            return self
        if self.sasl:
            raise ValueError("--sasl runs against one broker (not --cluster)")
        if not self.cluster:
            self.bootstrap = self._spawn(["serve", "--data-dir", str(self.workdir / "data"), "--listen",
                                          "127.0.0.1:0", *common], timeout)
            self.tools_bootstrap = self.bootstrap
            return self
        controller = self._spawn(["controller", "--data-dir", str(self.workdir / "controller"), "--listen",
                                  "127.0.0.1:0", "--min-insync-replicas", "1"], timeout)
        self.bootstrap = ",".join(
            self._spawn(["serve", "--data-dir", str(self.workdir / f"broker-{n}"), "--node-id", str(n), "--listen",
                         "127.0.0.1:0", "--controller", controller, "--replication-factor", "3",
                         "--min-insync-replicas", "1", *common], timeout) for n in (1, 2, 3))
        self.tools_bootstrap = self.bootstrap
        return self

    def alive(self) -> bool:
        return bool(self.procs) and all(proc.poll() is None for proc in self.procs)

    def stop(self, timeout: float = 30) -> None:
        for proc in reversed(self.procs):          # the brokers, then the controller
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(10)
            proc.stdout.close()
        self.procs = []


# --- running -----------------------------------------------------------------------------------

_SUMMARY = re.compile(r"^\|\s*(\d{4}_\w+)\s*\|\s*(\w+)\s*\|\s*([\d.]+)s\s*\|\s*(.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def summary(output: str) -> dict[str, tuple[str, str]]:
    """The runner's closing table: test name -> (PASSED | FAILED | SKIPPED | ..., its message)."""
    rows = {}
    for line in _ANSI.sub("", output).splitlines():
        found = _SUMMARY.match(line.strip())
        if found:
            rows[found.group(1)] = (found.group(2), found.group(4).strip())
    return rows


def run_one(runner: Path, number: str, *, local: bool, bootstrap: str, scenario: str, timeout: float,
            kafka_version: str, workdir: Path, client_conf: str = "", tools_bootstrap: str = "") -> dict:
    """One test number alone; its verdict, reason and seconds (the output kept in workdir).
    client_conf: more test.conf lines (the SASL ones); tools_bootstrap: where the stand-in
    kafka-topics.sh connects (a PLAINTEXT listener; default `bootstrap`)."""
    conf = workdir / "test.conf"
    conf.write_text((f"bootstrap.servers={bootstrap}\n" if bootstrap else "") + client_conf)
    env = dict(os.environ, TESTS=number, RDKAFKA_TEST_CONF=str(conf), TEST_KAFKA_VERSION=kafka_version,
               LD_LIBRARY_PATH=f"{runner.parent.parent / 'src'}:{runner.parent.parent / 'src-cpp'}",
               BROKERS=tools_bootstrap or bootstrap)      # test_kafka_topics passes it as --bootstrap-server
    env.pop("CI", None)          # the runner would lengthen every timeout three-fold
    if "KAFKA_PATH" not in env:
        with_java = java_kafka_path(runner.parent.parent.parent)
        if with_java or not runs_java(runner.parent.parent, number):
            env["KAFKA_PATH"] = str(runner.parent.parent.parent / "kafka-standin")
    argv = [str(runner), "-p1", "-l" if local else "-L"]
    if scenario != "default":
        argv += ["-s", scenario]
    started = time.monotonic()
    out_path = workdir / f"{number}.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(argv, cwd=runner.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:                          # a timeout, or Ctrl-C: the runner and its children go too
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    seconds = time.monotonic() - started
    output = out_path.read_text(errors="replace")
    rows = {name: row for name, row in summary(output).items() if name.startswith(number)}
    ran = {name: row for name, row in rows.items() if row[0] != "SKIPPED"}
    failed = {name: msg for name, (state, msg) in ran.items() if state != "PASSED"}
    if code is None:
        last = [line for line in _ANSI.sub("", output).splitlines() if line.strip()][-3:]
        return {"verdict": "failed", "reason": f"timed out after {timeout:.0f} s; last: {' / '.join(last)[-300:]}",
                "seconds": seconds}
    if (failed or code != 0) and "KAFKA_PATH" in _first_failure(output):
        return {"verdict": "n/a", "reason": NEEDS_KAFKA_TOOLS, "seconds": seconds}
    if (failed or code != 0) and re.search(r"test_run_java\(\w+\): KAFKA_PATH must be set", output):
        return {"verdict": "n/a", "reason": NEEDS_JAVA_CLIENTS, "seconds": seconds}
    if failed:
        reason = "; ".join(f"{name}: {msg or 'failed'}" for name, msg in failed.items())
        return {"verdict": "failed", "reason": _first_failure(output) or reason, "seconds": seconds}
    if code != 0:
        return {"verdict": "failed", "reason": _first_failure(output) or f"test-runner exited {code}",
                "seconds": seconds}
    if not ran:
        reasons = sorted({msg for _, msg in rows.values() if msg}) or ["the runner skipped it"]
        return {"verdict": "n/a", "reason": "skipped by the runner: " + "; ".join(reasons), "seconds": seconds}
    skipped = sorted(name for name, row in rows.items() if row[0] == "SKIPPED")
    return {"verdict": "passed", "reason": f"(skipped here: {', '.join(skipped)})" if skipped else "",
            "seconds": seconds}


def _first_failure(output: str) -> str:
    """The first failing check: where (file:line:function) and its message, from the runner's
    '### Test "NAME" failed at FILE:LINE:FUNC() at DATE: ###' and the lines up to the next log line."""
    lines = _ANSI.sub("", output).splitlines()
    for i, line in enumerate(lines):
        found = re.match(r'###\s*Test "([^"]*)" failed at (\S+) at ', line.strip())
        if found:
            message = []
            for follow in lines[i + 1:i + 6]:
                if follow.startswith(("[", "###", "test-runner:")):
                    break
                message.append(follow.strip())
            return f"{found.group(1)} at {found.group(2)}: {' '.join(message).strip()}"[:500]
    return ""


def _once(runner: Path, number: str, scenario: str, *, cluster: bool, place: Path, sasl: str | None = None,
          **how) -> dict:
    place.mkdir()
    brokers = Brokers(place, cluster=cluster, auto_create=scenario != "noautocreate",
                      rebalance_delay_ms=KAFKA_DEFAULT_REBALANCE_DELAY.get(number, 0), acls=WITH_ACLS.get(number, ()),
                      sasl=sasl).start()
    try:
        row = run_one(runner, number, local=False, bootstrap=brokers.bootstrap, scenario=scenario,
                      workdir=place, client_conf=brokers.client_conf, tools_bootstrap=brokers.tools_bootstrap, **how)
        if not brokers.alive():
            row.update(verdict="failed", reason=f"a broker exited; {row['reason']}")
    finally:
        brokers.stop()
    return row


def _against_brokers(runner: Path, number: str, scenarios: list[str], *, cluster: bool, workdir: Path,
                     **how) -> dict:
    """A test number against fresh brokers, once per scenario; failed if any run failed."""
    rows = []
    for scenario in scenarios:
        row = _once(runner, number, scenario, cluster=cluster, place=workdir / scenario, **how)
        if not cluster and not how.get("sasl") and row["verdict"] == "failed" and "replication factor" in row["reason"]:
            # The suite's own setup is three brokers; a test that creates topics of replication
            # factor 3 runs against a cluster.
            row = _once(runner, number, scenario, cluster=True, place=workdir / f"{scenario}-cluster", **how)
            row["reason"] = ("on 3 brokers; " + row["reason"]).rstrip("; ")
        rows.append(row)
    verdicts = [r["verdict"] for r in rows]
    verdict = "failed" if "failed" in verdicts else "passed" if "passed" in verdicts else "n/a"
    reasons = [r["reason"] for r in rows if r["verdict"] == verdict and r["reason"]]
    reasons += [f"partly not applicable: {r['reason']}" for r in rows if r["verdict"] == "n/a" != verdict]
    return {"verdict": verdict, "reason": "; ".join(reasons), "seconds": sum(r["seconds"] for r in rows)}


def run(numbers: list[str], *, cluster: bool, timeout: float, kafka_version: str, run_local: bool,
        cache: Path = CACHE, keep: Path | None = None, sasl: str | None = None) -> list[dict]:
    """Each test number against fresh brokers (`sasl`: a mechanism of SASL_MECHANISMS, the
    clients on a SASL_PLAINTEXT listener as the suite's user); their rows, printed as they come."""
    runner = build(cache)
    tests = catalogue(runner.parent.parent)
    version = tuple(int(v) for v in (kafka_version.split(".") + ["0"] * 4)[:4])
    results = []
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="rdkafka-suite-", dir=keep))
    try:
        for number in numbers:
            if number not in tests:
                results.append({"test": number, "verdict": "n/a", "reason": "no such test number", "seconds": 0.0})
                continue
            what, detail = plan(number, tests[number], version)
            row = {"test": number, "name": tests[number][0]["name"][5:]}
            workdir = root / number
            workdir.mkdir()
            if what == "local" and run_local:
                row.update(run_one(runner, number, local=True, bootstrap="", scenario="default",
                                   timeout=timeout, kafka_version=kafka_version, workdir=workdir))
                row["reason"] = ("local (no broker); " + row["reason"]).rstrip("; ")
            elif what != "run":
                row.update(verdict=what, reason=detail, seconds=0.0)
            else:
                row.update(_against_brokers(runner, number, detail.split(","), cluster=cluster,
                                            timeout=max(timeout, MIN_TIMEOUT.get(number, 0)),
                                            kafka_version=kafka_version, workdir=workdir, sasl=sasl))
            results.append(row)
            print(_format(row), flush=True)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
        else:
            _say(f"rdkafka_suite: outputs kept under {root}")
    return results


def _format(row: dict) -> str:
    return f"| {row['test']} {row.get('name', '')[:32]:<32} | {row['verdict']:<7} | {row['seconds']:6.1f} | {row['reason']}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tests", help="comma-separated test numbers (default: the known-passing subset)")
    p.add_argument("--all", action="store_true", help="every test number of the suite")
    p.add_argument("--local", action="store_true", help="also run the tests that need no broker (mock cluster)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per test number (default 300)")
    p.add_argument("--cluster", action="store_true", help="run against a controller and 3 brokers")
    p.add_argument("--sasl", choices=SASL_MECHANISMS,
                   help="the clients authenticate with this mechanism on a SASL_PLAINTEXT listener (one broker)")
    p.add_argument("--kafka-version", default=KAFKA_VERSION, help=f"TEST_KAFKA_VERSION (default {KAFKA_VERSION})")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--keep", help="keep each test's output and broker log under this directory")
    p.add_argument("--build-only", action="store_true", help="fetch and build, run nothing")
    args = p.parse_args(argv)
    if args.build_only:
        print(build())
        return 0
    if args.all:
        numbers = sorted(catalogue(build().parent.parent))
    elif args.tests:
        numbers = [n.strip().zfill(4) for n in args.tests.split(",") if n.strip()]
    else:
        numbers = list(SUBSET)
    print(f"| test {'':<32} | verdict | {'s':>6} | reason")
    results = run(numbers, cluster=args.cluster, timeout=args.timeout, kafka_version=args.kafka_version,
                  run_local=args.local, keep=Path(args.keep) if args.keep else None, sasl=args.sasl)
    counts = {v: sum(r["verdict"] == v for r in results) for v in ("passed", "failed", "n/a", "local")}
    print(" ".join(f"{v}: {n}" for v, n in counts.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
