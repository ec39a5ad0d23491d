"""A DoFn failing on PySparkRunner reads as one line naming the transform, the element
(its repr cut short) and the error, then the user's own frames; no JVM frames, no
Spark task trace and no Beam log of the re-raised error on the terminal unless the
``spark_backend`` logger is at DEBUG (batch: lean path, Beam's bundle processor, on
the driver and as a Spark job; streaming)."""

from __future__ import annotations

import logging
import traceback
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.runner import PipelineFailedError, PySparkRunner
from spark_backend.runner.batch.spark_errors import REPR_CHARS, cut_repr
from spark_backend.session import session as session_module

pytestmark = pytest.mark.slow

LONG = "x" * 500
CUT = repr(LONG)[: REPR_CHARS - 3] + "..."
ERROR = "ValueError: expected by the test, not a failure"


def first_user_frame(x: str) -> str:
    return second_user_frame(x)


def second_user_frame(x: str) -> str:
    raise ValueError("expected by the test, not a failure")


class OnBundleProcessor(beam.DoFn):
    """Not a lean DoFn (it has ``start_bundle``): runs on Beam's bundle processor."""

    def start_bundle(self) -> None:
        self.started = True

    def process(self, x: str) -> Any:
        yield first_user_frame(x)


def run_failing(kind: str, driver_stages: bool, args: list[str]) -> str:
    runner = PySparkRunner(driver_stages=driver_stages)
    p = beam.Pipeline(runner=runner, options=PipelineOptions(args))
    values = p | beam.Create([LONG])
    if kind == "lean":
        _ = values | "FailHere" >> beam.Map(first_user_frame)
    else:
        _ = values | "FailHere" >> beam.ParDo(OnBundleProcessor())
    with pytest.raises(PipelineFailedError) as info:
        p.run().wait_until_finish()
    return str(info.value)


@pytest.mark.parametrize(
    ("kind", "driver_stages", "args"),
    [
        ("lean", False, []),
        ("bundle", False, []),
        ("bundle", True, []),
        ("bundle", False, ["--streaming"]),
    ],
    ids=["lean-spark", "bundle-spark", "bundle-driver", "streaming"],
)
def test_one_line_then_the_user_frames_and_nothing_printed(
    spark: Any,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    driver_stages: bool,
    args: list[str],
) -> None:
    monkeypatch.setattr(session_module, "_JVM_LOG_LEVEL", [None])  # (as a library)
    caplog.set_level(logging.INFO)
    capfd.readouterr()
    message = run_failing(kind, driver_stages, args)
    first = message.splitlines()[0]
    assert first == f"transform 'FailHere' failed on element {CUT}: {ERROR}", message
    assert LONG not in first
    assert "first_user_frame" in message and "second_user_frame" in message, message
    assert "\tat org.apache" not in message and "Driver stacktrace" not in message
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in task" not in err, err
    # Beam's log of the error it re-raised (in this process when the stage ran here)
    logged = [r for r in caplog.records if r.name.startswith("apache_beam")]
    assert not [r for r in logged if "FailHere" in r.getMessage()]
    executor = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger(
        "org.apache.spark.executor.Executor"
    )
    assert not executor.isErrorEnabled()  # its "Exception in task" trace not logged


def test_spark_traces_shown_at_debug(
    spark: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_module, "_JVM_LOG_LEVEL", [None])
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    executor = log4j.LogManager.getLogger("org.apache.spark.executor.Executor")
    try:
        caplog.set_level(logging.DEBUG, logger="spark_backend")
        session_module.get_session()
        assert executor.isErrorEnabled()
        assert not executor.isWarnEnabled()
    finally:
        caplog.set_level(logging.WARNING, logger="spark_backend")
        session_module.get_session()
    assert not executor.isErrorEnabled()


@settings(max_examples=40)
@given(st.one_of(st.text(), st.binary(), st.lists(st.integers())), st.integers(3, 300))
def test_cut_repr_is_one_short_line(value: Any, limit: int) -> None:
    text = cut_repr(value, limit)
    assert len(text) <= limit and "\n" not in text and "\r" not in text
    whole = repr(value).replace("\r", "\\r").replace("\n", "\\n")
    assert text == whole or (text.endswith("...") and whole.startswith(text[:-3]))


def test_cut_repr_of_a_failing_repr() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert cut_repr(Broken()) == "<Broken whose repr failed: RuntimeError>"


def test_the_line_from_a_spark_failure_text() -> None:
    from spark_backend.runner.batch.spark_errors import note_element, python_error_message

    try:
        first_user_frame(LONG)
    except ValueError as err:
        tagged = KeyError("k [while running 'FailHere']")
        note_element(tagged, LONG)
        try:
            raise tagged from err
        except KeyError as exn:
            python = "".join(traceback.format_exception(exn))
    text = (
        "An error occurred while calling o1.count.\n: org.apache.spark.SparkException: "
        "Job aborted: org.apache.spark.api.python.PythonException: "
        f"{python}\n\tat org.apache.spark.api.python.PythonRunner.read(PythonRunner.scala:1)"
        "\n\nDriver stacktrace:\n\tat org.apache.spark.scheduler.DAGScheduler.run(x.scala:2)"
    )
    message = python_error_message(Exception(text))
    assert message.splitlines()[0] == f"transform 'FailHere' failed on element {CUT}: KeyError: k"
    assert "second_user_frame" in message and "org.apache" not in message


def test_py4j_tracebacks_dropped_unless_debug(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_backend.session.quiet_logs import quiet_py4j

    # the CLI sets py4j's level for its run (CRITICAL unless -v); start from py4j's own
    for name in ("py4j", "py4j.clientserver"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
        monkeypatch.setattr(logging.getLogger(name), "disabled", False)
    quiet_py4j()
    logger = logging.getLogger("py4j.clientserver")
    caplog.set_level(logging.INFO)
    try:
        raise ConnectionError("expected by the test")
    except ConnectionError:
        logger.exception("hidden")
        caplog.set_level(logging.DEBUG, logger="spark_backend")
        logger.exception("shown")
    logger.error("a line without a trace")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("py4j")] == [
        "shown",
        "a line without a trace",
    ]
