"""The ``test_stream`` fixture's builder: Beam ``TestStream``s from scripts, traces, or
event by event, with times as µs ints, ``timedelta``s or strings (``"10s"``)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np
from apache_beam.testing import test_stream as ts

from beam_pipelines.teststream import WatermarkSpecs, from_trace, to_test_stream, trace_script
from theory.columns import DurationLike, as_duration, as_offset
from theory.data.trace import Trace
from theory.watermarks.spec import SourceWatermarkSpec
from theory.windowing.script import ElementEvent, Event, ProcessingTimeEvent, Script, WatermarkEvent

__all__ = ["TestStreamBuilder"]


class TestStreamBuilder:
    """Builds TestStreams; elements are ``(key, value)`` pairs at event-time timestamps.

    ``from_script(script)`` and ``from_trace(trace, "bounded:5s", tags=...)`` return a
    ``TestStream`` at once. Event by event, ``elements([(key, value, "12s"), ...])``,
    ``watermark("10s")`` and ``advance("1s")`` (processing time) chain, and ``build()``
    returns the TestStream; ``script()`` returns the same events as a theory script (for
    ``theory.run_script`` or ``assert_panes``).
    """

    __test__ = False  # not a test class, whatever pytest's name rules say

    def __init__(self) -> None:
        self._events: list[Event] = []

    def elements(self, elements: Iterable[tuple[Hashable, Any, DurationLike]]) -> TestStreamBuilder:
        """Add elements ``(key, value, timestamp)`` arriving together."""
        rows = []
        for i, element in enumerate(elements):
            if not isinstance(element, tuple) or len(element) != 3:
                raise ValueError(f"elements[{i}] must be (key, value, timestamp), got {element!r}")
            key, value, t = element
            rows.append((key, value, as_offset(t, f"elements[{i}] timestamp")))
        self._events.append(ElementEvent(rows))
        return self

    def watermark(self, to: DurationLike) -> TestStreamBuilder:
        """Advance the watermark to ``to`` (event time)."""
        self._events.append(WatermarkEvent(as_offset(to, "watermark")))
        return self

    def advance(self, by: DurationLike) -> TestStreamBuilder:
        """Advance processing time by ``by``."""
        self._events.append(ProcessingTimeEvent(as_duration(by, "advance")))
        return self

    def script(self) -> Script:
        """The events so far as a theory script."""
        return Script(list(self._events))

    def build(self) -> ts.TestStream:
        """The events so far as a Beam TestStream (Beam's limits checked, see
        :mod:`beam_pipelines.teststream`)."""
        return to_test_stream(self.script())

    @staticmethod
    def from_script(script: Script | Iterable[Event]) -> ts.TestStream:
        """The TestStream of a theory script."""
        return to_test_stream(script)

    @staticmethod
    def from_trace(
        trace: Trace,
        source_watermark: WatermarkSpecs = "perfect",
        tags: Sequence[Hashable] | np.ndarray | None = None,
    ) -> ts.TestStream:
        """The TestStream replaying ``trace`` (see :func:`beam_pipelines.teststream.from_trace`)."""
        return from_trace(trace, source_watermark, tags)

    @staticmethod
    def script_of_trace(
        trace: Trace, source_watermark: str | SourceWatermarkSpec = "perfect"
    ) -> Script:
        """The theory script replaying ``trace`` (what :meth:`from_trace` emits untagged)."""
        return trace_script(trace, source_watermark)
