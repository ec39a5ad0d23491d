"""Scripts <-> Beam TestStream."""

import pytest
from apache_beam.testing import test_stream as ts
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp

from beam_pipelines.teststream import from_test_stream, to_test_stream, to_test_stream_events
from theory.time import MAX_TIMESTAMP
from theory.windowing.script import ElementEvent, ProcessingTimeEvent, Script, WatermarkEvent

MS = 1000


def test_round_trip():
    script = Script(
        [
            ElementEvent([("a", 1, 5 * MS), ("b", "x", -3 * MS)]),
            WatermarkEvent(4 * MS),
            ProcessingTimeEvent(1_500_000),
            ElementEvent([("a", 2.5, 7 * MS)]),
            WatermarkEvent(MAX_TIMESTAMP),
        ]
    )
    stream = to_test_stream(script)
    assert from_test_stream(stream) == script
    assert from_test_stream(stream._events) == script


def test_beam_built_stream_to_script():
    stream = (
        ts.TestStream()
        .add_elements([TimestampedValue(("k", 1), Timestamp(micros=2000))])
        .advance_watermark_to(Timestamp(micros=3000))
        .advance_processing_time(Duration(micros=7000))
        .advance_watermark_to_infinity()
    )
    assert from_test_stream(stream).events == (
        ElementEvent([("k", 1, 2000)]),
        WatermarkEvent(3000),
        ProcessingTimeEvent(7000),
        WatermarkEvent(MAX_TIMESTAMP),
    )


def test_no_op_events_are_left_out():
    events = to_test_stream_events(
        [WatermarkEvent(MS), WatermarkEvent(MS), ProcessingTimeEvent(0), ElementEvent([])]
    )
    assert events == [ts.WatermarkEvent(Timestamp(micros=MS))]


def test_beam_limits_are_named():
    with pytest.raises(ValueError, match=r"events\[0\].*whole millisecond"):
        to_test_stream_events([WatermarkEvent(1500)])
    with pytest.raises(ValueError, match=r"events\[1\] elements\[0\].*whole millisecond"):
        to_test_stream_events([WatermarkEvent(MS), ElementEvent([("a", 1, 1)])])
    with pytest.raises(ValueError, match="below MAX_TIMESTAMP"):
        to_test_stream_events([ElementEvent([("a", 1, MAX_TIMESTAMP)])])
    with pytest.raises(ValueError, match="pair"):
        from_test_stream([ts.ElementEvent([TimestampedValue(5, Timestamp(micros=0))])])
    with pytest.raises(ValueError, match="tag"):
        from_test_stream([ts.WatermarkEvent(Timestamp(micros=0), tag="other")])
