"""Helpers of the streaming runner's tests that Spark workers import by name."""

from __future__ import annotations

import time
from typing import Any

import apache_beam as beam


def stamped_pane(key: Any, values: Any, w: Any = beam.DoFn.WindowParam) -> tuple[Any, ...]:
    """A pane as ``("pane", window end µs, sorted values, wall clock µs)``: for
    ``beam.MapTuple`` after a GroupByKey."""
    return ("pane", int(w.end.micros), sorted(values), time.time_ns() // 1000)
