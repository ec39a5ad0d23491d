"""The translation table: every URN Beam's optimiser makes of the runner's supported shapes
(batch and streaming) has an entry; the entries name modules that exist; the check's lists
and the lean path's ops are the table's (no Spark needed: only Beam's phases run)."""

# ruff: noqa: B008

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.testing import test_stream
from apache_beam.transforms import environments, userstate, window
from apache_beam.transforms import trigger as beam_trigger

from spark_backend.runner.plan import plan as plan_module
from spark_backend.runner.plan import validate
from spark_backend.runner.plan.translation_table import (
    COMPOSITES_RUN_WHOLE,
    STREAMING_ONLY_URNS,
    SUPPORTED_LEAF_URNS,
    TRANSLATIONS,
)
from spark_backend.runner.runner import batch_plan
from spark_backend.runner.stages.lean import program
from spark_backend.runner.streaming.sources import streaming_proto

_P = common_urns.primitives


class _Counted(beam.DoFn):
    """State and an event-time timer (what batch and streaming both run)."""

    COUNT = userstate.CombiningValueStateSpec("count", sum)
    FLUSH = userstate.TimerSpec("flush", userstate.TimeDomain.WATERMARK)

    def process(
        self,
        kv: Any,
        count: Any = beam.DoFn.StateParam(COUNT),
        flush: Any = beam.DoFn.TimerParam(FLUSH),
    ) -> Any:
        count.add(1)
        flush.set(10)
        yield kv

    @userstate.on_timer(FLUSH)
    def on_flush(self, count: Any = beam.DoFn.StateParam(COUNT)) -> Any:
        yield count.read()


def _batch_shapes(p: beam.Pipeline, text: str) -> None:
    nums = p | "nums" >> beam.Create(list(range(10)))
    kv = nums | "kv" >> beam.Map(lambda x: (x % 3, x)) | beam.Filter(bool)
    _ = kv | beam.Reshuffle()
    _ = kv | "group" >> beam.GroupByKey()
    _ = kv | "fixed" >> beam.WindowInto(window.FixedWindows(5)) | "fixed/gbk" >> beam.GroupByKey()
    _ = kv | "sessions" >> beam.WindowInto(window.Sessions(5)) | "sessions/gbk" >> beam.GroupByKey()
    _ = kv | beam.CombinePerKey(sum)
    _ = nums | beam.CombineGlobally(sum)
    _ = nums | beam.combiners.Top.Of(3)
    side = nums | "side" >> beam.Map(lambda x: x)
    _ = nums | "sides" >> beam.Map(
        lambda x, a, b: x, beam.pvalue.AsList(side), beam.pvalue.AsDict(kv)
    )
    _ = kv | beam.ParDo(_Counted())
    _ = (nums, side | beam.Map(str)) | beam.Flatten()
    _ = {"a": kv, "b": kv | "kv2" >> beam.Map(lambda x: x)} | beam.CoGroupByKey()
    _ = p | beam.io.ReadFromText(text) | "len" >> beam.Map(len)


def _streaming_shapes(p: beam.Pipeline) -> None:
    stream = (
        test_stream.TestStream()
        .add_elements([1, 2])
        .advance_watermark_to(10)
        .add_elements([3])
        .advance_watermark_to_infinity()
    )
    kv = (
        p
        | stream
        | beam.Map(lambda x: (x % 2, x))
        | beam.WindowInto(
            window.FixedWindows(5),
            trigger=beam_trigger.AfterWatermark(late=beam_trigger.AfterCount(1)),
            accumulation_mode=beam_trigger.AccumulationMode.DISCARDING,
            allowed_lateness=10,
        )
    )
    _ = kv | beam.CombinePerKey(sum)
    _ = kv | "opened" >> beam.CombinePerKey(sum).with_hot_key_fanout(2)
    _ = kv | beam.GroupByKey()
    _ = kv | beam.ParDo(_Counted())
    _ = kv | "sessions" >> beam.WindowInto(window.Sessions(3)) | "sessions/gbk" >> beam.GroupByKey()


def _proto(build: Any, streaming: bool) -> Any:
    p = beam.Pipeline(options=PipelineOptions(streaming=streaming))
    build(p)
    return p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """The URNs of the shapes' leaves, and of the transforms of Beam's fused stages (those
    the runner executes, and those in each stage's bundle descriptor), batch and
    streaming, every path."""
    text = tmp_path_factory.mktemp("text") / "in.txt"
    text.write_text("a\nb\n")
    stage_urns: set[str] = set()
    create = translations.create_and_optimize_stages

    def recording(*args: Any, **kwargs: Any) -> Any:
        context, stages = create(*args, **kwargs)
        stage_urns.update(t.spec.urn for s in stages for t in s.transforms)
        return context, stages

    def descriptors(plan: Any) -> set[str]:
        return {
            t.spec.urn
            for spec in plan.stages
            for t in beam_fn_api_pb2.ProcessBundleDescriptor.FromString(
                spec.descriptor
            ).transforms.values()
        }

    batch = _proto(lambda p: _batch_shapes(p, str(text)), streaming=False)
    streaming = _proto(_streaming_shapes, streaming=True)
    validate.check_pipeline(batch)
    validate.check_pipeline(streaming, streaming=True)
    urns: set[str] = set()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(translations, "create_and_optimize_stages", recording)
        for fast in (True, False):  # (lean text reads, or Beam's splittable one)
            urns |= descriptors(batch_plan(batch, fast))
        prepared, _ = streaming_proto(streaming, lift=True, stripped={})
        urns |= descriptors(
            plan_module.plan_pipeline(
                prepared, stateful_roots=True, lean=True, unbounded_sdf=True,
                pack_combiners=False,
            )
        )
    leaves = {
        t.spec.urn
        for proto in (batch, streaming)
        for t in proto.components.transforms.values()
        if not t.subtransforms or t.spec.urn in COMPOSITES_RUN_WHOLE
    }
    return {"leaves": leaves, "optimised": urns | stage_urns}


def test_every_urn_the_optimiser_makes_of_the_supported_shapes_is_in_the_table(
    produced: dict[str, set[str]],
) -> None:
    missing = produced["optimised"] - set(TRANSLATIONS)
    assert not missing, f"no translation for {sorted(missing)}"
    # the shapes reach the combiner phases, the data channels and a read from an impulse
    assert {
        common_urns.combine_components.COMBINE_PER_KEY_PRECOMBINE.urn,
        "beam:runner:source:v1",
        "beam:transform:read_from_impulse_python:v1",
        common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn,
    } <= produced["optimised"]


def test_every_leaf_of_the_supported_shapes_is_a_table_leaf(
    produced: dict[str, set[str]],
) -> None:
    # the shapes' Create and Reshuffle keep a pass-through leaf the check skips
    leaves = produced["leaves"] - {"beam:transform:pickled_python:v1"}
    assert leaves <= {u for u, t in TRANSLATIONS.items() if t.leaf}, leaves
    assert _P.TEST_STREAM.urn in leaves


def test_the_checks_lists_are_the_tables() -> None:
    assert validate.SUPPORTED_LEAF_URNS is SUPPORTED_LEAF_URNS
    assert validate.STREAMING_ONLY_URNS is STREAMING_ONLY_URNS
    # the leaf kinds a batch run executes
    assert {
        _P.IMPULSE.urn,
        _P.PAR_DO.urn,
        _P.FLATTEN.urn,
        _P.GROUP_BY_KEY.urn,
        _P.ASSIGN_WINDOWS.urn,
        common_urns.deprecated_primitives.READ.urn,
        common_urns.composites.COMBINE_PER_KEY.urn,
        *translations.PAR_DO_URNS,
    } == SUPPORTED_LEAF_URNS
    assert {_P.TEST_STREAM.urn} == STREAMING_ONLY_URNS
    assert {common_urns.composites.COMBINE_PER_KEY.urn} == COMPOSITES_RUN_WHOLE
    # a streaming refusal is the table's reason
    assert TRANSLATIONS[common_urns.deprecated_primitives.READ.urn].streaming == (
        "reads are not supported in streaming yet"
    )


def test_the_named_modules_exist_and_the_lean_ops_are_the_tables() -> None:
    runner = Path(plan_module.__file__).parents[1]
    named = {
        m
        for t in TRANSLATIONS.values()
        for side in (t.batch, t.streaming)
        if isinstance(side, tuple)
        for m in side
    } | {t.lean for t in TRANSLATIONS.values() if t.lean}
    absent = [m for m in named if not (runner / (m.replace(".", "/") + ".py")).is_file()]
    assert not absent, absent
    for urn, t in TRANSLATIONS.items():  # each runs somewhere; a refusal is a sentence
        assert isinstance(t.batch, tuple) or isinstance(t.streaming, tuple), urn
        assert all(side for side in (t.batch, t.streaming)), urn
    lean = {u for u, t in TRANSLATIONS.items() if t.lean}
    assert lean == set(program._BUILDERS), lean ^ set(program._BUILDERS)
