"""Fixed windows fired once by each strategy's watermark: first panes, completeness,
latency (µs), as :func:`theory.experiments.tradeoff` reports them.

Windows are ``[start, end)`` per key, Beam's ``FixedWindows(size, offset)`` (``offset``
normalised into ``[0, size)``), fired once by the watermark (``AfterWatermark``, no
allowed lateness): at the first curve step ``t`` with ``W(t) > end - 1``. With
``finish=True`` (the default, as :func:`theory.pipeline.simulator.simulate` does for a
bounded source) the watermark also jumps to MAX_TIMESTAMP at the last arrival, so every
window fires. A window's first pane holds its elements arriving at or before ``t``;
completeness = first-pane count / all its elements (0 if it never fires); latency =
``t - end``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_backend.analytics.frames import by_name, session_of, to_pandas
from theory.columns import as_int, check_duration
from theory.experiments.first_panes import check_last_window_end, summary_row

if TYPE_CHECKING:
    from spark_backend.analytics.analysis import WatermarkAnalysis

__all__ = ["fire_times", "window_summary", "windows"]

_NEVER = np.iinfo(np.int64).max


def _size_and_offset(window_size: int, offset: int) -> tuple[int, int]:
    """The window size (µs, > 0) and the offset normalised into ``[0, size)``."""
    size = check_duration(window_size, "window_size", allow_zero=False)
    return size, as_int(offset, "offset") % size


def fire_times(
    an: WatermarkAnalysis, window_size: int, offset: int = 0, finish: bool = True
) -> pd.DataFrame:
    """When each fixed window holding elements (by its end) first fires under each
    strategy.

    One row per window end that holds at least one element, ascending: ``window_end``
    (µs) and one column per strategy with the fire time (µs), or -1 if the window never
    fires. Cost scales with the data (rows, curve steps), not with the time span: a trace
    spanning 2**62 µs has no more rows than its windows with data. Two Spark jobs.
    """
    size, off = _size_and_offset(window_size, offset)
    _check_last_end(an, size, off)
    ends = _window_ends(an, size, off)
    out = pd.DataFrame({"window_end": ends})
    got = _first_time_per_count(an, int(ends[0]) - size, int(ends[-1]), size)
    # window k (k-th end from the first) fires at the first step where more than k
    # window ends are <= W: the earliest time over the counts c > k
    k = (ends - ends[0]) // size
    for i, n in enumerate(an.names):
        sel = got[got["s"] == i].sort_values("c")
        c = sel["c"].to_numpy(np.int64)
        t = sel["t"].to_numpy(np.int64)
        fire = np.full(ends.size, _NEVER, dtype=np.int64)
        if c.size:
            suffix_min = np.minimum.accumulate(t[::-1])[::-1]
            j = np.searchsorted(c, k + 1, side="left")
            has = j < c.size
            fire[has] = suffix_min[j[has]]
        if finish:
            fire = np.minimum(fire, an.layout.last_arrival)
        fire[fire == _NEVER] = -1
        out[n] = fire
    return out


def _check_last_end(an: WatermarkAnalysis, size: int, off: int) -> None:
    """:func:`theory.experiments.first_panes.check_last_window_end` on the latest event
    time of the layout."""
    summ = an.layout.summary[an.layout.summary["rows"] > 0]
    check_last_window_end(int(summ["max_event"].max()), size, off)


def _window_ends(an: WatermarkAnalysis, size: int, off: int) -> np.ndarray:
    """The ends (µs, ascending, distinct) of the fixed windows holding an element."""
    e = F.col("event_time").cast("long")
    ends = to_pandas(
        an.layout.source.select((window_start(e, size, off) + F.lit(size)).alias("end")).distinct()
    )
    return np.sort(ends["end"].to_numpy(np.int64))


def _first_time_per_count(
    an: WatermarkAnalysis, base: int, last_end: int, size: int
) -> pd.DataFrame:
    """Per strategy ``s`` and count ``c`` of window ends ``<= W`` (from ``W`` clamped to
    ``[base, last_end]``, so no overflow), the first processing time ``t`` it is reached."""
    counts = [
        F.struct(
            F.lit(i).alias("s"),
            (F.least(F.greatest(by_name(n), F.lit(base)), F.lit(last_end)) - F.lit(base)).alias(
                "x"
            ),
        )
        for i, n in enumerate(an.names)
    ]
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
    an: WatermarkAnalysis, window_size: int, offset: int = 0, finish: bool = True
) -> pd.DataFrame:
    """Per strategy and per (key, fixed window): the window's first firing.

    Columns: ``strategy``, ``key``, ``window_start``, ``window_end`` (µs),
    ``elements`` (all the window's elements), ``first_pane`` (those arriving at or
    before the firing), ``fire_time`` (µs; -1 if it never fires, or if none of its
    elements arrived by then, so that it has no pane), ``completeness``
    (``first_pane / elements``) and ``latency`` (``fire_time - window_end`` µs, NaN
    if it never fires). Rows by strategy, then window end, then key.
    """
    size, off = _size_and_offset(window_size, offset)
    got = _first_panes(an, fire_times(an, size, off, finish), size, off)
    frames = [_strategy_windows(name, got, i) for i, name in enumerate(an.names)]
    return pd.concat(frames, ignore_index=True)


def _first_panes(an: WatermarkAnalysis, fires: pd.DataFrame, size: int, off: int) -> pd.DataFrame:
    """Per (key, window): ``elements``, and per strategy ``i`` the first pane ``_p<i>``
    and fire time ``_t<i>`` (one Spark job: the elements joined with the broadcast fire
    times), by window end then key."""
    fire_df = session_of(an.layout.source).createDataFrame(
        fires.rename(columns={n: f"_f{i}" for i, n in enumerate(an.names)})
    )
    src = an.layout.source
    key = F.col("key") if "key" in src.columns else F.lit(0).cast("long")
    el = src.select(
        key.alias("key"),
        F.col("arrival_time").cast("long").alias("arrival_time"),
        window_start(F.col("event_time").cast("long"), size, off).alias("window_start"),
    ).withColumn("window_end", F.col("window_start") + F.lit(size))
    joined: DataFrame = el.join(F.broadcast(fire_df), "window_end", "left")
    aggs = [F.count(F.lit(1)).alias("elements")]
    for i in range(len(an.names)):
        f = F.col(f"_f{i}")
        in_first = (f >= 0) & (F.col("arrival_time") <= f)
        aggs.append(F.count(F.when(in_first, F.lit(1))).alias(f"_p{i}"))
        aggs.append(F.first(f).alias(f"_t{i}"))
    got = to_pandas(joined.groupBy("key", "window_start", "window_end").agg(*aggs))
    return got.sort_values(["window_end", "key"], kind="stable").reset_index(drop=True)


def _strategy_windows(name: str, got: pd.DataFrame, i: int) -> pd.DataFrame:
    """Strategy ``i``'s rows of :func:`windows` from :func:`_first_panes`."""
    fire = got[f"_t{i}"].to_numpy(dtype=np.int64)
    first = got[f"_p{i}"].to_numpy(dtype=np.int64)
    elements = got["elements"].to_numpy(dtype=np.int64)
    end = got["window_end"].to_numpy(dtype=np.int64)
    # a window whose elements all came after the watermark passed it holds no state
    # when the watermark fires it: no pane, as Beam (and the simulator)
    fire = np.where(first > 0, fire, -1)
    return pd.DataFrame(
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


def window_summary(
    an: WatermarkAnalysis, window_size: int, offset: int = 0, finish: bool = True
) -> pd.DataFrame:
    """One row per strategy with the trace-determined columns of
    :class:`theory.pipeline.metrics.StrategyMetrics`: ``late_count``, ``late_fraction``,
    ``dropped`` (elements after their window's firing), ``windows``,
    ``completeness_mean``, ``complete_fraction`` and ``window_latency_p50/p90/p99``
    (µs, over the windows that fire; numpy's linear percentiles)."""
    w = windows(an, window_size, offset, finish)
    late = an.late.set_index("strategy")
    rows = []
    for s in an.strategies:
        sel = w[w["strategy"] == s.name]
        rows.append(
            summary_row(
                s.name,
                sel["elements"].to_numpy(),
                sel["first_pane"].to_numpy(),
                sel["latency"].to_numpy(),
                int(late.loc[s.name, "late"]),
                int(an.layout.rows),
            )
        )
    return pd.DataFrame(rows)
