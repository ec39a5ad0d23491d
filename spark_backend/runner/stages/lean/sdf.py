"""The lean path's unbounded splittable DoFn: ``process`` called with Beam's own
restriction tracker and watermark estimator, without the bundle processor.

:func:`sdf_process_op` takes a ``ProcessSizedElementsAndRestrictions`` transform whose
DoFn asks only for what it can give: the element, its ``RestrictionParam``, its
``WatermarkEstimatorParam`` and a ``BundleFinalizerParam`` (whose callbacks are
dropped: the streaming runner never finalizes a bundle in a task, see
:mod:`spark_backend.runner.streaming.driver`). No side inputs, state, timers, extra
arguments, ``start_bundle``/``finish_bundle`` or batched ``process``; anything else
returns a reason and the stage stays on Beam's bundle processor.

For each input ``((element, (restriction, estimator state)), size)`` it does what
Beam's ``PerWindowInvoker`` does: a tracker from the restriction provider and an
estimator from its provider, each in Beam's thread-safe wrapper; ``process`` run to its
end, every output's timestamp observed by the estimator (skipped for the estimators
whose ``observe_timestamp`` does nothing); ``check_done``; and, when the DoFn deferred
its remainder, a :class:`LeanResidual`: the residual element encoded as the bundle
processor encodes it (the input PCollection's windowed coder, the input element's
timestamp, windows and pane), the estimator's watermark and the requested delay (µs).
Outputs become columns as a lean ParDo's do (:class:`~.pardo.ParDoOp`), so
WindowInto and the lifted combine after it run on columns.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from apache_beam.coders.coders import WindowedValueCoder
from apache_beam.io.watermark_estimators import (
    ManualWatermarkEstimator,
    WalltimeWatermarkEstimator,
)
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.pvalue import TaggedOutput
from apache_beam.runners.common import DoFnSignature
from apache_beam.runners.sdf_utils import (
    RestrictionTrackerView,
    ThreadsafeRestrictionTracker,
    ThreadsafeWatermarkEstimator,
)
from apache_beam.transforms import core
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from spark_backend.runner.stages.lean.batch import Batch
from spark_backend.runner.stages.lean.pardo import (
    CHUNK,
    Emit,
    ParDoOp,
    _is_param,
    _overrides,
    augmented,
    dofn_of,
)
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = ["LeanResidual", "SdfProcessOp", "sdf_process_op"]

#: Estimators whose ``observe_timestamp`` does nothing (their exact classes).
_NOT_OBSERVING: Final = frozenset({ManualWatermarkEstimator, WalltimeWatermarkEstimator})


@dataclass(frozen=True)
class LeanResidual:
    """A deferred restriction (µs): the SDF transform and input tag it re-enters by,
    the encoded residual element, the requested delay and the estimator's watermark
    (``MIN_TIMESTAMP`` when it had none)."""

    transform_id: str
    input_tag: str
    element: bytes
    delay: int
    watermark: int


@dataclass(frozen=True)
class _Params:
    """The names of ``process``'s tracker, estimator and finalizer parameters."""

    tracker: str
    estimator: str | None
    finalizers: tuple[str, ...]


class _DroppedFinalizer:
    """A ``BundleFinalizerParam`` whose callbacks are never run (streaming runs no
    bundle finalizer in a task)."""

    def register(self, callback: Any) -> None:
        return None


def sdf_process_op(transform: pb.PTransform, transform_id: str, stage: Any) -> Any:
    """The lean op for a ``ProcessSizedElementsAndRestrictions`` ``transform``, or a
    sentence saying why it is not one."""
    found = dofn_of(transform, stage, splittable=True)
    if isinstance(found, str):
        return found
    fn, windowing = found
    if not isinstance(fn, core.DoFn):
        return "not a DoFn"
    signature = DoFnSignature(fn)
    if signature.is_stateful_dofn() or not signature.is_splittable_dofn():
        return "stateful, or not splittable"
    if fn._process_batch_defined or fn._process_yields_batches:
        return "batched DoFn"
    for method in ("start_bundle", "finish_bundle"):
        if _overrides(fn, method):
            return f"DoFn overrides {method}"
    process = signature.process_method
    names: dict[str, list[str]] = {"tracker": [], "estimator": [], "finalizer": []}
    defaults = process.defaults
    for name, default in zip(
        process.args[len(process.args) - len(defaults) :], defaults, strict=True
    ):
        if isinstance(default, core.DoFn.RestrictionParam):
            names["tracker"].append(name)
        elif isinstance(default, core.DoFn.WatermarkEstimatorParam):
            names["estimator"].append(name)
        elif default == core.DoFn.BundleFinalizerParam:
            names["finalizer"].append(name)
        elif _is_param(default):
            return f"process asks for {default}"
    (pcoll,) = transform.inputs.values()
    (tag,) = transform.outputs
    (input_tag,) = transform.inputs
    outputs = ParDoOp(transform.unique_name, transform_id, fn, windowing.windowfn, tag)
    residual_coder = _windowed_coder(stage, pcoll)
    (tracker,) = names["tracker"]
    estimator = names["estimator"][0] if names["estimator"] else None
    params = _Params(tracker, estimator, tuple(names["finalizer"]))
    return SdfProcessOp(outputs, signature, input_tag, params, residual_coder)


def _windowed_coder(stage: Any, pcoll: str) -> Any:
    """The windowed coder the bundle processor encodes residuals with
    (``get_windowed_coder`` of the SDF's input PCollection)."""
    descriptor = stage.descriptor.pcollections[pcoll]
    coder = stage.context.coders[descriptor.coder_id]
    if isinstance(coder, WindowedValueCoder):
        return coder
    strategy = stage.descriptor.windowing_strategies[descriptor.windowing_strategy_id]
    return WindowedValueCoder(coder, stage.context.coders[strategy.window_coder_id])


class SdfProcessOp:
    """An unbounded splittable DoFn over batches of sized element-restrictions (see the
    module docstring); :attr:`residuals` collects what it deferred."""

    def __init__(
        self,
        outputs: ParDoOp,
        signature: Any,
        input_tag: str,
        params: _Params,
        residual_coder: Any,
    ) -> None:
        self._outputs = outputs
        self.label = outputs.label
        self.transform_id = outputs.transform_id
        self._input_tag = input_tag
        method = signature.process_method
        self._process = method.method_value
        self._restrictions = signature.get_restriction_provider()
        self._estimators = signature.get_watermark_estimator_provider()
        self._params = params
        self._residual_impl = residual_coder.get_impl()
        self._check = not isinstance(outputs._fn, core.CallableWrapperDoFn)
        self.residuals: list[LeanResidual] = []

    def setup(self) -> None:
        self._outputs.setup()

    def teardown(self) -> None:
        self._outputs.teardown()

    def finish(self, emit: Emit) -> None:
        return None

    def process(self, batch: Batch, emit: Emit) -> None:
        """Run every element-restriction of ``batch`` to its end or its checkpoint;
        emit the outputs in batches of about ``CHUNK`` as they come."""
        elements = Batch([v[0][0] for v in batch.values], batch.micros, batch.windows, batch.panes)
        values: list[Any] = []
        parents: list[int] = []
        for i, ((element, (restriction, state)), _) in enumerate(batch.values):
            try:
                for piece in self._run(elements, i, element, restriction, state):
                    values.extend(piece)
                    parents.extend([i] * len(piece))
                    if len(values) >= CHUNK:
                        self._outputs._emit(elements, values, parents, emit)
                        values, parents = [], []
            except Exception as exn:
                raise augmented(exn, self.label) from exn
        if values:
            self._outputs._emit(elements, values, parents, emit)

    def _run(
        self, elements: Batch, i: int, element: Any, restriction: Any, state: Any
    ) -> Iterator[list[Any]]:
        """``process`` on one element-restriction, its outputs in pieces of at most
        ``CHUNK``; then ``check_done`` and the residual, if deferred."""
        tracker = ThreadsafeRestrictionTracker(self._restrictions.create_tracker(restriction))
        inner = self._estimators.create_watermark_estimator(state)
        estimator = ThreadsafeWatermarkEstimator(inner)
        kwargs: dict[str, Any] = {self._params.tracker: RestrictionTrackerView(tracker)}
        if self._params.estimator is not None:
            kwargs[self._params.estimator] = estimator
        for name in self._params.finalizers:
            kwargs[name] = _DroppedFinalizer()
        results = self._process(element, **kwargs)
        if self._check:
            self._check = False
            if isinstance(results, (str, bytes, dict)):
                raise TypeError(
                    f"Returning a {type(results).__name__} from a ParDo or FlatMap is not "
                    f"allowed. Please use list({results!r}) if you really want this behavior."
                )
        if results is None:
            pass
        elif type(inner) in _NOT_OBSERVING:
            outputs = iter(results)
            while piece := list(itertools.islice(outputs, CHUNK)):
                yield piece
        else:  # each output observed as it is made, as Beam's output handler does
            observe = estimator.observe_timestamp
            own = Timestamp(micros=int(elements.micros[i]))
            piece = []
            for result in results:
                piece.append(result)
                observe(_timestamp(result, own))
                if len(piece) >= CHUNK:
                    yield piece
                    piece = []
            if piece:
                yield piece
        tracker.check_done()
        status = tracker.deferred_status()
        if status:
            self._defer(elements, i, element, status, estimator)

    def _defer(self, elements: Batch, i: int, element: Any, status: Any, estimator: Any) -> None:
        restriction, delay = status
        size = self._restrictions.restriction_size(element, restriction)
        if size < 0:
            raise ValueError(f"Expected size >= 0 but received {size}.")
        current = estimator.current_watermark()
        value = ((element, (restriction, estimator.get_estimator_state())), size)
        encoded = self._residual_impl.encode_nested(elements.windowed_value(i).with_value(value))
        watermark = MIN_TIMESTAMP
        if current is not None:
            watermark = max(MIN_TIMESTAMP, min(current.micros, MAX_TIMESTAMP))
        self.residuals.append(
            LeanResidual(self.transform_id, self._input_tag, encoded, delay.micros, watermark)
        )


def _timestamp(result: Any, own: Any) -> Any:
    """The timestamp Beam's output handler gives ``result``: its own, or (a plain
    value) the input element's, ``own``."""
    if isinstance(result, TaggedOutput):
        result = result.value
    if isinstance(result, (TimestampedValue, WindowedValue)):
        return result.timestamp
    return own
