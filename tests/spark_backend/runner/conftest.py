"""The differential harness: one pipeline, run on FnApiRunner and on PySparkRunner.

``differential(build)`` builds ``build(pipeline)`` (a PCollection, or a dict of them)
twice. On FnApiRunner (Beam's batch reference) every element is captured as
``(value, timestamp µs, window, pane info)``; on PySparkRunner the same capture runs
inside the pipeline and ``assert_that`` compares it with FnApiRunner's multiset, so a
difference fails the Spark run. Grouped values (the iterables of a GroupByKey) are
sorted, since neither runner defines their order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import GlobalWindows

_LOCK = threading.Lock()
_CAPTURED: dict[str, list[Any]] = {}


def canonical(value: Any) -> Any:
    """``value`` with every non-string iterable inside a tuple sorted by repr."""
    if isinstance(value, tuple):
        return tuple(canonical(v) for v in value)
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return value
    if isinstance(value, dict):
        return tuple(sorted(((canonical(k), canonical(v)) for k, v in value.items()), key=repr))
    try:
        items = list(value)
    except TypeError:
        return value
    return tuple(sorted((canonical(v) for v in items), key=repr))


class Observe(beam.DoFn):
    """Each element as ``(canonical value, timestamp µs, window, pane)``, as strings."""

    def process(
        self,
        element: Any,
        timestamp: Any = beam.DoFn.TimestampParam,
        window: Any = beam.DoFn.WindowParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[tuple[str, int, str, str]]:
        yield (repr(canonical(element)), int(timestamp.micros), repr(window), repr(pane))


class _Capture(beam.DoFn):
    def __init__(self, tag: str) -> None:
        self._tag = tag

    def process(self, element: Any) -> None:
        with _LOCK:
            _CAPTURED.setdefault(self._tag, []).append(element)


Build = Callable[[beam.Pipeline], Any]

#: FnApiRunner's outputs of each build function the differential fixture has run.
_REFERENCES: dict[Build, dict[str, list[Any]]] = {}


def _outputs(result: Any) -> dict[str, Any]:
    return result if isinstance(result, dict) else {"out": result}


def reference(build: Build) -> dict[str, list[Any]]:
    """The observed outputs of ``build`` on FnApiRunner, per output name."""
    tags = {}
    with beam.Pipeline(runner=FnApiRunner()) as p:
        for name, pcoll in _outputs(build(p)).items():
            tag = f"{id(build)}-{name}"
            _CAPTURED.pop(tag, None)
            tags[name] = tag
            (
                pcoll
                | f"Observe {name}" >> beam.ParDo(Observe())
                | f"Capture {name}" >> beam.ParDo(_Capture(tag))
            )
    return {name: _CAPTURED.pop(tag, []) for name, tag in tags.items()}


def on_spark(build: Build, expected: dict[str, list[Any]], runner: Any) -> Any:
    """Run ``build`` on ``runner``, asserting each output equals ``expected``: every
    observation is tagged with its output's name and one ``assert_that`` compares them
    all (one grouping for the comparison, however many outputs)."""
    p = beam.Pipeline(runner=runner)
    outputs = _outputs(build(p))
    tagged = [
        pcoll
        | f"Observe {name}" >> beam.ParDo(Observe())
        | f"Tag {name}" >> beam.Map(lambda seen, name=name: (name, *seen))
        | f"Global {name}" >> beam.WindowInto(GlobalWindows())  # Observe kept the window
        for name, pcoll in outputs.items()
    ]
    want = [(name, *seen) for name in outputs for seen in expected[name]]
    everything = tuple(tagged) | "Every output" >> beam.Flatten()
    assert_that(everything, equal_to(want), label="Equal outputs")
    result = p.run()
    result.wait_until_finish()
    return result


@pytest.fixture(scope="session")
def runner(spark: Any) -> Any:
    """A PySparkRunner on the test session's SparkSession."""
    from spark_backend.runner import PySparkRunner

    return PySparkRunner()


@pytest.fixture
def differential(runner: Any) -> Callable[..., Any]:
    """Run a pipeline on both runners; fail unless the outputs are identical, and return
    the Spark run's result (its ``paths`` say which path grouped each GroupByKey).

    ``check(build, spark_build)`` runs ``spark_build`` on Spark instead (to show that
    a different pipeline fails the comparison); ``on=`` another PySparkRunner."""

    def check(build: Build, spark_build: Build | None = None, on: Any = None) -> Any:
        expected = _REFERENCES.get(build)
        if expected is None:  # once per build function, however many runners it meets
            expected = _REFERENCES[build] = reference(build)
        assert all(expected.values()), "a reference output is empty"
        return on_spark(spark_build or build, expected, on or runner)

    return check
