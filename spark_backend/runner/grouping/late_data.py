"""Late data counted: Beam Java's ``droppedDueToLateness`` counter per GroupByKey and Combine.

Beam Java's ``LateDataDroppingDoFnRunner`` counts the elements a GroupByKey drops because
their window is past its allowed lateness; Beam Python counts nothing. The runner reports
the same counter (namespace :data:`NAMESPACE`, name :data:`DROPPED_DUE_TO_LATENESS`) as a
user counter in ``result.metrics()``, one per grouping step: the step is the label of the
``Combine.PerKey`` a GroupByKey belongs to, else the GroupByKey's own label. In batch
nothing is late (the watermark passes no window before the input ends): every counter
reads 0. In streaming the count is theory's engine's ``dropped["expired"]`` (element and
window pairs); a lifted combine's GroupByKey counts the partial accumulators it drops.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from apache_beam.metrics import monitoring_infos
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.portability.api import metrics_pb2

from beam_pipelines import metrics

__all__ = [
    "DROPPED_DUE_TO_LATENESS",
    "METRICS_KEY",
    "NAMESPACE",
    "dropped_counter",
    "expired",
    "grouping_steps",
    "zero_counters",
]

#: Beam Java's counter name and namespace (``LateDataDroppingDoFnRunner``).
DROPPED_DUE_TO_LATENESS: Final[str] = metrics.DROPPED_DUE_TO_LATENESS
NAMESPACE: Final[str] = metrics.LATE_DATA_NAMESPACE

#: The key of these counters among a run's metrics by stage.
METRICS_KEY: Final[str] = "late-data"

_GBK: Final[str] = common_urns.primitives.GROUP_BY_KEY.urn
_COMBINE: Final[str] = common_urns.composites.COMBINE_PER_KEY.urn


def grouping_steps(pipeline: pb.Pipeline) -> dict[str, str]:
    """Each GroupByKey leaf's label -> its step name: the label of the
    ``Combine.PerKey`` it belongs to, else its own; a ``Combine.PerKey`` run whole (no
    GroupByKey leaf) maps its own label to itself."""
    transforms = pipeline.components.transforms
    steps: dict[str, str] = {}

    def walk(transform_id: str, combine: str | None) -> None:
        t = transforms[transform_id]
        if t.spec.urn == _COMBINE:
            combine = t.unique_name
            if not any(transforms[s].spec.urn == _GBK for s in t.subtransforms):
                steps[t.unique_name] = t.unique_name
        if t.spec.urn == _GBK:
            steps[t.unique_name] = combine or t.unique_name
        for sub in t.subtransforms:
            walk(sub, combine if t.spec.urn == _COMBINE else None)

    for root in pipeline.root_transform_ids:
        walk(root, None)
    return steps


def dropped_counter(step: str, count: int) -> metrics_pb2.MonitoringInfo:
    """The ``droppedDueToLateness`` user counter of ``step`` at ``count``."""
    return monitoring_infos.int64_user_counter(
        NAMESPACE, DROPPED_DUE_TO_LATENESS, count, ptransform=step
    )


def zero_counters(steps: Iterable[str]) -> list[metrics_pb2.MonitoringInfo]:
    """A counter at 0 for each step (each named once)."""
    return [dropped_counter(step, 0) for step in dict.fromkeys(steps)]


def expired(summaries: Iterable[Any]) -> int:
    """The elements a step's partitions dropped as expired in their last batch (the
    ``expired_in_batch`` of their summaries; a summary without one adds nothing)."""
    return sum(int(getattr(s, "expired_in_batch", 0)) for s in summaries)
