"""WriteBatchesToText: a streaming text sink whose files a runner can name by micro-batch.

``pcoll | WriteBatchesToText(directory)`` writes every element as one line (``str`` of
it; ``bytes`` decoded as UTF-8). Each bundle's lines go to one file, written atomically
(a temporary file renamed into place).

- **On a micro-batch runner** that announces its batch (PySparkRunner ``--streaming``
  calls :func:`in_batch` around each bundle), a bundle's file is
  ``directory/.staging/batch-NNNNNNNNN/NAME`` with a name fixed by the runner (stage and
  partition), so a retried task rewrites the same file; the runner then commits the batch
  as ``directory/batch-NNNNNNNNN/`` in one atomic step. A replayed batch (after a restart
  from a checkpoint) replaces its directory instead of adding a second copy.
- **On any other runner** a bundle's file is ``directory/bundle-<uuid>.txt``: each
  bundle once, but a retried bundle may leave a second file (at-least-once).

The transform carries :data:`URN` and its directory in the pipeline proto, so a runner can
find its sinks (the expansion, one ParDo, is what runs).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import apache_beam as beam

from theory.data.io import write_file_atomically

__all__ = ["STAGING", "URN", "WriteBatchesToText", "batch_directory", "in_batch", "sink_directory"]

#: The URN of the composite in a pipeline proto; its payload is JSON ``{"directory": ...}``.
URN: Final[str] = "beam:transform:dataflow_watermarks:write_batches_to_text:v1"

#: The sub-directory of a sink's directory holding uncommitted batches.
STAGING: Final[str] = ".staging"


def batch_directory(number: int) -> str:
    """The name of batch ``number``'s directory (committed or staged)."""
    return f"batch-{number:09d}"


@dataclass
class _Batch:
    number: int
    name: str  # the bundle files' stem, unique per task of the batch
    bundles: int = field(default=0)


_CURRENT = threading.local()


@contextmanager
def in_batch(number: int, name: str) -> Iterator[None]:
    """Announce, for the bundles run in this thread inside the block, that they belong to
    micro-batch ``number`` and that their files are named ``NAME-<bundle index>.txt``
    (``name`` fixed by the runner for this task: the same on a retry)."""
    previous = getattr(_CURRENT, "batch", None)
    _CURRENT.batch = _Batch(number, name)
    try:
        yield
    finally:
        _CURRENT.batch = previous


def sink_directory(payload: bytes) -> str:
    """The directory of a sink, from its proto payload."""
    return str(json.loads(payload.decode("utf-8"))["directory"])


class _WriteBundles(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self._directory = directory

    def start_bundle(self) -> None:
        self._lines: list[str] = []

    def process(self, element: Any) -> Iterator[None]:
        if isinstance(element, bytes):
            element = element.decode("utf-8")
        self._lines.append(element if isinstance(element, str) else str(element))
        return iter(())

    def finish_bundle(self) -> None:
        if not self._lines:
            return
        batch: _Batch | None = getattr(_CURRENT, "batch", None)
        if batch is None:
            target = os.path.join(self._directory, f"bundle-{uuid.uuid4().hex}.txt")
        else:
            folder = os.path.join(self._directory, STAGING, batch_directory(batch.number))
            target = os.path.join(folder, f"{batch.name}-{batch.bundles:04d}.txt")
            batch.bundles += 1
        os.makedirs(os.path.dirname(target), exist_ok=True)
        write_file_atomically(target, "".join(line + "\n" for line in self._lines).encode("utf-8"))


class WriteBatchesToText(beam.PTransform):
    """Write each element as a line of text under ``directory`` (see the module docstring)."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        if not isinstance(directory, str) or not directory:
            raise ValueError(
                f"WriteBatchesToText: directory must be a non-empty str, got {directory!r}"
            )
        self.directory = os.path.abspath(directory)

    def expand(self, pcoll: Any) -> Any:
        return pcoll | "WriteBundles" >> beam.ParDo(_WriteBundles(self.directory))

    def to_runner_api_parameter(self, unused_context: Any) -> tuple[str, bytes]:
        return URN, json.dumps({"directory": self.directory}).encode("utf-8")
