"""beam_pipelines.chapter3 on PySparkRunner --streaming against theory.simulate: the same
panes, and every stage's input and output watermark series, on one small trace replayed
with a test clock equal to arrival_time, one micro-batch per distinct arrival time
(``--test_stream_batches=instant``) and instant processing (simulate told the same).

Beam's portable runners carry timestamps between stages in whole milliseconds (the
runner's documented divergence), so the simulation's pane timestamps are compared
floored to whole ms; windows, values, timing and index are exact.
"""

from __future__ import annotations

import io
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from beam_pipelines.chapter3.cli import dropped_text, run
from beam_pipelines.chapter3.model import Simulated, simulate_chapter3
from beam_pipelines.chapter3.pipeline import GROUP_LABELS, GROUP_STAGES, SOURCE_STAGES
from beam_pipelines.chapter3.trace import (
    coarsen_arrivals,
    generate_chapter3_trace,
    write_chapter3_trace,
)
from beam_pipelines.metrics import dropped_due_to_lateness
from beam_pipelines.pane_files import read_panes
from spark_backend.runner.streaming.sources import output_label
from theory.data.trace import Trace
from theory.series import StepSeries
from theory.time import SECOND

pytestmark = pytest.mark.slow

WATERMARK = "bounded:30s"

#: theory's stage -> the PySparkRunner transform whose watermarks are the stage's
LABELS = {
    **{s: output_label("trace", s) for s in SOURCE_STAGES},
    **GROUP_LABELS,
    "flatten": "flatten",
}


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    """About 600 events, arrivals rounded up to 60 s: some 40 distinct arrival times."""
    raw = generate_chapter3_trace(600, seed=4, users=60)
    return {k: coarsen_arrivals(t, 60 * SECOND) for k, t in raw.items()}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def spark_run(
    spark: Any, traces: dict[str, Trace], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Any, list[str], str]:
    """The module's run: its output folder, result, log lines and progress bar."""
    folder = tmp_path_factory.mktemp("chapter3-spark")
    write_chapter3_trace(traces, folder / "trace.parquet")
    bar, lines = io.StringIO(), _Lines()
    logger = logging.getLogger("beam_pipelines.chapter3")
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        result = _run_module(folder, bar)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(logging.NOTSET)
    return folder / "out", result, lines.lines, bar.getvalue()


def _run_module(folder: Path, bar: io.StringIO) -> Any:
    return run(
        [
            "--input",
            str(folder / "trace.parquet"),
            "--output",
            str(folder / "out"),
            "--watermark",
            WATERMARK,
            "--runner",
            "spark_backend.PySparkRunner",
            "--streaming",
            "--test_stream_batches",
            "instant",
            "--key_partitions",
            "1",
        ],
        progress_stream=bar,
    )


@pytest.fixture(scope="module")
def simulated(traces: dict[str, Trace]) -> Simulated:
    return simulate_chapter3(traces, WATERMARK, whole_ms=True)


def test_one_micro_batch_per_distinct_arrival_time(
    spark_run: tuple[Path, Any, list[str], str], traces: dict[str, Trace]
) -> None:
    arrivals = np.unique(np.concatenate([t.arrival_time for t in traces.values()]))
    assert spark_run[1].batches == arrivals.size + 1  # and the last one ending the sources


def test_the_module_logs_each_stage_and_shows_the_batches_run(
    spark_run: tuple[Path, Any, list[str], str], traces: dict[str, Trace]
) -> None:
    _, result, lines, bar = spark_run
    batches = result.batches
    assert [line.split(":")[0] for line in lines] == [
        "stage read",
        "stage build",
        "stage run",
        *["stage write"] * 3,
        "stage dropped",
    ], lines
    counted = dropped_due_to_lateness(result)
    assert lines[-1] == f"stage dropped: {dropped_text(counted)}"
    assert {GROUP_LABELS[s] for s in GROUP_STAGES} <= set(counted)
    assert f"streaming pipeline built ({batches:,} micro-batches to run" in lines[1]
    shown = [line for line in bar.splitlines() if line.endswith("s)")]
    done = [int(line.split("] ")[1].split("/")[0]) for line in shown]
    assert shown and done == sorted(set(done)), bar  # one line per change, rising
    assert shown[-1].startswith("[" + "#" * 24 + f"] {batches}/{batches} micro-batches"), bar


def test_panes_equal_the_simulation(
    spark_run: tuple[Path, Any, list[str], str], simulated: Simulated
) -> None:
    output = spark_run[0]
    late = sum(simulated.result.stages[s].late_count for s in GROUP_STAGES[:2])
    assert late > 0, "the trace should have late data for the comparison to mean much"
    for stage in GROUP_STAGES:
        want, got = Counter(simulated.panes[stage]), Counter(read_panes(output, stage))
        assert want, f"{stage}: no pane simulated"
        assert want == got, (stage, list(want - got)[:3], list(got - want)[:3])


def _same(a: StepSeries, b: StepSeries, times: np.ndarray) -> bool:
    return bool(np.array_equal(a.at(times), b.at(times)))


def test_every_stage_watermark_series_equals_the_simulation(
    spark_run: tuple[Path, Any, list[str], str], simulated: Simulated, traces: dict[str, Trace]
) -> None:
    """At every processing time a batch ran (each distinct arrival time), each stage's
    input and output watermark on Spark equal the simulation's."""
    result = spark_run[1]
    shown = result.watermarks()
    times = np.unique(np.concatenate([t.arrival_time for t in traces.values()]))
    for stage, label in LABELS.items():
        sim_input, sim_output = simulated.watermarks(stage)
        spark = shown[label]
        for name, want in (("input", sim_input), ("output", sim_output)):
            got = spark[name]
            diff = np.flatnonzero(got.at(times) != want.at(times))
            assert diff.size == 0, (
                f"{stage} ({label}) {name} watermark differs at {diff.size} of {times.size} "
                f"times, first at {times[diff[0]]} µs: spark {got.at(times[diff[0]])}, "
                f"simulation {want.at(times[diff[0]])}"
            )


def _beam_loaded(_: Any) -> Any:
    import sys

    yield "apache_beam" in sys.modules


def test_python_workers_fork_with_beam_imported(spark: Any) -> None:
    """spark_backend.runner.stages.worker_daemon: a fresh worker has Beam loaded before its first
    task (it pays no import, which took 10-30 s per worker under load)."""
    assert spark.sparkContext.parallelize([0], 1).mapPartitions(_beam_loaded).collect() == [True]
