"""A deterministic discrete-event simulator of watermarks through a pipeline.

The pipeline is a DAG and watermarks only flow downstream, so the simulation runs stage
by stage in topological order, each stage seeing its upstream stages' complete output.
This is exact: the result equals an event-by-event run of the whole graph (a test replays
it through :class:`~theory.pipeline.graph.WatermarkTracker`).

Per stage, over processing time (all µs):

- input watermark: the source watermark for a source, else the minimum of the upstream
  output watermarks;
- an element is late when its timestamp is below the input watermark just before it
  arrives (elements arriving at ``t`` are processed before a watermark change at ``t``);
- output watermark: ``max(old, min(input, holds))`` where the holds are the grouping
  state (``state:pending-windows``) and the work in flight (``buffer:output``); late
  elements hold nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from itertools import count
from math import fsum
from typing import Any, NamedTuple

import numpy as np

from theory.arrays import sorted_union
from theory.columns import check_bool, check_seed
from theory.data.trace import Trace
from theory.memory import kept_freed_memory
from theory.pipeline.graph import GraphError, hold_chain
from theory.pipeline.stages import Flatten, GroupByWindow, ParDo, Pipeline, Source
from theory.series import StepSeries, pointwise_min, union_times
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.holds import inflight_min
from theory.watermarks.spec import make_source_watermark
from theory.windowing.engine import STATE_HOLD
from theory.windowing.fast_path import ScriptColumns, int_key_codes
from theory.windowing.pane_columns import TIMINGS, Keys, PaneColumns, key_list
from theory.windowing.runner import run_columns
from theory.windowing.script import ScriptResult
from theory.windowing.strategy import WindowingStrategy

#: The hold component name for elements a stage has received but not yet emitted.
BUFFER_HOLD = "buffer:output"

#: Runs one grouping stage's script: ``(columns, strategy, fast) -> result``, as
#: :func:`theory.windowing.runner.run_columns` does (the default, in this process);
#: another may run it as key partitions (:func:`theory.windowing.partitioned.run_partitioned`).
GroupRunner = Callable[[ScriptColumns, WindowingStrategy, bool], ScriptResult]


def run_here(columns: ScriptColumns, strategy: WindowingStrategy, fast: bool) -> ScriptResult:
    """The default :data:`GroupRunner`: the stage in this process, panes as columns."""
    return run_columns(columns, strategy, fast=fast, build=False)


_NO_HOLD = StepSeries(np.empty(0, np.int64), np.empty(0, np.int64), MAX_TIMESTAMP)


@dataclass(frozen=True)
class Stream:
    """Elements on an edge, sorted by ``time`` (processing time they become available)."""

    time: np.ndarray
    timestamp: np.ndarray
    key: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return int(self.time.size)

    def take(self, idx: np.ndarray) -> Stream:
        return Stream(self.time[idx], self.timestamp[idx], self.key[idx], self.value[idx])


@dataclass(frozen=True)
class PaneTable:
    """The panes a grouping stage fired, as columns (times in µs)."""

    key: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    timestamp: np.ndarray
    timing: np.ndarray
    index: np.ndarray
    count: np.ndarray
    value: np.ndarray
    fire_time: np.ndarray
    emit_time: np.ndarray

    def __len__(self) -> int:
        return int(self.fire_time.size)


@dataclass(frozen=True)
class StageResult:
    """One stage's watermarks, holds, lateness and (for grouping stages) panes."""

    name: str
    kind: str
    input_watermark: StepSeries
    output_watermark: StepSeries
    holds: dict[str, StepSeries]
    arrivals: int
    late: np.ndarray  # bool per arriving element, in arrival order
    late_timestamp: np.ndarray
    late_arrival: np.ndarray
    dropped: dict[str, int] = field(default_factory=dict)
    panes: PaneTable | None = None
    #: The oldest entry time (processing time, µs) of work this stage has received but
    #: not finished: elements (or fired panes) in flight. MAX_TIMESTAMP when there is none.
    #: Buffered window state is processed work and does not count.
    processing_hold: StepSeries = field(default_factory=lambda: _NO_HOLD)
    #: Late elements a grouping stage still grouped into a window (its engine's
    #: ``late_elements``); with the ``dropped`` ones they are the ``late`` ones.
    late_grouped: int = 0
    #: For a grouping stage, which path of the engine ran it: "vectorised" or
    #: "incremental" (see :func:`theory.windowing.runner.run_columns`); else "".
    path: str = ""

    @property
    def late_count(self) -> int:
        return int(np.count_nonzero(self.late))

    @property
    def late_fraction(self) -> float:
        return self.late_count / self.arrivals if self.arrivals else 0.0


@dataclass(frozen=True)
class SimulationResult:
    """Every stage's result, plus the common processing-time grid of all changes."""

    pipeline: Pipeline
    stages: dict[str, StageResult]
    times: np.ndarray

    def series(self, stage: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(processing time, input watermark, output watermark) at every step of ``times``."""
        r = self.stages[self.pipeline.graph.check(stage)]
        return self.times, r.input_watermark.at(self.times), r.output_watermark.at(self.times)

    def why(self, stage: str, at: int) -> list[tuple[str, str]]:
        """The (stage, component) chain holding ``stage``'s output watermark at time ``at``
        (µs), as :func:`~theory.pipeline.graph.hold_chain` walks it."""
        stages = self.stages
        return hold_chain(
            self.pipeline.graph.check(stage),
            self.pipeline.graph.inputs.__getitem__,
            lambda s: int(stages[s].input_watermark.at(at)),
            lambda s: {name: int(h.at(at)) for name, h in stages[s].holds.items()},
            lambda s: int(stages[s].output_watermark.at(at)),
        )


def simulate(
    pipeline: Pipeline,
    traces: Mapping[str, Trace],
    *,
    seed: int = 0,
    on_stage: Callable[[str], None] | None = None,
    fast: bool = True,
    grouping: GroupRunner = run_here,
    keep_freed_memory: bool = False,
) -> SimulationResult:
    """Run ``pipeline`` over one trace per Source stage; deterministic for a given seed.

    ``on_stage(name)`` is called after each stage is simulated (for progress reporting).
    Grouping stages run on the engine's vectorised path where it models them (``fast``,
    the default; each stage's ``path`` says which ran), else event by event; the results
    are the same. ``grouping`` runs each grouping stage (:data:`GroupRunner`; e.g. on
    Spark, with the same result). ``keep_freed_memory``: glibc keeps freed memory during
    the run (:func:`theory.memory.kept_freed_memory`: process-wide while it lasts, put
    back after; faster from millions of events, the same result).
    """
    check_traces(pipeline, traces)
    check_seed(seed)
    check_bool(keep_freed_memory, "keep_freed_memory")
    if keep_freed_memory:
        with kept_freed_memory():
            return simulate(pipeline, traces, seed=seed, on_stage=on_stage, fast=fast,
                            grouping=grouping)  # fmt: skip
    outputs: dict[str, tuple[Stream, StepSeries]] = {}
    results: dict[str, StageResult] = {}
    for position, name in enumerate(pipeline.graph.order):
        spec = pipeline.stage(name)
        stage_rng = np.random.default_rng([seed, position])
        if isinstance(spec, Source):
            stream, iw = source_input(spec, traces[name])
        else:
            stream, iw = _merged_input([outputs[u] for u in spec.inputs])
        if isinstance(spec, GroupByWindow):
            out, result = _run_group(spec, stream, iw, stage_rng, fast, grouping)
        else:
            out, result = run_elementwise(spec, stream, iw, stage_rng)
        outputs[name] = (out, result.output_watermark)
        results[name] = result
        if on_stage is not None:
            on_stage(name)
    times = union_times(
        [r.input_watermark for r in results.values()]
        + [r.output_watermark for r in results.values()]
    )
    return SimulationResult(pipeline, results, times)


#: What else differs between two results of one stage: ``(name, a's, b's) -> texts``.
StageDifferences = Callable[[str, Any, Any], list[str]]


def differences(a: SimulationResult, b: Any, elements: StageDifferences | None = None) -> list[str]:
    """What differs between two simulations of one pipeline (empty: identical): the
    time grid, and per stage its watermark and hold series, arrivals, drops, and what
    ``elements`` compares (default: lateness and panes, NaN equal to NaN). ``b`` may be
    another engine's result with the same series (``spark_backend.simulate.compare``)."""
    out: list[str] = []
    if not np.array_equal(a.times, b.times):
        out.append("times")
    if list(a.stages) != list(b.stages):
        return [*out, f"stages {list(a.stages)} != {list(b.stages)}"]
    for name, x in a.stages.items():
        y = b.stages[name]
        out += _series_differences(name, x, y)
        out += (elements or _element_differences)(name, x, y)
    return out


def _element_differences(name: str, x: StageResult, y: StageResult) -> list[str]:
    """Lateness and panes of two results of stage ``name``."""
    out = []
    for f in ("late", "late_timestamp", "late_arrival"):
        if not np.array_equal(getattr(x, f), getattr(y, f)):
            out.append(f"{name}: {f}")
    if (x.panes is None) != (y.panes is None):
        out.append(f"{name}: panes on one side only")
    elif x.panes is not None and y.panes is not None:
        for f in PaneTable.__dataclass_fields__:
            u, v = getattr(x.panes, f), getattr(y.panes, f)
            if not np.array_equal(u, v, equal_nan=u.dtype.kind == "f"):
                out.append(f"{name}: panes' {f}")
    return out


def _series_differences(name: str, x: Any, y: Any) -> list[str]:
    """What differs between two results of stage ``name`` (a :class:`StageResult` or
    alike): its input, output, processing-hold and hold series, arrivals, drops and late
    elements grouped."""
    out = []
    series = {"input": (x.input_watermark, y.input_watermark),
              "output": (x.output_watermark, y.output_watermark),
              "processing hold": (x.processing_hold, y.processing_hold)}  # fmt: skip
    if x.holds.keys() != y.holds.keys():
        out.append(f"{name}: holds {sorted(x.holds)} != {sorted(y.holds)}")
    series.update({h: (x.holds[h], y.holds.get(h, _NO_HOLD)) for h in x.holds})
    for what, (s, t) in series.items():
        if not (
            np.array_equal(s.times, t.times)
            and np.array_equal(s.values, t.values)
            and s.initial == t.initial
        ):
            out.append(f"{name}: {what} series")
    if (x.arrivals, x.dropped, x.late_grouped) != (y.arrivals, y.dropped, y.late_grouped):
        out.append(f"{name}: arrivals, dropped or late_grouped")
    return out


def check_traces(pipeline: Pipeline, traces: Mapping[str, Trace]) -> None:
    """GraphError unless ``traces`` has exactly one trace per Source stage."""
    missing = [s for s in pipeline.source_names() if s not in traces]
    if missing:
        raise GraphError(f"no trace given for source stage(s): {', '.join(missing)}")
    extra = sorted(set(traces) - set(pipeline.source_names()))
    if extra:
        raise GraphError(f"traces given for stages that are not sources: {', '.join(extra)}")


def _merged_input(ups: list[tuple[Stream, StepSeries]]) -> tuple[Stream, StepSeries]:
    """A stage's input from its upstream (stream, output watermark) pairs: the merged
    streams and the minimum of the watermarks."""
    if len(ups) == 1:
        return ups[0]
    return merge_streams([s for s, _ in ups]), pointwise_min([wm for _, wm in ups])


def source_input(spec: Source, trace: Trace) -> tuple[Stream, StepSeries]:
    t = trace.sorted_by_arrival()
    wm = make_source_watermark(spec.watermark)
    iw = wm.curve(t.event_time, t.arrival_time, t.partition)
    if spec.finish and len(t):
        # A finished bounded source: the watermark jumps to the end of time once the last
        # element has arrived (the last update at one instant wins).
        iw = finished_source(iw, int(t.arrival_time[-1]))
    return Stream(t.arrival_time, t.event_time, t.key, t.value.astype(np.float64)), iw


def finished_source(iw: StepSeries, last: int) -> StepSeries:
    """``iw`` with a step to ``MAX_TIMESTAMP`` at ``last`` (µs; the last update at one
    instant wins), built by appending when no step comes after ``last``."""
    n = iw.times.size
    if n and iw.times[-1] > last:
        return StepSeries.from_events(
            np.append(iw.times, last), np.append(iw.values, MAX_TIMESTAMP), iw.initial
        )
    at_last = bool(n and iw.times[-1] == last)
    size = n if at_last else n + 1
    times, values = np.empty(size, np.int64), np.empty(size, np.int64)
    times[:n], values[:n] = iw.times, iw.values
    times[-1], values[-1] = last, MAX_TIMESTAMP
    return StepSeries(times, values, iw.initial)


def merge_streams(streams: list[Stream]) -> Stream:
    time = np.concatenate([s.time for s in streams])
    order = np.argsort(time, kind="stable")
    return Stream(
        time[order],
        np.concatenate([s.timestamp for s in streams])[order],
        np.concatenate([s.key for s in streams])[order],
        np.concatenate([s.value for s in streams])[order],
    )


def lateness(stream: Stream, iw: StepSeries) -> np.ndarray:
    """Late mask: timestamp below the input watermark just before arrival."""
    return stream.timestamp < iw.before(stream.time)


class ElementOutputs(NamedTuple):
    """An element-wise stage's work on its elements, without the whole-stage series:
    the output stream, the late mask, and the in-flight holds (µs series) of its
    elements' timestamps (late ones not holding) and of their arrivals."""

    out: Stream
    late: np.ndarray
    buffer: StepSeries
    processing_hold: StepSeries


def element_outputs(
    spec: Source | ParDo | Flatten, stream: Stream, iw: StepSeries, rng: np.random.Generator
) -> ElementOutputs:
    """The stage on ``stream`` under input watermark ``iw`` (µs): what
    :func:`run_elementwise` computes besides the output watermark (a key partition's
    share of the stage needs no more, and reads ``iw`` only at its arrivals)."""
    late = lateness(stream, iw)
    depart = spec.processing.departures(stream.time, rng)
    hold_ts = np.where(late, MAX_TIMESTAMP, stream.timestamp)
    buffer = inflight_min(stream.time, depart, hold_ts)
    value = stream.value
    if isinstance(spec, ParDo) and spec.fn is not None:
        value = np.asarray(spec.fn(value), dtype=np.float64)
        if value.shape != stream.value.shape:
            raise ValueError(
                f"stage {spec.name!r}: fn returned {value.shape}, expected {stream.value.shape}"
            )
    out = Stream(depart, stream.timestamp, stream.key, value)
    return ElementOutputs(out, late, buffer, inflight_min(stream.time, depart, stream.time))


def run_elementwise(
    spec: Source | ParDo | Flatten, stream: Stream, iw: StepSeries, rng: np.random.Generator
) -> tuple[Stream, StageResult]:
    out, late, buffer, processing_hold = element_outputs(spec, stream, iw, rng)
    ow = pointwise_min([iw, buffer]).latched() if len(buffer) else iw.latched()
    result = StageResult(
        spec.name,
        type(spec).__name__,
        iw.latched(),
        ow,
        {BUFFER_HOLD: buffer},
        len(stream),
        late,
        stream.timestamp[late],
        stream.time[late],
        processing_hold=processing_hold,
    )
    return out, result


def _run_group(
    spec: GroupByWindow,
    stream: Stream,
    iw: StepSeries,
    rng: np.random.Generator,
    fast: bool,
    grouping: GroupRunner,
) -> tuple[Stream, StageResult]:
    iw = iw.latched()
    instants = sorted_union([stream.time, iw.times])
    columns = script_columns(spec, stream, iw, instants)
    run = grouping(columns, spec.strategy, fast)
    panes, fire_times, state = _stage_outputs(run, instants, columns.key)
    table, out = pane_outputs(spec, panes, fire_times, rng)
    buffer = inflight_min(table.fire_time, table.emit_time, table.timestamp)
    late = lateness(stream, iw)
    result = StageResult(
        spec.name,
        "GroupByWindow",
        iw,
        pointwise_min([iw, state, buffer]).latched(),
        {STATE_HOLD: state, BUFFER_HOLD: buffer},
        len(stream),
        late,
        stream.timestamp[late],
        stream.time[late],
        dict(run.dropped),
        table,
        processing_hold=inflight_min(table.fire_time, table.emit_time, table.fire_time),
        late_grouped=run.late_elements,
        path=run.path,
    )
    return out, result


def script_columns(
    spec: GroupByWindow, stream: Stream, iw: StepSeries, instants: np.ndarray
) -> ScriptColumns:
    """The stage's input as a script in columns: one event per instant (µs: the elements
    arriving then, then the watermark step at it, so they are not late for a watermark
    that moves at their own instant), plus a final step to ``MAX_TIMESTAMP`` whose
    firings :func:`_stage_outputs` leaves out (nothing before it depends on it)."""
    n_ev = instants.size + 1
    iw_after = np.full(n_ev, MIN_TIMESTAMP, np.int64)
    iw_after[np.searchsorted(instants, iw.times)] = iw.values
    np.maximum.accumulate(iw_after, out=iw_after)  # (iw is latched: this fills the gaps)
    iw_after[-1] = MAX_TIMESTAMP
    keys: Keys = [None] * len(stream) if spec.rekey == "global" else stream.key
    return ScriptColumns(
        iw_after,
        np.zeros(n_ev, np.int64),
        keys,
        stream.value,
        stream.timestamp,
        np.searchsorted(instants, stream.time),
    )


def _stage_outputs(
    run: ScriptResult, instants: np.ndarray, keys: Keys
) -> tuple[PaneColumns, np.ndarray, StepSeries]:
    """The panes fired before the final step in a canonical order (fire time, key in
    order of first arrival in ``keys``, window, pane index: the order within an instant
    is the runner's choice), their fire times (µs) and the state hold's step series
    (``MAX_TIMESTAMP`` when there is none)."""
    n = instants.size
    panes = run.pane_columns if run.pane_columns is not None else PaneColumns.from_panes(run.panes)
    order = pane_order(panes, run.pane_event, n, key_ranks(panes.key, keys))
    assert run.state_hold is not None  # (both paths record it)
    hold = run.state_hold[:n]
    change = np.flatnonzero(np.diff(hold, prepend=MAX_TIMESTAMP) != 0)
    state = StepSeries(instants[change], hold[change], MAX_TIMESTAMP)
    return panes.take(order), instants[run.pane_event[order]], state


def key_ranks(pane_keys: Keys, keys: Keys) -> np.ndarray:
    """Each pane key's rank by first arrival in ``keys`` (vectorised for integer arrays)."""
    if all(isinstance(k, np.ndarray) and k.dtype.kind in "iu" for k in (pane_keys, keys)):
        by_first = int_key_codes(np.asarray(keys))[1]
        code = np.argsort(by_first)  # the ranks of the distinct keys, ascending
        return code[np.searchsorted(by_first[code], np.asarray(pane_keys))]
    rank = dict(zip(dict.fromkeys(key_list(keys)), count(), strict=False))
    return np.fromiter(map(rank.__getitem__, key_list(pane_keys)), np.int64, len(pane_keys))


def pane_order(
    panes: PaneColumns,
    pane_event: np.ndarray,
    n_events: int,
    key_code: Mapping[Hashable, int] | np.ndarray,
) -> np.ndarray:
    """The indices of the panes fired before event ``n_events`` (the final step) in the
    canonical order: fire event, ``key_code`` of the key (its rank by first arrival: a
    mapping, or the array of each pane's, :func:`key_ranks`), window start, window end,
    pane index."""
    keep = np.flatnonzero(pane_event < n_events)
    if isinstance(key_code, np.ndarray):
        code = key_code[keep]
    else:
        code = np.fromiter(map(key_code.__getitem__, panes.key), np.int64, panes.n_panes)[keep]
    return keep[
        np.lexsort(
            (panes.pane_index[keep], panes.end[keep], panes.start[keep], code, pane_event[keep])
        )
    ]


def _combine(spec: GroupByWindow, panes: PaneColumns) -> np.ndarray:
    """Each pane's ``combine`` value: the named combiners on the columns, the same
    numbers as :data:`theory.pipeline.stages.COMBINERS` give per pane (tested); a
    user's function on the :class:`Pane` tuples."""
    n = panes.n_panes
    name = spec.combine if isinstance(spec.combine, str) else None
    if name == "window_length":
        return (panes.end - panes.start).astype(np.float64) / 1e6
    if name == "count":
        return (panes.hi - panes.lo).astype(np.float64)
    if name in ("sum", "mean"):
        sums = np.fromiter(map(fsum, panes.value_lists()), np.float64, n)
        if name == "sum":
            return sums
        with np.errstate(invalid="ignore"):  # an empty pane's mean is NaN
            return sums / (panes.hi - panes.lo)
    return np.fromiter(map(spec.combine_fn, panes.panes()), np.float64, n)


def pane_outputs(
    spec: GroupByWindow, panes: PaneColumns, fire_time: np.ndarray, rng: np.random.Generator
) -> tuple[PaneTable, Stream]:
    n = panes.n_panes
    key = np.empty(n, dtype=object)
    key[:] = key_list(panes.key)
    ts = panes.timestamp
    timing = _TIMING_VALUES[panes.timing]
    value = _combine(spec, panes)
    emit = spec.processing.departures(fire_time, rng)
    table = PaneTable(
        key,
        panes.start,
        panes.end,
        ts,
        timing,
        panes.pane_index,
        panes.hi - panes.lo,
        value,
        fire_time,
        emit,
    )
    out_key: Any = key
    if isinstance(panes.key, np.ndarray) and panes.key.dtype.kind in "iu":
        out_key = panes.key.astype(np.int64)
    elif n and all(isinstance(k, (int, np.integer)) for k in key[: min(n, 16)]):
        try:
            out_key = key.astype(np.int64)
        except (TypeError, ValueError):
            out_key = key
    return table, Stream(emit, ts, out_key, value)


_TIMING_VALUES = np.array([t.value for t in TIMINGS], dtype=object)


__all__ = [
    "BUFFER_HOLD",
    "MIN_TIMESTAMP",
    "ElementOutputs",
    "GroupRunner",
    "PaneTable",
    "SimulationResult",
    "StageDifferences",
    "StageResult",
    "Stream",
    "check_traces",
    "differences",
    "element_outputs",
    "finished_source",
    "key_ranks",
    "lateness",
    "merge_streams",
    "pane_order",
    "pane_outputs",
    "run_elementwise",
    "run_here",
    "script_columns",
    "simulate",
    "source_input",
]
