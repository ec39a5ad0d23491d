"""The public API's findings of issue 14: each bad call gets a clear error (TypeError for
a wrong type, ValueError for a bad value) and leaves the object as it was."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from theory import (
    AfterCount,
    ElementEvent,
    FixedWindows,
    GroupByWindowEngine,
    IntervalWindow,
    PercentileWatermark,
    WindowingStrategy,
    WindowOverflowError,
    run_script,
)
from theory.dataflow.pubsub import TrackingEstimator
from theory.time import HOUR, MAX_TIMESTAMP, SECOND


def _state(w: PercentileWatermark) -> tuple[int, int, int | None, int]:
    return (w.latched, w.regressions, w._last, len(w))


@pytest.mark.parametrize("bad", ["bad", "garbage", float("nan"), 1.5, None.__class__])
def test_percentile_current_refuses_a_bad_input_watermark_and_changes_nothing(bad):
    for active in ([], [5, 7, 9]):
        w = PercentileWatermark(0.5)
        for e in active:
            w.activate(e)
        w.current(3)
        twin = copy.deepcopy(w)
        before = _state(w)
        with pytest.raises(TypeError, match="input_watermark"):
            w.current(bad)
        assert _state(w) == before
        # the same later history gives the same regressions as on an untouched twin
        for x in (w, twin):
            x.activate(1)
            x.current(2)
        assert _state(w) == _state(twin)


def test_tracking_estimator_refuses_now_going_backwards_beyond_the_skew():
    """A clock stepping back within max_clock_skew (1 s by default) is taken as the latest
    now; beyond it, a ValueError naming the bound and no change."""
    est = TrackingEstimator()
    est.on_tracked(10 * SECOND, 9 * SECOND)
    first = est.estimate(20 * SECOND, None, False)
    assert est.estimate(19 * SECOND, None, False) == first  # 1 s back: as at 20 s
    state = est.state()
    with pytest.raises(ValueError, match=r"went back by more than max_clock_skew \(1000000 µs\)"):
        est.estimate(19 * SECOND - 1, None, False)
    assert est.state() == state
    assert est.estimate(20 * SECOND, None, False).watermark == first.watermark  # unchanged
    strict = TrackingEstimator(max_clock_skew=0)
    strict.estimate(20 * SECOND, None, False)
    with pytest.raises(ValueError, match="before the previous estimate's now"):
        strict.estimate(20 * SECOND - 1, None, False)


@pytest.mark.parametrize("strategy", ["fixed", FixedWindows(10), None])
def test_run_script_names_a_wrong_strategy(strategy):
    with pytest.raises(TypeError, match="strategy must be a WindowingStrategy"):
        run_script([ElementEvent([("k", 1, 3)])], strategy)


@pytest.mark.parametrize(
    ("start", "end"), [(0, 2**80), (-(2**80), 0), (0, 2**65)]
)
def test_interval_window_bounds(start, end):
    with pytest.raises(ValueError, match="beyond"):
        IntervalWindow(start, end)


def test_interval_window_still_takes_exact_scalar_windows_past_the_bounds():
    (w,) = FixedWindows(HOUR).assign(MAX_TIMESTAMP)
    assert w.end > np.iinfo(np.int64).max and w.contains(MAX_TIMESTAMP)


def test_fixed_windows_at_max_timestamp_give_a_clear_value_error_and_keep_state():
    engine = GroupByWindowEngine(WindowingStrategy(FixedWindows(HOUR)))
    engine.add_elements([("k", 1, 5)])
    with pytest.raises(ValueError, match="does not fit in int64: choose a smaller window") as e:
        engine.add_elements([("k", 2, 7), ("k", 3, MAX_TIMESTAMP)])
    assert isinstance(e.value, WindowOverflowError) and isinstance(e.value, OverflowError)
    assert "scalar assign" not in str(e.value)
    assert engine.pending_windows() == 1  # the failed batch left nothing behind
    panes = engine.advance_watermark_to_infinity()
    assert [tuple(p.values) for p in panes] == [(1,)]


def test_after_count_takes_numpy_integers_and_names_bad_ones():
    assert AfterCount(np.int64(3)) == AfterCount(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="count"):
        AfterCount(3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count must be >= 1"):
        AfterCount(np.int32(0))  # type: ignore[arg-type]


def test_aggregator_takes_worker_and_range_by_keyword_only():
    from theory import CentralAggregator

    agg = CentralAggregator(["r"], workers=["w"])
    epoch = agg.assign(range_id="r", worker="w", now=0, lease_duration=10 * SECOND)
    snapshot = agg.snapshot()
    for call in (
        lambda: agg.assign("r", "w", 1, SECOND),  # type: ignore[call-arg]
        lambda: agg.renew("r", "w", epoch, 1, SECOND),  # type: ignore[call-arg]
        lambda: agg.release("r", "w", epoch, 1),  # type: ignore[call-arg]
        lambda: agg.report("w", "r", epoch, 5, 1),  # type: ignore[call-arg]
    ):
        with pytest.raises(TypeError, match="positional"):
            call()
    assert agg.snapshot() == snapshot
    assert agg.report(worker="w", range_id="r", epoch=epoch, watermark=5, now=1)
