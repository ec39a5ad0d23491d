"""The vectorised paths' lazy panes (``PaneSequence``) against the built list, and the
bulk-made interval windows against validated ones."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.helpers.windowing import S, canon, strat
from theory.windowing import triggers as tt
from theory.windowing.pane_columns import PaneColumns, PaneSequence
from theory.windowing.runner import run_script
from theory.windowing.script import ElementEvent, WatermarkEvent
from theory.windowing.strategy import AccumulationMode
from theory.windowing.windows import (
    FixedWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
    trusted_interval_windows,
)


def _script(seed: int, late: bool) -> list[ElementEvent | WatermarkEvent]:
    """Six elements per 0.5 s watermark step over three keys, up to 3 s late if ``late``."""
    rng = np.random.default_rng(seed)
    events: list[ElementEvent | WatermarkEvent] = []
    for step in range(1, 40):
        ts = (step * S // 2 + rng.integers(-3 * S if late else 0, S, 6)).tolist()
        events.append(ElementEvent([(f"k{i % 3}", step * 10 + i, t) for i, t in enumerate(ts)]))
        events.append(WatermarkEvent(step * S // 2))
    return events


@pytest.mark.parametrize(
    "strategy",
    [
        strat(fn=FixedWindows(2 * S), allowed_lateness=2 * S),  # one size: windows shared
        strat(fn=SlidingWindows(3 * S, S), allowed_lateness=S),
        strat(fn=Sessions(S // 2)),  # sizes differ: one window per pane
        strat(
            tt.AfterWatermark(early=tt.AfterCount(2), late=tt.AfterCount(1)),
            FixedWindows(2 * S),
            accumulation_mode=AccumulationMode.ACCUMULATING,
            allowed_lateness=3 * S,
        ),
    ],
    ids=["fixed", "sliding", "sessions", "early-late"],
)
def test_lazy_panes_equal_the_built_list(strategy):
    late = not strategy.window_fn.is_merging  # a late session goes to the engine
    r = run_script(_script(3, late), strategy)
    slow = run_script(_script(3, late), strategy, fast=False)
    assert r.path == "vectorised"
    panes = r.panes
    assert isinstance(panes, PaneSequence)
    assert len(panes) == len(slow.panes) > 10 and panes._built is None  # len builds nothing
    assert canon(r) == canon(slow)  # the lazy panes read as the engine's
    built = r.pane_columns.panes()
    assert panes == built and built == panes and panes == tuple(built)
    assert panes != built[:-1] and panes != built[::-1]
    assert panes[0] == built[0] and panes[-3:] == built[-3:] and list(panes) == built
    assert panes + [] == built and [] + panes == built  # noqa: RUF005  (the operators under test)
    assert pickle.loads(pickle.dumps(panes)) == built
    assert repr(panes) == repr(built)
    for p in panes:
        w = IntervalWindow(p.window.start, p.window.end)  # validated
        assert p.window == w and hash(p.window) == hash(w) and p.window.max_timestamp == w.end - 1
    # the columns of the engine's panes build the same panes back
    assert PaneColumns.from_panes(slow.panes).panes() == list(slow.panes)


def test_empty_lazy_panes_equal_empty_list():
    r = run_script([ElementEvent([("k", 1, 5 * S)])], strat(allowed_lateness=0), fast=True)
    assert r.path == "vectorised" and len(r.panes) == 1
    none = PaneSequence(r.pane_columns.take(np.zeros(0, np.int64)))
    assert none == [] and [] == none and not none and len(none) == 0  # noqa: SIM300  (list.__eq__ reflected)


def test_bulk_windows_equal_validated_ones():
    starts, ends = [-5, 0, 7, 7], [3, 1, 9, 10]
    made = trusted_interval_windows(starts, ends)
    assert made == [IntervalWindow(s, e) for s, e in zip(starts, ends, strict=True)]
    assert [type(w) for w in made] == [IntervalWindow] * 4 and made[2] != made[3]
    with pytest.raises(AttributeError):
        made[0].start = 4  # still frozen
