"""GroupByKey over :class:`~spark_backend.runner.grouping.keyed_columns.KeyedColumns`: one
partition's rows grouped with numpy, the output written in Beam's bytes once.

In batch, under the default trigger or a bare ``AfterWatermark()``, Beam's trigger
driver (and theory's engine, which models it) gives one ON_TIME pane per (key, final
window) holding all its values: ``PaneInfo(is_first=True, is_last, ON_TIME, 0, 0)``,
``is_last`` only for ``AfterWatermark()`` (the default trigger may fire late panes).
The final windows are the rows' windows for Fixed and Sliding windows, and for
Sessions the merge of each key's windows sorted by start, a window joining the session
before it when it starts before that session's end (Beam's ``Sessions.merge``). The
pane's timestamp is the window's ``max_timestamp()`` (END_OF_WINDOW), or the smallest
(EARLIEST) or largest (LATEST) of its rows' timestamps.

:func:`grouped_rows` computes that with one sort; :func:`encode_panes` writes each pane
as Beam's ``WindowedValueCoder`` of ``KV<K, Iterable<V>>`` would, from the key bytes and
the values' bytes (concatenated, never decoded). A partition the sort cannot model
exactly (another timestamp combiner, a window at the edge of time, session windows
whose ends do not grow with their starts) goes to theory's engine instead
(:func:`~spark_backend.runner.grouping.engine.engine_row_panes`). All times are int64 µs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.coders.coder_impl import PaneInfoCoderImpl, create_OutputStream
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms import window as beam_window
from apache_beam.utils import windowed_value
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

from spark_backend.runner.grouping.engine import engine_row_panes
from spark_backend.runner.grouping.keyed_columns import POOL, KeyedColumns
from spark_backend.runner.stages.lean.encode import element_millis, ordered_millis

__all__ = ["GroupedRows", "encode_panes", "engine_values", "grouped_rows"]

_COMBINERS: Final = {
    beam_window.TimestampCombiner.OUTPUT_AT_EOW: "eow",
    beam_window.TimestampCombiner.OUTPUT_AT_EARLIEST: "earliest",
    beam_window.TimestampCombiner.OUTPUT_AT_LATEST: "latest",
}


def _on_time(is_last: bool) -> bytes:
    pane = windowed_value.PaneInfo(True, is_last, windowed_value.PaneInfoTiming.ON_TIME, 0, 0)
    return PaneInfoCoderImpl().encode_nested(pane)


#: The one pane's bytes: the default trigger may fire again (late), so its pane is not
#: the last; a bare AfterWatermark() is finished after it.
_PANES: Final = {False: _on_time(False), True: _on_time(True)}


class GroupedRows(NamedTuple):
    """Panes of a partition: ``order`` lists the rows pane by pane; pane ``g`` holds
    ``order[first[g]:first[g] + sizes[g]]``, key code ``code[g]``, window
    ``[start[g], end[g])``, timestamp ``stamp[g]``, and pane ``pane`` (its bytes)."""

    order: np.ndarray
    first: np.ndarray
    sizes: np.ndarray
    code: np.ndarray
    start: np.ndarray
    end: np.ndarray
    stamp: np.ndarray
    pane: bytes


def grouped_rows(columns: KeyedColumns, windowing: Any) -> GroupedRows | None:
    """The panes of ``columns`` under ``windowing`` (see the module docstring), or None
    when this partition is not one the sort models exactly."""
    combiner = _COMBINERS.get(windowing.timestamp_combiner)
    n = len(columns)
    if combiner is None or not n:
        return None
    starts, ends = columns.starts, columns.ends
    if int(starts.min()) <= MIN_TIMESTAMP.micros or int(ends.max()) >= MAX_TIMESTAMP.micros:
        return None  # windows at the edge of time: the engine's rules there
    codes = columns.codes
    order = np.lexsort((ends, starts, codes))
    c, s, e = codes[order], starts[order], ends[order]
    same_key = c[1:] == c[:-1]
    if type(windowing.windowfn) is beam_window.Sessions:
        if np.any(same_key & (e[1:] < e[:-1])):
            return None  # a window ending before an earlier-starting one: not a plain sweep
        new = ~same_key | (s[1:] >= e[:-1])  # Beam merges a window starting before the end
    else:
        new = ~same_key | (s[1:] != s[:-1]) | (e[1:] != e[:-1])
    first = np.flatnonzero(np.concatenate([[True], new]))
    last = np.append(first[1:], n) - 1
    start, end = s[first], e[last]
    if combiner == "eow":
        stamp = end - 1
    else:
        reduce = np.minimum if combiner == "earliest" else np.maximum
        stamp = reduce.reduceat(columns.micros[order], first)
    counts = np.diff(np.append(first, n))
    pane = _PANES[type(windowing.triggerfn) is not beam_trigger.DefaultTrigger]
    return GroupedRows(order, first, counts, c[first], start, end, stamp, pane)


def encode_panes(columns: KeyedColumns, rows: GroupedRows, chunk_bytes: int) -> Iterator[bytes]:
    """The panes as Beam's windowed ``KV<K, Iterable<V>>`` bytes (the values' bytes as
    they came), in chunks of about ``chunk_bytes``."""
    values = pc.take(columns.values, pa.array(rows.order), memory_pool=POOL)
    data = values.buffers()[2]
    data = b"" if data is None else data.to_pybytes()
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[
        values.offset : values.offset + len(values) + 1
    ].tolist()
    stamps = ordered_millis(element_millis(rows.stamp))
    end_millis = rows.end // 1000
    ends = ordered_millis(end_millis)
    spans = (end_millis - rows.start // 1000).tolist()
    keys = columns.keys
    out = create_OutputStream()
    for g, (at, count, code) in enumerate(
        zip(rows.first.tolist(), rows.sizes.tolist(), rows.code.tolist(), strict=True)
    ):
        out.write_bigendian_uint64(stamps[g])
        out.write_bigendian_int32(1)
        out.write_bigendian_uint64(ends[g])
        out.write_var_int64(spans[g])
        out.write(rows.pane)
        out.write(keys[code])
        out.write_bigendian_int32(count)
        out.write(data[offsets[at] : offsets[at + count]])
        if out.size() >= chunk_bytes:
            yield out.get()
            out = create_OutputStream()
    if out.size():
        yield out.get()


def engine_values(
    columns: KeyedColumns, strategy: Any, key_impl: Any, value_impl: Any
) -> Iterable[Any]:
    """The panes of ``columns`` by theory's engine (the path for what the sort refuses),
    as Beam ``WindowedValue``\\ s: keys and values decoded from their bytes."""
    names = [key_impl.decode_nested(k) for k in columns.keys]
    values = [value_impl.decode_nested(v) for v in columns.values.to_pylist()]
    return engine_row_panes(
        strategy,
        names,
        columns.codes.tolist(),
        values,
        columns.micros.tolist(),
        columns.starts.tolist(),
        columns.ends.tolist(),
    )
