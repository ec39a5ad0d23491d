"""``simulate --engine spark``: every grouping stage on Spark, partitioned by key, gives
the local simulator's result, every stage's series, holds and panes (a small trace; the
1M-event equality is ``bench/simulate_spark.py``'s). Times are µs."""

import pytest

from spark_backend.simulation import SparkGrouping
from theory.experiments.tradeoff import STAGE, grouping_pipeline
from theory.pipeline import chapter3
from theory.pipeline.simulator import differences, simulate


def assert_same_simulation(local, spark) -> None:
    assert differences(local, spark) == []


@pytest.mark.slow
def test_spark_simulation_equals_local(spark):
    # the chapter-3 pipeline under a heuristic watermark: late data, sessions on the
    # mixed path, three grouping stages
    pipe = chapter3.pipeline("bounded:30s")
    traces = chapter3.traces(3_000, seed=4)
    grouping = SparkGrouping(spark, partitions=3)
    assert_same_simulation(simulate(pipe, traces), simulate(pipe, traces, grouping=grouping))
    # two session stages over many keys settle in >= 2 rounds; the global mean has one key
    assert len(grouping.rounds) == 3 and min(grouping.rounds[:2]) >= 2 == grouping.rounds[2] + 1
    # late firings under EARLIEST on one trace: the count path, whose holds depend on
    # the other keys' (the rounds settle them)
    pipe = grouping_pipeline(
        "bounded:20s", "fixed:1m", allowed_lateness=600_000_000, late_firings=True,
        timestamp_combiner="earliest",
    )  # fmt: skip
    trace = {"in": traces["mobile_in"]}
    local = simulate(pipe, trace)
    assert local.stages[STAGE].path == "vectorised"
    assert_same_simulation(local, simulate(pipe, trace, grouping=SparkGrouping(spark, 4)))


def test_spark_connect_is_refused():
    with pytest.raises(ValueError, match="classic Spark session"):
        SparkGrouping(object())


@pytest.mark.slow
def test_cli_engines_write_the_same_outputs(spark, tmp_path, capsys):
    """``simulate --engine spark`` and ``--engine local`` write identical series and
    metrics, and each states its engine and its peak memory per event."""
    import pyarrow.parquet as pq

    from spark_backend import cli

    outs = {}
    for engine in ("local", "spark"):
        out = tmp_path / engine
        argv = ["simulate", "--events", "2000", "--watermark", "bounded:30s",
                "--engine", engine, "--partitions", "2", "--out", str(out)]  # fmt: skip
        assert cli.main(argv) == 0
        said = capsys.readouterr().out
        assert f"({engine} engine)" in said
        assert "bytes per event at most" in said
        outs[engine] = out
    local, on_spark = (pq.read_table(outs[e] / "series.parquet") for e in ("local", "spark"))
    assert local.num_rows > 0 and local.equals(on_spark)
    metrics = [(outs[e] / "metrics.csv").read_text() for e in ("local", "spark")]
    assert metrics[0] == metrics[1]


def test_cli_refuses_bad_partitions_before_work(tmp_path, capsys):
    from spark_backend import cli

    argv = ["simulate", "--events", "10", "--partitions", "0", "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    assert "--partitions must be >= 1, got 0" in capsys.readouterr().err
