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
``sys`` is the median system CPU time of the vectorised runs (inside ``fast cpu``): the
kernel mapping and zeroing fresh memory, which glibc asks for each time a numpy
temporary over 32 MB is allocated (from about 4M elements per stage).
``--keep-freed-memory`` runs the simulator with its opt-in ``keep_freed_memory=True``
(:mod:`theory.memory`: glibc keeps freed memory during each run, and gives it back
after); without it, the default allocator. Usage::

    python bench/simulate_throughput.py --events 100000 1000000 --repeats 3 --slow-repeats 1
"""

from __future__ import annotations

import os
import resource
import statistics
import tracemalloc
from functools import partial

from bench_args import add_repeats, bench_parser
from record import Recorder
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


def system_seconds(fn, times: list[float]):
    """``fn()``, appending the system CPU time it took (s) to ``times``."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    out = fn()
    times.append(resource.getrusage(resource.RUSAGE_SELF).ru_stime - before)
    return out


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
    parser.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="simulate(keep_freed_memory=True): glibc keeps freed memory in each run",
    )
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float | str] = {}
    load = os.getloadavg()[0]
    allocator = "keep_freed_memory=True" if args.keep_freed_memory else "default"
    print(
        f"medians; load average {load:.1f} on {os.cpu_count()} cores; watermark "
        f"{args.watermark}; allocator: {allocator}"
    )
    print(
        f"{'events':>10} {'fast s':>8} {'fast cpu':>9} {'sys':>6} {'events/s':>11} "
        f"{'cpu ev/s':>11} {'slow cpu':>9} {'ratio':>7} {'B/event':>8}  paths"
    )
    for n in args.events:
        run = partial(
            simulate,
            chapter3.pipeline(args.watermark),
            chapter3.traces(n, seed=0),
            keep_freed_memory=args.keep_freed_memory,
        )
        sys_times: list[float] = []
        wall, cpu, result = median_time(partial(system_seconds, run, sys_times), args.repeats)
        paths = ",".join(
            f"{name}:{s.path}" for name, s in result.stages.items() if s.kind == "GroupByWindow"
        )
        slow = ratio = "-"
        if args.slow_repeats and n <= args.slow_max:
            _, slow_cpu, _ = median_time(partial(run, fast=False), args.slow_repeats)
            slow, ratio = f"{slow_cpu:.2f}", f"{slow_cpu / cpu:.1f}x"
        per_event = peak_bytes(run) / n
        print(
            f"{n:>10,} {wall:>8.2f} {cpu:>9.2f} {statistics.median(sys_times):>6.2f} "
            f"{n / wall:>11,.0f} {n / cpu:>11,.0f} "
            f"{slow:>9} {ratio:>7} {per_event:>8.0f}  {paths}",
            flush=True,
        )
        figures[f"{n} fast wall s"] = round(wall, 4)
        figures[f"{n} fast cpu s"] = round(cpu, 4)
        figures[f"{n} events/s"] = round(n / wall)
        if ratio != "-":
            figures[f"{n} slow cpu s"] = float(slow)
            figures[f"{n} slow/fast cpu"] = round(float(slow) / cpu, 2)
        figures[f"{n} B/event"] = round(per_event)
        figures[f"{n} paths"] = paths
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    recorder.save(figures)


if __name__ == "__main__":
    main()
