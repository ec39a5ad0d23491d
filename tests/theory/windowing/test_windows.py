"""Tests for theory.windowing.windows: differential against Apache Beam (Python SDK), vectorised
against scalar, merge_array against repeated scalar merging, and parameter validation."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from apache_beam.transforms import window as bw
from apache_beam.utils.timestamp import Duration, Timestamp
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.time import DAY, END_OF_GLOBAL_WINDOW, HOUR, MAX_TIMESTAMP, MIN_TIMESTAMP, SECOND
from theory.windowing.windows import (
    GLOBAL_WINDOW,
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
    WindowFn,
    parse_duration,
    window_fn_from_spec,
)

settings.register_profile("windows", deadline=None, max_examples=150)
settings.load_profile("windows")

INT64_MIN = int(np.iinfo(np.int64).min)
INT64_MAX = int(np.iinfo(np.int64).max)

# Timestamps: mostly near the epoch (both signs), sometimes anywhere in Beam's range.
timestamps = st.one_of(
    st.integers(-10 * DAY, 10 * DAY),
    st.integers(-1000, 1000),
    st.integers(MIN_TIMESTAMP, MAX_TIMESTAMP),
    st.sampled_from([MIN_TIMESTAMP, MAX_TIMESTAMP, END_OF_GLOBAL_WINDOW, 0, -1]),
)
sizes = st.one_of(st.integers(1, 100), st.integers(1, 10 * DAY))
offsets = st.one_of(st.integers(-1000, 1000), st.integers(-100 * DAY, 100 * DAY))


def beam_ts(micros: int) -> bw.WindowFn.AssignContext:
    return bw.WindowFn.AssignContext(Timestamp(micros=micros))


def beam_bounds(windows: object) -> list[tuple[int, int]]:
    return [(w.start.micros, w.end.micros) for w in windows]  # type: ignore[attr-defined]


def our_bounds(windows: object) -> list[tuple[int, int]]:
    return [(w.start, w.end) for w in windows]  # type: ignore[attr-defined]


# ------------------------------------------------------------ differential vs Beam


@given(size=sizes, offset=offsets, ts=timestamps)
def test_fixed_matches_beam(size: int, offset: int, ts: int) -> None:
    ours = FixedWindows(size, offset)
    beam = bw.FixedWindows(Duration(micros=size), Timestamp(micros=offset))
    assert ours.offset == beam.offset.micros
    assert our_bounds(ours.assign(ts)) == beam_bounds(beam.assign(beam_ts(ts)))


@st.composite
def sliding_params(draw: st.DrawFn) -> tuple[int, int, int]:
    period = draw(st.one_of(st.integers(1, 50), st.integers(1, DAY)))
    # up to ~20 windows per element; also period > size (gaps between windows)
    size = draw(
        st.one_of(
            st.integers(1, 20 * period),
            st.integers(max(1, period - 5), period + 5),
            st.integers(1, period),
        )
    )
    return size, period, draw(offsets)


@given(params=sliding_params(), ts=timestamps)
def test_sliding_matches_beam(params: tuple[int, int, int], ts: int) -> None:
    size, period, offset = params
    ours = SlidingWindows(size, period, offset)
    beam = bw.SlidingWindows(
        Duration(micros=size), Duration(micros=period), Timestamp(micros=offset)
    )
    assert ours.offset == beam.offset.micros
    assert our_bounds(ours.assign(ts)) == beam_bounds(beam.assign(beam_ts(ts)))


@given(gap=sizes, ts=timestamps)
def test_sessions_assign_matches_beam(gap: int, ts: int) -> None:
    beam = bw.Sessions(Duration(micros=gap))
    assert our_bounds(Sessions(gap).assign(ts)) == beam_bounds(beam.assign(beam_ts(ts)))


@given(ts=timestamps)
def test_global_matches_beam(ts: int) -> None:
    (ours,) = GlobalWindows().assign(ts)
    (beam,) = bw.GlobalWindows().assign(beam_ts(ts))
    assert ours == GLOBAL_WINDOW
    assert (ours.start, ours.end) == (beam.start.micros, beam.end.micros)
    assert ours.max_timestamp == beam.max_timestamp().micros


def test_global_window_bounds_are_beam_python() -> None:
    beam = bw.GlobalWindow()
    assert beam.max_timestamp().micros == 9223371950454774999 == END_OF_GLOBAL_WINDOW - 1
    assert GlobalWindow().max_timestamp == beam.max_timestamp().micros
    assert GlobalWindow().end == beam.end.micros == MAX_TIMESTAMP - DAY
    assert GlobalWindow().start == beam.start.micros == MIN_TIMESTAMP
    assert GlobalWindow() == GlobalWindow() and hash(GlobalWindow()) == hash(GLOBAL_WINDOW)
    assert GlobalWindow() != IntervalWindow(MIN_TIMESTAMP, END_OF_GLOBAL_WINDOW)
    assert GlobalWindow().contains(0) and not GlobalWindow().contains(END_OF_GLOBAL_WINDOW)


class RecordingMergeContext(bw.WindowFn.MergeContext):
    """The one stub: Beam's merge API reports merges through a context."""

    def __init__(self, windows: list[bw.IntervalWindow]) -> None:
        super().__init__(windows)
        self.merges: list[tuple[list[tuple[int, int]], tuple[int, int]]] = []

    def merge(self, to_be_merged: object, merge_result: bw.BoundedWindow) -> None:
        self.merges.append((beam_bounds(to_be_merged), beam_bounds([merge_result])[0]))


window_lists = st.lists(
    st.tuples(st.integers(-60, 60), st.integers(1, 25)).map(lambda p: (p[0], p[0] + p[1])),
    max_size=25,
)


@given(windows=window_lists, gap=st.integers(1, 30))
def test_sessions_merge_matches_beam(windows: list[tuple[int, int]], gap: int) -> None:
    ctx = RecordingMergeContext(
        [bw.IntervalWindow(Timestamp(micros=s), Timestamp(micros=e)) for s, e in windows]
    )
    bw.Sessions(Duration(micros=gap)).merge(ctx)
    ours = Sessions(gap).merge([IntervalWindow(s, e) for s, e in windows])
    assert [(our_bounds(group), (r.start, r.end)) for group, r in ours] == ctx.merges


def test_non_merging_fns_do_not_merge() -> None:
    ws = [IntervalWindow(0, 10), IntervalWindow(5, 15)]
    for fn in (GlobalWindows(), FixedWindows(10), SlidingWindows(10, 5)):
        assert not fn.is_merging
        assert fn.merge(ws) == []
    assert Sessions(1).is_merging
    with pytest.raises(TypeError, match="IntervalWindow"):
        Sessions(1).merge([GLOBAL_WINDOW])


# ------------------------------------------------------------- vectorised == scalar


def scalar_rows(fn: WindowFn, ts: list[int]) -> tuple[list[int], list[int], list[int]]:
    element: list[int] = []
    start: list[int] = []
    end: list[int] = []
    for i, t in enumerate(ts):
        for w in fn.assign(t):
            element.append(i)
            start.append(w.start)
            end.append(w.end)
    return element, start, end


def check_vectorised(fn: WindowFn, ts: list[int]) -> None:
    element, start, end = scalar_rows(fn, ts)
    arr = np.array(ts, dtype=np.int64)
    if all(INT64_MIN <= v <= INT64_MAX for v in start + end):
        got = fn.assign_array(arr)
        assert got.element.dtype == got.start.dtype == got.end.dtype == np.int64
        assert got.element.tolist() == element
        assert got.start.tolist() == start
        assert got.end.tolist() == end
        assert len(got) == len(element)
        assert (got.max_timestamp == got.end - 1).all()
    else:
        with pytest.raises(OverflowError, match="int64"):
            fn.assign_array(arr)


ts_lists = st.lists(timestamps, max_size=30)


@given(size=sizes, offset=offsets, ts=ts_lists)
def test_fixed_vectorised(size: int, offset: int, ts: list[int]) -> None:
    check_vectorised(FixedWindows(size, offset), ts)


@given(params=sliding_params(), ts=ts_lists)
def test_sliding_vectorised(params: tuple[int, int, int], ts: list[int]) -> None:
    check_vectorised(SlidingWindows(*params), ts)


@given(gap=st.one_of(sizes, st.integers(1, INT64_MAX)), ts=ts_lists)
def test_sessions_vectorised(gap: int, ts: list[int]) -> None:
    check_vectorised(Sessions(gap), ts)


@given(ts=ts_lists)
def test_global_vectorised(ts: list[int]) -> None:
    check_vectorised(GlobalWindows(), ts)


def test_vectorised_extremes() -> None:
    # the fixed window holding MIN_TIMESTAMP starts below int64: scalar is exact, array raises
    (w,) = FixedWindows(HOUR).assign(MIN_TIMESTAMP)
    assert w.start < INT64_MIN and w.contains(MIN_TIMESTAMP)
    with pytest.raises(OverflowError, match=r"ts\[1\]"):
        FixedWindows(HOUR).assign_array(np.array([0, MIN_TIMESTAMP]))
    # with a 1 µs size every window fits
    got = FixedWindows(1).assign_array(np.array([MIN_TIMESTAMP, MAX_TIMESTAMP]))
    assert got.start.tolist() == [MIN_TIMESTAMP, MAX_TIMESTAMP]
    empty = SlidingWindows(10, 3).assign_array(np.array([], dtype=np.int64))
    assert len(empty) == 0 and empty.start.dtype == np.int64
    assert len(FixedWindows(10).assign_array(np.array([]))) == 0


# ---------------------------------------------------------------- merge_array


def sessions_by_repeated_merge(
    gap: int, keys: list[object], ts: list[int]
) -> list[tuple[int, int]]:
    fn = Sessions(gap)
    out: list[tuple[int, int]] = [(0, 0)] * len(ts)
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        current = Counter(w for i in idx for w in fn.assign(ts[i]))
        while groups := fn.merge(list(current.elements())):
            for group, result in groups:
                current.subtract(group)
                current[result] += 1
            current = +current
        final = list(current)
        for i in idx:
            (w,) = [w for w in final if w.contains(ts[i])]
            out[i] = (w.start, w.end)
    return out


@given(
    gap=st.integers(1, 20),
    rows=st.lists(st.tuples(st.integers(0, 3), st.integers(-50, 50)), max_size=40),
    kind=st.sampled_from(["int", "str", "object"]),
)
def test_merge_array_equals_repeated_scalar_merge(
    gap: int, rows: list[tuple[int, int]], kind: str
) -> None:
    ts = [t for _, t in rows]
    karr: np.ndarray
    if kind == "int":
        keys: list[object] = [k for k, _ in rows]
        karr = np.array([k for k, _ in rows], dtype=np.int64)
    elif kind == "str":
        keys = [f"k{k}" for k, _ in rows]
        karr = np.array(keys, dtype=object)
    else:  # unorderable mixed keys: falls back to hashing
        keys = [(None, "a", 1, (2, 3))[k] for k, _ in rows]
        karr = np.empty(len(keys), dtype=object)
        karr[:] = keys
    start, end = Sessions(gap).merge_array(karr, np.array(ts, dtype=np.int64))
    assert start.dtype == end.dtype == np.int64
    assert list(zip(start.tolist(), end.tolist(), strict=True)) == sessions_by_repeated_merge(
        gap, keys, ts
    )


def test_merge_array_touching_windows_stay_apart() -> None:
    start, end = Sessions(10).merge_array(
        np.array([1, 1, 1, 2]), np.array([0, 10, 19, 5], dtype=np.int64)
    )
    # [0,10) and [10,20) touch: not merged; [10,20) and [19,29) overlap: merged
    assert start.tolist() == [0, 10, 10, 5]
    assert end.tolist() == [10, 29, 29, 15]


def test_merge_array_extremes_and_errors() -> None:
    start, end = Sessions(SECOND).merge_array(
        np.array([0, 0]), np.array([MIN_TIMESTAMP, MAX_TIMESTAMP - SECOND])
    )
    assert start.tolist() == [MIN_TIMESTAMP, MAX_TIMESTAMP - SECOND]
    assert end.tolist() == [MIN_TIMESTAMP + SECOND, MAX_TIMESTAMP]
    with pytest.raises(OverflowError):
        Sessions(DAY).merge_array(np.array([0]), np.array([MAX_TIMESTAMP]))
    with pytest.raises(ValueError, match="one key per timestamp"):
        Sessions(1).merge_array(np.array([0, 1]), np.array([0]))
    s, e = Sessions(1).merge_array(np.array([]), np.array([], dtype=np.int64))
    assert s.size == e.size == 0


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: FixedWindows(0), "size"),
        (lambda: FixedWindows(-5), "size"),
        (lambda: SlidingWindows(0, 1), "size"),
        (lambda: SlidingWindows(10, 0), "period"),
        (lambda: SlidingWindows(10, -1), "period"),
        (lambda: Sessions(0), "gap"),
        (lambda: Sessions(-1), "gap"),
        (lambda: FixedWindows(2**63), "size"),
    ],
)
def test_bad_parameters(make: object, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        make()  # type: ignore[operator]


def test_beam_also_rejects_non_positive_sizes() -> None:
    for make in (
        lambda: bw.FixedWindows(0),
        lambda: bw.SlidingWindows(0, 1),
        lambda: bw.Sessions(0),
    ):
        with pytest.raises(ValueError):
            make()
    # Beam does not validate period: 0 divides by zero, negative assigns nothing
    with pytest.raises(ZeroDivisionError):
        bw.SlidingWindows(10, 0)
    assert bw.SlidingWindows(Duration(micros=10), Duration(micros=-2)).assign(beam_ts(5)) == []


def test_parameter_types_and_normalisation() -> None:
    with pytest.raises(TypeError, match="size"):
        FixedWindows(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gap"):
        Sessions(True)
    assert FixedWindows(10, -3).offset == 7
    assert FixedWindows(10, 23) == FixedWindows(10, 3)
    assert SlidingWindows(10, 3, -1).offset == 2  # modulo period, as Beam
    from_numpy = FixedWindows(np.int64(10))  # type: ignore[arg-type]
    assert from_numpy.size == 10 and type(from_numpy.size) is int
    # period > size is allowed (as in Beam): some timestamps get no window
    assert SlidingWindows(3, 10).assign(5) == ()
    assert SlidingWindows(3, 10).assign(11) == (IntervalWindow(10, 13),)


def test_out_of_range_timestamps() -> None:
    for fn in (GlobalWindows(), FixedWindows(10), SlidingWindows(10, 5), Sessions(10)):
        with pytest.raises(ValueError, match=str(MAX_TIMESTAMP + 1)):
            fn.assign(MAX_TIMESTAMP + 1)
        with pytest.raises(ValueError, match=str(MIN_TIMESTAMP - 1)):
            fn.assign(MIN_TIMESTAMP - 1)
        with pytest.raises(ValueError, match=rf"ts\[2\]={MAX_TIMESTAMP + 1}"):
            fn.assign_array(np.array([0, 1, MAX_TIMESTAMP + 1]))
        with pytest.raises(TypeError, match="dtype"):
            fn.assign_array(np.array([1.0]))
        with pytest.raises(ValueError, match="1-d"):
            fn.assign_array(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match=str(INT64_MAX)):
        FixedWindows(10).assign_array(np.array([INT64_MAX], dtype=np.uint64))


def test_interval_window() -> None:
    with pytest.raises(ValueError, match=r"start=5 µs, end=5 µs"):
        IntervalWindow(5, 5)
    with pytest.raises(ValueError, match=r"start=6 µs, end=5 µs"):
        IntervalWindow(6, 5)
    w = IntervalWindow(0, 10)
    assert w.max_timestamp == 9
    assert w.contains(0) and w.contains(9) and not w.contains(10) and not w.contains(-1)
    assert w.intersects(IntervalWindow(9, 20)) and IntervalWindow(9, 20).intersects(w)
    assert not w.intersects(IntervalWindow(10, 20))  # touching is not overlap
    assert not w.intersects(IntervalWindow(-5, 0))
    assert w.intersects(IntervalWindow(2, 3))
    assert w.span(IntervalWindow(20, 30)) == IntervalWindow(0, 30)
    assert sorted([IntervalWindow(1, 3), IntervalWindow(0, 5), IntervalWindow(1, 2)]) == [
        IntervalWindow(0, 5),
        IntervalWindow(1, 2),
        IntervalWindow(1, 3),
    ]
    from_numpy = IntervalWindow(np.int64(1), 2)  # type: ignore[arg-type]
    assert from_numpy == IntervalWindow(1, 2) and hash(from_numpy) == hash(IntervalWindow(1, 2))
    assert type(from_numpy.start) is int
    with pytest.raises(AttributeError):
        w.start = 3  # type: ignore[misc]


# ------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("500ms", 500_000),
        ("30s", 30 * SECOND),
        ("2m", 120 * SECOND),
        ("1h", HOUR),
        ("1d", DAY),
        ("250us", 250),
        ("250µs", 250),
        ("1500", 1500),
        (" 1.5s ", 1_500_000),
        ("0", 0),
    ],
)
def test_parse_duration(text: str, micros: int) -> None:
    assert parse_duration(text) == micros


@pytest.mark.parametrize("text", ["", "s", "abc", "5x", "-5s", "1.5us", "1.5", "1e3", "1 h 2"])
def test_parse_duration_bad(text: str) -> None:
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("spec", "fn"),
    [
        ("global", GlobalWindows()),
        ("fixed:2m", FixedWindows(2 * 60 * SECOND)),
        ("fixed:1h+15m", FixedWindows(HOUR, 15 * 60 * SECOND)),
        ("sliding:10m/1m", SlidingWindows(600 * SECOND, 60 * SECOND)),
        ("sliding:10m/1m+30s", SlidingWindows(600 * SECOND, 60 * SECOND, 30 * SECOND)),
        ("sessions:1m", Sessions(60 * SECOND)),
        (" Sessions:500 ", Sessions(500)),
    ],
)
def test_window_fn_from_spec(spec: str, fn: WindowFn) -> None:
    assert window_fn_from_spec(spec) == fn


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "fixed",
        "fixed:",
        "fixed:0s",
        "fixed:2x",
        "sliding:10m",
        "sliding:10m/0",
        "sessions:",
        "sessions:1m/2m",
        "global:1m",
        "tumbling:1m",
    ],
)
def test_window_fn_from_spec_bad(spec: str) -> None:
    with pytest.raises(ValueError, match="bad window spec") as info:
        window_fn_from_spec(spec)
    assert repr(spec) in str(info.value)


def test_spec_errors_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="size"):
        window_fn_from_spec("fixed:0s")
    with pytest.raises(ValueError, match="period"):
        window_fn_from_spec("sliding:10m/0")


def test_spec_of_the_wrong_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="window spec must be a string"):
        window_fn_from_spec(60)  # type: ignore[arg-type]
