"""Bounded-memory percentile watermarks: exact while they fit, KLL sketches beyond (µs).

:class:`SketchPercentileWatermark` estimates ``W_p`` (definition in
:mod:`theory.watermarks.percentile`) with at most a fixed number of exact values and KLL
sketches (``datasketches``), and states a rank-error bound with every answer (its
docstring). :func:`sketch_percentile_values` replays a trace through it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import as_int, check_count, check_duration, check_timestamp, time_column
from theory.series import StepSeries
from theory.structures import OrderStatisticList
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, SECOND
from theory.watermarks.latch import Latch, latch_estimates
from theory.watermarks.percentile import check_p, element_columns, fallback_series

__all__ = [
    "SKETCH_LIMIT",
    "SketchEvaluation",
    "SketchPercentileWatermark",
    "sketch_percentile_values",
]

#: Event times the sketch stores as float64 must be exact there: |t| <= 2**53 µs (±285 y).
SKETCH_LIMIT: Final[int] = 1 << 53
_NEVER: Final[int] = MAX_TIMESTAMP + 1  # after every valid processing time


class _Frozen:
    """Sketched elements of the activation buckets ``lo_id..hi_id`` (processing time)."""

    __slots__ = ("active", "hi_id", "ins", "lo_id", "out")

    def __init__(self, lo_id: int, hi_id: int, ins: Any) -> None:
        self.lo_id = lo_id
        self.hi_id = hi_id
        self.ins = ins  # KLL of event times inserted into this bucket after it froze
        self.out: Any = None  # KLL of event times completed after it froze (lazy)
        self.active = int(ins.n)


class SketchPercentileWatermark(Latch):
    """Bounded-memory ``W_p``: exact while it fits, KLL sketches for the oldest elements.

    Elements are bucketed by activation time (``bucket_width`` µs of processing time).
    A bucket starts *young*: its active event times are kept exactly (a counter per
    bucket plus one :class:`OrderStatisticList` for all young elements), and completions
    remove them exactly. Whenever the young elements exceed ``exact_capacity`` the oldest
    young bucket *freezes* (and, if ``exact_age`` is set, every bucket that ended
    ``exact_age`` µs ago): its active event times go into a KLL sketch ``ins``
    (``datasketches.kll_doubles_sketch(k)``) and later completions of its elements into a
    second sketch ``out``; ``complete`` names the activation time to find the bucket. A
    bucket is dropped, exactly, once all its elements completed. Beyond ``max_sketches``
    frozen buckets the adjacent pair with the fewest sketched elements is merged (KLL
    merge). Memory is therefore at most ``exact_capacity`` exact values plus
    ``2 * max_sketches`` KLL sketches of O(k log(m / k)) retained items each (``m``: the
    elements the sketch saw), whatever the trace length.

    Query: ``n`` is known exactly; the estimated count of active event times ``<= y`` is
    ``exact(y) + sum_b (ins_b.rank(y) * ins_b.n - out_b.rank(y) * out_b.n)``, and integer
    bisection returns the smallest ``y`` at which it reaches ``k + 1`` with
    ``k = floor((1 - p)(n - 1))``.

    **Rank-error bound.** Let ``eps = kll_doubles_sketch.get_normalized_rank_error(k,
    False)`` (1.33 % for k = 200: datasketches' fit to the 99th percentile of the maximum
    rank error over all ranks of one sketch). A sketch ``s`` in estimation mode misstates
    its count at any ``y`` by at most ``eps * s.n``, and by nothing when ``y`` is below its
    minimum or at/above its maximum (KLL keeps both exactly); other sketches are exact.
    With ``E = sum of eps * s.n over the sketches in estimation mode whose [min, max]
    contains the answer v`` (:attr:`error_bound`, set by each evaluation), the estimate
    is within ``E`` of the true count at ``v`` and ``v - 1``, so the returned ``v``
    satisfies ``#{a in A : a < v} <= k + E`` and ``#{a in A : a <= v} >= k + 1 - E``:
    ``sorted(A)[max(0, k - floor(E))] <= v <= sorted(A)[min(n - 1, k + floor(E))]``, with
    the confidence of the sketches (99 % each). ``E = 0``, an exact answer, while nothing
    is sketched. ``E`` scales with the *sketched* elements of the live frozen buckets
    (completed ones included), not with ``n``: a straggler keeps its whole bucket's mass
    in ``E``. Size ``exact_capacity`` above the usual active set so that only backlogs
    are sketched.

    All updates carry a processing time ``at`` that must not decrease (``ValueError``
    naming it otherwise); the sketch needs ``|event_time| <= 2**53`` µs (float64-exact).
    """

    def __init__(
        self,
        p: float,
        *,
        k: int = 200,
        bucket_width: int = SECOND,
        exact_age: int | None = None,
        exact_capacity: int = 100_000,
        max_sketches: int = 64,
        initial: int = MIN_TIMESTAMP,
    ) -> None:
        from datasketches import kll_doubles_sketch

        super().__init__(initial)
        self._kll = kll_doubles_sketch
        self._p = check_p(p)
        self._q = 1.0 - self._p
        self._k = _check_k(k)
        self._eps = float(kll_doubles_sketch.get_normalized_rank_error(self._k, False))
        self._width = check_duration(bucket_width, "bucket_width", allow_zero=False)
        self._exact_age = None if exact_age is None else check_duration(exact_age, "exact_age")
        self._capacity = check_count(exact_capacity, "exact_capacity")
        self._max_sketches = check_count(max_sketches, "max_sketches", minimum=1)
        self.error_bound = 0.0
        self._clock: int | None = None
        self._exact = OrderStatisticList()
        self._young: dict[int, dict[int, int]] = {}  # bucket id -> event time -> count
        self._young_n: dict[int, int] = {}  # bucket id -> active elements
        self._next_freeze: int = _NEVER
        self._frozen: list[_Frozen] = []
        self._frozen_lo: list[int] = []  # lo_id of each frozen bucket, for bisect
        self._frozen_active = 0

    # ------------------------------------------------------------------ state

    @property
    def p(self) -> float:
        """The percentile in (0, 1]."""
        return self._p

    def __len__(self) -> int:
        """How many elements are active (exact count)."""
        return len(self._exact) + self._frozen_active

    @property
    def latched(self) -> int:
        """The latched watermark after the last :meth:`current` (µs)."""
        return self._value

    @property
    def sketches(self) -> int:
        """How many frozen (sketched) buckets are live."""
        return len(self._frozen)

    @property
    def exact_size(self) -> int:
        """How many active elements are held exactly."""
        return len(self._exact)

    def memory_bytes(self) -> int:
        """Approximate footprint: serialized sketch sizes plus ~100 B per exact value."""
        total = 100 * len(self._exact)
        for f in self._frozen:
            total += len(f.ins.serialize())
            if f.out is not None:
                total += len(f.out.serialize())
        return total

    def rank_error_bound(self, value: int | None = None) -> float:
        """``E`` of the class docstring: for the answer ``value``, or for any value."""
        e = 0.0
        fv = None if value is None else float(value)
        for f in self._frozen:
            ins = f.ins
            if fv is not None and not ins.get_min_value() <= fv <= ins.get_max_value():
                continue  # ranks at fv and fv - 1 are exact: 0 below the min, n at the max
            if ins.is_estimation_mode():
                e += self._eps * ins.n
            if f.out is not None and f.out.is_estimation_mode():
                e += self._eps * f.out.n
        return e

    # ------------------------------------------------------------------ updates

    def _check_clock(self, at: int, name: str) -> int:
        t = at
        if type(t) is not int or not MIN_TIMESTAMP <= t <= MAX_TIMESTAMP:
            t = check_timestamp(t, name)
        if self._clock is not None and t < self._clock:
            raise ValueError(
                f"{name}={t} µs is before the previous update at {self._clock} µs: "
                "updates must come in processing-time order"
            )
        return t

    @staticmethod
    def _check_value(event_time: int) -> int:
        e = event_time
        if type(e) is not int or not -SKETCH_LIMIT <= e <= SKETCH_LIMIT:
            e = check_timestamp(e, "event_time")
            if not -SKETCH_LIMIT <= e <= SKETCH_LIMIT:
                raise ValueError(
                    f"event_time={e} µs is outside ±2**53 µs, which the sketch cannot hold "
                    "exactly"
                )
        return e

    def activate(self, event_time: int, at: int) -> None:
        """An element with ``event_time`` becomes active at processing time ``at`` (µs)."""
        e = self._check_value(event_time)
        t = self._check_clock(at, "at")
        self._clock = t
        b = t // self._width
        frozen = self._frozen
        if frozen and b <= frozen[-1].hi_id:  # the current bucket was frozen (capacity)
            f = frozen[-1]
            f.ins.update(float(e))
            f.active += 1
            self._frozen_active += 1
        else:
            bucket = self._young.get(b)
            if bucket is None:
                bucket = self._young[b] = {}
                self._young_n[b] = 0
                if len(self._young) == 1:
                    self._next_freeze = self._freeze_time(b)
            bucket[e] = bucket.get(e, 0) + 1
            self._young_n[b] += 1
            self._exact.add(e)
            if len(self._exact) > self._capacity:
                while len(self._exact) > self._capacity and self._young:
                    self._freeze_oldest()
        if t >= self._next_freeze:
            self._age(t)

    def complete(self, event_time: int, activated_at: int, at: int) -> None:
        """The element with ``event_time``, activated at ``activated_at``, completes at
        processing time ``at`` (µs). ``ValueError`` (nothing changed) if ``at`` is before
        ``activated_at`` or the previous update, or no such element can be active. For a
        sketched element only its bucket and the bucket's value range can be checked."""
        e = self._check_value(event_time)
        a = activated_at
        if type(a) is not int or not MIN_TIMESTAMP <= a <= MAX_TIMESTAMP:
            a = check_timestamp(a, "activated_at")
        if type(at) is int and at < a:
            raise ValueError(f"completion at={at} µs is before activation activated_at={a} µs")
        t = self._check_clock(at, "at")
        if t < a:
            raise ValueError(f"completion at={t} µs is before activation activated_at={a} µs")
        b = a // self._width
        bucket = self._young.get(b)
        if bucket is not None:
            self._complete_young(b, bucket, e, a, t)
        else:
            self._complete_frozen(b, e, a, t)
        if t >= self._next_freeze:
            self._age(t)

    def _complete_young(self, b: int, bucket: dict[int, int], e: int, a: int, t: int) -> None:
        """Complete an exact element of young bucket ``b`` (checked: it must be there)."""
        left = bucket.get(e, 0)
        if left == 0:
            raise ValueError(f"no active element with event_time={e} µs was activated at {a} µs")
        self._clock = t
        if left == 1:
            del bucket[e]
        else:
            bucket[e] = left - 1
        self._exact.remove(e)
        n = self._young_n[b] - 1
        if n:
            self._young_n[b] = n
            return
        oldest = next(iter(self._young)) == b
        del self._young[b], self._young_n[b]
        if oldest:
            self._next_freeze = (
                self._freeze_time(next(iter(self._young))) if self._young else _NEVER
            )

    def _complete_frozen(self, b: int, e: int, a: int, t: int) -> None:
        """Complete a sketched element of bucket ``b``: only the bucket and its value range
        can be checked; the completion goes into the bucket's ``out`` sketch."""
        j = bisect_right(self._frozen_lo, b) - 1
        f = self._frozen[j] if j >= 0 else None
        if f is None or b > f.hi_id:
            raise ValueError(f"no element activated at {a} µs is active")
        fe = float(e)
        if not f.ins.get_min_value() <= fe <= f.ins.get_max_value():
            raise ValueError(f"no active element with event_time={e} µs was activated at {a} µs")
        self._clock = t
        if f.out is None:
            f.out = self._kll(self._k)
        f.out.update(fe)
        f.active -= 1
        self._frozen_active -= 1
        if f.active == 0:
            del self._frozen[j], self._frozen_lo[j]

    def advance_to(self, at: int) -> None:
        """Processing time reached ``at`` (µs): freeze buckets that aged out."""
        t = self._check_clock(at, "at")
        self._clock = t
        if t >= self._next_freeze:
            self._age(t)

    def _freeze_time(self, b: int) -> int:
        """When young bucket ``b`` freezes by age: its end plus ``exact_age`` (or never)."""
        if self._exact_age is None:
            return _NEVER
        return (b + 1) * self._width + self._exact_age

    def _age(self, t: int) -> None:
        while self._young and t >= self._next_freeze:
            self._freeze_oldest()

    def _freeze_oldest(self) -> None:
        b = next(iter(self._young))
        bucket = self._young.pop(b)
        del self._young_n[b]
        values = np.fromiter(bucket.keys(), dtype=np.int64, count=len(bucket))
        counts = np.fromiter(bucket.values(), dtype=np.int64, count=len(bucket))
        remove = self._exact.remove
        for v, cnt in bucket.items():
            for _ in range(cnt):
                remove(v)
        ins = self._kll(self._k)
        ins.update(np.repeat(values, counts).astype(np.float64))
        f = _Frozen(b, b, ins)
        self._frozen.append(f)
        self._frozen_lo.append(b)
        self._frozen_active += f.active
        self._next_freeze = (
            self._freeze_time(next(iter(self._young))) if self._young else _NEVER
        )
        if len(self._frozen) > self._max_sketches:
            self._merge_smallest_pair()

    def _merge_smallest_pair(self) -> None:
        """Merge the adjacent frozen buckets with the fewest sketched elements (in + out):
        sizes stay balanced, as in a log-structured merge."""
        fr = self._frozen

        def weight(f: _Frozen) -> int:
            return int(f.ins.n) + (int(f.out.n) if f.out is not None else 0)

        j = min(range(len(fr) - 1), key=lambda i: weight(fr[i]) + weight(fr[i + 1]))
        left, right = fr[j], fr[j + 1]
        left.ins.merge(right.ins)
        if right.out is not None:
            if left.out is None:
                left.out = self._kll(self._k)
            left.out.merge(right.out)
        left.hi_id = right.hi_id
        left.active += right.active
        del fr[j + 1], self._frozen_lo[j + 1]

    # ------------------------------------------------------------------ queries

    def _estimate_le(self, y: int, exact_le: Callable[[int], int]) -> float:
        fy = float(y)
        total = float(exact_le(y))
        for f in self._frozen:
            total += f.ins.get_rank(fy, True) * f.ins.n
            if f.out is not None:
                total -= f.out.get_rank(fy, True) * f.out.n
        return total

    def computed(self) -> int | None:
        """The estimated order statistic (not latched), or None when nothing is active.

        Sets :attr:`error_bound` to the ``E`` that bounds it (class docstring).
        """
        n = len(self)
        if n == 0:
            self.error_bound = 0.0
            return None
        k = int((n - 1) * self._q)
        if not self._frozen:
            self.error_bound = 0.0
            return self._exact.kth(k)
        lo = min(int(f.ins.get_min_value()) for f in self._frozen)
        hi = max(int(f.ins.get_max_value()) for f in self._frozen)
        if self._exact:
            lo = min(lo, self._exact.min())
            hi = max(hi, self._exact.max())
        lo -= 1
        target = k + 1 - 1e-6  # ranks come back as floats; counts are integers
        exact_le = self._exact.counter()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._estimate_le(mid, exact_le) >= target:
                hi = mid
            else:
                lo = mid
        self.error_bound = self.rank_error_bound(hi)
        return hi

    def current(self, input_watermark: int | None = None, at: int | None = None) -> int:
        """Evaluate (after :meth:`advance_to` when ``at`` is given): latch the estimate, or
        ``input_watermark`` when nothing is active; return the latched watermark (µs)."""
        if at is not None:
            self.advance_to(at)
        return self._latch_estimate(self.computed(), input_watermark)


def _check_k(k: object) -> int:
    """The KLL accuracy parameter: an int in [8, 65535] (datasketches' range)."""
    v = as_int(k, "k")
    if not 8 <= v <= 65535:
        raise ValueError(f"k must be an int in [8, 65535], got {k!r}")
    return v


@dataclass(frozen=True)
class SketchEvaluation:
    """A sketch replayed over a trace: at each of ``times``, the computed estimate
    (``raw``, the fallback where nothing is active), ``bound`` (its ``E``), ``active``
    (``n(t)``), and the latched ``curve``; plus the final sketch and peak memory."""

    times: np.ndarray
    raw: np.ndarray
    bound: np.ndarray
    active: np.ndarray
    curve: StepSeries
    sketch: SketchPercentileWatermark
    peak_memory_bytes: int


def sketch_percentile_values(
    event_time: ArrayLike,
    activation: ArrayLike,
    completion: ArrayLike,
    p: float,
    times: ArrayLike,
    fallback: StepSeries | None = None,
    **params: Any,
) -> SketchEvaluation:
    """Replay a trace through :class:`SketchPercentileWatermark` (``params`` go to it) and
    evaluate at each of ``times``, which must be sorted (``ValueError`` naming the first
    index out of order). Updates at a time come before an evaluation at that time;
    activations before completions, so zero-length elements are never seen active."""
    check_p(p)
    e, a, c = element_columns(event_time, activation, completion)
    fb = fallback_series(fallback)
    ts = _sorted_times(times)
    params.setdefault("initial", fb.initial)
    sk = SketchPercentileWatermark(p, **params)
    ev_t, ev_e, ev_a, ev_done = _updates(e, a, c)
    raw = np.empty(ts.size, dtype=np.int64)
    bound = np.zeros(ts.size, dtype=np.float64)
    active = np.empty(ts.size, dtype=np.int64)
    fb_at = fb.at(ts) if ts.size else ts
    peak = 0
    i = 0
    for j, t in enumerate(ts.tolist()):
        while i < len(ev_t) and ev_t[i] <= t:
            if ev_done[i]:
                sk.complete(ev_e[i], ev_a[i], ev_t[i])
            else:
                sk.activate(ev_e[i], ev_t[i])
            i += 1
        sk.advance_to(t)
        v = sk.computed()
        active[j] = len(sk)
        raw[j] = int(fb_at[j]) if v is None else v
        bound[j] = sk.error_bound
        peak = max(peak, sk.memory_bytes())
    latched, _ = latch_estimates(raw, active > 0, fb.initial)
    curve = StepSeries.from_events(ts, latched, fb.initial).compressed()
    return SketchEvaluation(ts, raw, bound, active, curve, sk, peak)


def _sorted_times(times: ArrayLike) -> np.ndarray:
    """The evaluation times (µs), which must be sorted: ``ValueError`` names the first
    index out of order."""
    ts = time_column(times, "times")
    if ts.size > 1 and bool(np.any(ts[1:] < ts[:-1])):
        i = int(np.argmax(ts[1:] < ts[:-1])) + 1
        raise ValueError(
            f"times must be sorted: times[{i}]={int(ts[i])} µs is before "
            f"times[{i - 1}]={int(ts[i - 1])} µs"
        )
    return ts


def _updates(
    e: np.ndarray, a: np.ndarray, c: np.ndarray
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The 2n updates in time order, activations first at a time: their times, event
    times, activation times, and whether each is a completion (1) or an activation (0)."""
    n = e.size
    when = np.concatenate((a, c))
    kind = np.concatenate((np.zeros(n, np.int8), np.ones(n, np.int8)))
    order = np.lexsort((kind, when))
    row = order % n if n else order
    return when[order].tolist(), e[row].tolist(), a[row].tolist(), kind[order].tolist()
