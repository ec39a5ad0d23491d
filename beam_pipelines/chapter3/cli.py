"""``python -m beam_pipelines.chapter3``: the chapter-3 pipeline over a trace, on any
Beam runner (in the style of ``apache_beam.examples``).

    python -m beam_pipelines.chapter3 --input TRACE --output DIR --watermark bounded:30s \\
        [--runner spark_backend.PySparkRunner --streaming] [Beam pipeline options]
    python -m beam_pipelines.chapter3 --make_input EVENTS --input TRACE  # make an input

``--help`` lists the PySparkRunner options too (:data:`RUNNER_OPTIONS`).

Without ``--runner`` it runs on Beam's default runner in batch. ``--streaming`` replays the
trace as a TestStream by arrival time (processing time = ``arrival_time``), each platform
with the source watermark ``--watermark``; on PySparkRunner, add
``--test_stream_batches=instant`` for one micro-batch per distinct arrival time, and
``--arrival_step 1s`` rounds arrival times up to whole steps (1-second micro-batches).

Long runs show progress on stderr: a log line per stage (read, build, run, write) and,
on a runner that counts its micro-batches (PySparkRunner ``--streaming``), a progress bar
of the batches run against those the replay sends (checked every second).

``DIR`` must be new or empty. Each grouping stage's panes go to ``DIR/<stage>/`` as the
run goes (one file per bundle, written atomically), and at the end to ``DIR/<stage>.csv``
(key, window start and end, pane timestamp µs, timing, index, first, last, value).
At the end it logs how many late elements each grouping stage dropped (Beam Java's
``droppedDueToLateness``, on a runner that counts it, as PySparkRunner does).
A bad trace, option or output directory is refused before any work: one line on stderr,
exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from beam_pipelines.chapter3.pipeline import GROUP_LABELS, GROUP_STAGES, SOURCE_STAGES
from beam_pipelines.chapter3.trace import (
    coarsen_arrivals,
    generate_chapter3_trace,
    read_chapter3_trace,
    write_chapter3_trace,
)
from beam_pipelines.metrics import dropped_due_to_lateness
from beam_pipelines.pane_files import PaneRow, read_panes
from theory.data.trace import Trace
from theory.progress import Progress
from theory.time import parse_duration
from theory.watermarks.spec import make_source_watermark
from theory.windowing.strategy import TimestampCombiner

__all__ = ["RUNNER_OPTIONS", "dropped_text", "main", "parse_args", "quiet_beam", "run", "write_csv"]

_LOG = logging.getLogger("beam_pipelines.chapter3")

_COMBINERS = {
    "eow": TimestampCombiner.OUTPUT_AT_EOW,
    "earliest": TimestampCombiner.OUTPUT_AT_EARLIEST,
}


#: The PySparkRunner options ``--help`` lists (Beam resolves ``--runner`` by its dotted
#: path, so this package names them without importing spark_backend).
RUNNER_OPTIONS: Final[dict[str, str]] = {
    "--spark_master URL": "Spark master: local[N] (default local[*]), spark://HOST:PORT, "
    "yarn, k8s://URL",
    "--spark_conf KEY=VALUE": "a Spark setting; repeat for more",
    "--key_partitions N": "streaming: partitions holding each GroupByKey's keys and state",
    "--test_stream_batches event|instant": "streaming: a micro-batch per TestStream event, "
    "or per distinct arrival time",
    "--max_batches N": "streaming: stop after N micro-batches",
    "--drain": "streaming: on a stop, fire every pending window first",
    "--checkpoint_dir DIR": "streaming: commit after every micro-batch, resume on restart",
}

_EPILOG = """\
Beam options (passed to Beam):
  --runner spark_backend.PySparkRunner   run on Spark (default: Beam's DirectRunner)
  --streaming                            replay the trace as a TestStream

PySparkRunner options:
{runner}

Make an input (a generated trace of 600 events), then run it on Spark in streaming:
  python -m beam_pipelines.chapter3 --make_input 600 --input trace.parquet
  python -m beam_pipelines.chapter3 --input trace.parquet --output out/ch3 \\
      --runner spark_backend.PySparkRunner --streaming --test_stream_batches instant
"""


def _epilog() -> str:
    width = max(len(flag) for flag in RUNNER_OPTIONS) + 2
    rows = [f"  {flag.ljust(width)} {text}" for flag, text in RUNNER_OPTIONS.items()]
    return _EPILOG.format(runner="\n".join(rows))


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The module's own options, checked, and the rest (Beam's pipeline options)."""
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipelines.chapter3",
        description="The Streaming Systems chapter-3 pipeline (mobile and console sessions "
        "-> flatten -> the 2-minute mean of session lengths) over a trace.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--input",
        required=True,
        help="Trace file or directory (.parquet/.pq/.csv): event_time, arrival_time (µs, "
        "whole ms), key (user), value (score) and platform (mobile or console).",
    )
    parser.add_argument(
        "--make_input",
        type=int,
        default=None,
        metavar="EVENTS",
        help="Write a generated trace of EVENTS events to --input (a new .parquet or .csv "
        "file) and exit.",
    )
    parser.add_argument("--output", help="Output directory (new or empty); required to run.")
    parser.add_argument(
        "--watermark",
        default="bounded:30s",
        help="Each source's watermark spec in streaming (default bounded:30s).",
    )
    parser.add_argument(
        "--timestamp_combiner",
        choices=sorted(_COMBINERS),
        default="eow",
        help="The session stages' output timestamps (default eow: end of window).",
    )
    parser.add_argument(
        "--arrival_step",
        default=None,
        help="Round arrival times up to multiples of this duration (e.g. 1s).",
    )
    known, rest = parser.parse_known_args(argv)
    if known.make_input is not None:
        if known.make_input < 1:
            raise ValueError(f"--make_input must be >= 1 events, got {known.make_input}")
        if Path(known.input).exists():
            raise ValueError(f"--make_input: --input {known.input!r} exists already")
        return known, rest
    if known.output is None:
        raise ValueError("--output is required (a new or empty directory for the panes)")
    make_source_watermark(known.watermark)  # a bad spec names itself
    if known.arrival_step is not None:
        known.arrival_step = parse_duration(known.arrival_step)
        if known.arrival_step <= 0:
            raise ValueError(f"--arrival_step must be positive, got {known.arrival_step} µs")
    out = Path(known.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--output {str(out)!r} exists and is not an empty directory")
    return known, rest


def write_csv(rows: list[PaneRow], path: Path) -> None:
    """The panes as a CSV file, written atomically."""
    table = pa.table(
        {
            "key": pa.array(["" if r.key is None else str(r.key) for r in rows], pa.string()),
            "window_start": pa.array([r.start for r in rows], pa.int64()),
            "window_end": pa.array([r.end for r in rows], pa.int64()),
            "timestamp": pa.array([r.timestamp for r in rows], pa.int64()),
            "timing": pa.array([r.timing for r in rows], pa.string()),
            "index": pa.array([r.index for r in rows], pa.int64()),
            "is_first": pa.array([r.is_first for r in rows], pa.bool_()),
            "is_last": pa.array([r.is_last for r in rows], pa.bool_()),
            "value": pa.array([float(r.value) for r in rows], pa.float64()),
        }
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pacsv.write_csv(table, tmp)
    os.replace(tmp, path)


def _expected_batches(options: Any, traces: Mapping[str, Trace], events: int) -> int:
    """The micro-batches PySparkRunner runs for the replay: one per distinct arrival time
    with ``--test_stream_batches instant``, else one per TestStream event; and the last
    one that ends the sources."""
    flags = options.get_all_options(retain_unknown_options=True)
    if flags.get("test_stream_batches") == "instant":
        arrivals = np.concatenate([t.arrival_time for t in traces.values()])
        return int(np.unique(arrivals).size) + 1
    return events + 1


def _wait(result: Any, batches: int | None, stream: TextIO) -> None:
    """Wait for the run to finish; on a runner counting its micro-batches (a result
    with ``batches``), print the progress bar whenever more batches have run."""
    if batches is None or not hasattr(result, "batches"):
        result.wait_until_finish()
        return
    progress = Progress(max(1, batches), stream=stream)
    shown = -1
    while True:
        finished = result.wait_until_finish(duration=1000) is not None
        if result.batches != shown:
            shown = result.batches
            progress.update(shown, "micro-batches")
        if finished:
            return


def run(argv: Sequence[str] | None = None, progress_stream: TextIO | None = None) -> object:
    """Run the module (see the module docstring); the Beam ``PipelineResult`` (None with
    ``--make_input``). The progress bar goes to ``progress_stream`` (stderr by
    default)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    from beam_pipelines.chapter3.pipeline import batch_sources, build, replay, streaming_sources

    known, pipeline_args = parse_args(argv)
    if known.make_input is not None:
        write_chapter3_trace(generate_chapter3_trace(known.make_input, seed=1), known.input)
        _LOG.info("stage input: %d events written to %s", known.make_input, known.input)
        return None
    options = PipelineOptions(pipeline_args)
    streaming = bool(options.view_as(StandardOptions).streaming)
    traces = read_chapter3_trace(known.input)
    if known.arrival_step is not None:
        traces = {k: coarsen_arrivals(t, known.arrival_step) for k, t in traces.items()}
    sizes = ", ".join(f"{name} {len(traces[name]):,}" for name in SOURCE_STAGES)
    _LOG.info("stage read: %s rows of %s", sizes, known.input)
    out = Path(known.output)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    pipeline = beam.Pipeline(options=options)
    batches = None
    if streaming:
        stream = replay(traces, known.watermark)
        sources = streaming_sources(pipeline, traces, known.watermark, stream)
        batches = _expected_batches(options, traces, len(stream._events))
    else:
        sources = batch_sources(pipeline, traces)
    build(sources, out, _COMBINERS[known.timestamp_combiner])
    _LOG.info(
        "stage build: %s pipeline built%s",
        "streaming" if streaming else "batch",
        f" ({batches:,} micro-batches to run on a batch-counting runner)" if batches else "",
    )
    result = pipeline.run()
    _wait(result, batches, progress_stream or sys.stderr)
    _LOG.info("stage run: finished in %.1f s", time.perf_counter() - started)
    for stage in GROUP_STAGES:
        rows = read_panes(out, stage)
        write_csv(rows, out / f"{stage}.csv")
        _LOG.info("stage write: %d panes of %s in %s", len(rows), stage, out / f"{stage}.csv")
    _LOG.info("stage dropped: %s", dropped_text(dropped_due_to_lateness(result)))
    return result


def dropped_text(counted: Mapping[str, int]) -> str:
    """Each grouping stage's late elements dropped (``droppedDueToLateness``, as the
    runner counted them by GroupByKey label), as one line."""
    if not counted:
        return "late elements not counted by this runner"
    parts = [f"{stage} {counted.get(GROUP_LABELS[stage], 0):,}" for stage in GROUP_STAGES]
    return "late elements (droppedDueToLateness) " + ", ".join(parts)


def quiet_beam(record: logging.LogRecord) -> bool:
    """Whether a log line is shown: Beam's own lines only at WARNING and above (its INFO
    lines are chatter such as "Converting string literal type hint to Any")."""
    return record.levelno >= logging.WARNING or not record.name.startswith("apache_beam")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: :func:`run`, a refused input as one line and exit status 2."""
    # Importing Beam gives the root logger a handler of its own, which would print every
    # line a second time: the run has one handler, this call's, on this call's stderr,
    # and the root logger is put back after (a caller's later logging must not write to
    # a stream this call used, which may be closed by then).
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    handler.addFilter(quiet_beam)
    level, handlers = root.level, list(root.handlers)
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    try:
        run(argv)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        root.handlers = handlers
        root.setLevel(level)
    return 0
