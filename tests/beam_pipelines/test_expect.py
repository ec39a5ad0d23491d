"""``expect_panes``: panes written as read, checked inside a TestStream pipeline on
BundleBasedDirectRunner; a wrong expectation fails the run listing both sides."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger, window

from beam_pipelines.testing import expect_panes
from beam_pipelines.testing.expect import expected_panes
from theory.time import MINUTE, SECOND


def _run(expected: list[Any], grouped: bool = False) -> None:
    p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=PipelineOptions(streaming=True))
    events = (
        TestStream()
        .add_elements(
            [window.TimestampedValue(("alice", 1), 5), window.TimestampedValue(("alice", 2), 10)]
        )
        .advance_watermark_to(60)
        .add_elements([window.TimestampedValue(("bob", 3), 70)])
        .advance_watermark_to_infinity()
    )
    windowed = (
        p
        | events
        | beam.WindowInto(
            window.FixedWindows(60),
            trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        )
    )
    out = windowed | (beam.GroupByKey() if grouped else beam.CombinePerKey(sum))
    expect_panes(out, expected)
    p.run().wait_until_finish()


def test_the_panes_as_written_match() -> None:
    _run(
        [
            ("alice", "[0s, 1m)", "EARLY", 3),
            ("alice", "[0s, 1m)", "ON_TIME", 3),
            ("bob", "[1m, 2m)", "EARLY", 3),
            ("bob", ("60s", "120s"), "ON_TIME", 3),
        ]
    )


def test_a_group_by_keys_values_match_in_any_order() -> None:
    _run(
        [
            ("alice", "[0s, 1m)", "EARLY", [2, 1]),
            ("alice", "[0s, 1m)", "ON_TIME", [1, 2]),
            ("bob", "[1m, 2m)", "EARLY", [3]),
            ("bob", "[1m, 2m)", "ON_TIME", [3]),
        ],
        grouped=True,
    )


def test_a_wrong_expectation_fails_listing_both_sides() -> None:
    with pytest.raises(
        Exception,
        match=r"(?s)1 expected pane\(s\) missing, 1 pane\(s\) not "
        r"expected.*- expected key='bob' window=\[60s, 120s\) LATE index=1.*"
        r"\+ produced key='bob' window=\[60s, 120s\) ON_TIME index=1",
    ):
        _run(
            [
                ("alice", "[0s, 1m)", "EARLY", 3),
                ("alice", "[0s, 1m)", "ON_TIME", 3),
                ("bob", "[1m, 2m)", "EARLY", 3),
                ("bob", "[1m, 2m)", "LATE", 3),
            ]
        )


def test_the_order_written_is_the_pane_index() -> None:
    one, two = expected_panes([("k", "[0s, 1m)", "EARLY", 1), ("k", "[0s, 1m)", "LATE", 2)])
    assert (one.start, one.end, one.pane_index, two.pane_index) == (0, MINUTE, 0, 1)
    assert expected_panes([("k", (0, "1500ms"), "LATE", 1)])[0].end == 1500 * SECOND // 1000


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (("k", "0s-1m", "EARLY", 1), r"expected\[0\]: window '0s-1m' is not of the form"),
        (("k", "[1m, 0s)", "EARLY", 1), r"expected\[0\]: window .* ends before it starts"),
        (("k", "[0s, 1x)", "EARLY", 1), r"expected\[0\]: bad duration '1x'"),
        (("k", "[0s, 1m)", "early", 1), r"expected\[0\]: timing 'early' is not one of EARLY"),
        (("k", "[0s, 1m)"), r"expected\[0\]: expected \(key, window, timing, value\)"),
    ],
)
def test_a_bad_expectation_is_refused_naming_it(entry: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expected_panes([entry])
