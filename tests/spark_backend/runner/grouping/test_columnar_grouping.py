"""The columnar GroupByKey (grouping.keyed_columns, grouping.columns) against the engine path,
without Spark.

- ``coded_micros`` and the window rounding equal Beam's coder round trip;
- seeded random pipelines (random WindowFns: fixed and sliding with offsets, sessions;
  the three timestamp combiners; str, int and tuple keys; int, float and str values):
  every columnar GroupByKey's output, from the lean stage's columns and from Beam's
  bytes, sorted with numpy and (forced) by the engine on the same columns, equals the
  byte-pair path's (theory's engine, itself checked against FnApiRunner on Spark):
  values, timestamps, windows and panes, element by element, a pane's values as a
  multiset.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.coders import coders
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from apache_beam.utils.windowed_value import WindowedValue
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.runner.batch.summary import METRICS
from spark_backend.runner.grouping import columns as column_grouping
from spark_backend.runner.grouping.engine import engine_strategy
from spark_backend.runner.grouping.group_by_key import (
    columns_partition,
    encode_chunks,
    engine_partition,
    keyed_elements,
    split_columns,
    split_elements,
)
from spark_backend.runner.grouping.keyed_columns import KeyedColumns, coded_micros, concat
from spark_backend.runner.plan.plan import LEAN, THEORY_ENGINE, plan_pipeline
from spark_backend.runner.stages.bundles import run_partition
from spark_backend.runner.stages.lean.program import run_lean_partition
from spark_backend.runner.stages.task_context import coder_impl
from tests.spark_backend.runner.in_process import stage_records
from tests.spark_backend.runner.stages.test_lean import proto_of


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(10**7), 10**7),
            st.sampled_from([MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros, -1, 0, -999, -1000]),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_coded_micros_is_beams_coder_round_trip(micros: list[int]) -> None:
    impl = coders.WindowedValueCoder(coders.VarIntCoder()).get_impl()
    expected = [
        impl.decode(impl.encode(WindowedValue(0, Timestamp(micros=m), ()))).timestamp.micros
        for m in micros
    ]
    assert coded_micros(np.array(micros, dtype=np.int64)).tolist() == expected


_COMBINERS = [
    beam_window.TimestampCombiner.OUTPUT_AT_EOW,
    beam_window.TimestampCombiner.OUTPUT_AT_EARLIEST,
    beam_window.TimestampCombiner.OUTPUT_AT_LATEST,
]


def _window_fn(rng: random.Random, kind: str) -> Any:
    if kind == "fixed":
        return beam_window.FixedWindows(rng.choice([7, 30, 60]), offset=rng.choice([0, 3.5]))
    if kind == "sliding":
        return beam_window.SlidingWindows(
            rng.choice([20, 60]), rng.choice([5, 10]), offset=rng.choice([1, 2.25])
        )
    return beam_window.Sessions(rng.choice([0.5, 5, 30]))


def _key(rng: random.Random, kind: int, keys: int) -> Any:
    k = rng.randrange(keys)
    return [f"k{k}", k, (k % 3, f"t{k}")][kind]


def _value(rng: random.Random, kind: int) -> Any:
    v = rng.randrange(-50, 1000)
    return [v, v / 8, f"v{v}"][kind]


def grouping_pipeline(seed: int) -> Any:
    """Create -> timestamps (µs, some negative) -> WindowInto(random fn, combiner, the
    default trigger or AfterWatermark()) -> GroupByKey and CombinePerKey(sum of ints):
    the window kind, combiner, trigger, key and value types cycle with the seed."""
    rng = random.Random(seed)
    n, keys = rng.choice([60, 300, 900]), rng.choice([1, 6, 50])
    key_kind, value_kind = seed % 3, (seed // 3) % 3
    rows = [
        (_key(rng, key_kind, keys), _value(rng, value_kind), rng.randrange(-(10**8), 4 * 10**8))
        for _ in range(n)
    ]
    window_fn = _window_fn(rng, ["fixed", "sliding", "sessions"][seed % 3])
    combiner = _COMBINERS[(seed // 3) % 3]
    trigger = beam_trigger.AfterWatermark() if seed % 2 else beam_trigger.DefaultTrigger()

    def stamp(row: tuple[Any, Any, int]) -> Any:
        return beam_window.TimestampedValue((row[0], row[1]), Timestamp(micros=row[2]))

    def build(p: beam.Pipeline) -> None:
        events = (
            p
            | beam.Create(rows)
            | beam.Map(stamp)
            | beam.WindowInto(
                window_fn,
                trigger=trigger,
                timestamp_combiner=combiner,
                accumulation_mode=beam_trigger.AccumulationMode.DISCARDING,
            )
        )
        _ = events | beam.GroupByKey() | "G" >> beam.Map(lambda kv: kv)
        ints = events | "Ints" >> beam.Map(lambda kv: (kv[0], int(hash(kv[1]) % 100)))
        _ = ints | beam.CombinePerKey(sum) | "C" >> beam.Map(lambda kv: kv)

    return build


def _canonical(chunks: list[bytes], impl: Any) -> Counter[Any]:
    """Output elements as (key, sorted values, µs, window, pane)."""
    out: Counter[Any] = Counter()
    for chunk in chunks:
        for wv, _ in split_elements(chunk, impl):
            key, values = wv.value
            window = tuple((w.start.micros, w.end.micros) for w in wv.windows)
            out[
                repr(key),
                tuple(sorted(map(repr, values))),
                wv.timestamp.micros,
                window,
                repr(wv.pane_info),
            ] += 1
    return out


def _stage_outputs(plan: Any) -> tuple[dict[bytes, list[bytes]], dict[bytes, list[Any]]]:
    """Every buffer's chunks, run on Beam's bundles (bytes), and each columnar group
    buffer's chunks from its lean stage with columnar sinks (KeyedColumns)."""
    buffers: dict[bytes, list[bytes]] = defaultdict(list)
    columns: dict[bytes, list[Any]] = defaultdict(list)
    for spec in plan.stages:
        records = stage_records(plan, spec, buffers)
        for buffer, chunk in run_partition(spec, plan.job_id, plan.components, {}, records):
            if buffer != METRICS:
                buffers[buffer].append(chunk)
        columnar = frozenset(
            t for t, b in spec.outputs.items() if b in plan.groups and plan.groups[b].columnar
        )
        if spec.path == LEAN and columnar:
            for part in (records[0::2], records[1::2]):
                for buffer, chunk in run_lean_partition(
                    spec.descriptor, spec.outputs, part, columnar
                ):
                    if buffer != METRICS:
                        assert isinstance(chunk, KeyedColumns)
                        columns[buffer].append(chunk)
    return buffers, columns


def _columnar_outputs(plan: Any, group: Any, chunks: list[Any], partitions: int) -> list[bytes]:
    pieces: dict[int, list[Any]] = defaultdict(list)
    for chunk in chunks:
        for part, cols in split_columns(chunk, group, plan.job_id, plan.components, partitions):
            assert 0 <= part < partitions
            pieces[part].append((part, cols))
    return [
        c
        for records in pieces.values()
        for c in columns_partition(records, group, plan.job_id, plan.components)
    ]


@pytest.mark.parametrize("seed", range(9))
def test_columnar_grouping_equals_the_engine_path(seed: int, monkeypatch: Any) -> None:
    plan = plan_pipeline(proto_of(grouping_pipeline(seed)), lean=True)
    groups = {b: g for b, g in plan.groups.items() if g.path == THEORY_ENGINE}
    assert len(groups) == 2 and all(g.columnar for g in groups.values()), plan.groups
    buffers, columns = _stage_outputs(plan)
    for buffer, group in groups.items():
        impl = coder_impl(plan.job_id, plan.components, group.output_coder_id)
        job, components = plan.job_id, plan.components
        pairs = [p for c in buffers[buffer] for p in keyed_elements(c, group, job, components)]
        expected = _canonical(list(engine_partition(pairs, group, job, components)), impl)
        assert expected, group.label
        assert columns[buffer], f"{group.label}: the lean stage wrote no columns"
        from_lean = _columnar_outputs(plan, group, columns[buffer], partitions=3)
        assert _canonical(from_lean, impl) == expected, group.label
        from_bytes = _columnar_outputs(plan, group, buffers[buffer], partitions=1)
        assert _canonical(from_bytes, impl) == expected, group.label
        with monkeypatch.context() as m:  # the engine on the same columns
            m.setattr("spark_backend.runner.grouping.group_by_key.grouped_rows", lambda *_: None)
            by_engine = _columnar_outputs(plan, group, columns[buffer], partitions=2)
        assert _canonical(by_engine, impl) == expected, group.label


def _columns(starts: list[int], ends: list[int]) -> KeyedColumns:
    """One key (BytesCoder, nested), values 0, 1, ... (VarIntCoder), each row at its
    window's start; ``starts``, ``ends`` in ms."""
    n = len(starts)
    starts, ends = [s * 1000 for s in starts], [e * 1000 for e in ends]
    return KeyedColumns(
        [coders.BytesCoder().get_impl().encode_nested(b"k")],
        np.zeros(n, dtype=np.int64),
        pa.array([coders.VarIntCoder().encode(i) for i in range(n)], pa.large_binary()),
        np.array(starts, dtype=np.int64),
        np.array(starts, dtype=np.int64),
        np.array(ends, dtype=np.int64),
    )


@pytest.mark.parametrize(
    "starts, ends, sessions",
    [
        ([0, 10_000, 20_000], [10_000, 20_000, 30_000], 3),  # touching: apart
        ([0, 9_999, 20_000], [10_000, 19_999, 30_000], 2),  # overlapping by 1 ms: merged
        ([5_000, 0, 5_000], [15_000, 10_000, 15_000], 1),  # out of order, a repeat
    ],
)
def test_sessions_merge_as_in_the_engine(starts: list[int], ends: list[int], sessions: int) -> None:
    columns = _columns(starts, ends)
    windowing = beam.transforms.core.Windowing(beam_window.Sessions(10))
    rows = column_grouping.grouped_rows(columns, windowing)
    assert rows is not None
    impl = coders.WindowedValueCoder(
        coders.TupleCoder([coders.BytesCoder(), coders.IterableCoder(coders.VarIntCoder())]),
        coders.IntervalWindowCoder(),
    ).get_impl()
    key = coders.BytesCoder().get_impl()
    value = coders.VarIntCoder().get_impl()
    theory = engine_strategy(windowing)
    assert not isinstance(theory, str)
    engine_chunks = encode_chunks(column_grouping.engine_values(columns, theory, key, value), impl)
    engine = [e for c in engine_chunks for e, _ in split_elements(c, impl)]
    by_sort = [
        e
        for c in column_grouping.encode_panes(columns, rows, 1 << 20)
        for e, _ in split_elements(c, impl)
    ]
    canonical = lambda es: sorted(  # noqa: E731
        (e.value[0], sorted(e.value[1]), e.timestamp, e.windows, e.pane_info) for e in es
    )
    assert canonical(by_sort) == canonical(engine)
    assert len(engine) == sessions


def test_the_sort_refuses_what_it_does_not_model() -> None:
    sessions = beam.transforms.core.Windowing(beam_window.Sessions(10))
    assert column_grouping.grouped_rows(_columns([0, 1000], [10_000, 11_000]), sessions)
    # a later-starting window that ends first (windows merged before): not a plain sweep
    assert column_grouping.grouped_rows(_columns([0, 1000], [20_000, 11_000]), sessions) is None
    edge = _columns([0], [MAX_TIMESTAMP.micros // 1000])
    assert column_grouping.grouped_rows(edge, sessions) is None
    transformed: Any = beam_window.TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED
    combined = beam.transforms.core.Windowing(
        beam_window.Sessions(10), timestamp_combiner=transformed
    )
    assert column_grouping.grouped_rows(_columns([0], [10_000]), combined) is None
    joined = concat([_columns([0], [5]), _columns([7, 8], [9, 9])])
    assert len(joined) == 3 and joined.keys == [joined.keys[0]] and joined.codes.tolist() == [0] * 3
