"""``simulate --engine spark`` against the local simulator on the same chapter-3 trace:
time, peak memory, and equality of every stage's series, holds and panes.

For each size it generates the chapter-3 traces (seed 0), simulates them in this
process (unless ``--no-local``) and with every grouping stage on Spark
(:class:`spark_backend.simulation.SparkGrouping`, ``--partitions`` key partitions), and
prints wall and CPU time of this process, the rounds each grouping stage took, and the
peak resident memory (sampled every 0.5 s; the trace is generated before) of the
process tree for Spark (driver, JVM and Python workers) and of this process for the
local run, then whether the two results are identical
(:func:`theory.pipeline.simulator.differences`). Usage::

    nice python bench/simulate_spark.py --events 1e6 [--partitions 4] [--no-local]
"""

from __future__ import annotations

import os
import time
from functools import partial

from bench_args import bench_parser, counts
from peak_memory import PeakMemory  # bench/peak_memory.py (this script's folder)

from spark_backend.session import get_session
from spark_backend.simulation import SparkGrouping
from theory.pipeline import chapter3
from theory.pipeline.simulator import differences, simulate


def timed(fn, tree=True):
    """(wall s, CPU s of this process, peak bytes of the process tree or of this process
    alone, result)."""
    with PeakMemory(tree) as memory:
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, memory.peak, out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--events", type=counts, default=[1_000_000])
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--watermark", default="perfect")
    parser.add_argument("--master", default=None)
    parser.add_argument("--no-local", action="store_true", help="Spark only (no equality)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"watermark {args.watermark}")  # fmt: skip
    session = get_session(args.master)
    pipe = chapter3.pipeline(args.watermark)
    for n in args.events:
        traces = chapter3.traces(n, seed=0)
        grouping = SparkGrouping(session, args.partitions)
        wall, cpu, peak, on_spark = timed(partial(simulate, pipe, traces, grouping=grouping))
        paths = ",".join(f"{s.path}" for s in on_spark.stages.values() if s.path)
        print(
            f"{n:>11,} spark: {wall:8.1f} s wall, {cpu:7.1f} s CPU (driver), {n / wall:9,.0f} "
            f"ev/s, peak {peak / 2**20:,.0f} MiB, {grouping.partitions} partitions, rounds "
            f"{grouping.rounds}, paths {paths}",
            flush=True,
        )
        if args.no_local:
            continue
        wall, cpu, peak, local = timed(partial(simulate, pipe, traces), tree=False)
        print(
            f"{n:>11,} local: {wall:8.1f} s wall, {cpu:7.1f} s CPU, {n / wall:9,.0f} ev/s, "
            f"peak {peak / 2**20:,.0f} MiB (this process alone)",
            flush=True,
        )
        diff = differences(local, on_spark)
        print(f"{n:>11,} equal: {'identical' if not diff else 'DIFFERENT: ' + '; '.join(diff)}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
