"""Driver side: a TestStream's elements as columns, taken from the pipeline object.

Beam's ``TestStream.to_runner_api`` encodes every element into the pipeline proto, and
the runner would parse and decode them all again: for a 1M-element stream that was most
of the driver's serial work. :func:`stripped_test_streams` instead takes each element
event's values from the ``TestStream`` transform itself while the proto is built, and
leaves the event in the proto with no elements (its kind, tag and place stay, so the
schedule and the pipeline's shape read the proto as before). The values are the objects
the TestStream holds, as Beam's direct runner emits them; timestamps are whole
milliseconds, as the proto carries them. A proto built elsewhere still carries its
elements: :func:`decoded` reads them with the TestStream's coder.

An :class:`Elements` is one event's (or one batch's) elements: values and int64 µs.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
from collections.abc import Iterator, Sequence
from typing import Any, Final

import numpy as np
from apache_beam.pipeline import PipelineVisitor
from apache_beam.testing import test_stream as ts

from theory.time import MICROS_PER_MILLI

__all__ = ["Elements", "Stripped", "decoded", "stripped_test_streams"]

#: Stripped elements: per TestStream label, per event index, the event's elements.
Stripped = dict[str, dict[int, "Elements"]]

_PROTOCOL: Final[int] = pickle.HIGHEST_PROTOCOL


class Elements:
    """Elements of a TestStream: ``values`` (a list) and ``micros`` (int64 µs, whole
    milliseconds), in order. ``a + b`` is ``a``'s then ``b``'s."""

    __slots__ = ("micros", "values")

    def __init__(self, values: list[Any], micros: np.ndarray) -> None:
        if len(values) != len(micros):
            raise ValueError(f"{len(values)} values but {len(micros)} timestamps")
        self.values = values
        self.micros = micros

    @staticmethod
    def of(timestamped: Sequence[Any]) -> Elements:
        """The elements of ``TimestampedValue``\\ s, timestamps floored to whole ms."""
        count = len(timestamped)
        micros = np.fromiter((tv.timestamp.micros for tv in timestamped), np.int64, count)
        return Elements([tv.value for tv in timestamped], micros - micros % MICROS_PER_MILLI)

    def __len__(self) -> int:
        return len(self.values)

    def __add__(self, other: Elements) -> Elements:
        return Elements(self.values + other.values, np.concatenate([self.micros, other.micros]))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Elements)
            and self.values == other.values
            and np.array_equal(self.micros, other.micros)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Elements({len(self)})"

    def blobs(self, parts: int) -> list[bytes]:
        """The elements in ``parts`` consecutive slices (sizes differing by at most one),
        each pickled as one ``(values, micros)`` blob: what a task receives."""
        bounds = np.linspace(0, len(self), parts + 1).astype(int).tolist()
        return [
            pickle.dumps((self.values[a:b], self.micros[a:b]), _PROTOCOL)
            for a, b in itertools.pairwise(bounds)
        ]

    @staticmethod
    def unblob(blob: bytes) -> tuple[list[Any], np.ndarray]:
        """The ``(values, micros)`` of one of :meth:`blobs`."""
        values, micros = pickle.loads(blob)
        return values, micros


@contextlib.contextmanager
def stripped_test_streams(pipeline: Any) -> Iterator[Stripped]:
    """While in the block, every ``TestStream`` of ``pipeline`` (a Beam ``Pipeline``)
    sends its element events with no elements; yields their elements (see the module
    docstring). The transforms get their events back on leaving. ``None``: nothing is
    stripped (yields ``{}``)."""
    streams: list[tuple[str, ts.TestStream]] = []

    class Find(PipelineVisitor):
        def visit_transform(self, node: Any) -> None:
            if isinstance(node.transform, ts.TestStream):
                streams.append((node.full_label, node.transform))

    if pipeline is not None:
        pipeline.visit(Find())
    stripped: Stripped = {}
    kept: list[tuple[ts.TestStream, list[Any]]] = []
    try:
        for label, stream in streams:
            events = stream._events
            kept.append((stream, events))
            stripped[label] = {
                i: Elements.of(e.timestamped_values)
                for i, e in enumerate(events)
                if isinstance(e, ts.ElementEvent)
            }
            stream._events = [
                ts.ElementEvent([], e.tag) if isinstance(e, ts.ElementEvent) else e for e in events
            ]
        yield stripped
    finally:
        for stream, events in kept:
            stream._events = events


def decoded(encoded: Sequence[Any], coder: Any, unit: int = MICROS_PER_MILLI) -> Elements:
    """The elements of a proto's ``TimestampedElement``\\ s, decoded with ``coder``;
    ``unit``: µs per unit of the proto's timestamps."""
    impl = coder.get_impl()
    stamps = np.fromiter((e.timestamp for e in encoded), np.int64, len(encoded))
    return Elements([impl.decode(e.encoded_element) for e in encoded], stamps * unit)
