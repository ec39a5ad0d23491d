"""The watermark strategy comparison on Spark: what ``watermarks demo`` and
``watermarks analyze`` report for a trace.

For a trace DataFrame, source-watermark strategies (specs of
:func:`spark_backend.analytics.parse_strategy`) and per-key fixed windows fired once by
the watermark, :func:`compare` returns:

- ``table``, one row per strategy: the columns of :class:`theory.pipeline.metrics.StrategyMetrics`
  that the trace and the source watermark determine, equal to
  :func:`theory.experiments.tradeoff` on the same rows (``late_count``,
  ``late_fraction``, ``dropped``, ``windows``, ``completeness_mean``,
  ``complete_fraction``, ``window_latency_p50/p90/p99``, µs; then late panes, final
  completeness and the pane timestamps' lag of :func:`theory.experiments.first_panes.
  summary_row`); the source watermark's lag ``now - W(now)`` at p50 and p99 (µs, exact
  and time-weighted where W is finite: :func:`source_lags`), and whether the strategy is
  on the latency/completeness Pareto frontier;
- two views (:class:`View`), the whole trace and a zoom on a short span: every curve
  at evenly spaced processing times, and a seeded sample of the elements with, per
  strategy, whether each is late (``event_time < W.before(arrival_time)``, exact);
- ``holdback``: which partition holds the perfect watermark back, and for how long
  (when the trace has a ``partition`` column).

Everything runs on Spark; only these small results reach the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_backend.analytics import (
    Strategy,
    WatermarkAnalysis,
    analyze,
    holdback,
    prepare,
)
from spark_backend.analytics.strategies import parse_strategies
from spark_backend.report import plots
from spark_backend.session.job_count import name_jobs
from theory.columns import check_duration
from theory.experiments.first_panes import FIRE_ONCE, Firing
from theory.experiments.tradeoff import pareto_frontier
from theory.series import StepSeries, lag_quantiles
from theory.time import MIN_TIMESTAMP, MINUTE

LOG = logging.getLogger("watermarks")

#: The strategies compared when none are named.
DEFAULT_STRATEGIES: tuple[str, ...] = (
    "perfect",
    "bounded:10s",
    "bounded:1m",
    "bounded:5m",
    "percentile:0.5",
    "percentile:0.9",
    "percentile:0.99",
    "percentile:1",
)


@dataclass(frozen=True)
class View:
    """A processing-time span ``[lo, hi]`` (µs) seen through the strategies: every curve
    on a regular ``grid`` (``processing_time`` + one column per strategy) and a seeded
    sample of the elements arriving in it (``event_time``, ``arrival_time``, and
    ``late:<strategy>`` flags, exact)."""

    span: tuple[int, int]
    grid: pd.DataFrame
    elements: pd.DataFrame

    def plot_data(self, strategies: Sequence[str]) -> plots.Elements:
        """What :func:`spark_backend.report.plots.event_vs_processing` draws of this view."""
        t = self.grid["processing_time"].to_numpy()
        return plots.Elements(
            self.elements["event_time"].to_numpy(),
            self.elements["arrival_time"].to_numpy(),
            {s: StepSeries(t, self.grid[s].to_numpy(), MIN_TIMESTAMP) for s in strategies},
            {s: self.elements[f"late:{s}"].to_numpy(dtype=bool) for s in strategies},
            self.span,
        )


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found (see the module docstring); times in µs. ``whole``
    spans the trace's arrivals; ``zoom`` a short span from the median arrival on."""

    strategies: tuple[str, ...]
    rows: int
    table: dict[str, list[object]]
    whole: View
    zoom: View
    holdback: pd.DataFrame | None
    #: Per strategy and (key, window): :func:`spark_backend.analytics.windows.windows`.
    windows: pd.DataFrame | None = None


def _view(an: WatermarkAnalysis, lo: int, hi: int, points: int, fraction: float, seed: int) -> View:
    """The curves on ``points`` grid times over ``[lo, hi]`` and a ``fraction`` of the
    elements arriving there, with their lateness. Three Spark jobs."""
    step = max(1, -(-(hi - lo) // max(1, points - 1)))
    grid = an.values_at(lo + step * np.arange(max(2, points), dtype=np.int64))
    a_col = F.col("arrival_time")
    picked = (
        an.layout.df.where(~F.col("replica") & (a_col >= F.lit(lo)) & (a_col <= F.lit(hi)))
        .sample(False, min(1.0, fraction), seed=seed)
        .select("event_time", "arrival_time")
        .toArrow()
    )
    e = picked.column("event_time").to_numpy()
    a = picked.column("arrival_time").to_numpy()
    order = np.lexsort((e, a))
    e, a = e[order], a[order]
    elements = pd.DataFrame({"event_time": e, "arrival_time": a})
    before = an.values_at(a, strict=True)  # one row per distinct arrival time
    at = np.searchsorted(before["processing_time"].to_numpy(), a)
    for s in an.names:
        elements[f"late:{s}"] = e < before[s].to_numpy()[at]
    return View((lo, hi), grid, elements)


def check_request(
    strategies: Sequence[str], window_size: int, engine: str = "spark"
) -> tuple[Strategy, ...]:
    """The parsed strategies for ``engine`` (:func:`~spark_backend.analytics.strategies.
    parse_strategies`), after checking the window size (µs): ValueError naming the window
    size, the bad spec, a repeated name or a strategy the engine cannot run. No Spark
    work."""
    check_duration(window_size, "--window", allow_zero=False)
    return parse_strategies(strategies, engine)


def compare(
    df: DataFrame,
    strategies: Sequence[str],
    window_size: int,
    *,
    seed: int = 0,
    grid_points: int = 4000,
    sample_elements: int = 20_000,
    zoom: int = 30 * MINUTE,
    step: Callable[[str], None] | None = None,
    firing: Firing = FIRE_ONCE,
    include_end_of_input: bool = False,
    views: bool = True,
) -> Comparison:
    """Compare ``strategies`` on the trace ``df`` with fixed windows of ``window_size`` µs
    fired as ``firing`` says (lateness, late firings, timestamp combiner); ``zoom`` is
    the span (µs) of the zoomed view. The latency percentiles leave out the windows fired
    by the end of input unless ``include_end_of_input``. Without ``views`` only the
    tables are computed: the views are empty and there is no holdback.

    ``step(label)`` is called after each Spark stage (progress). Raises ValueError for a
    bad strategy spec, duplicate names, a bad window size or an empty trace.
    """
    check_duration(zoom, "zoom", allow_zero=False)
    parsed = check_request(strategies, window_size)
    specs = tuple(s.name for s in parsed)
    done = step or (lambda label: None)
    holder = "partition" if "partition" in df.columns else None
    LOG.info("cutting the trace into arrival-time buckets")
    name_jobs(df, "cut the trace into arrival-time buckets")
    layout = prepare(df, backlog=any(s.kind == "percentile" for s in parsed), holder=holder)
    done(f"{layout.rows:,} rows in {layout.buckets} buckets")
    an = analyze(layout, specs)
    try:
        LOG.info("late data, windows and latency for %d strategies", len(specs))
        name_jobs(df, "late data, windows and latency")
        curves = an.all_curves()  # one collect: the fire times and the exact source lag
        per_window = an.windows(window_size, firing=firing, curves=curves)
        summary = an.window_summary(
            window_size, firing=firing, curves=curves,
            include_end_of_input=include_end_of_input, per_window=per_window,
        )
        done("late data, completeness and latency")
        lo, hi = layout.first_arrival, layout.last_arrival
        if views:
            LOG.info("sampling the curves and about %d elements", sample_elements)
            name_jobs(df, "sample the curves and elements")
            frac = sample_elements / layout.rows
            whole = _view(an, lo, hi, grid_points, frac, seed)
            arrivals = whole.elements["arrival_time"].to_numpy()
            z_lo, z_hi = zoom_span(arrivals, lo, hi, zoom)
            expected = np.count_nonzero((arrivals >= z_lo) & (arrivals <= z_hi)) / max(
                frac, 1e-12)
            zoomed = _view(
                an, z_lo, z_hi, grid_points, sample_elements / max(expected, 1.0), seed)
            done("curves and element samples")
        else:
            whole = zoomed = View((lo, hi), pd.DataFrame(), pd.DataFrame())
        LOG.info("the source lag of %d strategies (exact)", len(specs))
        name_jobs(df, "the source lag")
        lags = [source_lags(curves[s], lo, hi) for s in specs]
        hb = None
        if holder is not None and views:
            LOG.info("which partition holds the watermark back")
            name_jobs(df, "partition skew")
            hb = holdback(layout, holder)
            done("partition skew")
    finally:
        an.unpersist()
        layout.unpersist()
    table = comparison_table(summary, lags, specs)
    return Comparison(specs, layout.rows, table, whole, zoomed, hb, per_window)


def zoom_span(arrivals: np.ndarray, lo: int, hi: int, zoom: int) -> tuple[int, int]:
    """The zoomed view's span (µs): ``zoom`` long from the median sampled arrival on,
    within ``[lo, hi]``."""
    mid = int(np.median(arrivals)) if arrivals.size else lo
    z_hi = min(hi, mid + zoom)
    return max(lo, z_hi - zoom), z_hi


def comparison_table(
    summary: pd.DataFrame, lags: Sequence[tuple[float, float]], specs: Sequence[str]
) -> dict[str, list[object]]:
    """The comparison's table: the window summary, each strategy's source lag p50 and
    p99 (:func:`source_lags`) and the Pareto frontier flags (both engines build it
    here)."""
    table: dict[str, list[object]] = {c: list(summary[c]) for c in summary.columns}
    table["source_lag_p50"] = [x[0] for x in lags]
    table["source_lag_p99"] = [x[1] for x in lags]
    table["on_frontier"] = list(
        pareto_frontier(
            [float(x) for x in summary["window_latency_p50"]],
            [float(x) for x in summary["completeness_mean"]],
        )
    )
    return table


def source_lags(curve: StepSeries, lo: int, hi: int) -> tuple[float, float]:
    """The source watermark's lag ``t - W(t)`` behind processing time, p50 and p99 (µs),
    exact and time-weighted over ``[lo, hi)`` (the first to the last arrival) where W is
    finite (:func:`theory.series.lag_quantiles`). Both engines report it."""
    p50, p99 = lag_quantiles(curve, lo, hi, (0.5, 0.99))
    return p50, p99


__all__ = [
    "DEFAULT_STRATEGIES",
    "Comparison",
    "View",
    "check_request",
    "compare",
    "comparison_table",
    "source_lags",
    "zoom_span",
]
