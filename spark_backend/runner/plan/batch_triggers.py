"""Processing-time triggers in batch: processing time does not advance before the end of input.

Beam Python gives a processing-time trigger no meaning in batch (its trigger driver, on
FnApiRunner too, fails with ``'NoneType' object has no attribute 'time'``). The runner
follows Beam Java's batch runners instead: processing time stands still until the input
ends, so an ``AfterProcessingTime`` among a watermark trigger's early or late firings never
fires on its own, and what it would have fired comes out with the on-time (final) pane;
nothing is late in batch. :func:`frozen_processing_time` makes that so by putting
``Never`` in place of each processing-time trigger under ``AfterWatermark``'s early and
late firings.

A processing-time trigger anywhere else (``Repeatedly(AfterProcessingTime(...))`` in the
global window, say) would decide on its own when the data comes out: it is refused before
any Spark work by :func:`check_batch_triggers`, naming the GroupByKey.
"""

from __future__ import annotations

from typing import Final

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb

from spark_backend.runner.errors import UnsupportedTransformError

__all__ = ["check_batch_triggers", "frozen_processing_time"]

_PROCESSING: Final[frozenset[str]] = frozenset(
    {"after_processing_time", "after_synchronized_processing_time"}
)
_GROUPS: Final[frozenset[str]] = frozenset(
    {common_urns.primitives.GROUP_BY_KEY.urn, common_urns.composites.COMBINE_PER_KEY.urn}
)


def _children(trigger: pb.Trigger) -> list[pb.Trigger]:
    kind = trigger.WhichOneof("trigger")
    if kind in ("after_all", "after_any", "after_each"):
        return list(getattr(trigger, kind).subtriggers)
    if kind == "after_end_of_window":
        eow = trigger.after_end_of_window
        return [getattr(eow, f) for f in ("early_firings", "late_firings") if eow.HasField(f)]
    if kind == "or_finally":
        return [trigger.or_finally.main, getattr(trigger.or_finally, "finally")]
    if kind == "repeat":
        return [trigger.repeat.subtrigger]
    return []


def _unfrozen(trigger: pb.Trigger) -> bool:
    """Whether a processing-time trigger occurs outside ``AfterWatermark``'s firings."""
    kind = trigger.WhichOneof("trigger")
    if kind in _PROCESSING:
        return True
    if kind == "after_end_of_window":
        return False
    return any(_unfrozen(t) for t in _children(trigger))


def _freeze(trigger: pb.Trigger, under_watermark: bool) -> None:
    kind = trigger.WhichOneof("trigger")
    if kind in _PROCESSING and under_watermark:
        trigger.CopyFrom(pb.Trigger(never=pb.Trigger.Never()))
        return
    for child in _children(trigger):
        _freeze(child, under_watermark or kind == "after_end_of_window")


def check_batch_triggers(pipeline: pb.Pipeline) -> None:
    """Raise :class:`UnsupportedTransformError` for the first GroupByKey or Combine whose
    trigger uses processing time outside ``AfterWatermark``'s early and late firings."""
    components = pipeline.components
    for transform in components.transforms.values():
        if transform.spec.urn not in _GROUPS or not transform.inputs:
            continue
        pcollection = next(iter(transform.inputs.values()))
        strategy_id = components.pcollections[pcollection].windowing_strategy_id
        if _unfrozen(components.windowing_strategies[strategy_id].trigger):
            raise UnsupportedTransformError(
                transform.unique_name,
                transform.spec.urn,
                "its trigger fires in processing time, which does not advance in batch "
                "before the input ends: run with --streaming, or fire early or late by "
                "processing time only within AfterWatermark(early=..., late=...)",
            )


def frozen_processing_time(pipeline: pb.Pipeline) -> pb.Pipeline:
    """``pipeline`` with each processing-time trigger under ``AfterWatermark``'s early and
    late firings replaced by ``Never`` (``pipeline`` itself when it has none)."""
    strategies = pipeline.components.windowing_strategies
    if not any(_has_processing(s.trigger) for s in strategies.values()):
        return pipeline
    out = pb.Pipeline()
    out.CopyFrom(pipeline)
    for strategy in out.components.windowing_strategies.values():
        _freeze(strategy.trigger, False)
    return out


def _has_processing(trigger: pb.Trigger) -> bool:
    if trigger.WhichOneof("trigger") in _PROCESSING:
        return True
    return any(_has_processing(t) for t in _children(trigger))
