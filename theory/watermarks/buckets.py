"""One arrival-time bucket of a trace: its rows sorted by arrival, and its carry.

A trace cut into contiguous arrival-time (processing-time) ranges, *buckets*, has every
source watermark curve computed as a parallel scan: each bucket scans its own rows, given
a small :class:`BucketCarry` summarising the other buckets (the minimum event time
arriving later, the maximum arriving earlier, the percentile's latched value before it).
:mod:`theory.watermarks.bucket_curves` holds the per-bucket scans; Spark runs them in
its tasks (``spark_backend.analytics``). All times are µs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from theory.arrays import equal_runs
from theory.columns import check_timestamp, int_column, same_length
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = ["BucketCarry", "SortedBucket"]


@dataclass
class BucketCarry:
    """What one bucket needs from the others (µs; each field's default means "none").

    ``perfect_after`` is the minimum event time arriving in later buckets,
    ``max_before`` the maximum arriving in earlier ones, ``[lo, hi)`` the bucket's
    arrival range, and ``latched`` the percentile watermark latched before the bucket,
    by strategy index (filled once every bucket's maximum is known).
    """

    perfect_after: int = MAX_TIMESTAMP
    max_before: int = MIN_TIMESTAMP
    lo: int = MIN_TIMESTAMP
    hi: int = MAX_TIMESTAMP + 1
    latched: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SortedBucket:
    """A bucket's rows in arrival order, grouped by arrival time.

    ``arrival_time`` is sorted (ties in any order: every scan treats a group as one
    step); ``times`` are its distinct values, group ``g`` being rows
    ``starts[g]:ends[g]``. ``perfect[i]`` is the minimum event time of rows ``i..`` and of
    the later buckets (``perfect[m]`` the later buckets' alone): the perfect watermark
    once ``i`` rows have arrived.
    """

    arrival_time: np.ndarray
    event_time: np.ndarray
    times: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    perfect: np.ndarray

    @classmethod
    def of(
        cls, arrival_time: ArrayLike, event_time: ArrayLike, perfect_after: int = MAX_TIMESTAMP
    ) -> SortedBucket:
        """Group rows already sorted by ``arrival_time``; ``ValueError`` if they are not,
        since every scan reads the arrival order from the row order."""
        a = int_column(arrival_time, "arrival_time")
        e = int_column(event_time, "event_time")
        same_length("arrival_time", a.size, event_time=e)
        if a.size > 1 and not bool(np.all(a[1:] >= a[:-1])):
            raise ValueError("arrival_time must be sorted (the bucket's rows in arrival order)")
        times, starts, ends = equal_runs(a)
        perfect = np.empty(a.size + 1, dtype=np.int64)
        perfect[a.size] = check_timestamp(perfect_after, "perfect_after")
        if a.size:
            perfect[: a.size] = np.minimum.accumulate(e[::-1])[::-1]
            np.minimum(perfect[: a.size], perfect_after, out=perfect[: a.size])
        return cls(a, e, times, starts, ends, perfect)

    @property
    def sizes(self) -> np.ndarray:
        """Rows per arrival time."""
        return self.ends - self.starts

    def before_each_row(self, at_group_start: np.ndarray) -> np.ndarray:
        """A per-group value (the watermark just before the group's arrival time)
        repeated for each row of the group."""
        return np.repeat(at_group_start, self.sizes)
