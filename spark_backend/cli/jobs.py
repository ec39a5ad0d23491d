"""The command line's jobs: the demo (main job) and the analysis of a user's trace.

Each job logs a line per stage, shows a progress bar on stderr, and writes its report
atomically (see :mod:`spark_backend.report.report`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_backend.cli.engine import BYTES_PER_ROW, choose_engine, estimated_bytes
from spark_backend.cli.local import chapter3_trace, compare_local
from spark_backend.cli.plausible import span_warnings
from spark_backend.cli.progress import Progress
from spark_backend.cli.saved_trace import TRACE_COLUMNS, check_save_trace, write_saved_trace
from spark_backend.cli.seeds import check_seeds, run_seeds
from spark_backend.report import plots
from spark_backend.report.comparison import DEFAULT_STRATEGIES, Comparison, check_request, compare
from spark_backend.report.report import Report, percent, record_columns, seconds
from spark_backend.report.systems import bound_of, systems_section, trace_of
from spark_backend.report.tables import with_units
from spark_backend.report.uncertainty import bootstrap_section, seeds_section
from spark_backend.report.window_table import window_table
from spark_backend.session.job_count import JobCount
from spark_backend.session.session import get_session
from spark_backend.traces.trace_input import local_files, read_local, read_spark
from theory.data.report import BadRowReport
from theory.data.schema import OnBadRows
from theory.data.trace import Trace
from theory.data.units import check_time_unit
from theory.experiments.first_panes import FIRE_ONCE, Firing
from theory.experiments.propagation import propagation
from theory.experiments.systems import check_systems
from theory.experiments.uncertainty import bootstrap_windows
from theory.pipeline import chapter3
from theory.pipeline.diagnosis import diagnose, lag_series
from theory.pipeline.metrics import stage_metrics
from theory.pipeline.processing import Processing
from theory.pipeline.simulator import SimulationResult, simulate
from theory.pipeline.stages import Pipeline
from theory.time import MINUTE, SECOND, format_timestamp

LOG = logging.getLogger("watermarks")

#: The demo trace starts at a real date (2024-01-01T00:00:00Z, µs): a whole number of
#: days, so fixed windows of any size dividing a day fall as they do from 0.
DEMO_START = 1_704_067_200_000_000

#: The chapter-3 stage the demo makes stuck, for how long (µs), and how many of the
#: longest stalls the page shows (the CSV has them all).
STUCK_STAGE = "flatten"
STUCK_FOR = 5 * MINUTE
STALLS_SHOWN = 10

#: Steps of the strategy comparison (see :func:`spark_backend.report.comparison.compare`).
_COMPARE_STEPS = 4


@dataclass(frozen=True)
class JobResult:
    """What a job produced: the report's index and the figures behind it."""

    index: Path
    comparison: Comparison
    simulation: SimulationResult | None


@dataclass(frozen=True)
class SparkOptions:
    """Where Spark runs: a master URL (None: ``local[*,4]`` or ``SPARK_REMOTE``) and
    ``key=value`` settings."""

    master: str | None = None
    conf: Sequence[str] | Mapping[str, Any] | None = None


def describe_trace(report: Report, df: DataFrame, rows: int, what: str) -> None:
    """A paragraph on the trace: its size and the delay from event to arrival
    (percentiles on Spark, within 0.01% in rank; the maximum exact)."""
    delay = (F.col("arrival_time") - F.col("event_time")).cast("double") / 1e6
    q = df.select(delay.alias("d")).stat.approxQuantile("d", [0.5, 0.9, 0.99, 1.0], 1e-4)
    _delay_text(report, rows, what, q, " (within 0.01% in rank)")


def describe_trace_local(report: Report, trace: Trace, what: str) -> None:
    """:func:`describe_trace` of a trace in memory: exact percentiles (numpy's linear)."""
    delay = (trace.arrival_time - trace.event_time).astype(np.float64) / 1e6
    q = [float(x) for x in np.percentile(delay, [50, 90, 99, 100])]
    _delay_text(report, len(trace), what, q, "")


def _delay_text(report: Report, rows: int, what: str, q: Sequence[float], note: str) -> None:
    report.text(
        "The trace",
        f"{rows:,} {what}; delay from event to arrival p50 {q[0]:.1f} s, p90 {q[1]:.1f} s, "
        f"p99 {q[2]:.1f} s{note}, max {q[3]:,.0f} s.",
    )


def strategy_table(c: Comparison, firing: Firing = FIRE_ONCE) -> dict[str, list[object]]:
    """The strategies table as written (``strategies.csv``): the comparison's columns
    with their units; the late panes and final completeness with late firings only, the
    pane timestamps' lag under a combiner other than eow only."""
    table = dict(c.table)
    if not firing.late_firings:
        del table["late_panes"], table["final_completeness_mean"]
    if firing.timestamp_combiner == "eow":
        del table["pane_timestamp_lag_p50"], table["pane_timestamp_lag_p99"]
    table["on_frontier"] = table.pop("on_frontier")
    return with_units(table, durations=[k for k in table if "latency" in k or "lag" in k])


def strategies_section(
    report: Report,
    c: Comparison,
    seed: int,
    firing: Firing = FIRE_ONCE,
    include_end_of_input: bool = False,
    *,
    origin: int | None = None,
) -> None:
    """The comparison's table, the curves with late elements, the frontier and the
    partition that holds the watermark back. The late panes and final completeness are
    shown with late firings, the pane timestamps' lag under a combiner other than eow.
    ``origin``: the report's time origin (µs; default the earliest element drawn)."""
    shown = strategy_table(c, firing)
    if c.windows is not None:
        report.data("windows", window_table(c.windows))
    report.table(
        "strategies",
        "Watermark strategies compared",
        shown,
        "Late data; completeness of each window's first pane; window latency (processing "
        "time from the end of the window to its first pane; exact; "
        + _end_of_input_note(include_end_of_input)
        + "); the source watermark's lag behind processing time (exact, weighted by time "
        "from the first to the last arrival, where the watermark is finite). "
        + _firing_note(firing)
        + " Each window's results: windows.parquet.",
        _formats(shown),
    )
    report.figure(
        "Elements, watermarks and late data",
        lambda p: plots.event_vs_processing(
            p,
            c.whole.plot_data(c.strategies),
            c.zoom.plot_data(c.strategies),
            seed=seed,
            origin=origin,
        ),
        "watermarks.png",
        f"Sampled elements ({len(c.whole.elements):,} of {c.rows:,}; in the zoom "
        f"{len(c.zoom.elements):,}) by processing time of arrival against event time; "
        "each line a strategy's watermark (each its own style, so coinciding ones stay "
        "visible); crosses mark the elements that arrive late under it; each legend lists "
        "what its panel shows. Every arrival is shown: when the arrivals past their 99.9th "
        "percentile stretch far, that part of the processing-time axis is compressed "
        "(marked)." + _coinciding_note(c),
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
        shown = with_units(
            {col: list(hb[col]) for col in hb.columns}, times=["longest_run_start"]
        )
        report.table(
            "holdback",
            "Which partition holds the watermark back",
            shown,
            "Under the static-partitions perfect watermark, the partition whose next "
            "unread event time is the minimum, for how long (processing time) and in how "
            "many runs.",
            _formats(shown),
        )


def _end_of_input_note(included: bool) -> str:
    """What the latency percentiles do with the windows fired by the end of input."""
    if included:
        return (
            "windows fired by the end of input included, end_of_input_windows counts them"
        )
    return (
        "the end_of_input_windows fired by the end of input left out, as their latency "
        "is the last arrival minus their end; --include-end-of-input counts them"
    )


def _firing_note(firing: Firing) -> str:
    """How the compared windows fire, for the table's caption."""
    if firing.late_firings:
        text = (
            "Each window fires when the watermark passes its end, then once per arrival "
            "time of late data within an allowed lateness of "
            f"{firing.allowed_lateness / 1e6:g} s (AfterWatermark(late=AfterCount(1)), "
            "accumulating): late_panes counts those panes, final_completeness_mean the "
            "share of each window's elements in its last pane; dropped counts the elements "
            "in no pane."
        )
    else:
        text = (
            "Each window fires once, when the watermark passes its end (AfterWatermark, "
            "no allowed lateness); dropped counts the elements after that."
        )
    if firing.timestamp_combiner != "eow":
        text += (
            f" Pane timestamps at the {firing.timestamp_combiner} element of the first "
            "pane: pane_timestamp_lag is how far it (and its hold on the watermark "
            "downstream) lies before the window's end (book figures 3.7, 3.8)."
        )
    return text


def arrival_before_event_warning(early: int, rows: int) -> str | None:
    """A warning if ``early`` of ``rows`` rows arrive before their event time (device
    clocks ahead); None if none do."""
    if not early:
        return None
    return (
        f"{early:,} of {rows:,} rows arrive before their event time (arrival_time < "
        "event_time: clocks out of step?); they are kept, and a perfect watermark may pass "
        "them. --strict refuses such a trace."
    )


def _coinciding_note(c: Comparison) -> str:
    """" X = Y on this trace." for the strategies whose curves coincide on the whole
    view's grid (empty when none do)."""
    groups = plots.coinciding({s: c.whole.grid[s].to_numpy() for s in c.strategies})
    if not groups:
        return ""
    return " " + "; ".join(" = ".join(g) for g in groups) + " on this trace."


def _formats(table: Mapping[str, object]) -> dict[str, Callable[[object], str]]:
    """Cell formats of a table with units: ``_us`` durations in seconds (times have
    their ``_utc`` column beside), fractions as percentages."""
    fmt: dict[str, Callable[[object], str]] = {}
    for k in table:
        if k.endswith("_us") and f"{k[:-3]}_utc" not in table:
            fmt[k] = seconds
        elif k.endswith("fraction") or k.endswith("completeness_mean"):
            fmt[k] = percent
    return fmt


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
    """Simulate the book's chapter-3 pipeline and add its tables and figures (times
    from :data:`DEMO_START`)."""
    report.trace(
        f"On the chapter-3 simulation's trace: the mobile and console game traces, {events:,} "
        f"events (seed {seed}) from {format_timestamp(DEMO_START)}, through the book's "
        "pipeline"
    )
    traces = {
        name: dataclasses.replace(
            t, event_time=t.event_time + DEMO_START, arrival_time=t.arrival_time + DEMO_START
        )
        for name, t in chapter3.traces(events, seed=seed).items()
    }
    stuck = _stuck_interval(traces)
    pipe = chapter3.pipeline("bounded:30s", Processing(latency=2 * SECOND))
    # one stuck stage (book figure 3.15's system delay) beside the data delays
    pipe = Pipeline(
        [
            dataclasses.replace(
                st, processing=Processing(latency=2 * SECOND, stalls=(stuck,))
            )
            if st.name == STUCK_STAGE
            else st
            for st in pipe.stages
        ]
    )
    result = simulate(pipe, traces, seed=seed)
    rows = stage_metrics(result)
    shown = with_units(
        record_columns(
            rows,
            {
                "stage": "stage",
                "final_input_watermark": "final_input_watermark",
                "final_output_watermark": "final_output_watermark",
                "arrivals": "arrivals",
                "late": "late_count",
                "watermark_lag_p50": "watermark_lag_p50",
                "watermark_lag_p99": "watermark_lag_p99",
                "stage_lag_p99": "stage_lag_p99",
            },
        ),
        durations=["watermark_lag_p50", "watermark_lag_p99", "stage_lag_p99"],
        times=["final_input_watermark", "final_output_watermark"],
    )
    report.table(
        "chapter3_stages",
        "Chapter 3 pipeline: watermarks per stage",
        shown,
        "Mobile and console sessions (gap 1 min, at the watermark), flattened, averaged in "
        "fixed 2-minute windows; source watermark max seen - 30 s; 2 s processing per stage.",
        _formats(shown),
    )
    grid = result.times[:: max(1, result.times.size // 20_000)]
    report.figure(
        "Watermark hold per stage",
        lambda p: plots.stage_watermarks(
            p, grid, _watermarks_at(result, grid), origin=DEMO_START
        ),
        "stages.png",
        "Each stage's hold: its input watermark minus its output watermark, in seconds "
        "(book figure 3.5 draws the two watermarks; at this scale they coincide, so the "
        "gap between them is drawn). A stage that holds nothing stays at 0.",
    )
    mid = int(result.times[result.times.size // 2])
    zoom = np.linspace(mid, mid + 20 * MINUTE, 2000).astype(np.int64)
    report.figure(
        "Watermark hold per stage: 20 minutes",
        lambda p: plots.stage_watermarks(
            p,
            zoom,
            _watermarks_at(result, zoom),
            "Watermark hold per stage, 20 minutes",
            origin=DEMO_START,
        ),
        "stages_zoom.png",
        "The same, 20 minutes from the middle of the trace (the book's zoom): session "
        "windows hold each output watermark behind its input until their sessions close; "
        "the fixed windows hold it for their processing time.",
    )
    sink = result.pipeline.graph.order[-1]
    lags = lag_series(result, sink)
    report.figure(
        "Event-time and processing-time lag",
        lambda p: plots.lags(
            p, lags.times, lags.event_lag, lags.processing_lag, sink,
            np.concatenate([t.arrival_time for t in traces.values()]),
            origin=DEMO_START,
        ),
        "lags.png",
        "Event-time lag grows alone under data delay; both grow when the system is "
        f"stuck (book figure 3.15: here the {STUCK_STAGE} stage, stuck for "
        f"{STUCK_FOR / 6e7:.0f} minutes). The ramp at the end: once the last events have "
        "arrived, the sink's watermark still waits for the sessions and windows of the "
        "stragglers, so its event-time lag grows with the clock until the input ends.",
    )
    stalls = sorted(diagnose(result, sink), key=lambda x: x.start - x.end)  # longest first
    kinds = sorted({x.kind for x in stalls})
    report.table(
        "chapter3_stall_kinds",
        "Where the pipeline waits: by kind",
        with_units(
            {
                "kind": kinds,
                "stalls": [sum(1 for x in stalls if x.kind == k) for k in kinds],
                "total": [sum(x.end - x.start for x in stalls if x.kind == k) for k in kinds],
                "longest": [max(x.end - x.start for x in stalls if x.kind == k) for k in kinds],
            },
            durations=["total", "longest"],
        ),
        f"Data delay: the event-time lag grows alone (windows waiting for data); system "
        f"delay: the processing-time lag grows too. The {STUCK_STAGE} stage is made stuck "
        f"for {(stuck[1] - stuck[0]) / 6e7:.0f} minutes from "
        f"{format_timestamp(stuck[0])} (book figure 3.15).",
        {"total_us": seconds, "longest_us": seconds},
    )
    shown = with_units(
        record_columns(
            stalls,
            {
                "start": "start",
                "end": "end",
                "kind": "kind",
                "culprit_stage": "culprit_stage",
                "hold": "culprit_hold",
                "max_event_time_lag": "max_event_lag",
                "max_processing_time_lag": "max_processing_lag",
            },
        ),
        durations=["max_event_time_lag", "max_processing_time_lag"],
        times=["start", "end"],
    )
    report.table(
        "chapter3_stalls",
        "Where the pipeline waits: the longest stalls",
        shown,
        f"Intervals where the event-time lag at {sink} exceeded 1 minute, longest first; "
        f"the {STALLS_SHOWN} longest of {len(stalls):,} here, all of them in the CSV.",
        _formats(shown),
        show_rows=STALLS_SHOWN,
    )
    return result


def _watermarks_at(result: SimulationResult, times: np.ndarray) -> dict[str, tuple[Any, Any]]:
    """Each stage's (input, output) watermark at ``times`` (µs)."""
    return {
        name: (r.input_watermark.at(times), r.output_watermark.at(times))
        for name, r in result.stages.items()
    }


def _stuck_interval(traces: Mapping[str, Trace]) -> tuple[int, int]:
    """The demo's stuck interval (µs): :data:`STUCK_FOR` from the middle of the arrivals."""
    a = np.concatenate([t.arrival_time for t in traces.values()])
    mid = int(np.median(a)) if a.size else 0
    return mid, mid + STUCK_FOR


def propagation_section(report: Report, seed: int) -> None:
    """In-band (Flink) against out-of-band (Dataflow) propagation, table and figure:
    a model's seeded runs, no trace."""
    report.trace(
        "On no trace: a model of in-band and out-of-band propagation (seeded simulated "
        "runs)"
    )
    rows = propagation(depths=(1, 5, 10, 20), parallelisms=(1, 10, 100, 1000), seed=seed).rows
    shown = with_units(
        record_columns(
            rows,
            {
                "scenario": "scenario",
                "design": "design",
                "depth": "depth",
                "parallelism": "parallelism",
                "latency": "latency",
                "messages_per_s": "messages_per_second",
                "rejected_reports": "rejected_reports",
                "safe": "safe",
            },
        ),
        durations=["latency"],
    )
    report.table(
        "propagation",
        "In-band (Flink) vs out-of-band (Dataflow) propagation",
        shown,
        "Time from a source watermark step until the last stage's input watermark shows it "
        "(median of 9 seeded runs); steady-state watermark messages per second.",
        _formats(shown),
    )
    report.figure(
        "Propagation latency and traffic",
        lambda p: plots.propagation(p, rows, parallelism=100, depth=5),
        "propagation.png",
        _propagation_caption(rows, parallelism=100, depth=5),
    )


def _propagation_caption(rows: Sequence[Any], parallelism: int, depth: int) -> str:
    """What propagation.png shows, with the traffic model and the idle-partition
    contrast in numbers."""

    def latency(design: str, scenario: str) -> str:
        got = [r.latency for r in rows if (r.design, r.scenario, r.parallelism, r.depth)
               == (design, scenario, parallelism, depth)]
        return f"{got[0] / 1e6:.1f} s" if got else "n/a"

    return (
        "A model, not the trace: seeded simulated runs of watermark propagation. "
        f"Left: time from a source watermark step until the last stage sees it, median of "
        f"seeded runs, at parallelism {parallelism}, one panel per scenario; colour = "
        "design. Steady: in-band latency grows with depth (one hop per stage), "
        "out-of-band is set by the report interval whatever the depth. An idle partition "
        "holds in-band propagation until the idle timeout marks it idle (here "
        f"{latency('in-band', 'idle_partition')} against "
        f"{latency('out-of-band', 'idle_partition')} out-of-band at depth {depth}, where "
        "the reader reports the idle partition); a worker failure restarts the in-band job "
        "but only holds one range out-of-band until it is reassigned. Right: steady "
        f"traffic at depth {depth}. The traffic model: in-band, each source task sends its "
        "watermark to all P tasks of the next stage every emit interval, and each of the "
        "P tasks of the other stages forwards every advance of its valve (one per input "
        "update, P inputs) to P channels, so P² + (depth - 1) P³ messages per interval; "
        "out-of-band, each task sends one report per report interval to the aggregator, "
        "(depth + 1) P per interval."
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
    engine: str = "spark",
    systems: Sequence[str] = ("beam", "flink", "spark"),
    firing: Firing = FIRE_ONCE,
    include_end_of_input: bool = False,
    seeds: int = 1,
    sweep: str = "local",
    save_trace: Path | None = None,
) -> JobResult:
    """The main job on the embedded default: the chapter-3 game traces generated (on
    Spark, or with numpy on the local engine), the strategies compared, the chapter-3
    pipeline simulated in theory, ``systems`` compared on its traces (none if empty), the
    report written. ``engine``: spark (the default), local or auto
    (:func:`spark_backend.cli.engine.choose_engine`). ``firing``: allowed lateness, late
    firings and timestamp combiner of the compared windows. ``include_end_of_input``:
    the latency percentiles count the windows fired by the end of input. ``seeds`` > 1:
    the comparison also runs on that many seeds (:mod:`spark_backend.cli.seeds`) on the
    ``sweep`` engine (local or spark), and the report gains the ``seeds`` table.
    ``save_trace``: the compared trace is also written there (Parquet, µs;
    :mod:`spark_backend.cli.saved_trace`), after the report."""
    if events < 2:
        raise ValueError(f"--events must be >= 2, got {events}")
    check_seeds(seeds)
    if save_trace is not None:
        check_save_trace(save_trace, Path(os.path.realpath(out)))
    check_request(strategies, window_size, "local")
    if systems:  # refused before any work
        check_systems(systems)
        bound_of(strategies)
    chosen, why = choose_engine(engine, spark.master, events * BYTES_PER_ROW)
    check_request(strategies, window_size, chosen)
    LOG.info("engine: %s (%s)", chosen, why)
    what = (
        "events from mobile and console game sessions (partition 3 idle for a while), "
        f"from {format_timestamp(DEMO_START)}"
    )
    report = Report("Watermarks: the chapter-3 game sessions")
    report.trace(
        f"On the demo's trace: {events:,} generated chapter-3 game events (seed {seed}) from "
        f"{format_timestamp(DEMO_START)}"
    )
    saved: pa.Table | None = None
    session = None
    if chosen == "local":
        bar = Progress(5 + _COMPARE_STEPS)
        LOG.info("generating the chapter-3 game traces (numpy): %d events, seed %d", events, seed)
        trace = demo_trace(events, seed)
        saved = trace.to_arrow() if save_trace is not None else None
        describe_trace_local(report, trace, what)
        bar.step(f"generated {events:,} events")
        LOG.info("comparing %d watermark strategies (local engine)", len(strategies))
        comparison = compare_local(
            trace, strategies, window_size, seed=seed, step=bar.step, firing=firing,
            include_end_of_input=include_end_of_input,
        )
    else:
        bar = Progress(6 + _COMPARE_STEPS)
        session = _start_spark(spark, bar)
        LOG.info("generating the chapter-3 game traces on Spark: %d events, seed %d", events, seed)
        df = demo_df(session, events, seed).persist()
        try:
            if save_trace is not None:
                saved = df.select(*(c for c in TRACE_COLUMNS if c in df.columns)).toArrow()
            describe_trace(report, df, events, what)
            bar.step(f"generated {events:,} events")
            LOG.info("comparing %d watermark strategies on Spark", len(strategies))
            comparison = compare(
                df, strategies, window_size, seed=seed, step=bar.step, firing=firing,
                include_end_of_input=include_end_of_input,
            )
        finally:
            df.unpersist()
    strategies_section(
        report, comparison, seed, firing, include_end_of_input, origin=DEMO_START
    )
    if seeds > 1:
        base = strategy_table(comparison, firing) if sweep == chosen else None

        def run(s: int) -> dict[str, list[object]]:
            if s == seed and base is not None:
                return base
            c = _demo_comparison(events, s, strategies, window_size, sweep, session, spark,
                                 firing, include_end_of_input)
            return strategy_table(c, firing)

        table = run_seeds(run, seeds, seed, "strategy", "strategies compared")
        how = (f"the {sweep} engine's generator" + (", its rows not those of the Spark "
               "trace above" if sweep != chosen else ""))
        report.trace(
            f"On {seeds} seeded traces: {events:,} generated chapter-3 game events each "
            f"(seeds from {seed}), made by {how}"
        )
        seeds_section(report, table, how)
    LOG.info("simulating the chapter-3 pipeline")
    simulation = chapter3_section(report, min(events, 200_000), seed)
    bar.step("chapter-3 pipeline simulated")
    LOG.info("comparing in-band and out-of-band propagation")
    propagation_section(report, seed)
    bar.step("propagation compared")
    if systems:
        n = min(events, 200_000)
        trace = Trace.concat(chapter3.traces(n, seed=seed).values()).sorted_by_arrival()
        trace = dataclasses.replace(  # the chapter-3 simulation's trace, on its dates
            trace,
            event_time=trace.event_time + DEMO_START,
            arrival_time=trace.arrival_time + DEMO_START,
        )
        note = f"the chapter-3 mobile and console traces, {n:,} events"
        report.trace(
            f"On the systems trace: the chapter-3 simulation's mobile and console traces, "
            f"{n:,} events (seed {seed}) from {format_timestamp(DEMO_START)}"
        )
        systems_section(
            report, trace, systems, bound_of(strategies), window_size, note, origin=DEMO_START
        )
    bar.step("systems compared")
    index = _write(report, out, bar)
    if saved is not None and save_trace is not None:
        LOG.info("writing the trace to %s", save_trace)
        write_saved_trace(saved, save_trace)
    return JobResult(index, comparison, simulation)


def demo_trace(events: int, seed: int) -> Trace:
    """The demo's trace on the local engine (numpy): :func:`chapter3_trace` from
    :data:`DEMO_START` (µs)."""
    trace = chapter3_trace(events, seed=seed)
    return dataclasses.replace(
        trace,
        event_time=trace.event_time + DEMO_START,
        arrival_time=trace.arrival_time + DEMO_START,
    )


def demo_df(session: Any, events: int, seed: int) -> DataFrame:
    """The demo's trace on Spark: :func:`spark_backend.traces.generate.chapter3_trace_df`
    from :data:`DEMO_START` (µs)."""
    from spark_backend.traces.generate import chapter3_trace_df  # scipy: demo only

    df = chapter3_trace_df(session, events, seed=seed)
    return df.withColumns({c: F.col(c) + F.lit(DEMO_START) for c in ("event_time", "arrival_time")})


def _demo_comparison(
    events: int,
    seed: int,
    strategies: Sequence[str],
    window_size: int,
    engine: str,
    session: Any,
    spark: SparkOptions,
    firing: Firing,
    include_end_of_input: bool,
) -> Comparison:
    """The demo's comparison on the trace of ``seed``, on ``engine`` (a seed sweep's run:
    the views' samples and grids kept small)."""
    if engine == "local":
        return compare_local(
            demo_trace(events, seed), strategies, window_size, seed=seed, firing=firing,
            include_end_of_input=include_end_of_input, grid_points=2, sample_elements=1,
        )
    if session is None:
        session = get_session(spark.master, spark.conf)
    df = demo_df(session, events, seed).persist()
    try:
        return compare(
            df, strategies, window_size, seed=seed, firing=firing,
            include_end_of_input=include_end_of_input, grid_points=2, sample_elements=1,
        )
    finally:
        df.unpersist()


def run_analyze(
    trace: str | os.PathLike[str],
    out: Path,
    window_size: int,
    *,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    on_bad_rows: OnBadRows = "fail",
    seed: int = 0,
    spark: SparkOptions = SparkOptions(),
    engine: str = "spark",
    time_unit: str | None = None,
    systems: Sequence[str] = (),
    strict: bool = False,
    null_values: Sequence[str] = (),
    firing: Firing = FIRE_ONCE,
    include_end_of_input: bool = False,
    bootstrap: int | None = None,
) -> JobResult:
    """A user's trace (Parquet, CSV or a directory of them): validated, the strategies
    compared, ``systems`` compared on it (none if empty), the report written. ``engine``
    is ``local`` (numpy, no JVM), ``spark`` or ``auto``
    (:func:`spark_backend.cli.engine.choose_engine`); both give the same tables.
    ``time_unit`` (us, ms, s, ns) is the unit of numeric time columns
    (:mod:`spark_backend.traces.trace_input`). Rows arriving before their event time are counted
    and warned about (in the log and the report); with ``strict`` the first one is an
    error naming the row. ``null_values``: the CSV fields read as null besides the empty
    one. ``firing``: allowed lateness, late firings and timestamp combiner of the
    compared windows. ``include_end_of_input``: the latency percentiles count the windows
    fired by the end of input. ``bootstrap``: that many resamples of the windows give
    the per-window metrics' intervals (seeded by ``seed``; :func:`theory.experiments.
    uncertainty.bootstrap_windows`), the ``bootstrap`` table. Options, paths and bad
    input raise before any engine starts or anything is written."""
    check_request(strategies, window_size, "local")
    if bootstrap is not None and bootstrap < 1:
        raise ValueError(f"--bootstrap must be >= 1, got {bootstrap}")
    unit = None if time_unit is None else check_time_unit(time_unit)
    if systems:
        check_systems(systems)
        bound_of(strategies)
    chosen, why = choose_engine(engine, spark.master, estimated_bytes(local_files(trace)))
    check_request(strategies, window_size, chosen)  # one Spark cannot run: before any work
    LOG.info("engine: %s (%s)", chosen, why)
    job = _Analysis(
        out, window_size, strategies, seed, systems, firing, include_end_of_input, bootstrap
    )
    reading = _Reading(on_bad_rows, unit, strict, tuple(null_values))
    if chosen == "local":
        return _analyze_local(trace, job, reading)
    bar = Progress(4 + _COMPARE_STEPS + bool(systems) + bool(bootstrap))
    session = _start_spark(spark, bar)
    with JobCount(session, "analyze") as jobs:
        jobs.name("read and validate the trace")
        LOG.info("reading and validating %s (--on-bad-rows %s)", trace, on_bad_rows)
        df, bad = read_spark(session, trace, on_bad_rows, unit, strict, reading.null_values)
        check_rows_left(trace, bad)
        df = df.persist()
        try:
            rows = bad.rows_kept
            if bad.total:
                LOG.warning("skipped %d bad rows of %d", bad.total, bad.rows_read)
            bar.step(f"read {rows:,} rows")
            report = Report(f"Watermarks: {os.fspath(trace)}")
            report.trace(f"On the trace read from {os.fspath(trace)}")
            jobs.name("describe the trace")
            e, a = F.col("event_time"), F.col("arrival_time")
            got = df.agg(
                F.count(F.when(a < e, F.lit(1))), F.min(e), F.max(e), F.min(a), F.max(a)
            ).first()
            assert got is not None
            early, e_lo, e_hi, a_lo, a_hi = (int(x or 0) for x in got)
            _warn(report, rows, early, job, (e_hi - e_lo, a_hi - a_lo))
            describe_trace(report, df, rows, f"rows read from {os.fspath(trace)}")
            bar.step("trace described")
            LOG.info("comparing %d watermark strategies on Spark", len(strategies))
            comparison = compare(
                df, strategies, window_size, seed=seed, step=bar.step, firing=firing,
                include_end_of_input=include_end_of_input,
            )
            jobs.name("the systems' input")
            systems_input = trace_of(df, rows) if systems else None
        finally:
            df.unpersist()
        jobs.log()
    origin = min(e_lo, a_lo)
    return _finish_analyze(report, comparison, bad, job, bar, systems_input, origin)


@dataclass(frozen=True)
class _Analysis:
    """What an analysis computes and where it writes (``run_analyze``'s options)."""

    out: Path
    window_size: int
    strategies: Sequence[str]
    seed: int
    systems: Sequence[str]
    firing: Firing
    include_end_of_input: bool = False
    bootstrap: int | None = None


@dataclass(frozen=True)
class _Reading:
    """How a trace is read (``run_analyze``'s reader options)."""

    on_bad_rows: OnBadRows
    unit: str | None
    strict: bool
    null_values: tuple[str, ...]


def _warn(
    report: Report, rows: int, early: int, job: _Analysis, spans: tuple[int, int]
) -> None:
    """Log and report the rows arriving before their event time, if any, and a window
    or bound longer than the trace's (event-time, processing-time) ``spans`` (µs)."""
    early_warning = arrival_before_event_warning(early, rows)
    parsed = check_request(job.strategies, job.window_size, "local")
    warnings = [early_warning] if early_warning else []
    for warning in warnings + span_warnings(job.window_size, parsed, *spans):
        LOG.warning("%s", warning)
        report.text("Warning", warning)


def check_rows_left(trace: str | os.PathLike[str], bad: BadRowReport) -> None:
    """ValueError naming the trace and the first bad row when every row was removed."""
    if bad.rows_kept > 0:
        return
    first = ""
    for rule, examples in bad.examples.items():
        if examples:
            row, _, value = examples[0]
            first = f"; e.g. row {row} ({rule}): {value!r}"
            break
    raise ValueError(
        f"trace {os.fspath(trace)!r}: every row is bad ({bad.total:,} of {bad.rows_read:,} "
        f"removed by --on-bad-rows skip-and-report), nothing left to analyze{first}"
    )


def _analyze_local(trace: str | os.PathLike[str], job: _Analysis, reading: _Reading) -> JobResult:
    """:func:`run_analyze` on the local engine."""
    bar = Progress(3 + _COMPARE_STEPS + bool(job.systems) + bool(job.bootstrap))
    LOG.info("reading and validating %s (--on-bad-rows %s)", trace, reading.on_bad_rows)
    t, bad = read_local(
        trace, reading.on_bad_rows, reading.unit, reading.strict, reading.null_values
    )
    check_rows_left(trace, bad)
    if bad.total:
        LOG.warning("skipped %d bad rows of %d", bad.total, bad.rows_read)
    bar.step(f"read {len(t):,} rows")
    report = Report(f"Watermarks: {os.fspath(trace)}")
    report.trace(f"On the trace read from {os.fspath(trace)}")
    e, a = t.event_time, t.arrival_time
    spans = (int(e.max() - e.min()), int(a.max() - a.min())) if len(t) else (0, 0)
    _warn(report, len(t), int(np.count_nonzero(a < e)), job, spans)
    describe_trace_local(report, t, f"rows read from {os.fspath(trace)}")
    LOG.info("comparing %d watermark strategies (local engine)", len(job.strategies))
    comparison = compare_local(
        t, job.strategies, job.window_size, seed=job.seed, step=bar.step, firing=job.firing,
        include_end_of_input=job.include_end_of_input,
    )
    systems_input = (t, f"all {len(t):,} rows") if job.systems else None
    origin = min(int(e.min()), int(a.min())) if len(t) else 0
    return _finish_analyze(report, comparison, bad, job, bar, systems_input, origin)


def _finish_analyze(
    report: Report,
    comparison: Comparison,
    bad: BadRowReport,
    job: _Analysis,
    bar: Progress,
    systems_input: tuple[Trace, str] | None,
    origin: int | None = None,
) -> JobResult:
    """The report's sections after the trace's, every figure's times from ``origin``
    (µs: the trace's earliest time), and the report written."""
    strategies_section(
        report, comparison, job.seed, job.firing, job.include_end_of_input, origin=origin
    )
    if job.bootstrap and comparison.windows is not None:
        LOG.info("bootstrap: %d resamples of the windows (seed %d)", job.bootstrap, job.seed)
        intervals = bootstrap_windows(
            window_table(comparison.windows), job.bootstrap, job.seed,
            include_end_of_input=job.include_end_of_input,
            late_firings=job.firing.late_firings,
        )
        bootstrap_section(report, intervals)
        bar.step(f"bootstrap: {job.bootstrap} resamples")
    if systems_input is not None:
        trace_rows, note = systems_input
        bound = bound_of(job.strategies)
        systems_section(
            report, trace_rows, job.systems, bound, job.window_size, note, origin=origin
        )
        bar.step("systems compared")
    if bad.total:
        bad_rows_section(report, bad)
    index = _write(report, job.out, bar)
    return JobResult(index, comparison, None)


__all__ = ["JobResult", "SparkOptions", "check_rows_left", "run_analyze", "run_demo"]
