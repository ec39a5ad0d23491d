"""The engine's grouping equals Beam's batch trigger driver (no Spark needed).

Beam's ``GeneralTriggerDriver.process_entire_key`` is what FnApiRunner runs for a
GroupByKey in batch; :func:`engine_panes` must give the same values, timestamps,
windows and pane info for every strategy :func:`engine_strategy` accepts, with
elements carrying the windows Beam's WindowFn assigned (at millisecond timestamps, as
after a coder crossing).
"""

from __future__ import annotations

from typing import Any

import pytest
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.core import Windowing
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.runner.grouping.engine import engine_panes, engine_strategy

_COMBINERS = [
    beam_window.TimestampCombiner.OUTPUT_AT_EOW,
    beam_window.TimestampCombiner.OUTPUT_AT_EARLIEST,
    beam_window.TimestampCombiner.OUTPUT_AT_LATEST,
]
_MODES = [beam_trigger.AccumulationMode.DISCARDING, beam_trigger.AccumulationMode.ACCUMULATING]


@st.composite
def window_fns(draw: Any) -> Any:
    kind = draw(st.sampled_from(["fixed", "sliding", "sessions"]))
    if kind == "fixed":
        return beam_window.FixedWindows(draw(st.integers(1, 60)), draw(st.integers(0, 9)))
    if kind == "sliding":
        size = draw(st.integers(2, 60))
        period = draw(st.integers(1, size))
        return beam_window.SlidingWindows(size, period, draw(st.integers(0, 4)))
    return beam_window.Sessions(draw(st.integers(1, 30)))


@st.composite
def windowings(draw: Any) -> Any:
    trigger = draw(st.sampled_from([beam_trigger.DefaultTrigger(), beam_trigger.AfterWatermark()]))
    return Windowing(
        draw(window_fns()),
        triggerfn=trigger,
        accumulation_mode=draw(st.sampled_from(_MODES)),
        timestamp_combiner=draw(st.sampled_from(_COMBINERS)),
        allowed_lateness=draw(st.sampled_from([0, 30])),
    )


elements = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 99),
        st.integers(-100_000, 300_000).map(lambda ms: ms * 1000),  # µs, whole ms
    ),
    min_size=1,
    max_size=60,
)


def _windowed(windowing: Any, rows: list[tuple[str, int, int]]) -> list[Any]:
    out = []
    for key, value, micros in rows:
        ts = Timestamp(micros=micros)
        windows = windowing.windowfn.assign(beam_window.WindowFn.AssignContext(ts, (key, value)))
        out.append(WindowedValue((key, value), ts, windows))
    return out


def _observed(values: Any) -> list[Any]:
    return sorted(
        (
            wv.value[0],
            sorted(wv.value[1]),
            wv.timestamp.micros,
            repr(wv.windows),
            repr(wv.pane_info),
        )
        for wv in values
    )


def _beam_driver(windowing: Any, values: list[Any]) -> list[Any]:
    driver = beam_trigger.create_trigger_driver(windowing, True)
    out = []
    for key in sorted({wv.value[0] for wv in values}):
        mine = [wv.with_value(wv.value[1]) for wv in values if wv.value[0] == key]
        out.extend(driver.process_entire_key(key, mine))
    return out


@settings(max_examples=150)
@given(windowings(), elements)
def test_engine_panes_equal_beams_batch_trigger_driver(windowing: Any, rows: Any) -> None:
    strategy = engine_strategy(windowing)
    assert not isinstance(strategy, str), strategy
    values = _windowed(windowing, rows)
    expected = _observed(_beam_driver(windowing, values))
    got = _observed(engine_panes(strategy, [(wv.value[0].encode(), wv) for wv in values]))
    assert got == expected


def test_a_pane_carries_the_merged_session_and_its_elements() -> None:
    """Written out by hand: two overlapping sessions merge, a third stays apart."""
    windowing = Windowing(
        beam_window.Sessions(10),
        timestamp_combiner=beam_window.TimestampCombiner.OUTPUT_AT_EARLIEST,
    )
    strategy = engine_strategy(windowing)
    assert not isinstance(strategy, str)
    values = _windowed(windowing, [("k", 1, 0), ("k", 2, 5_000_000), ("k", 3, 40_000_000)])
    panes = sorted(engine_panes(strategy, [(b"k", wv) for wv in values]), key=repr)
    assert [(p.value[0], sorted(p.value[1])) for p in panes] == [("k", [1, 2]), ("k", [3])]
    assert [(w.start.micros, w.end.micros) for p in panes for w in p.windows] == [
        (0, 15_000_000),
        (40_000_000, 50_000_000),
    ]
    assert [p.timestamp.micros for p in panes] == [0, 40_000_000]
    assert all(p.pane_info.is_first and p.pane_info.index == 0 for p in panes)


class _Custom(beam_window.NonMergingWindowFn):
    def assign(self, context: Any) -> list[Any]:
        return [beam_window.GlobalWindow()]

    def get_window_coder(self) -> Any:
        return beam_window.GlobalWindows().get_window_coder()


@pytest.mark.parametrize(
    ("windowing", "reason"),
    [
        (Windowing(_Custom()), "window fn _Custom is not Fixed, Sliding or Sessions"),
        (
            Windowing(
                beam_window.FixedWindows(60),
                triggerfn=beam_trigger.AfterCount(2),
                accumulation_mode=beam_trigger.AccumulationMode.DISCARDING,
            ),
            "is not the default or a bare AfterWatermark()",
        ),
        (
            Windowing(
                beam_window.FixedWindows(60),
                triggerfn=beam_trigger.AfterWatermark(early=beam_trigger.AfterCount(1)),
                accumulation_mode=beam_trigger.AccumulationMode.DISCARDING,
            ),
            "is not the default or a bare AfterWatermark()",
        ),
    ],
)
def test_what_the_engine_does_not_model_is_refused_with_the_reason(
    windowing: Any, reason: str
) -> None:
    refused = engine_strategy(windowing)
    assert isinstance(refused, str) and reason in refused
