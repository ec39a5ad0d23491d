"""Driver side: which ``Combine.PerKey`` a streaming plan may lift (combine partial
accumulators per task before the GroupByKey), and the label its lifted GroupByKey keeps.

Lifting hands the GroupByKey one accumulator per (key, window) and task instead of
every element. A batch's elements reach the engine together either way, so the panes
stay the same exactly when the engine treats an element by its key, window and value
alone:

- the window fn does not merge (a session's windows are merged at the GroupByKey);
- the timestamp combiner is ``END_OF_WINDOW``: an element's hold is its window's
  ``max_timestamp`` and its lateness is its window's (Beam's PGBKCV stamps an
  accumulator at ``max_timestamp`` then); with ``EARLIEST`` or ``LATEST`` an
  accumulator mixing a late and a non-late element would carry the wrong hold;
- the trigger is one Beam's ``lift_combiners`` phase lifts (no element count above 1,
  no ``AfterAll``/``AfterEach``/``OrFinally``), as that phase then decides.

:func:`theory.windowing.select.lifts_combine` holds these rules; :func:`liftable` asks it.

Any other ``Combine.PerKey`` is opened into its GroupByKey and combining ParDo
(:func:`~spark_backend.runner.streaming.sources.streaming_proto`). What differs when
lifted: the engine's late and dropped counts count accumulators, not elements.

Beam names the lifted GroupByKey ``<combine>/Group``; the watermarks are kept under the
pipeline's own leaf labels, so :func:`lifted_group_labels` maps it to the composite's
``GroupByKey`` leaf (:func:`relabel_lifted_groups`).
"""

from __future__ import annotations

import dataclasses
from typing import Final

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners import pipeline_context
from apache_beam.transforms import core

from beam_pipelines.convert import theory_trigger
from spark_backend.runner.plan.plan import Plan
from theory.windowing.select import lifts_combine

__all__ = ["liftable", "lifted_group_labels", "relabel_lifted_groups"]

#: The suffix Beam's ``lift_combiners`` gives the lifted GroupByKey's label.
_GROUP_SUFFIX: Final[str] = "/Group"


def liftable(pipeline: pb.Pipeline, combine: pb.PTransform) -> bool:
    """Whether the ``Combine.PerKey`` composite ``combine`` may be lifted in streaming:
    :func:`theory.windowing.select.lifts_combine` decides (see the module docstring);
    a trigger theory does not model is not lifted."""
    (pcoll,) = combine.inputs.values()
    components = pipeline.components
    proto = components.windowing_strategies[components.pcollections[pcoll].windowing_strategy_id]
    try:
        trigger = theory_trigger(
            core.Windowing.from_runner_api(
                proto, pipeline_context.PipelineContext(components)
            ).triggerfn
        )
    except (TypeError, ValueError):
        return False
    return lifts_combine(
        trigger,
        merging=proto.merge_status != pb.MergeStatus.NON_MERGING,
        end_of_window=proto.output_time == pb.OutputTime.END_OF_WINDOW,
    )


def lifted_group_labels(pipeline: pb.Pipeline) -> dict[str, str]:
    """For each lifted ``Combine.PerKey`` of ``pipeline`` (its spec kept), the label of
    the GroupByKey Beam's lifting makes -> the label of the composite's GroupByKey leaf."""
    transforms = pipeline.components.transforms
    out = {}
    for t in transforms.values():
        if t.spec.urn != common_urns.composites.COMBINE_PER_KEY.urn:
            continue
        for sub in t.subtransforms:
            if transforms[sub].spec.urn == common_urns.primitives.GROUP_BY_KEY.urn:
                out[t.unique_name + _GROUP_SUFFIX] = transforms[sub].unique_name
    return out


def relabel_lifted_groups(plan: Plan, pipeline: pb.Pipeline) -> Plan:
    """``plan`` with each lifted GroupByKey labelled as its composite's GroupByKey leaf
    in ``pipeline`` (the proto the plan was made from)."""
    labels = lifted_group_labels(pipeline)
    groups = {
        buffer: dataclasses.replace(group, label=labels.get(group.label, group.label))
        for buffer, group in plan.groups.items()
    }
    return dataclasses.replace(plan, groups=groups)
