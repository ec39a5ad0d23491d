"""``expect_panes``: the panes a grouped PCollection must hold, written as people read them.

Inside a pipeline, as Beam's ``assert_that``, on any runner::

    expect_panes(counts, [
        ("alice", "[0s, 1m)", "EARLY", 2),
        ("alice", "[0s, 1m)", "ON_TIME", 3),
        ("bob", "[1m, 2m)", "ON_TIME", [4, 7]),     # a GroupByKey's values, any order
    ])

Each expected pane is ``(key, window, timing, value)``: the window as ``"[start, end)"``
or a pair, its ends as durations from the epoch (``"90s"``, ``"1m"``, ``"1500ms"``, µs
as an int); the timing by name (``EARLY``, ``ON_TIME``, ``LATE``, ``UNKNOWN``); the value
as the transform outputs it (a list stands for a GroupByKey's iterable, compared
sorted). The panes of one key and window must come in the order written (their pane
indexes). A mismatch fails the pipeline with both lists of panes, line by line.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.testing.util import BeamAssertException, assert_that
from apache_beam.transforms import window as bw
from apache_beam.utils.windowed_value import PaneInfoTiming

from beam_pipelines.pane_files import format_micros, sorted_values
from theory.time import END_OF_GLOBAL_WINDOW, MIN_TIMESTAMP, parse_duration

__all__ = ["ExpectedPane", "expect_panes", "expected_panes"]

_TIMINGS = ("EARLY", "ON_TIME", "LATE", "UNKNOWN")
_WINDOW = re.compile(r"\[\s*([^,\s]+)\s*,\s*([^)\s]+)\s*\)")


class ExpectedPane(NamedTuple):
    """One pane: key, window ``[start, end)`` in µs, timing name, pane index, value."""

    key: Hashable
    start: int
    end: int
    timing: str
    pane_index: int
    value: Any

    def line(self) -> str:
        return (
            f"key={self.key!r} window=[{format_micros(self.start)}, {format_micros(self.end)}) "
            f"{self.timing} index={self.pane_index} value={self.value!r}"
        )


def _micros(text: Any, where: str) -> int:
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    try:
        return parse_duration(str(text))
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _window(window: Any, where: str) -> tuple[int, int]:
    if isinstance(window, str):
        found = _WINDOW.fullmatch(window.strip())
        if found is None:
            raise ValueError(f"{where}: window {window!r} is not of the form '[start, end)'")
        ends: Sequence[Any] = found.groups()
    elif isinstance(window, (tuple, list)) and len(window) == 2:
        ends = window
    else:
        raise ValueError(f"{where}: window {window!r} is not '[start, end)' or a pair")
    start, end = _micros(ends[0], where), _micros(ends[1], where)
    if end <= start:
        raise ValueError(f"{where}: window {window!r} ends before it starts")
    return start, end


def _value(value: Any) -> Any:
    return sorted_values(list(value)) if isinstance(value, list) else value


def expected_panes(expected: Iterable[Sequence[Any]]) -> list[ExpectedPane]:
    """The written panes (module docstring) as :class:`ExpectedPane`, each (key, window)'s
    indexes in the order written; ``ValueError`` names the first bad entry."""
    out: list[ExpectedPane] = []
    seen: dict[tuple[str, int, int], int] = {}
    for i, entry in enumerate(expected):
        where = f"expected[{i}]"
        if not isinstance(entry, (tuple, list)) or len(entry) != 4:
            raise ValueError(f"{where}: expected (key, window, timing, value), got {entry!r}")
        key, window, timing, value = entry
        start, end = _window(window, where)
        if timing not in _TIMINGS:
            raise ValueError(f"{where}: timing {timing!r} is not one of {', '.join(_TIMINGS)}")
        place = (repr(key), start, end)
        index = seen.get(place, 0)
        seen[place] = index + 1
        out.append(ExpectedPane(key, start, end, timing, index, _value(value)))
    return out


class _Observe(beam.DoFn):
    """Each ``(key, value)`` pane as the fields of an :class:`ExpectedPane`."""

    def process(
        self,
        element: Any,
        window: Any = beam.DoFn.WindowParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[tuple[Any, ...]]:
        key, value = element
        if isinstance(window, bw.IntervalWindow):
            start, end = int(window.start.micros), int(window.end.micros)
        else:
            start, end = MIN_TIMESTAMP, END_OF_GLOBAL_WINDOW
        if not isinstance(value, (str, bytes)) and hasattr(value, "__iter__"):
            value = list(value)
        timing = PaneInfoTiming.to_string(pane.timing)
        # a plain tuple: Beam would give a NamedTuple a schema coder
        yield (key, start, end, timing, int(pane.index), _value(value))


def _matcher(expected: list[ExpectedPane]) -> Any:
    def match(observed: list[tuple[Any, ...]]) -> None:
        actual = [ExpectedPane(*a) for a in observed]
        rest = list(actual)
        missing = []
        for pane in expected:
            if pane in rest:
                rest.remove(pane)
            else:
                missing.append(pane)
        if missing or rest:
            lines = [
                f"expect_panes: {len(missing)} expected pane(s) missing, "
                f"{len(rest)} pane(s) not expected (of {len(expected)} expected, "
                f"{len(actual)} produced):",
                *(f"  - expected {p.line()}" for p in missing),
                *(f"  + produced {p.line()}" for p in rest),
            ]
            raise BeamAssertException("\n".join(lines))

    return match


def expect_panes(pcoll: Any, expected: Iterable[Sequence[Any]], label: str = "ExpectPanes") -> None:
    """Assert, when the pipeline runs, that ``pcoll`` (``(key, value)`` panes of a
    GroupByKey or Combine) holds exactly the ``expected`` panes (module docstring)."""
    wanted = expected_panes(expected)
    observed = (
        pcoll
        | f"{label}/Observe" >> beam.ParDo(_Observe())
        | f"{label}/Global" >> beam.WindowInto(bw.GlobalWindows())
    )
    assert_that(observed, _matcher(wanted), label=f"{label}/Match")
