"""`analyze` writes windows.parquet, one row per strategy and (key, window), identical on
both engines, with the strategies table: the windows fired by the end of input are
flagged alike (docs/semantics.md, "End of input"), and the table's counts and latency
percentiles are those of windows.parquet."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_backend.cli import commands as cli
from spark_backend.report.window_table import COLUMNS
from theory.data.generators import generate_trace
from theory.data.io import write_trace


@pytest.mark.slow
def test_windows_parquet_is_identical_on_both_engines(spark, tmp_path, capsys):
    write_trace(generate_trace(400, seed=11), tmp_path / "t.csv")
    specs = ["perfect", "bounded:50ms", "percentile:0.9"]
    tables = {}
    for eng in ("local", "spark"):
        argv = ["analyze", str(tmp_path / "t.csv"), "--engine", eng, "--window", "20ms",
                "--strategies", ",".join(specs), "--out", str(tmp_path / eng)]
        assert cli.main(argv) == 0, capsys.readouterr().err
        tables[eng] = pq.read_table(tmp_path / eng / "windows.parquet")
    local, on_spark = tables["local"], tables["spark"]
    assert local.column_names == list(COLUMNS)
    assert local.equals(on_spark)
    assert (tmp_path / "local" / "strategies.csv").read_text() == (
        tmp_path / "spark" / "strategies.csv"
    ).read_text()
    w = local.to_pandas()
    assert w["fired_by_end_of_input"].any() and not w["fired_by_end_of_input"].all()
    fired = w["first_fire_time_us"].notna()
    assert (w.loc[fired, "latency_us"]
            == w.loc[fired, "first_fire_time_us"] - w.loc[fired, "window_end_us"]).all()
    # no negative latency but by the end of input (the generated rows are causal)
    assert (w.loc[fired & ~w["fired_by_end_of_input"], "latency_us"] >= 0).all()
    with (tmp_path / "local" / "strategies.csv").open() as f:
        import csv

        rows = {r["strategy"]: r for r in csv.DictReader(f)}
    for s in specs:
        mine = w[w["strategy"] == s]
        row = rows[s]
        assert int(row["windows"]) == len(mine)
        assert int(row["end_of_input_windows"]) == int(mine["fired_by_end_of_input"].sum())
        kept = mine.loc[mine["first_fire_time_us"].notna() & ~mine["fired_by_end_of_input"],
                        "latency_us"].to_numpy(np.float64)
        assert float(row["window_latency_p50_us"]) == pytest.approx(np.percentile(kept, 50))
