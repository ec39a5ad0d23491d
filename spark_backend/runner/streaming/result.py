"""StreamingPipelineResult: a streaming run's result, with its watermarks and why they wait.

Besides Beam's ``PipelineResult`` (state, ``wait_until_finish``, ``cancel``, metrics, as
:class:`~spark_backend.runner.batch.result.PySparkPipelineResult`), it offers:

- :meth:`watermarks`: per transform label, the input and output watermark and each named
  hold as :class:`theory.series.StepSeries` over processing time (µs), or over the
  batch number; shown as a table (:class:`~.observe.WatermarkTable`);
- :meth:`why`: which hold, or which input, holds a transform's (or a composite's) output
  watermark back at a processing time, with the late elements dropped on the way;
- :attr:`stalled` and :attr:`batches`.

``cancel`` stops the run at the next batch boundary (the batch running finishes);
``drain`` stops it there too, after one last batch that fires every pending window.
``wait_until_finish(duration)`` returns None when the run is still going after
``duration`` ms (it goes on).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from apache_beam.runners.runner import PipelineState

from beam_pipelines.metrics import dropped_due_to_lateness
from spark_backend.runner.batch.result import PySparkPipelineResult
from spark_backend.runner.streaming.driver import StreamingDriver
from spark_backend.runner.streaming.observe import WatermarkTable, Why, resolve_label
from spark_backend.runner.streaming.watermarks import OUTPUT

__all__ = ["StreamingPipelineResult"]


class StreamingPipelineResult(PySparkPipelineResult):
    """The result of a ``--streaming`` run of :class:`~spark_backend.runner.PySparkRunner`."""

    def __init__(
        self,
        driver: StreamingDriver,
        job_group: str,
        composites: Mapping[str, tuple[str, ...]] | None = None,
        grouping_steps: Mapping[str, str] | None = None,
    ) -> None:
        self._driver = driver
        self._composites = dict(composites or {})
        self._grouping_steps = dict(grouping_steps or {})

        def work() -> Mapping[str, list[Any]]:
            driver.run(job_group)
            return driver.monitoring_infos

        super().__init__(work, driver.stop)

    def cancel(self) -> Any:
        """Stop at the next batch boundary; the state is CANCELLED unless it had ended."""
        return super().cancel()

    def drain(self) -> Any:
        """Drain at the next batch boundary: the sources read no more, every watermark
        goes to ``MAX_TIMESTAMP`` in one last batch (every pending window fires; each
        unbounded read's residuals run once more, truncated by the DoFn's ``truncate``,
        and end), then the run ends; returns the state then, DRAINED unless it had ended
        already."""
        self._driver.stop(drain=True)
        self._thread.join()
        with self._lock:
            if self._state == PipelineState.DONE and self._driver.drained:
                self._state = PipelineState.DRAINED
        return self.wait_until_finish()

    def watermarks(self, per_batch: bool = False) -> WatermarkTable:
        """Per transform label: ``"input"``, ``"output"`` and each named hold (µs, a hold
        is ``MAX_TIMESTAMP`` while released), as step series over processing time; with
        ``per_batch``, over the batch number (batches at one test-clock time kept
        apart). Printed (or shown in a notebook) it is a table of the watermarks at the
        end, in ISO-8601 UTC with ``-∞``/``+∞``; ``.at(t)`` shows them at time ``t``."""
        marks = self._driver.watermarks
        return WatermarkTable(
            {label: marks.series(label, per_batch) for label in marks.graph.order}
        )

    def why(self, label: str, at: int) -> Why:
        """The (transform, component) chain holding ``label``'s output watermark at
        processing time ``at`` (µs): from ``label`` upstream to the hold, or the source
        watermark, that sets it. A composite's label (``"Fixed/CombinePerKey(sum)"``)
        stands for its leaf with the lowest output watermark; an unknown one raises
        ``KeyError`` naming close labels. ``.dropped`` (and ``str()``) give the late
        elements each grouping step on the chain dropped by the end of the run
        (``droppedDueToLateness``)."""
        marks = self._driver.watermarks
        leaves = marks.graph.order

        def output_at(leaf: str) -> int:
            return int(marks.series(leaf)[OUTPUT].at(np.asarray([at], np.int64))[0])

        chain = marks.why(resolve_label(label, leaves, self._composites, output_at), at)
        counted = dropped_due_to_lateness(self)
        steps = [self._grouping_steps[leaf] for leaf, _ in chain if leaf in self._grouping_steps]
        return Why(chain, {step: counted.get(step, 0) for step in steps})

    @property
    def stalled(self) -> bool:
        """Whether a GroupByKey's hold or a pending event-time timer kept its output
        watermark below infinity at the end (Beam's direct runner fails with "pipeline
        stall"); processing-time timers pending at the end are dropped, as there."""
        return self._driver.stalled

    @property
    def batches(self) -> int:
        """How many micro-batches ran."""
        return self._driver.batches_run
