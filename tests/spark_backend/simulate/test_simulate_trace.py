"""`watermarks simulate --trace FILE --windowing ...` (issue 13 finding 9): the user's
trace through one grouping stage, with allowed lateness, late firings and the
output-timestamp policy."""

from __future__ import annotations

import csv
from collections import defaultdict

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_backend.cli import commands as cli
from theory.data.generators import generate_trace
from theory.data.io import write_trace
from theory.experiments.tradeoff import STAGE, final_values, grouping_pipeline
from theory.pipeline.simulator import simulate
from theory.time import SECOND


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "t.parquet"
    write_trace(generate_trace(2_000, seed=3, keys=5, rate=20.0), path)
    return path


def _metrics(out) -> dict[str, dict[str, str]]:
    with (out / "metrics.csv").open() as f:
        return {r["stage"]: r for r in csv.DictReader(f)}


def test_late_firings_complete_every_window(trace_file, tmp_path, capsys):
    """With late firings and a lateness above every delay, each window's last pane is the
    sum of all its elements (counted here directly from the trace)."""
    argv = ["simulate", "--trace", str(trace_file), "--watermark", "bounded:1s",
            "--windowing", "fixed:10s", "--allowed-lateness", "1h", "--late-firings",
            "--out", str(tmp_path / "late")]
    assert cli.main(argv) == 0
    once = ["simulate", "--trace", str(trace_file), "--watermark", "bounded:1s",
            "--windowing", "fixed:10s", "--out", str(tmp_path / "once")]
    assert cli.main(once) == 0
    late, first = _metrics(tmp_path / "late"), _metrics(tmp_path / "once")
    assert int(late["in"]["late_count"]) > 0
    assert int(late[STAGE]["panes"]) > int(first[STAGE]["panes"])  # the late panes
    assert int(late[STAGE]["dropped"]) == 0 < int(first[STAGE]["dropped"])

    from theory.data.io import read_trace

    tr, _ = read_trace(trace_file)
    want: dict[tuple[object, int], float] = defaultdict(float)
    for k, e, v in zip(tr.key.tolist(), tr.event_time.tolist(), tr.value.tolist(), strict=True):
        want[(k, e - e % (10 * SECOND))] += v
    pipe = grouping_pipeline("bounded:1s", "fixed:10s", allowed_lateness=3600 * SECOND,
                             late_firings=True)
    got = final_values(simulate(pipe, {"in": tr}))
    assert {(k, s): v for (k, s, _), v in got.items()} == pytest.approx(dict(want))


def test_sessions_and_the_output_timestamp_policy(trace_file, tmp_path):
    outs = {}
    for combiner in ("eow", "earliest"):
        outs[combiner] = tmp_path / combiner
        argv = ["simulate", "--trace", str(trace_file), "--windowing", "sessions:2s",
                "--timestamp-combiner", combiner, "--out", str(outs[combiner])]
        assert cli.main(argv) == 0
    eow, earliest = _metrics(outs["eow"]), _metrics(outs["earliest"])
    assert int(eow[STAGE]["panes"]) == int(earliest[STAGE]["panes"]) > 0
    # holding at the earliest element keeps the output watermark behind EOW's
    ow = {}
    for c, out in outs.items():
        t = pq.read_table(out / "series.parquet").to_pandas()
        ow[c] = t[t["stage"] == STAGE]["output_watermark_us"].to_numpy()  # named by unit
    assert np.all(ow["earliest"] <= ow["eow"]) and np.any(ow["earliest"] < ow["eow"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--windowing", "fixed:1m"], "apply to --trace"),
        (["--trace", "{f}", "--windowing", "hopping:1m"], "bad window spec 'hopping:1m'"),
        (["--trace", "{f}", "--late-firings"], "--late-firings needs --allowed-lateness"),
        (["--trace", "{d}/missing.csv"], "missing.csv': no such file or directory"),
    ],
)
def test_bad_simulate_options_fail_before_reading(trace_file, tmp_path, capsys, args, message):
    argv = ["simulate", *[a.format(f=trace_file, d=tmp_path) for a in args],
            "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
