"""Flink's conventions, converted at the edge of the model.

- **Units.** Flink counts milliseconds; the model counts µs. :func:`timestamp_from_millis`
  converts event times and durations, :func:`watermark_from_millis` /
  :func:`watermark_to_millis` convert watermarks. A Flink watermark ``W_ms`` is
  ``W_ms * 1000 + 999`` µs: "no more data with ``ts_ms <= W_ms``" is "no more data with
  ``ts_us <= W_ms * 1000 + 999``", so every comparison Flink makes gives the same answer
  in both units.
- **Inclusive watermarks.** A Flink watermark ``W`` asserts that no more elements with
  timestamp ``<= W`` will come; the core (Beam) one asserts ``< W``. :func:`flink_to_core`
  (``W + 1``) and :func:`core_to_flink` (``W - 1``) convert, with the bounds fixed.
- **Java's bounds.** ``Long.MIN_VALUE`` / ``Long.MAX_VALUE`` are ``MIN_TIMESTAMP`` /
  ``MAX_TIMESTAMP`` here.
- **Bounded out-of-orderness.** Flink's ``BoundedOutOfOrdernessWatermarks`` emits
  ``max_seen - bound - 1`` (:func:`flink_bounded_watermark`): the core generator with one
  µs less (:class:`FlinkBoundedOutOfOrderness`).
"""

from __future__ import annotations

from typing import Final, overload

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import as_int, check_duration, check_timestamp
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MICROS_PER_MILLI, MIN_TIMESTAMP
from theory.watermarks.heuristic import BoundedOutOfOrderness, max_seen_minus
from theory.watermarks.latch import LatchedWatermark

__all__ = [
    "JAVA_LONG_MAX",
    "JAVA_LONG_MIN",
    "FlinkBoundedOutOfOrderness",
    "FlinkCoreView",
    "core_to_flink",
    "flink_bounded_out_of_orderness_curve",
    "flink_bounded_watermark",
    "flink_to_core",
    "timestamp_from_millis",
    "watermark_from_millis",
    "watermark_to_millis",
]

JAVA_LONG_MIN: Final[int] = -(2**63)
JAVA_LONG_MAX: Final[int] = 2**63 - 1


def timestamp_from_millis(ms: int) -> int:
    """A Flink timestamp or duration in ms to µs (``ms * 1000``); checks the result's range."""
    return check_timestamp(as_int(ms, "ms") * MICROS_PER_MILLI, "timestamp")


def watermark_from_millis(w_ms: int) -> int:
    """A Flink watermark in ms (no more ``ts <= w_ms``) to µs, Flink convention kept.

    ``w_ms * 1000 + 999``: the last µs of millisecond ``w_ms``. ``Long.MIN_VALUE`` (or anything
    at or below MIN) maps to ``MIN_TIMESTAMP``; ``Long.MAX_VALUE`` (or above MAX) to
    ``MAX_TIMESTAMP``.
    """
    ms = as_int(w_ms, "w_ms")
    v = ms * MICROS_PER_MILLI + (MICROS_PER_MILLI - 1)
    if ms == JAVA_LONG_MIN or v <= MIN_TIMESTAMP:
        return MIN_TIMESTAMP
    if ms == JAVA_LONG_MAX or v >= MAX_TIMESTAMP:
        return MAX_TIMESTAMP
    return v


def watermark_to_millis(w_us: int) -> int:
    """A Flink-convention watermark in µs to Flink's ms: ``floor(w / 1000)``.

    No more ``ts_us <= w`` means no more ``ts_ms <= floor(w / 1000)`` for ms-aligned data.
    The bounds map to ``Long.MIN_VALUE`` / ``Long.MAX_VALUE``.
    """
    w = check_timestamp(w_us, "watermark")
    if w <= MIN_TIMESTAMP:
        return JAVA_LONG_MIN
    if w >= MAX_TIMESTAMP:
        return JAVA_LONG_MAX
    return w // MICROS_PER_MILLI


@overload
def flink_to_core(w: int | np.integer) -> int: ...
@overload
def flink_to_core(w: np.ndarray) -> np.ndarray: ...
def flink_to_core(w: int | np.integer | np.ndarray) -> int | np.ndarray:
    """A Flink watermark (no more ``ts <= w``) as a core one (no more ``ts < w``): ``w + 1``.

    ``<= MIN_TIMESTAMP`` (incl. Java's ``Long.MIN_VALUE``) maps to MIN_TIMESTAMP and
    ``>= MAX_TIMESTAMP`` (incl. ``Long.MAX_VALUE``) to MAX_TIMESTAMP. Round-trips with
    :func:`core_to_flink` for ``MIN_TIMESTAMP < w < MAX_TIMESTAMP - 1``.
    """
    if isinstance(w, np.ndarray):
        arr = w.astype(np.int64, copy=False)
        return np.where(arr <= MIN_TIMESTAMP, MIN_TIMESTAMP, np.minimum(arr, MAX_TIMESTAMP - 1) + 1)
    v = int(w)
    if v <= MIN_TIMESTAMP:
        return MIN_TIMESTAMP
    return MAX_TIMESTAMP if v >= MAX_TIMESTAMP else v + 1


@overload
def core_to_flink(w: int | np.integer) -> int: ...
@overload
def core_to_flink(w: np.ndarray) -> np.ndarray: ...
def core_to_flink(w: int | np.integer | np.ndarray) -> int | np.ndarray:
    """A core watermark as Flink's: ``w - 1``; the bounds map to themselves.

    Round-trips with :func:`flink_to_core` for ``MIN_TIMESTAMP + 1 < w < MAX_TIMESTAMP``.
    """
    if isinstance(w, np.ndarray):
        arr = w.astype(np.int64, copy=False)
        return np.where(arr >= MAX_TIMESTAMP, MAX_TIMESTAMP, np.maximum(arr, MIN_TIMESTAMP + 1) - 1)
    v = int(w)
    if v >= MAX_TIMESTAMP:
        return MAX_TIMESTAMP
    return MIN_TIMESTAMP if v <= MIN_TIMESTAMP else v - 1


def flink_bounded_watermark(max_seen: int | None, bound: int) -> int:
    """Flink's ``BoundedOutOfOrdernessWatermarks`` value (µs, Flink convention):
    ``max_seen - bound - 1``, clamped at ``MIN_TIMESTAMP``, which is also the value before
    any element (``max_seen=None``). Unchecked: callers pass checked ints."""
    if max_seen is None:
        return MIN_TIMESTAMP
    return max(MIN_TIMESTAMP, max_seen - bound - 1)


def flink_bounded_out_of_orderness_curve(
    event_time: ArrayLike,
    arrival_time: ArrayLike,
    partition: ArrayLike | None = None,
    *,
    bound: int,
) -> StepSeries:
    """Flink's ``BoundedOutOfOrdernessWatermarks`` value after each arrival, **Flink
    convention**: ``max_seen - bound - 1`` (µs, no more ``ts <= W``), MIN_TIMESTAMP
    before any element. Apply :func:`flink_to_core` to compare with core curves.

    Per-event value only; periodic emission is modelled elsewhere.
    """
    b = check_duration(bound, "bound")
    return max_seen_minus(event_time, arrival_time, partition, b + 1)


class FlinkBoundedOutOfOrderness(BoundedOutOfOrderness):
    """Flink's ``BoundedOutOfOrdernessWatermarks`` per event (``bound`` µs, >= 0).

    ``current()`` is Flink's convention: ``max_seen - bound - 1`` (no more ``ts <= W``);
    Flink's initial ``Long.MIN_VALUE`` is reported as MIN_TIMESTAMP.
    ``current_core()`` is the same watermark in the core convention (``flink + 1``).
    """

    _EXTRA = 1  # Flink's "<= W": one µs below the core value for the same data

    def current_core(self) -> int:
        """The current watermark in the core (Beam) convention, µs."""
        return flink_to_core(self.current())


class FlinkCoreView(LatchedWatermark):
    """A :class:`FlinkBoundedOutOfOrderness` seen in the core convention (``current()`` is
    its ``current_core()``); the wrapped generator is ``self.flink``."""

    def __init__(self, flink: FlinkBoundedOutOfOrderness) -> None:
        super().__init__()
        self.flink = flink
        self._sync()

    def _sync(self) -> None:
        self._value = self.flink.current_core()
        self.regressions = self.flink.regressions

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        self.flink.observe(event_time, arrival_time, partition)
        self._sync()

    def advance_to(self, processing_time: int) -> None:
        self.flink.advance_to(processing_time)
        self._sync()
