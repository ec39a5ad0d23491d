"""The streaming harness: TestStream pipelines on PySparkRunner --streaming, panes captured.

``run_packed(cases)`` builds :func:`beam_pipelines.beam_runner.build_packed`'s pipeline
(one TestStream, per script a ``Filter -> WindowInto -> GroupByKey -> capture`` branch),
the same pipeline the Beam side runs on BundleBasedDirectRunner, and runs it on
PySparkRunner with ``--streaming``. Spark tasks run in worker processes, so the capture
writes each bundle's panes to a file named by the bundle's start (a system-wide
monotonic clock); reading the files in that order gives each branch's panes in output
order.
"""

from __future__ import annotations

import os
import pickle
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest

from beam_pipelines.beam_runner import build_packed, packed_options, theory_pane
from theory.windowing.engine import Pane


class CaptureValues(beam.DoFn):
    """Writes each bundle's elements to one file in ``directory`` (any runner)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def start_bundle(self) -> None:
        self._started = time.monotonic_ns()
        self._elements: list[Any] = []

    def process(self, element: Any) -> Iterator[None]:
        self._elements.append(element)
        return iter(())

    def finish_bundle(self) -> None:
        if not self._elements:
            return
        name = f"{self._started:020d}-{uuid.uuid4().hex}"
        tmp = os.path.join(self._directory, f".{name}")
        with open(tmp, "wb") as f:
            pickle.dump(self._elements, f)
        os.replace(tmp, os.path.join(self._directory, name))


def read_values(directory: Path) -> list[Any]:
    """The captured elements, bundles in start order."""
    out: list[Any] = []
    for path in sorted(p for p in directory.iterdir() if not p.name.startswith(".")):
        with path.open("rb") as f:
            out.extend(pickle.load(f))
    return out


RunPipeline = Callable[..., tuple[list[Any], Any]]


@pytest.fixture
def run_pipeline(spark: Any, tmp_path: Path) -> RunPipeline:
    """``run(build, runner=None, **options)``: build ``build(pipeline, capture)`` with a
    capturing DoFn, run it streaming on ``runner`` (PySparkRunner by default) with
    ``options``; the captured elements (in bundle order) and the result."""
    from spark_backend.runner import PySparkRunner

    counter = iter(range(1_000_000))

    def run(build: Callable[[Any, Any], None], runner: Any = None, **options: Any) -> Any:
        directory = tmp_path / f"run{next(counter)}"
        directory.mkdir()
        opts = beam.options.pipeline_options.PipelineOptions(streaming=True, **options)
        pipeline = beam.Pipeline(runner=runner or PySparkRunner(), options=opts)
        build(pipeline, CaptureValues(str(directory)))
        result = pipeline.run()
        result.wait_until_finish()
        return read_values(directory), result

    return run


class CaptureToFiles(CaptureValues):
    """Captures each pane of branch ``branch`` as ``(branch, theory Pane)``."""

    def __init__(self, directory: str, branch: int) -> None:
        super().__init__(directory)
        self._branch = branch

    def process(  # type: ignore[override]
        self,
        kv: Any,
        window: Any = beam.DoFn.WindowParam,
        timestamp: Any = beam.DoFn.TimestampParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[None]:
        (_, key), values = kv
        return super().process((self._branch, theory_pane(key, values, window, timestamp, pane)))


def read_panes(directory: Path, branches: int) -> list[list[Pane]]:
    """Each branch's captured panes, bundles in start order."""
    out: list[list[Pane]] = [[] for _ in range(branches)]
    for branch, pane in read_values(directory):
        out[branch].append(pane)
    return out


RunPacked = Callable[..., tuple[list[list[Pane]], Any]]


@pytest.fixture
def run_packed(spark: Any, tmp_path: Path) -> RunPacked:
    """Run cases ``[(script, strategy), ...]`` packed on PySparkRunner --streaming; the
    panes per case and the pipeline result."""
    from spark_backend.runner import PySparkRunner

    counter = iter(range(1_000_000))

    def run(cases: Sequence[tuple[Any, Any]], **options: Any) -> tuple[list[list[Pane]], Any]:
        directory = tmp_path / f"run{next(counter)}"
        directory.mkdir()
        flags = packed_options(cases).get_all_options(drop_default=True)
        opts = beam.options.pipeline_options.PipelineOptions(**{**flags, **options})
        pipeline = beam.Pipeline(runner=PySparkRunner(), options=opts)
        build_packed(pipeline, cases, lambda i: CaptureToFiles(str(directory), i))
        result = pipeline.run()
        result.wait_until_finish()
        return read_panes(directory, len(cases)), result

    return run
