"""Stage dependencies and the concurrent stage scheduler (no Spark needed: the plan is
Beam's own, and the scheduler runs plain functions)."""

from __future__ import annotations

import threading
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.transforms import environments

from spark_backend.runner.batch.schedule import run_stages, stage_dependencies
from spark_backend.runner.plan.plan import StageSpec, plan_pipeline


def _plan(build: Any) -> Any:
    p = beam.Pipeline()
    build(p)
    proto = p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())
    return plan_pipeline(proto)


def _two_branches(p: beam.Pipeline) -> None:
    left = p | "L" >> beam.Create([("a", 1), ("b", 2)]) | "GL" >> beam.GroupByKey()
    right = p | "R" >> beam.Create([("c", 3)]) | "GR" >> beam.GroupByKey()
    left | "ML" >> beam.Map(str)
    right | "MR" >> beam.Map(str, beam.pvalue.AsList(left))


def test_a_stage_waits_for_the_writers_of_every_buffer_it_reads() -> None:
    stages = _plan(_two_branches).stages
    deps = stage_dependencies(stages)
    writers: dict[bytes, set[int]] = {}
    for i, spec in enumerate(stages):
        reads = {*spec.inputs.values(), *(s.buffer_id for s in spec.side_inputs)}
        expected = {w for b in reads for w in writers.get(b, set())}
        assert deps[i] == expected
        assert all(d < i for d in deps[i])
        for b in spec.outputs.values():
            writers.setdefault(b, set()).add(i)
    # the side input makes the right branch's Map wait for the left GroupByKey's stage
    (side_reader,) = [i for i, s in enumerate(stages) if s.side_inputs]
    assert deps[side_reader], "the stage with the side input waits for nothing"
    # the two Creates share nothing: some pair of stages is independent
    assert any(not deps[i] for i in range(1, len(stages)))


def _fake(name: str, inputs: dict[str, bytes], outputs: dict[str, bytes]) -> StageSpec:
    return StageSpec(name, b"", inputs, {}, outputs, {}, {}, (), False, False)


CHAIN = [
    _fake("a", {"i": b"impulse"}, {"o": b"x"}),
    _fake("b", {"i": b"impulse"}, {"o": b"y"}),
    _fake("c", {"i": b"x"}, {"o": b"z"}),
    _fake("d", {"i": b"y", "j": b"z"}, {"o": b"w"}),
]


def test_stages_run_after_their_dependencies_and_independent_ones_overlap() -> None:
    lock = threading.Lock()
    events: list[tuple[str, str]] = []
    both_running = threading.Barrier(2, timeout=30)

    def run_one(spec: StageSpec) -> None:
        with lock:
            events.append(("start", spec.name))
        if spec.name in ("a", "b"):
            both_running.wait()  # fails (BrokenBarrierError) unless a and b overlap
        with lock:
            events.append(("end", spec.name))

    run_stages(CHAIN, run_one, workers=4)
    position = {e: i for i, e in enumerate(events)}
    assert position[("end", "a")] < position[("start", "c")]
    assert position[("end", "b")] < position[("start", "d")]
    assert position[("end", "c")] < position[("start", "d")]


def test_after_a_failure_no_stage_starts_and_the_earliest_failure_is_raised() -> None:
    """``b`` fails first in time, ``a`` (first in plan order) after it: ``a``'s is raised."""
    started: list[str] = []
    b_failed = threading.Event()

    def run_one(spec: StageSpec) -> None:
        started.append(spec.name)
        if spec.name == "b":
            b_failed.set()
            raise ValueError("b failed")
        if spec.name == "a":
            assert b_failed.wait(60)
            raise KeyError("a failed")

    with pytest.raises(KeyError, match="a failed"):
        run_stages(CHAIN, run_one, workers=4)
    assert "c" not in started and "d" not in started


def test_one_worker_runs_the_plan_order() -> None:
    order: list[str] = []
    run_stages(CHAIN, lambda spec: order.append(spec.name), workers=1)
    assert order == ["a", "b", "c", "d"]
