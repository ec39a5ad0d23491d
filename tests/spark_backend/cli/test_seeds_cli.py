"""`demo --seeds N` and `simulate --seeds N` (means and t intervals over seeds), `analyze
--bootstrap N` (percentile intervals over windows) and `demo --save-trace` (the trace
`analyze` reads back to the demo's tables): docs/researcher.md, "Seeds and uncertainty"."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_backend.cli import commands as cli
from spark_backend.cli.jobs import demo_trace, strategy_table
from spark_backend.cli.local import compare_local
from spark_backend.cli.saved_trace import UNIT_KEY, check_save_trace, write_saved_trace
from tests.helpers.units import output_unit_errors, unit_errors_of_name
from theory.experiments.uncertainty import sweep_seeds
from theory.time import MINUTE

EVENTS, SEED, SEEDS = 1500, 5, 3
SPECS = "perfect,bounded:10s,percentile:0.9"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, Path]:
    """``demo --seeds 3 --save-trace`` on the local engine: (report, saved trace)."""
    root = tmp_path_factory.mktemp("seeds")
    out, trace = root / "report", root / "trace.parquet"
    argv = ["demo", "--events", str(EVENTS), "--seed", str(SEED), "--engine", "local",
            "--systems", "none", "--strategies", SPECS, "--window", "1m",
            "--seeds", str(SEEDS), "--save-trace", str(trace), "--out", str(out)]
    assert cli.main(argv) == 0
    return out, trace


@pytest.fixture(scope="module")
def reanalyzed(demo) -> Path:
    """``analyze`` of the saved trace with the demo's strategies and window, and a
    bootstrap."""
    out = demo[0].parent / "analyze"
    argv = ["analyze", str(demo[1]), "--engine", "local", "--strategies", SPECS,
            "--window", "1m", "--bootstrap", "200", "--seed", "4", "--out", str(out)]
    assert cli.main(argv) == 0
    return out


def test_the_seeds_table_is_each_metrics_mean_and_t_interval(demo) -> None:
    """Each seed's comparison recomputed from its trace: seeds.csv holds the mean of
    their metrics and mean ± t(0.975, 2)·s/√3, µs rounded to integers."""
    seeds = sweep_seeds(SEED, SEEDS)
    tables = [
        strategy_table(compare_local(demo_trace(EVENTS, s), SPECS.split(","), MINUTE))
        for s in seeds
    ]
    rows = _rows(demo[0] / "seeds.csv")
    assert [r["strategy"] for r in rows] == SPECS.split(",")
    base = _rows(demo[0] / "strategies.csv")  # the base seed's table is the first run
    assert [r["late_count"] for r in base] == [str(v) for v in tables[0]["late_count"]]
    for i, row in enumerate(rows):
        assert row["seeds"] == str(SEEDS)
        for metric, col, us in (("late_count", "late_count", False),
                                ("completeness_mean", "completeness_mean", False),
                                ("window_latency_p50_us", "window_latency_p50", True)):
            values = [float(t[metric][i]) for t in tables]  # type: ignore[arg-type]
            mean = float(np.mean(values))
            half = 4.302652729749462 * float(np.std(values, ddof=1)) / math.sqrt(SEEDS)
            suffix = "_us" if us else ""
            got = [row[f"{col}_{s}{suffix}"] for s in ("mean", "ci_low", "ci_high")]
            if us:
                assert got == [str(round(x)) for x in (mean, mean - half, mean + half)]
            else:
                assert [float(x) for x in got] == pytest.approx([mean, mean - half, mean + half])
        assert (row["late_count_mean"], row["late_count_ci_low"]) != ("", "")


def test_the_report_shows_the_headline_metrics_over_seeds(demo) -> None:
    html = (demo[0] / "index.html").read_text()
    assert "Over seeds: mean and 95 % confidence interval" in html
    section = html.split("Over seeds")[1].split("</section>")[0]
    assert "<th>window_latency_p50_mean_us</th>" in section
    assert "<th>dropped_mean</th>" not in section  # in seeds.csv only
    assert "dropped_mean" in (demo[0] / "seeds.csv").read_text().splitlines()[0]


def test_the_saved_trace_reads_back_to_the_demos_tables(demo, reanalyzed) -> None:
    assert pq.read_schema(demo[1]).metadata[UNIT_KEY] == b"us"
    assert (reanalyzed / "strategies.csv").read_text() == (demo[0] / "strategies.csv").read_text()
    assert pq.read_table(reanalyzed / "windows.parquet").equals(
        pq.read_table(demo[0] / "windows.parquet"))
    # the partitions too: which one holds the watermark back
    assert (reanalyzed / "holdback.csv").read_text() == (demo[0] / "holdback.csv").read_text()


def test_bootstrap_intervals_surround_the_strategies_estimates(reanalyzed) -> None:
    strategies = {r["strategy"]: r for r in _rows(reanalyzed / "strategies.csv")}
    rows = _rows(reanalyzed / "bootstrap.csv")
    assert [r["strategy"] for r in rows] == SPECS.split(",")
    for r in rows:
        assert r["resamples"] == "200" and r["windows"] == strategies[r["strategy"]]["windows"]
        for m in ("completeness_mean", "complete_fraction", "window_latency_p50_us",
                  "window_latency_p99_us"):
            assert r[m] == strategies[r["strategy"]][m], m
            base = m.removesuffix("_us")
            unit = m[len(base):]
            low, high = float(r[f"{base}_ci_low{unit}"]), float(r[f"{base}_ci_high{unit}"])
            assert low <= high
        assert "late_count_ci_low" not in r  # counts of the whole trace are exact
    assert any(float(r["completeness_mean_ci_low"]) < float(r["completeness_mean_ci_high"])
               for r in rows)
    assert "Bootstrap intervals over windows" in (reanalyzed / "index.html").read_text()


def test_every_new_table_names_its_units(demo, reanalyzed, tmp_path) -> None:
    assert unit_errors_of_name("window_latency_p50_ci_low")
    assert unit_errors_of_name("source_lag_p99_mean")
    assert not unit_errors_of_name("end_of_input_windows_ci_high")
    out = tmp_path / "simulate"
    argv = ["simulate", "--events", "300", "--engine", "local", "--seeds", "3", "--seed", "2",
            "--out", str(out)]
    assert cli.main(argv) == 0
    stages = [r["stage"] for r in _rows(out / "metrics.csv")]
    rows = _rows(out / "seeds.csv")
    assert [r["stage"] for r in rows] == stages and {r["seeds"] for r in rows} == {"3"}
    assert "watermark_lag_p50_mean_us" in rows[0]
    for where in (demo[0], reanalyzed, out):
        assert output_unit_errors(where) == [], where


def test_simulate_seeds_are_the_seeds_simulations(tmp_path) -> None:
    from theory.pipeline import chapter3
    from theory.pipeline.metrics import stage_metrics
    from theory.pipeline.simulator import simulate

    out = tmp_path / "s"
    assert cli.main(["simulate", "--events", "200", "--engine", "local", "--seeds", "2",
                     "--out", str(out)]) == 0
    late = [
        [m.watermark_lag_p50 for m in stage_metrics(
            simulate(chapter3.pipeline(), chapter3.traces(200, seed=s), seed=s))]
        for s in sweep_seeds(0, 2)
    ]
    rows = _rows(out / "seeds.csv")
    for i, row in enumerate(rows):
        # over each seed's metrics.csv, whose µs are integers; t(0.975, 1) = 12.7062047
        values = [round(x[i]) for x in late]
        mean = float(np.mean(values))
        half = 12.706204736174694 * float(np.std(values, ddof=1)) / math.sqrt(2)
        low, high = mean - half, mean + half
        assert row["watermark_lag_p50_mean_us"] == str(round(mean))
        assert row["watermark_lag_p50_ci_low_us"] == str(round(low))
        assert row["watermark_lag_p50_ci_high_us"] == str(round(high))


def test_save_trace_refuses_what_it_could_lose(tmp_path) -> None:
    out = tmp_path / "out"
    ok = check_save_trace(tmp_path / "t.parquet", out)
    assert ok == tmp_path / "t.parquet"
    foreign = tmp_path / "mine.parquet"
    foreign.write_bytes(b"not a saved trace")
    with pytest.raises(ValueError, match="exists and is no trace --save-trace wrote"):
        check_save_trace(foreign, out)
    import pyarrow as pa

    write_saved_trace(pa.table({"event_time": [1], "arrival_time": [2]}), ok)
    assert check_save_trace(ok, out) == ok  # a previous saved trace is replaced
    for path, needle in ((out / "t.parquet", "inside --out"),
                         (tmp_path / "in" / "x.parquet", "would overwrite the input"),
                         (tmp_path / "t.csv", "name a .parquet file")):
        with pytest.raises(ValueError, match=needle):
            check_save_trace(path, out, [tmp_path / "in"])



@pytest.mark.parametrize(("argv", "engine"), [
    (["demo"], "local"),  # the demo's default engine is Spark; its sweep is local
    (["demo", "--engine", "auto"], "local"),
    (["demo", "--engine", "spark"], "spark"),
    (["simulate"], "local"),
    (["simulate", "--engine", "spark"], "spark"),
])
def test_seeds_run_locally_unless_spark_is_asked(argv, engine) -> None:
    from spark_backend.cli.seeds import sweep_engine

    assert sweep_engine(cli.build_parser().parse_args(argv)) == engine
