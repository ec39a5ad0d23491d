"""A trace cut into arrival-time buckets, one bucket per Spark partition, persisted.

:func:`prepare` plans bucket bounds from quantiles of a sample of arrival times (any
bounds give the same results; balanced ones balance the tasks), shuffles the rows once so
that bucket ``j`` is partition ``j``, and summarises each bucket. The summary's minima and
maxima become each bucket's :class:`~theory.watermarks.buckets.BucketCarry` (a suffix
minimum and a prefix maximum on the driver), so every scan over processing time is a
parallel scan. Times are µs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_backend.analytics.frames import python_scalar, session_of, to_pandas
from theory.columns import check_count
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.buckets import BucketCarry

__all__ = ["ArrivalLayout", "prepare"]

_ROWS_PER_BUCKET: Final[int] = 1_500_000
_MAX_BUCKETS: Final[int] = 512
_SAMPLE_ROWS: Final[int] = 200_000  # arrival times sampled to plan the bounds


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

    def carries(self) -> list[BucketCarry]:
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
            out.append(BucketCarry(int(after[j + 1]), int(before[j]), lo, hi))
        return out


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
    (``"partition"`` or ``"key"``) carries that column along, for
    :func:`~spark_backend.analytics.holdback.holdback`. Runs a count, a sample, the
    shuffle and a per-bucket summary; the rows stay persisted until
    :meth:`ArrivalLayout.unpersist`.
    """
    if buckets is not None:
        check_count(buckets, "buckets", minimum=1)
    base = _trace_columns(df, holder)
    n, bounds = _plan_bounds(base, buckets)
    nb = int(bounds.size + 1)
    with_backlog = backlog and nb > 1
    rows = _bucketed_rows(base, bounds, with_backlog)
    lay = _one_bucket_per_partition(rows, nb).persist(storage)
    summary = _summarise(lay, nb, holder)
    return ArrivalLayout(lay, df, bounds, summary, n, holder, with_backlog)


def _trace_columns(df: DataFrame, holder: str | None) -> DataFrame:
    """``event_time``, ``arrival_time`` (bigint µs) and the holder column of a trace."""
    missing = [c for c in ("event_time", "arrival_time") if c not in df.columns]
    if missing:
        raise ValueError(f"trace DataFrame lacks column(s) {missing}; it has {df.columns}")
    if holder is not None and not isinstance(holder, str):
        raise TypeError(f"holder must be a column name, got {holder!r}")
    if holder is not None and holder not in df.columns:
        raise ValueError(f"the trace has no {holder!r} column")
    return df.select(
        F.col("event_time").cast("long").alias("event_time"),
        F.col("arrival_time").cast("long").alias("arrival_time"),
        *([F.col(holder)] if holder else []),
    )


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
    b = (
        buckets
        if buckets is not None
        else max(2 * _cores(session_of(df)), -(-n // _ROWS_PER_BUCKET))
    )
    b = max(1, min(int(b), _MAX_BUCKETS, n))
    if b == 1:
        return n, np.empty(0, dtype=np.int64)
    frac = min(1.0, _SAMPLE_ROWS / n)
    sample = df.select("arrival_time").sample(False, frac, seed=7).toArrow()
    a = np.sort(sample.column(0).to_numpy(zero_copy_only=False).astype(np.int64))
    if a.size == 0:
        return n, np.empty(0, dtype=np.int64)
    picks = a[np.linspace(0, a.size - 1, b + 1).round().astype(np.int64)[1:-1]]
    bounds = np.unique(picks)
    return n, bounds[bounds > a[0]] if bounds.size else bounds


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


def _bucketed_rows(base: DataFrame, bounds: np.ndarray, backlog: bool) -> DataFrame:
    """Each row in its arrival bucket, plus with ``backlog`` a replica in every bucket
    from its event's to the one before its arrival's (the backlog of those buckets)."""
    ba = _bucket_of(F.col("arrival_time"), bounds)
    cols = ["arrival_time", "event_time", *base.columns[2:]]  # and the holder, if any
    rows = base.select(ba.alias("bucket"), F.lit(False).alias("replica"), *cols)
    if not backlog:
        return rows
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
    return rows.unionByName(reps)


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


def _one_bucket_per_partition(rows: DataFrame, buckets: int) -> DataFrame:
    """The one shuffle: bucket ``j`` alone in partition ``j`` (the pass reads its bucket
    from the partition id, so it never needs the bucket column)."""
    pkeys = _partition_keys(session_of(rows), buckets)
    pkey = F.element_at(F.array(*[F.lit(k).cast("long") for k in pkeys]), F.col("bucket") + 1)
    return rows.repartition(buckets, pkey)


_SUMMARY_FILLS: Final[dict[str, int]] = {  # a bucket without rows
    "rows": 0,
    "replicas": 0,
    "min_event": MAX_TIMESTAMP,
    "max_event": MIN_TIMESTAMP,
    "first_arrival": MAX_TIMESTAMP,
    "last_arrival": MIN_TIMESTAMP,
}


def _summarise(lay: DataFrame, buckets: int, holder: str | None) -> pd.DataFrame:
    """One row per bucket (see :class:`ArrivalLayout`), from one aggregation."""
    main = ~F.col("replica")
    aggs = [
        F.count(F.when(main, F.lit(1))).alias("rows"),
        F.count(F.when(F.col("replica"), F.lit(1))).alias("replicas"),
        F.min(F.when(main, F.col("event_time"))).alias("min_event"),
        F.max(F.when(main, F.col("event_time"))).alias("max_event"),
        F.min(F.when(main, F.col("arrival_time"))).alias("first_arrival"),
        F.max(F.when(main, F.col("arrival_time"))).alias("last_arrival"),
    ]
    if holder:
        aggs.append(F.min(F.when(main, F.struct("event_time", holder))).alias("min_by_holder"))
    got = to_pandas(lay.groupBy("bucket").agg(*aggs)).set_index("bucket")
    summary = pd.DataFrame({"bucket": np.arange(buckets)})
    for c, fill in _SUMMARY_FILLS.items():
        summary[c] = summary["bucket"].map(got[c]).fillna(fill).astype(np.int64)
    if holder:
        mins = got["min_by_holder"].to_dict()
        summary["min_by_holder"] = [
            None
            if mins.get(j) is None
            else (int(mins[j]["event_time"]), python_scalar(mins[j][holder]))
            for j in range(buckets)
        ]
    return summary
