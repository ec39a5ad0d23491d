"""``simulate --engine spark`` against the local simulator on the same chapter-3 trace:
time, peak memory, and equality of every stage's series, holds, late elements and panes.

Both engines run the trace made in ``--blocks`` blocks of users a source
(:func:`theory.pipeline.chapter3.block_traces`). For each size, Spark first
(:func:`spark_backend.simulate.simulation.simulate_keyed`, ``--partitions`` key partitions;
each task makes one block, the driver collects only the blocks' summaries for the source
watermarks and keeps only watermark and hold series; panes go to files), then the local
simulator in this process on the whole trace (unless ``--no-local``): each timed from
generating the traces to the result, with wall time, CPU (Spark: of the whole process
tree, driver, JVM and Python workers), events per second, and peak resident memory
sampled every 0.5 s (Spark: the process tree and the driver alone; local: this process),
then whether the two results are identical
(:func:`spark_backend.simulate.compare.keyed_differences`).

``--limit BYTES`` runs each engine under that address-space limit per process
(``RLIMIT_AS``; the local run in a fresh Python process, Spark's driver after its JVM
started and its Python workers through ``spark.executor.pyspark.memory``) and prints
whether each completed or ran out of memory. For the whole tree, the JVM included, start
the script under ``prlimit --as=BYTES`` with the same BYTES; the JVM then needs a small
heap and small reservations (3 GiB is enough with these)::

    JAVA_TOOL_OPTIONS="-Xmx1g -XX:CompressedClassSpaceSize=64m -XX:ReservedCodeCacheSize=64m \
      -XX:MaxMetaspaceSize=256m -Xss512k -XX:+UseSerialGC" MALLOC_ARENA_MAX=2 \
      nice prlimit --as=$((3*1024**3)) python bench/simulate_spark.py --events 2e7 \
      --partitions 32 --limit $((3*1024**3)) --conf spark.driver.memory=1g

**On the whole machine (session 11; 2 cores, 23.5 GiB of RAM, no swap; perfect watermark,
32 blocks a source, 180M events, the final code of that session):**

- **local** (a fresh interpreter, under ``prlimit --as`` of the machine's whole RAM,
  24,105 MiB, so its failure cannot take the machine down): **MemoryError after 176 s**.
  Uncapped it measured 1,023 MiB at 4M and 6,279 MiB at 40M events (146 MiB per 1M, about
  153 B/event), so 180M would need about 26.1 GiB, more than the machine has;
- **Spark** (uncapped, ``--partitions 100 --no-local --conf spark.driver.memory=8g --conf
  spark.memory.fraction=0.2``): **completed in 1,436.3 s wall, 1,168.7 s CPU of the tree**
  (125k events/s), peak tree PSS **17,639 MiB** (103 B/event; peaks by kind: driver 6,538
  MiB, JVM 12,726 MiB, workers 6,843 MiB), load 0.1 at the start. Stages: sources 2.6 and
  2.6 min, mobile sessions 4.7 min, console sessions 12.8 min, the global mean 2.4 min;
- an earlier attempt with ``spark.driver.memory=6g`` and the default memory fraction ran
  out of JVM heap in the global mean's stage, reading its one partition's 1.5 GiB part
  from Python while the run's broadcast blocks held the storage share of the heap
  (``unpersist`` keeps the driver's copies, which in local mode are the only ones);
- equality at 1M on the same code: identical, every series and pane (load 3.7).
- At 32M (100 partitions, 6g, load 1.1): 283.9 s wall, 489.3 s CPU, peak 6,133 MiB.

Measured (session 10, 2 cores, perfect watermark, 32 blocks a source). The 3 GiB
address-space limit per process stands in for a smaller machine; the real one has 23 GiB:

- **local alone under the limit** (a fresh interpreter each): 12M completed (20.4 s,
  peak RSS 2,034 MiB), 16M completed (21.8 s, 2,621 MiB); **17M, 18M, 20M and 24M raised
  MemoryError** (load 1-6);
- **Spark at 20M, whole tree under the limit** (the command above): **completed in 270.8
  s wall, 308.2 s CPU of the tree**, peak tree PSS 3,602 MiB (driver 816 MiB = 43
  B/event, JVM 1,823 MiB, workers 1,925 MiB), load 6.1 at the start, 3.2 at the end; the
  local run in the same script, under the same limit: MemoryError. (Before the summaries
  were cut to the points a spec needs and read one block at a time: 327.0 s, 311.4 s CPU,
  driver 1,222 MiB = 64 B/event, load 6.9-9.1.)
- **Spark at 30M** (48 partitions, same limit and command, the earlier summaries):
  **completed in 689.7 s wall, 401.8 s CPU**, peak tree PSS 5,305 MiB (driver 1,840 MiB
  = 64 B/event, JVM 2,184 MiB, workers 2,398 MiB), load 2.8-7.6; local under the same
  limit: MemoryError;
- **Spark at 40M** (64 partitions, same limit and command, the final code, ``--no-local``):
  **failed after 18 min**: the JVM's 1 GiB heap ran out (``OutOfMemoryError: Java heap
  space`` while a task's output was read from its Python worker to be persisted, in the
  first session stage); the driver stayed under 620 MiB resident (2.5 GB of address
  space). So under these limits Spark's ceiling lies between 30M and 40M, set by the
  JVM heap, not the driver; not investigated further;
- **equality at 1M** (no limit, 32 partitions, load 6.4-7.9, the final code): identical,
  every series and pane (Spark 53.4 s wall, 52.7 s CPU; local 1.4 s).

Session 10's projection for the whole machine (measured in session 11 above): local grows
about 154 B/event (147 MiB per 1M between 12M and 16M), so it would fail near 145-160M
events; Spark's tree grew about 113 B/event between 20M and 30M (its driver 43 B/event
now), so near 150M it would need about 17-18 GiB and take about 5x the 30M run's CPU
(about 2,000 s of CPU, 20-60 min wall on 2 cores by load): a narrow margin, not shown.

``--trace-file``: a user's trace file instead (``simulate --engine spark --trace``; a
generated trace of each size written to Parquet in a subprocess, 1M-row groups, keys
1000, simulated through that command's pipeline: perfect watermark, fixed 2-minute
windows). Spark runs it twice, read in blocks by the tasks
(:func:`spark_backend.traces.trace_input.read_blocks`, "after") and read whole by the driver
(:func:`spark_backend.traces.trace_input.read_local`, "before"); each line gives the driver's
own peak RSS (sampled) above its resident set before the run, and the ratio; then both
against the local simulator on the same file.

Measured ``--trace-file`` (this session, 8 partitions, ``spark.driver.memory=1g``, load
3.6-3.9 on 2 cores; one run each, blocks first):

- 4M rows (4 row groups, 4 blocks): the driver's peak **892 MiB read whole, 254 MiB in
  blocks** (758 and 130 MiB above its 134 and 124 MiB before: 199 and 34 B/row, 5.8x);
  both identical to local. Wall 10.3 s whole, 35.0 s in blocks (32.1 s CPU of the tree):
  the blocks' path is slower at this size (a check pass, then each block read, sorted,
  summarised and shuffled by key partition); not investigated;
- 1M rows (one block): 363 and 164 MiB (230 and 40 MiB above: 5.8x), both identical.

What the driver keeps in blocks is the source watermark (16 B per distinct arrival: this
trace's arrivals are nearly all distinct) and its summaries' points, one block at a time.

Usage::

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
                f"{keyed.partitions} partitions, rounds {rounds}",
                flush=True,
            )
            if args.no_local:
                continue
            if args.limit:
                fate = local_under_limit(limit, args.watermark, n, args.blocks)
                print(f"{n:>11,} local under the limit: {fate}", flush=True)
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
            diff = keyed_differences(local, keyed)
            print(f"{n:>11,} equal: {'identical' if not diff else 'DIFFERENT: ' + '; '.join(diff)}")
            del local
        finally:
            shutil.rmtree(out, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
