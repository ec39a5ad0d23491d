"""Render ``bench/RESULTS.md`` from the results files in ``bench/results/``.

Per script: the latest run's figures with its machine, load, commit and date, then the
older runs, newest first, each on one line. Runs are written by the scripts' ``--record``
(see ``bench/record.py``).

    .venv/bin/python bench/render_results.py
    .venv/bin/python bench/render_results.py --results-dir DIR --output FILE
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from record import BENCH, read, results_dir


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    text = str(v)
    return text.replace("|", "\\|").replace("\n", "<br>")


def _machine(m: dict[str, Any] | None) -> str:
    if not m:
        return "unknown"
    parts = []
    if m.get("cores") is not None:
        parts.append(f"{m['cores']} cores")
    if m.get("memory_bytes"):
        parts.append(f"{m['memory_bytes'] / 2**30:.1f} GiB")
    for key, label in (("cpu_model", ""), ("python", "Python "), ("platform", ""), ("note", "")):
        if m.get(key):
            parts.append(f"{label}{m[key]}")
    return ", ".join(parts) or "unknown"


def _load(load: dict[str, Any] | None) -> str:
    if not load:
        return "unknown"
    if load.get("note"):
        return str(load["note"])

    def one(x: Any) -> str:
        return "?" if not x else "/".join(f"{v:g}" for v in x)

    return f"{one(load.get('start'))} at start, {one(load.get('end'))} at end (1/5/15 min)"


def _commit(c: dict[str, Any] | None) -> str:
    if not c or not c.get("sha"):
        return "unknown"
    return c["sha"][:10] + (" (dirty tree)" if c.get("dirty") else "")


def _run_header(run: dict[str, Any]) -> list[str]:
    lines = [
        f"- date: {run.get('date') or 'unknown'}",
        f"- machine: {_machine(run.get('machine'))}",
        f"- load: {_load(run.get('load'))}",
        f"- commit: {_commit(run.get('commit'))}",
    ]
    if run.get("argv"):
        lines.append(f"- arguments: `{' '.join(run['argv'])}`")
    if run.get("imported"):
        lines.append(f"- imported: {run['imported']}")
    return lines


def render_script(name: str, runs: list[dict[str, Any]]) -> list[str]:
    measured = [r for r in runs if not r.get("imported")]
    latest = (measured or runs)[-1]
    out = [
        f"## {name}",
        "",
        f"{len(runs)} run(s) recorded. Latest"
        + (" measured" if measured else " (imported)")
        + " run:",
        "",
    ]
    out += _run_header(latest)
    out += ["", "| figure | value |", "| --- | --- |"]
    out += [f"| {_value(k)} | {_value(v)} |" for k, v in latest.get("figures", {}).items()]
    older = [r for r in reversed(runs) if r is not latest]
    if older:
        out += ["", "Older runs, newest first:", ""]
        for r in older:
            figs = "; ".join(f"{k}: {_value(v)}" for k, v in r.get("figures", {}).items())
            tag = " (imported)" if r.get("imported") else ""
            out.append(
                f"- {r.get('date') or 'date unknown'}{tag}, load "
                f"{_load(r.get('load'))}, commit {_commit(r.get('commit'))}: {figs}"
            )
    return [*out, ""]


def render(folder: Path) -> str:
    out = [
        "# Benchmark results",
        "",
        "Rendered by `bench/render_results.py` from `bench/results/*.json`; do not edit.",
        "Record a run with a script's `--record` flag, then render again.",
        "",
    ]
    for path in sorted(folder.glob("*.json")):
        out += render_script(path.stem, read(path))
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=BENCH / "RESULTS.md")
    args = parser.parse_args()
    text = render(results_dir(args.results_dir))
    fd, tmp = tempfile.mkstemp(prefix=".RESULTS.", dir=args.output.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
