"""Percentile watermarks (docs/semantics.md): the definition, the rank
rule and the exact incremental form.

Definition (all times int µs):

- An element is *active* over the processing-time interval ``[activation, completion)``
  and has an event time. An element with ``completion == activation`` is never active;
  ``completion < activation`` is an error.
- ``A(t)`` is the multiset of event times of the elements with
  ``activation <= t < completion``, ``n(t) = |A(t)|``. A change at ``t`` is visible at
  ``t`` (as in :class:`~theory.series.StepSeries`).
- For ``p`` in (0, 1], the computed value is the order statistic of ``A(t)`` with 0-based
  rank ``k = floor((1 - p) * (n - 1))``, evaluated in float64 as ``(n - 1) * (1.0 - p)``
  (:func:`quantile_rank`). This is ``numpy.quantile(A, 1 - p, method="lower")``.
  ``p = 1`` gives ``k = 0``, the minimum: the ordinary watermark (the in-flight minimum
  of :func:`theory.watermarks.holds.inflight_min`). A smaller ``p`` is a larger quantile
  of the event times: more aggressive.
- When ``A(t)`` is empty the computed value is the *fallback*: the stage's input
  watermark (a :class:`StepSeries`). Without one it is ``MIN_TIMESTAMP`` (no information),
  so the latched watermark holds where it is.
- The watermark is latched monotonic: ``W_p(t) = max(W_p(t-), computed(t))``, starting
  from ``initial`` (the fallback's initial value, ``MIN_TIMESTAMP`` by default).
- A *regression* is an evaluation whose set is non-empty and whose order statistic is
  below the latched value and differs from the previous evaluation's computed value (so
  re-evaluating an unchanged set does not count twice). Fallback values never count.
  The rule lives in :mod:`theory.watermarks.latch`.

Three forms, which agree:

- :class:`PercentileWatermark` (here): exact and incremental, an
  :class:`OrderStatisticList` (O(log n) updates, O(1) amortised percentile lookups).
- :func:`~theory.watermarks.percentile_sweep.percentile_curve`: the whole curve of a
  trace at once, vectorised (:mod:`theory.watermarks.percentile_sweep`).
- :class:`~theory.watermarks.percentile_sketch.SketchPercentileWatermark`: bounded
  memory, with KLL sketches and a stated rank-error bound
  (:mod:`theory.watermarks.percentile_sketch`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import check_count, check_fraction, check_timestamp, time_column
from theory.series import StepSeries
from theory.structures import OrderStatisticList
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.latch import Latch

__all__ = [
    "PercentileInput",
    "PercentileLatch",
    "PercentileWatermark",
    "check_p",
    "element_columns",
    "fallback_series",
    "percentile_input",
    "quantile_rank",
]


# --------------------------------------------------------------------------- convention


def check_p(p: object, name: str = "p") -> float:
    """``p`` as a float in (0, 1]: ``TypeError`` for a non-number, ``ValueError`` outside
    (NaN included), naming ``name``. ``p = 0`` is refused: its watermark would be the
    newest active event time, a promise no data can keep."""
    try:
        v = check_fraction(p, name)  # the type check; NaN and values outside [0, 1] fail
    except ValueError:
        v = 0.0
    if v == 0.0:
        raise ValueError(f"{name} must be in (0, 1], got {p!r}")
    return v


def quantile_rank(n: int, p: float) -> int:
    """The 0-based rank ``floor((1 - p) * (n - 1))`` of ``W_p`` among ``n >= 1`` values."""
    return math.floor((check_count(n, "n", minimum=1) - 1) * (1.0 - check_p(p)))


def element_columns(
    event_time: ArrayLike, activation: ArrayLike, completion: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The checked int64 columns of a percentile trace (µs); ``completion < activation``
    raises ``ValueError`` naming the row (an element cannot leave before it came)."""
    e = time_column(event_time, "event_time")
    a = time_column(activation, "activation")
    c = time_column(completion, "completion")
    if not e.size == a.size == c.size:
        raise ValueError(
            f"event_time, activation and completion need one length, got "
            f"{e.size}, {a.size} and {c.size}"
        )
    bad = c < a
    if bool(np.any(bad)):
        i = int(np.argmax(bad))
        raise ValueError(
            f"row {i}: completion={int(c[i])} µs is before activation={int(a[i])} µs"
        )
    return e, a, c


def fallback_series(fallback: StepSeries | None) -> StepSeries:
    """The fallback (input watermark) as a series: None is ``MIN_TIMESTAMP`` throughout
    (no information); anything but a :class:`StepSeries` is a ``TypeError``."""
    if fallback is None:
        return StepSeries(np.zeros(0, np.int64), np.zeros(0, np.int64), MIN_TIMESTAMP)
    if not isinstance(fallback, StepSeries):
        raise TypeError(f"fallback must be a StepSeries or None, got {type(fallback).__name__}")
    return fallback


class PercentileInput(NamedTuple):
    """A checked percentile trace: ``p``, the int64 columns (µs) and the fallback series."""

    p: float
    event_time: np.ndarray
    activation: np.ndarray
    completion: np.ndarray
    fallback: StepSeries


def percentile_input(
    event_time: ArrayLike,
    activation: ArrayLike,
    completion: ArrayLike,
    p: object,
    fallback: StepSeries | None,
) -> PercentileInput:
    """The arguments every whole-trace form takes, checked in order (:func:`check_p`,
    :func:`element_columns`, :func:`fallback_series`)."""
    p_ = check_p(p)
    return PercentileInput(
        p_, *element_columns(event_time, activation, completion), fallback_series(fallback)
    )


class PercentileLatch(Latch):
    """The latch of an incremental ``W_p`` (exact or sketched): ``p`` checked, and
    ``q = 1 - p``, the quantile of the event times it answers."""

    __slots__ = ("_p", "_q")

    def __init__(self, p: float, initial: int = MIN_TIMESTAMP) -> None:
        super().__init__(initial)
        self._p = check_p(p)
        self._q = 1.0 - self._p

    @property
    def p(self) -> float:
        """The percentile in (0, 1]."""
        return self._p

    @property
    def latched(self) -> int:
        """The latched watermark after the last ``current()`` (µs)."""
        return self._value


# --------------------------------------------------------------------------- exact incremental


class PercentileWatermark(PercentileLatch):
    """Exact incremental ``W_p`` (module docstring), latched, with regressions counted.

    Elements are identified by event time (``complete(event_time)`` removes one active
    element with that event time) or by an ``item_id`` given at activation (then they must
    be completed by that id). The caller applies the updates of processing time ``t`` and
    then calls :meth:`current`, with the stage's input watermark at ``t`` as the fallback.
    Updates cost O(log n) (:class:`OrderStatisticList`); :meth:`current` is O(1) amortised
    while the rank moves by a few places between calls.
    """

    __slots__ = ("_by_id", "_id_values", "_set")

    def __init__(self, p: float, *, initial: int = MIN_TIMESTAMP) -> None:
        super().__init__(p, initial)
        self._set = OrderStatisticList()
        self._by_id: dict[Hashable, int] = {}
        self._id_values: dict[int, int] = {}  # event time -> active elements with an id

    def __len__(self) -> int:
        """How many elements are active."""
        return len(self._set)

    def activate(self, event_time: int, item_id: Hashable | None = None) -> None:
        """An element with ``event_time`` (µs) becomes active (optionally named)."""
        e = event_time
        if type(e) is not int or not MIN_TIMESTAMP <= e <= MAX_TIMESTAMP:
            e = check_timestamp(e, "event_time")
        if item_id is not None:
            if item_id in self._by_id:
                raise ValueError(f"item_id={item_id!r} is already active")
            self._by_id[item_id] = e
            self._id_values[e] = self._id_values.get(e, 0) + 1
        self._set.add(e)

    def complete(self, event_time: int | None = None, *, item_id: Hashable | None = None) -> None:
        """An active element completes: give its ``event_time`` or its ``item_id``.

        Raises ``ValueError`` (nothing changed) if no such element is active.
        """
        if item_id is not None:
            if event_time is not None:
                raise ValueError("complete() needs exactly one of event_time and item_id")
            self._complete_by_id(item_id)
            return
        e = event_time  # the anonymous case, inline: the incremental hot path
        if type(e) is not int or not MIN_TIMESTAMP <= e <= MAX_TIMESTAMP:
            if e is None:
                raise ValueError("complete() needs exactly one of event_time and item_id")
            e = check_timestamp(e, "event_time")
        if self._id_values and e in self._id_values:
            self._refuse_if_only_named(e)
        try:
            self._set.remove(e)
        except ValueError:
            raise ValueError(f"no active element has event_time={e}") from None

    def _refuse_if_only_named(self, e: int) -> None:
        """An element activated with an id completes by it: refuse an anonymous completion
        at ``e`` when every active element there has an id."""
        s = self._set
        if s.count_le(e) - s.count_lt(e) <= self._id_values[e]:
            raise ValueError(
                f"no anonymous active element has event_time={e}; "
                "elements activated with an item_id complete by item_id"
            )

    def _complete_by_id(self, item_id: Hashable) -> None:
        e = self._by_id.get(item_id)
        if e is None:
            raise ValueError(f"item_id={item_id!r} is not active")
        del self._by_id[item_id]
        left = self._id_values[e] - 1
        if left:
            self._id_values[e] = left
        else:
            del self._id_values[e]
        self._set.remove(e)

    def computed(self) -> int | None:
        """The order statistic of the active set (not latched), or None when it is empty."""
        s = self._set
        n = len(s)
        if not n:
            return None
        return s.kth(int((n - 1) * self._q))

    def current(self, input_watermark: int | None = None) -> int:
        """Evaluate now: latch the order statistic (or ``input_watermark`` when nothing is
        active) and return the latched watermark (µs)."""
        s = self._set  # computed(), inlined: this is the incremental hot path
        n = len(s)
        return self._latch_estimate(s.kth(int((n - 1) * self._q)) if n else None, input_watermark)
