"""The bytes a value carries across a streaming stage, against BundleBasedDirectRunner:
strings and bytes are length-prefixed only when nested, so a path that decodes a
nested element in the outer context hands the user ``'\\x03foo'`` for ``'foo'``.
Typed values (``with_output_types``) give the GroupByKey a string coder; untyped ones
get Beam's length-prefixed pickling coder, which is coded alike both ways and hides
the difference."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing import test_stream
from apache_beam.transforms import window

from tests.helpers.coded import ROWS, Concat

pytestmark = pytest.mark.slow


def _build(p: Any, capture: Any) -> None:
    stream = test_stream.TestStream()
    for i, row in enumerate(ROWS):
        stream = stream.add_elements([window.TimestampedValue(row, i + 1)])
    stream = stream.advance_watermark_to_infinity()
    text = (
        p
        | stream
        | beam.Map(lambda kv: kv).with_output_types(tuple[str, str])
        | beam.WindowInto(window.FixedWindows(10))
    )
    grouped = text | "G" >> beam.GroupByKey() | beam.MapTuple(lambda k, vs: ("gbk", k, sorted(vs)))
    values = text | "G2" >> beam.GroupByKey() | beam.CombineValues(Concat())
    combined = text | "C" >> beam.CombinePerKey(Concat())
    raw = (
        text
        | beam.MapTuple(lambda k, v: (k, v.encode())).with_output_types(tuple[str, bytes])
        | "G3" >> beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: ("bytes", k, sorted(vs)))
    )
    tagged_values = values | "TagV" >> beam.Map(lambda kv: ("values", *kv))
    tagged_combined = combined | "TagC" >> beam.Map(lambda kv: ("combined", *kv))
    (grouped, tagged_values, tagged_combined, raw) | beam.Flatten() | beam.ParDo(capture)


@pytest.mark.parametrize("fast_paths", [True, False], ids=["default", "fast-paths-off"])
def test_streaming_coded_values_equal_the_direct_runner(
    run_pipeline: Any, fast_paths: bool
) -> None:
    from spark_backend.runner import PySparkRunner

    expected, _ = run_pipeline(_build, runner=BundleBasedDirectRunner())
    ours, _ = run_pipeline(_build, runner=PySparkRunner(fast_paths=fast_paths))
    assert ("values", "key1", "foo|foo") in expected  # the reference saw the strings whole
    assert sorted(ours, key=repr) == sorted(expected, key=repr)
