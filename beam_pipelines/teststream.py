"""Scripts <-> Beam ``TestStream``, both ways.

A :class:`theory.windowing.script.Script` (elements ``(key, value, timestamp µs)``, watermark and
processing-time events) becomes a ``TestStream`` of ``TimestampedValue((key, value), ts)``
and back. Beam's constraints are checked here, with errors naming the event:

- watermarks must be whole milliseconds (the runner API asserts ``micros % 1000 == 0``),
  and so must element timestamps (Beam's coders carry milliseconds);
- TestStream watermarks must strictly increase and processing time must move forward, so
  a watermark event that does not advance and a zero processing-time step (no-ops in the
  engine) are left out;
- element timestamps must be below ``MAX_TIMESTAMP``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from apache_beam.testing import test_stream as ts
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp

from theory.time import MAX_TIMESTAMP, MICROS_PER_MILLI, MIN_TIMESTAMP
from theory.windowing.script import ElementEvent, Event, ProcessingTimeEvent, Script, WatermarkEvent

__all__ = ["from_test_stream", "to_test_stream", "to_test_stream_events"]


def _events(script: Script | Iterable[Event]) -> tuple[Event, ...]:
    return script.events if isinstance(script, Script) else Script(list(script)).events


def to_test_stream_events(script: Script | Iterable[Event]) -> list[ts.Event]:
    """The Beam TestStream events of ``script`` (see the module docstring)."""
    out: list[ts.Event] = []
    watermark = MIN_TIMESTAMP
    for i, ev in enumerate(_events(script)):
        if isinstance(ev, ElementEvent):
            if not ev.elements:
                continue
            values = []
            for j, (key, value, t) in enumerate(ev.elements):
                if t % MICROS_PER_MILLI:
                    raise ValueError(
                        f"events[{i}] elements[{j}]: timestamp {t} µs is not a whole "
                        "millisecond; Beam's coders would truncate it"
                    )
                if t >= MAX_TIMESTAMP:
                    raise ValueError(
                        f"events[{i}] elements[{j}]: TestStream needs timestamps below "
                        f"MAX_TIMESTAMP, got {t} µs"
                    )
                values.append(TimestampedValue((key, value), Timestamp(micros=t)))
            out.append(ts.ElementEvent(values))
        elif isinstance(ev, WatermarkEvent):
            if ev.watermark % MICROS_PER_MILLI:
                raise ValueError(
                    f"events[{i}]: watermark {ev.watermark} µs is not a whole millisecond "
                    "(Beam's runner API asserts it)"
                )
            if ev.watermark > watermark:
                watermark = ev.watermark
                out.append(ts.WatermarkEvent(Timestamp(micros=ev.watermark)))
        elif ev.delta > 0:
            out.append(ts.ProcessingTimeEvent(Duration(micros=ev.delta)))
    return out


def to_test_stream(script: Script | Iterable[Event]) -> ts.TestStream:
    """A Beam ``TestStream`` emitting ``script`` (elements as ``(key, value)`` pairs)."""
    return ts.TestStream(events=to_test_stream_events(script), output_tags={None})


def _micros(value: Any) -> int:
    if isinstance(value, (Timestamp, Duration)):
        return int(value.micros)
    return int(Timestamp.of(value).micros)


def from_test_stream(stream: ts.TestStream | Iterable[ts.Event]) -> Script:
    """The script of a Beam ``TestStream`` (or its events) on the default output tag.

    Elements must be ``(key, value)`` pairs; their timestamps become µs.
    """
    events = stream._events if isinstance(stream, ts.TestStream) else list(stream)
    out: list[Event] = []
    for i, ev in enumerate(events):
        if isinstance(ev, (ts.ElementEvent, ts.WatermarkEvent)) and ev.tag is not None:
            raise ValueError(
                f"events[{i}]: only the default output tag is supported, got {ev.tag!r}"
            )
        if isinstance(ev, ts.ElementEvent):
            elements: list[tuple[Hashable, Any, int]] = []
            for j, tv in enumerate(ev.timestamped_values):
                pair = tv.value
                if not isinstance(pair, tuple) or len(pair) != 2:
                    raise ValueError(
                        f"events[{i}] elements[{j}]: expected a (key, value) pair, got {pair!r}"
                    )
                elements.append((pair[0], pair[1], _micros(tv.timestamp)))
            out.append(ElementEvent(elements))
        elif isinstance(ev, ts.WatermarkEvent):
            out.append(
                WatermarkEvent(min(max(_micros(ev.new_watermark), MIN_TIMESTAMP), MAX_TIMESTAMP))
            )
        elif isinstance(ev, ts.ProcessingTimeEvent):
            out.append(ProcessingTimeEvent(_micros(ev.advance_by)))
        else:
            raise TypeError(f"events[{i}]: not a TestStream event: {ev!r}")
    return Script(out)
