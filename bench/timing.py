"""Timing shared by the bench scripts: medians of wall and CPU time."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def median_time(fn: Callable[[], T], repeats: int) -> tuple[float, float, T]:
    """Median wall time (s), median CPU time of this process (s), and the last result.
    (CPU time is less sensitive to other processes competing for the cores.)"""
    wall = []
    cpu = []
    out = None
    for _ in range(max(1, repeats)):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    assert out is not None
    return statistics.median(wall), statistics.median(cpu), out
