"""The lean path of an unbounded splittable DoFn's stage
(:mod:`spark_backend.runner.stages.lean.sdf`) against Beam's bundle processor, task by task,
without Spark.

The stage (the SDF, a Map, WindowInto and, in one pipeline, the lifted combine's
Precombine) is planned as streaming plans it; the same encoded element-restrictions go
through :func:`~spark_backend.runner.streaming.unbounded.sdf_batch` on both paths, and
the residuals each path defers go back in, round after round, until the restrictions
end. Every round, both paths give the same output elements (values, µs timestamps after
the coder's rounding, windows, panes) and the same residuals: the same bytes (element,
restriction, estimator state), resume time and watermark hold. The DoFn emits
TimestampedValues off whole milliseconds, plain values (the input's timestamp), outputs
to an undeclared tag, several elements per bundle, and defers with and without a delay.
The estimators: Beam's Monotonic, Manual and Walltime, the project's BoundedOutOfOrderness,
ProcessingTimeLag and Percentile; clock-based ones are compared on what does not depend on
the clock. (The project's tracking estimator runs on the lean path in
``test_pubsub_commit``, against the emulator.)

Last, on Spark: a lean SDF stage stopped after two batches and resumed from its
checkpoint writes every pane once.
"""

# ruff: noqa: B008

from __future__ import annotations

import dataclasses
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.watermark_estimators import (
    ManualWatermarkEstimator,
    WalltimeWatermarkEstimator,
)
from apache_beam.transforms import environments, window
from apache_beam.utils.timestamp import Duration, Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipelines.estimators import (
    BoundedOutOfOrdernessEstimatorProvider,
    PercentileEstimatorProvider,
    ProcessingTimeLagEstimatorProvider,
)
from spark_backend.runner.plan.plan import BUNDLE_PROCESSOR, LEAN, plan_pipeline
from spark_backend.runner.stages.bundles import METRICS
from spark_backend.runner.stages.task_context import coder
from spark_backend.runner.streaming.grouping import SUMMARY
from spark_backend.runner.streaming.sources import streaming_proto
from spark_backend.runner.streaming.unbounded import sdf_batch
from tests.spark_backend.runner.streaming.test_unbounded import MonotonicFromMin, Offsets

S = 1_000_000
ROUNDS = 4


#: name -> (provider, whether its watermark and state depend on the wall clock)
PROVIDERS = {
    "monotonic": (MonotonicFromMin(), False),
    "manual": (ManualWatermarkEstimator.default_provider(), False),
    "walltime": (WalltimeWatermarkEstimator.default_provider(), True),
    "bounded": (BoundedOutOfOrdernessEstimatorProvider("2s"), True),
    "lag": (ProcessingTimeLagEstimatorProvider(5 * S), True),
    "percentile": (PercentileEstimatorProvider(0.5, "1h"), True),
}
#: (estimator, whether a lifted count follows): every estimator before a GroupByKey,
#: two before the lifted combine's Precombine
CASES = [(name, False) for name in PROVIDERS] + [("monotonic", True), ("manual", True)]


def source(provider: Any, manual: bool) -> beam.DoFn:
    """Per bundle: claims the next position, emits three TimestampedValues (µs off whole
    ms, out of order), one plain value and one output to an undeclared tag, sets a
    Manual watermark, and defers (1 s delay on odd shards)."""

    class Source(beam.DoFn):
        def process(
            self,
            element: bytes,
            tracker: Any = beam.DoFn.RestrictionParam(Offsets(ROUNDS)),
            estimator: Any = beam.DoFn.WatermarkEstimatorParam(provider),
        ) -> Any:
            shard = int(element)  # the shard number, as the Impulse's bytes
            position = tracker.current_restriction().start
            if not tracker.try_claim(position):
                return
            for j in (2, 0, 1):
                micros = position * S + j * 400_123 + shard * 7
                yield window.TimestampedValue((shard, position, j), Timestamp(micros=micros))
            yield (shard, position, "plain")
            yield beam.pvalue.TaggedOutput("elsewhere", shard)
            if manual:
                estimator.set_watermark(Timestamp(micros=position * S + 3))
            tracker.defer_remainder(Duration(seconds=1) if shard % 2 else None)

    return Source()


def stage_of(provider: Any, combine: bool, manual: bool = False) -> tuple[Any, Any]:
    """The plan of ``Impulse -> SDF -> Map -> WindowInto -> (count per key | GroupByKey)``
    and its SDF stage."""
    p = beam.Pipeline()
    read = p | beam.Impulse() | "read" >> beam.ParDo(source(provider, manual))
    keyed = (
        read
        | "key" >> beam.Map(lambda e: (e[0], e))
        | "window" >> beam.WindowInto(window.FixedWindows(1))
    )
    if combine:
        keyed | "count" >> beam.combiners.Count.PerKey()
    else:
        keyed | "group" >> beam.GroupByKey()
    proto = p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())
    prepared, _ = streaming_proto(proto)
    plan = plan_pipeline(prepared, stateful_roots=True, lean=True, unbounded_sdf=True)
    (stage,) = [s for s in plan.stages if s.residual_inputs]
    return plan, stage


def initial_records(plan: Any, stage: Any, provider: Any, shards: int) -> list[tuple[str, bytes]]:
    (input_id,) = stage.inputs
    impl = coder(plan.job_id, plan.components, stage.input_coders[input_id]).get_impl()
    chunk = b""
    for shard in range(shards):
        restriction = Offsets(ROUNDS).initial_restriction(shard)
        state = provider.initial_estimator_state(shard, restriction)
        value = ((str(shard).encode(), (restriction, state)), ROUNDS)
        chunk += impl.encode_nested(
            WindowedValue(value, Timestamp(micros=-5), (window.GlobalWindow(),))
        )
    return [(input_id, chunk)]


def run(
    plan: Any, stage: Any, records: list[tuple[str, bytes]], clock: int
) -> tuple[Counter[Any], Any]:
    """One task: the output elements (value, µs, windows, pane) and the residuals."""
    return decoded_batch(plan, sdf_batch(stage, plan.job_id, plan.components, clock, records))


def decoded_batch(plan: Any, batch: Any) -> tuple[Counter[Any], Any]:
    """A task's records (:func:`sdf_batch`): its output elements and its residuals."""
    out: Counter[Any] = Counter()
    residuals = None
    for name, blob in batch:
        if name == SUMMARY:
            residuals = pickle.loads(blob).residuals
        elif name != METRICS:
            impl = coder(plan.job_id, plan.components, plan.groups[name].input_coder_id).get_impl()
            for wv in impl.decode_all(blob):
                out[wv.value, wv.timestamp.micros, tuple(wv.windows), wv.pane_info] += 1
    assert residuals is not None
    return out, residuals


def decoded(plan: Any, stage: Any, residual: Any) -> Any:
    impl = coder(plan.job_id, plan.components, stage.input_coders[residual.input_id]).get_impl()
    (wv,) = impl.decode_all(residual.element)
    (element, (restriction, state)), size = wv.value
    return wv, element, restriction, state, size


@pytest.mark.parametrize(("name", "combine"), CASES)
def test_the_lean_sdf_stage_gives_the_bundle_processors_outputs_and_residuals(
    name: str, combine: bool
) -> None:
    provider, clocked = PROVIDERS[name]
    plan, lean = stage_of(provider, combine, manual=name == "manual")
    assert lean.path == LEAN, lean.reason
    bundle = dataclasses.replace(lean, path=BUNDLE_PROCESSOR)
    records = {path: initial_records(plan, lean, provider, shards=3) for path in (LEAN, "b")}
    clock = 1_000 * S
    emitted = 0
    for round_ in range(ROUNDS):
        got, got_res = run(plan, lean, records[LEAN], clock)
        want, want_res = run(plan, bundle, records["b"], clock)
        assert got == want, f"round {round_}: outputs differ"
        emitted += sum(got.values())
        assert [r.input_id for r in got_res] == [r.input_id for r in want_res]
        for mine, theirs in zip(got_res, want_res, strict=True):
            wv, element, restriction, state, size = decoded(plan, lean, mine)
            wv_b, element_b, restriction_b, state_b, size_b = decoded(plan, lean, theirs)
            assert (element, restriction, size) == (element_b, restriction_b, size_b)
            assert (wv.timestamp, wv.windows, wv.pane_info) == (
                wv_b.timestamp,
                wv_b.windows,
                wv_b.pane_info,
            )
            if int(element) % 2 == 0:  # no delay: resumes at the clock after the batch
                assert mine.resume_at == theirs.resume_at == clock
            else:  # 1 s minus the time since defer_remainder
                assert clock < mine.resume_at <= clock + S and clock < theirs.resume_at
            if not clocked:
                assert mine.element == theirs.element  # the same bytes, state included
                assert mine.watermark == theirs.watermark
                assert state == state_b
        assert len(got_res) == (3 if round_ < ROUNDS - 1 else 0)  # the last claim ends it
        records = {
            LEAN: [(r.input_id, r.element) for r in got_res],
            "b": [(r.input_id, r.element) for r in want_res],
        }
        clock += 2 * S
    if not combine:  # 3 shards, 4 outputs a position (the undeclared tag's dropped)
        assert emitted == 3 * ROUNDS * 4


def test_a_manual_watermark_is_the_residuals_hold_and_millis_are_rounded_at_the_sink() -> None:
    """The hold is the Manual estimator's watermark (µs); the outputs' timestamps are
    rounded down to ms only by the GroupByKey's coder (as Beam's is)."""
    provider = ManualWatermarkEstimator.default_provider()
    plan, lean = stage_of(provider, combine=False, manual=True)
    out, residuals = run(plan, lean, initial_records(plan, lean, provider, shards=2), 0)
    assert [r.watermark for r in residuals] == [3, 3]  # position 0: 0 s + 3 µs
    stamps = sorted({micros for _, micros, _, _ in out})
    assert stamps == sorted(
        {(j * 400_123 + s * 7) // 1000 * 1000 for j in range(3) for s in (0, 1)} | {0}
    )
    # the plain value keeps the input's timestamp: -5 µs, which its coder made 0 ms
    assert any(value[1][2] == "plain" for value, *_ in out)


class _DrainsToOne(Offsets):
    """Beam's ``truncate`` on a drain: one more position on even shards, none on odd;
    with ``negative``, an empty restriction whose size is -1 (a DoFn's bug)."""

    def __init__(self, n: int, negative: bool = False) -> None:
        super().__init__(n)
        self.negative = negative

    def truncate(self, element: bytes, restriction: Any) -> Any:
        if self.negative:
            return OffsetRange(restriction.start, restriction.start)
        if int(element) % 2:
            return None
        return OffsetRange(restriction.start, restriction.start + 1)

    def restriction_size(self, element: Any, restriction: OffsetRange) -> int:
        return -1 if self.negative and not restriction.size() else int(restriction.size())


def _one_per_bundle(provider: _DrainsToOne) -> Any:
    """The stage of ``Impulse -> an SDF reading one position a bundle -> GroupByKey``."""

    class OnePerBundle(beam.DoFn):
        def process(
            self,
            element: bytes,
            tracker: Any = beam.DoFn.RestrictionParam(provider),
            estimator: Any = beam.DoFn.WatermarkEstimatorParam(MonotonicFromMin()),
        ) -> Any:
            position = tracker.current_restriction().start
            if tracker.try_claim(position):
                stamp = Timestamp(seconds=position)
                yield window.TimestampedValue((int(element), position), stamp)
                tracker.defer_remainder()

    p = beam.Pipeline()
    _ = (
        p
        | beam.Impulse()
        | "read" >> beam.ParDo(OnePerBundle())
        | "window" >> beam.WindowInto(window.FixedWindows(1))
        | "group" >> beam.GroupByKey()
    )
    proto = p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())
    plan = plan_pipeline(
        streaming_proto(proto)[0], stateful_roots=True, lean=True, unbounded_sdf=True
    )
    (lean,) = [s for s in plan.stages if s.residual_inputs]
    assert lean.path == LEAN, lean.reason
    return plan, lean


def test_a_drains_batch_runs_each_residual_truncated_by_its_dofn_and_keeps_none() -> None:
    """The drain's last batch (``sdf_batch(drain=True)``): each residual's restriction is
    cut by the DoFn's ``truncate`` (Beam's TruncateAndSizeRestriction: None drops it),
    ``process`` runs on what is left, and nothing deferred is kept; both paths alike."""
    plan, lean = _one_per_bundle(_DrainsToOne(ROUNDS))
    records = initial_records(plan, lean, MonotonicFromMin(), shards=3)
    outputs = []
    for stage in (lean, dataclasses.replace(lean, path=BUNDLE_PROCESSOR)):
        first, residuals = run(plan, stage, records, 0)
        assert len(residuals) == 3  # position 0 read, the rest deferred
        again = [(r.input_id, r.element) for r in residuals]
        drained = sdf_batch(stage, plan.job_id, plan.components, 0, again, drain=True)
        got, kept = decoded_batch(plan, drained)
        assert kept == ()  # the read ends in the drain's batch
        outputs.append(got)
        out, kept = run(plan, stage, again, 0)  # the same residuals, not drained: go on
        assert len(kept) == 3 and sum(out.values()) == sum(first.values()) == 3
    assert outputs[0] == outputs[1]
    # shards 0 and 2 read their one truncated position (1); shard 1 was dropped
    assert sorted(value for value, *_ in outputs[0]) == [(0, 1), (2, 1)]
    # a truncated restriction sized below 0 is refused before process runs, named
    plan, lean = _one_per_bundle(_DrainsToOne(ROUNDS, negative=True))
    _, residuals = run(plan, lean, initial_records(plan, lean, MonotonicFromMin(), 1), 0)
    again = [(r.input_id, r.element) for r in residuals]
    with pytest.raises(ValueError, match=r"read/Process: _DrainsToOne.restriction_size gave -1"):
        list(sdf_batch(lean, plan.job_id, plan.components, 0, again, drain=True))


class _Params(beam.DoFn):
    def process(
        self,
        element: Any,
        tracker: Any = beam.DoFn.RestrictionParam(Offsets(ROUNDS)),
        stamp: Any = beam.DoFn.TimestampParam,
    ) -> Any:
        yield element


def test_an_sdf_asking_for_what_the_lean_path_cannot_give_stays_on_the_bundle_processor() -> None:
    p = beam.Pipeline()
    _ = p | beam.Impulse() | "read" >> beam.ParDo(_Params()) | "key" >> beam.Map(lambda e: (e, 1))
    proto = p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())
    prepared, _ = streaming_proto(proto)
    plan = plan_pipeline(prepared, stateful_roots=True, lean=True, unbounded_sdf=True)
    (stage,) = [s for s in plan.stages if s.residual_inputs]
    assert stage.path == BUNDLE_PROCESSOR
    assert "TimestampParam" in stage.reason or "Timestamp" in stage.reason, stage.reason
    # the batch runner never plans an SDF stage lean (it loops residuals in the task)
    batch = plan_pipeline(prepared, lean=True)
    assert all(s.path == BUNDLE_PROCESSOR for s in batch.stages if s.residual_inputs)


# -- on Spark: the lean stage in a streaming run, stopped and resumed from its checkpoint

SHARDS, POSITIONS, PER = 2, ROUNDS, 300


def generated(shard: int, position: int) -> list[tuple[int, int]]:
    """Shard ``shard``'s (key, µs) at ``position``: ``PER`` elements in that second."""
    return [((shard * 7 + j) % 5, position * S + j * (S // PER) + shard) for j in range(PER)]


class Generate(beam.DoFn):
    """Claims the next second, emits its elements, puts the Manual watermark at the
    second's end and checkpoints."""

    def process(
        self,
        shard: int,
        tracker: Any = beam.DoFn.RestrictionParam(Offsets(ROUNDS)),
        estimator: Any = beam.DoFn.WatermarkEstimatorParam(
            ManualWatermarkEstimator.default_provider()
        ),
    ) -> Any:
        position = tracker.current_restriction().start
        if not tracker.try_claim(position):
            return
        for key, micros in generated(shard, position):
            yield window.TimestampedValue((key, 1), Timestamp(micros=micros))
        estimator.set_watermark(Timestamp(micros=(position + 1) * S))
        tracker.defer_remainder()


def test_a_lean_sdf_stage_stopped_and_resumed_from_its_checkpoint_loses_and_repeats_nothing(
    spark: Any, tmp_path: Path
) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipelines.pane_files import WritePanes, read_panes
    from spark_backend.runner import PySparkRunner

    out = tmp_path / "out"
    results = []
    for stop in (2, None):  # two batches, then on from the checkpoint to the end
        options = PipelineOptions(
            streaming=True,
            checkpoint_dir=str(tmp_path / "ckpt"),
            key_partitions=2,
            **({"max_batches": stop} if stop else {}),  # type: ignore[arg-type]
        )
        p = beam.Pipeline(runner=PySparkRunner(), options=options)
        (
            p
            | "shards" >> beam.Create(list(range(SHARDS)))
            | "read" >> beam.ParDo(Generate())
            | "window" >> beam.WindowInto(window.FixedWindows(1))
            | "count" >> beam.CombinePerKey(beam.combiners.CountCombineFn())
            | "write" >> WritePanes(out, "count")
        )
        result: Any = p.run()
        result.wait_until_finish()
        results.append(result)
    (sdf,) = [name for name in results[0].stage_paths if "read/Process" in name]
    assert [r.stage_paths[sdf] for r in results] == [LEAN, LEAN]
    assert [r.batches for r in results] == [2, POSITIONS - 2]  # one batch per position
    want: Counter[Any] = Counter()
    for shard in range(SHARDS):
        for position in range(POSITIONS):
            for key, micros in generated(shard, position):
                want[key, micros // S * S] += 1
    rows = read_panes(out, "count")
    assert {row.timing for row in rows} == {"ON_TIME"}
    assert Counter((row.key, row.start) for row in rows) == Counter(set(want))  # each once
    assert {(row.key, row.start): row.value for row in rows} == dict(want)
