"""Benchmark: PySparkRunner against FnApiRunner (and hand-written RDD code) in one run.

Four workloads, each over ``n`` seeded elements, three generated inside the pipeline (a
``Create`` of shard numbers, then a ``FlatMap`` that generates each shard), so that
neither runner pays for pickling a large ``Create``:

- **wordcount**: lines of words -> ``FlatMap(split)`` -> ``Count.PerElement`` (the
  user's generator, ``random.choice`` per word, is most of the work on both sides);
- **wordcount_file**: the same lines read from a text file with ``ReadFromText``, as
  Beam's wordcount example reads its input: little user code, so it measures the runner;
- **windowed_combine**: timestamped ``(key, value)`` -> ``FixedWindows(60 s)`` ->
  ``CombinePerKey(sum)`` (lifted: a partial combine before the shuffle);
- **session_gbk**: timestamped ``(key, value)`` -> ``Sessions(30 s)`` -> ``GroupByKey``
  -> the size of each group.

Every run ends with an order-independent digest of its output (64-bit hashes of each
element's value, timestamp and window); both runners' digests must be identical, else
the script fails. Prints elements/s per runner, the ratio PySparkRunner/FnApiRunner with
the JVM start excluded and included, and, for windowed_combine, a hand-translated RDD
version (``map`` + ``reduceByKey``) for scale. ``--cold N`` also times N runs of each
workload in a fresh Python process (:func:`cold_run`: session start, worker daemon and
pipeline), alternating the fast-start JVM options (:mod:`spark_backend.session.jvm_start`)
and Spark's plain ones. Load averages are printed; ``--record`` appends the figures to
``bench/results/runner.json`` (see ``bench/RESULTS.md``).

    .venv/bin/python bench/runner.py --sizes 1e5
    .venv/bin/python bench/runner.py --sizes 1e5,1e6 --fnapi-max 1e6
    .venv/bin/python bench/runner.py --sizes 1e6 --workloads windowed_combine --rounds 3 --cold 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # peak_memory, also when imported

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp
from peak_memory import PeakMemory, tree_cpu  # bench/peak_memory.py (this script's folder)
from record import Recorder, add_record

from spark_backend.runner import PySparkRunner
from spark_backend.session import jvm_start
from spark_backend.session.session import get_session

SHARDS = 16
WORDS = [f"w{i}" for i in range(500)]
SPAN_MICROS = 3_600 * 1_000_000


def shard_lines(spec: tuple[int, int]) -> list[str]:
    """Shard ``i`` of ``n`` words as lines of 10 words (seeded)."""
    shard, count = spec
    rng = random.Random(shard)
    words = [rng.choice(WORDS) for _ in range(count)]
    return [" ".join(words[i : i + 10]) for i in range(0, count, 10)]


def shard_events(spec: tuple[int, int]) -> list[Any]:
    """Shard ``i``: ``count`` timestamped (key, value) events over an hour (seeded)."""
    shard, count = spec
    rng = random.Random(1000 + shard)
    return [
        window.TimestampedValue(
            (f"k{rng.randrange(100)}", rng.randrange(1000)),
            Timestamp(micros=rng.randrange(SPAN_MICROS)),
        )
        for _ in range(count)
    ]


def shards(n: int) -> list[tuple[int, int]]:
    return [(i, n // SHARDS + (1 if i < n % SHARDS else 0)) for i in range(SHARDS)]


class Digest(beam.DoFn):
    """Each element's hash of (value, timestamp, window) as a 64-bit int."""

    def process(
        self, x: Any, ts: Any = beam.DoFn.TimestampParam, w: Any = beam.DoFn.WindowParam
    ) -> Any:
        value = (x[0], sorted(x[1])) if isinstance(x, tuple) and isinstance(x[1], list) else x
        text = repr((value, int(ts.micros), repr(w))).encode()
        yield int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def write_digest(path: str, total: int) -> None:
    Path(path).write_text(str(total % (1 << 64)))


def digest(pcoll: Any, path: str) -> None:
    (
        pcoll
        | "Digest" >> beam.ParDo(Digest())
        | "Rewindow" >> beam.WindowInto(window.GlobalWindows())
        | "Sum" >> beam.CombineGlobally(sum)
        | "Write" >> beam.Map(lambda total: write_digest(path, total))
    )


def wordcount(p: beam.Pipeline, n: int) -> Any:
    lines = p | beam.Create(shards(n)) | beam.FlatMap(shard_lines)
    return lines | beam.FlatMap(str.split) | beam.combiners.Count.PerElement()


def text_file(n: int) -> str:
    """A text file of the wordcount's ``n`` words (its lines, seeded), written once per
    size into the temporary folder and reused."""
    path = Path(tempfile.gettempdir()) / f"runner-bench-{os.getuid()}-words-{n}.txt"
    if not path.exists():
        fd, scratch = tempfile.mkstemp(prefix="runner-bench-", suffix=".txt")
        with os.fdopen(fd, "w") as out:
            for spec in shards(n):
                out.writelines(line + "\n" for line in shard_lines(spec))
        os.replace(scratch, path)
    return str(path)


def wordcount_file(p: beam.Pipeline, n: int) -> Any:
    """The wordcount read from a text file (``ReadFromText``), as a Beam author writes it
    (the shape of Beam's wordcount example)."""
    lines = p | beam.io.ReadFromText(text_file(n))
    return lines | beam.FlatMap(str.split) | beam.combiners.Count.PerElement()


def windowed_combine(p: beam.Pipeline, n: int) -> Any:
    events = p | beam.Create(shards(n)) | beam.FlatMap(shard_events)
    return events | beam.WindowInto(window.FixedWindows(60)) | beam.CombinePerKey(sum)


def session_gbk(p: beam.Pipeline, n: int) -> Any:
    events = p | beam.Create(shards(n)) | beam.FlatMap(shard_events)
    grouped = events | beam.WindowInto(window.Sessions(30)) | beam.GroupByKey()
    return grouped | beam.MapTuple(lambda k, vs: (k, len(list(vs))))


WORKLOADS: dict[str, Callable[[beam.Pipeline, int], Any]] = {
    "wordcount": wordcount,
    "windowed_combine": windowed_combine,
    "session_gbk": session_gbk,
    "wordcount_file": wordcount_file,
}
DEFAULT_WORKLOADS = "wordcount,wordcount_file,windowed_combine,session_gbk"


class Run(NamedTuple):
    """One run: wall seconds, CPU seconds of the process tree, digest, peak bytes (of
    the tree, and of its Python workers alone)."""

    wall: float
    cpu: float
    digest: str
    peak: int
    workers: int = 0


def run_once(workload: str, n: int, runner: Any, argv: tuple[str, ...] = ()) -> Run:
    """Run ``workload`` at ``n`` elements on ``runner`` (pipeline options ``argv``): wall
    and tree CPU seconds, its digest, and the peak resident bytes of this process tree
    meanwhile. (Python workers that Spark keeps between runs count their CPU from their
    start: the difference before/after is what this run used.)"""
    fd, path = tempfile.mkstemp(prefix="runner-bench-", suffix=".digest")
    os.close(fd)
    try:
        with PeakMemory() as memory:
            cpu0 = tree_cpu(os.getpid())
            start = time.perf_counter()
            with beam.Pipeline(runner=runner, options=PipelineOptions(list(argv))) as p:
                digest(WORKLOADS[workload](p, n), path)
            elapsed = time.perf_counter() - start
            cpu = tree_cpu(os.getpid()) - cpu0
        workers = memory.by_kind.get("workers", 0)
        return Run(elapsed, cpu, Path(path).read_text(), memory.peak, workers)
    finally:
        os.unlink(path)


#: The driver JVM's options before spark_backend.session.jvm_start (Spark's own defaults).
PLAIN_JVM: Final = ("--spark_conf", "spark.driver.extraJavaOptions=-Dwatermarks.plain.jvm=1")


def cold_run(workload: str, n: int, argv: tuple[str, ...] = ()) -> Run:
    """``workload`` on PySparkRunner in a new Python process, timed from just before the
    pipeline is built to its end: the session start (JVM, py4j gateway), the first
    job's Python worker daemon and the pipeline, as a Beam author's first run pays them
    (the imports, which FnApiRunner needs too, are not timed). ``argv``: pipeline
    options (``--spark_conf``)."""
    command = [sys.executable, __file__, "--cold-run", f"{workload}:{n}", *argv]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"cold run of {workload} failed:\n{done.stderr[-3000:]}")
    return Run(**json.loads(done.stdout.strip().splitlines()[-1]))


def _cold_child(spec: str, argv: list[str]) -> None:
    workload, n = spec.split(":")
    print(json.dumps(run_once(workload, int(n), PySparkRunner(), tuple(argv))._asdict()))


def ensure_archive() -> None:
    """Build the driver JVM's class-data archive (spark_backend.session.jvm_start) if missing, in
    a process of its own, so that no timed run pays for writing it. (Not when this
    process already runs a session, as under the tests: that session builds it.)"""
    from pyspark import SparkContext

    archive = jvm_start.current_archive()
    if archive is None or archive.is_file() or SparkContext._active_spark_context is not None:
        return
    print(f"building the JVM's class-data archive once: {archive}", flush=True)
    command = [sys.executable, "-m", "spark_backend.session"]
    subprocess.run(command, check=True, capture_output=True)


def oracle_digest(n: int) -> str:
    """The digest windowed_combine must give at ``n``, computed in plain Python from the
    same seeded draws (no runner): sums per (key, 60 s window), each output at its
    window's ``max_timestamp()`` in whole milliseconds (as a runner's coder leaves it).
    Checked against FnApiRunner wherever it runs, it checks PySparkRunner where
    FnApiRunner is too slow (10M)."""
    sums: dict[tuple[str, int], int] = {}
    for shard, count in shards(n):
        rng = random.Random(1000 + shard)
        for _ in range(count):
            key, value = f"k{rng.randrange(100)}", rng.randrange(1000)
            start = rng.randrange(SPAN_MICROS) // 60_000_000 * 60_000_000
            sums[key, start] = sums.get((key, start), 0) + value
    total = 0
    for (key, start), value in sums.items():
        w = window.IntervalWindow(Timestamp(micros=start), Timestamp(micros=start + 60_000_000))
        stamp = w.max_timestamp().micros // 1000 * 1000  # as it comes out of Beam's coder
        text = repr(((key, value), stamp, repr(w))).encode()
        total += int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
    return str(total % (1 << 64))


def session_oracle_digest(n: int, gap_micros: int = 30_000_000) -> str:
    """The digest session_gbk must give at ``n``, in plain Python and numpy from the
    same seeded draws: each event's window ``[t, t + gap)`` in whole milliseconds (as
    the GroupByKey's coder leaves it), merged per key while a window starts before the
    session's end (Beam's ``Sessions``), each session's size at its ``max_timestamp()``
    in whole milliseconds. Checked against FnApiRunner wherever it runs."""
    keys: list[str] = []
    starts: list[int] = []
    for shard, count in shards(n):
        rng = random.Random(1000 + shard)
        for _ in range(count):
            keys.append(f"k{rng.randrange(100)}")
            rng.randrange(1000)  # the value: not in the output
            starts.append(rng.randrange(SPAN_MICROS) // 1000 * 1000)
    names, codes = np.unique(np.array(keys), return_inverse=True)
    begin = np.array(starts, dtype=np.int64)
    order = np.lexsort((begin, codes))
    code, begin = codes[order], begin[order]
    new = np.concatenate([[True], (code[1:] != code[:-1]) | (begin[1:] >= begin[:-1] + gap_micros)])
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(code)) - 1
    total = 0
    for at, end_at in zip(first.tolist(), last.tolist(), strict=True):
        start, end = int(begin[at]), int(begin[end_at]) + gap_micros
        w = window.IntervalWindow(Timestamp(micros=start), Timestamp(micros=end))
        stamp = w.max_timestamp().micros // 1000 * 1000
        value = (str(names[code[at]]), end_at - at + 1)
        text = repr((value, stamp, repr(w))).encode()
        total += int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
    return str(total % (1 << 64))


ORACLES: dict[str, Callable[[int], str]] = {
    "windowed_combine": oracle_digest,
    "session_gbk": session_oracle_digest,
}


def rdd_windowed_combine(spark: Any, n: int) -> float:
    """Seconds for the hand-written RDD version of windowed_combine (its result is
    only counted: this is a scale reference, not a Beam runner)."""
    start = time.perf_counter()
    rdd = spark.sparkContext.parallelize(shards(n), SHARDS).flatMap(shard_events)
    window_micros = 60_000_000
    pairs = rdd.map(lambda e: ((e.value[0], e.timestamp.micros // window_micros), e.value[1]))
    pairs.reduceByKey(lambda a, b: a + b).count()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e5", help="comma-separated element counts")
    parser.add_argument("--fnapi-max", type=float, default=1e6, help="largest n FnApiRunner runs")
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help=", ".join(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=1, help="runs per runner (medians)")
    parser.add_argument(
        "--all-on-spark",
        action="store_true",
        help="also run PySparkRunner(driver_stages=False): every stage a Spark job",
    )
    parser.add_argument(
        "--no-rdd", action="store_true", help="skip the hand-written RDD reference (slow at 1e7)"
    )
    parser.add_argument(
        "--cold",
        type=int,
        default=0,
        help="also time this many runs each in a new process (JVM start included), with "
        "the session's JVM options and with Spark's plain ones",
    )
    parser.add_argument("--cold-run", help=argparse.SUPPRESS)  # WORKLOAD:N, in the child
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        help="KEY=VALUE for the Spark session, e.g. spark.executor.pyspark.memory=512m",
    )
    add_record(parser)
    args, rest = parser.parse_known_args(argv)
    if args.cold_run:
        _cold_child(args.cold_run, rest)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, Any] = {}

    ensure_archive()
    start = time.perf_counter()
    spark = get_session(conf=args.spark_conf)
    jvm = time.perf_counter() - start
    figures["session start s"] = round(jvm, 2)
    print(f"Spark session start (JVM): {jvm:.1f} s; master {spark.sparkContext.master}")
    print(f"Spark settings: {args.spark_conf or 'the defaults of spark_backend.session.session'}")
    print(f"medians of {args.rounds} round(s); CPU = the process tree's (driver, JVM, workers)")
    run_once("wordcount", 1000, PySparkRunner())  # Python workers up, not reported
    for n in sizes:
        print(f"\nn = {n:,}  (load average {os.getloadavg()[0]:.1f})")
        for name in args.workloads.split(","):
            report(
                name,
                n,
                jvm,
                n <= args.fnapi_max,
                spark,
                args.rounds,
                args.all_on_spark,
                not args.no_rdd,
                args.cold,
                tuple(a for c in args.spark_conf for a in ("--spark_conf", c)),
                figures,
            )
    recorder.save(figures)


def print_cold(
    name: str,
    n: int,
    rounds: int,
    digest: str,
    fn_wall: float | None,
    conf: tuple[str, ...],
    figures: dict[str, Any],
) -> None:
    """Cold runs (:func:`cold_run`), alternating the session's JVM options and Spark's
    plain ones; medians, and FnApiRunner's wall time over the cold run's."""
    runs: dict[str, list[Run]] = {"fast start": [], "plain JVM": []}
    for _ in range(rounds):
        for label, argv in (("fast start", conf), ("plain JVM", conf + PLAIN_JVM)):
            runs[label].append(cold_run(name, n, argv))
            if runs[label][-1].digest != digest:
                raise SystemExit(f"{name} at n={n}: a cold run's output differs ({label})")
    for label, done in runs.items():
        wall, cpu = _median(done, "wall"), _median(done, "cpu")
        ratio = f"  ratio incl. JVM start {fn_wall / wall:5.2f}x" if fn_wall else ""
        print(
            f"  {'':17s} cold, {label:10s} {n / wall:9,.0f} el/s ({wall:6.1f} s, CPU "
            f"{cpu:6.1f} s; walls {', '.join(f'{r.wall:.1f}' for r in done)}; load "
            f"{os.getloadavg()[0]:.1f}){ratio}  outputs identical",
            flush=True,
        )
        figures[f"{name} {n} cold {label} el/s"] = round(n / wall)
        if fn_wall:
            figures[f"{name} {n} cold {label} FnApiRunner/PySparkRunner wall"] = round(
                fn_wall / wall, 3
            )


def _median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


def report(
    name: str,
    n: int,
    jvm: float,
    with_fnapi: bool,
    spark: Any,
    rounds: int = 1,
    all_on_spark: bool = False,
    rdd: bool = True,
    cold: int = 0,
    conf: tuple[str, ...] = (),
    figures: dict[str, Any] | None = None,
) -> None:
    figures = {} if figures is None else figures
    load = os.getloadavg()[0]
    ours = [run_once(name, n, PySparkRunner()) for _ in range(max(1, rounds))]
    if len({r.digest for r in ours}) != 1:
        raise SystemExit(f"{name} at n={n}: PySparkRunner's runs differ")
    wall, cpu = _median(ours, "wall"), _median(ours, "cpu")
    if all_on_spark:
        spread = [run_once(name, n, PySparkRunner(driver_stages=False)) for _ in ours]
        if {r.digest for r in spread} != {ours[0].digest}:
            raise SystemExit(f"{name} at n={n}: outputs differ without driver stages")
        s_wall, s_cpu = _median(spread, "wall"), _median(spread, "cpu")
        print(
            f"  {name:17s} every stage on Spark {n / s_wall:9,.0f} el/s ({s_wall:6.1f} s, "
            f"CPU {s_cpu:6.1f} s): driver stages {s_wall / wall:4.2f}x wall, "
            f"{s_cpu / cpu:4.2f}x CPU; outputs identical",
            flush=True,
        )
        figures[f"{name} {n} every stage on Spark el/s"] = round(n / s_wall)
    line = (
        f"  {name:17s} PySparkRunner {n / wall:9,.0f} el/s ({wall:6.1f} s, CPU {cpu:6.1f} s, "
        f"peak {max(r.peak for r in ours) / 2**20:,.0f} MiB driver+JVM+workers, of which "
        f"workers {max(r.workers for r in ours) / 2**20:,.0f} MiB, load {load:.1f})"
    )
    figures[f"{name} {n} PySparkRunner el/s"] = round(n / wall)
    figures[f"{name} {n} PySparkRunner cpu s"] = round(cpu, 3)
    figures[f"{name} {n} peak MiB"] = round(max(r.peak for r in ours) / 2**20)
    if with_fnapi:
        theirs = [run_once(name, n, FnApiRunner()) for _ in range(max(1, rounds))]
        if {r.digest for r in theirs} != {ours[0].digest}:
            raise SystemExit(f"{name} at n={n}: outputs differ ({ours[0].digest} vs {theirs})")
        fn_wall, fn_cpu = _median(theirs, "wall"), _median(theirs, "cpu")
        line += (
            f"  FnApiRunner {n / fn_wall:9,.0f} el/s  ratio {fn_wall / wall:5.2f}x wall excl. "
            f"JVM, {fn_wall / (wall + jvm):5.2f}x incl., {fn_cpu / cpu:5.2f}x CPU  "
            "outputs identical"
        )
        figures[f"{name} {n} FnApiRunner el/s"] = round(n / fn_wall)
        figures[f"{name} {n} FnApiRunner/PySparkRunner wall excl. JVM"] = round(fn_wall / wall, 3)
        figures[f"{name} {n} FnApiRunner/PySparkRunner wall incl. JVM"] = round(
            fn_wall / (wall + jvm), 3
        )
    print(line, flush=True)
    if cold:
        print_cold(name, n, cold, ours[0].digest, fn_wall if with_fnapi else None, conf, figures)
    if name in ORACLES:
        if ORACLES[name](n) != ours[0].digest:
            raise SystemExit(f"{name} at n={n}: output differs from the oracle")
        print(f"  {'':17s} PySparkRunner's output = the plain-Python oracle's", flush=True)
    if name == "windowed_combine":
        if not rdd:
            return
        rdd_s = rdd_windowed_combine(spark, n)
        print(
            f"  {'(hand-written RDD)':17s} map+reduceByKey {n / rdd_s:9,.0f} el/s ({rdd_s:6.1f} s)"
        )
        figures[f"{name} {n} hand-written RDD el/s"] = round(n / rdd_s)


if __name__ == "__main__":
    main()
