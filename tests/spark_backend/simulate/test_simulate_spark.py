"""``simulate --engine spark`` (:mod:`spark_backend.simulate.simulation`): the elements on
the executors by key partition, every grouping stage in rounds, gives the local
simulator's result, every stage's series, holds, late elements and panes (a small trace;
the 1M-event equality is ``bench/simulate_spark.py``'s). Times are µs."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_backend.session.job_count import JobTally
from spark_backend.simulate.compare import keyed_differences
from spark_backend.simulate.simulation import simulate_keyed, spark_context
from theory.experiments.tradeoff import STAGE, grouping_pipeline
from theory.pipeline import chapter3
from theory.pipeline.graph import GraphError
from theory.pipeline.processing import Processing
from theory.pipeline.simulator import simulate
from theory.pipeline.stages import GroupByWindow, Pipeline, Source


@pytest.mark.slow
def test_spark_simulation_equals_local(spark, tmp_path):
    # the chapter-3 pipeline under a heuristic watermark: late data, sessions on the
    # mixed path, three grouping stages (one re-keyed to one key: a shuffle), a flatten
    # the sources made block by block on the executors (the driver-side source: below)
    pipe = chapter3.pipeline("bounded:30s")
    blocked = chapter3.block_traces(3_000, seed=4, blocks=4)
    traces = {name: t.whole() for name, t in blocked.items()}
    local = simulate(pipe, traces)
    keyed = simulate_keyed(spark, pipe, blocked, tmp_path / "a", partitions=3)
    assert keyed_differences(local, keyed) == []
    stages = keyed.stages
    # the session stages over many keys settle in >= 2 rounds; the global mean has one key
    assert min(stages[s].rounds for s in ("mobile_sessions", "console_sessions")) >= 2
    assert stages["average_session_length"].rounds == 1
    # its Spark jobs: a source's blocks and summaries in a job per cores' worth of its 4
    # blocks, its element-wise stage with a shuffle in one; a grouping stage's rounds and
    # its outputs; the flatten's and the global stage's shuffles in their first jobs
    chunks = -(-4 // spark.sparkContext.defaultParallelism)
    jobs = 2 * (chunks + 1) + sum(s.rounds + 1 for s in stages.values() if s.rounds) + 1
    assert keyed.spark_jobs == JobTally(jobs, jobs + 4, 4)  # (a shuffle: a stage more)
    assert local.stages["mobile_sessions"].late_count > 0  # (the case has late data)
    # each partition ran over its own instants, well under the stage's every arrival
    arrivals = np.unique(traces["mobile_in"].arrival_time).size
    assert 0 < stages["mobile_sessions"].largest_grid < arrivals * 0.75
    # the panes are the tasks' files, one per partition that fired any
    files = sorted((tmp_path / "a" / "panes" / "mobile_sessions").glob("part-*.parquet"))
    assert len(files) == 3
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    assert rows == len(local.stages["mobile_sessions"].panes)
    assert not (tmp_path / "a" / "_sources").exists()
    # the comparison can fail: another watermark's local run differs from this one
    other = simulate(chapter3.pipeline("bounded:10s"), traces)
    assert any("series" in d for d in keyed_differences(other, keyed))
    # late firings under EARLIEST on one trace: the count path, whose holds depend on
    # the other keys' (the rounds settle them)
    pipe = grouping_pipeline(
        "bounded:20s", "fixed:1m", allowed_lateness=600_000_000, late_firings=True,
        timestamp_combiner="earliest",
    )  # fmt: skip
    trace = {"in": traces["mobile_in"]}
    local = simulate(pipe, trace)
    assert local.stages[STAGE].path == "vectorised"
    keyed = simulate_keyed(spark, pipe, trace, tmp_path / "b", partitions=4)
    assert keyed_differences(local, keyed) == []
    assert keyed.stages[STAGE].rounds >= 2


def test_bad_input_is_refused_before_spark_work(tmp_path):
    pipe = chapter3.pipeline()
    # no session is touched: an object that is not one would fail later, differently
    with pytest.raises(GraphError, match=r"no trace given for source stage.*console_in"):
        simulate_keyed(object(), pipe, {"mobile_in": None}, tmp_path)
    slow = Pipeline([
        Source("in"),
        GroupByWindow("g", "in", pipe.stage("mobile_sessions").strategy, "count",
                      processing=Processing(latency=5)),
    ])  # fmt: skip
    with pytest.raises(ValueError, match=r"stage 'g': .*needs instant processing"):
        simulate_keyed(object(), slow, {"in": None}, tmp_path)
    with pytest.raises(ValueError, match="partitions must be >= 1"):
        simulate_keyed(_FakeSession(), pipe, dict.fromkeys(pipe.source_names()), tmp_path,
                       partitions=0)  # fmt: skip
    assert not any(tmp_path.iterdir())


class _FakeSession:
    """Has a SparkContext whose parallelism is asked for, and nothing else."""

    class sparkContext:  # (the session's attribute's name)
        defaultParallelism = 2


def test_spark_connect_is_refused():
    with pytest.raises(ValueError, match="classic Spark session"):
        spark_context(object())


@pytest.mark.slow
def test_cli_engines_write_the_same_outputs(spark, tmp_path, capsys):
    """``simulate --engine spark`` and ``--engine local`` write identical series and
    metrics, and each states its engine and its peak memory per event; Spark also writes
    the panes and late elements, and leaves no temporary directory."""
    from spark_backend.cli import commands as cli

    outs = {}
    for engine in ("local", "spark"):
        out = tmp_path / engine
        # (the inputs made in blocks of users: by Spark's tasks, here for local)
        argv = ["simulate", "--events", "2000", "--watermark", "bounded:30s", "--blocks",
                "3", "--engine", engine, "--partitions", "2", "--out", str(out)]  # fmt: skip
        assert cli.main(argv) == 0
        said = capsys.readouterr().out
        assert f"({engine} engine)" in said
        assert "bytes per event at most" in said
        outs[engine] = out
    local, on_spark = (pq.read_table(outs[e] / "series.parquet") for e in ("local", "spark"))
    assert local.num_rows > 0 and local.equals(on_spark)
    metrics = [(outs[e] / "metrics.csv").read_text() for e in ("local", "spark")]
    assert metrics[0] == metrics[1]
    assert pq.read_table(outs["spark"] / "panes" / "average_session_length").num_rows > 0
    assert (outs["spark"] / "late" / "mobile_sessions").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local", "spark"]


def test_cli_refuses_bad_partitions_and_blocks_before_work(tmp_path, capsys):
    from spark_backend.cli import commands as cli

    for bad, message in [
        (["--partitions", "0"], "--partitions must be >= 1, got 0"),
        (["--blocks", "0"], "--blocks must be in 1..100, got 0"),
        (["--blocks", "101"], "--blocks must be in 1..100, got 101"),
        (["--blocks", "2", "--trace", str(tmp_path)], "--blocks applies to generated events"),
    ]:
        argv = ["simulate", "--events", "10", *bad, "--out", str(tmp_path / "o")]
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
