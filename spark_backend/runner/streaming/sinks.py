"""Driver side of :class:`beam_pipelines.sinks.WriteBatchesToText` in streaming: each
batch's output under the batch's id, committed atomically.

Around every bundle of a batch the stage task announces the batch and a file name fixed
by the stage and the Spark partition (:func:`beam_pipelines.sinks.in_batch`), so the sink
writes ``DIR/.staging/batch-N/<stage>-<partition>-<bundle>.txt`` and a retried task
rewrites the same files. Before batch ``N`` runs, its staging directory is emptied (what
a killed run left); after its Spark work, :meth:`BatchSinks.commit` moves the staged
files into ``DIR/batch-N/`` through :func:`spark_backend.cli.atomic.atomic_directory`, which
replaces a directory a replayed batch had already committed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from apache_beam.portability.api import beam_runner_api_pb2 as pb

from beam_pipelines.sinks import STAGING, URN, batch_directory, in_batch, sink_directory
from spark_backend.cli.atomic import atomic_directory

__all__ = ["BatchSinks"]


class BatchSinks:
    """The pipeline's batch sinks (their directories)."""

    def __init__(self, pipeline: pb.Pipeline) -> None:
        self.directories = tuple(
            sorted(
                {
                    sink_directory(t.spec.payload)
                    for t in pipeline.components.transforms.values()
                    if t.spec.urn == URN
                }
            )
        )

    def __bool__(self) -> bool:
        return bool(self.directories)

    def begin(self, number: int) -> None:
        """Empty batch ``number``'s staging directories (a killed run's leftovers)."""
        for directory in self.directories:
            shutil.rmtree(_staged(directory, number), ignore_errors=True)

    def task(self, number: int, stage: str, task: Callable[[Iterable[Any]], Iterable[Any]]) -> Any:
        """``task`` of a stage (one partition's records) for ``mapPartitionsWithIndex``,
        announcing batch ``number`` to the sinks in it."""
        name = hashlib.sha1(stage.encode("utf-8")).hexdigest()[:12]
        return functools.partial(_announced, number, name, task)

    def keyed_task(
        self, number: int, stage: str, task: Callable[[int, Iterable[Any]], Iterable[Any]]
    ) -> Any:
        """:meth:`task` for a task that takes the partition's index too (a stateful
        stage's, whose state is kept by partition)."""
        name = hashlib.sha1(stage.encode("utf-8")).hexdigest()[:12]
        return functools.partial(_announced_keyed, number, name, task)

    def commit(self, number: int) -> None:
        """Move batch ``number``'s staged files into ``DIR/batch-N/``, atomically."""
        for directory in self.directories:
            staged = _staged(directory, number)
            if not staged.is_dir():
                continue
            with atomic_directory(Path(directory) / batch_directory(number)) as tmp:
                for path in staged.iterdir():
                    if not path.name.startswith("."):
                        os.rename(path, tmp / path.name)
            shutil.rmtree(staged, ignore_errors=True)


def _staged(directory: str, number: int) -> Path:
    return Path(directory) / STAGING / batch_directory(number)


def _announced(
    number: int,
    stage: str,
    task: Callable[[Iterable[Any]], Iterable[Any]],
    index: int,
    records: Iterable[Any],
) -> Iterator[Any]:
    with in_batch(number, f"{stage}-{index:05d}"):
        yield from task(records)


def _announced_keyed(
    number: int,
    stage: str,
    task: Callable[[int, Iterable[Any]], Iterable[Any]],
    index: int,
    records: Iterable[Any],
) -> Iterator[Any]:
    with in_batch(number, f"{stage}-{index:05d}"):
        yield from task(index, records)
