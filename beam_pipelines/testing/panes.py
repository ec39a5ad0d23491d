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

import tempfile
from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import (
    BundleBasedDirectRunner,
    SwitchingDirectRunner,
)

from beam_pipelines.beam_runner import quiet, run_and_wait
from beam_pipelines.construction_cache import cached_construction
from beam_pipelines.convert import beam_windowing, to_theory
from beam_pipelines.pane_files import PaneRow, WritePanes, format_micros, read_panes, sorted_values
from beam_pipelines.teststream import to_test_stream
from theory.time import MICROS_PER_MILLI, MICROS_PER_SECOND
from theory.windowing.runner import run_script
from theory.windowing.script import Event, ProcessingTimeEvent, Script
from theory.windowing.strategy import TimestampCombiner, WindowingStrategy

__all__ = ["PaneRow", "assert_panes", "check_beam_limits", "pane_diff"]


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
    script: Script,
    strategy: WindowingStrategy,
    combine: Callable[[list[Any]], Any] | None,
    whole_ms: bool = False,
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
                _whole_ms(int(p.timestamp)) if whole_ms else int(p.timestamp),
                p.timing.value,
                int(p.index),
                bool(p.is_first),
                bool(p.is_last),
                sorted_values(values) if combine is None else combine(values),
            )
        )
    return rows, bool(result.stalled)


def _whole_ms(micros: int) -> int:
    """``micros`` as Beam's timestamp coder carries it: floored to whole milliseconds."""
    return micros - micros % MICROS_PER_MILLI


def _in_process(runner: Any) -> bool:
    """Whether ``runner`` is one of Beam's direct runners, which pass elements between
    transforms without encoding them (exact µs timestamps)."""
    return runner is None or isinstance(runner, (BundleBasedDirectRunner, SwitchingDirectRunner))


def _beam_rows(
    transform: beam.PTransform,
    script: Script,
    strategy: WindowingStrategy,
    runner: Any,
    grouped: bool,
    timeout: float,
) -> tuple[list[PaneRow], bool]:
    options = PipelineOptions([], allow_unsafe_triggers=strategy.allow_unsafe_triggers)
    options.view_as(StandardOptions).streaming = True
    if runner is None:
        runner = BundleBasedDirectRunner()
    test_runner_api = strategy.timestamp_combiner is not (
        TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED
    )
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="assert-panes-") as directory:
        with quiet(), cached_construction():
            pipeline = beam.Pipeline(runner=runner, options=options)
            _ = (
                pipeline
                | "TestStream" >> to_test_stream(script)
                | "YourTransform" >> transform
                | "CapturePanes" >> WritePanes(directory, "panes", grouped)
            )
            stalled = run_and_wait(pipeline, timeout=timeout, test_runner_api=test_runner_api)
        rows = read_panes(directory, "panes", problems.append)
    if problems:
        raise AssertionError(f"assert_panes: {problems[0]}")
    return rows, stalled


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


def pane_diff(model: list[PaneRow], actual: list[PaneRow]) -> list[str]:
    """The lines telling ``model``'s panes from ``actual``'s, pane by pane (``- model``,
    ``+ beam``, matched panes indented), or how the panes of a window come in another
    order; empty when they agree."""
    only_model, only_beam = _diff(model, actual)
    lines: list[str] = []
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
                f"panes of key={w[0]} window=[{format_micros(w[1])}, {format_micros(w[2])}) "
                f"come in another order: model indexes {a[w]}, beam {b.get(w)}"
            )
    return lines


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
    order); on a difference, the ``AssertionError`` lists the panes pane by pane.

    ``runner`` may be any streaming runner, e.g. ``spark_backend.PySparkRunner()``:
    panes come back through files (:class:`~beam_pipelines.pane_files.WritePanes`). A
    runner other than Beam's direct runners encodes elements between stages, and Beam's
    timestamp coder keeps whole milliseconds, so the model's pane timestamps are then
    compared floored to whole milliseconds."""
    if not isinstance(transform, beam.PTransform):
        raise TypeError(f"transform must be a Beam PTransform, got {transform!r}")
    if not isinstance(script, Script):
        script = Script(list(script))
    if not isinstance(strategy, WindowingStrategy):
        strategy = to_theory(strategy)
    if combine is not None and not callable(combine):
        raise TypeError(f"combine must be a function of a pane's values, got {combine!r}")
    check_beam_limits(script, strategy)
    model, model_stalled = _model_rows(script, strategy, combine, not _in_process(runner))
    actual, beam_stalled = _beam_rows(transform, script, strategy, runner, combine is None, timeout)
    lines = pane_diff(model, actual)
    if model_stalled != beam_stalled:
        lines.append(
            f"pipeline stall: model {model_stalled}, beam {beam_stalled} (an output "
            "watermark that never reaches the end of time)"
        )
    if lines:
        raise AssertionError("assert_panes: Beam and the model differ\n" + "\n".join(lines))
    return actual
