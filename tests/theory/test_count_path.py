"""The vectorised path for count-based rich triggers against the incremental engine:
every field of every pane, the watermark and hold series, drops, late counts and stall
flags, on drawn and seeded scripts; its refusals leave the script to the engine. µs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.windowing.fast_path import Refusal
from theory.windowing.runner import run_script
from theory.windowing.script import ElementEvent, ProcessingTimeEvent, WatermarkEvent
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import (
    AfterCount,
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
]
FNS = {"fixed": FixedWindows(10, 3), "sliding": SlidingWindows(12, 4), "global": GlobalWindows()}


def _canon(result):
    return sorted(
        (int(ev), repr(p.key), p.window, tuple(sorted(p.values)), tuple(p[3:]))
        for p, ev in zip(result.panes, result.pane_event, strict=True)
    )


def assert_same(fast, slow):
    assert fast.path == "vectorised", fast.refusal
    assert slow.path == "incremental"
    assert _canon(fast) == _canon(slow)
    for series in ("processing_time", "input_watermark", "output_watermark", "state_hold"):
        assert np.array_equal(getattr(fast, series), getattr(slow, series)), series
    assert (fast.dropped, fast.late_elements, fast.stalled, fast.pending_processing_timers) == (
        slow.dropped,
        slow.late_elements,
        slow.stalled,
        slow.pending_processing_timers,
    )


def _script(ops):
    events, value, wm = [], 0, 0
    for op, arg in ops:
        if op == "el":
            events.append(ElementEvent([(k, value + i, wm + d) for i, (k, d) in enumerate(arg)]))
            value += len(arg)
        elif op == "wm":
            wm += arg
            events.append(WatermarkEvent(wm))
        else:
            events.append(ProcessingTimeEvent(arg))
    return events


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("el"),
            st.lists(
                st.tuples(st.sampled_from("abc"), st.integers(-12, 30)), min_size=1, max_size=4
            ),
        ),
        st.tuples(st.just("wm"), st.integers(0, 12)),
        st.tuples(st.just("pt"), st.integers(1, 5)),
    ),
    max_size=30,
)


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
    events = _script(ops)
    strat = WindowingStrategy(
        FNS[fn], trigger, mode, lateness, combiner, allow_unsafe_triggers=True
    )
    slow = run_script(events, strat, fast=False)
    fast = run_script(events, strat)
    if fast.path == "incremental":  # refused: the engine ran it, and says why
        assert fast.refusal in {str(r) for r in Refusal}
        assert _canon(fast) == _canon(slow)
        return
    assert_same(fast, slow)
