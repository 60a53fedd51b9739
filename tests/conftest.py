from pathlib import Path

import pytest

from storage import LogConfig, PartitionLog

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
