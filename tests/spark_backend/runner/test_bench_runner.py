"""bench/runner.py runs end to end on a small size and reports identical outputs.

It runs in this process on the test session's Spark (``get_session`` returns it), so no
second JVM starts."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_runner", ROOT / "bench" / "runner.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_bench_runner_smoke(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    bench.main(["--sizes", "2000"])
    out = capsys.readouterr().out
    lines = re.findall(r"^  (\w+) +PySparkRunner .* outputs identical$", out, re.M)
    assert lines == ["wordcount", "wordcount_file", "windowed_combine", "session_gbk"], out
    assert "hand-written RDD" in out
    assert "PySparkRunner's output = the plain-Python oracle's" in out
    peaks = [int(m.replace(",", "")) for m in re.findall(r"peak ([\d,]+) MiB driver", out)]
    assert len(peaks) == 4 and all(p > 100 for p in peaks), out  # a JVM alone is > 100 MiB
    workers = [int(m.replace(",", "")) for m in re.findall(r"of which workers ([\d,]+) MiB", out)]
    assert len(workers) == 4 and all(0 < w < p for w, p in zip(workers, peaks, strict=True)), out
    bench.report("wordcount", 2000, 0.0, False, spark, all_on_spark=True)
    out = capsys.readouterr().out
    assert re.search(r"wordcount +every stage on Spark .* outputs identical$", out, re.M), out


def test_bench_runner_cold_run(spark: Any) -> None:
    """``--cold``: a run in a new process (its own session start with the fast-start
    JVM options) gives the oracle's output; its CPU includes its JVM's."""
    bench = _bench()
    run = bench.cold_run("windowed_combine", 2000)
    assert run.digest == bench.oracle_digest(2000)
    assert run.cpu > 1.0 and run.wall > 0 and run.peak > 100 << 20  # a JVM's CPU and memory
