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

from theory.simulate import SimulationResult
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
    """Fire time minus window end (µs) of each window's first pane at ``stage``."""
    panes = result.stages[stage].panes
    if panes is None or len(panes) == 0:
        return np.empty(0, dtype=np.int64)
    first = panes.index == 0
    return panes.fire_time[first] - panes.window_end[first]


def stage_metrics(result: SimulationResult, max_points: int = 20_000) -> list[StageMetrics]:
    """One :class:`StageMetrics` per stage, in topological order."""
    grid = sample_grid(result, max_points)
    rows = []
    for name in result.pipeline.graph.order:
        r = result.stages[name]
        iw = r.input_watermark.at(grid)
        ow = r.output_watermark.at(grid)
        ok = _finite(ow)
        wl = _percentiles(grid[ok] - ow[ok])
        both = ok & _finite(iw)
        sl = _percentiles(iw[both] - ow[both])
        lat = _percentiles(window_latencies(result, name))
        rows.append(
            StageMetrics(
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
        )
    return rows


def metrics_table(result: SimulationResult) -> dict[str, list[object]]:
    """The metrics as a column table (dict of equal-length lists), ready for Arrow."""
    rows = [asdict(m) for m in stage_metrics(result)]
    return {k: [row[k] for row in rows] for k in rows[0]} if rows else {}
