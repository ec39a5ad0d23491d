"""Stage specifications for the simulator: what each stage of a pipeline does.

- :class:`Source` reads one trace and stamps it with a source watermark.
- :class:`ParDo` maps each value (vectorised ``fn`` over a float64 array).
- :class:`Flatten` merges several inputs.
- :class:`GroupByWindow` groups by key and window under a windowing strategy and emits one
  value per pane (``combine``), optionally re-keying first (``rekey="global"`` for a
  ``Combine.globally``).

Every stage has a :class:`~theory.pipeline.processing.Processing` model for its outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from theory.pipeline.graph import GraphError, StageGraph
from theory.pipeline.processing import INSTANT, Processing
from theory.windowing.engine import Pane
from theory.windowing.strategy import WindowingStrategy


def window_length_seconds(pane: Pane) -> float:
    """The chapter-3 CalculateWindowLength: the pane's window length in seconds."""
    return float(pane.window.end - pane.window.start) / 1e6


def mean_value(pane: Pane) -> float:
    """The mean of the pane's values (Mean.globally per window), correctly rounded
    whatever their order (a pane's values are a multiset)."""
    if not pane.values:
        return math.nan  # (an empty pane, as np.mean gives)
    return math.fsum(map(float, pane.values)) / len(pane.values)


def sum_value(pane: Pane) -> float:
    """The sum of the pane's values, correctly rounded whatever their order."""
    return math.fsum(map(float, pane.values))


def count_value(pane: Pane) -> float:
    """The number of values in the pane."""
    return float(len(pane.values))


COMBINERS: dict[str, Callable[[Pane], float]] = {
    "window_length": window_length_seconds,
    "mean": mean_value,
    "sum": sum_value,
    "count": count_value,
}


@dataclass(frozen=True)
class Source:
    """A source stage. ``watermark`` is a source-watermark spec (see ``theory.watermarks.spec``).

    With ``finish`` (the default) the trace is a bounded input: once its last element has
    arrived the source watermark advances to ``MAX_TIMESTAMP``, as a finished bounded
    source does in Beam. Without it the watermark stays where the estimator left it.
    """

    name: str
    watermark: str = "perfect"
    processing: Processing = INSTANT
    finish: bool = True

    @property
    def inputs(self) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True)
class ParDo:
    """An element-wise stage; ``fn`` maps a float64 value array to one of the same length."""

    name: str
    input: str
    fn: Callable[[np.ndarray], np.ndarray] | None = None
    processing: Processing = INSTANT

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Flatten:
    """Merges its inputs into one stream."""

    name: str
    sources: tuple[str, ...]
    processing: Processing = INSTANT

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(self.sources)


@dataclass(frozen=True)
class GroupByWindow:
    """Groups by key and window; emits ``combine(pane)`` per pane, at the pane's timestamp."""

    name: str
    input: str
    strategy: WindowingStrategy
    combine: str | Callable[[Pane], float] = "sum"
    rekey: str | None = None
    processing: Processing = INSTANT
    combine_fn: Callable[[Pane], float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.combine, str):
            if self.combine not in COMBINERS:
                raise ValueError(
                    f"stage {self.name!r}: unknown combine {self.combine!r}; "
                    f"use one of {sorted(COMBINERS)} or a function"
                )
            fn = COMBINERS[self.combine]
        elif callable(self.combine):
            fn = self.combine
        else:
            raise TypeError(
                f"stage {self.name!r}: combine must be a name or a function, got {self.combine!r}"
            )
        object.__setattr__(self, "combine_fn", fn)
        if self.rekey not in (None, "global"):
            raise ValueError(
                f"stage {self.name!r}: rekey must be None or 'global', got {self.rekey!r}"
            )

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.input,)


StageSpec = Source | ParDo | Flatten | GroupByWindow


@dataclass(frozen=True)
class Pipeline:
    """An ordered collection of stage specs forming a DAG."""

    stages: tuple[StageSpec, ...]
    graph: StageGraph = field(init=False, repr=False)

    def __init__(self, stages: Sequence[StageSpec]) -> None:
        names = [s.name for s in stages]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise GraphError(f"stage names must be unique; repeated: {', '.join(dupes)}")
        object.__setattr__(self, "stages", tuple(stages))
        object.__setattr__(self, "graph", StageGraph({s.name: s.inputs for s in stages}))
        for s in stages:
            if isinstance(s, Source) != (not s.inputs):
                raise GraphError(f"stage {s.name!r}: only Source stages may have no inputs")

    def stage(self, name: str) -> StageSpec:
        """The spec named ``name``; GraphError names an unknown stage."""
        self.graph.check(name)
        return next(s for s in self.stages if s.name == name)

    def source_names(self) -> tuple[str, ...]:
        """Names of the Source stages."""
        return tuple(s.name for s in self.stages if isinstance(s, Source))
