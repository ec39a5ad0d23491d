"""Task side: GroupByKey on Spark with Beam's exact windowing, timestamps and panes.

The shuffle moves ``(encoded key, encoded element)`` byte pairs: the key as the
pipeline's (deterministic) key coder writes it, the element as the stage wrote it with
the PCollection's windowed coder, unchanged. After the shuffle each key's elements are
decoded and grouped the way FnApiRunner's ``GroupingBuffer`` groups them: in the
default global windowing one pane at the end of the global window, otherwise Beam's
batch trigger driver (``trigger.create_trigger_driver(windowing, True)``), which assigns
merged windows, output timestamps (TimestampCombiner) and pane info.

A GroupByKey the plan marks ``columnar`` shuffles
:class:`~spark_backend.runner.grouping.keyed_columns.KeyedColumns` instead, one record per
(map task, partition) (:func:`split_columns`), and groups each partition with numpy
(:func:`columns_partition`, :mod:`spark_backend.runner.grouping.columns`).

A GroupByKey the plan gives ``state_iterable_bytes`` (default windowing only) writes
its output with Beam's state-backed iterable coder: each group streams from Spark's
grouped values into the coder, the values past that many bytes spilled to the task's
disk and served to the consuming DoFn page by page through the state API
(:mod:`spark_backend.runner.grouping.spilled_groups`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Any, Final

from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.pipeline_context import PipelineContext
from apache_beam.transforms import trigger
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils import windowed_value

from spark_backend.runner.grouping.columns import encode_panes, engine_values, grouped_rows
from spark_backend.runner.grouping.engine import engine_panes, engine_strategy
from spark_backend.runner.grouping.keyed_columns import (
    ColumnsWriter,
    columns_of,
    concat,
    split_by_partition,
)
from spark_backend.runner.grouping.spilled_groups import GroupSpill, page_bytes
from spark_backend.runner.plan.plan import GroupSpec
from spark_backend.runner.stages.task_context import coder, coder_impl, windowing

__all__ = [
    "CHUNK_BYTES",
    "columns_partition",
    "engine_partition",
    "group_partition",
    "key_hash",
    "keyed_elements",
    "split_columns",
]

#: Output chunks are cut at about this many bytes (one Spark record each).
CHUNK_BYTES: Final[int] = 1 << 20


def key_hash(key: bytes) -> int:
    """A partition hash of an encoded key, the same in every process (unlike hash())."""
    return zlib.crc32(key)


def split_elements(chunk: bytes, impl: Any) -> Iterator[tuple[Any, bytes]]:
    """Each element of ``chunk`` (encoded with ``impl``), decoded and as its bytes: the
    bytes are the nested encoding, so decode them again with ``decode_nested``, never
    ``decode`` (a string or bytes value last in a KV would keep its length prefix)."""
    stream = create_InputStream(chunk)
    size = len(chunk)
    while stream.size() > 0:
        start = size - stream.size()
        element = impl.decode_from_stream(stream, True)
        yield element, chunk[start : size - stream.size()]


def keyed_elements(
    chunk: bytes, group: GroupSpec, job_id: str, components: bytes
) -> Iterator[tuple[bytes, bytes]]:
    """``(encoded key, encoded element)`` for every windowed KV in ``chunk``."""
    element_coder = coder(job_id, components, group.input_coder_id)
    key_impl = element_coder.wrapped_value_coder.key_coder().get_impl()
    for element, encoded in split_elements(chunk, element_coder.get_impl()):
        yield key_impl.encode(element.value[0]), encoded


def group_partition(
    groups: Iterable[tuple[bytes, Iterable[bytes]]],
    group: GroupSpec,
    job_id: str,
    components: bytes,
) -> Iterator[bytes]:
    """The grouped output chunks of one partition's ``(key, elements)`` groups."""
    if group.state_iterable_bytes:
        return _state_backed_partition(groups, group, job_id, components)
    input_coder = coder(job_id, components, group.input_coder_id)
    input_impl = input_coder.get_impl()
    key_impl = input_coder.wrapped_value_coder.key_coder().get_impl()
    output_impl = coder_impl(job_id, components, group.output_coder_id)
    strategy = windowing(job_id, components, group.windowing_strategy_id)
    panes = _global_pane if strategy.is_default() else _trigger_panes(strategy)
    grouped = (
        pane
        for encoded_key, encoded in groups
        for pane in panes(
            key_impl.decode(encoded_key), [input_impl.decode_nested(e) for e in encoded]
        )
    )
    return encode_chunks(grouped, output_impl)


def engine_partition(
    pairs: Iterable[tuple[bytes, bytes]], group: GroupSpec, job_id: str, components: bytes
) -> Iterator[bytes]:
    """The grouped output chunks of one partition's ``(encoded key, encoded element)``
    pairs, grouped by theory's engine (:mod:`spark_backend.runner.grouping.engine`)."""
    input_impl = coder_impl(job_id, components, group.input_coder_id)
    output_impl = coder_impl(job_id, components, group.output_coder_id)
    strategy = engine_strategy(windowing(job_id, components, group.windowing_strategy_id))
    if isinstance(strategy, str):  # the plan chose this path: it cannot happen
        raise RuntimeError(f"{group.label}: theory's engine cannot group it: {strategy}")
    elements = ((key, input_impl.decode_nested(e)) for key, e in pairs)
    return encode_chunks(engine_panes(strategy, elements), output_impl)


def split_columns(
    chunk: Any, group: GroupSpec, job_id: str, components: bytes, partitions: int
) -> list[tuple[int, Any]]:
    """A chunk of a columnar GroupByKey's input (columns from a lean stage, or Beam's
    bytes, decoded once) as ``(partition, KeyedColumns)`` records for the shuffle."""
    input_coder = coder(job_id, components, group.input_coder_id)
    columns = columns_of(chunk, ColumnsWriter(input_coder), input_coder.get_impl())
    return split_by_partition(columns, partitions)


def columns_partition(
    records: Iterable[tuple[int, Any]], group: GroupSpec, job_id: str, components: bytes
) -> Iterator[bytes]:
    """The grouped output chunks of one partition's ``(partition, KeyedColumns)``
    records: sorted with numpy where :mod:`.columns` models the partition, else
    by theory's engine."""
    pieces = [columns for _, columns in records]
    if not pieces:
        return iter(())
    columns = concat(pieces)
    strategy = windowing(job_id, components, group.windowing_strategy_id)
    rows = grouped_rows(columns, strategy)
    if rows is not None:
        return encode_panes(columns, rows, CHUNK_BYTES)
    input_coder = coder(job_id, components, group.input_coder_id)
    key, value = (c.get_impl() for c in input_coder.wrapped_value_coder._coders)
    theory = engine_strategy(strategy)
    if isinstance(theory, str):  # the plan chose this path: it cannot happen
        raise RuntimeError(f"{group.label}: theory's engine cannot group it: {theory}")
    output_impl = coder_impl(job_id, components, group.output_coder_id)
    return encode_chunks(engine_values(columns, theory, key, value), output_impl)


def encode_chunks(values: Iterable[Any], impl: Any) -> Iterator[bytes]:
    """``values`` encoded with ``impl``, cut into chunks of about CHUNK_BYTES."""
    out = create_OutputStream()
    for value in values:
        impl.encode_to_stream(value, out, True)
        if out.size() >= CHUNK_BYTES:
            yield out.get()
            out = create_OutputStream()
    if out.size():
        yield out.get()


_ON_TIME_ONLY = windowed_value.PaneInfo(
    is_first=True,
    is_last=True,
    timing=windowed_value.PaneInfoTiming.ON_TIME,
    index=0,
    nonspeculative_index=0,
)


def _global_pane(key: Any, elements: list[Any]) -> list[Any]:
    """Default windowing: one on-time pane at the end of the global window."""
    values = [e.value[1] for e in elements]
    return [
        GlobalWindows.windowed_value(
            (key, values), timestamp=GlobalWindow().max_timestamp(), pane_info=_ON_TIME_ONLY
        )
    ]


def _state_backed_partition(
    groups: Iterable[tuple[bytes, Iterable[bytes]]],
    group: GroupSpec,
    job_id: str,
    components: bytes,
) -> Iterator[bytes]:
    """Default windowing, the output coder Beam's state-backed iterable: each group's
    values decoded one at a time as the coder writes them, those past the coder's
    threshold spilled (:mod:`.spilled_groups`), so no group is held whole."""
    input_coder = coder(job_id, components, group.input_coder_id)
    input_impl = input_coder.get_impl()
    key_impl = input_coder.wrapped_value_coder.key_coder().get_impl()
    spill = GroupSpill(page_bytes(group.state_iterable_bytes))
    context = PipelineContext(
        beam_runner_api_pb2.Components.FromString(components), iterable_state_write=spill.write
    )
    output_impl = context.coders[group.output_coder_id].get_impl()
    panes = (
        GlobalWindows.windowed_value(
            (
                key_impl.decode(encoded_key),
                (input_impl.decode_nested(e).value[1] for e in encoded),
            ),
            timestamp=GlobalWindow().max_timestamp(),
            pane_info=_ON_TIME_ONLY,
        )
        for encoded_key, encoded in groups
    )
    try:
        yield from encode_chunks(panes, output_impl)
    finally:
        spill.close()


def _trigger_panes(strategy: Any) -> Any:
    driver = trigger.create_trigger_driver(strategy, True)

    def panes(key: Any, elements: list[Any]) -> Iterable[Any]:
        return driver.process_entire_key(key, [e.with_value(e.value[1]) for e in elements])

    return panes
