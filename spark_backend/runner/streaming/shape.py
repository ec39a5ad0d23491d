"""A pipeline's shape, as a checkpoint records it: what a restart must match.

The shape is every transform of the pipeline proto in its order (composites and leaves),
each as its label, URN, the labels of the transforms producing its inputs, and the coder
of each output, written as URNs (``beam:coder:kv:v1(beam:coder:bytes:v1, ...)``). It holds
no pickled functions or payloads, so the same code gives the same shape in every process,
and a changed DoFn body with the same labels and types is accepted (as Beam's update
compatibility check accepts it). :func:`first_difference` names the first place two
shapes differ, or says that the two pipelines share no transform at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from apache_beam.portability.api import beam_runner_api_pb2 as pb

__all__ = ["Shape", "first_difference", "pipeline_shape"]

#: One transform's entry: label, urn, inputs (producer labels), output coders.
Shape = list[dict[str, Any]]


def pipeline_shape(pipeline: pb.Pipeline) -> Shape:
    """The shape of ``pipeline`` (see the module docstring): JSON-ready."""
    components = pipeline.components
    producer = {
        pc: t.unique_name
        for t in components.transforms.values()
        if not t.subtransforms
        for pc in t.outputs.values()
    }
    shape: Shape = []
    for transform in _in_order(pipeline):
        shape.append(
            {
                "label": transform.unique_name,
                "urn": transform.spec.urn,
                "inputs": sorted(
                    f"{tag}={producer.get(pc, '?')}" for tag, pc in transform.inputs.items()
                ),
                "outputs": sorted(
                    f"{tag}={_coder(components, components.pcollections[pc].coder_id)}"
                    for tag, pc in transform.outputs.items()
                ),
            }
        )
    return shape


def first_difference(
    written: Sequence[dict[str, Any]], current: Sequence[dict[str, Any]]
) -> str | None:
    """None when the shapes are equal; else what differs first, in words. When the two
    share no label, the message says the checkpoint is another pipeline's."""
    written_labels = {t["label"] for t in written}
    current_labels = {t["label"] for t in current}
    if written and current and not written_labels & current_labels:
        return (
            "it was written by another pipeline (no transform label in common: the "
            f"checkpoint's first transform is {written[0]['label']!r}, this pipeline's "
            f"{current[0]['label']!r})"
        )
    for index, (old, new) in enumerate(zip(written, current, strict=False)):
        if old["label"] != new["label"]:
            return (
                f"transform #{index} is {new['label']!r} here but {old['label']!r} in the "
                "checkpoint"
            )
        for field in ("urn", "inputs", "outputs"):
            if old[field] != new[field]:
                return (
                    f"transform {new['label']!r}: {field} {_show(new[field])} here but "
                    f"{_show(old[field])} in the checkpoint"
                )
    if len(written) != len(current):
        longer, where = (
            (current, "here") if len(current) > len(written) else (written, "in the checkpoint")
        )
        extra = longer[min(len(written), len(current))]["label"]
        return f"transform {extra!r} exists only {where}"
    return None


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(value) + "]"
    return repr(value)


def _in_order(pipeline: pb.Pipeline) -> Iterator[pb.PTransform]:
    def walk(transform_id: str) -> Iterator[pb.PTransform]:
        transform = pipeline.components.transforms[transform_id]
        yield transform
        for sub in transform.subtransforms:
            yield from walk(sub)

    for root_id in pipeline.root_transform_ids:
        root = pipeline.components.transforms[root_id]
        if root.spec.urn or root.inputs or root.outputs:
            yield from walk(root_id)
        else:  # the pipeline's own root, named by an id that varies: only its parts
            for sub in root.subtransforms:
                yield from walk(sub)


def _coder(components: pb.Components, coder_id: str) -> str:
    coder = components.coders[coder_id]
    inner = ", ".join(_coder(components, c) for c in coder.component_coder_ids)
    return f"{coder.spec.urn}({inner})" if inner else coder.spec.urn
