"""Tables a reader gets (issue 13 findings 5 and 7): units in column names, times as
ISO-8601 UTC beside µs, infinities as `inf`, non-zero fractions never shown as zero."""

from __future__ import annotations

import csv
import re

import pyarrow.csv as pacsv
from hypothesis import given
from hypothesis import strategies as st

from spark_backend.cli import commands as cli
from spark_backend.report.report import Report, percent
from spark_backend.report.tables import with_units
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP


@given(st.floats(min_value=1e-12, max_value=1 - 1e-12))
def test_a_fraction_that_is_not_zero_or_one_never_shows_as_such(v: float) -> None:
    shown = percent(v)
    assert shown not in ("0.00 %", "100.00 %")


def test_fourteen_late_elements_are_not_zero_percent() -> None:
    assert percent(14 / 500_000) == "<0.01 %"
    assert percent(1 - 14 / 500_000) == ">99.99 %"
    assert percent(0.0) == "0.00 %" and percent(1.0) == "100.00 %"
    assert percent(0.25) == "25.00 %"


def test_units_in_names_and_iso_times_beside_micros(tmp_path) -> None:
    t = with_units(
        {"stage": ["a", "b", "c"], "lag": [1.0, float("inf"), 2.0],
         "final": [0, MAX_TIMESTAMP, MIN_TIMESTAMP]},
        durations=["lag"], times=["final"],
    )
    assert list(t) == ["stage", "lag_us", "final_us", "final_utc"]
    assert t["final_utc"] == ["1970-01-01T00:00:00Z", "inf", "-inf"]
    r = Report("t")
    r.table("x", "x", t)
    r.write(tmp_path / "out")
    with (tmp_path / "out" / "x.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [row["lag_us"] for row in rows] == ["1", "inf", "2"]  # integer µs
    assert [row["final_us"] for row in rows] == ["0", "inf", "-inf"]
    page = (tmp_path / "out" / "index.html").read_text()
    cells = re.findall(r"<td>([^<]*)</td>", page)
    assert cells[2::4] == ["0", "inf", "-inf"]  # the page shows the bounds as the CSV does
    assert "9,223,372" not in page


def test_simulate_metrics_name_units_and_write_inf(tmp_path, capsys) -> None:
    out = tmp_path / "sim"
    assert cli.main(["simulate", "--events", "2000", "--out", str(out)]) == 0
    text = (out / "metrics.csv").read_text()
    assert "9223372036854775" not in text  # MAX_TIMESTAMP written as inf
    with (out / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert "watermark_lag_p50_us" in rows[0] and "window_latency_p99_us" in rows[0]
    # finished bounded sources end at the end of time
    assert {r["final_input_watermark_utc"] for r in rows} == {"inf"}
    assert {r["final_input_watermark_us"] for r in rows} == {"inf"}
    assert pacsv.read_csv(out / "metrics.csv").num_rows == 6
