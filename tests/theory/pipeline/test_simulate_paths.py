"""The simulator on the engine's vectorised paths against the incremental engine: every
stage's watermark and hold series, panes, lateness and drops are the same. Times are µs."""

from dataclasses import replace

import numpy as np
import pytest

from theory.data.distributions import Delay
from theory.pipeline import chapter3
from theory.pipeline.processing import Processing
from theory.pipeline.simulator import _combine, differences, simulate
from theory.pipeline.stages import COMBINERS, GroupByWindow
from theory.series import StepSeries
from theory.windowing.engine import Pane, Timing
from theory.windowing.pane_columns import PaneColumns
from theory.windowing.strategy import TimestampCombiner, WindowingStrategy
from theory.windowing.windows import FixedWindows, IntervalWindow


def assert_same_simulation(fast, slow):
    assert differences(fast, slow) == []


def test_differences_name_what_differs():
    """The comparison can fail: a stage's output series, a pane's value and a late flag
    changed are each named."""
    pipe = chapter3.pipeline("bounded:10s")
    a = simulate(pipe, chapter3.traces(2_000, seed=1))
    b = simulate(pipe, chapter3.traces(2_000, seed=1))
    assert differences(a, b) == []
    s = b.stages["mobile_sessions"]
    s.panes.value[0] += 1.0
    s.late[0] = not s.late[0]
    b.stages["flatten"] = replace(
        b.stages["flatten"], output_watermark=StepSeries(np.array([0]), np.array([1]), 0)
    )
    assert differences(a, b) == [
        "mobile_sessions: late",
        "mobile_sessions: panes' value",
        "flatten: output series",
    ]


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
