"""Bounded memory in a task (no Spark): a lean ParDo hands its outputs on as they are
made, and a lean sink spills its output past a byte cap (spark_backend.runner.batch.spill).

- :class:`SpillBuffer` gives back every chunk once, in order, whatever was spilled;
- a ParDo whose elements each return many outputs (a list, or a generator read a chunk
  at a time) hands on the first element's outputs before it calls the DoFn again, and
  never pulls more than a chunk from a generator before handing them on;
- lean stages with every chunk spilled give Beam's bundle processor's outputs
  (sessions and fixed windows, a columnar GroupByKey's input, a combine).
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp

from spark_backend.runner.batch.spill import SpillBuffer, chunk_bytes, spill_directory
from spark_backend.runner.batch.summary import METRICS
from spark_backend.runner.grouping.keyed_columns import KeyedColumns
from spark_backend.runner.plan.plan import LEAN, plan_pipeline
from spark_backend.runner.stages.bundles import run_partition
from spark_backend.runner.stages.lean import pardo as lean_pardo
from spark_backend.runner.stages.lean.program import run_lean_partition
from tests.spark_backend.runner.in_process import run_in_process, stage_records
from tests.spark_backend.runner.stages.test_lean import proto_of

SUM: Any = sum
_LOG: list[tuple[str, int]] = []  # what the DoFns below did, in order (one process)


def _columns(n: int) -> KeyedColumns:
    rows = np.arange(n, dtype=np.int64)
    values = pa.array([bytes([i % 256]) for i in range(n)], type=pa.large_binary())
    return KeyedColumns([b"\x01a", b"\x01b"], rows % 2, values, rows * 1000, rows, rows + 5)


def test_a_spill_buffer_gives_back_every_chunk_once_in_order(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    assert spill_directory() == str(tmp_path)
    chunks: list[Any] = [bytes([i]) * (i + 1) for i in range(20)]
    buffer = SpillBuffer(10)
    for chunk in chunks[:12]:
        buffer.append(chunk)
    assert buffer.spilled > 0 and len(buffer) == 12
    assert list(buffer.drain()) == chunks[:12]
    assert len(buffer) == 0 and list(buffer.drain()) == []
    for chunk in chunks[12:]:  # the file is reused after a drain
        buffer.append(chunk)
    assert list(buffer.drain()) == chunks[12:]

    everything = SpillBuffer(0)  # every chunk to the file, columns too
    columns = _columns(7)
    everything.append(b"head")
    everything.append(columns)
    assert everything.spilled == 4 + chunk_bytes(columns)
    head, back = everything.drain()
    assert head == b"head" and isinstance(back, KeyedColumns)
    assert back.keys == columns.keys and back.values.equals(columns.values)
    for name in ("codes", "micros", "starts", "ends"):
        assert np.array_equal(getattr(back, name), getattr(columns, name)), name
    everything.close()

    held = SpillBuffer(1 << 20)
    held.append(b"x")
    assert held.spilled == 0 and list(held.drain()) == [b"x"]
    with pytest.raises(TypeError, match="spill limit"):
        SpillBuffer(1.5)  # type: ignore[arg-type]


def _fan_list(shard: int) -> list[tuple[int, int]]:
    """Shard ``s``'s 2,500 outputs, as a list (the log records the call)."""
    _LOG.append(("call", shard))
    return [(shard, i) for i in range(2_500)]


def _fan_lazy(shard: int) -> Any:
    """The same outputs from a generator (the log records the call and each output)."""
    _LOG.append(("call", shard))
    for i in range(2_500):
        _LOG.append(("made", shard))
        yield shard, i


class _Fan(beam.DoFn):
    """:func:`_fan_lazy` as a DoFn class (checked per element: the per-element path)."""

    def process(self, shard: int) -> Any:
        return _fan_lazy(shard)


_FANS = {
    "list": beam.FlatMap(_fan_list),
    "lazy": beam.FlatMap(_fan_lazy),
    "dofn": beam.ParDo(_Fan()),
}


def _seen(x: Any) -> Any:
    _LOG.append(("seen", x[0]))
    return x


@pytest.mark.parametrize("fan", sorted(_FANS))
def test_a_pardo_hands_on_each_elements_outputs_as_they_are_made(
    fan: str, monkeypatch: Any
) -> None:
    monkeypatch.setattr(lean_pardo, "CHUNK", 1_000)

    def build(p: beam.Pipeline) -> None:
        shards = p | beam.Create(range(4))
        made = shards | "Fan" >> _FANS[fan] | "Seen" >> beam.Map(_seen)
        _ = made | beam.combiners.Count.Globally()

    plan = plan_pipeline(proto_of(build), lean=True)
    buffers: dict[bytes, list[Any]] = defaultdict(list)
    for spec in plan.stages:
        records = stage_records(plan, spec, buffers)
        if "Fan" in spec.name:
            assert spec.path == LEAN, spec.reason
            _LOG.clear()
            out = list(run_lean_partition(spec.descriptor, spec.outputs, records))
            assert out[-1][0] == METRICS
            break
        for buffer, chunk in run_partition(spec, plan.job_id, plan.components, {}, records):
            if buffer != METRICS:
                buffers[buffer].append(chunk)
    else:
        raise AssertionError("no stage ran the Fan")
    calls = [i for i, (kind, _) in enumerate(_LOG) if kind == "call"]
    first_seen = next(i for i, (kind, _) in enumerate(_LOG) if kind == "seen")
    assert len(calls) == 4 and first_seen < calls[1], "outputs held until the next call"
    if fan != "list":  # at most a chunk generated before they are handed on
        assert sum(kind == "made" for kind, _ in _LOG[:first_seen]) <= 1_000
    assert sum(kind == "seen" for kind, _ in _LOG) == 4 * 2_500


def _events(shard: int) -> Any:
    rng = random.Random(shard)
    for _ in range(400):
        key, value = f"k{rng.randrange(5)}", rng.randrange(50)
        yield window.TimestampedValue((key, value), Timestamp(micros=rng.randrange(600_000_000)))


def test_lean_stages_spilling_every_chunk_equal_beams_bundles(monkeypatch: Any) -> None:
    monkeypatch.setattr(lean_pardo, "CHUNK", 100)  # many chunks, each spilled

    def build(p: beam.Pipeline) -> None:
        events = p | beam.Create(range(6)) | "Events" >> beam.FlatMap(_events)
        sessions = events | "Sessions" >> beam.WindowInto(window.Sessions(20))
        _ = sessions | "ByKey" >> beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, sorted(vs)))
        fixed = events | "Fixed" >> beam.WindowInto(window.FixedWindows(60))
        _ = fixed | beam.CombinePerKey(SUM)

    plan = plan_pipeline(proto_of(build), lean=True)
    assert "ByKey" in plan.columnar
    compared = run_in_process(plan, partitions=2, spill_bytes=0)
    assert any("Events" in name for name, _, _ in compared)
    for name, reference, lean in compared:
        assert reference == lean, name
    assert sum(sum(r.values()) for _, r, _ in compared) >= 6 * 400
