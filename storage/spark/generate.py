"""`python -m storage.spark.generate OUT`: a fleet of realistic replica logs, with faults.

Writes OUT/broker-0 .. OUT/broker-{R-1}, one log dir per broker (ours: segments, indexes,
`leader-epoch-checkpoint`, `storage.mdb`, plus a Kafka-style `meta.properties` naming the
broker), each holding every partition of every topic (replication factor = brokers), and
OUT/fleet.json: the layout, the bytes written and, per partition, the injected fault with the
verdict and first divergent offset the audit must report.

How a partition is written (only the library's public calls): leadership rotates across the
brokers, one leader epoch at a time; the leader calls `assign_epoch_start_offset(epoch)` and
`append_as_leader(records, epoch)`; the followers then fetch what they lack with
`leader.read(...)` and `append_as_follower(...)` -- so replicas are byte-identical copies, as
in a healthy cluster.  Records look like application traffic: keys from a small key space,
JSON-like values of varied length, a header on some, timestamps 10 ms apart, and batches
compressed as asked (`mixed` rotates none / zstd / gzip).  Every replica ends with
high watermark = log end offset (a quiesced fleet) unless a fault says otherwise.

Faults (`--inject KIND=COUNT,...`), one per chosen partition, on a follower (the victim):
  hidden   from a batch boundary d in the committed log on, the victim holds batches with the
           same offsets, epochs and timestamps but other values (KIP-101 Appendix (a)):
           divergent_below_hw at d;
  missing  the victim is truncated to d below the high watermark: divergent_below_hw at d;
  tail     the leader appends batches it never commits and the victim holds other batches at
           the same offsets, high watermark unchanged: divergent_above_hw at the old end;
  corrupt  one byte inside the records of the victim's batch at d is flipped: corrupt, and the
           first divergent offset is d (the CRC-covered bytes differ from the other copies');
  lineage  the victim's `leader-epoch-checkpoint` loses its last entry: still consistent, but
           the victim's lineage from the checkpoint disagrees with its batches.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys

from .. import LogConfig, LogDir, Record, build_batch
from ..core import checkpoint
from ..core.files import LOG_SUFFIX
from ..core.records import iter_batches
from ..log.epoch import CHECKPOINT_FILE

KINDS = ("hidden", "missing", "tail", "corrupt", "lineage")
EXPECTED = {"hidden": "divergent_below_hw", "missing": "divergent_below_hw", "tail": "divergent_above_hw",
            "corrupt": "corrupt", "lineage": "consistent", None: "consistent"}
CODECS = ("none", "zstd", "gzip")
_BASE_TIMESTAMP = 1_700_000_000_000


class _Traffic:
    """Deterministic, application-like records."""

    def __init__(self, rng: random.Random, value_bytes: int):
        self.rng = rng
        self.value_bytes = value_bytes
        alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,.-_"
        self.pool = bytes(rng.choice(alphabet) for _ in range(1 << 16))

    def records(self, first_offset: int, count: int, *, salt: int = 0) -> list[Record]:
        rng, pool, size = self.rng, self.pool, self.value_bytes
        out = []
        with_headers = rng.random() < 0.3
        for i in range(count):
            offset = first_offset + i
            start = rng.randrange(0, len(pool) - size)
            length = max(8, size + rng.randrange(-size // 4, size // 4 + 1))
            value = b'{"id":%d,"salt":%d,"note":"%s"}' % (offset, salt, pool[start:start + length])
            headers = [("trace-id", b"%016x" % rng.getrandbits(64))] if with_headers else []
            out.append(Record(key=b"user-%d" % rng.randrange(1000), value=value, headers=headers,
                              timestamp=_BASE_TIMESTAMP + 10 * offset))
        return out


def _catch_up(leader, follower, fetch_bytes: int) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        chunk = leader.read(follower.log_end_offset, fetch_bytes)
        follower.append_as_follower(bytes(chunk))


def _batch_starts(log) -> list:
    return [(b.base_offset, b.last_offset, b.partition_leader_epoch, b.base_timestamp, b.record_count, b.compression)
            for b in log.batches()]


def _replicate(logs, partition: int, batches: int, records: int, epochs: int, compression: str,
               rng: random.Random, traffic: _Traffic, fetch_bytes: int):
    """Write one partition on every replica: leadership rotates per epoch, followers fetch
    after each epoch.  Returns the last leader."""
    per_epoch = [batches // epochs + (1 if k < batches % epochs else 0) for k in range(epochs)]
    leader = None
    for epoch, count in enumerate(per_epoch):
        leader = logs[(partition + epoch) % len(logs)]
        leader.assign_epoch_start_offset(epoch)
        for _ in range(count):
            codec = CODECS[rng.randrange(len(CODECS))] if compression == "mixed" else compression
            n = max(1, records + rng.randrange(-(records // 4), records // 4 + 1))
            leader.append_as_leader(traffic.records(leader.log_end_offset, n), epoch, compression=codec)
        for log in logs:
            if log is not leader:
                _catch_up(leader, log, fetch_bytes)
    return leader


def _rewrite_from(victim, leader, d: int, traffic: _Traffic) -> None:
    """The victim's log from d on: same batch boundaries, epochs and timestamps as the
    leader's, other values (truncate, then append as follower)."""
    victim.truncate_to(d)
    for base, _last, epoch, base_ts, count, codec in _batch_starts(leader):
        if base < d:
            continue
        records = [r._replace(value=r.value + b"!") for r in traffic.records(base, count, salt=1)]
        records = [r._replace(timestamp=base_ts + 10 * i) for i, r in enumerate(records)]
        victim.append_as_follower(build_batch(records, base_offset=base, partition_leader_epoch=epoch,
                                              base_timestamp=base_ts, compression=codec))


def _checked_arguments(brokers, topics, partitions, batches, records, epochs, inject) -> tuple[dict, list]:
    """(the faults asked for, the partition keys), or ValueError naming what is wrong."""
    if brokers < 1 or topics < 1 or partitions < 1 or batches < 1 or records < 1 or epochs < 1:
        raise ValueError("brokers, topics, partitions, batches, records and epochs must be >= 1")
    inject = {k: v for k, v in (inject or {}).items() if v}
    unknown = set(inject) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown fault kind(s) {', '.join(sorted(unknown))}; kinds: {', '.join(KINDS)}")
    if inject and brokers < 2:
        raise ValueError("faults need at least two brokers (the victim is a follower)")
    keys = [(f"topic-{t}", p) for t in range(topics) for p in range(partitions)]
    if sum(inject.values()) > len(keys):
        raise ValueError(f"{sum(inject.values())} faults asked for, but there are only {len(keys)} partitions")
    return inject, keys


def _inject_fault(kind, logs, leader, rng, traffic, records, epochs, corruptions, lineage_victims):
    """Give the follower after the leader the fault `kind`; (its index, the first divergent
    offset the audit must report).  File-level faults are queued for after the close."""
    end = leader.log_end_offset
    victim_index = (logs.index(leader) + 1) % len(logs)
    victim = logs[victim_index]
    starts = [b[0] for b in _batch_starts(leader)]
    d = starts[max(1, len(starts) * rng.randrange(40, 70) // 100)] if len(starts) > 1 else starts[0]
    if kind == "hidden":
        _rewrite_from(victim, leader, d, traffic)
        victim.update_high_watermark(end)
    elif kind == "missing":
        victim.truncate_to(d)
    elif kind == "tail":
        d = end
        for _ in range(3):
            leader.append_as_leader(traffic.records(leader.log_end_offset, records), epochs - 1)
        _rewrite_from(victim, leader, d, traffic)
    elif kind == "corrupt":
        corruptions.append((victim.path, d))
    elif kind == "lineage":
        lineage_victims.append(victim.path)
        d = None
    return victim_index, d


def generate(out: str, *, brokers: int = 3, topics: int = 2, partitions: int = 4, batches: int = 200,
             records: int = 20, value_bytes: int = 200, segment_bytes: int = 1 << 20, epochs: int = 3,
             compression: str = "mixed", inject: dict | None = None, seed: int = 1, progress: bool = False) -> dict:
    """Write the fleet under `out` (replacing it) and return the manifest (also OUT/fleet.json)."""
    inject, keys = _checked_arguments(brokers, topics, partitions, batches, records, epochs, inject)
    rng = random.Random(seed)
    faults = [kind for kind in KINDS for _ in range(inject.get(kind, 0))]
    chosen = dict(zip(rng.sample(keys, len(faults)), faults))
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    config = LogConfig(segment_bytes=segment_bytes, fsync=False)
    dirs = [os.path.join(out, f"broker-{i}") for i in range(brokers)]
    logdirs = [LogDir.open(d, config) for d in dirs]
    for i, d in enumerate(dirs):
        with open(os.path.join(d, "meta.properties"), "w", encoding="utf-8") as f:
            f.write(f"#generated by storage.spark.generate\nbroker.id={i}\nversion=0\n")
    traffic = _Traffic(rng, value_bytes)
    fetch_bytes = min(segment_bytes, 1 << 20)
    manifest = []
    corruptions, lineage_victims = [], []
    bar = None
    if progress:
        try:
            from tqdm import tqdm
            bar = tqdm(total=len(keys), unit="partition", desc="generate", file=sys.stderr)
        except ImportError:
            bar = None
    try:
        for topic, partition in keys:
            kind = chosen.get((topic, partition))
            logs = [ld.partition(topic, partition) for ld in logdirs]
            leader = _replicate(logs, partition, batches, records, epochs, compression, rng, traffic, fetch_bytes)
            end = leader.log_end_offset
            for log in logs:
                log.update_high_watermark(end)
            entry = {"topic": topic, "partition": partition, "leader": logs.index(leader), "log_end_offset": end,
                     "high_watermark": end, "injected": kind, "victim": None, "expected_verdict": EXPECTED[kind],
                     "expected_first_divergent_offset": None}
            if kind is not None:
                entry["victim"], entry["expected_first_divergent_offset"] = _inject_fault(
                    kind, logs, leader, rng, traffic, records, epochs, corruptions, lineage_victims)
            for log in logs:
                log.close()
            manifest.append(entry)
            if bar is not None:
                bar.update(1)
    finally:
        for ld in logdirs:
            ld.close()
        if bar is not None:
            bar.close()
    # Faults on the files themselves, after every log was closed cleanly.
    for path, d in corruptions:
        _flip_byte(path, d)
    for path in lineage_victims:
        path = os.path.join(path, CHECKPOINT_FILE)
        checkpoint.write(path, checkpoint.read(path, 2)[:-1], sync=False)
    total = sum(os.path.getsize(os.path.join(root, name)) for d in dirs for root, _, names in os.walk(d)
                for name in names if name.endswith(LOG_SUFFIX))
    fleet = {"brokers": dirs, "segment_bytes": segment_bytes, "log_bytes": total, "seed": seed,
             "partitions": manifest}
    with open(os.path.join(out, "fleet.json"), "w", encoding="utf-8") as f:
        json.dump(fleet, f, indent=1)
        f.write("\n")
    return fleet


def _flip_byte(partition_dir: str, offset: int) -> None:
    """Flip one byte inside the records of the batch at `offset` (CRC-covered, after the header)."""
    for name in sorted(os.listdir(partition_dir)):
        if not name.endswith(LOG_SUFFIX):
            continue
        path = os.path.join(partition_dir, name)
        with open(path, "r+b") as f:
            data = f.read()
            for batch in iter_batches(data):
                if batch.base_offset == offset:
                    position = batch.position + 61 + (batch.size_bytes - 61) // 2
                    f.seek(position)
                    f.write(bytes([data[position] ^ 0x5A]))
                    return
    raise ValueError(f"no batch at offset {offset} in {partition_dir}")


def _parse_inject(text: str) -> dict:
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, sep, count = item.partition("=")
        out[kind] = int(count) if sep else 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m storage.spark.generate",
                                     description="Write a fleet of realistic replica logs, with optional faults.")
    parser.add_argument("out", help="output directory (replaced): OUT/broker-N log dirs and OUT/fleet.json")
    parser.add_argument("--brokers", type=int, default=3, help="replicas per partition = brokers (default 3)")
    parser.add_argument("--topics", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4, help="partitions per topic (default 4)")
    parser.add_argument("--batches", type=int, default=200, help="batches per partition (default 200)")
    parser.add_argument("--records", type=int, default=20, help="records per batch, +-25%% (default 20)")
    parser.add_argument("--value-bytes", type=int, default=200, help="record value size, +-25%% (default 200)")
    parser.add_argument("--segment-bytes", type=int, default=1 << 20, help="segment size (default 1 MiB)")
    parser.add_argument("--epochs", type=int, default=3, help="leader epochs per partition (default 3)")
    parser.add_argument("--compression", choices=CODECS + ("mixed",), default="mixed")
    parser.add_argument("--inject", default="", metavar="KIND=N,...",
                        help=f"faults to inject, kinds: {', '.join(KINDS)} (e.g. hidden=2,corrupt=1)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        fleet = generate(args.out, brokers=args.brokers, topics=args.topics, partitions=args.partitions,
                         batches=args.batches, records=args.records, value_bytes=args.value_bytes,
                         segment_bytes=args.segment_bytes, epochs=args.epochs, compression=args.compression,
                         inject=_parse_inject(args.inject), seed=args.seed, progress=sys.stderr.isatty())
    except ValueError as exc:
        print(f"generate: {exc}", file=sys.stderr)
        return 2
    injected = [p for p in fleet["partitions"] if p["injected"]]
    print(f"wrote {len(fleet['partitions'])} partitions x {len(fleet['brokers'])} replicas, "
          f"{fleet['log_bytes'] / 1e6:.1f} MB of segments, {len(injected)} fault(s), under {args.out}")
    for p in injected:
        print(f"  {p['topic']}-{p['partition']}: {p['injected']} on broker-{p['victim']} -> "
              f"{p['expected_verdict']} at {p['expected_first_divergent_offset']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
