"""Where the CPU of ``analyze --engine spark`` and ``simulate --engine spark`` goes: the
driver, the JVM and the Python workers, per Spark stage, against the local engine.

For each ``--runs`` kind and each ``--events`` size, one run on a warm session (a small
run first, unprofiled): ``analyze`` is the strategy comparison as ``bench/spark_compare.py``
runs it (trace persisted and counted before the clock), ``simulate`` the chapter-3
pipeline as ``bench/simulate_spark.py`` runs it. A sampler thread reads ``/proc/<pid>/stat``
of the whole process tree every ``--interval`` s and splits the CPU into the driver (this
process, less the sampler's own thread), the JVM (``java``) and the Python workers (the
JVM's descendants), process by process (a worker's CPU after its last sample is missed).
Each interval's CPU goes to the Spark stages active at either end of it
(``statusTracker``; shared evenly when several were), or to "no stage" (driver-side work
between jobs). A table per run: stage (id, job description or name),
wall s, CPU s of the JVM, the workers and the driver, and Spark's own ``executorCpuTime``
(JVM task threads only), and the run's Spark jobs, stages and shuffles. Then the local
engine on the same input (CPU of this process), and per kind the totals, the fixed part
(intercept of the 1M..10M line) and the part per event (the largest size less the
smallest), Spark against local. Results are checked
equal to the local engine's (exit 1 if not). Usage::

    python bench/spark_cpu_profile.py --events 1e6,1e7 --runs analyze,simulate [--record]
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_args import bench_parser, counts
from record import Recorder

TICK = os.sysconf("SC_CLK_TCK")
KINDS = ("jvm", "workers", "driver")


def tree_ticks(root: int) -> dict[int, tuple[str, int]]:
    """The kind (driver: ``root``; jvm: ``java``; workers: the JVM's descendants) and the
    CPU ticks (utime + stime) of each process of ``root``'s tree."""
    stats: dict[int, tuple[int, str, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            head, tail = text.rsplit(")", 1)
            fields = tail.split()
            stats[int(entry)] = (int(fields[1]), head.split("(", 1)[1],
                                 int(fields[11]) + int(fields[12]))  # fmt: skip
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (parent, _, _) in stats.items():
        children[parent].append(pid)
    out = {root: ("driver", stats[root][2])} if root in stats else {}
    frontier = [(p, "driver") for p in children.get(root, ())]
    while frontier:
        pid, kind = frontier.pop()
        _, name, ticks = stats[pid]
        if kind == "driver" and name == "java":
            kind = "jvm"
        out[pid] = (kind, ticks)
        below = "workers" if kind != "driver" else "driver"
        frontier.extend((c, below) for c in children.get(pid, ()))
    return out


def cpu_delta(
    before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]]
) -> dict[str, float]:
    """CPU s by kind between two :func:`tree_ticks` (per process: a process that ended
    between them counts nothing more, one that began counts all its CPU)."""
    out = {k: 0.0 for k in KINDS}
    for pid, (kind, ticks) in after.items():
        out[kind] += (ticks - before.get(pid, (kind, 0))[1]) / TICK
    return out


@dataclass
class Profile:
    """One profiled run: CPU s by kind per set of active stages, their wall s, and the
    stages' names."""

    cpu: dict[int, dict[str, float]] = field(default_factory=dict)
    wall: dict[int, float] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    spark_cpu: dict[int, float] = field(default_factory=dict)
    total_wall: float = 0.0

    def totals(self) -> dict[str, float]:
        out = {k: 0.0 for k in KINDS}
        for row in self.cpu.values():
            for k in KINDS:
                out[k] += row[k]
        return out


class Sampler:
    """A thread sampling the process tree's CPU and the active Spark stages."""

    def __init__(self, sc: Any, interval: float) -> None:
        self.sc, self.interval = sc, interval
        self.profile = Profile()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._seen: set[int] = set()

    def _active(self) -> tuple[int, ...]:
        ids = tuple(sorted(self.sc.statusTracker().getActiveStageIds()))
        self._seen.update(ids)
        return ids

    def _run(self) -> None:
        own0 = time.thread_time()
        prev_t, prev_c, prev_s = time.perf_counter(), tree_ticks(os.getpid()), self._active()
        while True:
            stopping = self._stop.wait(self.interval)
            t, c, s = time.perf_counter(), tree_ticks(os.getpid()), self._active()
            own = time.thread_time()
            active = sorted(set(prev_s) | set(s)) or [-1]  # -1: no stage
            share = 1 / len(active)  # stages running together split the interval
            delta = cpu_delta(prev_c, c)
            for stage in active:
                row = self.profile.cpu.setdefault(stage, {k: 0.0 for k in KINDS})
                for k in KINDS:
                    row[k] += share * delta[k]
                row["driver"] -= share * (own - own0)  # the sampler's CPU is not the run's
                self.profile.wall[stage] = self.profile.wall.get(stage, 0.0) + share * (t - prev_t)
            prev_t, prev_c, prev_s, own0 = t, c, s, time.thread_time()
            if stopping:
                return

    def __enter__(self) -> Sampler:
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.profile.total_wall = time.perf_counter() - self._t0
        store = self.sc._jsc.sc().statusStore()
        for sid in sorted(self._seen):
            try:
                data = store.lastStageAttempt(sid)
                desc = data.description()
                text = desc.get() if desc.isDefined() else data.name()
                self.profile.spark_cpu[sid] = data.executorCpuTime() / 1e9
            except Exception:
                info = self.sc.statusTracker().getStageInfo(sid)
                text = info.name if info else "?"
            self.profile.names[sid] = " ".join(str(text).split())


def stage_label(stage: int, names: dict[int, str]) -> str:
    return "no stage (driver between jobs)" if stage < 0 else f"{stage} {names.get(stage, '?')}"


def print_profile(title: str, p: Profile, width: int = 70) -> None:
    print(f"\n{title}: {p.total_wall:.2f} s wall")
    print(f"  {'stage':{width}s} {'wall s':>7} {'jvm s':>7} {'workers s':>9} {'driver s':>8} "
          f"{'spark cpu s':>11}")  # fmt: skip
    for key in sorted(p.cpu):
        row = p.cpu[key]
        label = stage_label(key, p.names)[:width]
        spark = p.spark_cpu.get(key, 0.0)
        print(f"  {label:{width}s} {p.wall[key]:7.2f} {row['jvm']:7.2f} {row['workers']:9.2f} "
              f"{row['driver']:8.2f} {spark:11.2f}")  # fmt: skip
    t = p.totals()
    print(f"  {'total':{width}s} {p.total_wall:7.2f} {t['jvm']:7.2f} {t['workers']:9.2f} "
          f"{t['driver']:8.2f}   = {sum(t.values()):.2f} CPU s")  # fmt: skip


def local_cpu(fn: Any) -> tuple[float, float, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


class Analyze:
    """The strategy comparison, as ``bench/spark_compare.py`` runs it."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def prepare(self, n: int) -> None:
        from spark_compare import trace_df

        self.df, self.pdf = trace_df(self.spark, n, 0)

    def spark_run(self) -> Any:
        from spark_compare import WINDOW

        from spark_backend.report.comparison import DEFAULT_STRATEGIES, compare

        return compare(self.df, DEFAULT_STRATEGIES, WINDOW).table

    def local_run(self) -> Any:
        from spark_compare import local_run

        return local_run(self.pdf)[2]

    def same(self, spark: Any, local: Any) -> bool:
        from spark_compare import same

        return bool(same(spark, local))

    def release(self) -> None:
        self.df.unpersist()
        del self.df, self.pdf


class Simulate:
    """The chapter-3 simulation, as ``bench/simulate_spark.py`` runs it (32 blocks)."""

    def __init__(self, spark: Any) -> None:
        from theory.pipeline import chapter3

        self.spark, self.pipe = spark, chapter3.pipeline("perfect")

    def prepare(self, n: int) -> None:
        self.n = n
        self.out = tempfile.mkdtemp(prefix="spark-cpu-profile-")

    def spark_run(self) -> Any:
        from spark_backend.simulate.simulation import simulate_keyed
        from theory.pipeline import chapter3

        blocked = chapter3.block_traces(self.n, 0, blocks=32)
        return simulate_keyed(self.spark, self.pipe, blocked, self.out)

    def local_run(self) -> Any:
        from simulate_spark import run_local

        return run_local(self.pipe, self.n, 32)

    def same(self, spark: Any, local: Any) -> bool:
        from spark_backend.simulate.compare import keyed_differences

        return not keyed_differences(local, spark)

    def release(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--events", type=counts, default=[1_000_000, 10_000_000])
    parser.add_argument("--runs", default="analyze,simulate", help="analyze,simulate")
    parser.add_argument("--interval", type=float, default=0.2, help="sampling period, s")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    from spark_backend.session.session import get_session, stop_session

    try:
        from spark_backend.session.job_count import JobCount
    except ImportError:  # (a revision without it: no counts)
        JobCount = None  # type: ignore[assignment,misc]

    conf = dict(c.split("=", 1) for c in args.conf)
    conf.setdefault("spark.driver.memory", "2g")
    spark = get_session(conf=conf)
    sc = spark.sparkContext
    figures: dict[str, Any] = {}
    equal = True
    kinds = {"analyze": Analyze, "simulate": Simulate}
    try:
        for kind in args.runs.split(","):
            work = kinds[kind](spark)
            work.prepare(20_000)  # warm the JVM and the workers
            work.spark_run()
            work.release()
            totals: dict[int, tuple[float, float]] = {}
            for n in args.events:
                work.prepare(n)
                load = os.getloadavg()[0]
                with contextlib.ExitStack() as stack:
                    jobs = stack.enter_context(JobCount(sc, kind)) if JobCount else None
                    sampler = stack.enter_context(Sampler(sc, args.interval))
                    got = work.spark_run()
                p = sampler.profile
                print_profile(f"{kind} --engine spark, {n:,} events (load {load:.1f})", p)
                if jobs is not None:
                    tally = jobs.tally()
                    print(f"  {tally}")
                    figures[f"{kind} {n} spark jobs"] = tally.jobs
                    figures[f"{kind} {n} spark stages"] = tally.stages
                    figures[f"{kind} {n} spark shuffles"] = tally.shuffles
                t = p.totals()
                lw, lc, local = local_cpu(work.local_run)
                ok = work.same(got, local)
                equal &= ok
                del got, local
                work.release()
                print(f"  local engine: {lw:.2f} s wall, {lc:.2f} CPU s; spark/local CPU "
                      f"{sum(t.values()) / lc:.1f}x; results equal: {ok}")  # fmt: skip
                totals[n] = (sum(t.values()), lc)
                figures[f"{kind} {n} wall s"] = round(p.total_wall, 2)
                for k in KINDS:
                    figures[f"{kind} {n} cpu {k} s"] = round(t[k], 2)
                figures[f"{kind} {n} local cpu s"] = round(lc, 2)
                figures[f"{kind} {n} load"] = round(load, 2)
            summarize(kind, totals, figures)
    finally:
        stop_session()
    recorder.save(figures)
    if not equal:
        raise SystemExit("the engines' results differ")


def summarize(kind: str, totals: dict[int, tuple[float, float]], figures: dict[str, Any]) -> None:
    """Fixed part (the line's intercept) and per-event part (largest less smallest)."""
    if len(totals) < 2:
        return
    lo, hi = min(totals), max(totals)
    (s_lo, l_lo), (s_hi, l_hi) = totals[lo], totals[hi]
    s_per, l_per = (s_hi - s_lo) / (hi - lo), (l_hi - l_lo) / (hi - lo)
    s_fix, l_fix = s_lo - s_per * lo, l_lo - l_per * lo
    print(f"\n{kind}: spark {s_lo:.1f} / {s_hi:.1f} CPU s at {lo:,} / {hi:,} events, local "
          f"{l_lo:.1f} / {l_hi:.1f}; at {lo:,}: {s_lo / l_lo:.1f}x local")  # fmt: skip
    print(
        f"{kind}: fixed {s_fix:.1f} CPU s (local {l_fix:.1f}); per event "
        f"{s_per * 1e6:.2f} µs (local {l_per * 1e6:.2f} µs) = {s_per / l_per:.2f}x local"
    )
    figures[f"{kind} fixed cpu s"] = round(s_fix, 2)
    figures[f"{kind} per event cpu us"] = round(s_per * 1e6, 3)
    figures[f"{kind} local per event cpu us"] = round(l_per * 1e6, 3)
    figures[f"{kind} per event spark/local"] = round(s_per / l_per, 2)


if __name__ == "__main__":
    main()
