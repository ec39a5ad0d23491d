"""Benchmark: the strategy comparison of ``watermarks analyze --engine spark`` (Spark's
:func:`spark_backend.report.comparison.compare`) against the local engine's on the same rows.

A seeded trace (:func:`theory.data.generators.generate_trace`, default 200,000 rows) is
persisted in Spark and counted before the clock starts; a 2,000-row comparison first
warms the JVM and the Python workers. Then, ``--repeats`` times, the default strategies
are compared on Spark (wall time and the CPU time of the whole process tree: driver, JVM,
Python workers) and on the local engine (:func:`spark_backend.cli.local.compare_local`, wall
and CPU of this process). Prints the medians, the Spark/local ratio, the load averages
and the seconds of each compare stage (the median per stage). The two tables must be
equal (checked: exit 1 if not).

To compare two revisions in one run (interleaved, each with its own code on
``PYTHONPATH``)::

    python bench/compare_revisions.py /work/wt-base /work/wt-new --rounds 3 \\
        --metric 'spark cpu=spark cpu s\\s+([\\d.]+)' \\
        --metric 'spark wall=spark wall s\\s+([\\d.]+)' \\
        -- python /path/to/bench/spark_compare.py --rows 200000 --repeats 3
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
if "PYTHONPATH" not in os.environ:  # compare_revisions sets it to the tree under test
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd
from bench_args import add_seed, bench_parser
from record import Recorder
from runner import tree_cpu

from spark_backend.report.comparison import DEFAULT_STRATEGIES, compare
from spark_backend.session.session import get_session, stop_session
from theory.data.generators import generate_trace
from theory.time import MINUTE

WINDOW = 2 * MINUTE


def trace_df(spark: object, n: int, seed: int) -> tuple[object, pd.DataFrame]:
    """A seeded trace of ``n`` rows as a persisted, counted Spark DataFrame (and pandas)."""
    t = generate_trace(n, seed=seed)
    pdf = pd.DataFrame(
        {
            "event_time": t.event_time,
            "arrival_time": t.arrival_time,
            "key": t.key.astype(str),
            "partition": t.partition,
        }
    )
    df = spark.createDataFrame(pdf).persist()  # type: ignore[attr-defined]
    df.count()
    return df, pdf


def spark_run(df: object) -> tuple[float, float, dict[str, float], dict[str, list[object]]]:
    """One Spark comparison: wall s, process-tree CPU s, seconds per stage, the table."""
    stages: dict[str, float] = {}
    last = [time.perf_counter()]

    def step(label: str) -> None:
        now = time.perf_counter()
        stages[label.split(" rows in ")[-1] if " rows in " in label else label] = now - last[0]
        last[0] = now

    c0, t0 = tree_cpu(os.getpid()), time.perf_counter()
    got = compare(df, DEFAULT_STRATEGIES, WINDOW, step=step)  # type: ignore[arg-type]
    wall, cpu = time.perf_counter() - t0, tree_cpu(os.getpid()) - c0
    return wall, cpu, stages, got.table


def local_run(pdf: pd.DataFrame) -> tuple[float, float, dict[str, list[object]] | None]:
    """One local comparison (when this revision has the local engine): wall, CPU, table."""
    try:
        from spark_backend.cli.local import compare_local
        from theory.data.trace import Trace
    except ImportError:
        return float("nan"), float("nan"), None
    trace = Trace(
        pdf["event_time"].to_numpy(), pdf["arrival_time"].to_numpy(), pdf["key"].to_numpy(),
        np.ones(len(pdf)), pdf["partition"].to_numpy(),
    )
    c0, t0 = time.process_time(), time.perf_counter()
    got = compare_local(trace, DEFAULT_STRATEGIES, WINDOW)
    return time.perf_counter() - t0, time.process_time() - c0, got.table


def same(a: dict[str, list[object]], b: dict[str, list[object]]) -> bool:
    """The two tables equal (floats to 1e-9 relative: the percentiles' summation order)."""
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = pd.Series(a[k]), pd.Series(b[k])
        if x.dtype.kind in "fc" or y.dtype.kind in "fc":
            if not np.allclose(x.astype(float), y.astype(float), rtol=1e-9, equal_nan=True):
                return False
        elif list(x) != list(y):
            return False
    return True


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--rows", type=float, default=200_000, help="trace rows")
    ap.add_argument("--repeats", type=int, default=3, help="timed comparisons per engine")
    add_seed(ap, 0)
    args = ap.parse_args()
    recorder = Recorder.from_args(__file__, args)
    n = int(args.rows)
    spark = get_session(conf={"spark.ui.enabled": "false", "spark.driver.memory": "2g"})
    load0 = os.getloadavg()
    try:
        warm, _ = trace_df(spark, 2_000, args.seed + 1)
        spark_run(warm)
        df, pdf = trace_df(spark, n, args.seed)
        walls: list[float] = []
        cpus: list[float] = []
        per_stage: dict[str, list[float]] = defaultdict(list)
        table: dict[str, list[object]] = {}
        for _ in range(args.repeats):
            wall, cpu, stages, table = spark_run(df)
            walls.append(wall)
            cpus.append(cpu)
            for label, secs in stages.items():
                per_stage[label].append(secs)
    finally:
        stop_session()
    local = [local_run(pdf) for _ in range(args.repeats)]
    load1 = os.getloadavg()
    ok = local[0][2] is None or same(table, local[0][2])
    lw = statistics.median([x[0] for x in local])
    lc = statistics.median([x[1] for x in local])
    sw, sc = statistics.median(walls), statistics.median(cpus)
    print(f"rows {n:,}, {args.repeats} repeats, load {load0[0]:.1f} -> {load1[0]:.1f}")
    print(f"spark wall s {sw:.2f}")
    print(f"spark cpu s {sc:.2f}")
    print(f"local wall s {lw:.2f}")
    print(f"local cpu s {lc:.2f}")
    print(f"spark/local wall {sw / lw:.1f}x, cpu {sc / lc:.1f}x; tables equal: {ok}")
    for label, times in per_stage.items():
        print(f"  stage {label:45s} {statistics.median(times):6.2f} s")
    figures: dict[str, float | bool] = {
        "rows": n, "spark wall s": round(sw, 3), "spark cpu s": round(sc, 3),
        "local wall s": round(lw, 3), "local cpu s": round(lc, 3),
        "spark/local wall": round(sw / lw, 2), "spark/local cpu": round(sc / lc, 2),
        "tables equal": ok,
    }
    for label, times in per_stage.items():
        figures[f"stage {label} s"] = round(statistics.median(times), 3)
    recorder.save(figures)
    if not ok:
        raise SystemExit("the engines' tables differ")


if __name__ == "__main__":
    main()
