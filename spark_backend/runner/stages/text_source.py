"""The lean text source: ``ReadFromText`` read by byte ranges straight into lean batches.

Beam expands ``ReadFromText`` to ``Read(_TextSource)``, whose expansion (Impulse, a Map
emitting the source, a splittable DoFn reading it) runs on Beam's bundle processor, an
element at a time. :func:`lean_text_reads` makes each such ``Read`` a leaf instead,
when its source is a plain ``_TextSource`` with the default delimiter, stripped
newlines, no escape character and no header matcher; Beam's own phases then turn it
into an ``IMPULSE_READ_TRANSFORM`` fused with its consumers (which Beam's bundle
processor also runs, so a stage that is not lean stays exact). :class:`TextReadOp` is
that transform's lean op: given the impulse it reads the whole source, given
:class:`TextRange` values (the executor's split, :func:`split_ranges`) it reads those.

Line semantics are Beam's (``_TextSource.read_records``): a record is a line, split at
``\\n``, with a ``\\r`` before the ``\\n`` stripped; the last line without a newline is
a record; a file ending with ``\\n`` has no empty record after it; the first
``skip_header_lines`` lines of each file are skipped; a range ``[start, end)`` holds
the records that begin inside it. Compressed files (by extension under ``AUTO``) are
read whole, one range per file, as Beam's source reads them (unsplittable). Each line
is decoded with the source's coder (UTF-8 in one pass for ``StrUtf8Coder``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from apache_beam.coders import coders
from apache_beam.internal import pickler
from apache_beam.io import textio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.utils import proto_utils

from spark_backend.runner.stages.lean.batch import Batch
from spark_backend.runner.stages.lean.pardo import CHUNK, Emit, augmented

__all__ = [
    "TEXT_READ_URN",
    "TextRange",
    "TextReadOp",
    "lean_text_reads",
    "read_range",
    "split_ranges",
    "text_read_op",
    "text_source",
]

#: The transform a leaf ``Read`` becomes in a fused stage (Beam's read_to_impulse).
TEXT_READ_URN: Final[str] = python_urns.IMPULSE_READ_TRANSFORM
#: The smallest byte range a split makes (smaller ones cost more than they save).
MIN_RANGE_BYTES: int = 1 << 16
#: The largest: a task holds one range's records at a time (memory stays bounded).
MAX_RANGE_BYTES: int = 64 << 20
_PICKLED_SOURCE: Final[str] = python_urns.PICKLED_SOURCE


@dataclass(frozen=True)
class TextRange:
    """Records of ``path`` that begin in ``[start, end)`` bytes (``end`` -1: to the end
    of the file, as for a compressed file), read with ``compression`` (resolved)."""

    path: str
    start: int
    end: int
    compression: str


def text_source(source: Any) -> str:
    """Empty if ``source`` is a ``_TextSource`` the lean reader reads exactly, else why
    not (Beam's own reader then runs it)."""
    if type(source) is not textio._TextSource:
        return f"{type(source).__name__} is not a plain _TextSource"
    if source._delimiter is not None or source._escapechar is not None:
        return "a custom delimiter or escape character"
    if not source._strip_trailing_newlines:
        return "strip_trailing_newlines=False"
    if source._header_matcher is not None or source._header_processor is not None:
        return "a header matcher"
    if not source._pattern.is_accessible():
        return "a runtime file pattern"
    return ""


def _read_source(transform: pb.PTransform) -> Any:
    """The BoundedSource of a READ ``transform``, or None if it is not a pickled one."""
    payload = proto_utils.parse_Bytes(transform.spec.payload, pb.ReadPayload)
    if payload.source.urn != _PICKLED_SOURCE:
        return None
    return pickler.loads(payload.source.payload)


def lean_text_reads(pipeline: pb.Pipeline, keep: frozenset[str] = frozenset()) -> pb.Pipeline:
    """``pipeline`` with every ``Read`` of a lean-readable text source made a leaf (its
    Impulse/EmitSource/SDF expansion removed), except those named in ``keep`` (their
    stage is not lean, and Beam's splittable read spreads them better); other
    transforms are untouched."""
    pipeline = pb.Pipeline.FromString(pipeline.SerializeToString())
    transforms = pipeline.components.transforms
    for tid in list(transforms):
        if tid not in transforms:
            continue
        t = transforms[tid]
        if t.spec.urn != common_urns.deprecated_primitives.READ.urn or not t.subtransforms:
            continue
        if t.unique_name in keep:
            continue
        source = _read_source(t)
        if source is None or text_source(source):
            continue
        read_outputs = set(t.outputs.values())
        for sub in _descendants(transforms, tid):
            for pcoll in transforms[sub].outputs.values():
                if pcoll not in read_outputs:
                    pipeline.components.pcollections.pop(pcoll, None)
            del transforms[sub]
        del t.subtransforms[:]
    return pipeline


def _descendants(transforms: Any, tid: str) -> list[str]:
    found: list[str] = []
    for sub in transforms[tid].subtransforms:
        found.extend(_descendants(transforms, sub))
        found.append(sub)
    return found


def _compression(path: str, declared: str) -> str:
    if declared == CompressionTypes.AUTO:
        return CompressionTypes.detect_compression_type(path)
    return declared


def split_ranges(source: Any, parts: int) -> list[TextRange]:
    """The source's files (its glob matched now) as byte ranges: the uncompressed bytes
    in about ``parts`` ranges, each within [:data:`MIN_RANGE_BYTES`,
    :data:`MAX_RANGE_BYTES`]; a compressed file is one range. No file matching raises
    ``FileNotFoundError`` naming the pattern."""
    pattern = source._pattern.get()
    (match,) = FileSystems.match([pattern])
    if not match.metadata_list:
        raise FileNotFoundError(f"ReadFromText: no file matches the pattern {pattern!r}")
    files = sorted((m.path, m.size_in_bytes) for m in match.metadata_list)
    plain = [
        size
        for path, size in files
        if _compression(path, source._compression_type) == CompressionTypes.UNCOMPRESSED
    ]
    wanted = -(-sum(plain) // max(1, parts))
    step = min(MAX_RANGE_BYTES, max(MIN_RANGE_BYTES, wanted))
    ranges: list[TextRange] = []
    for path, size in files:
        compression = _compression(path, source._compression_type)
        if compression != CompressionTypes.UNCOMPRESSED:
            ranges.append(TextRange(path, 0, -1, compression))
            continue
        ranges.extend(
            TextRange(path, start, min(size, start + step), compression)
            for start in range(0, size, step)
        )
    return ranges


def range_bytes(ranges: list[TextRange]) -> int:
    """What reading ``ranges`` holds in memory, about (a compressed file counted 8x)."""
    return sum(r.end - r.start if r.end >= 0 else 8 * _size(r.path) for r in ranges)


def _size(path: str) -> int:
    (match,) = FileSystems.match([path])
    return sum(m.size_in_bytes for m in match.metadata_list)


def _header_end(handle: Any, lines: int) -> int:
    """The byte offset after the first ``lines`` lines (Beam's ``_skip_lines``)."""
    if handle.tell():
        handle.seek(0)
    for _ in range(lines):
        if not handle.readline():
            break
    return int(handle.tell())


def _range_data(r: TextRange, skip_header_lines: int) -> bytes:
    """The bytes of the records that begin in ``r`` (see the module docstring)."""
    with FileSystems.open(r.path, compression_type=r.compression) as handle:
        header = _header_end(handle, skip_header_lines) if skip_header_lines else 0
        if r.end < 0:  # compressed: the whole file after its header
            return bytes(handle.read())
        start = max(r.start, header)
        if start >= r.end:
            return b""
        skip = start > header  # mid-file: the record begun before start is not ours
        handle.seek(start - 1 if skip else start)
        data = bytes(handle.read(r.end - handle.tell()))
        if data and not data.endswith(b"\n"):
            data += bytes(handle.readline())  # the rest of the last record begun in range
    if skip:
        first = data.find(b"\n")
        data = b"" if first < 0 else data[first + 1 :]
    return data


def read_range(r: TextRange, skip_header_lines: int, coder: Any) -> list[Any]:
    """The decoded records of ``r`` (Beam's ``_TextSource`` semantics), in file order."""
    data = _range_data(r, skip_header_lines)
    if not data:
        return []
    utf8 = type(coder) is coders.StrUtf8Coder
    lines: list[Any] = data.decode("utf-8").split("\n") if utf8 else data.split(b"\n")
    last = lines.pop()  # after the last newline: '' or a last line without one
    if b"\r" in data:  # a \r before a newline belongs to the separator
        cr: Any = "\r" if utf8 else b"\r"
        lines = [line[:-1] if line.endswith(cr) else line for line in lines]
    if last:
        lines.append(last)
    return lines if utf8 else [coder.decode(line) for line in lines]


def text_read_op(transform: pb.PTransform, transform_id: str, stage: Any) -> TextReadOp | str:
    """The lean op for an ``IMPULSE_READ_TRANSFORM`` of a lean-readable text source."""
    payload = proto_utils.parse_Bytes(transform.spec.payload, pb.ReadPayload)
    if payload.source.urn != _PICKLED_SOURCE:
        return f"source kind {payload.source.urn}"
    source = pickler.loads(payload.source.payload)
    reason = text_source(source)
    return reason or TextReadOp(transform.unique_name, transform_id, source)


class TextReadOp:
    """Reads a text source: the whole of it for each impulse element, or the
    :class:`TextRange` values it is given; each record takes the timestamp, windows and
    pane of the element that asked for it (the impulse's, as Beam's read gives them)."""

    def __init__(self, label: str, transform_id: str, source: Any) -> None:
        self.label, self.transform_id, self.source = label, transform_id, source

    def setup(self) -> None:
        return None

    def teardown(self) -> None:
        return None

    def ranges(self, parts: int) -> list[TextRange]:
        """The source split into about ``parts`` ranges (:func:`split_ranges`)."""
        return split_ranges(self.source, parts)

    def process(self, batch: Batch, emit: Emit) -> None:
        skip, coder = self.source._skip_header_lines, self.source._coder
        for i, value in enumerate(batch.values):
            ranges = [value] if isinstance(value, TextRange) else self.ranges(1)
            for r in ranges:
                try:
                    records = read_range(r, skip, coder)
                except Exception as exn:
                    raise augmented(exn, self.label) from exn
                for at in range(0, len(records), CHUNK):
                    part = records[at : at + CHUNK]
                    emit(batch.take(np.full(len(part), i, np.int64), part))

    def finish(self, emit: Emit) -> None:
        return None
