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

:func:`trace_script` turns a trace (in arrival order) and a source-watermark spec into a
script, and :func:`from_trace` into a ``TestStream``, optionally of several tagged inputs,
each with its own watermark computed from its own rows.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from apache_beam.testing import test_stream as ts
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp

from theory.data.trace import Trace
from theory.time import MAX_TIMESTAMP, MICROS_PER_MILLI, MIN_TIMESTAMP
from theory.watermarks.spec import SourceWatermarkSpec, make_source_watermark
from theory.windowing.script import ElementEvent, Event, ProcessingTimeEvent, Script, WatermarkEvent

__all__ = [
    "from_test_stream",
    "from_trace",
    "to_test_stream",
    "to_test_stream_events",
    "trace_events",
    "trace_script",
]


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


# ------------------------------------------------------------------------ traces


#: A source-watermark spec (``"bounded:5s"``), or one per tag.
WatermarkSpecs = str | SourceWatermarkSpec | Mapping[Any, str | SourceWatermarkSpec]


def _spec(source_watermark: str | SourceWatermarkSpec) -> SourceWatermarkSpec:
    if isinstance(source_watermark, SourceWatermarkSpec):
        return source_watermark
    return make_source_watermark(source_watermark)


def trace_events(
    trace: Trace,
    source_watermark: WatermarkSpecs,
    tags: Sequence[Hashable] | np.ndarray | None = None,
    *,
    finish: bool = False,
) -> list[tuple[Hashable, Event]]:
    """``(tag, event)`` pairs replaying ``trace`` by arrival time (µs, processing time
    from 0), tag ``None`` when ``tags`` is None.

    ``tags`` gives each row's input; each input's watermark is ``source_watermark`` (a
    spec such as ``"bounded:5s"``, or a dict of one per tag) over its own rows. At each
    processing time where an arrival or a watermark change happens: the processing-time
    step, each input's elements ``(key, value, event_time)`` arriving then (one event per
    input), then each input's watermark where it advanced, floored to whole milliseconds
    (a lower watermark is always safe). Element event times must be whole milliseconds.
    With ``finish``, each input's watermark goes to ``MAX_TIMESTAMP`` once its last row
    has arrived, as a finished bounded source does in ``theory.simulate``.
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a theory Trace, got {type(trace).__name__}")
    n = len(trace)
    if tags is None:
        row_tags = np.full(n, None, dtype=object)
    else:
        row_tags = np.asarray(tags, dtype=object)
        if row_tags.shape != (n,):
            raise ValueError(f"tags must give one tag per row ({n}), got shape {row_tags.shape}")
    bad = np.flatnonzero(trace.event_time % MICROS_PER_MILLI)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"row {i}: event_time {int(trace.event_time[i])} µs is not a whole millisecond; "
            "Beam's coders would truncate it"
        )
    keys = trace.key.tolist()
    values = trace.value.tolist()
    per_tag: dict[Hashable, tuple[np.ndarray, Any]] = {}
    for tag in dict.fromkeys(row_tags.tolist()):
        rows = np.flatnonzero(row_tags == tag) if tag is not None else np.arange(n)
        rows = rows[np.argsort(trace.arrival_time[rows], kind="stable")]
        spec = (
            source_watermark.get(tag) if isinstance(source_watermark, Mapping) else source_watermark
        )
        if spec is None:
            raise ValueError(f"source_watermark has no spec for tag {tag!r}")
        sub = trace.take(rows)
        per_tag[tag] = (rows, _spec(spec).curve(sub.event_time, sub.arrival_time, sub.partition))
    times = np.unique(
        np.concatenate(
            [trace.arrival_time] + [curve.times for _, curve in per_tag.values()]
        ).astype(np.int64)
    )
    out: list[tuple[Hashable, Event]] = []
    now = 0
    watermark = dict.fromkeys(per_tag, MIN_TIMESTAMP)
    cursor = dict.fromkeys(per_tag, 0)
    for t in times.tolist():
        if t > now:
            out.append((None, ProcessingTimeEvent(t - now)))
            now = t
        for tag, (rows, _) in per_tag.items():
            start = stop = cursor[tag]
            while stop < rows.size and int(trace.arrival_time[rows[stop]]) <= t:
                stop += 1
            if stop > start:
                chosen = rows[start:stop].tolist()
                elements = [(keys[r], values[r], int(trace.event_time[r])) for r in chosen]
                out.append((tag, ElementEvent(elements)))
                cursor[tag] = stop
        for tag, (rows, curve) in per_tag.items():
            w = int(curve.at(t))
            w = w - w % MICROS_PER_MILLI if w < MAX_TIMESTAMP else MAX_TIMESTAMP
            if finish and cursor[tag] == rows.size:
                w = MAX_TIMESTAMP
            if w > watermark[tag]:
                watermark[tag] = w
                out.append((tag, WatermarkEvent(w)))
    return out


def trace_script(trace: Trace, source_watermark: str | SourceWatermarkSpec) -> Script:
    """The script replaying ``trace`` under ``source_watermark`` (see
    :func:`trace_events`); run it with ``theory.run_script`` or :func:`to_test_stream`."""
    return Script([ev for _, ev in trace_events(trace, source_watermark)])


def from_trace(
    trace: Trace,
    source_watermark: WatermarkSpecs,
    tags: Sequence[Hashable] | np.ndarray | None = None,
    *,
    finish: bool = False,
) -> ts.TestStream:
    """A ``TestStream`` replaying ``trace`` (elements ``(key, value)`` at their event
    times) under ``source_watermark``; with ``tags`` (one per row) it has one output per
    tag, each with its own watermark (``p | stream`` is then a dict of PCollections);
    ``finish``: see :func:`trace_events`."""
    pairs = trace_events(trace, source_watermark, tags, finish=finish)
    if tags is None:
        return to_test_stream([ev for _, ev in pairs])
    out: list[ts.Event] = []
    for tag, ev in pairs:
        (converted,) = to_test_stream_events([ev]) or (None,)
        if converted is None:
            continue
        if isinstance(converted, (ts.ElementEvent, ts.WatermarkEvent)):
            converted.tag = tag
        out.append(converted)
    return ts.TestStream(events=out, output_tags=set(dict.fromkeys(np.asarray(tags).tolist())))
