"""A GroupByKey's values past a size, spilled to a task's local file and read back in pages.

Beam's state-backed iterable coder (``beam:coder:state_backed_iterable:v1``, payload
the threshold in bytes) writes an iterable's first values in the element and hands the
rest to the coder context's ``iterable_state_write``; the SDK reads them back through
the state API, a ``runner`` state key holding the token, page by page as the DoFn
iterates. :class:`GroupSpill` is that writer on the grouping side: it appends the
values to one file per partition (:func:`tempfile.mkstemp`), in pages of whole
elements of about the coder's threshold (:func:`page_bytes`), each page prefixed by
its length (4 bytes, big endian), and returns a token naming the file and the byte
range. :func:`read_page` is the reading side, for the state servicer of
:mod:`~spark_backend.runner.stages.bundles` in the task that consumes the group (the
same Spark task, on the same host): one page per state request, the continuation token
the next page's offset. A group is never held whole: it is decoded, written and read
one value, one page, at a time.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import struct
import tempfile
from collections.abc import Iterable
from typing import Any, Final

from apache_beam.coders.coder_impl import create_OutputStream

__all__ = [
    "MIN_PAGE_BYTES",
    "PAGE_BYTES",
    "TOKEN_PREFIX",
    "GroupSpill",
    "page_bytes",
    "read_page",
    "remove_spill",
]

#: The most and the least encoded bytes a page holds, about (a page ends at a value's end).
PAGE_BYTES: Final[int] = 1 << 20
MIN_PAGE_BYTES: Final[int] = 4 << 10

#: Every token of a spilled group starts with these bytes.
TOKEN_PREFIX: Final[bytes] = b"spilled-group\0"

_LENGTH = struct.Struct(">I")
_WRITTEN: set[str] = set()  # this process's spill files, removed at exit if still there


def _remove_written() -> None:
    for path in list(_WRITTEN):
        remove_spill(path)


atexit.register(_remove_written)


def page_bytes(threshold: int) -> int:
    """The page size for a coder threshold of ``threshold`` bytes: the threshold, within
    :data:`MIN_PAGE_BYTES` and :data:`PAGE_BYTES`."""
    return min(PAGE_BYTES, max(MIN_PAGE_BYTES, threshold))


class GroupSpill:
    """The spill file of one partition's groups, pages of about ``page_bytes``; ``write``
    is Beam's ``iterable_state_write``."""

    def __init__(self, page_bytes: int = PAGE_BYTES) -> None:
        self._file: Any = None
        self._page_bytes = page_bytes
        self.path = ""

    def write(self, values: Iterable[Any], element_impl: Any) -> bytes:
        """Append ``values`` (encoded nested with ``element_impl``) as pages; their token."""
        if self._file is None:
            fd, self.path = tempfile.mkstemp(prefix="beam-group-", suffix=".spill")
            _WRITTEN.add(self.path)
            self._file = os.fdopen(fd, "wb")
        start = self._file.tell()
        out = create_OutputStream()
        for value in values:
            element_impl.encode_to_stream(value, out, True)
            if out.size() >= self._page_bytes:
                self._page(out.get())
                out = create_OutputStream()
        if out.size():
            self._page(out.get())
        self._file.flush()
        end = self._file.tell()
        return TOKEN_PREFIX + b"%s\0%d\0%d" % (os.fsencode(self.path), start, end)

    def _page(self, data: bytes) -> None:
        self._file.write(_LENGTH.pack(len(data)))
        self._file.write(data)

    def close(self) -> None:
        """Close the file (it stays for the reader)."""
        if self._file is not None:
            self._file.close()


def read_page(token: bytes, continuation: bytes | None) -> tuple[bytes, bytes | None, str]:
    """The page of the spilled group ``token`` at ``continuation`` (its first when
    None): ``(encoded values, the next page's continuation or None, file path)``."""
    path, start, end = token[len(TOKEN_PREFIX) :].split(b"\0")
    offset = int(continuation) if continuation else int(start)
    stop = int(end)
    if offset >= stop:
        return b"", None, os.fsdecode(path)
    with open(path, "rb") as f:
        f.seek(offset)
        (length,) = _LENGTH.unpack(f.read(_LENGTH.size))
        data = f.read(length)
    if len(data) != length:
        raise OSError(f"spilled group {os.fsdecode(path)}: page at {offset} is cut short")
    after = offset + _LENGTH.size + length
    return data, (b"%d" % after if after < stop else None), os.fsdecode(path)


def remove_spill(path: str) -> None:
    """Remove a spill file (done with it, or never read)."""
    _WRITTEN.discard(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
