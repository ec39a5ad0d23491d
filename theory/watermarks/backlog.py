"""The source backlog of one arrival-time bucket and its percentile values (µs).

The percentile watermark at the source (:func:`theory.watermarks.percentile_source.
percentile_source_curve`) is an order statistic of the *backlog*
``A(t) = {rows with event_time <= t < arrival_time}``: events that happened but have not
arrived. For a bucket with arrival range ``[lo, hi)`` (:mod:`theory.watermarks.buckets`),
``A(t)`` at ``t`` in the range holds the bucket's rows not yet arrived and the *replicas*,
rows arriving in later buckets, that happened by ``t``. :class:`SourceBacklog` evaluates
it where :func:`theory.watermarks.percentile_sweep.percentile_details` evaluates a source-level
trace: at every arrival time of the bucket and at every activation (event) time of a
backlog row inside ``[lo, hi)``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import as_int, int_column, same_length
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.buckets import SortedBucket
from theory.watermarks.percentile import check_p
from theory.wavelet import kth_in_suffix

__all__ = ["SourceBacklog"]


class SourceBacklog:
    """The backlog of one bucket at its evaluation times.

    ``times`` are the sorted distinct evaluation times, ``is_arrival`` marks the
    bucket's arrival times among them (``arrival_pos`` their positions), ``counts`` the
    backlog size ``|A(t)|`` there, ``arrived`` the bucket's rows arrived by then (the
    backlog is the smallest ``counts`` values of the rows after those and the replicas:
    any other such row happens later) and ``perfect`` the perfect watermark there (the
    fallback where the backlog is empty).
    """

    def __init__(
        self,
        bucket: SortedBucket,
        replica_arrival_time: ArrayLike,
        replica_event_time: ArrayLike,
        *,
        lo: int = MIN_TIMESTAMP,
        hi: int = MAX_TIMESTAMP + 1,
    ) -> None:
        ra = int_column(replica_arrival_time, "replica_arrival_time")
        re_ = int_column(replica_event_time, "replica_event_time")
        same_length("replica_arrival_time", ra.size, replica_event_time=re_)
        # a row arriving at or before its event time is never in the backlog
        live = bucket.event_time < bucket.arrival_time
        act = np.concatenate((bucket.event_time[live], re_[re_ < ra]))
        act.sort()
        below = int(np.searchsorted(act, as_int(lo, "lo"), side="left"))
        inside = act[below : int(np.searchsorted(act, as_int(hi, "hi"), side="left"))]
        merged, order, from_t, heads = _merge(bucket.times, inside)
        self.times: np.ndarray = merged[heads]
        self.is_arrival: np.ndarray = from_t[heads]
        self.arrival_pos: np.ndarray = np.flatnonzero(self.is_arrival)
        self.arrived: np.ndarray = _rows_arrived(order, from_t, heads, bucket.ends)
        done = np.concatenate(([0], np.cumsum(live, dtype=np.int64)))
        self.counts: np.ndarray = below + _activations_by(from_t, heads) - done[self.arrived]
        # the perfect watermark never passes the clock (theory.watermarks.perfect)
        self.perfect: np.ndarray = np.minimum(bucket.perfect[self.arrived], self.times)
        self._values = np.concatenate((bucket.event_time, re_))
        self._ranked: tuple[np.ndarray, np.ndarray] | None = None

    def values(self, p: float, *, hold: bool = False) -> np.ndarray:
        """Unlatched ``W_p`` at :attr:`times`: the backlog's order statistic of 0-based
        rank ``floor((n - 1) * (1 - p))`` (float64, as :func:`theory.watermarks.
        percentile.quantile_rank`), or where it is empty the perfect watermark (``hold``:
        ``MIN_TIMESTAMP``, so that the latched watermark holds)."""
        q = 1.0 - check_p(p)
        n = self.counts
        out = np.full(n.size, MIN_TIMESTAMP, dtype=np.int64) if hold else self.perfect.copy()
        busy = np.flatnonzero(n > 0)
        if busy.size:
            k = np.floor((n[busy] - 1).astype(np.float64) * q).astype(np.int64)
            order, ranks = self._ranks()
            kth = kth_in_suffix(ranks, self.arrived[busy], k + 1)
            out[busy] = self._values[order[kth]]
        return out

    def _ranks(self) -> tuple[np.ndarray, np.ndarray]:
        """The stable sort order of the rows' and replicas' event times, and each one's
        rank (computed once, shared by every ``p``)."""
        if self._ranked is None:
            order = np.argsort(self._values, kind="stable")
            ranks = np.empty(self._values.size, dtype=np.int64)
            ranks[order] = np.arange(self._values.size, dtype=np.int64)
            self._ranked = (order, ranks)
        return self._ranked


def _merge(times: np.ndarray, inside: np.ndarray) -> tuple[np.ndarray, ...]:
    """Merge the distinct arrival times with the sorted activation times: a stable sort
    of the two runs (arrival times first among equals). Returns the merged times, the
    sort ``order``, whether each merged entry is an arrival time, and the first entry of
    each distinct time (``heads``)."""
    both = np.concatenate((times, inside))
    order = np.argsort(both, kind="stable")
    merged = both[order]
    first = np.ones(merged.size, dtype=bool)
    np.not_equal(merged[1:], merged[:-1], out=first[1:])
    return merged, order, order < times.size, np.flatnonzero(first)


def _rows_arrived(
    order: np.ndarray, from_t: np.ndarray, heads: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """The bucket's rows arrived by each evaluation time: the group end of the latest
    arrival time at or before it (0 before the first)."""
    latest = np.maximum.accumulate(np.where(from_t, order, -1)) if order.size else order
    return np.where(latest >= 0, np.append(ends, 0)[latest], 0)[heads]


def _activations_by(from_t: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Activations inside the range at or before each evaluation time (up to the last
    of its equals)."""
    tails = np.append(heads[1:] - 1, from_t.size - 1) if heads.size else heads
    return np.cumsum(~from_t, dtype=np.int64)[tails]
