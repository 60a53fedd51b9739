"""Building batches from Python records (docs/design.md "Performance targets": >= 10x kafka-python's builder,
>= 5 M records/s uncompressed, 100-byte records; one C call per batch).

Each round builds `build_batches` batches of `build_records` 100-byte values (no key, no
headers), the same list of values for every builder:

  ours               storage.build_batch(values, base_offset=..., compression="none"|"zstd")
                     (base timestamp: now, read once per batch)
  kafka-python       DefaultRecordBatchBuilder(magic=2, compression_type=0|4, ...), one
                     .append(offset, ts, None, value, []) per record with ts read once per
                     batch, then .build().  kafka-python 3.0.12 uses the C `crc32c` package
                     and python-zstandard (level 3, like ours) when they are installed.

Group "build" holds one pedantic case per builder; "build-paired" alternates ours and
kafka-python round by round (A B, then B A) and keeps the median of the per-pair ratios.
"""
from __future__ import annotations

import statistics
import time
import warnings

import pytest

with warnings.catch_warnings():     # kafka-python 3.0.12 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

from benchlib import make_values

import storage

KAFKA_CODECS = {"none": 0, "zstd": 4}
KAFKA_BATCH_SIZE_LIMIT = 64 << 20      # never reached: every record fits


def build_ours(values: list[bytes], batches: int, compression: str) -> bytes:
    build = storage.build_batch
    n = len(values)
    out = b""
    for i in range(batches):
        out = build(values, base_offset=i * n, compression=compression)
    return out


def build_kafka(values: list[bytes], batches: int, compression: str) -> bytes:
    codec = KAFKA_CODECS[compression]
    headers: list = []
    out = b""
    for _ in range(batches):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=KAFKA_BATCH_SIZE_LIMIT)
        append = builder.append
        ts = int(time.time() * 1000)
        for offset, value in enumerate(values):
            append(offset, ts, None, value, headers)
        out = builder.build()
    return out


BUILDERS = {"ours": build_ours, "kafka-python": build_kafka}
LABELS = {"ours": "ours (build_batch)", "kafka-python": "kafka-python DefaultRecordBatchBuilder"}


def check_batch(batch, values: list[bytes], compression: str) -> None:
    """What a builder made is one valid v2 batch of exactly `values`, with that codec."""
    (parsed,) = list(storage.iter_batches(bytes(batch)))
    assert parsed.record_count == len(values)
    assert parsed.attributes & 0x7 == storage.core.records.CODEC_IDS[compression]
    assert [r.value for r in parsed.records()] == values


CASES = [(builder, compression) for compression in ("none", "zstd") for builder in ("ours", "kafka-python")]


@pytest.mark.parametrize("builder,compression", CASES, ids=[f"{b}-{c}" for b, c in CASES])
def test_build(benchmark, sizes, builder, compression):
    values = make_values(sizes.build_records)
    build = BUILDERS[builder]
    check_batch(build(values, 1, compression), values, compression)
    benchmark.group = "build"
    benchmark.extra_info.update(
        builder=builder, label=f"{LABELS[builder]}, {compression}", role="ours" if builder == "ours" else "peer",
        compression=compression, records=sizes.build_batches * sizes.build_records,
        batches=sizes.build_batches, records_per_batch=sizes.build_records, value_bytes=len(values[0]))
    benchmark.pedantic(build, args=(values, sizes.build_batches, compression), rounds=sizes.build_rounds,
                       warmup_rounds=sizes.warmup_rounds, iterations=1)


def paired_build(values: list[bytes], batches: int, rounds: int, compression: str) -> dict:
    times = {"ours": [], "kafka-python": []}
    ratios = []
    for k in range(rounds):
        order = ("ours", "kafka-python") if k % 2 == 0 else ("kafka-python", "ours")
        t = {}
        for name in order:
            start = time.perf_counter()
            BUILDERS[name](values, batches, compression)
            t[name] = time.perf_counter() - start
            times[name].append(t[name])
        ratios.append(t["kafka-python"] / t["ours"])
    records = batches * len(values)
    return {
        "pairs": {f"ours / kafka-python ({compression})": {
            "ours": "ours", "peer": "kafka-python", "peer_role": "peer",
            "label": f"{LABELS['ours']} / {LABELS['kafka-python']}, {compression}",
            "ratios": ratios, "median": statistics.median(ratios)}},
        "times": times,
        "median_seconds": {name: statistics.median(v) for name, v in times.items()},
        "records_per_s": {name: records / statistics.median(v) for name, v in times.items()},
    }


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_build_paired(benchmark, sizes, compression):
    values = make_values(sizes.build_records)
    if not sizes.quick:
        for build in BUILDERS.values():       # warm-up
            build(values, sizes.build_batches, compression)
    benchmark.group = "build-paired"
    result = benchmark.pedantic(paired_build, args=(values, sizes.build_batches, sizes.paired_rounds, compression),
                                rounds=1, iterations=1)
    benchmark.extra_info.update(
        paired=True, size=compression, unit="records", compression=compression,
        records=sizes.build_batches * sizes.build_records, batches=sizes.build_batches,
        records_per_batch=sizes.build_records, **result)
