"""``assert_pipeline``: run a whole pipeline and check every grouping stage in it against
theory's engine.

The pipeline is yours: a PTransform (or a function) applied to a TestStream's
PCollection of ``(key, value)`` elements, made from a script or from a trace under a
source watermark. It may filter, map, read side inputs and branch; every ``GroupByKey``
and ``CombinePerKey`` in it is a stage (:mod:`.stages`). For each stage the run records
its actual input and the input watermark it saw after each TestStream event:

- on Beam's ``BundleBasedDirectRunner`` (the default) from the runner's own watermark
  manager (:mod:`beam_pipelines.tracing`, which knows its Beam versions and fails loudly
  on another), read at the stage's ``GroupByWindow``;
- on a runner whose result has ``watermarks()`` (PySparkRunner ``--streaming``), from
  that record, per micro-batch (one TestStream event each).

The watermark is never derived from the script: a side input's pushback, or an upstream
hold, makes a stage's input watermark lag the source's. Processing time is the test
clock, which only the TestStream's processing-time events move. The engine runs each
stage's input, step by step (the clock step, then the elements, then the watermark),
under the stage's windowing as the pipeline declares it (:func:`beam_pipelines.convert.to_theory`
of its input PCollection's windowing); a Combine's panes are the engine's values through
the same ``CombineFn``. Panes compare as in :func:`~beam_pipelines.testing.assert_panes`
(key, window, timestamp, timing, index, first, last, value; on a runner that encodes
elements, timestamps at whole milliseconds). A difference names the stage and lists its
panes, pane by pane.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

from beam_pipelines.beam_runner import _is_stall, quiet
from beam_pipelines.construction_cache import cached_construction
from beam_pipelines.convert import to_theory
from beam_pipelines.pane_files import PaneRow, read_panes
from beam_pipelines.testing.panes import _in_process, _model_rows, pane_diff
from beam_pipelines.testing.stages import Stage, grouping_stages, read_inputs, record, tracing_run
from beam_pipelines.teststream import to_test_stream, trace_script
from beam_pipelines.tracing import WatermarkTrace, trace_watermarks
from theory.data.trace import Trace
from theory.time import END_OF_GLOBAL_WINDOW, MIN_TIMESTAMP
from theory.windowing.script import ElementEvent, Event, ProcessingTimeEvent, Script, WatermarkEvent
from theory.windowing.strategy import WindowingStrategy

__all__ = ["assert_pipeline", "stage_script"]


def stage_script(
    source: Script,
    arrivals: list[tuple[int, Any, Any, int]],
    watermarks: list[int],
) -> Script:
    """The script a stage saw: after TestStream event ``u`` (``u`` < ``len(source)``),
    the clock step of event ``u`` (if it is one), the ``arrivals`` ``(step, key, value,
    timestamp µs)`` of step ``u``, then the stage's input watermark ``watermarks[u]``
    (when it moved and is below the end of the global window). Arrivals of a later step
    (after the last event) come last."""
    events: list[Event] = []
    by_step: dict[int, list[tuple[Any, Any, int]]] = {}
    for step, key, value, micros in arrivals:
        by_step.setdefault(step, []).append((key, value, micros))
    previous = MIN_TIMESTAMP
    n = len(source.events)
    for u, event in enumerate(source.events):
        if isinstance(event, ProcessingTimeEvent):
            events.append(ProcessingTimeEvent(event.delta))
        if by_step.get(u):
            events.append(ElementEvent(by_step[u]))
        mark = watermarks[u]
        if previous < mark < END_OF_GLOBAL_WINDOW:
            events.append(WatermarkEvent(mark))
            previous = mark
    late = [row for step in sorted(by_step) if step >= n for row in by_step[step]]
    if late:
        events.append(ElementEvent(late))
    return Script(events)


def _source(source: Script | Trace | Iterable[Event], source_watermark: str) -> Script:
    if isinstance(source, Script):
        return source
    if isinstance(source, Trace):
        return trace_script(source, source_watermark)
    return Script(list(source))


def _run(pipeline: beam.Pipeline, timeout: float) -> Any:
    """Run and wait at most ``timeout`` s; the result (a stall is no error here: the
    stages' panes are compared all the same)."""
    result = pipeline.run()
    box: list[BaseException] = []

    def wait() -> None:
        try:
            result.wait_until_finish()
        except BaseException as e:  # handed to the caller's thread
            box.append(e)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(timeout)
    if waiter.is_alive():
        result.cancel()
        raise TimeoutError(f"assert_pipeline: the pipeline did not finish within {timeout} s")
    if box and not _is_stall(box[0]):
        raise box[0]
    return result


def _direct_watermarks(trace: WatermarkTrace, stage: Stage, n: int) -> list[int]:
    label = next(
        (
            name
            for name in trace.snapshots[-1]
            if name.startswith(stage.label + "/") and name.endswith("/GroupByWindow")
        ),
        None,
    )
    if label is None:
        raise RuntimeError(f"assert_pipeline: no GroupByWindow traced for stage {stage.label!r}")
    return [marks[0] for marks in trace.after_each_event(label, n)]


def _batch_watermarks(result: Any, stage: Stage, n: int) -> list[int]:
    """The stage's input watermark after each batch: batch ``u`` is TestStream event
    ``u``, and one last batch ends the stream (``RuntimeError`` for another count)."""
    batches = getattr(result, "batches", n + 1)
    if batches != n + 1:
        raise RuntimeError(
            f"assert_pipeline: the run took {batches} micro-batches for {n} TestStream "
            "events; it reads one batch per event and one to end the stream"
        )
    table = result.watermarks(per_batch=True)
    label = next(
        (name for name in table if name == stage.label or name.startswith(stage.label + "/")),
        None,
    )
    if label is None:
        raise RuntimeError(f"assert_pipeline: the run shows no watermark for stage {stage.label!r}")
    series = table[label]["input"]
    return [int(v) for v in series.at(np.arange(n, dtype=np.int64))]


def _strategy(stage: Stage) -> WindowingStrategy:
    """The stage's windowing as theory's; ``ValueError`` naming the stage when theory has
    no counterpart (e.g. the continuation trigger Beam gives a grouping fed by another)."""
    try:
        return to_theory(stage.input.windowing, allow_unsafe_triggers=True)
    except (TypeError, ValueError) as err:
        raise ValueError(f"assert_pipeline: stage {stage.label!r}: {err}") from None


def _observe(
    pipeline: beam.PTransform | Callable[[Any], Any], script: Script, runner: Any, timeout: float
) -> list[tuple[Stage, WindowingStrategy, Script, list[PaneRow]]]:
    """Build and run the pipeline with its stages recorded: per stage, its windowing, the
    script it saw and its panes."""
    stream = to_test_stream(script)  # checks Beam's limits: whole-ms times
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    beam_pipeline = beam.Pipeline(
        runner=BundleBasedDirectRunner() if runner is None else runner, options=options
    )
    events = beam_pipeline | "TestStream" >> stream
    _ = events | pipeline if isinstance(pipeline, beam.PTransform) else pipeline(events)
    stages = grouping_stages(beam_pipeline)
    if not stages:
        raise ValueError("assert_pipeline: the pipeline has no GroupByKey or CombinePerKey")
    strategies = [_strategy(s) for s in stages]
    n = len(script.events)
    with tempfile.TemporaryDirectory(prefix="assert-pipeline-") as directory, quiet():
        if _in_process(runner):
            with (
                trace_watermarks() as trace,
                tracing_run(lambda: len(trace.snapshots) - trace.set_up - 1) as run_id,
            ):
                record(stages, directory, run_id)
                _run(beam_pipeline, timeout)
            marks = [_direct_watermarks(trace, s, n) for s in stages]
        else:
            record(stages, directory, None)
            result = _run(beam_pipeline, timeout)
            marks = [_batch_watermarks(result, s, n) for s in stages]
        problems: list[str] = []
        seen = []
        for i, (stage, strategy) in enumerate(zip(stages, strategies, strict=True)):
            folder = f"{directory}/{stage.folder(i)}"
            arrivals = read_inputs(folder)
            actual = read_panes(folder, "out", problems.append)
            seen.append((stage, strategy, stage_script(script, arrivals, marks[i]), actual))
    if problems:
        raise AssertionError(f"assert_pipeline: {problems[0]}")
    return seen


def assert_pipeline(
    pipeline: beam.PTransform | Callable[[Any], Any],
    source: Script | Trace | Iterable[Event],
    *,
    source_watermark: str = "perfect",
    runner: Any = None,
    timeout: float = 120.0,
) -> dict[str, list[PaneRow]]:
    """Run ``pipeline`` (a PTransform, or a function of a PCollection) on a TestStream of
    ``source`` (a script, or a trace replayed under ``source_watermark``), streaming on
    ``runner`` (by default a ``BundleBasedDirectRunner``), and assert that every grouping
    stage's panes equal theory's engine's fed that stage's input and input watermark
    (module docstring). Returns each stage's panes by its full label; an
    ``AssertionError`` names each stage that differs, with its pane diff. Assertions in
    the pipeline (``expect_panes``, ``assert_that``) fail the run as usual."""
    if not isinstance(pipeline, beam.PTransform) and not callable(pipeline):
        raise TypeError(f"pipeline must be a PTransform or a function, got {pipeline!r}")
    script = _source(source, source_watermark)
    with cached_construction():
        seen = _observe(pipeline, script, runner, timeout)
    failures = []
    out: dict[str, list[PaneRow]] = {}
    for stage, strategy, seen_script, actual in seen:
        model, _ = _model_rows(seen_script, strategy, stage.combine, not _in_process(runner))
        lines = pane_diff(model, actual)
        if lines:
            failures.append(f"stage {stage.label!r} differs from the model:\n" + "\n".join(lines))
        out[stage.label] = actual
    if failures:
        raise AssertionError("assert_pipeline: " + "\n".join(failures))
    return out
