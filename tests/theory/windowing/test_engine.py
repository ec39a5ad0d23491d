"""The grouping engine: panes, holds, lateness, bad input, scripts, and its fast path.

Times are µs. The runner behaviours that differ from the Beam model are in
test_triggers.py, each under its own name, and checked against Beam itself in
tests/beam_pipelines/test_engine_vs_beam.py."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.windowing import assert_same, canon
from theory.time import MAX_TIMESTAMP
from theory.windowing.engine import STATE_HOLD, GroupByWindowEngine, Timing
from theory.windowing.fast_path import Refusal, run_fast, strategy_refusal
from theory.windowing.runner import run_script
from theory.windowing.script import (
    ElementEvent,
    Event,
    ProcessingTimeEvent,
    Script,
    WatermarkEvent,
)
from theory.windowing.strategy import (
    AccumulationMode,
    ElementPolicy,
    TimestampCombiner,
    WindowingStrategy,
    legacy_sliding_output_time,
)
from theory.windowing.triggers import (
    AfterProcessingTime,
    AfterWatermark,
    DefaultTrigger,
    Repeatedly,
)
from theory.windowing.windows import (
    FixedWindows,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
)


def strategy(fn=None, **kw):
    return WindowingStrategy(fn or FixedWindows(10), **kw)


def test_on_time_pane_fires_when_watermark_reaches_window_end():
    e = GroupByWindowEngine(strategy())
    assert e.add_elements([("k", 1, 3), ("k", 2, 7)]) == []
    assert e.advance_watermark_to(9) == []  # 9 == max_timestamp: the timer is at end = 10
    (pane,) = e.advance_watermark_to(10)
    assert pane.window == IntervalWindow(0, 10)
    assert sorted(pane.values) == [1, 2]
    assert pane.timestamp == 9
    assert (pane.timing, pane.index, pane.nonspeculative_index) == (Timing.ON_TIME, 0, 0)
    assert pane.is_first and not pane.is_last


def test_eow_hold_holds_output_watermark_until_the_pane_fires():
    e = GroupByWindowEngine(strategy())
    e.add_elements([("k", 1, 3)])
    e.advance_watermark_to(5)
    assert e.output_watermark == 5
    assert e.holds() == {STATE_HOLD: 8}  # the hold at max_timestamp 9, minus 1 µs
    assert e.min_hold() == (8, "k", IntervalWindow(0, 10))
    e.advance_watermark_to(9)
    assert e.output_watermark == 8
    e.advance_watermark_to(30)
    assert e.output_watermark == 30 and e.holds() == {}


def test_earliest_hold_is_the_minimum_timestamp():
    e = GroupByWindowEngine(strategy(timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST))
    e.add_elements([("k", 1, 6), ("k", 2, 4)])
    e.advance_watermark_to(5)
    assert e.output_watermark == 3
    e.add_elements([("k", 3, 2)])  # below the output watermark: no hold
    (pane,) = e.advance_watermark_to(10)
    assert pane.timestamp == 4
    assert e.late_elements == 1


def test_latest_pane_timestamp_is_the_maximum():
    e = GroupByWindowEngine(strategy(timestamp_combiner=TimestampCombiner.OUTPUT_AT_LATEST))
    e.add_elements([("k", 1, 6), ("k", 2, 4)])
    (pane,) = e.advance_watermark_to(10)
    assert pane.timestamp == 6


def test_late_data_within_lateness_fires_late_pane_at_end_of_window():
    e = GroupByWindowEngine(
        strategy(allowed_lateness=20, timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)
    )
    e.add_elements([("k", 1, 3)])
    (on_time,) = e.advance_watermark_to(12)
    (late,) = e.add_elements([("k", 2, 5)])
    assert late.timing is Timing.LATE and late.values == (2,)
    assert late.timestamp == 9  # late panes sit at the end of the window
    assert (late.index, late.nonspeculative_index) == (1, 1)
    assert on_time.values == (1,) and on_time.timestamp == 3


def test_droppable_data_is_counted_not_lost():
    e = GroupByWindowEngine(strategy(allowed_lateness=5))
    e.advance_watermark_to(16)
    assert e.add_elements([("k", 1, 3)]) == []  # 16 > end 10 + 5: dropped
    assert e.dropped == {"expired": 1, "closed": 0}
    e2 = GroupByWindowEngine(strategy(allowed_lateness=5))
    e2.advance_watermark_to(15)
    assert len(e2.add_elements([("k", 1, 3)])) == 1  # 15 == end + 5: still kept


def test_after_watermark_closes_the_window():
    e = GroupByWindowEngine(
        strategy(trigger=AfterWatermark(), allowed_lateness=100, allow_unsafe_triggers=True)
    )
    e.add_elements([("k", 1, 3)])
    (pane,) = e.advance_watermark_to(10)
    assert pane.is_last
    assert e.add_elements([("k", 2, 4)]) == []
    assert e.dropped["closed"] == 1


def test_accumulating_mode_repeats_values():
    e = GroupByWindowEngine(
        strategy(allowed_lateness=50, accumulation_mode=AccumulationMode.ACCUMULATING)
    )
    e.add_elements([("k", 1, 3)])
    e.advance_watermark_to(10)
    (late,) = e.add_elements([("k", 2, 4)])
    assert sorted(late.values) == [1, 2]


def test_sessions_merge_and_fire_once():
    e = GroupByWindowEngine(strategy(Sessions(10)))
    e.add_elements([("k", "a", 0), ("k", "b", 25)])
    e.add_elements([("k", "c", 12)])  # [12, 22) touches neither [0, 10) nor [25, 35)
    e.add_elements([("k", "d", 18)])  # [18, 28) overlaps [25, 35) and [12, 22)
    panes = e.advance_watermark_to_infinity()
    windows = sorted((p.window, tuple(sorted(p.values))) for p in panes)
    assert windows == [(IntervalWindow(0, 10), ("a",)), (IntervalWindow(12, 35), ("b", "c", "d"))]


def test_sliding_windows_fire_per_window():
    e = GroupByWindowEngine(strategy(SlidingWindows(10, 5)))
    e.add_elements([("k", 1, 7)])
    panes = e.advance_watermark_to_infinity()
    assert sorted(p.window for p in panes) == [IntervalWindow(0, 10), IntervalWindow(5, 15)]


def test_processing_time_trigger_fires_on_processing_time():
    e = GroupByWindowEngine(strategy(trigger=Repeatedly(AfterProcessingTime(5))))
    e.add_elements([("k", 1, 3)])
    assert e.advance_processing_time(4) == []
    (pane,) = e.advance_processing_time(1)
    assert pane.values == (1,)
    assert pane.timing is Timing.EARLY  # the timer's time 5 <= max_timestamp 9
    assert e.pending_timers() == {"watermark": 0, "processing_time": 0}


def test_element_policy_and_legacy_sliding_adjustment():
    fn = SlidingWindows(10, 5)
    e = GroupByWindowEngine(strategy(fn, timestamp_combiner=legacy_sliding_output_time(fn)))
    e.add_elements([("k", 1, 7)])
    panes = {p.window: p.timestamp for p in e.advance_watermark_to_infinity()}
    # window N+1's output is not before window N's end; window [0, 10) keeps the element's
    assert panes == {IntervalWindow(0, 10): 7, IntervalWindow(5, 15): 10}
    clamp = ElementPolicy(lambda ts, w: ts + 100)
    e = GroupByWindowEngine(strategy(timestamp_combiner=clamp))
    e.add_elements([("k", 1, 3)])
    (pane,) = e.advance_watermark_to(10)
    assert pane.timestamp == 9  # never past the end of the window
    with pytest.raises(TypeError, match="SlidingWindows"):
        legacy_sliding_output_time(FixedWindows(10))  # type: ignore[arg-type]


def test_bad_input_leaves_state_unchanged():
    e = GroupByWindowEngine(strategy())
    e.add_elements([("k", 1, 3)])
    e.advance_watermark_to(5)
    before = (e.input_watermark, e.output_watermark, e.holds(), e.pending_windows())
    with pytest.raises(ValueError, match="backwards"):
        e.advance_watermark_to(4)
    with pytest.raises(ValueError, match=r"elements\[1\] timestamp"):
        e.add_elements([("k", 2, 4), ("k", 3, MAX_TIMESTAMP + 1)])
    with pytest.raises(ValueError, match=r"elements\[0\] must be"):
        e.add_elements([("k", 2)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="backwards"):
        e.advance_processing_time(-1)
    with pytest.raises(TypeError):
        e.advance_watermark_to(5.5)  # type: ignore[arg-type]
    assert (e.input_watermark, e.output_watermark, e.holds(), e.pending_windows()) == before
    (pane,) = e.advance_watermark_to(10)
    assert pane.values == (1,)


def test_invalid_strategies_are_rejected():
    with pytest.raises(ValueError, match="allowed_lateness"):
        strategy(allowed_lateness=-1)
    with pytest.raises(ValueError, match="GlobalWindows with DefaultTrigger"):
        WindowingStrategy(GlobalWindows())
    with pytest.raises(ValueError, match="unsafe trigger"):
        strategy(trigger=AfterWatermark(), allowed_lateness=1)
    with pytest.raises(TypeError, match="trigger"):
        strategy(trigger="default")
    with pytest.raises(TypeError, match="WindowingStrategy"):
        GroupByWindowEngine(FixedWindows(10))  # type: ignore[arg-type]
    # allowed with Beam's flag, or without lateness
    strategy(trigger=AfterWatermark(), allowed_lateness=1, allow_unsafe_triggers=True)
    strategy(trigger=AfterWatermark())


def test_run_script_gives_panes_and_watermark_series():
    events = [
        ElementEvent([("k", 1, 3), ("j", 2, 12)]),
        WatermarkEvent(10),
        ProcessingTimeEvent(7),
        ElementEvent([("k", 3, 4)]),
    ]
    r = run_script(events, strategy(allowed_lateness=5), fast=False)
    assert [(p.key, p.timing, e) for p, e in zip(r.panes, r.pane_event, strict=True)] == [
        ("k", Timing.ON_TIME, 1),
        ("k", Timing.LATE, 3),
        ("j", Timing.ON_TIME, 4),
    ]
    assert r.input_watermark.tolist() == [r.input_watermark[0], 10, 10, 10, MAX_TIMESTAMP]
    assert r.output_watermark.tolist()[1:] == [10, 10, 10, MAX_TIMESTAMP]
    assert r.processing_time.tolist() == [0, 0, 7, 7, 7]
    assert not r.stalled
    fast = run_script(Script(events), strategy(allowed_lateness=5))
    assert sorted(map(repr, fast.panes)) == sorted(map(repr, r.panes))
    assert np.array_equal(fast.output_watermark, r.output_watermark)


def test_stalled_when_holds_outlive_the_input():
    r = run_script(
        [ElementEvent([("k", 1, 3)])],
        strategy(trigger=Repeatedly(AfterProcessingTime(5)), allow_unsafe_triggers=True),
    )
    assert r.panes == [] and r.stalled and r.pending_processing_timers == 1


# -- properties -------------------------------------------------------------------------

script = st.lists(
    st.one_of(
        st.tuples(
            st.just("el"),
            st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 60)), min_size=1, max_size=4),
        ),
        st.tuples(st.just("wm"), st.integers(0, 15)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    script,
    st.sampled_from(["fixed", "sliding", "sessions"]),
    st.integers(0, 20),
    st.sampled_from(list(TimestampCombiner)),
)
def test_engine_invariants(ops, fn_name, lateness, combiner):
    fn = {"fixed": FixedWindows(10), "sliding": SlidingWindows(10, 5), "sessions": Sessions(7)}[
        fn_name
    ]
    e = GroupByWindowEngine(strategy(fn, allowed_lateness=lateness, timestamp_combiner=combiner))
    wm = 0
    n_rows = 0
    fired = []
    for op, arg in ops:
        if op == "el":
            n_rows += sum(len(fn.assign(ts)) for _, ts in arg)
            fired += e.add_elements([(k, ts, ts) for k, ts in arg])
        else:
            wm += arg
            fired += e.advance_watermark_to(wm)
        # the output watermark is the input held by the state hold (not latched)
        hold = e.min_hold_value()
        assert e.output_watermark == (
            e.input_watermark if hold is None else min(e.input_watermark, hold)
        )
    fired += e.advance_watermark_to_infinity()
    # discarding DefaultTrigger: every (element, window) is in exactly one pane or dropped
    assert sum(len(p.values) for p in fired) + sum(e.dropped.values()) == n_rows
    for p in fired:
        assert p.timestamp <= p.window.max_timestamp
        if p.timing is Timing.LATE:
            assert p.timestamp == p.window.max_timestamp


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("el"),
                st.lists(
                    st.tuples(st.sampled_from("abc"), st.integers(-5, 80)), min_size=1, max_size=5
                ),
            ),
            st.tuples(st.just("wm"), st.integers(0, 12)),
            st.tuples(st.just("pt"), st.integers(1, 5)),
        ),
        max_size=30,
    ),
    st.sampled_from(["fixed", "sliding", "global"]),
    st.sampled_from([DefaultTrigger(), AfterWatermark()]),
    st.sampled_from(list(AccumulationMode)),
    st.sampled_from(list(TimestampCombiner)),
    st.integers(0, 20),
)
def test_fast_path_equals_incremental_engine(ops, fn_name, trigger, mode, combiner, lateness):
    fn = {
        "fixed": FixedWindows(10, 3),
        "sliding": SlidingWindows(12, 4),
        "global": GlobalWindows(),
    }[fn_name]
    events = []
    wm = 0
    value = 0
    for op, arg in ops:
        if op == "el":
            els = []
            for k, ts in arg:
                els.append((k, value, ts))
                value += 1
            events.append(ElementEvent(els))
        elif op == "wm":
            wm += arg
            events.append(WatermarkEvent(wm))
        else:
            events.append(ProcessingTimeEvent(arg))
    strat = WindowingStrategy(fn, trigger, mode, lateness, combiner, allow_unsafe_triggers=True)
    slow = run_script(events, strat, fast=False)
    fast = run_script(events, strat)
    assert canon(fast) == canon(slow)
    assert np.array_equal(fast.output_watermark, slow.output_watermark)
    assert np.array_equal(fast.input_watermark, slow.input_watermark)
    assert np.array_equal(fast.processing_time, slow.processing_time)
    assert (fast.dropped, fast.late_elements, fast.stalled) == (
        slow.dropped,
        slow.late_elements,
        slow.stalled,
    )


@pytest.mark.parametrize("n_keys", [1, 3, 40_000])
def test_fast_path_group_order_is_lexsort(n_keys):
    from theory.windowing.fast_path import _group_order

    rng = np.random.default_rng(n_keys)
    key = rng.integers(0, n_keys, 50_000)
    start = rng.integers(-5, 5, 50_000) * 10
    assert np.array_equal(_group_order(key, start, n_keys), np.lexsort((start, key)))


# -- the fast path's refusals: each named, each leaving the script to the engine ----------


class _LateWatermark(WatermarkEvent):
    """A WatermarkEvent subclass: not exactly a script type, so the fast path refuses it."""


def _refusal_cases():
    fixed = WindowingStrategy(FixedWindows(10), allowed_lateness=100)
    near_max = MAX_TIMESTAMP - 100
    return [
        (
            Refusal.TRIGGER,
            [ElementEvent([("k", 1, 3)])],
            strategy(trigger=Repeatedly(AfterProcessingTime(5)), allow_unsafe_triggers=True),
        ),
        (Refusal.MERGING, [ElementEvent([("k", 1, 3)])], strategy(Sessions(5))),
        (
            Refusal.ELEMENT_POLICY,
            [ElementEvent([("k", 1, 3)])],
            strategy(timestamp_combiner=ElementPolicy(lambda ts, w: ts)),
        ),
        (Refusal.EVENT_TYPE, [ElementEvent([("k", 1, 3)]), _LateWatermark(20)], fixed),
        (Refusal.NEVER_FIRES, [ElementEvent([("k", 1, near_max)])], strategy(FixedWindows(300))),
        (Refusal.HELD_LATE_PANE, _held_late_chain(12), strategy(FixedWindows(1), **_HELD)),
    ]


#: A strategy's arguments for :func:`_held_late_chain`.
_HELD = {"allowed_lateness": 10**6, "timestamp_combiner": TimestampCombiner.OUTPUT_AT_EARLIEST}


def _held_late_chain(n: int) -> list[Event]:
    """Late panes fired EARLY, each because the one before keeps its hold: under
    FixedWindows(1) and EARLIEST, an on-time hold at 1000 keeps the output watermark at
    999 when ``x`` at 999 comes late (EARLY, its hold kept); after the on-time pane, the
    late ``x`` at 998, 997, ... each find it one below the window just before theirs,
    held there only by the previous one's hold: ``n`` rounds to find them all."""
    events: list[Event] = [ElementEvent([("a", 0, 1000)]), WatermarkEvent(1000)]
    events += [ElementEvent([("x", 1, 999)]), WatermarkEvent(2000)]
    events += [ElementEvent([("x", 2 + i, 998 - i)]) for i in range(n)]
    return events


@pytest.mark.parametrize(("reason", "events", "strat"), _refusal_cases())
def test_fast_path_refuses_what_it_does_not_model(reason, events, strat):
    evs = Script(events).events
    assert run_fast(evs, strat) is reason
    assert strategy_refusal(strat) is (reason if reason in _STRATEGY_REFUSALS else None)
    fast, slow = run_script(events, strat), run_script(events, strat, fast=False)
    assert canon(fast) == canon(slow)
    assert np.array_equal(fast.output_watermark, slow.output_watermark)


_STRATEGY_REFUSALS = (Refusal.TRIGGER, Refusal.MERGING, Refusal.ELEMENT_POLICY)


@pytest.mark.parametrize("combiner", list(TimestampCombiner))
@pytest.mark.parametrize("mode", list(AccumulationMode))
def test_fast_path_models_late_panes_fired_early(combiner, mode):
    """A late pane fired while the output watermark is held at or before its window is
    EARLY, keeps its hold (a stall) and its non-speculative index is -1 before any
    non-EARLY pane of the window: vectorised, equal to the engine, for a chain of such
    panes found in rounds and for a late pane behind another window's on-time hold."""
    behind = [ElementEvent([("a", 1, 10)]), WatermarkEvent(12), ElementEvent([("b", 2, 5)])]
    for events, fn in ((_held_late_chain(4), FixedWindows(1)), (behind, FixedWindows(10))):
        strat = strategy(fn, accumulation_mode=mode, **{**_HELD, "timestamp_combiner": combiner})
        fast, slow = run_script(events, strat), run_script(events, strat, fast=False)
        assert fast.path == "vectorised", fast.refusal
        assert canon(fast) == canon(slow)
        for series in ("output_watermark", "state_hold"):
            assert np.array_equal(getattr(fast, series), getattr(slow, series)), series
        assert (fast.stalled, fast.dropped, fast.late_elements) == (
            slow.stalled,
            slow.dropped,
            slow.late_elements,
        )
        early = [p for p in fast.panes if p.timing is Timing.EARLY]
        assert all(p.nonspeculative_index == -1 and p.index == 0 for p in early)
        if fn.size == 1:  # the chain: x at 999, 998, ..., 995, each EARLY
            assert len(early) == 5 and fast.stalled
    # behind [10, 20)'s hold: at 9 (EARLIEST, LATEST) b's pane is EARLY, at 19 (EOW) LATE
    assert [p.key for p in early] == ([] if combiner is TimestampCombiner.OUTPUT_AT_EOW else ["b"])


@pytest.mark.parametrize(
    "combiner", [TimestampCombiner.OUTPUT_AT_EARLIEST, TimestampCombiner.OUTPUT_AT_LATEST]
)
def test_fast_path_settles_old_element_holds(combiner):
    """A hold at 2 keeps the output watermark at 1, so an element at 1 < input 5 is not
    too late to hold: it holds (the state hold drops to 0) and gives b's pane its time;
    one at 0 is too late. Vectorised (once refused as OLD_ELEMENT_HOLDS), as the engine."""
    events = [
        ElementEvent([("a", 1, 2)]),
        WatermarkEvent(5),
        ElementEvent([("b", 2, 1), ("c", 3, 0)]),
    ]
    strat = WindowingStrategy(FixedWindows(10), timestamp_combiner=combiner)
    fast, slow = run_script(events, strat), run_script(events, strat, fast=False)
    assert_same(fast, slow)
    assert fast.state_hold is not None and fast.state_hold.tolist()[:3] == [1, 1, 0]
    stamps = {p.key: p.timestamp for p in fast.panes}
    assert stamps == {"a": 2, "b": 1, "c": 9}  # c held nothing: the window's end


def test_fast_path_refusals_with_errors_leave_the_error_to_the_engine():
    fixed = WindowingStrategy(FixedWindows(10))
    unhashable = [ElementEvent([(["k"], 1, 3)])]
    assert run_fast(Script(unhashable).events, fixed) is Refusal.UNHASHABLE_KEY
    with pytest.raises(TypeError, match="unhashable"):
        run_script(unhashable, fixed)
    overflow = [ElementEvent([("k", 1, MAX_TIMESTAMP)])]
    big = WindowingStrategy(FixedWindows(10**6))
    assert run_fast(Script(overflow).events, big) is Refusal.OVERFLOW
    with pytest.raises(OverflowError):
        run_script(overflow, big)


def test_engine_error_convention():
    e = GroupByWindowEngine(strategy())
    with pytest.raises(TypeError, match=r"elements\[0\] must be a \(key, value, timestamp\)"):
        e.add_elements([["k", 1, 3]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"elements\[0\] timestamp"):
        e.add_elements([("k", 1, 3.0)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="delta"):
        e.advance_processing_time(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"elements\[0\] must be a \(key, value, timestamp\)"):
        ElementEvent([3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"elements\[0\] must be \(key, value, timestamp\)"):
        ElementEvent([("k", 1)])  # type: ignore[list-item]
    assert e.pending_windows() == 0 and e.processing_time == 0


@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(1, 20), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    )
)
@settings(max_examples=40, deadline=None)
def test_under_global_windows_each_row_is_grouped_in_the_window_it_carries(rows):
    # Beam groups by the windows elements carry: a row in [start, start + span) under
    # GlobalWindows (an element that brought its own window) fires in that window
    e = GroupByWindowEngine(strategy(GlobalWindows(), allow_unsafe_triggers=True))
    keys = [f"k{k}" for _, _, k in rows]
    starts = [start for start, _, _ in rows]
    ends = [start + span for start, span, _ in rows]
    panes = e.add_rows(
        keys, list(range(len(rows))), starts, list(range(len(rows))), starts, ends, 0, len(rows)
    )
    panes += e.advance_watermark_to(MAX_TIMESTAMP)
    got = {(p.key, p.window, v) for p in panes for v in p.values}
    want = {(keys[i], IntervalWindow(starts[i], ends[i]), i) for i in range(len(rows))}
    assert got == want
