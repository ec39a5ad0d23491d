"""Benchmark: what Beam's exception sampling costs PySparkRunner's bundles.

The bundle processor keeps the element a DoFn raised on, so a failing DoFn's line names
it (:func:`spark_backend.runner.stages.bundles.bundle_worker`). This script runs
:mod:`runner`'s workloads on one Spark session with the sampling on and off in turn
(``WATERMARKS_EXCEPTION_SAMPLING=0`` in the driver and in the Python workers, which
Spark starts afresh for a new environment), ``--rounds`` times each, and prints the
median wall and CPU (the process tree's) seconds of each and their ratios on / off
(above 1, the sampling costs that much), with the load average. Both settings must give
the same digest.

    .venv/bin/python bench/exception_sampling.py --sizes 1e6 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner
from apache_beam.internal.cloudpickle import cloudpickle
from record import Recorder, add_record
from runner import Run, run_once

from spark_backend.runner import PySparkRunner
from spark_backend.runner.stages.bundles import SAMPLING_ENV
from spark_backend.session.session import get_session


def _set_sampling(spark: Any, on: bool) -> None:
    """Sampling on or off in this process and in the Python workers of later jobs."""
    environment = spark.sparkContext.environment
    if on:
        os.environ.pop(SAMPLING_ENV, None)
        environment.pop(SAMPLING_ENV, None)
    else:
        os.environ[SAMPLING_ENV] = "0"
        environment[SAMPLING_ENV] = "0"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6", help="comma-separated element counts")
    parser.add_argument("--workloads", default="wordcount_file,windowed_combine")
    parser.add_argument("--rounds", type=int, default=5, help="runs per setting (medians)")
    add_record(parser)
    args = parser.parse_args(argv)
    recorder = Recorder.from_args(__file__, args)
    cloudpickle.register_pickle_by_value(runner)  # the workers cannot import bench/
    spark = get_session()
    figures: dict[str, Any] = {}
    for setting in (True, False):  # Python workers up in both environments
        _set_sampling(spark, setting)
        run_once("wordcount", 1000, PySparkRunner())
    for n in (int(float(s)) for s in args.sizes.split(",")):
        for name in args.workloads.split(","):
            runs: dict[bool, list[Run]] = {True: [], False: []}
            loads = []
            for i in range(args.rounds):
                for setting in (True, False) if i % 2 == 0 else (False, True):
                    _set_sampling(spark, setting)
                    runs[setting].append(run_once(name, n, PySparkRunner()))
                    loads.append(os.getloadavg()[0])
            digests = {r.digest for rs in runs.values() for r in rs}
            if len(digests) != 1:
                raise SystemExit(f"{name} n={n}: the digests differ: {sorted(digests)}")
            on = statistics.median(r.wall for r in runs[True])
            off = statistics.median(r.wall for r in runs[False])
            cpu_on = statistics.median(r.cpu for r in runs[True])
            cpu_off = statistics.median(r.cpu for r in runs[False])
            line = (
                f"{name:17s} n={n:,}: sampling on {on:.2f} s (CPU {cpu_on:.2f} s), off "
                f"{off:.2f} s (CPU {cpu_off:.2f} s), on/off {on / off:.3f} (CPU "
                f"{cpu_on / cpu_off:.3f}) (medians of {args.rounds}, interleaved; load "
                f"{min(loads):.1f}-{max(loads):.1f})"
            )
            print(line, flush=True)
            figures[f"{name} n={n} on s"] = round(on, 3)
            figures[f"{name} n={n} off s"] = round(off, 3)
            figures[f"{name} n={n} on/off"] = round(on / off, 4)
            figures[f"{name} n={n} CPU on/off"] = round(cpu_on / cpu_off, 4)
            figures[f"{name} n={n} load"] = [round(min(loads), 1), round(max(loads), 1)]
    _set_sampling(spark, True)
    recorder.save(figures)


if __name__ == "__main__":
    main()
