"""``simulate --engine spark`` against the local simulator on the same chapter-3 trace:
time, peak memory, and equality of every stage's series, holds, late elements and panes.

Both engines run the trace made in ``--blocks`` blocks of users a source
(:func:`theory.pipeline.chapter3.block_traces`). For each size, Spark first
(:func:`spark_backend.simulate.simulation.simulate_keyed`, ``--partitions`` key
partitions; each task makes one block, the driver keeps only watermark and hold series;
panes go to files), then the local simulator in this process (unless ``--no-local``):
each timed from generating the traces to the result, with wall time, CPU (Spark: of the
process tree), events/s and peak resident memory sampled every 0.5 s, then whether the
two results are identical (:func:`spark_backend.simulate.compare.keyed_differences`).
``--trace-file`` reads the trace from a Parquet file instead of generating it.

``--limit BYTES`` runs each engine under that address-space limit per process
(``RLIMIT_AS``) and prints whether each completed or ran out of memory. For the whole
tree, the JVM included, start the script under ``prlimit --as=BYTES`` with a small JVM
heap (``JAVA_TOOL_OPTIONS="-Xmx1g ..."``). ``--record`` appends the figures to
``bench/results/simulate_spark.json``. Usage::

    nice python bench/simulate_spark.py --events 1e6 [--partitions 32] [--no-local]
    nice python bench/simulate_spark.py --trace-file --events 4e6 --conf spark.driver.memory=1g
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
import time
from functools import partial

from bench_args import bench_parser, counts
from peak_memory import PeakMemory, tree_cpu  # bench/peak_memory.py (this script's folder)
from record import Recorder

from spark_backend.session.session import get_session
from spark_backend.simulate.compare import keyed_differences
from spark_backend.simulate.simulation import simulate_keyed
from theory.pipeline import chapter3
from theory.pipeline.simulator import simulate


def timed(fn, tree=True):
    """(wall s, CPU s of this process tree or process, peak bytes of the tree, peak bytes
    of this process, a text of each kind's peak in the tree, result)."""
    with PeakMemory(tree) as memory, PeakMemory(False) as alone:
        c0 = tree_cpu(os.getpid()) if tree else time.process_time()
        t0 = time.perf_counter()
        out = fn()
        wall = time.perf_counter() - t0
        cpu = (tree_cpu(os.getpid()) if tree else time.process_time()) - c0
    return wall, cpu, memory.peak, alone.peak, memory.by_kind, out


def per_kind(kinds, n):
    """Each kind's peak as MiB and bytes per event (``n`` events)."""
    return ", ".join(f"{k} {v / 2**20:,.0f} MiB ({v / n:,.0f} B/event)" for k, v in kinds.items())


def whole_traces(n, blocks):
    """The chapter-3 traces of ``n`` events made whole in this process (the ones Spark's
    tasks make block by block)."""
    return {s: t.whole() for s, t in chapter3.block_traces(n, 0, blocks=blocks).items()}


def run_local(pipe, n, blocks):
    """The local simulation of ``n`` events, traces made inside."""
    return simulate(pipe, whole_traces(n, blocks))


_LOCAL_UNDER_LIMIT = """
import resource, sys, time
from theory.pipeline import chapter3
from theory.pipeline.simulator import simulate
n, watermark, blocks = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
try:
    traces = {s: t.whole() for s, t in chapter3.block_traces(n, 0, blocks=blocks).items()}
    simulate(chapter3.pipeline(watermark), traces)
except MemoryError:
    print("MemoryError"); sys.exit(3)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(f"completed in {time.perf_counter() - t0:.1f} s, peak RSS {peak / 2**20:,.0f} MiB")
"""


def local_under_limit(limit, watermark, n, blocks) -> str:
    """How the local simulation fares in a fresh Python process under ``limit`` bytes
    of address space (the limit a whole-tree ``prlimit --as`` gives every process)."""
    import subprocess
    import sys

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run([sys.executable, "-c", _LOCAL_UNDER_LIMIT, str(n), watermark,
                           str(blocks)],
                          preexec_fn=cap, capture_output=True, text=True)  # fmt: skip
    said = done.stdout.strip().splitlines()
    if said:
        return said[-1]
    tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
    return f"died (exit code {done.returncode}: {tail[0]})"


_WRITE_TRACE = """
import sys
import pyarrow.parquet as pq
from theory.data.generators import generate_trace
pq.write_table(generate_trace(int(sys.argv[1]), seed=0, keys=1000).to_arrow(), sys.argv[2])
"""


def file_runs(session, n, partitions, no_local):
    """``--trace-file`` at ``n`` rows: Spark reading the file in blocks, then whole."""
    import subprocess
    import sys
    from pathlib import Path

    from spark_backend.session.memory import rss
    from spark_backend.simulate.simulation import spark_context
    from spark_backend.traces.trace_input import read_blocks, read_local
    from theory.experiments.tradeoff import grouping_pipeline

    folder = Path(tempfile.mkdtemp(prefix="simulate-spark-file-"))
    try:
        path = folder / "trace.parquet"
        subprocess.run([sys.executable, "-c", _WRITE_TRACE, str(n), str(path)], check=True)
        pipe = grouping_pipeline("perfect", "fixed:2m")
        ways = {
            "after (blocks)": lambda: read_blocks(spark_context(session), path, "fail", None)[0],
            "before (whole)": lambda: read_local(path, "fail", None)[0],
        }
        results, peaks = {}, {}
        for i, (way, read) in enumerate(ways.items()):
            base = rss()
            run = partial(lambda r, o: simulate_keyed(session, pipe, {"in": r()}, o,
                                                      partitions=partitions),
                          read, folder / f"out-{i}")  # fmt: skip
            wall, cpu, _, peak, _, results[way] = timed(run)
            peaks[way] = max(0, peak - base)
            print(f"{n:>11,} file, spark {way}: {wall:8.1f} s wall, {cpu:7.1f} s CPU (tree), "
                  f"driver peak {peak / 2**20:,.0f} MiB, {peaks[way] / 2**20:,.0f} MiB above "
                  f"its {base / 2**20:,.0f} MiB before = {peaks[way] / n:,.1f} B/row",
                  flush=True)  # fmt: skip
        before, after = peaks["before (whole)"], peaks["after (blocks)"]
        print(f"{n:>11,} file, driver's added peak before/after: "
              f"{before / max(after, 1):,.1f}x", flush=True)  # fmt: skip
        if not no_local:
            local = simulate(pipe, {"in": read_local(path, "fail", None)[0]})
            for way, keyed in results.items():
                diff = "; ".join(keyed_differences(local, keyed))
                print(f"{n:>11,} file, {way} against local: {diff or 'identical'}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--events", type=counts, default=[1_000_000])
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--blocks", type=int, default=32, help="blocks of users a source")
    parser.add_argument("--watermark", default="perfect")
    parser.add_argument("--master", default=None)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-local", action="store_true", help="Spark only (no equality)")
    parser.add_argument("--limit", type=float, default=None, help="RLIMIT_AS per process")
    parser.add_argument("--trace-file", action="store_true",
                        help="a trace file, read in blocks and whole (docstring)")  # fmt: skip
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float | str] = {}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"watermark {args.watermark}")  # fmt: skip
    conf = list(args.conf)
    if args.limit:
        limit = int(args.limit)
        conf.append(f"spark.executor.pyspark.memory={limit // 2**20}m")
    session = get_session(args.master, conf)
    if args.limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # the driver, JVM started
    pipe = chapter3.pipeline(args.watermark)
    for n in args.events:
        if args.trace_file:
            file_runs(session, n, args.partitions, args.no_local)
            continue
        out = tempfile.mkdtemp(prefix="simulate-spark-")
        try:
            blocked = chapter3.block_traces(n, 0, blocks=args.blocks)
            run = partial(simulate_keyed, session, pipe, blocked, out,
                          partitions=args.partitions)  # fmt: skip
            wall, cpu, peak, _, kinds, keyed = timed(run)
            rounds = {s: r.rounds for s, r in keyed.stages.items() if r.rounds}
            print(
                f"{n:>11,} spark: {wall:8.1f} s wall, {cpu:7.1f} s CPU (process tree), "
                f"{n / wall:9,.0f} ev/s wall, {n / cpu:9,.0f} ev/s CPU, peak {peak / 2**20:,.0f} "
                f"MiB = {peak / n:,.0f} B/event (tree PSS; peaks by kind: {per_kind(kinds, n)}), "
                f"{keyed.partitions} partitions, rounds {rounds}; "
                f"{getattr(keyed, 'spark_jobs', None) or 'jobs not counted'}",
                flush=True,
            )
            figures[f"{n} spark wall s"] = round(wall, 2)
            figures[f"{n} spark cpu s"] = round(cpu, 2)
            figures[f"{n} spark peak MiB"] = round(peak / 2**20)
            tally = getattr(keyed, "spark_jobs", None)
            if tally is not None:
                figures[f"{n} spark jobs"] = tally.jobs
                figures[f"{n} spark stages"] = tally.stages
                figures[f"{n} spark shuffles"] = tally.shuffles
            if args.no_local:
                continue
            if args.limit:
                fate = local_under_limit(limit, args.watermark, n, args.blocks)
                print(f"{n:>11,} local under the limit: {fate}", flush=True)
                figures[f"{n} local under the limit"] = str(fate)
                continue
            wall, cpu, _, peak, _, local = timed(
                partial(run_local, pipe, n, args.blocks), tree=False
            )
            print(
                f"{n:>11,} local: {wall:8.1f} s wall, {cpu:7.1f} s CPU, {n / wall:9,.0f} ev/s "
                f"wall, {n / cpu:9,.0f} ev/s CPU, peak {peak / 2**20:,.0f} MiB = {peak / n:,.0f} "
                "B/event (this process)",
                flush=True,
            )
            figures[f"{n} local wall s"] = round(wall, 2)
            figures[f"{n} local cpu s"] = round(cpu, 2)
            figures[f"{n} local peak MiB"] = round(peak / 2**20)
            diff = keyed_differences(local, keyed)
            print(f"{n:>11,} equal: {'identical' if not diff else 'DIFFERENT: ' + '; '.join(diff)}")
            figures[f"{n} equal"] = "identical" if not diff else "DIFFERENT"
            del local
        finally:
            shutil.rmtree(out, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    recorder.save(figures)


if __name__ == "__main__":
    main()
