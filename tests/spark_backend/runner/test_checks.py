"""Bad input fails before any Spark work, with an error naming its cause."""

# Beam declares DoFn state and timers as default arguments (StateParam, TimerParam).
# ruff: noqa: B008

from __future__ import annotations

import re
from typing import Any

import apache_beam as beam
import pytest
from apache_beam import pvalue
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import TimerSpec, on_timer

from spark_backend.runner import PySparkRunner, UnsupportedTransformError
from spark_backend.runner import runner as runner_module


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the runner asks for a Spark session."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark work started before the pipeline was checked")

    monkeypatch.setattr(runner_module, "get_session", refuse)


def run(build: Any, *flags: str) -> None:
    p = beam.Pipeline(runner=PySparkRunner(), options=PipelineOptions(list(flags)))
    build(p)
    p.run().wait_until_finish()


def small(p: beam.Pipeline) -> None:
    p | beam.Create([1, 2]) | beam.Map(str)


@pytest.mark.parametrize("master", ["foo", "local[x]", "spark://nohostport", "mesos://h:1"])
def test_unknown_master_is_refused(no_spark: None, master: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"unknown spark_master '{master}'")):
        run(small, "--spark_master", master)


def test_master_url_alias_is_checked_too(no_spark: None) -> None:
    with pytest.raises(ValueError, match="unknown spark_master 'nowhere'"):
        run(small, "--spark_master_url", "nowhere")


def test_spark_connect_is_refused(no_spark: None) -> None:
    with pytest.raises(ValueError, match="Spark Connect has no RDDs"):
        run(small, "--spark_master", "sc://localhost:15002")


def test_spark_conf_without_equals_is_refused(no_spark: None) -> None:
    with pytest.raises(ValueError, match=re.escape("bad --spark_conf 'spark.executor.memory'")):
        run(small, "--spark_conf", "spark.executor.memory")


def test_test_stream_is_refused_with_label_and_kind(no_spark: None) -> None:
    def build(p: beam.Pipeline) -> None:
        p | "MyStream" >> test_stream.TestStream().add_elements([1]) | beam.Map(str)

    with pytest.raises(UnsupportedTransformError) as err:
        run(build)
    assert "'MyStream'" in str(err.value) and "beam:transform:teststream:v1" in str(err.value)


class _Unknown(beam.PTransform):
    def expand(self, pcoll: Any) -> Any:
        return pvalue.PCollection.from_(pcoll)

    def to_runner_api_parameter(self, context: Any) -> Any:
        return "beam:transform:made_up:v1", None


def test_an_unknown_primitive_is_refused(no_spark: None) -> None:
    def build(p: beam.Pipeline) -> None:
        p | beam.Create([1]) | "Mystery" >> _Unknown() | beam.Map(str)

    with pytest.raises(
        UnsupportedTransformError, match=r"'Mystery' of kind 'beam:transform:made_up:v1'"
    ):
        run(build)


class _ProcessingTimer(beam.DoFn):
    TIMER = TimerSpec("t", TimeDomain.REAL_TIME)

    def process(self, kv: Any, timer: Any = beam.DoFn.TimerParam(TIMER)) -> Any:
        yield kv

    @on_timer(TIMER)
    def fire(self) -> Any:
        yield "fired"


def test_processing_time_timers_are_refused(no_spark: None) -> None:
    def build(p: beam.Pipeline) -> None:
        p | beam.Create([("a", 1)]) | "Clock" >> beam.ParDo(_ProcessingTimer())

    with pytest.raises(
        UnsupportedTransformError, match=r"'Clock'.*timer '[^']*t' is not in event time"
    ):
        run(build)


def test_a_conf_the_running_context_cannot_take_is_refused(spark: Any) -> None:
    current = spark.sparkContext.getConf().get("spark.task.cpus") or "1"
    wanted = "2" if current != "2" else "3"
    with pytest.raises(ValueError, match=r"spark_conf spark\.task\.cpus='?\d"):
        run(small, "--spark_conf", f"spark.task.cpus={wanted}")


def test_without_java_the_error_says_what_to_install(tmp_path: Any) -> None:
    """A fresh process with no Java on PATH and no JAVA_HOME: running a pipeline fails
    before any JVM starts, naming the Java to install."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    bin_dir = tmp_path / "bin"  # only this Python on PATH: no java
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env.update(PATH=str(bin_dir), PYTHONPATH=str(root))
    script = (
        "import apache_beam as beam\n"
        "from spark_backend.runner import PySparkRunner\n"
        "p = beam.Pipeline(runner=PySparkRunner())\n"
        "p | beam.Create([1]) | beam.Map(str)\n"
        "p.run()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "JavaNotFoundError: Spark needs Java 17+ and no 'java' was found" in done.stderr
    assert "openjdk-17-jre-headless" in done.stderr
