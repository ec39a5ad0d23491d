"""Processing-time watermarks, lag series, and stall diagnosis.

The processing-time watermark is defined like the event-time one, over the processing time
at which each piece of unfinished work entered its stage (all µs):

- a stage's own hold is the oldest entry time of the work it has received but not
  finished (``StageResult.processing_hold``: elements or fired panes in flight). Buffered
  window state is processed work: it holds event time, not processing time;
- its processing-time watermark is the minimum of its own hold and its upstream stages'
  processing-time watermarks, and *now* when nothing is in flight anywhere upstream.

Lags, sampled on a grid ``t``: event-time lag ``t - output watermark``; processing-time
lag ``t - processing-time watermark`` (0 when nothing is in flight). They tell apart:

- **data delay**: the event-time lag grows while the processing-time lag stays small
  (windows buffering, a source watermark waiting for stragglers);
- **system delay**: both grow (a stuck stage).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory.columns import check_duration, time_column
from theory.pipeline.metrics import sample_grid
from theory.pipeline.simulator import BUFFER_HOLD, SimulationResult
from theory.series import StepSeries, pointwise_min
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, MINUTE, SECOND

DATA_DELAY = "data delay"
SYSTEM_DELAY = "system delay"


def processing_time_watermarks(result: SimulationResult) -> dict[str, StepSeries]:
    """Each stage's processing-time watermark (µs); ``MAX_TIMESTAMP`` stands for *now*."""
    out: dict[str, StepSeries] = {}
    graph = result.pipeline.graph
    for name in graph.order:
        parts = [result.stages[name].processing_hold] + [out[u] for u in graph.upstream(name)]
        out[name] = pointwise_min(parts)
    return out


@dataclass(frozen=True)
class LagSeries:
    """Lags of one stage on a processing-time grid (µs; NaN where the event-time
    watermark is still at ``MIN_TIMESTAMP`` or already at ``MAX_TIMESTAMP``)."""

    stage: str
    times: np.ndarray
    event_lag: np.ndarray
    processing_lag: np.ndarray


def lag_series(
    result: SimulationResult,
    stage: str,
    grid: np.ndarray | None = None,
    ptw: dict[str, StepSeries] | None = None,
) -> LagSeries:
    """Event-time and processing-time lag of ``stage`` on ``grid`` (default: regular)."""
    name = result.pipeline.graph.check(stage)
    t = sample_grid(result) if grid is None else time_column(grid, "grid")
    ptw = processing_time_watermarks(result) if ptw is None else ptw
    ow = result.stages[name].output_watermark.at(t)
    finite = (ow > MIN_TIMESTAMP) & (ow < MAX_TIMESTAMP)
    event_lag = np.full(t.size, np.nan)
    event_lag[finite] = (t[finite] - ow[finite]).astype(np.float64)
    p = ptw[name].at(t)
    processing_lag = np.where(p >= MAX_TIMESTAMP, 0, t - np.minimum(p, t)).astype(np.float64)
    return LagSeries(name, t, event_lag, processing_lag)


@dataclass(frozen=True)
class Stall:
    """A processing-time interval ``[start, end]`` (µs) in which ``stage``'s event-time lag
    exceeded the threshold, classified, with the (stage, hold) responsible."""

    stage: str
    start: int
    end: int
    kind: str
    culprit_stage: str
    culprit_hold: str
    max_event_lag: float
    max_processing_lag: float


def diagnose(
    result: SimulationResult,
    stage: str | None = None,
    *,
    event_lag_threshold: int = 1 * MINUTE,
    processing_lag_threshold: int = 30 * SECOND,
    max_points: int = 20_000,
) -> list[Stall]:
    """Find the stalls seen at ``stage`` (default: the last stage) and name their cause.

    A stall is a maximal run of grid points where the event-time lag exceeds
    ``event_lag_threshold``. It is a *system delay* when the processing-time lag in it
    exceeds ``processing_lag_threshold``, else a *data delay*. The culprit of a system
    delay is the upstream stage (or ``stage`` itself) whose own in-flight work is oldest at
    the worst instant, with its ``buffer:output`` hold; that of a data delay is where
    :meth:`SimulationResult.why` ends at the instant of largest event-time lag.
    """
    check_duration(event_lag_threshold, "event_lag_threshold", allow_zero=False)
    check_duration(processing_lag_threshold, "processing_lag_threshold", allow_zero=False)
    graph = result.pipeline.graph
    name = graph.check(stage) if stage is not None else graph.order[-1]
    grid = sample_grid(result, max_points)
    lags = lag_series(result, name, grid, processing_time_watermarks(result))
    over = np.nan_to_num(lags.event_lag, nan=-1.0) > event_lag_threshold
    return [_stall(result, lags, lo, hi, processing_lag_threshold) for lo, hi in _runs(over)]


def _stall(result: SimulationResult, lags: LagSeries, lo: int, hi: int, threshold: int) -> Stall:
    """The stall over grid points ``[lo, hi)`` of ``lags``: a system delay when its
    processing-time lag exceeds ``threshold`` (µs), blamed on the oldest in-flight work at
    the worst instant; else a data delay, blamed on the hold ``why`` names at the instant
    of largest event-time lag."""
    t, ev, pl = lags.times, lags.event_lag[lo:hi], lags.processing_lag[lo:hi]
    max_pl = float(np.max(pl))
    if max_pl > threshold:
        at = int(t[lo + int(np.argmax(pl))])
        kind, culprit, hold = SYSTEM_DELAY, _oldest_inflight(result, lags.stage, at), BUFFER_HOLD
    else:
        at = int(t[lo + int(np.nanargmax(ev))])
        kind, (culprit, hold) = DATA_DELAY, result.why(lags.stage, at)[-1]
    return Stall(
        lags.stage, int(t[lo]), int(t[hi - 1]), kind, culprit, hold, float(np.nanmax(ev)), max_pl
    )


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Half-open index ranges of the maximal True runs of ``mask``."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def _oldest_inflight(result: SimulationResult, stage: str, at: int) -> str:
    """Among ``stage`` and its ancestors, the one whose own in-flight work is oldest."""
    graph = result.pipeline.graph
    seen: list[str] = []
    frontier = [stage]
    while frontier:
        s = frontier.pop()
        if s not in seen:
            seen.append(s)
            frontier.extend(graph.upstream(s))
    holds = {s: int(result.stages[s].processing_hold.at(at)) for s in seen}
    return min(seen, key=lambda s: (holds[s], graph.order.index(s)))
