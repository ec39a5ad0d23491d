"""Benchmark: watermark curves and the lateness table, Spark local[2] against numpy.

For each trace size (default 1M and 10M events; add 50M with ``--sizes 1e6,1e7,5e7``) a
seeded trace is generated with :func:`spark_backend.traces.generate.generate_trace_df`, and both
paths compute the perfect, two bounded (heuristic) and one percentile curve plus the late
count of every strategy:

- **spark**: :func:`spark_backend.analytics.prepare` (the one shuffle) +
  :func:`~spark_backend.analytics.analyze` (the lateness table) + materialising the
  curves (a ``noop`` write);
- **numpy**: :func:`theory.watermarks.perfect.perfect_curve`,
  :func:`theory.watermarks.heuristic.bounded_out_of_orderness_curve`,
  :func:`theory.watermarks.percentile_sweep.percentile_curve` (source level) and late counts with
  :meth:`theory.series.StepSeries.before`, on the same rows collected through Arrow.

Trace generation and collection are not timed (each trace is persisted and counted
first); the Spark path runs once on a ``--warmup``-event trace first, not reported.
The Spark time is split into
``prepare`` (count, sample, the shuffle into buckets, the bucket summary), ``analyze``
(the Python pass, persisted, and the lateness table) and ``curves`` (materialising every
curve: a ``noop`` write). Both paths must give identical numbers: the curves are
compared exactly (or, above ``--compare-max`` events, the perfect and bounded ones by
exact checksums of every column) and the late counts exactly. Prints wall-time medians,
events/s, the Spark/numpy ratio per size and the load averages around each size;
``--record`` appends them to ``bench/results/spark_analytics.json``.

    .venv/bin/python bench/spark_analytics.py --sizes 1e6,1e7 --repeat 3
    .venv/bin/python bench/spark_analytics.py --sizes 1e6,1e7,5e7 --repeat 1 --compare-max 1e7
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_args import add_repeats, add_seed, bench_parser, counts
from record import Recorder

from spark_backend.analytics import analyze, prepare
from spark_backend.session.session import get_session, stop_session
from spark_backend.traces.generate import generate_trace_df
from theory.data.distributions import Delay
from theory.series import StepSeries
from theory.time import SECOND
from theory.watermarks.heuristic import bounded_out_of_orderness_curve
from theory.watermarks.percentile_sweep import percentile_curve
from theory.watermarks.perfect import perfect_curve

STRATEGIES = ("perfect", "bounded:2s", "bounded:30s", "percentile:0.99")
_MOD = 1_000_003


#: The numpy percentile reference (source level: active from event to arrival time).
PERCENTILE_REFERENCE = "theory.watermarks.percentile_sweep.percentile_curve"


def numpy_path(e: np.ndarray, a: np.ndarray) -> tuple[dict[str, StepSeries], dict[str, int]]:
    """The numpy reference: curves and late counts of :data:`STRATEGIES`."""
    perfect = perfect_curve(e, a)
    curves = {
        "perfect": perfect,
        "bounded:2s": bounded_out_of_orderness_curve(e, a, bound=2 * SECOND),
        "bounded:30s": bounded_out_of_orderness_curve(e, a, bound=30 * SECOND),
        "percentile:0.99": percentile_curve(e, np.minimum(e, a), a, 0.99, perfect),
    }
    late = {k: int(np.count_nonzero(e < c.before(a))) for k, c in curves.items()}
    return curves, late


def _same(x: StepSeries, y: StepSeries) -> bool:
    return bool(np.array_equal(x.times, y.times) and np.array_equal(x.values, y.values))


def checksum(times: np.ndarray, values: np.ndarray) -> tuple[int, int, int, int, int]:
    """(steps, min, max, sum of value mod p, sum of (time mod p) * (value mod 997))."""
    v = values.astype(np.int64)
    t = times.astype(np.int64)
    return (
        int(v.size),
        int(v.min()),
        int(v.max()),
        int(np.sum(v % _MOD)),
        int(np.sum((t % _MOD) * (v % 997))),
    )


def spark_checksums(curves_df: Any, names: list[str]) -> dict[str, tuple[int, ...]]:
    from pyspark.sql import functions as F

    aggs = []
    for i, n in enumerate(names):
        c = F.col("`" + n + "`")
        t = F.col("processing_time")
        aggs += [
            F.count(c).alias(f"n{i}"),
            F.min(c).alias(f"lo{i}"),
            F.max(c).alias(f"hi{i}"),
            F.sum(F.pmod(c, F.lit(_MOD))).alias(f"s{i}"),
            F.sum(F.pmod(t, F.lit(_MOD)) * F.pmod(c, F.lit(997))).alias(f"x{i}"),
        ]
    row = curves_df.agg(*aggs).first()
    return {
        n: tuple(int(row[f"{k}{i}"]) for k in ("n", "lo", "hi", "s", "x"))
        for i, n in enumerate(names)
    }


def _trace(spark: Any, n: int, seed: int) -> Any:
    """The bench trace, persisted and materialised (the count)."""
    from pyspark import StorageLevel

    df = generate_trace_df(
        spark,
        n,
        seed=seed,
        rate=2000.0,
        keys=1000,
        partitions=8,
        delay=Delay("lognorm", s=1.0, scale=1.0),
        stragglers=0.01,
        straggler_delay=Delay("pareto", b=1.5, scale=30.0),
        idle_partitions=(3,),
        idle_interval=(n // 4 * 500, n // 3 * 500),
    )
    df = df.select("event_time", "arrival_time", "key", "partition").persist(
        StorageLevel.MEMORY_AND_DISK
    )
    df.count()
    return df


def spark_path(df: Any) -> tuple[Any, list[float]]:
    """What a user runs: prepare, analyze, materialise the curves; and the phase times."""
    t0 = time.perf_counter()
    layout = prepare(df)
    t1 = time.perf_counter()
    analysis = analyze(layout, STRATEGIES)
    t2 = time.perf_counter()
    analysis.curves().write.format("noop").mode("overwrite").save()
    t3 = time.perf_counter()
    return analysis, [t3 - t0, t1 - t0, t2 - t1, t3 - t2]


def warm_up(spark: Any, n: int, seed: int) -> float:
    """The Spark path once on a small trace (JVM JIT, Python workers); its wall time."""
    df = _trace(spark, n, seed + 1)
    analysis, times = spark_path(df)
    analysis.unpersist()
    analysis.layout.unpersist()
    df.unpersist()
    return times[0]


def run_size(spark: Any, n: int, repeat: int, compare_max: int, seed: int) -> dict[str, Any]:
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    df = _trace(spark, n, seed)
    gen = time.perf_counter() - t0

    spark_times = []
    phases: list[list[float]] = []
    late_spark: dict[str, int] = {}
    analysis = None
    for _ in range(repeat):
        if analysis is not None:
            analysis.unpersist()
            analysis.layout.unpersist()
        gc.collect()
        analysis, took = spark_path(df)
        spark_times.append(took[0])
        phases.append(took[1:])
        late_spark = {
            str(k): int(v)
            for k, v in zip(analysis.late["strategy"], analysis.late["late"], strict=True)
        }
    assert analysis is not None
    pr, an, cu = (statistics.median(p[i] for p in phases) for i in range(3))
    print(  # at once: the numpy reference of a large trace takes long and much memory
        f"  [{n:,} events: spark {statistics.median(spark_times):.1f} s (prepare {pr:.1f} + "
        f"analyze {an:.1f} + curves {cu:.1f}), generation {gen:.1f} s]",
        flush=True,
    )

    table = df.select("event_time", "arrival_time").toArrow()
    e = table.column(0).to_numpy()
    a = table.column(1).to_numpy()
    del table
    big = n > compare_max
    plain = [k for k in STRATEGIES if not k.startswith("percentile")]
    spark_curves: dict[str, StepSeries] = {}
    sums: dict[str, tuple[int, ...]] = {}
    if big:
        # perfect and bounded: a value at every unique arrival time, checksummed in Spark;
        # percentile: Spark keeps the changes within each bucket, so its (compressed)
        # curve is collected and compared exactly. Then the JVM is stopped: the numpy
        # reference of 50M events needs ~17 GB, too much beside Spark's ~7 GB here
        sums = spark_checksums(analysis.curves(), plain)
        spark_curves = {k: analysis.curve(k) for k in STRATEGIES if k not in plain}
    else:
        spark_curves = {k: analysis.curve(k) for k in STRATEGIES}
    analysis.unpersist()
    analysis.layout.unpersist()
    df.unpersist()
    if big:
        stop_session()
    numpy_times = []
    curves: dict[str, StepSeries] = {}
    late_np: dict[str, int] = {}
    for _ in range(repeat):
        curves = {}
        gc.collect()
        t0 = time.perf_counter()
        curves, late_np = numpy_path(e, a)
        numpy_times.append(time.perf_counter() - t0)

    if not big:
        same_curves = all(_same(spark_curves[k], curves[k]) for k in STRATEGIES)
        how = "exact arrays"
    else:
        arrivals = np.unique(a)
        same_curves = True
        for k in STRATEGIES:
            if k in plain:
                same_curves &= sums[k] == checksum(arrivals, curves[k].at(arrivals))
            else:
                same_curves &= _same(spark_curves[k], curves[k])
        how = "checksums; percentile exact"
    same_late = {k: late_spark[k] == late_np[k] for k in STRATEGIES}
    sp, nu = statistics.median(spark_times), statistics.median(numpy_times)
    return {
        "events": n,
        "generate_s": gen,
        "spark_s": sp,
        "numpy_s": nu,
        "spark_runs": spark_times,
        "numpy_runs": numpy_times,
        "spark_eps": n / sp,
        "numpy_eps": n / nu,
        "ratio": sp / nu,
        "identical": same_curves and all(same_late.values()),
        "compared": how,
        "late": late_np,
        "steps": len(curves["perfect"]),
        "phases": [statistics.median(p[i] for p in phases) for i in range(3)],
        "load": (load_before, os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--sizes", type=counts, default=[10**6, 10**7], help="event counts: 1e6,1e7")
    add_repeats(p, 3, "runs per path (median reported)", flag="--repeat")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="12g")
    p.add_argument(
        "--compare-max",
        type=float,
        default=1e7,
        help="compare full curves up to this size, checksums above",
    )
    add_seed(p, 1)
    p.add_argument(
        "--warmup", type=float, default=2e5, help="events of the untimed warm-up run (0: none)"
    )
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings"
    )
    args = p.parse_args(argv)
    recorder = Recorder.from_args(__file__, args)
    sizes = args.sizes
    conf = {"spark.driver.memory": args.driver_memory}
    conf.update(kv.split("=", 1) for kv in args.conf)
    spark = get_session(args.master, conf)
    if args.warmup >= 1:
        w = warm_up(spark, int(args.warmup), args.seed)
        print(f"warm-up: {int(args.warmup):,} events in {w:.1f} s (not reported)")
    print(f"strategies: {', '.join(STRATEGIES)}; percentile reference: {PERCENTILE_REFERENCE}")
    print(f"master {args.master}, {args.repeat} run(s) per path, medians\n")
    header = (
        f"{'events':>11} {'spark s':>9} {'numpy s':>9} {'spark ev/s':>12} {'numpy ev/s':>12} "
        f"{'spark/numpy':>11}  identical"
    )
    print(header)
    print("-" * len(header))
    results = []
    for n in sizes:
        if spark is None:  # stopped after a size above --compare-max: start and warm again
            spark = get_session(args.master, conf)
            if args.warmup >= 1:
                warm_up(spark, int(args.warmup), args.seed)
        r = run_size(spark, n, args.repeat, int(args.compare_max), args.seed)
        if n > args.compare_max:
            spark = None
        results.append(r)
        print(
            f"{n:>11,} {r['spark_s']:>9.1f} {r['numpy_s']:>9.1f} {r['spark_eps']:>12,.0f} "
            f"{r['numpy_eps']:>12,.0f} {r['ratio']:>11.2f}  {r['identical']} ({r['compared']})",
            flush=True,
        )
    print()
    for r in results:
        runs = ", ".join(f"{x:.1f}" for x in r["spark_runs"])
        nruns = ", ".join(f"{x:.1f}" for x in r["numpy_runs"])
        pr, an, cu = r["phases"]
        (b1, b5, _), (a1, a5, _) = r["load"]
        print(
            f"{r['events']:>11,}: spark runs [{runs}] s (median prepare {pr:.1f} + analyze "
            f"{an:.1f} + curves {cu:.1f} s), numpy runs [{nruns}] s, generation "
            f"{r['generate_s']:.1f} s, {r['steps']:,} curve steps, late {r['late']}, load "
            f"average 1/5 min {b1:.1f}/{b5:.1f} before, {a1:.1f}/{a5:.1f} after"
        )
    if len(results) > 1:
        base = results[0]
        for r in results[1:]:
            scale = r["events"] / base["events"]
            print(
                f"{base['events']:,} -> {r['events']:,} events (x{scale:g}): spark time "
                f"x{r['spark_s'] / base['spark_s']:.1f}, throughput "
                f"x{r['spark_eps'] / base['spark_eps']:.2f}"
            )
    figures: dict[str, float | bool] = {}
    for r in results:
        n = r["events"]
        figures[f"{n} spark s"] = round(r["spark_s"], 3)
        figures[f"{n} numpy s"] = round(r["numpy_s"], 3)
        figures[f"{n} spark/numpy"] = round(r["ratio"], 3)
        figures[f"{n} identical"] = bool(r["identical"])
    recorder.save(figures)
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
