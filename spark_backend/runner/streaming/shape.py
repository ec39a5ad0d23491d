"""A pipeline's shape, as a checkpoint records it: what a restart must match.

The shape is every transform of the pipeline proto in its order (composites and leaves),
each as its label, URN, the labels of the transforms producing its inputs, the views of a
ParDo's side inputs (:func:`side_views_of`), and the coder of each output, written as URNs
(``beam:coder:kv:v1(beam:coder:bytes:v1, ...)``). It holds no pickled functions or
payloads, so the same code gives the same shape in every process, and a changed DoFn body
with the same labels and types is accepted (as Beam's update compatibility check accepts
it). A ``TestStream`` also records its events, as digests
(:func:`event_digests`), so a restart whose TestStream sends other events is refused with
the first differing event named. :func:`first_difference` names the first place two
shapes differ, or says that the two pipelines share no transform at all.

Bounded sources' data (``beam.Create``'s values) is not recorded: it lives in a pickled
function, whose bytes are not stable across processes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any, Final

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb

__all__ = ["Shape", "event_digests", "first_difference", "pipeline_shape"]

#: A TestStream's events are recorded as at most this many digests (each of a run of
#: consecutive events; one event each for a TestStream of at most this many events).
MAX_EVENT_DIGESTS: Final[int] = 1024

_TEST_STREAM: Final[str] = common_urns.primitives.TEST_STREAM.urn

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
        entry: dict[str, Any] = {
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
        if transform.spec.urn == _TEST_STREAM:
            entry["events"] = event_digests(transform)
        views = side_views_of(components, transform)
        if views:
            entry["views"] = views
        shape.append(entry)
    return shape


def side_views_of(components: pb.Components, transform: pb.PTransform) -> list[str]:
    """A ParDo's side inputs as the views it reads: per tag, the access pattern's URN and
    the side PCollection's WindowFn URN and trigger kind (empty for other transforms)."""
    if transform.spec.urn != common_urns.primitives.PAR_DO.urn:
        return []
    payload = pb.ParDoPayload.FromString(transform.spec.payload)
    views = []
    for tag, side in sorted(payload.side_inputs.items()):
        pcoll = components.pcollections[transform.inputs[tag]]
        strategy = components.windowing_strategies[pcoll.windowing_strategy_id]
        views.append(
            f"{tag}={side.access_pattern.urn} window={strategy.window_fn.urn} "
            f"trigger={strategy.trigger.WhichOneof('trigger')}"
        )
    return views


def event_digests(transform: pb.PTransform) -> dict[str, Any]:
    """A TestStream's events as JSON-ready digests: ``count`` events, ``per`` events to a
    digest (1 up to :data:`MAX_EVENT_DIGESTS` events), ``digests`` (SHA-1 of each run of
    deterministically serialised event protos, 16 hex digits)."""
    events = pb.TestStreamPayload.FromString(transform.spec.payload).events
    per = max(1, -(-len(events) // MAX_EVENT_DIGESTS))
    digests = []
    for start in range(0, len(events), per):
        digest = hashlib.sha1()
        for event in events[start : start + per]:
            raw = event.SerializeToString(deterministic=True)
            digest.update(len(raw).to_bytes(8, "little") + raw)
        digests.append(digest.hexdigest()[:16])
    return {"count": len(events), "per": per, "digests": digests}


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
        for field in ("urn", "inputs", "outputs", "views"):
            if old.get(field, []) != new.get(field, []):
                return (
                    f"transform {new['label']!r}: {field} {_show(new.get(field, []))} here but "
                    f"{_show(old.get(field, []))} in the checkpoint"
                )
        if old.get("events") != new.get("events"):
            return f"transform {new['label']!r}: {_events_difference(old, new)}"
    if len(written) != len(current):
        longer, where = (
            (current, "here") if len(current) > len(written) else (written, "in the checkpoint")
        )
        extra = longer[min(len(written), len(current))]["label"]
        return f"transform {extra!r} exists only {where}"
    return None


def _events_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Where two TestStreams' recorded events first differ, in words."""
    was, now = old.get("events"), new.get("events")
    if was is None or now is None:
        where = "in the checkpoint" if was is None else "here"
        return f"the TestStream's events are not recorded {where}"
    counts = f"{now['count']} events here, {was['count']} in the checkpoint"
    if was["per"] != now["per"]:
        return f"the TestStream sends other events ({counts})"
    per = now["per"]
    for index, (a, b) in enumerate(zip(was["digests"], now["digests"], strict=False)):
        if a != b:
            first, last = index * per, min((index + 1) * per, now["count"], was["count"]) - 1
            if first >= last:
                return f"TestStream event #{first} differs from the checkpoint's ({counts})"
            return (
                f"TestStream events #{first}-#{last} differ from the checkpoint's (one of "
                f"them, or the end of one stream among them; {counts})"
            )
    shared = min(now["count"], was["count"])
    where = "here" if now["count"] > shared else "in the checkpoint"
    return f"TestStream event #{shared} exists only {where} ({counts})"


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
