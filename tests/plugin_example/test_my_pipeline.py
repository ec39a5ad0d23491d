"""A Beam author's whole pipeline against the model, as in the README: clicks per user
without the bots (a filter fed by a side input), per minute and per session. The
test_fails_* test fails on purpose: its pipeline keeps 5 s of lateness, not 2 min."""

import apache_beam as beam
from apache_beam.transforms import trigger, window
from hypothesis import given

from beam_pipelines.testing import assert_panes, assert_pipeline, expect_panes
from beam_pipelines.testing.strategies import PROPERTY_SETTINGS, scripts_for


def per_minute(lateness=120):
    return beam.WindowInto(
        window.FixedWindows(60),
        trigger=trigger.AfterWatermark(
            early=trigger.AfterProcessingTime(10), late=trigger.AfterCount(1)
        ),
        accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        allowed_lateness=lateness,
    )


class Clicks(beam.PTransform):
    """Clicks per user and minute, bots left out; a session branch on the side."""

    def __init__(self, lateness=120):
        super().__init__()
        self.lateness = lateness

    def expand(self, clicks):
        bots = beam.pvalue.AsList(clicks.pipeline | "Bots" >> beam.Create(["bot"]))
        humans = clicks | "NoBots" >> beam.Filter(lambda c, bots: c[0] not in bots, bots)
        _ = humans | "Session" >> beam.WindowInto(window.Sessions(30)) | beam.GroupByKey()
        return humans | "Minute" >> per_minute(self.lateness) | beam.CombinePerKey(sum)


def test_clicks(test_stream):
    script = (
        test_stream.elements([("alice", 1, "5s"), ("bot", 9, "6s")])
        .advance("11s")  # an early pane, 10 s after the first click
        .elements([("alice", 2, "30s")])
        .watermark("90s")  # the on-time pane
        .elements([("alice", 4, "50s")])  # late, within the 2 min of lateness
        .advance("1s")
        .watermark("5m")
        .script()
    )
    expected = [
        ("alice", "[0s, 1m)", "EARLY", 1),
        ("alice", "[0s, 1m)", "ON_TIME", 3),
        ("alice", "[0s, 1m)", "LATE", 7),
    ]
    assert_pipeline(lambda clicks: expect_panes(clicks | Clicks(), expected), script)


@PROPERTY_SETTINGS
@given(scripts_for(per_minute()))
def test_fails_with_5s_of_lateness(script):
    assert_panes(Clicks(lateness=5), script, per_minute(), combine=sum)
