"""assert_pipeline: every grouping stage of a whole pipeline (a filter fed by a side
input, fixed windows with early and late firings, a Sessions branch) checked against the
model fed that stage's recorded input and input watermark, on BundleBasedDirectRunner;
a runner that applies another allowed lateness is caught, naming the stage."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.direct import transform_evaluator
from apache_beam.transforms.core import Windowing
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_pipelines.testing.pipeline import assert_pipeline, stage_script
from tests.helpers.clicks import SCRIPT, Clicks
from theory.time import MAX_TIMESTAMP, SECOND
from theory.windowing.script import ElementEvent, ProcessingTimeEvent, Script, WatermarkEvent

pytestmark = pytest.mark.slow


def test_every_grouping_stage_matches_the_model_after_the_filter_and_side_input() -> None:
    panes = assert_pipeline(Clicks(), SCRIPT)
    assert set(panes) == {"Clicks/Count", "Clicks/PerSession"}
    alice = [(p.timing, p.value) for p in panes["Clicks/Count"] if p.key == "alice"]
    assert alice == [("EARLY", 1), ("ON_TIME", 3), ("LATE", 7)]
    assert {p.key for ps in panes.values() for p in ps} == {"alice", "bob"}  # no bot


def test_a_runner_applying_another_allowed_lateness_fails_naming_the_stage(
    monkeypatch: Any,
) -> None:
    """The direct runner's trigger driver given 5 s of lateness where the pipeline says
    2 min: the late click is dropped, and only the per-minute stage is named."""
    made = transform_evaluator.create_trigger_driver

    def planted(windowing: Windowing, *args: Any, **kwargs: Any) -> Any:
        if int(windowing.allowed_lateness.micros) == 120 * SECOND:
            windowing = Windowing(
                windowing.windowfn,
                windowing.triggerfn,
                windowing.accumulation_mode,
                windowing.timestamp_combiner,
                allowed_lateness=5,
            )
        return made(windowing, *args, **kwargs)

    monkeypatch.setattr(transform_evaluator, "create_trigger_driver", planted)
    with pytest.raises(AssertionError) as failed:
        assert_pipeline(Clicks(), SCRIPT)
    message = str(failed.value)
    assert "stage 'Clicks/Count' differs from the model" in message
    assert "Clicks/PerSession" not in message
    assert (
        "- model key='alice' window=[0s, 60s) timestamp=59.999999s LATE index=2 "
        "first=False last=False value=7"
    ) in message


def test_a_stage_theory_cannot_model_is_named() -> None:
    """A grouping fed by another gets Beam's continuation trigger, which theory lacks."""

    def chained(clicks: Any) -> None:
        counts, _ = clicks | Clicks()
        _ = counts | beam.Map(lambda kv: ("all", kv[1])) | "Total" >> beam.CombinePerKey(sum)

    with pytest.raises(ValueError, match=r"^assert_pipeline: stage 'Total': trigger.early"):
        assert_pipeline(chained, SCRIPT)


S = SECOND
_events = st.lists(st.sampled_from(["elements", "watermark", "ptime"]), min_size=1, max_size=8).map(
    lambda kinds: Script(
        [
            ElementEvent([("k", 1, 0)])
            if k == "elements"
            else WatermarkEvent((i + 1) * S)
            if k == "watermark"
            else ProcessingTimeEvent(S)
            for i, k in enumerate(kinds)
        ]
    )
)


@settings(max_examples=60, deadline=None)
@given(_events, st.data())
def test_stage_script_keeps_every_arrival_once_and_watermarks_rising(
    source: Script, data: st.DataObject
) -> None:
    n = len(source.events)
    marks = sorted(data.draw(st.lists(st.integers(0, 10 * S), min_size=n, max_size=n)))
    marks[-1] = data.draw(st.sampled_from([marks[-1], MAX_TIMESTAMP - 2]))
    arrivals = data.draw(
        st.lists(
            st.tuples(st.integers(0, n), st.just("k"), st.integers(0, 9), st.integers(0, S)),
            max_size=10,
        )
    )
    script = stage_script(source, arrivals, marks)
    got = [
        (key, value, t)
        for ev in script.events
        if isinstance(ev, ElementEvent)
        for key, value, t in ev.elements
    ]
    assert sorted(got) == sorted((k, v, t) for _, k, v, t in arrivals)
    seen = [ev.watermark for ev in script.events if isinstance(ev, WatermarkEvent)]
    assert seen == sorted(set(seen)) and all(w < MAX_TIMESTAMP - 2 for w in seen)
    clock = [ev.delta for ev in script.events if isinstance(ev, ProcessingTimeEvent)]
    assert clock == [ev.delta for ev in source.events if isinstance(ev, ProcessingTimeEvent)]


def test_a_trace_is_replayed_under_its_source_watermark() -> None:
    from beam_pipelines.testing.pipeline import _source
    from beam_pipelines.teststream import trace_script
    from theory.data.trace import Trace

    trace = Trace(
        event_time=np.array([1 * S, 3 * S]),
        arrival_time=np.array([2 * S, 4 * S]),
        key=np.array(["a", "b"], dtype=object),
        value=np.array([1.0, 2.0]),
    )
    assert _source(trace, "bounded:1s") == trace_script(trace, "bounded:1s")
    assert _source(list(SCRIPT.events), "perfect") == SCRIPT
