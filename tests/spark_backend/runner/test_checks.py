"""Bad input fails before any Spark work, with an error naming its cause."""

# Beam declares DoFn state and timers as default arguments (StateParam, TimerParam).
# ruff: noqa: B008

from __future__ import annotations

import re
from typing import Any

import apache_beam as beam
import pytest
from apache_beam import coders, pvalue
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger, window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer
from apache_beam.typehints import KV

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


# -- every other refusal, also before any Spark work -----------------------------------


class _Requiring(beam.Pipeline):
    """A pipeline whose proto asks for what Beam Python cannot: a requirement, or a
    ParDo's time-sorted input (the runner is handed the proto as it is)."""

    def __init__(self, change: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._change = change

    def to_runner_api(self, *args: Any, **kwargs: Any) -> Any:
        proto = super().to_runner_api(*args, **kwargs)
        self._change(proto)
        return proto


def _run_proto(change: Any, *flags: str) -> None:
    options = PipelineOptions(list(flags))
    p = _Requiring(change, runner=PySparkRunner(), options=options)
    p | beam.Create([("a", 1)]) | "Sorted" >> beam.ParDo(_Stateful())
    PySparkRunner().run_pipeline(p, options)


def test_an_unknown_requirement_is_refused(no_spark: None) -> None:
    def change(proto: Any) -> None:
        proto.requirements.append("beam:requirement:made_up:v1")

    with pytest.raises(ValueError, match="cannot honour pipeline requirement"):
        _run_proto(change)


def test_time_sorted_input_is_refused(no_spark: None) -> None:
    def change(proto: Any) -> None:
        for t in proto.components.transforms.values():
            if t.unique_name == "Sorted":
                payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
                payload.requires_time_sorted_input = True
                t.spec.payload = payload.SerializeToString()

    with pytest.raises(UnsupportedTransformError, match=r"'Sorted'.*time-sorted input"):
        _run_proto(change)


def test_streaming_options_without_streaming_are_refused(no_spark: None) -> None:
    with pytest.raises(ValueError, match="--max_batches needs --streaming"):
        run(small, "--max_batches", "3")


class _Stateful(beam.DoFn):
    STATE = BagStateSpec("seen", VarIntCoder())

    def process(self, kv: Any, state: Any = beam.DoFn.StateParam(STATE)) -> Any:
        yield kv


class _StatefulWithSide(beam.DoFn):
    STATE = BagStateSpec("seen", VarIntCoder())

    def process(self, kv: Any, side: Any, state: Any = beam.DoFn.StateParam(STATE)) -> Any:
        yield kv


def test_a_side_input_on_a_stateful_dofn_is_refused(no_spark: None) -> None:
    def build(p: beam.Pipeline) -> None:
        main = p | "main" >> beam.Create([("a", 1)]).with_output_types(KV[str, int])
        # key-value too: Beam picks the "main" input of a stateful ParDo from a set of
        # input tags that still holds the side input's, so which one it checks depends
        # on string hashing (ParDo._get_key_and_window_coder)
        side = p | "side" >> beam.Create([("b", 1)]).with_output_types(KV[str, int])
        main | "Keep" >> beam.ParDo(_StatefulWithSide(), beam.pvalue.AsList(side))

    with pytest.raises(UnsupportedTransformError, match=r"'Keep'.*side inputs on a stateful"):
        run(build, "--streaming")


class _Odd(window.NonMergingWindowFn):
    """A WindowFn theory's engine does not know."""

    def assign(self, context: Any) -> Any:
        return [window.IntervalWindow(0, 10)]

    def get_window_coder(self) -> Any:
        return coders.coders.IntervalWindowCoder()


def test_an_unknown_windowfn_in_streaming_is_refused(no_spark: None) -> None:
    def build(p: beam.Pipeline) -> None:
        events = p | test_stream.TestStream().add_elements([("a", 1)])
        events | beam.WindowInto(_Odd()) | "Group" >> beam.GroupByKey()

    with pytest.raises(UnsupportedTransformError, match=r"'Group'"):
        run(build, "--streaming")


def test_a_batch_file_sink_in_streaming_is_refused(no_spark: None, tmp_path: Any) -> None:
    def build(p: beam.Pipeline) -> None:
        words = p | beam.Create(["a"])
        words | "Out" >> beam.io.WriteToText(str(tmp_path / "out"))

    with pytest.raises(UnsupportedTransformError, match=r"'Out'.*WriteBatchesToText"):
        run(build, "--streaming")


def test_a_checkpoint_dir_that_is_a_file_is_refused(no_spark: None, tmp_path: Any) -> None:
    path = tmp_path / "file"
    path.write_text("")

    def build(p: beam.Pipeline) -> None:
        p | test_stream.TestStream().add_elements([1]) | beam.Map(str)

    with pytest.raises(ValueError, match="is a file, not a directory"):
        run(build, "--streaming", "--checkpoint_dir", str(path), "--key_partitions", "2")


def test_a_processing_time_trigger_in_batch_is_refused(no_spark: None) -> None:
    def build(p: beam.Pipeline) -> None:
        kvs = p | beam.Create([("a", 1)])
        clocked = kvs | beam.WindowInto(
            window.GlobalWindows(),
            trigger=trigger.Repeatedly(trigger.AfterProcessingTime(10)),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        clocked | "Every10s" >> beam.GroupByKey()

    with pytest.raises(UnsupportedTransformError, match=r"'Every10s'.*fires in processing time"):
        run(build)


def test_the_chapter3_help_lists_every_runner_option() -> None:
    import argparse

    from beam_pipelines.chapter3.cli import RUNNER_OPTIONS
    from spark_backend.runner import PySparkRunnerOptions

    parser = argparse.ArgumentParser()
    PySparkRunnerOptions._add_argparse_args(parser)
    flags = {a.option_strings[0] for a in parser._actions if a.option_strings[0] != "-h"}
    flags -= {"--spark_master_url"}  # Beam's alias of --spark_master
    assert {listed.split()[0] for listed in RUNNER_OPTIONS} == flags


def _par_do(proto: Any, label: str) -> tuple[Any, Any]:
    (transform,) = [t for t in proto.components.transforms.values() if t.unique_name == label]
    return transform, beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)


def test_map_state_in_streaming_is_refused(no_spark: None) -> None:
    def change(proto: Any) -> None:
        transform, payload = _par_do(proto, "Sorted")
        payload.state_specs["seen"].CopyFrom(
            beam_runner_api_pb2.StateSpec(map_spec=beam_runner_api_pb2.MapStateSpec())
        )
        transform.spec.payload = payload.SerializeToString()

    with pytest.raises(UnsupportedTransformError, match=r"'Sorted'.*state 'seen' is a map_spec"):
        _run_proto(change, "--streaming")


def test_a_timer_in_another_time_domain_in_streaming_is_refused(no_spark: None) -> None:
    def change(proto: Any) -> None:
        transform, payload = _par_do(proto, "Sorted")
        timer = payload.timer_family_specs["t"]
        timer.time_domain = beam_runner_api_pb2.TimeDomain.UNSPECIFIED
        transform.spec.payload = payload.SerializeToString()

    with pytest.raises(UnsupportedTransformError, match=r"'Sorted'.*timer 't' is in time domain"):
        _run_proto(change, "--streaming")


def test_a_splittable_dofn_with_state_in_streaming_is_refused(no_spark: None) -> None:
    def change(proto: Any) -> None:
        transform, payload = _par_do(proto, "Sorted")
        payload.restriction_coder_id = next(iter(proto.components.coders))
        transform.spec.payload = payload.SerializeToString()

    with pytest.raises(UnsupportedTransformError, match=r"'Sorted'.*splittable DoFn with state"):
        _run_proto(change, "--streaming")


def test_a_read_in_streaming_is_refused(no_spark: None) -> None:
    def change(proto: Any) -> None:
        transform, _ = _par_do(proto, "Sorted")
        transform.spec.urn = common_urns.deprecated_primitives.READ.urn

    with pytest.raises(UnsupportedTransformError, match=r"'Sorted'.*reads are not supported"):
        _run_proto(change, "--streaming")


def _held(at: int, *windows: Any) -> Any:
    from apache_beam.testing.test_stream import WindowedValueHolder
    from apache_beam.utils.timestamp import Timestamp
    from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue

    return WindowedValueHolder(WindowedValue("a", Timestamp(at), windows, PANE_INFO_UNKNOWN))


def test_test_stream_elements_in_windows_of_two_kinds_are_refused(no_spark: None) -> None:
    # a TestStream element that carries its own window keeps it (test_own_windows.py);
    # one PCollection has one window coder, so interval and global windows cannot mix
    def build(p: beam.Pipeline) -> None:
        held = _held(5, window.IntervalWindow(5, 10))
        p | "Held" >> test_stream.TestStream().add_elements([held, "plain"]) | beam.Map(str)

    with pytest.raises(
        UnsupportedTransformError,
        match=r"'Held'.*GlobalWindow, IntervalWindow \(WindowedValueHolder\)",
    ):
        run(build, "--streaming")


def test_a_flatten_of_own_windows_with_another_input_is_refused(no_spark: None) -> None:
    def build(p: beam.Pipeline) -> None:
        held = p | "Held" >> test_stream.TestStream().add_elements(
            [_held(5, window.IntervalWindow(5, 10))]
        )
        (held, p | beam.Create(["b"])) | "Both" >> beam.Flatten() | beam.Map(str)

    with pytest.raises(
        UnsupportedTransformError, match=r"'Both'.*Flatten of the TestStream 'Held'"
    ):
        run(build, "--streaming")
