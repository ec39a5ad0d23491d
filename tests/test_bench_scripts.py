"""The bench scripts run end to end on small inputs and print every figure.

Speed is not asserted (benchmarks measure it, tests do not). What a script checks or
reports about correctness is: the sketch never strays beyond its stated bound E, the
Pub/Sub tracking estimator loses no data on the simulated streams, the engine's panes
are identical to Beam's, and Spark's curves to numpy's."""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, *args: str) -> str:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout


def test_bench_percentile() -> None:
    out = run("percentile.py", "--sizes", "3000", "--repeats", "1", "--naive", "500",
              "--general", "--vector-ps", "0.5")
    assert re.search(r"vectorised .* events/s  \(p=0\.9\)", out)
    assert re.search(r"vectorised .* events/s  \(p=0\.5\)", out)
    assert re.search(r"vectorised .* \(p=0\.9, stage level: general path\)", out)
    assert re.search(r"incremental .* updates/s", out)
    sketches = re.findall(r"sketch (\w+) .* over E (\d+) of (\d+)", out)
    assert [name for name, _, _ in sketches] == ["exact", "sketched"]
    for _, over, evals in sketches:
        assert int(evals) > 0 and int(over) == 0
    assert re.search(r"naive .* steps/s", out)


def test_bench_pubsub_estimator() -> None:
    out = run("pubsub_estimator.py", "--messages", "5000", "--memory-messages", "250000",
              "--repeats", "1", "--seeds", "1", "--duration", "60")
    assert re.search(r"scalar on_tracked +[\d,]+ msg/s", out)
    # marks at 25k, 62.5k, 125k and 250k of 100k-message chunks: a row after each chunk
    # that holds one (none of them is a chunk's end)
    marks = re.findall(r"^ +([\d,]+) +\d+ +[\d.]+ +[\d.]+$", out, re.MULTILINE)
    assert [int(m.replace(",", "")) for m in marks] == [100_000, 200_000, 300_000]
    rows = dict(re.findall(r"^  (dense|sparse|bursty|slow-base) +\d+ +\d+ +(.*)$", out,
                           re.MULTILINE))
    assert sorted(rows) == ["bursty", "dense", "slow-base", "sparse"]
    for cells in rows.values():  # the tracking estimator (first column) is never late
        assert re.match(r"\S+ / +0\.000%", cells.strip())


def test_bench_simulate_throughput() -> None:
    out = run("simulate_throughput.py", "--events", "2000", "--repeats", "1", "--keep-freed-memory")
    assert "allocator: keep_freed_memory=True" in out
    row = re.search(
        r"2,000 +[\d.]+ +([\d.]+) +([\d.]+) +[\d,]+ +[\d,]+ +[\d.]+ +[\d.]+x +\d+ +(\S+)", out
    )
    assert row, out
    assert float(row.group(2)) <= float(row.group(1)) + 0.01  # system time is within CPU time
    assert row.group(3) == (
        "mobile_sessions:vectorised,console_sessions:vectorised,"
        "average_session_length:vectorised"
    )


def test_bench_valve() -> None:
    out = run("valve.py", "--fan-in", "2", "8", "--repeats", "1", "--updates", "2000",
              "--linear-work", "20000")
    rows = re.findall(r"^ *(random|round-robin) +(\d+) +(heap|linear) ", out, re.MULTILINE)
    assert len(rows) == 8 and {r[1] for r in rows} == {"2", "8"}


def test_bench_engine_vs_beam() -> None:
    out = run("engine_vs_beam.py", "--repeats", "1", "--beam-repeats", "1", "--large", "5000:500")
    compared = re.findall(
        r"^ *(default|early-late|sessions) +(\S+) .* (\d+) (vectorised|incremental) "
        r"(identical|DIFFERENT)$",
        out,
        re.MULTILINE,
    )
    assert len(compared) == 6  # two scripts under each strategy, against Beam
    assert all(verdict == "identical" and int(panes) > 0 for *_, panes, _, verdict in compared)
    paths = {name: path for name, _, _, path, _ in compared}
    # (early-late: the count path since issue 19; it was the incremental engine before)
    assert paths == {"default": "vectorised", "early-late": "vectorised", "sessions": "vectorised"}
    assert len(re.findall(r" 5k/500 .* the incremental path's CPU el/s", out)) == 3


def test_bench_spark_analytics() -> None:
    """Its own local Spark (a second JVM beside the suite's session, 2 GB)."""
    out = run("spark_analytics.py", "--sizes", "2e4", "--repeat", "1", "--warmup", "0",
              "--driver-memory", "2g")
    row = re.search(r"^ +20,000 +[\d.]+ +[\d.]+ +[\d,]+ +[\d,]+ +[\d.]+ +(\w+)", out,
                    re.MULTILINE)
    assert row is not None and row.group(1) == "True"  # Spark's curves == numpy's


def test_bench_frontier() -> None:
    """Each pattern's three structures agree (the script fails otherwise)."""
    out = run("frontier.py", "--ops", "3000", "--items", "8", "--repeats", "1")
    rows = re.findall(r"^ *(move 8|lazy|down) +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+$", out,
                      re.MULTILINE)
    assert rows == ["move 8", "lazy", "down"], out


def _bench_module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_args_counts() -> None:
    counts = _bench_module("bench_args").counts
    assert counts("1e6, 2000,3") == [1_000_000, 2000, 3]
    for bad, why in (("x", "not a number"), ("1.5", "whole number"), ("0", "whole number")):
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            counts(f"10,{bad}")


def _tree(path: Path, value: float) -> Path:
    """A fake revision: a script printing ``value``, whether its perf_counter reads CPU
    time, and whether it runs in its own tree with that tree on PYTHONPATH (1 or 0)."""
    path.mkdir()
    (path / "b.py").write_text(
        "import os, time\n"
        f"print('value {value}')\n"
        "print('cpu', int(time.perf_counter is time.process_time))\n"
        "print('own', int(os.environ['PYTHONPATH'] == os.getcwd()))\n"
    )
    return path


def test_compare_revisions_medians_and_ratio(tmp_path: Path) -> None:
    a, b = _tree(tmp_path / "a", 2.0), _tree(tmp_path / "b", 3.0)
    args = [str(a.resolve()), str(b.resolve()), "--rounds", "3"]
    metrics = ["--metric", r"v=^value ([\d.]+)", "--metric", r"cpu=^cpu (\d)",
               "--metric", r"own=^own (\d)"]
    out = run("compare_revisions.py", *args, "--cpu-clock", *metrics, "--", "python", "b.py")
    assert re.search(r"^ +v +2 +3 +1\.50  1\.50-1\.50$", out, re.MULTILINE), out
    assert re.search(r"^ +cpu +1 +1 +1\.00", out, re.MULTILINE), out
    assert re.search(r"^ +own +1 +1 +1\.00", out, re.MULTILINE), out
    assert "round 2/3 (B A)" in out
    out = run("compare_revisions.py", *args, *metrics, "--", "python", "b.py")
    assert re.search(r"^ +cpu +0 +0 ", out, re.MULTILINE), out  # wall clock by default
    missing = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "compare_revisions.py"), *args,
         "--metric", r"w=^nothing ([\d.]+)", "--", "python", "b.py"],
        capture_output=True, text=True, timeout=60,
    )
    assert missing.returncode == 1 and "metric 'w'" in missing.stderr


def test_bench_spark_profile() -> None:
    out = run("spark_profile.py", "--events", "20000", "--beam-events", "2000", "--repeats", "1")
    assert re.search(r"20,000 +spark +[\d.]+ +[\d,]+ +[\d.]+ +[\d,]+  \d+ batches", out)
    assert re.search(r"2,000 +beam( +[\d.,]+){4}  spark/beam rate ratio [\d.]+x \(cpu", out)


def test_bench_cli_engines() -> None:
    """The local engine only (the Spark runs are what the benchmark adds)."""
    out = run("cli_engines.py", "--sizes", "500", "--repeats", "1", "--spark-repeats", "0")
    assert re.search(r"^ +500 +[\d.]+ +[\d.]+ +local ", out, re.MULTILINE)
