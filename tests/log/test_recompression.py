"""Kafka's LogValidator recompression (issue 32 item 2) in the engine: a log whose
compression_type names a codec rebuilds a producer batch of another codec in it before the
append; "producer" (the default) writes the batch as it came, byte for byte."""
import pytest

from storage import LogConfig, PartitionLog, Record, build_batch, iter_batches
from storage.core import errors

RECORDS = [Record(None, 5_000 + 3 * i, b"k%d" % i if i % 3 else None, b"value %d " % i * i,
                  [("h", b"%d" % i), ("null", None)] if i % 2 else []) for i in range(12)]


def _open(tmp_path, name, **config):
    return PartitionLog.open(tmp_path / name, LogConfig(fsync=False, **config))


def _batches(log):
    return list(iter_batches(bytes(log.read(0, 1 << 20))))


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("source", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_into_every_codec(tmp_path, source, target):
    log = _open(tmp_path, "t-0", compression_type=target)
    batch = build_batch(RECORDS, compression=source, base_offset=77, producer_id=3, producer_epoch=1,
                        base_sequence=0)
    info = log.append_as_leader(batch, 2)
    (stored,) = _batches(log)
    assert stored.compression == ("none" if target == "uncompressed" else target)
    assert (info.first_offset, info.last_offset, stored.base_offset) == (0, 11, 0)
    assert (stored.producer_id, stored.producer_epoch, stored.base_sequence) == (3, 1, 0)
    assert stored.partition_leader_epoch == 2 and stored.max_timestamp == 5_000 + 33
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in stored.records()] == \
        [(i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(RECORDS)]
    log.close()


def test_producer_keeps_the_batch_byte_for_byte(tmp_path):
    log = _open(tmp_path, "t-0")
    for codec in ("snappy", "lz4"):
        sent = build_batch(RECORDS, compression=codec, base_offset=log.log_end_offset)
        log.append_as_leader(sent, 0)
        assert _batches(log)[-1].to_bytes()[21:] == sent[21:]       # from the attributes on
    log.close()


def test_a_recompressed_idempotent_batch_is_still_deduplicated_and_transactional_kept(tmp_path):
    log = _open(tmp_path, "t-0", compression_type="zstd")
    batch = build_batch(RECORDS[:3], compression="gzip", producer_id=9, producer_epoch=0, base_sequence=0,
                        is_transactional=True)
    first = log.append_as_leader(batch, 0)
    again = log.append_as_leader(batch, 0)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    (stored,) = _batches(log)
    assert stored.compression == "zstd" and stored.is_transactional
    log.close()


def test_a_corrupt_batch_is_refused_before_its_records_are_read(tmp_path):
    log = _open(tmp_path, "t-0", compression_type="lz4")
    batch = bytearray(build_batch(RECORDS, compression="gzip"))
    batch[-3] ^= 0xFF
    with pytest.raises(errors.CorruptRecordError, match="CRC"):
        log.append_as_leader(bytes(batch), 0)
    assert log.log_end_offset == 0
    log.close()


def test_the_level_is_the_topics(tmp_path):
    records = [Record(None, 1, None, b"".join(b"%d," % j for j in range(i, i + 3000))) for i in range(30)]
    sizes = {}
    for level in (1, 19):
        log = _open(tmp_path, f"l{level}-0", compression_type="zstd", compression_zstd_level=level)
        log.append_as_leader(build_batch(records), 0)
        sizes[level] = _batches(log)[0].size_bytes
        log.close()
    assert sizes[19] < sizes[1]
