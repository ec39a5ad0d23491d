"""A TestStream reading a TestStreamService endpoint, on PySparkRunner --streaming.

The test starts Beam's ``TestStreamServiceController`` on localhost, serving a script
of events (elements, watermarks, a processing-time step, a late element); the same
TestStream runs on Beam's BundleBasedDirectRunner (the control) and on PySparkRunner,
and the outputs (value, timestamp, window, pane) must be equal, timestamps in the whole
milliseconds Beam's coder carries (the direct runner's end of window is 1 µs before
it, PySparkRunner's 1 ms: the divergence ``test_streaming`` documents). A service that cannot
be reached fails the run with one line naming the TestStream and the endpoint.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.test_stream_service import TestStreamServiceController
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window

from spark_backend.runner import PySparkRunner
from spark_backend.runner.streaming.event_service import EventServiceError, service_events

pytestmark = pytest.mark.slow

CODER = beam.coders.FastPrimitivesCoder()

_LOCK = threading.Lock()
_SEEN: list[Any] = []


def script() -> list[Any]:
    """Times in thousands of seconds: Beam's direct runner reads a service's times
    (milliseconds in the proto) as microseconds, so 10_000 s arrives as 10 s."""
    events = (
        TestStream(coder=CODER)
        .advance_watermark_to(10_000)
        .add_elements([("a", 1), ("b", 2), window.TimestampedValue(("a", 4), 21_000)])
        .advance_processing_time(10)
        .advance_watermark_to(40_000)
        .add_elements([window.TimestampedValue(("a", 5), 12_000)])  # late
        .advance_watermark_to_infinity()
    )
    return [e.to_runner_api(CODER) for e in events._events]


class _Reader:
    """What the controller reads from: the script, each time it is asked."""

    def __init__(self, events: list[Any]) -> None:
        self._events = events

    def read_multiple(self, keys: Any) -> Iterator[Any]:
        yield from self._events


@pytest.fixture
def service() -> Iterator[TestStreamServiceController]:
    controller = TestStreamServiceController(reader=_Reader(script()))
    controller.start()
    yield controller
    controller.stop()


class Observe(beam.DoFn):
    def process(
        self,
        element: Any,
        timestamp: Any = beam.DoFn.TimestampParam,
        w: Any = beam.DoFn.WindowParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[tuple[str, int, str, str]]:
        key, values = element
        yield repr((key, sorted(values))), int(timestamp.micros), repr(w), repr(pane)


def build(p: beam.Pipeline, endpoint: str) -> Any:
    return (
        p
        | TestStream(coder=CODER, endpoint=endpoint)
        | beam.WindowInto(window.FixedWindows(10), allowed_lateness=100)
        | beam.GroupByKey()
        | beam.ParDo(Observe())
    )


def _keep(element: Any) -> None:
    with _LOCK:
        _SEEN.append(element)


def test_a_test_stream_reads_its_events_from_the_service(
    spark: Any, service: TestStreamServiceController
) -> None:
    _SEEN.clear()
    with beam.Pipeline(
        runner=BundleBasedDirectRunner(), options=PipelineOptions(streaming=True)
    ) as p:
        build(p, service.endpoint) | beam.Map(_keep)
    # as the windowed-value coder carries timestamps (whole ms), as in test_streaming
    expected = [(v, t // 1000 * 1000, w, pane) for v, t, w, pane in _SEEN]
    # [10, 20): a and b on time, a's late pane; [20, 30): a
    assert len(expected) == 4

    p = beam.Pipeline(runner=PySparkRunner(), options=PipelineOptions(streaming=True))
    assert_that(build(p, service.endpoint), equal_to(expected))
    p.run().wait_until_finish()


def test_the_driver_reads_the_events_as_the_service_sends_them(
    service: TestStreamServiceController,
) -> None:
    assert service_events(service.endpoint, ["None"]) == script()


def test_an_unreachable_service_fails_naming_the_test_stream_and_endpoint() -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
    p = beam.Pipeline(runner=PySparkRunner(), options=PipelineOptions(streaming=True))
    p | "Events" >> TestStream(coder=CODER, endpoint=endpoint) | beam.Map(str)
    with pytest.raises(EventServiceError, match=rf"TestStream 'Events'.*{endpoint}.*UNAVAILABLE"):
        p.run()
