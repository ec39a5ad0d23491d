"""GroupByKey's windows, timestamps and panes by theory's engine (the fast grouping path).

In batch, Beam's ``GeneralTriggerDriver.process_entire_key`` adds all of a key's
elements at the input watermark ``MIN_TIMESTAMP`` and then fires every timer: exactly a
:class:`theory.GroupByWindowEngine` fed one batch and advanced to ``MAX_TIMESTAMP``. The
engine models that driver pane for pane (merging sessions, TimestampCombiner, pane
info; ``tests/theory`` checks it against Beam), and groups a whole partition in one
call, where Beam's driver costs about a millisecond per (key, window).

:func:`engine_strategy` maps a Beam ``Windowing`` onto a theory
:class:`~theory.WindowingStrategy` when the engine models it
(:func:`theory.windowing.select.whole_batch_path` decides), else says why not (the
runner then keeps Beam's driver: custom WindowFns, triggers other than the default
trigger or a bare ``AfterWatermark()``). The elements keep the windows they carry (they
crossed a coder that rounds timestamps and windows to milliseconds, and Beam's driver
groups those windows, not re-assigned ones). All times are int64 µs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from apache_beam.transforms import window as beam_window
from apache_beam.utils import windowed_value
from apache_beam.utils.timestamp import Timestamp

from beam_pipelines.convert import to_theory
from theory import MAX_TIMESTAMP, GroupByWindowEngine, Pane, WindowingStrategy
from theory.windowing.select import WindowingPath, whole_batch_path

__all__ = ["engine_panes", "engine_row_panes", "engine_strategy"]

_TIMINGS: Final[dict[str, Any]] = {
    t: getattr(windowed_value.PaneInfoTiming, t) for t in ("EARLY", "ON_TIME", "LATE", "UNKNOWN")
}


def engine_strategy(windowing: Any) -> WindowingStrategy | str:
    """The theory strategy for Beam's ``windowing`` (a ``core.Windowing``), or a sentence
    saying why the engine does not model it here. The conversion is
    :func:`beam_pipelines.convert.to_theory`'s; which strategies this path takes is
    :func:`theory.windowing.select.whole_batch_path`'s to say."""
    if type(windowing.windowfn) not in _CONVERTIBLE_WINDOW_FNS:
        return f"window fn {type(windowing.windowfn).__name__} is not Fixed, Sliding or Sessions"
    try:
        # Beam checked the pipeline's triggers; batch fires everything at the end
        strategy = to_theory(windowing, allow_unsafe_triggers=True)
    except (TypeError, ValueError) as err:
        return str(err)
    path = whole_batch_path(strategy)
    return strategy if isinstance(path, WindowingPath) else path


#: The Beam window fns theory converts (any other is named as Beam spells it).
_CONVERTIBLE_WINDOW_FNS: Final = (
    beam_window.FixedWindows,
    beam_window.SlidingWindows,
    beam_window.Sessions,
    beam_window.GlobalWindows,
)


def engine_panes(strategy: WindowingStrategy, elements: Iterable[tuple[Any, Any]]) -> Iterator[Any]:
    """The grouped output of ``elements`` (``(key, WindowedValue of KV)``, several keys):
    Beam ``WindowedValue``\\ s of ``(key, [values])``, one per pane. Keys must be hashable
    (the runner passes the encoded key bytes) and are returned as the KV's own key."""
    keys: list[Any] = []
    values: list[Any] = []
    stamps: list[int] = []
    element: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    names: dict[Any, Any] = {}
    for i, (key, wv) in enumerate(elements):
        names.setdefault(key, wv.value[0])
        keys.append(key)
        values.append(wv.value[1])
        stamps.append(wv.timestamp_micros)  # (the µs fields: no Timestamp objects)
        for w in wv.windows:
            element.append(i)
            starts.append(w._start_micros)
            ends.append(w._end_micros)
    yield from _panes(strategy, names, keys, values, stamps, element, starts, ends)


def engine_row_panes(
    strategy: WindowingStrategy,
    names: list[Any],
    codes: list[int],
    values: list[Any],
    stamps: list[int],
    starts: list[int],
    ends: list[int],
) -> Iterator[Any]:
    """As :func:`engine_panes`, for rows given as columns, one window each: row ``i`` has
    key ``names[codes[i]]``, value, timestamp and window ``[starts[i], ends[i])`` (µs)."""
    element = list(range(len(codes)))
    named = dict(enumerate(names))
    yield from _panes(strategy, named, codes, values, stamps, element, starts, ends)


def _panes(
    strategy: WindowingStrategy,
    names: dict[Any, Any],
    keys: list[Any],
    values: list[Any],
    stamps: list[int],
    element: list[int],
    starts: list[int],
    ends: list[int],
) -> Iterator[Any]:
    engine = GroupByWindowEngine(strategy)
    panes = engine.add_rows(keys, values, stamps, element, starts, ends, 0, len(element))
    panes += engine.advance_watermark_to(MAX_TIMESTAMP)
    windows: dict[Any, Any] = {}
    for pane in panes:
        yield _beam_value(pane, names[pane.key], windows)


def _beam_value(pane: Pane, key: Any, windows: dict[Any, Any]) -> Any:
    window = windows.get(pane.window)
    if window is None:
        window = windows[pane.window] = beam_window.IntervalWindow(
            Timestamp(micros=pane.window.start), Timestamp(micros=pane.window.end)
        )
    info = windowed_value.PaneInfo(
        pane.is_first,
        pane.is_last,
        _TIMINGS[pane.timing.value],
        pane.index,
        pane.nonspeculative_index,
    )
    return windowed_value.WindowedValue(
        (key, list(pane.values)), Timestamp(micros=pane.timestamp), (window,), info
    )
