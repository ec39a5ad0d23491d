"""Watermark estimators to plug into a splittable DoFn (Beam's
``WatermarkEstimatorProvider`` API), each with a public ``state()`` / ``from_state()``.

- :class:`BoundedOutOfOrdernessEstimatorProvider` ``(bound)``: the largest timestamp the
  DoFn emitted, minus ``bound`` (theory's ``BoundedOutOfOrderness``);
- :class:`ProcessingTimeLagEstimatorProvider` ``(lag)``: processing time minus ``lag``;
- :class:`PercentileEstimatorProvider` ``(p, horizon)``: over the timestamps emitted in the
  last ``horizon`` of processing time, the one with a fraction ``p`` of them above it.
  This is the semantics page's ``quantile(A, 1 - p)`` with the same rank rule
  (:class:`theory.watermarks.percentile.PercentileWatermark`), so ``p = 1`` is their
  minimum. It is a practical heuristic: the book's percentile watermark is over the
  elements that *happened and have not arrived*, which only an oracle of the backlog
  knows; here the recent arrivals stand in for them.

All are latched (a lower computed value keeps the old watermark and counts a regression).
Durations are µs ints, ``timedelta``s or strings (``"30s"``). Processing time comes from
``clock`` (a function returning µs; the wall clock by default), read when an element is
observed and when the watermark is asked for; a clock that goes back is treated as
standing still. The estimator state Beam checkpoints is the ``state()`` dict.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from apache_beam.io.iobase import WatermarkEstimator
from apache_beam.transforms.core import WatermarkEstimatorProvider
from apache_beam.utils.timestamp import Timestamp

from theory.columns import (
    DurationLike,
    as_duration,
    check_count,
    check_timestamp,
)
from theory.time import MIN_TIMESTAMP
from theory.watermarks.heuristic import BoundedOutOfOrderness
from theory.watermarks.percentile import PercentileWatermark, check_p

__all__ = [
    "BoundedOutOfOrdernessEstimator",
    "BoundedOutOfOrdernessEstimatorProvider",
    "PercentileEstimator",
    "PercentileEstimatorProvider",
    "ProcessingTimeLagEstimator",
    "ProcessingTimeLagEstimatorProvider",
    "wall_clock",
]

Clock = Callable[[], int]


def wall_clock() -> int:
    """The system clock in µs since the epoch."""
    return time.time_ns() // 1_000


def _key(state: Mapping[str, Any], key: str, kind: str) -> Any:
    if not isinstance(state, Mapping):
        raise TypeError(f"{kind} state must be a dict, got {state!r}")
    if key not in state:
        raise ValueError(f"{kind} state: missing key {key!r}")
    return state[key]


class _Clocked(WatermarkEstimator):
    """A processing clock that never goes back (µs)."""

    def __init__(self, clock: Clock, now: int) -> None:
        self._clock = clock
        self._now = now

    def _tick(self) -> int:
        self._now = max(self._now, int(self._clock()))
        return self._now


# ---------------------------------------------------------------- bounded out-of-orderness


class BoundedOutOfOrdernessEstimator(_Clocked):
    """Max observed timestamp minus ``bound``, latched (theory's ``BoundedOutOfOrderness``)."""

    def __init__(self, state: Mapping[str, Any], clock: Clock = wall_clock) -> None:
        self.generator = BoundedOutOfOrderness.from_state(
            _key(state, "generator", "BoundedOutOfOrderness")
        )
        last = self.generator.state()["last_arrival"]
        super().__init__(clock, MIN_TIMESTAMP if last is None else int(last))

    def observe_timestamp(self, timestamp: Timestamp) -> None:
        self.generator.observe(int(timestamp.micros), self._tick())

    def current_watermark(self) -> Timestamp:
        return Timestamp(micros=self.generator.current())

    def state(self) -> dict[str, Any]:
        """The resumable state (µs)."""
        return {"generator": self.generator.state()}

    get_estimator_state = state

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], clock: Clock = wall_clock
    ) -> BoundedOutOfOrdernessEstimator:
        return cls(state, clock)


class BoundedOutOfOrdernessEstimatorProvider(WatermarkEstimatorProvider):
    """Makes :class:`BoundedOutOfOrdernessEstimator` s: watermark = max seen - ``bound``."""

    def __init__(self, bound: DurationLike, *, clock: Clock = wall_clock) -> None:
        self.bound = as_duration(bound, "bound")
        self.clock = clock

    def initial_estimator_state(self, element: Any, restriction: Any) -> dict[str, Any]:
        return {"generator": BoundedOutOfOrderness(self.bound).state()}

    def create_watermark_estimator(
        self, estimator_state: Mapping[str, Any]
    ) -> BoundedOutOfOrdernessEstimator:
        return BoundedOutOfOrdernessEstimator(estimator_state, self.clock)


# ---------------------------------------------------------------- processing-time lag


class ProcessingTimeLagEstimator(_Clocked):
    """Processing time minus ``lag``, latched; observed timestamps do not move it."""

    def __init__(self, state: Mapping[str, Any], clock: Clock = wall_clock) -> None:
        kind = "ProcessingTimeLag"
        self.lag = as_duration(_key(state, "lag", kind), "state['lag']")
        self.watermark = check_timestamp(_key(state, "watermark", kind), "state['watermark']")
        super().__init__(clock, self.watermark)

    def observe_timestamp(self, timestamp: Timestamp) -> None:
        pass

    def current_watermark(self) -> Timestamp:
        self.watermark = max(self.watermark, max(MIN_TIMESTAMP, self._tick() - self.lag))
        return Timestamp(micros=self.watermark)

    def state(self) -> dict[str, Any]:
        """The resumable state (µs)."""
        return {"lag": self.lag, "watermark": self.watermark}

    get_estimator_state = state

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], clock: Clock = wall_clock
    ) -> ProcessingTimeLagEstimator:
        return cls(state, clock)


class ProcessingTimeLagEstimatorProvider(WatermarkEstimatorProvider):
    """Makes :class:`ProcessingTimeLagEstimator` s: watermark = processing time - ``lag``."""

    def __init__(self, lag: DurationLike, *, clock: Clock = wall_clock) -> None:
        self.lag = as_duration(lag, "lag")
        self.clock = clock

    def initial_estimator_state(self, element: Any, restriction: Any) -> dict[str, Any]:
        return {"lag": self.lag, "watermark": MIN_TIMESTAMP}

    def create_watermark_estimator(
        self, estimator_state: Mapping[str, Any]
    ) -> ProcessingTimeLagEstimator:
        return ProcessingTimeLagEstimator(estimator_state, self.clock)


# ---------------------------------------------------------------- percentile


class PercentileEstimator(_Clocked):
    """``quantile(A, 1 - p)`` of the timestamps observed in the last ``horizon`` of
    processing time, latched (see the module docstring: a heuristic)."""

    def __init__(self, state: Mapping[str, Any], clock: Clock = wall_clock) -> None:
        kind = "Percentile"
        self.p = check_p(_key(state, "p", kind))
        self.horizon = as_duration(
            _key(state, "horizon", kind), "state['horizon']", allow_zero=False
        )
        watermark = check_timestamp(_key(state, "watermark", kind), "state['watermark']")
        self.percentile = PercentileWatermark(self.p, initial=watermark)
        self.percentile.regressions = check_count(
            _key(state, "regressions", kind), "state['regressions']"
        )
        self.recent: deque[tuple[int, int]] = deque()
        now = MIN_TIMESTAMP
        for i, pair in enumerate(_key(state, "recent", kind)):
            seen, ts = (check_timestamp(v, f"state['recent'][{i}]") for v in pair)
            if seen < now:
                raise ValueError(f"state['recent'][{i}]: observed before the previous entry")
            now = seen
            self.recent.append((seen, ts))
            self.percentile.activate(ts)
        super().__init__(clock, now)

    def _expire(self, now: int) -> None:
        recent, horizon = self.recent, self.horizon
        while recent and recent[0][0] + horizon <= now:
            self.percentile.complete(recent.popleft()[1])

    def observe_timestamp(self, timestamp: Timestamp) -> None:
        now = self._tick()
        self._expire(now)
        ts = int(timestamp.micros)
        self.recent.append((now, ts))
        self.percentile.activate(ts)

    def current_watermark(self) -> Timestamp:
        self._expire(self._tick())
        return Timestamp(micros=self.percentile.current())

    def state(self) -> dict[str, Any]:
        """The resumable state (µs): the recent ``(observed at, timestamp)`` pairs."""
        return {
            "p": self.p,
            "horizon": self.horizon,
            "watermark": self.percentile.latched,
            "regressions": self.percentile.regressions,
            "recent": [list(pair) for pair in self.recent],
        }

    get_estimator_state = state

    @classmethod
    def from_state(cls, state: Mapping[str, Any], clock: Clock = wall_clock) -> PercentileEstimator:
        return cls(state, clock)


class PercentileEstimatorProvider(WatermarkEstimatorProvider):
    """Makes :class:`PercentileEstimator` s (``p`` in (0, 1], ``horizon`` > 0)."""

    def __init__(self, p: float, horizon: DurationLike, *, clock: Clock = wall_clock) -> None:
        self.p = check_p(p)
        self.horizon = as_duration(horizon, "horizon", allow_zero=False)
        self.clock = clock

    def initial_estimator_state(self, element: Any, restriction: Any) -> dict[str, Any]:
        return {
            "p": self.p,
            "horizon": self.horizon,
            "watermark": MIN_TIMESTAMP,
            "regressions": 0,
            "recent": [],
        }

    def create_watermark_estimator(self, estimator_state: Mapping[str, Any]) -> PercentileEstimator:
        return PercentileEstimator(estimator_state, self.clock)
