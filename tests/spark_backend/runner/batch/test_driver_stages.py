"""Small stages in the driver process (spark_backend.runner.batch.driver_stages).

- with and without driver stages, the outputs equal FnApiRunner's (values, timestamps,
  windows, panes), and the stages that ran on the driver are the expected ones;
- a driver stage is attempted as often as Spark attempts a task; a failed attempt's
  outputs and metrics are dropped; the last failure names the stage and the user error;
- the attempt count and task slots per master, and what a Spark partition reports
  (its outputs only when small; a stage with small and large partitions is exact);
- a driver stage whose outputs pass the cap is stopped and run on Spark, same outputs.
"""

from __future__ import annotations

import functools
import pickle
import random
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner.execution import ENCODED_IMPULSE_VALUE
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp

from spark_backend.runner import PipelineFailedError
from spark_backend.runner.batch.driver_stages import Held, run_on_driver, task_attempts, task_slots
from spark_backend.runner.batch.executor import stage_task
from spark_backend.runner.batch.reported import PartitionReports, reported_outputs
from spark_backend.runner.batch.summary import METRICS
from spark_backend.runner.plan.plan import plan_pipeline
from tests.spark_backend.runner.cluster_pipeline import FailOnce
from tests.spark_backend.runner.conftest import on_spark, reference
from tests.spark_backend.runner.stages.test_lean import proto_of

SUM: Any = sum


def _build(p: beam.Pipeline, spark_only: bool = False) -> dict[str, Any]:
    """A wordcount, a global GroupByKey and a windowed combine after it, a side input
    and CombineGlobally's default: the first stage on Spark (Create's Reshuffle), the
    rest small. ``spark_only``: the side input and the windowed combine only (for the
    run with every stage a Spark job, whose every stage costs a job)."""
    lines = p | beam.Create(["a b c", "b c", "c d e e", "a"] * 5)
    counts = lines | beam.FlatMap(str.split) | beam.combiners.Count.PerElement()
    total = counts | "Values" >> beam.Values() | "Total" >> beam.CombineGlobally(SUM)
    shares = counts | "Share" >> beam.Map(
        lambda kv, t: (kv[0], kv[1] * 1000 // t), beam.pvalue.AsSingleton(total)
    )
    if spark_only:
        return {"shares": shares, "windowed": _windowed(counts)}
    grouped = (
        counts
        | "ByCount" >> beam.Map(lambda kv: (kv[1], kv[0]))
        | "Group" >> beam.GroupByKey()
        | "Sorted" >> beam.MapTuple(lambda k, vs: (k, sorted(vs)))
    )
    return {"counts": counts, "shares": shares, "grouped": grouped, "windowed": _windowed(counts)}


def _windowed(counts: Any) -> Any:
    return (
        counts
        | "Stamp" >> beam.Map(lambda kv: window.TimestampedValue(kv, kv[1] * 7))
        | beam.WindowInto(window.FixedWindows(10))
        | "PerWindow" >> beam.CombinePerKey(SUM)
    )


def test_small_stages_run_on_the_driver_with_fn_api_runners_output(runner: Any) -> None:
    from spark_backend.runner import PySparkRunner

    expected = reference(_build)
    result = on_spark(_build, expected, runner)
    on_driver = result.driver_stages
    assert any("Create-Impulse" in name for name in on_driver), on_driver
    assert any("Group/Read" in name for name in on_driver), on_driver
    reshuffled = [n for n in result.stage_paths if "Reshuffle/ReshufflePerKey/GroupByKey/Read" in n]
    assert reshuffled and not set(reshuffled) & set(on_driver)  # spread on Spark
    assert len(on_driver) < len(result.stage_paths)

    spark_only = functools.partial(_build, spark_only=True)
    everywhere = on_spark(spark_only, expected, PySparkRunner(driver_stages=False))
    assert everywhere.driver_stages == []
    assert any("PerWindow" in name for name in everywhere.stage_paths)


def test_a_raising_dofn_on_the_driver_names_its_stage_and_error(runner: Any) -> None:
    p = beam.Pipeline(runner=runner)
    p | beam.Create([0]) | "Invert" >> beam.Map(lambda x: 1 / x)  # one element: no Reshuffle
    result = p.run()
    with pytest.raises(PipelineFailedError) as err:
        result.wait_until_finish()
    assert "ZeroDivisionError: division by zero" in str(err.value)
    assert "[while running 'Invert']" in str(err.value)
    assert "Invert" in err.value.stage
    assert result.driver_stages == []  # it never finished


def _first_stage_task(marker: Path) -> tuple[Any, Any]:
    """The first stage of Create(["fail"]) -> FailOnce -> GroupByKey, and its task
    over its whole input (the impulse), as the executor runs it on the driver."""
    plan = plan_pipeline(
        proto_of(
            lambda p: (
                p
                | beam.Create(["fail"])
                | "FailOnce" >> beam.ParDo(FailOnce(str(marker)))
                | beam.Map(lambda x: (x, 1))
                | beam.GroupByKey()
            )
        ),
        lean=True,
    )
    spec = plan.stages[0]
    assert "FailOnce" in spec.name
    records = [(tid, ENCODED_IMPULSE_VALUE) for tid in spec.inputs]
    held = Held(plan.components)
    return spec, functools.partial(stage_task, spec, plan.job_id, held, None, records)


def _seen(summary: bytes) -> int:
    infos = beam_fn_api_pb2.ProcessBundleResponse.FromString(pickle.loads(summary).metrics)
    counters = [i for i in infos.monitoring_infos if i.labels.get("NAME") == "seen"]
    from apache_beam.metrics import monitoring_infos

    return sum(monitoring_infos.extract_counter_value(i) for i in counters)


def test_a_driver_stage_is_retried_as_spark_retries_a_task(tmp_path: Path) -> None:
    spec, task = _first_stage_task(tmp_path / "retried")
    ran = run_on_driver(spec, task, attempts=2)
    assert ran is not None
    outputs, summary = ran
    (chunks,) = outputs.values()
    assert len(chunks) == 1 and chunks[0].count(b"fail") == 1  # the one element, once
    assert _seen(summary) == 1  # the failed attempt's metrics are dropped

    spec, task = _first_stage_task(tmp_path / "once")
    with pytest.raises(PipelineFailedError) as err:
        run_on_driver(spec, task, attempts=1)
    assert "RuntimeError: transient failure, once" in str(err.value)
    assert "FailOnce" in str(err.value)


@pytest.mark.parametrize(
    ("master", "conf", "attempts"),
    [
        ("local", {}, 1),
        ("local[*]", {}, 1),
        ("local[4]", {"spark.task.maxFailures": "8"}, 1),
        ("local[2,2]", {}, 2),
        ("local[*, 3]", {}, 3),
        ("spark://127.0.0.1:7077", {}, 4),
        ("spark://127.0.0.1:7077", {"spark.task.maxFailures": "2"}, 2),
        ("local-cluster[2,1,1024]", {}, 4),
    ],
)
def test_task_attempts_follow_spark(master: str, conf: dict[str, str], attempts: int) -> None:
    assert task_attempts(master, conf) == attempts


def test_task_slots_follow_the_master() -> None:
    import os

    assert task_slots("local", 8) == 1
    assert task_slots("local[3]", 8) == 3
    assert task_slots("local[2, 2]", 8) == 2
    assert task_slots("local[*]", 8) == (os.cpu_count() or 1)
    assert task_slots("spark://127.0.0.1:7077", 6) == 6


def test_a_partition_reports_its_outputs_only_when_small() -> None:
    from pyspark.accumulators import Accumulator

    records = [(b"a", b"x" * 10), (b"b", b"y" * 5), (METRICS, b"summary")]
    report = Accumulator(-1, {}, PartitionReports())  # a driver-side accumulator
    assert list(reported_outputs(report, 15, iter, 3, records)) == []  # all reported
    assert list(reported_outputs(report, 14, iter, 4, records)) == records[:2]  # cached
    assert list(reported_outputs(report, 0, iter, 5, [(METRICS, b"s")])) == []
    assert report.value == {3: (b"summary", records[:2]), 4: (b"summary", None), 5: (b"s", [])}
    report.add({4: (b"again", None)})  # a recomputed partition replaces its report
    assert report.value[4] == (b"again", None) and len(report.value) == 3


def _half_held(p: beam.Pipeline) -> Any:
    """A Spark stage (after Create's Reshuffle) whose partition holding the seed 0 writes
    more than its share of LOCAL_BYTES (1.4 MB: kept in Spark's cache) while the others
    are small (sent back with their reports): the GroupByKey after it reads both."""
    wide = "x" * 40
    return (
        p
        | "Seeds" >> beam.Create([0, 1, 2, 3, 4, 5])
        | "Spread" >> beam.FlatMap(lambda i: [(j % 997, wide) for j in range(1 if i else 30_000)])
        | "Group" >> beam.GroupByKey()
        | "Sizes" >> beam.MapTuple(lambda k, vs: (k, len(list(vs))))
    )


def test_a_stage_with_small_and_large_partitions_gives_fn_api_runners_output(
    differential: Any,
) -> None:
    result = differential(_half_held)
    assert not any("Group/Read" in name for name in result.driver_stages)  # not held whole


def _columns_held(p: beam.Pipeline) -> dict[str, Any]:
    """A Spark stage (after Create's Reshuffle) writing a columnar GroupByKey's input as
    columns, small enough for the driver to hold and group; sessions merge across the
    Spark stage's partitions."""
    events = p | "Events" >> beam.Create([(k % 3, k, k * 7) for k in range(60)])
    return {
        "sessions": events
        | "Stamp" >> beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2]))
        | beam.WindowInto(window.Sessions(10))
        | "Group" >> beam.GroupByKey()
        | "Sorted" >> beam.MapTuple(lambda k, vs: (k, sorted(vs)))
    }


def test_a_columnar_group_held_by_the_driver_is_grouped_there(
    runner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_backend.runner.batch import driver_stages
    from spark_backend.runner.grouping.keyed_columns import KeyedColumns

    seen: list[type] = []
    split = driver_stages.split_columns

    def spy(chunk: Any, *args: Any) -> Any:
        seen.append(type(chunk))
        return split(chunk, *args)

    monkeypatch.setattr(driver_stages, "split_columns", spy)
    result = on_spark(_columns_held, reference(_columns_held), runner)
    assert "Group" in result.columnar, result.columnar
    assert any("Group/Read" in name for name in result.driver_stages), result.driver_stages
    assert KeyedColumns in seen, seen  # the Spark stage's columns, grouped on the driver


def _generated_events(shard: int) -> Any:
    """Shard ``shard``'s 300 seeded timestamped (key, value) events, from a generator."""
    rng = random.Random(shard)
    for _ in range(300):
        key, value = f"k{rng.randrange(5)}", rng.randrange(50)
        yield window.TimestampedValue((key, value), Timestamp(micros=rng.randrange(600_000_000)))


def _generating(p: beam.Pipeline) -> dict[str, Any]:
    """Create(reshuffle=False) of 4 shards -> a FlatMap generating their events (a small
    input, a large output, all in one stage that starts on the driver) -> sessions
    grouped (columnar) and fixed windows summed."""
    events = (
        p | beam.Create(range(4), reshuffle=False) | "Generate" >> beam.FlatMap(_generated_events)
    )
    sessions = events | "Sessions" >> beam.WindowInto(window.Sessions(20))
    grouped = sessions | "ByKey" >> beam.GroupByKey() | beam.MapTuple(lambda k, v: (k, sorted(v)))
    sums = events | "Fixed" >> beam.WindowInto(window.FixedWindows(60)) | beam.CombinePerKey(SUM)
    return {"grouped": grouped, "sums": sums}


def test_a_driver_stage_past_its_output_cap_runs_on_spark(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the cap at 2 KiB the generating stage is stopped on the driver and run on
    Spark (its sinks spilling every chunk: ``spill_bytes=0``); the outputs equal
    FnApiRunner's and ``result`` says where each stage ran. The SparkContext is asked
    for then, once, after the first stage ran in the driver."""
    from spark_backend.runner import PySparkRunner
    from spark_backend.runner import runner as runner_module
    from spark_backend.runner.batch import executor

    events: list[str] = []
    real_start, real_driver = runner_module._spark_context, executor.run_on_driver

    def start(target: Any) -> Any:
        events.append("start")
        return real_start(target)

    def on_driver(*args: Any, **kwargs: Any) -> Any:
        events.append("driver")
        return real_driver(*args, **kwargs)

    monkeypatch.setattr(runner_module, "_spark_context", start)
    monkeypatch.setattr(executor, "run_on_driver", on_driver)
    runner = PySparkRunner(driver_output_bytes=2048, spill_bytes=0)
    result = on_spark(_generating, reference(_generating), runner)
    assert events[0] == "driver" and events.count("start") == 1 and result.spark_started, events
    moved = [name for name in result.moved_stages if "Generate" in name]
    assert moved and not set(moved) & set(result.driver_stages), result.moved_stages
    assert "ByKey" in result.columnar
    assert result.driver_stages  # the small stages after the shuffles still ran there
    for name, value in (("driver_output_bytes", -1), ("spill_bytes", 1.5)):
        with pytest.raises(ValueError, match=name):
            PySparkRunner(**{name: value})
