"""`analyze` writes windows.parquet, one row per strategy and (key, window), beside the
strategies table, whose window counts, end-of-input counts and latency percentiles are
those of windows.parquet (docs/semantics.md, "End of input"). Both engines build the
same windows.parquet: tests/spark_backend/cli/test_engines.py."""

from __future__ import annotations

import csv

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_backend.cli import commands as cli
from spark_backend.report.window_table import COLUMNS
from theory.data.generators import generate_trace
from theory.data.io import write_trace


def test_windows_parquet_matches_the_strategies_table(tmp_path, capsys):
    write_trace(generate_trace(400, seed=11), tmp_path / "t.csv")
    specs = ["perfect", "bounded:50ms", "percentile:0.9"]
    argv = ["analyze", str(tmp_path / "t.csv"), "--engine", "local", "--window", "20ms",
            "--strategies", ",".join(specs), "--out", str(tmp_path / "local")]
    assert cli.main(argv) == 0, capsys.readouterr().err
    local = pq.read_table(tmp_path / "local" / "windows.parquet")
    assert local.column_names == list(COLUMNS)
    w = local.to_pandas()
    assert w["fired_by_end_of_input"].any() and not w["fired_by_end_of_input"].all()
    fired = w["first_fire_time_us"].notna()
    assert (w.loc[fired, "latency_us"]
            == w.loc[fired, "first_fire_time_us"] - w.loc[fired, "window_end_us"]).all()
    # no negative latency but by the end of input (the generated rows are causal)
    assert (w.loc[fired & ~w["fired_by_end_of_input"], "latency_us"] >= 0).all()
    with (tmp_path / "local" / "strategies.csv").open() as f:
        rows = {r["strategy"]: r for r in csv.DictReader(f)}
    for s in specs:
        mine = w[w["strategy"] == s]
        row = rows[s]
        assert int(row["windows"]) == len(mine)
        assert int(row["end_of_input_windows"]) == int(mine["fired_by_end_of_input"].sum())
        kept = mine.loc[mine["first_fire_time_us"].notna() & ~mine["fired_by_end_of_input"],
                        "latency_us"].to_numpy(np.float64)
        assert float(row["window_latency_p50_us"]) == pytest.approx(np.percentile(kept, 50))
