"""The chapter-3 module's input: one trace of both platforms' game events.

A chapter-3 trace is a trace file (or directory; see :func:`theory.data.io.read_trace`)
with theory's columns (``event_time``, ``arrival_time``, ``key`` = user, ``value`` =
score; µs) and one more, ``platform``: ``mobile`` or ``console`` per row. The two
platforms are the pipeline's two sources (``mobile_in``, ``console_in``), each with its
own source watermark. Beam's coders carry whole milliseconds, and a TestStream's clock
steps are whole milliseconds, so both times must be whole milliseconds. Every problem is
a :class:`~theory.data.errors.TraceError` naming the row and column, raised before any
pipeline is built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from theory.data.errors import TraceError
from theory.data.io import check_file, read_trace, trace_files, trace_format, write_trace
from theory.data.trace import Trace
from theory.pipeline import chapter3 as model
from theory.time import MICROS_PER_MILLI

__all__ = [
    "PLATFORM",
    "SOURCES",
    "coarsen_arrivals",
    "generate_chapter3_trace",
    "read_chapter3_trace",
    "write_chapter3_trace",
]

#: The column naming each row's platform.
PLATFORM: Final[str] = "platform"

#: Platform -> the pipeline's source stage (theory.chapter3's names).
SOURCES: Final[dict[str, str]] = {"mobile": "mobile_in", "console": "console_in"}


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return trace_files(path)
    trace_format(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {str(path)!r}")
    return [path]


def _platforms(path: Path) -> np.ndarray:
    """The ``platform`` column of every file, rows numbered across files."""
    parts = []
    for f in _files(path):
        names = check_file(f)
        if PLATFORM not in names:
            raise TraceError(
                f"the chapter-3 trace needs this column: each row's platform, "
                f"{' or '.join(SOURCES)} (columns present: {sorted(names)})",
                column=PLATFORM,
                path=str(f),
            )
        if trace_format(f) == "csv":
            convert = pacsv.ConvertOptions(
                include_columns=[PLATFORM], column_types={PLATFORM: pa.string()}
            )
            table = pacsv.read_csv(f, convert_options=convert)
        else:
            table = pq.read_table(f, columns=[PLATFORM])
        column = table.column(PLATFORM)
        if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
            raise TraceError(
                f"must be text ({' or '.join(SOURCES)}), got {column.type}",
                column=PLATFORM,
                path=str(f),
            )
        parts.append(pc.fill_null(column, "").to_numpy(zero_copy_only=False).astype(object))
    return np.concatenate(parts) if parts else np.empty(0, object)


def _check_whole_ms(trace: Trace, path: str) -> None:
    for name in ("event_time", "arrival_time"):
        bad = np.flatnonzero(getattr(trace, name) % MICROS_PER_MILLI)
        if bad.size:
            row = int(bad[0])
            raise TraceError(
                f"{int(getattr(trace, name)[row])} µs is not a whole millisecond (Beam's "
                "coders and TestStream clock carry milliseconds)",
                row=row,
                column=name,
                path=path,
            )


def read_chapter3_trace(path: str | os.PathLike[str]) -> dict[str, Trace]:
    """The trace at ``path`` split by platform: ``{"mobile_in": ..., "console_in": ...}``
    (a platform without rows gets an empty trace); see the module docstring."""
    p = Path(path)
    platforms = _platforms(p)
    trace, _ = read_trace(p)
    known = np.isin(platforms, list(SOURCES))
    if not known.all():
        row = int(np.flatnonzero(~known)[0])
        raise TraceError(
            f"{platforms[row]!r} is not a platform ({' or '.join(SOURCES)})",
            row=row,
            column=PLATFORM,
            path=str(p),
        )
    _check_whole_ms(trace, str(p))
    return {
        source: trace.take(np.flatnonzero(platforms == platform))
        for platform, source in SOURCES.items()
    }


def write_chapter3_trace(traces: Mapping[str, Trace], path: str | os.PathLike[str]) -> None:
    """Write ``{"mobile_in": ..., "console_in": ...}`` as one chapter-3 trace file
    (Parquet or CSV by suffix, atomically)."""
    unknown = sorted(set(traces) - set(SOURCES.values()))
    if unknown:
        raise ValueError(
            f"traces: unknown source(s) {unknown}; expected {sorted(SOURCES.values())}"
        )
    platform = {source: name for name, source in SOURCES.items()}
    both = Trace.concat(list(traces.values()))
    labels = np.concatenate([np.full(len(t), platform[s], object) for s, t in traces.items()])
    write_trace(both, path, {PLATFORM: pa.array(labels.tolist(), pa.string())})


def generate_chapter3_trace(events: int, *, seed: int = 0, users: int = 100) -> dict[str, Trace]:
    """:func:`theory.pipeline.chapter3.traces` with ``users`` users per platform (fewer
    events per user make a shorter trace), times floored to whole milliseconds."""
    return {
        source: trace.with_columns(
            event_time=trace.event_time - trace.event_time % MICROS_PER_MILLI,
            arrival_time=trace.arrival_time - trace.arrival_time % MICROS_PER_MILLI,
        )
        for source, trace in model.traces(events, seed, users=users).items()
    }


def coarsen_arrivals(trace: Trace, step: int) -> Trace:
    """``trace`` with every arrival time rounded up to a multiple of ``step`` (µs > 0):
    what a source polled every ``step`` sees; replayed, each distinct arrival time is one
    micro-batch."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step <= 0:
        raise ValueError(f"step must be a positive int of µs, got {step!r}")
    arrival = -(-trace.arrival_time // int(step)) * int(step)
    return trace.with_columns(arrival_time=arrival)
