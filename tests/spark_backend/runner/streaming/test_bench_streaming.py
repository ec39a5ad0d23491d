"""bench/runner_streaming.py runs end to end on a small size, in this process on the test
session's Spark: its figures print, every pane comes within one micro-batch of its
watermark (some windows closing before the last batch), and streaming counts equal
batch counts, for the TestStream and for the executor-side source. (Its chapter-3 part is the module
run that tests/spark_backend/runner/streaming/test_chapter3.py checks; skipped here to
keep the suite's time.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[4]


def test_bench_runner_streaming_smoke(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "bench" / "runner_streaming.py"
    spec = importlib.util.spec_from_file_location("bench_runner_streaming", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(
        [
            "--elements",
            "3000",
            "--rate",
            "1000",
            "--source-elements",
            "2000",
            "--keys",
            "20",
            "--rounds",
            "1",
            "--skip",
            "chapter3",
        ]
    )
    out = capsys.readouterr().out
    assert re.search(r"streaming +[\d,]+ el/s .* \d+ batches, median", out), out
    assert re.search(r"batch +[\d,]+ el/s", out), out
    assert out.count("counts identical") == 2, out  # the TestStream's and the source's
    assert re.search(r"executor-side source: 2,000 elements", out), out
    # streaming runs the SDF's stage lean; the batch runner on Beam's bundle processor
    assert re.search(r"round 0: streaming .*; SDF stage: lean$", out, re.M), out
    assert re.search(r"round 0: batch .*; SDF stage: beam-bundle-processor$", out, re.M), out
    assert re.search(r"warm-up \(left out\) +[\d,]+ el/s", out), out
    latency = re.search(r"pane latency in micro-batches: .* max (-?\d+) \(goal <= 1\)", out)
    assert latency is not None and 0 <= int(latency.group(1)) <= 1, out
    # some windows close while the run goes on (not all in the last batch)
    during = re.search(r"\((\d+) of them in windows the watermark passed before the last", out)
    assert during is not None and int(during.group(1)) > 0, out
