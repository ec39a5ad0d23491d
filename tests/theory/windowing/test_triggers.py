"""Beam's trigger language on the engine, and the behaviours of Beam Python's runner that
the engine keeps where they differ from the Beam model (tests named ``test_runner_*``; the
same scripts run against Beam itself in tests/beam_pipelines/test_engine_vs_beam.py).

Times in seconds (S = 1 s in µs) unless stated."""

import numpy as np
import pytest

from tests.helpers.windowing import strat, summary
from theory.windowing import triggers as tt
from theory.windowing.engine import Timing
from theory.windowing.runner import run_script
from theory.windowing.script import ElementEvent as E
from theory.windowing.script import ProcessingTimeEvent as P
from theory.windowing.script import WatermarkEvent as W
from theory.windowing.strategy import (
    AccumulationMode,
    TimestampCombiner,
    WindowingStrategy,
    legacy_sliding_output_time,
)
from theory.windowing.windows import (
    FixedWindows,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
)

S = 1_000_000
ACC = AccumulationMode.ACCUMULATING
EARLIEST = TimestampCombiner.OUTPUT_AT_EARLIEST
LATEST = TimestampCombiner.OUTPUT_AT_LATEST


# -- the language -----------------------------------------------------------------------


def test_after_count_fires_once_per_batch_reaching_the_count():
    r = run_script(
        [E([("a", 1, S), ("a", 2, S), ("a", 3, S)]), E([("a", 4, S)])],
        strat(tt.AfterCount(2)),
    )
    # the batch of three fires once with all three; the trigger is then finished
    assert summary(r) == [("a", (1, 2, 3), "EARLY", 0, -1, True)]
    assert r.dropped["closed"] == 1


def test_repeatedly_after_count_and_accumulation():
    events = [E([("a", 1, S)]), E([("a", 2, S)]), E([("a", 3, S)]), E([("a", 4, S)])]
    r = run_script(events, strat(tt.Repeatedly(tt.AfterCount(2))))
    assert [p.values for p in r.panes] == [(1, 2), (3, 4)]
    r = run_script(events, strat(tt.Repeatedly(tt.AfterCount(2)), accumulation_mode=ACC))
    assert [p.values for p in r.panes] == [(1, 2), (1, 2, 3, 4)]
    assert [p.index for p in r.panes] == [0, 1]


def test_early_and_late_firings():
    trigger = tt.AfterWatermark(early=tt.AfterCount(1), late=tt.AfterCount(1))
    r = run_script(
        [E([("a", 1, 2 * S)]), E([("a", 2, 3 * S)]), W(11 * S), E([("a", 3, 4 * S)])],
        strat(trigger, allowed_lateness=20 * S, timestamp_combiner=EARLIEST),
    )
    assert summary(r) == [
        ("a", (1,), "EARLY", 0, -1, False),
        ("a", (2,), "EARLY", 1, -1, False),
        ("a", (), "ON_TIME", 2, 0, False),  # the watermark timer fires an empty pane
        ("a", (3,), "LATE", 3, 1, False),
    ]
    # early panes keep the hold (the trigger has an ON_TIME pane): both sit at 2 s
    assert [p.timestamp for p in r.panes] == [2 * S, 2 * S, 2 * S, 10 * S - 1]


def test_after_processing_time_counts_from_the_first_element():
    r = run_script(
        [E([("a", 1, S)]), P(3 * S), E([("a", 2, S)]), P(2 * S), E([("a", 3, S)]), P(9 * S)],
        strat(tt.Repeatedly(tt.AfterProcessingTime(5 * S))),
    )
    assert [(p.values, p.timing.name) for p in r.panes] == [((1, 2), "EARLY"), ((3,), "LATE")]


def test_after_each_runs_its_triggers_in_turn():
    r = run_script(
        [E([("a", i, S)]) for i in range(6)],
        strat(tt.AfterEach(tt.AfterCount(1), tt.AfterCount(3))),
    )
    assert [p.values for p in r.panes] == [(0,), (1, 2, 3)]
    assert r.panes[-1].is_last and r.dropped["closed"] == 2


def test_or_finally_and_after_all():
    r = run_script(
        [E([("a", i, S)]) for i in range(5)],
        strat(tt.OrFinally(tt.Repeatedly(tt.AfterCount(1)), tt.AfterCount(3))),
    )
    assert [p.values for p in r.panes] == [(0,), (1,), (2,)]
    assert r.panes[-1].is_last
    r = run_script(
        [E([("a", 0, S)]), W(11 * S), E([("a", 1, 2 * S)])],
        strat(tt.AfterAll(tt.AfterWatermark(), tt.AfterCount(2)), allowed_lateness=20 * S),
    )
    # the watermark timer alone does not fire it (count 1); the second element does. The
    # first batch's hold was never released, so the output watermark is still before the
    # window and the pane is EARLY
    assert summary(r) == [("a", (0, 1), "EARLY", 0, -1, True)]


def test_always_and_never():
    r = run_script([E([("a", 1, S), ("a", 2, S)]), E([("a", 3, S)])], strat(tt.Always()))
    assert [p.values for p in r.panes] == [(1, 2), (3,)]
    r = run_script([E([("a", 1, S)])], strat(tt.Never()))
    assert r.panes == [] and r.stalled


def test_trigger_validation():
    with pytest.raises(ValueError, match="AfterCount count must be >= 1"):
        tt.AfterCount(0)
    with pytest.raises(TypeError, match="AfterCount count"):
        tt.AfterCount(1.5)  # type: ignore[arg-type]
    assert type(tt.AfterCount(np.int64(2)).count) is int
    with pytest.raises(ValueError, match="delay"):
        tt.AfterProcessingTime(-1)
    with pytest.raises(TypeError, match="Repeatedly"):
        tt.Repeatedly("x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        tt.AfterAny()
    assert tt.AfterWatermark(early=tt.AfterCount(1)).early == tt.Repeatedly(tt.AfterCount(1))
    assert tt.AfterAny(tt.Never()) == tt.AfterAny(tt.Never())
    assert tt.AfterAny(tt.Never()) != tt.AfterAll(tt.Never())


def test_beam_rejections():
    # Beam's GroupByKey rejects these unless --allow_unsafe_triggers
    bad = [
        (GlobalWindows(), tt.DefaultTrigger(), 0),
        (FixedWindows(10), tt.AfterCount(1), 0),
        (FixedWindows(10), tt.AfterWatermark(), 1),
        (FixedWindows(10), tt.AfterAny(tt.AfterCount(2), tt.Repeatedly(tt.AfterCount(1))), 0),
        (FixedWindows(10), tt.AfterEach(tt.AfterCount(1), tt.AfterProcessingTime(1)), 0),
    ]
    for fn, trigger, lateness in bad:
        with pytest.raises(ValueError):
            WindowingStrategy(fn, trigger, allowed_lateness=lateness)
    good = [
        (GlobalWindows(), tt.Repeatedly(tt.AfterCount(2)), 0),
        (FixedWindows(10), tt.AfterWatermark(), 0),
        (FixedWindows(10), tt.AfterWatermark(late=tt.AfterCount(1)), 5),
        (FixedWindows(10), tt.AfterAll(tt.AfterCount(2), tt.Repeatedly(tt.AfterCount(1))), 0),
        (FixedWindows(10), tt.Never(), 0),
        (FixedWindows(10), tt.OrFinally(tt.Always(), tt.Never()), 0),
    ]
    for fn, trigger, lateness in good:
        WindowingStrategy(fn, trigger, allowed_lateness=lateness)


# -- Beam Python's runner against the Beam model ---------------------------------------------


def test_runner_drops_on_window_end_not_max_timestamp():
    # Model: droppable once IW > max_timestamp + lateness (15 s - 1 µs here).
    # Runner: once IW > end + lateness, so at IW = 15 s the element is still taken.
    r = run_script(
        [W(15 * S), E([("a", 1, 3 * S)]), W(15 * S + 1000), E([("a", 2, 4 * S)])],
        strat(allowed_lateness=5 * S),
    )
    assert summary(r) == [("a", (1,), "LATE", 0, 0, False)]
    assert r.dropped["expired"] == 1


def test_runner_sliding_windows_do_not_shift_output_times():
    # Model (Java's old SlidingWindows.getOutputTime): window N+1's output is after window
    # N's end. Runner: no shift, EARLIEST_TRANSFORMED included.
    fn = SlidingWindows(10 * S, 5 * S)
    for combiner in (EARLIEST, TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED):
        r = run_script([E([("a", 1, 7 * S)])], strat(fn=fn, timestamp_combiner=combiner))
        assert {p.window: p.timestamp for p in r.panes} == {
            IntervalWindow(0, 10 * S): 7 * S,
            IntervalWindow(5 * S, 15 * S): 7 * S,
        }
    legacy = run_script(
        [E([("a", 1, 7 * S)])], strat(fn=fn, timestamp_combiner=legacy_sliding_output_time(fn))
    )
    assert {p.window: p.timestamp for p in legacy.panes}[IntervalWindow(5 * S, 15 * S)] == 10 * S


def test_runner_earliest_hold_only_for_elements_at_or_after_output_watermark():
    # Model: a late element (ts < input watermark) adds no hold; a non-late one's hold is
    # clamped up to the output watermark. Runner: an element holds iff ts >= the output
    # watermark, so one between the output and input watermarks (late) does hold, and
    # one below the output watermark does not.
    r = run_script(
        [E([("b", 0, 2 * S)]), W(5 * S), E([("a", 1, 3 * S)]), E([("c", 2, 1 * S)])],
        strat(timestamp_combiner=EARLIEST),
    )
    ts = {p.key: p.timestamp for p in r.panes}
    assert ts == {"b": 2 * S, "a": 3 * S, "c": 10 * S - 1}


def test_runner_late_pane_can_be_early_when_output_watermark_is_held():
    # Model: data arriving after the watermark passed the window fires a LATE pane.
    # Runner: the timing compares the output watermark, held by key a at 10 s - 1 µs.
    r = run_script(
        [E([("a", 1, 10 * S)]), W(12 * S), E([("b", 2, 5 * S)])],
        strat(timestamp_combiner=EARLIEST, allowed_lateness=100 * S),
    )
    assert summary(r)[0] == ("b", (2,), "EARLY", 0, -1, False)


def test_runner_output_watermark_is_one_microsecond_below_the_hold():
    r = run_script(
        [E([("a", 1, 4 * S)]), W(6 * S), E([("b", 2, 1 * S)])],
        strat(fn=FixedWindows(4 * S), timestamp_combiner=EARLIEST, allowed_lateness=100 * S),
    )
    assert r.output_watermark[1] == 4 * S - 1
    # so late data for [0, 4 s) (max_timestamp 4 s - 1 µs) is labelled EARLY
    assert summary(r)[0] == ("b", (2,), "EARLY", 0, -1, False)


def test_runner_output_watermark_can_move_backwards():
    # Model: output watermarks are monotonic. Runner: not latched; a hold at the output
    # watermark puts it 1 µs back.
    r = run_script([W(10 * S), E([("a", 1, 10 * S)])], strat(timestamp_combiner=EARLIEST))
    assert r.output_watermark[0] == 10 * S
    assert r.output_watermark[1] == 10 * S - 1


def test_runner_latest_holds_the_watermark_at_the_earliest_batch():
    # Model: the LATEST hold is the latest timestamp. Runner: the pane is at the latest, but
    # the watermark is held at the smallest batch hold, here 3 s, so late data for
    # [2 s, 3 s) is EARLY.
    r = run_script(
        [
            E([("a", 1, 3 * S)]),
            E([("a", 2, 3 * S + 500_000)]),
            W(3 * S + 600_000),
            E([("b", 3, 2 * S + 500_000)]),
        ],
        strat(fn=FixedWindows(S), timestamp_combiner=LATEST, allowed_lateness=100 * S),
    )
    assert r.output_watermark[2] == 3 * S - 1
    assert summary(r)[0] == ("b", (3,), "EARLY", 0, -1, False)
    assert {p.key: p.timestamp for p in r.panes}["a"] == 3 * S + 500_000


def test_runner_never_garbage_collects_and_stalls():
    # Model: at window.end + allowed lateness the window is garbage-collected, emitting a
    # final pane of what is buffered. Runner: no collection, no final pane; the hold stays
    # and the pipeline stalls.
    r = run_script([E([("a", 1, S), ("a", 2, S)])], strat(tt.AfterCount(3)))
    assert r.panes == [] and r.stalled


def test_runner_processing_time_timer_counts_as_watermark():
    # Runner: a timer passes its own time as "the watermark", so a processing-time timer at
    # 13 s >= window end 10 s fires AfterWatermark's ON_TIME branch (as a LATE pane) and
    # finishes it; the element at 4 s is then dropped. Model: an early pane, then ON_TIME.
    r = run_script(
        [P(8 * S), E([("a", 1, 3 * S)]), P(20 * S), W(5 * S), E([("a", 2, 4 * S)]), W(30 * S)],
        strat(tt.AfterWatermark(early=tt.AfterProcessingTime(5 * S))),
    )
    assert summary(r) == [("a", (1,), "LATE", 0, 0, True)]
    assert r.dropped["closed"] == 1


def test_runner_after_any_processing_time_branch_never_finishes():
    # Runner: AfterAny.on_fire asks its sub-triggers should_fire in the watermark domain,
    # so the processing-time branch firing neither finishes nor resets. Model: the first
    # pane finishes the trigger.
    r = run_script(
        [E([("a", 1, S)]), P(2 * S), E([("a", 2, S)]), E([("a", 3, S)]), E([("a", 4, S)])],
        strat(tt.AfterAny(tt.AfterProcessingTime(S), tt.AfterCount(3))),
    )
    assert summary(r) == [("a", (1,), "EARLY", 0, -1, False), ("a", (2, 3), "EARLY", 1, -1, True)]
    assert r.dropped["closed"] == 1


def test_runner_merged_session_keeps_older_holds():
    # Runner: merging sessions unions their holds, so [0, 15 s) is held by the
    # END_OF_WINDOW hold of [0, 10 s); the late pane of key b is EARLY and keeps its own
    # hold, which nothing releases: the pipeline stalls. Model: the merged hold is at the
    # merged window's end, b's pane is LATE.
    r = run_script(
        [E([("a", 1, 0)]), E([("a", 2, 5 * S)]), W(12 * S), E([("b", 3, 0)]), W(13 * S)],
        strat(tt.AfterWatermark(late=tt.AfterCount(1)), Sessions(10 * S), allowed_lateness=100 * S),
    )
    assert r.output_watermark[2] == 10 * S - 2
    assert ("b", (3,), "EARLY", 0, -1, False) in summary(r)
    assert r.stalled


def test_runner_merged_session_starts_a_new_pane_sequence():
    # Runner: PaneInfo state is not kept across merges, so a session extended after its
    # ON_TIME pane fires a second ON_TIME pane with index 0.
    r = run_script(
        [E([("a", 1, S)]), W(7 * S), E([("a", 2, 5 * S)]), W(11 * S)],
        strat(fn=Sessions(5 * S), allowed_lateness=100 * S, accumulation_mode=ACC),
    )
    assert [(p.window, p.values, p.timing.name, p.index) for p in r.panes] == [
        (IntervalWindow(S, 6 * S), (1,), "ON_TIME", 0),
        (IntervalWindow(S, 10 * S), (1, 2), "ON_TIME", 0),
    ]


def test_runner_never_has_no_ontime_pane():
    # Beam's _Never.has_ontime_pane() returns None: composites with it keep no holds over
    # early panes on its account.
    assert not tt.Never().has_ontime_pane()
    assert tt.AfterAny(tt.Never(), tt.AfterWatermark()).has_ontime_pane()
    assert Timing.EARLY.value == "EARLY"
