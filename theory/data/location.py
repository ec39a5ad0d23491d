"""Where a trace's files are: a local path, or a URI of any file system pyarrow
understands (``file://``, ``s3://``, ``gs://``, ``hdfs://``, ``abfs://``, ...).

Each file is a :class:`TraceFile`: its :mod:`pyarrow.fs` file system, its path there,
and the name errors show and Spark reads (the local path as given, or the URI). Both
readers list, check and open files through it, so a remote input gets the same
per-file checks as a local one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs

from theory.data.schema import TRACE_SUFFIXES

__all__ = [
    "TraceFile",
    "as_trace_file",
    "is_uri",
    "list_trace_files",
    "trace_files",
    "trace_format",
    "uri_file_system",
]


@dataclass(frozen=True)
class TraceFile:
    """One trace file: ``fs`` and ``path`` open it; ``shown`` names it in errors and is
    the path Spark reads (the local path as given, or the URI)."""

    fs: pafs.FileSystem
    path: str
    shown: str

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.path).suffix

    def __str__(self) -> str:
        return self.shown

    def size(self) -> int:
        """The file's size in bytes."""
        return int(self.fs.get_file_info(self.path).size)

    def open(self) -> pa.NativeFile:
        """The file opened for random-access reading (close it, or use ``with``)."""
        return self.fs.open_input_file(self.path)


def is_uri(path: str | os.PathLike[str]) -> bool:
    """True for ``scheme://...`` (``file://`` included), False for a plain local path."""
    return "://" in os.fspath(path)


def uri_file_system(uri: str) -> tuple[pafs.FileSystem, str] | None:
    """pyarrow's file system and path for ``uri``; None for a scheme pyarrow does not
    know (Spark may: ``s3a://``, ``wasbs://``). OSError naming the URI if pyarrow knows
    the scheme but cannot reach it."""
    try:
        return pafs.FileSystem.from_uri(uri)
    except pa.ArrowInvalid as err:
        if "Unrecognized filesystem type" in str(err):
            return None
        raise OSError(f"path {uri!r}: {err}") from None
    except (pa.ArrowException, OSError) as err:
        raise OSError(f"path {uri!r}: {err}") from None


def as_trace_file(path: str | os.PathLike[str] | TraceFile) -> TraceFile:
    """``path`` as a :class:`TraceFile` (a local path, or a URI pyarrow knows)."""
    if isinstance(path, TraceFile):
        return path
    text = os.fspath(path)
    if not is_uri(text):
        return TraceFile(pafs.LocalFileSystem(), os.path.abspath(text), str(Path(text)))
    located = uri_file_system(text)
    if located is None:
        raise ValueError(f"path {text!r}: pyarrow has no file system for this scheme")
    fs, inner = located
    return TraceFile(fs, inner, unquote(text.split("?", 1)[0]))


def trace_format(path: str | os.PathLike[str] | TraceFile) -> Literal["csv", "parquet"]:
    """The format of a trace file by its suffix; ValueError for another suffix."""
    suffix = (path.suffix if isinstance(path, TraceFile) else Path(path).suffix).lower()
    if suffix not in TRACE_SUFFIXES:
        raise ValueError(
            f"path {str(path)!r}: unknown trace format {suffix!r} (use .parquet, .pq or .csv)"
        )
    return "csv" if suffix == ".csv" else "parquet"


def _is_trace_name(name: str) -> bool:
    return PurePosixPath(name).suffix.lower() in TRACE_SUFFIXES and not name.startswith((".", "_"))


def trace_files(directory: Path) -> list[Path]:
    """The trace files of the local ``directory`` in reading (name) order;
    FileNotFoundError if none."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and _is_trace_name(p.name))
    if not files:
        raise _no_files(str(directory))
    return files


def _no_files(shown: str) -> FileNotFoundError:
    return FileNotFoundError(f"directory {shown!r} holds no trace files (.parquet, .pq, .csv)")


def list_trace_files(path: str | os.PathLike[str]) -> list[TraceFile]:
    """The files of a trace path (a file, or a directory read in name order with hidden
    ``.``/``_`` names skipped), local or a URI pyarrow knows. Errors, in this order:
    ValueError for an unknown suffix or scheme, FileNotFoundError for a missing path or
    a directory with no trace files. Lists; reads no file."""
    text = os.fspath(path)
    top = as_trace_file(text)
    info = top.fs.get_file_info(top.path)
    if info.type != pafs.FileType.Directory:
        trace_format(top)  # an unknown suffix first
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"no such file or directory: {top.shown!r}")
        return [top]
    if not is_uri(text):
        return [as_trace_file(p) for p in trace_files(Path(text))]
    base = top.shown.rstrip("/")
    found = top.fs.get_file_info(pafs.FileSelector(top.path, recursive=False))
    files = sorted(
        (i for i in found if i.type == pafs.FileType.File and _is_trace_name(i.base_name)),
        key=lambda i: i.base_name,
    )
    if not files:
        raise _no_files(top.shown)
    return [TraceFile(top.fs, i.path, f"{base}/{i.base_name}") for i in files]
