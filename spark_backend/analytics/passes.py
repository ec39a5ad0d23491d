"""The analysis pass: one Python task per bucket, numpy kernels of theory inside.

Each task reads its bucket (partition ``j`` is bucket ``j``, see
:func:`~spark_backend.analytics.layout.prepare`), sorts it by arrival time and runs
:func:`theory.watermarks.bucket_curves.bucket_curves` with the bucket's carry. Its output
is one table of rows ``(kind, bucket, t, v0..)`` (``v<i>`` for strategy ``i``), by
``kind``:

0. :data:`KIND_CURVE`, a curve step of the perfect and bounded strategies: an arrival
   time ``t`` and ``v<i>``, the watermark of strategy i there (final: their carries are
   known before the pass); percentile and sequential columns are null;
1. :data:`KIND_LATE`, per bucket: ``v<i>`` the elements late under strategy i
   (percentile: within the bucket);
2. :data:`KIND_MAX`, per bucket: ``v<i>`` the bucket's largest percentile value (for the
   carry);
3. :data:`KIND_CAND`, a percentile carry candidate: ``t`` its event time, ``v<i>`` the
   value just before its arrival within the bucket (it is late iff
   ``t < max(v<i>, carry)``);
5. :data:`KIND_PCT`, a change of a percentile curve latched within the bucket: ``t`` and
   ``v<i>`` (the final curve is ``max(v<i>, carry)``; every change of it is among these);
6. :data:`KIND_SEQ`, a step of a strategy computed over the whole trace in one task
   (:mod:`spark_backend.analytics.sequential`): ``t`` and ``v<i>``, final.

The strategies computed in one pass (:func:`~spark_backend.analytics.strategies.
is_sequential`) have no rows here but zero late counts and MIN_TIMESTAMP maxima.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_backend.analytics.frames import concat_batches
from spark_backend.analytics.layout import ArrivalLayout
from spark_backend.analytics.strategies import Strategy, bucket_spec, is_sequential
from theory.time import MIN_TIMESTAMP
from theory.watermarks.bucket_curves import BucketCurves, bucket_curves
from theory.watermarks.buckets import BucketCarry

__all__ = [
    "KIND_CAND", "KIND_CURVE", "KIND_LATE", "KIND_MAX", "KIND_PCT", "KIND_SEQ", "run_pass",
    "table_schema",
]

KIND_CURVE: Final[int] = 0
KIND_LATE: Final[int] = 1
KIND_MAX: Final[int] = 2
KIND_CAND: Final[int] = 3
KIND_PCT: Final[int] = 5
KIND_SEQ: Final[int] = 6

_EMPTY = np.empty(0, dtype=np.int64)

#: ``(kind, strategy index or None for all, times, values)``: a block of output rows
_Block = tuple[int, int | None, np.ndarray, list[np.ndarray]]


def run_pass(
    layout: ArrivalLayout, strategies: Sequence[Strategy], carries: list[BucketCarry]
) -> DataFrame:
    """The Python pass over the buckets (lazy; :func:`~spark_backend.analytics.analysis.
    analyze` runs it once and keeps it): the table of the module docstring."""
    strategies = list(strategies)
    pct = [i for i, s in enumerate(strategies) if s.kind == "percentile"]
    here = [i for i, s in enumerate(strategies) if not is_sequential(s)]
    kernel = [bucket_spec(strategies[i]) for i in here]
    names = ["kind", "bucket", "t"] + [f"v{i}" for i in range(len(strategies))]
    null = [i for i in range(len(strategies)) if i in pct or i not in here]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t = concat_batches(batches)
        if t is None:
            return
        j = _partition_id()
        a, e, ra, re_ = _bucket_rows(t, j, carries[j], with_replicas=bool(pct))
        carry = carries[j]
        own = BucketCarry(
            carry.perfect_after, carry.max_before, carry.lo, carry.hi,
            {here.index(i): v for i, v in carry.latched.items() if i in here},
        )
        r = _spread(bucket_curves(a, e, ra, re_, kernel, own), here, len(strategies))
        if len(null) < len(strategies):  # the final perfect and bounded curves
            yield _curve_batch(j, r, null, names)
        yield _rows_batch(j, _summary_blocks(r, pct), names)

    src = layout.df
    if not pct:
        src = src.where(~F.col("replica"))
    return src.select("arrival_time", "event_time").mapInArrow(run, table_schema(names))


def _spread(r: BucketCurves, here: list[int], n: int) -> BucketCurves:
    """The kernel's results for strategies ``here`` placed at their indices among ``n``;
    the others (computed in one pass) with no curve, no late element and no maximum."""
    out = BucketCurves(r.times, extra=r.extra)
    for i in range(n):
        if i in here:
            k = here.index(i)
            out.values.append(r.values[k])
            out.late.append(r.late[k])
            out.local_max.append(r.local_max[k])
            if k in r.extra_values:
                out.extra_values[i] = r.extra_values[k]
            if k in r.candidates:
                out.candidates[i] = r.candidates[k]
        else:
            out.values.append(_EMPTY)
            out.late.append(0)
            out.local_max.append(MIN_TIMESTAMP)
    return out


def _partition_id() -> int:
    ctx = TaskContext.get()
    if ctx is None:  # pragma: no cover - mapInArrow always runs in a task
        raise RuntimeError("the analysis pass must run in a Spark task")
    return ctx.partitionId()


def _bucket_rows(
    t: pa.Table, j: int, carry: BucketCarry, *, with_replicas: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bucket ``j``'s rows sorted by arrival time, and its replicas (empty unless asked).

    Only the two times cross from the JVM (the Arrow conversion is most of the pass's
    overhead): the bucket is the partition id, and the replicas are exactly the rows
    arriving at or after the bucket's end. A row arriving before it means the layout's
    partitioning broke, which would silently give wrong curves: it is an error.
    """
    a_all = t.column("arrival_time").to_numpy()
    e_all = t.column("event_time").to_numpy()
    rep = a_all >= carry.hi
    main = ~rep
    a, e = a_all[main], e_all[main]
    if a.size and int(a.min()) < carry.lo:
        raise RuntimeError(f"partition {j} of the layout holds rows of another bucket")
    if a.size > 1 and not bool(np.all(a[1:] >= a[:-1])):
        o = np.argsort(a)
        a, e = a[o], e[o]
    if not with_replicas:
        return a, e, _EMPTY, _EMPTY
    return a, e, a_all[rep], e_all[rep]


def _curve_batch(j: int, r: BucketCurves, null: list[int], names: list[str]) -> pa.RecordBatch:
    """The ``KIND_CURVE`` rows: every perfect and bounded curve at every arrival time
    (the strategies ``null`` null)."""
    g = r.times.size
    arrays = [
        pa.array(np.full(g, KIND_CURVE, dtype=np.int32)),
        pa.array(np.full(g, j, dtype=np.int32)),
        pa.array(r.times),
    ] + [pa.nulls(g, pa.int64()) if i in null else pa.array(v) for i, v in enumerate(r.values)]
    return pa.record_batch(arrays, names=names)


def _summary_blocks(r: BucketCurves, pct: list[int]) -> list[_Block]:
    """The late counts, percentile maxima, carry candidates and percentile changes."""
    one = np.zeros(1, np.int64)
    blocks: list[_Block] = [
        (KIND_LATE, None, one, [np.array([x]) for x in r.late]),
        (KIND_MAX, None, one, [np.array([x]) for x in r.local_max]),
    ]
    for i in pct:
        ce, cb = r.candidates.get(i, (_EMPTY, _EMPTY))
        if ce.size:
            blocks.append((KIND_CAND, i, ce, [cb]))
        times, vals = r.steps(i)
        keep = _changes(vals)
        blocks.append((KIND_PCT, i, times[keep], [vals[keep]]))
    return blocks


def _changes(vals: np.ndarray) -> np.ndarray:
    """Where a curve latched from MIN_TIMESTAMP changes (its first value if not MIN)."""
    keep = np.empty(vals.size, dtype=bool)
    if vals.size:
        keep[0] = vals[0] != MIN_TIMESTAMP
        np.not_equal(vals[1:], vals[:-1], out=keep[1:])
    return keep


def _rows_batch(bucket: int, blocks: Sequence[_Block], names: list[str]) -> pa.RecordBatch:
    """One record batch of ``(kind, bucket, t, v0..)`` rows from blocks: with a strategy
    index of None, the values hold one array per strategy; else one array, that
    strategy's, and the other strategies are null."""
    ns = len(names) - 3
    kinds, ts = [], []
    cols: list[list[np.ndarray]] = [[] for _ in range(ns)]
    masks: list[list[np.ndarray]] = [[] for _ in range(ns)]
    for kind, i, times, vals in blocks:
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


def table_schema(names: list[str]) -> T.StructType:
    """The pass table's schema: ``kind``, ``bucket``, ``t`` and the nullable ``v<i>``."""
    fields = [
        T.StructField("kind", T.IntegerType(), False),
        T.StructField("bucket", T.IntegerType(), False),
        T.StructField("t", T.LongType(), False),
    ]
    fields += [T.StructField(n, T.LongType(), True) for n in names[3:]]
    return T.StructType(fields)
