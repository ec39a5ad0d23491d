"""The vectorised window panes of the comparison (:mod:`theory.experiments.first_panes`)
against the simulator (its peer): per window the first pane's size, fire time and output
timestamp, the number of panes and the last pane's size, and the dropped total, under
allowed lateness, late firings and every timestamp combiner."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.data.trace import Trace
from theory.experiments.first_panes import Firing, WindowIndex
from theory.experiments.tradeoff import STAGE, grouping_pipeline
from theory.pipeline.simulator import simulate

SIZE = 10


def _trace(draw_rows: list[tuple[int, int, int]]) -> Trace:
    e = np.array([r[0] for r in draw_rows], dtype=np.int64)
    a = e + np.array([r[1] for r in draw_rows], dtype=np.int64)
    k = np.array([r[2] for r in draw_rows], dtype=np.int64)
    return Trace(e, a, k, np.ones(e.size)).sorted_by_arrival()


def _simulated(trace: Trace, spec: str, firing: Firing) -> tuple[dict, int]:
    """Per (key, window end): (first count, first fire time, first timestamp, panes,
    last count) from the simulator, and its dropped total."""
    pipe = grouping_pipeline(
        spec,
        f"fixed:{SIZE}us",
        allowed_lateness=firing.allowed_lateness,
        late_firings=firing.late_firings,
        timestamp_combiner=firing.timestamp_combiner,
    )
    result = simulate(pipe, {"in": trace})
    panes = result.stages[STAGE].panes
    out: dict[tuple[int, int], list[int]] = {}
    if panes is not None:
        for k, end, c, ft, ts, i in zip(
            panes.key.tolist(), panes.window_end.tolist(), panes.count.tolist(),
            panes.fire_time.tolist(), panes.timestamp.tolist(), panes.index.tolist(),
            strict=True,
        ):
            if i == 0:
                out[(k, end)] = [c, ft, ts, 1, c]
            else:
                out[(k, end)][3] += 1
                out[(k, end)][4] = c
    return {w: tuple(v) for w, v in out.items()}, int(sum(result.stages[STAGE].dropped.values()))


def _vectorised(trace: Trace, spec: str, firing: Firing) -> tuple[dict, int, set]:
    """The same from :meth:`WindowIndex.panes` on the simulator's source watermark, and
    the windows whose first pane holds an element that arrived late (its output
    timestamp is then not compared: see :func:`test_a_late_element_may_not_hold`)."""
    result = simulate(grouping_pipeline(spec, f"fixed:{SIZE}us"), {"in": trace})
    curve = result.stages["in"].output_watermark
    index = WindowIndex.of(trace.event_time, trace.arrival_time, trace.key, SIZE)
    p = index.panes(curve, firing)
    out = {
        (int(k), int(end)): (int(c), int(ft), int(ts), int(n), int(fin))
        for k, end, c, ft, ts, n, fin in zip(
            index.key, index.window_end, p.first, p.fire_time, p.timestamp, p.panes,
            p.final, strict=True,
        )
        if n > 0
    }
    a, e, w = index.arrival_time, index.event_time, index.window_of
    in_first = a <= p.fire_time[w]
    late = in_first & (e < curve.before(a))
    held_late = {(int(index.key[i]), int(index.window_end[i])) for i in np.unique(w[late])}
    return out, int((index.elements - p.final).sum()), held_late


def _equal(ours: tuple[dict, int, set], theirs: tuple[dict, int]) -> None:
    """Equal panes and drops; output timestamps equal where no late element is in the
    first pane."""
    (got, dropped, held_late), (want, want_dropped) = ours, theirs
    assert dropped == want_dropped
    assert got.keys() == want.keys()
    for w, v in got.items():
        if w in held_late:
            assert v[:2] + v[3:] == want[w][:2] + want[w][3:], w
        else:
            assert v == want[w], w


rows = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 40), st.integers(0, 2)), min_size=1, max_size=40
)
firings = st.builds(
    lambda lateness, combiner: Firing(lateness, lateness > 0, combiner),
    st.sampled_from([0, 1, 5, 10, 30]),
    st.sampled_from(["eow", "earliest", "latest"]),
)


@settings(max_examples=100, deadline=None)
@given(rows, st.sampled_from(["perfect", "bounded:3us", "bounded:0us", "percentile:0.5"]),
       firings)
def test_panes_equal_the_simulator(draw_rows, spec, firing):
    trace = _trace(draw_rows)
    _equal(_vectorised(trace, spec, firing), _simulated(trace, spec, firing))


def test_late_firings_and_lateness_change_the_panes():
    """A hand-made case where each option changes the answer (so the test above can
    fail): window [0, 10) of key 0, a bounded:0 watermark; elements e=1 at 1, then e=12
    of key 1 at 12 (the watermark passes 10), e=2 at 13 (late), e=16 of key 1 at 16, and
    e=3 at 20 (late, and beyond a lateness of 5: the watermark was 16 > 10 + 5)."""
    trace = _trace([(1, 0, 0), (12, 0, 1), (2, 11, 0), (16, 0, 1), (3, 17, 0)])
    once, dropped, _ = _vectorised(trace, "bounded:0us", Firing())
    assert once[(0, 10)] == (1, 12, 9, 1, 1) and dropped == 2
    late, dropped, _ = _vectorised(trace, "bounded:0us", Firing(5, True, "earliest"))
    assert late[(0, 10)] == (1, 12, 1, 2, 2) and dropped == 1  # e=3 at 20: expired
    late, dropped, _ = _vectorised(trace, "bounded:0us", Firing(30, True, "latest"))
    assert late[(0, 10)] == (1, 12, 1, 3, 3) and dropped == 0
    for firing in (Firing(), Firing(5, True, "earliest"), Firing(30, True, "latest")):
        _equal(_vectorised(trace, "bounded:0us", firing), _simulated(trace, "bounded:0us", firing))


def test_a_late_element_may_not_hold():
    """The one documented divergence: the comparison combines the event times of every
    element of the first pane; the simulator (Beam's "too late to hold" rule) leaves out
    an element that arrived behind the stage's output watermark, which depends on every
    window's holds, not on this window alone. Here e=42 arrives at 42 (hold 42, output
    watermark 41), then e=40 arrives late at 43: Beam's earliest timestamp is 42, ours 40."""
    trace = _trace([(40, 3, 0), (42, 0, 0)])
    firing = Firing(0, False, "earliest")
    ours, _, held_late = _vectorised(trace, "bounded:0us", firing)
    theirs, _ = _simulated(trace, "bounded:0us", firing)
    assert held_late == {(0, 50)}
    assert (ours[(0, 50)][2], theirs[(0, 50)][2]) == (40, 42)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timestamp_combiner": "first"}, "--timestamp-combiner must be one of"),
        ({"allowed_lateness": -1}, "--allowed-lateness must be >= 0"),
        ({"late_firings": True}, "--late-firings needs --allowed-lateness > 0"),
        ({"allowed_lateness": 5}, "--allowed-lateness needs --late-firings"),
    ],
)
def test_bad_firing_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Firing(**kwargs)
