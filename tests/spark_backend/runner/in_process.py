"""A plan's stages run in this process, without Spark: the lean path against Beam's
bundle processor on the very same stage inputs.

:func:`run_in_process` runs every stage in plan order on Beam's bundle processor (one
partition, GroupByKeys grouped as the executor groups them); for each stage the plan
made lean it also runs :func:`~spark_backend.runner.stages.lean.program.run_lean_partition` on the
same records and returns both outputs, element by element as encoded bytes, so a test
compares them as multisets: values, timestamps, windows and panes to the byte. A stage
with a Reshuffle's random keys (Beam's ``AddRandomKeys``) is compared with each key
set to 0 (the rest of each element to the byte).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from apache_beam.runners.portability.fn_api_runner.execution import ENCODED_IMPULSE_VALUE

from spark_backend.runner.batch.spill import SPILL_BYTES
from spark_backend.runner.batch.summary import METRICS
from spark_backend.runner.grouping.group_by_key import (
    engine_partition,
    group_partition,
    keyed_elements,
    split_elements,
)
from spark_backend.runner.plan.plan import IMPULSE, LEAN, THEORY_ENGINE, GroupSpec, Plan
from spark_backend.runner.stages.bundles import run_partition
from spark_backend.runner.stages.lean.program import run_lean_partition
from spark_backend.runner.stages.task_context import coder_impl


def _grouped(plan: Plan, group: GroupSpec, chunks: list[bytes]) -> list[bytes]:
    pairs = [p for c in chunks for p in keyed_elements(c, group, plan.job_id, plan.components)]
    if group.path == THEORY_ENGINE:
        return list(engine_partition(pairs, group, plan.job_id, plan.components))
    by_key: dict[bytes, list[bytes]] = defaultdict(list)
    for key, element in pairs:
        by_key[key].append(element)
    return list(group_partition(by_key.items(), group, plan.job_id, plan.components))


def _elements(plan: Plan, coder_id: str, chunks: list[bytes]) -> Counter[bytes]:
    impl = coder_impl(plan.job_id, plan.components, coder_id)
    return Counter(e for c in chunks for _, e in split_elements(c, impl))


def stage_records(
    plan: Plan, spec: Any, buffers: dict[bytes, list[bytes]]
) -> list[tuple[str, bytes]]:
    """The ``(input transform, chunk)`` records of stage ``spec``, from the encoded
    ``buffers`` of the stages before it (GroupByKeys grouped as the executor does)."""
    records: list[tuple[str, bytes]] = []
    for tid, buffer in spec.inputs.items():
        if buffer == IMPULSE:
            chunks = [ENCODED_IMPULSE_VALUE]
        elif buffer.startswith(b"group:"):
            chunks = _grouped(plan, plan.groups[buffer], buffers[buffer])
        else:
            chunks = buffers[buffer]
        records.extend((tid, c) for c in chunks)
    return records


def run_in_process(
    plan: Plan, partitions: int = 2, spill_bytes: int = SPILL_BYTES
) -> list[tuple[str, Counter, Counter]]:
    """For each lean stage: (stage name, bundle outputs, lean outputs), each a multiset
    of (buffer, encoded element); the stage's input is dealt over ``partitions``; the
    lean sinks spill past ``spill_bytes``."""
    buffers: dict[bytes, list[bytes]] = defaultdict(list)
    compared = []
    for spec in plan.stages:
        records = stage_records(plan, spec, buffers)
        parts = (
            [records[i::partitions] for i in range(partitions)] if not spec.stateful else [records]
        )
        side = {s.buffer_id: list(buffers[s.buffer_id]) for s in spec.side_inputs}
        reference: dict[bytes, list[bytes]] = defaultdict(list)
        lean: dict[bytes, list[bytes]] = defaultdict(list)
        for part in parts:
            for buffer, chunk in run_partition(spec, plan.job_id, plan.components, side, part):
                if buffer != METRICS:
                    reference[buffer].append(chunk)
            if spec.path == LEAN:
                lean_run = run_lean_partition(
                    spec.descriptor, spec.outputs, part, spill_bytes=spill_bytes
                )
                for buffer, chunk in lean_run:
                    if buffer != METRICS:
                        lean[buffer].append(chunk)
        for buffer, chunks in reference.items():
            buffers[buffer].extend(chunks)
        if spec.path == LEAN:
            coders = _output_coders(plan, spec)
            keyless = "Reshuffle-AddRandomKeys" in spec.name
            compared.append(
                (
                    spec.name,
                    _multiset(plan, coders, reference, keyless),
                    _multiset(plan, coders, lean, keyless),
                )
            )
    return compared


def _output_coders(plan: Plan, spec: Any) -> dict[bytes, str]:
    from apache_beam.portability.api import beam_fn_api_pb2

    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    return {
        buffer: beam_fn_api_pb2.RemoteGrpcPort.FromString(
            descriptor.transforms[tid].spec.payload
        ).coder_id
        for tid, buffer in spec.outputs.items()
    }


def _multiset(
    plan: Plan, coders: dict[bytes, str], out: dict[bytes, list[bytes]], keyless: bool = False
) -> Counter:
    total: Counter = Counter()
    for buffer, chunks in out.items():
        elements = _elements(plan, coders[buffer], chunks)
        if keyless:
            elements = _keys_zeroed(plan, coders[buffer], elements)
        for element, n in elements.items():
            total[buffer, element] += n
    return total


def _keys_zeroed(plan: Plan, coder_id: str, elements: Counter[bytes]) -> Counter[bytes]:
    """Encoded windowed KVs with each key set to 0 (a Reshuffle's random keys)."""
    impl = coder_impl(plan.job_id, plan.components, coder_id)
    zeroed: Counter[bytes] = Counter()
    for encoded, n in elements.items():
        element = impl.decode(encoded)
        zeroed[impl.encode(element.with_value((0, element.value[1])))] += n
    return zeroed
