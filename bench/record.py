"""Recording a bench script's figures: ``--record`` appends one run (its figures, the
machine, the load, the commit and the date) to ``bench/results/<script>.json``.

A results file is a JSON list of runs, oldest first; a run is::

    {"script": "percentile", "date": "<UTC ISO 8601>", "argv": [...],
     "machine": {"cores", "memory_bytes", "cpu_model", "python", "platform"},
     "load": {"start": [1, 5, 15 min], "end": [1, 5, 15 min]},
     "commit": {"sha": ..., "dirty": bool}, "figures": {name: number or text},
     "imported": null}

``imported`` is null for a measured run; for figures carried over from older notes it
says where from. The file is replaced atomically (a temporary file in the same folder,
then ``os.replace``). ``BENCH_RESULTS_DIR`` or ``--results-dir`` chooses the folder."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


def add_record(parser: argparse.ArgumentParser) -> None:
    """``--record`` (off by default) and ``--results-dir DIR``."""
    parser.add_argument(
        "--record",
        action="store_true",
        help="append this run's figures to bench/results/<script>.json",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="folder of the results files (default bench/results, or $BENCH_RESULTS_DIR)",
    )


def results_dir(path: Path | None = None) -> Path:
    if path is not None:
        return path
    env = os.environ.get("BENCH_RESULTS_DIR")
    return Path(env) if env else RESULTS


def machine() -> dict[str, Any]:
    """Cores, memory (bytes), CPU model (from /proc/cpuinfo), Python and platform."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cores": os.cpu_count(),
        "memory_bytes": memory,
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def load() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the system has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def commit(tree: Path = BENCH) -> dict[str, Any]:
    """The HEAD of the repository at ``tree`` and whether it has uncommitted changes."""

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(
                ["git", *args], cwd=tree, capture_output=True, text=True, timeout=30, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "sha": sha.strip() if sha else None,
        "dirty": None if status is None else bool(status.strip()),
    }


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class Recorder:
    """Collects a run's context at the start; :meth:`save` adds the figures and the end
    load, and appends the run (with ``enabled`` false it does nothing)."""

    def __init__(self, script: str, enabled: bool = True, folder: Path | None = None) -> None:
        self.script = script
        self.enabled = enabled
        self.folder = folder
        self.started = now()
        self.load_start = load()

    @classmethod
    def from_args(cls, script: str, args: argparse.Namespace) -> Recorder:
        return cls(
            Path(script).stem,
            bool(getattr(args, "record", False)),
            getattr(args, "results_dir", None),
        )

    def save(self, figures: dict[str, Any]) -> Path | None:
        if not self.enabled:
            return None
        run = {
            "script": self.script,
            "date": self.started,
            "argv": sys.argv[1:],
            "machine": machine(),
            "load": {"start": self.load_start, "end": load()},
            "commit": commit(),
            "figures": figures,
            "imported": None,
        }
        path = append(self.script, run, self.folder)
        print(f"recorded in {path}")
        return path


def read(path: Path) -> list[dict[str, Any]]:
    runs = json.loads(path.read_text())
    if not isinstance(runs, list):
        raise ValueError(f"{path}: not a list of runs")
    return runs


def append(script: str, run: dict[str, Any], folder: Path | None = None) -> Path:
    """Append ``run`` to ``<folder>/<script>.json``, replacing the file atomically."""
    folder = results_dir(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{script}.json"
    runs = read(path) if path.exists() else []
    runs.append(run)
    fd, tmp = tempfile.mkstemp(prefix=f".{script}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(runs, f, indent=1, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
