"""theory.flink: Flink's watermark generation, idleness, alignment and event-time windows.

Flink facts used here were read from the apache-flink 2.3 jars (javap) and Flink's source:
``BoundedOutOfOrdernessWatermarks`` (``max - bound - 1`` at ``onPeriodicEmit``),
``TimestampsAndWatermarksOperator.WatermarkEmitter`` (drops watermarks ``<=`` the current one;
``markActive`` only inside a successful emit), ``WatermarksWithIdleness.IdlenessTimer``
(checked at periodic emits only, strict ``>``), ``WindowOperator`` (``isWindowLate``:
``cleanupTime <= watermark``; ``isElementLate``: ``ts + lateness <= watermark``; no cleanup
timer at ``Long.MAX_VALUE``), ``EventTimeTrigger`` (FIRE on a late element, never PURGE),
``TimeWindow.getWindowStartWithOffset`` and the inclusive ``TimeWindow.intersects``,
``SourceOperator`` / ``SourceCoordinator`` (``max desired = group min + drift``, ring buffer of
3 samples by default). The real-Flink oracle is ``test_flink_oracle.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.flink.alignment import (
    simulate_alignment,
)
from theory.flink.conventions import (
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    flink_bounded_out_of_orderness_curve,
    flink_to_core,
    timestamp_from_millis,
    watermark_from_millis,
    watermark_to_millis,
)
from theory.flink.generation import (
    Emitted,
    PeriodicWatermarks,
    WatermarkSchedule,
    idle_detected_at,
    per_event_watermarks,
    periodic_watermarks,
)
from theory.flink.valve import StreamStatus
from theory.flink.windows import (
    Sessions,
    Sliding,
    Tumbling,
    WindowOperator,
    flink_intersects,
    flink_merge_windows,
    run_flink_windows,
    window_start_with_offset,
)
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, SECOND, from_datetime
from theory.windowing.windows import FixedWindows, IntervalWindow, SlidingWindows
from theory.windowing.windows import Sessions as BeamSessions

IDLE, ACTIVE = StreamStatus.IDLE, StreamStatus.ACTIVE
MS = 1_000


# =============================================================================== edge


def test_millisecond_watermarks_map_to_the_last_microsecond_of_their_millisecond() -> None:
    assert watermark_from_millis(4_999) == 4_999_999
    assert watermark_from_millis(-1) == -1
    assert watermark_from_millis(JAVA_LONG_MIN) == MIN_TIMESTAMP
    assert watermark_from_millis(JAVA_LONG_MAX) == MAX_TIMESTAMP
    assert watermark_to_millis(4_999_999) == 4_999
    assert watermark_to_millis(5_000_000) == 5_000  # "no ts_us <= 5_000_000" covers ms 5000
    assert watermark_to_millis(MIN_TIMESTAMP) == JAVA_LONG_MIN
    assert watermark_to_millis(MAX_TIMESTAMP) == JAVA_LONG_MAX
    assert timestamp_from_millis(1_500) == 1_500_000
    assert flink_to_core(watermark_from_millis(4_999)) == 5_000_000


@given(st.integers(-10**9, 10**9), st.integers(0, 10**6))
def test_bounded_out_of_orderness_in_us_equals_converted_ms(max_ms: int, bound_ms: int) -> None:
    """max - bound - 1 computed in µs on ms data is exactly Flink's ms value, converted."""
    in_ms = max_ms - bound_ms - 1
    in_us = max_ms * MS - bound_ms * MS - 1
    assert watermark_from_millis(in_ms) == in_us
    assert watermark_to_millis(in_us) == in_ms


# ======================================================================= seed example

SEED = [  # (event time, watermark Flink 2.x emits after it, windows it fires)
    ("16:25:24", "16:25:13.999", []),
    ("16:25:27", "16:25:16.999", []),
    ("16:25:34", "16:25:23.999", []),  # W passed the first element's time, window not done
    ("16:25:35", "16:25:24.999", [("16:25:20", "16:25:25", 1)]),
    ("16:25:37", "16:25:26.999", []),
    ("16:25:40", "16:25:29.999", [("16:25:25", "16:25:30", 1)]),
]


def _t(hms: str) -> int:
    h, m, s = hms.split(":")
    sec, _, frac = s.partition(".")
    micros = from_datetime(
        __import__("datetime").datetime(2019, 3, 26, int(h), int(m), int(sec))
    )
    return micros + int(frac.ljust(3, "0")) * MS if frac else micros


def test_seed_worked_example_10s_out_of_orderness_5s_tumbling() -> None:
    """The seed's experiment: 10 s bound, 5 s tumbling windows, one key. Each event's
    watermark and the windows it fires, as facts (Flink >= 1.11 emits max - bound - 1 ms)."""
    events = [("zhangsan", _t(ts), i) for i, (ts, _, _) in enumerate(SEED)]
    schedule = per_event_watermarks([e[1] for e in events], bound=10 * SECOND)
    assert [int(w) for w in schedule.value] == [_t(w) + 999 for _, w, _ in SEED]
    op = WindowOperator(Tumbling(5 * SECOND))
    for (key, ts, value), w, (_, _, expected) in zip(events, schedule.value, SEED, strict=True):
        assert op.process_element(key, ts, value) == []
        fired = op.process_watermark(int(w))
        got = [(f.window.start, f.window.end, f.count) for f in fired]
        assert got == [(_t(a), _t(b), n) for a, b, n in expected]
    # an element of the fired window [16:25:20, 16:25:25) now is late: side output
    assert op.process_element("zhangsan", _t("16:25:21"), "late") == []
    assert [(x.timestamp, x.value) for x in op.late] == [(_t("16:25:21"), "late")]


def test_seed_example_with_the_seeds_own_convention_fires_on_the_same_events() -> None:
    """The seed's assigner emits max - bound (no -1). On whole-second data the same events
    fire the same windows: the -1 only matters for an element exactly at the boundary."""
    ts = [_t(x) for x, _, _ in SEED]
    old = WatermarkSchedule(np.arange(1, 7), np.maximum.accumulate(ts) - 10 * SECOND)
    new = per_event_watermarks(ts, bound=10 * SECOND)
    events = [("zhangsan", t, i) for i, t in enumerate(ts)]
    a = run_flink_windows(events, old, Tumbling(5 * SECOND), end_of_input=False)
    b = run_flink_windows(events, new, Tumbling(5 * SECOND), end_of_input=False)
    assert [(f.window, f.values) for f in a.firings] == [(f.window, f.values) for f in b.firings]
    assert len(b.firings) == 2


def test_seed_example_under_periodic_emission_fires_at_the_next_timer() -> None:
    """Typed in by hand, 1 s apart, with the default 200 ms interval: each window fires at the
    first periodic emit after the event that completes it."""
    ts = [_t(x) for x, _, _ in SEED]
    arrival = np.arange(len(ts)) * SECOND + 50_000  # 50 ms after each whole second
    emitted = periodic_watermarks(ts, arrival, bound=10 * SECOND, interval=200 * MS)
    sched = emitted.schedule(arrival)
    events = [("zhangsan", t, i) for i, t in enumerate(ts)]
    res = run_flink_windows(events, sched, Tumbling(5 * SECOND), end_of_input=False)
    assert [(f.values, f.watermark) for f in res.firings] == [
        ((0,), _t("16:25:24.999") + 999),
        ((1,), _t("16:25:29.999") + 999),
    ]
    assert emitted.watermark_times.tolist() == [200 * MS + i * SECOND for i in range(6)]


# ================================================================= periodic emission


def test_periodic_emission_facts() -> None:
    g = PeriodicWatermarks(bound=10, interval=100)
    assert g.on_event(50, 10) == []  # onEvent emits nothing
    assert g.on_event(40, 20) == []
    assert g.advance_to(99) == []
    assert g.advance_to(100) == [Emitted(100, 39)]  # 50 - 10 - 1
    assert g.advance_to(200) == []  # same value: suppressed
    assert g.on_event(45, 250) == [] and g.advance_to(300) == []  # no new maximum
    assert g.on_event(200, 300 + 1) == []
    assert g.advance_to(400) == [Emitted(400, 189)]
    assert g.finish(450) == [Emitted(450, MAX_TIMESTAMP)]


def test_element_at_a_timers_time_is_read_before_the_timer() -> None:
    g = PeriodicWatermarks(bound=0, interval=100)
    assert g.on_event(7, 100) == []
    assert g.advance_to(100) == [Emitted(100, 6)]
    vec = periodic_watermarks([7], [100], bound=0, interval=100).items()
    assert vec == [Emitted(100, 6)]


def test_no_element_no_watermark_and_finish_flushes() -> None:
    g = PeriodicWatermarks(bound=5, interval=10, start=1_000)
    assert g.advance_to(5_000) == []
    assert g.finish() == [Emitted(5_000, MAX_TIMESTAMP)]
    with pytest.raises(ValueError, match="finished"):
        g.on_event(1, 6_000)


def test_watermark_lag_is_bound_plus_at_most_one_interval() -> None:
    """Flink's javadoc: the delay is the periodic interval plus the out-of-orderness bound."""
    rng = np.random.default_rng(7)
    a = np.sort(rng.integers(0, 100_000, 300))
    e = a.copy()  # in-order data
    out = periodic_watermarks(e, a, bound=1_000, interval=200)
    curve = flink_bounded_out_of_orderness_curve(e, a, bound=1_000)
    t = out.watermark_times
    # each emitted value is the per-event value at its timer, from at most one interval ago
    assert np.array_equal(out.watermarks, curve.at(t))
    assert np.all(curve.before(t - 200 + 1) <= out.watermarks)


@st.composite
def periodic_inputs(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 25))
    a = sorted(draw(st.lists(st.integers(0, 80), min_size=n, max_size=n)))
    e = draw(st.lists(st.integers(-30, 120), min_size=n, max_size=n))
    start = draw(st.integers(-10, 0))
    return {
        "e": e,
        "a": a,
        "bound": draw(st.integers(0, 12)),
        "interval": draw(st.integers(1, 9)),
        "start": start,
        "timeout": draw(st.one_of(st.none(), st.integers(1, 30))),
        "until": max([start, *a]) + draw(st.integers(0, 40)),
        "finish": draw(st.booleans()),
        "default_until": draw(st.booleans()),
    }


@settings(max_examples=400, deadline=None)
@given(periodic_inputs())
def test_incremental_equals_vectorised(p: dict) -> None:
    g = PeriodicWatermarks(p["bound"], p["interval"], start=p["start"], idle_timeout=p["timeout"])
    until = p["until"]
    if p["default_until"] and not p["finish"]:
        until = None
    inc: list[Emitted] = []
    for e, a in zip(p["e"], p["a"], strict=True):
        inc += g.on_event(e, a)
    if until is None:
        if p["a"]:
            k = max(1, -((p["start"] - p["a"][-1]) // p["interval"]))
            inc += g.advance_to(p["start"] + k * p["interval"])
    else:
        inc += g.finish(until) if p["finish"] else g.advance_to(until)
    vec = periodic_watermarks(
        np.array(p["e"], dtype=np.int64), np.array(p["a"], dtype=np.int64), bound=p["bound"],
        interval=p["interval"], start=p["start"], until=until, idle_timeout=p["timeout"],
        finish=p["finish"],
    )
    assert vec.items() == inc
    w = vec.watermarks
    assert np.all(w[1:] > w[:-1])  # strictly increasing: non-increasing ones suppressed
    assert vec.core_series().is_monotonic()


@settings(max_examples=200, deadline=None)
@given(periodic_inputs())
def test_without_idleness_the_emits_sample_the_per_event_value(p: dict) -> None:
    e, a = np.array(p["e"], dtype=np.int64), np.array(p["a"], dtype=np.int64)
    out = periodic_watermarks(e, a, bound=p["bound"], interval=p["interval"], start=p["start"],
                              until=p["until"])
    curve = flink_bounded_out_of_orderness_curve(e, a, bound=p["bound"])
    assert np.array_equal(out.watermarks, curve.at(out.watermark_times))
    assert set(out.kinds.tolist()) <= {0}


# =========================================================================== idleness


def test_idleness_is_detected_only_at_periodic_emits() -> None:
    """interval 200 ms, timeout 1 s; last element arrives at 50 ms. Timer 200 saw it; timer 400
    starts the countdown; idle at the first timer strictly more than 1 s later: 1600 ms."""
    g = PeriodicWatermarks(0, 200 * MS, idle_timeout=1 * SECOND)
    g.on_event(5 * SECOND, 50 * MS)
    out = g.advance_to(1_400 * MS)
    assert out == [Emitted(200 * MS, 5 * SECOND - 1)]  # 1400 - 400 = timeout, not more
    assert g.advance_to(1_600 * MS) == [Emitted(1_600 * MS, IDLE)]
    assert g.advance_to(10 * SECOND) == []  # IDLE once
    assert idle_detected_at(50 * MS, interval=200 * MS, idle_timeout=1 * SECOND) == 1_600 * MS


def test_idleness_without_any_element_counts_from_the_first_timer() -> None:
    g = PeriodicWatermarks(0, 200, idle_timeout=1_000)
    assert g.advance_to(1_200) == []
    assert g.advance_to(1_400) == [Emitted(1_400, IDLE)]
    assert idle_detected_at(None, interval=200, idle_timeout=1_000) == 1_400


def test_an_element_does_not_end_idleness_a_higher_watermark_does() -> None:
    g = PeriodicWatermarks(0, 100, idle_timeout=150)
    g.on_event(1_000, 10)
    assert g.advance_to(400) == [Emitted(100, 999), Emitted(400, IDLE)]
    g.on_event(500, 450)  # old data: the generator's value does not rise
    assert g.advance_to(500) == []
    assert g.is_idle  # still IDLE downstream, although data flows
    g.on_event(2_000, 550)
    assert g.advance_to(600) == [Emitted(600, ACTIVE), Emitted(600, 1_999)]
    assert not g.is_idle


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 10**4), st.integers(1, 10**5), st.integers(-500, 0))
def test_idle_detection_lies_within_timeout_plus_one_to_three_intervals(
    last: int, interval: int, timeout: int, start: int
) -> None:
    t = idle_detected_at(last, interval=interval, idle_timeout=timeout, start=start)
    assert last + timeout + interval < t <= last + timeout + 3 * interval
    g = PeriodicWatermarks(0, interval, start=start, idle_timeout=timeout)
    g.on_event(0, last)
    out = [x for x in g.advance_to(t) if x.output is IDLE]
    assert out == [Emitted(t, IDLE)]


# ========================================================================== alignment


def test_alignment_pauses_the_source_ahead_by_more_than_the_drift() -> None:
    """A reads 0, 1, 2 ... s; B starts 50 s ahead. Drift 10 s, no sampling buffer (Flink's
    pre-2.3 rule): B reads one record, is paused at 1 s until A's watermark (40 s - 1 µs)
    plus the drift reaches B's (50 s - 1 µs), at 41 s, and reads its second record at 42 s."""
    a = np.arange(100) * SECOND
    b = (np.arange(100) + 50) * SECOND
    r = simulate_alignment([a, b], bound=0, max_allowed_drift=10 * SECOND,
                           update_interval=SECOND, tick=SECOND, buffer_size=0)
    assert r.paused[0] == []
    assert r.paused[1][0] == (1 * SECOND, 41 * SECOND)
    assert r.read_time[1][:2].tolist() == [1 * SECOND, 42 * SECOND]
    assert r.read_time[0].tolist() == [(i + 1) * SECOND for i in range(100)]  # never waits


def test_alignment_ring_buffer_delays_pausing_by_its_size() -> None:
    """Flink 2.3's default buffer of 3 samples: B keeps reading for three update intervals."""
    a = np.arange(100) * SECOND
    b = (np.arange(100) + 50) * SECOND
    r = simulate_alignment([a, b], bound=0, max_allowed_drift=10 * SECOND,
                           update_interval=SECOND, tick=SECOND)
    assert r.read_time[1][:3].tolist() == [1 * SECOND, 2 * SECOND, 3 * SECOND]
    assert r.paused[1][0][0] == 3 * SECOND


def test_without_drift_pressure_no_source_pauses() -> None:
    a = np.arange(50) * SECOND
    b = (np.arange(50) + 30) * SECOND
    r = simulate_alignment([a, b], bound=0, max_allowed_drift=10**9 * SECOND,
                           update_interval=2 * SECOND, tick=SECOND)
    assert r.paused == [[], []]
    assert r.end_time == 50 * SECOND


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 500), min_size=0, max_size=30), min_size=1, max_size=4),
    st.integers(0, 100), st.integers(1, 3), st.integers(1, 3), st.integers(0, 3),
)
def test_alignment_reads_everything_once_and_nothing_while_paused(
    logs: list[list[int]], drift: int, every: int, rate: int, buf: int
) -> None:
    r = simulate_alignment([np.array(x, dtype=np.int64) for x in logs], bound=5,
                           max_allowed_drift=drift, update_interval=every * 10, tick=10,
                           records_per_tick=rate, buffer_size=buf)
    assert sorted(r.order) == sorted((s, i) for s, x in enumerate(logs) for i in range(len(x)))
    for s, times in enumerate(r.read_time):
        assert np.all(np.diff(times) >= 0)
        for lo, hi in r.paused[s]:
            assert not np.any((times > lo) & (times <= hi))  # reads nothing while paused
    last_read = max((int(t.max()) for t in r.read_time if t.size), default=0)
    assert r.end_time == last_read  # the run stops when the last record is read


# ============================================================================ windows


@given(st.integers(-10**12, 10**12), st.integers(1, 10**7), st.data())
def test_window_start_is_the_floor_formula(ts: int, size: int, data: st.DataObject) -> None:
    offset = data.draw(st.integers(-size + 1, size - 1))
    start = window_start_with_offset(ts, offset, size)
    assert start <= ts < start + size and (start - offset) % size == 0


def test_window_start_java_remainder_cases() -> None:
    assert window_start_with_offset(-1, 0, 5) == -5
    assert window_start_with_offset(7, 2, 5) == 7
    assert window_start_with_offset(1, 2, 5) == -3
    assert window_start_with_offset(1, -2, 5) == -2


@settings(deadline=None)
@given(st.integers(-10**9, 10**9), st.integers(1, 10**5), st.integers(1, 10**5), st.data())
def test_tumbling_and_sliding_match_beams_windows(ts: int, size: int, slide: int,
                                                  data: st.DataObject) -> None:
    """Flink and Beam assign the same fixed/sliding windows (same order, latest first)."""
    slide = max(slide, size // 64)  # at most ~64 windows per element
    offset = data.draw(st.integers(0, size - 1))
    assert Tumbling(size, offset).assign(ts) == list(FixedWindows(size, offset).assign(ts))
    off2 = data.draw(st.integers(0, slide - 1))
    beam = list(SlidingWindows(size, slide, off2).assign(ts))
    assert Sliding(size, slide, off2).assign(ts) == beam


def test_divergence_flink_merges_touching_session_windows_beam_does_not() -> None:
    """Named divergence: Flink's TimeWindow.intersects is inclusive (start <= other.end and
    end >= other.start), so sessions [0, 10) and [10, 20) merge; Beam's is strict."""
    w1, w2 = IntervalWindow(0, 10), IntervalWindow(10, 20)
    assert flink_intersects(w1, w2) and not w1.intersects(w2)
    assert flink_merge_windows([w1, w2]) == [(frozenset({w1, w2}), IntervalWindow(0, 20))]
    assert BeamSessions(10).merge([w1, w2]) == []
    events = [("k", 0, "a"), ("k", 10, "b")]
    flink = run_flink_windows(events, [None, None], Sessions(10))
    assert [(f.window, f.values) for f in flink.firings] == [(IntervalWindow(0, 20), ("a", "b"))]
    starts, ends = BeamSessions(10).merge_array(np.array(["k", "k"]), np.array([0, 10]))
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == [(0, 10), (10, 20)]


def test_fire_when_max_timestamp_reaches_the_watermark() -> None:
    op = WindowOperator(Tumbling(10))
    op.process_element("k", 3, "x")
    assert op.process_watermark(8) == []
    fired = op.process_watermark(9)  # max_timestamp 9 <= W 9
    assert [(f.window, f.values, f.watermark, f.cause) for f in fired] == [
        (IntervalWindow(0, 10), ("x",), 9, "timer")
    ]


def test_elements_at_or_below_the_watermark_are_late() -> None:
    """Flink's convention: W says no more ts <= W, so ts == W is late (lateness 0)."""
    op = WindowOperator(Tumbling(10))
    op.process_watermark(9)
    op.process_element("k", 9, "at-W")
    op.process_element("k", 10, "after-W")
    assert [x.value for x in op.late] == ["at-W"]
    assert op.end_of_input()[0].values == ("after-W",)


def test_allowed_lateness_late_firings_accumulate_then_cleanup() -> None:
    """EventTimeTrigger FIREs (never PURGEs) on each element within the lateness: the pane
    grows 1, 2, 3. At W >= max_timestamp + lateness the state is dropped; later elements go to
    the side output."""
    op = WindowOperator(Tumbling(10), allowed_lateness=5)
    op.process_element("k", 1, "a")
    assert [f.count for f in op.process_watermark(9)] == [1]
    assert [(f.count, f.cause) for f in op.process_element("k", 2, "b")] == [(2, "late")]
    op.process_watermark(13)
    assert [(f.values, f.watermark) for f in op.process_element("k", 3, "c")] == [
        (("a", "b", "c"), 13)
    ]
    assert op.process_watermark(14) == []  # cleanup at 9 + 5 = 14: no output
    assert op.in_flight("k") == [] and op.num_timers == 0
    assert op.process_element("k", 4, "d") == []
    assert [(x.timestamp, x.value, x.watermark) for x in op.late] == [(4, "d", 14)]


def test_without_side_output_late_records_are_counted_as_dropped() -> None:
    events = [("k", 100, 0), ("k", 1, 1), ("k", 2, 2)]
    res = run_flink_windows(events, [99, None, None], Tumbling(10), late_side_output=False)
    assert res.late == [] and res.num_late_records_dropped == 2


def test_sliding_element_is_late_only_if_all_its_windows_are() -> None:
    op = WindowOperator(Sliding(10, 5))
    op.process_watermark(12)  # [0, 10) is late, [5, 15) is not
    assert op.process_element("k", 7, "x") == []
    assert op.late == []
    assert [(f.window, f.values) for f in op.end_of_input()] == [(IntervalWindow(5, 15), ("x",))]


def test_sliding_gaps_drop_elements_silently_unless_late() -> None:
    op = WindowOperator(Sliding(5, 10))  # windows [0, 5), [10, 15): 5..9 have none
    op.process_element("k", 7, "gap")
    assert op.late == [] and op.num_skipped == 1
    op.process_watermark(100)
    op.process_element("k", 8, "gap-late")
    assert [x.value for x in op.late] == ["gap-late"]


def test_session_merge_happens_before_the_lateness_test() -> None:
    """A late element whose proto-session merges into a live session is kept (Flink merges
    first, then tests the merged window)."""
    op = WindowOperator(Sessions(10))
    op.process_element("k", 20, "live")  # [20, 30)
    op.process_watermark(25)
    fired = op.process_element("k", 12, "old")  # [12, 22) is late alone; merged [12, 30)
    assert fired == [] and op.late == []
    assert op.in_flight("k") == [IntervalWindow(12, 30)]
    op.process_element("k", 1, "gone")  # [1, 11) merges with nothing: late
    assert [x.value for x in op.late] == ["gone"]
    assert [f.values for f in op.end_of_input()] == [("live", "old")]


def test_session_late_firing_fires_the_merged_window() -> None:
    op = WindowOperator(Sessions(10), allowed_lateness=100)
    op.process_element("k", 0, "a")  # [0, 10)
    assert [f.window for f in op.process_watermark(50)] == [IntervalWindow(0, 10)]
    fired = op.process_element("k", 10, "b")  # touches: [0, 20), max 19 <= 50: fire now
    assert [(f.window, f.values, f.cause) for f in fired] == [
        (IntervalWindow(0, 20), ("a", "b"), "late")
    ]


def test_firings_follow_timer_order_and_end_of_input_flushes() -> None:
    events = [("b", 25, 0), ("a", 5, 1), ("a", 15, 2)]
    res = run_flink_windows(events, [None, None, None], Tumbling(10))
    assert [(f.key, f.window.start) for f in res.firings] == [("a", 0), ("a", 10), ("b", 20)]
    assert all(f.watermark == MAX_TIMESTAMP for f in res.firings)


def test_non_increasing_watermarks_are_suppressed_in_the_stream() -> None:
    events = [("k", 5, 0), ("k", 15, 1), ("k", 6, 2)]
    res = run_flink_windows(events, [9, 3, 9], Tumbling(10), end_of_input=False)
    assert [(f.values, f.watermark) for f in res.firings] == [((0,), 9)]
    assert [x.value for x in res.late] == [2]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 200)), max_size=40),
    st.integers(0, 30), st.integers(0, 40), st.integers(1, 30),
)
def test_every_element_is_in_a_final_pane_or_late(events: list[tuple[str, int]], bound: int,
                                                   lateness: int, size: int) -> None:
    evs = [(k, t, i) for i, (k, t) in enumerate(events)]
    res = run_flink_windows(evs, per_event_watermarks([t for _, t in events], bound=bound)
                            if evs else [], Tumbling(size), lateness)
    last: dict[tuple[str, IntervalWindow], tuple[object, ...]] = {}
    for f in res.firings:
        assert f.window.max_timestamp <= f.watermark
        prev = last.get((str(f.key), f.window), ())
        assert f.values[: len(prev)] == prev  # panes accumulate
        last[(str(f.key), f.window)] = f.values
    in_panes = [int(str(v)) for vals in last.values() for v in vals]
    late = [int(str(x.value)) for x in res.late]
    assert sorted(in_panes + late) == list(range(len(evs)))
    for x in res.late:
        assert x.timestamp + lateness <= x.watermark


# ========================================================================== bad input


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: PeriodicWatermarks(-1, 100), "bound"),
        (lambda: PeriodicWatermarks(0, 0), "auto_watermark_interval"),
        (lambda: PeriodicWatermarks(0, -5), "auto_watermark_interval"),
        (lambda: PeriodicWatermarks(0, 10, idle_timeout=0), "idle_timeout"),
        (lambda: periodic_watermarks([1], [1], bound=-1, interval=10), "bound"),
        (lambda: periodic_watermarks([1], [1], bound=0, interval=0), "auto_watermark_interval"),
        (lambda: periodic_watermarks([1, 2], [1], bound=0, interval=5), "2 elements"),
        (lambda: periodic_watermarks([1], [-1], bound=0, interval=5), "before the operator"),
        (lambda: periodic_watermarks([1], [50], bound=0, interval=5, until=10), "after until"),
        (lambda: Tumbling(0), "size"),
        (lambda: Tumbling(10, 10), "abs\\(offset\\) < size"),
        (lambda: Tumbling(10, -10), "abs\\(offset\\) < size"),
        (lambda: Sliding(10, 0), "slide"),
        (lambda: Sliding(10, 5, 5), "abs\\(offset\\) < slide"),
        (lambda: Sliding(10**8, 1), "size // slide"),
        (lambda: Sessions(0), "gap"),
        (lambda: WindowOperator(Tumbling(10), allowed_lateness=-1), "allowed_lateness"),
        (lambda: idle_detected_at(5, interval=10, idle_timeout=0), "idle_timeout"),
        (lambda: simulate_alignment([[1]], bound=0, max_allowed_drift=0, update_interval=15,
                                    tick=10), "multiple of tick"),
        (lambda: simulate_alignment([[1]], bound=0, max_allowed_drift=-1, update_interval=10,
                                    tick=10), "max_allowed_drift"),
        (lambda: simulate_alignment([[1]], bound=0, max_allowed_drift=0, update_interval=10,
                                    tick=10, records_per_tick=0), "records_per_tick"),
        (lambda: simulate_alignment([], bound=0, max_allowed_drift=0, update_interval=10,
                                    tick=10), "at least one source"),
        (lambda: run_flink_windows([("k", 1, 0)], [], Tumbling(10)), "one per event"),
        (lambda: WatermarkSchedule(np.array([2, 1]), np.array([5, 6])), "non-decreasing"),
        (lambda: periodic_watermarks([1, 2], [5, 1], bound=0, interval=10).schedule([5, 1]),
         "non-decreasing"),
    ],
)
def test_bad_input_raises_clear_errors(make: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_types_and_order_raise() -> None:
    with pytest.raises(TypeError):
        Tumbling(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        WindowOperator("fixed:1s")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        periodic_watermarks([1.0], [1.0], bound=0, interval=10)
    g = PeriodicWatermarks(0, 10)
    g.on_event(1, 20)
    with pytest.raises(ValueError, match="arrival order"):
        g.on_event(1, 19)
    g.advance_to(30)
    with pytest.raises(ValueError, match="declared complete"):
        g.on_event(1, 30)
    with pytest.raises(ValueError, match="back in time"):
        g.advance_to(25)
    op = WindowOperator(Tumbling(10))
    op.process_watermark(50)
    with pytest.raises(ValueError, match="below the current"):
        op.process_watermark(40)
    with pytest.raises(ValueError, match="MAX_TIMESTAMP"):
        op.process_element("k", MAX_TIMESTAMP + 1)
    with pytest.raises(ValueError, match=r"events\[0\]"):
        run_flink_windows([("k", MAX_TIMESTAMP + 5, 0)], [None], Tumbling(10))
    with pytest.raises(TypeError):
        op.process_element(["unhashable"], 5)  # type: ignore[arg-type]
