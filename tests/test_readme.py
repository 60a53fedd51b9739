"""The README's Python examples run as written (paths redirected to a temporary directory)."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def block(containing: str) -> str:
    (found,) = [b for b in python_blocks() if containing in b]
    return found


def test_readme_has_examples():
    assert len(python_blocks()) >= 3


def test_api_tour_runs(tmp_path, capsys):
    tour = block("# Leader side: offsets are assigned").replace('"/data/', f'"{tmp_path}/')
    namespace = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    assert namespace["info"].first_offset == 0 and namespace["info"].last_offset == 2
    assert namespace["log"].log_end_offset == 100
    assert "trace" in capsys.readouterr().out


def test_seam_example_runs(tmp_path):
    from storage import LogConfig, PartitionLog
    from storage.core import errors

    log = PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False))
    namespace = {"log": log}
    with pytest.raises(errors.LogDirOfflineError):
        exec(compile(block("class FullDisk"), "README.md", "exec"), namespace)
    assert log.log_end_offset == 0
    with pytest.raises(errors.LogDirOfflineError):   # offline: released, nothing written
        log.close()


def test_logdir_example_runs(tmp_path):
    from storage import LogConfig, LogDir

    exec(compile(block("with LogDir.open(\"/data/broker-1\"").replace('"/data/', f'"{tmp_path}/'), "README.md", "exec"), {})
    with LogDir.open(tmp_path / "broker-1", LogConfig(fsync=False)) as logdir:
        assert logdir.had_clean_shutdown
        orders = logdir.partition("orders", 0)
        assert orders.log_end_offset == 2 and orders.recovery_point == 2
        assert [tuple(e) for e in orders.epoch_cache.entries] == [(5, 0)]


def test_replication_example_runs(tmp_path):
    from storage.core.errors import Errors

    namespace = {}
    exec(compile(block("ReplicaManager(").replace('"/data/', f'"{tmp_path}/'), "README.md", "exec"), namespace)
    assert namespace["answer"].error_code == Errors.NONE and namespace["answer"].base_offset == 0
    namespace["broker"].shutdown()
    namespace["controller"].close()


def test_crash_injection_example_runs(tmp_path):
    code = block("SimFS(").replace('"/tmp/crash-test"', repr(str(tmp_path / "crash-test")))
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    log = namespace["logdir"].partition("orders", 0)
    assert [r.value for b in log.batches() for r in b.records()] == [b"kept"]   # mode "a": the unflushed append is gone
    namespace["logdir"].close()


def test_quick_start_runs(tmp_path, capsys):
    code = block("quick.partition(\"orders\", 0)").replace('"/data/kafka-logs"', repr(str(tmp_path)))
    exec(compile(code, "README.md", "exec"), {})
    assert "[b'first', b'second']" in capsys.readouterr().out
    from storage.cli import main

    assert main(["verify", str(tmp_path)]) == 0


def test_every_link_inside_the_readme_names_a_heading():
    """The README is guides then reference; a moved section must not leave a dead link."""
    def slug(title):
        return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")

    text = README.read_text()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    headings = {slug(h) for h in re.findall(r"^#{1,4} (.*)$", prose, re.M)}
    links = re.findall(r"\]\(#([^)]+)\)", prose)
    assert links and not [a for a in links if a not in headings]
    assert re.search(r"^## Guide: ", prose, re.M).start() < re.search(r"^## Reference$", prose, re.M).start()


def test_idempotent_producer_example_runs(tmp_path, capsys):
    namespace = {}
    exec(compile(block("retry.duplicate").replace('"/data/', f'"{tmp_path}/'), "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "sequence 5 does not follow the last sequence 1" in out and out.strip().endswith("1 1")


def test_transactions_example_runs(tmp_path, capsys):
    namespace = {}
    exec(compile(block("append_txn_marker(3").replace('"/data/', f'"{tmp_path}/'), "README.md", "exec"), namespace)
    out = capsys.readouterr().out.split("\n")
    assert out[:3] == ["0", "4", "[AbortedTxn(producer_id=3, first_offset=0, last_offset=3, last_stable_offset=4)]"]
    assert len(bytes(namespace["committed"])) > 0


def test_retention_example_runs(tmp_path):
    exec(compile(block("logdir.cleanup_logs()").replace('"/data/', f'"{tmp_path}/'), "README.md", "exec"), {})


def test_compaction_example_runs(tmp_path):
    namespace = {}
    exec(compile(block("changelog = LogConfig(").replace('"/data/', f'"{tmp_path}/'), "README.md", "exec"), namespace)
    stats = namespace["stats"]
    assert stats.first_dirty_offset == 0 and stats.end_offset == 0     # the active segment is not cleaned
    assert namespace["log"].config.compacts


def test_batch_columns_example_runs(tmp_path):
    example = block("batch_columns(log.read(0").replace('"/data/', f'"{tmp_path}/')
    namespace = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert namespace["next_offset"] == 1000 and list(namespace["cols"].record_count) == [100] * 10
    assert list(namespace["audit"].crc_valid) == [1] * 9 + [0]
