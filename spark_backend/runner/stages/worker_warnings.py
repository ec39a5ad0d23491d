"""Task side: the warnings Beam's SDK worker raises at run time, kept for the driver.

Beam's worker warns ``InefficientExecutionWarning`` (``runners/worker/operations.py``)
when a batched DoFn's input must be rebatched from its producer's batch type. In a
Spark task that warning would stay in the Python worker's log; :func:`kept_warnings`
keeps each distinct message instead, the partition's summary carries them, and the
driver warns each one again (:func:`warn_again`) with the same category, as Beam's
worker raises it in FnApiRunner's process. In the driver process (a stage run there)
Beam's warning is raised where it is and nothing is kept. Other warnings are shown as
they would be.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from apache_beam.runners.worker.operations import InefficientExecutionWarning

__all__ = ["kept_warnings", "warn_again"]


def _in_spark_task() -> bool:
    from pyspark import TaskContext

    return TaskContext.get() is not None


@contextmanager
def kept_warnings(into: set[str]) -> Iterator[None]:
    """In a Spark task, add to ``into`` the message of each InefficientExecutionWarning
    raised in the block; elsewhere, do nothing. Not for concurrent threads (a Spark
    task runs its bundles in one)."""
    if not _in_spark_task():
        yield
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InefficientExecutionWarning)
        yield
    for w in caught:
        if issubclass(w.category, InefficientExecutionWarning):
            into.add(str(w.message))
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


def warn_again(messages: Iterable[str]) -> None:
    """Warn each of ``messages`` (from the tasks' summaries) once, in this process."""
    for message in sorted(set(messages)):
        warnings.warn(message, InefficientExecutionWarning, stacklevel=2)
