"""Model-based test: PartitionLog against a small pure-Python model (hypothesis state machine).

Rules: leader append, follower append (with gaps), read, roll, truncate, raise the log start
offset, flush, clean reopen, segments pushed out of the open-segment cache, crash and unclean
reopen.  After every rule the invariants of
storage/log/partition.py are checked against the model.
"""
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from storage import LogConfig, PartitionLog, build_batch, iter_batches
from storage.log import segment as segment_module
from storage.log.segment import OnDiskSegment
from tests.tiers import examples

CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=200, segment_index_bytes=400, fsync=False)


class Batch:
    def __init__(self, base, values, epoch):
        self.base, self.values, self.epoch = base, values, epoch

    @property
    def last(self):
        return self.base + len(self.values) - 1


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.log = PartitionLog.open(self.dir + "/t-0", CONFIG)
        self.batches: list[Batch] = []
        self.leo = 0
        self.lso = 0
        self.hw = 0
        self.epoch = 0

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    values = st.lists(st.binary(min_size=0, max_size=120), min_size=1, max_size=6)

    @rule(values=values, bump=st.booleans())
    def append_as_leader(self, values, bump):
        self.epoch += bump
        info = self.log.append_as_leader(values, self.epoch)
        assert info.first_offset == self.leo
        self.batches.append(Batch(self.leo, values, self.epoch))
        self.leo += len(values)

    @rule(values=values, gap=st.integers(0, 5))
    def append_as_follower(self, values, gap):
        base = self.leo + gap
        self.log.append_as_follower(build_batch(values, base_offset=base, partition_leader_epoch=self.epoch))
        self.batches.append(Batch(base, values, self.epoch))
        self.leo = base + len(values)

    @rule(data=st.data())
    def read(self, data):
        if self.leo == self.lso:
            return
        offset = data.draw(st.integers(self.lso, self.leo - 1))
        max_bytes = data.draw(st.integers(1, 3000))
        got = list(iter_batches(self.log.read(offset, max_bytes)))
        expected = [b for b in self.batches if b.last >= offset]
        if not expected:
            assert got == []
            return
        assert got, f"nothing read at {offset}"
        assert (got[0].base_offset, got[0].last_offset) == (expected[0].base, expected[0].last)
        assert sum(b.size_bytes for b in got) <= max_bytes or len(got) == 1
        for batch, model in zip(got, expected):
            assert [r.value for r in batch.records()] == model.values
            assert batch.partition_leader_epoch == model.epoch

    @rule()
    def roll(self):
        self.log.roll()

    @rule(data=st.data())
    def truncate_to(self, data):
        target = data.draw(st.integers(self.lso, self.leo + 2))
        changed = self.log.truncate_to(target)
        assert changed == (target < self.leo)
        if target < self.leo:
            self.batches = [b for b in self.batches if b.last < target]
            self.leo = target
            self.hw = min(self.hw, target)

    @rule(data=st.data())
    def raise_log_start_offset(self, data):
        self.hw = data.draw(st.integers(self.lso, self.leo))
        assert self.log.update_high_watermark(self.hw) == self.hw
        target = data.draw(st.integers(self.lso, self.hw))
        self.log.increment_log_start_offset(target)
        self.lso = max(self.lso, target)

    @rule()
    def flush(self):
        self.log.flush()
        assert self.log.recovery_point == self.leo

    def _after_reopen(self):
        """The log end offset is not stored: after a reopen it is where the files end, which
        after a truncation past the last batch (batch-granular, Kafka's rule) is below the old
        one.  The files end at the last batch, or at an empty last segment's base."""
        physical_end = max(self.batches[-1].last + 1 if self.batches else self.lso,
                           self.log.segments[-1].base_offset)
        assert physical_end <= self.leo
        if physical_end < self.lso:   # Kafka: the log ends below its start -> start afresh
            self.batches, physical_end = [], self.lso
        assert self.log.log_end_offset == physical_end
        assert self.log.recovery_report == []
        self.leo = physical_end
        self.hw = self.lso

    @rule()
    def clean_reopen(self):
        self.log.close()
        self.log = PartitionLog.open(self.dir + "/t-0", CONFIG, clean_shutdown=True, log_start_offset=self.lso)
        self._after_reopen()

    @rule()
    def segments_pushed_out(self):
        # Other logs' use pushes every segment out of the open-segment cache: a sealed one goes
        # back to unopened (its next use opens and checks it again), the active one is
        # suspended (its next use resumes it).
        cache = segment_module.open_segments
        cache._evict(len(cache), keep=None)
        assert all(isinstance(s, OnDiskSegment) for s in self.log.segments[:-1])
        assert self.log.segments[-1].suspended

    @rule()
    def crash_and_recover(self):
        # Process crash: the page cache survives, nothing is sealed or trimmed.
        recovery_point = self.log.recovery_point
        for segment in self.log.segments:
            segment.close()
        self.log = PartitionLog.open(self.dir + "/t-0", CONFIG, recovery_point=recovery_point,
                                     log_start_offset=self.lso)
        self._after_reopen()

    @invariant()
    def the_engines_own_invariants(self):
        # PartitionLog/Segment/LeaderEpochCache.check_invariants: what the engine asserts of
        # itself (the shapes docs/reliability.md allows), after every step.
        self.log.check_invariants()

    @invariant()
    def offsets_and_segments(self):
        log = self.log
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (self.lso, self.leo, self.hw)
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        assert log.recovery_point <= log.log_end_offset
        bases = [s.base_offset for s in log.segments]
        assert bases == sorted(set(bases))
        assert [s.active for s in log.segments] == [False] * (len(bases) - 1) + [True]
        for a, b in zip(log.segments, log.segments[1:]):
            assert a.next_offset <= b.base_offset

    @invariant()
    def indexes_point_at_batches(self):
        for segment in self.log.segments:
            entries = segment.offset_index_entries()
            assert all(x[0] < y[0] for x, y in zip(entries, entries[1:]))
            view = segment.view()
            for offset, position in entries:
                (batch,) = list(iter_batches(view[position:position + 61 + 2000]))[:1]
                assert batch.base_offset <= offset
            times = segment.time_index_entries()
            assert all(x[0] < y[0] and x[1] <= y[1] for x, y in zip(times, times[1:]))

    @invariant()
    def content_matches_model(self):
        if self.leo == self.lso:
            return
        got = [(r.offset, r.value) for b in self.log.batches(self.lso) for r in b.records() if r.offset >= self.lso]
        want = [(b.base + i, v) for b in self.batches for i, v in enumerate(b.values) if b.base + i >= self.lso]
        assert got == want


TestLogModel = LogMachine.TestCase
TestLogModel.pytestmark = [pytest.mark.examples]
TestLogModel.settings = settings(max_examples=int(__import__("os").environ.get("MODEL_EXAMPLES", examples(100))), stateful_step_count=40, deadline=None,
                                 suppress_health_check=[HealthCheck.too_slow])
