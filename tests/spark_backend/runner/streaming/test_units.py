"""The streaming runner's driver-side parts without Spark: the sources' schedule (and
its resumption from a checkpoint's position), the
Beam -> theory windowing conversion, and the stage graph of a pipeline."""

from __future__ import annotations

import dataclasses

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
from spark_backend.runner.streaming import codec
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
from tests.spark_backend.runner.streaming.events import EVENT
from theory.time import MAX_TIMESTAMP, MICROS_PER_MILLI, MICROS_PER_SECOND
from theory.windowing.strategy import TimestampCombiner


@settings(max_examples=60, deadline=None)
@given(
    streams=st.lists(st.lists(EVENT, max_size=6), max_size=3),
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
        # through the codec, as a checkpoint stores it
        start = codec.decode(codec.encode(batch.position))
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
    assert events[0][1].micros.tolist() == [2 * MICROS_PER_SECOND]  # type: ignore[union-attr]
    assert events[0][1].values == [("a", 1)]  # type: ignore[union-attr]
    assert events[1][1] == 5 * MICROS_PER_SECOND and events[3][1] == MAX_TIMESTAMP
    assert events[2][1] == 3 * MICROS_PER_SECOND
    graph = PipelineWatermarks(prepared).graph
    assert graph.sources() == ("events",)
    # Combine.PerKey (lifted or opened): its GroupByKey is a transform of its own
    assert "sum/GroupByKey" in graph.order
    assert graph.upstream("show") == ("sum/Combine/ParDo(CombineValuesDoFn)",)
    # two batches at one test-clock time: the series over time keeps the last, the
    # series per batch keeps both
    marks = PipelineWatermarks(prepared)
    for watermark in (2 * MICROS_PER_SECOND, 5 * MICROS_PER_SECOND):
        marks.tracker.apply(source_watermarks={"events": watermark})
        marks.record(7 * MICROS_PER_SECOND)
    by_time = marks.series("show")["input"]
    assert by_time.at(np.asarray([7 * MICROS_PER_SECOND])).tolist() == [5 * MICROS_PER_SECOND]
    per_batch = marks.series("show", per_batch=True)["input"]
    assert per_batch.at(np.arange(2)).tolist() == [2 * MICROS_PER_SECOND, 5 * MICROS_PER_SECOND]


# -- a stateful stage's task, without Spark ----------------------------------------------


class _Sums(beam.DoFn):
    """Adds each value to a bag and sets an event-time timer at 10 s; on firing, emits
    the bag's sum at the timer's timestamp."""

    from apache_beam.transforms import userstate as _us

    BAG = _us.BagStateSpec("bag", beam.coders.VarIntCoder())
    AT = _us.TimerSpec("at", _us.TimeDomain.WATERMARK)

    def process(
        self,
        kv,  # type: ignore[no-untyped-def]
        bag=beam.DoFn.StateParam(BAG),  # noqa: B008
        at=beam.DoFn.TimerParam(AT),  # noqa: B008
    ):
        bag.add(kv[1])
        at.set(beam.utils.timestamp.Timestamp(seconds=10))
        return iter(())

    @_us.on_timer(AT)
    def fire(self, key=beam.DoFn.KeyParam, bag=beam.DoFn.StateParam(BAG)):  # noqa: B008
        yield (key, sum(bag.read()))


def test_stateful_task_keeps_state_and_timers_in_one_pickled_record_per_partition() -> None:
    """Two batches of one partition through ``stateful_batch`` with Beam's SDK worker:
    the state record of the first (one pickle) restores bag and timer in the second;
    the hold is the pending timer's until it fires when the watermark reaches it."""
    import pickle

    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.windowed_value import WindowedValue

    from spark_backend.runner.plan.plan import plan_pipeline
    from spark_backend.runner.stages.bundles import METRICS
    from spark_backend.runner.stages.task_context import coder
    from spark_backend.runner.streaming.grouping import SUMMARY, BatchTimes
    from spark_backend.runner.streaming.keyed_state import PartitionState, stateful_batch

    p = beam.Pipeline()
    (
        p
        | BeamTestStream().add_elements([("k", 1)])
        | beam.Map(lambda kv: kv).with_output_types(tuple[str, int])
        | "Sums" >> beam.ParDo(_Sums())
        | beam.WindowInto(beam.transforms.window.FixedWindows(60))
        | beam.GroupByKey()  # a data output of the stage, to read its elements
    )
    proto = p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())
    prepared, _ = streaming_proto(proto)
    plan = plan_pipeline(prepared, stateful_roots=True)
    (spec,) = [s for s in plan.stages if s.stateful]
    (input_id,) = spec.inputs
    element_coder = coder(plan.job_id, plan.components, spec.input_coders[input_id])
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    (out_id,) = spec.outputs
    port = beam_fn_api_pb2.RemoteGrpcPort.FromString(descriptor.transforms[out_id].spec.payload)
    out_coder = coder(plan.job_id, plan.components, port.coder_id)

    def element(value: int) -> tuple[bytes, tuple[str, bytes]]:
        wv = WindowedValue(
            ("k", value), beam.utils.timestamp.Timestamp(seconds=value), (GlobalWindow(),)
        )
        return b"k", (input_id, element_coder.get_impl().encode_nested(wv))

    def run(times: BatchTimes, records: list) -> dict:
        out: dict = {"outputs": [], "state": None}
        for key, value in stateful_batch(spec, plan.job_id, plan.components, times, 0, records):
            if isinstance(key, int):
                out["state"] = value
            elif key == SUMMARY:
                out["summary"] = pickle.loads(value)
            elif key != METRICS:
                out["outputs"] += [v.value for v in out_coder.get_impl().decode_all(value)]
        return out

    s = 1_000_000
    first = run(BatchTimes(0, 5 * s, 0, 0, 0), [element(1), element(2)])
    assert first["outputs"] == []
    assert isinstance(pickle.loads(first["state"]), PartitionState)
    assert first["summary"].hold == 10 * s and first["summary"].next_watermark_timer == 10 * s
    second = run(BatchTimes(5 * s, 10 * s, 5 * s, 0, 0), [(0, first["state"]), element(4)])
    assert second["outputs"] == [("k", 7)]  # 1 + 2 restored from the record, + 4
    assert second["summary"].hold is None and second["summary"].fired == 1


@settings(max_examples=60, deadline=None)
@given(
    timers=st.lists(
        st.tuples(st.integers(0, 20), st.integers(0, 20), st.booleans(), st.sampled_from("fg")),
        max_size=12,
    ),
    watermark=st.integers(0, 20),
    clock=st.integers(0, 20),
)
def test_due_timers_fire_in_fire_then_setting_order_and_only_when_due(
    timers: list[tuple[int, int, bool, str]], watermark: int, clock: int
) -> None:
    """``keyed_state._rounds``: a round fires exactly the timers due (event time against
    the input watermark, processing time against the clock), sorted by fire timestamp
    then by when their slot was first set, one bundle per run of one family."""
    from spark_backend.runner.streaming.grouping import BatchTimes
    from spark_backend.runner.streaming.keyed_state import PartitionState, PendingTimer, _rounds

    state = PartitionState()
    for i, (fire, hold, event_time, family) in enumerate(timers):
        slot = ("t", family, bytes([i]))
        state.timers[slot] = PendingTimer(fire, hold, event_time, bytes([i]), i)
    pending = dict(state.timers)
    fired = [0]
    rounds = list(_rounds(None, state, [], BatchTimes(0, watermark, 0, 0, clock), fired))  # type: ignore[arg-type]
    order = [t for r in rounds for chunk in r.timers.values() for t in chunk]
    due = [t for t in pending.values() if t.fire <= (watermark if t.event_time else clock)]
    expected = sorted(due, key=lambda t: (t.fire, t.order))
    assert order == [t.encoded[0] for t in expected]
    assert all(len(r.timers) == 1 for r in rounds)  # one family per bundle
    assert fired == [len(due)]
    assert set(state.timers.values()) == set(pending.values()) - set(due)
