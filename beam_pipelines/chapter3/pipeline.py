"""The *Streaming Systems* chapter-3 pipeline as Beam transforms.

Exactly the pipeline :func:`theory.pipeline.chapter3.pipeline` simulates (its windowing
strategies are taken from there and converted by :func:`beam_pipelines.convert.to_beam`)::

    mobile_in  -> mobile_sessions  --\\
                                      flatten -> average_session_length
    console_in -> console_sessions --/

- ``*_sessions`` (:class:`SessionLengths`): per user, session windows (gap 1 min) fired
  at the watermark, discarding; each pane becomes ``(user, session length in s)``.
- ``average_session_length`` (:class:`MeanPerWindow`): fixed 2-minute windows fired at
  the watermark; each pane becomes ``(None, mean of the session lengths)`` (``math.fsum``
  over the pane's values divided by their count, theory's ``mean``).

The sources come from a trace split by platform: in batch, one ``Create`` per platform
(:func:`batch_sources`); in streaming, one ``TestStream`` with an output per platform,
each with its own source watermark (:func:`streaming_sources`, via
:func:`beam_pipelines.teststream.from_trace`). Times are µs; Beam carries whole ms.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, Final

import apache_beam as beam
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from beam_pipelines.convert import to_beam
from beam_pipelines.pane_files import WritePanes
from beam_pipelines.teststream import from_trace
from theory.data.trace import Trace
from theory.pipeline import chapter3 as model
from theory.pipeline.processing import INSTANT
from theory.pipeline.stages import GroupByWindow
from theory.windowing.strategy import OutputPolicy, TimestampCombiner, WindowingStrategy

__all__ = [
    "GROUP_LABELS",
    "GROUP_STAGES",
    "SOURCE_STAGES",
    "TEST_STREAM_LABEL",
    "MeanPerWindow",
    "SessionLengths",
    "batch_sources",
    "build",
    "replay",
    "strategies",
    "streaming_sources",
]

#: The source stages and grouping stages, by theory's names (also the Beam labels).
SOURCE_STAGES: Final[tuple[str, ...]] = ("mobile_in", "console_in")
GROUP_STAGES: Final[tuple[str, ...]] = (
    "mobile_sessions",
    "console_sessions",
    "average_session_length",
)

#: Each grouping stage's GroupByKey, whose watermarks are the stage's.
GROUP_LABELS: Final[dict[str, str]] = {s: f"{s}/GroupByKey" for s in GROUP_STAGES}

#: The label of the streaming source (a TestStream with one output per source stage).
TEST_STREAM_LABEL: Final[str] = "trace"


def strategies(
    timestamp_combiner: OutputPolicy = TimestampCombiner.OUTPUT_AT_EOW,
) -> dict[str, WindowingStrategy]:
    """Each grouping stage's windowing strategy, as theory's chapter-3 pipeline has it."""
    pipe = model.pipeline("perfect", INSTANT, timestamp_combiner)
    out = {}
    for name in GROUP_STAGES:
        stage = pipe.stage(name)
        assert isinstance(stage, GroupByWindow)
        out[name] = stage.strategy
    return out


class _SessionLength(beam.DoFn):
    def process(self, element: Any, window: Any = beam.DoFn.WindowParam) -> Any:
        key, _ = element
        yield key, (window.end.micros - window.start.micros) / 1e6


class SessionLengths(beam.PTransform):
    """``(user, score)`` events -> ``(user, session length s)``, one per session pane."""

    def __init__(self, strategy: WindowingStrategy) -> None:
        super().__init__()
        self._strategy = strategy

    def expand(self, events: Any) -> Any:
        return (
            events
            | "WindowInto" >> to_beam(self._strategy)
            | "GroupByKey" >> beam.GroupByKey()
            | "SessionLength" >> beam.ParDo(_SessionLength())
        )


def _global_key(element: tuple[Any, float]) -> tuple[None, float]:
    return None, element[1]


def _mean(element: tuple[Any, Any]) -> tuple[Any, float]:
    key, values = element
    values = list(values)
    return key, math.fsum(values) / len(values)


class MeanPerWindow(beam.PTransform):
    """``(key, number)`` -> ``(None, mean)`` per pane of ``strategy``'s windows."""

    def __init__(self, strategy: WindowingStrategy) -> None:
        super().__init__()
        self._strategy = strategy

    def expand(self, numbers: Any) -> Any:
        return (
            numbers
            | "WindowInto" >> to_beam(self._strategy)
            | "GlobalKey" >> beam.Map(_global_key)
            | "GroupByKey" >> beam.GroupByKey()
            | "Mean" >> beam.Map(_mean)
        )


def _rows(trace: Trace) -> list[tuple[Any, float, int]]:
    return list(
        zip(trace.key.tolist(), trace.value.tolist(), trace.event_time.tolist(), strict=True)
    )


def _timestamped(row: tuple[Any, float, int]) -> TimestampedValue:
    key, value, micros = row
    return TimestampedValue((key, value), Timestamp(micros=micros))


def batch_sources(pipeline: Any, traces: Mapping[str, Trace]) -> dict[str, Any]:
    """One bounded ``Create`` per source stage, elements ``(key, value)`` at their event
    times (the source watermark plays no part in batch)."""
    return {
        name: pipeline
        | name >> beam.Create(_rows(traces[name]))
        | f"{name}/Timestamps" >> beam.Map(_timestamped)
        for name in SOURCE_STAGES
    }


def replay(traces: Mapping[str, Trace], watermark: str) -> Any:
    """The ``TestStream`` replaying both traces by arrival time (processing time =
    ``arrival_time``), an output per source stage, each with the source watermark
    ``watermark`` (a spec, e.g. ``bounded:30s``) over its own rows, at ``MAX_TIMESTAMP``
    once its last row has arrived (theory's finished bounded source)."""
    both = Trace.concat([traces[name] for name in SOURCE_STAGES])
    tags = [name for name in SOURCE_STAGES for _ in range(len(traces[name]))]
    return from_trace(both, watermark, tags=tags, finish=True)


def streaming_sources(
    pipeline: Any, traces: Mapping[str, Trace], watermark: str, stream: Any = None
) -> dict[str, Any]:
    """The source stages in streaming: one ``TestStream`` (:data:`TEST_STREAM_LABEL`),
    ``stream`` or else :func:`replay` of ``traces`` under ``watermark``."""
    if stream is None:
        stream = replay(traces, watermark)
    outputs = pipeline | TEST_STREAM_LABEL >> stream
    return {name: outputs[name] for name in SOURCE_STAGES}


def build(
    sources: Mapping[str, Any],
    output: str | os.PathLike[str] | None = None,
    timestamp_combiner: OutputPolicy = TimestampCombiner.OUTPUT_AT_EOW,
) -> dict[str, Any]:
    """The pipeline from its two sources: each grouping stage's output PCollection by
    stage name; with ``output``, every stage's panes are written under it
    (:class:`~beam_pipelines.pane_files.WritePanes`, one folder per stage)."""
    strategy = strategies(timestamp_combiner)
    outputs = {
        name: sources[source] | name >> SessionLengths(strategy[name])
        for source, name in zip(SOURCE_STAGES, GROUP_STAGES[:2], strict=True)
    }
    flat = tuple(outputs.values()) | "flatten" >> beam.Flatten()
    last = GROUP_STAGES[2]
    outputs[last] = flat | last >> MeanPerWindow(strategy[last])
    if output is not None:
        for name, pcoll in outputs.items():
            _ = pcoll | f"write {name}" >> WritePanes(output, name)
    return outputs
