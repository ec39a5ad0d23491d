"""The strategy comparison without Spark: :func:`compare_local`, the ``local`` engine.

It runs the numpy kernels Spark runs per bucket (:func:`theory.watermarks.bucket_curves.
bucket_curves`, the holdback runs) once over the whole trace, as one bucket with no
carries (the source watermarks Spark does not compute, from theory's generators:
:func:`theory_curve`), and the window metrics of :mod:`theory.experiments.first_panes`, so its
``table`` and ``holdback`` equal :func:`spark_backend.report.comparison.compare`'s on the same
rows (``tests/spark_backend/cli/test_engines.py``). The views' curves are exact on the same
grids; their element samples are drawn by numpy (Spark draws its own), so the plotted
elements differ between the engines, not the numbers. Times are µs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from spark_backend.analytics.holdback import holdback_of_trace
from spark_backend.analytics.strategies import SPARK_KINDS, Strategy
from spark_backend.analytics.windows import window_rows
from spark_backend.report.comparison import (
    Comparison,
    View,
    check_request,
    comparison_table,
    source_lags,
    zoom_span,
)
from theory.columns import check_duration
from theory.data.trace import Trace
from theory.experiments.first_panes import (
    FIRE_ONCE,
    Firing,
    WindowIndex,
    check_last_window_end,
    summary_row,
)
from theory.series import StepSeries
from theory.time import MIN_TIMESTAMP, MINUTE
from theory.watermarks.bucket_curves import bucket_curves
from theory.watermarks.buckets import BucketCarry
from theory.watermarks.spec import make_source_watermark

LOG = logging.getLogger("watermarks")

__all__ = ["chapter3_trace", "compare_local", "local_curves", "theory_curve"]


def chapter3_trace(events: int, *, seed: int = 0) -> Trace:
    """The demo's default trace generated with numpy: the parameters of
    :func:`spark_backend.traces.generate.chapter3_trace_df` (100 mobile and 100 console
    users, 4 partitions, partition 3 idle over 40-50% of the expected span), drawn by
    :func:`theory.data.generators.game_sessions_trace` (the same distributions, not
    the same rows as Spark's draws)."""
    # here, not at the top: the generators' default distributions import scipy.stats
    # (about a second), which `analyze` never needs
    from theory.data.generators import game_sessions_trace
    from theory.data.specs import SessionSpec

    half = events // 2
    span = SessionSpec(max(events - half, 1), seed, users=100).expected_span
    common = {
        "users": 100,
        "partitions": 4,
        "idle_partitions": (3,),
        "idle_interval": (int(span * 0.4), max(int(span * 0.5), int(span * 0.4) + 1)),
    }
    mobile = game_sessions_trace(events - half, seed=seed, platform="mobile", **common)
    console = game_sessions_trace(
        half, seed=seed + 1, platform="console", first_user=100, **common
    )
    return Trace.concat([mobile, console])


def local_curves(
    event_time: np.ndarray, arrival_time: np.ndarray, strategies: Sequence[Strategy]
) -> tuple[dict[str, StepSeries], dict[str, int]]:
    """Every strategy's curve over the whole trace (µs; a step per arrival time, and for
    percentiles also at event times) and its late count, from the per-bucket kernel run
    on one bucket."""
    order = np.lexsort((event_time, arrival_time))
    a, e = arrival_time[order], event_time[order]
    none = np.empty(0, dtype=np.int64)
    r = bucket_curves(a, e, none, none, strategies, BucketCarry())
    curves: dict[str, StepSeries] = {}
    late: dict[str, int] = {}
    for i, s in enumerate(strategies):
        if s.kind == "percentile":
            times, vals = r.steps(i)
            curves[s.name] = StepSeries(times, vals, MIN_TIMESTAMP).compressed()
        else:
            curves[s.name] = StepSeries(r.times, r.values[i], MIN_TIMESTAMP)
        late[s.name] = int(r.late[i])
    return curves, late


def theory_curve(spec: str, trace: Trace) -> tuple[StepSeries, int]:
    """The curve (µs) of a source watermark Spark's buckets do not compute (static,
    dynamic, flink-bounded), from theory's vectorised generator over the whole trace,
    and its late count (``e < W(a^-)``)."""
    t = trace.sorted_by_arrival()
    curve = make_source_watermark(spec).curve(t.event_time, t.arrival_time, t.partition)
    return curve, int(np.count_nonzero(t.event_time < curve.before(t.arrival_time)))


def _grid(lo: int, hi: int, points: int) -> np.ndarray:
    """``points`` processing times from ``lo`` on, ``ceil((hi - lo) / (points - 1))``
    apart (µs), as the Spark views."""
    step = max(1, -(-(hi - lo) // max(1, points - 1)))
    return lo + step * np.arange(max(2, points), dtype=np.int64)


def _view(
    curves: dict[str, StepSeries],
    e: np.ndarray,
    a: np.ndarray,
    lo: int,
    hi: int,
    points: int,
    fraction: float,
    rng: np.random.Generator,
) -> View:
    """The curves on the grid over ``[lo, hi]`` and a seeded ``fraction`` of the elements
    arriving there, with their lateness (``e < W.before(a)``)."""
    t = _grid(lo, hi, points)
    grid = pd.DataFrame({"processing_time": t})
    for name, c in curves.items():
        grid[name] = c.at(t)
    inside = np.flatnonzero((a >= lo) & (a <= hi))
    picked = inside[rng.random(inside.size) < min(1.0, fraction)]
    pe, pa_ = e[picked], a[picked]
    order = np.lexsort((pe, pa_))
    pe, pa_ = pe[order], pa_[order]
    elements = pd.DataFrame({"event_time": pe, "arrival_time": pa_})
    for name, c in curves.items():
        elements[f"late:{name}"] = pe < c.before(pa_)
    return View((lo, hi), grid, elements)


def compare_local(
    trace: Trace,
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
) -> Comparison:
    """:func:`spark_backend.report.comparison.compare` on a trace in memory, without Spark (see
    the module docstring). Raises ValueError for a bad strategy spec, duplicate names, a
    bad window size or an empty trace."""
    check_duration(zoom, "zoom", allow_zero=False)
    parsed = check_request(strategies, window_size, "local")
    if not len(trace):
        raise ValueError("the trace has no rows")
    done = step or (lambda label: None)
    e, a = trace.event_time, trace.arrival_time
    check_last_window_end(int(e.max()), window_size)
    names = tuple(s.name for s in parsed)
    LOG.info("curves and late data for %d strategies (local engine)", len(names))
    bucketed = [s for s in parsed if s.kind in SPARK_KINDS]
    curves, late = local_curves(e, a, bucketed)
    for s in parsed:
        if s.kind not in SPARK_KINDS:
            curves[s.name], late[s.name] = theory_curve(s.name, trace)
    done(f"{len(trace):,} rows: curves")
    index = WindowIndex.of(e, a, trace.key, window_size)
    rows, frames = [], []
    for name in names:
        panes = index.panes(curves[name], firing)
        rows.append(
            summary_row(
                name, index.elements, panes, late[name], len(trace), include_end_of_input
            )
        )
        frames.append(
            window_rows(
                name, index.key, index.window_end - window_size, index.window_end,
                index.elements, panes,
            )
        )
    summary = pd.DataFrame(rows)
    done("late data, completeness and latency")
    rng = np.random.default_rng(seed)
    lo, hi = int(a.min()), int(a.max())
    frac = sample_elements / len(trace)
    whole = _view(curves, e, a, lo, hi, grid_points, frac, rng)
    arrivals = whole.elements["arrival_time"].to_numpy()
    z_lo, z_hi = zoom_span(arrivals, lo, hi, zoom)
    expected = int(np.count_nonzero((a >= z_lo) & (a <= z_hi)))
    zoomed = _view(curves, e, a, z_lo, z_hi, grid_points, sample_elements / max(expected, 1), rng)
    done("curves and element samples")
    hb = None
    if trace.partition is not None:
        hb = holdback_of_trace(a, e, trace.partition)
        done("partition skew")
    lags = [source_lags(curves[name], lo, hi) for name in names]
    table = comparison_table(summary, lags, names)
    return Comparison(
        names, len(trace), table, whole, zoomed, hb, pd.concat(frames, ignore_index=True)
    )
