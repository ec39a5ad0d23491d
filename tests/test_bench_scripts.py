"""The bench scripts run end to end on small inputs and print every figure.

Speed is not asserted (benchmarks measure it, tests do not). What a script checks or
reports about correctness is: the sketch never strays beyond its stated bound E, the
Pub/Sub tracking estimator loses no data on the simulated streams, the engine's panes
are identical to Beam's, and Spark's curves to numpy's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
    out = run("simulate_throughput.py", "--events", "2000", "--repeats", "1")
    assert re.search(r"2,000 +perfect +[\d.]+ +[\d,]+ +mobile_in", out)


def test_bench_valve() -> None:
    out = run("valve.py", "--fan-in", "2", "8", "--repeats", "1", "--updates", "2000",
              "--linear-work", "20000")
    rows = re.findall(r"^ *(random|round-robin) +(\d+) +(heap|linear) ", out, re.MULTILINE)
    assert len(rows) == 8 and {r[1] for r in rows} == {"2", "8"}


def test_bench_engine_vs_beam() -> None:
    out = run("engine_vs_beam.py", "--repeats", "1", "--beam-repeats", "1")
    compared = re.findall(r"^ *(default|early-late) +(\S+) .* (\d+) (identical|DIFFERENT)$",
                          out, re.MULTILINE)
    assert len(compared) == 4  # two scripts under each strategy, against Beam
    assert all(verdict == "identical" and int(panes) > 0 for *_, panes, verdict in compared)


def test_bench_spark_analytics() -> None:
    """Its own local Spark (a second JVM beside the suite's session, 2 GB)."""
    out = run("spark_analytics.py", "--sizes", "2e4", "--repeat", "1", "--warmup", "0",
              "--driver-memory", "2g")
    row = re.search(r"^ +20,000 +[\d.]+ +[\d.]+ +[\d,]+ +[\d,]+ +[\d.]+ +(\w+)", out,
                    re.MULTILINE)
    assert row is not None and row.group(1) == "True"  # Spark's curves == numpy's


def test_bench_cli_engines() -> None:
    """The local engine only (the Spark runs are what the benchmark adds)."""
    out = run("cli_engines.py", "--sizes", "500", "--repeats", "1", "--spark-repeats", "0")
    assert re.search(r"^ +500 +[\d.]+ +[\d.]+ +local ", out, re.MULTILINE)
