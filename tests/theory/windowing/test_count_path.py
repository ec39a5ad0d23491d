"""The vectorised path for count-based rich triggers against the incremental engine:
every field of every pane, the watermark and hold series, drops, late counts and stall
flags, on drawn and seeded scripts; its refusals leave the script to the engine. µs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.windowing import assert_same, canon, script_of, script_ops
from theory.windowing.fast_path import Refusal
from theory.windowing.runner import run_script
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    Repeatedly,
)
from theory.windowing.windows import FixedWindows, GlobalWindows, SlidingWindows

TRIGGERS = [
    Repeatedly(AfterCount(1)),
    Repeatedly(AfterCount(3)),
    AfterWatermark(early=AfterCount(2)),
    AfterWatermark(late=AfterCount(1)),
    AfterWatermark(late=AfterCount(2)),
    AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
    AfterWatermark(early=AfterCount(3), late=AfterCount(2)),
    Repeatedly(AfterProcessingTime(0)),
    Repeatedly(AfterProcessingTime(4)),
]
FNS = {"fixed": FixedWindows(10, 3), "sliding": SlidingWindows(12, 4), "global": GlobalWindows()}


OPS = script_ops()


@settings(max_examples=400, deadline=None)
@given(
    OPS,
    st.sampled_from(sorted(FNS)),
    st.sampled_from(TRIGGERS),
    st.sampled_from(list(AccumulationMode)),
    st.sampled_from(list(TimestampCombiner)),
    st.integers(0, 20),
)
def test_count_path_equals_incremental_engine(ops, fn, trigger, mode, combiner, lateness):
    events = script_of(ops)
    strat = WindowingStrategy(
        FNS[fn], trigger, mode, lateness, combiner, allow_unsafe_triggers=True
    )
    slow = run_script(events, strat, fast=False)
    fast = run_script(events, strat)
    if fast.path == "incremental":  # refused: the engine ran it, and says why
        assert fast.refusal in {str(r) for r in Refusal}
        assert canon(fast) == canon(slow)
        return
    assert_same(fast, slow)


def test_count_fires_rounds_equal_the_scan():
    """The round-by-round firing search equals the batch-by-batch scan, on batch sizes
    of 1 to 6 over segments of many sizes, for several counts."""
    from theory.windowing.count_path import _count_fires, _count_fires_scan

    rng = np.random.default_rng(3)
    segment = np.repeat(np.arange(300), rng.integers(1, 40, 300))
    size = rng.integers(1, 7, segment.size)
    for n in (2, 3, 5, 11):
        want = _count_fires_scan(segment, size, n)
        assert np.array_equal(_count_fires(segment, size, n), want)
        assert 0 < want.sum() < want.size
