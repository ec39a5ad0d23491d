"""``simulate --engine spark --trace FILE`` with the trace read block by block by Spark's
tasks (:mod:`theory.data.file_blocks`, :func:`spark_backend.traces.trace_input.read_blocks`):
the blocks give exactly the rows, in the order, the bad-row report and the errors of the
trace read whole (:func:`spark_backend.traces.trace_input.read_local`), and the simulation on
Spark equals the local one on the same file. Times are µs."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.cli import commands as cli
from spark_backend.simulate.compare import keyed_differences
from spark_backend.simulate.simulation import simulate_keyed, spark_context
from spark_backend.traces.trace_input import read_blocks, read_local, scaled_columns
from theory.data.errors import TraceError
from theory.data.file_blocks import plan_blocks, read_blocked
from theory.experiments.tradeoff import grouping_pipeline
from theory.pipeline.simulator import simulate
from theory.time import SECOND


def _table(rng: np.random.Generator, n: int, bad: float, string_keys: bool) -> pa.Table:
    """``n`` unsorted rows on a 1-second grid of events and a 2-second grid of arrivals
    (ties within and across blocks), 3 keys, a ``bad`` fraction of null event times."""
    event = rng.integers(0, 40, n) * SECOND
    arrival = (event + rng.integers(0, 6, n) * SECOND) // (2 * SECOND) * (2 * SECOND)
    keys = rng.integers(0, 3, n)
    null = rng.random(n) < bad
    return pa.table({
        "event_time": pa.array(event, pa.int64(), mask=null),
        "arrival_time": pa.array(arrival, pa.int64()),
        "key": pa.array([f"k{k}" for k in keys]) if string_keys else pa.array(keys),
        "value": pa.array(rng.integers(1, 9, n).astype(float)),
    })  # fmt: skip


def _write(folder: Path, layout: str, seed: int, n: int, bad: float, group: int) -> Path:
    """The trace as ``layout``: one Parquet file in row groups of ``group`` rows, or a
    directory of 3 files (CSV only, or Parquet and CSV with string keys in one)."""
    rng = np.random.default_rng(seed)
    if layout == "parquet":
        pq.write_table(_table(rng, n, bad, False), folder / "t.parquet", row_group_size=group)
        return folder / "t.parquet"
    for i in range(3):
        table = _table(rng, int(rng.integers(0, n + 1)), bad, layout == "mixed" and i == 1)
        if layout == "mixed" and i != 1:
            pq.write_table(table, folder / f"part-{i}.parquet", row_group_size=group)
        else:
            pacsv.write_csv(table, folder / f"part-{i}.csv")
    return folder


def _outcome(read):
    """(trace sorted by arrival, report) or the error's type and text."""
    try:
        return read()
    except (TraceError, ValueError) as err:
        return type(err).__name__, str(err)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    layout=st.sampled_from(["parquet", "csv", "mixed"]),
    n=st.integers(0, 70),
    bad=st.sampled_from([0.0, 0.05]),
    policy=st.sampled_from(["fail", "skip-and-report"]),
    unit=st.sampled_from([None, "ms"]),
    group=st.integers(1, 20),
    rows=st.integers(1, 40),
)
def test_blocks_read_as_the_whole_trace(seed, layout, n, bad, policy, unit, group, rows):
    # the same rows in the same order (ties by event time, then the trace's row), the
    # same report (examples numbered in the whole trace), or the same error
    with tempfile.TemporaryDirectory() as d:
        path = _write(Path(d), layout, seed, n, bad, group)
        local = _outcome(lambda: read_local(path, policy, unit))
        scaled = scaled_columns(path, unit)
        blocked = _outcome(lambda: read_blocked(path, on_bad_rows=policy, unit=unit,
                                                scaled=scaled, rows=rows))  # fmt: skip
        if isinstance(local[0], str):
            assert blocked == local
            return
        (trace, report), (made, theirs) = local, blocked
        assert made.events == len(trace) and theirs == report
        assert made.whole() == trace.sorted_by_arrival()
        if layout == "parquet" and n > rows and group <= rows:  # (the trace is in blocks)
            assert made.blocks > 1


def test_a_parquet_files_row_groups_are_joined_into_blocks(tmp_path):
    pq.write_table(_table(np.random.default_rng(0), 100, 0, False), tmp_path / "t.parquet",
                   row_group_size=30)  # fmt: skip
    blocks = plan_blocks(tmp_path / "t.parquet", rows=60)
    assert [(b.groups, b.file_row) for b in blocks] == [((0, 1), 0), ((2, 3), 60)]
    assert [b.groups for b in plan_blocks(tmp_path / "t.parquet", rows=20)] == [
        (0,), (1,), (2,), (3,)]  # fmt: skip
    with pytest.raises(ValueError, match="rows must be >= 1"):
        plan_blocks(tmp_path / "t.parquet", rows=0)


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str | None, str]]:
    """Bad inputs: (path, unit, what the error must say besides being local's)."""
    rng = np.random.default_rng(1)
    cases: dict[str, tuple[Path, str | None, str]] = {}
    # a null event time in the third row group (row 65 of the file)
    t = _table(rng, 100, 0, False).to_pylist()
    t[65]["event_time"] = None
    (tmp_path / "g").mkdir()
    pq.write_table(pa.Table.from_pylist(t), tmp_path / "g" / "t.parquet", row_group_size=30)
    cases["parquet row group"] = (tmp_path / "g" / "t.parquet", None,
                                  "row 65, column 'event_time'.*row index 65 of that file")
    # a directory: a bad value in its second CSV file; and with a bad byte in a third,
    # which is named first
    for d in (tmp_path / "d", tmp_path / "d2"):
        d.mkdir()
        pacsv.write_csv(_table(rng, 20, 0, False), d / "a.csv")
        (d / "b.csv").write_text("event_time,arrival_time\n1,2\nx,3\n")
    cases["csv row"] = (tmp_path / "d", None, r"row 21, column 'event_time'.*b\.csv', line 3")
    # (after the first MiB, which the header check reads: found once a row is bad)
    body = b"event_time,arrival_time\n" + b"1,2\n" * 300_000 + b"3,\xff\n"
    (tmp_path / "d2" / "c.csv").write_bytes(body)
    cases["bad byte first"] = (tmp_path / "d2", None, r"not UTF-8 text: byte 0xff.*c\.csv")
    # epoch milliseconds read as µs; then a unit that leaves the µs range
    ms = tmp_path / "ms.parquet"
    pq.write_table(pa.table({"event_time": [1_700_000_000_000] * 3,
                             "arrival_time": [1_700_000_000_000] * 3}), ms)  # fmt: skip
    cases["magnitude"] = (ms, None, "event_time looks like epoch milliseconds.*--time-unit ms")
    far = tmp_path / "far.csv"
    far.write_text("event_time,arrival_time\n1,2\n3,99000000000000\n")
    cases["unit range"] = (far, "s", "arrival_time: 99000000000000 s is outside the µs timestamp")
    empty = tmp_path / "empty.csv"
    empty.write_text("event_time,arrival_time\n")
    cases["no rows"] = (empty, None, "the trace has no rows")
    return cases


def test_bad_input_gets_the_whole_readers_error(tmp_path):
    for name, (path, unit, says) in _bad_files(tmp_path).items():
        with pytest.raises((TraceError, ValueError), match=says) as local:
            read_local(path, "fail", unit)
        with pytest.raises(type(local.value)) as blocked:
            read_blocked(path, unit=unit, scaled=scaled_columns(path, unit), rows=20)
        assert str(blocked.value) == str(local.value), name


@pytest.mark.slow
def test_spark_reads_and_simulates_a_file_as_local_does(spark, tmp_path, caplog):
    sc = spark_context(spark)
    # the bad inputs, checked by Spark's tasks: local's errors (a TraceError renumbered
    # on the driver)
    for name, (path, unit, says) in _bad_files(tmp_path).items():
        with pytest.raises((TraceError, ValueError), match=says) as whole:
            read_local(path, "fail", unit)
        with pytest.raises(type(whole.value)) as in_blocks:
            read_blocks(sc, path, "fail", unit, rows=20)
        assert str(in_blocks.value) == str(whole.value), name
    # the simulation: a Parquet file in many row groups (perfect watermark, the rows of
    # every tie in the trace's order), a directory of Parquet and CSV files with int and
    # string keys (bounded), each against the local simulator on read_local's trace
    for layout, spec in (("parquet", "perfect"), ("mixed", "bounded:3s")):
        folder = tmp_path / layout
        folder.mkdir()
        path = _write(folder, layout, 7, 1_500, 0.0, 200)
        pipe = grouping_pipeline(spec, "fixed:10s", allowed_lateness=5 * SECOND,
                                 late_firings=True)  # fmt: skip
        trace, _ = read_local(path, "fail", None)
        local = simulate(pipe, {"in": trace})
        blocked, _ = read_blocks(sc, path, "fail", None, rows=500)
        assert blocked.blocks >= 3
        with caplog.at_level(logging.INFO, "watermarks"):
            keyed = simulate_keyed(spark, pipe, {"in": blocked}, tmp_path / f"out-{layout}",
                                   partitions=3)  # fmt: skip
        assert "blocks made on the executors" in caplog.text
        caplog.clear()
        assert keyed_differences(local, keyed) == [], layout
        assert local.stages["in"].late_count > 0 or spec == "perfect"
    # the comparison can fail: the same file under another watermark differs
    other = simulate(grouping_pipeline("bounded:1s", "fixed:10s"), {"in": trace})
    assert keyed_differences(other, keyed) != []


@pytest.mark.slow
def test_cli_reads_a_trace_on_spark_and_refuses_a_bad_one_before_work(spark, tmp_path, capsys,
                                                                        caplog):  # fmt: skip
    (tmp_path / "trace").mkdir()
    path = _write(tmp_path / "trace", "mixed", 3, 400, 0.0, 50)
    outs = {}
    for engine in ("local", "spark"):  # outputs beside the trace directory, never in it
        outs[engine] = tmp_path / f"o-{engine}"
        argv = ["simulate", "--trace", str(path), "--watermark", "perfect", "--windowing",
                "fixed:5s", "--engine", engine, "--partitions", "2", "--out", str(outs[engine])]
        with caplog.at_level(logging.INFO, "watermarks"):
            assert cli.main(argv) == 0
        assert f"({engine} engine)" in capsys.readouterr().out
    assert "blocks checked on the executors" in caplog.text
    series = [pq.read_table(outs[e] / "series.parquet") for e in ("local", "spark")]
    assert series[0].num_rows > 0 and series[0].equals(series[1])
    metrics = [(outs[e] / "metrics.csv").read_text() for e in ("local", "spark")]
    assert metrics[0] == metrics[1]
    # a watermark that needs every row: the driver reads the trace, and says so
    caplog.clear()
    argv = ["simulate", "--trace", str(path), "--watermark", "percentile:0.9", "--engine",
            "spark", "--out", str(tmp_path / "o-pct")]  # fmt: skip
    with caplog.at_level(logging.INFO, "watermarks"):
        assert cli.main(argv) == 0
    assert "needs every row: the trace is read here" in caplog.text
    capsys.readouterr()
    # a bad row: the same one-line error from both engines, and no output
    (tmp_path / "bad").mkdir()
    bad, _, _ = _bad_files(tmp_path / "bad")["parquet row group"]
    said = []
    for engine in ("local", "spark"):
        argv = ["simulate", "--trace", str(bad), "--engine", engine, "--out",
                str(tmp_path / "o-bad")]  # fmt: skip
        assert cli.main(argv) == 2
        said.append(capsys.readouterr().err.strip().splitlines()[-1])
    assert "row 65, column 'event_time'" in said[0] and said[0] == said[1]
    assert not (tmp_path / "o-bad").exists()
