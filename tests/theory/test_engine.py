import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.engine import STATE_HOLD, GroupByWindowEngine, Timing
from theory.time import MAX_TIMESTAMP
from theory.triggers import AfterWatermark
from theory.windowing import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windows import FixedWindows, IntervalWindow, Sessions, SlidingWindows


def strategy(fn=None, **kw):
    return WindowingStrategy(fn or FixedWindows(10), **kw)


def test_on_time_pane_fires_when_watermark_passes_max_timestamp():
    e = GroupByWindowEngine(strategy())
    assert e.add_elements([("k", 1, 3), ("k", 2, 7)]) == []
    assert e.advance_watermark_to(9) == []  # 9 == max_timestamp: not yet past
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
    assert e.holds() == {STATE_HOLD: 9}
    e.advance_watermark_to(9)
    assert e.output_watermark == 9
    e.advance_watermark_to(30)
    assert e.output_watermark == 30 and e.holds() == {}


def test_earliest_hold_is_the_minimum_non_late_timestamp():
    e = GroupByWindowEngine(strategy(timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST))
    e.add_elements([("k", 1, 6), ("k", 2, 4)])
    e.advance_watermark_to(5)
    assert e.output_watermark == 4
    e.add_elements([("k", 3, 2)])  # late: no hold
    (pane,) = e.advance_watermark_to(10)
    assert pane.timestamp == 4
    assert e.late_elements == 1


def test_latest_hold_is_the_maximum():
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
    assert on_time.values == (1,)


def test_droppable_data_is_counted_not_lost():
    e = GroupByWindowEngine(strategy(allowed_lateness=5))
    e.advance_watermark_to(15)
    assert e.add_elements([("k", 1, 3)]) == []  # 9 + 5 < 15: droppable
    assert e.dropped == {"expired": 1, "closed": 0}
    e2 = GroupByWindowEngine(strategy(allowed_lateness=5))
    e2.advance_watermark_to(14)
    assert len(e2.add_elements([("k", 1, 3)])) == 1  # 9 + 5 == 14: still allowed


def test_after_watermark_closes_the_window():
    e = GroupByWindowEngine(strategy(trigger=AfterWatermark(), allowed_lateness=100))
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
    e.add_elements([("k", "c", 12)])  # bridges [0,10) and [25,35) via [12,22)? no: 22 < 25
    e.add_elements([("k", "d", 18)])  # [18,28) overlaps [25,35) and [12,22)
    panes = e.advance_watermark_to_infinity()
    windows = sorted((p.window, tuple(sorted(p.values))) for p in panes)
    assert windows == [(IntervalWindow(0, 10), ("a",)), (IntervalWindow(12, 35), ("b", "c", "d"))]


def test_sliding_windows_fire_per_window():
    e = GroupByWindowEngine(strategy(SlidingWindows(10, 5)))
    e.add_elements([("k", 1, 7)])
    panes = e.advance_watermark_to_infinity()
    assert sorted(p.window for p in panes) == [IntervalWindow(0, 10), IntervalWindow(5, 15)]


def test_bad_input_leaves_state_unchanged():
    e = GroupByWindowEngine(strategy())
    e.add_elements([("k", 1, 3)])
    e.advance_watermark_to(5)
    with pytest.raises(ValueError, match="backwards"):
        e.advance_watermark_to(4)
    with pytest.raises(ValueError, match=r"elements\[1\] timestamp"):
        e.add_elements([("k", 2, 4), ("k", 3, MAX_TIMESTAMP + 1)])
    assert e.input_watermark == 5
    (pane,) = e.advance_watermark_to(10)
    assert pane.values == (1,)


def test_negative_allowed_lateness_is_rejected():
    with pytest.raises(ValueError, match="allowed_lateness"):
        strategy(allowed_lateness=-1)


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


@settings(max_examples=150)
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
        before = e.output_watermark
        if op == "el":
            n_rows += sum(len(fn.assign(ts)) for _, ts in arg)
            fired += e.add_elements([(k, ts, ts) for k, ts in arg])
        else:
            wm += arg
            fired += e.advance_watermark_to(wm)
        assert e.output_watermark >= before
        assert e.output_watermark <= e.input_watermark
    fired += e.advance_watermark_to_infinity()
    # discarding: every (element, window) row is in exactly one pane or counted as dropped
    assert sum(len(p.values) for p in fired) + sum(e.dropped.values()) == n_rows
    for p in fired:
        assert p.timestamp <= p.window.max_timestamp
        if p.timing is Timing.LATE:
            assert p.timestamp == p.window.max_timestamp
