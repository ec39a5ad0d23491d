"""The strategies no bucket scan computes, in one pass over the whole trace (µs).

``dynamic``, ``dynamic:idle=<d>`` and ``flink-bounded:<d>:idle=<t>``
(:func:`~spark_backend.analytics.strategies.is_sequential`) take at every step the
minimum over partitions of per-partition states whose idleness depends on the whole
past, so a bucket cannot start without the state the previous one ended with. One task
reads the trace's event time, arrival time and partition as Arrow (24 B per row in
memory), sorts it by arrival time and runs theory's vectorised curve
(:meth:`theory.watermarks.spec.SourceWatermarkSpec.curve`) for each such strategy:
O(n log n) in that task, against O(n log n / buckets) per task for the others. Its rows
join the analysis pass's table (:mod:`spark_backend.analytics.passes`): the curve steps
(:data:`~spark_backend.analytics.passes.KIND_SEQ`) and one late count per strategy
(:data:`~spark_backend.analytics.passes.KIND_LATE`, ``e < W(a^-)``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_backend.analytics.frames import concat_batches
from spark_backend.analytics.passes import KIND_LATE, KIND_SEQ, table_schema
from spark_backend.analytics.strategies import Strategy, is_sequential
from theory.watermarks.spec import make_source_watermark

__all__ = ["run_sequential"]


def run_sequential(source: DataFrame, strategies: Sequence[Strategy]) -> DataFrame | None:
    """The rows of the strategies computed in one pass (lazy), in the pass table's
    schema; None when there are none. ``source`` is the trace DataFrame (its
    ``partition`` column, if any, names each row's partition)."""
    strategies = list(strategies)
    seq = [i for i, s in enumerate(strategies) if is_sequential(s)]
    if not seq:
        return None
    names = ["kind", "bucket", "t"] + [f"v{i}" for i in range(len(strategies))]
    specs = {i: make_source_watermark(strategies[i].name) for i in seq}
    has_partition = "partition" in source.columns

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t = concat_batches(batches)
        if t is None:
            return
        e = t.column("event_time").to_numpy()
        a = t.column("arrival_time").to_numpy()
        part = t.column("partition").to_numpy() if has_partition else None  # int64, no nulls
        order = np.lexsort((e, a))  # the curves do not depend on the order of ties
        e, a = e[order], a[order]
        p = None if part is None else part[order]
        for i in seq:
            curve = specs[i].curve(e, a, p)
            late = int(np.count_nonzero(e < curve.before(a)))
            yield _rows(names, i, KIND_SEQ, curve.times, curve.values)
            yield _rows(names, i, KIND_LATE, np.zeros(1, np.int64), np.array([late]))

    cols = [F.col("event_time").cast("long"), F.col("arrival_time").cast("long")]
    if has_partition:
        cols.append(F.col("partition").cast("long"))
    one = source.select(*cols).coalesce(1)
    return one.mapInArrow(run, table_schema(names))


def _rows(
    names: list[str], i: int, kind: int, times: np.ndarray, values: np.ndarray
) -> pa.RecordBatch:
    """Rows of one kind for strategy ``i`` (its ``v<i>`` set, the others null)."""
    n = times.size
    arrays = [
        pa.array(np.full(n, kind, dtype=np.int32)),
        pa.array(np.zeros(n, dtype=np.int32)),
        pa.array(times.astype(np.int64)),
    ]
    for q in range(len(names) - 3):
        arrays.append(pa.array(values.astype(np.int64)) if q == i else pa.nulls(n, pa.int64()))
    return pa.record_batch(arrays, names=names)
