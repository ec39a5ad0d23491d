"""beam_pipelines.chapter3 on Beam's own runners: the trace input and its refusals, the
command line, batch on the default runner, and streaming on BundleBasedDirectRunner, each
against theory.simulate on the same trace.

(On PySparkRunner --streaming: tests/spark_backend/runner/streaming/test_chapter3.py.)
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from beam_pipelines.chapter3.cli import RUNNER_OPTIONS, dropped_text, main, quiet_beam, run
from beam_pipelines.chapter3.model import simulate_chapter3
from beam_pipelines.chapter3.pipeline import GROUP_STAGES
from beam_pipelines.chapter3.trace import (
    coarsen_arrivals,
    generate_chapter3_trace,
    read_chapter3_trace,
    write_chapter3_trace,
)
from beam_pipelines.pane_files import PaneRow, read_panes
from theory.data.errors import TraceError
from theory.data.trace import Trace


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    return generate_chapter3_trace(400, seed=1)


@pytest.fixture(scope="module")
def trace_file(traces: dict[str, Trace], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chapter3") / "trace.parquet"
    write_chapter3_trace(traces, path)
    return path


def assert_same_panes(expected: dict[str, list[PaneRow]], output: Path) -> None:
    """Every grouping stage wrote exactly the expected panes (as multisets; none empty),
    and its CSV has one row per pane."""
    for stage in GROUP_STAGES:
        got = read_panes(output, stage)
        assert expected[stage], f"{stage}: the simulation fired no pane"
        missing = Counter(expected[stage]) - Counter(got)
        extra = Counter(got) - Counter(expected[stage])
        assert not missing and not extra, (stage, list(missing)[:3], list(extra)[:3])
        csv = pacsv.read_csv(output / f"{stage}.csv")
        assert csv.num_rows == len(got)


# ------------------------------------------------------------------ the trace input


def test_a_trace_round_trips_in_both_formats(traces: dict[str, Trace], tmp_path: Path) -> None:
    for suffix in ("parquet", "csv"):
        path = tmp_path / f"t.{suffix}"
        write_chapter3_trace(traces, path)
        back = read_chapter3_trace(path)
        for name, trace in traces.items():
            assert len(back[name]) == len(trace) > 0
            np.testing.assert_array_equal(back[name].event_time, trace.event_time)
            np.testing.assert_array_equal(back[name].arrival_time, trace.arrival_time)
            np.testing.assert_array_equal(back[name].key, trace.key)


def _csv(path: Path, columns: dict[str, list[object]]) -> Path:
    pacsv.write_csv(pa.table(columns), path)
    return path


def test_a_trace_without_a_platform_column_is_refused_by_name(tmp_path: Path) -> None:
    path = _csv(tmp_path / "t.csv", {"event_time": [1000], "arrival_time": [2000]})
    with pytest.raises(TraceError, match=r"column 'platform': the chapter-3 trace needs"):
        read_chapter3_trace(path)


def test_a_bad_platform_is_refused_naming_its_row(tmp_path: Path) -> None:
    path = _csv(
        tmp_path / "t.csv",
        {"event_time": [1000, 2000], "arrival_time": [2000, 3000], "platform": ["mobile", "pc"]},
    )
    with pytest.raises(TraceError, match=r"row 1, column 'platform': 'pc' is not a platform"):
        read_chapter3_trace(path)


def test_times_that_are_not_whole_milliseconds_are_refused(tmp_path: Path) -> None:
    path = _csv(
        tmp_path / "t.csv",
        {"event_time": [1000, 2500], "arrival_time": [2000, 3000], "platform": ["mobile"] * 2},
    )
    with pytest.raises(TraceError, match=r"row 1, column 'event_time': 2500 µs is not a whole"):
        read_chapter3_trace(path)


def test_a_missing_trace_column_gets_theorys_message(tmp_path: Path) -> None:
    path = _csv(tmp_path / "t.csv", {"event_time": [1000], "platform": ["mobile"]})
    with pytest.raises(TraceError, match="arrival_time"):
        read_chapter3_trace(path)


def test_coarsen_arrivals_rounds_up_to_whole_steps(traces: dict[str, Trace]) -> None:
    trace = traces["mobile_in"]
    coarse = coarsen_arrivals(trace, 60_000_000)
    assert np.all(coarse.arrival_time % 60_000_000 == 0)
    assert np.all(coarse.arrival_time >= trace.arrival_time)
    assert np.all(coarse.arrival_time - trace.arrival_time < 60_000_000)
    with pytest.raises(ValueError, match="step must be a positive int"):
        coarsen_arrivals(trace, 0)


# ------------------------------------------------------------------ the command line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--watermark", "bounded:often"], "bounded:often"),
        (["--arrival_step", "0s"], "--arrival_step must be positive"),
        (["--output", "{trace}"], "exists and is not an empty directory"),
    ],
)
def test_the_command_line_refuses_bad_options_in_one_line(
    args: list[str],
    message: str,
    trace_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--input", str(trace_file), "--output", str(tmp_path / "out")]
    argv += [a.format(trace=trace_file) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out").exists()


def test_the_command_line_refuses_a_trace_with_wrong_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _csv(tmp_path / "t.csv", {"event_time": [1000], "arrival_time": [2000]})
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    assert main(["--input", str(path), "--output", str(tmp_path / "out")]) == 2
    assert "column 'platform'" in capsys.readouterr().err
    # no handler left on this test's stderr, which pytest closes: later logging would
    # print "--- Logging error ---" with a traceback into another test's output
    assert (root.handlers, root.level) == (handlers, level)


@pytest.mark.slow
def test_batch_on_the_default_runner_equals_the_simulation_with_no_late_data(
    traces: dict[str, Trace],
    trace_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In batch every element is on time (the watermark passes everything at the end),
    which the simulation gets from the whole-trace oracle watermark; FnApiRunner encodes
    between stages, so pane timestamps are whole milliseconds. The command line logs one
    line per stage on stderr (Beam's import had set the root logger to WARNING)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    assert main(["--input", str(trace_file), "--output", str(tmp_path)]) == 0
    assert (root.handlers, root.level) == (handlers, level)  # put back as it was
    expected = simulate_chapter3(traces, "perfect:oracle", whole_ms=True)
    assert_same_panes(expected.panes, tmp_path)
    stages = [
        line.split(" stage ", 1)[1]
        for line in capsys.readouterr().err.splitlines()
        if " stage " in line
    ]
    assert [s.split(":")[0] for s in stages] == [
        "read",
        "build",
        "run",
        *["write"] * 3,
        "dropped",
    ], stages
    assert stages[1] == "build: batch pipeline built"
    for stage, line in zip(GROUP_STAGES, stages[3:6], strict=True):
        assert f" panes of {stage} in " in line
    assert stages[6] == "dropped: late elements not counted by this runner"


@pytest.mark.slow
def test_streaming_on_the_direct_runner_equals_the_simulation(
    traces: dict[str, Trace], trace_file: Path, tmp_path: Path
) -> None:
    """BundleBasedDirectRunner replays the trace by arrival time with each platform's
    bounded watermark: late sessions dropped exactly as the simulation drops them."""
    run(
        [
            "--input",
            str(trace_file),
            "--output",
            str(tmp_path),
            "--watermark",
            "bounded:30s",
            "--runner",
            "BundleBasedDirectRunner",
            "--streaming",
        ]
    )
    expected = simulate_chapter3(traces, "bounded:30s")
    late = expected.result.stages["mobile_sessions"].late_count
    assert late > 0, "the trace should have late data for the comparison to mean much"
    assert_same_panes(expected.panes, tmp_path)


def test_a_finished_input_goes_to_the_end_of_time_at_its_last_arrival(
    traces: dict[str, Trace],
) -> None:
    """With ``finish``, each tag's last watermark is MAX_TIMESTAMP, at its own last
    arrival (as theory's bounded Source); without, no watermark reaches it."""
    from beam_pipelines.teststream import trace_events
    from theory.time import MAX_TIMESTAMP
    from theory.windowing.script import ProcessingTimeEvent, WatermarkEvent

    both = Trace.concat(list(traces.values()))
    tags = [name for name, t in traces.items() for _ in range(len(t))]
    for finish in (True, False):
        now, ends = 0, {}
        for tag, event in trace_events(both, "bounded:30s", tags, finish=finish):
            if isinstance(event, ProcessingTimeEvent):
                now += event.delta
            elif isinstance(event, WatermarkEvent) and event.watermark == MAX_TIMESTAMP:
                ends[tag] = now
        expected = {name: int(t.arrival_time.max()) for name, t in traces.items()}
        assert ends == (expected if finish else {})
        assert len(set(expected.values())) == 2  # the two inputs end at different times


def test_help_lists_the_runner_options_and_how_to_make_an_input(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for flag in [*RUNNER_OPTIONS, "--runner spark_backend.PySparkRunner", "--streaming"]:
        assert flag in out, flag
    assert "--make_input 600 --input trace.parquet" in out


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_the_module_makes_an_input_and_logs_each_line_once_without_beams_chatter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A handler already on the root logger (Beam adds one) prints nothing of the run:
    the run has one handler, which keeps Beam's INFO lines out."""
    root = logging.getLogger()
    other = _Kept()
    root.addHandler(other)
    try:
        path = tmp_path / "made.parquet"
        assert main(["--make_input", "40", "--input", str(path)]) == 0
        assert sum(len(t) for t in read_chapter3_trace(str(path)).values()) == 40
    finally:
        root.removeHandler(other)
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 2)[2] for line in err] == [f"stage input: 40 events written to {path}"]
    assert other.lines == []
    beam = logging.LogRecord("apache_beam.typehints", logging.INFO, "", 0, "chatter", (), None)
    assert not quiet_beam(beam)
    assert quiet_beam(logging.LogRecord("apache_beam.x", logging.WARNING, "", 0, "w", (), None))
    assert quiet_beam(
        logging.LogRecord("beam_pipelines.chapter3", logging.INFO, "", 0, "", (), None)
    )


def test_the_dropped_counts_read_as_one_line() -> None:
    assert dropped_text({}) == "late elements not counted by this runner"
    counted = {"mobile_sessions/GroupByKey": 2, "console_sessions/GroupByKey": 1_000}
    assert dropped_text(counted) == (
        "late elements (droppedDueToLateness) mobile_sessions 2, console_sessions 1,000, "
        "average_session_length 0"
    )
