"""Plausibility warnings on a trace read for ``analyze``: options that make the
comparison say little about it (all durations µs). Warnings, not errors: the numbers are
still exact, only not telling."""

from __future__ import annotations

from collections.abc import Sequence

from spark_backend.analytics.strategies import Strategy

__all__ = ["span_warnings"]


def span_warnings(
    window_size: int, strategies: Sequence[Strategy], event_span: int, arrival_span: int
) -> list[str]:
    """One warning for a window longer than the trace's event-time span (``max - min``
    event time: every element then falls in one or two windows per key), and one per
    ``bounded:`` strategy whose bound is longer than its processing-time span (the last
    arrival minus the first: that watermark never passes a window before the trace ends,
    so every window fires at the end). Empty when neither holds."""
    out = []
    if window_size > event_span:
        out.append(
            f"--window {window_size / 1e6:g} s is longer than the trace's event-time span "
            f"({event_span / 1e6:g} s): every key's elements fall in one or two windows"
        )
    for s in strategies:
        if s.kind == "bounded" and s.bound > arrival_span:
            out.append(
                f"strategy {s.name}: its bound ({s.bound / 1e6:g} s) is longer than the "
                f"trace's processing-time span ({arrival_span / 1e6:g} s), so it passes "
                "no window before the trace ends: every window fires at the end"
            )
    return out
