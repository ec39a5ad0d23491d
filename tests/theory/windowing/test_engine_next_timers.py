"""GroupByWindowEngine.next_timers: a lower bound of the next timer in each domain, so a
runner may skip a stage with no input until the bound is due (µs)."""

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from theory.time import MAX_TIMESTAMP
from theory.windowing.engine import GroupByWindowEngine
from theory.windowing.strategy import AccumulationMode, WindowingStrategy
from theory.windowing.triggers import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    DefaultTrigger,
    Repeatedly,
)
from theory.windowing.windows import FixedWindows, Sessions

S = 1_000_000
TRIGGERS = [
    DefaultTrigger(),
    AfterWatermark(early=AfterProcessingTime(2 * S), late=AfterCount(1)),
    Repeatedly(AfterProcessingTime(3 * S)),
]
EVENTS = st.one_of(
    st.tuples(
        st.just("e"), st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 60)), max_size=3)
    ),
    st.tuples(st.just("w"), st.integers(0, 20)),
    st.tuples(st.just("p"), st.integers(1, 4)),
)


def step(engine: GroupByWindowEngine, event: tuple) -> list:
    kind, arg = event
    if kind == "e":
        return engine.add_elements([(k, 0, t * S) for k, t in arg])
    if kind == "w":
        return engine.advance_watermark_to(engine.input_watermark + arg * S)
    return engine.advance_processing_time(arg * S)


@settings(max_examples=150, deadline=None)
@given(
    trigger=st.sampled_from(range(len(TRIGGERS))),
    sessions=st.booleans(),
    events=st.lists(EVENTS, max_size=12),
)
def test_no_timer_fires_before_the_bound(trigger: int, sessions: bool, events: list) -> None:
    fn = Sessions(5 * S) if sessions else FixedWindows(10 * S)
    engine = GroupByWindowEngine(
        WindowingStrategy(
            fn,
            TRIGGERS[trigger],
            AccumulationMode.ACCUMULATING,
            30 * S,
            allow_unsafe_triggers=True,
        )
    )
    engine.advance_watermark_to(0)
    for event in events:
        step(engine, event)
        watermark, processing = engine.next_timers()
        probe = copy.deepcopy(engine)
        below_w = MAX_TIMESTAMP if watermark is None else watermark - 1
        below_p = MAX_TIMESTAMP if processing is None else processing - 1
        if below_w > probe.input_watermark:
            assert probe.advance_watermark_to(below_w) == []
        if below_p > probe.processing_time:
            assert probe.advance_processing_time(below_p - probe.processing_time) == []
    # and at the end every timer left is covered by a bound
    pending = engine.pending_timers()
    watermark, processing = engine.next_timers()
    assert (pending["watermark"] == 0) or watermark is not None
    assert (pending["processing_time"] == 0) or processing is not None
