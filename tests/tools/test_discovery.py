"""One way to find partitions: the command line (`partition_dirs`), the Spark data source and
the fleet audit (`discover`) all come from storage.inspect.discovery.  Before, the Spark side
had its own copy with its own idea of what a partition dir is."""
import glob
import os

import pytest

from storage.inspect import discovery

TESTDATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


def _real_log_dirs():
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(TESTDATA, "kafka-real", "*", "@*", "*", "*-*"))
                  if discovery.parse_partition_dir(os.path.basename(p)) and os.path.isdir(p))


@pytest.mark.parametrize("log_dir", sorted(set(_real_log_dirs())))
def test_command_line_and_spark_find_the_same_partitions_in_real_kafka_dirs(log_dir):
    cli = {(topic, partition, path) for _, topic, partition, path in discovery.partition_dirs(log_dir)}
    spark = {(ref.topic, ref.partition, ref.path) for ref in discovery.discover(log_dir)}
    assert cli and cli == spark


def test_both_skip_kafka_leftover_dirs_and_agree_on_a_partition_dir(tmp_path):
    for name in ("orders-0", "orders-1", "orders-2.abc-delete", "orders-0.abc-future", "not a partition"):
        (tmp_path / name).mkdir()
    (tmp_path / "orders-0" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "orders-0" / "00000000000000000000.log.deleted").write_bytes(b"x")
    found = [(t, p) for _, t, p, _ in discovery.partition_dirs(str(tmp_path))]
    assert found == [("orders", 0), ("orders", 1)]
    assert [(r.topic, r.partition) for r in discovery.discover(str(tmp_path))] == found
    one = str(tmp_path / "orders-0")
    assert [(t, p, d) for _, t, p, d in discovery.partition_dirs(one)] == [("orders", 0, one)]
    [ref] = discovery.discover(one)
    assert (ref.log_dir, ref.topic, ref.partition) == (str(tmp_path), "orders", 0)
    assert [os.path.basename(s.path) for s in ref.segments] == ["00000000000000000000.log"]


def test_the_epoch_checkpoint_reader_names_what_is_wrong(tmp_path):
    assert discovery.read_epoch_checkpoint(str(tmp_path)) == (None, None)
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n5 40\n")
    assert discovery.read_epoch_checkpoint(str(tmp_path)) == ([(0, 0), (5, 40)], None)
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n")
    pairs, why = discovery.read_epoch_checkpoint(str(tmp_path))
    assert pairs is None and "expected 2 entries but found 1" in why
