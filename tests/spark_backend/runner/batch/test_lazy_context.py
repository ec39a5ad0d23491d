"""The batch SparkContext started when a stage first needs Spark
(spark_backend.runner.batch.lazy_context).

- a fresh process runs a pipeline whose stages all run in the driver with FnApiRunner's
  output and never launches a JVM;
- (a run whose driver stage outgrows its cap obtains the context then, once, with the
  same output: test_driver_stages);
- parallelism and task attempts come from the master and settings without a context,
  except a cluster's parallelism; cancelling before any Spark work starts none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.transforms import window
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.runner.batch import lazy_context
from spark_backend.runner.batch.executor import StageExecutor
from spark_backend.runner.batch.lazy_context import LazyContext
from spark_backend.runner.plan.plan import plan_pipeline
from tests.spark_backend.runner.stages.test_lean import proto_of

ROOT = Path(__file__).resolve().parents[4]

_SCRIPT = """
import os
from pyspark import SparkContext
from spark_backend.runner import PySparkRunner
from tests.spark_backend.runner.batch.test_lazy_context import small_pipeline
from tests.spark_backend.runner.conftest import on_spark, reference

result = on_spark(small_pipeline, reference(small_pipeline), PySparkRunner())
children = [
    p for p in os.listdir("/proc") if p.isdigit()
    and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getpid())
]
print("started", result.spark_started, SparkContext._gateway, SparkContext._active_spark_context)
print("children", children, "stages", len(result.driver_stages))
"""


def small_pipeline(p: beam.Pipeline) -> dict[str, Any]:
    """Timestamped events into fixed windows, a sum per key, a GroupByKey and a side
    input: every stage small (no Reshuffle), so every stage runs in the driver."""
    events = (
        p
        | beam.Create([(f"k{i % 5}", i, i * 7 % 200) for i in range(200)], reshuffle=False)
        | beam.MapTuple(lambda k, v, t: window.TimestampedValue((k, v), t))
        | beam.WindowInto(window.FixedWindows(60))
    )
    sums = events | beam.CombinePerKey(sum)
    total = sums | beam.Values() | beam.CombineGlobally(sum).without_defaults()
    groups = events | beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, sorted(vs)))
    top = groups | beam.Map(
        lambda kv, totals: (kv[0], len(kv[1]), sum(totals)), beam.pvalue.AsList(total)
    )
    return {"sums": sums, "top": top}


def test_a_pipeline_of_driver_stages_launches_no_jvm() -> None:
    """In a fresh process: the output equals FnApiRunner's, no SparkContext or py4j
    gateway was ever made, and the process has no child (no java)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "started False None None" in lines, done.stdout
    assert any(line.startswith("children [] stages ") for line in lines), done.stdout


@settings(max_examples=30, deadline=None)
@given(
    slots=st.one_of(st.integers(1, 64).map(str), st.just("*")),
    failures=st.one_of(st.none(), st.integers(1, 9)),
    parallelism=st.one_of(st.none(), st.integers(1, 500)),
)
def test_a_local_master_needs_no_context(
    slots: str, failures: int | None, parallelism: int | None
) -> None:
    """``local[N(,F)]``: attempts F (else 1) and the parallelism the session would have
    (a given ``spark.default.parallelism``, else the session's default), never starting."""
    master = f"local[{slots}]" if failures is None else f"local[{slots},{failures}]"
    conf = {} if parallelism is None else {"spark.default.parallelism": str(parallelism)}

    def refuse() -> Any:
        raise AssertionError("started")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lazy_context, "_running", lambda: None)
        lazy = LazyContext(refuse, master, conf)
        session_default = int(lazy_context.default_conf(master)["spark.default.parallelism"])
        assert lazy.parallelism() == (parallelism or session_default)
        assert lazy.attempts() == (failures or 1)
        assert not lazy.started


def test_a_cluster_master_starts_for_its_parallelism(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's attempts come from ``spark.task.maxFailures``; its parallelism from
    the context, started on the first ask, once."""

    master = "spark://127.0.0.1:7077"
    context = SimpleNamespace(master=master, defaultParallelism=6)
    starts: list[int] = []

    def start() -> Any:
        starts.append(1)
        return context

    monkeypatch.setattr(lazy_context, "_running", lambda: None)
    lazy = LazyContext(start, master, {"spark.task.maxFailures": "7"})
    assert lazy.attempts() == 7 and not starts
    assert lazy.parallelism() == 6 and lazy.parallelism() == 6 and starts == [1]


def test_cancel_before_any_spark_work_starts_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling an executor whose context never started sets it cancelled without
    starting one; its next stage is refused."""

    def refuse() -> Any:
        raise AssertionError("started")

    monkeypatch.setattr(lazy_context, "_running", lambda: None)
    plan = plan_pipeline(proto_of(small_pipeline), lean=True)
    executor = StageExecutor(LazyContext(refuse, "local[2]", {}), plan)
    executor.cancel()
    with pytest.raises(Exception, match="cancelled"):
        executor.run()
    assert not executor.spark_started
