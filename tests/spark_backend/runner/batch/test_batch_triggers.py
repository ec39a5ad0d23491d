"""Processing-time triggers in batch: processing time stands still until the input ends
(Beam Java's batch runners), so early and late firings by processing time never fire and
every window comes out in its on-time pane: the panes FnApiRunner gives for the same
trigger without them (FnApiRunner itself fails on a processing-time trigger)."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.transforms import trigger, window


def _windowed(p: beam.Pipeline, name: str, early: Any, late: Any = None) -> Any:
    rows = [("a", 1, 5), ("a", 2, 30), ("b", 3, 61), ("a", 4, 65), ("a", 5, 66)]
    stamped = p | f"{name}/Create" >> beam.Create(rows)
    windowed = (
        stamped
        | f"{name}/Stamp" >> beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2]))
        | f"{name}/Window"
        >> beam.WindowInto(
            window.FixedWindows(60),
            trigger=trigger.AfterWatermark(early=early, late=late),
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
            allowed_lateness=120,
        )
    )
    return windowed | f"{name}/Clicks" >> beam.GroupByKey()


def _reference(p: beam.Pipeline) -> dict[str, Any]:
    return {
        "clock": _windowed(p, "clock", None, trigger.AfterCount(1)),
        "count": _windowed(p, "count", trigger.AfterCount(2), trigger.AfterCount(1)),
    }


def _clocked(p: beam.Pipeline) -> dict[str, Any]:
    every10s = trigger.AfterProcessingTime(10)
    either = trigger.AfterAny(trigger.AfterCount(2), every10s)
    return {
        "clock": _windowed(p, "clock", every10s, trigger.Repeatedly(every10s)),
        "count": _windowed(p, "count", either, trigger.AfterCount(1)),
    }


def test_processing_time_firings_in_batch_never_fire_before_the_end(differential: Any) -> None:
    """Early and late firings by processing time: only the on-time pane; a count beside
    a processing-time firing still fires early."""
    differential(_reference, _clocked)
