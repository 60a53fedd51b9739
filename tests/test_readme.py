"""The README's Python examples run as written (paths redirected to a temporary directory)."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples():
    assert len(python_blocks()) >= 2


def test_api_tour_runs(tmp_path, capsys):
    tour = python_blocks()[0].replace('"/data/', f'"{tmp_path}/')
    namespace = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    assert namespace["info"].first_offset == 0 and namespace["info"].last_offset == 2
    assert namespace["log"].log_end_offset == 100
    assert "trace" in capsys.readouterr().out


def test_seam_example_runs(tmp_path):
    from storage import LogConfig, PartitionLog, errors

    log = PartitionLog.open(tmp_path / "t-0", LogConfig(fsync=False))
    namespace = {"log": log}
    with pytest.raises(errors.StorageIOError):
        exec(compile(python_blocks()[1], "README.md", "exec"), namespace)
    assert log.log_end_offset == 0
    log.close()
