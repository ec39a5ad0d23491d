"""Driver side: the SparkContext a batch run starts only when a stage must run on Spark.

A run whose stages all run in the driver (:mod:`.driver_stages`) never starts the JVM.
What the executor needs before then comes from the master URL and the settings the
session would be built with (:func:`~spark_backend.session.session.default_conf` and the
run's ``--spark_conf``), or from a SparkContext already running in the process:

- the default parallelism: ``spark.default.parallelism`` when set (the session sets it
  in local mode), else ``local[N]``/``local[N,F]`` N, ``local[*]`` the CPUs, ``local`` 1;
  a cluster's only once its context is started (asking for it starts it);
- the task attempts: ``local[N,F]`` F, ``local[N]`` 1, a cluster ``spark.task.maxFailures``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from spark_backend.runner.batch.driver_stages import task_attempts, task_slots
from spark_backend.session.session import default_conf, default_master

__all__ = ["LazyContext"]


class LazyContext:
    """A SparkContext obtained by ``start()`` on the first :meth:`get`, once, from any
    thread; ``master`` (None: a running context's, else the session's default) and
    ``conf`` (the run's settings) give what is known before it starts."""

    def __init__(
        self, start: Callable[[], Any], master: str | None, conf: Mapping[str, str]
    ) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._context: Any = None
        running = _running()
        if master is None and running is not None:
            master = str(running.master)
        self._conf = dict(conf)
        chosen = master or self._conf.pop("spark.master", None) or default_master()
        #: The master URL the run uses.
        self.master: str = chosen.strip()

    @classmethod
    def of(cls, spark_context: Any) -> LazyContext:
        """``spark_context``, already started."""
        lazy = cls(lambda: spark_context, str(spark_context.master), {})
        lazy._context = spark_context
        return lazy

    @property
    def started(self) -> bool:
        """Whether the SparkContext has been obtained (never waits for a start)."""
        return self._context is not None

    def get(self) -> Any:
        """The SparkContext, started on the first call."""
        with self._lock:
            if self._context is None:
                self._context = self._start()
            return self._context

    def parallelism(self) -> int:
        """The context's default parallelism (tasks), known without starting it except
        on a cluster."""
        running = self._known()
        if running is not None:
            return max(1, int(running.defaultParallelism))
        setting = self._settings().get("spark.default.parallelism")
        if setting is not None:
            return max(1, int(setting))
        if _is_local(self.master):
            return task_slots(self.master, 1)
        return max(1, int(self.get().defaultParallelism))

    def attempts(self) -> int:
        """How many times Spark attempts a task (:func:`.driver_stages.task_attempts`)."""
        running = self._known()
        if running is not None:
            failures = running._conf.get("spark.task.maxFailures", "4")
            return task_attempts(self.master, {"spark.task.maxFailures": failures})
        return task_attempts(self.master, self._settings())

    def _known(self) -> Any:
        """The started context, else one running in the process (it would be used)."""
        with self._lock:
            if self._context is not None:
                return self._context
        return _running()

    def _settings(self) -> dict[str, str]:
        settings = default_conf(self.master)
        settings.update(self._conf)
        return settings


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _running() -> Any:
    from pyspark import SparkContext

    return SparkContext._active_spark_context
