"""Task side: a partition's ``(key, value)`` byte pairs gathered by key, in bounded memory.

A GroupByKey whose values go by state-backed iterables must hand each key's values to
the coder as one stream, but a partition's pairs arrive in shuffle order, keys
interleaved. :func:`by_key` gathers them without sorting: values are buffered per key
until the buffer holds :data:`BUFFER_BYTES`, then every buffered key's values are
appended to one anonymous scratch file (:func:`tempfile.TemporaryFile` in Spark's
local directory, :func:`~spark_backend.runner.batch.spill.spill_directory`; gone when
closed) as one contiguous segment per key, each value prefixed by its length (4 bytes,
big endian). The groups are then read back a key at a time, in the order the keys first
came, a segment at a time: at most one buffer and one segment are held, never a group.
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Generator, Iterable, Iterator
from typing import Any, Final

from spark_backend.runner.batch.spill import spill_directory

__all__ = ["BUFFER_BYTES", "by_key"]

#: Values buffered in memory (encoded bytes) before they are appended to the file.
BUFFER_BYTES: Final[int] = 32 << 20

_LENGTH = struct.Struct(">I")


def by_key(
    pairs: Iterable[tuple[bytes, bytes]], buffer_bytes: int = BUFFER_BYTES
) -> Generator[tuple[bytes, Iterator[bytes]], None, None]:
    """``(key, values)`` for each key of ``pairs``, keys in order of first arrival and
    each key's values in arrival order; each ``values`` must be read before the next
    group is taken. The scratch file, if any, is closed (removed) when the groups are
    done or the generator is closed."""
    buffered: dict[bytes, list[bytes]] = {}
    segments: dict[bytes, list[tuple[int, int]]] = {}
    size = 0
    scratch: Any = None
    try:
        for key, value in pairs:
            values = buffered.get(key)
            if values is None:
                values = buffered[key] = []
                segments.setdefault(key, [])
            values.append(value)
            size += len(value)
            if size >= buffer_bytes:
                if scratch is None:  # closed in the finally clause
                    scratch = tempfile.TemporaryFile(dir=spill_directory())  # noqa: SIM115
                _flush(buffered, segments, scratch)
                size = 0
        for key, runs in segments.items():
            yield key, _values(scratch, runs, buffered.pop(key, ()))
    finally:
        if scratch is not None:
            scratch.close()


def _flush(
    buffered: dict[bytes, list[bytes]], segments: dict[bytes, list[tuple[int, int]]], file: Any
) -> None:
    """Append every buffered key's values to ``file`` as one segment each; empty the buffer."""
    file.seek(0, 2)
    for key, values in buffered.items():
        data = b"".join(_LENGTH.pack(len(v)) + v for v in values)
        segments[key].append((file.tell(), len(data)))
        file.write(data)
    buffered.clear()


def _values(file: Any, runs: list[tuple[int, int]], tail: Iterable[bytes]) -> Iterator[bytes]:
    """A key's values: its segments in ``file``, then those still buffered."""
    for offset, length in runs:
        file.seek(offset)
        data = file.read(length)
        if len(data) != length:
            raise OSError(f"a GroupByKey's scratch file: segment at {offset} is cut short")
        position = 0
        while position < length:
            (size,) = _LENGTH.unpack_from(data, position)
            position += _LENGTH.size
            yield data[position : position + size]
            position += size
        del data
    yield from tail
