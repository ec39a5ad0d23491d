"""watermarks: compare watermark strategies on event streams (Streaming Systems, ch. 3).

For a trace of (event time, arrival time) rows, when does each window fire under a
watermark strategy, how much data arrives late, and where does a pipeline wait?

- ``watermarks analyze TRACE``: your trace (Parquet, CSV or a directory of them): the
  strategies compared (late data, completeness, window latency, the latency/completeness
  frontier, which partition holds the watermark back), a report written.
- ``watermarks demo``: the same on the embedded default (seeded chapter-3 game
  sessions), plus the chapter-3 pipeline's watermarks per stage and in-band against
  out-of-band propagation.
- ``watermarks simulate``: the chapter-3 pipeline simulated; a table per stage, the
  watermark series (Parquet) and metrics (CSV).

Exit code 0 on success; 2 with a one-line cause on bad input or a failed run.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_backend.cli.atomic import atomic_directory
from spark_backend.cli.errors import one_line
from spark_backend.cli.interrupts import (
    Terminated,
    forget_signal,
    raise_interrupt,
    raise_terminated,
    report,
    signal_seen,
    stopped,
)
from spark_backend.cli.preflight import check_args, strategy_specs
from spark_backend.cli.progress import Progress

if TYPE_CHECKING:
    from theory.experiments.first_panes import Firing
    from theory.pipeline.stages import Pipeline

LOG = logging.getLogger("watermarks")


def _fmt_seconds(us: float) -> str:
    return "-" if us != us else f"{us / 1e6:,.1f}s"  # NaN check


def _write_simulation(result: Any, out: Path) -> None:
    """Write series.parquet and metrics.csv (columns named by unit: integer ``_us``, times
    also as ISO-8601 UTC ``_utc``, infinities as ``inf``) for a SimulationResult (or a
    Spark engine's KeyedSimulation) into the directory ``out``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_backend.report.report import write_csv
    from spark_backend.report.window_table import utc_strings

    stages, t_col, iw_col, ow_col = [], [], [], []
    for name in result.pipeline.graph.order:
        t, iw, ow = result.series(name)
        stages.append(np.full(t.size, name, dtype=object))
        t_col.append(t)
        iw_col.append(iw)
        ow_col.append(ow)
    columns: dict[str, pa.Array] = {
        "stage": pa.array(np.concatenate(stages).tolist(), pa.string())
    }
    for name, col in (("processing_time", t_col), ("input_watermark", iw_col),
                      ("output_watermark", ow_col)):  # fmt: skip
        us = np.concatenate(col).astype(np.int64)
        columns[f"{name}_us"] = pa.array(us, pa.int64())
        columns[f"{name}_utc"] = utc_strings(us)
    series = pa.table(columns)
    pq.write_table(series, out / "series.parquet")
    write_csv(out / "metrics.csv", _metrics(result))


def _metrics(result: Any) -> dict[str, list[object]]:
    """``metrics.csv``'s table: the per-stage metrics with their units."""
    from spark_backend.report.tables import with_units
    from theory.pipeline.metrics import metrics_table

    metrics = metrics_table(result)
    return with_units(
        metrics,
        durations=[k for k in metrics if "lag" in k or "latency" in k],
        times=["final_input_watermark", "final_output_watermark"],
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate the chapter-3 pipeline (or, with --trace, your trace through one grouping
    stage) and report per stage."""
    from spark_backend.cli.engine import choose_engine
    from spark_backend.session.memory import peak_rss, rss
    from theory.pipeline import chapter3
    from theory.pipeline.metrics import stage_metrics
    from theory.pipeline.simulator import simulate

    if args.trace is None:
        given = [f for f in ("windowing", "allowed_lateness", "time_unit") if getattr(args, f)]
        if given or args.late_firings or args.timestamp_combiner != "eow":
            raise ValueError(
                "--windowing, --allowed-lateness, --late-firings, --timestamp-combiner and "
                "--time-unit apply to --trace"
            )
        if args.events < 1:
            raise ValueError(f"--events must be >= 1, got {args.events}")
        pipe = chapter3.pipeline(watermark=args.watermark)
        LOG.info("generating %d events (seed %d)", args.events, args.seed)
        what = f"{args.events:,} events"
    else:
        pipe = _trace_pipeline(args)
    engine, why = choose_engine(args.engine, args.master, _simulate_need(args))
    LOG.info("engine %s: %s", engine, why)
    t0 = time.perf_counter()
    bar = Progress(len(pipe.stages) + 1 + (engine == "spark"))
    out = Path(args.out)
    if engine == "spark":
        from spark_backend.session.session import get_session
        from spark_backend.simulate.simulation import check_keyed, simulate_keyed

        check_keyed(pipe, dict.fromkeys(pipe.source_names()))
        LOG.info("starting Spark")
        session = get_session(args.master, args.conf)
        bar.step("Spark session")
    if args.trace is None and args.blocks is not None:
        inputs: dict[str, Any] = _generated(args, args.seed, engine)
        n_events = args.events
        bar.step(f"{args.blocks} blocks a source" if engine == "spark" else "generated")
    elif args.trace is None:
        inputs = _generated(args, args.seed, engine)
        n_events = args.events
        bar.step(f"generated {args.events:,} events" if engine == "local" else "generators")
    elif engine == "spark" and _summarised(pipe):
        from spark_backend.simulate.simulation import spark_context
        from spark_backend.traces.trace_input import read_blocks

        # read by Spark's tasks block by block, checked first; the driver holds no row
        blocked_file, _ = read_blocks(spark_context(session), args.trace, "fail", args.time_unit)
        inputs = {"in": blocked_file}
        n_events = blocked_file.events
        what = f"{n_events:,} rows of {args.trace}"
        LOG.info("trace %s: %d blocks checked on the executors", args.trace, blocked_file.blocks)
        bar.step(f"checked {what} in {blocked_file.blocks} blocks")
    else:
        from spark_backend.traces.trace_input import read_local

        if engine == "spark":
            LOG.info("watermark %s needs every row: the trace is read here", args.watermark)
        trace, _ = read_local(args.trace, "fail", args.time_unit)
        inputs = {"in": trace}
        n_events = len(trace)
        what = f"{len(trace):,} rows of {args.trace}"
        bar.step(f"read {what}")
    before = rss()
    with atomic_directory(out) as tmp:
        if engine == "spark":
            result: Any = simulate_keyed(
                session,
                pipe,
                inputs,
                tmp,
                partitions=args.partitions,
                on_stage=lambda s: bar.step(f"stage {s} (on Spark)"),
            )
            written = "series, metrics, panes and late elements"
        else:
            result = simulate(
                pipe,
                inputs,
                seed=args.seed,
                on_stage=lambda s: bar.step(f"stage {s}"),
                keep_freed_memory=args.keep_freed_memory,
            )
            written = "series and metrics"
        elapsed = time.perf_counter() - t0
        peak = peak_rss()
        _print_stages(stage_metrics(result))
        _write_simulation(result, tmp)
        if args.seeds > 1:
            _simulate_seeds(args, pipe, engine, result, tmp, session if engine == "spark" else None)
            written += ", seeds.csv"
    print(f"\n{what} simulated in {elapsed:.1f}s ({engine} engine); {written} in {out}/")
    print(
        f"peak memory of this process {peak / 2**20:,.0f} MiB; the simulation added "
        f"{max(0, peak - before) / max(1, n_events):,.0f} bytes per event at most (peak "
        "resident set above the set before it)"
    )
    return 0


def _generated(args: argparse.Namespace, seed: int, engine: str) -> dict[str, Any]:
    """The chapter-3 inputs of ``seed`` for ``engine``: with ``--blocks`` made block by
    block (on Spark by the tasks, here as whole traces); else the local engine takes the
    traces made, Spark makes each when its source runs."""
    from theory.pipeline import chapter3

    if args.blocks is not None:
        blocked = chapter3.block_traces(args.events, seed=seed, blocks=args.blocks)
        return dict(blocked) if engine == "spark" else {n: t.whole() for n, t in blocked.items()}
    makers = chapter3.trace_makers(args.events, seed=seed)
    return dict(makers) if engine == "spark" else {n: make() for n, make in makers.items()}


def _simulate_seeds(
    args: argparse.Namespace, pipe: Pipeline, engine: str, base: Any, out: Path, session: Any
) -> None:
    """``simulate --seeds N``: the simulation of every seed's events on the sweep's
    engine (:mod:`spark_backend.cli.seeds`), each stage metric's mean and interval
    written to ``out/seeds.csv``."""
    import shutil
    import tempfile

    from spark_backend.cli.seeds import run_seeds, sweep_engine
    from spark_backend.report.report import write_csv
    from theory.pipeline.simulator import simulate

    sweep = sweep_engine(args)

    def run(seed: int) -> dict[str, list[object]]:
        if seed == args.seed and sweep == engine:
            return _metrics(base)
        inputs = _generated(args, seed, sweep)
        if sweep == "local":
            return _metrics(simulate(pipe, inputs, seed=seed))
        from spark_backend.simulate.simulation import simulate_keyed

        scratch = Path(tempfile.mkdtemp(prefix="seed-", dir=out))
        try:
            keyed = simulate_keyed(session, pipe, inputs, scratch, partitions=args.partitions)
            return _metrics(keyed)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    table = run_seeds(run, args.seeds, args.seed, "stage", "pipeline simulated")
    write_csv(out / "seeds.csv", table.columns)


#: Bytes per event the simulator needs at its peak (driver side), for ``--engine auto``:
#: about 3x the ~200 B/event ``bench/simulate_throughput.py`` traces, for the process's
#: own copies and allocator slack.
SIMULATE_BYTES_PER_EVENT = 600


def _summarised(pipe: Pipeline) -> bool:
    """Whether every source's watermark comes from block summaries on Spark
    (:data:`spark_backend.simulate.sources.SUMMARISED`), so no source needs every row."""
    from spark_backend.simulate.sources import SUMMARISED
    from theory.pipeline.stages import Source
    from theory.watermarks.spec import make_source_watermark

    sources = [pipe.stage(n) for n in pipe.source_names()]
    return all(isinstance(s, Source) and make_source_watermark(s.watermark).kind in SUMMARISED
               for s in sources)  # fmt: skip


def _simulate_need(args: argparse.Namespace) -> int | None:
    """The simulation's estimated in-memory size (bytes) for ``choose_engine``."""
    from spark_backend.cli.engine import BYTES_PER_ROW, estimated_bytes
    from spark_backend.traces.trace_input import local_files

    if args.trace is None:
        return args.events * SIMULATE_BYTES_PER_EVENT

    need = estimated_bytes(local_files(args.trace))
    return None if need is None else need * SIMULATE_BYTES_PER_EVENT // BYTES_PER_ROW


def _trace_pipeline(args: argparse.Namespace) -> Pipeline:
    """simulate --trace: source -> the chosen windowing per key -> output (checked before
    the trace is read)."""
    from spark_backend.traces.trace_input import local_files
    from theory.data.units import check_time_unit
    from theory.experiments.tradeoff import grouping_pipeline
    from theory.time import parse_duration

    if args.time_unit is not None:
        check_time_unit(args.time_unit)
    local_files(args.trace)  # a missing file fails here
    return grouping_pipeline(
        args.watermark,
        args.windowing or "fixed:2m",
        allowed_lateness=parse_duration(args.allowed_lateness or "0"),
        late_firings=args.late_firings,
        timestamp_combiner=args.timestamp_combiner,
    )


def _print_stages(rows: list[Any]) -> None:
    from theory.time import format_timestamp

    header = (
        f"{'stage':<24} {'input wm':<22} {'output wm':<22} "
        f"{'lag p50':>9} {'lag p99':>9} {'late':>7}"
    )
    print(header)
    print("-" * len(header))
    for m in rows:
        print(
            f"{m.stage:<24} {format_timestamp(m.final_input_watermark):<22} "
            f"{format_timestamp(m.final_output_watermark):<22} "
            f"{_fmt_seconds(m.watermark_lag_p50):>9} {_fmt_seconds(m.watermark_lag_p99):>9} "
            f"{m.late_count:>7}"
        )


def _spark_options(args: argparse.Namespace) -> object:
    from spark_backend.cli.jobs import SparkOptions

    return SparkOptions(args.master, args.conf)


def _systems(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    from theory.experiments.systems import check_systems

    if text is None:
        return default
    if text.strip().lower() == "none":
        return ()
    return tuple(check_systems(text))


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the embedded default: strategies compared on Spark, report written."""
    from spark_backend.cli.jobs import run_demo
    from spark_backend.cli.seeds import sweep_engine
    from theory.time import parse_duration

    result = run_demo(
        args.events,
        args.seed,
        Path(args.out),
        parse_duration(args.window),
        strategies=strategy_specs(args.strategies),
        spark=_spark_options(args),  # type: ignore[arg-type]
        systems=_systems(args.systems, ("beam", "flink", "spark")),
        engine=args.engine,
        firing=_firing(args),
        include_end_of_input=args.include_end_of_input,
        seeds=args.seeds,
        sweep=sweep_engine(args),
        save_trace=None if args.save_trace is None else Path(args.save_trace),
    )
    print(f"report: {result.index}")
    if args.save_trace is not None:
        print(f"trace: {args.save_trace} (Parquet; event_time, arrival_time in µs)")
    return 0


def _null_values(text: str) -> tuple[str, ...]:
    """``--null-values NA,null``: the CSV fields read as null besides the empty one."""
    return tuple(v for v in text.split(",") if v)


def cmd_analyze(args: argparse.Namespace) -> int:
    """A trace of yours (Parquet, CSV or a directory): strategies compared, report written."""
    from spark_backend.cli.jobs import run_analyze
    from theory.time import parse_duration

    result = run_analyze(
        args.trace,
        Path(args.out),
        parse_duration(args.window),
        strategies=strategy_specs(args.strategies),
        on_bad_rows=args.on_bad_rows,
        seed=args.seed,
        spark=_spark_options(args),  # type: ignore[arg-type]
        systems=_systems(args.systems, ()),
        strict=args.strict,
        null_values=_null_values(args.null_values),
        engine=args.engine,
        time_unit=args.time_unit,
        firing=_firing(args),
        include_end_of_input=args.include_end_of_input,
        bootstrap=args.bootstrap,
    )
    print(f"report: {result.index}")
    return 0


class _Given(argparse.Action):
    """Stores the option's value and notes that it was given (``<dest>_given``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def _add_engine_option(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--engine",
        choices=("auto", "local", "spark"),
        default=default,
        action=_Given,
        help="local: numpy in this process, no JVM; spark: Spark; auto: local when the "
        "trace needs at most a quarter of the available memory and no --master or "
        "SPARK_REMOTE is given (the tables are the same)",
    )


def _strategy_help(forms: Sequence[str]) -> str:
    """The strategy specs of ``forms`` with their meanings (theory's spec table)."""
    from theory.watermarks.spec import SPEC_MEANINGS

    return "; ".join(f"{form} = {meaning}" for form, meaning in SPEC_MEANINGS if form in forms)


def _all_forms() -> tuple[str, ...]:
    from theory.watermarks.spec import SPEC_MEANINGS

    return tuple(form for form, _ in SPEC_MEANINGS)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown; lines wrapped at spaces only, so a spec such as
    ``flink-bounded:<d>`` is never cut at its hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


#: The specs the comparison computes, on both engines: every spec but ingress (which
#: re-stamps event times).
_COMPARED = (
    "perfect",
    "perfect:oracle",
    "bounded:<duration>",
    "percentile:<p>",
    "percentile:<p>:hold",
    "static",
    "dynamic",
    "dynamic:idle=<duration>",
    "flink-bounded:<duration>",
    "flink-bounded:<duration>:idle=<timeout>",
)


def _add_spark_options(p: argparse.ArgumentParser) -> None:
    from spark_backend.report.comparison import DEFAULT_STRATEGIES

    p.add_argument(
        "--strategies",
        default=",".join(DEFAULT_STRATEGIES),
        help="comma-separated source watermarks (both engines run every one): "
        + _strategy_help(_COMPARED),
    )
    p.add_argument("--window", default="2m", help="fixed window size, e.g. 2m, 30s, 500ms")
    p.add_argument(
        "--master",
        default=None,
        help="Spark master URL (None: local[*,4], every core and 4 task attempts; or "
        "SPARK_REMOTE)",
    )
    p.add_argument(
        "--systems",
        default=None,
        help="compare the trace under these systems' watermark conventions, e.g. "
        "beam,flink,spark (bound from the first bounded: strategy; demo: all three by "
        "default, 'none' for none; analyze: none by default)",
    )
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )
    _add_firing_options(p)


def _add_firing_options(p: argparse.ArgumentParser) -> None:
    """--allowed-lateness, --late-firings and --timestamp-combiner of analyze and demo."""
    from theory.experiments.first_panes import COMBINERS

    p.add_argument(
        "--allowed-lateness",
        default="0",
        help="how long after the watermark passes a window late data still counts (a "
        "duration; needs --late-firings)",
    )
    p.add_argument(
        "--late-firings",
        action="store_true",
        help="fire each window again for each arrival time of late data within the "
        "allowed lateness (AfterWatermark(late=AfterCount(1)), accumulating): the table "
        "gains late panes and the final completeness",
    )
    p.add_argument(
        "--timestamp-combiner",
        choices=COMBINERS,
        default="eow",
        help="pane timestamps (and watermark holds) at the end of the window, the earliest "
        "or the latest element (book figures 3.7, 3.8): the table gains their lag",
    )
    p.add_argument(
        "--include-end-of-input",
        action="store_true",
        help="count the windows fired by the end of input (at the last arrival, before "
        "the watermark reached their end) in the latency percentiles; by default they "
        "are left out and counted in end_of_input_windows",
    )


def _firing(args: argparse.Namespace) -> Firing:
    """The Firing of --allowed-lateness, --late-firings and --timestamp-combiner."""
    from theory.experiments.first_panes import Firing
    from theory.time import parse_duration

    return Firing(
        parse_duration(args.allowed_lateness), args.late_firings, args.timestamp_combiner
    )


_ANALYZE_DESCRIPTION = (
    "Compare watermark strategies on a trace of yours. Required columns: event_time and "
    "arrival_time (integers in --time-unit, µs by default; or timestamps, dates or "
    "ISO-8601 strings, naive = UTC). Optional: key (integer or string; default 0), value "
    "(number; default 1.0), partition (integer: which partition holds the watermark back), "
    "publish_time. Windows are per-key fixed windows of --window, fired once by each "
    "strategy's watermark."
)


def build_parser() -> argparse.ArgumentParser:
    from theory.experiments.first_panes import COMBINERS

    parser = argparse.ArgumentParser(
        prog="watermarks",
        description=__doc__.split("\n\nExit code")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, events, out in (
        ("simulate", cmd_simulate, 200_000, "out/simulate"),
        ("demo", cmd_demo, 3_000_000, "out/report"),
    ):
        p = sub.add_parser(
            name,
            help=(fn.__doc__ or "").strip(),
            description=(fn.__doc__ or "").strip(),
            formatter_class=_HelpFormatter,
        )
        p.add_argument("--events", type=int, default=events, help="trace size (events)")
        p.add_argument("--seed", type=int, default=0, help="generator and simulator seed")
        p.add_argument("--out", default=out, help="output directory (replaced atomically)")
        p.add_argument(
            "--seeds",
            type=int,
            default=1,
            metavar="N",
            help="run the generation and the "
            + ("simulation" if name == "simulate" else "strategy comparison")
            + " on N seeds (--seed, then seeds derived from it) and write each metric's "
            "mean and 95%% t interval over them (seeds.csv); on the local engine unless "
            "--engine spark is given",
        )
        p.set_defaults(func=fn, inputs={"trace": "--trace"} if name == "simulate" else {})
        if name == "demo":
            p.add_argument(
                "--save-trace",
                default=None,
                metavar="PATH",
                help="also write the generated trace to PATH (.parquet; event_time and "
                "arrival_time in µs), which analyze reads back to the same tables",
            )
        if name == "simulate":
            p.add_argument(
                "--watermark",
                default="perfect",
                help="source watermark of both inputs: " + _strategy_help(_all_forms()),
            )
            p.add_argument(
                "--engine",
                choices=("auto", "local", "spark"),
                default="auto",
                help="local: the simulator in this process; spark: each grouping stage on "
                "Spark, partitioned by key (watermarks and holds reduced on the driver; the "
                "same result); auto: spark when --master or SPARK_REMOTE is given or the "
                "simulation needs more than a quarter of the available memory, else local",
            )
            p.add_argument(
                "--keep-freed-memory",
                action="store_true",
                help="local engine: glibc keeps freed memory during the simulation (faster "
                "from millions of events: large arrays are not fresh memory each time; "
                "given back after; see theory.memory)",
            )
            p.add_argument(
                "--master",
                default=None,
                help="Spark master URL (None: local[*,4], every core and 4 task attempts)",
            )
            p.add_argument(
                "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
            )
            p.add_argument(
                "--partitions",
                type=int,
                default=None,
                help="with --engine spark: key partitions per grouping stage (None: Spark's "
                "default parallelism)",
            )
            p.add_argument(
                "--blocks",
                type=int,
                default=None,
                help="generate each input in this many blocks of users (seeded per block: "
                "a different trace from the one without; both engines run the same one); "
                "with --engine spark the tasks make the blocks and the driver never holds "
                "the events. None: one trace, made on the driver",
            )
            p.add_argument(
                "--trace",
                default=None,
                help="simulate your trace (Parquet, CSV or a directory; the columns of "
                "analyze) through source -> --windowing per key -> output, instead of the "
                "chapter-3 pipeline on generated events",
            )
            p.add_argument(
                "--windowing",
                default=None,
                help="with --trace: sessions:GAP, fixed:SIZE or sliding:SIZE/PERIOD "
                "(durations like 30s, 2m); None: fixed:2m",
            )
            p.add_argument(
                "--allowed-lateness",
                default=None,
                help="with --trace: how long after the watermark passes a window its "
                "state is kept (a duration); None: 0",
            )
            p.add_argument(
                "--late-firings",
                action="store_true",
                help="with --trace: fire again for each late element within the allowed "
                "lateness (AfterWatermark(late=AfterCount(1)), accumulating)",
            )
            p.add_argument(
                "--timestamp-combiner",
                choices=COMBINERS,
                default="eow",
                help="with --trace: pane timestamps and watermark holds at the end of the "
                "window, the earliest or the latest element (book figures 3.7, 3.8)",
            )
            p.add_argument(
                "--time-unit",
                choices=("us", "ms", "s", "ns"),
                default=None,
                help="with --trace: unit of numeric time columns (as analyze)",
            )
        else:
            _add_engine_option(p, "spark")
            _add_spark_options(p)
    p = sub.add_parser(
        "analyze",
        help=(cmd_analyze.__doc__ or "").strip(),
        description=_ANALYZE_DESCRIPTION,
        formatter_class=_HelpFormatter,
    )
    p.add_argument("trace", help="a Parquet or CSV file, or a directory of them")
    p.add_argument("--out", default="out/analyze", help="output directory (replaced atomically)")
    p.add_argument(
        "--seed", type=int, default=0,
        help="seed of the plotted element sample and of the bootstrap's resamples",
    )
    p.add_argument(
        "--bootstrap",
        type=int,
        default=None,
        metavar="N",
        help="resample the windows N times for 95%% bootstrap percentile intervals of the "
        "per-window metrics (bootstrap.csv)",
    )
    p.add_argument(
        "--on-bad-rows",
        choices=("fail", "skip-and-report"),
        default="fail",
        help="stop at the first bad row, or skip bad rows and report them",
    )
    p.add_argument(
        "--null-values",
        default="",
        metavar="A,B",
        help="CSV fields read as null besides the empty one, e.g. NA,null (default: none; "
        "a key NA is the string 'NA')",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse rows that arrive before their event time (default: count and warn)",
    )
    _add_engine_option(p, "auto")
    p.add_argument(
        "--time-unit",
        choices=("us", "ms", "s", "ns"),
        default=None,
        help="unit of numeric time columns (then any value whose µs lie in Beam's "
        "timestamp range, ±9223372036854775000, is accepted); without it they are "
        "µs, and epoch s/ms/ns read as µs is an error naming the likely unit",
    )
    _add_spark_options(p)
    p.set_defaults(func=cmd_analyze, inputs={"trace": "TRACE"})
    return parser


def _interrupted(exc: BaseException) -> int:
    """Exit status and one line for a run stopped by Ctrl-C (130) or SIGTERM (143)."""
    return stopped(exc)


class _Py4JRootRecords(logging.Filter):
    """Drops the records Py4J's modules log through the root logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


def _quiet_libraries(verbose: bool) -> None:
    """Py4J's and PySpark's own log records (connection traces, cancelled calls) and the
    JVM's (task failures) stay off the terminal unless ``-v``."""
    from spark_backend.session.session import set_jvm_log_level

    root = logging.getLogger()
    for f in [f for f in root.filters if isinstance(f, _Py4JRootRecords)]:
        root.removeFilter(f)
    if not verbose:  # Py4J logs its send failures through the root logger
        root.addFilter(_Py4JRootRecords())
    logging.getLogger("py4j").setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    logging.getLogger("pyspark").setLevel(logging.DEBUG if verbose else logging.ERROR)
    set_jvm_log_level("error" if verbose else "off")


def _signal_behind(exc: BaseException) -> BaseException | None:
    """The Ctrl-C or SIGTERM an error was raised while handling, if any. Py4J, interrupted
    in the middle of a call, tries to cancel it and may raise its own error from within
    the KeyboardInterrupt's handling; the user still pressed Ctrl-C."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (KeyboardInterrupt, Terminated)):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command. Exit 0 on success; 2 with one line naming the cause on any failure
    (``-v`` also prints the trace); 130 on Ctrl-C and 143 on SIGTERM, with one line. A
    failed or interrupted run leaves a previous output as it was; an error raised after
    a signal counts as the interruption (Python may turn a KeyboardInterrupt inside a C
    call into another error). The SIGINT and SIGTERM handlers are this call's only (the
    previous ones are restored)."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = None
    if main_thread:
        previous = signal.signal(signal.SIGTERM, raise_terminated), signal.getsignal(signal.SIGINT)
        if previous[1] is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, raise_interrupt)
    forget_signal()
    verbose = False
    try:
        args = build_parser().parse_args(argv)
        verbose = args.verbose
        logging.basicConfig(
            level=logging.DEBUG if verbose else logging.INFO,
            format="%(asctime)s %(name)s %(levelname)s %(message)s",
        )
        _quiet_libraries(verbose)
        check_args(args)
        return int(args.func(args))
    except (KeyboardInterrupt, Terminated) as exc:
        return _interrupted(exc)
    except Exception as exc:
        signalled = _signal_behind(exc)
        if signalled is not None:
            return _interrupted(signalled)
        seen = signal_seen()
        if seen is not None:  # the interrupt surfaced as another error
            return report(seen)
        if verbose:
            traceback.print_exc()
        print(f"watermarks: error: {one_line(exc)}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous[0])
            signal.signal(signal.SIGINT, previous[1])


if __name__ == "__main__":
    raise SystemExit(main())
