"""The stage graph and its watermarks: input = min of upstream outputs, output = min(input, holds).

:class:`StageGraph` holds the structure: named stages and the edges between them, a DAG.
:class:`WatermarkTracker` is the incremental bookkeeping over that structure, one update at
a time. Every hold is a named component of a stage (see :class:`HoldKind`), so a stalled
output watermark can be traced to the component that holds it (:meth:`WatermarkTracker.why`).

All watermarks are event times in µs and are latched: ``new = max(old, computed)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from theory.columns import check_timestamp
from theory.structures import Frontier
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.latch import Latch


class HoldKind(Enum):
    """The four kinds of hold the book names for a stage's output watermark."""

    SOURCE = "source"
    EXTERNAL_INPUT = "external"
    STATE = "state"
    OUTPUT_BUFFER = "buffer"


def hold_name(kind: HoldKind, name: str) -> str:
    """The canonical name of a hold component, e.g. ``state:pending-windows``."""
    return f"{kind.value}:{name}"


_KINDS: dict[str, HoldKind] = {kind.value: kind for kind in HoldKind}


def hold_kind(component: str) -> HoldKind:
    """The :class:`HoldKind` of a canonical hold name; ValueError names a malformed one."""
    prefix, sep, rest = component.partition(":")
    if not sep or not rest:
        raise ValueError(f"hold component {component!r} is not of the form 'kind:name'")
    kind = _KINDS.get(prefix)
    if kind is None:
        kinds = ", ".join(_KINDS)
        raise ValueError(
            f"hold component {component!r} has unknown kind {prefix!r}; use one of {kinds}"
        )
    return kind


class GraphError(ValueError):
    """A malformed graph or a reference to a stage that does not exist."""


@dataclass(frozen=True)
class StageGraph:
    """A DAG of named stages. A stage with no inputs is a source.

    ``inputs`` maps each stage name to the names of its upstream stages, in order.
    """

    inputs: Mapping[str, tuple[str, ...]]
    order: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        for stage, ups in self.inputs.items():
            if not stage:
                raise GraphError("stage names must be non-empty")
            for up in ups:
                if up not in self.inputs:
                    raise GraphError(f"stage {stage!r} reads from unknown stage {up!r}")
            if len(set(ups)) != len(ups):
                raise GraphError(f"stage {stage!r} lists an input twice: {list(ups)}")
        object.__setattr__(self, "order", _topological_order(self.inputs))

    @staticmethod
    def from_edges(stages: Iterable[str], edges: Iterable[tuple[str, str]]) -> StageGraph:
        """Build from stage names and (upstream, downstream) edges."""
        inputs: dict[str, list[str]] = {}
        for s in stages:
            if s in inputs:
                raise GraphError(f"stage {s!r} is named twice")
            inputs[s] = []
        for up, down in edges:
            for name in (up, down):
                if name not in inputs:
                    raise GraphError(f"edge ({up!r} -> {down!r}) names unknown stage {name!r}")
            inputs[down].append(up)
        return StageGraph({k: tuple(v) for k, v in inputs.items()})

    def check(self, stage: str) -> str:
        """Return ``stage`` if it exists, else raise GraphError naming it and the known ones."""
        if stage not in self.inputs:
            known = ", ".join(sorted(self.inputs))
            raise GraphError(f"unknown stage {stage!r}; the graph has: {known}")
        return stage

    def upstream(self, stage: str) -> tuple[str, ...]:
        """The stages ``stage`` reads from."""
        return self.inputs[self.check(stage)]

    def downstream(self, stage: str) -> tuple[str, ...]:
        """The stages that read from ``stage``, in topological order."""
        self.check(stage)
        return tuple(s for s in self.order if stage in self.inputs[s])

    def sources(self) -> tuple[str, ...]:
        """The stages with no inputs, in topological order."""
        return tuple(s for s in self.order if not self.inputs[s])

    def edges(self) -> list[tuple[str, str]]:
        """All (upstream, downstream) pairs."""
        return [(up, s) for s in self.order for up in self.inputs[s]]


def _topological_order(inputs: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Kahn's algorithm, ties broken by insertion order; GraphError names a cycle's stages."""
    remaining = {s: len(ups) for s, ups in inputs.items()}
    readers: dict[str, list[str]] = {s: [] for s in inputs}
    for s, ups in inputs.items():
        for up in ups:
            readers[up].append(s)
    ready = [s for s in inputs if remaining[s] == 0]
    order: list[str] = []
    while ready:
        s = ready.pop(0)
        order.append(s)
        for r in readers[s]:
            remaining[r] -= 1
            if remaining[r] == 0:
                ready.append(r)
    if len(order) != len(inputs):
        cyclic = sorted(s for s in inputs if s not in order)
        raise GraphError(f"the stage graph has a cycle through: {', '.join(cyclic)}")
    return tuple(order)


@dataclass(frozen=True)
class Explanation:
    """Why a stage's output watermark has its value.

    ``component`` is ``"input"`` when the input watermark is the minimum, else the hold's
    name. ``chain`` follows the minimum upstream to the source or hold that set it, as
    (stage, component) pairs from ``stage`` outwards.
    """

    stage: str
    watermark: int
    component: str
    chain: tuple[tuple[str, str], ...]

    @property
    def culprit(self) -> tuple[str, str]:
        """The (stage, component) at the end of the chain: where the wait really is."""
        return self.chain[-1]


class _StageHolds:
    """One stage's named holds (µs): each component's value, and the frontier of the
    values, whose minimum holds the stage's output watermark (``MAX_TIMESTAMP``: none)."""

    __slots__ = ("frontier", "values")

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self.frontier = Frontier()

    def set(self, component: str, value: int | None) -> None:
        """Move (or, with ``None``, release) the hold ``component`` in one frontier step."""
        old = self.values.get(component)
        if old == value:
            return
        if value is None:  # a release (old is not None, since it differs)
            self.frontier.retract(old)  # type: ignore[arg-type]
            del self.values[component]
            return
        if old is None:
            self.frontier.add(value)
        else:
            self.frontier.move(old, value)
        self.values[component] = value

    def min(self) -> int:
        return self.frontier.min(default=MAX_TIMESTAMP)


class WatermarkTracker:
    """Incremental input/output watermarks over a :class:`StageGraph`.

    Sources get their input watermark from :meth:`set_source_watermark`; every stage may
    carry named holds (:meth:`set_hold`). After any change, watermarks are recomputed in
    topological order and latched. A hold of ``None`` is removed; a stage with no hold has
    output = input. Watermarks and holds are timestamps in µs (``TypeError`` for another
    type, ``ValueError`` outside ``[MIN_TIMESTAMP, MAX_TIMESTAMP]``).
    """

    def __init__(self, graph: StageGraph) -> None:
        self.graph = graph
        self._source: dict[str, int] = {s: MIN_TIMESTAMP for s in graph.sources()}
        self._holds: dict[str, _StageHolds] = {s: _StageHolds() for s in graph.order}
        self._input: dict[str, int] = {s: MIN_TIMESTAMP for s in graph.order}
        self._output: dict[str, int] = {s: MIN_TIMESTAMP for s in graph.order}
        self._output_latch: dict[str, Latch] = {s: Latch() for s in graph.order}
        self._source_regressions: dict[str, int] = {s: 0 for s in graph.sources()}

    @property
    def regressions(self) -> dict[str, int]:
        """Per stage, how often a computed watermark was below the latched one: a source's
        source watermark set lower than before (each time), plus the computed output
        (input and holds) below the latched output, counted when it is a new value
        (``Latch._latch_estimate``: an unrelated change that re-evaluates the same state
        does not count again)."""
        return {
            s: self._source_regressions.get(s, 0) + latch.regressions
            for s, latch in self._output_latch.items()
        }

    def set_source_watermark(self, source: str, watermark: int) -> None:
        """Set a source's source watermark (µs). A lower value than before is latched away."""
        self.apply(source_watermarks={source: watermark})

    def set_hold(self, stage: str, component: str, value: int | None) -> None:
        """Set (or, with ``None``, remove) the named hold ``component`` of ``stage`` (µs)."""
        self.apply(holds={(stage, component): value})

    def apply(
        self,
        source_watermarks: Mapping[str, int] | None = None,
        holds: Mapping[tuple[str, str], int | None] | None = None,
    ) -> None:
        """Apply many changes as one atomic step, then recompute once.

        Changes that happen at the same instant must be applied together: applying them
        one by one could latch an output watermark at a value it never really had (a
        hold released before its replacement is set). Every change is checked before any
        is made, so a bad one changes nothing.
        """
        sources = {
            self._check_source(s): check_timestamp(w, f"source watermark of {s!r}")
            for s, w in (source_watermarks or {}).items()
        }
        changes = [
            self._check_hold(stage, component, value)
            for (stage, component), value in (holds or {}).items()
        ]
        for source, watermark in sources.items():
            if watermark < self._source[source]:
                # A source watermark is monotonic: keep the old one, count the regression.
                self._source_regressions[source] += 1
            else:
                self._source[source] = watermark
        for stage, component, value in changes:
            self._holds[stage].set(component, value)
        self._refresh()

    def _check_source(self, source: str) -> str:
        if source not in self._source:
            self.graph.check(source)
            raise GraphError(
                f"stage {source!r} is not a source; it reads {self.graph.upstream(source)}"
            )
        return source

    def _check_hold(
        self, stage: str, component: str, value: int | None
    ) -> tuple[str, str, int | None]:
        hold_kind(component)
        self.graph.check(stage)
        if value is not None:
            value = check_timestamp(value, f"hold {component!r} of {stage!r}")
        return stage, component, value

    def holds(self, stage: str) -> dict[str, int]:
        """A copy of the stage's current holds."""
        return dict(self._holds[self.graph.check(stage)].values)

    def input_watermark(self, stage: str) -> int:
        """The stage's latched input watermark (µs)."""
        return self._input[self.graph.check(stage)]

    def output_watermark(self, stage: str) -> int:
        """The stage's latched output watermark (µs)."""
        return self._output[self.graph.check(stage)]

    def _refresh(self) -> None:
        for stage in self.graph.order:
            ups = self.graph.inputs[stage]
            computed_in = min(self._output[u] for u in ups) if ups else self._source[stage]
            self._input[stage] = max(self._input[stage], computed_in)
            computed_out = min(self._input[stage], self._holds[stage].min())
            # A hold below the latched output cannot pull it back: latched away, and
            # counted once per new value (the latch rule of theory.watermarks.latch).
            self._output[stage] = self._output_latch[stage]._latch_estimate(computed_out)

    def why(self, stage: str) -> Explanation:
        """Name the component that holds ``stage``'s output watermark, following the
        minimum upstream through input watermarks to the source or hold that sets it."""
        chain = hold_chain(
            self.graph.check(stage),
            self.graph.inputs.__getitem__,
            self._input.__getitem__,
            lambda s: self._holds[s].values,
            self._output.__getitem__,
        )
        return Explanation(stage, self._output[stage], chain[0][1], tuple(chain))


def hold_chain(
    stage: str,
    upstream: Callable[[str], tuple[str, ...]],
    input_watermark: Callable[[str], int],
    holds: Callable[[str], Mapping[str, int]],
    output_watermark: Callable[[str], int],
) -> list[tuple[str, str]]:
    """The (stage, component) chain that holds ``stage``'s output watermark (µs values).

    At each stage the component is its lowest hold (ties: the first name) if it is below
    the input watermark, else ``"input"``, which continues at the upstream stage with the
    lowest output watermark (ties: the first name); a source's input is
    ``source:watermark``. The chain ends at the first component that is not ``"input"``.
    """
    chain: list[tuple[str, str]] = []
    current = stage
    while True:
        component = "input"
        named = holds(current)
        if named:
            name, value = min(named.items(), key=lambda kv: (kv[1], kv[0]))
            if value < input_watermark(current):
                component = name
        ups = upstream(current)
        if component == "input" and not ups:
            component = hold_name(HoldKind.SOURCE, "watermark")
        chain.append((current, component))
        if component != "input":
            return chain
        current = min(ups, key=lambda u: (output_watermark(u), u))
