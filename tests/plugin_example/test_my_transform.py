"""A Beam author's tests of their own transform's panes, as in the README (run through
pytester by tests/beam_pipelines/test_plugin.py; the test_fails_* tests fail on purpose,
to show the failure messages)."""

import apache_beam as beam
from apache_beam.transforms import trigger, window

from beam_pipelines.testing import assert_panes


def windowing(mode=trigger.AccumulationMode.ACCUMULATING):
    return beam.WindowInto(
        window.FixedWindows(60),
        trigger=trigger.AfterWatermark(
            early=trigger.AfterProcessingTime(10), late=trigger.AfterCount(1)
        ),
        accumulation_mode=mode,
        allowed_lateness=60,
    )


WINDOWING = windowing()


class ScorePerUser(beam.PTransform):
    """The transform under test: per-user score sums in one-minute windows."""

    def __init__(self, windowing=WINDOWING):
        super().__init__()
        self.windowing = windowing

    def expand(self, scores):
        return scores | self.windowing | beam.CombinePerKey(sum)


def script(test_stream):
    return (
        test_stream.elements([("alice", 3, "5s"), ("bob", 1, "20s")])
        .advance("11s")  # early firing after 10 s of processing time
        .elements([("alice", 4, "30s")])
        .watermark("61s")  # on time
        .elements([("alice", 2, "50s")])  # late, within the allowed lateness
        .advance("1s")
        .watermark("200s")
        .script()
    )


def test_score_panes_match_the_model(test_stream):
    panes = assert_panes(ScorePerUser(), script(test_stream), WINDOWING, combine=sum)
    assert [p.value for p in panes if p.key == "alice"] == [3, 7, 9]


def test_fails_when_the_transform_discards(test_stream):
    discarding = windowing(trigger.AccumulationMode.DISCARDING)
    assert_panes(ScorePerUser(discarding), script(test_stream), WINDOWING, combine=sum)


def test_fails_on_a_half_second_step(test_stream):
    half = test_stream.elements([("alice", 1, "1s")]).advance("500ms").watermark("2m").script()
    assert_panes(ScorePerUser(), half, WINDOWING, combine=sum)
