"""Watermark analytics of a trace on Spark, exact: the same numbers as :mod:`theory`.

Everything here is computed from a trace DataFrame (columns of :mod:`theory.data.traces`;
times are bigint µs) and agrees exactly with theory's vectorised numpy results on the
same rows; ``tests/spark_backend/test_analytics.py`` shows it.

How it scales
-------------
:func:`prepare` cuts processing time into *buckets*: contiguous arrival-time ranges with
about the same number of rows (bounds from quantiles of a sample of arrival times; any
bounds give the same results). Rows are shuffled once so that each bucket is one Spark
partition, and persisted. Every scan over time (suffix minimum, prefix maximum, latching)
is then a *parallel scan*: a tiny per-bucket summary is combined on the driver into
per-bucket carries, which go back (in the task closure) to vectorised numpy scans of each
bucket (sorted by arrival time in numpy, in ``mapInArrow``). No window function ever sees
all rows in one partition. :func:`analyze` runs one such pass and persists its output:
the perfect and bounded curves (their carries come from the summary), the late counts,
and the percentile curves within each bucket plus what their carries need (combined on
the driver and applied when the curves are read).

Strategies (source watermarks; a watermark ``W`` says "no more data with event time < W")
-----------------------------------------------------------------------------------------
Curves have a step per unique arrival time ``t``: the value after every element
arriving at ``t`` was read, as :mod:`theory.watermarks.sources` defines them (percentile curves also
step at event times, see below).

- ``perfect``: ``W(t) = min event_time of the elements arriving after t`` (MAX_TIMESTAMP
  once none is left) = :func:`theory.watermarks.sources.perfect_curve`.
- ``bounded:<duration>``: ``max event_time seen - bound`` (>= MIN_TIMESTAMP) =
  :func:`theory.watermarks.sources.bounded_out_of_orderness_curve`.
- ``percentile:<p>``, p in (0, 1]: the percentile watermark of DESIGN.md at the source,
  exactly :func:`theory.watermarks.sources.percentile_source_curve`: theory's
  :func:`~theory.watermarks.percentile.percentile_curve` with activation = event time, completion =
  ``max(arrival time, event time)`` and the perfect curve as fallback. The active set is the
  *backlog* ``A(t) = {elements with event_time <= t < arrival_time}`` (events that
  happened but have not arrived; rows arriving before their event time never belong to
  it). ``W_p(t)`` is the order statistic of ``A(t)`` of 0-based rank
  ``floor((n - 1) * (1 - p))`` (float64; ``numpy.quantile(A, 1 - p, method="lower")``),
  or the perfect watermark where ``A(t)`` is empty, latched (running maximum). It is
  evaluated at every arrival time and at every activation (event) time, so its curve has
  those extra steps. ``p = 1`` equals the perfect curve from the first arrival on.
  ``percentile:<p>:hold`` has no fallback (theory's ``fallback=None``): it holds while
  the backlog is empty. Exact, no sketch: per bucket a wavelet-matrix order-statistics
  scan in numpy.

An element is *late* under a strategy when ``event_time < W.before(arrival_time)``, the
watermark just before it arrived (:meth:`theory.series.StepSeries.before`).

Windows (:meth:`WatermarkAnalysis.windows`): fixed windows ``[start, end)`` per key, fired
once by the watermark (Beam's ``AfterWatermark``, no allowed lateness). A window fires at
the first curve step ``t`` with ``W(t) > end - 1``; with ``finish=True`` (the default, as
:func:`theory.pipeline.simulator.simulate` does for a bounded source) the watermark also jumps to
MAX_TIMESTAMP at the last arrival, so every window fires. Its first pane holds the
window's elements arriving at or before ``t``; completeness = first-pane count / all the
window's elements (0 if it never fires); latency = ``t - end`` (µs). These are the
numbers of :func:`theory.experiments.tradeoff` / :func:`theory.pipeline.metrics.strategy_metrics`.

Skew (:func:`holdback`): under the static-partitions perfect watermark each partition
``p`` (or key) has the watermark ``W_p(t)`` = min event time of its elements arriving
after ``t`` (= its next unread event time when its log is time-ordered), and
``W(t) = min_p W_p(t)``. The partition *holding the watermark back* at ``t`` is the
argmin (ties: the smallest id). Over ``[first arrival, last arrival)`` it is held for
the total processing time reported, in runs.

Small results come back as pandas DataFrames (µs, counts); curves as Spark DataFrames
(lazy) with :meth:`WatermarkAnalysis.curve` / :meth:`WatermarkAnalysis.sample` to collect.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel, TaskContext
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from theory.columns import check_duration
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.spec import make_source_watermark

__all__ = [
    "ArrivalLayout",
    "Strategy",
    "WatermarkAnalysis",
    "analyze",
    "holdback",
    "parse_strategy",
    "percentile_curve_numpy",
    "prepare",
]

_ROWS_PER_BUCKET: Final[int] = 1_500_000
_MAX_BUCKETS: Final[int] = 512


# =========================================================================== strategies


@dataclass(frozen=True)
class Strategy:
    """A parsed strategy spec: ``kind`` is perfect, bounded or percentile.

    ``bound`` is µs (bounded); ``p`` and ``fallback`` (``"perfect"`` or ``"hold"``) are
    the percentile's.
    """

    name: str
    kind: str
    bound: int = 0
    p: float = 1.0
    fallback: str = "perfect"


def parse_strategy(spec: str | Strategy) -> Strategy:
    """``perfect``, ``bounded:<duration>`` (``10s``, ``2m``, µs), ``percentile:<p>`` or
    ``percentile:<p>:hold`` (no fallback: the watermark holds while the backlog is empty):
    the specs of :func:`theory.watermarks.sources.make_source_watermark` that Spark computes, parsed
    by it, so a spec means the same on both paths. ValueError names a bad spec.
    """
    if isinstance(spec, Strategy):
        return spec
    parsed = make_source_watermark(spec)  # type checks and the spec's own errors
    text = spec.strip()
    if parsed.kind == "perfect":
        return Strategy(text, "perfect")
    if parsed.kind == "bounded" and parsed.bound is not None:
        return Strategy(text, "bounded", bound=check_duration(parsed.bound, "bound"))
    if parsed.kind == "percentile" and parsed.p is not None:
        fallback = "hold" if parsed.hold else "perfect"
        return Strategy(text, "percentile", p=parsed.p, fallback=fallback)
    raise ValueError(
        f"bad strategy {spec!r}: Spark computes 'perfect', 'bounded:<duration>' and "
        "'percentile:<p>[:hold]' only"
    )


# =========================================================================== numpy kernels


def _groups(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique times of a sorted array with the [start, end) row range of each."""
    if a.size == 0:
        e = np.empty(0, dtype=np.int64)
        return a, e, e
    brk = np.flatnonzero(a[1:] != a[:-1]) + 1
    starts = np.concatenate(([0], brk))
    ends = np.concatenate((brk, [a.size]))
    return a[starts], starts, ends


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values (a sort and a dedupe; numpy's unique hashes, slowly)."""
    s = np.sort(x)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _minus_clamped(x: np.ndarray, d: int) -> np.ndarray:
    """``max(x - d, MIN_TIMESTAMP)`` for x in [MIN, MAX] without overflow."""
    if d == 0:
        return x.copy()
    if MIN_TIMESTAMP + d > MAX_TIMESTAMP:
        return np.full(x.shape, MIN_TIMESTAMP, dtype=np.int64)
    return np.maximum(x, np.int64(MIN_TIMESTAMP + d)) - np.int64(d)


def _kth_in_suffix(ranks: np.ndarray, pos: np.ndarray, k: np.ndarray) -> np.ndarray:
    """For each query ``i``: the ``k[i]``-th smallest (1-based) of ``ranks[pos[i]:]``.

    ``ranks`` is a permutation of ``0..m-1``; ``1 <= k[i] <= m - pos[i]``. A wavelet
    matrix descended level by level for all queries at once: O((m + q) log m) numpy work
    and O(m + q) memory (int32 while m < 2**31). Runs of equal consecutive queries are
    answered once (the percentile's evaluation times often repeat ``(pos, k)``).
    """
    m = ranks.size
    q = pos.size
    if m == 0 or q == 0:
        return np.zeros(q, dtype=np.int64)
    keep = np.empty(q, dtype=bool)
    keep[0] = True
    np.not_equal(pos[1:], pos[:-1], out=keep[1:])
    keep[1:] |= k[1:] != k[:-1]
    it = np.int32 if m < 2**31 - 1 else np.int64
    s: np.ndarray = pos[keep].astype(it)
    kk: np.ndarray = k[keep].astype(it)
    qq = s.size
    e: np.ndarray = np.full(qq, m, dtype=it)
    levels = max(1, int(m - 1).bit_length())
    cur: np.ndarray = ranks.astype(it)
    nxt: np.ndarray = np.empty_like(cur)
    ans: np.ndarray = np.zeros(qq, dtype=it)
    z: np.ndarray = np.zeros(m + 1, dtype=it)  # ones among the first i
    bit: np.ndarray = np.empty(m, dtype=it)
    bb: np.ndarray = np.empty(m, dtype=bool)
    nb: np.ndarray = np.empty(m, dtype=bool)
    one: np.ndarray = np.empty(qq, dtype=bool)
    zs: np.ndarray = np.empty(qq, dtype=it)
    ze: np.ndarray = np.empty(qq, dtype=it)
    zeros: np.ndarray = np.empty(qq, dtype=it)
    for lvl in range(levels - 1, -1, -1):  # in place: no temporaries in the loop
        np.bitwise_and(cur, it(1 << lvl), out=bit)
        np.not_equal(bit, 0, out=bb)
        np.cumsum(bb, out=z[1:])
        nz = m - int(z[m])  # zeros at this level
        np.take(z, s, out=zs)
        np.take(z, e, out=ze)
        np.subtract(e, s, out=zeros)  # zeros in [s, e) = (e - s) - (ze - zs)
        zeros -= ze
        zeros += zs
        np.greater(kk, zeros, out=one)
        np.subtract(kk, zeros, out=kk, where=one)
        np.bitwise_or(ans, it(1 << lvl), out=ans, where=one)
        # zero branch: [s - zs, e - ze); one branch: [nz + zs, nz + ze)
        s -= zs
        e -= ze
        np.add(zs, it(nz), out=s, where=one)
        np.add(ze, it(nz), out=e, where=one)
        np.logical_not(bb, out=nb)
        np.compress(nb, cur, out=nxt[:nz])
        np.compress(bb, cur, out=nxt[nz:])
        cur, nxt = nxt, cur
    return ans.astype(np.int64)[np.cumsum(keep) - 1]


@dataclass
class _Carry:
    """What one bucket needs from the others (all µs; sentinels for "none")."""

    perfect_after: int = MAX_TIMESTAMP  # min event time arriving in later buckets
    max_before: int = MIN_TIMESTAMP  # max event time arriving in earlier buckets
    lo: int = MIN_TIMESTAMP  # the bucket's arrival range [lo, hi)
    hi: int = MAX_TIMESTAMP + 1
    latched: dict[int, int] = field(default_factory=dict)  # percentile carry per strategy


@dataclass
class _BucketResult:
    """One bucket's curves: values at the arrival times ``times`` for every strategy;
    percentile values also at the activation times ``extra`` (not arrival times);
    ``late`` and ``local_max`` per strategy; percentile carry candidates
    ``(event times, value before arrival)`` per strategy."""

    times: np.ndarray
    values: list[np.ndarray]
    extra: np.ndarray
    extra_values: dict[int, np.ndarray]
    late: list[int]
    local_max: list[int]
    cands: dict[int, tuple[np.ndarray, np.ndarray]]


def _bucket_curves(
    a: np.ndarray,
    e: np.ndarray,
    rep_a: np.ndarray,
    rep_e: np.ndarray,
    strategies: Sequence[Strategy],
    carry: _Carry,
) -> _BucketResult:
    """Curves of one bucket (see :class:`_BucketResult`).

    ``a``/``e`` are the bucket's rows sorted by arrival time; ``rep_*`` the backlog
    replicas (rows arriving in later buckets that happened before this bucket's end).
    Percentile values are final when ``carry.latched`` holds the strategy's carry; else
    they are latched from MIN within the bucket, and the candidates list the rows the
    carry could make late.
    """
    times, starts, ends = _groups(a)
    m = a.size
    sizes = ends - starts
    values: list[np.ndarray] = []
    late: list[int] = []
    local_max: list[int] = []
    cands: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    extra_values: dict[int, np.ndarray] = {}
    suffix = np.empty(m + 1, dtype=np.int64)  # min event time of rows i.. and later buckets
    suffix[m] = carry.perfect_after
    if m:
        suffix[:m] = np.minimum.accumulate(e[::-1])[::-1]
        np.minimum(suffix[:m], carry.perfect_after, out=suffix[:m])
    backlog: _Backlog | None = None
    extra = np.empty(0, dtype=np.int64)
    for i, s in enumerate(strategies):
        if s.kind == "perfect":
            values.append(suffix[ends])
            before = np.repeat(suffix[starts], sizes)
            late.append(int(np.count_nonzero(e < before)))
            local_max.append(MIN_TIMESTAMP)
        elif s.kind == "bounded":
            cm = np.empty(m + 1, dtype=np.int64)
            cm[0] = carry.max_before
            if m:
                np.maximum.accumulate(np.maximum(e, carry.max_before), out=cm[1:])
            values.append(_minus_clamped(cm[ends], s.bound))
            before = np.repeat(_minus_clamped(cm[starts], s.bound), sizes)
            late.append(int(np.count_nonzero(e < before)))
            local_max.append(MIN_TIMESTAMP)
        else:
            if backlog is None:
                backlog = _Backlog(a, e, rep_a, rep_e, times, ends, suffix, carry)
                extra = backlog.times[~backlog.is_arrival]
            raw = backlog.raw(s)
            c = carry.latched.get(i)
            latched = raw.copy()
            if latched.size:
                np.maximum.accumulate(latched, out=latched)
                if c is not None:
                    np.maximum(latched, c, out=latched)
            values.append(latched[backlog.is_arrival])
            extra_values[i] = latched[~backlog.is_arrival]
            # the value just before each arrival: the last evaluation strictly before it
            at = backlog.arrival_pos - 1
            prev = np.where(at >= 0, latched[np.maximum(at, 0)], MIN_TIMESTAMP if c is None else c)
            if c is not None and latched.size:
                prev = np.maximum(prev, c)
            before = np.repeat(prev, sizes)
            is_late = e < before
            late.append(int(np.count_nonzero(is_late)))
            local_max.append(int(latched[-1]) if latched.size else MIN_TIMESTAMP)
            if c is None and carry.lo > MIN_TIMESTAMP:
                cand = ~is_late & (e < carry.lo)
                cands[i] = (e[cand], before[cand])
    return _BucketResult(times, values, extra, extra_values, late, local_max, cands)


class _Backlog:
    """The backlog ``A(t) = {e <= t < a}`` of one bucket at its evaluation times: the
    arrival times of its rows and the activation (event) times inside ``[lo, hi)``,
    as :func:`theory.watermarks.percentile.percentile_details` evaluates a source-level trace."""

    def __init__(
        self,
        a: np.ndarray,
        e: np.ndarray,
        rep_a: np.ndarray,
        rep_e: np.ndarray,
        times: np.ndarray,
        ends: np.ndarray,
        perfect_suffix: np.ndarray,
        carry: _Carry,
    ) -> None:
        live = e < a
        rep_live = rep_e < rep_a
        act = np.concatenate((e[live], rep_e[rep_live]))
        act.sort()
        below = int(np.searchsorted(act, carry.lo, side="left"))
        inside = act[below : int(np.searchsorted(act, carry.hi, side="left"))]
        # merge the arrival times (sorted, distinct) with the activations inside (sorted):
        # a stable sort of two runs, arrival times first among equals
        both = np.concatenate((times, inside))
        order = np.argsort(both, kind="stable")
        merged = both[order]
        from_t = order < times.size
        first = np.ones(merged.size, dtype=bool)
        np.not_equal(merged[1:], merged[:-1], out=first[1:])
        heads = np.flatnonzero(first)
        self.times = merged[heads]
        self.is_arrival = from_t[heads]
        self.arrival_pos = np.flatnonzero(self.is_arrival)  # where each of ``times`` is
        # rows of this bucket arrived by each evaluation time: the ends of the latest
        # arrival time at or before it
        latest = np.maximum.accumulate(np.where(from_t, order, -1)) if merged.size else order
        arrived = np.where(latest >= 0, np.append(ends, 0)[latest], 0)[heads]
        # activations at or before each evaluation time: those below lo, plus the inside
        # ones up to the last of its equals
        tails = np.append(heads[1:] - 1, merged.size - 1) if heads.size else heads
        acts = below + np.cumsum(~from_t, dtype=np.int64)[tails]
        # minus the live rows of this bucket already arrived
        done = np.concatenate(([0], np.cumsum(live, dtype=np.int64)))
        self.n = acts - done[arrived]
        self.pos = arrived
        # the perfect watermark at each evaluation time (the fallback): rows after it
        self.perfect = perfect_suffix[arrived]
        vals = np.concatenate((e, rep_e))
        self.order = np.argsort(vals, kind="stable")
        self.vals = vals
        self._ranks: np.ndarray | None = None

    def raw(self, s: Strategy) -> np.ndarray:
        """Unlatched values: the order statistic of rank ``floor((n - 1) * (1 - p))``
        (float64, as theory), or the fallback where the backlog is empty."""
        n = self.n
        q = 1.0 - s.p
        out = (
            self.perfect.copy()
            if s.fallback == "perfect"
            else np.full(n.size, MIN_TIMESTAMP, dtype=np.int64)
        )
        busy = np.flatnonzero(n > 0)
        if busy.size:
            k = np.floor((n[busy] - 1).astype(np.float64) * q).astype(np.int64)
            if self._ranks is None:
                self._ranks = np.empty(self.vals.size, dtype=np.int64)
                self._ranks[self.order] = np.arange(self.vals.size, dtype=np.int64)
            kth = _kth_in_suffix(self._ranks, self.pos[busy], k + 1)
            out[busy] = self.vals[self.order[kth]]
        return out


def percentile_curve_numpy(
    event_time: np.ndarray, arrival_time: np.ndarray, p: float, fallback: str = "perfect"
) -> StepSeries:
    """The source-level percentile watermark of a whole trace, in numpy, as a compressed
    :class:`StepSeries`: the kernel of the Spark path run on one bucket. Equals
    ``percentile_curve(e, e, max(a, e), p, fallback=perfect_curve(e, a))``
    (``fallback="hold"``: ``fallback=None``), i.e.
    ``theory.watermarks.sources.percentile_source_curve``
    (a row arriving before its event time is never in the backlog)."""
    spec = f"percentile:{p}" + (":hold" if fallback == "hold" else "")
    s = parse_strategy(spec)
    e = np.asarray(event_time, dtype=np.int64)
    a = np.asarray(arrival_time, dtype=np.int64)
    order = np.lexsort((e, a))
    empty = np.empty(0, dtype=np.int64)
    r = _bucket_curves(a[order], e[order], empty, empty, [s], _Carry())
    times = np.concatenate((r.times, r.extra))
    vals = np.concatenate((r.values[0], r.extra_values[0]))
    o = np.argsort(times, kind="stable")
    return StepSeries(times[o], vals[o], MIN_TIMESTAMP).compressed()


# =========================================================================== layout


@dataclass
class ArrivalLayout:
    """A trace cut into arrival-time buckets, one bucket per Spark partition, persisted.

    ``df`` columns: ``bucket`` (int), ``replica`` (bool: a backlog copy of a row arriving
    in a later bucket), ``arrival_time``, ``event_time`` and, when ``holder`` is set,
    that column (``partition`` or ``key``). Rows are not sorted; each pass sorts its
    bucket in numpy. ``bounds[j]`` is the first arrival time of bucket ``j + 1``.
    ``summary`` has one row per bucket: ``rows``, ``min_event``, ``max_event``,
    ``first_arrival``, ``last_arrival`` (main rows), ``replicas`` and, with a holder,
    ``min_by_holder`` (the smallest ``(event_time, holder)`` pair, or None).
    ``source`` is the trace DataFrame it was cut from.
    """

    df: DataFrame
    source: DataFrame
    bounds: np.ndarray
    summary: pd.DataFrame
    rows: int
    holder: str | None = None
    backlog: bool = False

    @property
    def buckets(self) -> int:
        """Number of buckets (= Spark partitions of ``df``)."""
        return int(self.bounds.size + 1)

    @property
    def first_arrival(self) -> int:
        """The earliest arrival time (µs)."""
        return int(self.summary["first_arrival"].min())

    @property
    def last_arrival(self) -> int:
        """The latest arrival time (µs)."""
        return int(self.summary["last_arrival"].max())

    def unpersist(self) -> None:
        """Release the cached rows."""
        self.df.unpersist()

    def carries(self) -> list[_Carry]:
        """Per-bucket carries of the perfect and bounded scans: the driver-side combine of
        the per-bucket minima and maxima (a suffix minimum and a prefix maximum)."""
        b = self.buckets
        mins = np.full(b, MAX_TIMESTAMP, dtype=np.int64)
        maxs = np.full(b, MIN_TIMESTAMP, dtype=np.int64)
        for row in self.summary.itertuples():
            if row.rows:
                mins[row.bucket] = row.min_event
                maxs[row.bucket] = row.max_event
        after = np.minimum.accumulate(np.append(mins, MAX_TIMESTAMP)[::-1])[::-1]
        before = np.maximum.accumulate(np.insert(maxs, 0, MIN_TIMESTAMP))
        out = []
        for j in range(b):
            lo = MIN_TIMESTAMP if j == 0 else int(self.bounds[j - 1])
            hi = MAX_TIMESTAMP + 1 if j == b - 1 else int(self.bounds[j])
            out.append(_Carry(int(after[j + 1]), int(before[j]), lo, hi))
        return out


def _spark(df: DataFrame) -> Any:
    return df.sparkSession


def _pandas(df: DataFrame) -> pd.DataFrame:
    """``df.toPandas()`` (Arrow), typed."""
    return cast(pd.DataFrame, df.toPandas())


_PKEYS: dict[int, list[int]] = {}


def _partition_keys(spark: Any, buckets: int) -> list[int]:
    """For each bucket j, a bigint whose Spark hash partition (of ``buckets``) is j, so
    that ``repartition(buckets, key)`` puts bucket j alone in partition j."""
    if buckets in _PKEYS:
        return _PKEYS[buckets]
    probe = (
        spark.range(0, 64 * buckets + 4096)
        .select("id", F.expr(f"pmod(hash(id), {buckets})").alias("p"))
        .groupBy("p")
        .agg(F.min("id").alias("id"))
        .collect()
    )
    found = {int(r["p"]): int(r["id"]) for r in probe}
    missing = [j for j in range(buckets) if j not in found]
    if missing:  # pragma: no cover - 64 candidates per partition always suffice in practice
        raise RuntimeError(f"no hash key found for partitions {missing}")
    _PKEYS[buckets] = [found[j] for j in range(buckets)]
    return _PKEYS[buckets]


def _py(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


def _bucket_of(col: Column, bounds: np.ndarray) -> Column:
    """The bucket of a time column: how many bounds are <= it. A balanced tree of
    ``CASE WHEN`` (a binary search over the sorted bounds): ``log2(buckets)`` comparisons
    per row."""
    b = [int(x) for x in bounds.tolist()]

    def node(lo: int, hi: int) -> Column:  # the answer is in [lo, hi]
        if lo == hi:
            return F.lit(lo)
        mid = (lo + hi + 1) // 2  # col >= b[mid - 1] <=> answer >= mid
        return F.when(col >= F.lit(b[mid - 1]), node(mid, hi)).otherwise(node(lo, mid - 1))

    return node(0, len(b)).cast("int")


def _cores(spark: Any) -> int:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect
        return 2


def _plan_bounds(df: DataFrame, buckets: int | None) -> tuple[int, np.ndarray]:
    """Row count and bucket bounds: quantiles of a sample of arrival times."""
    n = int(df.count())
    if n == 0:
        raise ValueError("the trace has no rows")
    b = buckets if buckets is not None else max(2 * _cores(_spark(df)), -(-n // _ROWS_PER_BUCKET))
    b = max(1, min(int(b), _MAX_BUCKETS, n))
    if b == 1:
        return n, np.empty(0, dtype=np.int64)
    frac = min(1.0, 200_000 / n)
    sample = df.select("arrival_time").sample(False, frac, seed=7).toArrow()
    a = np.sort(sample.column(0).to_numpy(zero_copy_only=False).astype(np.int64))
    if a.size == 0:
        return n, np.empty(0, dtype=np.int64)
    picks = a[np.linspace(0, a.size - 1, b + 1).round().astype(np.int64)[1:-1]]
    bounds = np.unique(picks)
    return n, bounds[bounds > a[0]] if bounds.size else bounds


def prepare(
    df: DataFrame,
    *,
    buckets: int | None = None,
    backlog: bool = True,
    holder: str | None = None,
    storage: StorageLevel = StorageLevel.MEMORY_AND_DISK,
) -> ArrivalLayout:
    """Cut a trace DataFrame into arrival-time buckets (see the module docstring).

    ``buckets`` defaults to about one per 1.5 M rows (at least two per core, at most 512).
    ``backlog`` adds the replicas the percentile strategies need (rows whose event and
    arrival fall in different buckets, copied to each bucket in between). ``holder``
    (``"partition"`` or ``"key"``) carries that column along, for :func:`holdback`. Runs
    a count, a sample, the shuffle and a per-bucket summary; the rows stay persisted until
    :meth:`ArrivalLayout.unpersist`.
    """
    missing = [c for c in ("event_time", "arrival_time") if c not in df.columns]
    if missing:
        raise ValueError(f"trace DataFrame lacks column(s) {missing}; it has {df.columns}")
    if holder is not None and holder not in df.columns:
        raise ValueError(f"the trace has no {holder!r} column")
    extra = [holder] if holder else []
    base = df.select(
        F.col("event_time").cast("long").alias("event_time"),
        F.col("arrival_time").cast("long").alias("arrival_time"),
        *[F.col(c) for c in extra],
    )
    n, bounds = _plan_bounds(base, buckets)
    nb = int(bounds.size + 1)
    ba = _bucket_of(F.col("arrival_time"), bounds)
    cols = ["arrival_time", "event_time", *extra]
    rows = base.select(ba.alias("bucket"), F.lit(False).alias("replica"), *cols)
    if backlog and nb > 1:
        be = _bucket_of(F.col("event_time"), bounds)
        reps = (
            base.select(be.alias("_be"), ba.alias("_ba"), *cols)
            .where(F.col("_be") < F.col("_ba"))
            .select(
                F.explode(F.sequence(F.col("_be"), F.col("_ba") - F.lit(1))).alias("bucket"),
                F.lit(True).alias("replica"),
                *cols,
            )
        )
        rows = rows.unionByName(reps)
    pkeys = _partition_keys(_spark(df), nb)
    pkey = F.element_at(F.array(*[F.lit(k).cast("long") for k in pkeys]), F.col("bucket") + 1)
    lay = rows.repartition(nb, pkey).persist(storage)
    main = F.when(~F.col("replica"), F.lit(1))
    aggs = [
        F.count(main).alias("rows"),
        F.count(F.when(F.col("replica"), F.lit(1))).alias("replicas"),
        F.min(F.when(~F.col("replica"), F.col("event_time"))).alias("min_event"),
        F.max(F.when(~F.col("replica"), F.col("event_time"))).alias("max_event"),
        F.min(F.when(~F.col("replica"), F.col("arrival_time"))).alias("first_arrival"),
        F.max(F.when(~F.col("replica"), F.col("arrival_time"))).alias("last_arrival"),
    ]
    if holder:
        aggs.append(
            F.min(F.when(~F.col("replica"), F.struct("event_time", holder))).alias("min_by_holder")
        )
    got = _pandas(lay.groupBy("bucket").agg(*aggs)).set_index("bucket")
    summary = pd.DataFrame({"bucket": np.arange(nb)})
    fills = {
        "rows": 0,
        "replicas": 0,
        "min_event": MAX_TIMESTAMP,
        "max_event": MIN_TIMESTAMP,
        "first_arrival": MAX_TIMESTAMP,
        "last_arrival": MIN_TIMESTAMP,
    }
    for c, fill in fills.items():
        summary[c] = summary["bucket"].map(got[c]).fillna(fill).astype(np.int64)
    if holder:
        mins = got["min_by_holder"].to_dict()
        summary["min_by_holder"] = [
            None if mins.get(j) is None else (int(mins[j]["event_time"]), _py(mins[j][holder]))
            for j in range(nb)
        ]
    return ArrivalLayout(lay, df, bounds, summary, n, holder, backlog and nb > 1)


# =========================================================================== the pass


def _concat_batches(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    got = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(got) if got else None


def _bucket_slices(bucket: np.ndarray) -> list[tuple[int, int, int]]:
    if bucket.size == 0:
        return []
    _, starts, ends = _groups(bucket)
    return [(int(bucket[s]), int(s), int(t)) for s, t in zip(starts, ends, strict=True)]


def _split_bucket(t: pa.Table) -> Iterator[tuple[int, pa.Table, pa.Table]]:
    """(bucket, main rows sorted by arrival time, replica rows) of each bucket. Rows with
    equal arrival times may come in any order: every kernel treats them as one group."""
    bucket = t.column("bucket").to_numpy()
    if bucket.size > 1 and bool(np.any(bucket[1:] != bucket[:-1])):
        order = np.argsort(bucket, kind="stable")
        t = t.take(pa.array(order))
        bucket = bucket[order]
    for j, lo, hi in _bucket_slices(bucket):
        part = t.slice(lo, hi - lo)
        rep = part.column("replica").to_numpy(zero_copy_only=False)
        main = part.filter(pa.array(~rep)) if rep.any() else part
        reps = part.filter(pa.array(rep)) if rep.any() else part.slice(0, 0)
        a = main.column("arrival_time").to_numpy()
        if a.size > 1 and not bool(np.all(a[1:] >= a[:-1])):
            main = main.take(pa.array(np.argsort(a)))
        yield j, main, reps


_KIND_CURVE, _KIND_LATE, _KIND_MAX, _KIND_CAND, _KIND_PCT = 0, 1, 2, 3, 5


def _table_schema(strategies: Sequence[Strategy]) -> T.StructType:
    fields = [
        T.StructField("kind", T.IntegerType(), False),
        T.StructField("bucket", T.IntegerType(), False),
        T.StructField("t", T.LongType(), False),
    ]
    fields += [T.StructField(f"v{i}", T.LongType(), True) for i in range(len(strategies))]
    return T.StructType(fields)


def _rows_batch(
    bucket: int,
    parts: Sequence[tuple[int, int | None, np.ndarray, list[np.ndarray]]],
    ns: int,
    names: list[str],
) -> pa.RecordBatch:
    """One record batch of ``(kind, bucket, t, v0..)`` rows from blocks ``(kind, i, times,
    values)``: with ``i`` None, ``values`` holds one array per strategy; else one array,
    strategy ``i``'s, and the other strategies are null."""
    kinds, ts = [], []
    cols: list[list[np.ndarray]] = [[] for _ in range(ns)]
    masks: list[list[np.ndarray]] = [[] for _ in range(ns)]
    for kind, i, times, vals in parts:
        kinds.append(np.full(times.size, kind, dtype=np.int32))
        ts.append(times)
        for q in range(ns):
            if i is None:
                cols[q].append(vals[q].astype(np.int64))
                masks[q].append(np.zeros(times.size, dtype=bool))
            else:
                cols[q].append(vals[0] if q == i else np.zeros(times.size, dtype=np.int64))
                masks[q].append(np.full(times.size, q != i))
    k = np.concatenate(kinds)
    arrays = [
        pa.array(k),
        pa.array(np.full(k.size, bucket, dtype=np.int32)),
        pa.array(np.concatenate(ts)),
    ]
    for q in range(ns):
        arrays.append(pa.array(np.concatenate(cols[q]), mask=np.concatenate(masks[q])))
    return pa.record_batch(arrays, names=names)


def _run_pass(
    layout: ArrivalLayout,
    strategies: Sequence[Strategy],
    carries: list[_Carry],
) -> DataFrame:
    """The Python pass over the buckets (:func:`analyze` runs it once and keeps it).

    It yields rows ``(kind, bucket, t, v0..)``, by ``kind``:

    0. a curve step of the perfect and bounded strategies: an arrival time ``t`` and
       ``v<i>``, the watermark of strategy i there (final: their carries are known
       before the pass); percentile columns are null;
    1. per bucket: ``v<i>`` the elements late under strategy i (percentile: within the
       bucket);
    2. per bucket: ``v<i>`` the bucket's largest percentile value (for the carry);
    3. a percentile carry candidate: ``t`` its event time, ``v<i>`` the value just before
       its arrival within the bucket (it is late iff ``t < max(v<i>, carry)``);
    5. a change of a percentile curve latched within the bucket: ``t`` and ``v<i>``
       (the final curve is ``max(v<i>, carry)``; every change of it is among these).
    """
    strategies = list(strategies)
    pct = [i for i, s in enumerate(strategies) if s.kind == "percentile"]
    ns = len(strategies)
    names = ["kind", "bucket", "t"] + [f"v{i}" for i in range(ns)]
    empty = np.empty(0, dtype=np.int64)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # only the two times cross from the JVM (the Arrow conversion is most of the
        # pass's overhead): partition j holds bucket j (see prepare), and its replicas
        # are exactly its rows arriving at or after the bucket's end
        t = _concat_batches(batches)
        if t is None:
            return
        ctx = TaskContext.get()
        if ctx is None:  # pragma: no cover - mapInArrow always runs in a task
            raise RuntimeError("the analysis pass must run in a Spark task")
        j = ctx.partitionId()
        a_all = t.column("arrival_time").to_numpy()
        e_all = t.column("event_time").to_numpy()
        c = carries[j]
        rep = a_all >= c.hi
        main = ~rep
        a, e = a_all[main], e_all[main]
        if a.size and int(a.min()) < c.lo:
            raise RuntimeError(f"partition {j} of the layout holds rows of another bucket")
        if a.size > 1 and not bool(np.all(a[1:] >= a[:-1])):
            o = np.argsort(a)
            a, e = a[o], e[o]
        ra = a_all[rep] if pct else empty
        re_ = e_all[rep] if pct else empty
        r = _bucket_curves(a, e, ra, re_, strategies, c)
        if len(pct) < ns:  # the final perfect and bounded curves
            g = r.times.size
            arrays = [
                pa.array(np.full(g, _KIND_CURVE, dtype=np.int32)),
                pa.array(np.full(g, j, dtype=np.int32)),
                pa.array(r.times),
            ] + [
                pa.nulls(g, pa.int64()) if i in pct else pa.array(v) for i, v in enumerate(r.values)
            ]
            yield pa.record_batch(arrays, names=names)
        # (kind, strategy or None for all, times, values) blocks of rows
        parts: list[tuple[int, int | None, np.ndarray, list[np.ndarray]]] = [
            (_KIND_LATE, None, np.zeros(1, np.int64), [np.array([x]) for x in r.late]),
            (_KIND_MAX, None, np.zeros(1, np.int64), [np.array([x]) for x in r.local_max]),
        ]
        for i in pct:
            ce, cb = r.cands.get(i, (empty, empty))
            if ce.size:  # carry candidates
                parts.append((_KIND_CAND, i, ce, [cb]))
            times = np.concatenate((r.times, r.extra))
            vals = np.concatenate((r.values[i], r.extra_values[i]))
            o = np.argsort(times, kind="stable")
            times, vals = times[o], vals[o]
            keep = np.empty(vals.size, dtype=bool)  # the latched changes
            if vals.size:
                keep[0] = vals[0] != MIN_TIMESTAMP
                np.not_equal(vals[1:], vals[:-1], out=keep[1:])
            parts.append((_KIND_PCT, i, times[keep], [vals[keep]]))
        yield _rows_batch(j, parts, ns, names)

    src = layout.df
    if not pct:
        src = src.where(~F.col("replica"))
    return src.select("arrival_time", "event_time").mapInArrow(run, _table_schema(strategies))


# =========================================================================== analysis


@dataclass
class WatermarkAnalysis:
    """Strategies evaluated on a prepared trace.

    ``late`` has one row per strategy: ``strategy``, ``elements``, ``late``,
    ``late_fraction``. ``table`` keeps (persisted) what the analysis pass found: the
    perfect and bounded curves (final) and the percentile curves' changes (the carry is
    applied when they are read), so :meth:`curves` runs no Python. Call :meth:`unpersist`
    when done.
    """

    layout: ArrivalLayout
    strategies: tuple[Strategy, ...]
    late: pd.DataFrame
    carries: list[_Carry] = field(repr=False)
    table: DataFrame = field(repr=False)
    owns_layout: bool = field(default=False, repr=False)
    _persisted: DataFrame | None = field(default=None, repr=False)

    @property
    def names(self) -> list[str]:
        """Strategy names (the curve columns), in order."""
        return [s.name for s in self.strategies]

    def unpersist(self) -> None:
        """Release the cached results (and the layout if :func:`analyze` built it)."""
        if self._persisted is not None:
            self._persisted.unpersist()
            self._persisted = None
        self.table.unpersist()
        if self.owns_layout:
            self.layout.unpersist()

    def persist_curves(self, storage: StorageLevel = StorageLevel.MEMORY_AND_DISK) -> DataFrame:
        """Compute the curves once and keep them cached; later calls reuse them."""
        if self._persisted is None:
            self._persisted = self.curves().persist(storage)
        return self._persisted

    def curves(self) -> DataFrame:
        """The curves: ``processing_time`` (µs) and one column per strategy, named by its
        spec, holding the watermark there (µs). Perfect and bounded strategies have a
        value at every unique arrival time; a percentile strategy has its own rows, at
        the times where it may change (every change is among them), and is null in the
        other rows. Names hold ``:`` and ``.``: select them with backticks
        (``F.col("`percentile:0.9`")``). Rows come in no particular order."""
        if self._persisted is not None:
            return self._persisted
        cols = [F.col("t").alias("processing_time")]
        for i, s in enumerate(self.strategies):
            v = F.col(f"v{i}")
            if s.kind == "percentile":
                carry = F.element_at(
                    F.array(*[F.lit(c.latched[i]) for c in self.carries]),
                    F.col("bucket") + 1,
                )
                v = F.when(v.isNotNull(), F.greatest(v, carry))
            cols.append(v.alias(s.name))
        return self.table.where(F.col("kind").isin(_KIND_CURVE, _KIND_PCT)).select(*cols)

    def curve(self, name: str) -> StepSeries:
        """One strategy's curve collected (Arrow) into a :class:`StepSeries`: a step per
        unique arrival time for perfect and bounded (as :mod:`theory.watermarks.sources`), only the
        changes for percentile (as :func:`theory.watermarks.percentile.percentile_curve`)."""
        if name not in self.names:
            raise KeyError(f"no strategy {name!r}; have {self.names}")
        t = self.curves().select("processing_time", _col(name)).where(_col(name).isNotNull())
        got = t.toArrow()
        times = got.column(0).to_numpy()
        vals = got.column(1).to_numpy()
        order = np.argsort(times, kind="stable")
        out = StepSeries(times[order], vals[order], MIN_TIMESTAMP)
        if self.strategies[self.names.index(name)].kind == "percentile":
            return out.compressed()
        return out

    def values_at(self, times: np.ndarray, *, strict: bool = False) -> pd.DataFrame:
        """Every curve at the given processing times (µs), exactly: ``W.at(t)`` (the
        value after every step at or before ``t``), or with ``strict`` ``W.before(t)``
        (steps strictly before ``t``), as :class:`theory.series.StepSeries` defines them.

        Returns ``processing_time`` (the sorted distinct ``times``) plus one column per
        strategy (µs; MIN_TIMESTAMP before the first step). One Spark job: each curve row
        is mapped to the first requested time it is visible at, the maxima per time are
        collected, and a running maximum on the driver makes them the (monotone) curves.
        """
        grid = np.unique(np.asarray(times, dtype=np.int64))
        ns = len(self.strategies)
        side: Literal["left", "right"] = "right" if strict else "left"

        def visible_from(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for b in batches:
                if not b.num_rows:
                    continue
                g = np.searchsorted(grid, b.column(0).to_numpy(), side=side)
                ok = g < grid.size
                cols = [pa.array(g[ok])]
                for i in range(ns):
                    v = pc.fill_null(b.column(i + 1), MIN_TIMESTAMP).to_numpy()
                    cols.append(pa.array(v[ok]))
                yield pa.record_batch(cols, names=["g"] + [f"v{i}" for i in range(ns)])

        schema = T.StructType(
            [T.StructField("g", T.LongType(), False)]
            + [T.StructField(f"v{i}", T.LongType(), False) for i in range(ns)]
        )
        curves = self.curves().select(
            "processing_time", *[_col(n).alias(f"v{i}") for i, n in enumerate(self.names)]
        )
        agg = (
            curves.mapInArrow(visible_from, schema)
            .groupBy("g")
            .agg(*[F.max(f"v{i}").alias(f"v{i}") for i in range(ns)])
            .toArrow()
        )
        out = pd.DataFrame({"processing_time": grid})
        g = agg.column("g").to_numpy()
        for i, n in enumerate(self.names):
            v = np.full(grid.size, MIN_TIMESTAMP, dtype=np.int64)
            v[g] = agg.column(f"v{i}").to_numpy()
            out[n] = np.maximum.accumulate(v) if v.size else v  # every curve is monotone
        return out

    def sample(self, points: int = 2000) -> pd.DataFrame:
        """Every curve at ``points`` evenly spaced processing times from the first to the
        last arrival: ``processing_time`` plus one column per strategy (µs), for plots."""
        lo, hi = self.layout.first_arrival, self.layout.last_arrival
        points = max(2, int(points))
        step = max(1, -(-(hi - lo) // (points - 1)))
        return self.values_at(lo + step * np.arange(points, dtype=np.int64))

    def fire_times(self, window_size: int, offset: int = 0, finish: bool = True) -> pd.DataFrame:
        """When each fixed window (by its end) first fires under each strategy.

        One row per window end from the trace's first window to its last:
        ``window_end`` (µs) and one column per strategy with the fire time (µs), or -1
        if the window never fires. One Spark job.
        """
        size = check_duration(window_size, "window_size", allow_zero=False)
        off = int(offset) % size
        summ = self.layout.summary[self.layout.summary["rows"] > 0]
        lo_e, hi_e = int(summ["min_event"].min()), int(summ["max_event"].max())
        first_end = lo_e - (lo_e - off) % size + size
        last_end = hi_e - (hi_e - off) % size + size
        count = (last_end - first_end) // size + 1
        out = pd.DataFrame({"window_end": first_end + size * np.arange(count, dtype=np.int64)})
        base = first_end - size
        # per strategy: c = how many window ends are <= W, from W clamped to
        # [base, last_end] (no overflow); the first time each c is reached
        counts = [
            F.struct(
                F.lit(i).alias("s"),
                (F.least(F.greatest(_col(n), F.lit(base)), F.lit(last_end)) - F.lit(base)).alias(
                    "x"
                ),
            )
            for i, n in enumerate(self.names)
        ]
        got = _pandas(
            self.curves()
            .select("processing_time", F.explode(F.array(*counts)).alias("y"))
            .select("processing_time", "y.s", F.expr(f"y.x div {size}").alias("c"))
            .where(F.col("c").isNotNull())
            .groupBy("s", "c")
            .agg(F.min("processing_time").alias("t"))
        )
        never = np.iinfo(np.int64).max
        for i, n in enumerate(self.names):
            sel = got[got["s"] == i]
            first_at = np.full(count + 1, never, dtype=np.int64)
            np.minimum.at(first_at, sel["c"].to_numpy(np.int64), sel["t"].to_numpy(np.int64))
            # window k fires at the first step where more than k window ends are <= W
            fire = np.minimum.accumulate(first_at[::-1])[::-1][1:]
            if finish:
                fire = np.minimum(fire, self.layout.last_arrival)
            fire[fire == never] = -1
            out[n] = fire
        return out

    def windows(self, window_size: int, offset: int = 0, finish: bool = True) -> pd.DataFrame:
        """Per strategy and per (key, fixed window): the window's first firing.

        Columns: ``strategy``, ``key``, ``window_start``, ``window_end`` (µs),
        ``elements`` (all the window's elements), ``first_pane`` (those arriving at or
        before the firing), ``fire_time`` (µs; -1 if it never fires, or if none of its
        elements arrived by then, so that it has no pane), ``completeness``
        (``first_pane / elements``) and ``latency`` (``fire_time - window_end`` µs, NaN
        if it never fires). Rows by strategy, then window end, then key.
        """
        size = check_duration(window_size, "window_size", allow_zero=False)
        off = int(offset) % size
        fires = self.fire_times(size, off, finish)
        spark = _spark(self.layout.source)
        fire_df = spark.createDataFrame(
            fires.rename(columns={n: f"_f{i}" for i, n in enumerate(self.names)})
        )
        src = self.layout.source
        key = F.col("key") if "key" in src.columns else F.lit(0).cast("long")
        start = _window_start(F.col("event_time").cast("long"), size, off)
        el = src.select(
            key.alias("key"),
            F.col("arrival_time").cast("long").alias("arrival_time"),
            start.alias("window_start"),
        ).withColumn("window_end", F.col("window_start") + F.lit(size))
        joined = el.join(F.broadcast(fire_df), "window_end", "left")
        aggs = [F.count(F.lit(1)).alias("elements")]
        for i in range(len(self.names)):
            f = F.col(f"_f{i}")
            in_first = (f >= 0) & (F.col("arrival_time") <= f)
            aggs.append(F.count(F.when(in_first, F.lit(1))).alias(f"_p{i}"))
            aggs.append(F.first(f).alias(f"_t{i}"))
        got = _pandas(joined.groupBy("key", "window_start", "window_end").agg(*aggs))
        got = got.sort_values(["window_end", "key"], kind="stable").reset_index(drop=True)
        frames = []
        for i, name in enumerate(self.names):
            fire = got[f"_t{i}"].to_numpy(dtype=np.int64)
            first = got[f"_p{i}"].to_numpy(dtype=np.int64)
            elements = got["elements"].to_numpy(dtype=np.int64)
            end = got["window_end"].to_numpy(dtype=np.int64)
            # a window whose elements all came after the watermark passed it holds no
            # state when the watermark fires it: no pane, as Beam (and the simulator)
            fire = np.where(first > 0, fire, -1)
            frames.append(
                pd.DataFrame(
                    {
                        "strategy": name,
                        "key": got["key"],
                        "window_start": got["window_start"].to_numpy(dtype=np.int64),
                        "window_end": end,
                        "elements": elements,
                        "first_pane": first,
                        "fire_time": fire,
                        "completeness": first / elements,
                        "latency": np.where(fire >= 0, (fire - end).astype(np.float64), np.nan),
                    }
                )
            )
        return pd.concat(frames, ignore_index=True)

    def window_summary(
        self, window_size: int, offset: int = 0, finish: bool = True
    ) -> pd.DataFrame:
        """One row per strategy with the trace-determined columns of
        :class:`theory.pipeline.metrics.StrategyMetrics`: ``late_count``, ``late_fraction``,
        ``dropped`` (elements after their window's firing), ``windows``,
        ``completeness_mean``, ``complete_fraction`` and ``window_latency_p50/p90/p99``
        (µs, over the windows that fire; numpy's linear percentiles)."""
        w = self.windows(window_size, offset, finish)
        late = self.late.set_index("strategy")
        rows = []
        for s in self.strategies:
            sel = w[w["strategy"] == s.name]
            lat = sel["latency"].to_numpy()
            lat = lat[~np.isnan(lat)]
            pcts = np.percentile(lat, [50, 90, 99]) if lat.size else [np.nan] * 3
            comp = sel["completeness"].to_numpy()
            rows.append(
                {
                    "strategy": s.name,
                    "late_count": int(late.loc[s.name, "late"]),
                    "late_fraction": float(late.loc[s.name, "late_fraction"]),
                    "dropped": int((sel["elements"] - sel["first_pane"]).sum()),
                    "windows": len(sel),
                    "completeness_mean": float(comp.mean()) if comp.size else float("nan"),
                    "complete_fraction": float(np.mean(comp >= 1.0)) if comp.size else 0.0,
                    "window_latency_p50": float(pcts[0]),
                    "window_latency_p90": float(pcts[1]),
                    "window_latency_p99": float(pcts[2]),
                }
            )
        return pd.DataFrame(rows)


def _col(name: str) -> Column:
    """A column by its exact name (strategy names hold ':' and '.')."""
    return F.col("`" + name.replace("`", "``") + "`")


def _window_start(e: Column, size: int, off: int) -> Column:
    """``e - ((e - off) mod size)`` (Beam's FixedWindows start), exact on bigints."""
    return e - F.pmod(F.pmod(e, F.lit(size)) - F.lit(off), F.lit(size))


def analyze(
    data: DataFrame | ArrivalLayout,
    strategies: Sequence[str | Strategy],
    *,
    buckets: int | None = None,
    storage: StorageLevel = StorageLevel.MEMORY_AND_DISK,
) -> WatermarkAnalysis:
    """Evaluate ``strategies`` (specs, see :func:`parse_strategy`) on a trace.

    ``data`` is a trace DataFrame (cut here with :func:`prepare`; that layout is released
    by :meth:`WatermarkAnalysis.unpersist`) or a layout. Runs one Python pass over the
    buckets, keeps its result (persisted) and combines the small part on the driver: the
    late counts and the percentile carries (the latched value before each bucket).
    """
    parsed = tuple(parse_strategy(s) for s in strategies)
    if not parsed:
        raise ValueError("no strategies given")
    names = [s.name for s in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"strategy names must be unique, got {names}")
    need_rep = any(s.kind == "percentile" for s in parsed)
    owns = not isinstance(data, ArrivalLayout)
    layout = (
        data
        if isinstance(data, ArrivalLayout)
        else prepare(data, buckets=buckets, backlog=need_rep, storage=storage)
    )
    if need_rep and layout.buckets > 1 and not layout.backlog:
        raise ValueError("percentile strategies need a layout prepared with backlog=True")
    carries = layout.carries()
    table = _run_pass(layout, parsed, carries).persist(storage)
    small = _pandas(table.where(F.col("kind").isin(_KIND_LATE, _KIND_MAX, _KIND_CAND)))
    nb = layout.buckets
    late = np.zeros(len(parsed), dtype=np.int64)
    lates = small[small["kind"] == _KIND_LATE]
    maxes = small[small["kind"] == _KIND_MAX]
    cands = small[small["kind"] == _KIND_CAND]
    for i, s in enumerate(parsed):
        late[i] = int(lates[f"v{i}"].sum())
        if s.kind != "percentile":
            continue
        lmax = np.full(nb, MIN_TIMESTAMP, dtype=np.int64)
        lmax[maxes["bucket"].to_numpy(dtype=np.int64)] = maxes[f"v{i}"].to_numpy(dtype=np.int64)
        carry = np.maximum.accumulate(np.insert(lmax, 0, MIN_TIMESTAMP))[:-1]  # before bucket j
        for j in range(nb):
            carries[j].latched[i] = int(carry[j])
        sel = cands[cands[f"v{i}"].notna()]
        if len(sel):
            cj = carry[sel["bucket"].to_numpy(dtype=np.int64)]
            ev = sel["t"].to_numpy(dtype=np.int64)
            late[i] += int(np.count_nonzero(ev < cj))  # not late in the bucket, late by carry
    table_late = pd.DataFrame(
        {
            "strategy": names,
            "elements": layout.rows,
            "late": late,
            "late_fraction": late / layout.rows,
        }
    )
    return WatermarkAnalysis(layout, parsed, table_late, carries, table, owns)


# =========================================================================== skew


def _holdback_bucket(
    a: np.ndarray,
    e: np.ndarray,
    h: np.ndarray,
    carry: tuple[int, Any] | None,
    next_arrival: int | None,
) -> tuple[list[Any], list[int], list[int]]:
    """Runs ``(holder, start, end)`` of one bucket: who holds the perfect watermark back
    over each interval between consecutive arrival times (see :func:`holdback`)."""
    times, _, ends = _groups(a)
    m = a.size
    if m == 0:
        return [], [], []
    order = np.lexsort((h, e))
    rank = np.empty(m, dtype=np.int64)
    rank[order] = np.arange(m)
    best = np.minimum.accumulate(rank[::-1])[::-1]  # rank of the (e, h)-min of rows i..
    sfx = np.append(best, m)  # m = "no local row"
    idx = sfx[ends]  # the min over rows arriving after each group time
    has_local = idx < m
    safe = np.where(has_local, idx, 0)
    le, lh = e[order[safe]], h[order[safe]]
    holder = np.empty(times.size, dtype=object if h.dtype == object else h.dtype)
    known = has_local.copy()
    holder[has_local] = lh[has_local]
    if carry is not None:
        ce, ch = carry
        use_carry = ~has_local | (ce < le) | ((ce == le) & np.asarray(ch < lh, dtype=bool))
        holder[use_carry] = ch
        known |= use_carry
    stop = np.empty(times.size, dtype=np.int64)
    stop[:-1] = times[1:]
    if next_arrival is None:
        known[-1] = False  # after the last arrival nothing is left: no holder
        stop[-1] = times[-1]
    else:
        stop[-1] = next_arrival
    sel = np.flatnonzero(known)
    if sel.size == 0:
        return [], [], []
    hs, st, en = holder[sel], times[sel], stop[sel]
    brk = np.flatnonzero(np.asarray(hs[1:] != hs[:-1], dtype=bool) | (st[1:] != en[:-1])) + 1
    rs = np.concatenate(([0], brk))
    re_ = np.concatenate((brk, [sel.size]))
    return hs[rs].tolist(), st[rs].tolist(), en[re_ - 1].tolist()


def holdback(data: ArrivalLayout | DataFrame, by: str = "partition") -> pd.DataFrame:
    """Which partition (``by="partition"``) or key (``by="key"``) holds the static-partitions
    perfect watermark back, and for how long (see the module docstring).

    ``data`` is a trace DataFrame or a layout prepared with ``holder=by`` (another
    layout's bounds are reused for a new one). One row per holder that ever holds the
    watermark, longest first: ``holder``, ``held_us`` (total processing time it is the
    argmin), ``held_fraction`` (of first to last arrival), ``runs`` (maximal intervals),
    ``longest_run_us`` and ``longest_run_start`` (µs).
    """
    if by not in ("partition", "key"):
        raise ValueError(f"by must be 'partition' or 'key', got {by!r}")
    own = not (isinstance(data, ArrivalLayout) and data.holder == by)
    if isinstance(data, ArrivalLayout):
        lay = (
            data
            if not own
            else prepare(data.source, buckets=data.buckets, backlog=False, holder=by)
        )
    else:
        lay = prepare(data, backlog=False, holder=by)
    try:
        return _holdback(lay, by)
    finally:
        if own:
            lay.unpersist()


def _holdback(lay: ArrivalLayout, by: str) -> pd.DataFrame:
    nb = lay.buckets
    mins = list(lay.summary["min_by_holder"])
    carries: list[tuple[int, Any] | None] = []
    best: tuple[int, Any] | None = None
    for j in range(nb - 1, -1, -1):  # suffix minimum over later buckets
        carries.append(best)
        if mins[j] is not None and (best is None or mins[j] < best):
            best = mins[j]
    carries.reverse()
    nexts: list[int | None] = []
    nxt: int | None = None
    for j in range(nb - 1, -1, -1):  # the first arrival after each bucket
        nexts.append(nxt)
        if int(lay.summary["rows"].iloc[j]):
            nxt = int(lay.summary["first_arrival"].iloc[j])
    nexts.reverse()
    htype = lay.source.schema[by].dataType
    if not isinstance(htype, T.StringType):
        htype = T.LongType()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t = _concat_batches(batches)
        if t is None:
            return
        for j, main, _ in _split_bucket(t):
            hv = main.column(by).to_numpy(zero_copy_only=False)
            if hv.dtype.kind not in "iu":
                hv = hv.astype(object)
            hs, st, en = _holdback_bucket(
                main.column("arrival_time").to_numpy(),
                main.column("event_time").to_numpy(),
                hv,
                carries[j],
                nexts[j],
            )
            if not hs:
                continue
            edge = np.zeros(len(hs), dtype=bool)
            edge[0] = edge[-1] = True
            yield pa.record_batch(
                [
                    pa.array(hs, type=_arrow_type(htype)),
                    pa.array(st, pa.int64()),
                    pa.array(en, pa.int64()),
                    pa.array(edge),
                ],
                names=["holder", "start", "end", "edge"],
            )

    schema = T.StructType(
        [
            T.StructField("holder", htype, True),
            T.StructField("start", T.LongType(), False),
            T.StructField("end", T.LongType(), False),
            T.StructField("edge", T.BooleanType(), False),
        ]
    )
    runs = (
        lay.df.select("bucket", "replica", "arrival_time", "event_time", F.col(by).cast(htype))
        .mapInArrow(run, schema)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        inner = _pandas(
            runs.where(~F.col("edge"))
            .withColumn("len", F.col("end") - F.col("start"))
            .groupBy("holder")
            .agg(
                F.sum("len").alias("held"),
                F.count(F.lit(1)).alias("runs"),
                F.max(F.struct("len", (-F.col("start")).alias("neg_start"))).alias("longest"),
            )
        )
        edges = _pandas(runs.where(F.col("edge")).select("holder", "start", "end"))
    finally:
        runs.unpersist()
    stats: dict[Any, list[int]] = {}
    for r in inner.itertuples(index=False):
        stats[_py(r.holder)] = [
            int(r.held),
            int(r.runs),
            int(r.longest["len"]),
            -int(r.longest["neg_start"]),
        ]
    edges = edges.sort_values("start", kind="stable")
    merged: list[list[Any]] = []  # runs at bucket edges, joined across buckets
    for h, st, en in zip(edges["holder"].map(_py), edges["start"], edges["end"], strict=True):
        if merged and merged[-1][0] == h and merged[-1][2] == st:
            merged[-1][2] = int(en)
        else:
            merged.append([h, int(st), int(en)])
    for h, st, en in merged:
        cur = stats.setdefault(h, [0, 0, -1, 0])
        cur[0] += en - st
        cur[1] += 1
        if en - st > cur[2] or (en - st == cur[2] and st < cur[3]):
            cur[2], cur[3] = en - st, st
    span = max(1, lay.last_arrival - lay.first_arrival)
    out = pd.DataFrame(
        [
            {
                "holder": h,
                "held_us": v[0],
                "held_fraction": v[0] / span,
                "runs": v[1],
                "longest_run_us": v[2],
                "longest_run_start": v[3],
            }
            for h, v in stats.items()
        ],
        columns=[
            "holder",
            "held_us",
            "held_fraction",
            "runs",
            "longest_run_us",
            "longest_run_start",
        ],
    )
    return out.sort_values(
        ["held_us", "holder"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)


def _arrow_type(t: T.DataType) -> pa.DataType:
    return pa.string() if isinstance(t, T.StringType) else pa.int64()
