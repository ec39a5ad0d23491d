"""Fixed windows fired once by a source watermark, vectorised over a whole trace (µs).

The strategy comparison of the ``watermarks`` command line, on a known trace: per-key
fixed windows ``[start, end)`` (Beam's ``FixedWindows(size, offset)``), fired once by the
watermark (``AfterWatermark``, no allowed lateness) at the first curve step ``t`` with
``W(t) > end - 1``; with ``finish`` the watermark also jumps to the end of time at the
last arrival, as :func:`theory.pipeline.simulator.simulate` does for a bounded source. A
window's first pane holds its elements arriving at or before ``t``; a window none of
whose elements arrived by then has no pane (it never fires). This is what
``spark_backend.analytics.windows`` computes on Spark; :func:`summarise_windows` is the
one home of the summary row both engines report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import as_int, check_duration, same_length, time_column
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP

__all__ = [
    "NEVER",
    "WindowIndex",
    "check_last_window_end",
    "fire_times",
    "summary_row",
    "window_ends",
]

#: Fire time of a window that never fires.
NEVER = -1


def window_ends(event_time: np.ndarray, size: int, offset: int) -> np.ndarray:
    """Each element's fixed-window end (µs): ``e - ((e - offset) mod size) + size``."""
    return event_time - np.mod(event_time - offset, size) + size


def fire_times(
    curve: StepSeries, ends: ArrayLike, last_arrival: int | None = None
) -> np.ndarray:
    """When each window (by its end, µs) first fires under a monotone ``curve``: the
    first step with a value ``>= end``; ``NEVER`` (-1) if none. ``last_arrival``: the
    bounded source finishes there, so every window fires by then."""
    e = np.asarray(ends, dtype=np.int64)
    fire = np.full(e.size, NEVER, dtype=np.int64)
    if curve.times.size:
        idx = np.searchsorted(curve.values, e, side="left")
        ok = idx < curve.times.size
        fire[ok] = curve.times[idx[ok]]
    if last_arrival is not None:
        fire = np.where(fire == NEVER, last_arrival, np.minimum(fire, last_arrival))
    return fire


@dataclass(frozen=True)
class WindowIndex:
    """The (key, fixed window) of every element: windows sorted by end then key.

    ``key``, ``window_end`` and ``elements`` are per window; ``window_of`` maps each
    element to its window; ``arrival_time`` is the elements' (µs)."""

    size: int
    key: np.ndarray
    window_end: np.ndarray
    elements: np.ndarray
    window_of: np.ndarray
    arrival_time: np.ndarray

    @classmethod
    def of(
        cls,
        event_time: ArrayLike,
        arrival_time: ArrayLike,
        key: ArrayLike,
        window_size: int,
        offset: int = 0,
    ) -> WindowIndex:
        """Index a trace's elements by (key, fixed window of ``window_size`` µs)."""
        size = check_duration(window_size, "window_size", allow_zero=False)
        off = as_int(offset, "offset") % size
        e = time_column(event_time, "event_time")
        a = time_column(arrival_time, "arrival_time")
        k = np.asarray(key)
        same_length("event_time", e.size, arrival_time=a, key=k)
        uniq, codes = np.unique(k, return_inverse=True)
        end = window_ends(e, size, off)
        wins, win_of = np.unique(
            np.stack((end, codes.reshape(-1).astype(np.int64))), axis=1, return_inverse=True
        )
        win_of = np.asarray(win_of).reshape(-1)
        return cls(
            size,
            uniq[wins[1]],
            wins[0],
            np.bincount(win_of, minlength=wins.shape[1]),
            win_of,
            a,
        )

    def first_panes(
        self, curve: StepSeries, finish: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per window under ``curve``: ``(first_pane, fire_time, latency)`` (counts, µs
        with -1 for no pane, float µs with NaN for no pane)."""
        a = self.arrival_time
        last = int(a.max()) if a.size and finish else None
        fire_w = fire_times(curve, self.window_end, last)
        fire_e = fire_w[self.window_of]
        in_first = (fire_e >= 0) & (a <= fire_e)
        first = np.bincount(
            self.window_of, weights=in_first, minlength=self.window_end.size
        ).astype(np.int64)
        # a window none of whose elements arrived by its firing holds no state: no pane
        fire = np.where(first > 0, fire_w, NEVER)
        latency = np.where(fire >= 0, (fire - self.window_end).astype(np.float64), np.nan)
        return first, fire, latency


def summary_row(
    name: str,
    elements: np.ndarray,
    first_pane: np.ndarray,
    latency: np.ndarray,
    late: int,
    rows: int,
) -> dict[str, object]:
    """One strategy's row of the comparison from its windows (one entry per window):
    the trace-determined columns of :class:`theory.pipeline.metrics.StrategyMetrics`,
    ``late_count``, ``late_fraction`` (of ``rows``), ``dropped`` (elements after their
    window's firing), ``windows``, ``completeness_mean``, ``complete_fraction`` and
    ``window_latency_p50/p90/p99`` (µs, over the windows that fire; numpy's linear
    percentiles). Both engines of the command line report it."""
    elements = np.asarray(elements, dtype=np.int64)
    first_pane = np.asarray(first_pane, dtype=np.int64)
    lat = np.asarray(latency, dtype=np.float64)
    lat = lat[~np.isnan(lat)]
    pcts = np.percentile(lat, [50, 90, 99]) if lat.size else [np.nan] * 3
    comp = first_pane / elements if elements.size else np.empty(0)
    return {
        "strategy": name,
        "late_count": int(late),
        "late_fraction": float(late / rows) if rows else float("nan"),
        "dropped": int((elements - first_pane).sum()),
        "windows": int(elements.size),
        "completeness_mean": float(comp.mean()) if comp.size else float("nan"),
        "complete_fraction": float(np.mean(comp >= 1.0)) if comp.size else 0.0,
        "window_latency_p50": float(pcts[0]),
        "window_latency_p90": float(pcts[1]),
        "window_latency_p99": float(pcts[2]),
    }


def check_last_window_end(max_event_time: int, size: int, offset: int = 0) -> None:
    """ValueError if the fixed window (``size``, ``offset``, µs) of the latest event time
    ends past MAX_TIMESTAMP: no watermark could close it, and its end would overflow
    int64. Both engines of ``analyze`` check this before computing windows."""
    last_end = max_event_time - (max_event_time - offset) % size + size
    if last_end > MAX_TIMESTAMP:
        raise ValueError(
            f"window size {size} µs: the window of the latest event time ({max_event_time} "
            f"µs) ends at {last_end} µs, past MAX_TIMESTAMP ({MAX_TIMESTAMP} µs), so no "
            "watermark can close it; choose a smaller window"
        )
