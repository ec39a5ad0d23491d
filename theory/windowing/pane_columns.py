"""Panes as columns: what the vectorised paths compute, from which :class:`Pane` tuples
are built only when asked (:meth:`PaneColumns.panes`, or on first access to a
:class:`PaneSequence`). All times are µs."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence
from itertools import repeat
from typing import Any, NamedTuple, overload

import numpy as np

from theory.windowing.engine import Pane, Timing
from theory.windowing.windows import GLOBAL_WINDOW, GlobalWindow, trusted_interval_windows

__all__ = ["TIMINGS", "Keys", "PaneColumns", "PaneSequence", "build_panes", "take_keys"]

#: A pane's timing by its code in :attr:`PaneColumns.timing`.
TIMINGS = (Timing.EARLY, Timing.ON_TIME, Timing.LATE, Timing.UNKNOWN)
_TIMING_CODE = {t: i for i, t in enumerate(TIMINGS)}
_new_tuple = tuple.__new__

#: A key column: a sequence of hashable keys, or a numpy array of them (int64 or object).
Keys = Sequence[Hashable] | np.ndarray


def take_keys(keys: Keys, idx: np.ndarray) -> Keys:
    """``keys[i]`` for each index of ``idx``: a gather when ``keys`` is a numpy array (an
    integer key column), else a list."""
    if isinstance(keys, np.ndarray):
        return keys[idx]
    return list(map(keys.__getitem__, idx.tolist()))


def key_list(keys: Keys) -> list[Hashable]:
    """The keys as a list of Python objects (a numpy key column's as Python ints)."""
    return keys.tolist() if isinstance(keys, np.ndarray) else list(keys)


class PaneColumns(NamedTuple):
    """Panes in firing order, one entry per pane; pane i's values are
    ``grouped_values[lo[i]:hi[i]]``. ``windows`` holds the window objects when known
    (else they are made from ``start``/``end``, or are the global window). ``key`` may
    be an integer numpy array (the simulator's key column; the built panes' keys are
    Python ints), and ``grouped_values`` a float64 one."""

    key: Keys
    start: np.ndarray
    end: np.ndarray
    timestamp: np.ndarray
    timing: np.ndarray  # int8 codes into TIMINGS
    pane_index: np.ndarray
    nonspeculative_index: np.ndarray
    is_last: np.ndarray  # bool
    lo: np.ndarray
    hi: np.ndarray
    grouped_values: np.ndarray  # object (or float64) array
    global_window: bool = False
    windows: Sequence[Any] | None = None

    @property
    def n_panes(self) -> int:
        """How many panes (``len`` is the tuple's: its fields)."""
        return int(self.timestamp.size)

    def window_objects(self) -> Sequence[Any]:
        """Each pane's window: the global window, or interval windows made from the bounds
        (one per distinct window when all have the same size)."""
        if self.windows is not None:
            return self.windows
        n = self.n_panes
        if self.global_window:
            return [GLOBAL_WINDOW] * n
        if n == 0:
            return []
        size = self.end - self.start
        if bool((size == size[0]).all()):
            starts, slot = np.unique(self.start, return_inverse=True)
            made = trusted_interval_windows(starts.tolist(), (starts + size[0]).tolist())
            return list(map(made.__getitem__, slot.tolist()))
        return trusted_interval_windows(self.start.tolist(), self.end.tolist())

    def value_lists(self) -> Iterable[list[Any]]:
        """Each pane's values, as lists (slices of one list)."""
        values = self.grouped_values.tolist()
        return map(values.__getitem__, map(slice, self.lo.tolist(), self.hi.tolist()))

    def panes(self) -> list[Pane]:
        """The :class:`Pane` tuples (no per-pane Python call but tuple's)."""
        values = tuple(self.grouped_values.tolist())  # a tuple's slices are tuples: one copy
        fields = zip(
            key_list(self.key),
            self.window_objects(),
            map(values.__getitem__, map(slice, self.lo.tolist(), self.hi.tolist())),
            self.timestamp.tolist(),
            map(TIMINGS.__getitem__, self.timing.tolist()),
            self.pane_index.tolist(),
            self.nonspeculative_index.tolist(),
            (self.pane_index == 0).tolist(),
            self.is_last.tolist(),
            strict=True,
        )
        return list(map(_new_tuple, repeat(Pane), fields))

    def lazy(self) -> PaneSequence:
        """The panes as a sequence that builds the tuples on first access."""
        return PaneSequence(self)

    def take(self, order: np.ndarray) -> PaneColumns:
        """The panes in ``order`` (indexes), values shared."""
        return self._replace(
            key=take_keys(self.key, order),
            start=self.start[order],
            end=self.end[order],
            timestamp=self.timestamp[order],
            timing=self.timing[order],
            pane_index=self.pane_index[order],
            nonspeculative_index=self.nonspeculative_index[order],
            is_last=self.is_last[order],
            lo=self.lo[order],
            hi=self.hi[order],
            windows=None if self.windows is None else [self.windows[i] for i in order.tolist()],
        )

    @classmethod
    def concat(cls, parts: Sequence[PaneColumns]) -> PaneColumns:
        """The panes of ``parts`` one after the other (windows made from the bounds)."""
        offsets = np.cumsum([0] + [p.grouped_values.size for p in parts]).tolist()

        def joined(field: str) -> np.ndarray:
            return np.concatenate([getattr(p, field) for p in parts])

        keys: Keys = (
            np.concatenate([p.key for p in parts])
            if all(isinstance(p.key, np.ndarray) for p in parts)
            else [k for p in parts for k in key_list(p.key)]
        )
        return cls(
            keys,
            joined("start"),
            joined("end"),
            joined("timestamp"),
            joined("timing"),
            joined("pane_index"),
            joined("nonspeculative_index"),
            joined("is_last"),
            np.concatenate([p.lo + o for p, o in zip(parts, offsets, strict=False)]),
            np.concatenate([p.hi + o for p, o in zip(parts, offsets, strict=False)]),
            joined("grouped_values"),
            all(p.global_window for p in parts),
        )

    @classmethod
    def from_panes(cls, panes: Sequence[Pane]) -> PaneColumns:
        """The columns of built panes (the incremental engine's)."""
        n = len(panes)
        sizes = np.fromiter(map(len, (p.values for p in panes)), np.int64, n)
        hi = np.cumsum(sizes)
        grouped = np.empty(int(hi[-1]) if n else 0, object)
        grouped[:] = [v for p in panes for v in p.values]
        return cls(
            [p.key for p in panes],
            np.fromiter((p.window.start for p in panes), np.int64, n),
            np.fromiter((p.window.end for p in panes), np.int64, n),
            np.fromiter((p.timestamp for p in panes), np.int64, n),
            np.fromiter((_TIMING_CODE[p.timing] for p in panes), np.int8, n),
            np.fromiter((p.index for p in panes), np.int64, n),
            np.fromiter((p.nonspeculative_index for p in panes), np.int64, n),
            np.fromiter((p.is_last for p in panes), bool, n),
            hi - sizes,
            hi,
            grouped,
            bool(n) and all(isinstance(p.window, GlobalWindow) for p in panes),
            [p.window for p in panes],
        )


class PaneSequence(Sequence[Pane]):
    """The panes of a :class:`PaneColumns` as a read-only sequence, equal to the list of
    the same :class:`Pane` tuples (and to any list or tuple of them). ``len`` needs no
    tuples; any other access builds them all once (:meth:`PaneColumns.panes`)."""

    __slots__ = ("_built", "columns")

    def __init__(self, columns: PaneColumns) -> None:
        self.columns = columns
        self._built: list[Pane] | None = None

    def _panes(self) -> list[Pane]:
        if self._built is None:
            self._built = self.columns.panes()
        return self._built

    def __len__(self) -> int:
        return self.columns.n_panes

    @overload
    def __getitem__(self, i: int) -> Pane: ...
    @overload
    def __getitem__(self, i: slice) -> list[Pane]: ...
    def __getitem__(self, i: int | slice) -> Pane | list[Pane]:
        return self._panes()[i]

    def __iter__(self) -> Iterator[Pane]:
        return iter(self._panes())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (PaneSequence, list, tuple)):
            return self._panes() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-equal, as a list

    def __add__(self, other: Sequence[Pane]) -> list[Pane]:
        return self._panes() + list(other)

    def __radd__(self, other: Sequence[Pane]) -> list[Pane]:
        return list(other) + self._panes()

    def __repr__(self) -> str:
        return repr(self._panes())

    def __reduce__(self) -> tuple[Any, ...]:
        return (PaneSequence, (self.columns,))


def build_panes(
    keys: Keys,
    start: np.ndarray,
    end: np.ndarray,
    grouped_values: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    timestamp: np.ndarray,
    timing: np.ndarray,
    index: np.ndarray,
    is_last: bool,
    *,
    global_window: bool = False,
    nonspeculative_index: np.ndarray | None = None,
) -> PaneColumns:
    """The columns of panes the vectorised paths fire (``timing``: codes into
    :data:`TIMINGS`; the non-speculative index is ``index`` unless given)."""
    return PaneColumns(
        keys,
        start,
        end,
        timestamp,
        timing,
        index,
        index if nonspeculative_index is None else nonspeculative_index,
        np.full(index.size, is_last),
        lo,
        hi,
        grouped_values,
        global_window,
    )
