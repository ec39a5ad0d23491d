"""Fixed windows fired by each strategy's watermark: panes, completeness, latency (µs),
as :func:`theory.experiments.tradeoff` reports them.

Windows are ``[start, end)`` per key, Beam's ``FixedWindows(size, offset)`` (``offset``
normalised into ``[0, size)``), fired by the watermark (``AfterWatermark``) at the first
curve step ``t`` with ``W(t) > end - 1``. With ``finish=True`` (the default, as
:func:`theory.pipeline.simulator.simulate` does for a bounded source) the watermark also
jumps to MAX_TIMESTAMP at the last arrival, so every window fires. A window's first pane
holds its elements arriving at or before ``t``; completeness = first-pane count / all its
elements (0 if it never fires); latency = ``t - end``. Later data, allowed lateness, late
firings and the pane timestamps follow :class:`theory.experiments.first_panes.Firing`:
Spark computes each window's :class:`~theory.experiments.first_panes.WindowAggregates`
and theory derives the panes (:func:`~theory.experiments.first_panes.window_panes`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_backend.analytics.frames import by_name, concat_batches, session_of, to_pandas
from theory.columns import as_int, check_duration
from theory.experiments.first_panes import (
    FIRE_ONCE,
    Firing,
    WindowAggregates,
    WindowIndex,
    WindowPanes,
    check_last_window_end,
    finish_at,
    summary_row,
    window_panes,
)
from theory.experiments.first_panes import fire_times as first_fire_times
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_backend.analytics.layout import ArrivalLayout
    from spark_backend.analytics.strategies import Strategy

__all__ = ["fire_times", "window_rows", "window_summary", "windows"]

_NEVER = np.iinfo(np.int64).max


class Analysis(Protocol):
    """What these functions read of an analysis
    (:class:`spark_backend.analytics.analysis.WatermarkAnalysis`)."""

    @property
    def layout(self) -> ArrivalLayout: ...

    @property
    def strategies(self) -> tuple[Strategy, ...]: ...

    @property
    def late(self) -> pd.DataFrame: ...

    @property
    def names(self) -> list[str]: ...

    def curves(self) -> DataFrame: ...

#: Elements per task of the window aggregates (each task holds its rows in numpy).
_ROWS_PER_TASK = 1_000_000


def _size_and_offset(window_size: int, offset: int) -> tuple[int, int]:
    """The window size (µs, > 0) and the offset normalised into ``[0, size)``."""
    size = check_duration(window_size, "window_size", allow_zero=False)
    return size, as_int(offset, "offset") % size


def fire_times(
    an: Analysis,
    window_size: int,
    offset: int = 0,
    finish: bool = True,
    shift: int = 0,
) -> pd.DataFrame:
    """When each fixed window holding elements (by its end) first fires under each
    strategy: the first time ``W >= end + shift`` (``shift`` µs >= 0; ``lateness + 1``
    gives the time the window expires).

    One row per window end that holds at least one element, ascending: ``window_end``
    (µs) and one column per strategy with the fire time (µs), or -1 if the window never
    fires. Cost scales with the data (rows, curve steps), not with the time span: a trace
    spanning 2**62 µs has no more rows than its windows with data. Two Spark jobs.
    """
    size, off = _size_and_offset(window_size, offset)
    _check_last_end(an, size, off)
    ends = _window_ends(an, size, off)
    return _fire_times_many(an, ends, size, finish, [shift])[0]


def _fire_times_many(
    an: Analysis, ends: np.ndarray, size: int, finish: bool, shifts: list[int]
) -> list[pd.DataFrame]:
    """:func:`fire_times` for the given window ends, once per shift, in one Spark job. A
    threshold past MAX_TIMESTAMP is never reached (but by the finish)."""
    ns = len(an.names)
    bounds = [
        (int(ends[0]) - size + shift, min(int(ends[-1]) + shift, MAX_TIMESTAMP + 1))
        for shift in shifts
    ]
    reachable = [j for j, (base, last) in enumerate(bounds) if base < last]
    got = _first_time_per_count(an, [bounds[j] for j in reachable], size)
    # window k (k-th end from the first) fires at the first step where more than k
    # window ends are <= W: the earliest time over the counts c > k
    k = (ends - ends[0]) // size
    out = []
    for j in range(len(shifts)):
        frame = pd.DataFrame({"window_end": ends})
        for i, n in enumerate(an.names):
            fire = np.full(ends.size, _NEVER, dtype=np.int64)
            if j in reachable:
                sel = got[got["s"] == i + ns * reachable.index(j)].sort_values("c")
                c = sel["c"].to_numpy(np.int64)
                t = sel["t"].to_numpy(np.int64)
                if c.size:
                    suffix_min = np.minimum.accumulate(t[::-1])[::-1]
                    idx = np.searchsorted(c, k + 1, side="left")
                    has = idx < c.size
                    fire[has] = suffix_min[idx[has]]
            if finish:
                fire = np.minimum(fire, an.layout.last_arrival)
            fire[fire == _NEVER] = -1
            frame[n] = fire
        out.append(frame)
    return out


def _check_last_end(an: Analysis, size: int, off: int) -> None:
    """:func:`theory.experiments.first_panes.check_last_window_end` on the latest event
    time of the layout."""
    summ = an.layout.summary[an.layout.summary["rows"] > 0]
    check_last_window_end(int(summ["max_event"].max()), size, off)


def _window_ends(an: Analysis, size: int, off: int) -> np.ndarray:
    """The ends (µs, ascending, distinct) of the fixed windows holding an element."""
    e = F.col("event_time").cast("long")
    ends = to_pandas(
        an.layout.source.select((window_start(e, size, off) + F.lit(size)).alias("end")).distinct()
    )
    return np.sort(ends["end"].to_numpy(np.int64))


def _first_time_per_count(
    an: Analysis, bounds: list[tuple[int, int]], size: int
) -> pd.DataFrame:
    """Per strategy and bounds ``(base, last_end)`` (``s = strategy + strategies *
    bounds index``) and count ``c`` of window ends ``<= W`` (from ``W`` clamped to
    ``[base, last_end]``, so no overflow), the first processing time ``t`` it is
    reached. One Spark job for every bounds."""
    ns = len(an.names)
    counts = [
        F.struct(
            F.lit(i + ns * j).alias("s"),
            (F.least(F.greatest(by_name(n), F.lit(base)), F.lit(last)) - F.lit(base)).alias("x"),
        )
        for j, (base, last) in enumerate(bounds)
        for i, n in enumerate(an.names)
    ]
    if not counts:
        return pd.DataFrame({"s": [], "c": [], "t": []})
    return to_pandas(
        an.curves()
        .select("processing_time", F.explode(F.array(*counts)).alias("y"))
        .select("processing_time", "y.s", F.expr(f"y.x div {size}").alias("c"))
        .where(F.col("c").isNotNull())
        .groupBy("s", "c")
        .agg(F.min("processing_time").alias("t"))
    )


def window_start(e: Column, size: int, offset: int) -> Column:
    """``e - ((e - offset) mod size)`` (Beam's FixedWindows start), exact on bigints."""
    return e - F.pmod(F.pmod(e, F.lit(size)) - F.lit(offset), F.lit(size))


def windows(
    an: Analysis,
    window_size: int,
    offset: int = 0,
    finish: bool = True,
    firing: Firing = FIRE_ONCE,
    curves: Mapping[str, StepSeries] | None = None,
) -> pd.DataFrame:
    """Per strategy and per (key, fixed window): the window's panes under ``firing``.
    ``curves``: every strategy's curve if collected already
    (:meth:`~spark_backend.analytics.analysis.WatermarkAnalysis.all_curves`): the fire
    times then come from them, with no Spark job.

    Columns: ``strategy``, ``key``, ``window_start``, ``window_end`` (µs),
    ``elements`` (all the window's elements), ``first_pane`` (those in its first pane),
    ``fire_time`` (of the first pane, µs; -1 if it has none), ``completeness``
    (``first_pane / elements``), ``latency`` (``fire_time - window_end`` µs, NaN for no
    pane), ``panes``, ``final_pane`` (elements in the last pane) and ``pane_timestamp``
    (the first pane's output timestamp, µs) with ``pane_timestamp_lag`` (``window_end -
    1`` minus it), and ``fired_by_end_of_input`` (its first pane fired at the last arrival
    only because the input ended: :func:`~theory.experiments.first_panes.finish_at`).
    Rows by strategy, then window end, then key.
    """
    size, off = _size_and_offset(window_size, offset)
    _check_last_end(an, size, off)
    ends = _window_ends(an, size, off)
    last = an.layout.last_arrival if finish else None
    if curves is None:
        on_time, expiry = _fire_times_many(
            an, ends, size, False, [0, firing.allowed_lateness + 1]
        )
        for n in an.names:
            expiry[n] = finish_at(expiry[n].to_numpy(np.int64), last)[0]
    else:  # collected already: the fire times by numpy, as the local engine, no Spark job
        on_time = pd.DataFrame({"window_end": ends})
        expiry = pd.DataFrame({"window_end": ends})
        for n in an.names:
            on_time[n] = first_fire_times(curves[n], ends)
            expiry[n] = first_fire_times(curves[n], firing.expiry_ends(ends), last)
    by_end = {}
    for n in an.names:
        on_time[n], by_end[n] = finish_at(on_time[n].to_numpy(np.int64), last)
    got = _aggregates(an, on_time, expiry, size, off)
    at = np.searchsorted(ends, got["window_end"].to_numpy(np.int64))
    frames = [
        _strategy_windows(name, got, i, firing, by_end[name][at])
        for i, name in enumerate(an.names)
    ]
    return pd.concat(frames, ignore_index=True)


def _aggregates(
    an: Analysis, on_time: pd.DataFrame, expiry: pd.DataFrame, size: int, off: int
) -> pd.DataFrame:
    """Per (key, window): ``elements``, and per strategy ``i`` the columns of
    :class:`~theory.experiments.first_panes.WindowAggregates` suffixed ``_<i>`` and its
    on-time fire time ``_t<i>``, by window end then key. One Spark job, one shuffle: the
    elements partitioned by (key, window), each task computing its windows' aggregates
    with the local engine's numpy kernel (:meth:`~theory.experiments.first_panes.
    WindowIndex.aggregates`) from the fire and expiry times (per window end, shipped in
    the task's closure)."""
    names = an.names
    ends = on_time["window_end"].to_numpy(np.int64)
    fire = np.stack([on_time[n].to_numpy(np.int64) for n in names])
    expire = np.stack([expiry[n].to_numpy(np.int64) for n in names])
    src = an.layout.source
    has_key = "key" in src.columns
    key = F.col("key") if has_key else F.lit(0).cast("long")
    key_type = src.schema["key"].dataType if has_key else T.LongType()
    e = F.col("event_time").cast("long")
    rows = src.select(
        key.alias("key"), F.col("arrival_time").cast("long").alias("a"), e.alias("e"),
        window_start(e, size, off).alias("window_start"),
    )
    # the shuffle's partitions, or more when a task would hold over _ROWS_PER_TASK rows
    parts = max(
        int(session_of(src).conf.get("spark.sql.shuffle.partitions")),
        -(-an.layout.rows // _ROWS_PER_TASK),
    )
    rows = rows.repartition(parts, "key", "window_start")

    def per_window(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = concat_batches(batches)
        if got is None:
            return
        codes = pc.dictionary_encode(got.column("key").combine_chunks(), null_encoding="encode")
        index = WindowIndex.of(
            got.column("e").to_numpy(), got.column("a").to_numpy(),
            codes.indices.to_numpy(zero_copy_only=False), size, off,
        )
        at = np.searchsorted(ends, index.window_end)  # every window end is among them
        cols = {
            "key": codes.dictionary.take(pa.array(index.key)),
            "window_start": pa.array(index.window_end - size),
            "window_end": pa.array(index.window_end),
            "elements": pa.array(index.elements.astype(np.int64)),
        }
        for i in range(len(names)):
            agg = index.aggregates(fire[i][at], expire[i][at])
            for f, v in zip(WindowAggregates._fields, agg, strict=True):
                cols[f"{f}_{i}"] = pa.array(v.astype(np.int64))
            cols[f"_t{i}"] = pa.array(fire[i][at])
        yield pa.RecordBatch.from_pydict(cols)

    fields = ["window_start", "window_end", "elements"]
    for i in range(len(names)):
        fields += [f"{f}_{i}" for f in WindowAggregates._fields] + [f"_t{i}"]
    schema = T.StructType(
        [T.StructField("key", key_type, True)]
        + [T.StructField(c, T.LongType(), False) for c in fields]
    )
    out = to_pandas(rows.mapInArrow(per_window, schema))
    return out.sort_values(["window_end", "key"], kind="stable").reset_index(drop=True)


def _column(got: pd.DataFrame, name: str) -> np.ndarray:
    """An aggregate column as int64 (exact: the Spark side leaves no nulls)."""
    return got[name].to_numpy(dtype=np.int64)


def _strategy_windows(
    name: str, got: pd.DataFrame, i: int, firing: Firing, by_end: np.ndarray
) -> pd.DataFrame:
    """Strategy ``i``'s rows of :func:`windows` from :func:`_aggregates`; ``by_end``:
    per row, whether the end of input set its on-time fire time."""
    agg = WindowAggregates(*(_column(got, f"{f}_{i}") for f in WindowAggregates._fields))
    end = got["window_end"].to_numpy(dtype=np.int64)
    elements = got["elements"].to_numpy(dtype=np.int64)
    p = window_panes(agg, end, _column(got, f"_t{i}"), firing, by_end)
    start = got["window_start"].to_numpy(dtype=np.int64)
    return window_rows(name, got["key"], start, end, elements, p)


def window_rows(
    name: str, key: object, start: np.ndarray, end: np.ndarray, elements: np.ndarray,
    p: WindowPanes,
) -> pd.DataFrame:
    """One strategy's rows of :func:`windows` from its windows' keys, bounds (µs),
    element counts and panes (both engines build them here)."""
    return pd.DataFrame(
        {
            "strategy": name,
            "key": key,
            "window_start": start,
            "window_end": end,
            "elements": elements,
            "first_pane": p.first,
            "fire_time": p.fire_time,
            "completeness": p.first / elements,
            "latency": p.latency,
            "panes": p.panes,
            "final_pane": p.final,
            "pane_timestamp": p.timestamp,
            "pane_timestamp_lag": p.timestamp_lag,
            "fired_by_end_of_input": p.end_of_input,
        }
    )


def window_summary(
    an: Analysis,
    window_size: int,
    offset: int = 0,
    finish: bool = True,
    firing: Firing = FIRE_ONCE,
    curves: Mapping[str, StepSeries] | None = None,
    include_end_of_input: bool = False,
    per_window: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row of window metrics per strategy: the columns of
    :func:`theory.experiments.first_panes.summary_row` (the trace-determined columns of
    :class:`theory.pipeline.metrics.StrategyMetrics`, then the windows fired by the end
    of input, late panes, final completeness and the pane timestamps' lag; µs).
    ``include_end_of_input``: the latency percentiles count the windows fired by the end
    of input. ``per_window``: :func:`windows`'s frame if computed already."""
    w = per_window
    if w is None:
        w = windows(an, window_size, offset, finish, firing, curves)
    late = an.late.set_index("strategy")
    rows = []
    for s in an.strategies:
        sel = w[w["strategy"] == s.name]
        panes = WindowPanes(
            *(sel[c].to_numpy() for c in (
                "first_pane", "fire_time", "latency", "panes", "final_pane",
                "pane_timestamp", "pane_timestamp_lag", "fired_by_end_of_input",
            ))
        )
        rows.append(
            summary_row(
                s.name,
                sel["elements"].to_numpy(),
                panes,
                int(late.loc[s.name, "late"]),
                int(an.layout.rows),
                include_end_of_input,
            )
        )
    return pd.DataFrame(rows)
