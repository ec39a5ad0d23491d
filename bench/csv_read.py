"""Benchmark: reading one large CSV trace with theory's reader and Spark's.

Writes a seeded trace of ``--rows`` rows as one CSV file, then reads it ``--repeats``
times with each reader and prints medians: theory's :func:`read_trace` (CPU seconds of
this process), Spark's :func:`read_trace_df` plus a count (wall seconds, and this
driver's CPU seconds: the part a driver-side scan costs) and the number of tasks of the
count. Run it on two revisions with ``bench/compare_revisions.py`` (give this file's
absolute path: each tree imports its own reader) to measure a change::

    python bench/compare_revisions.py /work/wt-base /work/wt-new --rounds 3 \\
        --metric 'theory cpu=theory read cpu\\s+([\\d.]+)' \\
        --metric 'spark wall=spark read wall\\s+([\\d.]+)' \\
        --metric 'spark driver cpu=spark read driver cpu\\s+([\\d.]+)' \\
        -- python /work/wt-new/bench/csv_read.py --rows 1000000

``--record`` appends the medians to ``bench/results/csv_read.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from record import Recorder, add_record

ROOT = Path(os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or Path(__file__).parents[1])
sys.path.insert(0, str(ROOT))

from theory.data.generators import generate_trace  # noqa: E402
from theory.data.io import read_trace, write_trace  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    add_record(parser)
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    with tempfile.TemporaryDirectory(prefix="csv-read-") as tmp:
        path = Path(tmp) / "trace.csv"
        write_trace(generate_trace(args.rows, seed=7), path)
        print(f"{args.rows:,} rows, {path.stat().st_size / 2**20:.1f} MiB, reader from {ROOT}")
        cpu = []
        for _ in range(args.repeats):
            t0 = time.process_time()
            trace, _ = read_trace(path)
            cpu.append(time.process_time() - t0)
        assert len(trace) == args.rows
        print(f"theory read cpu {statistics.median(cpu):.3f} s")

        from spark_backend.session.session import get_session
        from spark_backend.traces.read import read_trace_df

        spark = get_session(args.master, {"spark.ui.enabled": "false"})
        read_trace_df(spark, path)[0].count()  # warm-up: JVM classes, Python workers
        wall, driver = [], []
        tasks = 0
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            df, _ = read_trace_df(spark, path)
            n = df.count()
            wall.append(time.perf_counter() - t0)
            driver.append(time.process_time() - c0)
            tasks = df.rdd.getNumPartitions()
        assert n == args.rows
        print(f"spark read wall {statistics.median(wall):.3f} s")
        print(f"spark read driver cpu {statistics.median(driver):.3f} s")
        print(f"spark read tasks {tasks}")
        spark.stop()
    recorder.save(
        {
            "rows": args.rows,
            "theory read cpu s": round(statistics.median(cpu), 4),
            "spark read wall s": round(statistics.median(wall), 4),
            "spark read driver cpu s": round(statistics.median(driver), 4),
            "spark read tasks": tasks,
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
