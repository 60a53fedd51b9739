"""Damaged log dirs: flip, zero, overwrite or cut any byte range of any file of a closed log dir
(segments, indexes, time indexes, leader-epoch-checkpoint, the clean-shutdown marker), or delete
the file or append garbage to it -> reopening gives a valid prefix of what was written and a
consistent leader-epoch cache, or a clear `StorageError` naming a file; never an exception from
deep inside.  The LMDB store is not damaged here (tests/dir/test_meta.py does that, in a subprocess:
LMDB can take the process down), except by deleting it, which makes recovery scan every segment.

One pristine dir is built per module (several partitions, epochs started as a new leader does,
leader and follower appends, rolls, an empty partition and an empty active segment), with a
model of every batch written.  Each example damages a fresh copy.

What must hold, and why it is not more (docs/kafka-formats.md 5, 11.1):
  - segments are *trusted* after a clean shutdown, and below the recovery point after an
    unclean one (LogLoader only recovers from the segment holding the recovery point on; a
    segment whose offset index is missing is recovered either way).  Damage to the `.log` or
    `.index` of a trusted segment is not looked for at open, so there only "a batch that
    passes its CRC is a batch that was written" can be asked, and reading may fail with a
    `StorageError`;
  - everywhere else the readable log is exactly a prefix of what was written (minus the
    segments whose `.log` was deleted: a missing segment looks like a legal offset gap), and
    it loses nothing that lies before the first damaged byte of a `.log`;
  - BaseOffset, Length, PartitionLeaderEpoch and Magic are outside the batch CRC: a damaged
    base offset or epoch can leave a batch "valid" (Kafka cannot see it either), so that
    batch's offsets and epoch are not compared, and the epoch-cache lookups of its
    partition are not checked;
  - the checkpoint file has no checksum: damage that still parses (a digit changed) is
    trusted as Kafka trusts it, so then only the cache's structure is checked.  Damage that
    does not parse makes the log rebuild the cache "from every batch" (storage/log/partition.py); a
    missing (or empty) checkpoint only gets the epochs of the segments recovery scans;
  - a trusted index is used as it is (Kafka's sanity check looks at its length and last entry
    only), so a damaged one may send a read astray or make the next index append -- the
    append itself, or the final time-index entry written when the active segment is sealed
    at close -- fail with a `StorageError` naming a file.
Two library bugs this test found are pinned by the regression tests at the end of this file
(test_segment_rebuilt_below_the_recovery_point_keeps_the_epochs,
test_append_after_the_log_end_went_below_the_active_segment).

CORRUPTION_EXAMPLES=2000 raises the number of examples (default 150; tests/tiers.py: fewer in the
default tier).
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from storage import LeaderEpochCache, LogConfig, LogDir, build_batch, iter_batches
from storage.core import checkpoint, errors
from storage.core.config import SEALED_SEGMENT_CHECKS
from storage.dir.logdir import CLEAN_SHUTDOWN_FILE
from storage.dir.meta import FILE_NAME as META_FILE
from storage.dir.meta import MetadataError, MetaStore
from storage.log.epoch import CHECKPOINT_FILE
from tests.tiers import examples

CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=200, segment_index_bytes=1024, fsync=False)
EXAMPLES = int(os.environ.get("CORRUPTION_EXAMPLES", examples(150)))
PARTITIONS = {("alpha", 0): [0, 1, 2, 4, 5, 8], ("alpha", 1): [3, 4, 6], ("beta.x_y", 7): [1, 2, 3, 10, 11]}
EMPTY = ("empty", 0)
# clean: marker kept (no scan); clean-no-meta: the LMDB store deleted too (offsets unknown);
# unclean: marker deleted, recovery from the stored recovery point (the log end at close);
# unclean-at: the same from an earlier recovery point; unclean-no-meta: every segment scanned.
MODES = ("clean", "clean-no-meta", "unclean", "unclean-at", "unclean-no-meta")
HEADER_OUTSIDE_CRC = 21     # BaseOffset 0-7, Length 8-11, PartitionLeaderEpoch 12-15, Magic 16, CRC 17-20
# Each example copies a dir of ~45 files: on a RAM file system when there is one (creating a
# file on the disk-backed /tmp of a busy machine costs milliseconds).
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class Written(NamedTuple):
    base: int
    values: tuple
    epoch: int
    segment: int = -1       # base offset of the segment file that holds it
    position: int = -1      # its position in that file
    size: int = 0

    @property
    def last(self):
        return self.base + len(self.values) - 1


class Pristine:
    """The pristine dir and what was written to it (not a dataclass: a short repr in reports)."""

    def __init__(self, path: str, model: dict):
        self.path = path
        self.model = model              # key -> [Written] in log order
        self.files = {}                 # relative path -> size
        self.epochs = {}                # key -> checkpoint entries [(epoch, offset)]
        self.recovery_points = {}       # key -> recovery point in the store
        self.by_value = {}              # first record value -> (key, index in model)

    def __repr__(self) -> str:
        batches = sum(map(len, self.model.values()))
        return f"Pristine({self.path!r}, {batches} batches, {len(self.files)} files)"


def _values(rng, key, counter):
    topic, partition = key
    return tuple(f"{topic}-{partition}/{counter}/{i}|".encode() + rng.randbytes(rng.randint(0, 90))
                 for i in range(rng.randint(1, 4)))


def _build(path) -> Pristine:
    rng = random.Random(0xC0FFEE)
    model = {key: [] for key in PARTITIONS}
    model[EMPTY] = []
    counter = 0
    with LogDir.open(path, CONFIG) as logdir:
        logdir.partition(*EMPTY)
        for key, epochs in PARTITIONS.items():
            log = logdir.partition(*key)
            for n, epoch in enumerate(epochs):
                log.assign_epoch_start_offset(epoch)           # a new leader, before anything else
                if key == ("alpha", 1) and n == 0:
                    continue                                   # an epoch that never wrote
                for _ in range(rng.randint(2, 8)):
                    counter += 1
                    values = _values(rng, key, counter)
                    base = log.log_end_offset
                    if rng.random() < 0.3:
                        info = log.append_as_follower(
                            build_batch(list(values), base_offset=base, partition_leader_epoch=epoch))
                    else:
                        info = log.append_as_leader(list(values), epoch)
                    assert info.first_offset == base
                    model[key].append(Written(base, values, epoch))
                    if rng.random() < 0.08:
                        log.roll()
            log.update_high_watermark(log.log_end_offset)
        logdir.partition("beta.x_y", 7).roll()                 # leaves an empty active segment
    pristine = Pristine(os.fspath(path), model)

    # Where every batch landed, and what the files look like.
    for key, written in model.items():
        pdir = os.path.join(path, f"{key[0]}-{key[1]}")
        located = []
        for name in sorted(os.listdir(pdir)):
            if name.endswith(".log"):
                data = open(os.path.join(pdir, name), "rb").read()
                for batch in iter_batches(data):
                    located.append((int(name[:20]), batch.position, batch.size_bytes, batch.base_offset))
        assert [b for _, _, _, b in located] == [w.base for w in written]
        model[key] = [w._replace(segment=s, position=p, size=n) for w, (s, p, n, _) in zip(written, located)]
        for i, w in enumerate(model[key]):
            pristine.by_value[w.values[0]] = (key, i)
        text = open(os.path.join(pdir, CHECKPOINT_FILE)).read()
        pristine.epochs[key] = [(int(e), int(o)) for e, o in checkpoint.parse(text, 2)]
    for root, _, names in os.walk(path):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), path)
            if not name.startswith(META_FILE):
                pristine.files[rel] = os.path.getsize(os.path.join(root, name))
    with MetaStore(path, sync=False) as store:
        pristine.recovery_points = {k: v.recovery_point for k, v in store.partitions().items()}
    assert CLEAN_SHUTDOWN_FILE in pristine.files
    assert sum(1 for f in pristine.files if f.endswith(".log")) >= 12
    return pristine


@pytest.fixture(scope="module")
def pristine():
    root = tempfile.mkdtemp(prefix="logdir-pristine-", dir=SCRATCH)
    try:
        yield _build(os.path.join(root, "logs"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- damage ---------------------------------------------------------------------------------

def _kind(rel: str) -> str:
    name = os.path.basename(rel)
    if name == CLEAN_SHUTDOWN_FILE:
        return "marker"
    if name == CHECKPOINT_FILE:
        return "checkpoint"
    return name.rpartition(".")[2]          # log, index, timeindex


@dataclass
class Damage:
    target: str
    op: str
    start: int = 0
    end: int = 0            # exclusive; for "cut" the new size; for "append" the old size
    payload: bytes = b""
    mode: str = "clean"     # see MODES
    recovery_points: dict = field(default_factory=dict)   # mode "unclean-at": key -> recovery point

    def apply(self, root: str) -> None:
        path = os.path.join(root, self.target)
        if self.op == "delete":
            os.unlink(path)
        else:
            data = bytearray(open(path, "rb").read())
            if self.op == "bitflip":
                data[self.start] ^= self.payload[0]
            elif self.op == "xor":
                for i in range(self.start, self.end):
                    data[i] ^= self.payload[0]
            elif self.op in ("zero", "overwrite"):
                data[self.start:self.end] = self.payload
            elif self.op == "cut":
                del data[self.end:]
            elif self.op == "append":
                data += self.payload
            else:
                raise AssertionError(self.op)
            with open(path, "wb") as f:
                f.write(data)
        if self.mode.startswith("unclean"):
            marker = os.path.join(root, CLEAN_SHUTDOWN_FILE)
            if os.path.exists(marker):
                os.unlink(marker)
        if self.recovery_points:
            # a crash after flushes that reached only these offsets
            with MetaStore(root, sync=False) as store:
                store.put_partitions({key: offsets._replace(recovery_point=self.recovery_points[key])
                                      for key, offsets in store.partitions().items()})
        if self.mode.endswith("no-meta"):
            for name in (META_FILE, META_FILE + "-lock"):
                if os.path.exists(os.path.join(root, name)):
                    os.unlink(os.path.join(root, name))

    def touches(self, rel: str, start: int, end: int) -> bool:
        """Whether bytes [start, end) of file `rel` were changed in place."""
        if rel != self.target or self.op not in ("bitflip", "xor", "zero", "overwrite"):
            return False
        return self.start < end and start < self.end

    @property
    def first_damaged_byte(self):
        """First byte of the target that differs from (or is missing from) the pristine file."""
        if self.op == "append":
            return self.end
        if self.op == "delete":
            return 0
        if self.op == "cut":
            return self.end
        return self.start


@st.composite
def damages(draw, pristine: Pristine):
    kind = draw(st.sampled_from(["log"] * 4 + ["index", "timeindex", "checkpoint", "marker"]))
    target = draw(st.sampled_from(sorted(f for f in pristine.files if _kind(f) == kind)))
    size = pristine.files[target]
    ops = ["delete", "append"] + (["bitflip", "xor", "zero", "overwrite", "cut"] if size else [])
    op = draw(st.sampled_from(ops))
    mode = draw(st.sampled_from(MODES))
    damage = Damage(target, op, mode=mode)
    if mode == "unclean-at":
        damage.recovery_points = {key: draw(st.integers(0, pristine.recovery_points[key]))
                                  for key in sorted(pristine.recovery_points)}
    if op in ("bitflip", "xor", "zero", "overwrite"):
        if kind == "log" and draw(st.booleans()):
            # aim at a batch header: base offset, length, epoch, magic and CRC live there
            key, segment = _log_owner(pristine, target)
            batches = [w for w in pristine.model[key] if w.segment == segment]
            batch = draw(st.sampled_from(batches))
            start = min(batch.position + draw(st.integers(0, 60)), size - 1)
        else:
            start = draw(st.integers(0, size - 1))
        length = 1 if op == "bitflip" else draw(st.one_of(st.integers(1, 8), st.integers(1, 400)))
        end = min(start + length, size)
        damage.start, damage.end = start, end
        if op in ("bitflip", "xor"):
            damage.payload = bytes([1 << draw(st.integers(0, 7))]) if op == "bitflip" else \
                bytes([draw(st.integers(1, 255))])
        elif op == "zero":
            damage.payload = bytes(end - start)
        else:
            damage.payload = draw(st.binary(min_size=end - start, max_size=end - start))
    elif op == "cut":
        damage.end = draw(st.integers(0, size - 1))
    elif op == "append":
        damage.end = size
        damage.payload = draw(st.binary(min_size=1, max_size=300))
    return damage


def _log_owner(pristine: Pristine, rel: str):
    pdir, name = os.path.split(rel)
    topic, _, partition = pdir.rpartition("-")
    return (topic, int(partition)), int(name[:20])


# ---- checks ---------------------------------------------------------------------------------

def _pdir(key) -> str:
    return f"{key[0]}-{key[1]}"


def _below_recovery_point(pristine: Pristine, damage: Damage, root: str, key) -> set[int]:
    """Bases of the segments the loader does not scan unless their files look wrong
    (docs/kafka-formats.md 5.2-5.3): all of them after a clean shutdown, those below the segment
    holding the recovery point after an unclean one."""
    pdir = os.path.join(root, _pdir(key))
    bases = sorted(int(n[:20]) for n in os.listdir(pdir) if n.endswith(".log"))
    if damage.mode.startswith("clean"):
        return set(bases)
    if damage.mode.endswith("no-meta"):
        return set()
    recovery_point = (damage.recovery_points or pristine.recovery_points).get(key, 0)
    return {base for i, base in enumerate(bases) if i < len(bases) - 1 and bases[i + 1] <= recovery_point}


def _trusted_segments(pristine: Pristine, damage: Damage, root: str, key) -> set[int]:
    """Bases of the segments the loader does not scan; a missing offset index forces a scan."""
    pdir = os.path.join(root, _pdir(key))
    return {base for base in _below_recovery_point(pristine, damage, root, key)
            if os.path.exists(os.path.join(pdir, f"{base:020d}.index"))}


def _checkpoint_state(pristine: Pristine, damage: Damage, root: str, key) -> str:
    """What the loader will find in the partition's leader-epoch-checkpoint: 'original',
    'unparseable' (the log rebuilds the cache from the batches), 'empty' or 'different'."""
    if damage.target != os.path.join(_pdir(key), CHECKPOINT_FILE):
        return "original"
    path = os.path.join(root, damage.target)
    if not os.path.exists(path):
        return "empty"
    try:
        entries = [(int(e), int(o)) for e, o in checkpoint.parse(open(path, "rb").read().decode(), 2)]
    except (checkpoint.CheckpointError, UnicodeDecodeError, ValueError):
        return "unparseable"
    if any(e < 0 or o < 0 for e, o in entries):
        return "unparseable"
    if entries == pristine.epochs[key]:
        return "original"
    return "empty" if not entries else "different"


@dataclass
class Expect:
    """What one partition's damage allows, worked out before the reopen."""

    key: tuple
    trusted: set
    checkpoint: str
    trusted_damaged: bool = False       # .log/.index of a segment the loader does not scan
    trusted_index_damaged: bool = False  # ... or its .timeindex (appends may then be refused)
    tampered: bool = False              # a readable batch has a damaged base offset or epoch
    below_recovery_point: bool = False  # the damaged segment is not one recovery scans
    scanned_out_of_turn: bool = False   # ... and it was scanned all the same

    @classmethod
    def of(cls, pristine: Pristine, damage: Damage, root: str, key) -> "Expect":
        expect = cls(key, _trusted_segments(pristine, damage, root, key),
                     _checkpoint_state(pristine, damage, root, key))
        kind = _kind(damage.target)
        if damage.target.startswith(_pdir(key) + os.sep) and kind in ("log", "index", "timeindex"):
            segment = int(os.path.basename(damage.target)[:20])
            if segment in expect.trusted and damage.op != "delete":
                expect.trusted_damaged = kind in ("log", "index")
                expect.trusted_index_damaged = True
            # A missing (or unusable, see _check_partition) index gets such a segment scanned
            # on its own, with segments after it that are not.
            expect.below_recovery_point = segment in _below_recovery_point(pristine, damage, root, key)
            expect.scanned_out_of_turn = expect.below_recovery_point and kind == "index" and \
                damage.op == "delete"
        return expect


def _files(path: str, under: str | None = None) -> dict:
    """{relative path: bytes} of every file under path (with `under`: only below that
    subdirectory, relative to it)."""
    out = {}
    for directory, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(directory, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    if under is not None:
        out = {rel[len(under) + 1:]: data for rel, data in out.items() if rel.startswith(under + os.sep)}
    return out


def _message_names_a_file(exc: BaseException) -> bool:
    file = getattr(exc, "file", None)
    return bool(file) and file in str(exc)


def _expected(pristine: Pristine, damage: Damage, key) -> list[Written]:
    """What was written, without what a deleted .log held, or what a .log cut exactly at a
    batch boundary lost: both leave whole batches, so the loader sees nothing wrong and
    keeps the later segments (in Kafka too: an offset gap between segments is legal)."""
    written = pristine.model[key]
    if _kind(damage.target) != "log" or damage.op not in ("delete", "cut"):
        return written
    owner, segment = _log_owner(pristine, damage.target)
    if owner != key:
        return written
    if damage.op == "delete":
        return [w for w in written if w.segment != segment]
    if damage.end == 0 or any(w.segment == segment and w.position == damage.end for w in written):
        return [w for w in written if w.segment != segment or w.position < damage.end]
    return written


def _tampered_header(damage: Damage, root: str, batch) -> bool:
    """A batch whose bytes outside the CRC (base offset .. CRC) were changed in place."""
    rel = os.path.relpath(batch.source, root)
    return damage.touches(rel, batch.position, batch.position + HEADER_OUTSIDE_CRC)


def _check_partition(pristine: Pristine, damage: Damage, root: str, expect: Expect, log) -> list:
    key = expect.key
    written = pristine.model[key]
    expected = _expected(pristine, damage, key)

    assert log.log_start_offset <= log.high_watermark <= log.log_end_offset, log
    assert log.recovery_point <= log.log_end_offset, log
    assert log.active_segment is log.segments[-1] and log.active_segment.active
    bases = [segment.base_offset for segment in log.segments]
    assert bases == sorted(set(bases)) and not any(segment.active for segment in log.segments[:-1])
    if expect.below_recovery_point:
        segment = int(os.path.basename(damage.target)[:20])
        if any(base == segment and reason.startswith("rebuilt") for base, _, reason in log.recovery_report):
            expect.scanned_out_of_turn = True
        if bases and segment == bases[-1]:
            expect.scanned_out_of_turn = False       # nothing after it to be missed

    # -- read every batch; only a StorageError naming a file may stop the read
    got = []
    try:
        for batch in log.batches():
            got.append(batch)
    except errors.StorageError as exc:
        assert expect.trusted_damaged, f"reading {key} failed without trusted damage: {exc!r}"
        assert _message_names_a_file(exc), repr(exc)

    tampered = [b for b in got if _tampered_header(damage, root, b)]
    expect.tampered = bool(tampered)
    if not tampered:
        # (A base offset lowered outside the CRC in a trusted active segment moves the log end
        # below its base, as Kafka's readNextOffset would: test_append_after_the_log_end_...)
        assert log.log_end_offset >= log.active_segment.base_offset, log
    for batch in got:
        if not batch.is_valid():
            assert expect.trusted_damaged, f"invalid batch {batch!r} in {key} after recovery"
            continue
        # A batch that passes its CRC is one that was written (found by its first value).
        records = batch.records()
        owner, index = pristine.by_value.get(records[0].value, (None, None))
        assert owner == key, f"{key}: valid batch {batch!r} was never written here"
        w = written[index]
        assert tuple(r.value for r in records) == w.values
        if not any(batch is t for t in tampered):
            assert (batch.base_offset, batch.partition_leader_epoch) == (w.base, w.epoch), (batch, w)
            assert [r.offset for r in records] == list(range(w.base, w.last + 1))

    if not expect.trusted_damaged:
        # -- exactly a prefix of what was written, losing nothing before the first damaged byte
        assert len(got) <= len(expected), (got, expected)
        for batch, w in zip(got, expected):
            assert batch.is_valid(), (batch, w)
            assert tuple(r.value for r in batch.records()) == w.values, (batch, w)
            if not any(batch is t for t in tampered):
                assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == \
                    (w.base, w.last, w.epoch), (batch, w)
        lost_from = len(expected)
        if damage.target.startswith(_pdir(key) + os.sep) and _kind(damage.target) == "log" \
                and damage.op != "delete" and damage.first_damaged_byte is not None:
            segment = int(os.path.basename(damage.target)[:20])
            first = damage.first_damaged_byte
            # Kafka: once a segment is cut, every later segment goes (even for garbage after the
            # last batch), so only what precedes the first damaged byte must survive.
            lost_from = next((i for i, w in enumerate(expected) if w.segment > segment or
                              w.segment == segment and w.position + w.size > first), len(expected))
        if damage.target.startswith(_pdir(key) + os.sep) and _kind(damage.target) == "log" \
                and damage.op in ("delete", "cut") and expected != written:
            # A deleted .log, or one cut at a batch boundary, leaves a hole: when recovery scans
            # the segment before it, the later segments go too (the log stays a prefix).
            segment = int(os.path.basename(damage.target)[:20])
            lost_from = min(lost_from, next((i for i, w in enumerate(expected) if w.segment > segment),
                                            len(expected)))
        assert len(got) >= lost_from, f"{key}: lost {lost_from - len(got)} batches before the damage"
        if got and not tampered and expected == written:
            assert log.log_end_offset == got[-1].last_offset + 1, (log, got[-1])

    _check_epoch_cache(expect, log, got, tampered)
    return got


def _check_epoch_cache(expect: Expect, log, got, tampered) -> None:
    entries = log.epoch_cache.entries
    for (e1, o1), (e2, o2) in zip(entries, entries[1:]):
        assert e1 < e2 and o1 < o2, entries
    for epoch, offset in entries:
        assert epoch >= 0 and log.log_start_offset <= offset <= log.log_end_offset, (entries, log)
    if tampered or expect.checkpoint == "different" or not entries:
        # A changed epoch or base offset outside the CRC, or a checkpoint that still parses,
        # is trusted as Kafka trusts it: only the structure above can be asked for.
        return
    # Which batches the cache must know: all of them when it came from the checkpoint or
    # was rebuilt "from every batch" (a checkpoint that does not parse); from its first entry
    # on when the checkpoint was missing or empty -- recovery only adds the epochs of the
    # segments it scans, as Kafka's LogSegment.recover does.
    partial = expect.checkpoint == "empty"
    for batch in got:
        if not batch.is_valid():
            continue
        if batch.base_offset < entries[0].start_offset and partial:
            continue
        assert log.epoch_cache.epoch_for_offset(batch.base_offset) == batch.partition_leader_epoch, \
            (expect.checkpoint, batch, entries)


def _append_and_close(pristine: Pristine, expects: dict, logdir) -> dict:
    after = {}
    for key, log in sorted(logdir.logs().items()):
        epoch = log.epoch_cache.latest_epoch
        if epoch is None:
            epoch = max((w.epoch for w in pristine.model[key]), default=0)
        leo = log.log_end_offset
        values = [b"after-damage-" + key[0].encode(), b"second"]
        try:
            info = log.append_as_leader(values, epoch)
        except errors.StorageError as exc:
            # Kafka's index appends refuse entries that go backwards; a trusted index that
            # was damaged can make the next append fail, clearly.
            assert expects[key].trusted_index_damaged, f"{key}: append failed: {exc!r}"
            assert _message_names_a_file(exc), repr(exc)
            after[key] = None
            continue
        assert info.first_offset == leo and log.log_end_offset == leo + 2
        assert log.epoch_cache.epoch_for_offset(leo) == epoch
        if expects[key].trusted_damaged or expects[key].tampered:
            # A trusted offset index is searched as it is (a damaged position sends the read
            # astray), and a base offset raised outside the CRC is found first, as in Kafka:
            # the read may fail, clearly, or return other batches first.
            try:
                assert any(b.base_offset == leo and [r.value for r in b.records()] == values
                           for b in iter_batches(log.read(leo, 1 << 20), verify=False)) \
                    or expects[key].tampered
            except errors.StorageError as exc:
                assert _message_names_a_file(exc), repr(exc)
        else:
            [batch] = list(iter_batches(log.read(leo, 1 << 20)))
            assert batch.base_offset == leo and [r.value for r in batch.records()] == values
        bases = [segment.base_offset for segment in log.segments]
        if expects[key].tampered:
            after[key] = None        # see test_append_after_the_log_end_went_below_the_active_segment
            continue
        assert bases == sorted(set(bases)) and log.log_end_offset >= log.active_segment.base_offset, \
            (bases, log)
        after[key] = (log.log_start_offset, log.log_end_offset, log.epoch_cache.entries)
    try:
        logdir.close()
    except errors.StorageError as exc:
        # Sealing the active segment appends its final time-index entry; Kafka's
        # TimeIndex.maybeAppend refuses one that goes back (InvalidOffsetException), and its
        # sanity check at a clean open does not look at more than the last entry being >= the
        # base offset.  So a damaged last time-index entry of the active segment is trusted at
        # open and refused at close -- clearly, naming a file.
        assert any(e.trusted_index_damaged for e in expects.values()), f"close failed: {exc!r}"
        assert _message_names_a_file(exc), repr(exc)
        return None
    return after


def _reopen_is_stable(root: str, after: dict, config: LogConfig = CONFIG) -> None:
    """What the first open repaired, and the append after it, stay: same offsets, and the same
    epoch for every offset the cache knew (a later open may fill in epochs below its first
    entry from the batches, never change the known ones)."""
    with LogDir.open(root, config) as logdir:
        assert logdir.had_clean_shutdown
        for key, log in logdir.logs().items():
            if after[key] is None:
                continue
            start, end, entries = after[key]
            assert (log.log_start_offset, log.log_end_offset) == (start, end), key
            before = LeaderEpochCache(None)
            for epoch, offset in entries:
                before.assign(epoch, offset)
            if not entries:
                continue
            # Both are step functions of the offset: compare them at every step in range.
            first = entries[0].start_offset
            steps = {first} | {o for _, o in entries + log.epoch_cache.entries if first <= o < end}
            for offset in steps:
                assert log.epoch_cache.epoch_for_offset(offset) == before.epoch_for_offset(offset), \
                    (key, offset, entries, log.epoch_cache.entries)


def _report(text, kind) -> None:
    """note() and event() when running under hypothesis (check() also runs on its own)."""
    if currently_in_test_context():
        if text:
            note(text)
        event(kind)


def check(pristine: Pristine, damage: Damage, config: LogConfig = CONFIG) -> None:
    """One damage, opened with `config` (its sealed_segment_check: a sealed segment damaged
    after a clean shutdown is refused at the open, or at its first use by the reads below)."""
    scratch = tempfile.mkdtemp(prefix="logdir-damaged-", dir=SCRATCH)
    try:
        root = os.path.join(scratch, "logs")
        shutil.copytree(pristine.path, root)
        damage.apply(root)
        expects = {key: Expect.of(pristine, damage, root, key) for key in pristine.model}
        files_before = _files(root)
        try:
            logdir = LogDir.open(root, config)
        except errors.StorageError as exc:
            _report(f"open raised {exc!r}", "open refused the dir")
            assert _message_names_a_file(exc), repr(exc)
            # Only damage the loader does not repair may stop it: a trusted .log or .index.
            assert any(e.trusted_damaged for e in expects.values()), f"{damage}: {exc!r}"
            return
        marker_deleted = damage.target == CLEAN_SHUTDOWN_FILE and damage.op == "delete"
        clean = damage.mode.startswith("clean") and not marker_deleted
        assert logdir.had_clean_shutdown == clean
        assert set(logdir.partitions()) | set(logdir.unopened) == set(pristine.model)
        for key, exc in logdir.unopened.items():
            # Refused (issue 13): damage in a segment the open must trust -- below the recovery
            # point, or after a clean shutdown -- is reported, never repaired; nothing changed.
            _report(f"partition {key} refused: {exc!r}", "damaged partition: refused")
            assert damage.target.startswith(_pdir(key) + os.sep), (damage, exc)
            assert expects[key].below_recovery_point, (damage, exc)
            assert isinstance(exc, errors.CorruptSegmentError) and _message_names_a_file(exc), repr(exc)
            assert _files(root, _pdir(key)) == {rel[len(_pdir(key)) + 1:]: data for rel, data in files_before.items()
                                                 if rel.startswith(_pdir(key) + os.sep)}
        for key, log in sorted(logdir.logs().items()):
            got = _check_partition(pristine, damage, root, expects[key], log)
            if damage.target.startswith(_pdir(key) + os.sep):
                expect = expects[key]
                outcome = ("trusted damage" if expect.trusted_damaged else
                           "header outside the CRC" if expect.tampered else
                           "a shorter prefix" if len(got) < len(pristine.model[key]) else "every batch kept")
                _report(None, "damaged partition: " + outcome)
        refused = bool(logdir.unopened)
        after = _append_and_close(pristine, expects, logdir)
        if after is not None and not refused:     # a refused partition keeps the next open unclean
            _reopen_is_stable(root, after, config)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---- the property ---------------------------------------------------------------------------

@pytest.mark.examples
@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_log_dir_reopens_to_a_valid_prefix(pristine, data):
    damage = data.draw(damages(pristine), label="damage")
    check_at = data.draw(st.sampled_from(SEALED_SEGMENT_CHECKS), label="sealed_segment_check")
    check(pristine, damage, replace(CONFIG, sealed_segment_check=check_at))


# ---- deterministic cases ----------------------------------------------------------------------

def _copy(pristine: Pristine, tmp_path, damage: Damage) -> str:
    root = os.path.join(tmp_path, "logs")
    shutil.copytree(pristine.path, root)
    damage.apply(root)
    return root


def test_damaged_payload_in_an_early_segment_cuts_there_and_drops_later_segments(pristine, tmp_path):
    key = ("alpha", 0)
    written = pristine.model[key]
    segments = sorted({w.segment for w in written})
    victim = next(w for w in written if w.segment == segments[1] and w.position > 0)
    target = os.path.join(_pdir(key), f"{victim.segment:020d}.log")
    at = victim.position + 40                   # inside the CRC-covered part of its header
    damage = Damage(target, "xor", at, at + 1, b"\x5a", mode="unclean-no-meta")
    root = _copy(pristine, tmp_path, damage)
    with LogDir.open(root, CONFIG) as logdir:
        log = logdir.partition(*key)
        got = [(b.base_offset, b.partition_leader_epoch) for b in log.batches()]
        assert got == [(w.base, w.epoch) for w in written[:written.index(victim)]]
        assert log.log_end_offset == victim.base
        assert [s.base_offset for s in log.segments] == segments[:2]
        assert not any(f"{base:020d}" in name for base in segments[2:] for name in os.listdir(log.path))
        assert log.epoch_cache.entries[-1].start_offset < victim.base
        assert log.recovery_report and log.recovery_report[0][0] == segments[1]
        check(pristine, damage)


@pytest.mark.parametrize("mode", ["clean", "unclean", "unclean-at", "unclean-no-meta"])
def test_unparseable_checkpoint_is_rebuilt_from_every_batch(pristine, tmp_path, mode):
    """Regression: after an unclean open that recovered only the last segments, the rebuild
    used to keep just the epochs recovery had assigned ([(8, 55)] instead of six entries), so
    OffsetForLeaderEpoch answered (2, 55) for epoch 2, which ended at 34."""
    key = ("alpha", 0)
    damage = Damage(os.path.join(_pdir(key), CHECKPOINT_FILE), "overwrite", 0, 1, b"x", mode=mode)
    if mode == "unclean-at":     # recovery from the middle of the log
        damage.recovery_points = {k: rp // 2 for k, rp in pristine.recovery_points.items()}
    with LogDir.open(_copy(pristine, tmp_path, damage), CONFIG) as logdir:
        log = logdir.partition(*key)
        assert logdir.had_clean_shutdown == (mode == "clean")
        assert any("leader-epoch-checkpoint rebuilt" in reason for _, _, reason in log.recovery_report)
        epochs = pristine.epochs[key]
        assert log.epoch_cache.entries == epochs
        for (epoch, _), (_, end) in zip(epochs, epochs[1:]):
            assert log.end_offset_for_epoch(epoch) == (epoch, end)
    with LogDir.open(logdir.path, CONFIG) as again:      # and the rebuilt file is what loads next
        assert again.partition(*key).epoch_cache.entries == epochs


def test_garbage_metadata_store_is_a_clear_metadata_error(pristine, tmp_path):
    root = _copy(pristine, tmp_path, Damage(CLEAN_SHUTDOWN_FILE, "delete", mode="unclean"))
    path = os.path.join(root, META_FILE)
    with open(path, "r+b") as f:
        f.write(bytes(range(256)) * 32)           # both meta pages
    with pytest.raises(MetadataError) as info:
        LogDir.open(root, CONFIG)
    assert info.value.file == path and path in str(info.value)
    assert isinstance(info.value, errors.StorageError)


def test_damaged_metadata_key_is_a_clear_metadata_error(pristine, tmp_path):
    root = _copy(pristine, tmp_path, Damage(CLEAN_SHUTDOWN_FILE, "delete", mode="unclean"))
    path = os.path.join(root, META_FILE)
    data = open(path, "rb").read()
    old = b"beta.x_y\x007"
    assert data.count(old) >= 1
    with open(path, "wb") as f:
        f.write(data.replace(old, b"beta.x_y\x00\xff"))
    with pytest.raises(MetadataError) as info:
        LogDir.open(root, CONFIG)
    assert path in str(info.value)


def test_damaged_headers_in_a_clean_dir_refuse_the_partition_and_delete_nothing(pristine, tmp_path):
    """Issue 13: after a clean shutdown nothing is repaired silently.  A batch whose BaseOffset
    (outside the CRC) was zeroed makes the partition refuse to open with an error naming file,
    position and offset; no file changes; the other partitions open; recover_mode='force' cuts
    there and reports what went."""
    key = ("alpha", 1)
    last = pristine.model[key][-1]
    assert last.segment > 0 and last.base > last.segment
    target = os.path.join(_pdir(key), f"{last.segment:020d}.log")
    damage = Damage(target, "zero", last.position, last.position + 8, bytes(8), mode="clean")
    root = _copy(pristine, tmp_path, damage)
    target = os.path.join(root, target)
    partition_dir = os.path.join(root, f"{key[0]}-{key[1]}")
    before = {n: open(os.path.join(partition_dir, n), "rb").read() for n in os.listdir(partition_dir)}
    with LogDir.open(root, CONFIG) as logdir:
        assert key in logdir.unopened and key not in logdir.partitions()
        with pytest.raises(errors.CorruptSegmentError) as info:
            logdir.partition(*key)
        assert info.value.file == target and info.value.position == last.position
        assert info.value.error_code == errors.Errors.KAFKA_STORAGE_ERROR
        assert logdir.partition("alpha", 0).log_end_offset == pristine.model[("alpha", 0)][-1].last + 1
    after = {n: open(os.path.join(partition_dir, n), "rb").read() for n in os.listdir(partition_dir)}
    assert after == before
    with LogDir.open(root, CONFIG, recover_mode="force") as logdir:
        log = logdir.partition(*key)
        assert log.log_end_offset == last.base
        assert any(base == last.segment and cut > 0 for base, cut, _why in logdir.recovery_report[key])


@pytest.mark.parametrize("how", ["index-deleted", "index-cut"])
def test_segment_rebuilt_below_the_recovery_point_keeps_the_epochs(pristine, tmp_path, how):
    key = ("alpha", 0)
    target = os.path.join(_pdir(key), f"{0:020d}.index")
    assert pristine.files[target] >= 8
    damage = Damage(target, "delete", mode="unclean") if how == "index-deleted" else \
        Damage(target, "cut", end=pristine.files[target] - 3, mode="unclean")
    with LogDir.open(_copy(pristine, tmp_path, damage), CONFIG) as logdir:
        log = logdir.partition(*key)
        assert not logdir.had_clean_shutdown
        assert [(b.base_offset, b.partition_leader_epoch) for b in log.batches()] == \
            [(w.base, w.epoch) for w in pristine.model[key]]
        # pristine [(0, 0), (1, 12), (2, 24), (4, 34), (5, 38), (8, 47)]; got [(0, 0), (1, 12), (8, 55)]
        assert log.epoch_cache.entries == pristine.epochs[key]
