"""Building strategies and reading panes in the engine's tests (``theory.windowing``)."""

from __future__ import annotations

from typing import Any

from theory.windowing import triggers as tt
from theory.windowing.script import ScriptResult
from theory.windowing.strategy import WindowingStrategy
from theory.windowing.windows import FixedWindows, WindowFn

#: One second (µs).
S = 1_000_000


def strat(
    trigger: tt.Trigger | None = None, fn: WindowFn | None = None, **kw: Any
) -> WindowingStrategy:
    """A strategy: ``fn`` (default 10 s fixed windows), ``trigger`` (default
    DefaultTrigger), unsafe triggers allowed, other fields from ``kw``."""
    kw.setdefault("allow_unsafe_triggers", True)
    return WindowingStrategy(fn or FixedWindows(10 * S), trigger or tt.DefaultTrigger(), **kw)


def summary(result: ScriptResult) -> list[tuple[object, ...]]:
    """Each pane as (key, sorted values, timing name, index, nonspeculative index, last)."""
    return [
        (p.key, tuple(sorted(p.values)), p.timing.name, p.index, p.nonspeculative_index, p.is_last)
        for p in result.panes
    ]
