"""The native module is checked at import: missing, stale or foreign builds fail clearly."""
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import storage

ROOT = Path(storage.__file__).resolve().parent.parent


def _copy_tree(tmp_path, *, with_native=True, with_csrc=True, missing="_plog*.so"):
    # A copy under another package name: an editable install's import hook maps "storage.*"
    # back to the source tree, the copy must not be shadowed by it.
    target = tmp_path / "checkout"
    shutil.copytree(ROOT / "storage", target / "plogcopy",
                    ignore=shutil.ignore_patterns("__pycache__", *(() if with_native else (missing,))))
    if with_csrc:
        shutil.copytree(ROOT / "csrc", target / "csrc", ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _import_in(directory):
    env = {k: v for k, v in os.environ.items() if k != "PLOG_SKIP_STALE_CHECK"}
    return subprocess.run([sys.executable, "-c", "import plogcopy"], cwd=directory, env=env,
                          capture_output=True, text=True)


@pytest.mark.skipif(not glob.glob(str(ROOT / "storage" / "_plog*.so")) or not (ROOT / "csrc").is_dir(),
                    reason="needs a source checkout with an in-place (editable) build")
class TestBuildChecks:
    def test_fresh_build_imports(self, tmp_path):
        result = _import_in(_copy_tree(tmp_path))
        assert result.returncode == 0, result.stderr

    @pytest.mark.parametrize("module", ["_plog", "_pyrecords"])
    def test_missing_build(self, tmp_path, module):
        result = _import_in(_copy_tree(tmp_path, with_native=False, missing=f"{module}*.so"))
        assert result.returncode != 0
        assert "NativeBuildError" in result.stderr and f"{module} is not built" in result.stderr
        assert "AttributeError" not in result.stderr

    @pytest.mark.parametrize("source", ["batch.c", "pyrecords.c"])
    def test_stale_build(self, tmp_path, source):
        checkout = _copy_tree(tmp_path)
        with open(checkout / "csrc" / source, "a") as f:
            f.write("\n/* edited after the build */\n")
        result = _import_in(checkout)
        assert result.returncode != 0 and "stale" in result.stderr and "pip install -e ." in result.stderr

    def test_version_mismatch(self, tmp_path):
        checkout = _copy_tree(tmp_path, with_csrc=False)
        (checkout / "plogcopy" / "_version.py").write_text('__version__ = "9.9.9"\n')
        result = _import_in(checkout)
        assert result.returncode != 0 and "built for version" in result.stderr


def test_version_string_embeds_package_version():
    from storage.core._native import ffi, lib

    assert ffi.string(lib.plog_version()).decode().startswith(storage.__version__ + "+")


def test_every_error_code_of_the_header_has_its_own_text():
    """plog_strerror names every PLOG_E* code plog.h defines (PLOG_EPRODUCER and PLOG_ECLOCK
    were 'unknown error'), each with a text of its own."""
    from storage.core import errors
    codes = {name: int(value) for name, value in
             re.findall(r"^#define (PLOG_E[A-Z]+)\s+(-1\d\d\d)\b", (ROOT / "csrc" / "plog.h").read_text(), re.M)}
    assert len(codes) > 15
    texts = {name: errors.error_text(code) for name, code in codes.items()}
    assert [name for name, text in texts.items() if text == "unknown error"] == []
    assert len(set(texts.values())) == len(texts)
