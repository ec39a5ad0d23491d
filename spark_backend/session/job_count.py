"""The Spark jobs, stages and shuffles one run makes, each job named by its purpose.

A :class:`JobCount` puts the run's jobs in a job group of their own; :meth:`JobCount.purpose`
(or :func:`name_jobs`, for code that does not hold the count) names the jobs started
from then on (Spark's job description, shown in its UI and event log), and a debug line
is logged per job (what it was for, its stages run and its shuffles); the
:meth:`JobCount.tally` comes from Spark's ``statusTracker``. A stage Spark skipped (its
shuffle output already there) is not counted; a shuffle is a stage run that wrote
shuffle output (a shuffle map stage, as its own job too under adaptive execution).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

__all__ = ["JobCount", "JobTally", "name_jobs"]

LOG = logging.getLogger("watermarks")

_GROUPS = itertools.count()
_open = threading.local()  # this thread's open counts (``counts``: innermost last)


def name_jobs(spark: Any, text: str) -> None:
    """The jobs this thread starts from now on are for ``text``: named in the innermost
    open :class:`JobCount` of the SparkContext of ``spark`` (a SparkContext, session or
    DataFrame), else only described; nothing on Spark Connect (no SparkContext)."""
    sc = _context(spark)
    if sc is None:
        return
    counts = [c for c in getattr(_open, "counts", []) if c.sc is sc]
    if counts:
        counts[-1].name(text)
    else:
        sc.setJobDescription(text)


def _context(spark: Any) -> Any:
    """The SparkContext of a SparkContext, session or DataFrame (None: Spark Connect)."""
    if hasattr(spark, "statusTracker"):
        return spark
    session = getattr(spark, "sparkSession", spark)
    try:
        return session.sparkContext
    except Exception:  # Spark Connect's sessions raise: they have no SparkContext
        return None


class JobTally(NamedTuple):
    """How many Spark jobs ran, how many stages they ran (skipped ones left out) and how
    many of those were shuffle map stages."""

    jobs: int
    stages: int
    shuffles: int

    def __str__(self) -> str:
        return f"{self.jobs} Spark jobs, {self.stages} stages, {self.shuffles} shuffles"


class JobCount:
    """A run's Spark jobs (in job group ``<what>-<pid>-<n>``, set for this thread while
    the count is open: use it as a context manager); a count opened inside another on
    the same SparkContext has its own group, and its jobs count in both."""

    def __init__(self, spark: Any, what: str) -> None:
        """``spark``: a SparkContext, session or DataFrame (on Spark Connect, which has no
        SparkContext, the count does nothing and counts nothing)."""
        self.sc, self.what = _context(spark), what
        self.group = f"{what}-{os.getpid()}-{next(_GROUPS)}"
        self._saved: tuple[Any, Any] = (None, None)
        self._current: str | None = None
        self._before: set[int] = set()
        self._inner: list[JobCount] = []  # counts opened inside this one: theirs are its

    def __enter__(self) -> JobCount:
        if self.sc is None:
            return self
        self._saved = (
            self.sc.getLocalProperty("spark.jobGroup.id"),
            self.sc.getLocalProperty("spark.job.description"),
        )
        outer = [c for c in getattr(_open, "counts", []) if c.sc is self.sc]
        if outer:
            outer[-1]._inner.append(self)
        self.sc.setJobGroup(self.group, self.what)
        _open.counts = [*getattr(_open, "counts", []), self]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sc is None:
            return
        self._close()
        _open.counts = [c for c in getattr(_open, "counts", []) if c is not self]
        group, description = self._saved
        self.sc.setLocalProperty("spark.jobGroup.id", group)
        self.sc.setLocalProperty("spark.job.description", description)

    def _jobs(self) -> list[int]:
        if self.sc is None:
            return []
        own = set(self.sc.statusTracker().getJobIdsForGroup(self.group))
        return sorted(own.union(*(c._jobs() for c in self._inner)))

    def name(self, text: str) -> None:
        """The jobs started from now on are for ``text`` (described ``<what>: <text>``)."""
        if self.sc is None:
            return
        self._close()
        self._current, self._before = text, set(self._jobs())
        self.sc.setJobDescription(f"{self.what}: {text}")

    @contextmanager
    def purpose(self, text: str) -> Iterator[None]:
        """The jobs started inside are for ``text``."""
        self.name(text)
        try:
            yield
        finally:
            if self.sc is not None:
                self._close()
                self.sc.setJobDescription(self.what)

    def _close(self) -> None:
        """A debug line for each job started since :meth:`name`."""
        if self._current is None:
            return
        for job in sorted(set(self._jobs()) - self._before):
            stages, shuffles = self._stages(job)
            LOG.debug("Spark job %d (%s): %d stages run, %d shuffles", job, self._current,
                      len(stages), len(shuffles))  # fmt: skip
        self._current = None

    def _stages(self, job: int) -> tuple[set[int], set[int]]:
        """The stages of ``job`` that ran, and those of them that wrote shuffle output."""
        tracker = self.sc.statusTracker()
        info = tracker.getJobInfo(job)
        if info is None:
            return set(), set()
        ids = list(info.stageIds)
        ran = set()
        for sid in ids:
            stage = tracker.getStageInfo(sid)
            if stage is not None and (stage.numCompletedTasks or stage.numActiveTasks
                                      or stage.numFailedTasks):  # fmt: skip
                ran.add(sid)
        last = max(ids, default=None)
        return ran, {s for s in ran if self._shuffled(s, s != last)}

    def _shuffled(self, stage: int, guess: bool) -> bool:
        """Whether ``stage`` wrote shuffle output (Spark's status store; ``guess`` where
        the store has no longer the stage: whether it was not its job's last stage)."""
        try:
            data = self.sc._jsc.sc().statusStore().lastStageAttempt(stage)
            return bool(data.shuffleWriteRecords() > 0 or data.shuffleWriteBytes() > 0)
        except Exception:  # (py4j's error: a stage the store dropped)
            return guess

    def tally(self) -> JobTally:
        """The jobs of the run so far, the stages they ran and the shuffles among those
        (a stage shared by two jobs counted once)."""
        jobs = self._jobs()
        stages: set[int] = set()
        shuffles: set[int] = set()
        for job in jobs:
            ran, shuffled = self._stages(job)
            stages |= ran
            shuffles |= shuffled
        return JobTally(len(jobs), len(stages), len(shuffles))

    def log(self) -> JobTally:
        """The tally, logged as one debug line."""
        tally = self.tally()
        LOG.debug("%s: %s", self.what, tally)
        return tally
