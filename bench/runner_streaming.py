"""Benchmark: PySparkRunner --streaming, against its batch mode and theory.simulate.

Three parts, in one run on one Spark session (``local[2]`` by default; the JVM start is
measured once and left out of every rate):

- **windowed count**: ``n`` elements (``--keys`` keys) arriving at ``--rate`` elements per
  second of processing time, replayed by a TestStream in 1-second micro-batches
  (arrival times rounded up to whole seconds, ``--test_stream_batches=instant``: one
  batch per second) with a bounded source watermark, then ``FixedWindows(--window)`` (2 s
  by default, so windows close while the run goes on) and ``CombinePerKey(count)`` under
  the default trigger. Printed per round: the streaming run's throughput (elements / wall
  s of ``run()``, which includes turning the TestStream into the pipeline proto; building
  the TestStream is left out) and CPU seconds of the whole process tree (driver, JVM,
  Python workers), batch times; once, each pane's latency in micro-batches: the batch
  that wrote it minus the first batch whose input watermark had reached its window's
  end (read per batch, ``result.watermarks(per_batch=True)``: batches sharing a
  test-clock time are kept apart), and how many panes' windows closed before the last
  batch. Beside it, the same count over the same elements on PySparkRunner in batch (a
  ``Create``) and, with ``--reference``, streaming with ``fast_paths=False`` (every stage
  on Beam's bundles, the combine not lifted); medians of ``--rounds`` and the outputs
  compared.
- **executor-side source**: the same count over ``--source-elements`` elements that
  an unbounded splittable DoFn makes in the tasks (``--shards`` shards, Beam's Manual
  watermark estimator, a real clock): each bundle claims the next second of data
  (``--rate`` elements), sets the watermark to that second minus ``--bound`` and
  checkpoints, so each micro-batch is one second of data and the driver never holds
  an element. Streaming runs the SDF's stage on the lean path
  (:mod:`spark_backend.runner.stages.lean.sdf`; each round prints the path that ran it).
  Beside it the batch runner reads the same source to its end (its SDF stage on Beam's
  bundle processor); medians of ``--rounds`` and the counts compared.
- **chapter 3**: ``python -m beam_pipelines.chapter3`` on ``--ch3-events`` trace events
  (``--ch3-users`` users per platform, arrivals rounded up to ``--ch3-step``) on
  PySparkRunner streaming, one micro-batch per arrival step, against ``theory.simulate``
  on the same trace: wall times, their ratio, and whether the panes are the same.

Before the first measured round, one short streaming run (two batches) warms the
session up (Python workers forked, JVM code compiled); it is printed and left out of the
medians (``--no-warm-up`` measures from the session's first pipeline).

Load averages are printed with every figure (the machine may be shared).

    nice .venv/bin/python bench/runner_streaming.py --elements 1e6 --ch3-events 1e6

Measured (first version, 2026-11-27, local[2] on the 2-core machine shared with six
other sessions, load 13-16 throughout; one run each, scaled down from the issue's sizes
for lack of time at that load):

    windowed count, 200k elements at 100k el/s (3 batches, 1,000 keys, 10 s windows):
      streaming 4,004 el/s (50.0 s; median batch 18.7 s), batch 5,815 el/s (34.4 s):
      streaming/batch 0.69x; counts identical; pane latency <= 1 micro-batch (2,000 panes)
    the same at load 2.5 (19:02 UTC): streaming 16,128 el/s (12.4 s; median batch 4.2 s),
      batch 22,665 el/s (8.8 s): 0.71x; latency <= 1 (every window closes in the last
      batch, which shares its time with the one before: the bound, not a measured 1)
    chapter 3, 20k events, 1,000 users per platform, 300 s steps (22 batches, default
    key partitions): PySparkRunner streaming 283.2 s (71 ev/s; batches 16-29 s),
      theory.simulate 0.02 s (936k ev/s): 13,258x the time; panes identical
      (1,005 + 997 mobile/console sessions, 42 means; none missing or unexpected)

Measured (second version, 2026-11-27 20:46-20:52 UTC, local[2], the same shared
machine at load 8-18; medians of 3 rounds, CPU = the process tree's):

    windowed count, 1M elements at 100k el/s (10 one-second batches + the last one,
    1,000 keys, 2 s windows, bounded:1s): streaming 46,975 el/s (21.3 s, 10.7 s CPU:
      93.7k el per CPU s; rounds 31.5k / 57.6k / 47.0k el/s, median batch 0.99-1.45 s);
      batch 14,968 el/s (66.8 s, 36.0 s CPU): streaming 3.14x its throughput, 3.37x its
      CPU efficiency; counts identical. Pane latency 0 micro-batches for all 6,000
      panes, 5,000 of them in windows the watermark closed before the last batch.

    the same, streaming only, at load 5-6 (21:06 UTC): 59,807 el/s median (16.7 s,
      10.5 s CPU: 95.1k el per CPU s; rounds 48.5k / 59.8k / 64.3k el/s, batches
      0.93-1.20 s median); latency 0 for all 6,000 panes again
    chapter 3, 1M events, 10,000 users per platform, 300 s steps (106 batches; load
      8-14): PySparkRunner streaming 532.4 s (1,878 ev/s, about 5 s a batch),
      theory.simulate 2.0 s: 262x the time; panes identical (49,960 + 50,023
      sessions, 128 means; none missing or unexpected)
    before/after, 200k elements (2 batches), main and this code back to back at load
      5.5, medians of 3: main 12.40 s wall / 13.77 s CPU, this 3.67 s / 4.74 s: 3.4x
      the throughput, 2.9x less CPU

Measured (third version, 2026-11-27 23:06-23:31 UTC, local[2], the same shared machine
at load 10-18 throughout; medians of 3 rounds, CPU = the process tree's):

    before/after, streaming only, main then this code back to back (load 14-18): main
      27,800 el/s (36.0 s, 13.3 s CPU; rounds 18.2k / 27.8k / 28.7k), this 58,091 el/s
      (17.2 s, 7.7 s CPU; rounds 25.4k / 65.4k / 58.1k): 2.09x the throughput, 1.73x
      less CPU
    windowed count, 1M elements, after a warm-up run (load 10-16): streaming 58,673
      el/s (17.0 s, 7.4 s CPU: 136k el per CPU s; rounds 51.0k / 68.8k / 58.7k, median
      batch 1.04-1.65 s); batch runner 6,100 el/s (163.9 s, 61.4 s CPU): streaming
      9.62x its throughput, 8.36x its CPU efficiency; counts identical; pane latency 0
      micro-batches for all 6,000 panes (5,000 closed before the last batch)
    executor-side source, 300k elements (3 one-second batches of 100k made in the tasks
      by the splittable DoFn, 4 shards, real clock; load 11-17): streaming 10,545 el/s
      (28.4 s, 9.5 s CPU; batches 7.7-11.9 s), batch runner 11,302 el/s (0.93x);
      counts identical. Here Beam's SDK is the cost: each element goes through the
      bundle processor's Python (WindowInto's assign, Timestamp arithmetic), about 30
      µs of CPU an element, and batch 0 runs the four shards in one task.

Measured (fourth version, 2026-11-28 01:44-02:24 UTC, local[2], the same shared machine
at load 28-40 throughout; medians of 3 rounds, CPU = the process tree's):

    executor-side source, 300k elements, main then this code back to back, twice (each
      its own process and Spark session, after its warm-up): main 2,464 and 3,289 el/s
      (121.8 s and 91.2 s; CPU 10.8 s both), this 18,296 and 19,922 el/s (16.4 s and
      15.1 s; CPU 4.3 s and 4.5 s): 6-7x the throughput, 2.4-2.5x less CPU; the SDF's
      stage ran lean in every round
    both parts in one run, 1M elements each (load 31-34): TestStream count 31,119 el/s
      (32.1 s, CPU 7.5 s; rounds 31.1k / 44.7k / 30.9k; pane latency 0 for all 6,000
      panes); executor-side source 42,321 el/s (23.6 s, CPU 6.8 s; rounds 38.2k / 44.7k
      / 42.3k): the source now runs at 1.36x the TestStream replay's throughput in the
      same run, on less CPU (the replay's quiet figure, session 8: 154k el/s)

    Profile before (main, cProfile inside the SDF task, 300k elements, load 14; cProfile
    inflates the totals): of the task's time, WindowInto's per-element assign 29%
    (FixedWindows.assign and its Timestamp arithmetic, Beam's argument insertion),
    Beam's cythonized operations (receive, pre-combine, encode) 25%, Timestamp objects
    13% (1.5M made), the user's DoFn 8.5%, the SDF output handler's observe_timestamp
    3%. The same one-bundle task without Spark (100k elements, the heap frozen as in
    the workers, load 21): the bundle processor 23.6 us of CPU an element, the lean
    path 2.7-3.1 us, most of it the user's DoFn making its TimestampedValues.

    the same, when the machine calmed down (02:31-02:37 UTC, load 6-10): main's source,
      300k, 15,303 el/s (19.6 s, CPU 8.7 s; rounds 18.4k / 15.1k / 15.3k); this code in
      one run: TestStream count 1M 98,697 el/s (10.1 s, CPU 6.7 s; rounds 98.7k / 94.6k
      / 107.2k, median batch 0.78-0.90 s; latency 0 for all 6,000 panes), source 300k
      67,556 el/s (4.4 s, CPU 2.1 s; rounds 56.5k / 67.6k / 67.6k): 4.4x main's
      throughput on 4.1x less CPU; source 1M 89,732 el/s (11.1 s, CPU 5.8 s; rounds
      89.7k / 73.4k / 92.6k): 0.91x the TestStream count in the same run, about 1.1 s a
      batch (two Spark jobs: the count's input watermark needs the source's hold first)

What made the difference in the fourth version: the SDF's stage runs without Beam's
bundle processor (:mod:`spark_backend.runner.stages.lean.sdf`): ``process`` is called with
Beam's own tracker and estimator wrappers, its outputs become columns (values, int64
µs) that the lean WindowInto and Precombine after it process with numpy, and its
residuals are encoded as the bundle processor encodes them. A quiet run was not
possible in the session (load 6-40), so the goal (>= 100k el/s) is not shown met on a
quiet machine: the best median is 89.7k el/s (1M, load 8-10), where the TestStream
count, 154k quiet in session 8, ran at 98.7k.
Batch 0's shards are not all in one task: Create's Reshuffle deals them over the key
partitions by random key (seen: 2 + 2 and 1 + 3 on local[2]); left as it is.

The same code on a quiet machine (session 9's lead, load 1.2-1.7, local[2], medians of
5; ``--elements 1e6 --skip chapter3 --skip source --no-batch --rounds 5`` and
``--skip count --skip chapter3 --source-elements 1e6 --rounds 5``): TestStream count
1M 216,702 el/s (4.6 s, CPU 5.0 s; rounds 186.8k / 216.7k / 235.4k / 212.4k / 233.7k;
latency 0 for all 6,000 panes); executor-side source 1M 178,535 el/s (5.6 s, CPU 6.6 s;
rounds 150.0k / 177.8k / 178.5k / 191.2k / 184.3k), the batch runner on the same source
62,063 el/s (2.88x less), counts identical to the batch run. So the goal (>= 100k el/s)
is met on a quiet machine by both sources; the paragraphs below are earlier versions.

The goal (>= 100k el/s) is not met at these loads by either source. The TestStream
count takes 7.4 s of CPU for 1M elements on two cores; it reached 100k el/s in one
round at load 10.5 (10.0 s, 22:47 UTC, rounds 42.7k / 86.2k / 100.3k), not as a median.

What made the difference in the third version: the TestStream's elements no longer
pass through the pipeline proto (:mod:`spark_backend.runner.streaming.elements`: taken
from the transform while the runner builds the proto, 1M elements no longer encoded,
parsed and decoded; each batch goes to its tasks as one pickled slice per partition),
and the keyed steps default to one partition per task slot (2 on local[2], was 4): a
batch runs 8 Python tasks instead of 16.

What made the difference since the first version (200k, one script timing main and this
branch back to back at load 16-25: main 52.7 s wall / 16.4 s CPU per run): combiner
lifting where the panes stay the same and lean stages (:mod:`.lifting`: the GroupByKey
gets one accumulator per key, window and task instead of every element), TestStream
elements decoded once straight into a lean batch (22.7 s / 10.7 s); then one Python
worker fewer per keyed partition (a step reads its last output whole, no filter),
sink stages not cached, and ``gc.freeze()`` in the worker daemon before it forks (a
trivial 8-task Spark job: 1.08 s -> 0.26 s of CPU, as forked workers no longer copy
the Beam heap page by page): 11.5 s / 4.5 s. The goal (>= 100k el/s) is not met at
this load; what is left per batch is Spark's fixed cost of about ten Python tasks and
the driver's serial work on the TestStream (the proto of 1M elements is built, copied
and read back before the first batch).
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


def count_part(args: argparse.Namespace, master: str) -> None:
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
        mine = _medians(runs["streaming"])
        print(_rate("streaming, median", n, *mine) + " (goal >= 100,000 el/s)")
        for name in ("reference", "batch"):
            if runs[name]:
                wall, cpu = _medians(runs[name])
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


def source_part(args: argparse.Namespace, master: str) -> None:
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
        mine = _medians(runs["streaming"])
        print(_rate("streaming, median", total, *mine) + " (goal >= 100,000 el/s)")
        if runs["batch"]:
            wall, cpu = _medians(runs["batch"])
            print(
                _rate("batch, median", total, wall, cpu)
                + f": streaming is {wall / mine[0]:.2f}x its throughput"
            )


# ------------------------------------------------------------------ chapter 3


def chapter3_part(args: argparse.Namespace, master: str) -> None:
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
            for stage in GROUP_STAGES:
                got = Counter(read_panes(out, stage))
                want = Counter(expected.panes[stage])
                print(
                    f"  {stage:<24} {sum(want.values()):>7,} panes simulated, "
                    f"{sum(got.values()):>7,} written, {sum((want - got).values())} missing, "
                    f"{sum((got - want).values())} unexpected"
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
    logging.getLogger("spark_backend.runner.streaming.driver").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    session = get_session(None if running else args.master, {}, app_name="beam-pyspark-runner")
    master = session.sparkContext.master
    print(f"Spark session ({master}) ready in {time.perf_counter() - t0:.1f} s ({load()})")
    args.master = master
    if "count" not in args.skip:
        count_part(args, master)
    if "source" not in args.skip:
        source_part(args, master)
    if "chapter3" not in args.skip:
        chapter3_part(args, master)


if __name__ == "__main__":
    main()
