"""A source of ``simulate --engine spark`` made block by block on the executors
(:mod:`spark_backend.simulate.sources`, :mod:`theory.data.blocks`): the blocks' summaries
give the source watermark the local simulator computes from the whole trace, and the
blocks' rows, split by key partition and merged, are the whole trace's rows of each
partition in its order, on a Spark session as in this process. The whole simulation is
``test_simulate_spark``'s. Times are µs."""

from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.simulate.parts import key_partition, merge
from spark_backend.simulate.simulation import _Run, spark_context
from spark_backend.simulate.sources import block_rows, source_watermark, summarise
from theory.data.blocks import BlockedTrace, session_blocks
from theory.data.trace import Trace
from theory.pipeline.simulator import source_input
from theory.pipeline.stages import Source
from theory.time import SECOND
from theory.watermarks.spec import make_source_watermark

SPECS = ["perfect", "perfect:oracle", "bounded:5s", "ingress"]


def _block(seed: int, n: int, keys: int, i: int) -> Trace:
    """Block ``i``: unsorted rows on a half-second grid of events and a 1-second grid of
    arrivals (ties of both inside a block and across blocks), stragglers far behind, keys
    shared by every block."""
    rng = np.random.default_rng([seed, i])
    m = int(rng.integers(0, n + 1))
    event = rng.integers(0, 120, m) * (SECOND // 2)
    delay = rng.integers(0, 4 * SECOND, m) + (rng.random(m) < 0.1) * rng.integers(0, 40 * SECOND, m)
    arrival = (event + delay) // SECOND * SECOND
    return Trace(event, arrival, rng.integers(0, keys, m), rng.integers(1, 9, m).astype(float))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    blocks=st.integers(1, 5),
    n=st.integers(0, 60),
    keys=st.integers(1, 7),
    parts=st.integers(1, 4),
    finish=st.booleans(),
)
def test_blocks_give_the_whole_traces_watermark_and_rows(seed, blocks, n, keys, parts, finish):
    blocked = BlockedTrace(blocks, partial(_block, seed, n, keys))
    whole = blocked.whole()
    made = [block_rows(blocked, i, parts) for i in range(blocks)]
    for spec in SPECS:
        source = Source("in", spec, finish=finish)
        stream, iw = source_input(source, whole)
        # every point of each block, or only those the spec's kind needs
        kind = make_source_watermark(spec).kind
        for summaries in ([summary for summary, _ in made],
                          [summarise(blocked.block(i), kind) for i in range(blocks)]):  # fmt: skip
            got = source_watermark(source, iter(summaries))
            assert (got.initial, got.times.tolist(), got.values.tolist()) == (
                iw.initial, iw.times.tolist(), iw.values.tolist()), spec  # fmt: skip
    # each partition's rows, merged from the blocks' pieces by place, in the whole order
    target = key_partition(stream.key, parts)
    for p in range(parts):
        pieces = [(0, part) for _, split_up in made for q, part in split_up if q == p]
        mine = merge(pieces, 1).stream
        theirs = stream.take(np.flatnonzero(target == p))
        for column in ("time", "timestamp", "key", "value"):
            assert getattr(mine, column).tolist() == getattr(theirs, column).tolist()


def test_a_summary_keeps_only_the_points_where_the_extremes_move():
    #        arrival 1   1   2   3   3   5
    trace = Trace([7, 4, 9, 2, 8, 6], [1, 1, 2, 3, 3, 5], [0] * 6, [1.0] * 6).sorted_by_arrival()
    s = summarise(trace)
    assert s.times.tolist() == [1, 2, 3, 5]
    # least event time at or after each arrival: 2, 2, 2, 6 -> moves after 3
    assert (s.min_at.tolist(), s.min_event.tolist()) == ([3, 5], [2, 6])
    # greatest seen up to each arrival: 7, 9, 9, 9 -> rises at 1 and 2
    assert (s.max_at.tolist(), s.max_event.tolist()) == ([1, 2], [7, 9])


def test_a_spec_that_needs_every_row_is_refused_by_the_summaries():
    with pytest.raises(ValueError, match="source 'in': watermark 'dynamic' needs every row"):
        source_watermark(Source("in", "dynamic"), [])


def test_session_blocks_cut_users_and_events_evenly_and_refuse_too_many_blocks():
    blocked = session_blocks(1_001, seed=3, blocks=3, users=10)
    blocks = [blocked.block(i) for i in range(3)]
    assert [len(b) for b in blocks] == [300, 300, 401]  # users 0-2, 3-5, 6-9
    assert sorted(set(blocks[0].key.tolist())) == [0, 1, 2]
    assert set(blocks[2].key.tolist()) == set(range(6, 10))
    whole = blocked.whole()
    assert len(whole) == 1_001 and bool(np.all(np.diff(whole.arrival_time) >= 0))
    assert whole == Trace.concat(blocks).sorted_by_arrival()
    with pytest.raises(ValueError, match="blocks must be <= users"):
        session_blocks(10, seed=0, blocks=11, users=10)


@pytest.mark.slow
def test_the_executor_side_source_gives_the_driver_sides_watermark_and_rows(spark, tmp_path):
    # a simulation's source stage on a real Spark session: blocks made by the tasks
    # (bounded) or, for a watermark that needs every row, the whole trace made on the
    # driver (dynamic), against the local source on the whole trace: the same watermark
    # and each key partition's rows in the same order
    blocked = session_blocks(4_000, seed=2, blocks=5, users=12)
    whole = blocked.whole()
    run = _Run(spark_context(spark), 3, tmp_path, True, 8)
    try:
        for spec in ("bounded:30s", "dynamic"):
            parts, iw = run.source(Source("in", spec), blocked)
            stream, their_iw = source_input(Source("in", spec), whole)
            assert (iw.times.tolist(), iw.values.tolist()) == (
                their_iw.times.tolist(), their_iw.values.tolist()), spec  # fmt: skip
            mine = dict(parts.collect())
            target = key_partition(stream.key, 3)
            assert sorted(mine) == [0, 1, 2]
            for p, part in mine.items():
                theirs = stream.take(np.flatnonzero(target == p))
                for column in ("time", "timestamp", "key", "value"):
                    assert getattr(part.stream, column).tolist() == getattr(
                        theirs, column).tolist(), (spec, p, column)  # fmt: skip
    finally:
        run.close()
