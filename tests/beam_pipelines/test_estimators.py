"""Estimator providers through Beam's WatermarkEstimatorProvider / WatermarkEstimator API
(wrapped as Beam's SDK harness wraps them), against theory's definitions, with their
state checkpointed through Beam's estimator-state coder and resumed mid-stream."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from apache_beam.runners.sdf_utils import ThreadsafeWatermarkEstimator
from apache_beam.transforms.core import WatermarkEstimatorProvider
from apache_beam.utils.timestamp import Timestamp
from hypothesis import example, given
from hypothesis import strategies as st

from beam_pipelines.estimators import (
    BoundedOutOfOrdernessEstimator,
    BoundedOutOfOrdernessEstimatorProvider,
    PercentileEstimatorProvider,
    ProcessingTimeLagEstimatorProvider,
)
from theory.time import MIN_TIMESTAMP, SECOND
from theory.watermarks.heuristic import BoundedOutOfOrderness, bounded_out_of_orderness_curve


class Clock:
    """A processing clock the test moves (µs)."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


#: (processing-time step, timestamp) pairs, µs; timestamps whole ms as Beam's coders keep
steps = st.lists(
    st.tuples(st.integers(0, 3 * SECOND), st.integers(0, 60_000).map(lambda ms: ms * 1000)),
    max_size=40,
)


def _run(
    provider: WatermarkEstimatorProvider, clock: Clock, pairs: list[tuple[int, int]], cut: int
) -> list[int]:
    """Observe each timestamp after its step and read the watermark; at ``cut`` checkpoint
    the state through Beam's coder and resume from it in a new estimator."""
    coder = provider.estimator_state_coder()
    state = provider.initial_estimator_state(None, None)
    estimator = ThreadsafeWatermarkEstimator(provider.create_watermark_estimator(state))
    out = []
    for i, (step, ts) in enumerate(pairs):
        if i == cut:
            state = coder.decode(coder.encode(estimator.get_estimator_state()))
            estimator = ThreadsafeWatermarkEstimator(provider.create_watermark_estimator(state))
        clock.now += step
        estimator.observe_timestamp(Timestamp(micros=ts))
        out.append(int(estimator.current_watermark().micros))
    return out


@given(steps, st.integers(0, 40), st.sampled_from([0, SECOND, 10 * SECOND]))
@example([(0, 5000), (0, 9000), (SECOND, 1000)], 1, 0)
def test_bounded_out_of_orderness_is_theorys_curve(
    pairs: list[tuple[int, int]], cut: int, bound: int
) -> None:
    clock = Clock()
    got = _run(BoundedOutOfOrdernessEstimatorProvider(bound, clock=clock), clock, pairs, cut)
    if pairs:
        # the curve's value at an instant is after every element arriving then
        arrival = np.cumsum([s for s, _ in pairs])
        last = np.r_[arrival[1:] != arrival[:-1], True]
        curve = bounded_out_of_orderness_curve(
            np.array([t for _, t in pairs]), arrival, bound=bound
        )
        assert np.array(got)[last].tolist() == curve.at(arrival[last]).tolist()
        # and between elements it is the running maximum minus the bound
        running = np.maximum.accumulate([t for _, t in pairs]) - bound
        assert got == np.maximum(running, MIN_TIMESTAMP).tolist()


@given(steps, st.integers(0, 40), st.sampled_from([0, 5 * SECOND]))
def test_processing_time_lag_is_now_minus_lag(
    pairs: list[tuple[int, int]], cut: int, lag: int
) -> None:
    clock = Clock()
    got = _run(ProcessingTimeLagEstimatorProvider(lag, clock=clock), clock, pairs, cut)
    now = np.cumsum([s for s, _ in pairs])
    assert got == np.maximum.accumulate(np.maximum(now - lag, MIN_TIMESTAMP)).tolist()


@given(steps, st.integers(0, 40), st.sampled_from([1.0, 0.9, 0.5]), st.sampled_from([1, 4]))
def test_percentile_is_the_latched_quantile_of_the_recent_timestamps(
    pairs: list[tuple[int, int]], cut: int, p: float, horizon_s: int
) -> None:
    """Brute force: at each read, numpy's quantile(1 - p, method="lower") of the
    timestamps observed within the horizon, latched; p = 1 is their minimum."""
    clock = Clock()
    horizon = horizon_s * SECOND
    got = _run(PercentileEstimatorProvider(p, f"{horizon_s}s", clock=clock), clock, pairs, cut)
    seen_at = np.cumsum([s for s, _ in pairs])
    ts = np.array([t for _, t in pairs])
    latched = MIN_TIMESTAMP
    for i, now in enumerate(seen_at.tolist()):
        active = ts[: i + 1][seen_at[: i + 1] + horizon > now]
        value = int(np.quantile(active, 1 - p, method="lower"))
        if p == 1.0:
            assert value == int(active.min())
        latched = max(latched, value)
        assert got[i] == latched, i


def test_percentile_forgets_what_left_the_horizon() -> None:
    clock = Clock()
    provider = PercentileEstimatorProvider(1.0, "2s", clock=clock)
    est = provider.create_watermark_estimator(provider.initial_estimator_state(None, None))
    est.observe_timestamp(Timestamp(micros=1_000))
    clock.now = SECOND
    est.observe_timestamp(Timestamp(micros=9_000))
    assert est.current_watermark().micros == 1_000
    clock.now = 2 * SECOND  # the first left the horizon: the minimum of the rest
    assert est.current_watermark().micros == 9_000
    clock.now = 10 * SECOND  # nothing recent: the watermark stays where it is
    assert est.current_watermark().micros == 9_000
    assert est.state()["recent"] == []


def test_a_clock_that_goes_back_stands_still() -> None:
    clock = Clock()
    clock.now = 10 * SECOND
    provider = ProcessingTimeLagEstimatorProvider("1s", clock=clock)
    est = provider.create_watermark_estimator(provider.initial_estimator_state(None, None))
    assert est.current_watermark().micros == 9 * SECOND
    clock.now = 5 * SECOND
    assert est.current_watermark().micros == 9 * SECOND


def test_bounded_state_round_trips_in_theory() -> None:
    gen = BoundedOutOfOrderness(5)
    gen.observe(100, 1)
    gen.observe(50, 2)
    back = BoundedOutOfOrderness.from_state(gen.state())
    assert back.state() == gen.state() and back.max_seen == 100 and back.current() == 95
    with pytest.raises(ValueError, match="arrival order"):
        back.observe(200, 1)  # the clock came back with the state


def test_bad_parameters_and_states_are_named() -> None:
    with pytest.raises(ValueError, match="bound: bad duration"):
        BoundedOutOfOrdernessEstimatorProvider("-1s")
    with pytest.raises(ValueError, match="p must be"):
        PercentileEstimatorProvider(0.0, "1s")
    with pytest.raises(ValueError, match="horizon must be > 0"):
        PercentileEstimatorProvider(0.5, 0)
    with pytest.raises(TypeError, match="lag must be an integer"):
        ProcessingTimeLagEstimatorProvider(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="missing key 'generator'"):
        BoundedOutOfOrdernessEstimator.from_state({})
    state: dict[str, Any] = PercentileEstimatorProvider(0.5, "1s").initial_estimator_state(
        None, None
    )
    state["recent"] = [[5, 1], [4, 2]]
    with pytest.raises(ValueError, match=r"state\['recent'\]\[1\]: observed before"):
        PercentileEstimatorProvider(0.5, "1s").create_watermark_estimator(state)
