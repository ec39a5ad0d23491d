import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.series import StepSeries, pointwise_min
from theory.time import MIN_TIMESTAMP

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
