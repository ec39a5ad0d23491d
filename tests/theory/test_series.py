import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.series import StepSeries, lag_quantiles, pointwise_min
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

updates = st.lists(st.tuples(st.integers(0, 50), st.integers(-100, 100)), max_size=40)


def _naive_at(ups: list[tuple[int, int]], t: int, initial: int) -> int:
    value = initial
    for time, v in sorted(ups, key=lambda x: x[0]):  # stable: last at a time wins
        if time <= t:
            value = v
    return value


@given(updates)
def test_from_events_matches_naive(ups):
    s = StepSeries.from_events(
        np.array([u[0] for u in ups], dtype=np.int64), np.array([u[1] for u in ups], dtype=np.int64)
    )
    for t in range(-1, 52):
        assert int(s.at(t)) == _naive_at(ups, t, MIN_TIMESTAMP)
        assert int(s.before(t)) == _naive_at(ups, t - 1, MIN_TIMESTAMP)


@given(updates, updates)
def test_pointwise_min_matches_naive(a, b):
    sa = StepSeries.from_events(
        np.array([u[0] for u in a], np.int64), np.array([u[1] for u in a], np.int64), 0
    )
    sb = StepSeries.from_events(
        np.array([u[0] for u in b], np.int64), np.array([u[1] for u in b], np.int64), 0
    )
    m = pointwise_min([sa, sb])
    for t in range(-1, 52):
        assert int(m.at(t)) == min(_naive_at(a, t, 0), _naive_at(b, t, 0))


@given(updates)
def test_latched_is_running_max_and_counts_regressions(ups):
    s = StepSeries.from_events(
        np.array([u[0] for u in ups], np.int64), np.array([u[1] for u in ups], np.int64), 0
    )
    latched = s.latched()
    assert latched.is_monotonic()
    running = 0
    regressions = 0
    for v in s.values.tolist():
        if v < running:
            regressions += 1
        running = max(running, v)
    assert s.regressions() == regressions
    assert latched.final() == running


def test_rejects_unsorted_times():
    with pytest.raises(ValueError, match="index 2"):
        StepSeries(np.array([1, 3, 2]), np.array([0, 0, 0]))


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="one length"):
        StepSeries(np.array([1, 2]), np.array([0]))


def _time_below(series: StepSeries, lo: int, hi: int, x: float) -> float:
    """Brute force: the processing time in [lo, hi) with a finite W and lag below x,
    interval by interval (pure Python)."""
    edges = sorted({lo, hi, *(int(t) for t in series.times if lo < t < hi)})
    total = 0.0
    for t0, t1 in itertools.pairwise(edges):
        w = int(series.at(t0))
        if MIN_TIMESTAMP < w < MAX_TIMESTAMP:
            total += min(max(x - (t0 - w), 0.0), t1 - t0)
    return total


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(-50, 500)), min_size=1, max_size=30),
    st.sampled_from([0.0, 0.5, 0.9, 0.99]),
)
def test_lag_quantiles_invert_the_time_below(steps, q):
    times = np.unique(np.array([t for t, _ in steps], dtype=np.int64))
    values = np.maximum.accumulate(times - np.array([lag for _, lag in steps[: times.size]]))
    c = StepSeries(times, values)
    lo, hi = int(times[0]), int(times[-1]) + 37
    (x,) = lag_quantiles(c, lo, hi, [q])
    finite = _time_below(c, lo, hi, float("inf"))
    assert abs(_time_below(c, lo, hi, x) - q * finite) <= 1e-9 * finite
    # a repeated value changes nothing, to the bit
    doubled = StepSeries(np.append(times, hi - 1), np.append(values, values[-1]))
    assert lag_quantiles(doubled, lo, hi, [q]) == (x,)


def test_lag_quantiles_by_hand():
    """Lag 0..10 over [0, 10), then 5..15 over [10, 20): the median is 7.5, the quarter 5,
    p99 14.8; no finite time gives NaN."""
    c = StepSeries(np.array([0, 10]), np.array([0, 5]))
    assert lag_quantiles(c, 0, 20, [0.5, 0.25, 0.99]) == (7.5, 5.0, 14.8)
    assert all(np.isnan(lag_quantiles(StepSeries(np.array([5]), np.array([MIN_TIMESTAMP])),
                                      0, 20, [0.5])))
