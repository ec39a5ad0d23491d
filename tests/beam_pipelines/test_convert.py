"""beam_pipelines.convert: theory <-> Beam windowing strategies, round trips and refusals."""

import apache_beam as beam
import pytest
from apache_beam.runners import pipeline_context
from apache_beam.transforms import trigger as bt
from apache_beam.transforms import window as bw
from hypothesis import assume, given, settings

from beam_pipelines.convert import to_beam, to_theory
from beam_pipelines.testing.strategies import windowing_strategies
from theory import (
    AccumulationMode,
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    FixedWindows,
    Repeatedly,
    Sessions,
    TimestampCombiner,
    WindowingStrategy,
)
from theory.windowing.strategy import ClosingBehavior, ElementPolicy

S = 1_000_000


@settings(max_examples=80)
@given(windowing_strategies("1ms") | windowing_strategies("1s"))
def test_theory_to_beam_to_theory(strategy: WindowingStrategy) -> None:
    assert to_theory(to_beam(strategy), allow_unsafe_triggers=True) == strategy


@settings(max_examples=30)
@given(windowing_strategies("1s", allow_unsafe_triggers=False))
def test_safe_strategies_round_trip_without_the_flag(strategy: WindowingStrategy) -> None:
    """Strategies Beam accepts without --allow_unsafe_triggers convert without it."""
    assert to_theory(to_beam(strategy)) == strategy


@settings(max_examples=40)
@given(windowing_strategies("1s"))
def test_round_trip_through_the_runner_api_proto(strategy: WindowingStrategy) -> None:
    """What a runner sees: the WindowingStrategy proto of the pipeline (which cannot carry
    OUTPUT_AT_EARLIEST_TRANSFORMED: Beam's own limit)."""
    assume(strategy.timestamp_combiner is not TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED)
    proto = to_beam(strategy).windowing.to_runner_api(pipeline_context.PipelineContext())
    assert to_theory(proto, allow_unsafe_triggers=True) == strategy


def test_a_beam_authors_window_into() -> None:
    transform = beam.WindowInto(
        bw.FixedWindows(60, offset=15),
        trigger=bt.AfterWatermark(early=bt.AfterProcessingTime(10), late=bt.AfterCount(1)),
        accumulation_mode=bt.AccumulationMode.ACCUMULATING,
        timestamp_combiner=bw.TimestampCombiner.OUTPUT_AT_EARLIEST,
        allowed_lateness=60,
    )
    assert to_theory(transform) == WindowingStrategy(
        FixedWindows("60s", "15s"),
        AfterWatermark(early=AfterProcessingTime("10s"), late=AfterCount(1)),
        AccumulationMode.ACCUMULATING,
        "1m",
        TimestampCombiner.OUTPUT_AT_EARLIEST,
    )
    # the early and late firings are Repeatedly on both sides
    trigger = to_theory(transform).trigger
    assert isinstance(trigger, AfterWatermark)
    assert trigger.early == Repeatedly(AfterProcessingTime(10 * S))
    # a PCollection's windowing converts too
    with beam.Pipeline(runner="BundleBasedDirectRunner") as p:
        windowed = p | beam.Create([("k", 1)]) | transform
        assert to_theory(windowed.windowing) == to_theory(transform)


def test_unsafe_beam_strategies_need_the_flag_as_in_beam() -> None:
    transform = beam.WindowInto(
        bw.Sessions(5), trigger=bt.AfterCount(2), accumulation_mode=bt.AccumulationMode.DISCARDING
    )
    with pytest.raises(ValueError, match="unsafe trigger AfterCount"):
        to_theory(transform)
    assert to_theory(transform, allow_unsafe_triggers=True).window_fn == Sessions(5 * S)


class _MyWindows(bw.NonMergingWindowFn):
    def assign(self, context):
        return [bw.GlobalWindow()]

    def get_window_coder(self):
        return bw.GlobalWindows().get_window_coder()


class _MyTrigger(bt.AfterCount):
    pass


def test_unconvertible_parts_are_named() -> None:
    with pytest.raises(ValueError, match="window_fn: _MyWindows has no theory counterpart"):
        to_theory(beam.WindowInto(_MyWindows()))
    nested = beam.WindowInto(
        bw.FixedWindows(10),
        trigger=bt.AfterWatermark(late=bt.AfterAny(bt.AfterCount(1), _MyTrigger(2))),
        accumulation_mode=bt.AccumulationMode.DISCARDING,
    )
    with pytest.raises(
        ValueError, match=r"trigger\.late\.underlying\.triggers\[1\]: _MyTrigger has no theory"
    ):
        to_theory(nested)
    sync = beam.WindowInto(
        bw.FixedWindows(10),
        trigger=bt._AfterSynchronizedProcessingTime(),
        accumulation_mode=bt.AccumulationMode.DISCARDING,
    )
    with pytest.raises(ValueError, match="trigger: _AfterSynchronizedProcessingTime"):
        to_theory(sync)
    with pytest.raises(TypeError, match=r"expected a beam\.WindowInto"):
        to_theory(FixedWindows(10))
    with pytest.raises(ValueError, match="timestamp_combiner: Beam has no user-chosen"):
        policy = ElementPolicy(lambda t, w: t)
        to_beam(WindowingStrategy(FixedWindows(S), timestamp_combiner=policy))
    with pytest.raises(ValueError, match=r"closing_behavior: .* FIRE_ALWAYS"):
        to_beam(WindowingStrategy(FixedWindows(S), closing_behavior=ClosingBehavior.FIRE_ALWAYS))
    with pytest.raises(ValueError, match="trigger: Beam Python's AfterProcessingTime takes whole"):
        to_beam(WindowingStrategy(FixedWindows(S), AfterWatermark(early=AfterProcessingTime(5))))
    with pytest.raises(ValueError, match="allowed_lateness must be whole milliseconds"):
        to_beam(WindowingStrategy(FixedWindows(S), allowed_lateness=1))
    with pytest.raises(TypeError, match="strategy must be a theory WindowingStrategy"):
        to_beam(beam.WindowInto(bw.FixedWindows(10)))  # type: ignore[arg-type]
