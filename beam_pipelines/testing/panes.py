"""``assert_panes``: run *your* PTransform on a TestStream and compare every output pane
with theory's engine.

The transform receives the TestStream's PCollection of ``(key, value)`` elements at the
script's timestamps; it applies its own windowing and ends in a ``GroupByKey`` or a
``Combine``, so it outputs one ``(key, result)`` per pane. ``strategy`` is the windowing
it applies (a theory ``WindowingStrategy``, or a ``beam.WindowInto`` / ``Windowing``,
converted by :func:`beam_pipelines.convert.to_theory`); the engine runs the same script
under it and maps each pane's values through ``combine`` (default: the sorted list of
values, which is what a ``GroupByKey``'s iterable is compared as).

Compared for each pane: key, window, timestamp, timing, index, first and last, and the
value; also the order of each (key, window)'s panes and whether the pipeline stalls.
Beam's limits are checked first, each with a ``ValueError`` naming the event: whole
milliseconds for timestamps and watermarks, whole seconds for processing-time steps and
``AfterProcessingTime`` delays (Beam's test clock carries float seconds), lateness in
whole milliseconds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.transforms import window as bw
from apache_beam.utils.windowed_value import PaneInfoTiming

from beam_pipelines.beam_runner import quiet, run_and_wait
from beam_pipelines.convert import beam_windowing, to_theory
from beam_pipelines.teststream import to_test_stream
from theory.time import MAX_TIMESTAMP, MICROS_PER_SECOND, MIN_TIMESTAMP, format_timestamp
from theory.windowing.runner import run_script
from theory.windowing.script import Event, ProcessingTimeEvent, Script
from theory.windowing.strategy import TimestampCombiner, WindowingStrategy
from theory.windowing.windows import GLOBAL_WINDOW

__all__ = ["PaneRow", "assert_panes", "check_beam_limits"]

#: Where the capturing DoFn puts each run's panes (the direct runner runs in-process).
_SINK: dict[str, list[PaneRow | str]] = {}


@dataclass(frozen=True)
class PaneRow:
    """One pane as compared: window ``[start, end)`` and timestamp in µs."""

    key: Hashable
    start: int
    end: int
    timestamp: int
    timing: str
    index: int
    is_first: bool
    is_last: bool
    value: Any

    def where(self) -> tuple[str, int, int]:
        return (repr(self.key), self.start, self.end)

    def line(self) -> str:
        return (
            f"key={self.key!r} window=[{_t(self.start)}, {_t(self.end)}) "
            f"timestamp={_t(self.timestamp)} {self.timing} index={self.index} "
            f"first={self.is_first} last={self.is_last} value={self.value!r}"
        )


def _t(micros: int) -> str:
    """µs as seconds (``12.5s``) near the epoch, else ISO-8601; ``±inf`` at the ends."""
    if micros <= MIN_TIMESTAMP or micros >= MAX_TIMESTAMP:
        return format_timestamp(micros)
    if abs(micros) < 10**6 * 86_400 * 365:
        seconds = f"{micros / MICROS_PER_SECOND:.6f}".rstrip("0").rstrip(".")
        return f"{seconds}s"
    return format_timestamp(micros)


def _sorted_values(values: Iterable[Any]) -> list[Any]:
    items = list(values)
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=repr)


class _Capture(beam.DoFn):
    """Appends each output pane to ``_SINK[run_id]``."""

    def __init__(self, run_id: str, grouped: bool) -> None:
        self.run_id = run_id
        self.grouped = grouped

    def process(
        self,
        element: Any,
        window: Any = beam.DoFn.WindowParam,
        timestamp: Any = beam.DoFn.TimestampParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[None]:
        sink = _SINK.get(self.run_id)
        if sink is None:
            return iter(())
        if not isinstance(element, tuple) or len(element) != 2:
            sink.append(f"the transform output {element!r}, not a (key, value) pair")
            return iter(())
        key, value = element
        if isinstance(window, bw.GlobalWindow):
            start, end = GLOBAL_WINDOW.start, GLOBAL_WINDOW.end
        else:
            start, end = int(window.start.micros), int(window.end.micros)
        sink.append(
            PaneRow(
                key,
                start,
                end,
                int(timestamp.micros),
                PaneInfoTiming.to_string(pane.timing),
                int(pane.index),
                bool(pane.is_first),
                bool(pane.is_last),
                _sorted_values(value) if self.grouped else value,
            )
        )
        return iter(())


def check_beam_limits(script: Script, strategy: WindowingStrategy) -> None:
    """``ValueError`` naming the first thing Beam cannot run exactly (module docstring)."""
    for i, ev in enumerate(script.events):
        if isinstance(ev, ProcessingTimeEvent) and ev.delta % MICROS_PER_SECOND:
            raise ValueError(
                f"events[{i}]: processing-time step of {ev.delta} µs is not whole seconds; "
                "Beam's test clock hands triggers float seconds, which can land 1 µs off"
            )
    beam_windowing(strategy)  # whole-second trigger delays, whole-ms lateness, Beam policies
    to_test_stream(script)  # whole-ms timestamps and watermarks


def _model_rows(
    script: Script, strategy: WindowingStrategy, combine: Callable[[list[Any]], Any] | None
) -> tuple[list[PaneRow], bool]:
    result = run_script(script, strategy)
    rows = []
    for p in result.panes:
        values = list(p.values)
        rows.append(
            PaneRow(
                p.key,
                int(p.window.start),
                int(p.window.end),
                int(p.timestamp),
                p.timing.value,
                int(p.index),
                bool(p.is_first),
                bool(p.is_last),
                _sorted_values(values) if combine is None else combine(values),
            )
        )
    return rows, bool(result.stalled)


def _beam_rows(
    transform: beam.PTransform,
    script: Script,
    strategy: WindowingStrategy,
    runner: Any,
    grouped: bool,
    timeout: float,
) -> tuple[list[PaneRow], bool]:
    run_id = uuid.uuid4().hex
    _SINK[run_id] = []
    options = PipelineOptions([], allow_unsafe_triggers=strategy.allow_unsafe_triggers)
    options.view_as(StandardOptions).streaming = True
    if runner is None:
        runner = BundleBasedDirectRunner()
    test_runner_api = strategy.timestamp_combiner is not (
        TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED
    )
    try:
        with quiet():
            pipeline = beam.Pipeline(runner=runner, options=options)
            _ = (
                pipeline
                | "TestStream" >> to_test_stream(script)
                | "YourTransform" >> transform
                | "CapturePanes" >> beam.ParDo(_Capture(run_id, grouped))
            )
            stalled = run_and_wait(pipeline, timeout=timeout, test_runner_api=test_runner_api)
    finally:
        captured = _SINK.pop(run_id, [])
    problems = [c for c in captured if isinstance(c, str)]
    if problems:
        raise AssertionError(f"assert_panes: {problems[0]}")
    return [c for c in captured if isinstance(c, PaneRow)], stalled


def _diff(model: list[PaneRow], actual: list[PaneRow]) -> tuple[list[PaneRow], list[PaneRow]]:
    """(model only, beam only), as multisets compared with ``==``."""
    rest = list(actual)
    only_model = []
    for row in model:
        for j, other in enumerate(rest):
            if other == row:
                del rest[j]
                break
        else:
            only_model.append(row)
    return only_model, rest


def _order(rows: list[PaneRow]) -> dict[tuple[str, int, int], list[int]]:
    out: dict[tuple[str, int, int], list[int]] = {}
    for row in rows:
        out.setdefault(row.where(), []).append(row.index)
    return out


def assert_panes(
    transform: beam.PTransform,
    script: Script | Iterable[Event],
    strategy: Any,
    *,
    combine: Callable[[list[Any]], Any] | None = None,
    runner: Any = None,
    timeout: float = 120.0,
) -> list[PaneRow]:
    """Run ``transform`` on a TestStream of ``script`` (streaming, on ``runner``, by
    default a ``BundleBasedDirectRunner``) and assert its panes equal theory's engine's
    under ``strategy`` (see the module docstring). Returns the panes (in Beam's output
    order); on a difference, the ``AssertionError`` lists the panes pane by pane."""
    if not isinstance(transform, beam.PTransform):
        raise TypeError(f"transform must be a Beam PTransform, got {transform!r}")
    if not isinstance(script, Script):
        script = Script(list(script))
    if not isinstance(strategy, WindowingStrategy):
        strategy = to_theory(strategy)
    if combine is not None and not callable(combine):
        raise TypeError(f"combine must be a function of a pane's values, got {combine!r}")
    check_beam_limits(script, strategy)
    model, model_stalled = _model_rows(script, strategy, combine)
    actual, beam_stalled = _beam_rows(transform, script, strategy, runner, combine is None, timeout)
    only_model, only_beam = _diff(model, actual)
    lines = []
    if only_model or only_beam:
        lines.append(
            f"{len(only_model)} model pane(s) not produced and {len(only_beam)} Beam pane(s) "
            f"not predicted (of {len(model)} predicted, {len(actual)} produced):"
        )
        matched = [r for r in model if r not in only_model]
        ordered = sorted(
            [(0, "  ", r) for r in matched]
            + [(1, "- model ", r) for r in only_model]
            + [(2, "+ beam  ", r) for r in only_beam],
            key=lambda x: (x[2].where(), x[2].index, x[0]),
        )
        lines += [f"  {mark}{row.line()}" for _, mark, row in ordered]
    else:
        a, b = _order(model), _order(actual)
        wrong = [w for w in a if a[w] != b.get(w)]
        for w in wrong[:3]:
            lines.append(
                f"panes of key={w[0]} window=[{_t(w[1])}, {_t(w[2])}) come in another order: "
                f"model indexes {a[w]}, beam {b.get(w)}"
            )
    if model_stalled != beam_stalled:
        lines.append(
            f"pipeline stall: model {model_stalled}, beam {beam_stalled} (an output "
            "watermark that never reaches the end of time)"
        )
    if lines:
        raise AssertionError("assert_panes: Beam and the model differ\n" + "\n".join(lines))
    return actual
