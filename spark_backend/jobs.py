"""The command line's jobs: the demo (main job) and the analysis of a user's trace.

Each job logs a line per stage, shows a progress bar on stderr, and writes its report
atomically (see :mod:`spark_backend.report`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_backend import plots
from spark_backend.comparison import DEFAULT_STRATEGIES, Comparison, check_request, compare
from spark_backend.progress import Progress
from spark_backend.report import Report, percent, record_columns, seconds
from spark_backend.session import get_session
from spark_backend.systems import bound_of, systems_section, trace_of
from spark_backend.traces.generate import chapter3_trace_df
from spark_backend.traces.read import read_trace_df
from theory.data.report import BadRowReport
from theory.data.schema import OnBadRows
from theory.data.trace import Trace
from theory.experiments.propagation import propagation
from theory.experiments.systems import check_systems
from theory.pipeline import chapter3
from theory.pipeline.diagnosis import diagnose, lag_series
from theory.pipeline.metrics import stage_metrics
from theory.pipeline.processing import Processing
from theory.pipeline.simulator import SimulationResult, simulate
from theory.time import MINUTE, SECOND, format_timestamp

LOG = logging.getLogger("watermarks")

#: Steps of the strategy comparison (see :func:`spark_backend.comparison.compare`).
_COMPARE_STEPS = 4


@dataclass(frozen=True)
class JobResult:
    """What a job produced: the report's index and the figures behind it."""

    index: Path
    comparison: Comparison
    simulation: SimulationResult | None


@dataclass(frozen=True)
class SparkOptions:
    """Where Spark runs: a master URL (None: ``local[*]`` or ``SPARK_REMOTE``) and
    ``key=value`` settings."""

    master: str | None = None
    conf: Sequence[str] | Mapping[str, Any] | None = None


def describe_trace(report: Report, df: DataFrame, rows: int, what: str) -> None:
    """A paragraph on the trace: its size and the delay from event to arrival
    (percentiles on Spark, within 0.01% in rank; the maximum exact)."""
    delay = (F.col("arrival_time") - F.col("event_time")).cast("double") / 1e6
    q = df.select(delay.alias("d")).stat.approxQuantile("d", [0.5, 0.9, 0.99, 1.0], 1e-4)
    report.text(
        "The trace",
        f"{rows:,} {what}; delay from event to arrival p50 {q[0]:.1f} s, p90 {q[1]:.1f} s, "
        f"p99 {q[2]:.1f} s (within 0.01% in rank), max {q[3]:,.0f} s.",
    )


def strategies_section(report: Report, c: Comparison, seed: int) -> None:
    """The comparison's table, the curves with late elements, the frontier and the
    partition that holds the watermark back."""
    fmt = {k: seconds for k in c.table if "latency" in k or "lag" in k}
    fmt.update({k: percent for k in ("late_fraction", "completeness_mean", "complete_fraction")})
    report.table(
        "strategies",
        "Watermark strategies compared",
        c.table,
        "Computed on Spark. Late data; completeness of each window's first pane; window "
        "latency (processing time from the end of the window to its first pane); the "
        "source watermark's lag behind processing time.",
        fmt,
    )
    report.figure(
        "Elements, watermarks and late data",
        lambda p: plots.event_vs_processing(
            p,
            c.whole.plot_data(c.strategies),
            c.zoom.plot_data(c.strategies),
            seed=seed,
        ),
        "watermarks.png",
        f"Sampled elements ({len(c.whole.elements):,} of {c.rows:,}; in the zoom "
        f"{len(c.zoom.elements):,}) by processing time of arrival against event time; "
        "each line a strategy's watermark; crosses mark the elements that arrive late "
        "under it.",
    )
    report.figure(
        "Latency vs completeness",
        lambda p: plots.frontier(
            p,
            list(c.strategies),
            [float(x) for x in c.table["window_latency_p50"]],  # type: ignore[arg-type]
            [float(x) for x in c.table["completeness_mean"]],  # type: ignore[arg-type]
            [bool(x) for x in c.table["on_frontier"]],
        ),
        "frontier.png",
        "Median window latency against completeness at first firing; circles are on the "
        "Pareto frontier.",
    )
    if c.holdback is not None and len(c.holdback):
        hb = c.holdback
        report.table(
            "holdback",
            "Which partition holds the watermark back",
            {col: list(hb[col]) for col in hb.columns},
            "Under the static-partitions perfect watermark, the partition whose next "
            "unread event time is the minimum, for how long (processing time) and in how "
            "many runs.",
            {
                "held_us": seconds,
                "longest_run_us": seconds,
                "held_fraction": percent,
                "longest_run_start": lambda v: format_timestamp(int(v)),  # type: ignore[call-overload]
            },
        )


def arrival_before_event_warning(df: DataFrame, rows: int) -> str | None:
    """A warning if rows arrive before their event time (device clocks ahead), with how
    many; None if none do. One Spark job."""
    early = df.where(F.col("arrival_time") < F.col("event_time")).count()
    if not early:
        return None
    return (
        f"{early:,} of {rows:,} rows arrive before their event time (arrival_time < "
        "event_time: clocks out of step?); they are kept, and a perfect watermark may pass "
        "them. --strict refuses such a trace."
    )


def bad_rows_section(report: Report, bad: BadRowReport) -> None:
    """What validation removed, per rule, with examples."""
    rules = sorted(bad.counts)
    report.table(
        "bad_rows",
        "Bad rows skipped",
        {
            "rule": rules,
            "rows": [bad.counts[r] for r in rules],
            "examples": [
                "; ".join(f"row {row}, {col}: {val!r}" for row, col, val in bad.examples.get(r, []))
                for r in rules
            ],
        },
        f"{bad.total:,} of {bad.rows_read:,} rows were removed (--on-bad-rows "
        "skip-and-report); every figure above is over the rows kept.",
    )


def chapter3_section(report: Report, events: int, seed: int) -> SimulationResult:
    """Simulate the book's chapter-3 pipeline and add its tables and figures."""
    pipe = chapter3.pipeline("bounded:30s", Processing(latency=2 * SECOND))
    result = simulate(pipe, chapter3.traces(events, seed=seed), seed=seed)
    rows = stage_metrics(result)
    report.table(
        "chapter3_stages",
        "Chapter 3 pipeline: watermarks per stage",
        record_columns(
            rows,
            {
                "stage": "stage",
                "final input watermark": lambda m: format_timestamp(m.final_input_watermark),
                "final output watermark": lambda m: format_timestamp(m.final_output_watermark),
                "arrivals": "arrivals",
                "late": "late_count",
                "watermark lag p50": "watermark_lag_p50",
                "watermark lag p99": "watermark_lag_p99",
                "stage lag p99": "stage_lag_p99",
            },
        ),
        "Mobile and console sessions (gap 1 min, at the watermark), flattened, averaged in "
        "fixed 2-minute windows; source watermark max seen - 30 s; 2 s processing per stage.",
        {"watermark lag p50": seconds, "watermark lag p99": seconds, "stage lag p99": seconds},
    )
    grid = result.times[:: max(1, result.times.size // 20_000)]
    report.figure(
        "Input and output watermarks per stage",
        lambda p: plots.stage_watermarks(p, grid, _watermarks_at(result, grid)),
        "stages.png",
        "Solid: input watermark; dashed: output watermark (book figure 3.5).",
    )
    mid = int(result.times[result.times.size // 2])
    zoom = np.linspace(mid, mid + 20 * MINUTE, 2000).astype(np.int64)
    report.figure(
        "Input and output watermarks per stage: 20 minutes",
        lambda p: plots.stage_watermarks(
            p,
            zoom,
            _watermarks_at(result, zoom),
            "Input and output watermarks per stage, 20 minutes",
        ),
        "stages_zoom.png",
        "The same, from the middle of the trace: session windows hold each output "
        "watermark behind its input until their sessions close.",
    )
    sink = result.pipeline.graph.order[-1]
    lags = lag_series(result, sink)
    report.figure(
        "Event-time and processing-time lag",
        lambda p: plots.lags(p, lags.times, lags.event_lag, lags.processing_lag, sink),
        "lags.png",
        "Event-time lag grows alone under data delay; both grow when the system is "
        "stuck (book figure 3.15).",
    )
    stalls = diagnose(result, sink)
    report.table(
        "chapter3_stalls",
        "Where the pipeline waits",
        record_columns(
            stalls,
            {
                "start": lambda s: format_timestamp(s.start),
                "end": lambda s: format_timestamp(s.end),
                "kind": "kind",
                "culprit stage": "culprit_stage",
                "hold": "culprit_hold",
                "max event-time lag": "max_event_lag",
                "max processing-time lag": "max_processing_lag",
            },
        ),
        f"Intervals where the event-time lag at {sink} exceeded 1 minute.",
        {"max event-time lag": seconds, "max processing-time lag": seconds},
    )
    return result


def _watermarks_at(result: SimulationResult, times: np.ndarray) -> dict[str, tuple[Any, Any]]:
    """Each stage's (input, output) watermark at ``times`` (µs)."""
    return {
        name: (r.input_watermark.at(times), r.output_watermark.at(times))
        for name, r in result.stages.items()
    }


def propagation_section(report: Report, seed: int) -> None:
    """In-band (Flink) against out-of-band (Dataflow) propagation, table and figure."""
    rows = propagation(depths=(1, 5, 10, 20), parallelisms=(1, 10, 100, 1000), seed=seed).rows
    report.table(
        "propagation",
        "In-band (Flink) vs out-of-band (Dataflow) propagation",
        record_columns(
            rows,
            {
                "scenario": "scenario",
                "design": "design",
                "depth": "depth",
                "parallelism": "parallelism",
                "latency": "latency",
                "messages/s": "messages_per_second",
                "rejected reports": "rejected_reports",
                "safe": "safe",
            },
        ),
        "Time from a source watermark step until the last stage's input watermark shows it "
        "(median of 9 seeded runs); steady-state watermark messages per second.",
        {"latency": seconds},
    )
    report.figure(
        "Propagation latency and traffic",
        lambda p: plots.propagation(p, rows, parallelism=100, depth=5),
        "propagation.png",
        "In-band latency grows with depth and its traffic with the cube of "
        "parallelism; out-of-band latency is set by the report interval.",
    )


def _start_spark(spark: SparkOptions, bar: Progress) -> Any:
    LOG.info("starting Spark")
    session = get_session(spark.master, spark.conf)
    bar.step("Spark session")
    return session


def _write(report: Report, out: Path, bar: Progress) -> Path:
    LOG.info("writing the report to %s", out)
    index = report.write(out)
    bar.step(f"report written to {index}")
    return index


def run_demo(
    events: int,
    seed: int,
    out: Path,
    window_size: int,
    *,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    spark: SparkOptions = SparkOptions(),
    systems: Sequence[str] = ("beam", "flink", "spark"),
) -> JobResult:
    """The main job on the embedded default: the chapter-3 game traces generated on
    Spark, the strategies compared on Spark, the chapter-3 pipeline simulated in theory,
    ``systems`` compared on its traces (none if empty), the report written."""
    if events < 2:
        raise ValueError(f"--events must be >= 2, got {events}")
    check_request(strategies, window_size)
    if systems:  # refused before any work
        check_systems(systems)
        bound_of(strategies)
    bar = Progress(6 + _COMPARE_STEPS)
    session = _start_spark(spark, bar)
    LOG.info("generating the chapter-3 game traces on Spark: %d events, seed %d", events, seed)
    df = chapter3_trace_df(session, events, seed=seed).persist()
    try:
        report = Report("Watermarks: the chapter-3 game sessions")
        describe_trace(
            report,
            df,
            events,
            "events from mobile and console game sessions (partition 3 idle for a while)",
        )
        bar.step(f"generated {events:,} events")
        LOG.info("comparing %d watermark strategies on Spark", len(strategies))
        comparison = compare(df, strategies, window_size, seed=seed, step=bar.step)
    finally:
        df.unpersist()
    strategies_section(report, comparison, seed)
    LOG.info("simulating the chapter-3 pipeline")
    simulation = chapter3_section(report, min(events, 200_000), seed)
    bar.step("chapter-3 pipeline simulated")
    LOG.info("comparing in-band and out-of-band propagation")
    propagation_section(report, seed)
    bar.step("propagation compared")
    if systems:
        n = min(events, 200_000)
        trace = Trace.concat(chapter3.traces(n, seed=seed).values()).sorted_by_arrival()
        note = f"the chapter-3 mobile and console traces as one input, {n:,} events"
        systems_section(report, trace, systems, bound_of(strategies), window_size, note)
    bar.step("systems compared")
    index = _write(report, out, bar)
    return JobResult(index, comparison, simulation)


def run_analyze(
    trace: str | os.PathLike[str],
    out: Path,
    window_size: int,
    *,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    on_bad_rows: OnBadRows = "fail",
    seed: int = 0,
    spark: SparkOptions = SparkOptions(),
    systems: Sequence[str] = (),
    strict: bool = False,
    null_values: Sequence[str] = (),
) -> JobResult:
    """A user's trace (Parquet, CSV or a directory of them): validated, the strategies
    compared on Spark, ``systems`` compared on it (none if empty), the report written.
    Bad input raises before anything is written. Rows arriving before their event time
    are counted and warned about (in the log and the report); with ``strict`` the first
    one is an error naming the row. ``null_values``: the CSV fields read as null besides
    the empty one."""
    check_request(strategies, window_size)
    if systems:
        check_systems(systems)
        bound_of(strategies)
    bar = Progress(4 + _COMPARE_STEPS + bool(systems))
    session = _start_spark(spark, bar)
    LOG.info("reading and validating %s (--on-bad-rows %s)", trace, on_bad_rows)
    df, bad = read_trace_df(
        session, trace, on_bad_rows=on_bad_rows, require_causal=strict, null_values=null_values
    )
    df = df.persist()
    try:
        rows = bad.rows_kept
        if bad.total:
            LOG.warning("skipped %d bad rows of %d", bad.total, bad.rows_read)
        bar.step(f"read {rows:,} rows")
        report = Report(f"Watermarks: {os.fspath(trace)}")
        early = arrival_before_event_warning(df, rows)
        if early:
            LOG.warning("%s", early)
            report.text("Warning", early)
        describe_trace(report, df, rows, f"rows read from {os.fspath(trace)}")
        bar.step("trace described")
        LOG.info("comparing %d watermark strategies on Spark", len(strategies))
        comparison = compare(df, strategies, window_size, seed=seed, step=bar.step)
        if systems:
            trace_rows, note = trace_of(df, rows)
    finally:
        df.unpersist()
    strategies_section(report, comparison, seed)
    if systems:
        systems_section(report, trace_rows, systems, bound_of(strategies), window_size, note)
        bar.step("systems compared")
    if bad.total:
        bad_rows_section(report, bad)
    index = _write(report, out, bar)
    return JobResult(index, comparison, None)


__all__ = ["JobResult", "SparkOptions", "run_analyze", "run_demo"]
