"""Test-sized batch runs: PySparkRunner against FnApiRunner on 200 elements.

Warm (in this process, after one unreported run of each): a 200-element pipeline
(timestamped events, fixed windows, a sum per key, a GroupByKey, a side input,
``assert_that``) on each runner, interleaved, medians of wall time and of this
process's CPU time. Two forms: ``Create(reshuffle=False)``, whose stages all run in
the driver, and Beam's default ``Create``, whose Reshuffle keeps a stage on Spark.

New process: the driver-stages-only form run by ``python -c`` on each runner,
interleaved; wall time from the start of the interpreter to its exit, and the CPU time
of the process and its children (a JVM, if one were launched), medians.

The ratios compare peers of the same run (the load hits both). Load averages are
printed; ``--record`` appends the figures to ``bench/results/small_runs.json``.

    python bench/small_runs.py [--repeats 7] [--process-repeats 3] [--record]
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_args import add_repeats, bench_parser
from record import Recorder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_CHILD = """
import sys
import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
sys.path.insert(0, {bench!r})
from small_runs import build
from spark_backend.runner import PySparkRunner
runner = PySparkRunner() if sys.argv[1] == "spark" else FnApiRunner()
with beam.Pipeline(runner=runner) as p:
    build(p, reshuffle=False)
"""


def build(p: Any, reshuffle: bool) -> None:
    """The 200-element pipeline, checked by ``assert_that``."""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms import window

    rows = [(f"k{i % 5}", i, i * 7 % 200) for i in range(200)]
    events = (
        p
        | beam.Create(rows, reshuffle=reshuffle)
        | beam.MapTuple(lambda k, v, t: window.TimestampedValue((k, v), t))
        | beam.WindowInto(window.FixedWindows(60))
    )
    sums = events | beam.CombinePerKey(sum)
    total = sums | beam.Values() | beam.CombineGlobally(sum).without_defaults()
    sizes = events | beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, len(vs)))
    shares = sizes | beam.Map(lambda kv, t: (kv[0], kv[1], sum(t)), beam.pvalue.AsList(total))
    expected_sums: dict[tuple[str, int], int] = {}
    expected_sizes: dict[tuple[str, int], int] = {}
    for k, v, t in rows:
        expected_sums[(k, t // 60)] = expected_sums.get((k, t // 60), 0) + v
        expected_sizes[(k, t // 60)] = expected_sizes.get((k, t // 60), 0) + 1
    totals: dict[int, int] = {}  # the side input, per window
    for (_, w), v in expected_sums.items():
        totals[w] = totals.get(w, 0) + v
    assert_that(sums, equal_to([(k, s) for (k, _), s in expected_sums.items()]))
    assert_that(
        shares,
        equal_to([(k, n, totals[w]) for (k, w), n in expected_sizes.items()]),
        label="shares",
    )


def _run(runner: Any, reshuffle: bool) -> None:
    import apache_beam as beam

    with beam.Pipeline(runner=runner) as p:
        build(p, reshuffle)


def _warm(repeats: int, reshuffle: bool) -> dict[str, tuple[float, float]]:
    """Median (wall s, CPU s) per runner, interleaved, after one run each."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from spark_backend.runner import PySparkRunner

    runners = {"PySparkRunner": PySparkRunner, "FnApiRunner": FnApiRunner}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
    for make in runners.values():
        _run(make(), reshuffle)
    for _ in range(repeats):
        for name, make in runners.items():
            c0, t0 = time.process_time(), time.perf_counter()
            _run(make(), reshuffle)
            times[name].append((time.perf_counter() - t0, time.process_time() - c0))
    return {name: _medians(runs) for name, runs in times.items()}


def _new_process(repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall s, CPU s of the process tree) of the driver-only form in a new
    ``python`` per runner, interleaved."""
    code = _CHILD.format(bench=str(Path(__file__).resolve().parent))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    times: dict[str, list[tuple[float, float]]] = {"spark": [], "fnapi": []}
    for _ in range(repeats):
        for name in times:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", code, name], env=env, capture_output=True, text=True
            )
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                raise SystemExit(f"the {name} child failed:\n{done.stderr[-2000:]}")
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            times[name].append((wall, cpu))
    return {name: _medians(runs) for name, runs in times.items()}


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__)
    add_repeats(parser, 7)
    parser.add_argument("--process-repeats", type=int, default=3, help="new-process runs each")
    args = parser.parse_args(argv)
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, Any] = {}
    print(f"load average {os.getloadavg()[0]:.1f}; medians; CPU = this process's")
    print(f"{'form':<24}{'runner':<15}{'wall s':>8}{'CPU s':>8}")
    for form, reshuffle in (("driver stages only", False), ("Beam's Create", True)):
        warm = _warm(args.repeats, reshuffle)
        for name, (wall, cpu) in warm.items():
            print(f"{form:<24}{name:<15}{wall:>8.3f}{cpu:>8.3f}")
            figures[f"warm {form} {name} wall s"] = round(wall, 4)
            figures[f"warm {form} {name} cpu s"] = round(cpu, 4)
        for i, what in ((0, "wall"), (1, "cpu")):
            ratio = warm["PySparkRunner"][i] / warm["FnApiRunner"][i]
            figures[f"warm {form} {what} ratio"] = round(ratio, 3)
        print(
            f"{'':<24}{'ratio':<15}{figures[f'warm {form} wall ratio']:>8.2f}"
            f"{figures[f'warm {form} cpu ratio']:>8.2f}"
        )
    print(
        f"\nnew process, driver stages only (load average {os.getloadavg()[0]:.1f});"
        " CPU = the process tree's"
    )
    fresh = _new_process(args.process_repeats)
    for name, (wall, cpu) in fresh.items():
        print(f"{name:<39}{wall:>8.3f}{cpu:>8.3f}")
        figures[f"new process {name} wall s"] = round(wall, 3)
        figures[f"new process {name} cpu s"] = round(cpu, 3)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    recorder.save(figures)


if __name__ == "__main__":
    main()
