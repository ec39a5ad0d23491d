"""Driver side: the events of a TestStream that reads a TestStreamService endpoint.

As Beam's direct runner reads them (``runners/direct/test_stream_impl.py``): one
``Events`` call on the endpoint (an insecure gRPC channel) asking for the TestStream's
output tags, read by a producer thread into a queue; the reader waits at most
:data:`EVENT_TIMEOUT_S` for each event. The stream's end is the TestStream's end; the
driver reads it whole before the first micro-batch, and reads the events' times as the
direct runner does (:data:`~.sources.SERVICE_UNIT`). A service that fails or cannot be
reached fails the run (the direct runner ends the stream quietly there).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from typing import Final

import grpc
from apache_beam.portability.api import (
    beam_interactive_api_pb2,
    beam_interactive_api_pb2_grpc,
)
from apache_beam.portability.api import beam_runner_api_pb2 as pb

__all__ = ["EVENT_TIMEOUT_S", "EventServiceError", "service_events"]

#: The longest wait for the next event (s), as Beam's direct runner waits.
EVENT_TIMEOUT_S: Final[float] = 30.0

_END = object()


class EventServiceError(RuntimeError):
    """The TestStreamService failed, or sent nothing for :data:`EVENT_TIMEOUT_S`."""


def service_events(
    url: str, output_tags: Iterable[str], timeout_s: float = EVENT_TIMEOUT_S
) -> list[pb.TestStreamPayload.Event]:
    """Every event the TestStreamService at ``url`` sends for ``output_tags``, in order;
    :class:`EventServiceError` naming ``url`` if the service fails or is silent for
    ``timeout_s`` seconds."""
    request = beam_interactive_api_pb2.EventsRequest(output_ids=list(output_tags))
    channel = grpc.insecure_channel(url)
    received: queue.Queue[object] = queue.Queue()
    stop = threading.Event()

    def produce() -> None:
        try:
            stub = beam_interactive_api_pb2_grpc.TestStreamServiceStub(channel)
            for event in stub.Events(request):
                received.put(event)
                if stop.is_set():
                    return
        except grpc.RpcError as err:
            received.put(err)
        finally:
            received.put(_END)

    producer = threading.Thread(target=produce, name="test-stream-events", daemon=True)
    producer.start()
    events: list[pb.TestStreamPayload.Event] = []
    try:
        while True:
            try:
                item = received.get(timeout=timeout_s)
            except queue.Empty:
                raise EventServiceError(
                    f"the TestStreamService at {url} sent no event for {timeout_s:g} s"
                ) from None
            if item is _END:
                return events
            if isinstance(item, grpc.RpcError):
                raise EventServiceError(
                    f"the TestStreamService at {url} failed: {item.code().name}: {item.details()}"
                )
            assert isinstance(item, pb.TestStreamPayload.Event)
            events.append(item)
    finally:
        stop.set()
        channel.close()
