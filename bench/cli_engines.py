"""Benchmark: `watermarks analyze` wall time, `--engine auto` beside `--engine spark`.

For each size (default 2,000 and 500,000 rows) a seeded trace is generated with
:func:`theory.data.generators.generate_trace` and written as CSV to a temporary
directory. Then the command line runs as a user runs it, in a fresh process each time
(Python start-up, imports, engine start, reading, the comparison and the report are all
timed): ``python -m spark_backend.cli analyze TRACE --engine auto`` and the same with
``--engine spark``. Both must write the same ``strategies.csv`` (checked on the first
run of each size). Prints the medians of ``--repeats`` runs (``--spark-repeats`` for
Spark, the slow one), the spark/auto ratio, which engine auto chose, and the load
averages around each size (compare within a run only); ``--record`` appends them to
``bench/results/cli_engines.json``. Targets: auto within 10 s on 2,000 rows, 30 s on
500,000.

    .venv/bin/python bench/cli_engines.py --sizes 2000,500000 --repeats 3 --spark-repeats 1
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import Recorder, add_record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from theory.data.generators import generate_trace  # noqa: E402
from theory.data.io import write_trace  # noqa: E402

GOALS = {2_000: 10.0, 500_000: 30.0}


def run_cli(trace: Path, out: Path, engine: str) -> tuple[float, float, str]:
    """Wall seconds of one `analyze` in a fresh process, its CPU seconds (user + system,
    the process and its children: less sensitive to the load, though Spark's JVM
    threads count too), and its log (stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [
        sys.executable,
        "-m",
        "spark_backend.cli",
        "analyze",
        str(trace),
        "--engine",
        engine,
        "--out",
        str(out),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"analyze --engine {engine} failed:\n{done.stderr[-2000:]}")
    return wall, cpu, done.stderr


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,500000", help="trace sizes (rows), comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="runs of --engine auto per size")
    ap.add_argument("--spark-repeats", type=int, default=1, help="runs of --engine spark")
    ap.add_argument("--seed", type=int, default=0)
    add_record(ap)
    args = ap.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float | str] = {}
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    print(
        f"{'rows':>9} {'auto s':>8} {'cpu s':>6} {'chose':>6} {'spark s':>8} {'cpu s':>6} "
        f"{'spark/auto':>10} {'goal s':>7} {'met':>4} {'same':>5}  load before / after"
    )
    with tempfile.TemporaryDirectory(prefix="cli_engines.") as tmp:
        d = Path(tmp)
        for n in sizes:
            trace = d / f"trace_{n}.csv"
            write_trace(generate_trace(n, seed=args.seed), trace)
            before = load()
            auto, auto_cpu, chose, tables = [], [], "?", {}
            for i in range(args.repeats):
                wall, cpu, log = run_cli(trace, d / f"auto_{n}_{i}", "auto")
                auto.append(wall)
                auto_cpu.append(cpu)
                m = re.search(r"engine: (\w+)", log)
                chose = m.group(1) if m else "?"
            tables["auto"] = (d / f"auto_{n}_0" / "strategies.csv").read_text()
            spark, spark_cpu = [], []
            for i in range(args.spark_repeats):
                wall, cpu, _ = run_cli(trace, d / f"spark_{n}_{i}", "spark")
                spark.append(wall)
                spark_cpu.append(cpu)
            same = "-"
            if spark:
                same = str(tables["auto"] == (d / f"spark_{n}_0" / "strategies.csv").read_text())
            a = statistics.median(auto)
            s = statistics.median(spark) if spark else float("nan")
            ac = statistics.median(auto_cpu)
            sc = statistics.median(spark_cpu) if spark_cpu else float("nan")
            goal = GOALS.get(n)
            met = "-" if goal is None else ("yes" if a <= goal else "no")
            print(
                f"{n:>9,} {a:>8.1f} {ac:>6.1f} {chose:>6} {s:>8.1f} {sc:>6.1f} {s / a:>10.1f} "
                f"{goal if goal else float('nan'):>7.0f} {met:>4} {same:>5}  "
                f"{before} / {load()}",
                flush=True,
            )
            figures[f"{n} auto s"] = round(a, 3)
            figures[f"{n} auto chose"] = chose
            if spark:
                figures[f"{n} spark s"] = round(s, 3)
                figures[f"{n} spark/auto"] = round(s / a, 2)
                figures[f"{n} same tables"] = same
    recorder.save(figures)


if __name__ == "__main__":
    main()
