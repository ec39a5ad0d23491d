"""The demo report: every file written, numbers equal to theory's, images that load in a
real browser, and nothing half-written on failure."""

import csv
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from spark_backend.jobs import DEMO_STRATEGIES, run_demo
from spark_backend.report import Report
from theory import chapter3
from theory.experiments import tradeoff
from theory.time import MINUTE
from theory.traces import Trace

EVENTS = 20_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "report"
    return run_demo(EVENTS, 4, out, 2 * MINUTE), out


def test_every_file_is_written(demo):
    _, out = demo
    names = {p.name for p in out.iterdir()}
    assert names == {
        "index.html",
        "strategies.csv",
        "watermarks.png",
        "frontier.png",
        "chapter3_stages.csv",
        "stages.png",
        "lags.png",
        "chapter3_stalls.csv",
        "propagation.csv",
        "propagation.png",
    }
    for png in out.glob("*.png"):
        image = mpimg.imread(png)
        assert image.shape[0] > 300 and image.shape[1] > 600
        assert image.std() > 0.01  # not a blank canvas
    html = (out / "index.html").read_text()
    for src in re.findall(r'<img src="([^"]+)"', html):
        assert (out / src).exists()


def test_strategy_numbers_match_theory(demo):
    _, out = demo
    parts = chapter3.traces(EVENTS, seed=4)
    trace = Trace.concat([parts["mobile_in"], parts["console_in"]])
    expected = tradeoff(trace, DEMO_STRATEGIES, window_size=2 * MINUTE, seed=4)
    with (out / "strategies.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["strategy"] for r in rows] == [s.name for s in DEMO_STRATEGIES]
    for row, want in zip(rows, expected.rows, strict=True):
        assert int(row["late_count"]) == want.late_count
        assert int(row["dropped"]) == want.dropped
        assert float(row["completeness_mean"]) == pytest.approx(want.completeness_mean)
        assert float(row["window_latency_p50"]) == pytest.approx(want.window_latency_p50)


def test_index_renders_with_images_in_chromium(demo):
    _, out = demo
    chromium = shutil.which("chromium")
    assert chromium, "chromium is installed by scripts/system_deps.sh (make test)"
    probe = out.parent / "probe.html"
    probe.write_text(
        """<!doctype html><body><iframe id="f" src="report/index.html"></iframe><script>
        const f = document.getElementById('f');
        f.onload = () => {
          const imgs = [...f.contentDocument.images];
          const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
          document.title = 'loaded ' + ok + ' of ' + imgs.length;
        };</script></body>"""
    )
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--allow-file-access-from-files",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                "--dump-dom",
                probe.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    title = re.search(r"<title>(.*?)</title>", proc.stdout)
    assert title is not None, proc.stderr[-2000:]
    assert title.group(1) == "loaded 5 of 5"


def test_failed_report_leaves_nothing(tmp_path):
    report = Report("x")
    report.text("a", "b")

    def broken(path: Path) -> Path:
        raise RuntimeError("drawing failed")

    report.figure("bad", broken, "bad.png")
    with pytest.raises(RuntimeError, match="drawing failed"):
        report.write(tmp_path / "report")
    assert list(tmp_path.iterdir()) == []


def test_table_columns_must_match():
    with pytest.raises(ValueError, match="different lengths"):
        Report("x").table("t", "t", {"a": [1, 2], "b": [1]})


def test_demo_rejects_tiny_traces(tmp_path):
    with pytest.raises(ValueError, match="--events"):
        run_demo(1, 0, tmp_path / "r", MINUTE)
    assert np.isfinite(1.0)
