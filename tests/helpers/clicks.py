"""The issue's pipeline shape, shared by the whole-pipeline tests: clicks per user with a
bot filter fed by a side input, 1-minute fixed windows with early firings every 10 s and
late firings, 2 min of allowed lateness, accumulating; and a Sessions branch."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.transforms import trigger as tr
from apache_beam.transforms import window as bw

from theory.time import SECOND
from theory.windowing.script import ElementEvent, ProcessingTimeEvent, Script, WatermarkEvent

S = SECOND

#: A bot's click (filtered out), early, on-time and late panes, a late click within the
#: lateness (kept) and two sessions of alice.
SCRIPT = Script(
    [
        ElementEvent([("alice", 1, 5 * S), ("bot", 9, 6 * S)]),
        ProcessingTimeEvent(11 * S),
        ElementEvent([("alice", 2, 30 * S), ("bob", 5, 40 * S)]),
        WatermarkEvent(61 * S),
        WatermarkEvent(90 * S),
        ElementEvent([("alice", 4, 50 * S)]),
        ProcessingTimeEvent(S),
        WatermarkEvent(300 * S),
    ]
)


#: The same in five events (fewer micro-batches): a bot's click, an early pane, the
#: on-time pane, a late click within the lateness.
SHORT_SCRIPT = Script(
    [
        ElementEvent([("alice", 1, 5 * S), ("bot", 9, 6 * S), ("bob", 5, 40 * S)]),
        ProcessingTimeEvent(11 * S),
        WatermarkEvent(90 * S),
        ElementEvent([("alice", 4, 50 * S)]),
        WatermarkEvent(300 * S),
    ]
)


class Clicks(beam.PTransform):
    """Per-minute click counts and per-session clicks of the users that are not bots."""

    def __init__(self, lateness: int = 120) -> None:
        super().__init__()
        self.lateness = lateness

    def expand(self, clicks: Any) -> Any:
        bots = clicks.pipeline | "Bots" >> beam.Create(["bot"])
        humans = clicks | "NoBots" >> beam.Filter(
            lambda click, bots: click[0] not in bots, bots=beam.pvalue.AsList(bots)
        )
        minute = beam.WindowInto(
            bw.FixedWindows(60),
            trigger=tr.AfterWatermark(early=tr.AfterProcessingTime(10), late=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.ACCUMULATING,
            allowed_lateness=self.lateness,
        )
        counts = humans | "Minute" >> minute | "Count" >> beam.CombinePerKey(sum)
        sessions = (
            humans
            | "Session" >> beam.WindowInto(bw.Sessions(30))
            | "PerSession" >> beam.GroupByKey()
        )
        return counts, sessions
