"""The report's cross-system section and ``analyze --systems``: tables and figure written,
every difference explained, bad requests refused before any Spark work."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spark_backend.cli import commands as cli
from spark_backend.report import systems
from spark_backend.report.report import Report
from spark_backend.traces.collect import to_trace
from spark_backend.traces.generate import generate_trace_df
from theory import SECOND, Trace, chapter3
from theory.data.io import write_trace


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_section_tables_figure_and_attribution(tmp_path: Path) -> None:
    trace = Trace.concat(chapter3.traces(1500, seed=3).values()).sorted_by_arrival()
    report = Report("t")
    systems.systems_section(
        report, trace, ["beam", "flink", "spark"], 10 * SECOND, 120 * SECOND, "n"
    )
    report.write(tmp_path / "r")
    table = _rows(tmp_path / "r" / "systems.csv")
    assert [r["system"] for r in table] == ["beam", "flink", "spark"]
    att = _rows(tmp_path / "r" / "systems_attribution.csv")
    last = {}
    for r in att:
        last[(r["from"], r["to"])] = (int(r["windows left"]), int(r["rows left"]))
    assert last == {p: (0, 0) for p in [("beam", "flink"), ("beam", "spark"), ("flink", "spark")]}
    # each partition an input, Flink with withIdleness: idle handling explains some
    idle = [r for r in att if r["convention switched"] == "idle_timeout"]
    assert [(r["from"], r["to"]) for r in idle] == [("beam", "flink"), ("flink", "spark")]
    assert all(int(r["windows it explains"]) + int(r["rows it explains"]) > 0 for r in idle)
    assert (tmp_path / "r" / "systems.png").stat().st_size > 0
    windows = _rows(tmp_path / "r" / "systems_windows.csv")
    # the columns name their unit: integer µs, blank for a window a system never fires
    fired = [sum(r[f"{s}_latency_us"] != "" for r in windows) for s in ("beam", "flink", "spark")]
    assert fired == [int(r["windows_fired"]) for r in table]
    assert all(r["window_start_utc"].endswith("Z") for r in windows)
    html = " ".join((tmp_path / "r" / "index.html").read_text().split())
    assert "Which windows fire and when" in html
    assert "each of its 4 partitions an input" in html and "withIdleness 60 s" in html


def test_partitions_are_inputs_up_to_the_limit() -> None:
    trace = Trace.concat(chapter3.traces(300, seed=1).values())
    assert systems.inputs_of(trace) == ("partition", "each of its 4 partitions an input")
    many = dataclasses.replace(trace, partition=np.arange(len(trace), dtype=np.int64))
    assert systems.inputs_of(many)[0] is None
    assert "more than 256 inputs" in systems.inputs_of(many)[1]
    none = dataclasses.replace(trace, partition=None)
    assert systems.inputs_of(none) == (None, "one input (the trace has no partition column)")


def test_bound_comes_from_the_first_bounded_strategy() -> None:
    assert systems.bound_of(["perfect", "bounded:30s", "bounded:1m"]) == 30 * SECOND
    with pytest.raises(ValueError, match="needs a bounded:<duration> strategy"):
        systems.bound_of(["perfect", "percentile:0.9"])


def test_trace_of_collects_columns_and_caps_rows(spark: Any, monkeypatch) -> None:
    rows = [(300 - i, 1000 * i, i % 7, i % 3) for i in range(300)]  # arrival order reversed
    df = spark.createDataFrame(
        rows, "event_time LONG, arrival_time LONG, key LONG, partition LONG"
    )
    trace, note = systems.trace_of(df, 300)
    assert note == "all 300 rows"
    assert trace.partition is not None
    got = sorted(
        zip(
            trace.arrival_time.tolist(),
            trace.event_time.tolist(),
            trace.key.tolist(),
            trace.partition.tolist(),
            strict=True,
        )
    )
    assert got == sorted((a, e, k, p) for e, a, k, p in rows)
    monkeypatch.setattr(systems, "MAX_ROWS", 100)
    capped, note = systems.trace_of(df.drop("partition"), 300)
    assert note == "the first 100 of 300 rows by arrival"
    assert capped.partition is None
    assert sorted(capped.arrival_time.tolist()) == [1000 * i for i in range(100)]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--systems", "beam,storm"], "unknown system 'storm'"),
        (["--systems", "beam,spark", "--strategies", "perfect"], "needs a bounded:<duration>"),
    ],
)
def test_bad_systems_requests_fail_before_spark(tmp_path: Path, capsys, extra, needle) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("event_time,arrival_time\n1,2\n")
    assert cli.main(["analyze", str(trace), "--out", str(tmp_path / "o"), *extra]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_analyze_with_systems_writes_the_section(spark: Any, tmp_path: Path) -> None:
    write_trace(to_trace(generate_trace_df(spark, 2_000, seed=4)), tmp_path / "t.csv")
    out = tmp_path / "o"
    argv = [
        "analyze",
        str(tmp_path / "t.csv"),
        "--strategies",
        "bounded:5s",
        "--systems",
        "spark,beam",
        "--out",
        str(out),
    ]
    assert cli.main(argv) == 0
    assert [r["system"] for r in _rows(out / "systems.csv")] == ["spark", "beam"]
    html = " ".join((out / "index.html").read_text().split())
    assert "One trace through spark, beam" in html
    assert "partitions an input" in html  # the generated trace has a partition column
    att = _rows(out / "systems_attribution.csv")
    assert (att[-1]["windows left"], att[-1]["rows left"]) == ("0", "0")
