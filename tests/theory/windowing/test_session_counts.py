"""Early count firings on sessions (``theory.windowing.session_counts``) against the
incremental engine: every pane field, the watermark and hold series, on drawn and seeded
scripts, both accumulation modes, every output policy, with and without late data."""

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.helpers.windowing import assert_same, script_of
from tests.theory.windowing.test_session_path import _seeded, ops
from theory.windowing.engine import Timing
from theory.windowing.fast_path import Refusal, script_columns
from theory.windowing.runner import run_script
from theory.windowing.script import ElementEvent, Event, Script, WatermarkEvent
from theory.windowing.session_path import engine_session_elements, run_sessions_columns
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import AfterCount, AfterProcessingTime, AfterWatermark, Repeatedly
from theory.windowing.windows import Sessions

#: Refusals that leave a whole script to the engine here.
_REFUSED = {Refusal.MERGING_PARTS, Refusal.SPLIT_SESSION_BATCH}


def _trigger(early, late):
    """AfterWatermark with count sides (0: absent), or with ``late`` None
    ``Repeatedly(AfterCount(early))``."""
    if late is None:
        return Repeatedly(AfterCount(early))
    return AfterWatermark(
        early=AfterCount(early) if early else None, late=AfterCount(late) if late else None
    )


@settings(max_examples=300, deadline=None)
@given(
    st.booleans().flatmap(ops),
    st.integers(1, 12),
    st.integers(0, 4),
    st.one_of(st.none(), st.integers(0, 2)),
    st.sampled_from(list(AccumulationMode)),
    st.sampled_from(list(TimestampCombiner)),
    st.integers(0, 20),
)
def test_early_counts_on_sessions_equal_incremental_engine(
    ops, gap, early, late, mode, combiner, lateness
):
    if late is None:
        early = max(early, 1)
    strat = WindowingStrategy(
        Sessions(gap), _trigger(early, late), mode, lateness, combiner, allow_unsafe_triggers=True
    )
    events = script_of(ops)
    fast = run_script(events, strat)
    slow = run_script(events, strat, fast=False)
    event(f"{fast.path} {type(strat.trigger).__name__}")  # (--hypothesis-show-statistics)
    if fast.path == "incremental":
        assert fast.refusal in _REFUSED
    assert_same(fast, slow, fast.path)


@pytest.mark.parametrize("late", [1, None], ids=["AfterWatermark", "Repeatedly"])
@pytest.mark.parametrize("mode", list(AccumulationMode))
@pytest.mark.parametrize("combiner", list(TimestampCombiner))
def test_early_counts_on_sessions_seeded_differential(combiner, mode, late):
    """2,000 elements in bursts over 2 keys, perfect watermark: many early panes, windows
    widened between them (pane index from 0 again); the sessions whose parts merge late
    go to the engine (a minority), the rest vectorised. Repeatedly(AfterCount(3)) leaves
    sessions unfired: holds for ever, a stall."""
    strat = WindowingStrategy(Sessions(120), _trigger(2 if late else 3, late), mode, 50, combiner)
    script = _seeded(2000, 4, keys=2)
    fast, slow = run_script(script, strat), run_script(script, strat, fast=False)
    columns = script_columns(script.events)
    assert columns is not None
    on_engine = engine_session_elements(columns, strat)
    if fast.path == "incremental":  # a split batch under LATEST
        assert combiner is TimestampCombiner.OUTPUT_AT_LATEST
        assert fast.refusal == Refusal.SPLIT_SESSION_BATCH
    else:
        assert fast.path == "mixed" and fast.refusal == Refusal.MERGING_PARTS
        assert 0 < on_engine.mean() < 0.4
    assert_same(fast, slow, fast.path)
    early = [p for p in slow.panes if p.timing is Timing.EARLY]
    assert len(early) > 300 and any(p.index > 0 for p in early)
    if late is None:
        assert len(early) == len(slow.panes) and slow.stalled
    else:
        assert any(p.index > 0 for p in slow.panes if p.timing is Timing.ON_TIME)


def test_early_counts_on_single_part_sessions_run_vectorised():
    """Sessions that are one part at every event: the whole script on the new path, and
    a whole-script refusal from the session path itself for a session in two parts."""
    strat = WindowingStrategy(Sessions(30), _trigger(2, 0), AccumulationMode.ACCUMULATING)
    script = _seeded(2000, 4, keys=8)
    fast = run_script(script, strat)
    assert fast.path == "vectorised", fast.refusal
    assert_same(fast, run_script(script, strat, fast=False))
    assert sum(p.timing is Timing.EARLY for p in fast.panes) > 50
    assert all(p.is_last for p in fast.panes if p.timing is Timing.ON_TIME)  # no late
    apart: list[Event] = [  # two parts at event 0, joined at event 2
        ElementEvent([("a", 0, 100), ("a", 1, 140)]),
        WatermarkEvent(90),
        ElementEvent([("a", 2, 120)]),
    ]
    columns = script_columns(Script(apart).events)
    assert columns is not None
    strat = WindowingStrategy(Sessions(25), _trigger(1, 0))
    assert run_sessions_columns(columns, strat) is Refusal.MERGING_PARTS
    got = run_script(apart, strat)
    assert got.path == "mixed" and engine_session_elements(columns, strat).all()
    assert_same(got, run_script(apart, strat, fast=False), "mixed")


def test_other_triggers_on_sessions_stay_on_the_engine():
    columns = script_columns(Script([ElementEvent([("a", 0, 100)])]).events)
    assert columns is not None
    for trigger in (
        AfterWatermark(early=AfterProcessingTime(10)),
        AfterWatermark(early=AfterCount(2), late=AfterProcessingTime(5)),
        Repeatedly(AfterProcessingTime(5)),
        AfterCount(2),  # not repeated
    ):
        strat = WindowingStrategy(Sessions(25), trigger, allow_unsafe_triggers=True)
        assert run_sessions_columns(columns, strat) is Refusal.TRIGGER, trigger
