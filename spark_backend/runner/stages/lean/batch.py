"""The lean path's unit of data: a columnar batch of windowed elements.

A :class:`Batch` holds ``n`` elements as columns: the values (a list), the event
timestamps (int64 µs, exactly the micros a Beam ``WindowedValue`` carries), the windows
and the panes. Windows and panes have compact forms for the common cases: every element
in the global window (:data:`GLOBAL`), every element in one interval window given by
``start``/``end`` arrays (:class:`Intervals`), one pane shared by all; otherwise one
Beam window tuple and one ``PaneInfo`` per element. Nothing is rounded here: a batch
lives inside a fused stage, and the rounding to milliseconds happens only where Beam's
does, in the coder at the stage's edge (:mod:`.encode`, :func:`decode`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from apache_beam.transforms.window import GlobalWindow, IntervalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN, PaneInfo, WindowedValue

__all__ = ["GLOBAL", "Batch", "Intervals", "decode", "interval_window"]


class _Global:
    """Every element is in the global window (alone)."""

    def __repr__(self) -> str:
        return "GLOBAL"

    def __reduce__(self) -> str:
        return "GLOBAL"  # unpickled as this module's GLOBAL: ``is GLOBAL`` holds


GLOBAL: Final = _Global()
_GLOBAL_WINDOW: Final = GlobalWindow()


@dataclass(frozen=True)
class Intervals:
    """Every element in exactly one interval window ``[start, end)`` (int64 µs)."""

    start: np.ndarray
    end: np.ndarray


def interval_window(start: int, end: int, cache: dict[tuple[int, int], Any]) -> Any:
    """Beam's ``IntervalWindow`` for ``[start, end)`` µs, one object per bounds."""
    window = cache.get((start, end))
    if window is None:
        window = cache[start, end] = IntervalWindow(Timestamp(micros=start), Timestamp(micros=end))
    return window


@dataclass
class Batch:
    """``len(values)`` windowed elements as columns (see the module docstring)."""

    values: list[Any]
    micros: np.ndarray  # int64 event timestamps, µs
    windows: Any  # GLOBAL | Intervals | list of window sequences
    panes: Any  # one PaneInfo for all, or a list of them

    def __len__(self) -> int:
        return len(self.values)

    def take(self, index: Sequence[int] | np.ndarray, values: list[Any]) -> Batch:
        """The elements at ``index`` (repeats allowed) carrying ``values`` instead."""
        idx = np.asarray(index, dtype=np.int64)
        windows = self.windows
        if isinstance(windows, Intervals):
            windows = Intervals(windows.start[idx], windows.end[idx])
        elif windows is not GLOBAL:
            windows = [windows[i] for i in idx.tolist()]
        panes = self.panes if isinstance(self.panes, PaneInfo) else [self.panes[i] for i in idx]
        return Batch(values, self.micros[idx], windows, panes)

    def window_lists(self) -> list[Any]:
        """Each element's windows, as Beam objects."""
        if self.windows is GLOBAL:
            return [(_GLOBAL_WINDOW,)] * len(self)
        if isinstance(self.windows, Intervals):
            cache: dict[tuple[int, int], Any] = {}
            return [
                (interval_window(s, e, cache),)
                for s, e in zip(self.windows.start.tolist(), self.windows.end.tolist(), strict=True)
            ]
        return list(self.windows)

    def pane_list(self) -> list[Any]:
        return [self.panes] * len(self) if isinstance(self.panes, PaneInfo) else self.panes

    def windowed_values(self) -> Iterator[Any]:
        """Each element as a fresh Beam ``WindowedValue``."""
        panes = self.pane_list()
        windows = self.window_lists()
        for i, (value, micros) in enumerate(zip(self.values, self.micros.tolist(), strict=True)):
            yield WindowedValue(value, Timestamp(micros=micros), tuple(windows[i]), panes[i])

    def windowed_value(self, i: int) -> Any:
        """Element ``i`` as a fresh Beam ``WindowedValue``."""
        windows = self.windows
        if windows is GLOBAL:
            ws: tuple[Any, ...] = (_GLOBAL_WINDOW,)
        elif isinstance(windows, Intervals):
            ws = (interval_window(int(windows.start[i]), int(windows.end[i]), {}),)
        else:
            ws = tuple(windows[i])
        pane = self.panes if isinstance(self.panes, PaneInfo) else self.panes[i]
        return WindowedValue(self.values[i], Timestamp(micros=int(self.micros[i])), ws, pane)

    @staticmethod
    def of(elements: Sequence[Any]) -> Batch:
        """A batch of Beam ``WindowedValue``\\ s, compact where they allow it."""
        values = [e.value for e in elements]
        micros = np.fromiter((e.timestamp_micros for e in elements), np.int64, len(elements))
        windows: Any = [e.windows for e in elements]
        if all(len(ws) == 1 and type(ws[0]) is GlobalWindow for ws in windows):
            windows = GLOBAL
        panes: Any = [e.pane_info for e in elements]
        if panes and all(p == panes[0] for p in panes):
            panes = panes[0]
        elif not panes:
            panes = PANE_INFO_UNKNOWN
        return Batch(values, micros, windows, panes)

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """One batch of all ``batches``' elements, in order."""
        if len(batches) == 1:
            return batches[0]
        elements = [e for b in batches for e in b.windowed_values()]
        return Batch.of(elements)


def decode(chunks: Sequence[bytes], impl: Any) -> Batch:
    """The elements of encoded ``chunks`` (Beam's windowed coder ``impl``)."""
    elements = [e for chunk in chunks for e in impl.decode_all(chunk)]
    return Batch.of(elements)
