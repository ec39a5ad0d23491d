"""The streaming runner's driver-side parts without Spark: the sources' schedule (and
its resumption from a checkpoint's position), the
Beam -> theory windowing conversion, and the stage graph of a pipeline."""

from __future__ import annotations

import dataclasses
import pickle

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_stream import TestStream as BeamTestStream
from apache_beam.transforms import environments
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_pipelines.beam_runner import beam_windowing
from beam_pipelines.convert import to_theory
from beam_pipelines.differential import random_strategy
from spark_backend.runner.streaming.driver import schedule
from spark_backend.runner.streaming.positions import Position
from spark_backend.runner.streaming.sources import (
    ELEMENTS,
    PROCESSING_TIME,
    WATERMARK,
    TestStreamSource,
    streaming_proto,
)
from spark_backend.runner.streaming.watermarks import PipelineWatermarks
from theory.time import MAX_TIMESTAMP, MICROS_PER_MILLI, MICROS_PER_SECOND
from theory.windowing.strategy import TimestampCombiner

_EVENT = st.one_of(
    st.tuples(st.just(ELEMENTS), st.just(((b"x", 0),))),
    st.tuples(st.just(WATERMARK), st.integers(0, 10**6)),
    st.tuples(st.just(PROCESSING_TIME), st.integers(1, 10**6)),
)


@settings(max_examples=60, deadline=None)
@given(
    streams=st.lists(st.lists(_EVENT, max_size=6), max_size=3),
    impulses=st.lists(st.sampled_from(["i1", "i2"]), unique=True),
)
def test_schedule_sends_each_event_once_in_turn_one_per_batch_and_resumes_anywhere(
    streams: list[list[tuple[str, object]]], impulses: list[str]
) -> None:
    sources = {f"s{i}": TestStreamSource(f"s{i}", "c", tuple(e)) for i, e in enumerate(streams)}
    batches = list(schedule(sources, impulses))
    assert [b.number for b in batches] == list(range(len(batches)))
    sent: dict[str, list[tuple[str, object]]] = {s: [] for s in sources}
    for b in batches[:-1]:
        assert b.source is not None
        events = [(ELEMENTS, v) for v in b.elements.values()]
        events += [(WATERMARK, v) for v in b.watermarks.values()]
        events += [(PROCESSING_TIME, b.clock_advance)] if b.clock_advance else []
        assert len(events) == 1  # one event of one source
        sent[b.source].append(events[0])
    assert sent == {s: list(sources[s].events) for s in sources}
    assert all(w == MAX_TIMESTAMP for w in batches[-1].watermarks.values())
    assert set(batches[-1].watermarks) == {*sources, *impulses}
    assert set(batches[0].impulses) == set(impulses)
    rounds = max((len(e) for e in streams), default=0)
    turns = [s for r in range(rounds) for s in sources if r < len(sources[s].events)]
    assert [b.source for b in batches[:-1]] == turns  # the streams take turns
    # resumed from the position after any batch, the schedule sends the rest unchanged
    assert batches[-1].position == Position(len(batches), {}, finished=True)
    for k, batch in enumerate(batches):
        assert batch.position is not None and batch.position.number == k + 1
        # through a pickle, as a checkpoint stores it
        start = pickle.loads(pickle.dumps(batch.position))
        resumed = [dataclasses.asdict(b) for b in schedule(sources, impulses, start)]
        assert resumed == [dataclasses.asdict(b) for b in batches[k + 1 :]]


@pytest.mark.parametrize("seed", range(40))
def test_beam_windowing_converts_back_to_the_same_theory_strategy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    unit = MICROS_PER_MILLI if seed % 2 else MICROS_PER_SECOND
    strategy = random_strategy(rng, unit)
    if strategy.timestamp_combiner is TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED:
        return  # Beam's runner API cannot carry it (see beam_pipelines.beam_runner)
    windowing = beam.WindowInto(**beam_windowing(strategy)).windowing
    assert to_theory(windowing, allow_unsafe_triggers=True) == strategy


def test_theory_strategy_names_what_it_cannot_convert() -> None:
    class Odd(beam.transforms.window.NonMergingWindowFn):
        def assign(self, context):  # type: ignore[no-untyped-def]
            return []

        def get_window_coder(self):  # type: ignore[no-untyped-def]
            from apache_beam.coders.coders import IntervalWindowCoder

            return IntervalWindowCoder()

    with pytest.raises(ValueError, match="window_fn: Odd has no theory counterpart"):
        to_theory(beam.WindowInto(Odd()).windowing)


def test_pipeline_graph_has_the_test_stream_as_source_and_reads_its_events() -> None:
    p = beam.Pipeline()
    stream = (
        BeamTestStream()
        .add_elements([beam.window.TimestampedValue(("a", 1), 2)])
        .advance_watermark_to(5)
        .advance_processing_time(3)
        .advance_watermark_to_infinity()
    )
    windowed = p | "events" >> stream | "window" >> beam.WindowInto(beam.window.FixedWindows(10))
    windowed | "sum" >> beam.CombinePerKey(sum) | "show" >> beam.Map(str)
    proto = p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())
    prepared, sources = streaming_proto(proto)
    events = sources["events"].events
    assert [k for k, _ in events] == [ELEMENTS, WATERMARK, PROCESSING_TIME, WATERMARK]
    assert events[0][1][0][1] == 2 * MICROS_PER_SECOND  # type: ignore[index]
    assert events[1][1] == 5 * MICROS_PER_SECOND and events[3][1] == MAX_TIMESTAMP
    assert events[2][1] == 3 * MICROS_PER_SECOND
    graph = PipelineWatermarks(prepared).graph
    assert graph.sources() == ("events",)
    # Combine.PerKey opened: its GroupByKey is a transform of its own
    assert "sum/GroupByKey" in graph.order
    assert graph.upstream("show") == ("sum/Combine/ParDo(CombineValuesDoFn)",)
