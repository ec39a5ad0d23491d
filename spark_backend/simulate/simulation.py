"""``simulate --engine spark`` with the elements on the executors: a pipeline simulated
stage by stage on key partitions, the driver holding only watermark and hold series.
All times are µs.

:func:`simulate_keyed` gives the local simulator's result
(:func:`theory.pipeline.simulator.simulate`;
:func:`spark_backend.simulate.compare.keyed_differences` checks every series and pane):

- **Sources.** A :class:`~theory.data.blocks.BlockedTrace` (``chapter3.block_traces``,
  ``simulate --blocks``) is made on the executors: each task makes one block and splits
  its rows by key partition (:func:`spark_backend.simulate.parts.key_partition`; kept on
  disk, then gathered by partition in the whole trace's order), and the driver collects
  only the blocks' summaries, from which it computes the source watermark exactly
  (:mod:`spark_backend.simulate.sources`: perfect, oracle, bounded, ingress; for the other
  specs, which need every row, the driver makes the whole trace). So the driver holds no
  event, only the series. A user's trace file is such a trace too
  (:func:`spark_backend.traces.trace_input.read_blocks`: a task reads one block, Parquet row
  groups or a CSV file, after a first pass of per-block checks). Any other trace (a
  :class:`~theory.data.trace.Trace`, or a callable making one) the driver reads or makes
  one at a time, computes its source watermark, writes the rows split by key partition
  to Parquet under the output directory, and drops them; each task reads its
  partition's file.
- **Streams** stay on the executors as an RDD of ``(partition, Part)``, persisted
  DISK_ONLY (in the block manager's files, not the JVM heap). A part is one Spark record,
  so it must stay under 2 GiB (:data:`~spark_backend.simulate.parts.RECORD_LIMIT`; past it
  the task stops with a ValueError naming the stage and partition). A stage of several inputs,
  or one that re-keys everything to one key, gathers the parts by target partition (a
  shuffle).
- **Element-wise stages** run per partition with the input watermark broadcast (a
  monotone one with only its changes); each partition reads it at its own arrivals and
  sends back its counts and in-flight holds (the driver makes the output watermark).
- **Grouping stages** run each partition over its own instants of the stage's grid
  (:mod:`spark_backend.simulate.grid`: its arrivals and the watermark steps that can fire
  its windows; the input watermark and the keys' ranks broadcast), in rounds: each
  partition runs under the minimum of the other partitions' state holds from the last
  round, and the rounds stop when those settle (:func:`spark_backend.simulate.parts.settle`,
  as :func:`theory.windowing.partitioned.run_partitioned`). Holds travel as their changes
  only (step series over µs) and are reduced by minimum on the driver. Panes are
  ordered, combined and written to Parquet by the tasks; the driver never collects them.
- **Outputs** in ``out``: ``panes/STAGE/part-P.parquet`` (the
  :class:`~theory.pipeline.simulator.PaneTable` columns plus ``key_rank``) and
  ``late/STAGE/part-P.parquet`` (late elements' ``arrival`` and ``timestamp``). The
  caller makes ``out`` atomic (the CLI writes into
  :func:`spark_backend.cli.atomic.atomic_directory`).

Sized by ``bench/simulate_spark.py`` (figures in ``bench/RESULTS.md``): it completes
traces whose whole-trace local simulation runs out of memory, on the same machine and
under the same address-space limit per process.

Supported: instant processing on every stage (other latency models draw one random stream
over a stage's whole input, which key partitions cannot share); anything else is refused
with ValueError naming the stage before any Spark work. Spark Connect has no RDDs.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spark_backend.session.job_count import JobCount, JobTally
from spark_backend.simulate.parts import (
    NO_STEPS,
    ElementStats,
    OthersMin,
    Part,
    bounded,
    elementwise,
    first_places,
    group_outputs,
    group_round,
    hold_changes,
    key_partition,
    merge,
    settle,
    split,
)
from spark_backend.simulate.sources import SUMMARISED, block_rows, source_watermark
from theory.columns import check_count
from theory.data.blocks import BlockedTrace
from theory.data.trace import Trace
from theory.pipeline.simulator import (
    BUFFER_HOLD,
    PaneTable,
    SimulationResult,
    check_traces,
    source_input,
)
from theory.pipeline.stages import GroupByWindow, Pipeline, Source
from theory.series import StepSeries, pointwise_min, union_times
from theory.watermarks.spec import make_source_watermark
from theory.windowing.engine import STATE_HOLD

__all__ = [
    "KeyedSimulation",
    "KeyedStage",
    "PaneFiles",
    "check_keyed",
    "simulate_keyed",
    "spark_context",
]

LOG = logging.getLogger("watermarks")

#: A blocked source's summaries come to the driver in this many jobs at most, each
#: making its share of the blocks on every core.
SUMMARY_JOBS = 4

#: A source's trace, or how to make it (called once, when the source's stage runs), or
#: a trace made block by block on the executors.
TraceInput = Trace | Callable[[], Trace] | BlockedTrace


@dataclass(frozen=True)
class PaneFiles:
    """A grouping stage's panes on disk (``count`` of them, in ``directory``'s
    part-P.parquet files); read them with ``pyarrow.parquet.read_table(directory)``."""

    directory: Path
    count: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class KeyedStage:
    """One stage's series (µs) and counts, as
    :class:`~theory.pipeline.simulator.StageResult` has them; panes and late elements are
    in files (:attr:`panes`, :attr:`late_files`)."""

    name: str
    kind: str
    input_watermark: StepSeries
    output_watermark: StepSeries
    holds: dict[str, StepSeries]
    processing_hold: StepSeries
    arrivals: int
    late_count: int
    late_files: Path
    dropped: dict[str, int] = field(default_factory=dict)
    late_grouped: int = 0
    panes: PaneFiles | None = None
    path: str = ""
    latencies: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    rounds: int = 0
    #: The most instants a partition's grouping ran over (its own grid; 0: not grouping).
    largest_grid: int = 0

    @property
    def late_fraction(self) -> float:
        return self.late_count / self.arrivals if self.arrivals else 0.0


@dataclass(frozen=True)
class KeyedSimulation(SimulationResult):
    """Every stage's :class:`KeyedStage` (in ``stages``: their series are a
    :class:`~theory.pipeline.simulator.StageResult`'s, their panes and late elements are
    files) and the grid of all watermark changes (µs)."""

    partitions: int = 1
    #: The Spark jobs, stages and shuffles the simulation ran.
    spark_jobs: JobTally | None = None

    def window_latencies(self, stage: str) -> np.ndarray:
        """Fire time minus window end (µs) of each window's first pane at ``stage``."""
        found: Any = self.stages[self.pipeline.graph.check(stage)]  # (a KeyedStage)
        return np.asarray(found.latencies)


def check_keyed(pipeline: Pipeline, traces: Mapping[str, object]) -> None:
    """The checks :func:`simulate_keyed` makes before any work: one trace per source
    (only the names of ``traces`` are read) and instant processing on every stage."""
    check_traces(pipeline, traces)  # type: ignore[arg-type]
    for name in pipeline.graph.order:
        if not pipeline.stage(name).processing.is_instant:
            raise ValueError(
                f"stage {name!r}: simulate --engine spark needs instant processing (latency "
                "0, no stalls); run this pipeline with --engine local"
            )


def spark_context(session: Any) -> Any:
    """The classic session's SparkContext (ValueError for Spark Connect: no RDDs)."""
    sc = getattr(session, "sparkContext", None)
    if sc is None:
        raise ValueError(
            "simulate --engine spark needs a classic Spark session (RDDs); Spark "
            "Connect has none: unset SPARK_REMOTE or use --master local[*]"
        )
    return sc


def simulate_keyed(
    session: Any,
    pipeline: Pipeline,
    traces: Mapping[str, TraceInput],
    out: str | Path,
    *,
    partitions: int | None = None,
    fast: bool = True,
    on_stage: Callable[[str], None] | None = None,
    max_rounds: int = 64,
) -> KeyedSimulation:
    """Simulate ``pipeline`` on Spark key partitions (see the module docstring); panes
    and late elements are written under ``out`` (a directory, made if missing).
    ``on_stage(name)`` is called after each stage."""
    check_keyed(pipeline, traces)
    sc = spark_context(session)
    n = check_count(sc.defaultParallelism if partitions is None else partitions,
                    "partitions", minimum=1)  # fmt: skip
    check_count(max_rounds, "max_rounds", minimum=1)
    out = Path(out)
    with JobCount(sc, "simulate") as jobs:
        run = _Run(sc, n, out, fast, max_rounds, jobs)
        streams: dict[str, tuple[Any, StepSeries]] = {}
        stages: dict[str, KeyedStage] = {}
        try:
            for name in pipeline.graph.order:
                spec = pipeline.stage(name)
                if isinstance(spec, Source):
                    parts, iw = run.source(spec, traces[name])
                else:
                    ups = [streams[u] for u in spec.inputs]
                    glob = isinstance(spec, GroupByWindow) and spec.rekey == "global"
                    parts = run.gather([p for p, _ in ups], glob, name)
                    iw = pointwise_min([wm for _, wm in ups])
                if isinstance(spec, GroupByWindow):
                    parts, stages[name] = run.group(spec, parts, _latched(iw))
                else:
                    parts, stages[name] = run.elementwise(spec, parts, iw)
                streams[name] = (parts, stages[name].output_watermark)
                if on_stage is not None:
                    on_stage(name)
        finally:
            run.close()
            shutil.rmtree(out / "_sources", ignore_errors=True)
        tally = jobs.log()
    times = union_times(
        [s.input_watermark for s in stages.values()] + [s.output_watermark for s in stages.values()]
    )
    # (KeyedStage has StageResult's series and counts, which is what a result's readers use)
    return KeyedSimulation(pipeline, stages, times, n, tally)  # type: ignore[arg-type]


class _Run:
    """One simulation's Spark side: the RDDs it persisted (unpersisted at the end)."""

    def __init__(
        self,
        sc: Any,
        n: int,
        out: Path,
        fast: bool,
        max_rounds: int,
        jobs: JobCount | None = None,
    ) -> None:
        from pyspark import StorageLevel

        self.sc, self.n, self.out, self.fast, self.max_rounds = sc, n, out, fast, max_rounds
        self.jobs = jobs if jobs is not None else JobCount(sc, "simulate")  # (names jobs)
        self.level = StorageLevel.DISK_ONLY
        self.kept: list[Any] = []
        self.views: list[Any] = []  # a kept RDD's records less their stats: not kept again

    def keep(self, rdd: Any) -> Any:
        if not any(rdd is v for v in self.views):
            self.kept.append(rdd.persist(self.level))
        return rdd

    def view(self, rdd: Any) -> Any:
        """``rdd``, a cheap map of a kept RDD (the stage's parts without its stats)."""
        self.views.append(rdd)
        return rdd

    def close(self) -> None:
        for rdd in self.kept:
            rdd.unpersist()

    def source(self, spec: Source, trace: TraceInput) -> tuple[Any, StepSeries]:
        """The source's parts by key partition and its watermark (µs): made block by
        block on the executors for a :class:`BlockedTrace` whose watermark its blocks'
        summaries give (:mod:`spark_backend.simulate.sources`), else here."""
        if isinstance(trace, BlockedTrace):
            if make_source_watermark(spec.watermark).kind in SUMMARISED:
                return self.blocked_source(spec, trace)
            LOG.info("source %s: watermark %s needs every row: the trace made here",
                     spec.name, spec.watermark)  # fmt: skip
            trace = trace.whole
        return self.driver_source(spec, trace() if callable(trace) else trace)

    def blocked_source(self, spec: Source, trace: BlockedTrace) -> tuple[Any, StepSeries]:
        """Each task makes one block and splits it by key partition (kept on disk); the
        driver collects the blocks' summaries only; the parts are gathered by partition."""
        n, kind = self.n, make_source_watermark(spec.watermark).kind
        made = self.keep(self.sc.parallelize(range(trace.blocks), trace.blocks)
                         .map(lambda i: block_rows(trace, i, n, kind)))  # fmt: skip
        summaries = made.map(lambda x: x[0])
        # the blocks made in a few jobs, each on every core, each sending its blocks'
        # summaries (the driver holds a chunk of them pickled at a time)
        blocks = list(range(trace.blocks))
        step = max(self.sc.defaultParallelism, -(-trace.blocks // SUMMARY_JOBS))
        chunks = [blocks[i : i + step] for i in range(0, trace.blocks, step)]

        def gathered() -> Iterator[Any]:
            for i, chunk in enumerate(chunks, 1):
                with self.jobs.purpose(f"source {spec.name}: blocks made, summaries {i}"):
                    got = self.sc.runJob(summaries, lambda it: it, chunk)
                yield from got
                del got

        iw = source_watermark(spec, gathered())
        pieces = made.flatMap(lambda x: [(p, (0, part)) for p, part in x[1]])
        parts = pieces.groupByKey(n, partitionFunc=int).map(
            lambda pp: (pp[0], bounded(merge(list(pp[1]), 1), pp[0], spec.name)),
            preservesPartitioning=True,
        )
        LOG.info("source %s: %d blocks made on the executors, %d watermark steps", spec.name,
                 trace.blocks, len(iw))  # fmt: skip
        return parts, iw

    def driver_source(self, spec: Source, trace: Trace) -> tuple[Any, StepSeries]:
        """The source's rows split by key partition into Parquet files (this process);
        the partitions' RDD reads them. A trace made here is dropped once read."""
        stream, iw = source_input(spec, trace)
        del trace
        folder = self.out / "_sources" / spec.name
        folder.mkdir(parents=True, exist_ok=True)
        target = key_partition(stream.key, self.n)
        written = []
        for p in np.unique(target).tolist():
            idx = np.flatnonzero(target == p)
            _write(folder / f"part-{p}.parquet", {
                "time": stream.time[idx], "timestamp": stream.timestamp[idx],
                "key": stream.key[idx], "value": stream.value[idx], "place": idx,
            })  # fmt: skip
            written.append(p)
        LOG.info("source %s: %d rows in %d key partitions", spec.name, len(stream), len(written))
        del stream, target
        items = [(p, str(folder / f"part-{p}.parquet")) for p in written]
        rdd = self.sc.parallelize(items, max(1, len(items))).mapValues(_read_part)
        return rdd, iw

    def gather(self, inputs: list[Any], rekey_global: bool, stage: str) -> Any:
        """A stage's input parts: one input as it is (unless everything goes to one key),
        else every input's elements by target partition, merged in the local order."""
        if len(inputs) == 1 and not rekey_global:
            return inputs[0]
        n, k = self.n, len(inputs)

        def pieces(pp: tuple[int, Part], i: int) -> list[tuple[int, tuple[int, Part]]]:
            return [(t, (i, part)) for t, part in split(pp[1], n, rekey_global)]

        tagged = [rdd.flatMap(lambda pp, i=i: pieces(pp, i)) for i, rdd in enumerate(inputs)]
        union = tagged[0] if k == 1 else self.sc.union(tagged)
        return union.groupByKey(n, partitionFunc=int).map(
            lambda pp: (pp[0], bounded(merge(list(pp[1]), k), pp[0], stage)),
            preservesPartitioning=True,
        )

    def elementwise(self, spec: Any, parts: Any, iw: StepSeries) -> tuple[Any, KeyedStage]:
        # a source's curve has a step per distinct arrival; a monotone one is the same
        # function with only its changes (mobile's perfect watermark: 33 of 1M steps)
        iw = _compact(iw)
        held = self.sc.broadcast(iw)
        late_dir = self.out / "late" / spec.name

        def task(pp: tuple[int, Part]) -> tuple[int, tuple[Part, ElementStats]]:
            p, part = pp
            out, stats, late = elementwise(spec, part, held.value)
            _write_late(late_dir, p, late)
            return p, (bounded(out, p, spec.name), stats)

        done = self.keep(parts.map(task))
        with self.jobs.purpose(f"stage {spec.name}: element-wise"):
            stats = done.map(lambda x: x[1][1]).collect()
        held.unpersist()
        buffer = _min_series([s.buffer for s in stats])
        latched = _latched(iw)
        ow = pointwise_min([iw, buffer]).latched() if len(buffer) else latched
        stage = KeyedStage(
            spec.name, type(spec).__name__, latched, ow, {BUFFER_HOLD: buffer},
            _min_series([s.processing_hold for s in stats]),
            sum(s.arrivals for s in stats), sum(s.late for s in stats), late_dir,
        )  # fmt: skip
        return self.view(done.mapValues(lambda r: r[0])), stage

    def group(self, spec: GroupByWindow, parts: Any, iw: StepSeries) -> tuple[Any, KeyedStage]:
        parts = self.keep(parts)
        watermark = self.sc.broadcast(iw)
        # (the first round's tasks send their keys' first places besides their holds)
        rounds, holds, done, places = self._rounds(spec, parts, watermark)
        firsts: dict[Hashable, tuple[int, ...]] = {}
        for got in places:
            for k, place in got.items():
                if k not in firsts or place < firsts[k]:
                    firsts[k] = place
        ranks = {k: r for r, k in enumerate(sorted(firsts, key=firsts.__getitem__))}
        del firsts, places
        watermark.unpersist()
        shared = self.sc.broadcast((iw, ranks))
        pane_dir, late_dir = self.out / "panes" / spec.name, self.out / "late" / spec.name

        def outputs(item: Any) -> tuple[int, tuple[Part, ElementStats]]:
            (p, part), (_, (_, instants, result, _)) = item
            w, rank = shared.value
            out, table, stats, late = group_outputs(spec, part, w, instants, result, rank)
            _write_panes(pane_dir, p, table, rank)
            _write_late(late_dir, p, late)
            return p, (bounded(out, p, spec.name), stats)

        emitted = self.keep(parts.zip(done).map(outputs))
        with self.jobs.purpose(f"stage {spec.name}: outputs"):
            stats = emitted.map(lambda x: x[1][1]).collect()
        done.unpersist()
        shared.unpersist()
        state = _min_series(list(holds.values()))
        buffer = _min_series([s.buffer for s in stats])
        dropped: dict[str, int] = {}
        for s in stats:
            for k, v in s.dropped.items():
                dropped[k] = dropped.get(k, 0) + v
        paths = {s.path for s in stats}
        stage = KeyedStage(
            spec.name, "GroupByWindow", iw,
            pointwise_min([iw, state, buffer]).latched(),
            {STATE_HOLD: state, BUFFER_HOLD: buffer},
            _min_series([s.processing_hold for s in stats]),
            sum(s.arrivals for s in stats), sum(s.late for s in stats), late_dir, dropped,
            sum(s.late_grouped for s in stats),
            PaneFiles(pane_dir, _count(pane_dir)),
            paths.pop() if len(paths) == 1 else ("mixed" if paths else ""),
            np.concatenate([s.latencies for s in stats]) if stats else np.empty(0, np.int64),
            rounds, max((s.instants for s in stats), default=0),
        )  # fmt: skip
        LOG.info("stage %s: %d rounds, %d panes, at most %d instants a partition", spec.name,
                 rounds, len(stage.panes or ()), stage.largest_grid)  # fmt: skip
        return self.view(emitted.mapValues(lambda r: r[0])), stage

    def _rounds(
        self, spec: GroupByWindow, parts: Any, watermark: Any
    ) -> tuple[int, dict[int, StepSeries], Any, list[dict[Hashable, tuple[int, ...]]]]:
        """Rounds until the partitions' external holds settle (:func:`settle`): (rounds,
        each partition's own state hold (µs series), the settled round's RDD of (p,
        (hold, instants, PartResult without its hold, the first round's first places)),
        each partition's keys' first places (:func:`first_places`, which the first
        round's tasks send besides their holds)). The partitions' holds are
        broadcast as one :class:`OthersMin` table, from which each task takes the
        minimum of the others'."""
        fast, level = self.fast, self.level
        glob = spec.rekey == "global"
        count = iter(range(1, self.max_rounds + 1))
        places: list[dict[Hashable, tuple[int, ...]]] = []

        def run_round(others: OthersMin | None) -> tuple[dict, Any]:
            ext = self.sc.broadcast(others)
            first = others is None

            def task(pp: tuple[int, Part]) -> tuple[int, Any]:
                w = watermark.value
                last = ext.value
                external = None if last is None else last.of_partition(pp[0])
                instants, res = group_round(spec, pp[1], w, fast, external)
                # the hold kept as its changes only (the outputs do not need it)
                held = hold_changes(res.state_hold, instants)
                firsts = first_places(pp[1], glob) if first else None
                return pp[0], (held, instants, res._replace(state_hold=NO_STEPS.times), firsts)

            done = parts.map(task).persist(level)
            with self.jobs.purpose(f"stage {spec.name}: round {next(count)}"):
                got = done.map(lambda x: (x[0], x[1][0], x[1][3])).collect()
            ext.unpersist()
            if first:
                places.extend(g[2] for g in got)
            return {p: held for p, held, _ in got}, done

        rounds, holds, done = settle(run_round, self.max_rounds, spec.name,
                                     lambda done: done.unpersist())  # fmt: skip
        return rounds, holds, done, places


def _latched(s: StepSeries) -> StepSeries:
    """``s.latched()``, without a copy when ``s`` is already latched (the series are as
    long as the trace: the driver keeps one of each)."""
    v = s.values
    if v.size == 0 or (v[0] > s.initial and bool(np.all(v[1:] > v[:-1]))):
        return s
    return s.latched()


def _compact(s: StepSeries) -> StepSeries:
    """A monotone series (µs) with only its changes (the same function); any other as
    it is (its steps back matter to the elements read against it)."""
    return s.compressed() if s.is_monotonic() else s


def _min_series(series: list[StepSeries]) -> StepSeries:
    """The pointwise minimum (no series: none held, MAX_TIMESTAMP)."""
    return pointwise_min(series) if series else NO_STEPS


def _count(folder: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(folder.glob("part-*.parquet")))


def _write(path: Path, columns: Mapping[str, Any]) -> None:
    """A table to ``path`` (its folder made if missing); object columns as pyarrow infers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({k: pa.array(v.tolist() if v.dtype == object else v)
                      for k, v in columns.items()})  # fmt: skip
    pq.write_table(table, path)


def _read_part(path: str) -> Part:
    """A source partition's Part from its Parquet file."""
    from theory.pipeline.simulator import Stream

    t = pq.read_table(path)
    key = t.column("key").to_numpy(zero_copy_only=False)
    stream = Stream(
        t.column("time").to_numpy(),
        t.column("timestamp").to_numpy(),
        key if key.dtype.kind in "iu" else key.astype(object),
        t.column("value").to_numpy().astype(np.float64),
    )
    return Part(stream, t.column("place").to_numpy().reshape(-1, 1))


def _write_late(folder: Path, p: int, rows: np.ndarray) -> None:
    _write(folder / f"part-{p}.parquet", {"arrival": rows[:, 0], "timestamp": rows[:, 1]})


def _write_panes(folder: Path, p: int, table: PaneTable, rank: Mapping[Hashable, int]) -> None:
    """The partition's panes, if any (an empty file would carry null column types)."""
    if not len(table):
        return
    columns = {f: getattr(table, f) for f in PaneTable.__dataclass_fields__}
    columns["key_rank"] = np.fromiter(map(rank.__getitem__, table.key.tolist()), np.int64,
                                      len(table))  # fmt: skip
    _write(folder / f"part-{p}.parquet", columns)
