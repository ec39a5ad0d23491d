"""One set of source watermarks (theory's grammar, tests/theory/watermarks): `analyze`'s
local engine runs the ones Spark's buckets do not compute, with theory's curves (both
engines run every one: tests/spark_backend/cli/test_engines.py), and `simulate` takes
them too, `static` on the built-in events included; a strategy no comparison can run
fails in one line, exit 2, nothing written."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spark_backend.cli import commands as cli
from spark_backend.cli import jobs
from theory.data.generators import generate_trace
from theory.data.io import read_trace, write_trace
from theory.experiments.first_panes import Firing, WindowIndex, summary_row
from theory.watermarks.spec import make_source_watermark

SPECS = ["dynamic", "dynamic:idle=10ms", "flink-bounded:10ms", "flink-bounded:10ms:idle=20ms"]


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("t") / "t.csv"
    write_trace(generate_trace(400, seed=3), path)
    return path


def test_analyze_runs_every_source_watermark_locally(trace_file, tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["analyze", str(trace_file), "--engine", "local", "--window", "20ms",
            "--strategies", ",".join(SPECS), "--out", str(out)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    with (out / "strategies.csv").open() as f:
        rows = {r["strategy"]: r for r in csv.DictReader(f)}
    t, _ = read_trace(trace_file)
    t = t.sorted_by_arrival()
    index = WindowIndex.of(t.event_time, t.arrival_time, t.key, 20_000)
    for spec in SPECS:
        curve = make_source_watermark(spec).curve(t.event_time, t.arrival_time, t.partition)
        late = int(np.count_nonzero(t.event_time < curve.before(t.arrival_time)))
        want = summary_row(spec, index.elements, index.panes(curve, Firing()), late, len(t))
        row = rows[spec]
        assert int(row["late_count"]) == want["late_count"], spec
        assert int(row["dropped"]) == want["dropped"], spec
        assert float(row["completeness_mean"]) == want["completeness_mean"], spec
    # idleness lets the job's watermark pass idle partitions: fewer windows wait for them
    assert int(rows["dynamic:idle=10ms"]["late_count"]) >= int(rows["dynamic"]["late_count"])
    assert rows["flink-bounded:10ms:idle=20ms"] != rows["flink-bounded:10ms"]


def _no_spark(*args, **kwargs):
    raise AssertionError("Spark was started")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--engine", "spark", "--strategies", "perfect,ingress"], "'ingress' cannot be compared"),
        (["--engine", "local", "--strategies", "ingress"], "'ingress' cannot be compared"),
        (["--engine", "local", "--strategies", "flink-bounded:1s:idle=0s"], "idle timeout"),
    ],
)
def test_a_strategy_an_engine_cannot_run_is_one_line(
    trace_file, tmp_path, capsys, monkeypatch, argv, needle
):
    monkeypatch.setattr(jobs, "get_session", _no_spark)
    out = tmp_path / "o"
    assert cli.main(["analyze", str(trace_file), *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_simulate_takes_flink_idleness(tmp_path, capsys):
    out = tmp_path / "s"
    argv = ["simulate", "--events", "300", "--engine", "local", "--watermark",
            "flink-bounded:10s:idle=1m", "--out", str(out)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert (out / "metrics.csv").exists()


def test_static_runs_on_the_built_in_events(tmp_path, capsys):
    """The generators put key % partitions in each partition, so no partition is
    time-ordered: `static` (the least unread event time per partition) runs on them and
    equals `perfect` (docs/semantics.md, "Static partitions"), through the CLI and the
    API."""
    from theory.pipeline import chapter3
    from theory.pipeline.metrics import stage_metrics
    from theory.pipeline.simulator import simulate

    traces = chapter3.traces(300, seed=1)
    assert any(
        np.any(np.diff(t.sorted_by_arrival().event_time[t.sorted_by_arrival().partition == q])
               < 0)
        for t in traces.values() for q in np.unique(t.partition)
    )  # not time-ordered
    got = {
        spec: stage_metrics(simulate(chapter3.pipeline(watermark=spec), traces))
        for spec in ("static", "perfect")
    }
    assert pd.DataFrame(got["static"]).equals(pd.DataFrame(got["perfect"]))  # NaNs alike
    metrics = {}
    for spec in ("static", "perfect"):
        out = tmp_path / spec
        argv = ["simulate", "--events", "300", "--seed", "1", "--engine", "local",
                "--watermark", spec, "--out", str(out)]
        assert cli.main(argv) == 0, capsys.readouterr().err
        metrics[spec] = (out / "metrics.csv").read_text()
    assert metrics["static"] == metrics["perfect"]


def test_analyze_runs_static_on_generated_events(trace_file, tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["analyze", str(trace_file), "--engine", "local", "--window", "20ms",
            "--strategies", "static,perfect", "--out", str(out)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    with (out / "strategies.csv").open() as f:
        rows = {r.pop("strategy"): r for r in csv.DictReader(f)}
    assert rows["static"] == rows["perfect"]
