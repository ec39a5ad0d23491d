"""Task side: a stage's output chunks held in order, spilled to a scratch file past a
byte cap, so a Python worker's memory is bounded by the cap, not by a partition's output.

A lean stage pushes each input chunk through its ops and its sinks collect the output
chunks (encoded bytes, or a columnar GroupByKey's
:class:`~spark_backend.runner.grouping.keyed_columns.KeyedColumns`) until the task hands them to
Spark; one input element may make millions of outputs (a ``Create`` of shards and a
generating ``FlatMap``). A :class:`SpillBuffer` keeps at most ``limit`` bytes of chunks in
memory: past it, the held chunks are pickled to an anonymous scratch file (in Spark's
local directory, ``SPARK_LOCAL_DIRS``, else the temporary folder; deleted when closed),
and :meth:`SpillBuffer.drain` reads them back one at a time, in the order they came.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Iterator
from typing import IO, Any, Final

__all__ = ["SPILL_BYTES", "SpillBuffer", "chunk_bytes", "spill_directory"]

#: The default cap (bytes) on the output chunks one sink of a task holds in memory.
SPILL_BYTES: Final[int] = 32 << 20


def chunk_bytes(chunk: Any) -> int:
    """The size of an output chunk in bytes (``nbytes`` of columns, else ``len``)."""
    size = getattr(chunk, "nbytes", None)
    return int(size) if size is not None else len(chunk)


def spill_directory() -> str:
    """Where a task spills: the first of Spark's local directories (``SPARK_LOCAL_DIRS``,
    which Spark sets for its Python workers), else the temporary folder."""
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return local if local and os.path.isdir(local) else tempfile.gettempdir()


class SpillBuffer:
    """Output chunks in order; at most ``limit`` bytes of them in memory (``limit`` <= 0:
    every chunk goes to the file). ``spilled`` counts the bytes written to the file."""

    def __init__(self, limit: int = SPILL_BYTES) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise TypeError(f"spill limit: expected an int of bytes, got {limit!r}")
        self.limit = limit
        self.spilled = 0
        self._held: list[Any] = []
        self._held_bytes = 0
        self._file: IO[bytes] | None = None
        self._in_file = 0  # chunks in the file, not yet read back

    def __len__(self) -> int:
        return len(self._held) + self._in_file

    def append(self, chunk: Any) -> None:
        """Hold ``chunk`` (after every chunk already held or spilled)."""
        self._held.append(chunk)
        self._held_bytes += chunk_bytes(chunk)
        if self._held_bytes > self.limit:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(  # noqa: SIM115 (closed by close())
                prefix="beam-spill-", dir=spill_directory()
            )
        for chunk in self._held:
            pickle.dump(chunk, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.spilled += self._held_bytes
        self._in_file += len(self._held)
        self._held, self._held_bytes = [], 0

    def drain(self) -> Iterator[Any]:
        """Every chunk held or spilled, in order, each once; the buffer is empty after."""
        if self._file is not None and self._in_file:
            self._file.flush()
            self._file.seek(0)
            for _ in range(self._in_file):
                self._in_file -= 1
                yield pickle.load(self._file)
            self._file.seek(0)
            self._file.truncate()
        held, self._held, self._held_bytes = self._held, [], 0
        yield from held

    def close(self) -> None:
        """Drop what is held and delete the scratch file."""
        self._held, self._held_bytes, self._in_file = [], 0, 0
        if self._file is not None:
            self._file.close()
            self._file = None
