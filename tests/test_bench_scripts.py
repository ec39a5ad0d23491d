"""The bench scripts run end to end on small inputs and print every figure.

Speed is not asserted (benchmarks measure it, tests do not). What a script checks or
reports about correctness is: the sketch never strays beyond its stated bound E, the
Pub/Sub tracking estimator loses no data on the simulated streams, the engine's panes
are identical to Beam's, and Spark's curves to numpy's."""

from __future__ import annotations

import argparse
import ast
import datetime
import importlib.util
import io
import json
import platform
import re
import subprocess
import sys
import tokenize
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


def test_bench_spark_analytics(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """In this process, on the test session's Spark (``get_session`` returns it)."""
    bench = _bench_module("spark_analytics")
    master = spark.sparkContext.master
    assert bench.main(["--sizes", "2e4", "--repeat", "1", "--warmup", "0", "--master", master]) == 0
    out = capsys.readouterr().out
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
    """A bench module loaded from its file, with the bench folder on ``sys.path`` while it
    loads (the scripts import each other by name, as run from that folder)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
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


# ------------------------------------------------------------- recording and rendering

def test_recorder_appends_a_valid_run(tmp_path: Path) -> None:
    """A run carries its figures, the machine, the load, the commit and a UTC date; a
    second run is appended; no temporary file is left beside the results."""
    record = _bench_module("record")
    for value in (1.5, 2.5):
        path = record.Recorder("demo", True, tmp_path).save({"median s": value, "path": "x"})
    assert path == tmp_path / "demo.json"
    runs = json.loads(path.read_text())
    assert [r["figures"]["median s"] for r in runs] == [1.5, 2.5]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.json"]
    run = runs[-1]
    assert run["script"] == "demo" and run["imported"] is None
    date = datetime.datetime.fromisoformat(run["date"])
    assert date.utcoffset() == datetime.timedelta(0)
    machine = run["machine"]
    assert isinstance(machine["cores"], int) and machine["cores"] >= 1
    assert isinstance(machine["memory_bytes"], int) and machine["memory_bytes"] > 0
    assert machine["python"] == platform.python_version() and machine["platform"]
    assert "cpu_model" in machine
    for moment in ("start", "end"):
        assert len(run["load"][moment]) == 3
    assert re.fullmatch(r"[0-9a-f]{40}", run["commit"]["sha"])
    assert isinstance(run["commit"]["dirty"], bool)
    assert record.Recorder("off", False, tmp_path).save({"x": 1}) is None
    assert not (tmp_path / "off.json").exists()


def test_script_records_and_renderer_renders(tmp_path: Path) -> None:
    """``--record`` writes to ``--results-dir`` (never to the repository's results), and
    ``render_results.py`` renders the latest run with its machine, load and commit."""
    results = tmp_path / "results"
    repo_results = {p: p.read_bytes() for p in (ROOT / "bench" / "results").glob("*")}
    for _ in range(2):
        run("valve.py", "--fan-in", "2", "--repeats", "1", "--updates", "500",
            "--linear-work", "1000", "--workload", "random", "--record",
            "--results-dir", str(results))
    assert {p: p.read_bytes() for p in (ROOT / "bench" / "results").glob("*")} == repo_results
    runs = json.loads((results / "valve.json").read_text())
    assert len(runs) == 2
    figures = runs[-1]["figures"]
    assert set(figures) == {"random fan-in 2 heap updates/s", "random fan-in 2 linear updates/s",
                            "random fan-in 2 heap/linear"}
    assert all(isinstance(v, (int, float)) and v > 0 for v in figures.values())
    out = tmp_path / "RESULTS.md"
    run("render_results.py", "--results-dir", str(results), "--output", str(out))
    text = out.read_text()
    assert "## valve" in text and "| random fan-in 2 heap/linear |" in text
    assert runs[-1]["date"] in text and runs[-1]["commit"]["sha"][:10] in text
    assert f"{runs[-1]['machine']['cores']} cores" in text
    assert "Older runs" in text and runs[0]["date"] in text


def test_repository_results_render() -> None:
    """The committed results files are valid runs, and RESULTS.md is their rendering."""
    render = _bench_module("render_results")
    results = ROOT / "bench" / "results"
    for path in results.glob("*.json"):
        for r in json.loads(path.read_text()):
            assert {"script", "date", "machine", "load", "commit", "figures", "imported"} <= set(r)
            assert r["figures"]
    assert render.render(results) == (ROOT / "bench" / "RESULTS.md").read_text()


# ------------------------------------------------------- docstrings and comments

#: what a docstring or comment of the code must not carry: dates (an ISO timestamp with a
#: time of day is data, e.g. a format's example), machine loads, work sessions, notes a
#: reader cannot see, branch names, numbered versions of the work
HISTORY = re.compile(
    r"20\d\d-\d\d-\d\d(?!T)"
    r"|\bload(?:s| averages?)?(?: of| was| at| about)?\s*[~≈]?\s*\d"
    r"|\bsession \d+"
    r"|\bissue note"
    r"|\bh-[a-z]+\d+\b"
    r"|\b(?:first|second|third|fourth|fifth|sixth|\d+(?:st|nd|rd|th)) version\b",
    re.IGNORECASE,
)
CODE_DIRS = ("bench", "theory", "beam_pipelines", "spark_backend")


def _docstrings(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    return found


def _comments(source: str) -> list[tuple[int, str]]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]


def history_in(paths: list[Path], root: Path = ROOT) -> list[str]:
    """``path:line: text`` of each docstring or comment that tells history."""
    found = []
    for path in paths:
        source = path.read_text()
        for line, text in _docstrings(ast.parse(source)) + _comments(source):
            for m in HISTORY.finditer(text):
                at = line + text[: m.start()].count("\n")
                found.append(f"{path.relative_to(root)}:{at}: {m.group(0)!r}")
    return found


def test_bench_docstrings_are_short() -> None:
    """Each bench script's docstring says what it measures and how to run it: <= 30 lines."""
    long = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        assert doc, f"{path.name} has no docstring"
        if len(doc.splitlines()) > 30:
            long.append(f"{path.name}: {len(doc.splitlines())} lines")
    assert not long, long


def test_no_history_in_docstrings_or_comments() -> None:
    paths = sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))
    assert len(paths) > 100
    found = history_in(paths)
    assert not found, "\n".join(found)


def test_history_pattern_finds_what_it_should(tmp_path: Path) -> None:
    """The check above can fail: each kind of history is found, data timestamps are not."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        '"""Measured 2026-11-27 at load 3.5 (session 11), see the issue note."""\n'
        "x = 1  # the second version, on h-hard14; load average 12\n"
        'EPOCH = 0  # "2024-01-01T00:00:00Z" is data\n'
    )
    found = history_in([bad], tmp_path)
    assert [f.split(": ", 1)[1] for f in found] == [
        "'2026-11-27'", "'load 3'", "'session 11'", "'issue note'",
        "'second version'", "'h-hard14'", "'load average 1'",
    ]

