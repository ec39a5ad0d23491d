"""Source watermarks: incremental == vectorised, monotonic, exactness and lateness; the
percentile source watermark against its definition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.flink.conventions import (
    FlinkBoundedOutOfOrderness,
    FlinkCoreView,
    core_to_flink,
    flink_bounded_out_of_orderness_curve,
    flink_to_core,
)
from theory.series import StepSeries
from theory.time import HOUR, MAX_TIMESTAMP, MIN_TIMESTAMP, MINUTE, SECOND, parse_duration
from theory.watermarks.heuristic import (
    BoundedOutOfOrderness,
    DynamicPartitionsWatermark,
    bounded_out_of_orderness_curve,
    dynamic_partitions_curve,
)
from theory.watermarks.latch import LatchedWatermark, SourceWatermark
from theory.watermarks.percentile_source import PercentileSourceWatermark, percentile_source_curve
from theory.watermarks.percentile_sweep import percentile_details
from theory.watermarks.perfect import (
    IngressWatermark,
    PerfectWatermark,
    StaticPartitionsWatermark,
    ingress_curve,
    ingress_timestamps,
    perfect_curve,
    perfect_oracle_curve,
    static_partitions_curve,
)
from theory.watermarks.spec import make_source_watermark

I64 = np.int64
JAVA_LONG_MIN = -(2**63)
JAVA_LONG_MAX = 2**63 - 1

Trace = tuple[np.ndarray, np.ndarray, np.ndarray]


@st.composite
def traces(draw: st.DrawFn, max_size: int = 40, ordered: bool = False,
           lo: int = -20, hi: int = 60) -> Trace:
    """Small traces with many arrival ties; ``ordered``: time-ordered per partition."""
    n = draw(st.integers(0, max_size))
    a = np.array(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)), dtype=I64)
    e = np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), dtype=I64)
    p = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=I64)
    if ordered:
        order = np.argsort(a, kind="stable")
        for part in np.unique(p):
            idx = order[p[order] == part]
            e[idx] = np.sort(e[idx])
    return e, a, p


def feed(obj: SourceWatermark, e: np.ndarray, a: np.ndarray, p: np.ndarray) -> StepSeries:
    """Observe in stable arrival order; sample after the last element of each arrival time
    (the value is monotone there; the dynamic watermark latches once per arrival time)."""
    order = np.argsort(a, kind="stable")
    times: list[int] = []
    values: list[int] = []
    for k, i in enumerate(order):
        obj.observe(int(e[i]), int(a[i]), int(p[i]))
        if k == order.size - 1 or a[order[k + 1]] != a[i]:
            assert not values or obj.current() >= values[-1]
            times.append(int(a[i]))
            values.append(obj.current())
    return StepSeries(np.array(times, dtype=I64), np.array(values, dtype=I64))


def feed_at(obj: LatchedWatermark, e: np.ndarray, a: np.ndarray, p: np.ndarray,
            step_times: np.ndarray) -> np.ndarray:
    """Drive ``obj`` through ``step_times``: elements at arrival times, else advance_to."""
    order = np.argsort(a, kind="stable")
    k = 0
    out = []
    for t in step_times.tolist():
        if k < order.size and a[order[k]] == t:
            while k < order.size and a[order[k]] == t:
                i = order[k]
                obj.observe(int(e[i]), int(a[i]), int(p[i]))
                k += 1
        else:
            obj.advance_to(t)
        out.append(obj.current())
    assert k == order.size
    return np.array(out, dtype=I64)


def assert_series_equal(got: StepSeries, want: StepSeries) -> None:
    np.testing.assert_array_equal(got.times, want.times)
    np.testing.assert_array_equal(got.values, want.values)
    assert got.initial == want.initial == MIN_TIMESTAMP


def late_mask(curve: StepSeries, e: np.ndarray, a: np.ndarray) -> np.ndarray:
    return e < curve.before(a)


# ------------------------------------------------------------------ references (brute force)


def oracle_reference(e: np.ndarray, a: np.ndarray) -> np.ndarray:
    return np.array([int(e[a > t].min()) if np.any(a > t) else MAX_TIMESTAMP
                     for t in np.unique(a)], dtype=I64)


def perfect_reference(e: np.ndarray, a: np.ndarray) -> np.ndarray:
    """What has happened by each arrival time t, and not arrived: capped at t."""
    return np.minimum(oracle_reference(e, a), np.unique(a))


def dynamic_reference(e: np.ndarray, a: np.ndarray, p: np.ndarray,
                      timeout: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Literal model: per element recompute + latch; at idle-expiry instants too."""
    arrivals = set(a.tolist())
    instants: set[int] = set()
    if timeout is not None:
        for i in range(a.size):
            s = int(a[i]) + timeout + 1
            if s <= MAX_TIMESTAMP and not np.any((p == p[i]) & (a > a[i]) & (a < s)):
                instants.add(s)  # instants past MAX_TIMESTAMP never happen
    latest: dict[int, int] = {}  # the largest event time read from each partition
    arrived: dict[int, int] = {}

    def compute(now: int) -> int | None:
        live = [latest[q] for q in latest if timeout is None or arrived[q] + timeout >= now]
        return min(live) if live else None

    w = MIN_TIMESTAMP
    order = np.argsort(a, kind="stable")
    times = sorted(arrivals | instants)
    out = []
    for t in times:
        if t in arrivals:  # every row of t read, then computed and latched
            for i in order[a[order] == t]:
                latest[int(p[i])] = max(int(e[i]), latest.get(int(p[i]), int(e[i])))
                arrived[int(p[i])] = t
            c = compute(t)
            assert c is not None
            w = max(w, c)
        else:
            c = compute(t)
            if c is not None:
                w = max(w, c)
        out.append(w)
    return np.array(times, dtype=I64), np.array(out, dtype=I64)


# ------------------------------------------------------------------ 1. ingress


@given(traces())
def test_ingress_incremental_equals_vectorised_and_is_exact(tr: Trace) -> None:
    _, a, p = tr
    e = ingress_timestamps(a)
    curve = ingress_curve(a)
    np.testing.assert_array_equal(curve.values, np.unique(a) + 1)
    assert_series_equal(feed(IngressWatermark(), e, a, p), curve)
    assert curve.is_monotonic()
    assert not np.any(late_mask(curve, e, a))


def test_ingress_advance_to_and_ignores_event_time() -> None:
    w = IngressWatermark()
    w.observe(-999, 10)
    assert w.current() == 11
    w.advance_to(50)
    assert w.current() == 51
    with pytest.raises(ValueError, match="advance_to"):
        w.observe(1, 50)
    w.observe(1, 51)
    assert w.current() == 52 and w.regressions == 0


# ------------------------------------------------------------------ 2. perfect oracle


@given(traces())
def test_perfect_incremental_equals_vectorised(tr: Trace) -> None:
    e, a, p = tr
    curve = perfect_curve(e, a)
    assert_series_equal(feed(PerfectWatermark(e, a), e, a, p), curve)
    np.testing.assert_array_equal(curve.values, perfect_reference(e, a))
    assert curve.is_monotonic()
    assert not np.any(late_mask(curve, e, a))
    # it never passes the clock: W(t) <= t at every arrival t
    assert np.all(curve.values <= curve.times)
    if a.size:
        assert curve.final() == int(a.max())


@given(traces())
def test_perfect_oracle_is_uncapped(tr: Trace) -> None:
    e, a, p = tr
    oracle = perfect_oracle_curve(e, a)
    np.testing.assert_array_equal(oracle.values, oracle_reference(e, a))
    assert_series_equal(feed(PerfectWatermark(e, a, oracle=True), e, a, p), oracle)
    assert_series_equal(make_source_watermark("perfect:oracle").curve(e, a), oracle)
    assert not np.any(late_mask(oracle, e, a))
    capped = perfect_curve(e, a)
    np.testing.assert_array_equal(capped.values, np.minimum(oracle.values, oracle.times))
    if a.size:
        assert oracle.final() == MAX_TIMESTAMP


def test_perfect_never_runs_ahead_of_processing_time() -> None:
    """Issue 13 finding 3: an element arriving before its event time (clock skew) made
    the perfect watermark jump to the future; now it stays at the clock."""
    e, a = np.array([100, 50, 300]), np.array([10, 60, 70])
    assert perfect_oracle_curve(e, a).values.tolist() == [50, 300, MAX_TIMESTAMP]
    assert perfect_curve(e, a).values.tolist() == [10, 60, 70]
    w = make_source_watermark("perfect").incremental(e, a)
    w.observe(100, 10)
    assert w.current() == 10
    with pytest.raises(TypeError, match="oracle"):
        PerfectWatermark(e, a, oracle=1)  # type: ignore[arg-type]


def test_perfect_oracle_accepts_any_order_within_an_arrival_time() -> None:
    e, a = np.array([5, 1, 9, 3]), np.array([0, 0, 0, 7])
    w = PerfectWatermark(e, a, oracle=True)
    w.observe(1, 0)
    assert w.current() == 3  # 5 and 9 still unread at 0, 3 later
    w.observe(9, 0)
    w.observe(5, 0)
    assert w.current() == 3
    w.observe(3, 7)
    assert w.current() == MAX_TIMESTAMP


def test_perfect_oracle_rejects_unknown_or_skipped_elements() -> None:
    e, a = np.array([5, 1, 3]), np.array([0, 0, 7])
    w = PerfectWatermark(e, a)
    with pytest.raises(ValueError, match="not in the oracle's trace"):
        w.observe(4, 0)
    w.observe(5, 0)
    with pytest.raises(ValueError, match="never observed"):
        w.observe(3, 7)
    w.observe(1, 0)
    with pytest.raises(ValueError, match="does not match"):
        w.observe(3, 8)


# ------------------------------------------------------------------ 3. static partitions


@given(traces(ordered=True))
def test_static_partitions_equal_perfect_on_ordered_logs(tr: Trace) -> None:
    e, a, p = tr
    curve = static_partitions_curve(e, a, p)
    assert_series_equal(curve, perfect_curve(e, a))
    assert_series_equal(feed(StaticPartitionsWatermark.from_trace(e, a, p), e, a, p), curve)


@given(traces())
def test_static_partitions_equal_perfect_on_any_logs(tr: Trace) -> None:
    """The source knows the whole static set: each partition's least unread event time,
    whatever its order, so the minimum over partitions is the perfect watermark."""
    e, a, p = tr
    curve = static_partitions_curve(e, a, p)
    assert_series_equal(curve, perfect_curve(e, a))
    assert_series_equal(feed(StaticPartitionsWatermark.from_trace(e, a, p), e, a, p), curve)


def test_static_partitions_hold_at_the_least_unread_of_an_unordered_log() -> None:
    w = StaticPartitionsWatermark({3: np.array([1, 2]), 7: np.array([1, 5, 4])})
    w.observe(1, 10, 7)
    assert w.current() == 1  # partition 3 still holds at 1
    w.observe(1, 11, 3)
    w.observe(2, 12, 3)
    assert w.current() == 4  # partition 7's unread are 5 then 4: its least is 4, not 5
    w.observe(5, 13, 7)
    assert w.current() == 4
    w.observe(4, 14, 7)
    assert w.current() == 14  # every log exhausted: the clock


def test_static_partitions_next_unread_and_mismatch() -> None:
    w = StaticPartitionsWatermark({0: np.array([10, 20]), 1: np.array([15]), 2: np.array([])})
    assert w.current() == MIN_TIMESTAMP
    w.observe(10, 11, 0)
    assert w.current() == 11  # the next unread is 15, but at 11 the clock caps it
    with pytest.raises(ValueError, match="next unread"):
        w.observe(30, 12, 0)
    with pytest.raises(ValueError, match="not one of"):
        w.observe(1, 12, 9)
    w.observe(15, 16, 1)
    assert w.current() == 16
    w.observe(20, 30, 0)
    assert w.current() == 30  # exhausted logs: the clock
    with pytest.raises(ValueError, match="exhausted"):
        w.observe(20, 31, 0)


# ------------------------------------------------------------------ 4. bounded OOO


@given(traces(), st.integers(0, 40))
def test_bounded_incremental_equals_vectorised_and_lateness(tr: Trace, bound: int) -> None:
    e, a, p = tr
    curve = bounded_out_of_orderness_curve(e, a, p, bound=bound)
    assert_series_equal(feed(BoundedOutOfOrderness(bound), e, a, p), curve)
    assert curve.is_monotonic()
    # late iff something that arrived strictly earlier is more than ``bound`` newer
    late = late_mask(curve, e, a)
    for i in range(a.size):
        earlier = e[a < a[i]]
        assert late[i] == (earlier.size > 0 and int(earlier.max()) - int(e[i]) > bound)


def test_bounded_constructed_example() -> None:
    s = SECOND
    e = np.array([100 * s, 70 * s, 69 * s, 40 * s])
    a = np.array([1, 2, 3, 3]) * s
    curve = bounded_out_of_orderness_curve(e, a, bound=30 * s)
    np.testing.assert_array_equal(curve.values, [70 * s, 70 * s, 70 * s])
    # disorder 30 s is within the bound; 31 s and 60 s exceed it
    np.testing.assert_array_equal(late_mask(curve, e, a), [False, False, True, True])


@settings(max_examples=200)
@given(traces(lo=MIN_TIMESTAMP, hi=MAX_TIMESTAMP),
       st.integers(0, 2**63 - 1))
def test_bounded_extremes_do_not_overflow(tr: Trace, bound: int) -> None:
    e, a, p = tr
    curve = bounded_out_of_orderness_curve(e, a, bound=bound)
    assert_series_equal(feed(BoundedOutOfOrderness(bound), e, a, p), curve)
    flink = flink_bounded_out_of_orderness_curve(e, a, bound=bound)
    assert_series_equal(feed(FlinkBoundedOutOfOrderness(bound), e, a, p), flink)
    assert np.all(curve.values >= MIN_TIMESTAMP) and np.all(flink.values >= MIN_TIMESTAMP)


def test_bound_beyond_int64_is_refused_by_name() -> None:
    e = a = np.array([0, 1], dtype=np.int64)
    for make in (
        lambda b: bounded_out_of_orderness_curve(e, a, bound=b),
        lambda b: flink_bounded_out_of_orderness_curve(e, a, bound=b),
        BoundedOutOfOrderness,
        FlinkBoundedOutOfOrderness,
    ):
        with pytest.raises(ValueError, match="bound must fit in int64"):
            make(2**63)


# ------------------------------------------------------------------ 5. Flink convention


def java_bounded_out_of_orderness(events: list[int], bound: int) -> list[int]:
    """Flink's BoundedOutOfOrdernessWatermarks: onEvent, then the value onPeriodicEmit."""
    max_ts = JAVA_LONG_MIN + bound + 1
    out = []
    for ts in events:
        max_ts = max(max_ts, ts)
        out.append(max_ts - bound - 1)
    return out


@given(traces(), st.integers(0, 40))
def test_flink_matches_flink_formula_and_core(tr: Trace, bound: int) -> None:
    e, a, p = tr
    w, core = FlinkBoundedOutOfOrderness(bound), BoundedOutOfOrderness(bound)
    assert w.current() == MIN_TIMESTAMP == w.current_core()  # Java's Long.MIN_VALUE
    order = np.argsort(a, kind="stable")
    java = java_bounded_out_of_orderness(e[order].tolist(), bound)
    for i, want in zip(order, java, strict=True):
        w.observe(int(e[i]), int(a[i]), int(p[i]))
        core.observe(int(e[i]), int(a[i]), int(p[i]))
        assert w.current() == max(want, MIN_TIMESTAMP)
        assert w.current_core() == core.current() == w.current() + 1
    curve = flink_bounded_out_of_orderness_curve(e, a, p, bound=bound)
    assert_series_equal(feed(FlinkBoundedOutOfOrderness(bound), e, a, p), curve)
    assert_series_equal(
        StepSeries(curve.times, flink_to_core(curve.values)),
        bounded_out_of_orderness_curve(e, a, bound=bound),
    )
    assert_series_equal(feed(FlinkCoreView(FlinkBoundedOutOfOrderness(bound)), e, a, p),
                        make_source_watermark(f"flink-bounded:{bound}").curve(e, a, p))


@given(st.integers(MIN_TIMESTAMP + 1, MAX_TIMESTAMP - 2))
def test_flink_conversion_round_trips(w: int) -> None:
    assert flink_to_core(w) == w + 1
    assert core_to_flink(flink_to_core(w)) == w
    assert flink_to_core(core_to_flink(w + 1)) == w + 1
    arr = np.array([w], dtype=I64)
    np.testing.assert_array_equal(core_to_flink(flink_to_core(arr)), arr)


def test_flink_conversion_maps_bounds_to_themselves() -> None:
    for f in (flink_to_core, core_to_flink):
        assert f(MIN_TIMESTAMP) == MIN_TIMESTAMP
        assert f(MAX_TIMESTAMP) == MAX_TIMESTAMP
        assert f(JAVA_LONG_MIN) == MIN_TIMESTAMP
        assert f(JAVA_LONG_MAX) == MAX_TIMESTAMP
        arr = np.array([JAVA_LONG_MIN, MIN_TIMESTAMP, MAX_TIMESTAMP, JAVA_LONG_MAX], dtype=I64)
        np.testing.assert_array_equal(
            f(arr), [MIN_TIMESTAMP, MIN_TIMESTAMP, MAX_TIMESTAMP, MAX_TIMESTAMP]
        )


# ------------------------------------------------------------------ 6. dynamic partitions


def assert_dynamic_forms_agree(
    e: np.ndarray, a: np.ndarray, p: np.ndarray, timeout: int | None
) -> StepSeries:
    """The vectorised dynamic-partitions curve equals the reference and the incremental
    generator at its change times; returns the curve."""
    curve = dynamic_partitions_curve(e, a, p, idle_timeout=timeout)
    ref_t, ref_v = dynamic_reference(e, a, p, timeout)
    np.testing.assert_array_equal(curve.times, ref_t)
    np.testing.assert_array_equal(curve.values, ref_v)
    got = feed_at(DynamicPartitionsWatermark(timeout), e, a, p, curve.times)
    np.testing.assert_array_equal(got, curve.values)
    return curve


@settings(max_examples=150)
@given(traces(), st.one_of(st.none(), st.integers(0, 12)))
def test_dynamic_incremental_equals_vectorised_equals_reference(
    tr: Trace, timeout: int | None
) -> None:
    e, a, p = tr
    curve = assert_dynamic_forms_agree(e, a, p, timeout)
    assert curve.is_monotonic()
    if timeout is None:
        assert_series_equal(feed(DynamicPartitionsWatermark(), e, a, p), curve)


@given(traces(lo=MIN_TIMESTAMP, hi=MAX_TIMESTAMP), st.integers(0, 2**63 - 1))
def test_dynamic_huge_timeout_and_extremes(tr: Trace, timeout: int) -> None:
    e, a, p = tr
    a = a + (MAX_TIMESTAMP - 40)  # arrivals near the end of time
    assert_dynamic_forms_agree(e, a, p, timeout)


def test_dynamic_timeout_beyond_int64_is_refused_by_name() -> None:
    e = a = np.array([0, 1], dtype=I64)
    with pytest.raises(ValueError, match="idle_timeout must fit in int64"):
        dynamic_partitions_curve(e, a, None, idle_timeout=2**63)
    with pytest.raises(ValueError, match="idle_timeout must fit in int64"):
        DynamicPartitionsWatermark(2**63)


@given(traces(), st.sampled_from([None, 3]))
def test_dynamic_with_wide_partition_ids(tr: Trace, timeout: int | None) -> None:
    e, a, p = tr
    wide = np.array([-3, 70_000, 2**33, 2**62], dtype=I64)[p]  # spans > 2**16 and > 2**32
    curve = dynamic_partitions_curve(e, a, wide, idle_timeout=timeout)
    ref_t, ref_v = dynamic_reference(e, a, p, timeout)
    np.testing.assert_array_equal(curve.times, ref_t)
    np.testing.assert_array_equal(curve.values, ref_v)


def test_dynamic_late_appearing_partition_produces_late_data() -> None:
    e = np.array([100, 110, 120, 50, 130])
    a = np.array([1, 2, 3, 4, 5])
    p = np.array([0, 0, 0, 1, 0])
    curve = dynamic_partitions_curve(e, a, p)
    np.testing.assert_array_equal(curve.values, [100, 110, 120, 120, 120])
    np.testing.assert_array_equal(late_mask(curve, e, a), [False, False, False, True, False])
    w = DynamicPartitionsWatermark()
    feed(w, e, a, p)
    assert w.regressions == 2  # at a=4 (min 50) and a=5 (min 50 still)
    # the perfect watermark would have waited for partition 1
    assert not np.any(late_mask(perfect_curve(e, a), e, a))


def test_dynamic_idle_timeout() -> None:
    timeout = 10
    # partition 0 reads once at 0 then goes quiet; partition 1 reads every 8 µs
    e = np.array([5, 100, 108, 116, 124, 50])
    a = np.array([0, 0, 8, 16, 24, 40])
    p = np.array([0, 1, 1, 1, 1, 0])
    curve = dynamic_partitions_curve(e, a, p, idle_timeout=timeout)
    # 11: partition 0 idle (0 + 10 < 11); 35: all idle, stays put; 51: idle again
    np.testing.assert_array_equal(curve.times, [0, 8, 11, 16, 24, 35, 40, 51])
    np.testing.assert_array_equal(curve.values, [5, 5, 108, 116, 124, 124, 124, 124])
    assert curve.at(10) == 5  # at a + timeout still active
    np.testing.assert_array_equal(late_mask(curve, e, a), [False] * 5 + [True])
    w = DynamicPartitionsWatermark(idle_timeout=timeout)
    np.testing.assert_array_equal(feed_at(w, e, a, p, curve.times), curve.values)
    assert w.regressions == 1  # partition 0 came back with 50
    # without a timeout partition 0 holds everything back until it reads again
    np.testing.assert_array_equal(dynamic_partitions_curve(e, a, p).values, [5, 5, 5, 5, 50])


def test_dynamic_advance_to_crosses_several_expiries() -> None:
    w = DynamicPartitionsWatermark(idle_timeout=10)
    w.observe(10, 0, 0)
    w.observe(20, 5, 1)
    w.observe(30, 9, 2)
    assert w.current() == 10
    w.advance_to(1000)  # 0 idle at 11 (-> 20), 1 at 16 (-> 30), 2 at 20 (all idle)
    assert w.current() == 30
    with pytest.raises(ValueError, match="back in time"):
        w.advance_to(999)


# ------------------------------------------------------------------ percentile (backlog)
# percentile:<p>[:hold]: the backlog A(t) = {e : e <= t < arrival} (elements arriving at or
# before their event time never belong to it); W_p(t) = np.quantile(A(t), 1 - p,
# method="lower") (0-based rank floor((n - 1)(1 - p))), or the perfect watermark where A(t)
# is empty (``:hold``: no fallback, the watermark stays); latched; evaluated at every event
# and arrival time. This is spark_backend.analytics' ``percentile:<p>[:hold]``.

p_st = st.sampled_from([1.0, 0.99, 0.9, 0.75, 0.5, 0.3, 0.1, 1e-9]) | st.floats(
    min_value=1e-6, max_value=1.0
)


def instants(e: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Every instant the watermark can change at, and the instants between them."""
    t = np.union1d(e, a)
    return np.union1d(t, np.concatenate((t - 1, t + 1)))


def percentile_reference(e: np.ndarray, a: np.ndarray, p: float, hold: bool) -> StepSeries:
    """The definition, O(n) per instant, over every event and arrival time."""
    times = np.union1d(e, a)
    perfect = perfect_curve(e, a)
    value = MIN_TIMESTAMP
    out = []
    for t in times.tolist():
        backlog = e[(e <= t) & (t < a)]
        if backlog.size:
            raw = int(np.quantile(backlog, 1.0 - p, method="lower"))
        else:
            raw = MIN_TIMESTAMP if hold else int(perfect.at(t))
        value = max(value, raw)
        out.append(value)
    return StepSeries(times, np.array(out, dtype=I64)).compressed()


@settings(max_examples=300, deadline=None)
@given(traces(), p_st, st.booleans())
def test_percentile_curve_is_the_definition(tr: Trace, p: float, hold: bool) -> None:
    e, a, part = tr
    spec = make_source_watermark(f"percentile:{p!r}" + (":hold" if hold else ""))
    assert spec.p == p and spec.hold == hold
    assert_series_equal(spec.curve(e, a, part), percentile_reference(e, a, p, hold))


@settings(max_examples=300, deadline=None)
@given(traces(), p_st, st.booleans())
def test_percentile_incremental_equals_vectorised(tr: Trace, p: float, hold: bool) -> None:
    e, a, part = tr
    curve = percentile_source_curve(e, a, p=p, hold=hold)
    times = np.union1d(np.union1d(e, a), curve.times)
    obj = make_source_watermark(f"percentile:{p!r}" + (":hold" if hold else "")).incremental(e, a)
    assert isinstance(obj, PercentileSourceWatermark) and obj.p == p
    np.testing.assert_array_equal(feed_at(obj, e, a, part, times), curve.at(times))
    # the regressions are theory.watermarks.percentile's (evaluations below the latched value)
    details = percentile_details(e, e, np.maximum(a, e), p, None if hold else perfect_curve(e, a))
    assert obj.regressions == details.regressions


def test_percentile_worked_example() -> None:
    # backlog at t=4: events 1 and 3 (arrive at 6 and 9); at 7: 3, 5, 7 (arrivals 9, 8, 10)
    e = np.array([1, 3, 5, 7, 20], dtype=I64)
    a = np.array([6, 9, 8, 10, 2], dtype=I64)  # the last one arrives before its event
    c = percentile_source_curve(e, a, p=0.5)
    # p = 0.5: rank floor((n - 1) / 2): t=1 {1} -> 1; t=3 {1,3} -> 1; t=5 {1,3,5} -> 3;
    # t=6 {3,5} -> 3; t=7 {3,5,7} -> 5; t=8 {3,7} -> 3 (kept at 5: a regression);
    # t=9 {7} -> 7; t=10: empty -> perfect, capped at the clock: 10
    assert c.times.tolist() == [1, 5, 7, 9, 10]
    assert c.values.tolist() == [1, 3, 5, 7, 10]
    assert percentile_details(e, e, np.maximum(a, e), 0.5, perfect_curve(e, a)).regressions == 1
    held = percentile_source_curve(e, a, p=0.5, hold=True)
    assert held.values.tolist() == [1, 3, 5, 7]  # nothing after the backlog empties


@settings(max_examples=300, deadline=None)
@given(traces(), p_st, st.booleans())
def test_percentile_monotonic(tr: Trace, p: float, hold: bool) -> None:
    e, a, _ = tr
    c = percentile_source_curve(e, a, p=p, hold=hold)
    assert c.is_monotonic()
    assert c.initial == MIN_TIMESTAMP


@settings(max_examples=300, deadline=None)
@given(traces())
def test_percentile_p1_is_the_perfect_watermark_from_the_first_arrival(tr: Trace) -> None:
    e, a, _ = tr
    one = make_source_watermark("percentile:1").curve(e, a)
    perfect = perfect_curve(e, a)
    t = instants(e, a)
    if a.size:
        after = t >= a.min()
        # equal at arrival times; between them it may rise with the events that happen
        # (the perfect curve steps only at arrivals)
        arrivals = np.unique(a)
        np.testing.assert_array_equal(one.at(arrivals), perfect.at(arrivals))
        assert np.all(one.at(t[after]) >= perfect.at(t[after]))
        assert np.all(one.at(t[after]) <= np.maximum(t[after], perfect.at(t[after])))
        # before the first arrival it is the minimum event time so far, <= perfect's next
        assert np.all(one.at(t[~after]) <= perfect.at(int(a.min())))
    # so nothing is late against it, as against the perfect watermark
    assert not np.any(e < one.before(a))
    assert percentile_details(e, e, np.maximum(a, e), 1.0, perfect).regressions == 0


@settings(max_examples=300, deadline=None)
@given(traces(), p_st, p_st, st.booleans())
def test_percentile_lower_p_is_pointwise_higher_and_late_sets_nest(
    tr: Trace, p1: float, p2: float, hold: bool
) -> None:
    """Same evaluation instants for every p, and rank floor((n-1)(1-p)) falls as p rises,
    so each raw value, hence the running maximum, is >= for the smaller p; an element late
    under the larger p is late under the smaller."""
    e, a, _ = tr
    lo, hi = min(p1, p2), max(p1, p2)
    w_lo = percentile_source_curve(e, a, p=lo, hold=hold)
    w_hi = percentile_source_curve(e, a, p=hi, hold=hold)
    t = instants(e, a)
    assert np.all(w_lo.at(t) >= w_hi.at(t))
    late_lo, late_hi = e < w_lo.before(a), e < w_hi.before(a)
    assert np.all(late_lo | ~late_hi)


@settings(max_examples=200, deadline=None)
@given(traces(), p_st)
def test_percentile_hold_is_below_the_fallback_form(tr: Trace, p: float) -> None:
    e, a, _ = tr
    held = percentile_source_curve(e, a, p=p, hold=True)
    fallback = percentile_source_curve(e, a, p=p)
    t = instants(e, a)
    assert np.all(held.at(t) <= fallback.at(t))


@pytest.mark.parametrize("spec", [
    "percentile:0", "percentile:1.5", "percentile:abc", "percentile:", "percentile",
    "percentile:-0.5", "percentile:nan", "percentile:inf", "percentile:0.9:", "percentile:0.9:x",
    "percentile:0.9:hold:1", "Percentile:0.9",
])
def test_percentile_bad_specs_name_the_spec(spec: str) -> None:
    with pytest.raises(ValueError, match=repr(spec)):
        make_source_watermark(spec)


def test_percentile_bad_specs_say_why() -> None:
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\], got 0"):
        make_source_watermark("percentile:0")
    with pytest.raises(ValueError, match=r"p must be a number in \(0, 1\], got 'abc'"):
        make_source_watermark("percentile:abc")
    with pytest.raises(ValueError, match="p must be"):
        percentile_source_curve([1], [2], p=0)


def test_percentile_incremental_needs_the_trace_and_checks_it() -> None:
    spec = make_source_watermark("percentile:0.9")
    with pytest.raises(ValueError, match="knows its trace in advance"):
        spec.incremental()
    e = np.array([1, 2, 3], dtype=I64)
    a = np.array([5, 5, 7], dtype=I64)
    w = spec.incremental(e, a)
    w.observe(1, 5)
    with pytest.raises(ValueError, match="arriving at 5 µs were never observed"):
        w.observe(3, 7)
    with pytest.raises(ValueError, match="never observed"):
        w.advance_to(6)
    with pytest.raises(ValueError, match="not in the oracle's trace"):
        w.observe(9, 5)
    w.observe(2, 5)
    with pytest.raises(ValueError, match="the next elements arrive at 7"):
        w.observe(3, 8)
    with pytest.raises(ValueError, match="elements arriving at 7 µs were never observed"):
        w.advance_to(7)
    w.observe(3, 7)
    assert w.current() == 7  # the backlog is empty: perfect, capped at the clock
    with pytest.raises(ValueError, match="no more elements"):
        w.observe(3, 9)


# ------------------------------------------------------------------ registry and errors


def test_registry_parses_specs() -> None:
    assert make_source_watermark("bounded:500ms").bound == 500_000
    assert make_source_watermark("bounded:30s").bound == 30 * SECOND
    assert make_source_watermark(" flink-bounded:2m ").bound == 2 * MINUTE
    assert make_source_watermark("bounded:1h").bound == HOUR
    assert make_source_watermark("bounded:1500").bound == 1500
    assert make_source_watermark("dynamic:idle=1m").idle_timeout == MINUTE
    assert make_source_watermark("dynamic").idle_timeout is None
    assert parse_duration("250us") == 250
    for spec in ("perfect", "ingress", "static", "dynamic"):
        assert make_source_watermark(spec).kind == spec


@given(traces(ordered=True))
def test_registry_curves_match_incremental(tr: Trace) -> None:
    e, a, p = tr
    for spec in ("perfect", "static", "bounded:7", "flink-bounded:7", "dynamic"):
        s = make_source_watermark(spec)
        assert_series_equal(feed(s.incremental(e, a, p), e, a, p), s.curve(e, a, p))
    ingress = make_source_watermark("ingress")
    assert_series_equal(feed(ingress.incremental(), a, a, p), ingress.curve(e, a, p))
    idle = make_source_watermark("dynamic:idle=3")
    c = idle.curve(e, a, p)
    np.testing.assert_array_equal(feed_at(idle.incremental(), e, a, p, c.times), c.values)


@pytest.mark.parametrize("spec", [
    "", "foo", "bounded", "bounded:", "bounded:-1s", "bounded:1.5us", "bounded:3x",
    "flink-bounded", "dynamic:", "dynamic:idle", "dynamic:idle=", "dynamic:idle=-1m",
    "dynamic:x=1m", "perfect:3", "ingress:", "Bounded:1s",
])
def test_registry_rejects_bad_specs(spec: str) -> None:
    with pytest.raises(ValueError, match=repr(spec).replace("(", r"\(")):
        make_source_watermark(spec)


def test_a_spec_that_is_not_a_string_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="expected a string"):
        make_source_watermark(30)  # type: ignore[arg-type]


def test_oracle_specs_need_the_trace() -> None:
    with pytest.raises(ValueError, match="perfect"):
        make_source_watermark("perfect").incremental()


def test_bad_params() -> None:
    with pytest.raises(ValueError, match="bound"):
        BoundedOutOfOrderness(-1)
    with pytest.raises(ValueError, match="bound"):
        FlinkBoundedOutOfOrderness(-1)
    with pytest.raises(ValueError, match="bound"):
        bounded_out_of_orderness_curve([1], [1], bound=-5)
    with pytest.raises(ValueError, match="idle_timeout"):
        DynamicPartitionsWatermark(idle_timeout=-1)
    with pytest.raises(ValueError, match="idle_timeout"):
        dynamic_partitions_curve([1], [1], idle_timeout=-1)
    with pytest.raises(ValueError, match="arrival_time has 2"):
        perfect_curve([1], [1, 2])
    with pytest.raises(TypeError, match="event_time"):
        perfect_curve([1.5], [1])
    with pytest.raises(ValueError, match=r"event_time\[1\]"):
        perfect_curve(np.array([0, MAX_TIMESTAMP + 1]), [1, 2])
    w = BoundedOutOfOrderness(0)
    w.observe(5, 10)
    with pytest.raises(ValueError, match="arrival order"):
        w.observe(5, 9)


def test_empty_traces() -> None:
    empty = np.array([], dtype=I64)
    for curve in (
        perfect_curve(empty, empty), ingress_curve(empty),
        static_partitions_curve(empty, empty, empty),
        bounded_out_of_orderness_curve(empty, empty, bound=1),
        flink_bounded_out_of_orderness_curve(empty, empty, bound=1),
        dynamic_partitions_curve(empty, empty, empty),
        dynamic_partitions_curve(empty, empty, empty, idle_timeout=1),
    ):
        assert len(curve) == 0 and curve.initial == MIN_TIMESTAMP


def test_vectorised_on_a_large_trace() -> None:
    rng = np.random.default_rng(1)
    n = 200_000
    a = np.sort(rng.integers(0, 10**9, n))
    e = a - rng.integers(0, 10**6, n)
    p = rng.integers(0, 50, n)
    for curve in (
        perfect_curve(e, a), bounded_out_of_orderness_curve(e, a, bound=10**5),
        dynamic_partitions_curve(e, a, p),
        dynamic_partitions_curve(e, a, p, idle_timeout=10**4),
    ):
        assert curve.is_monotonic() and len(curve) >= np.unique(a).size


def test_dynamic_holds_each_partition_at_its_largest_event_time() -> None:
    """A partition read out of order holds at the largest event time read from it, not
    at its latest row's: the value does not depend on the order of rows arriving
    together."""
    e, a, p = np.array([10, 3, 5, 20]), np.array([1, 1, 2, 3]), np.array([0, 1, 0, 1])
    for perm in ([0, 1, 2, 3], [1, 0, 2, 3]):
        curve = dynamic_partitions_curve(e[perm], a[perm], p[perm])
        np.testing.assert_array_equal(curve.values, [3, 3, 10])  # latest would end at 5
        assert_series_equal(feed(DynamicPartitionsWatermark(), e[perm], a[perm], p[perm]), curve)
    ties = dynamic_partitions_curve(np.array([10, 5, 7]), np.array([1, 1, 1]),
                                    np.array([0, 0, 1]))
    np.testing.assert_array_equal(ties.values, [7])
