"""Strategies evaluated on a trace: :func:`analyze` and :class:`WatermarkAnalysis`.

:func:`analyze` runs the analysis pass (:mod:`spark_backend.analytics.passes`) once,
keeps its table persisted, and combines its small part on the driver: the late counts
and each bucket's percentile carry (the value latched before it: a prefix maximum of the
buckets' maxima). Curves stay in Spark (lazy) until collected; times are µs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import ArrayLike
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_backend.analytics import windows
from spark_backend.analytics.frames import by_name, to_pandas
from spark_backend.analytics.layout import ArrivalLayout, prepare
from spark_backend.analytics.passes import (
    KIND_CAND,
    KIND_CURVE,
    KIND_LATE,
    KIND_MAX,
    KIND_PCT,
    KIND_SEQ,
    run_pass,
)
from spark_backend.analytics.sequential import run_sequential
from spark_backend.analytics.strategies import Strategy, parse_strategies
from theory.columns import as_int, int_column
from theory.experiments.first_panes import FIRE_ONCE, Firing
from theory.series import StepSeries
from theory.time import MIN_TIMESTAMP
from theory.watermarks.buckets import BucketCarry

__all__ = ["WatermarkAnalysis", "analyze"]


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
    carries: list[BucketCarry] = field(repr=False)
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
        the times where it may change (every change is among them), and so has one
        computed in one pass (:mod:`spark_backend.analytics.sequential`), at its steps;
        each is null in the other rows. Names hold ``:`` and ``.``: select them with backticks
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
        return self.table.where(F.col("kind").isin(KIND_CURVE, KIND_PCT, KIND_SEQ)).select(*cols)

    def curve(self, name: str) -> StepSeries:
        """One strategy's curve collected (Arrow) into a :class:`StepSeries`: a step per
        unique arrival time for perfect and bounded (as :mod:`theory.watermarks`),
        only the changes for percentile (as
        :func:`theory.watermarks.percentile_sweep.percentile_curve`)."""
        if name not in self.names:
            raise KeyError(f"no strategy {name!r}; have {self.names}")
        got = (
            self.curves()
            .select("processing_time", by_name(name))
            .where(by_name(name).isNotNull())
            .toArrow()
        )
        times = got.column(0).to_numpy()
        vals = got.column(1).to_numpy()
        order = np.argsort(times, kind="stable")
        out = StepSeries(times[order], vals[order], MIN_TIMESTAMP)
        if self.strategies[self.names.index(name)].kind == "percentile":
            return out.compressed()
        return out

    def all_curves(self) -> dict[str, StepSeries]:
        """Every strategy's :meth:`curve`, collected in one Spark job (one Arrow table of
        the curve rows)."""
        got = self.curves().toArrow()
        times = got.column("processing_time").to_numpy()
        out = {}
        for s in self.strategies:
            col = got.column(s.name)
            ok = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False))
            t = times[ok]
            order = np.argsort(t, kind="stable")
            v = pc.fill_null(col, 0).to_numpy()[ok]
            series = StepSeries(t[order], v[order], MIN_TIMESTAMP)
            out[s.name] = series.compressed() if s.kind == "percentile" else series
        return out

    def values_at(self, times: ArrayLike, *, strict: bool = False) -> pd.DataFrame:
        """Every curve at the given processing times (µs), exactly: ``W.at(t)`` (the
        value after every step at or before ``t``), or with ``strict`` ``W.before(t)``
        (steps strictly before ``t``), as :class:`theory.series.StepSeries` defines them.

        Returns ``processing_time`` (the sorted distinct ``times``) plus one column per
        strategy (µs; MIN_TIMESTAMP before the first step). One Spark job: each curve row
        is mapped to the first requested time it is visible at, the maxima per time are
        collected, and a running maximum on the driver makes them the (monotone) curves.
        """
        grid = np.unique(int_column(times, "times"))
        agg = self._maxima_by_grid_time(grid, strict)
        out = pd.DataFrame({"processing_time": grid})
        g = agg.column("g").to_numpy()
        for i, n in enumerate(self.names):
            v = np.full(grid.size, MIN_TIMESTAMP, dtype=np.int64)
            v[g] = agg.column(f"v{i}").to_numpy()
            out[n] = np.maximum.accumulate(v) if v.size else v  # every curve is monotone
        return out

    def _maxima_by_grid_time(self, grid: np.ndarray, strict: bool) -> pa.Table:
        """Per grid index ``g``, each curve's largest value among the steps first
        visible at ``grid[g]`` (the Spark job of :meth:`values_at`)."""
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
            "processing_time", *[by_name(n).alias(f"v{i}") for i, n in enumerate(self.names)]
        )
        return (
            curves.mapInArrow(visible_from, schema)
            .groupBy("g")
            .agg(*[F.max(f"v{i}").alias(f"v{i}") for i in range(ns)])
            .toArrow()
        )

    def sample(self, points: int = 2000) -> pd.DataFrame:
        """Every curve at ``points`` evenly spaced processing times from the first to the
        last arrival: ``processing_time`` plus one column per strategy (µs), for plots."""
        lo, hi = self.layout.first_arrival, self.layout.last_arrival
        points = max(2, as_int(points, "points"))
        step = max(1, -(-(hi - lo) // (points - 1)))
        return self.values_at(lo + step * np.arange(points, dtype=np.int64))

    def fire_times(self, window_size: int, offset: int = 0, finish: bool = True) -> pd.DataFrame:
        """When each fixed window first fires: :func:`spark_backend.analytics.windows.
        fire_times`."""
        return windows.fire_times(self, window_size, offset, finish)

    def windows(self, window_size: int, offset: int = 0, finish: bool = True,
                firing: Firing = FIRE_ONCE,
                curves: Mapping[str, StepSeries] | None = None) -> pd.DataFrame:
        """Each (key, fixed window)'s panes: :func:`spark_backend.analytics.windows.
        windows`."""
        return windows.windows(self, window_size, offset, finish, firing, curves)

    def window_summary(self, window_size: int, offset: int = 0, finish: bool = True,
                       firing: Firing = FIRE_ONCE,
                       curves: Mapping[str, StepSeries] | None = None,
                       include_end_of_input: bool = False,
                       per_window: pd.DataFrame | None = None) -> pd.DataFrame:
        """One row of window metrics per strategy: :func:`spark_backend.analytics.
        windows.window_summary`."""
        return windows.window_summary(
            self, window_size, offset, finish, firing, curves, include_end_of_input,
            per_window,
        )


def analyze(
    data: DataFrame | ArrivalLayout,
    strategies: Sequence[str | Strategy],
    *,
    buckets: int | None = None,
    storage: StorageLevel = StorageLevel.MEMORY_AND_DISK,
) -> WatermarkAnalysis:
    """Evaluate ``strategies`` (specs, see :func:`~spark_backend.analytics.strategies.
    parse_strategy`) on a trace.

    ``data`` is a trace DataFrame (cut here with :func:`prepare`; that layout is released
    by :meth:`WatermarkAnalysis.unpersist`) or a layout. Runs one Python pass over the
    buckets, keeps its result (persisted) and combines the small part on the driver: the
    late counts and the percentile carries (the latched value before each bucket).
    """
    parsed = parse_strategies(strategies)
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
    table = run_pass(layout, parsed, carries)
    whole = run_sequential(layout.source, parsed)  # the strategies computed in one pass
    if whole is not None:
        table = table.unionByName(whole)
    table = table.persist(storage)
    small = to_pandas(table.where(F.col("kind").isin(KIND_LATE, KIND_MAX, KIND_CAND)))
    late = _combine(small, parsed, carries)
    table_late = pd.DataFrame(
        {
            "strategy": [s.name for s in parsed],
            "elements": layout.rows,
            "late": late,
            "late_fraction": late / layout.rows,
        }
    )
    return WatermarkAnalysis(layout, parsed, table_late, carries, table, owns)


def _combine(
    small: pd.DataFrame, strategies: Sequence[Strategy], carries: list[BucketCarry]
) -> np.ndarray:
    """The late count of every strategy, from the pass's per-bucket rows; sets each
    bucket's percentile carries (``carries[j].latched``) on the way."""
    lates = small[small["kind"] == KIND_LATE]
    maxes = small[small["kind"] == KIND_MAX]
    cands = small[small["kind"] == KIND_CAND]
    late = np.zeros(len(strategies), dtype=np.int64)
    for i, s in enumerate(strategies):
        late[i] = int(lates[f"v{i}"].sum())
        if s.kind != "percentile":
            continue
        carry = _latched_before_each_bucket(maxes, i, len(carries))
        for j, c in enumerate(carries):
            c.latched[i] = int(carry[j])
        late[i] += _late_by_carry(cands, i, carry)
    return late


def _latched_before_each_bucket(maxes: pd.DataFrame, i: int, buckets: int) -> np.ndarray:
    """Strategy ``i``'s latched value before each bucket: the prefix maximum of the
    earlier buckets' largest values."""
    lmax = np.full(buckets, MIN_TIMESTAMP, dtype=np.int64)
    lmax[maxes["bucket"].to_numpy(dtype=np.int64)] = maxes[f"v{i}"].to_numpy(dtype=np.int64)
    return np.maximum.accumulate(np.insert(lmax, 0, MIN_TIMESTAMP))[:-1]


def _late_by_carry(cands: pd.DataFrame, i: int, carry: np.ndarray) -> int:
    """Candidates not late within their bucket but late given its carry."""
    sel = cands[cands[f"v{i}"].notna()]
    if not len(sel):
        return 0
    cj = carry[sel["bucket"].to_numpy(dtype=np.int64)]
    return int(np.count_nonzero(sel["t"].to_numpy(dtype=np.int64) < cj))
