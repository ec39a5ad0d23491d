"""The vectorised session path against the incremental engine: every pane (values as
multisets), watermark series, drops and stall flags, on drawn and seeded scripts; and
its refusals, each leaving the script to the engine. Times are µs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.windowing import assert_same, script_of, script_ops
from theory.windowing import session_path
from theory.windowing.fast_path import Refusal, key_codes, script_columns
from theory.windowing.runner import run_columns, run_script
from theory.windowing.script import (
    ElementEvent,
    Event,
    Script,
    WatermarkEvent,
)
from theory.windowing.session_path import run_sessions_columns
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import AfterCount, AfterWatermark, DefaultTrigger, Repeatedly
from theory.windowing.windows import Sessions


def ops(late):
    return script_ops(offsets=(-8 if late else 0, 40), batch=5, step=15)


@settings(max_examples=300, deadline=None)
@given(
    st.booleans().flatmap(ops),
    st.integers(1, 12),
    st.sampled_from([DefaultTrigger(), AfterWatermark()]),
    st.sampled_from(list(AccumulationMode)),
    st.sampled_from(list(TimestampCombiner)),
    st.integers(0, 20),
)
def test_session_path_equals_incremental_engine(ops, gap, trigger, mode, combiner, lateness):
    strat = WindowingStrategy(
        Sessions(gap), trigger, mode, lateness, combiner, allow_unsafe_triggers=True
    )
    events = script_of(ops)
    fast = run_script(events, strat)
    slow = run_script(events, strat, fast=False)
    if fast.path == "incremental":  # refused: a split batch under LATEST
        assert fast.refusal == Refusal.SPLIT_SESSION_BATCH
    # sessions with late data go to the engine beside the vectorised others ("mixed")
    assert_same(fast, slow, fast.path)


def _seeded(n, seed, keys=20, bound=None):
    """Out-of-order arrivals of session-like bursts; the watermark is the smallest
    timestamp still to come (perfect: nothing is late), or with ``bound`` the largest
    seen minus ``bound`` (some late data)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, n * 50, n))
    arrival = ts + rng.exponential(200, n).astype(np.int64)
    order = np.argsort(arrival, kind="stable")
    ts, key = ts[order], rng.integers(0, keys, n)
    pending_min = np.minimum.accumulate(ts[::-1])[::-1]
    events: list[Event] = []
    i = wm = 0
    while i < n:
        j = min(n, i + int(rng.integers(1, 6)))
        events.append(ElementEvent([(int(key[r]), r, int(ts[r])) for r in range(i, j)]))
        if j < n:
            mark = pending_min[j] if bound is None else max(0, int(ts[:j].max()) - bound)
            events.append(WatermarkEvent(int(max(mark, wm))))
            wm = int(max(mark, wm))
        i = j
    return Script(events)


@pytest.mark.parametrize("combiner", list(TimestampCombiner))
@pytest.mark.parametrize("seed", [1, 2])
def test_session_path_seeded_differential(seed, combiner):
    strat = WindowingStrategy(Sessions(120), AfterWatermark(), timestamp_combiner=combiner)
    script = _seeded(3000, seed)
    fast = run_script(script, strat)
    if combiner is TimestampCombiner.OUTPUT_AT_LATEST and fast.path != "vectorised":
        assert fast.refusal == Refusal.SPLIT_SESSION_BATCH
        return
    assert_same(fast, run_script(script, strat, fast=False))
    assert len(fast.panes) > 50  # many sessions, many merges


@pytest.mark.parametrize("combiner", list(TimestampCombiner))
def test_mixed_run_seeded_differential(combiner):
    """Some sessions late (a bounded watermark): those on the engine, the others
    vectorised, the engine's output watermark held by their holds."""
    strat = WindowingStrategy(
        Sessions(120),
        AfterWatermark(),
        allowed_lateness=300,
        timestamp_combiner=combiner,
        allow_unsafe_triggers=True,  # (AfterWatermark() with lateness may drop data)
    )
    script = _seeded(3000, 3, bound=150)
    fast, slow = run_script(script, strat), run_script(script, strat, fast=False)
    if fast.path == "incremental":
        assert combiner is TimestampCombiner.OUTPUT_AT_LATEST
        assert fast.refusal == Refusal.SPLIT_SESSION_BATCH
        return
    assert_same(fast, slow, "mixed")
    assert slow.late_elements > 0 and slow.dropped["closed"] > 0
    assert (slow.output_watermark < slow.input_watermark).any()


def test_session_path_with_sessions_too_wide_for_one_int64_line():
    """Sessions wider than int64 when laid end to end take the lexsort search."""
    gap = 2**61
    script: list[Event] = [
        ElementEvent([("a", 0, -(2**62)), ("b", 1, 0), ("a", 2, -(2**62) + 2**60)]),
        ElementEvent([("b", 3, 2**60), ("a", 4, 2**61)]),
        WatermarkEvent(2**60),
        ElementEvent([("b", 5, 2**61 + 2**60)]),
    ]
    for combiner in TimestampCombiner:
        strat = WindowingStrategy(Sessions(gap), timestamp_combiner=combiner)
        assert_same(run_script(script, strat), run_script(script, strat, fast=False))


def test_session_path_refusals_leave_the_script_to_the_engine():
    late: list[Event] = [
        ElementEvent([("a", 0, 100)]),
        WatermarkEvent(150),
        ElementEvent([("a", 1, 120)]),
    ]
    strat = WindowingStrategy(Sessions(50))
    columns = script_columns(Script(late).events)
    assert columns is not None
    assert run_sessions_columns(columns, strat) is Refusal.LATE_SESSION_DATA
    got = run_script(late, strat)
    assert got.path == "mixed" and got.refusal == Refusal.LATE_SESSION_DATA
    assert_same(got, run_script(late, strat, fast=False), "mixed")
    counted = WindowingStrategy(Sessions(50), AfterCount(1), allow_unsafe_triggers=True)
    assert run_sessions_columns(columns, counted) is Refusal.TRIGGER


@pytest.mark.parametrize(
    "trigger, keys, bound",
    [
        (AfterWatermark(), 20, None),
        (DefaultTrigger(), 20, 150),  # late data: the mixed path's vectorised part chunked
        (AfterWatermark(early=AfterCount(2)), 8, None),  # one part at every event
        (Repeatedly(AfterCount(3)), 8, None),
    ],
    ids=["watermark", "mixed", "early-counts", "repeatedly"],
)
def test_key_chunks_equal_the_engine(monkeypatch, trigger, keys, bound):
    """A script larger than two chunks runs chunk by chunk of keys (the holds and
    watermarks once over all events): still every pane, series and count of the engine."""
    monkeypatch.setattr(session_path, "CHUNK_ROWS", 100)
    script = _seeded(2000, 4, keys=keys, bound=bound)
    columns = script_columns(script.events)
    assert columns is not None
    code = key_codes(columns.key)
    assert code is not None and len(session_path._chunks(code[0], keys)) == keys
    for combiner in (TimestampCombiner.OUTPUT_AT_EOW, TimestampCombiner.OUTPUT_AT_EARLIEST):
        strat = WindowingStrategy(
            Sessions(30 if bound is None else 120),
            trigger,
            allowed_lateness=300,
            timestamp_combiner=combiner,
            allow_unsafe_triggers=True,
        )
        fast = run_script(script, strat)
        assert_same(fast, run_script(script, strat, fast=False), fast.path)
        assert fast.path == ("vectorised" if bound is None else "mixed"), fast.refusal


@pytest.mark.parametrize("bound", [None, 150], ids=["vectorised", "mixed"])
def test_array_key_columns_equal_list_keys_across_chunks(monkeypatch, bound):
    """The simulator's form of a script (keys an int64 array, values float64, no Python
    object per element), over several key chunks: the same panes (keys as Python ints),
    series and counts as the list form, and as the engine on the array form."""
    monkeypatch.setattr(session_path, "CHUNK_ROWS", 100)
    columns = script_columns(_seeded(2000, 5, keys=13, bound=bound).events)
    assert columns is not None
    arrays = columns._replace(
        key=np.asarray(columns.key, np.int64) + 10**12,  # a wide span: not a small table
        value=columns.value.astype(np.float64),
    )
    listed = columns._replace(key=[k + 10**12 for k in columns.key])
    strat = WindowingStrategy(Sessions(30 if bound is None else 120), allowed_lateness=300)
    fast = run_columns(arrays, strat)
    assert fast.path == ("vectorised" if bound is None else "mixed"), fast.refusal
    assert isinstance(fast.pane_columns.key, np.ndarray) or bound is not None
    assert {type(p.key) for p in fast.panes} == {int}
    assert {type(v) for p in fast.panes for v in p.values} == {float}
    assert_same(fast, run_columns(arrays, strat, fast=False), fast.path)
    other = run_columns(listed, strat)
    assert fast.panes == other.panes and fast.pane_event.tolist() == other.pane_event.tolist()
    for f in ("output_watermark", "state_hold"):
        assert getattr(fast, f).tolist() == getattr(other, f).tolist()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=6),
    st.lists(st.integers(0, 5), max_size=3000),
)
def test_int_key_codes_equal_the_dict_codes(distinct, picks):
    """Integer key arrays are coded vectorised, in order of first appearance, as the
    dict does on the list; small spans (a table) and wide ones (a sort), late first
    appearances (past the first prefix) included."""
    for keys in (
        np.array([distinct[p % len(distinct)] for p in picks], np.int64),
        np.array([p * 3 - 7 for p in picks], np.int64),
        np.array(picks, np.uint64),
        np.array([0] * 2000 + picks[::-1] + [9], np.int64),
    ):
        got = key_codes(keys)
        want = key_codes(keys.tolist())
        assert got is not None and want is not None
        assert got[0].tolist() == want[0].tolist()
        assert np.asarray(got[1]).tolist() == want[1]
