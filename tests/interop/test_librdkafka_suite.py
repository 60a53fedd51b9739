"""librdkafka's own test suite (v2.15.1, its tests/ directory) against `storage serve`.

tools/rdkafka_suite.py fetches the suite from the npm registry (the package that bundles
librdkafka's tree), builds librdkafka and its test-runner once into a cache and runs one test
number at a time against a fresh broker. Here, in the slow tier, the subset known to pass at
this branch (rdkafka_suite.SUBSET, a few minutes on two cores) must keep passing; the whole
suite runs on demand (`./dev rdkafka-suite --all`). Skipped with the reason when the suite
cannot be had: an empty cache and no npm, or no C/C++ compiler.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "rdkafka_suite.py"


def _suite():
    spec = importlib.util.spec_from_file_location("rdkafka_suite", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("rdkafka_suite", module)
    spec.loader.exec_module(module)
    return module


suite = _suite()


@pytest.fixture(scope="module")
def runner():
    built = suite.CACHE / "librdkafka" / "tests" / "test-runner"
    if not built.exists():
        if not (suite.CACHE / f"package-{suite.PACKAGE_VERSION}.tgz").exists() and shutil.which("npm") is None:
            pytest.skip(f"librdkafka's suite is not cached ({suite.CACHE}) and npm is missing to fetch it")
        if shutil.which("make") is None or shutil.which("g++") is None:
            pytest.skip("building librdkafka's test-runner needs make, gcc and g++")
    try:
        return suite.build()
    except suite.Unavailable as exc:           # npm cannot reach the registry, say; a failed build fails
        pytest.skip(f"librdkafka's suite could not be fetched: {exc}")


def test_the_catalogue_reads_every_test_of_the_suite(runner):
    tests = suite.catalogue(runner.parent.parent)
    assert len(tests) > 150 and "0001" in tests and "0081" in tests
    assert suite.plan("0001", tests["0001"], (4, 0, 0, 0)) == ("run", "default")
    assert suite.plan("0009", tests["0009"], (4, 0, 0, 0))[0] == "local"
    assert suite.plan("0171", tests["0171"], (4, 0, 0, 0)) == ("n/a", suite.SHARE_CONSUMERS)


def test_the_known_passing_subset_passes(runner):
    results = suite.run(list(suite.SUBSET), cluster=False, timeout=240, kafka_version=suite.KAFKA_VERSION,
                        run_local=False)
    failed = {r["test"]: r["reason"] for r in results if r["verdict"] != "passed"}
    assert failed == {}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_sample_passes_over_sasl(runner, mechanism):
    # The clients authenticate as the suite's user on a SASL_PLAINTEXT listener (`--sasl`): a
    # producer and consumer test and the idempotent producer's.
    pytest.importorskip("confluent_kafka", reason="the harness makes the SASL user with confluent-kafka")
    results = suite.run(["0001", "0090"], cluster=False, timeout=240, kafka_version=suite.KAFKA_VERSION,
                        run_local=False, sasl=mechanism)
    assert [(r["test"], r["verdict"], r["reason"]) for r in results] == [("0001", "passed", ""), ("0090", "passed", "")]


def test_consumer_txn_0098_runs_its_java_producer_too(runner):
    # 0098 consumer_txn produces with Kafka's Java producer (tests/java/TransactionProducerCli) and
    # then with librdkafka's, and reads read_committed / read_uncommitted; its topics need
    # replication factor 3. Without a KAFKA_PATH the Java half produced nothing and the test
    # failed ("Expected 5, got: 0"); the harness now hands it a stand-in tree of kafka-clients.
    if not os.environ.get("RDKAFKA_SUITE_LONG"):
        # About 4 minutes on two cores: on demand (RDKAFKA_SUITE_LONG=1, or `./dev rdkafka-suite
        # --tests 0098 --cluster`), not in CI's slow tier, which runs the known-passing subset.
        pytest.skip("a long case of the suite: set RDKAFKA_SUITE_LONG=1 to run it")
    if suite.java_kafka_path(suite.CACHE) is None:
        pytest.skip("needs java, javac and the kafka-clients jars (tests/interop/test_interop_jvm.py)")
    results = suite.run(["0098"], cluster=True, timeout=420, kafka_version=suite.KAFKA_VERSION, run_local=False)
    assert [(r["test"], r["verdict"], r["reason"]) for r in results] == [("0098", "passed", "")]
