"""compare_systems on the chapter-3 trace: each system's conventions reproduce its own
profile, and switching conventions one at a time leaves no difference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory import SECOND, Trace, chapter3, simulate
from theory.experiments.idleness import flink_idle_watermarks
from theory.experiments.systems import (
    Conventions,
    compare_systems,
    differences,
    profile_under,
    system_conventions,
)
from theory.experiments.tradeoff import STAGE, Strategy
from theory.flink.generation import periodic_watermarks
from theory.flink.windows import Tumbling, run_flink_windows
from theory.spark.trace import spark_trace_profile
from theory.windowing.windows import FixedWindows

BOUND = 10 * SECOND
WINDOW = 120 * SECOND
FLINK_INTERVAL = 2 * SECOND
SPARK_TRIGGER = 5 * SECOND


@pytest.fixture(scope="module")
def trace() -> Trace:
    return Trace.concat(chapter3.traces(1500, seed=3).values()).sorted_by_arrival()


def outcome(trace: Trace, system: str):
    conv = system_conventions(flink_interval=FLINK_INTERVAL, spark_trigger=SPARK_TRIGGER)[system]
    return profile_under(
        trace.event_time, trace.arrival_time, trace.key, conv, bound=BOUND, window_size=WINDOW
    )


def windows_of(o) -> dict:
    fired = o.fire_time >= 0
    return {
        (k, s): (t, c)
        for k, s, t, c in zip(
            o.key[fired].tolist(),
            o.start[fired].tolist(),
            o.fire_time[fired].tolist(),
            o.count[fired].tolist(),
            strict=True,
        )
    }


def test_beam_conventions_reproduce_the_beam_profile(trace):
    result = simulate(Strategy("b", f"bounded:{BOUND}us").pipeline(WINDOW), {"in": trace}, seed=0)
    stage = result.stages[STAGE]
    panes = stage.panes
    assert panes is not None
    # the simulator ends the input with a final watermark that flushes every window; the
    # comparison stops at the last arrival, so those panes are left out
    last = int(trace.event_time.max()) - BOUND
    beam = {
        (k, s): (t, c)
        for k, s, e, t, c in zip(
            panes.key.tolist(),
            panes.window_start.tolist(),
            panes.window_end.tolist(),
            panes.fire_time.tolist(),
            panes.count.tolist(),
            strict=True,
        )
        if e <= last
    }
    o = outcome(trace, "beam")
    assert windows_of(o) == beam
    assert int(o.dropped.sum()) == sum(stage.dropped.values()) > 0


def test_flink_conventions_reproduce_the_flink_profile(trace):
    outs = periodic_watermarks(
        trace.event_time, trace.arrival_time, bound=BOUND, interval=FLINK_INTERVAL
    )
    schedule = outs.schedule(trace.arrival_time)
    when = dict(zip(outs.values.tolist(), outs.times.tolist(), strict=True))
    events = list(
        zip(trace.key.tolist(), trace.event_time.tolist(), [None] * len(trace), strict=True)
    )
    run = run_flink_windows(events, schedule, Tumbling(WINDOW), end_of_input=False)
    flink = {(f.key, f.window.start): (when[f.watermark], f.count) for f in run.firings}
    o = outcome(trace, "flink")
    assert windows_of(o) == flink
    assert int(o.dropped.sum()) == len(run.late) > 0


def test_spark_conventions_are_the_spark_profile(trace):
    r = spark_trace_profile(
        trace.event_time,
        trace.arrival_time,
        trace.key,
        window=FixedWindows(WINDOW),
        delay=BOUND,
        trigger_interval=SPARK_TRIGGER,
    )
    o = outcome(trace, "spark")
    assert np.array_equal(o.fire_time, r.emit_time)
    assert np.array_equal(o.dropped, r.row_dropped) and o.dropped.any()


def test_every_difference_is_attributed_to_a_named_convention(trace):
    cmp = compare_systems(
        trace,
        bound=BOUND,
        window_size=WINDOW,
        flink_interval=FLINK_INTERVAL,
        spark_trigger=SPARK_TRIGGER,
    )
    att: dict[str, list[Any]] = cmp.attribution()
    for pair in (("beam", "flink"), ("beam", "spark"), ("flink", "spark")):
        start = differences(cmp.outcomes[pair[0]], cmp.outcomes[pair[1]])
        assert start != (0, 0), f"{pair}: the systems agree, nothing to attribute"
        rows = [
            i
            for i, (s, t) in enumerate(zip(att["source"], att["target"], strict=True))
            if (s, t) == pair
        ]
        assert att["windows_left"][rows[-1]] == 0 and att["rows_left"][rows[-1]] == 0
        removed_w = sum(att["removed_windows"][i] for i in rows)
        removed_r = sum(att["removed_rows"][i] for i in rows)
        assert (removed_w, removed_r) == start
    # beam -> spark: the watermark timing, the previous batch's watermark for late rows and
    # the milliseconds are each named
    names = [
        c
        for s, t, c in zip(att["source"], att["target"], att["convention"], strict=True)
        if (s, t) == ("beam", "spark")
    ]
    assert names == ["timing", "late_filter", "millis"]
    table: dict[str, list[Any]] = cmp.table()
    assert table["system"] == ["beam", "flink", "spark"]
    assert all(n > 0 for n in table["windows_fired"])


def test_a_subset_of_systems_and_bad_names(trace):
    cmp = compare_systems(trace, bound=BOUND, window_size=WINDOW, systems="spark,beam")
    assert list(cmp.outcomes) == ["spark", "beam"]
    assert {(s.source, s.target) for s in cmp.steps} == {("spark", "beam")}
    assert cmp.steps[-1].windows_left == cmp.steps[-1].rows_left == 0
    with pytest.raises(ValueError, match="unknown system 'storm'"):
        compare_systems(trace, bound=BOUND, window_size=WINDOW, systems=["beam", "storm"])
    with pytest.raises(ValueError, match="repeats"):
        compare_systems(trace, bound=BOUND, window_size=WINDOW, systems=["beam", "beam"])


def test_conventions_refuse_what_no_system_does():
    with pytest.raises(ValueError, match="needs timing='batch'"):
        Conventions("element", late_filter="previous-batch")
    with pytest.raises(ValueError, match="unknown timing"):
        Conventions("hourly")
    with pytest.raises(ValueError, match="interval must be > 0"):
        Conventions("periodic", 0)


def test_partitions_as_inputs_with_spark_policies(trace):
    """Each partition an input: Spark's conventions are its own multi-input profile;
    under min every system waits for the slowest partition (fewer windows closed on time
    than with one input); Spark under max differs from Beam by the policy too, and every
    difference is still attributed, the policy named."""
    kw = {"bound": BOUND, "window_size": WINDOW, "flink_interval": FLINK_INTERVAL,
          "spark_trigger": SPARK_TRIGGER}
    one = compare_systems(trace, **kw)
    per = compare_systems(trace, inputs="partition", **kw)
    r = spark_trace_profile(
        trace.event_time, trace.arrival_time, trace.key, window=FixedWindows(WINDOW),
        delay=BOUND, trigger_interval=SPARK_TRIGGER, inputs=trace.partition,
    )
    assert np.array_equal(per.outcomes["spark"].fire_time, r.emit_time)
    for system in ("beam", "flink", "spark"):
        assert differences(one.outcomes[system], per.outcomes[system]) != (0, 0), system
        assert per.outcomes[system].dropped.sum() <= one.outcomes[system].dropped.sum()
    mx = compare_systems(trace, inputs="partition", spark_policy="max", **kw)
    att: dict[str, list[Any]] = mx.attribution()
    names = [c for s, t, c in zip(att["source"], att["target"], att["convention"], strict=True)
             if (s, t) == ("beam", "spark")]
    assert names == ["timing", "late_filter", "millis", "policy"]
    last = max(i for i, (s, t) in enumerate(zip(att["source"], att["target"], strict=True))
               if (s, t) == ("beam", "spark"))
    assert att["windows_left"][last] == att["rows_left"][last] == 0
    assert att["removed_windows"][last] + att["removed_rows"][last] > 0  # the policy mattered
    with pytest.raises(ValueError, match="inputs must be None or 'partition'"):
        compare_systems(trace, inputs="key", **kw)


# ------------------------------------------------------------------ idle inputs

IDLE = 60 * SECOND


def flink_reference(trace: Trace, idle_timeout: int | None):
    """Flink's own profile, element by element: per partition an incremental
    ``PeriodicWatermarks`` (with ``withIdleness``), their outputs at each timer through
    the reference valve (``LinearScanValve``) in partition order, the valve's watermarks
    placed in the arrival-ordered stream of a ``WindowOperator``. Returns (per fired
    window (key, start) -> (fire time, count), the late rows' stream positions)."""
    from theory.flink.generation import PeriodicWatermarks, WatermarkSchedule
    from theory.flink.valve import LinearScanValve

    order = np.argsort(trace.arrival_time, kind="stable")
    e, a = trace.event_time[order].tolist(), trace.arrival_time[order].tolist()
    part = trace.partition[order].tolist()
    labels = sorted(set(part))
    gens = [PeriodicWatermarks(BOUND, FLINK_INTERVAL, idle_timeout=idle_timeout) for _ in labels]
    valve = LinearScanValve(len(labels))
    after: list[int] = []
    marks: list[int] = []
    when: dict[int, int] = {}

    def feed(outs: list[tuple[int, int, int, object]], read: int) -> None:
        for t, j, _, o in sorted(outs, key=lambda x: x[:3]):
            res = valve.input_watermark(j, o) if isinstance(o, int) else valve.input_status(j, o)
            for w in res:
                if isinstance(w, int):
                    after.append(read)
                    marks.append(w)
                    when[w] = t

    def timers_until(t: int) -> list[tuple[int, int, int, object]]:
        return [
            (x.time, j, s, x.output)
            for j, g in enumerate(gens)
            for s, x in enumerate(g.advance_to(t))
        ]

    for i, (ei, ai, pi) in enumerate(zip(e, a, part, strict=True)):
        feed(timers_until(ai - 1), i)  # an element at a timer's time is read before it
        gens[labels.index(pi)].on_event(ei, ai)
    feed(timers_until(max(FLINK_INTERVAL, -(-a[-1] // FLINK_INTERVAL) * FLINK_INTERVAL)), len(e))
    events = list(zip(trace.key[order].tolist(), e, range(len(e)), strict=True))
    run = run_flink_windows(
        events, WatermarkSchedule(after, marks), Tumbling(WINDOW), end_of_input=False
    )
    fired = {(f.key, f.window.start): (when[f.watermark], f.count) for f in run.firings}
    return fired, sorted(order[[int(late.value) for late in run.late]].tolist())


def test_flink_idleness_reproduces_the_flink_profile(trace):
    """Each partition an input with withIdleness: the vectorised path (per-input
    ``periodic_watermarks`` through the heap valve) equals Flink's own profile element by
    element (incremental generators, the linear-scan valve, the window operator); without
    idleness it equals the combined-minimum path; idleness changes the outcome here."""
    for idle in (IDLE, None):
        conv = system_conventions(flink_interval=FLINK_INTERVAL, flink_idle_timeout=idle)["flink"]
        o = profile_under(
            trace.event_time, trace.arrival_time, trace.key, conv,
            bound=BOUND, window_size=WINDOW, inputs=trace.partition,
        )
        fired, late = flink_reference(trace, idle)
        assert windows_of(o) == fired, idle
        assert np.flatnonzero(o.dropped).tolist() == late, idle
    with_idle = profile_under(
        trace.event_time, trace.arrival_time, trace.key,
        Conventions("periodic", FLINK_INTERVAL, idle_timeout=IDLE),
        bound=BOUND, window_size=WINDOW, inputs=trace.partition,
    )
    assert differences(with_idle, o) != (0, 0)


def test_idle_handling_is_a_named_convention(trace):
    """Partitions as inputs, Flink with withIdleness: every difference is still
    attributed; idleness is switched last on the way to Flink and first away from it,
    and it explains some windows and rows."""
    kw = {"bound": BOUND, "window_size": WINDOW, "flink_interval": FLINK_INTERVAL,
          "spark_trigger": SPARK_TRIGGER, "inputs": "partition"}
    cmp = compare_systems(trace, flink_idle_timeout=IDLE, **kw)
    att: dict[str, list[Any]] = cmp.attribution()
    steps: dict[tuple[str, str], list[int]] = {}
    for i, pair in enumerate(zip(att["source"], att["target"], strict=True)):
        steps.setdefault(pair, []).append(i)
    assert set(steps) == {("beam", "flink"), ("beam", "spark"), ("flink", "spark")}
    for pair, rows in steps.items():
        assert (att["windows_left"][rows[-1]], att["rows_left"][rows[-1]]) == (0, 0), pair
    assert [att["convention"][i] for i in steps[("beam", "flink")]] == ["timing", "idle_timeout"]
    assert att["convention"][steps[("flink", "spark")][0]] == "idle_timeout"
    assert "idle_timeout" not in [att["convention"][i] for i in steps[("beam", "spark")]]
    idle = [i for i in range(len(att["convention"])) if att["convention"][i] == "idle_timeout"]
    assert all(att["removed_windows"][i] + att["removed_rows"][i] > 0 for i in idle)
    assert att["value"][idle[0]] == f"withIdleness {IDLE} µs"
    # with one input idleness changes nothing: Flink's valve has one channel
    one = {k: v for k, v in kw.items() if k != "inputs"}
    a = compare_systems(trace, flink_idle_timeout=IDLE, **one).outcomes["flink"]
    b = compare_systems(trace, **one).outcomes["flink"]
    assert differences(a, b) == (0, 0)


def test_a_stopped_or_silent_input_holds_every_system_but_flink_with_idleness():
    """Input 1 sends one row at 1 s and stops (a), or sends nothing until 300 s (b);
    input 0 sends a row every 5 s. Beam, Spark (its min policy; a silent input counts as
    0) and Flink without idleness close none of input 0's windows before input 1
    resumes; Flink with withIdleness(30 s) leaves input 1 out and closes them."""
    S = SECOND
    busy = [(0, t * S, t * S + S // 2) for t in range(0, 300, 5)]
    for quiet in ([(1, 1 * S, 1 * S + 1)], [(1, 300 * S, 300 * S + 1)]):
        rows = sorted(busy + quiet, key=lambda r: r[2])
        part, et, at = (np.array(c) for c in zip(*rows, strict=True))
        t = Trace(et, at, np.zeros(len(rows), dtype=np.int64), np.zeros(len(rows)), part)
        conv = system_conventions(flink_interval=S, spark_trigger=S, flink_idle_timeout=30 * S)
        conv["flink-no-idle"] = Conventions("periodic", S)
        for name, c in conv.items():
            o = profile_under(et, at, t.key, c, bound=0, window_size=10 * S, inputs=part)
            early = (o.fire_time >= 0) & (o.fire_time < 299 * S)
            assert bool(early.any()) == (name == "flink"), (name, quiet[0])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 120 * SECOND), st.integers(1, 40 * SECOND)),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([5 * SECOND, 20 * SECOND]),
)
def test_idleness_only_moves_the_watermark_up(rows, timeout):
    """With withIdleness the job's watermark is never lower than without: every row
    dropped without it is dropped with it. A timeout longer than the trace gives the
    combined-minimum path's outcome exactly (two implementations)."""
    part, et, delay = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    at = et + delay
    key = et % 3
    kw = {"bound": 2 * SECOND, "window_size": 10 * SECOND, "inputs": part}
    plain = profile_under(et, at, key, Conventions("periodic", SECOND), **kw)
    idle = profile_under(et, at, key, Conventions("periodic", SECOND, idle_timeout=timeout), **kw)
    never = profile_under(
        et, at, key, Conventions("periodic", SECOND, idle_timeout=10**9 * SECOND), **kw
    )
    assert not (plain.dropped & ~idle.dropped).any()
    assert differences(plain, never) == (0, 0)
    assert np.array_equal(plain.fire_time, never.fire_time)
    # the job's watermark only rises, and never passes the most advanced input's
    order = np.argsort(at, kind="stable")
    times, marks = flink_idle_watermarks(
        et[order], at[order], part[order], bound=2 * SECOND, interval=SECOND,
        idle_timeout=timeout,
    )
    assert (np.diff(marks) > 0).all() and (np.diff(times) >= 0).all()
    read = np.searchsorted(at[order], times, side="right")  # rows read by each output
    assert (marks <= np.maximum.accumulate(et[order])[read - 1] - 2 * SECOND).all()


def test_idle_timeout_is_refused_where_no_system_has_it():
    with pytest.raises(ValueError, match="needs timing='periodic' and policy='min'"):
        Conventions("element", idle_timeout=SECOND)
    with pytest.raises(ValueError, match="needs timing='periodic' and policy='min'"):
        Conventions("periodic", SECOND, policy="max", idle_timeout=SECOND)
    with pytest.raises(ValueError, match="idle_timeout must be > 0"):
        Conventions("periodic", SECOND, idle_timeout=0)
    with pytest.raises(TypeError, match="idle_timeout"):
        Conventions("periodic", SECOND, idle_timeout=1.5)


def test_compare_systems_bad_input_is_named(trace):
    with pytest.raises(ValueError, match="idle_timeout must be > 0"):
        compare_systems(trace, bound=BOUND, window_size=WINDOW, flink_idle_timeout=-1)
    keys = trace.key.astype(object)
    keys[7] = None
    with pytest.raises(ValueError, match=r"key\[7\] is None: row 7 has no key"):
        profile_under(trace.event_time, trace.arrival_time, keys, Conventions("element"),
                      bound=BOUND, window_size=WINDOW)
    with pytest.raises(ValueError, match="bound must be >= 0"):
        compare_systems(trace, bound=-1, window_size=WINDOW)


def test_the_windows_table_says_which_windows_fire_and_when(trace):
    """One row per window: each system's fire time and count, as in its outcome; the
    windows that differ come first and, for two systems, number what ``differences``
    counts."""
    cmp = compare_systems(trace, bound=BOUND, window_size=WINDOW, systems="beam,spark",
                          spark_trigger=SPARK_TRIGGER)
    w: dict[str, list[Any]] = cmp.windows()
    n = len(w["key"])
    assert set(map(len, w.values())) == {n}
    for name in ("beam", "spark"):
        fired = {(k, s): (t, c) for k, s, t, c in zip(
            w["key"], w["start"], w[f"{name}_fire_time"], w[f"{name}_count"], strict=True)
            if c > 0}
        o = cmp.outcomes[name]
        assert fired == {(k, s): (t, c) for (k, s), (t, c) in windows_of_all(o).items()}
        assert sum(t >= 0 for t in w[f"{name}_fire_time"]) == cmp.table()["windows_fired"][
            list(cmp.outcomes).index(name)]
    assert all(e - s == WINDOW for s, e in zip(w["start"], w["end"], strict=True))
    differing = w["same"].count(False)
    assert differing == differences(cmp.outcomes["beam"], cmp.outcomes["spark"])[0] > 0
    assert w["same"] == [False] * differing + [True] * (n - differing)


def windows_of_all(o):
    return {
        (k, s): (t, c)
        for k, s, t, c in zip(o.key.tolist(), o.start.tolist(), o.fire_time.tolist(),
                              o.count.tolist(), strict=True)
    }


window_sets = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5)),
    st.tuples(st.sampled_from([-1, 10, 20]), st.integers(1, 3)),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(window_sets, window_sets, st.booleans())
def test_vectorised_differences_equal_a_per_window_comparison(wa, wb, int_keys):
    """``differences`` sorts both outcomes' windows together; a dict per window gives the
    same count, for string and int keys."""
    from theory.experiments.systems import Outcome

    def outcome(windows):
        items = sorted(windows.items())
        key = np.array([ord(k) if int_keys else k for (k, _), _ in items],
                       dtype=np.int64 if int_keys else object)
        start = np.array([s * WINDOW for (_, s), _ in items], dtype=np.int64)
        fire = np.array([f for _, (f, _) in items], dtype=np.int64)
        count = np.array([c for _, (_, c) in items], dtype=np.int64)
        return Outcome(key, start, start + WINDOW, count, fire, np.zeros(3, dtype=bool))

    expected = sum(1 for w in set(wa) | set(wb) if wa.get(w) != wb.get(w))
    assert differences(outcome(wa), outcome(wb)) == (expected, 0)
