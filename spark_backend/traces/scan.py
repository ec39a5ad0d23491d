"""Exact prefix sums over a DataFrame in row order: a two-pass parallel scan.

Pass one sums each Spark partition (per group) and collects the sums on the driver;
pass two runs ``mapInArrow`` over each partition, continuing the cumulative sum from
the total of the partitions before it. Integer sums make the result exact and
independent of the partitioning, which is what lets the generators promise one trace
per seed whatever ``num_partitions`` is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from theory.columns import check_count

__all__ = ["prefix_sums", "slices"]


def slices(spark: SparkSession, n: int, num_partitions: int | None) -> int:
    """Spark partitions for ``n`` generated rows: ``num_partitions``, or the default
    parallelism (at least one partition per 2M rows, at most one per row)."""
    if num_partitions is not None:
        return check_count(num_partitions, "num_partitions", minimum=1)
    try:
        par = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect
        par = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    return max(1, min(max(par, -(-n // 2_000_000)), max(1, n)))


def prefix_sums(
    df: DataFrame,
    value: str,
    out: str,
    base: int,
    keep: Sequence[str],
    group: str | None = None,
    groups: int = 1,
    index: str | None = None,
) -> tuple[DataFrame, int]:
    """The columns ``keep`` of ``df`` with ``out`` = ``base`` + the inclusive prefix sum of
    bigint ``value`` in row order, restarting per ``group`` (a column in ``range(groups)``)
    when given, and ``index`` (when given) = the row's 0-based position in row order; and
    the number of rows.

    ``df`` must hold ``_pid`` (its ``spark_partition_id()``), each partition in row order
    (as ``spark.range`` and narrow steps after it keep them). Runs one Spark job (pass
    one) here; the result is lazy. Only ``keep`` crosses back from Python: every column
    through Arrow costs time.
    """
    keys = ["_pid"] + ([group] if group else [])
    rows = df.groupBy(*keys).agg(F.sum(value).alias("s"), F.count(F.lit(1)).alias("c")).collect()
    sums = {(int(r["_pid"]), int(r[group]) if group else 0): int(r["s"]) for r in rows}
    counts = {(int(r["_pid"]), int(r[group]) if group else 0): int(r["c"]) for r in rows}
    carries = _carries(sums, base, groups)
    offsets = {pid: int(c.sum()) for pid, c in _carries(counts, 0, groups).items()}
    kept = list(keep)
    added = [out] + ([index] if index else [])
    schema = T.StructType(
        [df.schema[c] for c in kept] + [T.StructField(c, T.LongType()) for c in added]
    )

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        carry: np.ndarray | None = None
        offset = 0
        for b in batches:
            if b.num_rows == 0:
                continue
            if carry is None:
                pid = int(b.column("_pid")[0].as_py())
                carry, offset = carries[pid].copy(), offsets[pid]
            g = b.column(group).to_numpy() if group else None
            cols = [b.column(c) for c in kept]
            cols.append(pa.array(_grouped_cumsum(b.column(value).to_numpy(), g, carry)))
            if index:
                cols.append(pa.array(np.arange(offset, offset + b.num_rows, dtype=np.int64)))
                offset += b.num_rows
            yield pa.record_batch(cols, kept + added)

    needed = dict.fromkeys(["_pid", value, *([group] if group else []), *kept])
    return df.select(*needed).mapInArrow(scan, schema), sum(counts.values())


def _carries(sums: dict[tuple[int, int], int], base: int, groups: int) -> dict[int, np.ndarray]:
    """Per partition, per group: ``base`` + the sums of the partitions before it."""
    per_pid: dict[int, np.ndarray] = {}
    for (pid, g), s in sums.items():
        per_pid.setdefault(pid, np.zeros(groups, dtype=np.int64))[g] += s
    acc = np.full(groups, base, dtype=np.int64)
    out: dict[int, np.ndarray] = {}
    for pid in sorted(per_pid):
        out[pid] = acc.copy()
        acc += per_pid[pid]
    return out


def _grouped_cumsum(v: np.ndarray, g: np.ndarray | None, carry: np.ndarray) -> np.ndarray:
    """Cumulative sums of ``v`` per group ``g`` (all one group when None), continuing
    from ``carry`` (updated)."""
    if g is None:
        out = np.cumsum(v, dtype=np.int64)
        out += carry[0]
        carry[0] = out[-1]
        return out
    order = np.argsort(g, kind="stable")
    gs, vs = g[order], v[order]
    new = np.concatenate(([True], gs[1:] != gs[:-1]))
    cs = np.cumsum(vs, dtype=np.int64)
    first = np.flatnonzero(new)
    seg_base = np.concatenate(([0], cs[first[1:] - 1]))
    sorted_out = cs - seg_base[np.cumsum(new) - 1] + carry[gs]
    last = np.concatenate((first[1:] - 1, [gs.size - 1]))
    carry[gs[last]] = sorted_out[last]
    out = np.empty_like(sorted_out)
    out[order] = sorted_out
    return out
