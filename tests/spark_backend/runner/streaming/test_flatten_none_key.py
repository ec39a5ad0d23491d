"""A Flatten whose inputs have another coder than its output, into a GroupByKey, with
``--streaming``, against FnApiRunner. Beam's phases re-point such a Flatten's inputs to
new transcoding steps in the proto they are given; when the plan rewrote the pipeline
the streaming watermark graph is built from, the Flatten had no producer, its watermark
stayed at the minimum and the GroupByKey never fired: no output, silently. Keys of
``None`` give the inputs different coders; Beam's ``Top.Largest`` builds this shape (a
Create of ``(None, [])`` flattened with the per-bundle tops)."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import combiners

pytestmark = pytest.mark.slow


def _flatten_none_key(p: Any, capture: Any) -> None:
    a = p | "A" >> beam.Create([(None, 3), (None, 6)])
    b = p | "B" >> beam.Create([(None, 0)])
    grouped = (a, b) | beam.Flatten() | beam.GroupByKey()
    grouped | beam.MapTuple(lambda k, vs: (k, sorted(vs))) | beam.ParDo(capture)


def _top_largest(p: Any, capture: Any) -> None:
    (
        p
        | beam.Create([6, 3, 1, -1, 9, 1, 5, 2, 0, 6])
        | combiners.Top.Largest(2)
        | beam.ParDo(capture)
    )


@pytest.mark.parametrize("build", [_flatten_none_key, _top_largest], ids=["flatten", "top"])
def test_flatten_none_key_streaming_equals_fn_api_runner(run_pipeline: Any, build: Any) -> None:
    expected, _ = run_pipeline(build, runner=FnApiRunner())
    ours, result = run_pipeline(build)
    assert expected
    assert not result.stalled
    assert sorted(ours, key=repr) == sorted(expected, key=repr)


def test_planning_leaves_the_pipeline_proto_unchanged() -> None:
    """The plan works on a copy: the proto the watermark graph reads keeps the Flatten's
    inputs as the pipeline wrote them."""
    from apache_beam.transforms import environments

    from spark_backend.runner.plan.plan import plan_pipeline

    p = beam.Pipeline()
    a = p | "A" >> beam.Create([(None, 3), (None, 6)])
    b = p | "B" >> beam.Create([(None, 0)])
    (a, b) | beam.Flatten() | beam.GroupByKey()
    proto = p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())
    before = proto.SerializeToString(deterministic=True)
    plan_pipeline(proto)
    assert proto.SerializeToString(deterministic=True) == before
