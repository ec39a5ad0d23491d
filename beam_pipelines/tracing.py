"""Every transform's input and output watermark while a pipeline runs on Beam's
``BundleBasedDirectRunner``, as theory series.

Beam Python has no public watermark API, so :func:`trace_watermarks` reads the direct
runner's watermark manager, which runs in this process: while the block is active, each
``_TransformWatermarks.refresh`` is recorded (processing time from the runner's clock,
the ``TestClock`` that a ``TestStream`` moves, starting at 0; µs), and so is a snapshot of
every transform before the ``TestStream`` reads each of its events (then the previous
event and every timer it made due have been processed: the runner schedules the read only
when no other work is pending). These are internals, so the installed Beam version is
checked against the ones this module was written for (:data:`SUPPORTED_BEAM`), and a
missing internal fails loudly, naming it.

:class:`WatermarkTrace` gives per transform (by full label): :meth:`~WatermarkTrace.series`
(``StepSeries`` of input and output watermark over processing time, the last value at
each instant), :meth:`~WatermarkTrace.records` (every change, in order) and
:meth:`~WatermarkTrace.after_each_event` (the values after each TestStream event, to
compare with ``theory.run_script``'s per-event arrays).

:func:`run_with_watermarks` runs a pipeline on any runner that shows its watermarks and
returns them under the pipeline's own labels (its runner-API leaf transforms), so that
two runners compare label by label: on the direct runner by tracing (its expansions
mapped back: a ``GroupByKey``'s ``ReifyWindows`` input and ``GroupByWindow`` output, a
``TestStream``'s ``_WatermarkController``, ``label[tag]`` per output tag of several); on
a runner whose result has ``watermarks()`` (PySparkRunner ``--streaming``) from there.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import apache_beam
import numpy as np

from theory.series import StepSeries
from theory.time import MIN_TIMESTAMP

__all__ = [
    "SUPPORTED_BEAM",
    "RunWatermarks",
    "WatermarkRecord",
    "WatermarkTrace",
    "check_beam_version",
    "pipeline_labels",
    "run_with_watermarks",
    "trace_watermarks",
]

#: The Beam versions (major.minor) whose direct-runner internals this module reads.
SUPPORTED_BEAM = ("2.77",)
_LOCK = threading.Lock()


def check_beam_version(version: str | None = None) -> str:
    """The installed (or given) Beam version if :data:`SUPPORTED_BEAM` lists it, else
    ``RuntimeError`` naming it and the internals that tracing depends on."""
    v = apache_beam.__version__ if version is None else version
    if ".".join(v.split(".")[:2]) not in SUPPORTED_BEAM:
        raise RuntimeError(
            f"beam_pipelines.tracing reads the direct runner's internals "
            f"(watermark_manager._TransformWatermarks.refresh, "
            f"transform_evaluator._TestStreamEvaluator.process_element) and knows Beam "
            f"{', '.join(SUPPORTED_BEAM)} only; Apache Beam {v} is installed"
        )
    return v


def _internals() -> tuple[Any, Any]:
    try:
        from apache_beam.runners.direct import transform_evaluator, watermark_manager

        tw = watermark_manager._TransformWatermarks
        ts = transform_evaluator._TestStreamEvaluator
    except (ImportError, AttributeError) as e:
        raise RuntimeError(f"beam_pipelines.tracing: a direct-runner internal is gone: {e}") from e
    for cls, attr in ((tw, "refresh"), (tw, "_clock"), (ts, "process_element")):
        if attr != "_clock" and not callable(getattr(cls, attr, None)):
            raise RuntimeError(f"beam_pipelines.tracing: {cls.__name__}.{attr} is gone")
    return tw, ts


@dataclass(frozen=True)
class WatermarkRecord:
    """One transform's watermarks (µs) at processing time ``processing_time`` (µs)."""

    label: str
    processing_time: int
    input_watermark: int
    output_watermark: int


@dataclass
class WatermarkTrace:
    """What :func:`trace_watermarks` recorded (see the module docstring)."""

    changes: list[WatermarkRecord] = field(default_factory=list)
    #: One dict per TestStream read: label -> (input, output) µs, before the read.
    snapshots: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    #: How many of the TestStream's own set-up events come before the script's.
    set_up: int = 0

    def labels(self) -> list[str]:
        """The full labels of the transforms seen, in order of first record."""
        return list(dict.fromkeys(r.label for r in self.changes))

    def records(self, label: str) -> list[WatermarkRecord]:
        """Every change of ``label``'s watermarks, in order (``KeyError`` if unknown)."""
        out = [r for r in self.changes if r.label == label]
        if not out:
            raise KeyError(f"no transform labelled {label!r}; traced: {self.labels()}")
        return out

    def series(self, label: str) -> tuple[StepSeries, StepSeries]:
        """``label``'s input and output watermark as step series over processing time
        (the last value at each instant)."""
        last: dict[int, tuple[int, int]] = {}
        for r in self.records(label):
            last[r.processing_time] = (r.input_watermark, r.output_watermark)
        t = np.fromiter(last, dtype=np.int64, count=len(last))
        v = np.array(list(last.values()), dtype=np.int64).reshape(-1, 2)
        return (
            StepSeries(t, v[:, 0], initial=MIN_TIMESTAMP),
            StepSeries(t, v[:, 1], initial=MIN_TIMESTAMP),
        )

    def after_each_event(self, label: str, n_events: int) -> list[tuple[int, int]]:
        """``label``'s (input, output) watermark after each of the first ``n_events``
        events of the TestStream (the snapshot before the read of the next one)."""
        out = []
        for u in range(n_events):
            i = self.set_up + u + 1
            if i >= len(self.snapshots):
                raise ValueError(
                    f"only {len(self.snapshots) - self.set_up - 1} TestStream events were traced"
                )
            snap = self.snapshots[i]
            if label not in snap:
                raise KeyError(f"no transform labelled {label!r}; traced: {sorted(snap)}")
            out.append(snap[label])
        return out


#: A run's watermarks: per transform label, its (input, output) watermark as step
#: series over processing time (µs).
RunWatermarks = dict[str, tuple[StepSeries, StepSeries]]

_CONTROLLER = re.compile(r"(.*)/_WatermarkController(\[.*\])?")


def pipeline_labels(trace: WatermarkTrace) -> RunWatermarks:
    """The traced series under the pipeline's own labels (see the module docstring)."""
    inputs: dict[str, StepSeries] = {}
    outputs: dict[str, StepSeries] = {}
    for label in trace.labels():
        input_wm, output_wm = trace.series(label)
        controller = _CONTROLLER.fullmatch(label)
        if controller:  # a TestStream output: its watermark is the controller's output
            name = controller.group(1) + (controller.group(2) or "")
            inputs[name] = outputs[name] = output_wm
        elif label.endswith("/ReifyWindows"):
            inputs[label.rsplit("/", 1)[0]] = input_wm
        elif label.endswith("/GroupByWindow"):
            outputs[label.rsplit("/", 1)[0]] = output_wm
        elif not label.endswith(("/_TestStream", "/GroupByKey")):
            inputs[label], outputs[label] = input_wm, output_wm
    return {label: (inputs[label], outputs[label]) for label in inputs if label in outputs}


def run_with_watermarks(pipeline: Any) -> tuple[Any, RunWatermarks]:
    """Run ``pipeline`` to its end on its runner; its result and every transform's
    watermarks by label (see the module docstring). ``TypeError`` for a runner that
    shows none."""
    from apache_beam.runners.direct.direct_runner import (
        BundleBasedDirectRunner,
        SwitchingDirectRunner,
    )

    if isinstance(pipeline.runner, (BundleBasedDirectRunner, SwitchingDirectRunner)):
        with trace_watermarks() as trace:
            result = pipeline.run()
            result.wait_until_finish()
        return result, pipeline_labels(trace)
    result = pipeline.run()
    result.wait_until_finish()
    shown = getattr(result, "watermarks", None)
    if not callable(shown):
        raise TypeError(
            f"{type(pipeline.runner).__name__} shows no watermarks: run_with_watermarks "
            "takes Beam's direct runners or a runner whose result has watermarks()"
        )
    return result, {label: (s["input"], s["output"]) for label, s in shown().items()}


def _full_label(label: str) -> str:
    """The full label in ``AppliedPTransform(<full label>, <type>)``, the direct runner's
    name for a transform's watermarks."""
    prefix = "AppliedPTransform("
    if label.startswith(prefix) and label.endswith(")"):
        return label[len(prefix) : -1].rsplit(", ", 1)[0]
    return label


def _micros(t: Any) -> int:
    return int(t.micros)


@contextmanager
def trace_watermarks() -> Iterator[WatermarkTrace]:
    """Record watermarks of pipelines run on the direct runner inside the block (one
    block at a time in a process)."""
    check_beam_version()
    tw_cls, ts_cls = _internals()
    if not _LOCK.acquire(blocking=False):
        raise RuntimeError("trace_watermarks() is already active in this process")
    trace = WatermarkTrace()
    guard = threading.Lock()
    refresh: Callable[[Any], bool] = tw_cls.refresh
    read: Callable[[Any, Any], Any] = ts_cls.process_element

    def traced_refresh(self: Any) -> bool:
        advanced = refresh(self)
        record = WatermarkRecord(
            _full_label(self._label),
            round(self._clock.time() * 1e6),
            _micros(self.input_watermark),
            _micros(self.output_watermark),
        )
        with guard:
            previous = next((r for r in reversed(trace.changes) if r.label == record.label), None)
            if previous is None or (previous.input_watermark, previous.output_watermark) != (
                record.input_watermark,
                record.output_watermark,
            ):
                trace.changes.append(record)
        return advanced

    def traced_read(self: Any, element: Any) -> Any:
        manager = self._evaluation_context._watermark_manager
        with guard:
            if not trace.snapshots:
                stream = self.test_stream
                trace.set_up = len(stream._set_up(stream.output_tags))
            trace.snapshots.append(
                {
                    applied.full_label: (
                        _micros(marks.input_watermark),
                        _micros(marks.output_watermark),
                    )
                    for applied, marks in manager._transform_to_watermarks.items()
                }
            )
        return read(self, element)

    tw_cls.refresh = traced_refresh
    ts_cls.process_element = traced_read
    try:
        yield trace
    finally:
        tw_cls.refresh = refresh
        ts_cls.process_element = read
        _LOCK.release()
