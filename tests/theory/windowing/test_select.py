"""The selector of a strategy's vectorised path: its decision table, the rules it keeps
for any strategy (hypothesis), and ``run_script`` running the path it selects."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.windowing import runner
from theory.windowing.runner import run_script
from theory.windowing.script import ElementEvent, WatermarkEvent
from theory.windowing.select import (
    WindowingPath,
    lifts_combine,
    script_path,
    whole_batch_path,
)
from theory.windowing.strategy import TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    DefaultTrigger,
    Never,
    OrFinally,
    Repeatedly,
    Trigger,
)
from theory.windowing.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows

W, C, S = WindowingPath.WATERMARK, WindowingPath.COUNT, WindowingPath.SESSIONS
WINDOW_FNS = {
    "fixed": FixedWindows(10),
    "sliding": SlidingWindows(10, 5),
    "sessions": Sessions(10),
    "global": GlobalWindows(),
}
#: trigger -> (script path for non-merging windows, whole-batch engine?, lifted?)
TABLE: dict[str, tuple[Trigger, WindowingPath, bool, bool]] = {
    "default": (DefaultTrigger(), W, True, True),
    "watermark": (AfterWatermark(), W, True, False),
    "early count 1": (AfterWatermark(early=AfterCount(1)), C, False, False),
    "early and late": (
        AfterWatermark(early=AfterProcessingTime(5), late=AfterCount(1)), C, False, True
    ),
    "count 2": (AfterCount(2), C, False, False),
    "repeated count 1": (Repeatedly(AfterCount(1)), C, False, True),
    "repeated count 3": (Repeatedly(AfterCount(3)), C, False, False),
    "any": (Repeatedly(AfterAny(AfterCount(1), AfterProcessingTime(3))), C, False, True),
    "all": (Repeatedly(AfterAll(AfterCount(1), AfterProcessingTime(3))), C, False, False),
    "or finally": (Repeatedly(OrFinally(AfterCount(1), AfterCount(5))), C, False, False),
    "each": (AfterEach(AfterCount(1), AfterCount(2)), C, False, False),
    "always": (Always(), C, False, True),
    "never": (Never(), C, False, True),
}


def _strategy(window: str, trigger: Trigger) -> WindowingStrategy:
    return WindowingStrategy(WINDOW_FNS[window], trigger, allow_unsafe_triggers=True)


@pytest.mark.parametrize("window", WINDOW_FNS)
@pytest.mark.parametrize("name", TABLE)
def test_the_decision_table(window: str, name: str) -> None:
    trigger, path, batch, lifted = TABLE[name]
    strategy = _strategy(window, trigger)
    merging = window == "sessions"
    assert script_path(strategy) is (S if merging else path)
    expected_batch = (S if merging else W) if batch and window != "global" else None
    got = whole_batch_path(strategy)
    if expected_batch is None:
        assert isinstance(got, str) and "is not" in got
    else:
        assert got is expected_batch
    for end_of_window in (True, False):
        assert lifts_combine(trigger, merging=merging, end_of_window=end_of_window) == (
            lifted and not merging and end_of_window
        )


_leaf = st.sampled_from(
    [DefaultTrigger(), AfterWatermark(), AfterCount(1), AfterCount(3), Always(), Never(),
     AfterProcessingTime(5)]
)
_triggers = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        inner.map(Repeatedly),
        st.tuples(inner, inner).map(lambda ts: AfterAny(*ts)),
        st.tuples(inner, inner).map(lambda ts: AfterAll(*ts)),
        st.tuples(inner, inner).map(lambda ts: OrFinally(*ts)),
        st.tuples(st.none() | inner, st.none() | inner).map(
            lambda el: AfterWatermark(early=el[0], late=el[1])
        ),
    ),
    max_leaves=4,
)


@settings(max_examples=60, deadline=None)
@given(window=st.sampled_from(list(WINDOW_FNS)), trigger=_triggers,
       combiner=st.sampled_from(list(TimestampCombiner)))
def test_the_rules_hold_for_any_strategy(window: str, trigger: Trigger,
                                         combiner: TimestampCombiner) -> None:
    """Sessions, and only sessions, take the session path; a watermark-only trigger on
    non-merging windows the watermark path; the batch path is the script path or refused;
    merging windows and outputs not at the end of the window are never lifted."""
    strategy = WindowingStrategy(
        WINDOW_FNS[window], trigger, timestamp_combiner=combiner, allow_unsafe_triggers=True
    )
    merging = window == "sessions"
    path = script_path(strategy)
    assert (path is S) == merging
    assert (path is W) == (not merging and trigger.watermark_only())
    batch = whole_batch_path(strategy)
    assert isinstance(batch, str) or batch is path
    assert isinstance(batch, str) == (window == "global" or not trigger.watermark_only())
    for end_of_window in (True, False):
        lifted = lifts_combine(trigger, merging=merging, end_of_window=end_of_window)
        assert not lifted or (not merging and end_of_window)


@pytest.mark.parametrize(
    ("window", "trigger", "ran"),
    [
        ("fixed", DefaultTrigger(), "run_fast_columns"),
        ("sliding", Repeatedly(AfterCount(2)), "run_count_columns"),
        ("sessions", AfterWatermark(), "run_sessions_columns"),
    ],
)
def test_run_script_runs_the_selected_path(
    monkeypatch: pytest.MonkeyPatch, window: str, trigger: Trigger, ran: str
) -> None:
    called: list[str] = []
    for path, run in list(runner._PATHS.items()):

        def spy(*args: object, _run: object = run, **kwargs: object) -> object:
            called.append(_run.__name__)  # type: ignore[attr-defined]
            return _run(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setitem(runner._PATHS, path, spy)
    script = [ElementEvent([("k", 1, 3), ("k", 2, 4)]), WatermarkEvent(30)]
    result = run_script(script, _strategy(window, trigger))
    assert called == [ran]
    assert result.path == "vectorised", result.refusal
