"""The two engines of `watermarks analyze` (issue 13 finding 2): the local engine's
tables equal Spark's on the same rows, with late firings and a timestamp combiner too;
auto picks local for small traces and Spark for clusters; a missing file fails before any
engine starts; --time-unit and the firing options on both engines."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spark_backend.cli import commands as cli
from spark_backend.cli import engine, jobs
from spark_backend.cli.local import compare_local
from spark_backend.report.comparison import compare
from spark_backend.report.window_table import window_table
from spark_backend.traces.collect import to_trace
from spark_backend.traces.generate import generate_trace_df
from theory.data.generators import generate_trace
from theory.data.io import write_trace
from theory.experiments.first_panes import Firing
from theory.experiments.uncertainty import bootstrap_windows

SPECS = ["perfect", "perfect:oracle", "bounded:1s", "percentile:0.9", "percentile:0.75:hold",
         "static", "flink-bounded:1s", "dynamic", "dynamic:idle=20ms",
         "flink-bounded:5ms:idle=20ms"]


def _tied(tr):
    """Arrivals rounded up to 100 ms: many elements share an arrival time."""
    a = -(-tr.arrival_time // 100_000) * 100_000
    return dataclasses.replace(tr, arrival_time=a)


@pytest.mark.slow
def test_local_tables_equal_spark(spark) -> None:
    tr = _tied(to_trace(generate_trace_df(spark, 2_000, seed=7)))
    df = spark.createDataFrame(
        pd.DataFrame(
            {
                "event_time": tr.event_time,
                "arrival_time": tr.arrival_time,
                "key": tr.key,
                "value": tr.value,
                "partition": tr.partition,
            }
        )
    )
    # the trace spans about 0.2 s of event time: 20 ms windows, late firings within
    # 100 ms (some late data fires late panes, some expires) and earliest pane timestamps;
    # every column of the table, the late panes, final completeness and pane timestamps
    # included, equal
    firing = Firing(100_000, True, "earliest")
    on_spark = compare(df, SPECS, 20_000, seed=1, firing=firing)
    local = compare_local(tr, SPECS, 20_000, seed=1, firing=firing)
    assert on_spark.rows == local.rows == 2_000
    for col, values in on_spark.table.items():
        np.testing.assert_array_equal(np.asarray(values), np.asarray(local.table[col]), col)
    b = SPECS.index("bounded:1s")
    assert on_spark.table["late_count"][b] > 0  # not all zeros
    # every kind runs on Spark, the ones computed in one pass with late data of their own
    for spec in ("dynamic", "dynamic:idle=20ms", "flink-bounded:5ms:idle=20ms"):
        assert on_spark.table["late_count"][SPECS.index(spec)] > 0, spec
    assert on_spark.table["late_panes"][b] > 0 and on_spark.table["dropped"][b] > 0
    assert on_spark.table["final_completeness_mean"][b] > on_spark.table["completeness_mean"][b]
    assert on_spark.table["pane_timestamp_lag_p50"][b] > 0
    # the windows fired by the end of input are flagged alike, and windows.parquet is
    # identical (docs/semantics.md, "End of input")
    eoi = on_spark.table["end_of_input_windows"]
    windows = on_spark.table["windows"]
    assert any(n > 0 for n in eoi) and any(n < w for n, w in zip(eoi, windows, strict=True))
    assert on_spark.windows is not None and local.windows is not None
    assert window_table(on_spark.windows).equals(window_table(local.windows))
    # so analyze --bootstrap, which resamples those rows on the driver, gives one table
    assert bootstrap_windows(window_table(on_spark.windows), 50, 3, late_firings=True).columns \
        == bootstrap_windows(window_table(local.windows), 50, 3, late_firings=True).columns
    assert on_spark.holdback is not None and local.holdback is not None
    pd.testing.assert_frame_equal(on_spark.holdback, local.holdback)
    pd.testing.assert_frame_equal(on_spark.whole.grid, local.whole.grid)
    pd.testing.assert_frame_equal(on_spark.zoom.grid, local.zoom.grid)


def test_auto_picks_local_for_a_small_trace_and_spark_for_a_cluster(tmp_path, monkeypatch):
    f = tmp_path / "t.csv"
    write_trace(generate_trace(200, seed=1), f)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    need = engine.estimated_bytes([f])
    assert need is not None and need > 0
    got, why = engine.choose_engine("auto", None, need)
    assert got == "local" and "quarter" in why
    assert engine.choose_engine("auto", "spark://h:7077", need)[0] == "spark"
    assert engine.choose_engine("auto", None, engine.estimated_bytes([]))[0] == "spark"  # remote
    assert engine.choose_engine("local", "spark://h:7077", need) == ("local", "--engine local")
    monkeypatch.setattr(engine, "available_memory", lambda: 4 * need - 4)
    got, why = engine.choose_engine("auto", None, need)
    assert got == "spark" and "more than a quarter" in why
    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost")
    assert engine.choose_engine("auto", None, 1)[0] == "spark"
    with pytest.raises(ValueError, match="--engine must be one of auto, local, spark"):
        engine.choose_engine("gpu", None, need)


def _no_spark(*args, **kwargs):
    raise AssertionError("Spark was started")


@pytest.mark.parametrize("eng", ["auto", "local", "spark"])
def test_a_missing_trace_fails_before_any_engine(tmp_path, capsys, monkeypatch, eng):
    monkeypatch.setattr(jobs, "get_session", _no_spark)
    argv = ["analyze", str(tmp_path / "nope.csv"), "--engine", eng, "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    assert "nope.csv" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _ms_trace(tmp_path: Path) -> Path:
    tr = generate_trace(1_500, seed=4)
    base = 1_700_000_000_000  # epoch ms, 2023-11-14
    ms = dataclasses.replace(
        tr, event_time=tr.event_time // 1000 + base, arrival_time=tr.arrival_time // 1000 + base
    )
    write_trace(ms, tmp_path / "ms.csv")
    return tmp_path / "ms.csv"


def test_epoch_ms_without_a_unit_is_an_error_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(jobs, "get_session", _no_spark)
    path = _ms_trace(tmp_path)
    assert cli.main(["analyze", str(path), "--engine", "local", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "epoch milliseconds" in err and "--time-unit ms" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_time_unit_gives_the_same_tables_on_both_engines(spark, tmp_path, capsys):
    path = _ms_trace(tmp_path)
    outs = {}
    for eng in ("local", "spark"):
        outs[eng] = tmp_path / eng
        argv = ["analyze", str(path), "--engine", eng, "--time-unit", "ms", "--window", "10s",
                "--strategies", "perfect,bounded:1s,percentile:0.9,bounded:5m",
                "--allowed-lateness", "5s", "--late-firings", "--timestamp-combiner", "latest",
                "--out", str(outs[eng])]
        assert cli.main(argv) == 0, capsys.readouterr().err
        # a bound longer than the trace's 75 s of arrivals is warned about, in the report
        page = (outs[eng] / "index.html").read_text()
        assert "strategy bounded:5m: its bound (300 s) is longer than" in page, eng
    local = (outs["local"] / "strategies.csv").read_text()
    assert local == (outs["spark"] / "strategies.csv").read_text()
    header = local.splitlines()[0].split(",")
    assert {"late_panes", "final_completeness_mean", "pane_timestamp_lag_p50_us"} <= set(header)
    # the times became µs: 10 s windows over a trace of about 75 s, not 12 windows
    rows = pd.read_csv(outs["local"] / "strategies.csv")
    assert rows["windows"].iloc[0] > 12
    # bounded:1s and bounded:5m pass no 10 s window of this 1.5 s event-time span: every
    # window is fired by the end of input, left out of the latency percentiles
    # (docs/semantics.md, "End of input"); the others' latencies are positive
    assert (rows["end_of_input_windows"][[1, 3]] == rows["windows"][[1, 3]]).all()
    assert rows["window_latency_p50_us"][[1, 3]].isna().all()
    assert (rows["window_latency_p50_us"][[0, 2]] > 0).all()
