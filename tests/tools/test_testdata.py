"""Real Kafka files (tests/data): decode like kafka-python, match the facts in
PROVENANCE.md, and rebuild Kafka's indexes byte for byte.

Layout (see kafka-real/PROVENANCE.md and kafka-jvm-generated/PROVENANCE.md):
  kafka-real/            segments written by real brokers (v2, gzip, legacy v1 from kafka-go
                         fetch fixtures, KRaft __cluster_metadata logs with control batches,
                         two complete .log/.index/.timeindex triples);
  kafka-jvm-generated/   v2 zstd/lz4/snappy/gzip segments written by kafka-clients 3.9.1.
"""
from __future__ import annotations

import shutil
import struct
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatch
from kafka.record.memory_records import MemoryRecords

import storage

TESTDATA = Path(__file__).resolve().parents[1] / "data"

REAL = TESTDATA / "kafka-real"
JVM = TESTDATA / "kafka-jvm-generated"
CODEC_ID = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

LOG_FILES = sorted(list(REAL.rglob("*.log")) + list(JVM.rglob("*.log")))


def rel(path: Path) -> str:
    return path.relative_to(TESTDATA).as_posix()


def log_param(path: Path):
    return pytest.param(path, id=rel(path))


# ---- decoding, record for record, like kafka-python ---------------------------------------------

def kp_decode(data: bytes):
    """kafka-python's view: (batch object, validate_crc(), [records])."""
    out = []
    for batch in MemoryRecords(data):
        crc_ok = batch.validate_crc()               # before iteration (it asserts so)
        out.append((batch, crc_ok, list(batch)))
    return out


def rec_tuple(r):
    timestamp = r.timestamp
    if timestamp is None:    # kafka-python: magic 0 has no timestamp; ours says NO_TIMESTAMP (-1)
        timestamp = -1
    return (r.offset, timestamp, r.key, r.value, list(r.headers))


def test_there_are_log_files():
    assert len(LOG_FILES) == 24, [rel(p) for p in LOG_FILES]


@pytest.mark.parametrize("path", [log_param(p) for p in LOG_FILES])
def test_log_decodes_like_kafka_python(path):
    data = path.read_bytes()
    ours = list(storage.iter_batches(data, source=str(path)))
    theirs = kp_decode(data)
    assert len(ours) == len(theirs)
    # whole batches, zero-copy views that re-serialise to the file
    assert b"".join(b.to_bytes() for b in ours) == data
    assert sum(b.size_bytes for b in ours) == len(data)

    previous_last = -1
    for ob, (kb, kp_crc_ok, kp_records) in zip(ours, theirs):
        where = (rel(path), ob.position)
        assert ob.magic == kb.magic, where
        # PROVENANCE: every file is CRC-clean per kafka-python and Kafka's own classes.
        assert kp_crc_ok is True, where
        assert ob.is_valid() is True, where
        assert CODEC_ID[ob.compression] == kb.compression_type, where
        assert ob.size_bytes == kb.size_in_bytes, where
        our_records = [rec_tuple(r) for r in ob.records()]
        assert our_records == [rec_tuple(r) for r in kp_records], where
        assert ob.record_count == len(our_records), where

        if isinstance(kb, DefaultRecordBatch):
            assert ob.base_offset == kb.base_offset, where
            assert ob.last_offset == kb.last_offset, where
            assert ob.partition_leader_epoch == kb.leader_epoch, where
            assert ob.record_count == kb.records_count, where
            assert ob.crc == kb.crc, where
            assert ob.attributes == kb.attributes, where
            assert ob.base_timestamp == kb.first_timestamp, where
            assert ob.max_timestamp == kb.max_timestamp, where
            assert (ob.producer_id, ob.producer_epoch, ob.base_sequence) == \
                (kb.producer_id, kb.producer_epoch, kb.base_sequence), where
            assert ob.is_transactional == kb.is_transactional, where
            assert ob.is_control == kb.is_control_batch, where
            assert ob.timestamp_type == ("LogAppendTime" if kb.timestamp_type else "CreateTime"), where
            if kb.is_control_batch:
                # KRaft control records (LeaderChange, snapshot markers...): kafka-python wraps
                # them in ControlRecord (key parsed as version/type); ours returns the raw key,
                # already compared above.  Compare the parsed type too.
                for ours_r, kp_r in zip(ob.records(), kp_records):
                    assert struct.unpack(">hh", ours_r.key) == (kp_r.version, kp_r.type), where
        else:
            assert isinstance(kb, LegacyRecordBatch)
            # Deliberate differences for legacy (magic 0/1) entries:
            #  - kafka-python's `base_offset` of a legacy entry is the *wrapper's* offset, which for
            #    a compressed v1 wrapper is the absolute offset of its LAST inner record (Kafka's
            #    AbstractLegacyRecordBatch.lastOffset()); ours reports that as `last_offset` and
            #    gives the first inner record's offset as `base_offset` (Kafka's baseOffset()).
            #  - legacy entries carry no partition leader epoch: ours says -1
            #    (NO_PARTITION_LEADER_EPOCH); kafka-python has no such attribute.
            #  - magic 0 has no timestamp: kafka-python says None, ours -1 (normalised above).
            assert ob.last_offset == kb.base_offset, where
            assert ob.base_offset == kp_records[0].offset, where
            assert ob.last_offset == kp_records[-1].offset, where
            assert ob.partition_leader_epoch == -1, where
            assert ob.crc == kb._crc, where
            assert ob.timestamp_type == ("NoTimestampType" if kb.timestamp_type is None else
                                         "LogAppendTime" if kb.timestamp_type else "CreateTime"), where
        # offsets strictly increase through the file, within and across batches
        offsets = [r[0] for r in our_records]
        assert offsets == sorted(set(offsets)) and offsets[0] > previous_last, where
        assert offsets[0] == ob.base_offset and offsets[-1] == ob.last_offset, where
        previous_last = offsets[-1]


# ---- the facts in PROVENANCE.md ----------------------------------------------------------------

class Facts(NamedTuple):
    size: int | None        # file bytes (None: not stated)
    batches: int
    records: int
    first: int | None       # kafka-python's base offset of the first batch ("offsets a..b")
    last: int | None        # last record offset
    magics: dict
    codecs: dict
    epochs: list            # sorted distinct partitionLeaderEpoch of the v2 batches
    control: int            # control batches


J = "Jeong-Rae__KafkaDemo/@441d190/kraft-combined-logs/__cluster_metadata-0/00000000000000000000.log"
BINAYA = "binaya-sharma__soc-streaming-detection/@7773d1f/kafka-data/auth_events-0"
COOLER = "cooler-SAI__go-KafkaProject/@edbccbe/kafka-data"
BERKAY = "berkayakcay__toy-node-log-collector/@3c85883/kafka-data"
KGO = "segmentio__kafka-go/@8b94ffa/extracted"
SEG = "00000000000000000000.log"

FACTS = {
    f"kafka-real/{J}": Facts(221482, 3068, 3072, 0, 3071, {2: 3068}, {"none": 3068}, [1, 2, 3, 5, 6], 5),
    f"kafka-real/{BERKAY}/topic-logx-001-0/{SEG}": Facts(10422, 17, 17, 0, 16, {2: 17}, {"gzip": 17}, [0], 0),
    f"kafka-real/{BERKAY}/topic-logx-001-1/{SEG}": Facts(12936, 16, 16, 0, 15, {2: 16}, {"gzip": 16}, [0], 0),
    f"kafka-real/{BERKAY}/topic-logx-001-2/{SEG}": Facts(10475, 17, 17, 0, 16, {2: 17}, {"gzip": 17}, [0], 0),
    f"kafka-real/{BINAYA}/{SEG}": Facts(1008982, 2273, 2273, 0, 2272, {2: 2273}, {"none": 2273}, [0], 0),
    f"kafka-real/christseng89__RealTime_Analysis/@6c28121/kafka-logs/__cluster_metadata-0/{SEG}":
        Facts(600, 6, 9, 0, 8, {2: 6}, {"none": 6}, [1, 2, 3, 4, 5], 5),
    f"kafka-real/{COOLER}/__cluster_metadata-0/{SEG}":
        Facts(195524, 2709, 2715, 0, 2714, {2: 2709}, {"none": 2709}, [1], 1),
    f"kafka-real/{COOLER}/my-topic-0/{SEG}": Facts(84, 1, 1, 0, 0, {2: 1}, {"none": 1}, [0], 0),
    f"kafka-real/{COOLER}/test-topic-0/{SEG}": Facts(0, 0, 0, None, None, {}, {}, [], 0),
    f"kafka-real/{KGO}/v1-v1/{SEG}": Facts(287, 4, 4, 0, 3, {1: 4}, {"none": 4}, [], 0),
    f"kafka-real/{KGO}/v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc/{SEG}":
        Facts(1647, 15, 20, 0, 19, {1: 7, 2: 8}, {"gzip": 7, "none": 8}, [0], 0),
    f"kafka-real/{KGO}/v1c-v1-v1c/{SEG}": Facts(492, 5, 6, 1, 5, {1: 5}, {"gzip": 3, "none": 2}, [], 0),
    f"kafka-real/{KGO}/v1c-v1c/{SEG}": Facts(346, 3, 4, 1, 3, {1: 3}, {"gzip": 3}, [], 0),
    f"kafka-real/{KGO}/v2-v2/{SEG}": Facts(302, 2, 4, 0, 3, {2: 2}, {"none": 2}, [0], 0),
    f"kafka-real/{KGO}/v2b-v1/{SEG}": Facts(293, 3, 4, 0, 3, {1: 2, 2: 1}, {"none": 3}, [0], 0),
    f"kafka-real/{KGO}/v2bc-v1/{SEG}": Facts(277, 3, 4, 0, 3, {1: 2, 2: 1}, {"gzip": 1, "none": 2}, [0], 0),
    f"kafka-real/{KGO}/v2bc-v1-v1c/{SEG}": Facts(414, 4, 6, 0, 5, {1: 3, 2: 1}, {"gzip": 2, "none": 2}, [0], 0),
    f"kafka-real/{KGO}/v2bc-v1c/{SEG}": Facts(265, 2, 4, 0, 3, {1: 1, 2: 1}, {"gzip": 2}, [0], 0),
    f"kafka-real/{KGO}/v2c-v2-v2c/{SEG}": Facts(422, 3, 6, 0, 5, {2: 3}, {"gzip": 2, "none": 1}, [0], 0),
    f"kafka-real/{KGO}/v2c-v2c/{SEG}": Facts(268, 2, 4, 0, 3, {2: 2}, {"gzip": 2}, [0], 0),
    "kafka-jvm-generated/zstd-4batches-epoch7-8/00000000000000001000.log":
        Facts(None, 4, 100, 1000, 1099, {2: 4}, {"zstd": 4}, [7, 8], 0),
    f"kafka-jvm-generated/lz4-2batches-epoch3-4/{SEG}": Facts(None, 2, 20, 0, 19, {2: 2}, {"lz4": 2}, [3, 4], 0),
    f"kafka-jvm-generated/snappy-2batches-epoch0-1/{SEG}": Facts(None, 2, 20, 0, 19, {2: 2}, {"snappy": 2}, [0, 1], 0),
    "kafka-jvm-generated/gzip-2batches-epoch2-3/00000000000000000042.log":
        Facts(None, 2, 20, 42, 61, {2: 2}, {"gzip": 2}, [2, 3], 0),
}


def test_every_log_file_has_documented_facts():
    assert sorted(FACTS) == sorted(rel(p) for p in LOG_FILES)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_provenance_facts(name):
    facts = FACTS[name]
    data = (TESTDATA / name).read_bytes()
    if facts.size is not None:
        assert len(data) == facts.size
    batches = list(storage.iter_batches(data))
    records = [r for b in batches for r in b.records()]
    assert len(batches) == facts.batches
    assert len(records) == sum(b.record_count for b in batches) == facts.records
    assert Counter(b.magic for b in batches) == Counter(facts.magics)
    assert Counter(b.compression for b in batches) == Counter(facts.codecs)
    assert sorted({b.partition_leader_epoch for b in batches if b.magic >= 2}) == facts.epochs
    assert sum(b.is_control for b in batches) == facts.control
    assert all(b.is_valid() for b in batches)
    if batches:
        # "offsets a..b" in PROVENANCE is kafka-python's first batch offset (for a v1 gzip wrapper
        # that is its last inner offset) .. the last record offset.
        legacy_wrapper = batches[0].magic < 2 and batches[0].compression != "none"
        assert (batches[0].last_offset if legacy_wrapper else batches[0].base_offset) == facts.first
        first_kp = next(iter(MemoryRecords(data))).base_offset
        assert first_kp == facts.first
        assert records[-1].offset == batches[-1].last_offset == facts.last
        # no gaps in any of these logs: record offsets are first record .. last
        assert [r.offset for r in records] == list(range(records[0].offset, facts.last + 1))


def test_jeong_rae_kraft_log_facts():
    """PROVENANCE: 3068 v2 batches, 3072 records, epochs 1,2,3,5,6 (4 skipped), 5 control
    batches, uncompressed, offsets 0..3071."""
    data = (REAL / J).read_bytes()
    batches = list(storage.iter_batches(data))
    assert len(batches) == 3068
    assert sum(b.record_count for b in batches) == 3072
    assert [b.partition_leader_epoch for b in batches] == sorted(b.partition_leader_epoch for b in batches)
    assert sorted({b.partition_leader_epoch for b in batches}) == [1, 2, 3, 5, 6]
    assert sum(b.is_control for b in batches) == 5
    assert {b.compression for b in batches} == {"none"}
    assert batches[0].base_offset == 0 and batches[-1].last_offset == 3071
    for a, b in zip(batches, batches[1:]):
        assert b.base_offset == a.last_offset + 1


def _read_checkpoint(path: Path) -> list[tuple[int, int]]:
    lines = path.read_text().splitlines()
    assert lines[0] == "0"                             # version
    count = int(lines[1])
    entries = [tuple(map(int, line.split())) for line in lines[2:]]
    assert len(entries) == count
    return entries


CHECKPOINTED = [p for p in LOG_FILES if (p.parent / "leader-epoch-checkpoint").exists() and p.stat().st_size]


@pytest.mark.parametrize("path", [log_param(p) for p in CHECKPOINTED])
def test_leader_epoch_checkpoint_matches_log(path):
    """PROVENANCE: the first batch of each partitionLeaderEpoch starts exactly at the
    checkpoint's start offset."""
    checkpoint = _read_checkpoint(path.parent / "leader-epoch-checkpoint")
    first_of_epoch = {}
    for batch in storage.iter_batches(path.read_bytes()):
        first_of_epoch.setdefault(batch.partition_leader_epoch, batch.base_offset)
    assert sorted(first_of_epoch.items()) == checkpoint


def test_jeong_rae_later_checkpoint_extends_earlier():
    early = _read_checkpoint(REAL / "Jeong-Rae__KafkaDemo/@441d190/kraft-combined-logs/__cluster_metadata-0"
                             / "leader-epoch-checkpoint")
    late = _read_checkpoint(REAL / "Jeong-Rae__KafkaDemo/@49e9463/kraft-combined-logs/__cluster_metadata-0"
                            / "leader-epoch-checkpoint")
    assert early == [(1, 0), (2, 298), (3, 354), (5, 711), (6, 712)]
    assert len(late) == 21 and late[:5] == early
    assert [e for e, _ in late] == sorted({e for e, _ in late})
    assert [o for _, o in late] == sorted(o for _, o in late)


# ---- kafka-jvm-generated: exact record contents ------------------------------------------------

JVM_CASES = [
    # dir, codec, base offset, batches, records per batch, epoch per batch
    ("zstd-4batches-epoch7-8", "zstd", 1000, 4, 25, [7, 7, 8, 8]),
    ("lz4-2batches-epoch3-4", "lz4", 0, 2, 10, [3, 4]),
    ("snappy-2batches-epoch0-1", "snappy", 0, 2, 10, [0, 1]),
    ("gzip-2batches-epoch2-3", "gzip", 42, 2, 10, [2, 3]),
]


def jvm_expected_record(o: int):
    """PROVENANCE: key `key-<o>` (null when o%5==4), value {"offset":o,"filler":"x"*40}
    (compact JSON, no spaces), header h=v<o> when o%3==0, CreateTime 1700000000000+10*o."""
    key = None if o % 5 == 4 else f"key-{o}".encode()
    value = ('{"offset":%d,"filler":"%s"}' % (o, "x" * 40)).encode()
    headers = [("h", f"v{o}".encode())] if o % 3 == 0 else []
    return (o, 1_700_000_000_000 + 10 * o, key, value, headers)


@pytest.mark.parametrize("case", JVM_CASES, ids=[c[0] for c in JVM_CASES])
def test_jvm_generated_contents(case):
    name, codec, base, n_batches, per_batch, epochs = case
    path = JVM / name / f"{base:020d}.log"
    data = path.read_bytes()
    batches = list(storage.iter_batches(data))
    assert [b.partition_leader_epoch for b in batches] == epochs
    assert [b.base_offset for b in batches] == [base + i * per_batch for i in range(n_batches)]
    assert [b.last_offset for b in batches] == [base + (i + 1) * per_batch - 1 for i in range(n_batches)]
    for b in batches:
        assert b.magic == 2 and b.compression == codec and b.is_valid()
        assert b.record_count == per_batch
        assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1)
        assert not b.is_transactional and not b.is_control
        assert b.timestamp_type == "CreateTime"
        assert b.base_timestamp == 1_700_000_000_000 + 10 * b.base_offset
        assert b.max_timestamp == 1_700_000_000_000 + 10 * b.last_offset
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for b in batches for r in b.records()]
    assert got == [jvm_expected_record(o) for o in range(base, base + n_batches * per_batch)]
    # and kafka-python sees the same
    theirs = [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
              for b in MemoryRecords(data) for r in b]
    assert theirs == got


# ---- indexes: byte-exact against Kafka's own files ---------------------------------------------

def parse_offset_index(data: bytes, base: int = 0) -> list[tuple[int, int]]:
    """Kafka's .index: 8-byte entries (relative offset int32, position int32), big-endian."""
    assert len(data) % 8 == 0
    return [(base + rel_offset, position) for rel_offset, position in struct.iter_unpack(">ii", data)]


def parse_time_index(data: bytes, base: int = 0) -> list[tuple[int, int]]:
    """Kafka's .timeindex: 12-byte entries (timestamp int64, relative offset int32)."""
    assert len(data) % 12 == 0
    return [(timestamp, base + rel_offset) for timestamp, rel_offset in struct.iter_unpack(">qi", data)]


class Triple(NamedTuple):
    dir: str
    index_entries: int
    time_entries: int
    last_index: tuple | None
    last_time: tuple | None
    end_offset: int


TRIPLES = [
    # PROVENANCE: complete segment triples (clean shutdown): 227/228 and 47/48 entries.
    Triple(BINAYA, 227, 228, (2270, 1007650), (1758808401063, 2272), 2273),
    Triple(f"{COOLER}/__cluster_metadata-0", 47, 48, (2678, 192970), (1741887615571, 2714), 2715),
    # the same broker's tiny partitions: one batch (no offset-index entry, one time-index
    # entry written at close) and an empty segment (three empty files)
    Triple(f"{COOLER}/my-topic-0", 0, 1, None, (1741886578593, 0), 1),
    Triple(f"{COOLER}/test-topic-0", 0, 0, None, None, 0),
]


def _copy_partition(src: Path, tmp_path: Path, suffixes=(".log",)) -> Path:
    dest = tmp_path / src.name
    dest.mkdir()
    for suffix in suffixes:
        shutil.copyfile(src / f"00000000000000000000{suffix}", dest / f"00000000000000000000{suffix}")
    return dest


@pytest.mark.parametrize("triple", TRIPLES, ids=[t.dir for t in TRIPLES])
def test_kafka_index_files_follow_kafkas_rule(triple):
    """Kafka's own files: an offset-index entry is (batch.lastOffset, position of that batch),
    written when more than index.interval.bytes (4096) accumulated since the previous one;
    a time-index entry is (max timestamp so far, last offset of its batch)."""
    src = REAL / triple.dir
    kafka_index = parse_offset_index((src / "00000000000000000000.index").read_bytes())
    kafka_time = parse_time_index((src / "00000000000000000000.timeindex").read_bytes())
    assert (len(kafka_index), len(kafka_time)) == (triple.index_entries, triple.time_entries)
    assert (kafka_index[-1] if kafka_index else None) == triple.last_index
    assert (kafka_time[-1] if kafka_time else None) == triple.last_time
    batches = {b.position: b for b in storage.iter_batches((src / "00000000000000000000.log").read_bytes())}
    previous = 0
    for offset, position in kafka_index:
        assert batches[position].last_offset == offset
        assert position - previous > 4096
        previous = position
    last_offsets = {b.last_offset: b for b in batches.values()}
    for timestamp, offset in kafka_time:
        assert last_offsets[offset].max_timestamp == timestamp


@pytest.mark.parametrize("triple", TRIPLES, ids=[t.dir for t in TRIPLES])
def test_recovery_rebuilds_kafkas_indexes_byte_for_byte(triple, tmp_path):
    src = REAL / triple.dir
    kafka_index_bytes = (src / "00000000000000000000.index").read_bytes()
    kafka_time_bytes = (src / "00000000000000000000.timeindex").read_bytes()
    part = _copy_partition(src, tmp_path)              # the .log only: indexes must be rebuilt
    log = storage.PartitionLog.open(part, storage.LogConfig(fsync=False))   # unclean: full recovery
    try:
        assert log.recovery_report == []
        assert len(log.segments) == 1
        assert log.log_end_offset == triple.end_offset
        segment = log.segments[0]
        assert segment.offset_index_entries() == parse_offset_index(kafka_index_bytes)
        # Kafka's LogSegment.recover() ends with timeIndex.maybeAppend(maxTimestampSoFar,
        # offsetOfMaxTimestampSoFar, skipFullCheck=true) -- the same final entry a clean close
        # appends -- so right after recovery our entries already equal Kafka's whole file
        # (the interval entries plus that extra final one).
        assert segment.time_index_entries() == parse_time_index(kafka_time_bytes)
        # the rebuilt index serves reads: a read at each indexed offset starts at that batch
        for offset, _ in segment.offset_index_entries()[::7]:
            first = next(storage.iter_batches(log.read(offset, 1)))
            assert first.base_offset <= offset <= first.last_offset
    finally:
        log.close()
    assert (part / "00000000000000000000.index").read_bytes() == kafka_index_bytes
    assert (part / "00000000000000000000.timeindex").read_bytes() == kafka_time_bytes
    assert (part / "00000000000000000000.log").read_bytes() == (src / "00000000000000000000.log").read_bytes()


@pytest.mark.parametrize("triple", TRIPLES, ids=[t.dir for t in TRIPLES])
def test_clean_open_uses_kafkas_indexes(triple, tmp_path):
    """A clean open (Kafka wrote .kafka_cleanshutdown) loads Kafka's index files as they are;
    closing again leaves all three files unchanged."""
    src = REAL / triple.dir
    part = _copy_partition(src, tmp_path, (".log", ".index", ".timeindex"))
    log = storage.PartitionLog.open(part, storage.LogConfig(fsync=False), clean_shutdown=True)
    try:
        assert log.log_end_offset == triple.end_offset
        segment = log.segments[0]
        assert segment.offset_index_entries() == parse_offset_index((src / "00000000000000000000.index").read_bytes())
        assert segment.time_index_entries() == parse_time_index((src / "00000000000000000000.timeindex").read_bytes())
        for offset in range(0, triple.end_offset, max(1, triple.end_offset // 37)):
            first = next(storage.iter_batches(log.read(offset, 1)))
            assert first.base_offset <= offset <= first.last_offset
    finally:
        log.close()
    for suffix in (".log", ".index", ".timeindex"):
        name = f"00000000000000000000{suffix}"
        assert (part / name).read_bytes() == (src / name).read_bytes(), name


def test_jeong_rae_standalone_index_files_are_well_formed():
    """@49e9463 ships a trimmed .index (6648 entries) and .timeindex (6649) whose .log is
    absent: parse them as Kafka index files."""
    d = REAL / "Jeong-Rae__KafkaDemo/@49e9463/kraft-combined-logs/__cluster_metadata-0"
    assert not (d / "00000000000000000000.log").exists()
    raw_index = (d / "00000000000000000000.index").read_bytes()
    raw_time = (d / "00000000000000000000.timeindex").read_bytes()
    assert len(raw_index) == 53184 and len(raw_time) == 79788
    index = parse_offset_index(raw_index)
    times = parse_time_index(raw_time)
    assert len(index) == 6648 and len(times) == 6649
    assert index[-1] == (379857, 27294630)
    assert times[-1] == (1700324298419, 379858)
    # strictly increasing offsets and positions; relative offsets fit int32, positions >= 0
    assert index[0][0] > 0 and index[0][1] > 4096
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(index, index[1:]))
    # strictly increasing timestamps and offsets
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(times, times[1:]))
    assert all(0 <= t < 2**63 for t, _ in times)
    # no zero padding left (a trimmed, inactive-segment index), every entry a real one
    assert (0, 0) not in index and all(t > 0 for t, _ in times)
    # in this KRaft log every indexed batch also advanced the max timestamp, so the time index
    # names the same offsets as the offset index, plus the final close entry
    assert [o for o, _ in index] == [o for _, o in times[:-1]]
    assert times[-1][1] > index[-1][0]
