"""``demo --save-trace PATH``: the generated trace written as a Parquet file that
``analyze`` reads.

The file has the trace's columns (``event_time``, ``arrival_time``: int64 µs since the
epoch; ``key``, ``value``, ``partition``), its units in the Parquet schema's metadata
(:data:`UNIT_KEY`), and is written atomically (a temporary file beside it, then a
rename: :func:`theory.data.io.write_file_atomically`). :func:`check_save_trace`, part of
the one ``--out`` guard (:func:`spark_backend.cli.preflight.check_outputs`), refuses
before any work a path that is not ``.parquet``, lies inside ``--out`` or holds it, is
an input or inside one, is a directory, or is an existing file that no earlier
``--save-trace`` wrote.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from theory.data.io import write_file_atomically

__all__ = ["TRACE_COLUMNS", "UNIT_KEY", "check_save_trace", "is_saved_trace", "write_saved_trace"]

#: The Parquet metadata key stating the time columns' unit (and marking a saved trace).
UNIT_KEY = b"watermarks.time_unit"

#: The columns a saved trace keeps, those present, in this order.
TRACE_COLUMNS = ("event_time", "arrival_time", "key", "value", "partition", "publish_time")


def is_saved_trace(path: Path) -> bool:
    """True for a Parquet file whose schema carries :data:`UNIT_KEY` (read: the schema
    only)."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return UNIT_KEY in meta


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or inner.is_relative_to(outer)


def check_save_trace(
    path: str | os.PathLike[str], out: Path, inputs: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """The absolute path ``--save-trace`` writes, or ValueError naming it (module
    docstring). ``out``: ``--out``, resolved. Touches nothing."""
    text = os.fspath(path)
    if not text.endswith(".parquet"):
        raise ValueError(f"--save-trace {text!r}: name a .parquet file (a trace analyze reads)")
    target = Path(os.path.realpath(text))
    if _within(target, out):
        raise ValueError(f"--save-trace {text!r} is inside --out {os.fspath(out)!r}")
    if _within(out, target):
        raise ValueError(f"--save-trace {text!r} holds --out {os.fspath(out)!r}")
    for given in inputs:
        source = Path(os.path.realpath(os.fspath(given)))
        if _within(target, source):
            raise ValueError(
                f"--save-trace {text!r} would overwrite the input {os.fspath(given)!r}"
            )
    if target.is_dir():
        raise ValueError(f"--save-trace {text!r} is a directory: name a .parquet file")
    if target.exists() and not is_saved_trace(target):
        raise ValueError(
            f"--save-trace {text!r} exists and is no trace --save-trace wrote; remove it or "
            "choose another path"
        )
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--save-trace {text!r}: cannot write in {parent}")
    return target


def write_saved_trace(table: pa.Table, path: str | os.PathLike[str]) -> Path:
    """Write the trace columns of ``table`` (µs) to ``path`` atomically, the unit in the
    schema's metadata; its missing parent directories are made. Returns the path."""
    target = Path(os.path.realpath(os.fspath(path)))
    kept = table.select([c for c in TRACE_COLUMNS if c in table.column_names])
    kept = kept.replace_schema_metadata({UNIT_KEY: b"us", b"watermarks.written_by": b"demo"})
    buf = io.BytesIO()
    pq.write_table(kept, buf)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomically(target, buf.getvalue())
    return target
