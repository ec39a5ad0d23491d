"""Step-function series over processing time: the shape of every watermark curve.

A :class:`StepSeries` holds strictly increasing change times ``times`` (processing time,
µs) and the ``values`` that take effect at each of them (event time, µs). Before the
first change the value is ``initial`` (``MIN_TIMESTAMP`` for a watermark). The value at
``t`` is the last value whose time is ``<= t``: a change at ``t`` is visible at ``t``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from theory.arrays import sorted_union, stable_order
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP


@dataclass(frozen=True)
class StepSeries:
    """A right-continuous step function of processing time (all µs, int64)."""

    times: np.ndarray
    values: np.ndarray
    initial: int = MIN_TIMESTAMP

    def __post_init__(self) -> None:
        t = np.asarray(self.times, dtype=np.int64)
        v = np.asarray(self.values, dtype=np.int64)
        if t.ndim != 1 or v.shape != t.shape:
            raise ValueError(
                f"StepSeries needs 1-d times and values of one length, got {t.shape} and {v.shape}"
            )
        if t.size > 1 and not bool(np.all(t[1:] > t[:-1])):
            bad = int(np.argmin(t[1:] > t[:-1])) + 1
            raise ValueError(f"StepSeries times must increase strictly; index {bad} does not")
        object.__setattr__(self, "times", t)
        object.__setattr__(self, "values", v)

    @staticmethod
    def from_events(
        times: np.ndarray, values: np.ndarray, initial: int = MIN_TIMESTAMP
    ) -> StepSeries:
        """Build from unsorted (time, value) updates; the last update at a time wins.

        Updates are applied in a stable sort by time, so among equal times the one given
        last takes effect.
        """
        t = np.asarray(times, dtype=np.int64)
        v = np.asarray(values, dtype=np.int64)
        if t.size == 0:
            return StepSeries(t, v, initial)
        order = stable_order(t)  # (None: already in time order, the common case)
        if order is not None:
            t, v = t[order], v[order]
        last = np.ones(t.size, dtype=bool)
        last[:-1] = t[1:] != t[:-1]
        return StepSeries(t[last], v[last], initial)

    def __len__(self) -> int:
        return int(self.times.size)

    def at(self, t: np.ndarray | int) -> np.ndarray:
        """Values at processing times ``t`` (array or scalar), as int64."""
        return self._lookup(t, "right")

    def before(self, t: np.ndarray | int) -> np.ndarray:
        """Values just before ``t``: changes at exactly ``t`` are not yet visible."""
        return self._lookup(t, "left")

    def _lookup(self, t: np.ndarray | int, side: Literal["left", "right"]) -> np.ndarray:
        """The value of the last step at or before ``t`` (``side="right"``) or strictly
        before it (``"left"``), ``initial`` before the first step; int64."""
        q = np.asarray(t, dtype=np.int64)
        # how many steps came before each t (no copy of the series: a lookup costs the
        # queries, not the series' length)
        n = np.searchsorted(self.times, q, side=side)
        if self.values.size == 0:
            return np.full(q.shape, self.initial, np.int64)[()]
        return np.where(n > 0, self.values[np.maximum(n, 1) - 1], np.int64(self.initial))[()]

    def final(self) -> int:
        """The last value (``initial`` if there is no change)."""
        return int(self.values[-1]) if self.values.size else int(self.initial)

    def latched(self) -> StepSeries:
        """The monotonic (running-maximum) form, as Beam's runners latch watermarks."""
        if self.values.size == 0:
            return self
        v = np.maximum.accumulate(np.maximum(self.values, self.initial))
        return StepSeries(self.times, v, self.initial).compressed()

    def regressions(self) -> int:
        """How many updates would have moved the value backwards (before latching)."""
        if self.values.size == 0:
            return 0
        prev = np.maximum.accumulate(np.concatenate(([self.initial], self.values)))[:-1]
        return int(np.count_nonzero(self.values < prev))

    def compressed(self) -> StepSeries:
        """Drop changes that do not change the value."""
        if self.values.size == 0:
            return self
        prev = np.concatenate(([self.initial], self.values[:-1]))
        keep = self.values != prev
        return StepSeries(self.times[keep], self.values[keep], self.initial)

    def is_monotonic(self) -> bool:
        """True when no value is below the one before it (or below ``initial``)."""
        if self.values.size == 0:
            return True
        v = np.concatenate(([self.initial], self.values))
        return bool(np.all(v[1:] >= v[:-1]))


def union_times(series: Iterable[StepSeries]) -> np.ndarray:
    """The sorted union of the change times of ``series``."""
    return sorted_union([s.times for s in series])


def pointwise_min(series: list[StepSeries]) -> StepSeries:
    """The pointwise minimum of step functions (exact, at every change of any input)."""
    if not series:
        raise ValueError("pointwise_min needs at least one series")
    if len(series) == 1:
        return series[0]
    t = union_times(series)
    v = series[0].at(t)
    for s in series[1:]:
        v = np.minimum(v, s.at(t))
    initial = min(s.initial for s in series)
    return StepSeries(t, v, initial).compressed()


def lag_quantiles(
    series: StepSeries, lo: int, hi: int, quantiles: Sequence[float]
) -> tuple[float, ...]:
    """Exact time-weighted quantiles (fractions in ``[0, 1)``) of the lag ``t - W(t)``
    (µs) over processing times ``t`` in ``[lo, hi)`` where ``W(t)`` is finite (strictly
    between MIN_TIMESTAMP and MAX_TIMESTAMP): the ``x`` such that the lag is below ``x``
    for that fraction of the finite time. NaN where no time is finite.

    Between two steps the lag grows with slope 1 from ``t_i - w_i``, so the time with lag
    ``< x`` is ``F(x) = sum_i clip(x - s_i, 0, d_i)`` over the intervals (start lag
    ``s_i``, length ``d_i``), piecewise linear with integer breakpoints; ``F`` is summed
    in int64 one breakpoint gap at a time (each increment at most the span, no overflow)
    and inverted exactly between breakpoints. Steps that repeat a value are dropped
    first, so every representation of one curve gives the same floats."""
    if hi <= lo:
        return tuple(float("nan") for _ in quantiles)
    series = series.compressed()  # one representation: the same breakpoints, the same floats
    t = series.times
    inside = (t > lo) & (t < hi)
    starts = np.concatenate(([lo], t[inside])).astype(np.int64)
    values = series.at(starts)
    lengths = np.diff(np.concatenate((starts, [hi])))
    finite = (values > MIN_TIMESTAMP) & (values < MAX_TIMESTAMP) & (lengths > 0)
    s = (starts - values)[finite]
    d = lengths[finite]
    if not s.size:
        return tuple(float("nan") for _ in quantiles)
    s_sorted, e_sorted = np.sort(s), np.sort(s + d)
    b = sorted_union([s_sorted, e_sorted])
    slope = np.searchsorted(s_sorted, b, side="right") - np.searchsorted(
        e_sorted, b, side="right"
    )
    f = np.concatenate(([0], np.cumsum(slope[:-1] * np.diff(b))))
    total = int(d.sum())
    out = []
    for q in quantiles:
        target = float(q) * total
        k = int(np.searchsorted(f, target, side="right")) - 1  # f[k] <= target < f[k+1]
        k = min(max(k, 0), b.size - 2)
        out.append(float(b[k]) + (target - float(f[k])) / float(slope[k]))
    return tuple(out)
