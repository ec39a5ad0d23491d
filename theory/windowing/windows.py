"""Windows and window functions, matching Apache Beam (Python SDK) exactly.

All times are ``int`` microseconds since the epoch (see :mod:`theory.time`). A window is
the half-open interval ``[start, end)`` and its ``max_timestamp`` is ``end - 1``.

Each window function has a scalar form, ``assign(ts)``, that returns the same windows in
the same order as Beam Python's ``WindowFn.assign``, and a vectorised form,
``assign_array(ts)``, that does the same for a whole int64 array at once. Scalar results
are exact Python ints (a window may reach past ``MIN_TIMESTAMP``/``MAX_TIMESTAMP``, as in
Beam); the vectorised form raises ``OverflowError`` if a window does not fit in int64.
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import Final, TypeAlias

import numpy as np

from theory.columns import (
    INT64_MAX,
    INT64_MIN,
    DurationLike,
    as_duration,
    as_int,
    as_offset,
    check_timestamp,
    time_column,
)
from theory.time import END_OF_GLOBAL_WINDOW, MIN_TIMESTAMP, parse_duration

__all__ = [
    "GLOBAL_WINDOW",
    "WINDOW_BOUND",
    "FixedWindows",
    "GlobalWindow",
    "GlobalWindows",
    "IntervalWindow",
    "MergeGroup",
    "Sessions",
    "SlidingWindows",
    "Window",
    "WindowAssignment",
    "WindowFn",
    "WindowOverflowError",
    "parse_duration",
    "trusted_interval_window",
    "trusted_interval_windows",
    "window_fn_from_spec",
]


# --------------------------------------------------------------------------- windows


#: Bound on a window's start and end (µs): a timestamp plus or minus an int64 duration.
WINDOW_BOUND: Final[int] = 2 * INT64_MAX + 1


@dataclass(frozen=True, order=True, slots=True)
class IntervalWindow:
    """The half-open event-time interval ``[start, end)`` in µs; requires ``start < end``,
    both within ``±WINDOW_BOUND`` (ValueError).

    Ordered by ``(start, end)`` (Beam orders by end, then by hash).
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        start = as_int(self.start, "start")
        end = as_int(self.end, "end")
        for name, v in (("start", start), ("end", end)):
            if abs(v) > WINDOW_BOUND:
                raise ValueError(
                    f"IntervalWindow {name}={v} µs is beyond ±{WINDOW_BOUND} "
                    "(a window fn's window reaches at most int64 past a timestamp)"
                )
        if not start < end:
            raise ValueError(
                f"IntervalWindow needs start < end, got start={start} µs, end={end} µs"
            )
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    @property
    def max_timestamp(self) -> int:
        """The last timestamp in the window: ``end - 1`` µs."""
        return self.end - 1

    def contains(self, ts: int) -> bool:
        """Whether ``start <= ts < end``."""
        return self.start <= ts < self.end

    def intersects(self, other: IntervalWindow) -> bool:
        """Strict overlap, the rule Beam's ``Sessions.merge`` uses: touching is not overlap.

        (Beam Python's own ``IntervalWindow.intersects`` uses ``or`` and so returns True
        for almost any pair; this is the intended rule.)
        """
        return self.start < other.end and other.start < self.end

    def span(self, other: IntervalWindow) -> IntervalWindow:
        """The smallest window covering both (Beam's ``union``)."""
        return IntervalWindow(min(self.start, other.start), max(self.end, other.end))

    def __repr__(self) -> str:
        return f"IntervalWindow({self.start}, {self.end})"


def trusted_interval_window(start: int, end: int) -> IntervalWindow:
    """An :class:`IntervalWindow` of Python ints already known to satisfy ``start < end``
    (µs), built without validating them again: the engine builds one per pane."""
    window = object.__new__(IntervalWindow)
    object.__setattr__(window, "start", start)
    object.__setattr__(window, "end", end)
    return window


_set_start = vars(IntervalWindow)["start"].__set__  # the slots' setters
_set_end = vars(IntervalWindow)["end"].__set__


def trusted_interval_windows(starts: list[int], ends: list[int]) -> list[IntervalWindow]:
    """:func:`trusted_interval_window` for many (µs, ``starts[i] < ends[i]`` known): no
    Python call per window (C-level maps over the slot setters)."""
    windows = list(map(object.__new__, repeat(IntervalWindow, len(starts))))
    deque(map(_set_start, windows, starts), 0)
    deque(map(_set_end, windows, ends), 0)
    return windows


@dataclass(frozen=True, slots=True)
class GlobalWindow:
    """The single window of ``GlobalWindows``: ``[MIN_TIMESTAMP, END_OF_GLOBAL_WINDOW)``.

    All instances are equal. ``max_timestamp`` is ``END_OF_GLOBAL_WINDOW - 1`` µs, as in
    Beam *Python* (``GlobalWindow().max_timestamp()`` is the predecessor of its end). Beam
    *Java*'s ``GlobalWindow.maxTimestamp()`` is ``END_OF_GLOBAL_WINDOW`` itself, so the two
    SDKs differ by 1 µs (Java has millisecond resolution there anyway).
    """

    @property
    def start(self) -> int:
        """``MIN_TIMESTAMP`` µs."""
        return MIN_TIMESTAMP

    @property
    def end(self) -> int:
        """``END_OF_GLOBAL_WINDOW`` µs (``MAX_TIMESTAMP`` minus one day)."""
        return END_OF_GLOBAL_WINDOW

    @property
    def max_timestamp(self) -> int:
        """``END_OF_GLOBAL_WINDOW - 1`` µs (Beam Python)."""
        return END_OF_GLOBAL_WINDOW - 1

    def contains(self, ts: int) -> bool:
        """Whether ``start <= ts < end``."""
        return MIN_TIMESTAMP <= ts < END_OF_GLOBAL_WINDOW

    def __repr__(self) -> str:
        return "GlobalWindow()"


#: The global window.
GLOBAL_WINDOW: Final[GlobalWindow] = GlobalWindow()

Window: TypeAlias = IntervalWindow | GlobalWindow
#: One merge: the windows merged (in Beam's order) and the window they become.
MergeGroup: TypeAlias = tuple[list[IntervalWindow], IntervalWindow]


# ------------------------------------------------------------------ vectorised forms


@dataclass(frozen=True, eq=False)
class WindowAssignment:
    """Vectorised window assignment: one row per (element, window), all int64 arrays.

    ``element`` indexes the input timestamps; rows are grouped by element in ascending
    element index and, within an element, in the order of the scalar ``assign``.
    ``start``/``end`` are the window bounds in µs.
    """

    element: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __post_init__(self) -> None:
        e = np.asarray(self.element, dtype=np.int64)
        s = np.asarray(self.start, dtype=np.int64)
        t = np.asarray(self.end, dtype=np.int64)
        if e.ndim != 1 or s.shape != e.shape or t.shape != e.shape:
            raise ValueError(
                "WindowAssignment needs 1-d element, start, end of one length, got "
                f"{e.shape}, {s.shape}, {t.shape}"
            )
        object.__setattr__(self, "element", e)
        object.__setattr__(self, "start", s)
        object.__setattr__(self, "end", t)

    def __len__(self) -> int:
        return int(self.element.shape[0])

    @property
    def max_timestamp(self) -> np.ndarray:
        """``end - 1`` per row, µs."""
        return self.end - 1


class WindowOverflowError(OverflowError, ValueError):
    """A window that does not fit in int64 µs: a bad value (ValueError) for the engine and
    every vectorised path, which hold windows in int64 (OverflowError for old callers)."""


def _raise_if_overflow(mask: np.ndarray, ts: np.ndarray, what: str) -> None:
    if bool(mask.any()):
        i = int(np.argmax(mask))
        raise WindowOverflowError(
            f"the {what} of the window of ts[{i}]={int(ts[i])} µs does not fit in int64: "
            "choose a smaller window, or keep timestamps a window size away from "
            "MIN_TIMESTAMP/MAX_TIMESTAMP"
        )


def _floor_offset(t: np.ndarray, step: int, offset: int) -> np.ndarray:
    """``(t - offset) mod step`` (floor semantics, in ``[0, step)``) without int64 overflow."""
    return np.mod(np.mod(t, step) - offset, step)  # both terms in [0, step): no overflow


# --------------------------------------------------------------------- window fns


class WindowFn(abc.ABC):
    """A window function: assigns timestamps (µs) to windows, and may merge windows."""

    __slots__ = ()

    @property
    def is_merging(self) -> bool:
        """Whether windows merge (True only for :class:`Sessions`)."""
        return False

    @abc.abstractmethod
    def assign(self, ts: int) -> tuple[Window, ...]:
        """The windows of an element at ``ts`` µs, in Beam's order."""

    @abc.abstractmethod
    def assign_array(self, ts: np.ndarray) -> WindowAssignment:
        """Vectorised :meth:`assign` over a 1-d integer array of µs timestamps."""

    def merge(self, windows: Iterable[Window]) -> list[MergeGroup]:
        """The merges Beam would perform on ``windows``; none for a non-merging fn."""
        return []


@dataclass(frozen=True)
class GlobalWindows(WindowFn):
    """Every element goes to the one :class:`GlobalWindow`."""

    def assign(self, ts: int) -> tuple[GlobalWindow]:
        check_timestamp(ts)
        return (GLOBAL_WINDOW,)

    def assign_array(self, ts: np.ndarray) -> WindowAssignment:
        t = time_column(ts, "ts")
        n = t.shape[0]
        return WindowAssignment(
            np.arange(n, dtype=np.int64),
            np.full(n, MIN_TIMESTAMP, dtype=np.int64),
            np.full(n, END_OF_GLOBAL_WINDOW, dtype=np.int64),
        )


@dataclass(frozen=True, init=False)
class FixedWindows(WindowFn):
    """Windows ``[N*size + offset, (N+1)*size + offset)``; ``size`` > 0 µs.

    ``offset`` (µs, any sign) is normalised into ``[0, size)`` modulo ``size``, as Beam does.
    """

    size: int
    offset: int = 0

    def __init__(self, size: DurationLike, offset: DurationLike = 0) -> None:
        """``size`` and ``offset``: µs as ints, ``timedelta``s, or strings like ``"60s"``."""
        size_us = as_duration(size, "size", allow_zero=False)
        object.__setattr__(self, "size", size_us)
        object.__setattr__(self, "offset", as_offset(offset, "offset") % size_us)

    def assign(self, ts: int) -> tuple[IntervalWindow]:
        t = check_timestamp(ts)
        start = t - (t - self.offset) % self.size
        return (IntervalWindow(start, start + self.size),)

    def assign_array(self, ts: np.ndarray) -> WindowAssignment:
        t = time_column(ts, "ts")
        r = _floor_offset(t, self.size, self.offset)
        _raise_if_overflow(t < INT64_MIN + r, t, "start")
        start = t - r
        _raise_if_overflow(start > INT64_MAX - self.size, t, "end")
        return WindowAssignment(np.arange(t.shape[0], dtype=np.int64), start, start + self.size)


@dataclass(frozen=True, init=False)
class SlidingWindows(WindowFn):
    """Windows ``[N*period + offset, N*period + offset + size)``; ``size``, ``period`` > 0 µs.

    ``offset`` is normalised modulo ``period`` (Beam does the same). ``period > size`` is
    allowed, as in Beam: timestamps in the gaps between windows get no window at all.
    ``assign`` lists an element's windows latest start first, as Beam does.
    """

    size: int
    period: int
    offset: int = 0

    def __init__(self, size: DurationLike, period: DurationLike, offset: DurationLike = 0) -> None:
        """Durations: µs as ints, ``timedelta``s, or strings like ``"60s"``."""
        period_us = as_duration(period, "period", allow_zero=False)
        object.__setattr__(self, "size", as_duration(size, "size", allow_zero=False))
        object.__setattr__(self, "period", period_us)
        object.__setattr__(self, "offset", as_offset(offset, "offset") % period_us)

    def assign(self, ts: int) -> tuple[IntervalWindow, ...]:
        t = check_timestamp(ts)
        start = t - (t - self.offset) % self.period
        return tuple(
            IntervalWindow(s, s + self.size) for s in range(start, t - self.size, -self.period)
        )

    def assign_array(self, ts: np.ndarray) -> WindowAssignment:
        t = time_column(ts, "ts")
        size, period = self.size, self.period
        r = _floor_offset(t, period, self.offset)
        # windows start at t - r - k*period for k >= 0 with k*period < size - r
        counts = np.where(r < size, (size - 1 - r) // period + 1, 0)
        has = counts > 0  # period > size leaves gaps with no window
        span = r + np.maximum(counts - 1, 0) * period  # < size where has: no overflow
        _raise_if_overflow(has & (t < INT64_MIN + span), t, "start")
        start0 = t - r  # wraps only where there is no window; those rows are not emitted
        _raise_if_overflow(has & (start0 > INT64_MAX - size), t, "end")
        n = t.shape[0]
        element = np.repeat(np.arange(n, dtype=np.int64), counts)
        first_row = np.cumsum(counts) - counts
        k = np.arange(element.shape[0], dtype=np.int64) - np.repeat(first_row, counts)
        start = start0[element] - k * period
        return WindowAssignment(element, start, start + size)


@dataclass(frozen=True, init=False)
class Sessions(WindowFn):
    """Session windows: each element gets ``[ts, ts + gap)``; overlapping windows merge.

    Two windows merge only if they strictly overlap (``end > start``); windows that just
    touch stay apart, as in Beam.
    """

    gap: int

    def __init__(self, gap: DurationLike) -> None:
        """``gap``: µs as an int, a ``timedelta``, or a string like ``"10m"``."""
        object.__setattr__(self, "gap", as_duration(gap, "gap", allow_zero=False))

    @property
    def is_merging(self) -> bool:
        return True

    def assign(self, ts: int) -> tuple[IntervalWindow]:
        t = check_timestamp(ts)
        return (IntervalWindow(t, t + self.gap),)

    def assign_array(self, ts: np.ndarray) -> WindowAssignment:
        t = time_column(ts, "ts")
        _raise_if_overflow(t > INT64_MAX - self.gap, t, "end")
        return WindowAssignment(np.arange(t.shape[0], dtype=np.int64), t.copy(), t + self.gap)

    def merge(self, windows: Iterable[Window]) -> list[MergeGroup]:
        """Beam Python's ``Sessions.merge``: one pass over the windows sorted (stably) by start.

        A window joins the current group when the group's running end is ``> window.start``.
        Each group of two or more becomes ``IntervalWindow(first.start, running_end)``.
        """
        ws: list[IntervalWindow] = []
        for w in windows:
            if not isinstance(w, IntervalWindow):
                raise TypeError(f"Sessions.merge needs IntervalWindows, got {w!r}")
            ws.append(w)
        groups: list[MergeGroup] = []
        group: list[IntervalWindow] = []
        end = MIN_TIMESTAMP
        for w in sorted(ws, key=lambda w: w.start):
            if group and end > w.start:
                group.append(w)
                end = max(end, w.end)
            else:
                if len(group) > 1:
                    groups.append((group, IntervalWindow(group[0].start, end)))
                group = [w]
                end = w.end
        if len(group) > 1:
            groups.append((group, IntervalWindow(group[0].start, end)))
        return groups

    def merge_array(self, keys: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Final session ``(start, end)`` per element of a static set, as int64 arrays (µs).

        Sessions are the connected components, per key, of the proto-windows
        ``[ts, ts + gap)`` under strict overlap: the fixpoint of :meth:`merge`. ``keys`` is
        any 1-d array (ints, strings, objects) of the same length as ``ts``.
        """
        t = time_column(ts, "ts")
        k = np.asarray(keys)
        if k.ndim != 1 or k.shape[0] != t.shape[0]:
            raise ValueError(
                f"keys must be 1-d with one key per timestamp, got shape {k.shape} for "
                f"{t.shape[0]} timestamps"
            )
        n = t.shape[0]
        if n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        # a session's end is its last element's ts + gap
        _raise_if_overflow(t > INT64_MAX - self.gap, t, "end")
        codes = _factorize(k)
        order = np.lexsort((t, codes))
        s = t[order]
        c = codes[order]
        # gap between consecutive sorted timestamps, exact in uint64 (wraps where s drops,
        # which only happens at a key change, where a new session starts anyway)
        diff = s[1:].view(np.uint64) - s[:-1].view(np.uint64)
        new = np.empty(n, dtype=bool)
        new[0] = True
        new[1:] = (c[1:] != c[:-1]) | (diff >= np.uint64(self.gap))
        sid = np.cumsum(new) - 1
        first = np.flatnonzero(new)
        last = np.append(first[1:] - 1, n - 1)
        last_ts = s[last]
        start = np.empty(n, dtype=np.int64)
        end = np.empty(n, dtype=np.int64)
        start[order] = s[first][sid]
        end[order] = (last_ts + self.gap)[sid]
        return start, end


def _factorize(keys: np.ndarray) -> np.ndarray:
    """Integer codes for ``keys``: ``np.unique`` when keys are orderable, else by hash."""
    try:
        _, inverse = np.unique(keys, return_inverse=True)
        return np.asarray(inverse, dtype=np.int64).reshape(-1)
    except TypeError:  # unorderable object keys (mixed types, None): hash them instead
        index: dict[object, int] = {}
        return np.fromiter(
            (index.setdefault(key, len(index)) for key in keys.tolist()),
            dtype=np.int64,
            count=keys.shape[0],
        )


# ------------------------------------------------------------------------- parsing


def window_fn_from_spec(spec: str) -> WindowFn:
    """Build a window fn from ``"global"``, ``"fixed:SIZE"``, ``"sliding:SIZE/PERIOD"`` or
    ``"sessions:GAP"``; fixed and sliding take an optional ``+OFFSET`` suffix
    (``"fixed:1h+15m"``). Durations are as :func:`parse_duration`.

    Raises ``ValueError`` naming the spec, ``TypeError`` for a spec that is not a string.
    """
    if not isinstance(spec, str):
        raise TypeError(f"window spec must be a string, got {spec!r}")
    kind, sep, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    rest = rest.strip()
    try:
        if kind == "global" and not sep:
            return GlobalWindows()
        if kind == "fixed" and rest:
            size, _, offset = rest.partition("+")
            return FixedWindows(parse_duration(size), parse_duration(offset) if offset else 0)
        if kind == "sliding" and "/" in rest:
            size, _, tail = rest.partition("/")
            period, _, offset = tail.partition("+")
            return SlidingWindows(
                parse_duration(size),
                parse_duration(period),
                parse_duration(offset) if offset else 0,
            )
        if kind in ("sessions", "session") and rest:
            return Sessions(parse_duration(rest))
    except (ValueError, TypeError) as e:
        raise ValueError(f"bad window spec {spec!r}: {e}") from e
    raise ValueError(
        f"bad window spec {spec!r}: expected 'global', 'fixed:SIZE[+OFFSET]', "
        "'sliding:SIZE/PERIOD[+OFFSET]' or 'sessions:GAP'"
    )
