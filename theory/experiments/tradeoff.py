"""The latency vs completeness trade-off of watermark strategies on one trace.

Each :class:`Strategy` is a source watermark (a ``theory.watermarks.spec`` spec, for example
``perfect``, ``bounded:10s`` or ``percentile:0.9``) feeding one grouping stage: per-key
fixed windows summing values. Without late firings the window fires once at the watermark
(``AfterWatermark``) and later data is dropped; with late firings (``DefaultTrigger``,
accumulating, ``allowed_lateness``) late data updates the result.

For every strategy :func:`tradeoff` reports :class:`~theory.pipeline.metrics.StrategyMetrics` and
whether its point (median window latency, mean first-pane completeness) is on the Pareto
frontier: no other strategy is at least as fast and at least as complete, and better in one.
Its ``watermark_lag_*`` are the source watermark's lag, exact and time-weighted as the
command line's ``source_lag_*``; its latency percentiles leave out the windows fired by
the end of input as the command line's do. :meth:`TradeoffResult.table` names the units.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from theory.columns import check_duration
from theory.data.trace import Trace
from theory.experiments.first_panes import Firing
from theory.experiments.html import html_table
from theory.pipeline.metrics import StrategyMetrics, as_table, eventual_counts, strategy_metrics
from theory.pipeline.simulator import SimulationResult, simulate
from theory.pipeline.stages import GroupByWindow, Pipeline, Source
from theory.series import lag_quantiles
from theory.time import HOUR, MINUTE
from theory.watermarks.spec import make_source_watermark
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import AfterCount, AfterWatermark, DefaultTrigger
from theory.windowing.windows import FixedWindows, window_fn_from_spec

#: The name of the grouping stage in every strategy's pipeline.
STAGE = "window"
#: The name of its source stage.
SOURCE = "in"


@dataclass(frozen=True)
class Strategy:
    """A named source watermark, optionally with late firings (µs of allowed lateness)."""

    name: str
    watermark: str
    late_firings: bool = False
    allowed_lateness: int = 0

    def __post_init__(self) -> None:
        check_duration(self.allowed_lateness, "allowed_lateness")
        if self.late_firings and self.allowed_lateness == 0:
            raise ValueError(f"strategy {self.name!r}: late firings need allowed_lateness > 0")

    def pipeline(self, window_size: int) -> Pipeline:
        """Source -> per-key fixed windows (sum) under this strategy."""
        if self.late_firings:
            windowing = WindowingStrategy(
                FixedWindows(window_size),
                DefaultTrigger(),
                AccumulationMode.ACCUMULATING,
                allowed_lateness=self.allowed_lateness,
            )
        else:
            windowing = WindowingStrategy(
                FixedWindows(window_size),
                AfterWatermark(),
                allowed_lateness=self.allowed_lateness,
            )
        return Pipeline(
            [Source(SOURCE, self.watermark), GroupByWindow(STAGE, SOURCE, windowing, "sum")]
        )


def grouping_pipeline(
    watermark: str,
    windowing: str,
    *,
    allowed_lateness: int = 0,
    late_firings: bool = False,
    timestamp_combiner: str = "eow",
) -> Pipeline:
    """Source (``watermark``, a source-watermark spec) -> per-key ``windowing``
    (``fixed:SIZE``, ``sliding:SIZE/PERIOD`` or ``sessions:GAP``) summing values ->
    output: the pipeline ``watermarks simulate --trace`` runs on a user's trace.

    Each window fires at the watermark (``AfterWatermark``); with ``late_firings`` also
    once per late element within ``allowed_lateness`` µs (``AfterWatermark(late=
    AfterCount(1))``, accumulating). ``timestamp_combiner`` (``eow``, ``earliest`` or
    ``latest``) sets the panes' timestamps and the watermark holds (figures 3.7, 3.8).
    ValueError names a bad spec, combiner or lateness.
    """
    combiners = {
        "eow": TimestampCombiner.OUTPUT_AT_EOW,
        "earliest": TimestampCombiner.OUTPUT_AT_EARLIEST,
        "latest": TimestampCombiner.OUTPUT_AT_LATEST,
    }
    firing = Firing(allowed_lateness, late_firings, timestamp_combiner)  # checks them
    lateness = firing.allowed_lateness
    strategy = WindowingStrategy(
        window_fn_from_spec(windowing),
        AfterWatermark(late=AfterCount(1)) if late_firings else AfterWatermark(),
        AccumulationMode.ACCUMULATING if late_firings else AccumulationMode.DISCARDING,
        allowed_lateness=lateness,
        timestamp_combiner=combiners[timestamp_combiner],
    )
    return Pipeline([Source(SOURCE, watermark), GroupByWindow(STAGE, SOURCE, strategy, "sum")])


DEFAULT_STRATEGIES: tuple[Strategy, ...] = (
    Strategy("perfect", "perfect"),
    Strategy("bounded 1s", "bounded:1s"),
    Strategy("bounded 10s", "bounded:10s"),
    Strategy("bounded 1m", "bounded:1m"),
    Strategy("percentile 50%", "percentile:0.5"),
    Strategy("percentile 90%", "percentile:0.9"),
    Strategy("percentile 99%", "percentile:0.99"),
    Strategy("percentile 100%", "percentile:1"),
    Strategy("bounded 10s + late firings", "bounded:10s", True, 1 * HOUR),
)


@dataclass(frozen=True)
class TradeoffResult:
    """Rows in strategy order, the frontier flags, and each strategy's simulation."""

    rows: list[StrategyMetrics]
    on_frontier: list[bool]
    results: dict[str, SimulationResult] = dataclasses.field(repr=False)  # large: not shown

    def table(self) -> dict[str, list[object]]:
        """The rows as a column table, with an ``on_frontier`` column; the durations
        named by unit as the command line's tables: ``_us``, integer µs rounded to the
        nearest (halves to even), None for none."""
        t: dict[str, list[object]] = {}
        for name, values in as_table(list(self.rows)).items():
            if "latency" in name or "lag" in name:
                t[f"{name}_us"] = [_micros(v) for v in values]
            else:
                t[name] = values
        t["on_frontier"] = list(self.on_frontier)
        return t

    def _repr_html_(self) -> str:
        """:meth:`table` as HTML (a notebook shows it)."""
        return html_table(self.table(), "latency against completeness, one row per strategy")


def _micros(value: object) -> int | None:
    """A µs duration as an integer (nearest, halves to even); None for NaN."""
    v = float(value)  # type: ignore[arg-type]
    return None if v != v else round(v)


def pareto_frontier(latency: Sequence[float], completeness: Sequence[float]) -> list[bool]:
    """Which (latency, completeness) points no other point dominates (lower latency is
    better, higher completeness is better)."""
    lat = np.asarray(latency, dtype=np.float64)
    comp = np.asarray(completeness, dtype=np.float64)
    flags = []
    for i in range(lat.size):
        no_worse = (lat <= lat[i]) & (comp >= comp[i])
        better = (lat < lat[i]) | (comp > comp[i])
        flags.append(not bool(np.any(no_worse & better)))
    return flags


def tradeoff(
    trace: Trace,
    strategies: Sequence[Strategy] = DEFAULT_STRATEGIES,
    *,
    window_size: int = 2 * MINUTE,
    seed: int = 0,
    include_end_of_input: bool = False,
) -> TradeoffResult:
    """Run every strategy on ``trace`` and tabulate latency against completeness. The
    latency percentiles leave out the windows fired by the end of input (counted in
    ``end_of_input_windows``) unless ``include_end_of_input``, as the command line."""
    check_duration(window_size, "window_size", allow_zero=False)
    names = [s.name for s in strategies]
    if len(set(names)) != len(names):
        raise ValueError(f"strategy names must be unique, got {names}")
    eventual = eventual_counts(FixedWindows(window_size), trace.key, trace.event_time)
    rows = []
    results = {}
    for s in strategies:
        result = simulate(s.pipeline(window_size), {"in": trace}, seed=seed)
        results[s.name] = result
        row = strategy_metrics(
            s.name, result, STAGE, eventual,
            end_of_input=_end_of_input(trace, s.watermark),
            include_end_of_input=include_end_of_input,
        )
        rows.append(_exact_lag(row, result, trace))
    frontier = pareto_frontier(
        [r.window_latency_p50 for r in rows], [r.completeness_mean for r in rows]
    )
    return TradeoffResult(rows, frontier, results)


def _exact_lag(row: StrategyMetrics, result: SimulationResult, trace: Trace) -> StrategyMetrics:
    """``row`` with the source watermark's lag at p50, p90 and p99: exact and
    time-weighted over the first to the last arrival, as the command line's
    ``source_lag`` (:func:`theory.series.lag_quantiles`; docs/semantics.md, "Lag")."""
    if not len(trace):
        return row
    curve = result.stages[SOURCE].output_watermark
    a = trace.arrival_time
    p50, p90, p99 = lag_quantiles(curve, int(a.min()), int(a.max()), (0.5, 0.9, 0.99))
    return dataclasses.replace(
        row, watermark_lag_p50=p50, watermark_lag_p90=p90, watermark_lag_p99=p99
    )


def _end_of_input(trace: Trace, watermark: str) -> tuple[int, int] | None:
    """(last arrival, the source watermark there as if the input went on), µs; None for
    an empty trace."""
    if not len(trace):
        return None
    t = trace.sorted_by_arrival()
    last = int(t.arrival_time[-1])
    curve = make_source_watermark(watermark).curve(t.event_time, t.arrival_time, t.partition)
    return last, int(curve.at(last))


def final_values(
    result: SimulationResult, stage: str = STAGE
) -> dict[tuple[object, int, int], float]:
    """The value of each window's last pane: what the pipeline finally said."""
    panes = result.stages[stage].panes
    out: dict[tuple[object, int, int], float] = {}
    if panes is None:
        return out
    for k, s, e, v in zip(
        panes.key.tolist(),
        panes.window_start.tolist(),
        panes.window_end.tolist(),
        panes.value.tolist(),
        strict=True,
    ):
        out[(k, s, e)] = v  # panes are in firing order: the last one wins
    return out
