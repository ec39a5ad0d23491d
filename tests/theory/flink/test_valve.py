"""The Flink valve: Flink's own StatusWatermarkValveTest scenarios as facts, the heap valve
against the linear-scan reference on random inputs, the indexed heap, and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.flink.valve import (
    LinearScanValve,
    StatusWatermarkValve,
    StreamStatus,
    WatermarkStatus,
)
from theory.structures import IndexedMinHeap
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

ACT, IDL = StreamStatus.ACTIVE, StreamStatus.IDLE
VALVES: list[type[StatusWatermarkValve] | type[LinearScanValve]] = [
    StatusWatermarkValve,
    LinearScanValve,
]


def W(channel, ts):
    return ("wm", channel, ts)


def S(channel, status):
    return ("status", channel, status)


def feed(valve, op):
    kind, channel, value = op
    if kind == "wm":
        return valve.input_watermark(channel, value)
    return valve.input_status(channel, value)


# ---------------------------------------------------------------------------------------
# Facts: Flink's StatusWatermarkValveTest (flink-streaming-java, runtime/watermarkstatus),
# each scenario as (channels, [(input, expected outputs in order), ...]). Flink's test
# checks the output queue after groups of inputs; here every input has its own expectation.
# ---------------------------------------------------------------------------------------

Op = tuple[str, object, object]
FLINK_FACTS: dict[str, tuple[int, list[tuple[Op, list[object]]]]] = {
    "testSingleInputIncreasingWatermarks": (1, [(W(0, 0), [0]), (W(0, 25), [25])]),
    "testSingleInputDecreasingWatermarksYieldsNoOutput": (
        1,
        [(W(0, 25), [25]), (W(0, 18), []), (W(0, 42), [42])],
    ),
    "testSingleInputWatermarkStatusToggling": (
        1,
        [(S(0, ACT), []), (S(0, IDL), [IDL]), (S(0, IDL), []), (S(0, ACT), [ACT])],
    ),
    "testSingleInputWatermarksIntactDuringIdleness": (
        1,
        [
            (W(0, 25), [25]),
            (S(0, IDL), [IDL]),
            (W(0, 50), []),
            (S(0, ACT), [ACT]),
            (W(0, 50), [50]),
        ],
    ),
    "testMultipleInputYieldsWatermarkOnlyWhenAllChannelsReceivesWatermarks": (
        3,
        [(W(0, 0), []), (W(1, 0), []), (W(2, 0), [0])],
    ),
    "testMultipleInputIncreasingWatermarks": (
        3,
        [
            (W(0, 0), []),
            (W(1, 0), []),
            (W(2, 0), [0]),
            (W(0, 12), []),
            (W(2, 8), []),
            (W(2, 10), []),
            (W(1, 15), [10]),
            (W(2, 17), [12]),
            (W(0, 20), [15]),
        ],
    ),
    "testMultipleInputDecreasingWatermarksYieldsNoOutput": (
        3,
        [
            (W(0, 25), []),
            (W(1, 10), []),
            (W(2, 17), [10]),
            (W(0, 12), []),
            (W(1, 8), []),
            (W(2, 15), []),
        ],
    ),
    "testMultipleInputWatermarkStatusToggling": (
        2,
        [
            (S(0, ACT), []),
            (S(1, ACT), []),
            (S(1, IDL), []),
            (S(0, IDL), [IDL]),
            (S(0, IDL), []),
            (S(1, IDL), []),
            (S(1, ACT), [ACT]),
            (S(0, ACT), []),
        ],
    ),
    "testMultipleInputWatermarkAdvancingWithPartiallyIdleChannels": (
        3,
        [(W(0, 15), []), (W(1, 10), []), (S(2, IDL), [10]), (W(1, 18), [15]), (W(0, 20), [18])],
    ),
    "testMultipleInputWatermarkAdvancingAsChannelsIndividuallyBecomeIdle": (
        3,
        [(W(0, 25), []), (W(1, 10), []), (W(2, 17), [10]), (S(1, IDL), [17]), (S(2, IDL), [25])],
    ),
    "testMultipleInputFlushMaxWatermarkAndWatermarkStatusOnceAllInputsBecomeIdle": (
        3,
        [
            (W(0, 10), []),
            (W(1, 5), []),
            (W(2, 3), [3]),
            (S(0, IDL), []),
            (S(1, IDL), []),
            (S(2, IDL), [10, IDL]),
        ],
    ),
    "testMultipleInputWatermarkRealignmentAfterResumeActive": (
        3,
        [
            (W(0, 10), []),
            (W(1, 7), []),
            (W(2, 3), [3]),
            (S(2, IDL), [7]),
            (S(2, ACT), []),
            (W(2, 5), []),
            (W(2, 9), []),
            (W(1, 12), [9]),
        ],
    ),
    "testNoOutputWhenAllActiveChannelsAreUnaligned": (
        3,
        [
            (W(0, 10), []),
            (W(1, 7), []),
            (S(2, IDL), [7]),
            (S(2, ACT), []),
            (S(0, IDL), []),
            (S(1, IDL), []),
        ],
    ),
}


@pytest.mark.parametrize("flink_40475", [False, True])
@pytest.mark.parametrize("cls", VALVES)
@pytest.mark.parametrize("name", sorted(FLINK_FACTS))
def test_flink_valve_test_scenarios(name, cls, flink_40475):
    # none of Flink's scenarios depends on the FLINK-40475 change
    n, steps = FLINK_FACTS[name]
    valve = cls(n, flink_40475=flink_40475)
    for i, (op, expected) in enumerate(steps):
        assert feed(valve, op) == expected, f"{name} step {i}: {op}"


@pytest.mark.parametrize("cls", VALVES)
def test_flink_state_assertions(cls):
    # testSingleInputWatermarksIntactDuringIdleness: the idle channel keeps 25
    v = cls(1)
    v.input_watermark(0, 25)
    v.input_status(0, IDL)
    v.input_watermark(0, 50)
    assert v.channel_state(0).watermark == 25
    # testMultipleInputWatermarkRealignmentAfterResumeActive: alignment flags
    v = cls(3)
    for ch, ts in [(0, 10), (1, 7), (2, 3)]:
        v.input_watermark(ch, ts)
    v.input_status(2, IDL)
    assert not v.channel_state(2).aligned
    v.input_status(2, ACT)
    assert not v.channel_state(2).aligned  # 3 < last output 7
    v.input_watermark(2, 5)
    assert v.channel_state(2) == (5, ACT, False)  # accepted while realigning
    v.input_watermark(2, 9)
    assert v.channel_state(2).aligned  # caught up: 9 >= 7


def test_initial_state():
    for cls in VALVES:
        v = cls(2)
        assert v.num_channels == 2
        assert v.last_output_watermark == MIN_TIMESTAMP
        assert v.last_output_status is ACT
        assert v.channel_state(1) == (MIN_TIMESTAMP, ACT, True)
    assert WatermarkStatus is StreamStatus


# Our own facts: the released all-idle rule and its FLINK-40475 variant. Each input has its
# outputs (released, FLINK-40475) and then the channels' aligned flags after it, channel 0
# first ("1" aligned). Flink's own valve confirms the released columns
# (test_flink_oracle.py replays these inputs).
#
# Channel 2 sits at MIN, holding the output back, and goes idle: 7 goes out. It resumes still
# behind (unaligned), the others go idle; channel 2 reaches 5 < 7 and goes idle last: it does
# not hold the last output (7).
QUIRK = [
    (W(0, 10), [], [], "111", "111"),
    (W(1, 7), [], [], "111", "111"),
    (S(2, IDL), [7], [7], "110", "110"),  # idle: no longer aligned
    (S(2, ACT), [], [], "110", "110"),  # resumes at MIN < 7: not aligned
    (S(0, IDL), [], [], "010", "010"),
    (S(1, IDL), [], [], "000", "000"),
    (W(2, 5), [], [], "000", "000"),  # accepted, still behind 7
    # released: no flush, the order of going idle decides; FLINK-40475: flush the max, 10
    (S(2, IDL), [IDL], [10, IDL], "000", "000"),
    # channel 0 resumes at 10 >= last, aligned; released: 10 is not re-derived (a stall)
    (S(0, ACT), [ACT], [ACT], "100", "100"),
    (S(2, ACT), [], [], "100", "100"),  # 5 < last: not aligned
    # released: an ignored-for-alignment update on channel 2 re-derives the min: 10 appears
    (W(2, 6), [10], [], "100", "100"),
    (W(0, 11), [11], [11], "100", "100"),
]


def aligned_flags(valve) -> str:
    return "".join("1" if c.aligned else "0" for c in valve.state()[0])


def check_released_vs_fixed(cls, n, steps):
    released, fixed = cls(n), cls(n, flink_40475=True)
    for i, (op, want_released, want_fixed, aligned_released, aligned_fixed) in enumerate(steps):
        assert feed(released, op) == want_released, (i, op)
        assert feed(fixed, op) == want_fixed, (i, op)
        assert aligned_flags(released) == aligned_released, (i, op)
        assert aligned_flags(fixed) == aligned_fixed, (i, op)


@pytest.mark.parametrize("cls", VALVES)
def test_all_idle_flush_rule_released_vs_flink_40475(cls):
    check_released_vs_fixed(cls, 3, QUIRK)


# In the released valve's stall (aligned minimum above the last output), a channel that
# does not hold the last output goes idle: no re-derivation; the next accepted watermark
# re-derives. Under FLINK-40475 the flush put the valve at 12 and nothing stalls.
# Columns as in QUIRK.
STALL = [
    (W(0, 10), [], [], "1111", "1111"),
    (W(1, 7), [], [], "1111", "1111"),
    (W(3, 12), [], [], "1111", "1111"),
    (S(2, IDL), [7], [7], "1101", "1101"),
    (S(2, ACT), [], [], "1101", "1101"),  # resumes at MIN < 7: not aligned
    (S(3, IDL), [], [], "1100", "1100"),
    (S(0, IDL), [], [], "0100", "0100"),
    (S(1, IDL), [], [], "0000", "0000"),
    (W(2, 5), [], [], "0000", "0000"),
    (S(2, IDL), [IDL], [12, IDL], "0000", "0000"),
    # released: aligned at 10 >= 7; FLINK-40475: 10 < 12, not aligned
    (S(0, ACT), [ACT], [ACT], "1000", "0000"),
    (S(3, ACT), [], [], "1001", "0001"),  # 12 >= 7 and 12 >= 12: aligned in both
    (S(3, IDL), [], [], "1000", "0000"),
    (W(0, 11), [11], [], "1000", "0000"),  # FLINK-40475: 11 < 12, still behind
    (W(0, 13), [13], [13], "1000", "1000"),  # caught up: aligned again
]


@pytest.mark.parametrize("cls", VALVES)
def test_stall_then_non_holder_goes_idle(cls):
    check_released_vs_fixed(cls, 4, STALL)


@pytest.mark.parametrize("cls", VALVES)
def test_flush_when_last_idle_channel_holds_min_and_equal_watermarks(cls):
    v = cls(2)
    assert v.input_watermark(0, 5) == []
    assert v.input_watermark(1, 5) == [5]
    assert aligned_flags(v) == "11"
    assert v.input_status(0, IDL) == []  # 5 == last, but channel 1 still holds 5
    assert aligned_flags(v) == "01"
    assert v.input_status(1, IDL) == [IDL]  # flush: max 5 is not above 5
    assert aligned_flags(v) == "00"
    assert v.input_watermark(1, 9) == []  # idle valve ignores watermarks
    assert v.channel_state(1) == (5, IDL, False)
    assert v.input_status(1, ACT) == [ACT]
    assert v.channel_state(1) == (5, ACT, True)  # resumed aligned: 5 >= last output 5
    assert aligned_flags(v) == "01"
    assert v.input_watermark(1, 9) == [9]  # so its next watermark is the output at once
    assert v.input_status(0, ACT) == []
    assert v.channel_state(0) == (5, ACT, False)  # 5 < last output 9: not aligned


@pytest.mark.parametrize("cls", VALVES)
def test_resumed_channel_realigns_at_exactly_the_last_output(cls):
    # Flink realigns a channel on watermark >= lastOutputWatermark: at equality the channel
    # holds the output again (realigning only above it would emit 10 for channel 1's 12)
    v = cls(3)
    for ch, ts in [(0, 10), (1, 7), (2, 3)]:
        v.input_watermark(ch, ts)
    assert v.input_status(2, IDL) == [7]
    assert v.input_status(2, ACT) == []
    assert v.channel_state(2) == (3, ACT, False)
    assert v.input_watermark(2, 7) == []
    assert v.channel_state(2) == (7, ACT, True)
    assert v.input_watermark(1, 12) == []  # channel 2, at 7, holds the output
    assert v.input_watermark(2, 8) == [8]


@pytest.mark.parametrize("cls", VALVES)
def test_end_of_stream_max_watermark(cls):
    v = cls(2)
    v.input_watermark(0, MAX_TIMESTAMP)
    assert v.input_watermark(1, MAX_TIMESTAMP) == [MAX_TIMESTAMP]
    assert v.input_watermark(1, MAX_TIMESTAMP) == []


# ---------------------------------------------------------------------------------------
# Bad input: a clear error, and the state unchanged
# ---------------------------------------------------------------------------------------

BAD = [
    (W(3, 10), ValueError, "channel=3 is out of range"),
    (W(-1, 10), ValueError, "channel=-1 is out of range"),
    (W(True, 10), TypeError, "channel"),
    (W(1.0, 10), TypeError, "channel"),
    (W("0", 10), TypeError, "channel"),
    (W(0, 10.0), TypeError, "watermark"),
    (W(0, True), TypeError, "watermark"),
    (W(0, "10"), TypeError, "watermark"),
    (W(0, None), TypeError, "watermark"),
    (W(0, MAX_TIMESTAMP + 1), ValueError, "watermark"),
    (W(0, MIN_TIMESTAMP - 1), ValueError, "watermark"),
    (S(3, IDL), ValueError, "channel=3 is out of range"),
    (S(False, IDL), TypeError, "channel"),
    (S(0, "IDLE"), TypeError, "status"),
    (S(0, None), TypeError, "status"),
    (S(0, True), TypeError, "status"),
    (S(0, 1), TypeError, "status"),
]


@pytest.mark.parametrize("cls", VALVES)
@pytest.mark.parametrize(("op", "exc", "match"), BAD)
def test_bad_input_raises_and_leaves_state_unchanged(cls, op, exc, match):
    v = cls(3)
    for setup in [W(0, 10), W(1, 7), S(2, IDL), W(1, 12)]:
        feed(v, setup)
    before = v.state()
    with pytest.raises(exc, match=match):
        feed(v, op)
    assert v.state() == before
    assert v.input_watermark(0, 11) == [11]  # still working


@pytest.mark.parametrize("cls", VALVES)
def test_numpy_ints_accepted_and_bad_sizes(cls):
    v = cls(np.int64(2))
    v.input_watermark(np.int64(0), np.int64(4))
    assert v.input_watermark(np.int32(1), np.int64(6)) == [4]
    for bad, exc in [(0, ValueError), (True, TypeError), (2.0, TypeError)]:
        with pytest.raises(exc):
            cls(bad)


# ---------------------------------------------------------------------------------------
# The heap valve equals the linear-scan reference
# ---------------------------------------------------------------------------------------


@st.composite
def update_sequences(draw):
    # few channels, many status toggles and per-channel random walks (small steps, some
    # down) reach the rare states often: all idle, a resumed channel behind, and the last
    # output below the aligned minimum (the released valve's FLINK-40475 stall)
    n = draw(st.sampled_from([1, 2, 3, 3, 4, 4, 5, 17]))
    channels = st.integers(0, n - 1)
    op = st.one_of(
        st.tuples(st.just("wm"), channels, st.integers(-3, 6) | st.just(None)),
        st.tuples(st.just("status"), channels, st.sampled_from([ACT, IDL])),
    )
    walk = [0] * n
    ops = []
    for kind, ch, x in draw(st.lists(op, max_size=100)):
        if kind == "wm":
            # None is an extreme value: MAX_TIMESTAMP (end of input) or MIN_TIMESTAMP
            if x is None:
                x = draw(st.sampled_from([MIN_TIMESTAMP, MAX_TIMESTAMP]))
            else:
                walk[ch] += x
                x = walk[ch]
        ops.append((kind, ch, x))
    return n, ops


def check_outputs(outputs):
    """Watermarks strictly increase; statuses alternate IDLE, ACTIVE, ..."""
    wms = [o for o in outputs if isinstance(o, int)]
    assert all(a < b for a, b in itertools.pairwise(wms))
    sts = [o for o in outputs if isinstance(o, StreamStatus)]
    assert sts == [IDL, ACT] * (len(sts) // 2) + [IDL] * (len(sts) % 2)


@settings(max_examples=400, deadline=None)
@given(update_sequences(), st.booleans())
def test_heap_valve_equals_linear_scan(seq, flink_40475):
    n, ops = seq
    heap = StatusWatermarkValve(n, flink_40475=flink_40475)
    ref = LinearScanValve(n, flink_40475=flink_40475)
    outputs = []
    for op in ops:
        got = feed(heap, op)
        assert got == feed(ref, op), op
        outputs.extend(got)
    assert heap.state() == ref.state()
    heap._heap.check()
    check_outputs(outputs)
    # every emitted watermark is the valve's last output, and aligned channels are >= it
    last = ref.last_output_watermark
    assert all(s.watermark >= last for s in ref.state()[0] if s.aligned)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 2**31), st.booleans(), st.sampled_from([(2, 7), (2, 7), (50, 400)]))
def test_heap_valve_equals_linear_scan_random_walks(seed, flink_40475, fan_in):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(*fan_in))
    heap = StatusWatermarkValve(n, flink_40475=flink_40475)
    ref = LinearScanValve(n, flink_40475=flink_40475)
    wm = rng.integers(0, 50, n)
    p_status = 0.45 if n < 7 else 0.15
    for _ in range(600):
        ch = int(rng.integers(0, n))
        if rng.random() < p_status:
            op = S(ch, IDL if rng.random() < 0.5 else ACT)
        else:
            wm[ch] += int(rng.integers(-3, 8 if n < 7 else 40))
            op = W(ch, int(wm[ch]))
        assert feed(heap, op) == feed(ref, op)
    assert heap.state() == ref.state()
    heap._heap.check()


# ---------------------------------------------------------------------------------------
# IndexedMinHeap
# ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["push", "remove", "update", "pop"]), st.integers(0, 15)),
        max_size=200,
    ),
    st.lists(st.integers(-50, 50), min_size=200, max_size=200),
)
def test_indexed_heap_against_dict(ops, keys):
    heap = IndexedMinHeap(16)
    model: dict[int, int] = {}
    for (op, item), key in zip(ops, keys, strict=False):
        if op == "push":
            if item in model:
                with pytest.raises(KeyError):
                    heap.push(item, key)
            else:
                heap.push(item, key)
                model[item] = key
        elif op == "remove":
            if item in model:
                assert heap.remove(item) == model.pop(item)
            else:
                with pytest.raises(KeyError):
                    heap.remove(item)
        elif op == "update":
            if item in model:
                heap.update(item, key)
                model[item] = key
            else:
                with pytest.raises(KeyError):
                    heap.update(item, key)
        elif model:
            item, key = heap.pop()
            assert model.pop(item) == key
            assert all(key <= k for k in model.values())
        heap.check()
        assert len(heap) == len(model)
        assert {i for i in range(16) if i in heap} == set(model)
        if model:
            assert heap.peek()[1] == min(model.values())
            assert all(heap.key(i) == k for i, k in model.items())


def test_indexed_heap_basics():
    heap = IndexedMinHeap.from_keys([5, 3, 9, 3])
    heap.check()
    assert heap.capacity == 4 and len(heap) == 4 and bool(heap)
    assert heap.peek()[1] == 3
    assert "x" not in heap and 7 not in heap and 0 in heap
    empty = IndexedMinHeap(2)
    assert not empty
    with pytest.raises(IndexError):
        empty.peek()
    with pytest.raises(KeyError):
        empty.key(0)
    with pytest.raises(ValueError):
        IndexedMinHeap(-1)
