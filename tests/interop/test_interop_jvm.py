"""Interoperability with Apache Kafka's own Java record classes (slow tier).

A multi-segment `PartitionLog` is written with the Python API and every `.log` file is read
back by `tests/interop/jvm/KafkaRecordsCheck.java`, which uses kafka-clients 3.9.1:
`FileRecords.open(file, false).batches()`, `batch.ensureValid()` (size + CRC-32C) and, while
Kafka decompresses and parses every record, `record.ensureValid()`.  What Kafka reports must
equal what was appended, field for field: offsets (incl. a follower gap), partition leader
epochs, codec, timestamps (incl. out-of-order and defaulted ones), keys, values, headers
(null / empty values, duplicates, non-ASCII keys), producer id / epoch / sequences,
transactional and control flags (a COMMIT marker Kafka must deserialize), record counts, and
CRC and size equal to `storage.iter_batches`' view of the same bytes.

Sanity checks of the checker itself: segments written by kafka-clients
(tests/data/kafka-jvm-generated) validate and decode to the documented content,
and a segment with one flipped payload byte is rejected.

The jars come from the PyPI wheel `shigawire-apache-flink-libraries==2.0.0.post1` (pure zip;
pyflink/lib/ holds kafka-clients 3.9.1 and its codec jars), downloaded once with pip (hash
pinned) into $KPS_JAR_CACHE or ~/.cache/kafka-partition-storage/jars.  Without java/javac or
without the jars the module skips.  Run with:  python -m pytest -m slow tests/interop/test_interop_jvm.py
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

import storage
from storage import LogConfig, PartitionLog, Record

pytestmark = pytest.mark.slow

WHEEL_REQUIREMENT = "shigawire-apache-flink-libraries==2.0.0.post1"
WHEEL_SHA256 = "aaa65537d3f0c0ff279185d8243024f0efd95788ba044bf249ba0f40b69289cd"
JARS = ("kafka-clients.jar", "zstd-jni.jar", "lz4-java.jar", "snappy-java.jar", "slf4j-api.jar")
KAFKA_VERSION = "3.9.1"
JAVA_SOURCE = Path(__file__).resolve().parent / "jvm" / "KafkaRecordsCheck.java"
JVM_TESTDATA = Path(__file__).resolve().parents[1] / "data" / "kafka-jvm-generated"
TS = 1_700_000_000_000


# ---- jars, compilation and running the checker -------------------------------------------------

def jar_cache() -> Path:
    override = os.environ.get("KPS_JAR_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "kafka-partition-storage" / "jars"


def ensure_jars(cache: Path) -> list[Path]:
    """The five jars in `cache`, downloading and extracting the wheel when any is missing.
    Raises RuntimeError with a one-line reason when that fails."""
    jars = [cache / name for name in JARS]
    if all(j.is_file() for j in jars):
        return jars
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix="download-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(f"{WHEEL_REQUIREMENT} --hash=sha256:{WHEEL_SHA256}\n")
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
                 "--disable-pip-version-check", "-q", "-d", tmp, "-r", str(requirements)],
                capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"pip download of {WHEEL_REQUIREMENT} failed: {exc}") from exc
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode or not wheels:
            lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
            raise RuntimeError(f"pip download of {WHEEL_REQUIREMENT} failed: {lines[-1] if lines else proc.returncode}")
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                for jar in jars:
                    partial = jar.with_name(jar.name + ".part")
                    with wheel.open(f"pyflink/lib/{jar.name}") as src, open(partial, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    os.replace(partial, jar)
        except (KeyError, zipfile.BadZipFile, OSError) as exc:
            raise RuntimeError(f"cannot extract the Kafka jars from {wheels[0].name}: {exc}") from exc
    return jars


def java_major(tool: str) -> int:
    out = subprocess.run([tool, "-version"], capture_output=True, text=True, timeout=60)
    match = re.search(r'(?:javac |version ")(\d+)', out.stdout + out.stderr)
    return int(match.group(1)) if match else 0


class Checker:
    def __init__(self, classpath: str):
        self.classpath = classpath

    def run(self, paths, *, expect_ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["java", "-cp", self.classpath, "KafkaRecordsCheck", *map(str, paths)],
            capture_output=True, text=True, timeout=120)
        if expect_ok:
            errors = [line for line in proc.stderr.splitlines() if not line.startswith("SLF4J:")]
            assert proc.returncode == 0, "Kafka rejected the segment(s):\n" + "\n".join(errors)
        return proc

    def read(self, paths) -> list[dict]:
        """Kafka's view of each file: {path, size, batches: [...], end: (batches, bytes)}."""
        proc = self.run(paths)
        version, files = parse(proc.stdout)
        assert version == KAFKA_VERSION
        assert [f["path"] for f in files] == [str(p) for p in paths]
        return files


def jvm_classpath(tmp_path_factory, source: Path, purpose: str) -> str:
    """`source` compiled against the Kafka jars: the classpath to run it with.  Skips (with the
    reason) without a JDK 17+ or the jars."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not on PATH: {purpose} needs a JDK 17+")
        if java_major(tool) < 17:
            pytest.skip(f"{tool} is older than 17: {purpose} needs a JDK 17+")
    try:
        jars = ensure_jars(jar_cache())
    except RuntimeError as exc:
        pytest.skip(f"Kafka jars unavailable: {exc}")
    classes = tmp_path_factory.mktemp(source.stem)
    jar_path = os.pathsep.join(map(str, jars))
    proc = subprocess.run(["javac", "-d", str(classes), "-cp", jar_path, str(source)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}{proc.stderr}"
    return os.pathsep.join([str(classes), jar_path])


@pytest.fixture(scope="session")
def kafka(tmp_path_factory) -> Checker:
    return Checker(jvm_classpath(tmp_path_factory, JAVA_SOURCE, "the Kafka JVM interop test"))


# ---- parsing the checker's output --------------------------------------------------------------

def unhex(field: str) -> bytes | None:
    return None if field == "null" else bytes.fromhex(field)


def parse_headers(field: str) -> list:
    headers = []
    for item in filter(None, field.split(",")):
        key, value = item.split("=")
        headers.append((bytes.fromhex(key).decode(), unhex(value)))
    return headers


def parse(stdout: str):
    version, files = None, []
    for line in stdout.splitlines():
        kind, *f = line.split("\t")
        if kind == "VERSION":
            version = f[0]
        elif kind == "FILE":
            files.append({"path": f[0], "size": int(f[1]), "batches": [], "end": None})
        elif kind == "BATCH":
            files[-1]["batches"].append({
                "base_offset": int(f[0]), "last_offset": int(f[1]), "partition_leader_epoch": int(f[2]),
                "magic": int(f[3]), "compression": f[4], "timestamp_type": f[5],
                "is_transactional": f[6] == "true", "is_control": f[7] == "true",
                "producer_id": int(f[8]), "producer_epoch": int(f[9]), "base_sequence": int(f[10]),
                "last_sequence": int(f[11]), "max_timestamp": int(f[12]),
                "count": None if f[13] == "null" else int(f[13]), "size_bytes": int(f[14]), "crc": int(f[15]),
                "records": [], "control": []})
        elif kind == "RECORD":
            files[-1]["batches"][-1]["records"].append({
                "offset": int(f[0]), "timestamp": int(f[1]), "sequence": int(f[2]),
                "key": unhex(f[3]), "value": unhex(f[4]), "headers": parse_headers(f[5])})
        elif kind == "CONTROL":
            files[-1]["batches"][-1]["control"].append((int(f[0]), f[1], f[2]))
        elif kind == "END":
            files[-1]["end"] = (int(f[1]), int(f[2]))
        else:
            raise AssertionError(f"unexpected checker output line: {line!r}")
    return version, files


def our_view(path) -> list[dict]:
    """`storage.iter_batches` / `RecordBatch.records()` over the file, in the checker's shape."""
    out = []
    for b in storage.iter_batches(Path(path).read_bytes(), source=str(path)):
        seq = (lambda i: -1) if b.base_sequence == -1 else (lambda i, s=b.base_sequence: s + i)
        out.append({
            "base_offset": b.base_offset, "last_offset": b.last_offset,
            "partition_leader_epoch": b.partition_leader_epoch, "magic": b.magic, "compression": b.compression,
            "timestamp_type": b.timestamp_type, "is_transactional": b.is_transactional,
            "is_control": b.is_control, "producer_id": b.producer_id, "producer_epoch": b.producer_epoch,
            "base_sequence": b.base_sequence, "last_sequence": seq(b.last_offset_delta),
            "max_timestamp": b.max_timestamp, "count": b.record_count, "size_bytes": b.size_bytes, "crc": b.crc,
            "records": [{"offset": r.offset, "timestamp": r.timestamp, "sequence": seq(r.offset - b.base_offset),
                         "key": r.key, "value": r.value, "headers": list(r.headers)} for r in b.records()]})
    return out


def without(batch: dict, *keys) -> dict:
    return {k: v for k, v in batch.items() if k not in keys}


# ---- what we append, and what Kafka must then see -----------------------------------------------

class Within:
    """An expected timestamp taken from the clock during the append: equal to any int in [lo, hi]."""

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    def __eq__(self, other):
        return isinstance(other, int) and self.lo <= other <= self.hi

    def __repr__(self):
        return f"Within({self.lo}, {self.hi})"


def _b(value):
    return value.encode() if isinstance(value, str) else value


def expected_records(records, *, base_timestamp=None, now=None) -> list[tuple]:
    """(timestamp, key, value, headers) as Kafka must decode them, following build_batch's rules:
    records without a timestamp get the batch base timestamp (the explicit one, else the first
    record's timestamp, else the clock)."""
    specs = []
    for r in records:
        if isinstance(r, Record):
            specs.append((r.timestamp, r.key, r.value, r.headers))
        elif isinstance(r, tuple):
            key, value, *headers = r
            specs.append((None, key, value, headers[0] if headers else []))
        else:
            specs.append((None, None, r, []))
    base = base_timestamp if base_timestamp is not None else specs[0][0] if specs[0][0] is not None else now
    return [(base if ts is None else ts, _b(key), _b(value), [(k, _b(v)) for k, v in headers])
            for ts, key, value, headers in specs]


def expected_batch(records, *, base_offset, epoch, codec="none", producer_id=-1, producer_epoch=-1,
                   base_sequence=-1, transactional=False, control=False) -> dict:
    n = len(records)
    timestamps = [ts for ts, *_ in records]
    clock = [ts for ts in timestamps if isinstance(ts, Within)]
    return {
        "base_offset": base_offset, "last_offset": base_offset + n - 1, "partition_leader_epoch": epoch,
        "magic": 2, "compression": codec, "timestamp_type": "CreateTime", "is_transactional": transactional,
        "is_control": control, "producer_id": producer_id, "producer_epoch": producer_epoch,
        "base_sequence": base_sequence, "last_sequence": -1 if base_sequence < 0 else base_sequence + n - 1,
        "max_timestamp": clock[0] if clock else max(timestamps), "count": n,
        "records": [{"offset": base_offset + i, "timestamp": ts,
                     "sequence": -1 if base_sequence < 0 else base_sequence + i,
                     "key": key, "value": value, "headers": headers}
                    for i, (ts, key, value, headers) in enumerate(records)],
    }


class Writer:
    """Appends through the public API and records the batches Kafka must see."""

    def __init__(self, log: PartitionLog):
        self.log = log
        self.expected: list[dict] = []
        self.controls: dict[int, tuple] = {}       # offset -> (type, coordinator epoch) expected

    def leader(self, records, epoch: int, codec: str = "none"):
        before = int(time.time() * 1000)
        info = self.log.append_as_leader(records, epoch, compression=codec)
        now = Within(before, int(time.time() * 1000))
        expected = expected_records(records, now=now)
        assert (info.first_offset, info.last_offset) == (self.next_offset, self.next_offset + len(expected) - 1)
        self.expected.append(expected_batch(expected, base_offset=info.first_offset, epoch=epoch, codec=codec))

    def leader_batches(self, batches: list[tuple[list, dict]], epoch: int):
        """Prebuilt batches (records, build_batch kwargs), concatenated, appended as leader:
        Kafka must see our offsets and epoch, and the producer fields as built."""
        data = b"".join(storage.build_batch(records, **kwargs) for records, kwargs in batches)
        info = self.log.append_as_leader(data, epoch)
        offset = info.first_offset
        assert offset == self.next_offset
        for records, kwargs in batches:
            expected = expected_records(records, base_timestamp=kwargs.get("base_timestamp"))
            self.expected.append(expected_batch(
                expected, base_offset=offset, epoch=epoch, codec=kwargs.get("compression", "none"),
                producer_id=kwargs.get("producer_id", -1), producer_epoch=kwargs.get("producer_epoch", -1),
                base_sequence=kwargs.get("base_sequence", -1)))
            offset += len(expected)
        assert info.last_offset == offset - 1

    def follower(self, records, *, epoch: int, gap: int = 0, codec: str = "none", base_timestamp=None,
                 producer_id=-1, producer_epoch=-1, base_sequence=-1, transactional=False, control=False):
        base = self.next_offset + gap
        data = storage.build_batch(
            records, base_offset=base, partition_leader_epoch=epoch, compression=codec,
            base_timestamp=base_timestamp, producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=base_sequence, is_transactional=transactional, is_control=control)
        info = self.log.append_as_follower(data)
        assert info.first_offset == base
        self.expected.append(expected_batch(
            expected_records(records, base_timestamp=base_timestamp), base_offset=base, epoch=epoch, codec=codec,
            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
            transactional=transactional, control=control))

    @property
    def next_offset(self) -> int:
        return self.expected[-1]["last_offset"] + 1 if self.expected else 0


def filler(seed: int, n: int) -> bytes:
    """Deterministic, poorly compressible bytes."""
    out, x = bytearray(), seed * 2654435761 % 2**32 or 1
    while len(out) < n:
        x = (x * 1103515245 + 12345) % 2**31
        out += x.to_bytes(4, "big")
    return bytes(out[:n])


COMMIT = 1
COORDINATOR_EPOCH = 5


def write_log(directory: Path) -> tuple[list[str], Writer]:
    config = LogConfig(segment_bytes=2048, index_interval_bytes=128, fsync=False)
    log = PartitionLog.open(directory, config)
    w = Writer(log)
    # -- epoch 0: the three record forms and three of the codecs; timestamps from the clock
    w.leader([b"plain-0", b"", b"plain-2"], 0)
    w.leader([(b"k1", b"v1"), (None, b"null key"), (b"null value", None), (b"", b"empty key"),
              ("str-key", "str-value")], 0, "gzip")
    w.leader([
        Record(timestamp=TS + 500, key=b"a", value=b"x" * 300,
               headers=[("h1", b"1"), ("h-null", None), ("h-empty", b""), ("h1", b"duplicate"),
                        ("ключ-ü", b"\x00\xff")]),
        Record(timestamp=TS + 100, key=None, value=None, headers=[("only-null", None)]),  # before the base
        Record(timestamp=None, key=b"no timestamp", value=b"gets the base timestamp"),
        Record(timestamp=TS + 900, key=b"max", value=filler(1, 400)),
    ], 0, "zstd")
    # -- epoch 1: (key, value, headers) tuples, then a transaction replicated from a leader
    w.leader([(b"k", b"v", [("trace", b"abc")]), (b"k2", None, [("n", None)]), (None, b"v3", [])], 1)
    w.follower([Record(timestamp=TS + 2000 + 7 * i, key=f"txn-{i}".encode(), value=filler(i, 60 + i),
                       headers=[("txn", str(i).encode())]) for i in range(4)],
               epoch=1, codec="gzip", base_timestamp=TS + 1990, producer_id=4242, producer_epoch=3,
               base_sequence=17, transactional=True)
    w.follower([Record(timestamp=TS + 2100, key=struct.pack(">hh", 0, COMMIT),
                       value=struct.pack(">hi", 0, COORDINATOR_EPOCH))],
               epoch=1, producer_id=4242, producer_epoch=3, transactional=True, control=True)
    w.controls[w.next_offset - 1] = ("COMMIT", str(COORDINATOR_EPOCH))
    # -- epoch 3 (2 skipped): two idempotent-producer batches in one leader append, then a
    #    follower batch after an offset gap (as compaction leaves)
    w.leader_batches([
        ([Record(timestamp=TS + 3000 + i, key=b"idem", value=b"%d" % i * 50) for i in range(3)],
         dict(compression="zstd", producer_id=77, producer_epoch=0, base_sequence=0)),
        ([Record(timestamp=TS + 3010, key=None, value=b"idem-next")],
         dict(producer_id=77, producer_epoch=0, base_sequence=3)),
    ], 3)
    w.follower([Record(timestamp=TS + 3500, key=b"after-gap", value=b"v")], epoch=3, gap=10)
    # -- epochs 4..6: bulk, so that the log rolls several times
    for i in range(12):
        records = [Record(timestamp=TS + 4000 + 10 * i + j, key=b"bulk-%d-%d" % (i, j), value=filler(100 * i + j, 150),
                          headers=[("i", b"%d" % i)] if j % 2 else []) for j in range(4)]
        w.leader(records, 4 + i // 4, ("none", "gzip", "snappy", "lz4", "zstd")[i % 5])
    paths = [s.log_path for s in log.segments]
    log.close()
    return paths, w


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    directory = tmp_path_factory.mktemp("jvm-interop") / "topic-0"
    paths, writer = write_log(directory)
    assert sorted(paths) == sorted(map(str, directory.glob("*.log")))
    return directory, paths, writer


# ---- tests ---------------------------------------------------------------------------------

def test_kafka_reads_every_segment_we_write(kafka, written):
    directory, paths, w = written
    assert len(paths) >= 3, f"expected a multi-segment log, got {len(paths)} segment(s)"
    files = kafka.read(paths)

    seen = []
    for i, (path, f) in enumerate(zip(paths, files)):
        size = os.path.getsize(path)
        base = int(Path(path).name.split(".")[0])
        next_base = int(Path(paths[i + 1]).name.split(".")[0]) if i + 1 < len(paths) else None
        # Kafka's FileRecords covers the whole file, and its batches cover it with no tail.
        assert f["size"] == size
        assert f["end"] == (len(f["batches"]), size), f"{path}: Kafka's batches do not cover the file"
        for b in f["batches"]:
            assert b["base_offset"] >= base
            assert next_base is None or b["last_offset"] < next_base
        # CRC and size as our reader sees the same bytes.
        ours = our_view(path)
        assert [(b["base_offset"], b["crc"], b["size_bytes"]) for b in f["batches"]] == \
               [(b["base_offset"], b["crc"], b["size_bytes"]) for b in ours]
        # Our reader decodes exactly what Kafka decodes.
        assert [without(b, "control") for b in f["batches"]] == ours
        seen += f["batches"]

    # Kafka's view equals what we appended, batch for batch.
    assert [(b["base_offset"], b["last_offset"]) for b in seen] == \
           [(e["base_offset"], e["last_offset"]) for e in w.expected]
    for got, want in zip(seen, w.expected):
        assert without(got, "size_bytes", "crc", "control") == want, f"batch at offset {want['base_offset']}"
    assert {o: (t, e) for b in seen for o, t, e in b["control"]} == w.controls
    assert {b["compression"] for b in seen} == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert len({b["partition_leader_epoch"] for b in seen}) >= 4


def test_checker_rejects_a_corrupted_segment(kafka, written, tmp_path):
    _, paths, _ = written
    corrupt = tmp_path / Path(paths[0]).name
    data = bytearray(Path(paths[0]).read_bytes())
    data[-1] ^= 0x01                         # last payload byte of the last batch: CRC must fail
    corrupt.write_bytes(bytes(data))
    proc = kafka.run([corrupt], expect_ok=False)
    assert proc.returncode == 1
    assert "CorruptRecordException" in proc.stderr and str(corrupt) in proc.stderr


def test_checker_accepts_segments_written_by_kafka(kafka):
    logs = sorted(JVM_TESTDATA.glob("*/*.log"))
    if not logs:
        pytest.skip(f"no Kafka-written segments under {JVM_TESTDATA}")
    for f in kafka.read(logs):
        path = Path(f["path"])
        codec, _, first_epoch, _ = re.fullmatch(r"(\w+)-(\d+)batches-epoch(\d+)-(\d+)", path.parent.name).groups()
        assert f["size"] == path.stat().st_size
        assert f["end"] == (len(f["batches"]), f["size"])
        batches = f["batches"]
        half = len(batches) // 2
        epoch = int(first_epoch)
        assert [b["partition_leader_epoch"] for b in batches] == [epoch] * half + [epoch + 1] * half
        offset = int(path.stem)
        for b in batches:
            assert (b["compression"], b["magic"], b["producer_id"], b["is_transactional"]) == (codec, 2, -1, False)
            assert b["base_offset"] == offset and b["count"] == len(b["records"])
            for r in b["records"]:
                o = r["offset"]
                assert r == {"offset": o, "timestamp": TS + 10 * o, "sequence": -1,
                             "key": None if o % 5 == 4 else b"key-%d" % o,
                             "value": b'{"offset":%d,"filler":"%s"}' % (o, b"x" * 40),
                             "headers": [("h", b"v%d" % o)] if o % 3 == 0 else []}
                assert o == offset
                offset += 1
            assert b["last_offset"] == offset - 1
            assert b["max_timestamp"] == b["records"][-1]["timestamp"]
        # Our reader agrees with Kafka on Kafka's own segments, every codec.
        assert [without(b, "control") for b in batches] == our_view(path)
