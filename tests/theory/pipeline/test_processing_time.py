"""Processing-time watermarks and diagnosis: the book's data-delay and system-delay cases,
built on purpose."""

import numpy as np
import pytest

from theory.data.trace import Trace
from theory.pipeline.diagnosis import (
    DATA_DELAY,
    SYSTEM_DELAY,
    diagnose,
    lag_series,
    processing_time_watermarks,
)
from theory.pipeline.processing import Processing
from theory.pipeline.simulator import BUFFER_HOLD, simulate
from theory.pipeline.stages import GroupByWindow, ParDo, Pipeline, Source
from theory.time import MAX_TIMESTAMP, MINUTE, SECOND
from theory.windowing.engine import STATE_HOLD
from theory.windowing.strategy import TimestampCombiner, WindowingStrategy
from theory.windowing.windows import FixedWindows


def steady_trace(minutes: int, per_second: int = 2, delay: int = 200_000) -> Trace:
    """Events every 1/per_second s for ``minutes``, arriving ``delay`` µs later."""
    n = minutes * 60 * per_second
    event = np.arange(n, dtype=np.int64) * (SECOND // per_second)
    return Trace(event, event + delay, np.arange(n) % 5, np.ones(n))


def test_fixed_window_buffering_is_data_delay():
    strategy = WindowingStrategy(
        FixedWindows(5 * MINUTE), timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST
    )
    pipe = Pipeline(
        [
            Source("in", "perfect"),
            ParDo("parse", "in", processing=Processing(latency=50_000)),
            GroupByWindow("window", "parse", strategy, "count"),
        ]
    )
    result = simulate(pipe, {"in": steady_trace(30)})
    lags = lag_series(result, "window")
    ev = lags.event_lag[~np.isnan(lags.event_lag)]
    # saw-tooth: the event-time lag climbs to ~one window and drops back, repeatedly
    assert ev.max() > 4 * MINUTE
    drops = np.flatnonzero(np.diff(ev) < -3 * MINUTE)
    assert len(drops) >= 4
    # while the processing-time lag stays flat and small
    assert lags.processing_lag.max() <= 50_000
    stalls = diagnose(result, "window", event_lag_threshold=2 * MINUTE)
    assert len(stalls) >= 4
    for s in stalls:
        assert s.kind == DATA_DELAY
        assert (s.culprit_stage, s.culprit_hold) == ("window", STATE_HOLD)


def test_stuck_stage_is_system_delay_and_named():
    stall_start = 10 * MINUTE
    pipe = Pipeline(
        [
            Source("in", "perfect"),
            ParDo(
                "enrich",
                "in",
                processing=Processing(
                    latency=100_000, stalls=((stall_start, stall_start + 5 * MINUTE),)
                ),
            ),
            ParDo("format", "enrich", processing=Processing(latency=10_000)),
            GroupByWindow("window", "format", WindowingStrategy(FixedWindows(MINUTE)), "count"),
        ]
    )
    result = simulate(pipe, {"in": steady_trace(30)})
    lags = lag_series(result, "window")
    during = (lags.times > stall_start + MINUTE) & (lags.times < stall_start + 5 * MINUTE)
    # both lags grow during the stall
    assert np.nanmax(lags.event_lag[during]) > 4 * MINUTE
    assert lags.processing_lag[during].max() > 4 * MINUTE
    stalls = diagnose(result, "window", event_lag_threshold=2 * MINUTE)
    system = [s for s in stalls if s.kind == SYSTEM_DELAY]
    assert len(system) == 1
    s = system[0]
    assert (s.culprit_stage, s.culprit_hold) == ("enrich", BUFFER_HOLD)
    assert stall_start <= s.start <= stall_start + 3 * MINUTE
    assert s.max_processing_lag > 4 * MINUTE


def test_processing_time_watermark_is_min_over_upstream():
    pipe = Pipeline(
        [
            Source("in", "perfect"),
            ParDo("a", "in", processing=Processing(latency=2 * SECOND)),
            ParDo("b", "a", processing=Processing(latency=SECOND)),
        ]
    )
    result = simulate(pipe, {"in": steady_trace(2)})
    ptw = processing_time_watermarks(result)
    t = result.times
    assert np.array_equal(
        ptw["b"].at(t), np.minimum(ptw["a"].at(t), result.stages["b"].processing_hold.at(t))
    )
    # with work in flight the processing-time watermark is behind now, never ahead
    busy = ptw["b"].at(t) < MAX_TIMESTAMP
    assert np.all(ptw["b"].at(t)[busy] <= t[busy])


def test_bad_thresholds():
    result = simulate(Pipeline([Source("in")]), {"in": steady_trace(1)})
    with pytest.raises(ValueError, match="event_lag_threshold"):
        diagnose(result, event_lag_threshold=0)
    with pytest.raises(ValueError, match="unknown stage 'x'"):
        diagnose(result, "x")
