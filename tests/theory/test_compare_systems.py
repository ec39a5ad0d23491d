"""compare_systems on the chapter-3 trace: each system's conventions reproduce its own
profile, and switching conventions one at a time leaves no difference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from theory import SECOND, Trace, chapter3, simulate
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
