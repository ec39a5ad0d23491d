"""PySparkPipelineResult: the state, metrics and control of a pipeline running on Spark.

The pipeline runs in a driver thread under its own Spark job group, so that
:meth:`cancel` can stop its Spark jobs and :meth:`wait_until_finish` can time out.
``wait_until_finish`` re-raises the failure of a failed run (as Beam's runners do).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiMetrics
from apache_beam.runners.runner import PipelineResult, PipelineState

__all__ = ["PySparkPipelineResult"]


class PySparkPipelineResult(PipelineResult):
    """The result of :class:`~spark_backend.runner.PySparkRunner` ``run_pipeline``."""

    def __init__(
        self, work: Callable[[], Mapping[str, list[Any]]], cancel: Callable[[], None]
    ) -> None:
        super().__init__(PipelineState.RUNNING)
        self._work = work
        self._cancel_jobs = cancel
        self._error: BaseException | None = None
        self._infos: Mapping[str, list[Any]] = {}
        self._lock = threading.Lock()
        #: Which path grouped each GroupByKey, by label (see ``Plan.paths``).
        self.paths: dict[str, str] = {}
        #: The GroupByKeys whose shuffle carried columns, by label (``Plan.columnar``).
        self.columnar: frozenset[str] = frozenset()
        #: Which path ran each fused stage, by stage name (see ``Plan.stage_paths``).
        self.stage_paths: dict[str, str] = {}
        #: The names of the stages that ran in the driver process, not as Spark jobs
        #: (filled as the run goes; see :mod:`spark_backend.runner.batch.driver_stages`).
        self.driver_stages: list[str] = []
        #: The stages begun on the driver whose outputs passed the runner's
        #: ``driver_output_bytes``: stopped there and run as Spark jobs.
        self.moved_stages: list[str] = []
        self._spark_started: Callable[[], bool] = lambda: True
        self._thread = threading.Thread(target=self._run, name="PySparkRunner", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            infos = self._work()
        except BaseException as err:  # reported by wait_until_finish
            with self._lock:
                self._error = err
                if self._state != PipelineState.CANCELLED:
                    self._state = PipelineState.FAILED
            return
        with self._lock:
            self._infos = infos
            if self._state != PipelineState.CANCELLED:
                self._state = PipelineState.DONE

    @property
    def spark_started(self) -> bool:
        """Whether the run has used a SparkContext so far (one whose stages all ran in
        the driver has not, and started no JVM)."""
        return self._spark_started()

    @property
    def state(self) -> Any:
        """RUNNING, then DONE, FAILED or CANCELLED."""
        with self._lock:
            return self._state

    def wait_until_finish(self, duration: int | None = None) -> Any:
        """Block until the run ends or ``duration`` ms pass; the state then (None on
        timeout). A failed run raises its error here."""
        self._thread.join(None if duration is None else duration / 1000.0)
        if self._thread.is_alive():
            return None
        if self._error is not None and self._state == PipelineState.FAILED:
            raise self._error
        return self.state

    def cancel(self) -> Any:
        """Cancel the run's Spark jobs; the state is CANCELLED unless it had ended."""
        with self._lock:
            if PipelineState.is_terminal(self._state):
                return self._state
            self._state = PipelineState.CANCELLED
        self._cancel_jobs()
        self._thread.join()
        return self.state

    def metrics(self) -> FnApiMetrics:
        """User counters, distributions and gauges, queryable with a MetricsFilter."""
        return FnApiMetrics(dict(self._infos), user_metrics_only=True)

    def monitoring_metrics(self) -> FnApiMetrics:
        """All metrics, Beam's own included."""
        return FnApiMetrics(dict(self._infos), user_metrics_only=False)
