"""The spark profile in theory alone: its checks, its arithmetic and its invariants. Its
agreement with real Spark is in ``tests/structured_oracle/test_structured*.py``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from theory.spark import batch_watermarks, run_microbatches
from theory.spark.conventions import spark_millis
from theory.spark.timers import fired_timers, run_timers, timer_fires

S = 1_000_000
ONE = [[("a", 3 * S), ("a", 12 * S)], [("a", 30 * S)], [("a", 11 * S), ("a", 12 * S)]]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(delay=-1), ValueError, "delay must be >= 0"),
        (dict(delay=1.5), TypeError, "delay must be an integer"),
        (dict(output_mode="replace"), ValueError, "unknown output_mode 'replace'"),
        (dict(output_mode="complete"), ValueError, "ignores the watermark"),
        (dict(multiple_watermark_policy="avg"), ValueError, "unknown multiple_watermark_policy"),
        (dict(window=GlobalWindows()), ValueError, "cannot be expressed"),
        (dict(window=SlidingWindows(5 * S, 10 * S)), ValueError, "period > size"),
        (dict(window="10s"), TypeError, "window must be a theory"),
        (dict(window=Sessions(S), output_mode="update"), ValueError, "session window"),
        (dict(no_data_batches=1), TypeError, "no_data_batches must be a bool"),
    ],
)
def test_bad_parameters_are_named(kwargs, error, match):
    args = dict(delay=5 * S, window=FixedWindows(10 * S)) | kwargs
    with pytest.raises(error, match=match):
        run_microbatches([ONE], **args)


@pytest.mark.parametrize(
    ("inputs", "error", "match"),
    [
        ([ONE, [[("b", 1), (None, 5)]]], ValueError, r"inputs\[1\]\[0\]\[1\]: the row has no key"),
        ([[[("b", None)]]], ValueError, r"inputs\[0\]\[0\]\[0\]: the row has no event time"),
        ([[[("b",)]]], ValueError, r"inputs\[0\]\[0\]\[0\]: a row must be \(key, event_time"),
        ([[[("b", 1.0)]]], TypeError, r"inputs\[0\]\[0\]\[0\] event time must be an integer"),
        ([[[("b", -5)]]], ValueError, "before the epoch"),
        ([], ValueError, "non-empty list of inputs"),
        ([[("a", 1)]], TypeError, r"inputs\[0\]\[0\] must be a list of rows"),
    ],
)
def test_bad_rows_name_input_batch_and_row(inputs, error, match):
    with pytest.raises(error, match=match):
        run_microbatches(inputs, delay=S, window=FixedWindows(10 * S))


TRACE = ([1 * S, 2 * S, 3 * S], [2 * S, 3 * S, 4 * S], ["a", "b", "c"])


@pytest.mark.parametrize(
    ("columns", "kwargs", "error", "match"),
    [
        ({}, dict(delay=-1), ValueError, "delay must be >= 0"),
        ({}, dict(window=Sessions(S)), ValueError, "run sessions batch by batch"),
        ({}, dict(window=GlobalWindows()), ValueError, "cannot be expressed"),
        ({}, dict(window=SlidingWindows(S, 2 * S)), ValueError, "period > size"),
        ({}, dict(trigger_interval=0), ValueError, "trigger_interval must be > 0"),
        ({}, dict(batch_duration=-1), ValueError, "batch_duration must be >= 0"),
        ({}, dict(multiple_watermark_policy="avg"), ValueError, "unknown multiple_watermark"),
        ({}, dict(inputs=[1, 2]), ValueError, "inputs has 2 elements but event_time has 3"),
        ({"key": ["a", None, "c"]}, {}, ValueError, r"key\[1\] is None: row 1 has no key"),
        ({"event_time": [S, -5, S]}, {}, ValueError, r"event_time\[1\]=-5 µs is before"),
        ({"event_time": [1.5, 2.0, 3.0]}, {}, TypeError, "event_time must hold integers"),
        ({"arrival_time": [S, S]}, {}, ValueError, "arrival_time has 2 elements"),
    ],
)
def test_whole_trace_bad_input_is_named(columns, kwargs, error, match):
    import numpy as np

    from theory.spark.trace import spark_trace_profile

    cols = dict(zip(("event_time", "arrival_time", "key"), TRACE, strict=True)) | columns
    args = dict(window=FixedWindows(10 * S), delay=S, trigger_interval=S) | kwargs
    with pytest.raises(error, match=match):
        spark_trace_profile(*(np.array(cols[c], dtype=object if c == "key" else None)
                              for c in ("event_time", "arrival_time", "key")), **args)


# ------------------------------------------------------------------ arithmetic


def test_event_times_and_delay_are_truncated_to_milliseconds():
    assert spark_millis(12_345_678) == 12_345
    assert spark_millis(-1_500) == -1  # Java's long division truncates towards zero
    clocks = batch_watermarks([[[("a", 12_345_678)], []]], delay=1_999)
    assert [c.watermark for c in clocks] == [0, 12_344_000]  # 12345 ms - 1 ms


def test_dropped_counts_partial_aggregates_and_lists_the_raw_rows():
    batches = run_microbatches([ONE], delay=5 * S, window=FixedWindows(10 * S))
    # batch 2 (late watermark 7 s): 11 s and 12 s are in [10, 20), end 20 > 7: kept
    assert batches[2].dropped == 0
    late = [
        [("a", 50 * S)],
        [("a", 60 * S)],
        [("a", 1 * S), ("a", 2 * S), ("b", 3 * S), ("b", 4 * S)],
    ]
    batches = run_microbatches([late], delay=5 * S, window=FixedWindows(10 * S))
    assert batches[2].late_watermark == 45 * S
    assert batches[2].dropped == 2
    assert batches[2].dropped_rows == tuple(late[2])


def test_sessions_that_touch_merge():
    out = run_microbatches(
        [[[("a", 0)], [("a", 10 * S)], [("z", 60 * S)]]], delay=0, window=Sessions(10 * S)
    )
    emitted = [e for b in out for e in b.emitted]
    assert (0, 20 * S, "a", 2) in emitted


def test_no_data_batch_only_when_the_watermark_moved():
    fixed = FixedWindows(10 * S)
    moved = run_microbatches([[[("a", 12 * S)], [("a", 30 * S)]]], delay=5 * S, window=fixed)
    assert [(b.watermark, b.has_data) for b in moved] == [(0, True), (7 * S, True), (25 * S, False)]
    # ONE's last batch (12 s) leaves the watermark where its batch used it: no batch follows
    assert [b.has_data for b in run_microbatches([ONE], delay=5 * S, window=fixed)] == [True] * 3
    # 3 s - 5 s is -2 s to Spark, below its 0 floor: the watermark never moves
    flat = [[("a", 3 * S)], [("a", 3 * S)]]
    assert len(run_microbatches([flat], delay=5 * S, window=fixed)) == 2


# ------------------------------------------------------------------ invariants

rows = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 80 * S)), min_size=0, max_size=6)
inputs_st = st.lists(st.lists(rows, min_size=1, max_size=5), min_size=1, max_size=2)
windows_st = st.sampled_from(
    [FixedWindows(10 * S), FixedWindows(7 * S, offset=3 * S), SlidingWindows(10 * S, 4 * S)]
)


@settings(max_examples=60)
@given(inputs_st, windows_st, st.integers(0, 20 * S), st.sampled_from(["min", "max"]))
def test_invariants_of_append_and_update(inputs, window, delay, policy):
    kw = dict(delay=delay, window=window, multiple_watermark_policy=policy)
    append = run_microbatches(inputs, output_mode="append", **kw)
    update = run_microbatches(inputs, output_mode="update", **kw)
    wms = [b.watermark for b in append]
    assert wms == sorted(wms) and wms[0] == 0
    assert [b.late_watermark for b in append[1:]] == wms[:-1]
    assert [b.has_data for b in append[:-1]] == [True] * (len(append) - 1)
    seen = set()
    for b in append:
        assert b.dropped <= len(b.dropped_rows) * 3
        for s, e, k, c in b.emitted:
            assert e <= b.watermark and c > 0
            assert (s, e, k) not in seen  # append emits a window once
            seen.add((s, e, k))
    # update's last count of each window equals append's final one
    last = {}
    for b in update:
        for s, e, k, c in b.emitted:
            last[(s, e, k)] = c
    for b in append:
        for s, e, k, c in b.emitted:
            assert last[(s, e, k)] == c
    assert [b.dropped for b in append] == [b.dropped for b in update]


@settings(max_examples=40)
@given(inputs_st, st.integers(0, 20 * S))
def test_every_row_window_is_counted_dropped_or_still_open(inputs, delay):
    window = FixedWindows(10 * S)
    out = run_microbatches(inputs, delay=delay, window=window)
    total = sum(len(r) for batches in inputs for r in batches)
    counted = sum(c for b in out for *_, c in b.emitted)
    dropped = sum(len(b.dropped_rows) for b in out)
    final = out[-1].watermark
    still_open = sum(
        1
        for batches in inputs
        for i, r in enumerate(batches)
        for _, t in r
        if window.assign(t)[0].end > final
        and all(t not in {x[1] for x in b.dropped_rows} for b in out)
    )
    assert counted + dropped <= total
    assert counted + dropped + still_open >= total


# ------------------------------------------------------------------ timers


def test_timer_rules_differ_at_equality():
    assert not timer_fires(20 * S, 20 * S, "applyInPandasWithState")
    assert timer_fires(20 * S, 20 * S + 1, "applyInPandasWithState")
    assert timer_fires(20 * S, 20 * S, "transformWithState")
    assert not timer_fires(20 * S + 1, 20 * S, "transformWithState")
    assert fired_timers({"a": 5, "b": 3, "c": 9}, 5, "transformWithState") == [("b", 3), ("a", 5)]
    with pytest.raises(ValueError, match="unknown state api"):
        timer_fires(1, 2, "mapGroupsWithState")


def test_run_timers_fires_each_timer_once():
    inputs = [[[("a", 10 * S)], [("b", 15 * S)], [("c", 25 * S)], [("d", 30 * S)], [("e", 35 * S)]]]
    out = {
        api: run_timers(inputs, delay=5 * S, timeout=10 * S, api=api)
        for api in ("applyInPandasWithState", "transformWithState")
    }
    tws = [b.fired for b in out["transformWithState"]]
    apws = [b.fired for b in out["applyInPandasWithState"]]
    assert tws[3] == (("a", 20 * S),) and apws[3] == ()  # watermark 20 s == timer
    assert apws[4] == (("a", 20 * S),)
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        run_timers(inputs, delay=0, timeout=-1, api="transformWithState")


# ------------------------------------------------------------------ whole trace

trace_st = st.lists(
    st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 60 * S), st.integers(0, 30 * S)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60)
@given(
    trace_st,
    st.sampled_from(
        [FixedWindows(10 * S), FixedWindows(6 * S, 1 * S), SlidingWindows(8 * S, 3 * S)]
    ),
    st.integers(0, 15 * S),
    st.sampled_from([1 * S, 4 * S, 2_500_000]),
    st.sampled_from([0, 700_000, 6 * S]),
)
def test_whole_trace_profile_agrees_with_run_microbatches(rows, window, delay, interval, duration):
    """Each batch of the whole-trace profile, fed to run_microbatches as one batch (a
    no-data batch as an empty one), gives the same watermarks, drops and emissions."""
    assert_agrees(rows, window, delay, interval, duration)


def test_whole_trace_profile_agrees_on_sparse_windows():
    """Windows far apart (more than 4 per row): the path that sorts instead of counting."""
    rows = [(1, 0, 0), (2, 10**13, 5 * S), (1, 10**13 + 3, 1), (1, 5 * 10**12, 10**13)]
    assert_agrees(rows, FixedWindows(S), 0, S, 0)
    assert_agrees(rows, SlidingWindows(2 * S, S), 0, S, 0)


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2]), st.integers(0, 60 * S), st.integers(0, 30 * S),
                  st.sampled_from(["p", "q", "r"])),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from(["min", "max"]),
    st.integers(0, 10 * S),
)
def test_whole_trace_profile_with_inputs_agrees_with_run_microbatches(rows, policy, delay):
    """Several inputs (a label per row), each with its own watermark, combined by the
    policy (an input with no data yet is 0): per batch the same as run_microbatches with
    one input per label, itself checked against real Spark."""
    assert_agrees([r[:3] for r in rows], FixedWindows(10 * S), delay, 2 * S, 0,
                  inputs=[r[3] for r in rows], policy=policy)


def test_an_input_that_stops_holds_the_minimum():
    """Input q sends one early row and stops: under min it holds the watermark (no window
    of p closes), under max p's watermark alone closes them."""
    rows = [(1, 0, 0, "q")] + [(1, t * S, 0, "p") for t in range(1, 60, 5)]
    for policy, closed in (("min", False), ("max", True)):
        res = assert_agrees([r[:3] for r in rows], FixedWindows(10 * S), 0, S, 0,
                            inputs=[r[3] for r in rows], policy=policy)
        assert bool((res.emit_time >= 0).any()) == closed, policy


def assert_agrees(rows, window, delay, interval, duration, inputs=None, policy="min"):
    import numpy as np

    from theory.spark.trace import spark_trace_profile

    key = np.array([r[0] for r in rows])
    et = np.array([r[1] for r in rows])
    arrival = et + np.array([r[2] for r in rows])  # arrival after the event: delays 0-30 s
    res = spark_trace_profile(
        et,
        arrival,
        key,
        window=window,
        delay=delay,
        trigger_interval=interval,
        batch_duration=duration,
        inputs=inputs,
        multiple_watermark_policy=policy,
    )
    nb = res.batch_start.size
    order = np.argsort(arrival, kind="stable")
    labels = sorted(set(inputs)) if inputs is not None else [None]
    batches: list[list[list[tuple[int, int]]]] = [[[] for _ in range(nb)] for _ in labels]
    for i in order:
        j = 0 if inputs is None else labels.index(inputs[i])
        batches[j][int(res.row_batch[i])].append((int(key[i]), int(et[i])))
    assert all(any(b[k] for b in batches) for k in range(nb) if res.batch_has_data[k])
    model = run_microbatches(batches, delay=delay, window=window,
                             multiple_watermark_policy=policy)
    assert len(model) == nb  # no batch after the profile's last
    assert [m.watermark for m in model] == res.batch_watermark.tolist()
    assert [m.late_watermark for m in model] == res.batch_late_watermark.tolist()
    dropped_per_batch = np.bincount(res.row_batch[res.row_dropped], minlength=nb)
    assert [len(m.dropped_rows) for m in model] == dropped_per_batch.tolist()
    for b, m in enumerate(model):
        mask = res.emit_batch == b
        got = sorted(
            zip(
                res.window_start[mask].tolist(),
                res.window_end[mask].tolist(),
                res.window_key[mask].tolist(),
                res.window_count[mask].tolist(),
                strict=True,
            )
        )
        assert got == sorted(m.emitted)
    # batches start on trigger multiples unless the previous one overran
    starts = res.batch_start
    assert all(
        starts[i] % interval == 0 or starts[i] == starts[i - 1] + duration for i in range(nb)
    )
    assert (res.latency >= 0).all()
    return res


@settings(max_examples=80)
@given(
    st.lists(st.tuples(st.integers(0, 50 * S), st.integers(0, 40 * S)), max_size=30),
    st.sampled_from([S, 3 * S, 2_500_000]),
    st.integers(0, 3 * S),
    st.integers(0, 8 * S),
    st.booleans(),
)
def test_vectorised_trigger_schedule_equals_the_loop(rows, interval, duration, delay, no_data):
    """Batches that end before the next trigger: the vectorised schedule is the loop's."""
    import numpy as np

    from theory.spark.trace import _schedule_loop, trigger_schedule

    duration = min(duration, interval)
    arrival = np.sort(np.array([a for a, _ in rows], dtype=np.int64))
    prefix = np.maximum.accumulate(np.array([e for _, e in rows], dtype=np.int64) // 1000)
    args = (arrival, prefix, interval, duration, delay // 1000, no_data, 1000)
    assert trigger_schedule(*args) == _schedule_loop(*args)
