"""One rule for the epoch lineage of a log dir: `storage verify`/`epochs` (storage.inspect) and
the fleet audit (storage.spark) call the same function, and its truncateFromStart is the
engine's (LeaderEpochCache.truncate_from_start, Kafka's LeaderEpochFileCache.truncateFromStart).

Before, the audit kept its own copy that did not cut the checkpoint at the log start offset: for
a log whose retention moved the start to 100, checkpoint [(3, 50)] and batches [(3, 100)], verify
said the checkpoint agrees and the audit said it disagrees.  Kafka's loader cuts the cache at the
log start offset (the earliest entry moves up), so they agree."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.inspect import lineage
from storage.inspect import verdict as analysis
from storage.log.epoch import LeaderEpochCache


def test_the_audit_and_verify_share_the_rule():
    assert analysis.lineage_agreement is lineage.lineage_agreement
    assert analysis.truncate_from_start is lineage.truncate_from_start


@pytest.mark.parametrize("batches, checkpoint, log_start, log_end, agrees", [
    # retention moved the log start above the checkpoint's first entry
    ([(3, 100)], [(3, 50)], 100, 130, True),
    ([(3, 100), (4, 120)], [(2, 10), (3, 50), (4, 120)], 100, 130, True),
    # the first surviving batch is above the log start: the epoch began before it
    ([(3, 120)], [(3, 50)], 100, 130, True),
    # the start lands exactly on an epoch's first offset
    ([(4, 100)], [(3, 50), (4, 100)], 100, 130, True),
    # and a real disagreement stays one: the checkpoint's epoch at the start is not the batches'
    ([(3, 100)], [(2, 50)], 100, 130, False),
    ([(3, 100), (5, 120)], [(3, 50), (4, 120)], 100, 130, False),
])
def test_lineage_agreement_after_retention(batches, checkpoint, log_start, log_end, agrees):
    assert lineage.lineage_agreement(batches, checkpoint, log_start_offset=log_start,
                                     log_end_offset=log_end)[0] is agrees


lineages = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 40)), min_size=0, max_size=6).map(
    lambda steps: [(sum(s[0] for s in steps[:i + 1]) + i, sum(s[1] for s in steps[:i + 1]))
                   for i in range(len(steps))])


@given(lineages, st.integers(0, 250))
def test_truncate_from_start_is_the_engines(entries, start):
    cache = LeaderEpochCache(None)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    cache.truncate_from_start(start)
    assert lineage.truncate_from_start(entries, start) == [(e.epoch, e.start_offset) for e in cache.entries]


@pytest.mark.parametrize("batches, checkpoint, gaps, agrees", [
    # the cleaner removed epoch 1's first batches (offsets 10..14): a gap, and the checkpoint's
    # start of epoch 1 lies in it
    ([(0, 0), (1, 15)], [(0, 0), (1, 10)], 1, True),
    # epoch 1 has no batch left at all
    ([(0, 0), (2, 30)], [(0, 0), (1, 10), (2, 20)], 2, True),
    # dense offsets (no gap): the plain rule, a disagreement
    ([(0, 0), (1, 15)], [(0, 0), (1, 10)], 0, False),
    # gaps or not, a batch carrying an epoch the checkpoint does not give its offset disagrees
    ([(0, 0), (1, 15)], [(0, 0), (1, 20)], 1, False),
])
def test_gaps_make_a_log_compacted_for_the_lineage_rule(batches, checkpoint, gaps, agrees):
    # Issue 30 item 18: the same answer as a log its cleaner-offset-checkpoint lists
    assert lineage.lineage_agreement(batches, checkpoint, log_start_offset=0, log_end_offset=40,
                                     offset_gaps=gaps)[0] is agrees
    if gaps:
        assert lineage.lineage_agreement(batches, checkpoint, log_start_offset=0, log_end_offset=40,
                                         compacted=True)[0] is agrees
