"""Simulator throughput on the chapter-3 pipeline.

Prints, for each trace size, the median wall time over ``--repeats`` runs of
``simulate(chapter3.pipeline(...))`` (trace generation excluded) and events per second,
with the per-stage split of the last run. Usage::

    python bench/simulate_throughput.py --events 1000000 --repeats 3
"""

from __future__ import annotations

import statistics
import time

from bench_args import add_repeats, bench_parser

from theory.pipeline import chapter3
from theory.pipeline.simulator import simulate


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    add_repeats(parser, 3)
    parser.add_argument("--watermark", default="perfect")
    args = parser.parse_args()
    print(
        f"{'events':>10} {'watermark':>12} {'median s':>9} {'events/s':>12}  per stage (last run)"
    )
    for n in args.events:
        traces = chapter3.traces(n, seed=0)
        pipe = chapter3.pipeline(args.watermark)
        times = []
        stage_times: dict[str, float] = {}
        for _ in range(args.repeats):
            marks = [time.perf_counter()]
            stage_times = {}

            def on_stage(
                name: str, marks: list[float] = marks, st: dict[str, float] = stage_times
            ) -> None:
                now = time.perf_counter()
                st[name] = now - marks[-1]
                marks.append(now)

            t0 = time.perf_counter()
            simulate(pipe, traces, seed=0, on_stage=on_stage)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        split = ", ".join(f"{k} {v:.2f}s" for k, v in stage_times.items())
        print(f"{n:>10,} {args.watermark:>12} {med:>9.2f} {n / med:>12,.0f}  {split}")


if __name__ == "__main__":
    main()
