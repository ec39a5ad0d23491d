"""The grouping stages of a pipeline, and what each one received and emitted in a run.

:func:`grouping_stages` walks a built pipeline for its ``GroupByKey``s and ``CombinePerKey``s
(a ``GroupByKey`` inside a ``CombinePerKey`` is part of that stage; the grouping inside
Beam's ``assert_that``, and so inside ``expect_panes``, is not a stage). :func:`record`
adds two branches to each stage, leaving the pipeline's own results as they were: one
records every element of the stage's input PCollection (after the user's Maps, Filters
and side inputs) with its timestamp and the step of the run it arrived in, one writes
every output pane (:class:`~beam_pipelines.pane_files.WritePanes`).

The step of an element: on Beam's direct runner, which runs in this process, the number
of TestStream reads :mod:`beam_pipelines.tracing` had seen when the element passed
(registered with :func:`tracing_run`); on a micro-batch runner, the batch
(:class:`~beam_pipelines.sinks.WriteBatchesToText` files them by batch). Records are JSON
lines read back with :mod:`beam_pipelines.plain_json`; nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam

from beam_pipelines import plain_json
from beam_pipelines.pane_files import WritePanes
from beam_pipelines.sinks import WriteBatchesToText
from theory.data.io import write_file_atomically

__all__ = ["Stage", "grouping_stages", "read_inputs", "record", "tracing_run"]

#: Run id -> a function giving the current step (the direct runner, in this process).
_STEPS: dict[str, Callable[[], int]] = {}
_STEPS_LOCK = threading.Lock()
_BATCH = re.compile(r"batch-(\d+)")


@dataclass(frozen=True)
class Stage:
    """A grouping stage: its full label, the transform, its input and output PCollections,
    and the function a Combine applies to a pane's values (None for a GroupByKey)."""

    label: str
    transform: Any
    input: Any
    output: Any
    combine: Callable[[list[Any]], Any] | None

    def folder(self, index: int) -> str:
        """The directory name of stage ``index``'s records."""
        return f"stage-{index:03d}"


def _combine_of(transform: Any) -> Callable[[list[Any]], Any]:
    fn, args, kwargs = transform.fn, transform.args, transform.kwargs
    return lambda values: fn.apply(values, *args, **kwargs)


def grouping_stages(pipeline: beam.Pipeline) -> list[Stage]:
    """The pipeline's GroupByKeys and CombinePerKeys, in construction order (module
    docstring)."""
    stages: list[Stage] = []

    def walk(applied: Any) -> None:
        for part in applied.parts:
            transform = part.transform
            if type(transform).__name__ == "AssertThat":
                continue
            combine = isinstance(transform, beam.CombinePerKey)
            if combine or isinstance(transform, beam.GroupByKey):
                stages.append(
                    Stage(
                        part.full_label,
                        transform,
                        part.main_inputs[next(iter(part.main_inputs))],
                        next(iter(part.outputs.values())),
                        _combine_of(transform) if combine else None,
                    )
                )
            else:
                walk(part)

    walk(pipeline.transforms_stack[0])
    return stages


class _RecordInput(beam.DoFn):
    """Each element as a JSON line ``[step, key, value, timestamp µs]``; the step is
    None where no step function is registered for the run (a runner in other
    processes: its batch files tell the step)."""

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id

    def process(self, element: Any, timestamp: Any = beam.DoFn.TimestampParam) -> Iterator[str]:
        step = _STEPS.get(self._run_id)
        key, value = element
        line = [
            None if step is None else step(),
            plain_json.encode(key),
            plain_json.encode(value),
            int(timestamp.micros),
        ]
        yield json.dumps(line, separators=(",", ":"))


class _WriteLines(beam.DoFn):
    """A bundle's lines to one file of ``directory``, written atomically."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def start_bundle(self) -> None:
        self._lines: list[str] = []

    def process(self, element: str) -> Iterator[None]:
        self._lines.append(element)
        return iter(())

    def finish_bundle(self) -> None:
        if self._lines:
            os.makedirs(self._directory, exist_ok=True)
            target = os.path.join(self._directory, f"bundle-{uuid.uuid4().hex}.txt")
            write_file_atomically(target, "".join(f"{x}\n" for x in self._lines).encode())


def record(stages: list[Stage], directory: str, run_id: str | None) -> None:
    """Add to each stage the branches that record its input and its output panes under
    ``directory`` (module docstring): with a ``run_id`` (from :func:`tracing_run`) the
    input records carry their step, else they are filed by batch."""
    for i, stage in enumerate(stages):
        folder = os.path.join(directory, stage.folder(i))
        target = os.path.join(folder, "in")
        write = WriteBatchesToText(target) if run_id is None else beam.ParDo(_WriteLines(target))
        _ = (
            stage.input
            | f"AssertPipeline[{i}]/RecordInput" >> beam.ParDo(_RecordInput(run_id or ""))
            | f"AssertPipeline[{i}]/WriteInput" >> write
        )
        _ = stage.output | f"AssertPipeline[{i}]/WriteOutput" >> WritePanes(
            folder, "out", grouped=stage.combine is None
        )


@contextmanager
def tracing_run(step: Callable[[], int]) -> Iterator[str]:
    """A run id whose input records take their step from ``step()`` inside the block."""
    run_id = uuid.uuid4().hex
    with _STEPS_LOCK:
        _STEPS[run_id] = step
    try:
        yield run_id
    finally:
        with _STEPS_LOCK:
            del _STEPS[run_id]


def read_inputs(folder: str | os.PathLike[str]) -> list[tuple[int, Any, Any, int]]:
    """The input records of a stage's ``folder``: ``(step, key, value, timestamp µs)``;
    ``ValueError`` naming the file and line of a record that is not one."""
    out: list[tuple[int, Any, Any, int]] = []
    root = Path(folder) / "in"
    if not root.is_dir():
        return out
    for path in sorted(root.rglob("*.txt")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue  # a batch not committed
        batch = _BATCH.fullmatch(path.parent.name)
        for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
            try:
                step, key, value, micros = json.loads(line)
                if step is None:
                    if batch is None:
                        raise ValueError("no step, and not in a batch directory")
                    step = int(batch.group(1))
                out.append(
                    (int(step), plain_json.decode(key), plain_json.decode(value), int(micros))
                )
            except (ValueError, TypeError) as err:
                raise ValueError(f"{path}, line {number}: not an input record ({err})") from None
    return out
