"""The bytes a value carries across a stage, against FnApiRunner: every transform shape
Beam's suites build, on values whose coder writes them differently nested (inside an
element, an iterable, a KV) and outer (alone): strings and bytes carry a length
prefix only when nested, so a path that decodes a nested value in the outer context
hands the user ``'\\x03foo'`` for ``'foo'``. Integers are coded alike both ways, which
is why the other differential tests could not see it.

Each pipeline runs on the default runner, with every stage on Spark
(``driver_stages=False``), and with the fast paths off (Beam's bundle processor and
trigger driver everywhere).
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp

from tests.helpers.coded import ROWS, Concat

pytestmark = pytest.mark.slow


def _stamped(kv: tuple[str, str]) -> Any:
    return window.TimestampedValue(kv, Timestamp(micros=1_000_000 * (len(kv[0]) + len(kv[1]))))


def _typed(p: beam.Pipeline, label: str, rows: list[Any], kind: Any) -> Any:
    return p | label >> beam.Create(rows).with_output_types(kind)


def _shapes(p: beam.Pipeline) -> dict[str, Any]:
    text = _typed(p, "Text", ROWS, tuple[str, str])
    raw = _typed(p, "Raw", [(k, v.encode()) for k, v in ROWS], tuple[str, bytes])
    byte_keys = _typed(p, "ByteKeys", [(k.encode(), v) for k, v in ROWS], tuple[bytes, str])
    floats = _typed(p, "Floats", [(k, len(v) / 3) for k, v in ROWS], tuple[str, float])
    nested = _typed(p, "Nested", [(k, (v, len(v))) for k, v in ROWS], tuple[str, tuple[str, int]])
    unique = _typed(p, "Unique", list(dict(ROWS[:2]).items()), tuple[str, str])  # one value a key
    untyped = p | "Untyped" >> beam.Create([("key1", "any"), ("key4", "thing")])
    words = _typed(p, "Words", [v for _, v in ROWS], str)
    no_words = _typed(p, "NoWords", [], str)
    windowed = text | "Stamp" >> beam.Map(_stamped).with_output_types(tuple[str, str])
    return {
        "gbk_combine_values": text | "G1" >> beam.GroupByKey() | beam.CombineValues(Concat()),
        "gbk_str": text | "G2" >> beam.GroupByKey(),
        "gbk_bytes": raw | "G3" >> beam.GroupByKey(),
        "gbk_bytes_keys": byte_keys | "G4" >> beam.GroupByKey(),
        "gbk_float": floats | "G5" >> beam.GroupByKey(),
        "gbk_tuple": nested | "G6" >> beam.GroupByKey(),
        "combine_per_key": text | "C1" >> beam.CombinePerKey(Concat()),
        "combine_globally": words | "C2" >> beam.CombineGlobally(Concat()),
        "combine_globally_default": no_words | "C3" >> beam.CombineGlobally(Concat()),
        # sibling combines of one input: Beam's optimiser packs them into one
        "packed_count": text | "P1" >> beam.combiners.Count.PerKey(),
        "packed_top": text | "P2" >> beam.combiners.Top.LargestPerKey(2),
        "packed_concat": text | "P3" >> beam.CombinePerKey(Concat()),
        "packed_global_count": words | "P4" >> beam.combiners.Count.Globally(),
        "packed_global_concat": words | "P5" >> beam.CombineGlobally(Concat()),
        "flatten_mixed": (text, untyped) | beam.Flatten() | "G7" >> beam.GroupByKey(),
        "fixed_windows": windowed
        | "WF" >> beam.WindowInto(window.FixedWindows(4))
        | "G8" >> beam.GroupByKey(),
        "sessions": windowed
        | "WS" >> beam.WindowInto(window.Sessions(2))
        | "C4" >> beam.CombinePerKey(Concat()),
        "side_singleton": words
        | "S1"
        >> beam.Map(lambda w, s: w + s, beam.pvalue.AsSingleton(no_words, default_value="!")),
        "side_list": words
        | "S2" >> beam.Map(lambda w, xs: (w, sorted(xs)), beam.pvalue.AsList(words)),
        "side_iter": words
        | "S3" >> beam.Map(lambda w, xs: (w, sorted(xs)), beam.pvalue.AsIter(words)),
        "side_dict": words
        | "S4" >> beam.Map(lambda w, d: (w, sorted(d.items())), beam.pvalue.AsDict(unique)),
        "side_multimap": words
        | "S5" >> beam.Map(lambda w, m: (w, sorted(m["key1"])), beam.pvalue.AsMultiMap(text)),
    }


@pytest.mark.parametrize(
    "options",
    [{}, {"driver_stages": False}, {"fast_paths": False}],
    ids=["default", "all-on-spark", "fast-paths-off"],
)
def test_coded_values_equal_fnapirunner(differential: Any, options: dict[str, Any]) -> None:
    from spark_backend.runner import PySparkRunner

    differential(_shapes, on=PySparkRunner(**options) if options else None)


def test_the_minimal_case_of_a_combine_values_after_a_group_by_key(differential: Any) -> None:
    """Beam's ``CombineValuesTest.test_gbk_immediately_followed_by_combine``, shrunk."""
    rows = [("key1", "foo"), ("key2", "bar"), ("key1", "foo")]
    result = differential(
        lambda p: p | beam.Create(rows) | beam.GroupByKey() | beam.CombineValues(Concat())
    )
    assert result is not None
