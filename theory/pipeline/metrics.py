"""Metrics of a simulation: watermark lag, stage lag, late data and window latency.

All durations are µs. Lags are sampled on a regular processing-time grid over the span of
the simulation (at most ``max_points`` points), ignoring instants where a watermark is
still at ``MIN_TIMESTAMP`` or already at ``MAX_TIMESTAMP`` (lag is undefined there).

- watermark lag: processing time minus output watermark;
- stage lag: input watermark minus output watermark;
- window latency: a pane's fire time minus its window's end, over each window's first pane.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from theory.columns import check_count, time_column
from theory.pipeline.simulator import SimulationResult
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class StageMetrics:
    """One row of the metrics table (µs, counts and fractions)."""

    stage: str
    kind: str
    final_input_watermark: int
    final_output_watermark: int
    arrivals: int
    late_count: int
    late_fraction: float
    dropped: int
    panes: int
    watermark_lag_p50: float
    watermark_lag_p90: float
    watermark_lag_p99: float
    stage_lag_p50: float
    stage_lag_p90: float
    stage_lag_p99: float
    window_latency_p50: float
    window_latency_p90: float
    window_latency_p99: float


def sample_grid(result: SimulationResult, max_points: int = 20_000) -> np.ndarray:
    """A regular grid (µs) spanning the result's change times, at most ``max_points``."""
    check_count(max_points, "max_points", minimum=1)
    t = result.times
    if t.size == 0:
        return t
    lo, hi = int(t[0]), int(t[-1])
    n = int(min(max_points, max(2, hi - lo + 1)))
    return np.unique(np.linspace(lo, hi, n).astype(np.int64))


def _percentiles(x: np.ndarray) -> tuple[float, float, float]:
    if x.size == 0:
        nan = float("nan")
        return nan, nan, nan
    p = np.percentile(x.astype(np.float64), PERCENTILES)
    return float(p[0]), float(p[1]), float(p[2])


def _finite(w: np.ndarray) -> np.ndarray:
    return (w > MIN_TIMESTAMP) & (w < MAX_TIMESTAMP)


def window_latencies(result: SimulationResult, stage: str) -> np.ndarray:
    """Fire time minus window end (µs) of each window's first pane at ``stage`` (a result
    that keeps its panes elsewhere gives them by its own ``window_latencies``)."""
    own = getattr(result, "window_latencies", None)
    if own is not None:
        return np.asarray(own(stage))
    panes = result.stages[result.pipeline.graph.check(stage)].panes
    if panes is None or len(panes) == 0:
        return np.empty(0, dtype=np.int64)
    first = panes.index == 0
    return panes.fire_time[first] - panes.window_end[first]


def end_of_input_firings(
    result: SimulationResult, stage: str, end_of_input: tuple[int, int]
) -> np.ndarray:
    """Per first pane at ``stage`` (in :func:`window_latencies`' order): fired by the end
    of input, given ``end_of_input = (last arrival, W(last arrival))`` (µs) of the
    stage's source watermark as if the input went on: it fires at or after the last
    arrival and the window ends past that watermark (docs/semantics.md, "End of
    input"). Exact for a grouping stage that reads its source directly."""
    last, reached = end_of_input
    panes = result.stages[result.pipeline.graph.check(stage)].panes
    if panes is None or len(panes) == 0:
        return np.zeros(0, dtype=bool)
    first = panes.index == 0
    return (panes.fire_time[first] >= last) & (panes.window_end[first] > reached)


def stage_metrics(result: SimulationResult, max_points: int = 20_000) -> list[StageMetrics]:
    """One :class:`StageMetrics` per stage, in topological order."""
    grid = sample_grid(result, max_points)
    return [_stage_row(result, name, grid) for name in result.pipeline.graph.order]


def _stage_row(result: SimulationResult, name: str, grid: np.ndarray) -> StageMetrics:
    """The metrics row of stage ``name``, its lags sampled on ``grid`` (µs)."""
    r = result.stages[name]
    iw = r.input_watermark.at(grid)
    ow = r.output_watermark.at(grid)
    ok = _finite(ow)
    wl = _percentiles(grid[ok] - ow[ok])
    both = ok & _finite(iw)
    sl = _percentiles(iw[both] - ow[both])
    lat = _percentiles(window_latencies(result, name))
    return StageMetrics(
        stage=name,
        kind=r.kind,
        final_input_watermark=r.input_watermark.final(),
        final_output_watermark=r.output_watermark.final(),
        arrivals=r.arrivals,
        late_count=r.late_count,
        late_fraction=r.late_fraction,
        dropped=int(sum(r.dropped.values())),
        panes=0 if r.panes is None else len(r.panes),
        watermark_lag_p50=wl[0],
        watermark_lag_p90=wl[1],
        watermark_lag_p99=wl[2],
        stage_lag_p50=sl[0],
        stage_lag_p90=sl[1],
        stage_lag_p99=sl[2],
        window_latency_p50=lat[0],
        window_latency_p90=lat[1],
        window_latency_p99=lat[2],
    )


def metrics_table(result: SimulationResult) -> dict[str, list[object]]:
    """The per-stage metrics as a column table (dict of equal-length lists)."""
    return as_table(list(stage_metrics(result)))


def eventual_counts(
    window_fn: object, key: np.ndarray, event_time: np.ndarray
) -> dict[tuple[object, int, int], int]:
    """How many elements each (key, window start, window end) eventually receives: every
    element of the trace, late or dropped included (µs bounds)."""
    rows = window_fn.assign_array(time_column(event_time, "event_time"))  # type: ignore[attr-defined]
    counts: dict[tuple[object, int, int], int] = {}
    keys = np.asarray(key)[rows.element].tolist()
    for k, s, e in zip(keys, rows.start.tolist(), rows.end.tolist(), strict=True):
        counts[(k, s, e)] = counts.get((k, s, e), 0) + 1
    return counts


def first_pane_completeness(
    result: SimulationResult, stage: str, eventual: dict[tuple[object, int, int], int]
) -> np.ndarray:
    """Per window of ``eventual``: the fraction of its elements in its first pane (0 when
    it never fired), in the dict's order."""
    panes = result.stages[result.pipeline.graph.check(stage)].panes
    first: dict[tuple[object, int, int], int] = {}
    if panes is not None:
        sel = np.flatnonzero(panes.index == 0)
        for k, s, e, c in zip(
            panes.key[sel].tolist(),
            panes.window_start[sel].tolist(),
            panes.window_end[sel].tolist(),
            panes.count[sel].tolist(),
            strict=True,
        ):
            first[(k, s, e)] = c
    return np.array([first.get(w, 0) / n for w, n in eventual.items()], dtype=np.float64)


@dataclass(frozen=True)
class StrategyMetrics:
    """One strategy's row in a comparison (durations µs, fractions in [0, 1])."""

    strategy: str
    late_count: int
    late_fraction: float
    dropped: int
    windows: int
    completeness_mean: float
    complete_fraction: float
    window_latency_p50: float
    window_latency_p90: float
    window_latency_p99: float
    watermark_lag_p50: float
    watermark_lag_p90: float
    watermark_lag_p99: float
    stage_lag_p50: float
    stage_lag_p99: float
    end_of_input_windows: int = 0


def strategy_metrics(
    name: str,
    result: SimulationResult,
    stage: str,
    eventual: dict[tuple[object, int, int], int],
    max_points: int = 20_000,
    end_of_input: tuple[int, int] | None = None,
    include_end_of_input: bool = False,
) -> StrategyMetrics:
    """The comparison row of one strategy, measured at its grouping ``stage``. With
    ``end_of_input`` (:func:`end_of_input_firings`) the windows fired by the end of
    input are counted, and left out of the latency percentiles unless
    ``include_end_of_input``."""
    row = next(m for m in stage_metrics(result, max_points) if m.stage == stage)
    lat = (row.window_latency_p50, row.window_latency_p90, row.window_latency_p99)
    eoi = 0
    if end_of_input is not None:
        by_end = end_of_input_firings(result, stage, end_of_input)
        eoi = int(np.count_nonzero(by_end))
        if not include_end_of_input:
            lat = _percentiles(window_latencies(result, stage)[~by_end])
    completeness = first_pane_completeness(result, stage, eventual)
    return StrategyMetrics(
        strategy=name,
        late_count=row.late_count,
        late_fraction=row.late_fraction,
        dropped=row.dropped,
        windows=len(eventual),
        completeness_mean=float(completeness.mean()) if completeness.size else float("nan"),
        complete_fraction=float(np.mean(completeness >= 1.0)) if completeness.size else 0.0,
        window_latency_p50=lat[0],
        window_latency_p90=lat[1],
        window_latency_p99=lat[2],
        watermark_lag_p50=row.watermark_lag_p50,
        watermark_lag_p90=row.watermark_lag_p90,
        watermark_lag_p99=row.watermark_lag_p99,
        stage_lag_p50=row.stage_lag_p50,
        stage_lag_p99=row.stage_lag_p99,
        end_of_input_windows=eoi,
    )


def as_table(rows: list[object]) -> dict[str, list[object]]:
    """Dataclass rows as a column table (dict of equal-length lists), ready for Arrow."""
    dicts = [asdict(r) for r in rows]  # type: ignore[call-overload]
    return {k: [d[k] for d in dicts] for k in dicts[0]} if dicts else {}
