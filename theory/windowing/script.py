"""TestStream-like scripts: the events that drive a grouping stage, in order, and what
running one gives.

A script is a list of :class:`ElementEvent`, :class:`WatermarkEvent` and
:class:`ProcessingTimeEvent`. It is the common language between the theory engine and
Beam's ``TestStream`` (see ``beam_pipelines.teststream``). :class:`ScriptResult` is the
outcome of :func:`theory.windowing.runner.run_script`. All times are µs.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from theory.columns import check_duration, check_timestamp
from theory.time import MAX_TIMESTAMP

if TYPE_CHECKING:  # the engine imports this module
    from theory.windowing.engine import Pane
    from theory.windowing.pane_columns import PaneColumns

__all__ = [
    "ElementEvent",
    "Event",
    "ProcessingTimeEvent",
    "Script",
    "ScriptResult",
    "WatermarkEvent",
]


@dataclass(frozen=True)
class ElementEvent:
    """Elements ``(key, value, timestamp µs)`` arriving together (one TestStream event)."""

    elements: tuple[tuple[Hashable, Any, int], ...]

    def __init__(self, elements: Sequence[tuple[Hashable, Any, int]]) -> None:
        checked = []
        for i, element in enumerate(elements):
            if not isinstance(element, (tuple, list)):
                raise TypeError(
                    f"elements[{i}] must be a (key, value, timestamp) tuple, got {element!r}"
                )
            if len(element) != 3:
                raise ValueError(f"elements[{i}] must be (key, value, timestamp), got {element!r}")
            key, value, ts = element
            checked.append((key, value, check_timestamp(ts, f"elements[{i}] timestamp")))
        object.__setattr__(self, "elements", tuple(checked))


@dataclass(frozen=True)
class WatermarkEvent:
    """The input watermark advances to ``watermark`` µs."""

    watermark: int

    def __post_init__(self) -> None:
        check_timestamp(self.watermark, "watermark")


@dataclass(frozen=True)
class ProcessingTimeEvent:
    """Processing time advances by ``delta`` µs."""

    delta: int

    def __post_init__(self) -> None:
        check_duration(self.delta, "delta")


Event = ElementEvent | WatermarkEvent | ProcessingTimeEvent


@dataclass(frozen=True)
class Script:
    """A validated script: watermarks never move backwards."""

    events: tuple[Event, ...] = field(default_factory=tuple)

    def __init__(self, events: Sequence[Event]) -> None:
        wm = None
        for i, event in enumerate(events):
            if not isinstance(event, (ElementEvent, WatermarkEvent, ProcessingTimeEvent)):
                raise TypeError(f"events[{i}] is not a script event: {event!r}")
            if isinstance(event, WatermarkEvent):
                if wm is not None and event.watermark < wm:
                    raise ValueError(
                        f"events[{i}]: watermark moves backwards from {wm} to {event.watermark} µs"
                    )
                wm = event.watermark
        object.__setattr__(self, "events", tuple(events))

    def elements(self) -> list[tuple[Hashable, Any, int]]:
        """All elements of the script, in order."""
        return [e for ev in self.events if isinstance(ev, ElementEvent) for e in ev.elements]

    def ends_at_infinity(self) -> bool:
        """Whether the last watermark event is ``MAX_TIMESTAMP``."""
        marks = [e for e in self.events if isinstance(e, WatermarkEvent)]
        return bool(marks) and marks[-1].watermark >= MAX_TIMESTAMP


@dataclass(frozen=True)
class ScriptResult:
    """Panes and watermarks of a script run: ``panes[i]`` fired at event ``pane_event[i]``;
    the watermark arrays have one entry per event (after it), µs. The vectorised paths
    give ``panes`` as a :class:`~theory.windowing.pane_columns.PaneSequence` (equal to the
    list; tuples built on first access)."""

    panes: Sequence[Pane]
    pane_event: np.ndarray
    processing_time: np.ndarray
    input_watermark: np.ndarray
    output_watermark: np.ndarray
    dropped: dict[str, int] = field(default_factory=dict)
    late_elements: int = 0
    #: Output watermark below MAX_TIMESTAMP after the end (Beam: "pipeline stall").
    stalled: bool = False
    #: Processing-time timers still set at the end (with ``stalled``, Beam never finishes).
    pending_processing_timers: int = 0
    #: The state hold after each event (µs): the smallest window hold - 1 µs, as the
    #: runner holds the output watermark; ``MAX_TIMESTAMP`` without holds.
    state_hold: np.ndarray | None = None
    #: The panes as columns (the vectorised paths'; ``panes`` may then be left empty).
    pane_columns: PaneColumns | None = None
    #: Which path ran the script: "vectorised", "incremental" (see ``refusal``), or
    #: "mixed" (sessions with late data on the engine, the others vectorised).
    path: str = "incremental"
    #: Why the vectorised path did not run it (a ``fast_path.Refusal`` text), if it did not.
    refusal: str | None = None
