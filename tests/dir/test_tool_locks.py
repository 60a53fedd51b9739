"""Offline tools against a live log dir: every tool that writes takes the dir's `.lock` (as a
broker does) and refuses a dir another process holds, with one line naming the holder and
nothing changed; the read-only tools keep working on it.

The live dir is held by a child process (a LogDir open in it, or a bare flock as Kafka's
broker takes one) so that the lock is another process's, as in production."""
import os
import subprocess
import sys
import textwrap

import pytest

from storage import LogConfig, LogDir

HOLDER = textwrap.dedent("""
    import sys
    from storage import LogConfig, LogDir
    logdir = LogDir.open(sys.argv[1], LogConfig(fsync=False))
    log = logdir.partition("t", 0)
    log.append_as_leader([b"more"], 1)
    log.flush()
    print("ready", flush=True)
    sys.stdin.read()
    logdir.close()
""")

KAFKA_HOLDER = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 0)                       # Kafka's .lock is empty
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)    # Java's FileChannel.tryLock: a POSIX lock
    print("ready", flush=True)
    sys.stdin.read()
""")


def _env():
    return {**os.environ, "PYTHONPATH": os.getcwd()}


@pytest.fixture
def log_dir(tmp_path):
    path = tmp_path / "broker"
    with LogDir.open(path, LogConfig(fsync=False)) as logdir:
        log = logdir.partition("t", 0)
        for i in range(5):
            log.append_as_leader([b"v%d" % i], 0)
        log.update_high_watermark(5)
    return path


@pytest.fixture
def held(log_dir):
    """The log dir, held by a child process until the test ends (stopped by its pid)."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(log_dir)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert child.stdout.readline().strip() == "ready"
        yield log_dir, child.pid
    finally:
        child.kill()
        child.wait(timeout=30)


def _files(path) -> dict:
    """Every file under `path`: its bytes and its modification time."""
    out = {}
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[full] = (f.read(), os.stat(full).st_mtime_ns)
    return out


def _tool(*argv):
    return subprocess.run([sys.executable, "-m", "storage", *map(str, argv)], capture_output=True, text=True,
                          timeout=120, env=_env())


@pytest.mark.parametrize("where", ["log dir", "partition dir"])
def test_recover_refuses_a_live_dir_naming_the_holder_and_changes_nothing(held, where):
    log_dir, pid = held
    before = _files(log_dir)
    out = _tool("recover", log_dir if where == "log dir" else log_dir / "t-0")
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"process {pid} " in lines[0] and str(log_dir) in lines[0] and "recover" in lines[0], lines
    assert "stopped broker" in lines[0]
    assert out.stdout == ""
    assert _files(log_dir) == before


def test_recover_refuses_a_kafka_brokers_lock_naming_its_holder(log_dir):
    """A Kafka broker holds its empty `.lock` with a POSIX lock (FileChannel.tryLock), which
    Linux keeps apart from flock: the tool takes both and names the holder from /proc/locks."""
    child = subprocess.Popen([sys.executable, "-c", KAFKA_HOLDER, str(log_dir / ".lock")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        before = _files(log_dir)
        out = _tool("recover", log_dir)
        assert out.returncode != 0
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert f"process {child.pid}" in out.stderr and str(log_dir) in out.stderr, out.stderr
        assert _files(log_dir) == before
    finally:
        child.kill()
        child.wait(timeout=30)


def test_read_only_tools_work_on_a_live_dir(held):
    log_dir, _pid = held
    before = _files(log_dir)
    assert _tool("verify", log_dir).returncode == 0
    epochs = _tool("epochs", log_dir, "t-0")
    assert epochs.returncode == 0, epochs.stderr
    dump = _tool("dump-log", "--files", log_dir / "t-0" / "00000000000000000000.log")
    assert dump.returncode == 0 and "baseOffset: 5" in dump.stdout, dump.stderr
    dry = _tool("recover", "--dry-run", log_dir)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert _files(log_dir) == before


def test_recover_runs_once_the_holder_is_gone_and_a_broker_then_names_the_tool(log_dir):
    out = _tool("recover", log_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    with LogDir.open(log_dir, LogConfig(fsync=False)) as logdir:
        assert logdir.partition("t", 0).log_end_offset == 5
        with open(log_dir / ".lock") as f:
            assert f.read().strip() == str(os.getpid())     # the holder writes its pid
