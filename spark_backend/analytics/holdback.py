"""Skew: which partition (or key) holds the perfect watermark back, and for how long.

Under the static-partitions perfect watermark each partition ``p`` (or key) has the
watermark ``W_p(t)`` = min event time of its elements arriving after ``t`` (= its next
unread event time when its log is time-ordered), and ``W(t) = min_p W_p(t)``. The
partition *holding the watermark back* at ``t`` is the argmin (ties: the smallest id).
Over ``[first arrival, last arrival)`` it is held for the total processing time
reported, in runs. Times are µs.

Each bucket finds its runs with :func:`theory.watermarks.holdback.holder_runs` given its
carry (the smallest ``(event_time, holder)`` arriving in later buckets, and the next
bucket's first arrival); runs that touch a bucket's edges are joined across buckets on
the driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_backend.analytics.frames import concat_batches, python_scalar, to_pandas
from spark_backend.analytics.layout import ArrivalLayout, prepare
from theory.watermarks.buckets import equal_runs
from theory.watermarks.holdback import holder_runs

__all__ = ["holdback", "holdback_of_trace"]

_COLUMNS = ["holder", "held_us", "held_fraction", "runs", "longest_run_us", "longest_run_start"]


def holdback(data: ArrivalLayout | DataFrame, by: str = "partition") -> pd.DataFrame:
    """Which partition (``by="partition"``) or key (``by="key"``) holds the static-partitions
    perfect watermark back, and for how long (see the module docstring).

    ``data`` is a trace DataFrame or a layout prepared with ``holder=by`` (another
    layout's bounds are reused for a new one). One row per holder that ever holds the
    watermark, longest first: ``holder``, ``held_us`` (total processing time it is the
    argmin), ``held_fraction`` (of first to last arrival), ``runs`` (maximal intervals),
    ``longest_run_us`` and ``longest_run_start`` (µs).
    """
    if not isinstance(by, str):
        raise TypeError(f"by must be a column name, got {by!r}")
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


def holdback_of_trace(
    arrival_time: np.ndarray, event_time: np.ndarray, holder: np.ndarray
) -> pd.DataFrame:
    """:func:`holdback` of a trace in memory (no Spark): the same kernel on one bucket
    holding every row, and the same table."""
    order = np.argsort(arrival_time, kind="stable")
    a, e, h = arrival_time[order], event_time[order], np.asarray(holder)[order]
    stats: dict[Any, list[int]] = {}
    if a.size:
        hs, st, en = holder_runs(a, e, h)
        for hh, s0, e0 in zip(hs, st, en, strict=True):
            _add_run(stats, python_scalar(hh), int(s0), int(e0))
    span = int(a[-1] - a[0]) if a.size else 0
    return _table(stats, max(1, span))


def _holdback(lay: ArrivalLayout, by: str) -> pd.DataFrame:
    """The steps: per-bucket runs in Spark, then their totals and the edge runs joined."""
    runs = _bucket_runs(lay, by).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        inner = to_pandas(_inner_totals(runs))
        edges = to_pandas(runs.where(F.col("edge")).select("holder", "start", "end"))
    finally:
        runs.unpersist()
    stats = _stats_of_inner(inner)
    for h, st, en in _joined_edge_runs(edges):
        _add_run(stats, h, st, en)
    return _table(stats, max(1, lay.last_arrival - lay.first_arrival))


# --------------------------------------------------------------------------- carries


def _min_after_each_bucket(lay: ArrivalLayout) -> list[tuple[int, Any] | None]:
    """The smallest ``(event_time, holder)`` arriving in later buckets, per bucket."""
    mins = list(lay.summary["min_by_holder"])
    carries: list[tuple[int, Any] | None] = []
    best: tuple[int, Any] | None = None
    for j in range(lay.buckets - 1, -1, -1):  # suffix minimum over later buckets
        carries.append(best)
        if mins[j] is not None and (best is None or mins[j] < best):
            best = mins[j]
    carries.reverse()
    return carries


def _next_arrival_after_each_bucket(lay: ArrivalLayout) -> list[int | None]:
    """The first arrival after each bucket (None after the last rows)."""
    nexts: list[int | None] = []
    nxt: int | None = None
    for j in range(lay.buckets - 1, -1, -1):
        nexts.append(nxt)
        if int(lay.summary["rows"].iloc[j]):
            nxt = int(lay.summary["first_arrival"].iloc[j])
    nexts.reverse()
    return nexts


# --------------------------------------------------------------------------- per bucket


def _holder_type(lay: ArrivalLayout, by: str) -> T.DataType:
    """Strings stay strings; every other holder column is read as bigint."""
    htype = lay.source.schema[by].dataType
    return htype if isinstance(htype, T.StringType) else T.LongType()


def _bucket_runs(lay: ArrivalLayout, by: str) -> DataFrame:
    """Rows ``(holder, start, end, edge)``: every bucket's runs, ``edge`` on a bucket's
    first and last run (they may continue in the neighbouring bucket)."""
    carries = _min_after_each_bucket(lay)
    nexts = _next_arrival_after_each_bucket(lay)
    htype = _holder_type(lay, by)
    arrow_type = pa.string() if isinstance(htype, T.StringType) else pa.int64()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t = concat_batches(batches)
        if t is None:
            return
        for j, main in _split_buckets(t):
            hv = main.column(by).to_numpy(zero_copy_only=False)
            if hv.dtype.kind not in "iu":
                hv = hv.astype(object)
            hs, st, en = holder_runs(
                main.column("arrival_time").to_numpy(),
                main.column("event_time").to_numpy(),
                hv,
                carries[j],
                nexts[j],
            )
            if hs:
                yield _runs_batch(hs, st, en, arrow_type)

    schema = T.StructType(
        [
            T.StructField("holder", htype, True),
            T.StructField("start", T.LongType(), False),
            T.StructField("end", T.LongType(), False),
            T.StructField("edge", T.BooleanType(), False),
        ]
    )
    rows = lay.df.select("bucket", "replica", "arrival_time", "event_time", F.col(by).cast(htype))
    return rows.mapInArrow(run, schema)


def _runs_batch(hs: list[Any], st: list[int], en: list[int], holder: pa.DataType) -> pa.RecordBatch:
    edge = np.zeros(len(hs), dtype=bool)
    edge[0] = edge[-1] = True
    return pa.record_batch(
        [
            pa.array(hs, type=holder),
            pa.array(st, pa.int64()),
            pa.array(en, pa.int64()),
            pa.array(edge),
        ],
        names=["holder", "start", "end", "edge"],
    )


def _split_buckets(t: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    """(bucket, its main rows sorted by arrival time) of each bucket in a task's rows.
    Rows with equal arrival times may come in any order: the kernel treats them as one
    group."""
    bucket = t.column("bucket").to_numpy()
    if bucket.size > 1 and bool(np.any(bucket[1:] != bucket[:-1])):
        order = np.argsort(bucket, kind="stable")
        t = t.take(pa.array(order))
        bucket = bucket[order]
    ids, starts, ends = equal_runs(bucket)
    for j, lo, hi in zip(ids.tolist(), starts.tolist(), ends.tolist(), strict=True):
        part = t.slice(lo, hi - lo)
        rep = part.column("replica").to_numpy(zero_copy_only=False)
        main = part.filter(pa.array(~rep)) if rep.any() else part
        a = main.column("arrival_time").to_numpy()
        if a.size > 1 and not bool(np.all(a[1:] >= a[:-1])):
            main = main.take(pa.array(np.argsort(a)))
        yield int(j), main


# --------------------------------------------------------------------------- totals


def _inner_totals(runs: DataFrame) -> DataFrame:
    """Per holder, over the runs inside a bucket: total, count and the longest
    ``(len, -start)``."""
    return (
        runs.where(~F.col("edge"))
        .withColumn("len", F.col("end") - F.col("start"))
        .groupBy("holder")
        .agg(
            F.sum("len").alias("held"),
            F.count(F.lit(1)).alias("runs"),
            F.max(F.struct("len", (-F.col("start")).alias("neg_start"))).alias("longest"),
        )
    )


def _stats_of_inner(inner: pd.DataFrame) -> dict[Any, list[int]]:
    """``holder -> [held, runs, longest run, its start]`` from :func:`_inner_totals`."""
    stats: dict[Any, list[int]] = {}
    for r in inner.itertuples(index=False):
        stats[python_scalar(r.holder)] = [
            int(r.held),
            int(r.runs),
            int(r.longest["len"]),
            -int(r.longest["neg_start"]),
        ]
    return stats


def _joined_edge_runs(edges: pd.DataFrame) -> list[list[Any]]:
    """The runs at bucket edges, joined where one continues into the next bucket."""
    edges = edges.sort_values("start", kind="stable")
    merged: list[list[Any]] = []
    for h, st, en in zip(
        edges["holder"].map(python_scalar), edges["start"], edges["end"], strict=True
    ):
        if merged and merged[-1][0] == h and merged[-1][2] == st:
            merged[-1][2] = int(en)
        else:
            merged.append([h, int(st), int(en)])
    return merged


def _add_run(stats: dict[Any, list[int]], h: Any, st: int, en: int) -> None:
    """Count one run of ``h`` over ``[st, en)`` (the longest: the earliest among ties)."""
    cur = stats.setdefault(h, [0, 0, -1, 0])
    cur[0] += en - st
    cur[1] += 1
    if en - st > cur[2] or (en - st == cur[2] and st < cur[3]):
        cur[2], cur[3] = en - st, st


def _table(stats: dict[Any, list[int]], span: int) -> pd.DataFrame:
    """The result rows, longest held first (ties by holder)."""
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
        columns=_COLUMNS,
    )
    return out.sort_values(
        ["held_us", "holder"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)
