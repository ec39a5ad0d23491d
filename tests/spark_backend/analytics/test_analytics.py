"""Spark analytics agree exactly with theory's vectorised results on the same rows.

Traces are generated in Spark (seeded), collected through Arrow, and given to
:mod:`theory.watermarks` (perfect, heuristic, percentile_sweep), :mod:`theory.series` and
:func:`theory.experiments.tradeoff`; every curve, late count, window and hold-back figure
must be identical (means of fractions up to float rounding).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from spark_backend.analytics import analyze, holdback, parse_strategy, prepare
from spark_backend.traces.collect import to_trace
from spark_backend.traces.generate import generate_trace_df
from theory.experiments.tradeoff import Strategy as TheoryStrategy
from theory.experiments.tradeoff import tradeoff
from theory.pipeline.metrics import eventual_counts, strategy_metrics
from theory.pipeline.simulator import simulate
from theory.pipeline.stages import GroupByWindow, Pipeline, Source
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, SECOND
from theory.watermarks.heuristic import bounded_out_of_orderness_curve
from theory.watermarks.percentile_sweep import percentile_curve, reference_percentile_values
from theory.watermarks.perfect import perfect_curve, perfect_oracle_curve
from theory.windowing.strategy import WindowingStrategy
from theory.windowing.triggers import AfterWatermark
from theory.windowing.windows import FixedWindows

pytestmark = pytest.mark.slow

STRATEGIES = (
    "perfect",
    "perfect:oracle",
    "bounded:1s",
    "bounded:10s",
    "percentile:0.5",
    "percentile:0.9",
    "percentile:1",
    "percentile:0.75:hold",
)


def _theory_curve(spec: str, e: np.ndarray, a: np.ndarray) -> StepSeries:
    s = parse_strategy(spec)
    if s.kind == "perfect":
        return perfect_curve(e, a)
    if s.kind == "oracle":
        return perfect_oracle_curve(e, a)
    if s.kind == "bounded":
        return bounded_out_of_orderness_curve(e, a, bound=s.bound)
    # source level: active from the event time (never, for rows arriving before it)
    fallback = perfect_curve(e, a) if s.fallback == "perfect" else None
    return percentile_curve(e, np.minimum(e, a), a, s.p, fallback=fallback)


def _same(x: StepSeries, y: StepSeries) -> bool:
    return (
        np.array_equal(x.times, y.times)
        and np.array_equal(x.values, y.values)
        and x.initial == y.initial
    )


@pytest.fixture(scope="module")
def traces(spark):
    """Two small traces: int keys with arrival ties (arrivals rounded up to 100 ms), and
    string keys with µs arrivals. Both have stragglers and an idle partition."""
    tied = generate_trace_df(
        spark, 3000, seed=11, rate=50.0, keys=7, partitions=3, stragglers=0.05,
        idle_partitions=(1,), idle_interval=(10 * SECOND, 25 * SECOND),
    ).withColumn("arrival_time", (F.ceil(F.col("arrival_time") / 100_000) * 100_000).cast("long"))
    strings = generate_trace_df(
        spark, 2500, seed=12, rate=40.0, keys=9, partitions=4, stragglers=0.05,
        key_prefix="user-",
    )
    out = {}
    for name, df in (("tied", tied), ("strings", strings)):
        df = df.persist()
        out[name] = (df, to_trace(df))
    yield out
    for df, _ in out.values():
        df.unpersist()


@pytest.fixture(scope="module")
def analyses(traces):
    """Each trace analysed twice: one bucket (no carries at all) and 5 buckets."""
    out = {}
    for name, (df, _) in traces.items():
        out[name, 1] = analyze(df, STRATEGIES, buckets=1)
        out[name, 5] = analyze(df, STRATEGIES, buckets=5)
    yield out
    for a in out.values():
        a.unpersist()


@pytest.mark.parametrize("name", ["tied", "strings"])
@pytest.mark.parametrize("buckets", [1, 5])
def test_curves_and_late_counts_equal_theory(traces, analyses, name, buckets):
    _, trace = traces[name]
    e, a = trace.event_time, trace.arrival_time
    an = analyses[name, buckets]
    assert an.layout.buckets == buckets
    late = an.late.set_index("strategy")
    for spec in STRATEGIES:
        ref = _theory_curve(spec, e, a)
        assert _same(an.curve(spec), ref), spec
        expected = int(np.count_nonzero(e < ref.before(a)))
        assert int(late.loc[spec, "late"]) == expected, spec
        assert late.loc[spec, "elements"] == len(trace)
    assert int(late.loc["perfect", "late"]) == 0
    assert int(late.loc["bounded:1s", "late"]) > int(late.loc["bounded:10s", "late"]) > 0


def test_percentile_equals_the_naive_oracle(traces, analyses):
    """Against theory's O(n)-per-time reference: the curve is the running maximum of the
    quantile (or the perfect fallback) evaluated at every event and arrival time."""
    _, trace = traces["tied"]
    e, a = trace.event_time, trace.arrival_time
    live = e < a
    times = np.unique(np.concatenate((e[live], a)))
    for spec in ("percentile:0.5", "percentile:0.9"):
        s = parse_strategy(spec)
        raw = reference_percentile_values(e, np.minimum(e, a), a, s.p, times, perfect_curve(e, a))
        expected = StepSeries(times, np.maximum.accumulate(raw)).compressed()
        assert _same(analyses["tied", 5].curve(spec), expected), spec


def test_percentile_one_is_the_perfect_watermark_after_the_first_arrival(traces, analyses):
    _, trace = traces["strings"]
    an = analyses["strings", 5]
    pct, perfect = an.curve("percentile:1"), an.curve("perfect")
    grid = np.unique(np.concatenate((pct.times, perfect.times)))
    grid = grid[grid >= trace.arrival_time.min()]
    arrivals = np.unique(trace.arrival_time)
    assert np.array_equal(pct.at(arrivals), perfect.at(arrivals))
    # between arrivals it may rise with the events that happen; perfect steps at arrivals
    assert np.all(pct.at(grid) >= perfect.at(grid))


def test_lower_percentiles_are_more_aggressive(analyses):
    late = analyses["tied", 5].late.set_index("strategy")["late"]
    assert late["percentile:1"] == 0
    assert late["percentile:0.5"] > late["percentile:0.9"] > 0


def test_sample_is_the_curve_on_a_grid(traces, analyses):
    an = analyses["tied", 5]
    got = an.sample(points=400)
    grid = got["processing_time"].to_numpy()
    assert grid[0] == traces["tied"][1].arrival_time.min()
    assert grid[-1] >= traces["tied"][1].arrival_time.max()
    every = an.all_curves()  # one collect: the same series as one curve() per strategy
    for spec in STRATEGIES:
        assert np.array_equal(got[spec].to_numpy(), an.curve(spec).at(grid)), spec
        one = an.curve(spec)
        assert np.array_equal(every[spec].times, one.times), spec
        assert np.array_equal(every[spec].values, one.values), spec


def _first_panes(panes) -> dict:
    """The simulator's first panes: (key, window start) -> (count, fire time)."""
    first = panes.index == 0
    return {
        (k, st): (int(c), int(ft))
        for k, st, c, ft in zip(panes.key[first], panes.window_start[first],
                                panes.count[first], panes.fire_time[first], strict=True)
    }


def _spark_first_panes(windows: pd.DataFrame, strategy: str) -> dict:
    """Spark's first panes of the windows that fire, in the form of :func:`_first_panes`."""
    sel = windows[(windows["strategy"] == strategy) & (windows["fire_time"] >= 0)]
    return {
        (k, st): (int(c), int(ft))
        for k, st, c, ft in zip(sel["key"], sel["window_start"], sel["first_pane"],
                                sel["fire_time"], strict=True)
    }


def test_windows_equal_theory_tradeoff(traces):
    """Completeness at first firing, latency and dropped data against the simulator."""
    df, trace = traces["tied"]
    specs = ["perfect", "bounded:1s", "bounded:10s"]
    an = analyze(df, specs, buckets=4)
    try:
        window = 5 * SECOND
        ours = an.window_summary(window)
        result = tradeoff(trace, [TheoryStrategy(s, s) for s in specs], window_size=window)
        # the rows, not table(): the table names its units, in integer µs
        theirs = pd.DataFrame([vars(r) for r in result.rows])
        for col in ("late_count", "dropped", "windows", "window_latency_p50",
                    "window_latency_p90", "window_latency_p99", "complete_fraction",
                    "end_of_input_windows"):
            assert list(ours[col]) == list(theirs[col]), col
        np.testing.assert_allclose(ours["completeness_mean"], theirs["completeness_mean"],
                                   rtol=1e-12, atol=0)
        # per window: first panes and fire times equal the simulator's panes
        windows = an.windows(window)
        for s in specs:
            panes = result.results[s].stages["window"].panes
            assert panes is not None
            assert _spark_first_panes(windows, s) == _first_panes(panes), s
    finally:
        an.unpersist()


def test_windows_with_an_offset_equal_the_simulator(traces):
    """FixedWindows(size, offset) as Beam: window starts at offset + N * size (an offset
    beyond the size is taken modulo it). First panes, fire times and the summary equal
    the simulator's with the same windows; with the offset dropped, none would."""
    df, trace = traces["tied"]
    size, offset = 5 * SECOND, 7 * SECOND + 123_457  # normalised: 2.123457 s
    specs = ["perfect", "bounded:1s", "percentile:0.9"]
    an = analyze(df, specs, buckets=3)
    try:
        windows = an.windows(size, offset)
        fires = an.fire_times(size, offset)
        summary = an.window_summary(size, offset).set_index("strategy")
    finally:
        an.unpersist()
    assert set(windows["window_start"] % size) == {offset % size}
    assert set(fires["window_end"] % size) == {offset % size}
    fixed = FixedWindows(size, offset)
    eventual = eventual_counts(fixed, trace.key, trace.event_time)
    for s in specs:
        pipeline = Pipeline([
            Source("in", s),
            GroupByWindow("window", "in", WindowingStrategy(fixed, AfterWatermark()), "sum"),
        ])
        result = simulate(pipeline, {"in": trace})
        panes = result.stages["window"].panes
        assert panes is not None
        assert _spark_first_panes(windows, s) == _first_panes(panes), s
        theirs = strategy_metrics(s, result, "window", eventual)
        row = summary.loc[s]
        assert (row["dropped"], row["windows"]) == (theirs.dropped, theirs.windows), s
        assert row["window_latency_p50"] == theirs.window_latency_p50, s
        assert row["complete_fraction"] == theirs.complete_fraction, s
        np.testing.assert_allclose(row["completeness_mean"], theirs.completeness_mean,
                                   rtol=1e-12, atol=0)


def test_windows_without_finish_never_fire_past_the_watermark(traces, analyses):
    an = analyses["strings", 5]
    fires = an.fire_times(2 * SECOND, finish=False)
    oracle = an.curve("perfect:oracle")
    assert (fires["perfect:oracle"] >= 0).all()  # the oracle ends at MAX_TIMESTAMP
    perfect = an.curve("perfect")
    # the perfect watermark ends at the last arrival: windows ending after it stay open
    assert perfect.final() == int(trace_last_arrival(an))
    open_ = fires["window_end"] > perfect.final()
    assert (fires.loc[open_, "perfect"] == -1).all()
    assert (fires.loc[~open_, "perfect"] >= fires.loc[~open_, "window_end"]).all()
    bounded = an.curve("bounded:10s")
    last = fires["window_end"] - 1 >= bounded.final()
    assert (fires.loc[last, "bounded:10s"] == -1).all()
    fired = fires[~last]
    # fired at the first step where W > end - 1
    for end, t in zip(fired["window_end"], fired["bounded:10s"], strict=True):
        i = int(np.searchsorted(bounded.times, t))
        assert bounded.values[i] > end - 1
        assert i == 0 or bounded.values[i - 1] <= end - 1
    assert oracle.final() == MAX_TIMESTAMP


def trace_last_arrival(an) -> int:
    return int(an.layout.last_arrival)


def _holdback_reference(trace, holder: np.ndarray) -> dict:
    order = np.lexsort((trace.event_time, trace.arrival_time))
    a, e, h = trace.arrival_time[order], trace.event_time[order], holder[order]
    times = np.unique(a)
    runs: list[list] = []
    for g, t in enumerate(times[:-1]):
        later = a > t
        ee, hh = e[later], h[later]
        who = sorted(hh[ee == ee.min()].tolist())[0]
        d = int(times[g + 1] - t)
        if runs and runs[-1][0] == who:
            runs[-1][2] += d
        else:
            runs.append([who, int(t), d])
    out: dict = {}
    for who, start, d in runs:
        r = out.setdefault(who, [0, 0, -1, 0])
        r[0] += d
        r[1] += 1
        if d > r[2]:
            r[2], r[3] = d, start
    return out


@pytest.mark.parametrize("name", ["tied", "strings"])
@pytest.mark.parametrize("by", ["partition", "key"])
def test_holdback_equals_brute_force(traces, name, by):
    df, trace = traces[name]
    got = holdback(df, by)
    ref = _holdback_reference(trace, trace.partition if by == "partition" else trace.key)
    assert {
        r.holder: [r.held_us, r.runs, r.longest_run_us, r.longest_run_start]
        for r in got.itertuples()
    } == ref
    span = trace.arrival_time.max() - trace.arrival_time.min()
    assert got["held_us"].sum() == span  # someone holds it back until the last arrival
    assert list(got["held_us"]) == sorted(got["held_us"], reverse=True)


def test_holdback_reuses_a_prepared_layout(traces):
    df, trace = traces["tied"]
    lay = prepare(df, buckets=3, backlog=False, holder="partition")
    try:
        assert lay.df.rdd.getNumPartitions() == lay.buckets == 3
        assert lay.summary["rows"].sum() == len(trace)
        got = holdback(lay, "partition")
        assert got["held_us"].sum() == trace.arrival_time.max() - trace.arrival_time.min()
    finally:
        lay.unpersist()


def test_each_bucket_is_one_partition(traces):
    df, trace = traces["strings"]
    lay = prepare(df, buckets=6)
    try:
        per_part = lay.df.select(F.spark_partition_id().alias("p"), "bucket").distinct()
        rows = per_part.collect()
        assert len(rows) == lay.buckets
        assert {r["p"] for r in rows} == set(range(lay.buckets))
        assert lay.summary["rows"].sum() == len(trace)
        # backlog replicas: rows that happened in an earlier bucket than they arrive in
        assert lay.summary["replicas"].sum() > 0
    finally:
        lay.unpersist()


@pytest.mark.parametrize(
    "spec", ["bounded", "bounded:-1s", "percentile:0", "percentile:1.5", "percentile:0.5:x",
             "nonsense", "perfect:3", "percentile:0.9:", "static", "ingress"]
)
def test_bad_strategies(spec):
    """Parsed by theory's spec parser: the error names the spec."""
    with pytest.raises(ValueError, match=re.escape(repr(spec))):
        parse_strategy(spec)


def test_argument_errors(traces, analyses):
    """The error convention: TypeError for a wrong type, ValueError for a bad value, each
    naming the parameter; all raised before any Spark job."""
    df, _ = traces["tied"]
    an = analyses["tied", 1]
    with pytest.raises(TypeError, match="spec must be a str"):
        parse_strategy(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not one string"):
        analyze(df, "perfect")
    with pytest.raises(ValueError, match="no strategies"):
        analyze(df, [])
    with pytest.raises(ValueError, match="unique"):
        analyze(df, ["perfect", " perfect"])
    with pytest.raises(ValueError, match="buckets must be >= 1"):
        prepare(df, buckets=0)
    with pytest.raises(TypeError, match="buckets"):
        prepare(df, buckets=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="offset"):
        an.windows(SECOND, offset=0.5)
    with pytest.raises(ValueError, match="window_size must be > 0"):
        an.fire_times(0)


def test_empty_trace_is_refused(spark):
    empty = spark.createDataFrame([], "event_time long, arrival_time long")
    with pytest.raises(ValueError, match="no rows"):
        analyze(empty, ["perfect"])


def test_a_window_of_late_elements_only_has_no_pane(spark):
    """Its elements all arrive after the watermark passed it: no state, no firing, no
    latency; the simulator agrees."""
    from theory.data.trace import Trace

    rows = [(20 * SECOND, 20 * SECOND), (5 * SECOND, 30 * SECOND), (25 * SECOND, 31 * SECOND)]
    df = spark.createDataFrame(rows, "event_time long, arrival_time long")
    an = analyze(df, ["bounded:1s"], buckets=1)
    try:
        w = an.windows(10 * SECOND).set_index("window_start")
        summary = an.window_summary(10 * SECOND)
    finally:
        an.unpersist()
    assert w.loc[0, "fire_time"] == -1 and np.isnan(w.loc[0, "latency"])
    assert w.loc[0, "completeness"] == 0.0
    assert w.loc[20 * SECOND, "fire_time"] == 31 * SECOND  # the trace's end fires it
    e, a = (np.array(x, dtype=np.int64) for x in zip(*rows, strict=True))
    trace = Trace(e, a, np.zeros(3, dtype=np.int64), np.ones(3))
    theirs = tradeoff(trace, [TheoryStrategy("b", "bounded:1s")], window_size=10 * SECOND)
    row = theirs.rows[0]
    assert (row.windows, row.dropped, row.late_count) == (2, 1, 1)
    # the window [20, 30) s fires by the end of input (at 31 s bounded:1s is at 24 s), so
    # both leave it out of the latency percentiles and count it (docs/semantics.md, "End
    # of input"): no latency is left
    assert summary.loc[0, "end_of_input_windows"] == row.end_of_input_windows == 1
    assert np.isnan(summary.loc[0, "window_latency_p50"]) and np.isnan(row.window_latency_p50)
    assert bool(w.loc[20 * SECOND, "fired_by_end_of_input"])
    assert summary.loc[0, "completeness_mean"] == row.completeness_mean
