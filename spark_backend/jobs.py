"""The command line's jobs: the demo (main job) and the analysis of a user's trace.

Each job logs a line per stage, shows a progress bar on stderr, and writes its report
atomically (see :mod:`spark_backend.report`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spark_backend import plots
from spark_backend.progress import Progress
from spark_backend.report import Report, percent, seconds
from theory import chapter3
from theory.experiments import Strategy, TradeoffResult, tradeoff
from theory.experiments.propagation import propagation
from theory.experiments.tradeoff import STAGE
from theory.metrics import stage_metrics
from theory.processing import Processing
from theory.processing_time import diagnose, lag_series
from theory.simulate import SimulationResult, simulate
from theory.time import HOUR, SECOND, format_timestamp
from theory.traces import Trace

LOG = logging.getLogger("watermarks")

#: The strategies the demo compares.
DEMO_STRATEGIES: tuple[Strategy, ...] = (
    Strategy("perfect", "perfect"),
    Strategy("bounded 10s", "bounded:10s"),
    Strategy("bounded 1m", "bounded:1m"),
    Strategy("bounded 5m", "bounded:5m"),
    Strategy("bounded 10s + late firings", "bounded:10s", True, 6 * HOUR),
)


@dataclass(frozen=True)
class JobResult:
    """What a job produced: the report's index and the figures behind it."""

    index: Path
    comparison: TradeoffResult
    simulation: SimulationResult | None


def compare_strategies(
    report: Report,
    trace: Trace,
    strategies: Sequence[Strategy],
    window_size: int,
    seed: int,
) -> TradeoffResult:
    """Run the strategy comparison and add its table and figures to ``report``."""
    result = tradeoff(trace, strategies, window_size=window_size, seed=seed)
    table = result.table()
    keep = [
        "strategy",
        "late_count",
        "late_fraction",
        "dropped",
        "windows",
        "completeness_mean",
        "complete_fraction",
        "window_latency_p50",
        "window_latency_p90",
        "window_latency_p99",
        "watermark_lag_p50",
        "watermark_lag_p99",
        "on_frontier",
    ]
    fmt = {c: seconds for c in keep if "latency" in c or "lag" in c}
    fmt.update({c: percent for c in ("late_fraction", "completeness_mean", "complete_fraction")})
    report.table(
        "strategies",
        "Watermark strategies compared",
        {k: table[k] for k in keep},
        "Late data, completeness of each window's first pane, and window latency "
        "(processing time from the end of the window to its first pane).",
        fmt,
    )
    ordered = trace.sorted_by_arrival()
    curves = {
        s.name: result.results[s.name].stages["in"].input_watermark
        for s in strategies
        if not s.late_firings
    }
    late = {
        s.name: result.results[s.name].stages["in"].late for s in strategies if not s.late_firings
    }
    report.figure(
        "Elements, watermarks and late data",
        lambda p: plots.event_vs_processing(
            p, ordered.event_time, ordered.arrival_time, curves, late, seed=seed
        ),
        "watermarks.png",
        "Each point is an element (processing time of arrival against event time); each "
        "line a strategy's watermark; crosses mark the elements that arrive late under it.",
    )
    report.figure(
        "Latency vs completeness",
        lambda p: plots.frontier(
            p,
            [r.strategy for r in result.rows],
            [r.window_latency_p50 for r in result.rows],
            [r.completeness_mean for r in result.rows],
            result.on_frontier,
        ),
        "frontier.png",
        "Median window latency against completeness at first firing; circles are on the "
        "Pareto frontier.",
    )
    return result


def chapter3_section(report: Report, events: int, seed: int) -> SimulationResult:
    """Simulate the book's chapter-3 pipeline and add its tables and figures."""
    pipe = chapter3.pipeline("bounded:30s", Processing(latency=2 * SECOND))
    result = simulate(pipe, chapter3.traces(events, seed=seed), seed=seed)
    rows = stage_metrics(result)
    report.table(
        "chapter3_stages",
        "Chapter 3 pipeline: watermarks per stage",
        {
            "stage": [m.stage for m in rows],
            "final input watermark": [format_timestamp(m.final_input_watermark) for m in rows],
            "final output watermark": [format_timestamp(m.final_output_watermark) for m in rows],
            "arrivals": [m.arrivals for m in rows],
            "late": [m.late_count for m in rows],
            "watermark lag p50": [m.watermark_lag_p50 for m in rows],
            "watermark lag p99": [m.watermark_lag_p99 for m in rows],
            "stage lag p99": [m.stage_lag_p99 for m in rows],
        },
        "Mobile and console sessions (gap 1 min, at the watermark), flattened, averaged in "
        "fixed 2-minute windows; source watermark max seen - 30 s; 2 s processing per stage.",
        {"watermark lag p50": seconds, "watermark lag p99": seconds, "stage lag p99": seconds},
    )
    grid = result.times[:: max(1, result.times.size // 20_000)]
    series = {
        name: (r.input_watermark.at(grid), r.output_watermark.at(grid))
        for name, r in result.stages.items()
    }
    report.figure(
        "Input and output watermarks per stage",
        lambda p: plots.stage_watermarks(p, grid, series),
        "stages.png",
        "Solid: input watermark; dashed: output watermark (book figure 3.5).",
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
        {
            "start": [format_timestamp(s.start) for s in stalls],
            "end": [format_timestamp(s.end) for s in stalls],
            "kind": [s.kind for s in stalls],
            "culprit stage": [s.culprit_stage for s in stalls],
            "hold": [s.culprit_hold for s in stalls],
            "max event-time lag": [s.max_event_lag for s in stalls],
            "max processing-time lag": [s.max_processing_lag for s in stalls],
        },
        f"Intervals where the event-time lag at {sink} exceeded 1 minute.",
        {"max event-time lag": seconds, "max processing-time lag": seconds},
    )
    return result


def propagation_section(report: Report, seed: int) -> None:
    """In-band (Flink) against out-of-band (Dataflow) propagation, table and figure."""
    rows = propagation(depths=(1, 5, 10, 20), parallelisms=(1, 10, 100, 1000), seed=seed).rows
    report.table(
        "propagation",
        "In-band (Flink) vs out-of-band (Dataflow) propagation",
        {
            "scenario": [r.scenario for r in rows],
            "design": [r.design for r in rows],
            "depth": [r.depth for r in rows],
            "parallelism": [r.parallelism for r in rows],
            "latency": [r.latency for r in rows],
            "messages/s": [r.messages_per_second for r in rows],
            "rejected reports": [r.rejected_reports for r in rows],
            "safe": [r.safe for r in rows],
        },
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


def run_demo(events: int, seed: int, out: Path, window_size: int) -> JobResult:
    """The main job on the embedded default: chapter-3 game traces, strategies compared,
    the chapter-3 pipeline simulated, the report written."""
    if events < 2:
        raise ValueError(f"--events must be >= 2, got {events}")
    bar = Progress(5)
    LOG.info("generating the chapter-3 game traces: %d events, seed %d", events, seed)
    parts = chapter3.traces(events, seed=seed)
    trace = Trace.concat([parts["mobile_in"], parts["console_in"]])
    bar.step(f"generated {len(trace):,} events")
    report = Report("Watermarks: the chapter-3 game sessions")
    delays = (trace.arrival_time - trace.event_time) / 1e6
    p = np.percentile(delays, [50, 90, 99, 100])
    report.text(
        "The trace",
        f"{len(trace):,} events from mobile and console game sessions; delay from event "
        f"to arrival p50 {p[0]:.1f} s, p90 {p[1]:.1f} s, p99 {p[2]:.1f} s, max {p[3]:,.0f} s.",
    )
    LOG.info("comparing %d watermark strategies", len(DEMO_STRATEGIES))
    comparison = compare_strategies(report, trace, DEMO_STRATEGIES, window_size, seed)
    bar.step("strategies compared")
    LOG.info("simulating the chapter-3 pipeline")
    simulation = chapter3_section(report, min(events, 200_000), seed)
    bar.step("chapter-3 pipeline simulated")
    LOG.info("comparing in-band and out-of-band propagation")
    propagation_section(report, seed)
    bar.step("propagation compared")
    LOG.info("writing the report to %s", out)
    index = report.write(out)
    bar.step(f"report written to {index}")
    return JobResult(index, comparison, simulation)


__all__ = ["DEMO_STRATEGIES", "STAGE", "JobResult", "compare_strategies", "run_demo"]
