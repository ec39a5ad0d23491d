"""Processing-delay models: when an element that reaches a stage leaves it.

A stage processes its input in arrival order (FIFO): an element arriving at ``a`` leaves
at ``d = max(a + latency, previous departure)``. A stall ``[start, end)`` holds every
departure that would fall inside it until ``end``. All times are µs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from theory.columns import check_duration, check_timestamp


class LatencySampler(Protocol):
    """Anything that draws non-negative latencies in µs, e.g. a
    ``theory.data.distributions.Delay``."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray: ...


@dataclass(frozen=True)
class Processing:
    """A stage's latency (constant µs or a sampler) and its stall intervals (µs)."""

    latency: int | LatencySampler = 0
    stalls: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.latency, (int, np.integer)):
            check_duration(self.latency, "latency")
        elif not hasattr(self.latency, "sample"):
            raise TypeError(f"latency must be µs or have .sample(rng, n), got {self.latency!r}")
        for i, (start, end) in enumerate(self.stalls):
            check_timestamp(start, f"stalls[{i}] start")
            check_timestamp(end, f"stalls[{i}] end")
            if end <= start:
                raise ValueError(f"stalls[{i}] = ({start}, {end}): end must be after start")

    @property
    def is_instant(self) -> bool:
        """True when elements leave at the instant they arrive."""
        return isinstance(self.latency, (int, np.integer)) and self.latency == 0 and not self.stalls

    def departures(self, arrivals: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Departure times (µs) for sorted ``arrivals``; non-decreasing, each ``>= arrival``."""
        a = np.asarray(arrivals, dtype=np.int64)
        if a.size and bool(np.any(a[1:] < a[:-1])):
            raise ValueError("arrivals must be sorted in processing time")
        if self.is_instant:
            return a.copy()
        if isinstance(self.latency, (int, np.integer)):
            d = a + int(self.latency)
        else:
            lat = np.asarray(self.latency.sample(rng, a.size), dtype=np.int64)
            d = a + np.maximum(lat, 0)
        d = np.maximum.accumulate(d) if d.size else d
        for start, end in sorted(self.stalls):
            d = np.where((d >= start) & (d < end), end, d)
            d = np.maximum.accumulate(d) if d.size else d
        return d


INSTANT = Processing()
