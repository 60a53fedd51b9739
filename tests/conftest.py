import os
import tempfile
from pathlib import Path

import pytest

from storage import LogConfig, PartitionLog
from storage.wire.metadata import CHECK_ENV

# The checking mode of the change-driven metadata publication (storage/wire/metadata.py,
# Publication): every publication skipped as unchanged compares anyway, in this process and in
# the controller and broker processes the tests start (they inherit the environment); one that
# finds records is a change Controller.changes did not count, written to this directory.
METADATA_CHECK_DIR = os.environ.setdefault(CHECK_ENV, tempfile.mkdtemp(prefix="metadata-skips-"))


@pytest.fixture(autouse=True)
def metadata_changes_counted():
    """Fails the test during which a controller (in-process or a process it started) skipped
    metadata records it should have published."""
    before = set(os.listdir(METADATA_CHECK_DIR)) if os.path.isdir(METADATA_CHECK_DIR) else set()
    yield
    after = set(os.listdir(METADATA_CHECK_DIR)) if os.path.isdir(METADATA_CHECK_DIR) else set()
    new = sorted(after - before)
    if new:
        text = "".join(Path(METADATA_CHECK_DIR, name).read_text() for name in new)
        pytest.fail(f"metadata changes not counted (Controller.changes):\n{text}")

# Real Kafka files (kafka-real/) and batches written by Kafka's own classes (kafka-jvm-generated/),
# shipped with the tests: each folder's PROVENANCE.md says where every file comes from.
TESTDATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def small_config():
    """Small segments and a small index interval, fsync off: many rolls and index entries."""
    return LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096, fsync=False)


@pytest.fixture
def make_log(tmp_path, small_config):
    opened = []

    def make(name="topic-0", config=None, **kwargs):
        log = PartitionLog.open(tmp_path / name, config or small_config, **kwargs)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()
