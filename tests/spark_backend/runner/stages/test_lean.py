"""The lean path against Beam's own code, without Spark.

- the columnar encoder writes Beam's coder bytes exactly;
- vectorised window assignment gives Beam's ``assign`` windows;
- seeded random pipelines of known transforms: every lean stage's output equals Beam's
  bundle processor's on the same input, element by element to the byte
  (:mod:`in_process`), and the stages that cannot be lean say why.
"""

from __future__ import annotations

import random
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.coders import coders
from apache_beam.runners.pipeline_utils import group_by_key_input_visitor
from apache_beam.transforms import combiners, environments
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Timestamp
from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN, PaneInfo, PaneInfoTiming
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.runner.plan.plan import BUNDLE_PROCESSOR, LEAN, plan_pipeline
from spark_backend.runner.stages.lean.batch import GLOBAL, Batch, Intervals
from spark_backend.runner.stages.lean.encode import BatchEncoder
from spark_backend.runner.stages.lean.windows import assign_windows
from tests.spark_backend.runner.conftest import Observe
from tests.spark_backend.runner.in_process import run_in_process

SUM: Any = sum

_MICROS = st.one_of(
    st.integers(-(10**15), 10**15),
    st.integers(MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros),
    st.sampled_from([MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros, -1, 0, 999, -1000, -1001]),
)
_PANES = st.sampled_from(
    [
        PANE_INFO_UNKNOWN,
        PaneInfo(True, True, PaneInfoTiming.ON_TIME, 0, 0),
        PaneInfo(False, False, PaneInfoTiming.LATE, 3, 1),
        PaneInfo(True, False, PaneInfoTiming.EARLY, 0, -1),
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    micros=st.lists(_MICROS, min_size=1, max_size=30),
    sizes=st.lists(st.integers(1, 10**12), min_size=30, max_size=30),
    interval=st.booleans(),
    panes=st.one_of(_PANES, st.lists(_PANES, min_size=30, max_size=30)),
    data=st.data(),
)
def test_the_columnar_encoder_writes_beams_bytes(
    micros: list[int], sizes: list[int], interval: bool, panes: Any, data: Any
) -> None:
    n = len(micros)
    column = np.array(micros, dtype=np.int64)
    values = data.draw(
        st.lists(
            st.tuples(st.text(max_size=3), st.integers(-(2**40), 2**40)), min_size=n, max_size=n
        )
    )
    start = np.clip(column, MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros - 10**12 - 1)
    windows: Any = Intervals(start, start + np.array(sizes[:n])) if interval else GLOBAL
    batch = Batch(values, column, windows, panes if isinstance(panes, PaneInfo) else panes[:n])
    window_coder = coders.IntervalWindowCoder() if interval else coders.GlobalWindowCoder()
    value_coder = coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()])
    coder = coders.WindowedValueCoder(value_coder, window_coder)
    expected = coder.get_impl().encode_all(list(batch.windowed_values()))
    assert BatchEncoder(coder).encode(batch) == expected


_WINDOW_FNS = st.one_of(
    st.just(beam_window.GlobalWindows()),
    st.builds(
        lambda size, offset: beam_window.FixedWindows(
            Duration(micros=size), Timestamp(micros=offset)
        ),
        st.integers(1, 10**9),
        st.integers(0, 10**9),
    ),
    st.builds(
        lambda period, k, offset: beam_window.SlidingWindows(
            Duration(micros=period * k), Duration(micros=period), Timestamp(micros=offset)
        ),
        st.integers(1, 10**6),
        st.integers(1, 4),
        st.integers(0, 10**6),
    ),
    st.builds(lambda gap: beam_window.Sessions(Duration(micros=gap)), st.integers(1, 10**9)),
)


@settings(max_examples=80, deadline=None)
@given(
    micros=st.lists(
        st.one_of(st.integers(-(10**13), 10**13), st.sampled_from([MIN_TIMESTAMP.micros])),
        min_size=1,
        max_size=20,
    ),
    window_fn=_WINDOW_FNS,
)
def test_vectorised_window_assignment_is_beams(micros: list[int], window_fn: Any) -> None:
    batch = Batch(
        list(range(len(micros))), np.array(micros, dtype=np.int64), GLOBAL, PANE_INFO_UNKNOWN
    )
    got = [
        [(w.start.micros, w.end.micros) if hasattr(w, "start") else repr(w) for w in ws]
        for ws in assign_windows(window_fn, batch).window_lists()
    ]
    expected = [
        [
            (w.start.micros, w.end.micros) if hasattr(w, "start") else repr(w)
            for w in window_fn.assign(
                beam_window.WindowFn.AssignContext(Timestamp(micros=m), element=i)
            )
        ]
        for i, m in enumerate(micros)
    ]
    assert got == expected


# --- random pipelines of known transforms, lean against Beam's bundle processor ----------


def _stamp(row: tuple[str, int, int]) -> Any:
    key, value, micros = row
    return beam_window.TimestampedValue((key, value), Timestamp(micros=micros))


def _window_fn(rng: random.Random, kind: str) -> Any:
    if kind == "fixed":
        return beam_window.FixedWindows(rng.choice([7, 30, 60]), offset=rng.choice([0, 3]))
    if kind == "sliding":
        return beam_window.SlidingWindows(rng.choice([20, 60]), rng.choice([5, 10]), offset=1)
    if kind == "sessions":
        return beam_window.Sessions(rng.choice([5, 30]))
    return beam_window.GlobalWindows()


_COMBINERS: list[Any] = [
    SUM,
    min,
    max,
    combiners.CountCombineFn(),
    combiners.MeanCombineFn(),
    combiners.TopCombineFn(2),  # not vectorised: Beam's own algorithm, per element
]


def random_pipeline(seed: int) -> Any:
    """Create -> timestamps -> Map/FlatMap/Filter -> WindowInto -> a combine or a GBK,
    then a Map on the result; random sizes, keys and window sizes; the window kind and
    the combiner cycle with the seed (12 seeds cover every pair of kind and combiner
    position mod 12), a GroupByKey every 5th seed, float values every 7th."""
    rng = random.Random(seed)
    n, keys = rng.choice([50, 400, 3000]), rng.choice([1, 7, 40])
    rows = [
        (f"k{rng.randrange(keys)}", rng.randrange(-50, 1000), rng.randrange(-(10**8), 6 * 10**8))
        for _ in range(n)
    ]
    window_fn = _window_fn(rng, ["fixed", "sliding", "sessions", "global"][seed % 4])
    combine = _COMBINERS[seed % len(_COMBINERS)]
    grouped = seed % 5 == 4
    floats = seed % 7 == 6  # float values: the exact path of the combine

    def build(p: beam.Pipeline) -> None:
        events = p | beam.Create(rows) | beam.Map(_stamp)
        if floats:
            events = events | "Floats" >> beam.Map(lambda kv: (kv[0], kv[1] / 4))
        events = (
            events
            | beam.Filter(lambda kv: kv[1] % 5 != 0)
            | beam.FlatMap(lambda kv: [kv, (kv[0] + "x", kv[1])] if kv[1] % 3 else [kv])
            | beam.WindowInto(window_fn)
        )
        if grouped:
            out = events | beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, sorted(vs)))
        else:
            out = events | beam.CombinePerKey(combine)
        _ = out | "Last" >> beam.Map(lambda kv: (kv[0], repr(kv[1])))
        _ = events | beam.combiners.Count.Globally().without_defaults()

    return build


def proto_of(build: Any) -> Any:
    p = beam.Pipeline()
    build(p)
    p.visit(group_by_key_input_visitor(True))
    return p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())


@pytest.mark.parametrize("seed", range(12))
def test_random_pipelines_lean_stages_equal_beams_bundles(seed: int) -> None:
    plan = plan_pipeline(proto_of(random_pipeline(seed)), lean=True)
    compared = run_in_process(plan, partitions=2)
    assert compared, "no stage ran lean"
    outputs = 0
    for name, reference, lean in compared:
        assert reference == lean, name
        outputs += sum(reference.values())
    assert outputs > 0  # not only empty stages


class _AfterPlainArgument(beam.DoFn):
    def process(self, x: int, y: int, ts: Any = beam.DoFn.TimestampParam) -> Any:
        yield x, y, ts


def test_a_dofn_asking_for_timestamp_window_and_pane_runs_lean_as_beam_runs_it() -> None:
    def build(p: beam.Pipeline) -> None:
        events = (
            p
            | beam.Create(range(60), reshuffle=False)
            | "Stamp" >> beam.Map(lambda x: beam_window.TimestampedValue(x, x * 7 + x % 5))
            | beam.WindowInto(beam_window.SlidingWindows(20, 5, offset=2))  # 4 windows each
        )
        asked = events | "Asks" >> beam.ParDo(Observe())  # timestamp, window and pane
        _ = asked | "ByTs" >> beam.Map(lambda v: (v[1] % 4, v)) | "G1" >> beam.GroupByKey()
        stamped = events | "TsOnly" >> beam.Map(lambda x, t=beam.DoFn.TimestampParam: (x, t.micros))
        _ = stamped | "G2" >> beam.GroupByKey()

    plan = plan_pipeline(proto_of(build), lean=True)
    (asks,) = [s for s in plan.stages if "Asks" in s.name]
    assert asks.path == LEAN and "TsOnly" in asks.name, plan.reasons
    compared = run_in_process(plan, partitions=2)
    for name, reference, lean in compared:
        assert reference == lean, name
    (asked,) = [r for name, r, _ in compared if "Asks" in name]
    assert sum(asked.values()) == 60 * 4 + 60  # Observe: one per window; TsOnly: one each
    off = plan_pipeline(proto_of(build), lean=False)  # the switch still turns lean off
    assert set(off.stage_paths.values()) == {BUNDLE_PROCESSOR}

    from spark_backend.runner.stages.lean.pardo import _plain

    assert "after arguments without defaults" in _plain(_AfterPlainArgument())
    assert _plain(Observe()) == ""


# --- uniform batches (one timestamp, the global window, one pane): the tight loop -------


class _Mixed(beam.DoFn):
    """Every kind of output Beam's output handler knows, on a global-window input."""

    def process(self, x: int) -> Any:
        if x % 11 == 0:
            return None  # no output
        if x % 7 == 0:
            return [beam.pvalue.TaggedOutput("other", x)]  # another tag: dropped
        if x % 5 == 0:
            return [beam_window.TimestampedValue(x, Timestamp(micros=x * 1001))]
        if x % 3 == 0:
            return [x, x + 1]
        return (y for y in (x, -x))


def uniform_pipeline(seed: int) -> Any:
    """Create (one timestamp for all) -> ParDos with every output kind, a fan-out of
    one element past the (test's) CHUNK, Count.PerElement with keys equal across types
    (1 and True), a sum, and a count of re-timestamped elements."""
    rng = random.Random(seed)
    rows = [rng.randrange(200) for _ in range(rng.choice([30, 300]))]

    def build(p: beam.Pipeline) -> None:
        xs = p | beam.Create(rows)
        mixed = xs | beam.ParDo(_Mixed())
        _ = mixed | "Key" >> beam.Map(lambda x: (x % 9, x)) | beam.CombinePerKey(SUM)
        wide = xs | "Wide" >> beam.FlatMap(lambda x: range(3_000) if x == rows[0] else [x])
        words = wide | "Word" >> beam.Map(lambda x: [1, True, 2, "a", x % 4][x % 5])
        _ = words | beam.combiners.Count.PerElement()
        _ = (
            wide
            | "Stamp" >> beam.Map(lambda x: beam_window.TimestampedValue(x, Timestamp(micros=x)))
            | "Count" >> beam.combiners.Count.Globally().without_defaults()
        )

    return build


@pytest.mark.parametrize("seed", range(2))
def test_uniform_batches_lean_equal_beams_bundles(seed: int, monkeypatch: Any) -> None:
    from spark_backend.runner.stages.lean import pardo as lean_pardo

    monkeypatch.setattr(lean_pardo, "CHUNK", 1_000)  # so that one element's outputs span several
    plan = plan_pipeline(proto_of(uniform_pipeline(seed)), lean=True)
    assert all("Create-Impulse" in name for name in plan.reasons), plan.reasons  # Reshuffle's
    compared = run_in_process(plan, partitions=2)
    lean_names = [name for name, _, _ in compared]
    assert any("Wide" in n and "Word" in n for n in lean_names), lean_names
    assert any("_Mixed" in n for n in lean_names), lean_names
    for name, reference, lean in compared:
        assert reference == lean, name
    assert sum(sum(r.values()) for _, r, _ in compared) > 0


def test_a_uniform_batch_is_told_apart() -> None:
    from spark_backend.runner.stages.lean.pardo import _has_special, _uniform

    same = np.full(3, 5, dtype=np.int64)
    assert _uniform(Batch([1, 2, 3], same, GLOBAL, PANE_INFO_UNKNOWN))
    assert not _uniform(Batch([1, 2, 3], np.array([5, 5, 6]), GLOBAL, PANE_INFO_UNKNOWN))
    assert not _uniform(Batch([1, 2, 3], same, GLOBAL, [PANE_INFO_UNKNOWN] * 3))
    assert not _uniform(Batch([1, 2, 3], same, Intervals(same, same + 1), PANE_INFO_UNKNOWN))
    assert not _uniform(Batch([], same[:0], GLOBAL, PANE_INFO_UNKNOWN))
    assert not _has_special(["a", 1, (2, None)])
    assert _has_special(["a", beam_window.TimestampedValue(1, Timestamp(micros=0))])


def test_the_global_count_refuses_a_value_that_is_not_a_pair_as_beam_does() -> None:
    from apache_beam.transforms.core import Windowing

    from spark_backend.runner.stages.lean.combine import PrecombineOp

    op = PrecombineOp(
        "Count", "t", combiners.CountCombineFn(), Windowing(beam_window.GlobalWindows())
    )
    ok = Batch([("a", None), ("b", 1), ("a", 2)], np.zeros(3, np.int64), GLOBAL, PANE_INFO_UNKNOWN)
    out: list[Batch] = []
    op.process(ok, out.append)
    op.finish(out.append)
    assert sorted(v for b in out for v in b.values) == [("a", 2), ("b", 1)]
    bad = Batch([("a", None), ("a", 1, 2)], np.zeros(2, np.int64), GLOBAL, PANE_INFO_UNKNOWN)
    with pytest.raises(ValueError, match=r"\[while running 'Count'\]"):
        op.process(bad, out.append)
