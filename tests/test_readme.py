"""The README's and the guides' Python examples run as written (paths redirected to a temporary
directory), and every link between them lands on a file and a heading that exist.

The README is the front page; the guides and the reference are in docs/*.md. An example is found
by a string only it contains, wherever it now lives, so moving text between the files keeps
every check.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def documents() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(path: Path | None = None) -> list[tuple[str, str]]:
    """(code, file name) of every ```python block of `path`, or of the README and every guide."""
    paths = [path] if path else documents()
    return [(code, p.name) for p in paths for code in re.findall(r"```python\n(.*?)```", p.read_text(), re.S)]


def block(containing: str) -> str:
    (found,) = [code for code, _ in python_blocks() if containing in code]
    return found


def test_readme_has_examples():
    assert len(python_blocks(README)) >= 1 and len(python_blocks()) >= 10


def test_readme_is_a_front_page():
    """What it is, the two commands, the map of the guides: short, the rest is in docs/."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "./dev demo" in text and "./dev test" in text


def test_api_tour_runs(tmp_path, capsys):
    tour = block("# Leader side: offsets are assigned").replace('"/data/', f'"{tmp_path}/')
    namespace = {}
    exec(compile(tour, "<example>", "exec"), namespace)
    assert namespace["info"].first_offset == 0 and namespace["info"].last_offset == 2
    assert namespace["log"].log_end_offset == 100
    assert "trace" in capsys.readouterr().out


def test_seam_example_runs(tmp_path):
    from storage import LogConfig, PartitionLog
    from storage.core import errors

    log = PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False))
    namespace = {"log": log}
    with pytest.raises(errors.LogDirOfflineError):
        exec(compile(block("class FullDisk"), "<example>", "exec"), namespace)
    assert log.log_end_offset == 0
    with pytest.raises(errors.LogDirOfflineError):   # offline: released, nothing written
        log.close()


def test_logdir_example_runs(tmp_path):
    from storage import LogConfig, LogDir

    exec(compile(block("with LogDir.open(\"/data/broker-1\"").replace('"/data/', f'"{tmp_path}/'), "<example>", "exec"), {})
    with LogDir.open(tmp_path / "broker-1", LogConfig(fsync=False)) as logdir:
        assert logdir.had_clean_shutdown
        orders = logdir.partition("orders", 0)
        assert orders.log_end_offset == 2 and orders.recovery_point == 2
        assert [tuple(e) for e in orders.epoch_cache.entries] == [(5, 0)]


def test_replication_example_runs(tmp_path):
    from storage.core.errors import Errors

    namespace = {}
    exec(compile(block("ReplicaManager(").replace('"/data/', f'"{tmp_path}/'), "<example>", "exec"), namespace)
    assert namespace["answer"].error_code == Errors.NONE and namespace["answer"].base_offset == 0
    namespace["broker"].shutdown()
    namespace["controller"].close()


def test_crash_injection_example_runs(tmp_path):
    code = block("SimFS(").replace('"/tmp/crash-test"', repr(str(tmp_path / "crash-test")))
    namespace = {}
    exec(compile(code, "<example>", "exec"), namespace)
    log = namespace["logdir"].partition("orders", 0)
    assert [r.value for b in log.batches() for r in b.records()] == [b"kept"]   # mode "a": the unflushed append is gone
    namespace["logdir"].close()


def test_quick_start_runs(tmp_path, capsys):
    code = block("quick.partition(\"orders\", 0)").replace('"/data/kafka-logs"', repr(str(tmp_path)))
    exec(compile(code, "<example>", "exec"), {})
    assert "[b'first', b'second']" in capsys.readouterr().out
    from storage.cli import main

    assert main(["verify", str(tmp_path)]) == 0


def slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def headings(path: Path) -> set[str]:
    prose = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.*)$", prose, re.M)}


def dead_links(path: Path) -> list[str]:
    """Every relative link of `path` (outside code) that names no file, or no heading of it."""
    prose = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    dead = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"^[a-z]+:", target):
            continue
        name, _, anchor = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in headings(linked)):
            dead.append(f"{path.name}: {target}")
    return dead


def test_every_link_between_the_readme_and_the_guides_lands():
    """A moved section must not leave a dead link, in the README or in any guide."""
    assert [d for p in documents() for d in dead_links(p)] == []
    assert len(re.findall(r"\]\(docs/", README.read_text())) >= 10


def test_a_dead_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Real heading\n")
    page.write_text("# Page\n[a](#page) [b](other.md#real-heading) [c](other.md#gone) [d](#nowhere) [e](missing.md)\n"
                    "```\n[f](#inside-code)\n```\n")
    assert dead_links(page) == ["page.md: other.md#gone", "page.md: #nowhere", "page.md: missing.md"]


def test_the_readme_maps_every_guide():
    """Every file of docs/ is reachable from the README's map of the guides."""
    linked = {m for m in re.findall(r"\]\(docs/([^)#]+)", README.read_text())}
    assert linked == {p.name for p in (ROOT / "docs").glob("*.md")}


def test_idempotent_producer_example_runs(tmp_path, capsys):
    namespace = {}
    exec(compile(block("retry.duplicate").replace('"/data/', f'"{tmp_path}/'), "<example>", "exec"), namespace)
    out = capsys.readouterr().out
    assert "sequence 5 does not follow the last sequence 1" in out and out.strip().endswith("1 1")


def test_transactions_example_runs(tmp_path, capsys):
    namespace = {}
    exec(compile(block("append_txn_marker(3").replace('"/data/', f'"{tmp_path}/'), "<example>", "exec"), namespace)
    out = capsys.readouterr().out.split("\n")
    assert out[:3] == ["0", "4", "[AbortedTxn(producer_id=3, first_offset=0, last_offset=3, last_stable_offset=4)]"]
    assert len(bytes(namespace["committed"])) > 0


def test_retention_example_runs(tmp_path):
    exec(compile(block("logdir.cleanup_logs()").replace('"/data/', f'"{tmp_path}/'), "<example>", "exec"), {})


def test_compaction_example_runs(tmp_path):
    namespace = {}
    exec(compile(block("changelog = LogConfig(").replace('"/data/', f'"{tmp_path}/'), "<example>", "exec"), namespace)
    stats = namespace["stats"]
    assert stats.first_dirty_offset == 0 and stats.end_offset == 0     # the active segment is not cleaned
    assert namespace["log"].config.compacts


def test_batch_columns_example_runs(tmp_path):
    example = block("batch_columns(log.read(0").replace('"/data/', f'"{tmp_path}/')
    namespace = {}
    exec(compile(example, "<example>", "exec"), namespace)
    assert namespace["next_offset"] == 1000 and list(namespace["cols"].record_count) == [100] * 10
    assert list(namespace["audit"].crc_valid) == [1] * 9 + [0]
