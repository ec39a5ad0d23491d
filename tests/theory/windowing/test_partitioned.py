"""A grouping stage run as key partitions with external holds equals one run: every
pane, the watermark and hold series, drops, late counts and stall flags, on drawn
scripts under every modelled trigger, window fn and output policy. Times are µs."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.windowing import script_of, script_ops
from theory.windowing.fast_path import script_columns
from theory.windowing.pane_columns import PaneColumns
from theory.windowing.partitioned import local_parts, run_partitioned, split_by_key
from theory.windowing.runner import run_columns
from theory.windowing.script import ElementEvent, Script, WatermarkEvent
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    DefaultTrigger,
    Repeatedly,
)
from theory.windowing.windows import FixedWindows, Sessions, SlidingWindows

TRIGGERS = [
    DefaultTrigger(),
    AfterWatermark(late=AfterCount(1)),
    Repeatedly(AfterCount(2)),
    AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
    AfterWatermark(early=AfterProcessingTime(3)),  # (the engine, in every partition)
]
FNS = [FixedWindows(10, 3), SlidingWindows(12, 4), Sessions(6)]


def canon(r):
    pc = r.pane_columns
    rows = zip(
        r.pane_event.tolist(), map(repr, pc.key), pc.start.tolist(), pc.end.tolist(),
        (tuple(sorted(v)) for v in pc.value_lists()), pc.timestamp.tolist(),
        pc.timing.tolist(), pc.pane_index.tolist(), pc.nonspeculative_index.tolist(),
        pc.is_last.tolist(), strict=True,
    )  # fmt: skip
    return sorted(rows)


def columns_of(ops):
    return script_columns(Script(script_of(ops)).events)


OPS = script_ops("abcdef", processing_time=False)


@settings(max_examples=250, deadline=None)
@given(
    OPS,
    st.sampled_from(range(len(FNS))),
    st.sampled_from(range(len(TRIGGERS))),
    st.sampled_from(list(TimestampCombiner)),
    st.sampled_from(list(AccumulationMode)),
    st.integers(0, 15),
    st.integers(1, 4),
    st.booleans(),
)
def test_partitions_equal_one_run(ops, fn, trigger, combiner, mode, lateness, n_parts, fast):
    columns = columns_of(ops)
    strat = WindowingStrategy(
        FNS[fn], TRIGGERS[trigger], mode, lateness, combiner, allow_unsafe_triggers=True
    )
    one = run_columns(columns, strat, fast=False, build=True)
    parts = split_by_key(columns, n_parts)
    got = run_partitioned(columns, local_parts(parts, strat, fast), len(parts))
    assert canon(got) == canon(_with_columns(one))
    for series in ("input_watermark", "output_watermark", "state_hold", "processing_time"):
        assert np.array_equal(getattr(got, series), getattr(one, series)), series
    assert (got.dropped, got.late_elements, got.stalled, got.pending_processing_timers) == (
        one.dropped, one.late_elements, one.stalled, one.pending_processing_timers
    )  # fmt: skip


def _with_columns(r):
    return replace(r, pane_columns=PaneColumns.from_panes(r.panes))


def test_rounds_settle_where_other_keys_hold_the_output_watermark():
    """Key "b"'s hold at 2 keeps the output watermark at 1, so "a"'s element at 3 (older
    than the input watermark 5) still holds: only a second round, with b's hold as the
    external one, gives a's partition that (and a third confirms that b's partition,
    now held by a's too, is unchanged); the first alone would differ."""
    events = [ElementEvent([("b", 1, 2)]), WatermarkEvent(5), ElementEvent([("a", 2, 3)])]
    columns = script_columns(Script(events).events)
    strat = WindowingStrategy(
        FixedWindows(10), timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST
    )
    parts = split_by_key(columns, 2)
    rounds = []
    run = local_parts(parts, strat, True)

    def counted(external):
        rounds.append(external)
        return run(external)

    got = run_partitioned(columns, counted, 2)
    one = run_columns(columns, strat, fast=False)
    assert len(rounds) == 3
    assert np.array_equal(got.state_hold, one.state_hold)
    pc = got.pane_columns
    a_stamp = {repr(k): t for k, t in zip(pc.key, pc.timestamp, strict=True)}
    assert a_stamp["'a'"] == 3 == next(p.timestamp for p in one.panes if p.key == "a")
    alone = run([None, None])[1]  # a's partition in the first round: not held at 3
    assert alone.pane_columns.key == ["a"] and alone.pane_columns.timestamp.tolist() == [9]
    with pytest.raises(RuntimeError, match="settle"):
        run_partitioned(columns, run, 2, max_rounds=1)
