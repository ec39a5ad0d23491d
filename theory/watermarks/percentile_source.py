"""The percentile watermark at the source (µs): the backlog's order statistic.

At the source an element is active from its event time (it happened) until it arrives:
the *backlog* ``A(t) = {elements with event_time <= t < arrival_time}``. This is the
percentile watermark of docs/semantics.md with activation = event time
and completion = arrival time, so it reuses the general forms of
:mod:`theory.watermarks.percentile` and :mod:`theory.watermarks.percentile_sweep`, with
:func:`~theory.watermarks.perfect.perfect_curve` as the fallback. It is an oracle: the
backlog holds elements that have not arrived, known only from the whole trace.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import check_timestamp
from theory.series import StepSeries
from theory.watermarks.latch import LatchedWatermark
from theory.watermarks.percentile import PercentileWatermark, check_p
from theory.watermarks.percentile_sweep import percentile_curve
from theory.watermarks.perfect import PerfectWatermark, perfect_curve
from theory.watermarks.source_trace import source_columns

__all__ = ["PercentileSourceWatermark", "percentile_source_curve"]


def percentile_source_curve(
    event_time: ArrayLike,
    arrival_time: ArrayLike,
    partition: ArrayLike | None = None,
    *,
    p: float,
    hold: bool = False,
) -> StepSeries:
    """The percentile watermark (docs/semantics.md) at the source (µs), an oracle over the trace.

    The active set is the backlog ``A(t)`` (module docstring): events that happened but
    have not arrived (an element arriving at or before its event time is never in it).
    ``W_p(t)`` is the order statistic of ``A(t)`` of 0-based rank
    ``floor((n - 1) * (1 - p))`` (``numpy.quantile(A, 1 - p, method="lower")``), or, where
    ``A(t)`` is empty, :func:`perfect_curve` (``hold=True``: no fallback, the watermark
    holds); latched. It is :func:`~theory.watermarks.percentile_sweep.percentile_curve`
    with activation = event time and completion = arrival time, so its steps are at
    arrival times *and* at event times (also before the first arrival). This is
    ``percentile:<p>[:hold]`` of ``spark_backend.analytics``, exactly.

    ``p = 1`` equals :func:`perfect_curve` at every arrival time; between arrivals it may
    be higher, since it also steps at the event times (the perfect curve, capped at the
    clock, steps only at arrivals); before the first arrival the perfect curve is still
    at ``MIN_TIMESTAMP``. The fallback is the capped perfect watermark, so this never
    passes the clock either. A smaller ``p`` is pointwise at least as high.
    ``partition`` is ignored.
    """
    q = check_p(p)
    e, a, _ = source_columns(event_time, arrival_time, partition)
    fallback = None if hold else perfect_curve(e, a)
    # completion = max(arrival, event): rows arriving before their event are never active
    return percentile_curve(e, e, np.maximum(a, e), q, fallback)


class PercentileSourceWatermark(LatchedWatermark):
    """Incremental :func:`percentile_source_curve`, an oracle that knows the whole trace.

    The backlog needs elements that have not arrived, so it is built from the trace. The
    elements are observed in arrival order (any order within one arrival time); every
    event time of a backlog element is an evaluation instant, applied as processing time
    passes it (by the next :meth:`observe` or by :meth:`advance_to`). The watermark at an
    arrival time is evaluated once every element arriving then was observed. The exact
    order statistics are a :class:`~theory.watermarks.percentile.PercentileWatermark`,
    the fallback a :class:`~theory.watermarks.perfect.PerfectWatermark`; the latch is
    the percentile one (:meth:`~theory.watermarks.latch.Latch._latch_estimate`).
    """

    def __init__(
        self, event_time: ArrayLike, arrival_time: ArrayLike, p: float, *, hold: bool = False
    ) -> None:
        super().__init__()
        e, a, _ = source_columns(event_time, arrival_time)
        self._pct = PercentileWatermark(p)
        self._perfect = PerfectWatermark(e, a)
        self.hold = hold
        self._starts: list[int] = np.sort(e[a > e]).tolist()  # activation instants
        self._next = 0
        times, counts = np.unique(a, return_counts=True)
        self._times: list[int] = times.tolist()
        self._counts: list[int] = counts.tolist()
        self._group = -1  # index of the arrival time being observed
        self._left = 0  # its elements not yet observed

    @property
    def p(self) -> float:
        """The percentile in (0, 1]."""
        return self._pct.p

    def _evaluate(self) -> None:
        fallback = None if self.hold else self._perfect.current()
        self._latch_estimate(self._pct.computed(), fallback)

    def _activate(self, t: int, *, evaluate_at_t: bool) -> None:
        """Apply the activations at instants ``<= t``, evaluating after each instant
        ``< t`` (and at ``t`` when ``evaluate_at_t``)."""
        starts, i, n = self._starts, self._next, len(self._starts)
        while i < n and starts[i] <= t:
            s = starts[i]
            while i < n and starts[i] == s:
                self._pct.activate(s)
                i += 1
            self._next = i
            if s < t or evaluate_at_t:
                self._evaluate()

    def _unobserved(self) -> str | None:
        if self._left:
            return f"{self._left} element(s) arriving at {self._times[self._group]} µs"
        return None

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        e = check_timestamp(event_time, "event_time")
        a = self._check_arrival(arrival_time, commit=False)
        if self._group < 0 or a != self._times[self._group]:
            self._next_group(a)
        self._perfect.observe(e, a, partition)  # raises if (e, a) is not left in the trace
        self._commit_arrival(a)
        if e < a:
            self._pct.complete(e)
        self._left -= 1
        if not self._left:
            self._evaluate()

    def _next_group(self, a: int) -> None:
        """Start arrival time ``a`` (after the activations before it); refuse it unless it
        is the trace's next arrival time and the previous one was observed in full."""
        g = self._group + 1
        missing = self._unobserved()
        if missing is not None or g >= len(self._times) or self._times[g] != a:
            if missing:
                what = f"{missing} were never observed"
            elif g >= len(self._times):
                what = "the trace has no more elements"
            else:
                what = f"the next elements arrive at {self._times[g]} µs"
            raise ValueError(f"arrival_time={a} µs does not match the oracle's trace: {what}")
        self._activate(a, evaluate_at_t=False)  # activations at a come before a's arrivals
        self._group, self._left = g, self._counts[g]

    def advance_to(self, processing_time: int) -> None:
        t = check_timestamp(processing_time, "processing_time")
        missing = self._unobserved()
        g = self._group + 1
        if missing is None and g < len(self._times) and self._times[g] <= t:
            missing = f"the elements arriving at {self._times[g]} µs"
        if missing is not None:
            raise ValueError(f"advance_to({t}): {missing} were never observed")
        super().advance_to(t)

    def _on_advance(self, t: int) -> None:
        self._activate(t, evaluate_at_t=True)
