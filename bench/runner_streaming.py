"""Benchmark: PySparkRunner --streaming, against its batch mode and theory.simulate.

Three parts on one Spark session (``local[2]`` by default; the JVM start is left out of
every rate):

- **windowed count**: ``--elements`` elements (``--keys`` keys) arriving at ``--rate``
  elements/s, replayed by a TestStream in 1-second micro-batches with a bounded source
  watermark, then ``FixedWindows(--window)`` and ``CombinePerKey(count)``. Per round:
  throughput (elements / wall s of ``run()``), CPU seconds of the process tree and batch
  times; once, each pane's latency in micro-batches (the batch that wrote it minus the
  first batch whose input watermark passed its window's end). Beside it the same count
  on PySparkRunner in batch and, with ``--reference``, streaming with
  ``fast_paths=False``; medians of ``--rounds``, outputs compared.
- **executor-side source**: the same count over ``--source-elements`` elements made in
  the tasks by an unbounded splittable DoFn (``--shards`` shards, Manual watermark
  estimator, one second of data per bundle), against the batch runner reading the same
  source to its end; medians of ``--rounds``, counts compared.
- **chapter 3**: ``python -m beam_pipelines.chapter3`` on ``--ch3-events`` trace events
  on PySparkRunner streaming, one micro-batch per arrival step, against
  ``theory.simulate`` on the same trace: wall times, their ratio, equal panes or not.

One short streaming run first warms the session up (printed, left out of the medians;
``--no-warm-up`` skips it). Load averages are printed with every figure; ``--record``
appends the figures to ``bench/results/runner_streaming.json``.

    nice .venv/bin/python bench/runner_streaming.py --elements 1e6 --ch3-events 1e6
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window as window_fns
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.utils.timestamp import Timestamp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import add_repeats, add_seed, bench_parser, counts
from peak_memory import tree_cpu  # bench/peak_memory.py (this script's folder)
from record import Recorder

from beam_pipelines.chapter3 import cli as chapter3_cli
from beam_pipelines.chapter3.model import simulate_chapter3
from beam_pipelines.chapter3.pipeline import GROUP_STAGES
from beam_pipelines.chapter3.trace import (
    coarsen_arrivals,
    generate_chapter3_trace,
    write_chapter3_trace,
)
from beam_pipelines.pane_files import WritePanes, part_files, read_panes
from beam_pipelines.teststream import from_trace
from spark_backend.runner import PySparkRunner
from spark_backend.session.session import get_session
from theory.data.trace import Trace
from theory.time import MICROS_PER_SECOND, parse_duration

S = MICROS_PER_SECOND
COUNT_LABEL = "count/GroupByKey"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


class BatchLog(logging.Handler):
    """Records each micro-batch's end (monotonic ns), number and processing time (µs)
    from the streaming driver's log line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.batches: list[tuple[int, int, float, int]] = []  # (end ns, number, s, clock)

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("batch %d:") and isinstance(record.args, tuple):
            number, _, seconds, clock = record.args
            self.batches.append(
                (time.monotonic_ns(), int(number), float(seconds), int(clock))  # type: ignore[call-overload, arg-type]
            )

    def __enter__(self) -> BatchLog:
        logger = logging.getLogger("spark_backend.runner.streaming.driver")
        self._level = logger.level
        logger.setLevel(logging.INFO)
        logger.propagate = False
        logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger("spark_backend.runner.streaming.driver")
        logger.removeHandler(self)
        logger.propagate = True
        logger.setLevel(self._level)


# ------------------------------------------------------------------ windowed count


def count_trace(n: int, keys: int, rate: int, bound: int, seed: int) -> Trace:
    """``n`` elements arriving uniformly at ``rate`` per second, arrival rounded up to
    whole seconds, event time up to ``bound`` µs before arrival (whole ms)."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.integers(0, max(1, n * S // rate), n))
    event = arrival - rng.integers(0, bound, n)
    event -= event % 1000
    arrival = np.maximum(arrival, event)
    trace = Trace(event, arrival, rng.integers(0, keys, n), np.ones(n))
    return coarsen_arrivals(trace, S)


def windowed_count(events: Any, window: int) -> Any:
    return (
        events
        | "window" >> beam.WindowInto(window_fns.FixedWindows(window / S))
        | "count" >> beam.CombinePerKey(beam.combiners.CountCombineFn())
    )


def _timestamped(row: tuple[Any, float, int]) -> Any:
    key, value, micros = row
    return window_fns.TimestampedValue((key, value), micros / S)


def run_count(
    trace: Trace,
    window: int,
    bound: int,
    streaming: bool,
    master: str,
    out: Path,
    fast_paths: bool = True,
    key_partitions: int | None = None,
) -> tuple[float, float, Any]:
    """Run the count on PySparkRunner (``fast_paths=False``: the reference, every stage
    on Beam's bundle processor and the combine not lifted); wall and process-tree CPU
    seconds of the run (building the TestStream left out), and the result."""
    options = PipelineOptions(
        streaming=streaming,
        spark_master=master,
        **({"test_stream_batches": "instant"} if streaming else {}),
        **({"key_partitions": key_partitions} if streaming and key_partitions else {}),
    )
    p = beam.Pipeline(runner=PySparkRunner(fast_paths=fast_paths), options=options)
    if streaming:
        source = p | "events" >> from_trace(trace, f"bounded:{bound}us")
    else:
        rows = list(
            zip(trace.key.tolist(), trace.value.tolist(), trace.event_time.tolist(), strict=True)
        )
        source = p | "events" >> beam.Create(rows) | "stamp" >> beam.Map(_timestamped)
    windowed_count(source, window) | "write" >> WritePanes(out, "count")
    cpu0, t0 = tree_cpu(os.getpid()), time.perf_counter()
    result = p.run()
    result.wait_until_finish()
    return time.perf_counter() - t0, tree_cpu(os.getpid()) - cpu0, result


def latencies(out: Path, result: Any, log: BatchLog) -> tuple[list[int], int]:
    """Each pane's latency in micro-batches (see the module docstring), and how many
    panes' windows were passed by the watermark before the last batch (the one that
    ends the sources): those closed while the run went on."""
    ends = np.array([b[0] for b in log.batches], np.int64)
    numbers = np.array([b[1] for b in log.batches], np.int64)
    watermark = result.watermarks(per_batch=True)[COUNT_LABEL]["input"].at(numbers)
    out_latency = []
    during = 0
    for written, rows in part_files(out, "count"):
        batch = int(np.searchsorted(ends, written))  # the batch running when it was written
        for row in rows:
            passed = int(np.searchsorted(watermark, row.end))  # first batch with wm >= end
            out_latency.append(batch - passed)
            during += passed < len(numbers) - 1
    return out_latency, during


def count_part(args: argparse.Namespace, master: str, figures: dict[str, Any]) -> None:
    for n in args.elements:
        trace = count_trace(n, args.keys, args.rate, args.bound, args.seed)
        batches = np.unique(trace.arrival_time).size
        print(
            f"\nwindowed count: {n:,} elements, {args.keys} keys, {args.rate:,} el/s in "
            f"{batches} one-second micro-batches, FixedWindows({args.window / S:g} s), "
            f"bounded:{args.bound / S:g}s; medians of {args.rounds} round(s), CPU = the "
            "process tree's (driver, JVM, Python workers)"
        )
        runs: dict[str, list[tuple[float, float]]] = {"streaming": [], "reference": [], "batch": []}
        with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
            warm_up(args, master, Path(tmp) / "warm")
            for r in range(args.rounds):
                with BatchLog() as log:
                    wall, cpu, result = run_count(
                        trace,
                        args.window,
                        args.bound,
                        True,
                        master,
                        Path(tmp) / f"s{r}",
                        key_partitions=args.key_partitions,
                    )
                runs["streaming"].append((wall, cpu))
                times = [b[2] for b in log.batches]
                print(
                    f"  round {r}: streaming {n / wall:>9,.0f} el/s ({wall:.1f} s, CPU "
                    f"{cpu:.1f} s; {len(times)} batches, median {statistics.median(times):.2f} "
                    f"s, max {max(times):.2f} s; {load()})"
                )
                if r == 0:
                    lat, during = latencies(Path(tmp) / "s0", result, log)
                    hist = Counter(lat)
                    print(
                        f"  pane latency in micro-batches: {dict(sorted(hist.items()))} over "
                        f"{len(lat)} panes ({during} of them in windows the watermark passed "
                        f"before the last batch); max {max(lat)} (goal <= 1)"
                    )
                    streamed = Counter(
                        (p.key, p.start, p.value) for p in read_panes(Path(tmp) / "s0", "count")
                    )
                if args.reference:
                    wall, cpu, _ = run_count(
                        trace, args.window, args.bound, True, master, Path(tmp) / f"r{r}", False
                    )
                    runs["reference"].append((wall, cpu))
                    print(_rate(f"round {r}: reference", n, wall, cpu))
                if args.batch:
                    wall, cpu, _ = run_count(
                        trace, args.window, args.bound, False, master, Path(tmp) / f"b{r}"
                    )
                    runs["batch"].append((wall, cpu))
                    print(_rate(f"round {r}: batch", n, wall, cpu))
            for name, other in (("reference", "r0"), ("batch", "b0")):
                if runs[name]:
                    theirs = Counter(
                        (p.key, p.start, p.value) for p in read_panes(Path(tmp) / other, "count")
                    )
                    same = "identical" if theirs == streamed else "DIFFERENT"
                    print(f"  counts {same} to the {name} run's (a late element would differ)")
                    figures[f"count {n} counts vs {name}"] = same
        mine = _medians(runs["streaming"])
        print(_rate("streaming, median", n, *mine) + " (goal >= 100,000 el/s)")
        figures[f"count {n} streaming el/s"] = round(n / mine[0])
        figures[f"count {n} streaming cpu s"] = round(mine[1], 3)
        figures[f"count {n} max pane latency (batches)"] = max(lat)
        for name in ("reference", "batch"):
            if runs[name]:
                wall, cpu = _medians(runs[name])
                figures[f"count {n} {name} el/s"] = round(n / wall)
                figures[f"count {n} streaming/{name} throughput"] = round(wall / mine[0], 3)
                print(
                    _rate(f"{name}, median", n, wall, cpu)
                    + f": streaming is {wall / mine[0]:.2f}x its throughput, "
                    f"{cpu / mine[1]:.2f}x its CPU efficiency"
                )


def warm_up(args: argparse.Namespace, master: str, out: Path) -> None:
    """One short streaming run (two batches of ``--rate`` elements) before the measured
    rounds, left out of the medians: the session's first pipeline forks the Python
    workers and warms the JVM, which a sustained rate does not pay. Once per session."""
    if not args.warm_up or getattr(args, "warmed", False):
        return
    args.warmed = True
    trace = count_trace(2 * args.rate, args.keys, args.rate, args.bound, args.seed + 1)
    wall, cpu, _ = run_count(trace, args.window, args.bound, True, master, out)
    print(_rate("warm-up (left out)", 2 * args.rate, wall, cpu))


def _rate(name: str, n: int, wall: float, cpu: float) -> str:
    return (
        f"  {name:<20} {n / wall:>9,.0f} el/s, {n / cpu:>9,.0f} el per CPU s "
        f"({wall:.1f} s, CPU {cpu:.1f} s; {load()})"
    )


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


# ------------------------------------------------------------------ executor-side source


def shard_batch(shard: int, shards: int, batch: int, per_batch: int, keys: int, bound: int) -> Any:
    """Shard ``shard``'s elements of one-second batch ``batch`` (``per_batch`` over all
    shards): keys and event times (µs, whole ms, within ``bound`` before the batch's
    second, never before the watermark the source sent with the batch before)."""
    index = np.arange(shard, per_batch, shards, dtype=np.int64) + batch * per_batch
    arrival = batch * S + (index % per_batch) * S // per_batch
    event = arrival - (index * 7919) % max(1, bound // 1000) * 1000
    event = np.maximum(event, batch * S - bound)
    return (index * 31) % keys, event - event % 1000


class _Batches(RestrictionProvider):
    def __init__(self, batches: int) -> None:
        self.batches = batches

    def initial_restriction(self, element: Any) -> OffsetRange:
        return OffsetRange(0, self.batches)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element: Any, restriction: OffsetRange) -> int:
        return int(restriction.size())


def generated_source(batches: int, per_batch: int, keys: int, bound: int, shards: int) -> Any:
    """An unbounded splittable DoFn over shard numbers: each bundle claims the next
    one-second batch, emits the shard's elements of it (made in the task), sets its
    Manual estimator's watermark to the batch's second minus ``bound`` and
    checkpoints (``defer_remainder``): the source's data never passes the driver."""

    restrictions = _Batches(batches)
    manual = ManualWatermarkEstimator.default_provider()

    class Generate(beam.DoFn):
        def process(
            self,
            shard: int,
            tracker: Any = beam.DoFn.RestrictionParam(restrictions),  # noqa: B008
            estimator: Any = beam.DoFn.WatermarkEstimatorParam(manual),  # noqa: B008
        ) -> Any:
            batch = tracker.current_restriction().start
            if not tracker.try_claim(batch):
                return
            key, event = shard_batch(shard, shards, batch, per_batch, keys, bound)
            for k, micros in zip(key.tolist(), event.tolist(), strict=True):
                yield window_fns.TimestampedValue((k, 1), Timestamp(micros=micros))
            estimator.set_watermark(Timestamp(micros=(batch + 1) * S - bound))
            tracker.defer_remainder()

    return Generate()


def run_source(args: argparse.Namespace, n: int, streaming: bool, master: str, out: Path) -> Any:
    """The windowed count over :func:`generated_source` on PySparkRunner (streaming: a
    real clock, one batch per claimed second; batch: each shard read to its end): wall
    and CPU seconds, elements, and the path that ran the SDF's stage (``lean`` or Beam's
    bundle processor)."""
    per_batch = args.rate
    batches = -(-n // per_batch)
    options = PipelineOptions(
        streaming=streaming,
        spark_master=master,
        **({"key_partitions": args.key_partitions} if streaming and args.key_partitions else {}),
    )
    p = beam.Pipeline(runner=PySparkRunner(), options=options)
    fn = generated_source(batches, per_batch, args.keys, args.bound, args.shards)
    events = p | "shards" >> beam.Create(list(range(args.shards))) | "read" >> beam.ParDo(fn)
    windowed_count(events, args.window) | "write" >> WritePanes(out, "count")
    cpu0, t0 = tree_cpu(os.getpid()), time.perf_counter()
    result: Any = p.run()  # a PySparkPipelineResult (stage_paths)
    result.wait_until_finish()
    wall, cpu = time.perf_counter() - t0, tree_cpu(os.getpid()) - cpu0
    paths = {name: path for name, path in result.stage_paths.items() if "read/Process" in name}
    return wall, cpu, batches * per_batch, ", ".join(sorted(set(paths.values())))


def source_part(args: argparse.Namespace, master: str, figures: dict[str, Any]) -> None:
    for n in args.source_elements:
        print(
            f"\nexecutor-side source: {n:,} elements made in the tasks by an unbounded "
            f"splittable DoFn ({args.shards} shards, Manual estimator, real clock), "
            f"{args.rate:,} per one-second batch, the same count; medians of {args.rounds}"
        )
        runs: dict[str, list[tuple[float, float]]] = {"streaming": [], "batch": []}
        with tempfile.TemporaryDirectory(prefix="bench-source-") as tmp:
            warm_up(args, master, Path(tmp) / "warm")
            for r in range(args.rounds):
                for mode in ("streaming", "batch") if args.batch else ("streaming",):
                    out = Path(tmp) / f"{mode}{r}"
                    wall, cpu, total, path = run_source(args, n, mode == "streaming", master, out)
                    runs[mode].append((wall, cpu))
                    print(_rate(f"round {r}: {mode}", total, wall, cpu) + f"; SDF stage: {path}")
            if runs["batch"]:
                got, want = (
                    Counter((p.key, p.start, p.value) for p in read_panes(Path(tmp) / d, "count"))
                    for d in ("streaming0", "batch0")
                )
                same = "identical" if got == want else "DIFFERENT"
                print(f"  counts {same} to the batch run's ({sum(want.values()):,} panes)")
                figures[f"source {n} counts vs batch"] = same
        mine = _medians(runs["streaming"])
        print(_rate("streaming, median", total, *mine) + " (goal >= 100,000 el/s)")
        figures[f"source {n} streaming el/s"] = round(total / mine[0])
        if runs["batch"]:
            wall, cpu = _medians(runs["batch"])
            figures[f"source {n} batch el/s"] = round(total / wall)
            print(
                _rate("batch, median", total, wall, cpu)
                + f": streaming is {wall / mine[0]:.2f}x its throughput"
            )


# ------------------------------------------------------------------ chapter 3


def chapter3_part(args: argparse.Namespace, master: str, figures: dict[str, Any]) -> None:
    for n in args.ch3_events:
        traces = generate_chapter3_trace(n, seed=args.seed, users=args.ch3_users)
        traces = {k: coarsen_arrivals(t, args.ch3_step) for k, t in traces.items()}
        steps = np.unique(np.concatenate([t.arrival_time for t in traces.values()])).size
        print(
            f"\nchapter 3: {n:,} events, {args.ch3_users:,} users per platform, arrivals "
            f"rounded up to {args.ch3_step / S:g} s: {steps} micro-batches, {args.watermark}"
        )
        with tempfile.TemporaryDirectory(prefix="bench-ch3-") as tmp:
            path = Path(tmp) / "trace.parquet"
            write_chapter3_trace(traces, path)
            out = Path(tmp) / "out"
            argv = [
                "--input",
                str(path),
                "--output",
                str(out),
                "--watermark",
                args.watermark,
                "--runner",
                "spark_backend.PySparkRunner",
                "--streaming",
                "--test_stream_batches",
                "instant",
                "--spark_master",
                master,
            ]
            t0 = time.perf_counter()
            chapter3_cli.run(argv)
            wall = time.perf_counter() - t0
            print(f"  PySparkRunner streaming {wall:8.1f} s  ({n / wall:,.0f} ev/s; {load()})")
            c0, t0 = time.process_time(), time.perf_counter()
            expected = simulate_chapter3(traces, args.watermark, whole_ms=True)
            sim_wall, sim_cpu = time.perf_counter() - t0, time.process_time() - c0
            print(
                f"  theory.simulate         {sim_wall:8.1f} s  ({n / sim_wall:,.0f} ev/s, "
                f"{sim_cpu:.1f} s CPU; {load()})"
            )
            print(f"  PySparkRunner / simulate: {wall / sim_wall:.0f}x the time")
            figures[f"chapter3 {n} PySparkRunner s"] = round(wall, 2)
            figures[f"chapter3 {n} simulate s"] = round(sim_wall, 2)
            figures[f"chapter3 {n} PySparkRunner/simulate"] = round(wall / sim_wall, 1)
            for stage in GROUP_STAGES:
                got = Counter(read_panes(out, stage))
                want = Counter(expected.panes[stage])
                print(
                    f"  {stage:<24} {sum(want.values()):>7,} panes simulated, "
                    f"{sum(got.values()):>7,} written, {sum((want - got).values())} missing, "
                    f"{sum((got - want).values())} unexpected"
                )
                figures[f"chapter3 {n} {stage} missing/unexpected"] = (
                    f"{sum((want - got).values())}/{sum((got - want).values())}"
                )


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__ or "")
    parser.add_argument("--elements", type=counts, default=[1_000_000])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=100_000, help="elements per second")
    parser.add_argument("--window", type=parse_duration, default=parse_duration("2s"))
    parser.add_argument("--bound", type=parse_duration, default=parse_duration("1s"))
    parser.add_argument("--no-batch", dest="batch", action="store_false")
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="measure from the session's first pipeline (no warm-up run)",
    )
    parser.add_argument(
        "--key-partitions", type=int, default=None, help="--key_partitions (runner default)"
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also run the streaming count with fast_paths=False (all Beam bundles, no lifting)",
    )
    add_repeats(parser, 3, flag="--rounds")
    parser.add_argument("--ch3-events", type=counts, default=[1_000_000])
    parser.add_argument("--ch3-users", type=int, default=10_000)
    parser.add_argument("--ch3-step", type=parse_duration, default=parse_duration("60s"))
    parser.add_argument("--watermark", default="bounded:30s")
    parser.add_argument(
        "--master", default="local[2]", help="Spark master (ignored when a session runs)"
    )
    parser.add_argument("--shards", type=int, default=4, help="executor-side source shards")
    parser.add_argument(
        "--source-elements",
        type=counts,
        default=[300_000],
        help="elements of the executor-side source part",
    )
    parser.add_argument(
        "--skip", choices=["count", "source", "chapter3"], action="append", default=[]
    )
    add_seed(parser, 0)
    args = parser.parse_args(argv)
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, Any] = {}
    logging.getLogger("spark_backend.runner.streaming.driver").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    session = get_session(None if running else args.master, {}, app_name="beam-pyspark-runner")
    master = session.sparkContext.master
    print(f"Spark session ({master}) ready in {time.perf_counter() - t0:.1f} s ({load()})")
    args.master = master
    if "count" not in args.skip:
        count_part(args, master, figures)
    if "source" not in args.skip:
        source_part(args, master, figures)
    if "chapter3" not in args.skip:
        chapter3_part(args, master, figures)
    recorder.save(figures)


if __name__ == "__main__":
    main()
