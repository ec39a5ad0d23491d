"""Simulator throughput on the chapter-3 pipeline: the vectorised paths against the
incremental engine, in one run.

For each trace size it prints the median wall and CPU time over ``--repeats`` runs of
``simulate(chapter3.pipeline(...))`` on the vectorised paths (trace generation
excluded), events per second, the median of ``--slow-repeats`` runs with
``fast=False`` (every grouping stage event by event on the incremental engine) and the
ratio of the two (CPU medians: less sensitive to other processes than wall time), the
path each grouping stage took, and the peak memory per event (bytes traced by
``tracemalloc``, numpy's buffers included, in a separate untimed run of the vectorised
paths; the trace itself is allocated before). Sizes with no slow run print ``-``.
Usage::

    python bench/simulate_throughput.py --events 100000 1000000 --repeats 3 --slow-repeats 1
"""

from __future__ import annotations

import os
import tracemalloc
from functools import partial

from bench_args import add_repeats, bench_parser
from timing import median_time  # bench/timing.py (this script's folder)

from theory.pipeline import chapter3
from theory.pipeline.simulator import simulate


def peak_bytes(fn) -> int:
    """Peak bytes traced by ``tracemalloc`` while ``fn()`` runs."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    add_repeats(parser, 3, "vectorised runs per size")
    parser.add_argument(
        "--slow-repeats", type=int, default=1, help="incremental runs per size (0: none)"
    )
    parser.add_argument(
        "--slow-max", type=int, default=1_000_000, help="largest size run incrementally"
    )
    parser.add_argument("--watermark", default="perfect")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"medians; load average {load:.1f} on {os.cpu_count()} cores; watermark {args.watermark}")
    print(
        f"{'events':>10} {'fast s':>8} {'fast cpu':>9} {'events/s':>11} {'cpu ev/s':>11} "
        f"{'slow cpu':>9} {'ratio':>7} {'B/event':>8}  paths"
    )
    for n in args.events:
        run = partial(simulate, chapter3.pipeline(args.watermark), chapter3.traces(n, seed=0))
        wall, cpu, result = median_time(run, args.repeats)
        paths = ",".join(
            f"{name}:{s.path}" for name, s in result.stages.items() if s.kind == "GroupByWindow"
        )
        slow = ratio = "-"
        if args.slow_repeats and n <= args.slow_max:
            _, slow_cpu, _ = median_time(partial(run, fast=False), args.slow_repeats)
            slow, ratio = f"{slow_cpu:.2f}", f"{slow_cpu / cpu:.1f}x"
        per_event = peak_bytes(run) / n
        print(
            f"{n:>10,} {wall:>8.2f} {cpu:>9.2f} {n / wall:>11,.0f} {n / cpu:>11,.0f} "
            f"{slow:>9} {ratio:>7} {per_event:>8.0f}  {paths}",
            flush=True,
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
