"""Windows fired by the end of input (docs/semantics.md, "End of input"): flagged, left
out of the latency percentiles unless asked, counted; the simulator-based ``tradeoff``
agrees; a window the watermark fires has no negative latency when no row arrives before
its event time."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.data.trace import Trace
from theory.experiments.first_panes import Firing, WindowIndex, summary_row
from theory.experiments.tradeoff import Strategy, tradeoff
from theory.watermarks.spec import make_source_watermark

SIZE = 10
SPECS = ["perfect", "bounded:3us", "bounded:0us", "percentile:0.5", "percentile:0.9:hold"]

rows = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 40), st.integers(0, 2)), min_size=1, max_size=40
)


def _trace(draw_rows: list[tuple[int, int, int]]) -> Trace:
    e = np.array([r[0] for r in draw_rows], dtype=np.int64)
    a = e + np.array([r[1] for r in draw_rows], dtype=np.int64)  # causal: a >= e
    k = np.array([r[2] for r in draw_rows], dtype=np.int64)
    return Trace(e, a, k, np.ones(e.size)).sorted_by_arrival()


@settings(max_examples=60, deadline=None)
@given(rows, st.sampled_from(SPECS))
def test_end_of_input_flags_and_latency(draw_rows, spec):
    """Flagged exactly where the watermark had not reached the window's end at the last
    arrival; those fire at the last arrival; the others never have negative latency; the
    percentiles leave the flagged ones out unless asked, and count them."""
    t = _trace(draw_rows)
    curve = make_source_watermark(spec).curve(t.event_time, t.arrival_time)
    index = WindowIndex.of(t.event_time, t.arrival_time, t.key, SIZE)
    p = index.panes(curve, Firing())
    last = int(t.arrival_time.max())
    want = curve.at(last) < index.window_end
    np.testing.assert_array_equal(p.end_of_input, want)
    assert (p.fire_time[want] == last).all()
    fired = p.fire_time >= 0
    assert (p.latency[fired & ~want] >= 0).all()
    row = summary_row(spec, index.elements, p, 0, len(t))
    kept = p.latency[fired & ~want]
    assert row["end_of_input_windows"] == int(want.sum())
    if kept.size:
        assert row["window_latency_p50"] == np.percentile(kept, 50)
    else:
        assert np.isnan(row["window_latency_p50"])
    every = summary_row(spec, index.elements, p, 0, len(t), include_end_of_input=True)
    assert every["window_latency_p50"] == np.percentile(p.latency[fired], 50)
    assert every["end_of_input_windows"] == row["end_of_input_windows"]


@settings(max_examples=30, deadline=None)
@given(rows, st.sampled_from(SPECS))
def test_tradeoff_counts_and_leaves_out_the_same_windows(draw_rows, spec):
    """The simulator-based ``tradeoff`` flags and leaves out the same windows as the
    comparison's vectorised panes."""
    t = _trace(draw_rows)
    curve = make_source_watermark(spec).curve(t.event_time, t.arrival_time)
    index = WindowIndex.of(t.event_time, t.arrival_time, t.key, SIZE)
    row = summary_row(spec, index.elements, index.panes(curve, Firing()), 0, len(t))
    for include in (False, True):
        got = tradeoff(t, [Strategy(spec, spec)], window_size=SIZE,
                       include_end_of_input=include).rows[0]
        want = summary_row(spec, index.elements, index.panes(curve, Firing()), 0, len(t),
                           include)
        assert got.end_of_input_windows == row["end_of_input_windows"]
        np.testing.assert_equal(got.window_latency_p50, want["window_latency_p50"])
        np.testing.assert_equal(got.window_latency_p99, want["window_latency_p99"])


def test_the_semantics_page_example():
    """Both rows in [0, 10) s, the last arriving at 3 s: fired by the end of input at
    3 s, latency -7 s, left out of the median unless asked."""
    s = 1_000_000
    e, a = np.array([0, 2 * s]), np.array([1 * s, 3 * s])
    curve = make_source_watermark("perfect").curve(e, a)
    p = WindowIndex.of(e, a, np.zeros(2, np.int64), 10 * s).panes(curve, Firing())
    assert p.end_of_input.tolist() == [True] and p.latency.tolist() == [-7 * s]
    assert np.isnan(summary_row("perfect", np.array([2]), p, 0, 2)["window_latency_p50"])
