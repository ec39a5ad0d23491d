"""The simulator on the engine's vectorised paths against the incremental engine: every
stage's watermark and hold series, panes, lateness and drops are the same. Times are µs."""

import numpy as np
import pytest

from theory.data.distributions import Delay
from theory.pipeline import chapter3
from theory.pipeline.processing import Processing
from theory.pipeline.simulator import _combine, simulate
from theory.pipeline.stages import COMBINERS, GroupByWindow
from theory.windowing.engine import Pane, Timing
from theory.windowing.pane_columns import PaneColumns
from theory.windowing.strategy import TimestampCombiner, WindowingStrategy
from theory.windowing.windows import FixedWindows, IntervalWindow


def _series(s):
    return s.times.tolist(), s.values.tolist(), s.initial


def assert_same_simulation(fast, slow):
    assert fast.times.tolist() == slow.times.tolist()
    for name, a in fast.stages.items():
        b = slow.stages[name]
        assert _series(a.input_watermark) == _series(b.input_watermark), name
        assert _series(a.output_watermark) == _series(b.output_watermark), name
        assert a.holds.keys() == b.holds.keys()
        for h in a.holds:
            assert _series(a.holds[h]) == _series(b.holds[h]), (name, h)
        assert _series(a.processing_hold) == _series(b.processing_hold), name
        assert (a.arrivals, a.late_count, a.dropped, a.late_grouped) == (
            b.arrivals,
            b.late_count,
            b.dropped,
            b.late_grouped,
        ), name
        if a.panes is None:
            assert b.panes is None
            continue
        for column in vars(a.panes):
            assert np.array_equal(getattr(a.panes, column), getattr(b.panes, column)), (
                name,
                column,
            )


@pytest.mark.parametrize(
    ("watermark", "combiner", "processing"),
    [
        ("perfect", TimestampCombiner.OUTPUT_AT_EOW, None),
        ("perfect", TimestampCombiner.OUTPUT_AT_EARLIEST, Processing(Delay("expon", scale=2.0))),
        ("bounded:10s", TimestampCombiner.OUTPUT_AT_EOW, None),
    ],
)
def test_simulation_paths_agree_on_chapter3(watermark, combiner, processing):
    kw = {} if processing is None else {"processing": processing}
    pipe = chapter3.pipeline(watermark, timestamp_combiner=combiner, **kw)
    traces = chapter3.traces(6_000, seed=3)
    fast = simulate(pipe, traces, seed=5)
    slow = simulate(pipe, traces, seed=5, fast=False)
    assert {s.path for s in slow.stages.values() if s.kind == "GroupByWindow"} == {"incremental"}
    if watermark == "perfect":  # nothing late: every grouping stage is vectorised
        paths = {s.path for s in fast.stages.values() if s.kind == "GroupByWindow"}
        assert paths == {"vectorised"}
    assert_same_simulation(fast, slow)


@pytest.mark.parametrize("name", sorted(COMBINERS))
def test_column_combiners_equal_the_pane_combiners(name):
    rng = np.random.default_rng(7)
    panes = [
        Pane(
            k,
            IntervalWindow(int(s), int(s) + int(w)),
            tuple(rng.normal(0, 1e6, int(c)).tolist()),
            int(s),
            Timing.ON_TIME,
            0,
            0,
            True,
            False,
        )
        for k, s, w, c in zip(
            rng.integers(0, 5, 200),
            rng.integers(0, 10**12, 200),
            rng.integers(1, 10**9, 200),
            rng.integers(0, 30, 200),
            strict=True,
        )
    ]
    spec = GroupByWindow("g", "in", WindowingStrategy(FixedWindows(10)), name)
    got = _combine(spec, PaneColumns.from_panes(panes))
    want = np.array([COMBINERS[name](p) for p in panes])
    assert np.array_equal(got, want, equal_nan=True)
