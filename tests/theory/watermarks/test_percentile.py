"""Percentile watermarks: the quantile convention, exact incremental == vectorised == naive,
p = 1 is the ordinary watermark, monotonicity, fallback, the sketch's bound, bad input.

Convention under test (theory/watermarks/percentile.py): W_p(t) is the order statistic of the active
event times A(t) = {e : activation <= t < completion} with 0-based rank
k = floor((1 - p) * (n - 1)), i.e. np.quantile(A, 1 - p, method="lower"); the fallback
(input watermark) where A(t) is empty; latched by running maximum.
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.data.distributions import Delay
from theory.data.generators import generate_trace
from theory.series import StepSeries
from theory.structures import OrderStatisticList
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, SECOND
from theory.watermarks import percentile_sweep as sweep_module
from theory.watermarks.holds import inflight_min
from theory.watermarks.latch import Latch, latch_estimates
from theory.watermarks.percentile import PercentileWatermark, quantile_rank
from theory.watermarks.percentile_sketch import (
    SketchPercentileWatermark,
    sketch_percentile_values,
)
from theory.watermarks.percentile_sweep import (
    percentile_curve,
    percentile_details,
    reference_percentile_values,
)

EMPTY = StepSeries(np.zeros(0, np.int64), np.zeros(0, np.int64))

rows_st = st.lists(
    st.tuples(st.integers(-20, 20), st.integers(0, 30), st.integers(0, 8)), max_size=40
)
p_st = st.sampled_from([1.0, 0.999, 0.9, 0.75, 0.5, 0.3, 0.1, 1e-9]) | st.floats(
    min_value=1e-6, max_value=1.0
)
fallback_st = st.none() | st.builds(
    lambda pts, init: StepSeries.from_events(
        np.array([t for t, _ in pts], np.int64), np.array([v for _, v in pts], np.int64), init
    ),
    st.lists(st.tuples(st.integers(0, 45), st.integers(-30, 30)), max_size=6),
    st.integers(-40, 0),
)


def same(x: StepSeries, y: StepSeries) -> bool:
    return (
        x.times.tolist() == y.times.tolist()
        and x.values.tolist() == y.values.tolist()
        and x.initial == y.initial
    )


def columns(rows: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    e = np.array([r[0] for r in rows], dtype=np.int64)
    a = np.array([r[1] for r in rows], dtype=np.int64)
    return e, a, a + np.array([r[2] for r in rows], dtype=np.int64)


def drive_incremental(e, a, c, p, times, fallback):
    """Apply each time's completions and activations, then evaluate; even rows by id."""
    fb = EMPTY if fallback is None else fallback
    w = PercentileWatermark(p, initial=fb.initial)
    out = []
    for t in times.tolist():
        for i in np.flatnonzero((c == t) & (c > a)).tolist():
            if i % 2 == 0:
                w.complete(item_id=("row", i))
            else:
                w.complete(int(e[i]))
        for i in np.flatnonzero((a == t) & (c > a)).tolist():
            w.activate(int(e[i]), ("row", i) if i % 2 == 0 else None)
        out.append(w.current(int(fb.at(t))))
    return np.array(out, dtype=np.int64), w


# --------------------------------------------------------------------------- convention


@given(st.lists(st.integers(-100, 100), min_size=1, max_size=50), p_st)
def test_rank_is_numpy_lower_quantile_at_one_minus_p(values, p):
    a = np.array(values)
    k = quantile_rank(a.size, p)
    assert k == int(np.floor((a.size - 1) * (1.0 - p)))
    assert np.sort(a)[k] == np.quantile(a, 1 - p, method="lower")
    assert quantile_rank(a.size, 1.0) == 0  # p = 1: the minimum


# --------------------------------------------------------------------------- structure


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30)), max_size=300))
def test_order_statistic_list_matches_a_sorted_list(ops):
    osl = OrderStatisticList(load=4)
    ref: list[int] = []
    for add, x in ops:
        if add or x not in ref:
            osl.add(x)
            ref.append(x)
        else:
            osl.remove(x)
            ref.remove(x)
        ref.sort()
        osl.check()
        assert len(osl) == len(ref)
        if ref:
            i = x % len(ref)
            assert osl.kth(i) == ref[i]
            assert osl.kth(len(ref) - 1 - i) == ref[len(ref) - 1 - i]
            assert osl.count_le(x) == sum(v <= x for v in ref)
            assert osl.count_lt(x) == sum(v < x for v in ref)
            assert (osl.min(), osl.max()) == (ref[0], ref[-1])
        assert list(osl) == ref
    with pytest.raises(ValueError, match="not in the list"):
        osl.remove(99)
    osl.check()


# --------------------------------------------------------------------------- exact forms


@settings(max_examples=150, deadline=None)
@given(rows_st, p_st, fallback_st)
def test_incremental_equals_vectorised(rows, p, fallback):
    e, a, c = columns(rows)
    d = percentile_details(e, a, c, p, fallback)
    latched, w = drive_incremental(e, a, c, p, d.times, fallback)
    assert latched.tolist() == d.latched.tolist()
    assert w.regressions == d.regressions
    fb = EMPTY if fallback is None else fallback
    assert same(d.curve, StepSeries(d.times, d.latched, fb.initial).compressed())


@settings(max_examples=150, deadline=None)
@given(rows_st, p_st, fallback_st)
def test_vectorised_equals_naive_np_quantile(rows, p, fallback):
    e, a, c = columns(rows)
    d = percentile_details(e, a, c, p, fallback)
    assert d.raw.tolist() == reference_percentile_values(e, a, c, p, d.times, fallback).tolist()
    probe = np.arange(-2, 48)  # between the change times too
    expected = np.maximum.accumulate(
        np.maximum(reference_percentile_values(e, a, c, p, probe, fallback), d.curve.initial)
    )
    # the latched curve only moves at grid times, where it takes the running max
    assert np.all(d.curve.at(probe) >= expected)
    on_grid = np.isin(probe, d.times)
    assert d.curve.at(probe)[on_grid].tolist() == d.latched[np.isin(d.times, probe)].tolist()


@settings(max_examples=150, deadline=None)
@given(rows_st, fallback_st)
def test_p1_is_the_ordinary_watermark(rows, fallback):
    e, a, c = columns(rows)
    fb = EMPTY if fallback is None else fallback
    d = percentile_details(e, a, c, 1.0, fallback)
    expected_raw = np.where(d.active > 0, inflight_min(a, c, e).at(d.times), fb.at(d.times))
    assert d.raw.tolist() == expected_raw.tolist()
    assert same(
        percentile_curve(e, a, c, 1.0, fallback),
        StepSeries(d.times, expected_raw, fb.initial).latched(),
    )


def test_p1_on_a_generated_trace_is_the_in_flight_minimum():
    tr = generate_trace(20_000, seed=3, stragglers=0.02)
    e, a = tr.event_time, tr.arrival_time
    d = percentile_details(e, e, a, 1.0)
    assert np.array_equal(d.raw[d.active > 0], inflight_min(e, a, e).at(d.times[d.active > 0]))
    assert same(percentile_curve(e, e, a, 1.0), StepSeries(d.times, d.raw, MIN_TIMESTAMP).latched())


@settings(max_examples=100, deadline=None)
@given(rows_st, p_st, p_st, fallback_st)
def test_monotonic_and_non_increasing_in_p(rows, p1, p2, fallback):
    lo, hi = sorted((p1, p2))
    e, a, c = columns(rows)
    d_lo = percentile_details(e, a, c, lo, fallback)
    d_hi = percentile_details(e, a, c, hi, fallback)
    assert d_lo.curve.is_monotonic() and d_hi.curve.is_monotonic()
    assert np.array_equal(d_lo.times, d_hi.times)
    full = d_lo.active > 0
    assert np.all(d_lo.raw[full] >= d_hi.raw[full])  # before latching
    assert np.all(d_lo.latched >= d_hi.latched)


def test_generated_trace_matches_naive_quantiles():
    tr = generate_trace(3_000, seed=11, stragglers=0.05)
    e, a = tr.event_time, tr.arrival_time
    for p in (0.5, 0.9, 0.99):
        d = percentile_details(e, e, a, p)
        pick = np.linspace(0, d.times.size - 1, 300).astype(int)
        ref = reference_percentile_values(e, e, a, p, d.times[pick])
        assert d.raw[pick].tolist() == ref.tolist()


def assert_details_equal(x, y) -> None:
    for name in ("times", "raw", "active", "latched"):
        np.testing.assert_array_equal(getattr(x, name), getattr(y, name), name)
    assert same(x.curve, y.curve) and x.regressions == y.regressions


@settings(max_examples=200, deadline=None)
@given(rows_st, p_st, fallback_st, st.sampled_from([1.0, 0.0]))
def test_source_level_thinned_sweep_equals_the_full_sweep(rows, p, fallback, thin):
    """activation is event_time: the sweep starts prefilled and skips the activations that
    change nothing (_thin; THIN_AT_MOST 1 always thins, 0 never); a copy of the column
    takes the general path."""
    e, _, c = columns(rows)
    c = np.maximum(c, e)
    with patch.object(sweep_module, "THIN_AT_MOST", thin):
        assert_details_equal(
            percentile_details(e, e, c, p, fallback),
            percentile_details(e, e.copy(), c, p, fallback),
        )


@pytest.mark.parametrize("thin", [1.0, 0.0])
@pytest.mark.parametrize("p", [1.0, 0.99, 0.9, 0.5, 0.1])
def test_source_level_thinned_sweep_on_distinct_times(monkeypatch, p, thin):
    monkeypatch.setattr(sweep_module, "THIN_AT_MOST", thin)
    # microsecond times: (almost) every event at its own instant, a query at each
    tr = generate_trace(20_000, seed=5, stragglers=0.02)
    e, a = tr.event_time, tr.arrival_time
    assert_details_equal(percentile_details(e, e, a, p), percentile_details(e, e.copy(), a, p))
    rng = np.random.default_rng(7)  # strictly distinct: even event times, odd arrivals
    e = 2 * rng.choice(10**9, 20_000, replace=False)
    a = e + 1 + 2 * rng.lognormal(13, 1, e.size).astype(np.int64)
    keep = np.unique(a, return_index=True)[1]
    e, a = e[keep], a[keep]
    assert np.unique(np.concatenate((e, a))).size == 2 * e.size
    assert_details_equal(percentile_details(e, e, a, p), percentile_details(e, e.copy(), a, p))


def test_empty_active_set_falls_back_to_the_input_watermark():
    # two elements active over [10, 20) and [40, 50); input watermark steps at 25 and 45
    e = np.array([5, 7])
    a = np.array([10, 40])
    c = np.array([20, 50])
    iw = StepSeries(np.array([25, 45]), np.array([30, 60]), initial=0)
    d = percentile_details(e, a, c, 0.5, iw)
    assert d.times.tolist() == [10, 20, 25, 40, 45, 50]
    assert d.active.tolist() == [1, 0, 0, 1, 1, 0]
    assert d.raw.tolist() == [5, 0, 30, 7, 7, 60]
    assert d.latched.tolist() == [5, 5, 30, 30, 30, 60]
    assert d.regressions == 1  # 7 < 30 once (re-evaluating 7 at 45 does not count again)
    assert d.curve.at(np.array([9, 15, 22, 27, 47, 55])).tolist() == [0, 5, 5, 30, 30, 60]
    # without an input watermark, an empty set holds the latched value (MIN fallback)
    d0 = percentile_details(e, a, c, 0.5)
    assert d0.curve.at(np.array([9, 15, 30, 45, 99])).tolist() == [MIN_TIMESTAMP, 5, 5, 7, 7]
    w = PercentileWatermark(0.5, initial=0)
    assert w.current(25) == 25 and w.computed() is None


def test_regressions_and_latching_incremental():
    w = PercentileWatermark(0.5)
    for x in (10, 20, 30):
        w.activate(x)
    assert w.current() == 20
    w.activate(1)
    w.activate(2)  # sorted 1 2 10 20 30: k = 2 -> 10 < 20
    assert w.computed() == 10 and w.current() == 20 and w.regressions == 1
    assert w.current() == 20 and w.regressions == 1  # unchanged set: not counted again
    w.complete(1)
    w.complete(2)
    assert w.current() == 20 and len(w) == 3


@given(
    st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=30),
    st.integers(-5, 5),
    st.integers(-3, 3),
)
def test_vectorised_latch_is_the_scalar_latch(estimates, initial, fallback):
    """latch_estimates (the curves) and Latch._latch_estimate (the objects) are one rule:
    same latched values, same regressions; None is "nothing active" (the fallback)."""
    latch = Latch(initial)
    latched = [latch._latch_estimate(x, fallback) for x in estimates]
    raw = np.array([fallback if x is None else x for x in estimates], dtype=np.int64)
    estimated = np.array([x is not None for x in estimates], dtype=bool)
    got, regressions = latch_estimates(raw, estimated, initial)
    assert got.tolist() == latched and regressions == latch.regressions


def test_the_source_latch_counts_every_evaluation_below():
    """LatchedWatermark's rule (Latch._latch): an unchanged low value counts again."""
    latch = Latch()
    for x in (5, 3, 3, 7, 6):
        latch._latch(x)
    assert latch._value == 7 and latch.regressions == 3


# --------------------------------------------------------------------------- sketch


def _rank_errors(sk_eval, e, act, comp, p):
    """Per evaluation: how far the estimate's rank is from k, and the exact answer."""
    errs: list[int] = []
    exact: list[int | None] = []
    for j, t in enumerate(sk_eval.times.tolist()):
        live = np.sort(e[(act <= t) & (t < comp)])
        if live.size == 0:
            errs.append(0)
            exact.append(None)
            continue
        k = quantile_rank(live.size, sk_eval.sketch.p)
        v = int(sk_eval.raw[j])
        lo = int(np.searchsorted(live, v, "left"))
        hi = int(np.searchsorted(live, v, "right"))
        errs.append(max(lo - k, k + 1 - hi, 0))
        exact.append(int(live[k]))
    return np.array(errs), exact


@pytest.fixture(scope="module")
def straggler_trace():
    tr = generate_trace(
        100_000, seed=7, stragglers=0.05, straggler_delay=Delay("pareto", b=1.5, scale=20.0)
    )
    return tr.event_time, tr.arrival_time


@pytest.mark.parametrize("p", [0.5, 0.99])
@pytest.mark.parametrize(
    "params",
    [
        dict(exact_capacity=500),  # mostly sketched: the active set is ~3.5k
        dict(exact_capacity=0, k=50, max_sketches=8),  # everything sketched, small k
        dict(exact_age=2 * SECOND),  # elements older than ~2 s sketched
    ],
)
def test_sketch_within_its_stated_rank_error_bound(straggler_trace, p, params):
    e, a = straggler_trace
    times = np.linspace(e.min() + 5 * SECOND, e.max(), 80).astype(np.int64)
    ev = sketch_percentile_values(e, e, a, p, times, **params)
    errs, _ = _rank_errors(ev, e, e, a, p)
    assert np.all(errs <= np.floor(ev.bound)), (errs.max(), ev.bound[np.argmax(errs)])
    assert ev.bound.max() > 0 and ev.sketch.sketches > 0  # the sketches were exercised
    if "exact_capacity" in params and "k" not in params:  # k = 200: a few % of n here
        assert np.median(ev.bound / np.maximum(ev.active, 1)) < 0.05
    assert ev.sketch.exact_size <= params.get("exact_capacity", 100_000)
    assert ev.sketch.sketches <= params.get("max_sketches", 64)


def test_sketch_is_exact_while_nothing_is_sketched(straggler_trace):
    e, a = straggler_trace
    times = np.linspace(e.min(), e.max(), 60).astype(np.int64)
    ev = sketch_percentile_values(e, e, a, 0.9, times)  # capacity 100k > active set
    _, exact = _rank_errors(ev, e, e, a, 0.9)
    assert ev.sketch.sketches == 0 and np.all(ev.bound == 0)
    assert [int(v) for v, x in zip(ev.raw, exact, strict=True) if x is not None] == [
        x for x in exact if x is not None
    ]


def test_sketch_memory_stays_bounded():
    tr = generate_trace(40_000, seed=5, delay=Delay("lognorm", s=1.0, scale=5.0))
    e, a = tr.event_time, tr.arrival_time
    times = np.linspace(e.min(), a.max(), 50).astype(np.int64)
    ev = sketch_percentile_values(e, e, a, 0.5, times, exact_capacity=64, max_sketches=4, k=64)
    assert ev.sketch.exact_size <= 64 and ev.sketch.sketches <= 4
    assert ev.peak_memory_bytes < 64 * 100 + 2 * 4 * 8_000


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("p", "error"),
    [
        *((p, ValueError) for p in (0, 0.0, -0.1, 1.0000001, 2, float("nan"), float("inf"))),
        *((p, TypeError) for p in ("0.5", True, None, [0.5])),
    ],
)
def test_p_outside_zero_one_is_rejected_everywhere(p, error):
    """A bad value is a ValueError, a non-number a TypeError, both naming p."""
    e = np.array([1, 2])
    with pytest.raises(error, match=r"p must be"):
        PercentileWatermark(p)
    with pytest.raises(error, match=r"p must be"):
        percentile_curve(e, e, e + 1, p)
    with pytest.raises(error, match=r"p must be"):
        SketchPercentileWatermark(p)
    with pytest.raises(error, match=r"p must be"):
        quantile_rank(3, p)


def test_quantile_rank_needs_a_count_of_at_least_one():
    assert quantile_rank(11, 0.5) == 5
    with pytest.raises(ValueError, match="n must be >= 1"):
        quantile_rank(0, 0.5)
    with pytest.raises(TypeError, match="n must be an integer"):
        quantile_rank(2.0, 0.5)  # type: ignore[arg-type]


def test_completion_before_activation_names_the_row():
    with pytest.raises(ValueError, match=r"row 2: completion=4 µs is before activation=5 µs"):
        percentile_details([1, 2, 3], [0, 1, 5], [1, 2, 4], 0.5)
    sk = SketchPercentileWatermark(0.5)
    sk.activate(7, at=10)
    with pytest.raises(ValueError, match=r"completion at=9 µs is before activation"):
        sk.complete(7, activated_at=10, at=9)
    assert len(sk) == 1 and sk.computed() == 7


def test_bad_columns():
    with pytest.raises(ValueError, match="one length"):
        percentile_curve([1, 2], [0], [1], 0.5)
    with pytest.raises(TypeError, match=r"event_time must hold integers \(µs\)"):
        percentile_curve([1.5], [0], [1], 0.5)
    with pytest.raises(ValueError, match="1-d"):
        percentile_curve([[1]], [[0]], [[1]], 0.5)
    with pytest.raises(ValueError, match=r"activation\[0\]=.* above MAX_TIMESTAMP"):
        percentile_curve([1], np.array([MAX_TIMESTAMP + 1], dtype=np.int64), [1], 0.5)
    with pytest.raises(TypeError, match="fallback must be a StepSeries"):
        percentile_curve([1], [0], [1], 0.5, fallback=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="fallback must be a StepSeries"):
        sketch_percentile_values([1], [0], [1], 0.5, [0], fallback=5)  # type: ignore[arg-type]


def test_unsorted_processing_times_are_rejected_and_state_kept():
    sk = SketchPercentileWatermark(0.5)
    sk.activate(1, at=100)
    sk.activate(3, at=120)
    with pytest.raises(ValueError, match=r"at=50 µs is before the previous update at 120 µs"):
        sk.activate(2, at=50)
    with pytest.raises(ValueError, match=r"at=110 µs is before the previous update at 120"):
        sk.complete(1, activated_at=100, at=110)
    with pytest.raises(ValueError, match=r"at=119 µs is before the previous update"):
        sk.current(at=119)
    assert len(sk) == 2 and sk.computed() == 1
    with pytest.raises(ValueError, match=r"times must be sorted: times\[2\]=1 µs"):
        sketch_percentile_values([1], [0], [5], 0.5, [0, 3, 1])


def test_completing_an_inactive_element_is_rejected_and_state_kept():
    w = PercentileWatermark(0.9)
    w.activate(5, item_id="a")
    w.activate(5)
    with pytest.raises(ValueError, match="item_id='b' is not active"):
        w.complete(item_id="b")
    with pytest.raises(ValueError, match="no active element has event_time=6"):
        w.complete(6)
    with pytest.raises(ValueError, match="already active"):
        w.activate(9, item_id="a")
    with pytest.raises(ValueError, match="exactly one"):
        w.complete(5, item_id="a")
    w.complete(5)  # the anonymous one
    with pytest.raises(ValueError, match="no anonymous active element"):
        w.complete(5)
    assert len(w) == 1 and w.current() == 5
    w.complete(item_id="a")
    assert len(w) == 0
    with pytest.raises(ValueError, match="event_time"):
        w.activate(MAX_TIMESTAMP + 1)
    sk = SketchPercentileWatermark(0.5)
    sk.activate(3, at=0)
    with pytest.raises(ValueError, match="no active element with event_time=4"):
        sk.complete(4, activated_at=0, at=1)
    with pytest.raises(ValueError, match="no element activated at 5000000"):
        sk.complete(3, activated_at=5 * SECOND, at=6 * SECOND)
    with pytest.raises(ValueError, match="2\\*\\*53"):
        sk.activate(1 << 60, at=2)
    assert len(sk) == 1 and sk.computed() == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(k=4), "k must be"),
        (dict(bucket_width=0), "bucket_width"),
        (dict(exact_age=-1), "exact_age"),
        (dict(exact_capacity=-1), "exact_capacity"),
        (dict(max_sketches=0), "max_sketches"),
        (dict(initial=MAX_TIMESTAMP + 1), "initial"),
    ],
)
def test_bad_sketch_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SketchPercentileWatermark(0.5, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(k=200.0),
        dict(k=True),
        dict(bucket_width=1.5),
        dict(exact_age="1s"),
        dict(exact_capacity=None),
        dict(max_sketches=2.0),
        dict(initial=0.5),
    ],
)
def test_sketch_parameters_of_the_wrong_type_are_type_errors(kwargs):
    (name,) = kwargs
    with pytest.raises(TypeError, match=name):
        SketchPercentileWatermark(0.5, **kwargs)
