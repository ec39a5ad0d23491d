"""The ``watermarks`` command line.

- ``watermarks simulate``: the chapter-3 pipeline simulated in ``theory``; prints a table
  per stage and writes the watermark series (Parquet) and metrics (CSV).
- ``watermarks demo``: the main job on the embedded default (a seeded built-in trace
  generated on Spark): strategies compared on Spark, the chapter-3 pipeline simulated,
  a report written.
- ``watermarks analyze TRACE``: the same comparison on a trace of yours.

Exit code 0 on success; 2 with a one-line cause on bad input or a failed run.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from spark_backend.atomic import Terminated, atomic_directory
from spark_backend.errors import one_line
from spark_backend.preflight import check_args
from spark_backend.progress import Progress

LOG = logging.getLogger("watermarks")


def _fmt_seconds(us: float) -> str:
    return "-" if us != us else f"{us / 1e6:,.1f}s"  # NaN check


def _write_simulation(result: object, out: Path) -> None:
    """Write series.parquet and metrics.csv for a SimulationResult, atomically."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from theory.pipeline.metrics import metrics_table
    from theory.pipeline.simulator import SimulationResult

    assert isinstance(result, SimulationResult)
    stages, t_col, iw_col, ow_col = [], [], [], []
    for name in result.pipeline.graph.order:
        t, iw, ow = result.series(name)
        stages.append(np.full(t.size, name, dtype=object))
        t_col.append(t)
        iw_col.append(iw)
        ow_col.append(ow)
    series = pa.table(
        {
            "stage": pa.array(np.concatenate(stages).tolist(), pa.string()),
            "processing_time": pa.array(np.concatenate(t_col), pa.int64()),
            "input_watermark": pa.array(np.concatenate(iw_col), pa.int64()),
            "output_watermark": pa.array(np.concatenate(ow_col), pa.int64()),
        }
    )
    with atomic_directory(out) as tmp:
        pq.write_table(series, tmp / "series.parquet")
        pacsv.write_csv(pa.table(metrics_table(result)), tmp / "metrics.csv")


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate the chapter-3 pipeline and report per stage."""
    from theory.pipeline import chapter3
    from theory.pipeline.metrics import stage_metrics
    from theory.pipeline.simulator import simulate
    from theory.time import format_timestamp

    if args.events < 1:
        raise ValueError(f"--events must be >= 1, got {args.events}")
    pipe = chapter3.pipeline(watermark=args.watermark)
    LOG.info("generating %d events (seed %d)", args.events, args.seed)
    t0 = time.perf_counter()
    traces = chapter3.traces(args.events, seed=args.seed)
    bar = Progress(len(pipe.stages) + 1)
    bar.step(f"generated {args.events:,} events")
    result = simulate(pipe, traces, seed=args.seed, on_stage=lambda s: bar.step(f"stage {s}"))
    elapsed = time.perf_counter() - t0
    rows = stage_metrics(result)
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
    out = Path(args.out)
    _write_simulation(result, out)
    print(f"\n{args.events:,} events simulated in {elapsed:.1f}s; series and metrics in {out}/")
    return 0


def _spark_options(args: argparse.Namespace) -> object:
    from spark_backend.jobs import SparkOptions

    return SparkOptions(args.master, args.conf)


def _strategies(text: str | None) -> tuple[str, ...]:
    from spark_backend.comparison import DEFAULT_STRATEGIES

    if text is None:
        return DEFAULT_STRATEGIES
    specs = tuple(s.strip() for s in text.split(",") if s.strip())
    if not specs:
        raise ValueError(f"--strategies names no strategy: {text!r}")
    return specs


def _systems(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    from theory.experiments.systems import check_systems

    if text is None:
        return default
    if text.strip().lower() == "none":
        return ()
    return tuple(check_systems(text))


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the embedded default: strategies compared on Spark, report written."""
    from spark_backend.jobs import run_demo
    from theory.time import parse_duration

    result = run_demo(
        args.events,
        args.seed,
        Path(args.out),
        parse_duration(args.window),
        strategies=_strategies(args.strategies),
        spark=_spark_options(args),  # type: ignore[arg-type]
        systems=_systems(args.systems, ("beam", "flink", "spark")),
    )
    print(f"report: {result.index}")
    return 0


def _null_values(text: str) -> tuple[str, ...]:
    """``--null-values NA,null``: the CSV fields read as null besides the empty one."""
    return tuple(v for v in text.split(",") if v)


def cmd_analyze(args: argparse.Namespace) -> int:
    """A trace of yours (Parquet, CSV or a directory): strategies compared, report written."""
    from spark_backend.jobs import run_analyze
    from theory.time import parse_duration

    result = run_analyze(
        args.trace,
        Path(args.out),
        parse_duration(args.window),
        strategies=_strategies(args.strategies),
        on_bad_rows=args.on_bad_rows,
        seed=args.seed,
        spark=_spark_options(args),  # type: ignore[arg-type]
        systems=_systems(args.systems, ()),
        strict=args.strict,
        null_values=_null_values(args.null_values),
    )
    print(f"report: {result.index}")
    return 0


def _add_spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--strategies",
        default=None,
        help="comma-separated strategies: perfect, bounded:<duration>, percentile:<p>[:hold] "
        "(default: perfect, bounded 10s/1m/5m, percentile 0.5/0.9/0.99/1)",
    )
    p.add_argument("--window", default="2m", help="fixed window size, e.g. 2m")
    p.add_argument(
        "--systems",
        default=None,
        help="compare the trace under these systems' watermark conventions, e.g. "
        "beam,flink,spark (bound from the first bounded: strategy; demo: all three by "
        "default, 'none' for none; analyze: none by default)",
    )
    p.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="watermarks", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, events, out in (
        ("simulate", cmd_simulate, 200_000, "out/simulate"),
        ("demo", cmd_demo, 3_000_000, "out/report"),
    ):
        p = sub.add_parser(name, help=(fn.__doc__ or "").strip())
        p.add_argument("--events", type=int, default=events, help="trace size (events)")
        p.add_argument("--seed", type=int, default=0, help="generator and simulator seed")
        p.add_argument("--out", default=out, help="output directory (replaced atomically)")
        p.set_defaults(func=fn)
        if name == "simulate":
            p.add_argument(
                "--watermark",
                default="perfect",
                help="source watermark spec: perfect, bounded:30s, flink-bounded:30s, ...",
            )
        else:
            _add_spark_options(p)
    p = sub.add_parser("analyze", help=(cmd_analyze.__doc__ or "").strip())
    p.add_argument("trace", help="a Parquet or CSV file, or a directory of them")
    p.add_argument("--out", default="out/analyze", help="output directory (replaced atomically)")
    p.add_argument("--seed", type=int, default=0, help="seed of the plotted element sample")
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
    _add_spark_options(p)
    p.set_defaults(func=cmd_analyze)
    return parser


def _terminate(signum: int, frame: object) -> None:
    raise Terminated(f"terminated by signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command. Exit 0 on success; 2 with one line naming the cause on any failure
    (``-v`` also prints the trace); 130 on Ctrl-C and 143 on SIGTERM, with one line. A
    failed or interrupted run leaves a previous output as it was."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        check_args(args)
        return int(args.func(args))
    except KeyboardInterrupt:
        print("watermarks: interrupted (Ctrl-C); previous output left as it was", file=sys.stderr)
        return 130
    except Terminated:
        print("watermarks: terminated (SIGTERM); previous output left as it was", file=sys.stderr)
        return 143
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"watermarks: error: {one_line(exc)}", file=sys.stderr)
        return 2
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    raise SystemExit(main())
