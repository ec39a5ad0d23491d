"""Fixed windows fired by a source watermark, vectorised over a whole trace (µs).

The strategy comparison of the ``watermarks`` command line, on a known trace: per-key
fixed windows ``[start, end)`` (Beam's ``FixedWindows(size, offset)``) fired by the
watermark (``AfterWatermark``) at the first curve step ``t`` with ``W(t) > end - 1``; with
``finish`` the watermark also jumps to the end of time at the last arrival, as
:func:`theory.pipeline.simulator.simulate` does for a bounded source. A window's first
pane holds its elements arriving at or before ``t``.

After that (:class:`Firing`, the rules of :mod:`theory.windowing.engine`): an element
arriving when ``W.before(arrival) > end + allowed_lateness`` is expired (dropped). The
other later elements arrive past the window and fire at once, one pane per arrival time
(a batch), when the window has not fired yet (a window none of whose elements arrived by
``t`` has no on-time pane: its first batch fires its first pane) or with late firings
(``AfterWatermark(late=AfterCount(1))``, accumulating); else they are dropped (the
window is closed). The first pane's output timestamp follows the timestamp combiner:
the window's max timestamp (``eow``), the earliest or the latest event time in it.

A window is **fired by the end of input** when its on-time pane fires at the last
arrival only because the input ended there: the watermark alone had not reached its end
by then (docs/semantics.md, "End of input"). Its latency is ``last arrival - end`` (µs),
negative when the window ends after the last arrival; :func:`summary_row` leaves those
windows out of the latency percentiles unless asked, and counts them.

Both engines compute the same per-window aggregates (:class:`WindowAggregates`) and
derive the panes here (:func:`window_panes`); :func:`summary_row` is the one home of the
summary row both report. ``spark_backend.analytics.windows`` is the Spark side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import as_int, check_duration, same_length, time_column
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP

__all__ = [
    "COMBINERS",
    "FIRE_ONCE",
    "NEVER",
    "Firing",
    "WindowAggregates",
    "WindowIndex",
    "WindowPanes",
    "check_last_window_end",
    "finish_at",
    "fire_times",
    "summary_row",
    "window_ends",
    "window_panes",
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
    return finish_at(fire, last_arrival)[0]


def finish_at(fire: np.ndarray, last_arrival: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Fire times (µs, ``NEVER`` for never) of a watermark that finishes at
    ``last_arrival`` (None: it does not), and which of them the end of input set: those
    the watermark alone fires after ``last_arrival`` or never."""
    fire = np.asarray(fire, dtype=np.int64)
    if last_arrival is None:
        return fire, np.zeros(fire.size, dtype=bool)
    by_end = (fire == NEVER) | (fire > last_arrival)
    return np.where(by_end, np.int64(last_arrival), fire), by_end


#: The output-timestamp policies (book figures 3.7, 3.8), by their command-line names.
COMBINERS = ("eow", "earliest", "latest")


@dataclass(frozen=True)
class Firing:
    """How a window fires after the watermark passes it: ``allowed_lateness`` (µs),
    ``late_firings`` (``AfterWatermark(late=AfterCount(1))``, accumulating; the two go
    together, as Beam refuses a lateness under a trigger that fires once) and the
    ``timestamp_combiner`` of :data:`COMBINERS`. The defaults (:data:`FIRE_ONCE`) are
    the comparison's: fired once, no lateness, panes at the end of the window.
    ValueError names a bad option (as the command line spells it)."""

    allowed_lateness: int = 0
    late_firings: bool = False
    timestamp_combiner: str = "eow"

    def __post_init__(self) -> None:
        if self.timestamp_combiner not in COMBINERS:
            raise ValueError(
                "--timestamp-combiner must be one of eow, earliest, latest, got "
                f"{self.timestamp_combiner!r}"
            )
        check_duration(self.allowed_lateness, "--allowed-lateness")
        if self.late_firings and self.allowed_lateness == 0:
            raise ValueError("--late-firings needs --allowed-lateness > 0")
        if self.allowed_lateness and not self.late_firings:
            raise ValueError(
                "--allowed-lateness needs --late-firings: a window fired once drops the "
                "late data its lateness keeps (Beam refuses this trigger as unsafe)"
            )

    def expiry_ends(self, window_end: np.ndarray) -> np.ndarray:
        """The watermark (µs) at which each window expires: ``end + lateness + 1`` (an
        element arriving once ``W >= `` that is dropped), capped at ``MAX_TIMESTAMP + 1``
        (never reached) without overflow."""
        cap = MAX_TIMESTAMP - self.allowed_lateness
        end = np.asarray(window_end, dtype=np.int64)
        return np.minimum(end, cap) + np.int64(self.allowed_lateness) + np.int64(1)


#: The comparison's default firing: once, at the watermark, no lateness, at the end.
FIRE_ONCE = Firing()


class WindowAggregates(NamedTuple):
    """Per window, what decides its panes (counts; event times µs, meaningless where the
    count is 0): the elements arriving by the on-time firing (``ontime_*``), and those
    arriving after it but not expired, in ``late_batches`` distinct arrival times
    (``late_n`` elements; the first batch's arrival time, size and event-time range in
    ``first_late_*``). Both engines compute these; :func:`window_panes` reads them."""

    ontime_n: np.ndarray
    ontime_emin: np.ndarray
    ontime_emax: np.ndarray
    late_batches: np.ndarray
    late_n: np.ndarray
    first_late_time: np.ndarray
    first_late_n: np.ndarray
    first_late_emin: np.ndarray
    first_late_emax: np.ndarray


class WindowPanes(NamedTuple):
    """Per window: ``first`` (elements in its first pane, 0 for none), ``fire_time`` (of
    the first pane, µs, ``NEVER`` for none), ``latency`` (``fire_time - end``, float µs,
    NaN for none), ``panes`` (how many), ``final`` (elements in its last pane: what the
    pipeline finally said; accumulating), ``timestamp`` (the first pane's output
    timestamp, µs; ``end - 1`` for none), ``timestamp_lag`` (``end - 1`` minus it:
    how far the pane's timestamp, and its hold on the watermark downstream, lies before
    the window's max timestamp) and ``end_of_input`` (bool: its first pane was fired by
    the end of input, see the module docstring)."""

    first: np.ndarray
    fire_time: np.ndarray
    latency: np.ndarray
    panes: np.ndarray
    final: np.ndarray
    timestamp: np.ndarray
    timestamp_lag: np.ndarray
    end_of_input: np.ndarray


def window_panes(
    agg: WindowAggregates,
    window_end: np.ndarray,
    on_time: np.ndarray,
    firing: Firing,
    by_end_of_input: np.ndarray | None = None,
) -> WindowPanes:
    """Each window's panes from its aggregates, its end, its on-time firing time (µs)
    and whether the end of input set that time (:func:`finish_at`; None: nowhere). See
    the module docstring."""
    end = np.asarray(window_end, dtype=np.int64)
    eoi = np.zeros(end.size, dtype=bool) if by_end_of_input is None else by_end_of_input
    has_on = agg.ontime_n > 0
    has_late = agg.late_batches > 0
    first = np.where(has_on, agg.ontime_n, np.where(has_late, agg.first_late_n, 0))
    fire = np.where(has_on, on_time, np.where(has_late, agg.first_late_time, NEVER))
    latency = np.where(fire != NEVER, (fire - end).astype(np.float64), np.nan)
    if firing.late_firings:
        panes = has_on + agg.late_batches
        final = agg.ontime_n + agg.late_n
    else:
        panes = (has_on | has_late).astype(np.int64)
        final = first
    emin = np.where(has_on, agg.ontime_emin, agg.first_late_emin)
    emax = np.where(has_on, agg.ontime_emax, agg.first_late_emax)
    stamp = {"eow": end - 1, "earliest": emin, "latest": emax}[firing.timestamp_combiner]
    stamp = np.where(fire != NEVER, stamp, end - 1)
    return WindowPanes(
        first.astype(np.int64), fire.astype(np.int64), latency, panes.astype(np.int64),
        final.astype(np.int64), stamp, end - 1 - stamp,
        np.asarray(eoi, dtype=bool) & has_on,
    )


def _group_min(groups: np.ndarray, values: np.ndarray, n: int, fill: int) -> np.ndarray:
    out = np.full(n, fill, dtype=np.int64)
    np.minimum.at(out, groups, values)
    return out


def _group_max(groups: np.ndarray, values: np.ndarray, n: int, fill: int) -> np.ndarray:
    out = np.full(n, fill, dtype=np.int64)
    np.maximum.at(out, groups, values)
    return out


@dataclass(frozen=True)
class WindowIndex:
    """The (key, fixed window) of every element: windows sorted by end then key.

    ``key``, ``window_end`` and ``elements`` are per window; ``window_of`` maps each
    element to its window; ``arrival_time`` and ``event_time`` are the elements' (µs)."""

    size: int
    key: np.ndarray
    window_end: np.ndarray
    elements: np.ndarray
    window_of: np.ndarray
    arrival_time: np.ndarray
    event_time: np.ndarray

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
            e,
        )

    def panes(self, curve: StepSeries, firing: Firing, finish: bool = True) -> WindowPanes:
        """Per window under ``curve`` and ``firing``: its :class:`WindowPanes`."""
        a = self.arrival_time
        last = int(a.max()) if a.size and finish else None
        on_time, by_end = finish_at(fire_times(curve, self.window_end), last)
        expiry = fire_times(curve, firing.expiry_ends(self.window_end), last)
        agg = self.aggregates(on_time, expiry)
        return window_panes(agg, self.window_end, on_time, firing, by_end)

    def aggregates(self, on_time: np.ndarray, expiry: np.ndarray) -> WindowAggregates:
        """The :class:`WindowAggregates` given each window's on-time firing and expiry
        times (µs, ``NEVER`` for never; an element arriving after its window's expiry
        time is expired)."""
        n = self.window_end.size
        w, a, e = self.window_of, self.arrival_time, self.event_time
        f = on_time[w]
        x = expiry[w]
        ontime = (f != NEVER) & (a <= f)
        late = ~ontime & ((x == NEVER) | (a <= x))
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        wl, al, el = w[late], a[late], e[late]
        order = np.lexsort((al, wl))
        wl, al, el = wl[order], al[order], el[order]
        starts = np.ones(wl.size, dtype=bool)
        starts[1:] = (wl[1:] != wl[:-1]) | (al[1:] != al[:-1])
        first_t = _group_min(wl, al, n, big)
        at_first = al == first_t[wl]
        return WindowAggregates(
            np.bincount(w, weights=ontime, minlength=n).astype(np.int64),
            _group_min(w[ontime], e[ontime], n, big),
            _group_max(w[ontime], e[ontime], n, small),
            np.bincount(wl[starts], minlength=n).astype(np.int64),
            np.bincount(wl, minlength=n).astype(np.int64),
            first_t,
            np.bincount(wl[at_first], minlength=n).astype(np.int64),
            _group_min(wl[at_first], el[at_first], n, big),
            _group_max(wl[at_first], el[at_first], n, small),
        )


def summary_row(
    name: str,
    elements: np.ndarray,
    panes: WindowPanes,
    late: int,
    rows: int,
    include_end_of_input: bool = False,
) -> dict[str, object]:
    """One strategy's row of the comparison from its windows (one entry per window):
    the trace-determined columns of :class:`theory.pipeline.metrics.StrategyMetrics`,
    ``late_count``, ``late_fraction`` (of ``rows``), ``dropped`` (elements in no pane),
    ``windows``, ``completeness_mean``, ``complete_fraction`` and
    ``window_latency_p50/p90/p99`` (µs, over the windows that fire, those fired by the
    end of input left out unless ``include_end_of_input``; numpy's linear percentiles),
    ``end_of_input_windows`` (how many windows the end of input fired, whether left out
    or not); then ``late_panes`` (panes after each window's first),
    ``final_completeness_mean`` (elements in the last pane over all of the window's)
    and ``pane_timestamp_lag_p50/p99`` (the window's max timestamp minus its first
    pane's output timestamp, µs: 0 under eow). Both engines of the command line report
    it."""
    elements = np.asarray(elements, dtype=np.int64)
    lat = np.asarray(panes.latency, dtype=np.float64)
    fired = ~np.isnan(lat)
    eoi = np.asarray(panes.end_of_input, dtype=bool)
    lat = lat[fired & (include_end_of_input | ~eoi)]
    pcts = np.percentile(lat, [50, 90, 99]) if lat.size else [np.nan] * 3
    comp = panes.first / elements if elements.size else np.empty(0)
    final = panes.final / elements if elements.size else np.empty(0)
    ts_lag = panes.timestamp_lag[fired].astype(np.float64)
    ts = np.percentile(ts_lag, [50, 99]) if ts_lag.size else [np.nan] * 2
    return {
        "strategy": name,
        "late_count": int(late),
        "late_fraction": float(late / rows) if rows else float("nan"),
        "dropped": int((elements - panes.final).sum()),
        "windows": int(elements.size),
        "completeness_mean": float(comp.mean()) if comp.size else float("nan"),
        "complete_fraction": float(np.mean(comp >= 1.0)) if comp.size else 0.0,
        "window_latency_p50": float(pcts[0]),
        "window_latency_p90": float(pcts[1]),
        "window_latency_p99": float(pcts[2]),
        "end_of_input_windows": int(np.count_nonzero(eoi)),
        "late_panes": int(panes.panes.sum() - np.count_nonzero(panes.panes)),
        "final_completeness_mean": float(final.mean()) if final.size else float("nan"),
        "pane_timestamp_lag_p50": float(ts[0]),
        "pane_timestamp_lag_p99": float(ts[1]),
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
