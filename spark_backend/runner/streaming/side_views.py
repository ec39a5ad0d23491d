"""Driver side: each side input's materialised contents per window, and when a window is
ready for the main elements that read it.

The driver holds the side PCollections' elements (never a main input's): after the stage
writing a side PCollection ran in a batch, its chunks are collected once and added to
the :class:`SideView` of that PCollection, kept (and checkpointed) between batches.

**Views, as Beam defines them.** A main element in window ``W`` reads side window
``S = window_mapping(W)``. ``S`` is *ready* when the side input has a pane for it, or when
the side input's output watermark has reached ``S``'s end (BundleBasedDirectRunner's
``output_watermark >= window.end``; the view is then empty or the default, and
AsSingleton without a default gives Beam Python's ``EmptySideInput``, as the SDK does on
every runner).

- **Default trigger** (no trigger set on the side PCollection): the view of ``S`` is every
  side element ever seen in ``S``, late ones included, and ``S`` is ready by the
  watermark: exactly BundleBasedDirectRunner's view (elements are added as they come,
  and a blocked bundle waits for the watermark).
- **Any other trigger** (the "slowly changing" pattern: ``WindowInto(GlobalWindows(),
  trigger=Repeatedly(...), accumulation_mode=...)``): the side elements go through
  theory's Beam-exact engine with the side PCollection's windowing strategy (one key),
  as Beam Java's views group the side input by its trigger; ``S`` is ready at its first
  pane and each later pane *replaces* the view (accumulating mode: a pane holds every
  element so far; discarding: only its own). BundleBasedDirectRunner does not do this:
  it waits for the side watermark and concatenates everything (tested as a divergence).

Times are int64 microseconds.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.transforms import window as bw
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipelines.convert import to_theory
from spark_backend.runner.grouping.group_by_key import split_elements
from spark_backend.runner.plan.plan import Plan
from spark_backend.runner.stages.task_context import coder_impl
from spark_backend.runner.streaming.watermarks import leaf_transforms
from theory.pipeline.graph import HoldKind, hold_name
from theory.time import END_OF_GLOBAL_WINDOW, MIN_TIMESTAMP
from theory.windowing.engine import GroupByWindowEngine

__all__ = ["SIDE_HOLD", "SideReadiness", "SideView", "side_views", "window_bounds"]

#: The named hold of a ParDo whose main elements wait for a side input (they wait in
#: its partitions' state).
SIDE_HOLD: Final[str] = hold_name(HoldKind.STATE, "side-input")

#: A window as ``(start, end)`` in µs (the global window as theory bounds it).
Bounds = tuple[int, int]


def window_bounds(window: Any) -> Bounds:
    """``window`` (a Beam window) as ``(start, end)`` µs."""
    if isinstance(window, bw.IntervalWindow):
        return int(window.start.micros), int(window.end.micros)
    return MIN_TIMESTAMP, END_OF_GLOBAL_WINDOW


@dataclass(frozen=True)
class SideReadiness:
    """What a task is told of one side input for a batch: its output watermark (µs) and
    the side windows that have a pane."""

    watermark: int
    panes: frozenset[Bounds]

    def ready(self, side_window: Any) -> bool:
        """Whether a main element reading ``side_window`` (a Beam window) may run."""
        bounds = window_bounds(side_window)
        return bounds in self.panes or self.watermark >= bounds[1]


@dataclass
class SideView:
    """One side PCollection's contents per window (encoded single-window elements), kept
    by the driver between batches; ``engine`` when its trigger is not the default."""

    buffer_id: bytes
    coder_id: str
    producer: str  # the transform writing it (its output watermark is the side's)
    engine: GroupByWindowEngine | None = None
    elements: dict[Bounds, list[bytes]] = field(default_factory=lambda: defaultdict(list))
    panes: set[Bounds] = field(default_factory=set)
    started: bool = False

    def update(
        self, chunks: Iterable[bytes], watermark: int, clock: int, job_id: str, components: bytes
    ) -> None:
        """Take a batch: the clock moves to ``clock`` first, then the side PCollection's
        ``chunks`` are added (each window on its own), then its output ``watermark`` (µs):
        a triggered view's engine fires the panes due, each replacing its window's view."""
        impl = coder_impl(job_id, components, self.coder_id)
        rows: list[tuple[Bounds, int, bytes]] = []
        for chunk in chunks:
            for element, _ in split_elements(chunk, impl):
                for window in element.windows:
                    single = WindowedValue(
                        element.value, element.timestamp, (window,), element.pane_info
                    )
                    stamp = int(element.timestamp.micros)
                    rows.append((window_bounds(window), stamp, impl.encode_nested(single)))
        engine = self.engine
        if engine is None:
            for bounds, _, encoded in rows:
                self.elements[bounds].append(encoded)
            return
        if not self.started:  # the engine's clock starts at the first batch's
            engine.processing_time = clock
            self.started = True
        if clock > engine.processing_time:
            self._take(engine.advance_processing_time(clock - engine.processing_time))
        if rows:
            n = len(rows)
            starts = [r[0][0] for r in rows]
            ends = [r[0][1] for r in rows]
            values = [r[2] for r in rows]
            stamps = [r[1] for r in rows]
            self._take(
                engine.add_rows([b""] * n, values, stamps, list(range(n)), starts, ends, 0, n)
            )
        if watermark > engine.input_watermark:
            engine.output_watermark = watermark
            self._take(engine.advance_watermark_to(watermark))

    def resumed(self, committed: Any) -> SideView:
        """This view with the contents of ``committed`` (a checkpoint's, its engine as
        the checkpoint's codec restores it): the coder id, the producer and the engine's
        strategy stay this run's (a coder's id may differ between processes; the
        checkpoint's shape checked that the coders are the same). ``TypeError`` when
        ``committed`` is no view like this one."""
        if not isinstance(committed, SideView) or committed.buffer_id != self.buffer_id:
            raise TypeError("it is not this side input's view")
        engine = self.engine
        if engine is not None:
            state: Any = committed.engine  # a codec.Restorable
            if not hasattr(state, "into"):
                raise TypeError("it has no engine state")
            state.into(engine)
        elif committed.engine is not None:
            raise TypeError("it has an engine, and this view none")
        return dataclasses.replace(
            committed, coder_id=self.coder_id, producer=self.producer, engine=engine
        )

    def _take(self, panes: Iterable[Any]) -> None:
        """Each pane replaces its window's view (in firing order)."""
        for pane in panes:
            bounds = (pane.window.start, pane.window.end)
            self.elements[bounds] = list(pane.values)
            self.panes.add(bounds)

    def readiness(self, watermark: int) -> SideReadiness:
        """What tasks are told of this view at the side's output ``watermark``."""
        return SideReadiness(watermark, frozenset(self.panes))

    def chunk(self) -> bytes:
        """Every window's view as one chunk of windowed values (the side coder)."""
        out = create_OutputStream()
        for encoded in (e for values in self.elements.values() for e in values):
            out.write(encoded)
        return out.get()


def side_views(plan: Plan, pipeline: pb.Pipeline) -> dict[bytes, SideView]:
    """A fresh :class:`SideView` of every side PCollection the plan's stages read, keyed
    by buffer id (a triggered view's engine starts at the first batch's clock)."""
    producer = {pc: t.unique_name for t in leaf_transforms(pipeline) for pc in t.outputs.values()}
    components = pipeline.components
    views: dict[bytes, SideView] = {}
    for spec in plan.stages:
        for side in spec.side_inputs:
            if side.buffer_id in views:
                continue
            pcoll = side.buffer_id.split(b":", 1)[1].decode()
            strategy = components.windowing_strategies[
                components.pcollections[pcoll].windowing_strategy_id
            ]
            engine = None
            if strategy.trigger.WhichOneof("trigger") != "default":
                engine = GroupByWindowEngine(to_theory(strategy, allow_unsafe_triggers=True))
            views[side.buffer_id] = SideView(side.buffer_id, side.coder_id, producer[pcoll], engine)
    return views
