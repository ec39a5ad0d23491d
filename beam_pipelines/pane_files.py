"""Output panes as files, from any runner: :class:`WritePanes` and :func:`read_panes`.

A runner that executes bundles in other processes (PySparkRunner's Spark tasks) cannot
hand elements back through memory, so :class:`WritePanes` writes each bundle's panes to
one file under ``directory/stage/``: a header line, then one JSON line per
:class:`PaneRow` (window and timestamp in µs, pane info, key and value). Keys and values
are stored by :mod:`beam_pipelines.plain_json` (plain types: None, bool, int, float, str,
bytes, tuple, list, dict); nothing read back is unpickled, so a file planted in the
directory cannot run code. A pane of another type is recorded as a problem. A file is
written to a hidden temporary name and renamed into place, so a reader never sees half a
file. Its name is the bundle's start (a system-wide monotonic clock, so names sort in
output order) and a hash of its content: a retried task writes the same content again,
and :func:`read_panes` keeps one copy of each content.

On PySparkRunner the same bundle is written twice when a Spark task is retried after its
bundle finished, or when a restarted pipeline replays a batch its checkpoint had not
committed; both write the same content. Two *different* bundles with the same content
would mean a pane (key, window, index, timing, timestamp and value all equal) emitted
twice, a runner bug, which this naming reads once. Telling the two apart needs a bundle
identity that stays the same across retries and restarts (batch, stage, partition); Beam's
API gives a DoFn none, so that would have to come from the runner.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.transforms import window as bw
from apache_beam.utils.windowed_value import PaneInfoTiming

from beam_pipelines import plain_json
from theory.time import MAX_TIMESTAMP, MICROS_PER_SECOND, MIN_TIMESTAMP, format_timestamp
from theory.windowing.windows import GLOBAL_WINDOW

__all__ = [
    "PaneRow",
    "WritePanes",
    "decode_rows",
    "encode_rows",
    "format_micros",
    "pane_row",
    "part_files",
    "read_panes",
    "sorted_values",
    "write_part",
]


@dataclass(frozen=True)
class PaneRow:
    """One output pane: window ``[start, end)`` and timestamp in µs, Beam's pane info,
    the key and the value."""

    key: Hashable
    start: int
    end: int
    timestamp: int
    timing: str
    index: int
    is_first: bool
    is_last: bool
    value: Any

    def where(self) -> tuple[str, int, int]:
        return (repr(self.key), self.start, self.end)

    def line(self) -> str:
        return (
            f"key={self.key!r} window=[{format_micros(self.start)}, {format_micros(self.end)}) "
            f"timestamp={format_micros(self.timestamp)} {self.timing} index={self.index} "
            f"first={self.is_first} last={self.is_last} value={self.value!r}"
        )


def format_micros(micros: int) -> str:
    """µs as seconds (``12.5s``) near the epoch, else ISO-8601; ``±inf`` at the ends."""
    if micros <= MIN_TIMESTAMP or micros >= MAX_TIMESTAMP:
        return format_timestamp(micros)
    if abs(micros) < 10**6 * 86_400 * 365:
        seconds = f"{micros / MICROS_PER_SECOND:.6f}".rstrip("0").rstrip(".")
        return f"{seconds}s"
    return format_timestamp(micros)


def sorted_values(values: Iterable[Any]) -> list[Any]:
    """``values`` sorted (by ``repr`` when they do not compare): how a GroupByKey's
    iterable is compared."""
    items = list(values)
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=repr)


def pane_row(element: Any, window: Any, timestamp: Any, pane: Any, grouped: bool) -> PaneRow:
    """The :class:`PaneRow` of a ``(key, value)`` element with its window, timestamp and
    PaneInfo (``grouped``: the value is a GroupByKey's iterable, kept sorted);
    ``ValueError`` for an element that is not a pair."""
    if not isinstance(element, tuple) or len(element) != 2:
        raise ValueError(f"the transform output {element!r}, not a (key, value) pair")
    key, value = element
    if isinstance(window, bw.GlobalWindow):
        start, end = GLOBAL_WINDOW.start, GLOBAL_WINDOW.end
    else:
        start, end = int(window.start.micros), int(window.end.micros)
    return PaneRow(
        key,
        start,
        end,
        int(timestamp.micros),
        PaneInfoTiming.to_string(pane.timing),
        int(pane.index),
        bool(pane.is_first),
        bool(pane.is_last),
        sorted_values(value) if grouped else value,
    )


class _WritePaneFiles(beam.DoFn):
    """Collects a bundle's panes and writes them to one file (see the module docstring);
    an element that is not a pair is written as its message (a str)."""

    def __init__(self, directory: str, grouped: bool) -> None:
        self._directory = directory
        self._grouped = grouped

    def start_bundle(self) -> None:
        self._started = time.monotonic_ns()
        self._rows: list[PaneRow | str] = []

    def process(
        self,
        element: Any,
        window: Any = beam.DoFn.WindowParam,
        timestamp: Any = beam.DoFn.TimestampParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[None]:
        try:
            self._rows.append(pane_row(element, window, timestamp, pane, self._grouped))
        except ValueError as err:
            self._rows.append(str(err))
        return iter(())

    def finish_bundle(self) -> None:
        if self._rows:
            write_part(self._directory, self._started, encode_rows(self._rows))


HEADER = b"dataflow-watermarks-panes/1\n"


def encode_rows(rows: Iterable[PaneRow | str]) -> bytes:
    """A part file's bytes: :data:`HEADER`, then a JSON line per row; a message (str) is
    written as ``{"problem": ...}``, and so is a pane whose key or value is not of a plain
    type (see :mod:`beam_pipelines.plain_json`)."""
    lines = [HEADER]
    for row in rows:
        if isinstance(row, str):
            record: dict[str, Any] = {"problem": row}
        else:
            try:
                record = {
                    "key": plain_json.encode(row.key),
                    "start": row.start,
                    "end": row.end,
                    "timestamp": row.timestamp,
                    "timing": row.timing,
                    "index": row.index,
                    "is_first": row.is_first,
                    "is_last": row.is_last,
                    "value": plain_json.encode(row.value),
                }
            except TypeError as err:
                record = {"problem": f"pane {row.where()}: {err}"}
        lines.append(json.dumps(record, separators=(",", ":")).encode() + b"\n")
    return b"".join(lines)


def decode_rows(data: bytes, where: str) -> list[PaneRow | str]:
    """The rows of a part file written by :func:`encode_rows`; ``ValueError`` naming
    ``where`` for anything else (never unpickled)."""
    if not data.startswith(HEADER):
        first = HEADER[:-1].decode()
        raise ValueError(f"{where}: not a pane file (its first line is not {first!r})")
    rows: list[PaneRow | str] = []
    for number, line in enumerate(data[len(HEADER) :].splitlines(), start=2):
        try:
            record = json.loads(line)
            if "problem" in record:
                rows.append(str(record["problem"]))
                continue
            rows.append(
                PaneRow(
                    plain_json.decode(record["key"]),
                    int(record["start"]),
                    int(record["end"]),
                    int(record["timestamp"]),
                    str(record["timing"]),
                    int(record["index"]),
                    bool(record["is_first"]),
                    bool(record["is_last"]),
                    plain_json.decode(record["value"]),
                )
            )
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{where}, line {number}: not a pane record ({err})") from None
    return rows


def write_part(directory: str, started: int, data: bytes) -> None:
    """Write ``data`` atomically as a part file of ``directory`` named by ``started``
    (ns) and its content's hash."""
    os.makedirs(directory, exist_ok=True)
    name = f"{started:020d}-{hashlib.sha1(data).hexdigest()[:16]}.panes"
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(directory, name))


class WritePanes(beam.PTransform):
    """Write every ``(key, value)`` pane of the input to ``directory/stage/`` (see the
    module docstring); ``grouped``: values are GroupByKey iterables, written sorted."""

    def __init__(self, directory: str | os.PathLike[str], stage: str, grouped: bool = False):
        super().__init__()
        if not stage or os.sep in stage or stage.startswith("."):
            raise ValueError(f"stage must be a plain directory name, got {stage!r}")
        self._directory = os.path.join(os.fspath(directory), stage)
        self._grouped = grouped

    def expand(self, pcoll: Any) -> Any:
        return pcoll | beam.ParDo(_WritePaneFiles(self._directory, self._grouped))


def part_files(directory: str | os.PathLike[str], stage: str) -> list[tuple[int, list[Any]]]:
    """Each part file :class:`WritePanes` wrote for ``stage``: its bundle's start (a
    monotonic clock, ns) and its rows, in start order, each content once (a retried
    bundle writes the same content again)."""
    folder = Path(directory) / stage
    if not folder.is_dir():
        return []
    parts = []
    seen: set[str] = set()
    for path in sorted(p for p in folder.iterdir() if p.suffix == ".panes"):
        started, digest = path.stem.split("-", 1)
        if digest not in seen:
            seen.add(digest)
            parts.append((int(started), decode_rows(path.read_bytes(), str(path))))
    return parts


def read_panes(
    directory: str | os.PathLike[str], stage: str, on_problem: Callable[[str], None] | None = None
) -> list[PaneRow]:
    """The panes :class:`WritePanes` wrote for ``stage`` (:func:`part_files`' order); a
    message a bundle recorded (an element that was not a pair) goes to ``on_problem``,
    else raises ``ValueError``."""
    rows: list[PaneRow] = []
    for _, part in part_files(directory, stage):
        for row in part:
            if isinstance(row, str):
                if on_problem is None:
                    raise ValueError(f"stage {stage!r}: {row}")
                on_problem(row)
            else:
                rows.append(row)
    return rows
