"""A Beam author's checks of watermarks, lateness and firing times against the model
(the test_fails_* tests fail on purpose, to show the failure messages)."""

from hypothesis import given, settings

from beam_pipelines.testing import (
    assert_fires_at,
    assert_no_late_data,
    assert_watermark_monotonic,
)
from beam_pipelines.testing.strategies import traces
from theory import AfterProcessingTime, AfterWatermark, FixedWindows, WindowingStrategy, run_script


@settings(max_examples=20, deadline=None)
@given(traces(max_disorder="2s", straggler_fraction=0.0))
def test_a_bound_above_the_disorder_leaves_nothing_late(trace):
    assert_no_late_data(trace, "bounded:2s")


@settings(deadline=None)
@given(traces(min_size=5, max_disorder="2s", straggler_fraction=0.5, straggler_delay="1m"))
def test_fails_stragglers_are_late(trace):
    assert_no_late_data(trace, "bounded:2s")


def test_fails_a_watermark_that_goes_back():
    assert_watermark_monotonic([0, 5_000_000, 4_000_000])


def run(test_stream):
    script = (
        test_stream.elements([("k", 1, "5s")]).advance("10s").advance("5s").watermark("60s")
    ).script()
    strategy = WindowingStrategy(
        FixedWindows("60s"), AfterWatermark(early=AfterProcessingTime("10s"))
    )
    return run_script(script, strategy)


def test_early_pane_fires_ten_seconds_after_the_first_element(test_stream):
    assert_fires_at(run(test_stream), ("0s", "60s"), "10s", key="k", timing="EARLY")


def test_fails_the_on_time_pane_is_not_at_ten_seconds(test_stream):
    assert_fires_at(run(test_stream), ("0s", "1m"), "10s", key="k", timing="ON_TIME")
