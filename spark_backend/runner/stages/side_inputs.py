"""Task side: side-input contents, laid out in a StateServicer as the SDK reads them.

The driver collects each side PCollection's encoded elements once and ships them to
the consuming stage's tasks; here they are grouped by window (and by key for the
multimap pattern) with Beam's ``WindowGroupingBuffer``, exactly as FnApiRunner's
``commit_side_inputs_to_state`` does, so AsSingleton/AsIter/AsList/AsDict/AsMultiMap
and windowed side inputs resolve as they do there.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2, beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner.execution import WindowGroupingBuffer
from apache_beam.runners.portability.fn_api_runner.worker_handlers import StateServicer

from spark_backend.runner.plan.plan import SideInputSpec
from spark_backend.runner.stages.task_context import coder

__all__ = ["load_side_inputs"]

_StateKey = beam_fn_api_pb2.StateKey


def load_side_inputs(
    state: StateServicer,
    specs: Iterable[SideInputSpec],
    side_data: Mapping[bytes, list[bytes]],
    job_id: str,
    components: bytes,
) -> None:
    """Append every side input of ``specs`` (chunks in ``side_data``) to ``state``."""
    for spec in specs:
        pattern = beam_runner_api_pb2.FunctionSpec.FromString(spec.access_pattern)
        grouped = WindowGroupingBuffer(pattern, coder(job_id, components, spec.coder_id))
        for chunk in side_data.get(spec.buffer_id, ()):
            grouped.append(chunk)
        if pattern.urn == common_urns.side_inputs.ITERABLE.urn:
            _load_iterable(state, spec, grouped)
        elif pattern.urn == common_urns.side_inputs.MULTIMAP.urn:
            _load_multimap(state, spec, grouped)
        else:
            raise ValueError(f"unknown side-input access pattern {pattern.urn!r}")


def _load_iterable(
    state: StateServicer, spec: SideInputSpec, grouped: WindowGroupingBuffer
) -> None:
    for _, window, elements, _ in grouped.encoded_items():
        key = _StateKey(
            iterable_side_input=_StateKey.IterableSideInput(
                transform_id=spec.transform_id, side_input_id=spec.tag, window=window
            )
        )
        state.append_raw(key, elements)


def _load_multimap(
    state: StateServicer, spec: SideInputSpec, grouped: WindowGroupingBuffer
) -> None:
    ids = {"transform_id": spec.transform_id, "side_input_id": spec.tag}
    for user_key, window, elements, count in grouped.encoded_items():
        values = _StateKey(
            multimap_side_input=_StateKey.MultimapSideInput(**ids, window=window, key=user_key)
        )
        state.append_raw(values, elements)
        keys = _StateKey(
            multimap_keys_side_input=_StateKey.MultimapKeysSideInput(**ids, window=window)
        )
        state.append_raw(keys, user_key)
        pairs = _StateKey(
            multimap_keys_values_side_input=_StateKey.MultimapKeysValuesSideInput(
                **ids, window=window
            )
        )
        # KV<K, Iterable<V>>: the key, the count (big-endian int32), then the values.
        state.append_raw(pairs, user_key + struct.pack(">i", count) + elements)
